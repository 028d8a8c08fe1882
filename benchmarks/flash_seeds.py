"""Flash rerank's seed rows measured: the protocol rule, excerpts in the answer's context, follow-ups in a conversation.

Prints ONE JSON line with two parts, each run with the configured flash model (default: the main LLM, the local
model when none is set):

- ``questions`` (``--questions``, a question set with ``gold_kb_ids``, over ``--kb``): the chain's top
  ``flash.candidates`` articles are reranked by flash; per question: the decision (a forced-mode reply without its
  tool call counts as ``protocol_violation``, a fallback to the chain's order), precision and hit of the picks
  against the gold articles (and of the chain's own top ``top_k``), seconds, tokens shown. Excerpts: the tokens of
  the picked articles' text as the answer model reads it, whole (``flash.excerpt_replaces_text = false``) and with
  flash's excerpts in place of articles over ``flash.excerpt_threshold_chars``.
- ``conversations`` (``--conversations``, two-turn conversations with the follow-up's ``gold_kb_ids``): each
  follow-up reranked twice on the same candidates (those the chain finds for the follow-up searched together with
  the question before it, as the agent's follow-up rule searches): without the conversation (flash reads the
  follow-up alone) and with it (the contextualizer rewrites the follow-up first, and flash sees the earlier
  question). Hit of the gold article in the picks, the rewritten query, seconds, tokens.

    python benchmarks/flash_seeds.py --kb ../shared/data/kb/postgresql15.jsonl \
        --questions ragidx/evaluation/data/answers_postgresql15.jsonl --limit 8 --data-dir /tmp/flash-pg
    python benchmarks/flash_seeds.py --kb ragidx/data/kb/libreoffice_en_sample.jsonl \
        --conversations ragidx/evaluation/data/conversations_libreoffice_en.jsonl --data-dir /tmp/flash-lo
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from llama_index.core.schema import NodeWithScore, TextNode  # noqa: E402

from ragidx.article import Article  # noqa: E402
from ragidx.config import Settings  # noqa: E402
from ragidx.engine import Engine  # noqa: E402
from ragidx.evaluation.answers import machine_line  # noqa: E402
from ragidx.retrieval.factory import build_flash_reranker  # noqa: E402
from ragidx.retrieval.flash.excerpts import EXCERPT_OF_CHARS  # noqa: E402


def _nodes(articles: list[Article]) -> list[NodeWithScore]:
    return [
        NodeWithScore(
            node=TextNode(id_=a.kb_id, text=a.content, metadata={"kb_id": a.kb_id, "title": a.title, "url": a.url}),
            score=a.metadata.get("rerank_score"),
        )
        for a in articles
    ]


def _load(path: Path | None) -> list[dict[str, Any]]:
    if path is None:
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _spread(rows: list[dict[str, Any]], limit: int | None) -> list[dict[str, Any]]:
    if not limit or limit >= len(rows):
        return rows
    step = len(rows) / limit
    return [rows[int(i * step)] for i in range(limit)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kb", type=Path, required=True, help="ingested first into an empty index")
    parser.add_argument("--data-dir", type=Path, required=True, help="where the index lives (reused)")
    parser.add_argument("--questions", type=Path, default=None, help="questions with gold_kb_ids")
    parser.add_argument("--conversations", type=Path, default=None, help="two-turn conversations")
    parser.add_argument("--limit", type=int, default=None, help="N questions spread evenly over the file")
    parser.add_argument("--out", type=Path, default=None, help="one JSON row per rerank")
    args = parser.parse_args(argv)

    rows: list[dict[str, Any]] = []
    result: dict[str, Any] = {"benchmark": "flash_seeds", "load_before": list(os.getloadavg())}
    with Engine(Settings(data_dir=args.data_dir)) as engine:
        if engine.article_store.count() == 0:
            engine.ingest(args.kb)
        settings = engine.settings
        endpoint = settings.flash.endpoint(settings.llm)
        llm = engine.llm_provider.get(endpoint)
        counter = engine.llm_provider.token_counter(endpoint)
        flash = build_flash_reranker(settings, llm, token_counter=counter)
        plain = build_flash_reranker(settings.model_copy(update={"flash": settings.flash.model_copy(
            update={"contextualize": False})}), llm, token_counter=counter)  # fmt: skip
        candidates_n = settings.flash.effective_candidates(settings.top_k)
        result["model"] = endpoint.model
        result["candidates"] = candidates_n

        for q in _spread(_load(args.questions), args.limit):
            gold = set(q.get("gold_kb_ids") or [])
            articles = engine.retrieve(q["question"], top_k=candidates_n)
            t0 = time.perf_counter()
            res = plain.rerank_detailed(q["question"], _nodes(articles))
            seconds = time.perf_counter() - t0
            picked = res.selected_kb_ids
            by_id = {a.kb_id: a for a in articles}
            whole = with_excerpts = excerpts = 0
            for node in res.nodes:  # what the answer model reads: an excerpt marked as one in place of the article
                article = by_id.get(str(node.node.metadata.get("kb_id", node.node.node_id)))
                if article is None:
                    continue
                whole += counter.count(article.content)
                with_excerpts += counter.count(node.node.get_content())
                excerpts += EXCERPT_OF_CHARS in node.node.metadata
            chain_top = [a.kb_id for a in articles[: settings.top_k]]
            rows.append(
                {"part": "questions", "id": q["id"], "decision": str(res.decision), "source": str(res.source),
                 "picked": picked, "hit": bool(gold & set(picked)),
                 "precision": round(len(gold & set(picked)) / len(picked), 3) if picked else 0.0,
                 "chain_hit": bool(gold & set(chain_top)),
                 "chain_precision": round(len(gold & set(chain_top)) / len(chain_top), 3) if chain_top else 0.0,
                 "seconds": round(seconds, 1), "prompt_tokens_shown": res.prompt_tokens_shown,
                 "answer_tokens_whole": whole, "answer_tokens_excerpts": with_excerpts, "excerpts_used": excerpts,
                 "excerpts_given": sum(bool(sel.excerpt) for sel in res.selections),
                 "excerpts_dropped": res.excerpts_dropped}
            )  # fmt: skip
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)

        for conv in _load(args.conversations):
            first, follow = conv["turns"][0]["question"], conv["turns"][1]["question"]
            gold = set(conv.get("gold_kb_ids") or [])
            articles = engine.retrieve(f"{first} {follow}", top_k=candidates_n)
            for mode, reranker, history in (("alone", plain, []), ("conversation", flash, [f"user: {first}"])):
                t0 = time.perf_counter()
                res = reranker.rerank_detailed(follow, _nodes(articles), conversation=history)
                seconds = time.perf_counter() - t0
                picked = res.selected_kb_ids
                rows.append(
                    {"part": "conversations", "id": conv["id"], "mode": mode, "kind": conv["turns"][1]["kind"],
                     "decision": str(res.decision), "query": res.query, "picked": picked,
                     "hit": bool(gold & set(picked)), "top1": bool(picked and picked[0] in gold),
                     "candidates_hold_gold": bool(gold & {a.kb_id for a in articles}),
                     "seconds": round(seconds, 1), "input_tokens": res.input_tokens}
                )  # fmt: skip
                print(json.dumps(rows[-1], ensure_ascii=False), file=sys.stderr, flush=True)

    qs = [r for r in rows if r["part"] == "questions"]
    if qs:
        result["questions"] = {
            "n": len(qs),
            "decisions": dict(Counter(r["decision"] for r in qs)),
            "hit": sum(r["hit"] for r in qs),
            "precision": round(statistics.mean(r["precision"] for r in qs), 3),
            "chain_hit": sum(r["chain_hit"] for r in qs),
            "chain_precision": round(statistics.mean(r["chain_precision"] for r in qs), 3),
            "p50_s": round(statistics.median(r["seconds"] for r in qs), 1),
            "prompt_tokens_shown_mean": round(statistics.mean(r["prompt_tokens_shown"] for r in qs)),
            "answer_tokens_whole": sum(r["answer_tokens_whole"] for r in qs),
            "answer_tokens_excerpts": sum(r["answer_tokens_excerpts"] for r in qs),
            "excerpts_used": sum(r["excerpts_used"] for r in qs),
            "excerpts_given": sum(r["excerpts_given"] for r in qs),
            "excerpts_dropped": sum(r["excerpts_dropped"] for r in qs),
        }
    cs = [r for r in rows if r["part"] == "conversations"]
    for mode in ("alone", "conversation"):
        of_mode = [r for r in cs if r["mode"] == mode]
        if of_mode:
            result[f"follow_ups_{mode}"] = {
                "n": len(of_mode),
                "hit": sum(r["hit"] for r in of_mode),
                "top1": sum(r["top1"] for r in of_mode),
                "candidates_hold_gold": sum(r["candidates_hold_gold"] for r in of_mode),
                "decisions": dict(Counter(r["decision"] for r in of_mode)),
                "p50_s": round(statistics.median(r["seconds"] for r in of_mode), 1),
                "input_tokens_mean": round(statistics.mean(r["input_tokens"] for r in of_mode)),
            }
    result["load_after"] = list(os.getloadavg())
    result["machine"] = machine_line()
    if args.out:
        args.out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    print(json.dumps(result, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
