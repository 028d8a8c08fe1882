"""The docs' Python examples run, and the configuration page lists every setting.

How the snippets run (so they stay exactly what a reader copies):

- Every ```` ```python ```` block of ``docs/getting-started.md`` and of ``docs/guide/llamaindex.md`` is executed,
  in page order, in one namespace per page; nothing is edited out of them. So is the README's "From Python"
  example (its first python block; the next one lists the LlamaIndex surfaces, which the LlamaIndex page runs).
- The working directory is a fresh temporary folder, so ``Settings(data_dir=".ragidx")`` writes there. The
  relative path the pages ingest, ``ragidx/data/kb/libreoffice_en_sample.jsonl``, is created in that folder and
  holds the 26 real LibreOffice Writer articles of the ``writer_kb_file`` fixture (the bundled sample's 424
  articles would take minutes to embed on two cores); both pages ask about those articles.
- Retrieval is real: LanceDB, the article store, the bundled MiniLM embeddings, the offline reranker.
- The chat model is the test suite's scripted fake: ``ragidx.engine.LLMProvider`` is replaced by
  ``tests.dashboard.fakes.ScriptedProvider``, whose model answers every prompt by citing the first two sources
  listed in it, as the dashboard and LlamaIndex-surface tests do (the packaged Qwen model takes minutes per
  answer on CI's two cores).
- ``my_llm``, the one name the LlamaIndex page leaves to the reader ("any LlamaIndex LLM you already use"), is
  bound before its blocks run to a ``ScriptedLLM`` with the same script.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from ragidx.config import FlashSettings, LLMEndpoint, Settings
from tests.dashboard.fakes import ScriptedProvider, cite_sources
from tests.fakes.scripted_llm import ScriptedLLM

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
KB_PATH = Path("ragidx/data/kb/libreoffice_en_sample.jsonl")
_PYTHON_BLOCK = re.compile(r"^```python[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)


def python_blocks(page: Path) -> list[str]:
    """The page's ```python blocks, in order."""
    return _PYTHON_BLOCK.findall(page.read_text(encoding="utf-8"))


def run_page(page: Path, namespace: dict[str, Any]) -> dict[str, Any]:
    blocks = python_blocks(page)
    assert blocks, f"{page} has no python blocks to run"
    for number, block in enumerate(blocks, 1):
        code = compile(block, f"{page.relative_to(ROOT)} (python block {number})", "exec")
        exec(code, namespace)
    return namespace


@pytest.fixture()
def docs_workdir(tmp_path: Path, writer_kb_file: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A temporary working directory holding the pages' KB path, with the scripted chat model in place."""
    kb = tmp_path / KB_PATH
    kb.parent.mkdir(parents=True)
    shutil.copy(writer_kb_file, kb)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("ragidx.engine.LLMProvider", lambda **_: ScriptedProvider())
    monkeypatch.delenv("RAGIDX_CONFIG", raising=False)
    monkeypatch.delenv("RAGIDX_DATA_DIR", raising=False)
    return tmp_path


@pytest.mark.slow  # real MiniLM embeddings and LanceDB
def test_getting_started_snippets_run(docs_workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ns = run_page(DOCS / "getting-started.md", {})

    out = capsys.readouterr().out
    assert "26 new articles, 0 skipped" in out
    assert (docs_workdir / ".ragidx" / "lancedb").is_dir()  # the page's data_dir, under the temporary folder
    assert "Creating a Table of Contents" in out  # retrieve() found it, and the answer cites it
    answer = ns["answer"]
    assert not answer.not_found and answer.citations and "Sources:" in answer.render()
    streamed = ns["piece"]  # the last item stream_ask yielded: the Answer
    assert streamed.citations and streamed.text.strip()


@pytest.mark.slow
def test_llamaindex_snippets_run(docs_workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    my_llm = ScriptedLLM([cite_sources], cycle=True)
    ns = run_page(DOCS / "guide" / "llamaindex.md", {"my_llm": my_llm})

    out = capsys.readouterr().out
    response = ns["response"]
    cited = [n.node.metadata["citation"] for n in response.source_nodes]
    assert cited and all(f"[{number}]" in str(response) for number in cited)  # checked markers, their articles
    assert "Page Numbers" in out  # printed with its citation number by the page's loop
    assert ns["streaming"].source_nodes and f"{len(ns['streaming'].source_nodes)} sources" in out
    assert ns["chat"].chat_history == []  # reset() after two turns
    assert my_llm.calls  # the stock synthesizer asked the reader's LLM
    assert type(ns["budgeted"]).__name__ == "BudgetedLLM" and ns["own_agent"].tools


@pytest.mark.slow
def test_the_readme_example_runs(docs_workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    example = python_blocks(ROOT / "README.md")[0]
    ns: dict[str, Any] = {}
    exec(compile(example, "README.md (From Python)", "exec"), ns)

    out = capsys.readouterr().out
    assert "Creating a Table of Contents" in out and "Sources:" in out
    assert not ns["answer"].not_found


def _hook() -> Any:
    spec = importlib.util.spec_from_file_location("settings_reference", DOCS / "hooks" / "settings_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _all_field_keys() -> list[str]:
    keys = list(Settings.model_fields)
    keys += [f"llm.{name}" for name in LLMEndpoint.model_fields]
    keys += [f"flash.{name}" for name in FlashSettings.model_fields]
    return keys


@pytest.mark.parametrize("key", _all_field_keys())
def test_every_setting_is_on_the_configuration_page(key: str) -> None:
    page = _hook().settings_reference_markdown()
    assert f"| `{key}`<br>" in page


def test_every_setting_has_a_description() -> None:
    page = _hook().settings_reference_markdown()
    assert "no description" not in page


def test_the_configuration_page_keeps_its_marker() -> None:
    hook = _hook()
    source = (DOCS / "configuration.md").read_text(encoding="utf-8")
    assert hook.MARKER in source

    class Page:  # what MkDocs passes: only the file's path is read
        class file:  # noqa: N801
            src_uri = "configuration.md"

    rendered = hook.on_page_markdown(source, Page)
    assert hook.MARKER not in rendered and "| `data_dir`<br>" in rendered
    with pytest.raises(ValueError, match="marker"):
        hook.on_page_markdown("# Configuration\n", Page)
