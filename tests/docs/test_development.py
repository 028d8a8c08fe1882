"""The recipes of docs/development.md ("Extending ragidx") run as a reader copies them, and do what they say: the
.odt reader reads a real .odt file through ingestion, the guard cleans an answer, the reranker is built by name.

Each block runs in a fresh namespace, in a temporary working folder (``Settings()`` writes ``.ragidx`` there
only when something is ingested, which the guard recipe does not); the registrations they make are undone after.
"""

from __future__ import annotations

import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ingestion.formats import unregister_reader
from ingestion.sources import SourceError, read_document
from ragidx.agent.guards import GuardInput
from ragidx.article import Article
from ragidx.retrieval.factory import build_chunk_reranker
from ragidx.retrieval.rerankers import unregister_reranker
from tests.docs.test_snippets import ROOT, python_blocks

PAGE = ROOT / "docs" / "development.md"
ODT_CONTENT = (
    '<?xml version="1.0" encoding="UTF-8"?><office:document-content '
    'xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" '
    'xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0"><office:body><office:text>'
    "<text:p>Before any heading.</text:p>"
    '<text:h text:outline-level="1">Printing labels</text:h><text:p>Choose File - New - Labels.</text:p>'
    "</office:text></office:body></office:document-content>"
)


def _run(number: int) -> dict[str, Any]:
    blocks = python_blocks(PAGE)
    assert len(blocks) == 3, "the page's recipes are the reader, the guard and the reranker"
    namespace: dict[str, Any] = {}
    exec(compile(blocks[number], f"docs/development.md (python block {number + 1})", "exec"), namespace)
    return namespace


@pytest.fixture()
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    unregister_reader(".odt")
    unregister_reranker("title-boost")


def test_the_reader_recipe_reads_an_odt_file(workdir: Path) -> None:
    _run(0)
    path = workdir / "labels.odt"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(zipfile.ZipInfo("mimetype"), "application/vnd.oasis.opendocument.text")
        archive.writestr("content.xml", ODT_CONTENT)
    article = read_document(path, workdir)
    assert not isinstance(article, SourceError)
    assert article.title == "Printing labels" and article.metadata["format"] == "odt"
    assert article.content == "Before any heading.\n\n# Printing labels\n\nChoose File - New - Labels."
    (workdir / "broken.odt").write_bytes(b"PK\x03\x04 not really")
    broken = read_document(workdir / "broken.odt", workdir)
    assert isinstance(broken, SourceError) and "not a readable OpenDocument file" in broken.reason


def test_the_guard_recipe_cleans_the_engines_answers(workdir: Path) -> None:
    ns = _run(1)
    engine = ns["engine"]
    assert engine.guards.names[-1] == "no_internal_hosts"
    source = Article.from_dict(
        {
            "kb_id": "a",
            "title": "Builds",
            "content": "Builds are listed on build-01.corp.example.com, the build server.",
        }
    )
    verdict = engine.guards.review("Where are builds listed?", "On build-01.corp.example.com [1].", [source])
    assert not verdict.not_found, verdict
    assert verdict.text == "On [internal host] [1]." and verdict.fired[-1].name == "no_internal_hosts"
    assert ns["NoInternalHosts"]().check(GuardInput("q", "Nothing here.", [])).reason is None


def test_the_reranker_recipe_is_built_by_name(workdir: Path) -> None:
    ns = _run(2)
    reranker = build_chunk_reranker(ns["settings"])
    assert type(reranker).__name__ == "TitleBoost" and reranker.top_n == ns["settings"].rerank_top_n  # type: ignore[union-attr]
