"""The exploration notebook runs top to bottom offline, and is stored without outputs."""

from __future__ import annotations

from pathlib import Path

import pytest

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "explore.ipynb"


def test_notebook_is_stored_without_outputs() -> None:
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(not c.outputs and c.execution_count is None for c in code)


@pytest.mark.slow
def test_notebook_executes_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    monkeypatch.delenv("RAGIDX_NOTEBOOK_LOCAL_MODEL", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOK.parent)}}
    )
    client.execute()  # raises CellExecutionError, with the failing cell and traceback, on any error
    answer_cell = next(c for c in nb.cells if c.source.startswith("answer = engine.ask("))
    answer_output = "".join(o.get("text", "") for o in answer_cell.outputs)
    assert "Sources:" in answer_output and "[1]" in answer_output
    llama_cell = next(c for c in nb.cells if c.source.startswith("from llama_index.core.tools import QueryEngineTool"))
    llama_output = "".join(o.get("text", "") for o in llama_cell.outputs)
    assert "sources: [(1, " in llama_output and "turns kept:" in llama_output
