"""How much of the answer survives compression: rank-proportional vs. uniform truncation vs. dropping.

Each HotpotQA question comes with 10 paragraphs, two of them supporting. The paragraphs are the
articles: ranked by ``rank_fn`` (default: BM25 over title + text with a title-link boost), then
compressed together to a share of their total tokens by each method. A span question (not yes/no)
counts when its answer occurs in the uncompressed supporting paragraphs; it is *retained* when the
answer still occurs in them after compression. One dict per (method, budget).

Run::

    python -m ragidx.evaluation.compression --hotpotqa qa.jsonl [--limit N] [--llm-gguf model.gguf]

Example:
    >>> bm25_rank("who wrote it", [Article("a", "A", "", "x wrote it"), Article("b", "B", "", "y")])[0] > 0
    True
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, ChatResponse, MessageRole

from ragidx.article import Article
from ragidx.budget.allocation import allocate_article_budgets
from ragidx.budget.extractive import ExtractiveCompressor
from ragidx.budget.llm_summary import LLMSummaryCompressor
from ragidx.providers.tokenizer import TokenCounter
from ragidx.terms import terms

__all__ = ["METHODS", "bm25_rank", "linked_bm25_rank", "evaluate_compression", "load_qa", "main"]

RankFn = Callable[[str, Sequence[Article]], Sequence[float]]
METHODS = ("extractive", "llm", "uniform_truncation", "drop_lowest")
_YES_NO = {"yes", "no"}
_WORDS = re.compile(r"\w+")
_TITLE_QUALIFIER = re.compile(r"\s*\([^)]*\)\s*$")


def load_qa(path: str | Path, limit: int | None = None) -> Iterator[dict[str, Any]]:
    """Questions of a HotpotQA-style JSONL file (``question``, ``answers``, ``contexts``)."""
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f):
            if limit is not None and n >= limit:
                return
            if line.strip():
                yield json.loads(line)


def bm25_rank(question: str, articles: Sequence[Article], *, k1: float = 1.2, b: float = 0.75) -> list[float]:
    """BM25 scores of ``articles`` (title + content) for ``question``, in input order."""
    docs = [terms(f"{a.title}\n{a.content}") for a in articles]
    n = len(docs)
    avg = (sum(len(d) for d in docs) / n) if n else 1.0
    df: Counter[str] = Counter()
    for d in docs:
        df.update(set(d))
    q = set(terms(question))
    scores: list[float] = []
    for d in docs:
        tf = Counter(d)
        norm = k1 * (1 - b + b * len(d) / (avg or 1.0))
        scores.append(
            sum(math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5)) * tf[t] * (k1 + 1) / (tf[t] + norm) for t in q if tf[t])
        )
    return scores


def linked_bm25_rank(
    question: str,
    articles: Sequence[Article],
    *,
    question_title_boost: float = 0.5,
    link_boost: float = 0.5,
    top: int = 2,
) -> list[float]:
    """BM25, plus a boost for articles the question names by title, and for articles whose title the
    ``top`` BM25 hits mention (a one-hop entity link: the bridge paragraph of a multi-hop question).
    Boosts are shares of the best BM25 score."""
    scores = bm25_rank(question, articles)
    best = max(scores, default=0.0) or 1.0
    q_text = f" {_plain(question)} "
    first = sorted(range(len(articles)), key=lambda i: -scores[i])[:top]
    linked_text = " ".join(f" {_plain(articles[i].content)} " for i in first)
    out: list[float] = []
    for i, article in enumerate(articles):
        title = _plain(_TITLE_QUALIFIER.sub("", article.title))
        score = scores[i]
        if title and f" {title} " in q_text:
            score += question_title_boost * best
        if title and i not in first and f" {title} " in linked_text:
            score += link_boost * best
        out.append(score)
    return out


def _plain(text: str) -> str:
    return " ".join(_WORDS.findall(text.lower()))


def _normalized_ranks(scores: Sequence[float]) -> list[float]:
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    ranks = [0.0] * len(scores)
    for pos, i in enumerate(order):
        ranks[i] = pos / (len(scores) - 1) if len(scores) > 1 else 0.0
    return ranks


class _Methods:
    def __init__(self, tokens: TokenCounter, llm: Any | None, min_article_tokens: int) -> None:
        self.tokens = tokens
        self.extractive = ExtractiveCompressor(tokens)
        self.llm = LLMSummaryCompressor(llm, token_counter=tokens) if llm is not None else None
        self.min_article_tokens = min_article_tokens

    def run(
        self,
        method: str,
        question: str,
        articles: Sequence[Article],
        ranks: Sequence[float],
        sizes: Sequence[int],
        budget: int,
        share: float,
    ) -> list[str]:
        if method == "uniform_truncation":
            return [self.tokens.truncate(a.content, int(s * share)) for a, s in zip(articles, sizes, strict=True)]
        if method == "drop_lowest":
            out = [""] * len(articles)
            used = 0
            for i in sorted(range(len(articles)), key=lambda i: ranks[i]):
                if used + sizes[i] > budget:
                    break
                out[i] = articles[i].content
                used += sizes[i]
            return out
        alloc = allocate_article_budgets(ranks, sizes, budget, min_tokens=self.min_article_tokens)
        jobs = [i for i, a in enumerate(alloc) if 0 < a < sizes[i]]
        out = [articles[i].content if alloc[i] >= sizes[i] else "" for i in range(len(articles))]
        job_articles = [articles[i] for i in jobs]
        job_targets = [alloc[i] for i in jobs]
        if method == "llm":
            assert self.llm is not None
            results = [self.llm.compress(a, t, question) for a, t in zip(job_articles, job_targets, strict=True)]
        else:
            results = self.extractive.compress_many(job_articles, job_targets, question)
        for i, text in zip(jobs, results, strict=True):
            # The budget hook re-counts and truncates whatever a compressor returns; so does this.
            out[i] = self.tokens.truncate(text, alloc[i])
        return out


def evaluate_compression(
    qa_path: str | Path,
    budgets: Sequence[float] = (0.5, 0.25, 0.1),
    limit: int | None = None,
    rank_fn: RankFn | None = None,
    llm: Any | None = None,
    llm_subset: int = 20,
    *,
    min_article_tokens: int = 300,
    token_counter: TokenCounter | None = None,
) -> list[dict[str, Any]]:
    """Answer retention per (method, budget) over a HotpotQA-style file.

    Args:
        qa_path: JSONL with ``question``, ``answers`` and ``contexts`` (``title``, ``text``,
            ``is_supporting``, ``doc_id``) per line.
        budgets: Shares of each question's total paragraph tokens.
        limit: Only the first ``limit`` questions.
        rank_fn: ``(question, articles) -> scores`` (higher is better); default ``linked_bm25_rank``.
        llm: When given, the ``llm`` method runs on the first ``llm_subset`` questions.
        min_article_tokens: Per-article minimum passed to the allocation (adapted down by it).

    Returns:
        One dict per (method, budget): ``retention`` (share of eligible span questions whose answer
        survives in the supporting paragraphs), ``retained``, ``eligible``, ``questions``, token means,
        ``ms_per_question`` and ``overflows`` (questions whose compressed total exceeded the budget).
    """
    tokens = token_counter or TokenCounter()
    rank = rank_fn or linked_bm25_rank
    methods = _Methods(tokens, llm, min_article_tokens)
    names = [m for m in METHODS if m != "llm" or llm is not None]
    stats: dict[tuple[str, float], dict[str, Any]] = {
        (m, b): {
            "method": m,
            "budget": b,
            "questions": 0,
            "eligible": 0,
            "retained": 0,
            "tokens_before": 0,
            "budget_tokens": 0,
            "tokens_after": 0,
            "seconds": 0.0,
            "overflows": 0,
        }
        for m in names
        for b in budgets
    }
    for q_no, item in enumerate(load_qa(qa_path, limit)):
        question = item["question"]
        contexts = item["contexts"]
        articles = [
            Article(kb_id=str(c.get("doc_id") or i), title=c.get("title", ""), url="", content=c["text"])
            for i, c in enumerate(contexts)
        ]
        supporting = [i for i, c in enumerate(contexts) if c.get("is_supporting")]
        answers = [a.lower() for a in item.get("answers", []) if a.strip()]
        is_span = bool(answers) and not set(answers) <= _YES_NO
        support_text = "\n".join(articles[i].content for i in supporting).lower()
        eligible = is_span and any(a in support_text for a in answers)
        t0 = time.perf_counter()
        ranks = _normalized_ranks(list(rank(question, articles)))
        rank_seconds = time.perf_counter() - t0
        sizes = [tokens.count(a.content) for a in articles]
        total = sum(sizes)
        for name in names:
            if name == "llm" and q_no >= llm_subset:
                continue
            for share in budgets:
                budget = int(total * share)
                t1 = time.perf_counter()
                out = methods.run(name, question, articles, ranks, sizes, budget, share)
                elapsed = time.perf_counter() - t1 + rank_seconds
                after = sum(tokens.count(t) for t in out)
                s = stats[(name, share)]
                s["questions"] += 1
                s["tokens_before"] += total
                s["budget_tokens"] += budget
                s["tokens_after"] += after
                s["seconds"] += elapsed
                s["overflows"] += int(after > budget)
                if eligible:
                    s["eligible"] += 1
                    kept = "\n".join(out[i] for i in supporting).lower()
                    s["retained"] += int(any(a in kept for a in answers))
    return [_summary(s) for s in stats.values() if s["questions"]]


def _summary(s: dict[str, Any]) -> dict[str, Any]:
    n = s["questions"]
    return {
        "method": s["method"],
        "budget": s["budget"],
        "questions": n,
        "eligible": s["eligible"],
        "retained": s["retained"],
        "retention": round(s["retained"] / s["eligible"], 4) if s["eligible"] else None,
        "tokens_before_mean": round(s["tokens_before"] / n, 1),
        "budget_tokens_mean": round(s["budget_tokens"] / n, 1),
        "tokens_after_mean": round(s["tokens_after"] / n, 1),
        "ms_per_question": round(1000 * s["seconds"] / n, 3),
        "overflows": s["overflows"],
    }


class _LlamaCppChat:
    """The smallest ``achat`` an ``LLMSummaryCompressor`` needs, over an in-process llama.cpp model.

    For this evaluation only (one thread, no server); the agent gets its LLM from ``ragidx.providers``.
    """

    def __init__(self, path: str, *, n_ctx: int = 4096, max_tokens: int = 400) -> None:
        from llama_cpp import Llama

        self.model = Llama(model_path=path, n_ctx=n_ctx, n_threads=1, verbose=False)
        self.max_tokens = max_tokens

    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        chat: list[Any] = [{"role": m.role.value, "content": m.content or ""} for m in messages]
        reply = self.model.create_chat_completion(
            messages=chat,
            max_tokens=self.max_tokens,
            temperature=0.0,
        )
        text = reply["choices"][0]["message"]["content"] or ""  # type: ignore[index]
        return ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content=text))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--hotpotqa", required=True, help="HotpotQA-style qa.jsonl")
    parser.add_argument("--limit", type=int, default=None, help="only the first N questions")
    parser.add_argument("--budgets", default="0.5,0.25,0.1", help="comma-separated shares of the paragraphs' tokens")
    parser.add_argument("--min-article-tokens", type=int, default=300)
    parser.add_argument(
        "--llm-gguf", default=None, help="a local GGUF chat model for the 'llm' method (llama-cpp-python)"
    )
    parser.add_argument("--llm-subset", type=int, default=20, help="questions the 'llm' method runs on")
    args = parser.parse_args(argv)
    budgets = tuple(float(b) for b in args.budgets.split(","))
    llm = _LlamaCppChat(args.llm_gguf) if args.llm_gguf else None
    for row in evaluate_compression(
        args.hotpotqa,
        budgets=budgets,
        limit=args.limit,
        min_article_tokens=args.min_article_tokens,
        llm=llm,
        llm_subset=args.llm_subset,
    ):
        print(json.dumps(row, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
