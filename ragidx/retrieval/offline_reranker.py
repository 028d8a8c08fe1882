"""OfflineChunkReranker: the default reranker, with nothing to download and ~ms per query.

No cross-encoder weights can be had offline, so this reranker rescores the hybrid candidates with
what a cross-encoder would notice and the first-stage search does not:

- ``lexical``: BM25 of the query over *title + text* (the full-text index sees only the text), with
  IDF taken over the candidate pool, so terms shared by every candidate stop counting;
- ``title``: the IDF-weighted share of query terms found in the article title;
- ``phrase``: the share of the query's adjacent term pairs that occur adjacent in the chunk;
- ``retrieval``: the search score the chunk came with (dense + keyword fusion).

Each feature is min-max scaled over the candidates and the rerank score is their weighted sum, in
[0, sum of weights]. Words are lower-cased, stop words dropped, and stemmed with Snowball in each
chunk's language (its ``language`` metadata) and the query's (detected among the candidates' languages
by ``ragidx.language``); see ``ragidx.terms`` for how a word's script picks the stemmer, so mixed English
and Russian candidates are compared on the same stems.

How much it adds depends on the corpus, measured with ``ragidx eval retrieval`` (nDCG@10 over
hybrid search alone, 50 candidates): on HotpotQA (entity titles, keyword-heavy questions) +0.03; on
SciFact (claims vs. abstracts, where hybrid search already weighs BM25) +0.00. Weights fitted to
HotpotQA alone (lexical 1.0, title 0.5, phrase 0.25: +0.04 there) cost SciFact 0.016, so the defaults
are the lighter ones that keep most of the HotpotQA gain without hurting SciFact. Measure on your
own data before raising them.

Example:
    >>> from llama_index.core.schema import NodeWithScore, TextNode
    >>> def chunk(text, title, score):
    ...     return NodeWithScore(node=TextNode(text=text, metadata={"title": title}), score=score)
    >>> nodes = [chunk("Docker volumes keep data.", "Volumes", 0.50), chunk("Insert a table.", "Tables", 0.49),
    ...          chunk("Print a page.", "Printing", 0.10)]
    >>> out = OfflineChunkReranker().postprocess_nodes(nodes, query_str="insert table")
    >>> [n.node.metadata["title"] for n in out]
    ['Tables', 'Volumes', 'Printing']
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from llama_index.core.bridge.pydantic import Field
from llama_index.core.schema import BaseNode, MetadataMode, NodeWithScore

from ragidx.language import detect_language
from ragidx.retrieval.chunk_reranker import ChunkReranker
from ragidx.terms import terms

__all__ = [
    "FEATURES",
    "CandidateFeatures",
    "ChunkTerms",
    "OfflineChunkReranker",
    "candidate_features",
    "chunk_terms",
    "node_language",
    "pool_features",
    "pool_language",
]

FEATURES = ("retrieval", "lexical", "title", "phrase")


@dataclass(frozen=True)
class CandidateFeatures:
    """Raw (unscaled) features of each candidate, in candidate order."""

    retrieval: list[float]
    lexical: list[float]
    title: list[float]
    phrase: list[float]

    def get(self, name: str) -> list[float]:
        values: list[float] = getattr(self, name)
        return values


@dataclass(frozen=True)
class ChunkTerms:
    """What the features read of one candidate, independent of the query and the pool: its term counts
    (title + text), length, adjacent term pairs and title terms. A caller that scores the same chunk in
    many pools (the tuner) makes it once per chunk."""

    tf: Counter[str]
    length: int
    pairs: frozenset[tuple[str, str]]
    title: frozenset[str]


def chunk_terms(title: str, text: str, language: str | None = None) -> ChunkTerms:
    """The :class:`ChunkTerms` of a chunk with this article title and text, stemmed in ``language``
    (None: by script alone, see ``ragidx.terms``)."""
    d = terms(f"{title}\n{text}", language=language)
    title_terms = frozenset(terms(title, language=language))
    return ChunkTerms(Counter(d), len(d), frozenset(zip(d, d[1:], strict=False)), title_terms)


def node_language(node: BaseNode) -> str | None:
    """A chunk's language (its ``language`` metadata), None when unknown."""
    return str(node.metadata.get("language") or "") or None


def pool_language(query: str, languages: Sequence[str | None]) -> str | None:
    """The query's language, told among the languages of its candidate pool (one language: that one)."""
    present = {lang for lang in languages if lang}
    return detect_language(query, present) if len(present) > 1 else next(iter(present), None)


def candidate_features(
    query: str,
    titles: Sequence[str],
    texts: Sequence[str],
    retrieval_scores: Sequence[float | None],
    *,
    k1: float = 1.2,
    b: float = 0.75,
    languages: Sequence[str | None] | None = None,
    query_language: str | None = None,
) -> CandidateFeatures:
    """The four features of each candidate (see the module docstring). Pure; inputs are not changed.

    ``languages`` (one per candidate) and ``query_language`` pick the stemmers (``ragidx.terms``);
    None: by script alone.
    """
    langs = list(languages) if languages is not None else [None] * len(texts)
    docs = [chunk_terms(t, x, lang) for t, x, lang in zip(titles, texts, langs, strict=True)]
    return pool_features(query, docs, retrieval_scores, k1=k1, b=b, query_language=query_language)


def pool_features(
    query: str,
    docs: Sequence[ChunkTerms],
    retrieval_scores: Sequence[float | None],
    *,
    k1: float = 1.2,
    b: float = 0.75,
    query_language: str | None = None,
) -> CandidateFeatures:
    """``candidate_features`` from the candidates' :class:`ChunkTerms`; only the IDF and the average length
    depend on the pool."""
    q_seq = terms(query, language=query_language)
    q_terms = list(dict.fromkeys(q_seq))
    q_pairs = {(a, c) for a, c in zip(q_seq, q_seq[1:], strict=False) if a != c}
    n = len(docs)
    df = {t: sum(1 for d in docs if t in d.tf) for t in q_terms}
    # Pool IDF, +1 inside the log so a term in every candidate still counts a little (never < 0).
    idf = {t: math.log(1.0 + (n - df[t] + 0.5) / (df[t] + 0.5)) for t in q_terms}
    q_weight = sum(idf.values()) or 1.0
    avg_len = (sum(d.length for d in docs) / n) if n else 1.0
    lexical, title, phrase = [], [], []
    for d in docs:
        tf = d.tf
        norm = k1 * (1.0 - b + b * d.length / (avg_len or 1.0))
        lexical.append(sum(idf[t] * tf[t] * (k1 + 1.0) / (tf[t] + norm) for t in q_terms if t in tf))
        title.append(sum(idf[t] for t in q_terms if t in d.title) / q_weight)
        phrase.append(len(q_pairs & d.pairs) / len(q_pairs) if q_pairs else 0.0)
    retrieval = [0.0 if s is None or math.isnan(s) else float(s) for s in retrieval_scores]
    return CandidateFeatures(retrieval, lexical, title, phrase)


def _min_max(values: Sequence[float]) -> list[float]:
    if not values:
        return []
    lo, hi = min(values), max(values)
    if hi - lo <= 1e-12:
        return [0.0] * len(values)
    return [(v - lo) / (hi - lo) for v in values]


class OfflineChunkReranker(ChunkReranker):
    """Rescores hybrid candidates by retrieval score, pool BM25 on title + text, title and phrase match.

    Pure Python, deterministic, ~1 ms per 10 candidates; nothing to load.

    Example:
        >>> OfflineChunkReranker(top_n=30, title_weight=0.0).title_weight
        0.0
    """

    retrieval_weight: float = Field(default=1.0, ge=0.0, description="Weight of the search (fusion) score.")
    lexical_weight: float = Field(default=0.25, ge=0.0, description="Weight of pool-IDF BM25 on title + text.")
    title_weight: float = Field(default=0.25, ge=0.0, description="Weight of the query-in-title share.")
    phrase_weight: float = Field(default=0.0, ge=0.0, description="Weight of adjacent query-pair matches.")
    k1: float = Field(default=1.2, gt=0.0, description="BM25 term-frequency saturation.")
    b: float = Field(default=0.75, ge=0.0, le=1.0, description="BM25 length normalization.")

    @classmethod
    def class_name(cls) -> str:
        return "OfflineChunkReranker"

    @property
    def weights(self) -> dict[str, float]:
        return {
            "retrieval": self.retrieval_weight,
            "lexical": self.lexical_weight,
            "title": self.title_weight,
            "phrase": self.phrase_weight,
        }

    def _score(self, query: str, nodes: Sequence[NodeWithScore]) -> list[tuple[int, float]]:
        return list(enumerate(self.combine(self.features(query, nodes))))

    def features(self, query: str, nodes: Sequence[NodeWithScore]) -> CandidateFeatures:
        """The raw features of each candidate chunk (the title from its metadata, its text, its score), stemmed
        in each chunk's ``language`` metadata and the query's language detected among those."""
        languages = [node_language(n.node) for n in nodes]
        return candidate_features(
            query,
            [str(n.node.metadata.get("title") or "") for n in nodes],
            [n.node.get_content(metadata_mode=MetadataMode.NONE) for n in nodes],
            [n.score for n in nodes],
            k1=self.k1,
            b=self.b,
            languages=languages,
            query_language=pool_language(query, languages),
        )

    def combine(self, features: CandidateFeatures) -> list[float]:
        """The rerank score of each candidate: the weighted sum of its min-max scaled features.

        Split from ``_score`` so a caller that tries several weightings on one candidate pool (the tuner)
        computes the features once.
        """
        total = [0.0] * len(features.retrieval)
        for name, weight in self.weights.items():
            if weight:
                for i, value in enumerate(_min_max(features.get(name))):
                    total[i] += weight * value
        return total
