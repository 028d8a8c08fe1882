"""``ragidx gaps`` and ``ragidx curated``: the knowledge base's gaps, and editors' curated answers, at the terminal.

    ragidx gaps [--since 30d] [--until DATE] [--min-size N] [--json | --csv | --markdown]
    ragidx curated add (--question Q ... | --gap RANK [--since 30d]) (--answer TEXT | --answer-file FILE)
                       [--cite KB_ID ...] [--editor NAME]
    ragidx curated list [--json]
    ragidx curated confirm ID [--editor NAME]
    ragidx curated remove ID

``build_parser`` calls :func:`add_gaps_commands` once; the logic lives in :mod:`ragidx.questions.gaps` and
:mod:`ragidx.questions.curated`.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ragidx.safe_text import printable

if TYPE_CHECKING:
    from ragidx.engine import Engine

__all__ = ["add_gaps_commands"]


def _engine(args: argparse.Namespace) -> Engine:
    from ragidx.cli import _engine as cli_engine

    engine: Engine = cli_engine(args)
    return engine


def _period(args: argparse.Namespace) -> tuple[datetime | None, datetime | None]:
    from ragidx.questions.gaps import parse_since

    now = datetime.now(UTC)
    since = parse_since(args.since, now=now) if args.since else None
    until = parse_since(args.until, now=now) if getattr(args, "until", None) else None
    return since, until


def cmd_gaps(args: argparse.Namespace) -> int:
    from ragidx.questions.gaps import engine_report

    try:
        since, until = _period(args)
    except ValueError as exc:
        print(f"ragidx gaps: {exc}", file=sys.stderr)
        return 2
    if args.min_size < 1:
        print("ragidx gaps: --min-size must be at least 1", file=sys.stderr)
        return 2
    with _engine(args) as engine:
        report = engine_report(engine, since=since, until=until, min_size=args.min_size)
    if args.json:
        print(json.dumps(report.to_dict(), ensure_ascii=False))
    elif args.csv:
        sys.stdout.write(report.to_csv())
    else:
        sys.stdout.write(report.to_markdown())
    return 0


def cmd_curated(args: argparse.Namespace) -> int:
    from ragidx.questions.curated import curated_answers

    with _engine(args) as engine:
        curated = curated_answers(engine)
        try:
            return int(_CURATED[args.curated_command](args, engine, curated))
        except (KeyError, ValueError) as exc:
            message = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
            print(f"ragidx curated {args.curated_command}: {printable(str(message))}", file=sys.stderr)
            return 1


def _add(args: argparse.Namespace, engine: Engine, curated: Any) -> int:
    questions = list(args.question or [])
    gap = ""
    if args.gap is not None:
        from ragidx.questions.gaps import engine_report

        since, until = _period(args)
        report = engine_report(engine, since=since, until=until)
        found = next((c for c in report.clusters if c.rank == args.gap), None)
        if found is None:
            raise ValueError(
                f"there is no gap {args.gap} in this period: `ragidx gaps --since {args.since}` lists them"
            )
        questions += list(found.questions)
        gap = found.title
    if not questions:
        raise ValueError("name the question it answers (--question) or the gap (--gap RANK from `ragidx gaps`)")
    text = Path(args.answer_file).read_text(encoding="utf-8") if args.answer_file else (args.answer or "")
    pinned = curated.add(questions, text, list(args.cite or []), editor=args.editor or "", gap=gap)
    print(json.dumps(pinned.to_dict(), ensure_ascii=False))
    return 0


def _list(args: argparse.Namespace, engine: Engine, curated: Any) -> int:
    entries = curated.entries()
    if args.json:
        print(json.dumps([e.to_dict() for e in entries], ensure_ascii=False))
        return 0
    if not entries:
        print("no curated answers: `ragidx curated add` pins one")
    for e in entries:
        why = f" ({e.state}: {', '.join(e.stale)}; `ragidx curated confirm {e.answer.id}` serves it again)"
        print(f"{e.answer.id}  {printable(e.answer.questions[0])}{why if e.state != 'live' else ''}")
    return 0


def _confirm(args: argparse.Namespace, engine: Engine, curated: Any) -> int:
    print(json.dumps(curated.confirm(args.id, editor=args.editor or "").to_dict(), ensure_ascii=False))
    return 0


def _remove(args: argparse.Namespace, engine: Engine, curated: Any) -> int:
    if not curated.remove(args.id):
        raise KeyError(f"no curated answer {args.id!r}: `ragidx curated list` shows them")
    print(json.dumps({"removed": args.id}))
    return 0


_CURATED = {"add": _add, "list": _list, "confirm": _confirm, "remove": _remove}


def add_gaps_commands(sub: Any) -> None:
    """Add ``ragidx gaps`` and ``ragidx curated`` to the CLI's subcommands (``build_parser`` calls this once)."""
    p = sub.add_parser(
        "gaps",
        help="what the knowledge base is missing: unanswered and down-voted questions of the question log, grouped "
        "(size, trend, questions, nearest articles, a suggested title)",
    )
    p.add_argument("--since", default="30d", help="the period's start: 30d, 2w, 12h or a date (default 30d)")
    p.add_argument("--until", help="the period's end (default: now)")
    p.add_argument("--min-size", type=int, default=3, help="the fewest questions a gap holds (default 3)")
    form = p.add_mutually_exclusive_group()
    form.add_argument("--json", action="store_true", help='{"clusters": [{"size", "questions", "articles", ...}]}')
    form.add_argument("--csv", action="store_true", help="one row per gap")
    form.add_argument("--markdown", action="store_true", help="a page for editors (the default)")
    p.set_defaults(func=cmd_gaps)

    p = sub.add_parser(
        "curated",
        help="editors' curated answers: pinned to a question or a gap, served at once (marked curated) to readers "
        "who may read what they cite, stopped when a cited article changes until confirmed again",
    )
    csub = p.add_subparsers(dest="curated_command", required=True)
    add = csub.add_parser("add", help="pin an answer, with the articles it cites, to questions or to a gap")
    add.add_argument("--question", action="append", help="a question it answers (repeat for other phrasings)")
    add.add_argument("--gap", type=int, metavar="RANK", help="pin it to this gap of `ragidx gaps` (its questions)")
    add.add_argument("--since", default="30d", help="with --gap: the period of the gaps report (default 30d)")
    text = add.add_mutually_exclusive_group(required=True)
    text.add_argument("--answer", help="the answer's text ([n] marks the n-th --cite)")
    text.add_argument("--answer-file", help="a file holding the answer's text")
    add.add_argument("--cite", action="append", metavar="KB_ID", help="an article it cites (repeat; `ragidx list`)")
    add.add_argument("--editor", help="who pins it")
    listing = csub.add_parser("list", help="curated answers and whether each is served")
    listing.add_argument("--json", action="store_true")
    confirm = csub.add_parser("confirm", help="serve again an answer whose cited article changed")
    confirm.add_argument("id")
    confirm.add_argument("--editor", help="who confirms it")
    remove = csub.add_parser("remove", help="remove a curated answer")
    remove.add_argument("id")
    from ragidx.cli import _global_arguments  # --data-dir, -v after the subcommand's own name too

    for command in csub.choices.values():
        command.set_defaults(func=cmd_curated)
        _global_arguments(command, subcommand=True)
