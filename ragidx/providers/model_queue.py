"""The model queue: questions take turns at the model, first come first served, and never wait without a word.

On two CPU cores a local model answers one question at a time as fast as it answers several (llama.cpp's threads
are all busy with one prompt); questions asked together must queue somewhere. Here, not in the model server: a
server that takes every request at once cuts the one being written off (llama-cpp-python's default) or shares its
threads among them, and neither is fairer nor faster. :class:`ModelQueue` hands out ``slots`` places in the order
questions arrive, from threads and from event loops alike. Its length is bounded and so is the wait: a question
that finds ``max_waiting`` others ahead of it, or whose expected wait (the ones ahead times the time a question
holds the model, measured as they finish) passes ``max_wait_s``, is refused at once with :class:`EngineBusyError`
and how long to wait before asking again; one that has waited ``max_wait_s`` is refused then.

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


@dataclass(eq=False)
class _Ticket:
    granted: bool = False
    gone: bool = False  # left the queue (timed out or cancelled) before it was granted
    event: threading.Event = field(default_factory=threading.Event)
    wake: Any = None  # for an event loop's waiter: a callable run when the ticket is granted


class ModelQueue:
    """A fair (FIFO) queue of ``slots`` places at a model, bounded in length and in wait.

    Args:
        slots: questions the model answers at once.
        max_waiting: questions that may wait for a place; one more is refused at once.
        max_wait_s: the longest a question waits; one whose expected wait is longer is refused at once.
        expected_hold_s: a first guess of how long a question holds its place (until some have finished).

    Example:
        >>> q = ModelQueue(slots=2, max_waiting=8, max_wait_s=60.0)
        >>> with q.slot():
        ...     q.stats().busy
        1
    """

    def __init__(
        self, *, slots: int = 1, max_waiting: int = 16, max_wait_s: float = 300.0, expected_hold_s: float | None = None
    ) -> None:
        if slots < 1:
            raise ValueError(f"slots must be >= 1, got {slots}")
        self.slots = slots
        self.max_waiting = max_waiting
        self.max_wait_s = max_wait_s
        self._lock = threading.Lock()
        self._waiting: deque[_Ticket] = deque()
        self._busy = 0
        self._served = 0
        self._refused = 0
        self._hold_s = expected_hold_s
        self._measured = False

    # --- waiting ---------------------------------------------------------------------------------------
    def _enter(self) -> _Ticket:
        """A ticket, granted at once when a place is free and nobody waits; refused when the queue is full."""
        ticket = _Ticket()
        with self._lock:
            if self._busy < self.slots and not self._waiting:
                self._busy += 1
                ticket.granted = True
                return ticket
            ahead = len(self._waiting)
            if ahead >= self.max_waiting:
                raise self._refuse(f"{ahead} questions are already waiting for the model (the most allowed)")
            expected = self._expected_wait(ahead)
            if self._measured and expected is not None and expected > self.max_wait_s:
                raise self._refuse(
                    f"{ahead + self._busy} questions are ahead of this one, about {expected:.0f} s of work, longer "
                    f"than the {self.max_wait_s:.0f} s a question may wait"
                )
            self._waiting.append(ticket)
            return ticket

    def _expected_wait(self, ahead: int) -> float | None:
        """Seconds until a place frees for a question with ``ahead`` others waiting before it."""
        if self._hold_s is None:
            return None
        return (ahead // self.slots + 1) * self._hold_s

    def _refuse(self, why: str) -> EngineBusyError:
        self._refused += 1
        ahead = len(self._waiting)
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
            ticket.gone = True
            with contextlib.suppress(ValueError):
                self._waiting.remove(ticket)
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
        """Hand free places to the first waiters (under the lock)."""
        while self._busy < self.slots and self._waiting:
            ticket = self._waiting.popleft()
            self._busy += 1
            ticket.granted = True
            ticket.event.set()
            if ticket.wake is not None:
                with contextlib.suppress(RuntimeError):  # its loop is closed: the waiter is gone with it
                    ticket.wake()

    def _timed_out(self) -> EngineBusyError:
        with self._lock:
            return self._refuse(f"this question waited {self.max_wait_s:.0f} s for the model")

    # --- holding a place ---------------------------------------------------------------------------------
    @contextlib.contextmanager
    def slot(self) -> Iterator[None]:
        """Hold a place at the model (from a thread); :class:`EngineBusyError` when none comes in time."""
        ticket = self._enter()
        if not ticket.granted:
            ticket.event.wait(self.max_wait_s)
            if not self._leave(ticket):
                raise self._timed_out()
        started = time.monotonic()
        try:
            yield
        finally:
            self._release(time.monotonic() - started)

    @contextlib.asynccontextmanager
    async def aslot(self) -> AsyncIterator[None]:
        """Hold a place at the model (from an event loop; a cancelled waiter leaves the queue)."""
        ticket = self._enter()
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
                if ticket.granted:  # granted between _enter and here
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
                    raise self._timed_out() from None
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
                waiting=len(self._waiting),
                served=self._served,
                refused=self._refused,
                mean_hold_s=round(self._hold_s, 3) if self._measured and self._hold_s is not None else None,
            )
