"""The peer: LlamaIndex's stock query engine on the same model server, embeddings, KB and questions.

``VectorStoreIndex.from_documents(documents).as_query_engine()`` with LlamaIndex's defaults (1,024-token
chunks with 200 overlap, ``similarity_top_k=2``, "compact" synthesis with its stock QA prompt), streaming
so the first answer token can be timed. The model is the one ``ragidx eval answers`` uses (the local
server ragidx starts, or ``--api-base``) with the same settings; the embedding model is ragidx's MiniLM.
Each article is one ``Document`` (id = kb_id, the title as metadata). Scored by the same code as
``ragidx eval answers`` (``ragidx.evaluation.answers``), so both print the same summary line. The peer
writes no inline citations: its "citations" are the articles of its source chunks.

    python benchmarks/peer_llamaindex.py --kb ../shared/data/kb/postgresql15.jsonl \\
        --questions ragidx/evaluation/data/answers_postgresql15.jsonl [--similarity-top-k 2] [--out peer.jsonl]
    python benchmarks/peer_llamaindex.py --hotpotqa ../shared/data/hotpotqa_dev500/qa.jsonl --limit 50

The index is persisted under ``DATA_DIR/eval-answers/peer-<key>`` (key: the KB's bytes and the embedding
model), so a rerun does not re-embed. Prints ONE JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from llama_index.core import Document, StorageContext, VectorStoreIndex, load_index_from_storage  # noqa: E402
from llama_index.core.instrumentation import get_dispatcher  # noqa: E402
from llama_index.core.instrumentation.event_handlers import BaseEventHandler  # noqa: E402
from llama_index.core.instrumentation.events import BaseEvent  # noqa: E402
from llama_index.core.instrumentation.events.llm import LLMChatStartEvent  # noqa: E402

from ingestion.sources import read_source  # noqa: E402
from ragidx.article import Article  # noqa: E402
from ragidx.evaluation.answers import (  # noqa: E402
    Outcome,
    Question,
    add_data_arguments,
    add_model_arguments,
    kb_fingerprint,
    load_eval_data,
    run_questions,
    says_not_found,
    settings_from_args,
    summarize,
)
from ragidx.providers.embedding_factory import build_embed_model  # noqa: E402
from ragidx.providers.llms import LLMProvider  # noqa: E402


class PromptTokens(BaseEventHandler):
    """Counts the tokens of every chat prompt LlamaIndex sends (message texts; the template adds a few)."""

    counter: Any = None
    tokens: int = 0
    calls: int = 0

    @classmethod
    def class_name(cls) -> str:
        return "PromptTokens"

    def handle(self, event: BaseEvent, **kwargs: Any) -> None:
        if isinstance(event, LLMChatStartEvent):
            self.calls += 1
            self.tokens += sum(self.counter.count(str(m.content or "")) + 4 for m in event.messages)


def kb_articles(sources: Sequence[Path | list[Article]]) -> list[Article]:
    """Every well-formed article of the sources (malformed items are skipped, as ragidx's ingest does)."""
    articles: dict[str, Article] = {}
    for source in sources:
        items = read_source(source) if isinstance(source, Path) else source
        for item in items:
            if isinstance(item, Article):
                articles[item.kb_id] = item
    return list(articles.values())


def build_index(articles: list[Article], embed_model: Any, folder: Path) -> VectorStoreIndex:
    """The stock index, built once and persisted in ``folder``."""
    if (folder / "docstore.json").is_file():
        storage = StorageContext.from_defaults(persist_dir=str(folder))
        return load_index_from_storage(storage, embed_model=embed_model)  # type: ignore[return-value]
    documents = [Document(text=a.content, id_=a.kb_id, metadata={"title": a.title}) for a in articles]
    index = VectorStoreIndex.from_documents(documents, embed_model=embed_model, show_progress=sys.stderr.isatty())
    index.storage_context.persist(persist_dir=str(folder))
    return index


def peer_asker(query_engine: Any, prompt_tokens: PromptTokens, window: int) -> Any:
    def ask(question: Question) -> Outcome:
        tokens_before, calls_before = prompt_tokens.tokens, prompt_tokens.calls
        started = time.perf_counter()
        first: float | None = None
        parts: list[str] = []
        try:
            response = query_engine.query(question.question)
            for delta in response.response_gen:
                if first is None and delta.strip():
                    first = time.perf_counter() - started
                parts.append(delta)
        except Exception as exc:  # counted on the row, as ragidx's failures are
            text = str(exc).lower()
            overflow = "context" in text and ("length" in text or "window" in text or "exceed" in text)
            return Outcome(
                seconds=time.perf_counter() - started, overflow=overflow, error=f"{type(exc).__name__}: {exc}"
            )
        seconds = time.perf_counter() - started
        text = "".join(parts).strip()
        sources = list(response.source_nodes)
        cited = list(dict.fromkeys(str(n.node.ref_doc_id) for n in sources))
        prompt = prompt_tokens.tokens - tokens_before
        return Outcome(
            text=text,
            not_found=says_not_found(text),
            cited=cited,
            shown=[
                {
                    "kb_id": str(n.node.ref_doc_id),
                    "title": n.node.metadata.get("title"),
                    "score": n.score,
                    "content": n.node.get_content(),
                }
                for n in sources
            ],
            seconds=round(seconds, 3),
            ttft_s=round(first, 3) if first is not None else None,
            prompt_tokens=prompt,
            llm_calls=prompt_tokens.calls - calls_before,
            overflow=prompt > window,
        )

    return ask


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_data_arguments(parser)
    add_model_arguments(parser)
    parser.add_argument("--similarity-top-k", type=int, default=2, help="chunks the stock engine retrieves (2)")
    args = parser.parse_args(argv)
    progress = not args.no_progress and sys.stderr.isatty()
    try:
        data = load_eval_data(args)
        settings = settings_from_args(args)
    except (ValueError, FileNotFoundError) as exc:
        print(f"peer_llamaindex: {exc}", file=sys.stderr)
        return 2
    embed_model = build_embed_model(settings)
    key = kb_fingerprint(data.key_paths, embed_model=embed_model.model_name, quantize=settings.embed_quantize, peer=1)
    folder = (args.data_dir or settings.data_dir) / "eval-answers" / f"peer-{data.kind}-{key}"
    articles = kb_articles(data.sources)
    texts = {a.kb_id: f"{a.title}\n{a.content}" for a in articles}
    t0 = time.perf_counter()
    index = build_index(articles, embed_model, folder)
    index_s = time.perf_counter() - t0
    with LLMProvider(threads=settings.local_llm_threads, model_cache_dir=settings.model_cache_dir) as provider:
        t0 = time.perf_counter()
        llm = provider.get(settings.llm)
        startup = time.perf_counter() - t0
        counter = PromptTokens(counter=provider.token_counter(settings.llm))
        get_dispatcher().add_event_handler(counter)
        query_engine = index.as_query_engine(llm=llm, similarity_top_k=args.similarity_top_k, streaming=True)
        rows = run_questions(
            data.questions,
            peer_asker(query_engine, counter, settings.llm.context_window - settings.llm.max_output_tokens),
            lambda ids: {k: texts[k] for k in ids if k in texts},
            out=args.out,
            progress=progress,
            label="peer",
        )
    summary = summarize(
        rows,
        system="llamaindex-peer",
        similarity_top_k=args.similarity_top_k,
        model=settings.llm.model,
        context_window=settings.llm.context_window,
        server_start_s=round(startup, 2),
        index_s=round(index_s, 1),
        dataset=data.label,
        kb_articles=len(articles),
    )
    print(json.dumps(summary, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
