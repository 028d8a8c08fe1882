"""``ragidx sync`` and ``ragidx sources`` on the command line.

    ragidx sync [NAME ...] [--json] [--quiet] [--allow-widening] [--max-items N]
                           (exit 1: a source failed or was already being synced; 3: some items failed)
    ragidx sources [--json]

``ragidx sync`` runs the named sources (none named: all of them) one after the other through
:class:`ingestion.sync.runner.SyncRunner`, with a progress bar per source on stderr, and prints per source a line of
counts and the items that were not unchanged (``--json``: one JSON object per source, each item included).
``ragidx sources`` lists the configured sources with their last sync.

Example:
    >>> import argparse
    >>> sub = argparse.ArgumentParser().add_subparsers()
    >>> add_sync_commands(sub)
    >>> sorted(sub.choices)
    ['sources', 'sync']
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TYPE_CHECKING, Any

from ingestion.sync.config import schedule_interval_s
from ragidx.safe_text import printable
from ragidx.wording import counted

if TYPE_CHECKING:
    from ingestion.sync.config import SourceConfig
    from ingestion.sync.runner import ItemOutcome, SyncReport
    from ingestion.sync.state import LastSync

__all__ = ["SOME_ITEMS_FAILED", "SOURCE_FAILED", "add_sync_commands", "describe_last_sync", "location"]

SOURCE_FAILED = 1
"""``ragidx sync``'s exit status when a source could not be synced (unavailable, stopped, already running)."""
SOME_ITEMS_FAILED = 3
"""``ragidx sync``'s exit status when every source was synced but some items failed (kept, retried next time)."""

_COUNTED = ("new", "changed", "unchanged", "moved", "deleted", "failed", "skipped")


def add_sync_commands(sub: Any) -> None:
    """Add ``sync`` and ``sources`` to the ``ragidx`` command's subparsers."""
    p = sub.add_parser(
        "sync",
        help="sync the [[sources]] of ragidx.toml (websites, folders, LlamaIndex readers): new and changed items "
        "ingested, gone ones deleted, a failed one kept; exit status 1 when a source failed, "
        f"{SOME_ITEMS_FAILED} when some items did",
    )
    p.add_argument("names", nargs="*", metavar="NAME", help="the sources to sync (default: all)")
    p.add_argument("--json", action="store_true", help="one JSON object per source, with every item")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument(
        "--allow-widening",
        action="store_true",
        help="apply changes that let more people read an article than before (by default such an article is "
        "reported and left as stored; setting refuse_widening)",
    )
    p.add_argument("--max-items", type=int, default=20, help="items listed per source (default 20; --json: all)")
    p.set_defaults(func=cmd_sync)

    p = sub.add_parser("sources", help="the configured sources and their last sync")
    p.add_argument("--json", action="store_true", help="one JSON list")
    p.set_defaults(func=cmd_sources)


def _engine(args: argparse.Namespace) -> Any:
    from ragidx.cli import _settings
    from ragidx.engine import Engine

    return Engine(_settings(args))


def cmd_sync(args: argparse.Namespace) -> int:
    from ingestion.sync.runner import SyncRunner

    with _engine(args) as engine:
        if not engine.settings.sources:
            print("ragidx: no sources: add [[sources]] tables to ragidx.toml (see the guide: Sources)", file=sys.stderr)
            return SOURCE_FAILED
        runner = SyncRunner(engine, allow_widening=True if args.allow_widening else None)
        configs = [runner.source(n) for n in args.names] if args.names else list(engine.settings.sources)
        reports = []
        for config in configs:
            bar = _bar(config.name, enabled=not args.quiet and not args.json)
            try:
                report = runner.sync(config, on_item=bar.item if bar is not None else None)
            finally:
                if bar is not None:
                    bar.close()
            reports.append(report)
            if args.json:
                print(json.dumps(report.as_dict(items=True), ensure_ascii=False), flush=True)
            else:
                _print_report(report, max(args.max_items, 0))
    if any(not r.ok for r in reports):
        return SOURCE_FAILED
    return SOME_ITEMS_FAILED if any(r.count("failed") for r in reports) else 0


class _Bar:
    """A progress bar of one source's items (no total: a website's size is known when it has been read)."""

    def __init__(self, name: str) -> None:
        from tqdm.auto import tqdm

        self._counts = dict.fromkeys(_COUNTED, 0)
        self._bar = tqdm(desc=f"sync {name}", unit="item", file=sys.stderr, leave=False)

    def item(self, outcome: ItemOutcome) -> None:
        self._counts[outcome.what] = self._counts.get(outcome.what, 0) + 1
        self._bar.update(1)
        self._bar.set_postfix({k: v for k, v in self._counts.items() if v}, refresh=False)

    def close(self) -> None:
        self._bar.close()


def _bar(name: str, *, enabled: bool) -> _Bar | None:
    return _Bar(name) if enabled and sys.stderr.isatty() else None


def _summary(data: dict[str, Any]) -> str:
    parts = [f"{data[k]} {k}" for k in _COUNTED if data.get(k) or k in ("new", "changed", "deleted", "failed")]
    chunks = counted(int(data.get("chunks_embedded", 0)), "chunk")
    return f"{', '.join(parts)}; {chunks} embedded in {float(data.get('seconds', 0.0)):.1f} s"


def _print_report(report: SyncReport, shown: int) -> None:
    data = report.as_dict(items=False)
    name = printable(report.name)
    if report.status == "already running":
        print(f"{name}: {printable(str(report.error))}", file=sys.stderr)
        return
    print(f"{name}: {_summary(data)}")
    if report.error:
        print(f"{name}: failed: {printable(report.error)}", file=sys.stderr)
    listed = [i for i in report.items if i.what not in ("unchanged",)]
    listed.sort(key=lambda i: {"failed": 0, "deleted": 1, "skipped": 3}.get(i.what, 2))
    for item in listed[:shown]:
        why = f" ({printable(item.reason)})" if item.reason else ""
        status = f" [HTTP {item.status}]" if item.status else ""
        print(f"  {item.what:<8} {printable(item.key)}{status}{why}")
    if len(listed) > shown:
        print(f"  ... and {counted(len(listed) - shown, 'more item')} (--max-items, or --json for all)")


def location(config: SourceConfig) -> str:
    """Where a source is, in one line: its URL or sitemap, its folder, or its reader class."""
    if config.kind == "website":
        return str(config.sitemap or config.url)
    if config.kind == "folder":
        return str(config.path)
    return str(config.reader)


def describe_last_sync(last: LastSync | None, *, now: float | None = None) -> dict[str, Any]:
    """A source's last sync as plain data for a listing: when (ISO time and seconds ago), how it ended, its counts,
    failures and pages per second; ``{"last_sync": None}`` when it was never synced."""
    if last is None:
        return {"last_sync": None}
    now = time.time() if now is None else now
    report = last.report
    return {
        "last_sync": {
            "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(last.finished_at)),
            "seconds_ago": round(max(now - last.finished_at, 0.0), 1),
            "status": last.status,
            **({"error": report["error"]} if report.get("error") else {}),
            **{k: report.get(k, 0) for k in (*_COUNTED, "chunks_embedded")},
            "seconds": report.get("seconds", 0.0),
            "pages_per_second": report.get("pages_per_second", 0.0),
            "failures": [i for i in report.get("items", []) if i.get("what") == "failed"][:20],
        }
    }


def sources_listing(engine: Any) -> list[dict[str, Any]]:
    """Every configured source with its kind, location, schedule, whether a sync of it runs now, and its last sync."""
    from ingestion.sync.state import SyncStateStore

    states = SyncStateStore(engine.article_store)
    last = states.last_syncs()
    return [
        {
            "name": c.name,
            "kind": c.kind,
            "location": location(c),
            "schedule": c.schedule,
            "running": states.is_running(c.name),
            **describe_last_sync(last.get(c.name)),
        }
        for c in engine.settings.sources
    ]


def _ago(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit} ago"
    return f"{seconds:.0f} s ago"


def cmd_sources(args: argparse.Namespace) -> int:
    with _engine(args) as engine:
        rows = sources_listing(engine)
    if args.json:
        print(json.dumps(rows, ensure_ascii=False))
        return 0
    if not rows:
        print("no sources: add [[sources]] tables to ragidx.toml (see the guide: Sources)")
        return 0
    for row in rows:
        schedule = row["schedule"]
        if schedule:
            schedule = f"every {schedule}" if schedule_interval_s(schedule) is not None else f"cron {schedule}"
        head = f"{printable(row['name'])} ({row['kind']}, {printable(row['location'])}"
        head += f", {printable(schedule)})" if schedule else ")"
        last = row["last_sync"]
        if row["running"]:
            state = "syncing now"
        elif last is None:
            state = "never synced"
        else:
            state = f"last sync {_ago(last['seconds_ago'])}: {last['status']}, {_summary(last)}"
            if last.get("error"):
                state += f"; {printable(last['error'])}"
        print(f"{head}: {state}")
    return 0
