"""Run a coroutine from synchronous code, once, with its own exception.

LlamaIndex's ``asyncio_run`` catches every ``RuntimeError`` the coroutine raises, takes it for an event-loop
problem and runs the same, already finished coroutine again: the caller gets "Detected nested async. Please use
nest_asyncio.apply()" wrapping "cannot reuse already awaited coroutine", and the real error (ragidx's
``LLMUnavailableError`` is a ``RuntimeError``: "the model endpoint ... could not be reached") is lost.
:func:`run_sync` awaits the coroutine exactly once and lets its exception through unchanged.

Example:
    >>> async def add(a: int, b: int) -> int:
    ...     return a + b
    >>> run_sync(add(1, 2))
    3
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["run_sync"]

T = TypeVar("T")


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Await ``coro`` on a new event loop and return its result or raise its exception.

    Without a running loop in this thread (a script, the CLI) it runs here (``asyncio.run``). Inside one
    (Jupyter, an async web handler, a LlamaIndex sync method called from async code) it runs on a new loop in a
    helper thread, with this thread's context variables, while this thread waits.

    Example:
        >>> async def fail() -> None:
        ...     raise RuntimeError("the endpoint is down")
        >>> run_sync(fail())
        Traceback (most recent call last):
        ...
        RuntimeError: the endpoint is down
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # no loop runs in this thread: the common case
        return asyncio.run(coro)
    context = contextvars.copy_context()
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = context.run(asyncio.run, coro)
        except BaseException as exc:  # handed to the waiting thread, raised there
            outcome["error"] = exc

    thread = threading.Thread(target=target, name="ragidx-run-sync", daemon=True)
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    result: T = outcome["value"]
    return result
