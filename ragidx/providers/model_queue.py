"""The model queue: questions take turns at the model, readers take turns at the line, and none waits without a word.

On two CPU cores a local model answers one question at a time as fast as it answers several (llama.cpp's threads
are all busy with one prompt); questions asked together must queue somewhere. Here, not in the model server: a
server that takes every request at once cuts the one being written off (llama-cpp-python's default) or shares its
threads among them, and neither is fairer nor faster. :class:`ModelQueue` hands out ``slots`` places from threads
and from event loops alike. Its length is bounded and so is the wait: a question that finds ``max_waiting``
others ahead of it, or whose expected wait (the ones ahead times the time a question holds the model, measured
as they finish) passes ``max_wait_s``, is refused at once with :class:`EngineBusyError` and how long to wait
before asking again; one that has waited ``max_wait_s`` is refused then.

Fair between readers (``reader``: who asks, e.g. an API key; one reader when not given): the readers with
questions waiting are served round-robin, one question each in turn, each reader's own in the order asked. A
reader holds at most its share of the waiting places (``max_waiting_per_reader``, or else
``ceil(max_waiting / readers waiting)``): past it its question is refused while others still get places; and
when the line is full, a reader with none there yet takes the place of the newest question of the reader
holding the most past its share (that one is refused, with when to ask again). One reader asking 100 questions
thus never makes another wait behind them, nor be refused.

Example:
    >>> q = ModelQueue(slots=1, max_waiting=0)
    >>> with q.slot():
    ...     try:
    ...         q.slot().__enter__()
    ...     except EngineBusyError as exc:
    ...         print(exc.retry_after_s > 0)
    True
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = ["EngineBusyError", "ModelQueue", "QueueStats"]


class EngineBusyError(RuntimeError):
    """The model is busy with other questions: ask again in ``retry_after_s`` seconds.

    ``waiting`` is how many questions were queued when this one was refused.
    """

    def __init__(self, message: str, *, retry_after_s: float, waiting: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
        self.waiting = waiting


@dataclass
class QueueStats:
    """What the queue holds now and has done (for ``/metrics`` and the load benchmark)."""

    slots: int
    busy: int
    waiting: int
    served: int
    refused: int
    mean_hold_s: float | None
    readers_waiting: int = 0


@dataclass(eq=False)
class _Ticket:
    reader: str = ""
    granted: bool = False
    gone: bool = False  # left the queue (timed out, cancelled or pushed out) before it was granted
    refused: EngineBusyError | None = None  # pushed out of a full line by another reader's question
    event: threading.Event = field(default_factory=threading.Event)
    wake: Any = None  # for an event loop's waiter: a callable run when the ticket is granted


class ModelQueue:
    """A queue of ``slots`` places at a model, bounded in length and in wait, fair between readers.

    Args:
        slots: questions the model answers at once.
        max_waiting: questions that may wait for a place; one more is refused at once (or pushes out a question
            of a reader holding more than its share, see the module docstring).
        max_wait_s: the longest a question waits; one whose expected wait is longer is refused at once.
        expected_hold_s: a first guess of how long a question holds its place (until some have finished).
        max_waiting_per_reader: the most questions one reader may have waiting; None: its fair share,
            ``ceil(max_waiting / readers waiting)``.

    Example:
        >>> q = ModelQueue(slots=2, max_waiting=8, max_wait_s=60.0)
        >>> with q.slot(reader="key-1"):
        ...     q.stats().busy
        1
    """

    def __init__(
        self,
        *,
        slots: int = 1,
        max_waiting: int = 16,
        max_wait_s: float = 300.0,
        expected_hold_s: float | None = None,
        max_waiting_per_reader: int | None = None,
    ) -> None:
        if slots < 1:
            raise ValueError(f"slots must be >= 1, got {slots}")
        if max_waiting_per_reader is not None and max_waiting_per_reader < 1:
            raise ValueError(f"max_waiting_per_reader must be >= 1 or None, got {max_waiting_per_reader}")
        self.slots = slots
        self.max_waiting = max_waiting
        self.max_wait_s = max_wait_s
        self.max_waiting_per_reader = max_waiting_per_reader
        self._lock = threading.Lock()
        self._waiting: dict[str, deque[_Ticket]] = {}  # each reader's line; the dict's order is the readers' turns
        self._count = 0  # tickets waiting, all readers together
        self._busy = 0
        self._served = 0
        self._refused = 0
        self._hold_s = expected_hold_s
        self._measured = False

    # --- waiting ---------------------------------------------------------------------------------------
    def _fair_share(self, readers: int) -> int:
        return max(1, math.ceil(self.max_waiting / max(1, readers)))

    def _enter(self, reader: str) -> _Ticket:
        """A ticket, granted at once when a place is free and nobody waits; refused when the line is full or its
        reader holds its share of it."""
        ticket = _Ticket(reader=reader)
        with self._lock:
            if self._busy < self.slots and not self._count:
                self._busy += 1
                ticket.granted = True
                return ticket
            own = self._waiting.get(reader)
            held = len(own) if own else 0
            readers = len(self._waiting) + (0 if own else 1)
            fair = self._fair_share(readers)
            share = self.max_waiting_per_reader if self.max_waiting_per_reader is not None else fair
            if held >= share and share < self.max_waiting:  # (a reader alone may fill the line)
                raise self._refuse(
                    f"{held} questions of yours are already waiting for the model, your share of the "
                    f"{self.max_waiting} places while {readers} readers wait",
                    self._ahead(reader, held),
                )
            if self._count >= self.max_waiting:
                longest = max(self._waiting, key=lambda r: len(self._waiting[r]), default=None)
                if longest is None or longest == reader or len(self._waiting[longest]) <= fair:
                    raise self._refuse(f"{self._count} questions are already waiting for the model (the most allowed)")
                self._push_out(longest)
            ahead = self._ahead(reader, held)
            expected = self._expected_wait(ahead)
            if self._measured and expected is not None and expected > self.max_wait_s:
                raise self._refuse(
                    f"{ahead + self._busy} questions are ahead of this one, about {expected:.0f} s of work, longer "
                    f"than the {self.max_wait_s:.0f} s a question may wait",
                    ahead,
                )
            self._waiting.setdefault(reader, deque()).append(ticket)
            self._count += 1
            return ticket

    def _ahead(self, reader: str, held: int) -> int:
        """Questions served before a new one of ``reader``, which has ``held`` waiting (round-robin: each other
        reader's first ``held + 1`` at most)."""
        return held + sum(min(len(line), held + 1) for r, line in self._waiting.items() if r != reader)

    def _push_out(self, reader: str) -> None:
        """Refuse ``reader``'s newest waiting question to make room for another reader's (under the lock)."""
        line = self._waiting[reader]
        ticket = line.pop()
        if not line:
            del self._waiting[reader]
        self._count -= 1
        ticket.gone = True
        ticket.refused = self._refuse(
            f"other readers' questions needed places in the full line, where {len(line) + 1} of yours were "
            "waiting, more than your share",
            self._ahead(reader, len(line)),
        )
        self._wake(ticket)

    def _expected_wait(self, ahead: int) -> float | None:
        """Seconds until a place frees for a question with ``ahead`` others waiting before it."""
        if self._hold_s is None:
            return None
        return (ahead // self.slots + 1) * self._hold_s

    def _refuse(self, why: str, ahead: int | None = None) -> EngineBusyError:
        self._refused += 1
        ahead = self._count if ahead is None else ahead
        retry = self._expected_wait(ahead) or 5.0
        retry_after = float(max(1, math.ceil(retry)))
        return EngineBusyError(
            f"the model is busy: {why}; ask again in {retry_after:.0f} s", retry_after_s=retry_after, waiting=ahead
        )

    def _leave(self, ticket: _Ticket) -> bool:
        """A waiter gives up. True if it was granted meanwhile (it then holds a place it must release)."""
        with self._lock:
            if ticket.granted:
                return True
            if not ticket.gone:
                ticket.gone = True
                line = self._waiting.get(ticket.reader)
                if line is not None and ticket in line:
                    line.remove(ticket)
                    self._count -= 1
                    if not line:
                        del self._waiting[ticket.reader]
            return False

    def _release(self, held_s: float | None) -> None:
        """Free a place; ``held_s``: how long a question held it (None: it left before it began)."""
        with self._lock:
            self._busy -= 1
            if held_s is not None:
                self._served += 1
                old = self._hold_s if self._measured and self._hold_s is not None else held_s
                self._hold_s = 0.7 * old + 0.3 * held_s
                self._measured = True
            self._grant()

    def _grant(self) -> None:
        """Hand free places to waiters, one reader after another (under the lock): the first reader in turn gets
        its oldest question served and goes to the back of the turns if it has more."""
        while self._busy < self.slots and self._waiting:
            reader = next(iter(self._waiting))
            line = self._waiting.pop(reader)
            ticket = line.popleft()
            if line:
                self._waiting[reader] = line
            self._count -= 1
            self._busy += 1
            ticket.granted = True
            self._wake(ticket)

    @staticmethod
    def _wake(ticket: _Ticket) -> None:
        ticket.event.set()
        if ticket.wake is not None:
            with contextlib.suppress(RuntimeError):  # its loop is closed: the waiter is gone with it
                ticket.wake()

    def _timed_out(self, ticket: _Ticket) -> EngineBusyError:
        if ticket.refused is not None:
            return ticket.refused
        with self._lock:
            return self._refuse(f"this question waited {self.max_wait_s:.0f} s for the model")

    # --- holding a place ---------------------------------------------------------------------------------
    @contextlib.contextmanager
    def slot(self, reader: str = "") -> Iterator[None]:
        """Hold a place at the model (from a thread) for ``reader``; :class:`EngineBusyError` when none comes in
        time or the reader holds its share of the line."""
        ticket = self._enter(reader)
        if not ticket.granted:
            ticket.event.wait(self.max_wait_s)
            if not self._leave(ticket):
                raise self._timed_out(ticket)
        started = time.monotonic()
        try:
            yield
        finally:
            self._release(time.monotonic() - started)

    @contextlib.asynccontextmanager
    async def aslot(self, reader: str = "") -> AsyncIterator[None]:
        """Hold a place at the model (from an event loop; a cancelled waiter leaves the queue)."""
        ticket = self._enter(reader)
        if not ticket.granted:
            loop = asyncio.get_running_loop()
            granted = loop.create_future()

            def grant() -> None:
                if not granted.done():
                    granted.set_result(None)

            def wake() -> None:
                loop.call_soon_threadsafe(grant)

            with self._lock:
                ticket.wake = wake
                if ticket.granted or ticket.refused is not None:  # granted or pushed out between _enter and here
                    granted.set_result(None)
            try:
                await asyncio.wait_for(granted, self.max_wait_s)
            except (TimeoutError, asyncio.CancelledError) as exc:
                if self._leave(ticket):
                    if isinstance(exc, asyncio.CancelledError):
                        self._release(None)
                        raise
                elif isinstance(exc, asyncio.CancelledError):
                    raise
                else:
                    raise self._timed_out(ticket) from None
            else:
                if not self._leave(ticket):  # woken without a place: pushed out
                    raise self._timed_out(ticket)
        started = time.monotonic()
        try:
            yield
        finally:
            self._release(time.monotonic() - started)

    def stats(self) -> QueueStats:
        with self._lock:
            return QueueStats(
                slots=self.slots,
                busy=self._busy,
                waiting=self._count,
                served=self._served,
                refused=self._refused,
                mean_hold_s=round(self._hold_s, 3) if self._measured and self._hold_s is not None else None,
                readers_waiting=len(self._waiting),
            )
