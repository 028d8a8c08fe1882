"""``ragidx`` on the command line: a thin edge over :class:`ragidx.engine.Engine`.

    ragidx ingest PATH [--prune] [--source NAME]
    ragidx search "query" [--top-k N] [--flash] [--json]
    ragidx ask "question" [--flash] [--json]
    ragidx delete KB_ID ...
    ragidx stats
    ragidx tune [--queries N] [--method held_out|masked_sentence|sentence|first_sentence|title|llm] [--dry-run]
    ragidx migrate-articles [--to URL] [--from FILE]
    ragidx eval retrieval --beir DIR [--limit N]
    ragidx eval compression --hotpotqa FILE [--limit N]
    ragidx eval answers (--kb PATH --questions FILE | --hotpotqa FILE) [--limit N] [--out FILE]
    ragidx runtime [status | native [--sdist FILE] [--force] | portable]
    ragidx serve [--host H] [--port N]

Settings come from ``RAGIDX_*`` environment variables or ``ragidx.toml`` (see ``ragidx.config``);
``--data-dir`` overrides where the stores live.
"""

from __future__ import annotations

import argparse
import html
import json
import logging
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError


def _settings(args: argparse.Namespace) -> Any:
    from ragidx.config import Settings

    overrides: dict[str, Any] = {}
    if getattr(args, "data_dir", None):
        overrides["data_dir"] = Path(args.data_dir)
    settings = Settings(**overrides)
    if getattr(args, "flash", False):  # switched on here; its other options come from settings
        settings = settings.model_copy(update={"flash": settings.flash.model_copy(update={"enabled": True})})
    return settings


def _engine(args: argparse.Namespace) -> Any:
    from ragidx.engine import Engine

    return Engine(_settings(args))


def cmd_ingest(args: argparse.Namespace) -> int:
    with _engine(args) as engine:
        report = engine.ingest(Path(args.path), source_name=args.source, prune=args.prune, progress=not args.quiet)
    for error in report.errors[: args.max_errors]:
        print(f"skipped {error}", file=sys.stderr)
    if len(report.errors) > args.max_errors:
        print(f"... and {len(report.errors) - args.max_errors} more skipped items", file=sys.stderr)
    print(json.dumps(report.as_dict()))
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    with _engine(args) as engine:
        if engine.article_store.count() == 0:
            print(
                f"the knowledge base in {engine.settings.data_dir} is empty: run `ragidx ingest PATH` first",
                file=sys.stderr,
            )
            return 2
        articles = engine.retrieve(args.query, top_k=args.top_k)
    if args.json:
        print(json.dumps([_article_row(a, with_content=False) for a in articles], ensure_ascii=False))
        return 0
    if not articles:
        print("no matching articles")
    for a in articles:
        row = _article_row(a, with_content=False)
        print(f"{row['article_rank'] + 1:>2}. [{row['rerank_score']:.3f}] {a.title}  ({a.kb_id})")
        if a.url:
            print(f"    {a.url}")
        if "flash_reason" in row:
            print(f"    why: {row['flash_reason']}")
    return 0


def _article_row(a: Any, *, with_content: bool) -> dict[str, Any]:
    from ragidx.article import ARTICLE_RANK, NORMALIZED_RANK, RERANK_SCORE

    row = {
        "kb_id": a.kb_id,
        "title": a.title,
        "url": a.url,
        "rerank_score": float(a.metadata.get(RERANK_SCORE, 0.0)),
        "normalized_rank": float(a.metadata.get(NORMALIZED_RANK, 0.0)),
        "article_rank": int(a.metadata.get(ARTICLE_RANK, 0)),
    }
    for key in ("flash_reason", "flash_decision"):
        if key in a.metadata:
            row[key] = a.metadata[key]
    if with_content:
        row["content"] = a.content
    return row


def cmd_ask(args: argparse.Namespace) -> int:
    with _engine(args) as engine:
        if engine.article_store.count() == 0:
            print(
                f"the knowledge base in {engine.settings.data_dir} is empty: run `ragidx ingest PATH` first",
                file=sys.stderr,
            )
            return 2
        engine.warm_up()
        if args.json:
            print(json.dumps(engine.ask(args.question).to_dict(), ensure_ascii=False))
            return 0
        answer = _stream_answer(engine, args.question, progress=not args.quiet)
    sources = answer.render().partition("\nSources:\n")[2]
    if sources:
        print(f"\nSources:\n{sources}")
    return 0


def _stream_answer(engine: Any, question: str, *, progress: bool) -> Any:
    """Print what the turn does (stderr) and the answer's text as it comes (stdout); return the ``Answer``."""
    from ragidx.agent.answer import Progress

    streamed = ""
    answer: Any = None
    shown, talk, held = _EntityUnescaper(), _TalkHold(), _EchoHold()
    for item in engine.stream_ask(question, progress=True):
        if isinstance(item, Progress):
            if item.stage == "prompt":
                talk.titles = item.articles  # a closing sentence that only names them is held back too
            if progress:
                print(f"· {item.describe()}", file=sys.stderr, flush=True)
        elif isinstance(item, str):
            streamed += item
            print(talk.feed(held.feed(shown.feed(item))), end="", flush=True)
        else:
            answer = item
    print(talk.feed(held.feed(shown.flush()) + held.flush(answer.articles)) + talk.flush(), end="")
    if answer.not_found or not streamed.strip():
        # the model's own words were a bare NOT_FOUND, or nothing was generated (no article was relevant), or
        # the reply on screen was set aside (say why, since it was already printed)
        if streamed.strip() and answer.not_found_reason:
            print(f"\n\nThis reply is not an answer from the knowledge base: {answer.not_found_reason}.")
        elif progress and answer.not_found_reason:  # the model was not asked: why, beside the progress lines
            print(f"· not answered: {answer.not_found_reason}", file=sys.stderr, flush=True)
        print(("\n" if streamed.strip() else "") + answer.text, end="")
    elif _markers(talk.printed) != _markers(answer.text):
        # a [n] was moved to the article that holds its statement (ragidx.agent.citations.check_markers):
        # the text already on screen numbers its sources differently from the list below it
        print(f"\n\nWith its citations checked against the articles shown:\n{answer.text}", end="")
    print()
    return answer


def _markers(text: str) -> list[str]:
    return re.findall(r"\[\d{1,3}\]", text)


class _Hold:
    """Text streamed so far and how much of it is on screen: a hold prints up to where it may still change."""

    def __init__(self) -> None:
        self._text = ""
        self._shown = 0

    @property
    def printed(self) -> str:
        """What is on screen so far."""
        return self._text[: self._shown]

    def _emit(self, end: int) -> str:
        end = max(end, self._shown)
        out, self._shown = self._text[self._shown : end], end
        return out


class _EchoHold(_Hold):
    r"""Holds back, while the answer streams, a line that may open a copy of the prompt's source list
    ("Sources:" and what follows), and at the end prints it only if it was not one: the CLI prints ragidx's own
    list below the answer (``strip_echoed_sources`` decides, as it does for the answer's text).

    Example:
        >>> h = _EchoHold()
        >>> h.feed("Use Table [1].\n\nSou") + h.feed("rces:\n[1] Tables") + h.flush([{"title": "Tables"}])
        'Use Table [1].'
    """

    def __init__(self) -> None:
        super().__init__()
        self._hold_at: int | None = None

    def feed(self, piece: str) -> str:
        from ragidx.agent.workflow import SOURCES_HEADING, SOURCES_WORDS

        self._text += piece
        if self._hold_at is None:
            line_start = self._text.rfind("\n") + 1
            heading = SOURCES_HEADING.search(self._text, self._shown, line_start)
            if heading is not None:
                self._hold_at = len(self._text[: heading.start()].rstrip())  # with the blank lines before it
            else:
                line = self._text[line_start:].strip().lstrip("*").casefold()
                openings = (f"{word}:" for word in SOURCES_WORDS)
                could_open = bool(line) and any(o.startswith(line) or line.startswith(o) for o in openings)
                # trailing blank lines wait for the next words: they may come before a copied list
                return self._emit(len((self._text[:line_start] if could_open else self._text).rstrip()))
        return self._emit(self._hold_at)

    def flush(self, sources: Any) -> str:
        from ragidx.agent.workflow import strip_echoed_sources

        kept = strip_echoed_sources(self._text, sources)
        return self._emit(len(kept) if len(kept) < len(self._text) else len(self._text))


class _TalkHold(_Hold):
    """Holds back, while the answer streams, closing sentences that may only say where the answer was found
    ("This information is found in article [1]."): the answer drops them and moves their markers onto the
    statement before (``strip_source_talk``), so at the end only those markers are printed in their place.

    Example:
        >>> h = _TalkHold()
        >>> h.feed("It is 4MB. This infor") + h.feed("mation is in article [1].") + h.flush()
        'It is 4MB. [1]'
        >>> h = _TalkHold()
        >>> h.feed("It is 4MB. This tel") + h.feed("ls Calc to wait.") + h.flush()
        'It is 4MB. This tells Calc to wait.'
    """

    def __init__(self) -> None:
        super().__init__()
        self.titles: tuple[str, ...] = ()  # of the articles the model was shown

    def feed(self, piece: str) -> str:
        from ragidx.agent.citations import source_talk_units

        self._text += piece
        start, _ = source_talk_units(self._text, titles=self.titles)
        return self._emit(len(self._text[:start].rstrip()) if start < len(self._text) else start)

    def flush(self) -> str:
        from ragidx.agent.citations import source_talk_units
        from ragidx.sentences import split_units

        start, markers = source_talk_units(self._text, finished=True, titles=self.titles)
        if start < len(self._text):
            shown = self._text[: self._shown]
            last = ([""] + [u.text for u in split_units(shown)])[-1]
            new = "".join(m for m in markers if m not in last)  # the printed stop stays where it is
            self._text = shown + (f" {new}" if new else "")
        return self._emit(len(self._text))


class _EntityUnescaper:
    """The model writes HTML entities (``&#34;`` for a quote): the local server's chat template shows it every
    article that way (``ragidx.providers.llama_server``), and scraped articles hold some. Show the characters.
    An entity split across two pieces of the stream is held back until it is complete.

    Example:
        >>> u = _EntityUnescaper()
        >>> u.feed("Select &#3") + u.feed("4;Table&#34; &gt") + u.feed("> Insert") + u.flush()
        'Select "Table" >> Insert'
    """

    def __init__(self) -> None:
        self._pending = ""

    def feed(self, piece: str) -> str:
        text = self._pending + piece
        amp = text.rfind("&")
        if amp >= 0 and ";" not in text[amp:] and len(text) - amp <= 10 and not text[amp + 1 :].count(" "):
            self._pending, text = text[amp:], text[:amp]
        else:
            self._pending = ""
        return html.unescape(text)

    def flush(self) -> str:
        text, self._pending = self._pending, ""
        return html.unescape(text)


def cmd_delete(args: argparse.Namespace) -> int:
    with _engine(args) as engine:
        engine.delete(args.kb_ids)
    print(json.dumps({"deleted": len(args.kb_ids)}))
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    with _engine(args) as engine:
        print(json.dumps(engine.stats()))
    return 0


def cmd_tune(args: argparse.Namespace) -> int:
    from ragidx.tuning.stored import tuning_path

    with _engine(args) as engine:
        if engine.article_store.count() == 0:
            print(
                f"the knowledge base in {engine.settings.data_dir} is empty: run `ragidx ingest PATH` first",
                file=sys.stderr,
            )
            return 2
        result = engine.tune(
            queries=args.queries, method=args.method, seed=args.seed, save=not args.dry_run, progress=not args.quiet
        )
        path = None if args.dry_run else str(tuning_path(engine.settings))
    row = {
        "picked": result.picked,
        "settings": result.settings,
        "untuned": result.untuned,
        "method": result.method,
        "queries": result.queries,
        "seconds": result.seconds,
        "load_average": result.load_average,
        "saved": path,
        "candidates": result.candidates,
    }
    print(json.dumps(row, ensure_ascii=False, separators=(",", ":")))
    return 0


def cmd_migrate_articles(args: argparse.Namespace) -> int:
    from ragidx.stores.article_migration import migrate_articles

    settings = _settings(args)
    target = args.to or (settings.article_store_url.get_secret_value() if settings.article_store_url else None)
    if not target:
        print(
            "ragidx: give --to postgresql://USER:PASSWORD@HOST:PORT/DB or set RAGIDX_ARTICLE_STORE_URL", file=sys.stderr
        )
        return 2
    report = migrate_articles(args.source or settings.article_db_path, target, tenant=settings.tenant)
    if settings.store != "weaviate":
        print(
            "note: the chunks stay in this machine's LanceDB; processes that share the article store need "
            "a shared vector store too (store = 'weaviate')",
            file=sys.stderr,
        )
    print(json.dumps(report.as_dict()))
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    if args.what == "retrieval":
        from ragidx.evaluation.retrieval import main as retrieval_main

        return int(retrieval_main(args.rest))
    if args.what == "answers":
        from ragidx.evaluation.answers import main as answers_main

        return int(answers_main(args.rest))
    from ragidx.evaluation.compression import main as compression_main

    return int(compression_main(args.rest) or 0)


def cmd_runtime(args: argparse.Namespace) -> int:
    from ragidx.providers import native_runtime as nr

    if args.action == "status":
        print(json.dumps(nr.installed_runtime().as_dict()))
        return 0
    if args.action == "portable":
        runtime = nr.installed_runtime()
        restored = nr.restore_portable(runtime.lib_dir.parent)
        print(json.dumps({"restored": restored, **nr.installed_runtime().as_dict()}))
        return 0
    from ragidx.config import LLMEndpoint
    from ragidx.providers.local_llm import assemble_gguf

    settings = _settings(args)
    local = settings.llm.model if settings.llm.is_local else LLMEndpoint().model  # the check needs a local model
    model = assemble_gguf(local, settings.model_cache_dir)
    print("building llama.cpp's CPU libraries for this CPU (about a minute on 2 cores) ...", file=sys.stderr)
    try:
        report = nr.make_native(
            model,
            threads=settings.local_llm_threads,
            sdist=Path(args.sdist) if args.sdist else None,
            force=args.force,
        )
    except nr.NativeRuntimeError as exc:
        print(
            f"ragidx: no native build: {exc}\nThe portable build stays in use (answers work, only slower).",
            file=sys.stderr,
        )
        return 1
    print(json.dumps(report.as_dict()))
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from ragidx.server import serve

    settings = _settings(args)
    overrides = {k: v for k, v in (("host", args.host), ("port", args.port)) if v is not None}
    if overrides:
        settings = settings.model_copy(update={"serve": settings.serve.model_copy(update=overrides)})
    serve(settings, log_level="info" if args.verbose else "warning")
    return 0


FLASH_HELP = "an LLM picks the best articles from the chain's candidates (RAGIDX_FLASH__* settings)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ragidx", description="Query engine over knowledge bases.")
    parser.add_argument("--data-dir", help="where the stores live (default: RAGIDX_DATA_DIR or ./.ragidx)")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("ingest", help="ingest a JSONL file, a Markdown/HTML file, or a folder of them")
    p.add_argument("path")
    p.add_argument("--source", help="source name used by --prune (default: the file or folder name)")
    p.add_argument("--prune", action="store_true", help="delete articles of this source missing from it")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--max-errors", type=int, default=20, help="skipped items to list (default 20)")
    p.set_defaults(func=cmd_ingest)

    p = sub.add_parser("search", help="top articles for a query")
    p.add_argument("query")
    p.add_argument("--top-k", type=int, default=None)
    p.add_argument("--flash", action="store_true", help=FLASH_HELP)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_search)

    p = sub.add_parser("ask", help="answer a question with citations (streamed as it is written)")
    p.add_argument("question")
    p.add_argument("--flash", action="store_true", help=FLASH_HELP)
    p.add_argument("--json", action="store_true", help="one JSON object with everything about the answer")
    p.add_argument("--quiet", action="store_true", help="no progress lines (searches, prompt sizes) on stderr")
    p.set_defaults(func=cmd_ask)

    p = sub.add_parser("delete", help="delete articles by kb_id")
    p.add_argument("kb_ids", nargs="+")
    p.set_defaults(func=cmd_delete)

    p = sub.add_parser("stats", help="article and chunk counts")
    p.set_defaults(func=cmd_stats)

    p = sub.add_parser(
        "tune",
        help="calibrate retrieval on this KB without labels (pseudo-queries from the articles); "
        "the choice is stored beside the index and used until the index changes",
    )
    p.add_argument("--queries", type=int, default=None, help="pseudo-queries (articles sampled; default 300)")
    p.add_argument(
        "--method",
        choices=["held_out", "masked_sentence", "sentence", "first_sentence", "title", "llm"],
        default=None,
        help=(
            "how pseudo-queries are made (default held_out; llm: the configured LLM writes questions, one call "
            "each; with the small local model it picked worse, see the README)"
        ),
    )
    p.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    p.add_argument("--dry-run", action="store_true", help="report the choice without storing it")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=cmd_tune)

    p = sub.add_parser(
        "migrate-articles", help="copy the SQLite article store and ingest ledger into a shared database"
    )
    p.add_argument("--to", help="target database URL (default: RAGIDX_ARTICLE_STORE_URL)")
    p.add_argument("--from", dest="source", help="SQLite file to copy (default: DATA_DIR/articles.sqlite)")
    p.set_defaults(func=cmd_migrate_articles)

    p = sub.add_parser(
        "eval", help="evaluations: retrieval (BEIR), compression (HotpotQA) or answers (questions over a KB)"
    )
    p.add_argument("what", choices=["retrieval", "compression", "answers"])
    p.add_argument("rest", nargs=argparse.REMAINDER, help="options of that evaluation (see its --help)")
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser(
        "runtime",
        help="the local model's llama.cpp build: status, native (build ggml for this CPU: about twice as fast "
        "on AVX-512 CPUs) or portable (put the installed one back)",
    )
    p.add_argument("action", nargs="?", choices=["status", "native", "portable"], default="status")
    p.add_argument("--sdist", help="llama-cpp-python source archive of the installed release (default: pip download)")
    p.add_argument("--force", action="store_true", help="install the native build even if it is not faster")
    p.set_defaults(func=cmd_runtime)

    p = sub.add_parser(
        "serve",
        help="an OpenAI-compatible HTTP server (POST /v1/chat/completions with citations, /v1/search, /metrics); "
        "API keys from serve.api_keys, without them loopback only",
    )
    p.add_argument("--host", help="address to listen on (default: serve.host, 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (default: serve.port, 8000)")
    p.add_argument("--flash", action="store_true", help=FLASH_HELP)
    p.set_defaults(func=cmd_serve)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    args = build_parser().parse_args(argv)
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    if args.verbose < 2:
        for noisy in ("httpx", "openai", "sentence_transformers"):
            logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        return int(args.func(args))
    except ValidationError as exc:
        print(f"ragidx: invalid settings: {exc}", file=sys.stderr)
        return 2
    except (FileNotFoundError, ValueError, ConnectionError, RuntimeError) as exc:
        print(f"ragidx: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("ragidx: interrupted; run the same command again to resume", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
