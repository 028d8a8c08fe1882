"""``ragidx`` on the command line: a thin edge over :class:`ragidx.engine.Engine`.

    ragidx ingest PATH [--prune] [--source NAME] [--replace] [--allow-widening] [--max-errors N]
                                                  (exit 3: some items could not be read or were refused)
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
    ragidx reindex [--drop-old] [--batch N]
    ragidx mcp [--http [--host H] [--port N]]

Settings come from ``RAGIDX_*`` environment variables or ``ragidx.toml`` (see ``ragidx.config``);
``--data-dir`` overrides where the stores live. ``--data-dir`` and ``-v`` go before the command's name or after it.
Settings that cannot be used (an unknown variable or key, a value that does not fit) exit 2, naming each problem.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ragidx.config import SettingsError
from ragidx.safe_text import printable, printable_json
from ragidx.wording import counted


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


INGEST_SOME_FAILED = 3
"""``ragidx ingest``'s exit status when some items (lines, files) could not be read; the rest was ingested."""


FILTER_HELP = (
    "only articles whose metadata matches: key=value, key!=value, key>=value (also >, <, <=), 'key in a,b', "
    "'key not in a,b'; repeat for AND"
)


def _scope_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--filter", action="append", metavar="EXPR", help=FILTER_HELP)
    p.add_argument("--user", help="search as this user: articles that allow user:NAME, and public ones")
    p.add_argument(
        "--group", action="append", metavar="NAME", help="and as a member of this group (repeat for several)"
    )


def cmd_ingest(args: argparse.Namespace) -> int:
    with _engine(args) as engine:
        report = engine.ingest(
            Path(args.path),
            source_name=args.source,
            prune=args.prune,
            progress=not args.quiet,
            base_url=args.base_url,
            replace=args.replace,
            allow_widening=True if args.allow_widening else None,  # else the refuse_widening setting decides
        )
    shown = max(args.max_errors, 0)
    skipped = [printable(str(error)) for error in report.errors]  # file names and ids come from the data
    skipped += [
        f"{printable(kb_id)}: its id belongs to another source ({printable(owner)!r}), left as it is; "
        "--replace replaces it"
        for kb_id, owner in report.conflicts
    ]
    skipped += [
        f"{printable(kb_id)}: this would let more people read it than before ('allowed' dropped or a reader added), "
        "left as stored; check its 'allowed', or pass --allow-widening if that is meant"
        for kb_id in report.widening_refused
    ]
    for line in skipped[:shown]:
        print(f"skipped {line}", file=sys.stderr)
    if len(skipped) > shown:
        print(f"... and {counted(len(skipped) - shown, 'more skipped item')}", file=sys.stderr)
    if report.widened:
        ids = ", ".join(printable(k) for k in report.widened[:10]) + (" ..." if len(report.widened) > 10 else "")
        print(
            f"ragidx: {counted(len(report.widened), 'article')} now readable by more people than before: {ids}",
            file=sys.stderr,
        )
    if report.prune_skipped:
        print(f"ragidx: {printable(str(report.prune_skipped))}", file=sys.stderr)
    if report.missing:
        again = " ".join(
            shlex.quote(a) for a in ["ragidx", "ingest", args.path, *(["--source", args.source] if args.source else [])]
        )
        are = "is" if report.missing == 1 else "are"
        gone = "came from files that are gone" if Path(args.path).is_dir() else f"{are} no longer in {args.path}"
        missing = counted(report.missing, "article")
        print(f"ragidx: {missing} {printable(gone)}; `{printable(again)} --prune` deletes them", file=sys.stderr)
    print(json.dumps(report.as_dict()))
    if report.not_ingested:
        ingested = report.seen - len(report.conflicts) - len(report.widening_refused)
        if report.conflicts or report.widening_refused:
            print(
                f"ragidx: {counted(report.not_ingested, 'item')} not ingested (listed above); "
                f"{counted(ingested, 'article')} ingested. "
                "Fix them and run the same command again: unchanged articles are skipped",
                file=sys.stderr,
            )
        else:
            print(
                f"ragidx: {counted(len(report.errors), 'item')} could not be read; {counted(ingested, 'article')} "
                "ingested. Fix them and "
                "run the same command again: unchanged articles are skipped",
                file=sys.stderr,
            )
        return INGEST_SOME_FAILED
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    with _engine(args) as engine:
        if engine.article_store.count() == 0:
            print(
                f"the knowledge base in {printable(str(engine.settings.data_dir))} is empty: "
                "run `ragidx ingest PATH` first",
                file=sys.stderr,
            )
            return 2
        try:
            articles = engine.retrieve(args.query, top_k=args.top_k, **_scope(args))
        except ValueError as exc:
            print(f"ragidx search: {exc}", file=sys.stderr)
            return 2
    if args.json:
        print(printable_json([_article_row(a, with_content=False) for a in articles]))
        return 0
    if not articles:
        print("no matching articles")
    for a in articles:  # titles, ids and URLs come from the KB's files: escaped, never acted on by the terminal
        row = _article_row(a, with_content=False)
        print(f"{row['article_rank'] + 1:>2}. [{row['rerank_score']:.3f}] {printable(a.title)}  ({printable(a.kb_id)})")
        if a.url:
            print(f"    {printable(a.url)}")
        if fields := _human_fields(row.get("metadata") or {}):
            print("    " + " · ".join(f"{printable(k)}: {printable(v)}" for k, v in fields.items()))
        if "flash_reason" in row:
            print(f"    why: {printable(str(row['flash_reason']))}")
        if "injection_flags" in row:
            print(f"    flagged: instruction-like text ({printable(', '.join(row['injection_flags']))})")
    return 0


def _article_row(a: Any, *, with_content: bool) -> dict[str, Any]:
    from ragidx.article import ARTICLE_RANK, NORMALIZED_RANK, RERANK_SCORE
    from ragidx.safety.injection import article_flags

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
    shown = {
        k: v
        for k, v in a.metadata.items()
        if k not in _RANK_KEYS and not k.startswith(("flash_", "chain_", "injection_"))
    }
    if shown:
        row["metadata"] = shown  # the article's own fields (product, version, source ...): what --filter reads
    flags = article_flags(a)
    if flags:
        row["injection_flags"] = flags
    if with_content:
        row["content"] = a.content
    return row


_RANK_KEYS = frozenset(
    {"rerank_score", "normalized_rank", "article_rank", "matched_chunk_ids", "matched_spans", "allowed", "language"}
    | {"sections"}  # where each section of a document starts: for citations
)


def _human_fields(metadata: dict[str, Any]) -> dict[str, str]:
    """An article's own fields as a person reads them (what ``--filter`` names): ingestion's bookkeeping (the file's
    stamp, where each section starts) and empty values left out, long values cut at a word.

    Example:
        >>> _human_fields({"product": "writer", "folder": "", "file_stamp": "12:34:ab", "sections": [{"start": 0}]})
        {'product': 'writer'}
    """
    from ingestion.sources import FILE_STAMP
    from ragidx.article import SECTIONS

    shown = {}
    for key, value in metadata.items():
        if key in (FILE_STAMP, SECTIONS) or value in ("", None, [], {}) or isinstance(value, dict):
            continue
        text = ", ".join(map(str, value)) if isinstance(value, list) else str(value)
        shown[key] = text if len(text) <= 80 else text[:80].rsplit(" ", 1)[0] + " …"
    return shown


def _scope(args: argparse.Namespace) -> dict[str, Any]:
    """``--filter``, ``--user`` and ``--group`` as ``Engine`` keyword arguments (a bad filter: ValueError)."""
    from ragidx.stores.filters import parse_filters

    return {
        "filters": parse_filters(args.filter or []),
        "user": args.user,
        "groups": list(args.group or []),
    }


def cmd_ask(args: argparse.Namespace) -> int:
    with _engine(args) as engine:
        if engine.article_store.count() == 0:
            print(
                f"the knowledge base in {engine.settings.data_dir} is empty: run `ragidx ingest PATH` first",
                file=sys.stderr,
            )
            return 2
        try:
            scope = _scope(args)
        except ValueError as exc:
            print(f"ragidx ask: {exc}", file=sys.stderr)
            return 2
        engine.warm_up()
        from ragidx.questions.surfaces import logged_answer  # the question log, surface "cli" ([questions])

        who = {"surface": "cli", "user": scope["user"], "groups": scope["groups"]}
        if args.json:
            answer = logged_answer(engine, args.question, lambda: engine.ask(args.question, **scope), **who)
            print(printable_json(answer.to_dict()))
            return 0
        stream = lambda: _stream_answer(engine, args.question, progress=not args.quiet, scope=scope)  # noqa: E731
        answer = logged_answer(engine, args.question, stream, **who)
    sources = answer.render().partition("\nSources:\n")[2]
    if sources:
        print(f"\nSources:\n{sources}")
    return 0


def _stream_answer(engine: Any, question: str, *, progress: bool, scope: dict[str, Any] | None = None) -> Any:
    """Print what the turn does (stderr) and the answer's text as it can be shown (stdout: only text the answer
    keeps, ``Engine.stream_ask``); return the ``Answer``."""
    from ragidx.agent.answer import Progress

    answer: Any = None
    for item in engine.stream_ask(question, progress=True, **(scope or {})):
        if isinstance(item, Progress):
            if progress:
                print(f"· {item.describe()}", file=sys.stderr, flush=True)
        elif isinstance(item, str):
            print(_screen(item), end="", flush=True)
        else:
            answer = item
    if answer.not_found and progress and answer.not_found_reason:
        print(f"\n· not answered: {printable(answer.not_found_reason)}", file=sys.stderr, flush=True)
    if progress:  # the rerank service failed: why, and the order the answer's articles are in
        from ragidx.retrieval.rerank_fallback import fallback_of

        if reranked_without := fallback_of(answer.articles):
            print(f"\n· ranked without the rerank service: {printable(reranked_without)}", file=sys.stderr, flush=True)
    print()
    return answer


def _screen(text: str) -> str:
    """Answer text as the terminal shows it: lines kept, control and bidi characters (which a model may copy
    from an article) escaped."""
    return printable(text, keep_newlines=True)


def cmd_delete(args: argparse.Namespace) -> int:
    with _engine(args) as engine:
        report = engine.delete(args.kb_ids)
    print(printable_json(report.as_dict()))
    if report.not_found:
        shown = ", ".join(printable(kb_id) for kb_id in report.not_found)
        print(
            f"ragidx: {len(report.not_found)} of {len(report.requested)} ids not found (nothing to delete): {shown}. "
            "Check the ids with `ragidx search` (and the tenant setting, RAGIDX_TENANT).",
            file=sys.stderr,
        )
        return 1
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    with _engine(args) as engine:
        print(printable_json(engine.stats()))
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    """The stored articles by id (every reader's: the CLI maintains the local stores), to find ids to delete."""
    with _engine(args) as engine:
        entries = engine.article_store.listing(
            source=args.source, like=args.match, limit=args.limit, offset=args.offset
        )
    if args.json:
        print(printable_json([dict(e.__dict__, allowed=list(e.allowed)) for e in entries]))
        return 0
    if not entries:
        print("no articles" + (" match" if args.source or args.match else " yet: run `ragidx ingest PATH` first"))
    for e in entries:  # ids, titles and sources come from the KB's files: escaped
        readers = f"  readers: {printable(', '.join(e.allowed))}" if e.allowed else ""
        pending = "" if e.state == "indexed" else f"  ({printable(e.state)})"
        print(f"{printable(e.kb_id)}  {printable(e.title)}  [{printable(e.source)}]{readers}{pending}")
    if len(entries) == args.limit:
        print(f"… more: --offset {args.offset + args.limit}", file=sys.stderr)
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
    if settings.store == "lancedb":
        print(
            "note: the chunks stay in this machine's LanceDB; processes that share the article store need "
            "a shared vector store too ('ragidx migrate --to postgres', then store = 'postgres')",
            file=sys.stderr,
        )
    print(json.dumps(report.as_dict()))
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    rest = list(args.rest)
    if getattr(args, "data_dir", None) and args.what in ("retrieval", "answers") and "--data-dir" not in rest:
        rest += ["--data-dir", str(args.data_dir)]  # `ragidx --data-dir X eval ...`, as for every other command
    if args.what == "retrieval":
        from ragidx.evaluation.retrieval import main as retrieval_main

        return int(retrieval_main(rest))
    if args.what == "answers":
        from ragidx.evaluation.answers import main as answers_main

        return int(answers_main(rest))
    from ragidx.evaluation.compression import main as compression_main

    return int(compression_main(rest) or 0)


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
    # Ctrl-C is the way a server ends (uvicorn raises it again once it has stopped): no "interrupted" message.
    # Its start and stop lines and one JSON line per request: ragidx.server.runner (serve.log_format)
    with contextlib.suppress(KeyboardInterrupt):
        serve(settings, log_level="info" if args.verbose else "warning")
    return 0


FLASH_HELP = "an LLM picks the best articles from the chain's candidates (RAGIDX_FLASH__* settings)"


def _global_arguments(p: argparse.ArgumentParser, *, subcommand: bool) -> None:
    """The options every command takes, before its name or after it (``ragidx --data-dir X stats`` and
    ``ragidx stats --data-dir X``). A subcommand's copy has no default (``SUPPRESS``), so leaving it out there
    keeps what was given before the name instead of overwriting it."""
    p.add_argument(
        "--data-dir",
        default=argparse.SUPPRESS if subcommand else None,
        help="where the stores live (default: RAGIDX_DATA_DIR or ./.ragidx)",
    )
    p.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=argparse.SUPPRESS if subcommand else 0,
        help="more logging (-vv for debug)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ragidx", description="Query engine over knowledge bases.")
    _global_arguments(parser, subcommand=False)
    sub = parser.add_subparsers(dest="command", required=True)

    from ingestion.formats import document_formats, document_suffixes  # read now: a registered reader is listed
    from ingestion.sync.cli import add_sync_commands
    from ragidx.integrations.mcp_command import add_mcp_command
    from ragidx.questions.commands import add_gaps_commands
    from ragidx.reindex import add_reindex_command
    from ragidx.stores.chunk_migration import add_migrate_command

    p = sub.add_parser(
        "ingest",
        help=f"ingest a JSONL file, a document ({document_formats()}) or a folder of them; "
        f"exit status {INGEST_SOME_FAILED} when some items could not be read (the rest is ingested)",
    )
    p.add_argument(
        "path", help=f"a .jsonl file, a document ({', '.join(sorted(document_suffixes()))}) or a folder of them"
    )
    p.add_argument("--source", help="source name used by --prune (default: the file or folder name)")
    p.add_argument("--prune", action="store_true", help="delete articles of this source missing from it")
    p.add_argument(
        "--base-url",
        help="where the documents are published (e.g. https://docs.example.org/): citations link to BASE_URL + "
        "the file's path in the folder (#page=N, #anchor added) instead of to the local file",
    )
    p.add_argument(
        "--replace",
        action="store_true",
        help="replace articles whose id belongs to another source (else each is reported and left as it is)",
    )
    p.add_argument(
        "--allow-widening",
        action="store_true",
        help="apply changes that let more people read an article than before (restricted to public, a reader "
        "added); by default such an article is reported and left as stored (setting refuse_widening)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--max-errors", type=int, default=20, help="skipped items to list on stderr (default 20)")
    p.set_defaults(func=cmd_ingest)

    p = sub.add_parser("search", help="top articles for a query")
    p.add_argument("query")
    p.add_argument("--top-k", type=int, default=None)
    p.add_argument("--flash", action="store_true", help=FLASH_HELP)
    p.add_argument("--json", action="store_true")
    _scope_arguments(p)
    p.set_defaults(func=cmd_search)

    p = sub.add_parser("ask", help="answer a question with citations (streamed as it is written)")
    p.add_argument("question")
    p.add_argument("--flash", action="store_true", help=FLASH_HELP)
    p.add_argument("--json", action="store_true", help="one JSON object with everything about the answer")
    p.add_argument("--quiet", action="store_true", help="no progress lines (searches, prompt sizes) on stderr")
    _scope_arguments(p)
    p.set_defaults(func=cmd_ask)

    p = sub.add_parser("delete", help="delete articles by kb_id (`ragidx list` shows them)")
    p.add_argument("kb_ids", nargs="+")
    p.set_defaults(func=cmd_delete)

    p = sub.add_parser("stats", help="article and chunk counts")
    p.set_defaults(func=cmd_stats)

    p = sub.add_parser("list", help="stored articles by id, title and source (the ids `delete` takes)")
    p.add_argument("--source", help="only this source's articles (as `ingest` reports it)")
    p.add_argument("--match", metavar="TEXT", help="only ids or titles holding TEXT (case-insensitive)")
    p.add_argument("--limit", type=int, default=100, help="at most this many (default 100)")
    p.add_argument("--offset", type=int, default=0, help="skip this many first (for the next page)")
    p.add_argument("--json", action="store_true", help="one JSON list")
    p.set_defaults(func=cmd_list)

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
            "each; with the small local model it picked worse, see the docs: 'Evaluation and tuning')"
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
        "API keys (each with its reader) from serve.keys, without them loopback only",
    )
    p.add_argument("--host", help="address to listen on (default: serve.host, 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (default: serve.port, 8000)")
    p.add_argument("--flash", action="store_true", help=FLASH_HELP)
    p.set_defaults(func=cmd_serve)
    add_reindex_command(sub)
    add_migrate_command(sub)
    add_mcp_command(sub)
    add_sync_commands(sub)
    add_gaps_commands(sub)
    for command in sub.choices.values():
        _global_arguments(command, subcommand=True)
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
    except SettingsError as exc:  # one line per problem, naming where each value came from, never a value
        print(f"ragidx: {printable(str(exc), keep_newlines=True)}", file=sys.stderr)
        return 2
    except ValidationError as exc:  # settings changed after they were read: the fields and what is wrong only
        problems = [f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors(include_input=False)]
        print(f"ragidx: {printable(str(SettingsError(problems)), keep_newlines=True)}", file=sys.stderr)
        return 2
    except (FileNotFoundError, ValueError, ConnectionError, RuntimeError) as exc:
        print(f"ragidx: {printable(str(exc), keep_newlines=True)}", file=sys.stderr)  # may quote a file's text
        return 1
    except KeyboardInterrupt:
        print("ragidx: interrupted; run the same command again to resume", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
