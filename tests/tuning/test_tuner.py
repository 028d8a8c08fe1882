"""The tuner's replay must rank exactly as the real chain does, and its pick must follow the scores."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragidx.config import Settings
from ragidx.retrieval.factory import build_retriever
from ragidx.tuning.calibrate import MIN_GAIN, Z
from ragidx.tuning.candidates import RetrievalConfig, candidate_configs
from ragidx.tuning.tuner import CandidateScore, RetrievalTuner, pick
from tests.retrieval.helpers import KB, build_kb

QUERIES = {
    "q1": "insert a table with rows",
    "q2": "print the document pages",
    "q3": "docker volume data",
    "q4": "table of contents headings",
    "q5": "spelling corrections",
    "q6": "picture from a file",
}


@pytest.fixture(scope="module")
def kb(tmp_path_factory: pytest.TempPathFactory) -> tuple:
    return build_kb(tmp_path_factory.mktemp("tuner"))


@pytest.mark.parametrize(
    "config",
    [
        RetrievalConfig(0.5, "relative_score", 100, "offline", (1.0, 0.1, 0.1, 0.0)),  # the default
        RetrievalConfig(0.5, "relative_score", 50, "offline", (1.0, 0.25, 0.25, 0.0)),
        RetrievalConfig(0.2, "rrf", 30, "offline", (1.0, 1.0, 0.5, 0.25)),
        RetrievalConfig(0.0, "relative_score", 30, "none"),
        RetrievalConfig(1.0, "relative_score", 100, "none"),
        RetrievalConfig(0.65, "rrf", 50, "none"),
    ],
    ids=lambda c: c.label,
)
def test_replay_ranks_as_the_chain_does(kb: tuple, config: RetrievalConfig) -> None:
    chunks, articles, embed = kb
    settings = Settings(rerank_top_n=3).model_copy(update=config.settings_update())
    tuner = RetrievalTuner(chunks, embed, settings, depth=100)
    replayed = tuner.rankings([config], tuner.pools(QUERIES))[config]
    chain = build_retriever(settings, chunks, articles, embed)
    for qid, query in QUERIES.items():
        assert replayed[qid] == [a.kb_id for a in chain.retrieve(query, top_k=10)], query


def test_score_uses_the_labels_and_the_pick_follows_it(kb: tuple) -> None:
    chunks, _, embed = kb
    settings = Settings()
    configs = candidate_configs(settings)
    tuner = RetrievalTuner(chunks, embed, settings)
    qrels = {"q1": {"tables": 1}, "q2": {"print": 1}, "q3": {"volumes": 1}}
    scores = tuner.score(configs, tuner.pools(QUERIES), qrels)
    assert len(scores) == len(configs) and all(set(s.per_query) == set(qrels) for s in scores)
    best = pick(scores, configs[0])
    assert best.ndcg == max(s.ndcg for s in scores)
    assert len(KB) == 6


def test_pick_keeps_the_untuned_config_unless_the_gain_is_convincing() -> None:
    untuned = RetrievalConfig(0.5, "relative_score", 50, "none")
    better = RetrievalConfig(0.2, "relative_score", 50, "none")
    lucky = RetrievalConfig(0.8, "relative_score", 50, "none")
    base = {f"q{i}": 0.5 for i in range(10)}
    scores = [
        CandidateScore(untuned, {"ndcg@10": 0.50}, base),
        CandidateScore(better, {"ndcg@10": 0.55}, {q: 0.55 for q in base}),  # +0.05 on every query
        CandidateScore(lucky, {"ndcg@10": 0.60}, {**base, "q0": 1.5}),  # +1.0 on one query only
    ]
    assert pick(scores, untuned).config == lucky  # the plain best
    assert pick(scores, untuned, z=2.0).config == better  # the lucky one's gain is one query's noise
    assert pick(scores, untuned, min_gain=0.11).config == untuned  # no mean gain is that large
    with pytest.raises(ValueError, match="no candidates"):
        pick([], untuned)


def test_the_shipped_margin_ignores_a_small_steady_gain() -> None:
    """A pseudo gain of 0.006 on every query is significant but is the pseudo-queries' lexical bias in
    size (CHANGELOG.md, 2026-11-27); 0.03 is kept."""
    untuned = RetrievalConfig(0.5, "relative_score", 100, "none")
    small = RetrievalConfig(0.5, "relative_score", 30, "none")
    large = RetrievalConfig(0.35, "rrf", 100, "none")
    base = {f"q{i}": 0.3 + 0.01 * (i % 5) for i in range(300)}
    steady = CandidateScore(small, {"ndcg@10": 0.326}, {q: v + 0.006 for q, v in base.items()})
    current = CandidateScore(untuned, {"ndcg@10": 0.32}, base)
    assert pick([current, steady], untuned, z=Z).config == small  # the rule before the margin moved
    assert pick([current, steady], untuned, min_gain=MIN_GAIN, z=Z).config == untuned
    clear = CandidateScore(large, {"ndcg@10": 0.35}, {q: v + 0.03 for q, v in base.items()})
    assert pick([current, steady, clear], untuned, min_gain=MIN_GAIN, z=Z).config == large


def test_a_config_deeper_than_the_pool_is_refused(kb: tuple, tmp_path: Path) -> None:
    chunks, _, embed = kb
    tuner = RetrievalTuner(chunks, embed, Settings(), depth=30)
    with pytest.raises(ValueError, match="exceeds the pool depth"):
        tuner.rankings([RetrievalConfig(0.5, "relative_score", 50, "none")], {})


def test_hidden_chunks_never_reach_the_pool(kb: tuple) -> None:
    chunks, _, embed = kb
    tuner = RetrievalTuner(chunks, embed, Settings(), depth=100)
    pool = tuner.pools({"q": "insert a table"}, hide={"q": lambda kb_id, _text: kb_id == "tables"})["q"]
    ids = {n.node.metadata["kb_id"] for n in (*pool.dense, *pool.keyword)}
    assert ids and "tables" not in ids
    assert "tables" in {n.node.metadata["kb_id"] for n in tuner.pool("insert a table").keyword}
