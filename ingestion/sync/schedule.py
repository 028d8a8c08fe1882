"""Syncs on a schedule while ``ragidx serve`` runs: one background thread, one sync at a time, at low priority.

Each source with a ``schedule`` is synced through the same :class:`~ingestion.sync.runner.SyncRunner` as
``ragidx sync``. An interval (``"30m"``, ``"6h"``) counts from the end of the source's last sync (a source never
synced, or overdue, is synced soon after the server starts); a cron expression (``"0 3 * * *"``, the server's local
time) names the times it runs at, the next one after its last sync. A sync another process is running is left to
it (``already running``) and tried again at the next due time.

The thread never holds up answers: it runs its syncs one after another, at a lower CPU priority (Linux: ``nice``
10 for the thread and what it starts), and questions never wait for it. Stopping the server stops the scheduler:
a sync under way is let finish for up to ``stop_timeout_s``; one cut short resumes exactly at its next run (see
:mod:`ingestion.sync.runner`).

Example:
    >>> next_due(SourceConfig(name="d", kind="folder", path="/d", schedule="1h"), last_finished=0.0, now=10.0)
    3600.0
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import threading
import time
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ingestion.sync.config import SourceConfig, schedule_interval_s

if TYPE_CHECKING:
    from ingestion.sync.runner import SyncReport

__all__ = ["SyncScheduler", "next_due", "scheduled_syncs", "scheduler_of"]

logger = logging.getLogger(__name__)

FIRST_DELAY_S = 5.0
"""A source never synced (or overdue) is synced this long after the server starts, not during its start-up."""
THREAD_NICE = 10

_SCHEDULERS: weakref.WeakKeyDictionary[Any, SyncScheduler] = weakref.WeakKeyDictionary()


def next_due(config: SourceConfig, *, last_finished: float | None, now: float) -> float | None:
    """When a source is next due (a time stamp), given when its last sync finished; None without a schedule."""
    if not config.schedule:
        return None
    interval = schedule_interval_s(config.schedule)
    if interval is not None:
        return now + FIRST_DELAY_S if last_finished is None else max(last_finished + interval, now + FIRST_DELAY_S)
    from croniter import croniter

    start = dt.datetime.fromtimestamp(last_finished if last_finished is not None else now).astimezone()
    due = float(croniter(config.schedule, start).get_next(float))
    return max(due, now + FIRST_DELAY_S) if last_finished is None else due


class SyncScheduler:
    """The background thread that syncs an engine's scheduled sources (see the module docstring).

    Args:
        engine: the served engine; its ``settings.sources`` with a ``schedule`` are synced.
        stop_timeout_s: how long :meth:`stop` waits for a sync under way.
    """

    def __init__(self, engine: Any, *, stop_timeout_s: float = 30.0) -> None:
        from ingestion.sync.runner import SyncRunner

        self.engine = engine
        self.runner = SyncRunner(engine)
        self.stop_timeout_s = stop_timeout_s
        self.sources = [c for c in engine.settings.sources if c.schedule]
        self.due: dict[str, float] = {}
        self.running: str | None = None
        self.last: dict[str, SyncReport] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ragidx-sync", daemon=True)

    def start(self) -> SyncScheduler:
        if self.sources:
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop after the sync under way (waiting up to ``stop_timeout_s``)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(self.stop_timeout_s)
            if self._thread.is_alive():
                logger.warning("a scheduled sync of %s was still running when the server stopped", self.running)

    def status(self) -> dict[str, dict[str, Any]]:
        """Per scheduled source: when it is next due (ISO time) and whether it is syncing now."""
        return {
            c.name: {
                "next_sync": _iso(self.due[c.name]) if c.name in self.due else None,
                "syncing": self.running == c.name,
            }
            for c in self.sources
        }

    def _plan(self) -> None:
        last = self.runner.last_syncs()
        now = time.time()
        for config in self.sources:
            if config.name not in self.due:
                done = last.get(config.name)
                due = next_due(config, last_finished=done.finished_at if done else None, now=now)
                if due is not None:
                    self.due[config.name] = due

    def _run(self) -> None:
        _lower_priority()
        while not self._stop.is_set():
            try:
                self._plan()
            except Exception:  # the state store unreachable: try again in a minute
                logger.warning("scheduled syncs: could not read the last syncs; retrying in 60 s", exc_info=True)
                self._stop.wait(60)
                continue
            name = min(self.due, key=lambda n: self.due[n])
            wait = self.due[name] - time.time()
            if wait > 0:
                self._stop.wait(min(wait, 60.0))  # re-planned at least every minute
                continue
            config = next(c for c in self.sources if c.name == name)
            self.running = name
            try:
                report = self.runner.sync(config)
                self.last[name] = report
                if report.status == "failed":
                    logger.warning("scheduled sync of %s failed: %s", name, report.error)
                else:
                    logger.info("scheduled sync of %s: %s", name, report.as_dict(items=False))
            except Exception:
                logger.exception("scheduled sync of %s failed", name)
            finally:
                self.running = None
            finished = time.time()
            self.due[name] = next_due(config, last_finished=finished, now=finished) or finished + 3600


@contextlib.contextmanager
def scheduled_syncs(engine: Any) -> Iterator[SyncScheduler]:
    """Sync ``engine``'s scheduled sources in the background while the block runs (``ragidx serve``)."""
    scheduler = SyncScheduler(engine).start()
    _SCHEDULERS[engine] = scheduler
    try:
        yield scheduler
    finally:
        scheduler.stop()
        _SCHEDULERS.pop(engine, None)


def scheduler_of(engine: Any) -> SyncScheduler | None:
    """The scheduler syncing ``engine``'s sources, if one runs."""
    return _SCHEDULERS.get(engine)


def _lower_priority() -> None:
    """Lower this thread's CPU priority (Linux schedules threads apart; elsewhere nothing happens)."""
    with contextlib.suppress(AttributeError, OSError, PermissionError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), THREAD_NICE)


def _iso(stamp: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(stamp))
