"""The model queue: first come first served, bounded in length and wait, from threads and event loops."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from ragidx.providers.model_queue import EngineBusyError, ModelQueue


def test_questions_are_served_in_the_order_they_arrive() -> None:
    q = ModelQueue(slots=1, max_waiting=10, max_wait_s=30)
    order: list[int] = []
    gate = threading.Event()

    def ask(n: int) -> None:
        with q.slot():
            if n == 0:
                gate.wait(5)
            order.append(n)

    threads = [threading.Thread(target=ask, args=(0,))]
    threads[0].start()
    while q.stats().busy == 0:
        time.sleep(0.01)
    for n in range(1, 6):  # each one queued before the next starts
        threads.append(threading.Thread(target=ask, args=(n,)))
        threads[-1].start()
        while q.stats().waiting < n:
            time.sleep(0.01)
    gate.set()
    for t in threads:
        t.join(10)
    assert order == [0, 1, 2, 3, 4, 5]
    assert q.stats().served == 6 and q.stats().busy == 0 and q.stats().waiting == 0


def test_a_full_queue_refuses_at_once_with_when_to_retry() -> None:
    q = ModelQueue(slots=1, max_waiting=1, max_wait_s=30)
    with q.slot():
        waiter = threading.Thread(target=lambda: q.slot().__enter__())
        waiter.start()
        while q.stats().waiting < 1:
            time.sleep(0.01)
        t0 = time.monotonic()
        with pytest.raises(EngineBusyError, match="busy") as caught, q.slot():
            pass
        assert time.monotonic() - t0 < 1 and caught.value.retry_after_s >= 1 and caught.value.waiting == 1
    waiter.join(5)
    assert q.stats().refused == 1


def test_a_question_that_waits_past_the_limit_is_refused_then() -> None:
    q = ModelQueue(slots=1, max_waiting=5, max_wait_s=0.3)
    with q.slot():
        t0 = time.monotonic()
        with pytest.raises(EngineBusyError, match=r"waited 0 s"), q.slot():
            pass
        assert 0.25 < time.monotonic() - t0 < 3
    assert q.stats().waiting == 0  # it left the queue
    with q.slot():  # and the place is free for the next one
        assert q.stats().busy == 1


def test_a_question_whose_expected_wait_is_too_long_is_refused_at_once() -> None:
    q = ModelQueue(slots=1, max_waiting=10, max_wait_s=5, expected_hold_s=1.0)
    with q.slot():
        time.sleep(0.01)
    q._hold_s = 8.0  # measured: a question holds the model 8 s
    with q.slot():
        t0 = time.monotonic()
        with pytest.raises(EngineBusyError, match="longer than the 5 s") as caught, q.slot():
            pass
        assert time.monotonic() - t0 < 1 and caught.value.retry_after_s == 8


def test_event_loop_waiters_share_the_queue_and_a_cancelled_one_leaves_it() -> None:
    q = ModelQueue(slots=1, max_waiting=10, max_wait_s=30)
    order: list[str] = []

    async def ask(name: str, hold_s: float) -> None:
        async with q.aslot():
            order.append(name)
            await asyncio.sleep(hold_s)

    async def main() -> None:
        first = asyncio.create_task(ask("first", 0.3))
        await asyncio.sleep(0.05)
        gone = asyncio.create_task(ask("gone", 0))
        later = asyncio.create_task(ask("later", 0))
        await asyncio.sleep(0.05)
        assert q.stats().waiting == 2
        gone.cancel()  # a client that hung up while waiting
        await asyncio.sleep(0.05)
        assert q.stats().waiting == 1
        await asyncio.gather(first, later)

    asyncio.run(main())
    assert order == ["first", "later"] and q.stats().busy == 0


def test_threads_and_loops_wait_in_one_line() -> None:
    q = ModelQueue(slots=2, max_waiting=20, max_wait_s=30)
    inside = 0
    most = 0
    lock = threading.Lock()

    def enter() -> None:
        nonlocal inside, most
        with lock:
            inside += 1
            most = max(most, inside)
        time.sleep(0.02)
        with lock:
            inside -= 1

    def by_thread() -> None:
        with q.slot():
            enter()

    def by_loop() -> None:
        async def run() -> None:
            async with q.aslot():
                await asyncio.to_thread(enter)

        asyncio.run(run())

    threads = [threading.Thread(target=by_thread if i % 2 else by_loop) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert most == 2 and q.stats().served == 12 and q.stats().busy == 0


def waiters(q: ModelQueue, reader: str, n: int, outcomes: list[tuple[str, str]]) -> list[threading.Thread]:
    """``n`` questions of ``reader`` queued one after another; each records (reader, 'served' or 'refused')."""

    def ask() -> None:
        try:
            with q.slot(reader):
                outcomes.append((reader, "served"))
        except EngineBusyError:
            outcomes.append((reader, "refused"))

    threads = []
    for _ in range(n):
        before = q.stats().waiting + q.stats().refused
        threads.append(threading.Thread(target=ask))
        threads[-1].start()
        while q.stats().waiting + q.stats().refused == before:  # queued (or refused) before the next one
            time.sleep(0.005)
    return threads


def test_one_reader_filling_the_line_cannot_starve_another() -> None:
    q = ModelQueue(slots=1, max_waiting=16, max_wait_s=30)
    outcomes: list[tuple[str, str]] = []
    with q.slot("busy"):  # the model is answering
        hog = waiters(q, "ann", 18, outcomes)  # 16 wait, 2 are refused: the line is full
        assert q.stats().waiting == 16 and outcomes == [("ann", "refused")] * 2
        other = waiters(q, "bob", 3, outcomes)  # bob still gets places: ann's newest are pushed out for him
        assert q.stats().waiting == 16 and q.stats().refused == 5 and q.stats().readers_waiting == 2
    for t in hog + other:
        t.join(10)
    assert outcomes.count(("ann", "refused")) == 5 and ("bob", "refused") not in outcomes
    served = [r for r, what in outcomes if what == "served"]
    # round-robin: bob's three are served among ann's first ones, not after all of hers
    assert served[:6] == ["ann", "bob", "ann", "bob", "ann", "bob"] and served.count("ann") == 13


def test_a_reader_over_its_configured_share_is_refused_with_when_to_retry_while_others_get_places() -> None:
    q = ModelQueue(slots=1, max_waiting=16, max_wait_s=30, max_waiting_per_reader=2)
    outcomes: list[tuple[str, str]] = []
    with q.slot("busy"):
        threads = waiters(q, "ann", 2, outcomes)
        with pytest.raises(EngineBusyError, match="2 questions of yours are already waiting") as caught, q.slot("ann"):
            pass
        assert caught.value.retry_after_s >= 1
        threads += waiters(q, "bob", 2, outcomes)
        assert q.stats().waiting == 4 and q.stats().readers_waiting == 2 and outcomes == []
    for t in threads:
        t.join(10)
    assert [r for r, _ in outcomes] == ["ann", "bob", "ann", "bob"]
