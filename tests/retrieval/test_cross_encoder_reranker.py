from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ragidx.retrieval.cross_encoder_reranker import CrossEncoderChunkReranker
from tests.retrieval.helpers import chunk, snapshot


class FakeCrossEncoder:
    """Scores a pair by how many query words its text contains; records its calls."""

    def __init__(self) -> None:
        self.calls: list[list[tuple[str, str]]] = []

    def predict(self, pairs: list[tuple[str, str]], batch_size: int, show_progress_bar: bool) -> list[float]:
        self.calls.append(pairs)
        return [float(sum(w in text.split() for w in query.split())) for query, text in pairs]


def test_scores_pairs_in_order_and_reranks() -> None:
    nodes = [chunk("a", 0, 0.9, text="nothing here"), chunk("b", 0, 0.1, text="red apple pie")]
    model = FakeCrossEncoder()
    out = CrossEncoderChunkReranker("/unused", model=model).postprocess_nodes(nodes, query_str="apple pie")
    assert [n.node.node_id for n in out] == ["b#0", "a#0"]
    assert [n.score for n in out] == [2.0, 0.0]
    assert model.calls[0][1] == ("apple pie", "Title b\n\nred apple pie")


def test_inputs_are_not_mutated() -> None:
    nodes = [chunk("a", 0, 0.9), chunk("b", 0, 0.1)]
    before = snapshot(nodes)
    CrossEncoderChunkReranker("/unused", model=FakeCrossEncoder()).postprocess_nodes(nodes, query_str="q")
    assert snapshot(nodes) == before


def test_constructor_does_not_load(tmp_path: Path) -> None:
    reranker = CrossEncoderChunkReranker(tmp_path / "absent")
    assert not reranker.is_loaded


def test_missing_folder_says_what_to_do(tmp_path: Path) -> None:
    reranker = CrossEncoderChunkReranker(tmp_path / "absent")
    with pytest.raises(FileNotFoundError, match=re.escape("reranker='offline'")):
        reranker.postprocess_nodes([chunk("a", 0, 0.1)], query_str="q")


def test_a_bi_encoder_folder_is_refused(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["BertModel"]}))
    reranker = CrossEncoderChunkReranker(tmp_path)
    with pytest.raises(ValueError, match="not a cross-encoder"):
        reranker.postprocess_nodes([chunk("a", 0, 0.1)], query_str="q")


@pytest.mark.slow
def test_the_bundled_minilm_is_refused_as_a_cross_encoder() -> None:
    from ragidx.providers.embeddings import resolve_model_path

    reranker = CrossEncoderChunkReranker(resolve_model_path("minilm"))
    with pytest.raises(ValueError, match="not a cross-encoder"):
        reranker.postprocess_nodes([chunk("a", 0, 0.1)], query_str="q")
