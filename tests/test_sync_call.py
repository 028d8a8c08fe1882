"""run_sync awaits a coroutine once and lets its own exception through, with or without a running loop."""

from __future__ import annotations

import asyncio
import contextvars

import pytest

from ragidx.sync_call import run_sync

USER: contextvars.ContextVar[str] = contextvars.ContextVar("USER", default="nobody")


class EndpointDown(RuntimeError):
    pass


def test_a_runtime_error_comes_through_unchanged_and_the_coroutine_runs_once() -> None:
    runs = []

    async def fail() -> None:
        runs.append(1)
        raise EndpointDown("connection refused")

    with pytest.raises(EndpointDown, match="connection refused"):
        run_sync(fail())
    assert runs == [1]  # LlamaIndex's asyncio_run ran it again: "cannot reuse already awaited coroutine"


def test_inside_a_running_loop_it_runs_on_another_thread_with_this_context() -> None:
    async def whoami() -> str:
        await asyncio.sleep(0)
        return USER.get()

    async def caller() -> str:
        USER.set("alice")
        return run_sync(whoami())  # a sync API called from async code (Jupyter, a web handler)

    assert asyncio.run(caller()) == "alice"

    async def failing_caller() -> None:
        async def fail() -> None:
            raise EndpointDown("still down")

        run_sync(fail())

    with pytest.raises(EndpointDown, match="still down"):
        asyncio.run(failing_caller())
