"""The parts of `fugu-lite serve` tested alone: the micro-batcher, the circuit breaker, and
the serve command refusing bad flags and setups before it listens."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import io
import json
import logging
import os
import pty
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from conftest import WORKERS
from server_support import ENDPOINT_KEY, MODEL, Stubs, user, wait_until
from typer.testing import CliRunner

from fugu_lite.cli import app as cli_app
from fugu_lite.server import log as log_module
from fugu_lite.server.app import (
    check_workers_match,
    health_body,
    show_package_logs,
    uvicorn_log_config,
)
from fugu_lite.server.auth import Redactor
from fugu_lite.server.batching import BatcherClosedError, MicroBatcher
from fugu_lite.server.breaker import CircuitBreaker
from fugu_lite.server.disconnect import ClientDisconnectedError, until_disconnected
from fugu_lite.server.dispatch import Attempt, Dispatcher
from fugu_lite.server.log import DecisionLog, DecisionLogEntry
from fugu_lite.server.metrics import Metrics
from fugu_lite.server.stream import estimated_usage, has_content
from fugu_lite.workers.config import PoolConfig, WorkerConfig, load_pool_config
from fugu_lite.workers.pool import WorkerPool
from fugu_lite.workers.preflight import preflight

pytestmark = pytest.mark.timeout(120)


# --- units: batcher, breaker, CLI ---------------------------------------------------------------


def test_micro_batcher_groups_waiting_requests_and_keeps_the_loop_free() -> None:
    asyncio.run(batcher_groups_waiting_requests_and_keeps_the_loop_free())


async def batcher_groups_waiting_requests_and_keeps_the_loop_free() -> None:
    batches: list[list[int]] = []
    loop_ticked_during_pass: list[bool] = []

    def slow_double(items: list[int]) -> list[int]:
        """A forward pass that ends once the event loop has ticked while it runs: were the loop
        blocked by it, it would give up after 10 s with False."""
        batches.append(items)
        before, deadline = ticks, time.monotonic() + 10
        while ticks == before and time.monotonic() < deadline:
            time.sleep(0.005)
        loop_ticked_during_pass.append(ticks != before)
        return [item * 2 for item in items]

    batcher = MicroBatcher(slow_double, window_s=0.05, max_batch=8)
    batcher.start()
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    ticking = asyncio.create_task(ticker())
    results = await asyncio.gather(*(batcher.submit(i) for i in range(20)))
    ticking.cancel()
    await batcher.stop()
    assert results == [i * 2 for i in range(20)]
    assert [len(batch) for batch in batches] == [8, 8, 4]
    assert loop_ticked_during_pass == [True, True, True]


def test_micro_batcher_does_not_hold_back_a_lone_request() -> None:
    asyncio.run(batcher_does_not_hold_back_a_lone_request())


async def batcher_does_not_hold_back_a_lone_request() -> None:
    # a window far longer than the bound: a loaded machine's delays never come near it
    batcher = MicroBatcher(lambda items: items, window_s=10.0, should_wait=lambda n: False)
    batcher.start()
    started = time.perf_counter()
    assert await batcher.submit("x") == "x"
    assert time.perf_counter() - started < 3.0
    await batcher.stop()


def test_micro_batcher_runs_a_full_batch_at_once_and_waits_again_for_the_next() -> None:
    asyncio.run(batcher_runs_a_full_batch_at_once_and_waits_again_for_the_next())


async def batcher_runs_a_full_batch_at_once_and_waits_again_for_the_next() -> None:
    # a window far longer than the bound: only a batch run before its window ends is fast
    batches: list[list[str]] = []
    batcher = MicroBatcher(lambda items: batches.append(items) or items, 10.0, max_batch=2)
    batcher.start()
    started = time.perf_counter()
    assert await asyncio.gather(batcher.submit("a"), batcher.submit("b")) == ["a", "b"]
    # the second arrives while the first waits: the batch is full, so it runs now
    first = asyncio.create_task(batcher.submit("c"))
    await asyncio.sleep(0.1)
    assert await asyncio.gather(first, batcher.submit("d")) == ["c", "d"]
    assert time.perf_counter() - started < 5.0
    assert batches == [["a", "b"], ["c", "d"]]  # c waited for d, not run alone at once
    await batcher.stop()


def test_micro_batcher_skips_a_request_whose_client_left_and_fails_those_left_at_stop() -> None:
    asyncio.run(batcher_skips_a_request_whose_client_left_and_fails_those_left_at_stop())


async def batcher_skips_a_request_whose_client_left_and_fails_those_left_at_stop() -> None:
    batches: list[list[str]] = []
    batcher = MicroBatcher(lambda items: batches.append(items) or items, window_s=0.3)
    batcher.start()
    gone, kept = (asyncio.create_task(batcher.submit(item)) for item in ("gone", "kept"))
    await asyncio.sleep(0.05)
    gone.cancel()
    assert await kept == "kept"
    assert batches == [["kept"]]

    release = threading.Event()
    batcher = MicroBatcher(lambda items: release.wait(10) and items, window_s=0.0, max_batch=1)
    batcher.start()
    running = asyncio.create_task(batcher.submit("running"))
    await asyncio.sleep(0.05)
    waiting = asyncio.create_task(batcher.submit("waiting"))
    await asyncio.sleep(0.05)
    stopping = asyncio.create_task(batcher.stop())
    await asyncio.sleep(0.05)
    release.set()
    await stopping
    with pytest.raises(BatcherClosedError, match="shutting down"):
        await waiting
    with pytest.raises(BatcherClosedError, match="shutting down"):
        await batcher.submit("late")
    assert await running == "running"  # (the next test: in its forward pass at stop)


def started_blocking_batcher(
    fails: bool = False, passes: list[list[str]] | None = None
) -> tuple[MicroBatcher[str, str], threading.Event, threading.Event]:
    """A started batcher (in a running event loop) whose forward pass sets `in_pass`, then
    waits for `release` (10 s at most) and answers, or raises ValueError if it `fails`.
    Each pass's items are appended to `passes`, when given."""
    in_pass, release = threading.Event(), threading.Event()

    def blocking(items: list[str]) -> list[str]:
        if passes is not None:
            passes.append(items)
        in_pass.set()
        release.wait(10)
        if fails:
            raise ValueError("the forward pass failed")
        return items

    batcher = MicroBatcher(blocking, window_s=0.0)
    batcher.start()
    return batcher, in_pass, release


def test_micro_batcher_answers_the_batch_in_its_forward_pass_at_stop() -> None:
    """stop() cancelled the batcher while a batch ran its forward pass: that batch's requests
    were never answered, and their clients waited forever; then they were failed as shutting
    down, though the pass went on to its end, while stop() held the event loop in the
    thread's shutdown until then (no other coroutine ran). The batch is answered now, and
    the loop goes on while stop() waits for it."""
    asyncio.run(batcher_answers_the_batch_in_its_forward_pass_at_stop())


async def batcher_answers_the_batch_in_its_forward_pass_at_stop() -> None:
    batcher, in_pass, release = started_blocking_batcher()
    running = asyncio.gather(*(batcher.submit(item) for item in ("a", "b")))
    while not in_pass.is_set():
        await asyncio.sleep(0.01)
    stopping = asyncio.create_task(batcher.stop())
    await asyncio.sleep(0.05)
    assert not stopping.done()
    # the loop is free while stop() waits: this coroutine runs, and ends the pass
    await asyncio.wait_for(asyncio.to_thread(release.set), 5)
    await asyncio.wait_for(stopping, 5)
    assert await asyncio.wait_for(running, 5) == ["a", "b"]
    with pytest.raises(BatcherClosedError, match="shutting down"):
        await batcher.submit("late")


def test_micro_batcher_answers_on_after_a_client_left_during_its_forward_pass() -> None:
    """A request whose client left while its batch's forward pass ran (its future cancelled)
    is skipped when the pass's results are handed out: no test cancelled one then, so
    setting its result anyway (InvalidStateError, which ended the batcher's loop, so that
    its batch mates and every later request waited forever) passed every test."""
    asyncio.run(batcher_answers_on_after_a_client_left_during_its_forward_pass())


async def batcher_answers_on_after_a_client_left_during_its_forward_pass() -> None:
    batcher, in_pass, release = started_blocking_batcher()
    gone, kept = (asyncio.create_task(batcher.submit(item)) for item in ("gone", "kept"))
    while not in_pass.is_set():
        await asyncio.sleep(0.01)
    gone.cancel()
    await asyncio.to_thread(release.set)
    assert await asyncio.wait_for(kept, 5) == "kept"
    assert await asyncio.wait_for(batcher.submit("later"), 5) == "later"
    await batcher.stop()


def test_micro_batcher_goes_on_after_a_client_left_during_a_forward_pass_that_failed() -> None:
    """The failing twin of the test above: a lone request whose client left while its
    forward pass ran, the pass then failing. No test did it, so setting the error on its
    cancelled future anyway (InvalidStateError, ending the batcher's loop: every later
    request waited forever) passed every test."""
    asyncio.run(batcher_goes_on_after_a_client_left_during_a_forward_pass_that_failed())


async def batcher_goes_on_after_a_client_left_during_a_forward_pass_that_failed() -> None:
    batcher, in_pass, release = started_blocking_batcher(fails=True)
    gone = asyncio.create_task(batcher.submit("gone"))
    while not in_pass.is_set():
        await asyncio.sleep(0.01)
    gone.cancel()
    await asyncio.to_thread(release.set)
    with pytest.raises(ValueError, match="the forward pass failed"):
        await asyncio.wait_for(batcher.submit("later"), 5)  # failed, not left waiting
    await batcher.stop()


def test_micro_batcher_reruns_a_failed_batch_without_the_requests_whose_clients_left() -> None:
    """A failed batch is run again item by item to find the bad one; a request whose client
    left during the failed pass was run again as well: a forward pass for nobody, which the
    requests behind it waited for."""
    asyncio.run(batcher_reruns_a_failed_batch_without_the_requests_whose_clients_left())


async def batcher_reruns_a_failed_batch_without_the_requests_whose_clients_left() -> None:
    passes: list[list[str]] = []
    batcher, in_pass, release = started_blocking_batcher(fails=True, passes=passes)
    gone, kept = (asyncio.create_task(batcher.submit(item)) for item in ("gone", "kept"))
    while not in_pass.is_set():
        await asyncio.sleep(0.01)
    gone.cancel()
    await asyncio.to_thread(release.set)
    with pytest.raises(ValueError, match="the forward pass failed"):
        await asyncio.wait_for(kept, 5)
    assert passes == [["gone", "kept"], ["kept"]]
    await batcher.stop()


def test_micro_batcher_fails_the_batch_not_the_batcher() -> None:
    asyncio.run(batcher_fails_the_batch_not_the_batcher())


async def batcher_fails_the_batch_not_the_batcher() -> None:
    def picky(items: list[int]) -> list[int]:
        if 13 in items:
            raise ValueError("unlucky batch")
        return items

    batcher = MicroBatcher(picky, window_s=0.0)
    batcher.start()
    with pytest.raises(ValueError, match="unlucky"):
        await batcher.submit(13)
    assert await batcher.submit(7) == 7
    await batcher.stop()

    # in one batch, the bad item fails alone: its batch mates are answered
    batches: list[int] = []
    batcher = MicroBatcher(picky, window_s=0.2, on_batch=lambda size, _: batches.append(size))
    batcher.start()
    results = await asyncio.gather(*(batcher.submit(i) for i in (5, 13, 7)), return_exceptions=True)
    assert results[0] == 5 and results[2] == 7
    assert isinstance(results[1], ValueError)
    assert batches == [1, 1]  # the batch of 3 failed, then 5 and 7 ran on their own
    results = await asyncio.gather(*(batcher.submit(i) for i in (13, 7)), return_exceptions=True)
    assert isinstance(results[0], ValueError) and results[1] == 7  # a batch of 2 as well
    await batcher.stop()


def test_micro_batcher_routes_alone_the_requests_of_a_batch_answered_with_the_wrong_count() -> None:
    asyncio.run(batcher_routes_alone_the_requests_of_a_batch_answered_with_the_wrong_count())


async def batcher_routes_alone_the_requests_of_a_batch_answered_with_the_wrong_count() -> None:
    """A batched function answering 3 items with 2 results raised in zip(strict=True)
    outside the try: the loop ended and every later request waited forever. Then all 3
    failed, though which answer was whose can be told when each item is passed alone."""
    passes: list[list[int]] = []

    def drops_the_last_of_a_batch(items: list[int]) -> list[int]:
        passes.append(items)
        return items[:-1] if len(items) > 1 else items

    batcher = MicroBatcher(drops_the_last_of_a_batch, window_s=0.2)
    batcher.start()
    submitted = asyncio.gather(*(batcher.submit(i) for i in (1, 2, 3)), return_exceptions=True)
    assert await asyncio.wait_for(submitted, 5) == [1, 2, 3]
    assert passes == [[1, 2, 3], [1], [2], [3]]
    await batcher.stop()


@pytest.mark.parametrize("answers_for_13", [0, 2])
def test_micro_batcher_fails_a_request_answered_with_the_wrong_count_and_serves_on(
    answers_for_13: int,
) -> None:
    """Too few results for a batch, or too many (no test gave too many: a count checked
    only for too few, the strict zip then ending the batcher's loop, passed a mutation
    round)."""
    asyncio.run(batcher_fails_a_request_answered_with_the_wrong_count_and_serves_on(answers_for_13))


async def batcher_fails_a_request_answered_with_the_wrong_count_and_serves_on(
    answers_for_13: int,
) -> None:
    def answers_13_wrongly(items: list[int]) -> list[int]:
        return [
            answer for item in items for answer in [item] * (answers_for_13 if item == 13 else 1)
        ]

    batcher = MicroBatcher(answers_13_wrongly, window_s=0.2)
    batcher.start()
    submitted = asyncio.gather(*(batcher.submit(i) for i in (5, 13)), return_exceptions=True)
    results = await asyncio.wait_for(submitted, 5)
    assert results[0] == 5
    assert isinstance(results[1], RuntimeError)
    assert str(results[1]) == (
        f"the batched function returned {answers_for_13} results for 1 requests: it must "
        "return one result per item, in the items' order"
    )
    assert await asyncio.wait_for(batcher.submit(4), 5) == 4
    await batcher.stop()


@pytest.mark.parametrize(
    ("answer", "kind"),
    [(lambda items: None, "NoneType"), (lambda items: (item for item in items), "generator")],
)
def test_micro_batcher_fails_each_request_of_a_function_that_returns_no_list(
    answer: Callable[[list[int]], object], kind: str
) -> None:
    asyncio.run(batcher_fails_each_request_of_a_function_that_returns_no_list(answer, kind))


async def batcher_fails_each_request_of_a_function_that_returns_no_list(
    answer: Callable[[list[int]], object], kind: str
) -> None:
    """A batched function returning None or a generator raised TypeError from len() outside
    the try: the batcher's loop ended, and its waiting requests, and every later one,
    waited forever."""
    served: list[int] = []

    def answers_batches_wrongly(items: list[int]) -> object:
        if 0 in items:
            return answer(items)
        served.extend(items)
        return items

    batcher = MicroBatcher(answers_batches_wrongly, window_s=0.2)
    batcher.start()
    submitted = asyncio.gather(*(batcher.submit(i) for i in (0, 0)), return_exceptions=True)
    for result in await asyncio.wait_for(submitted, 5):
        assert isinstance(result, TypeError)
        assert str(result) == (
            f"the batched function returned a {kind}, not a list: it must return one result "
            "per item, in the items' order"
        )
    assert await asyncio.wait_for(batcher.submit(4), 5) == 4
    assert served == [4]
    await batcher.stop()


def test_micro_batcher_answers_a_batch_whose_callback_fails_and_serves_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """on_batch (the app's metrics observe it) raising ended the batcher's loop: its batch,
    and every later request, waited until shutdown. The batch is answered, the failure
    logged, and later batches are told as before."""
    told: list[int] = []

    def fails_for_two(size: int, seconds: float) -> None:
        if size == 2:
            raise ValueError("histogram closed")
        told.append(size)

    async def submit_a_batch_of_two_then_one() -> tuple[list[int], int, int]:
        batcher = MicroBatcher(lambda items: items, window_s=0.2, on_batch=fails_for_two)
        batcher.start()
        pair = await asyncio.wait_for(asyncio.gather(batcher.submit(1), batcher.submit(2)), 5)
        alone = await asyncio.wait_for(batcher.submit(3), 5)
        await batcher.stop()
        untold = MicroBatcher(lambda items: items, window_s=0.0)  # no on_batch: nothing logged
        untold.start()
        answer = await asyncio.wait_for(untold.submit(4), 5)
        await untold.stop()
        return pair, alone, answer

    with caplog.at_level(logging.ERROR, logger="fugu_lite.server.batching"):
        assert asyncio.run(submit_a_batch_of_two_then_one()) == ([1, 2], 3, 4)
    assert told == [1]
    [record] = caplog.records
    assert record.getMessage() == "on_batch failed for a batch of 2 (its requests are answered)"
    assert record.exc_info is not None and str(record.exc_info[1]) == "histogram closed"


def test_micro_batcher_runs_no_pass_for_a_batch_whose_clients_all_left() -> None:
    """Every request waiting for a batch window cancelled (their clients gone): no forward
    pass is run for nobody, nor a batch of 0 told (a mutation round running the empty batch
    passed every test)."""
    asyncio.run(batcher_runs_no_pass_for_a_batch_whose_clients_all_left())


async def batcher_runs_no_pass_for_a_batch_whose_clients_all_left() -> None:
    passes: list[list[str]] = []
    sizes: list[int] = []
    batcher = MicroBatcher(
        lambda items: passes.append(items) or items,
        window_s=0.3,
        on_batch=lambda size, _: sizes.append(size),
    )
    batcher.start()
    gone = asyncio.create_task(batcher.submit("gone"))
    await asyncio.sleep(0.05)
    gone.cancel()
    await asyncio.sleep(0.5)  # past the window: the batch is taken, with no one in it
    assert await asyncio.wait_for(batcher.submit("kept"), 5) == "kept"
    assert (passes, sizes) == ([["kept"]], [1])
    await batcher.stop()


def test_micro_batcher_tells_each_batch_its_size_and_the_seconds_its_pass_took() -> None:
    asyncio.run(batcher_tells_each_batch_its_size_and_the_seconds_its_pass_took())


async def batcher_tells_each_batch_its_size_and_the_seconds_its_pass_took() -> None:
    told: list[tuple[int, float]] = []
    slow = MicroBatcher(
        lambda items: time.sleep(0.05) or items,
        window_s=0.0,
        on_batch=lambda size, seconds: told.append((size, seconds)),
    )
    slow.start()
    assert await slow.submit("x") == "x"
    await slow.stop()
    [(size, seconds)] = told
    assert size == 1 and 0.05 <= seconds < 5.0  # the pass's time, not a clock reading


def test_micro_batcher_started_twice_runs_one_loop_that_stop_ends() -> None:
    asyncio.run(batcher_started_twice_runs_one_loop_that_stop_ends())


async def batcher_started_twice_runs_one_loop_that_stop_ends() -> None:
    """A second start() started a second loop, which stop() (cancelling the last) left
    running; no test started a batcher twice."""
    batcher = MicroBatcher(lambda items: items, window_s=0.0)
    batcher.start()
    batcher.start()
    assert await batcher.submit("x") == "x"
    await batcher.stop()
    await asyncio.sleep(0)
    loops = [task for task in asyncio.all_tasks() if task.get_name() == "micro-batcher"]
    assert loops == []


def test_a_batcher_or_breaker_built_with_settings_that_cannot_work_is_refused() -> None:
    """serve's flags are checked before these are built, but a bench or a program builds
    them itself: no test gave them a setting that cannot work, so taking max_batch 0 (every
    batch empty: no request ever routed, the loop spinning), a negative window, a failure
    threshold of 0 or a negative cool-down passed every test."""
    with pytest.raises(ValueError, match=r"^max_batch must be at least 1$"):
        MicroBatcher(lambda items: items, max_batch=0)
    with pytest.raises(ValueError, match=r"^the batching window must be >= 0 seconds$"):
        MicroBatcher(lambda items: items, window_s=-0.001)
    with pytest.raises(ValueError, match=r"failure threshold must be at least 1$"):
        CircuitBreaker(WORKERS, failure_threshold=0)
    with pytest.raises(ValueError, match=r"cool-down must be >= 0 seconds$"):
        CircuitBreaker(WORKERS, cooldown_s=-0.5)
    assert MicroBatcher(lambda items: items, window_s=0.0, max_batch=1).max_batch == 1
    assert CircuitBreaker(WORKERS, failure_threshold=1, cooldown_s=0.0).cooldown_s == 0.0


class CallThatHangs:
    """A worker's call that hangs until it is cancelled; it notes when it started and when
    its clean-up after the cancel ended (`cleanup_s` long; raising `failure` if given)."""

    def __init__(self, cleanup_s: float = 0.0, failure: Exception | None = None) -> None:
        self.cleanup_s = cleanup_s
        self.failure = failure
        self.started, self.cancelled = asyncio.Event(), asyncio.Event()

    async def __call__(self) -> str:
        self.started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            await asyncio.sleep(self.cleanup_s)  # closing its upstream stream
            self.cancelled.set()
            if self.failure is not None:
                raise self.failure from None
            raise
        return "never"


class ClientThatStays:
    """A request's receive channel whose client never leaves; it notes when a receive() is
    cancelled (the disconnect watcher given up on)."""

    def __init__(self) -> None:
        self.watch_cancelled = asyncio.Event()

    async def receive(self) -> dict[str, str]:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.watch_cancelled.set()
            raise
        return {"type": "http.disconnect"}


def test_a_handler_cancelled_cancels_its_work_and_a_request_ended_stops_its_watcher() -> None:
    """until_disconnected (a chat request's routing and worker call): no test cancelled the
    handler itself (a shutdown's forced quit) or looked for its disconnect watcher after the
    work ended, so leaving the worker's call running on for nobody, or the watcher waiting
    until the connection closed (one task more per request on a keep-alive connection),
    passed every test."""
    asyncio.run(handler_cancelled_cancels_its_work_and_a_request_ended_stops_its_watcher())


async def handler_cancelled_cancels_its_work_and_a_request_ended_stops_its_watcher() -> None:
    call = CallThatHangs()
    handler = asyncio.create_task(until_disconnected(ClientThatStays(), call()))  # type: ignore[arg-type]
    await asyncio.wait_for(call.started.wait(), 5)
    handler.cancel()
    with pytest.raises(asyncio.CancelledError):
        await handler
    assert await set_within(call.cancelled, 5), "the call ran on after its handler was cancelled"

    async def quick_call() -> str:
        return "answer"

    client = ClientThatStays()
    assert await until_disconnected(client, quick_call()) == "answer"  # type: ignore[arg-type]
    assert await set_within(client.watch_cancelled, 5), "the watcher outlived its request"


class ClientThatLeaves:
    """A request's receive channel that gives its `first` messages (a body's last chunk),
    then says the client left once `leaving` is set."""

    def __init__(self, leaving: asyncio.Event, first: tuple[dict[str, object], ...] = ()) -> None:
        self.leaving = leaving
        self.first = list(first)

    async def receive(self) -> dict[str, object]:
        if self.first:
            return self.first.pop(0)
        await self.leaving.wait()
        return {"type": "http.disconnect"}


def test_a_message_that_is_not_a_disconnect_leaves_the_work_running() -> None:
    """An ASGI server may still give a request's body message (its last, empty chunk) to a
    receive() after the body was read; no test gave one, so a watcher taking any message
    for the client's leaving, or any message but a disconnect, passed every test."""

    async def quick_call() -> str:
        await asyncio.sleep(0.05)
        return "answer"

    body_end = {"type": "http.request", "body": b"", "more_body": False}
    client = ClientThatLeaves(asyncio.Event(), first=(body_end,))
    work = until_disconnected(client, quick_call())  # type: ignore[arg-type]
    assert asyncio.run(asyncio.wait_for(work, 5)) == "answer"


@pytest.mark.parametrize("fails", [False, True], ids=["cancelled", "failing-when-cancelled"])
def test_a_client_leaving_is_given_up_on_once_its_cancelled_work_has_ended(fails: bool) -> None:
    """until_disconnected awaits the work it cancelled when the client left, so the work's
    own clean-up (dispatch._open closing the upstream stream and freeing the worker's
    circuit probe, while the loop turns) is done before the request is logged as
    client_disconnected and answered 499; a clean-up that fails is still the client's
    leaving, not the request's error. No test waited for a clean-up or failed one, so not
    awaiting the cancelled work, or raising the failure, passed every test."""
    asyncio.run(client_leaving_is_given_up_on_once_its_cancelled_work_has_ended(fails))


async def client_leaving_is_given_up_on_once_its_cancelled_work_has_ended(fails: bool) -> None:
    """Waited for without cancelling it (asyncio.wait, not wait_for): a wait_for's timeout
    cancelled the work itself, so until_disconnected not cancelling it (awaiting the call
    that hangs until its timeout) passed every test, 5 s late."""
    broke = ConnectionResetError("the upstream stream broke as it closed")
    call = CallThatHangs(cleanup_s=0.01, failure=broke if fails else None)
    work = asyncio.ensure_future(until_disconnected(ClientThatLeaves(call.started), call()))  # type: ignore[arg-type]
    await asyncio.wait({work}, timeout=5)
    if not work.done():
        work.cancel()
        pytest.fail("the work was not cancelled when its client left")
    with pytest.raises(ClientDisconnectedError):
        work.result()
    assert call.cancelled.is_set(), "given up on before the cancelled call had cleaned up"


def test_a_shutdown_cancel_during_a_left_clients_clean_up_ends_it_as_the_clients_leaving() -> None:
    """The server's shutdown cancelling a handler (uvicorn, at its graceful timeout) while the
    work of a client that left cleans up is passed on to that work, whose clean-up ends at
    once, and the handler ends with it as the client's leaving (a 499 client_disconnected:
    the client left first, and a 503 would reach nobody). The cancel is not re-raised, but
    that costs nothing: a task awaiting another is woken only once that one ends. Awaiting
    the work shielded (the handler given up on while the work still ran, unawaited) passed
    every test."""
    asyncio.run(shutdown_cancel_during_a_left_clients_clean_up())


async def shutdown_cancel_during_a_left_clients_clean_up() -> None:
    call = CallThatHangs(cleanup_s=30)
    work_ended = asyncio.Event()

    async def noted_call() -> str:
        try:
            return await call()
        finally:
            work_ended.set()

    handler = asyncio.ensure_future(
        until_disconnected(ClientThatLeaves(call.started), noted_call())
    )  # type: ignore[arg-type]
    await asyncio.wait_for(call.started.wait(), 5)
    await asyncio.sleep(0.2)  # the client has left: its work is cleaning up (30 s)
    handler.cancel()
    await asyncio.wait({handler}, timeout=5)
    assert handler.done(), "the handler waited out its work's clean-up after the shutdown's cancel"
    assert work_ended.is_set(), "the handler ended while its work still ran"
    assert not call.cancelled.is_set()  # its clean-up was cut short by the cancel
    with pytest.raises(ClientDisconnectedError):
        handler.result()


def test_work_ended_as_its_client_left_is_answered() -> None:
    """Work that ended in the same turn as the client's leaving was seen is answered (its
    worker answered and was paid: the decision log says ok), not given up on: taking the
    watcher's end over the work's passed every test."""
    asyncio.run(work_ended_as_its_client_left_is_answered())


async def work_ended_as_its_client_left_is_answered() -> None:
    async def quick_call() -> str:
        return "answer"

    left = asyncio.Event()
    left.set()
    work = until_disconnected(ClientThatLeaves(left), quick_call())  # type: ignore[arg-type]
    assert await asyncio.wait_for(work, 5) == "answer"


async def set_within(event: asyncio.Event, timeout_s: float) -> bool:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), timeout_s)
    return event.is_set()


def test_circuit_breaker_states() -> None:
    now = [0.0]
    breaker = CircuitBreaker(["a", "b"], failure_threshold=2, cooldown_s=10, clock=lambda: now[0])
    breaker.record_failure("a")
    assert breaker.acquire("a") and breaker.state("a") == "closed"
    breaker.record_success("a")  # a success resets the count
    breaker.record_failure("a")
    assert breaker.state("a") == "closed"
    breaker.record_failure("a")
    assert breaker.state("a") == "open" and not breaker.acquire("a")
    assert breaker.retry_after_s(["a"]) == 10
    now[0] = 9.9
    assert not breaker.acquire("a")
    now[0] = 10.0
    assert breaker.state("a") == "half_open"
    assert breaker.acquire("a")  # the one probe
    assert not breaker.acquire("a")  # nobody else meanwhile
    breaker.record_failure("a")  # the probe failed: open again, a new cool-down
    assert breaker.state("a") == "open"
    now[0] = 20.0
    assert breaker.acquire("a")
    breaker.release("a", "probe")  # the probe's client left: someone else may probe
    assert breaker.acquire("a")
    breaker.record_success("a")
    assert breaker.state("a") == "closed" and breaker.acquire("a")
    assert breaker.snapshot()["a"]["times_opened"] == 2
    assert breaker.state("b") == "closed"


@pytest.mark.parametrize("outcome", ["busy", "rate_limit"])
def test_a_busy_or_rate_limited_call_gives_the_circuit_no_verdict(outcome: str) -> None:
    """A worker that was busy (no free slot) or rate-limited by its provider did not answer,
    nor fail: no test gave such a call to a circuit counting failures or half-open, so
    taking it as a success (a busy probe closing the circuit of a worker no call reached,
    or resetting its failures in a row) passed every test. It frees the probe, if the call
    held it, and leaves the rest as it is."""
    now = [0.0]
    breaker = CircuitBreaker(WORKERS, failure_threshold=2, cooldown_s=10, clock=lambda: now[0])
    dispatcher = unstarted_dispatcher(breaker)
    worker = WORKERS[0]
    breaker.record_failure(worker, "call")
    dispatcher._record(Attempt(worker, outcome, "not taken", permit="call"))
    assert breaker.snapshot()[worker]["consecutive_failures"] == 1
    breaker.record_failure(worker, "call")
    now[0] = 10.0
    assert breaker.acquire(worker) == "probe"
    dispatcher._record(Attempt(worker, outcome, "not taken", permit="probe"))
    assert breaker.state(worker) == "half_open"
    assert breaker.acquire(worker) == "probe"  # freed: the next request probes


def test_a_stream_timed_out_after_it_had_a_slot_is_a_timeout_not_busy() -> None:
    """A stream's first chunk not come by the call's deadline is busy only when the call
    never had one of the worker's slots: no test timed out a stream that had one, so calling
    every such timeout busy (no verdict on the worker, an INFO note) passed every test."""
    dispatcher = unstarted_dispatcher(CircuitBreaker(WORKERS))
    started = time.perf_counter()
    for had_slot, outcome in ((True, "timeout"), (False, "busy")):
        attempt = dispatcher._stream_attempt(WORKERS[0], TimeoutError(), had_slot, started, "call")
        assert attempt.outcome == outcome


def test_a_stream_that_ends_before_its_first_chunk_goes_to_the_next_worker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A worker's stream that ends without a chunk (closed cleanly at once: a proxy in front
    of it restarting) is the worker's failure, and the next worker answers: no test had one,
    so taking it as the request's fault (the client's 400 worker_rejected_request, no other
    worker tried) passed every test."""
    dispatcher = unstarted_dispatcher(CircuitBreaker(WORKERS))
    first, second = WORKERS[:2]

    async def stream_chat(worker: str, *_: object, **__: object) -> AsyncIterator[dict]:
        if worker == second:
            yield {"choices": []}

    monkeypatch.setattr(dispatcher.pool, "stream_chat", stream_chat)
    opened = asyncio.run(dispatcher.open_stream([first, second], user("hi"), {}))
    assert opened.worker == second
    assert [(a.worker, a.outcome) for a in opened.attempts] == [(first, "server"), (second, "ok")]
    assert "the stream ended before any chunk" in (opened.attempts[0].message or "")


def test_a_local_worker_is_known_to_refuse_a_conversation_only_with_no_larger_a_context() -> None:
    """A conversation refused as too long by a local worker is refused too by a worker down
    on the same GGUF with no larger an n_ctx (then the client's 400, not a retriable 5xx).
    Only the llama.cpp integration tests had such a pair, so taking an equal n_ctx as
    larger passed every other test."""
    local = {"small": 512, "same": 512, "large": 1024}
    workers = [
        WorkerConfig(id=worker, model="m", local={"gguf": "embedded:smollm2", "n_ctx": n_ctx})
        for worker, n_ctx in local.items()
    ]
    remote = WorkerConfig(id="remote", model="m", base_url="http://127.0.0.1:9/v1")
    pool = WorkerPool(PoolConfig(workers=[*workers, remote]))
    ids = [*local, "remote"]
    dispatcher = Dispatcher(pool, CircuitBreaker(ids), Metrics(ids), Redactor([]))
    assert dispatcher.would_refuse_too("same", ["small"])
    assert dispatcher.would_refuse_too("small", ["large"])
    assert not dispatcher.would_refuse_too("large", ["small"])
    assert not dispatcher.would_refuse_too("remote", ["small"])


def test_a_busy_local_worker_is_said_to_take_one_call_at_a_time() -> None:
    """A local worker is sent one call at a time whatever its max_concurrency, so its busy
    message says that, and not to raise its max_concurrency (which would change nothing), as
    a remote worker's does: only a remote worker was ever busy in a test, so giving every
    worker the remote's message passed every test."""
    local = WorkerConfig(id="local", model="m", local={"gguf": "embedded:smollm2"})
    remote = WorkerConfig(
        id="remote", model="m", base_url="http://127.0.0.1:9/v1", max_concurrency=3
    )
    pool = WorkerPool(PoolConfig(workers=[local, remote]))
    ids = ["local", "remote"]
    dispatcher = Dispatcher(pool, CircuitBreaker(ids), Metrics(ids), Redactor([]))
    local_busy, remote_busy = dispatcher.busy_message("local"), dispatcher.busy_message("remote")
    assert "answers one request at a time" in local_busy and "raise its timeout_s" in local_busy
    assert "max_concurrency taken" not in local_busy
    assert "all 3 of its max_concurrency taken" in remote_busy
    assert "raise its max_concurrency or timeout_s" in remote_busy


def unstarted_dispatcher(breaker: CircuitBreaker) -> Dispatcher:
    """A dispatcher over a pool of WORKERS that is not started (no call is made)."""
    pool = WorkerPool(PoolConfig(workers=[
        WorkerConfig(id=worker, model="m", base_url="http://127.0.0.1:9/v1") for worker in WORKERS
    ]))  # fmt: skip
    return Dispatcher(pool, breaker, Metrics(WORKERS), Redactor([]))


def test_a_rate_limited_worker_skipped_while_half_open_is_probed_once_its_limit_ends() -> None:
    """A worker skipped for its provider's rate limit must not take its circuit's probe:
    no test skipped a half-open one, so taking the probe first and then skipping the
    worker (the probe never given back: the worker never called again, its circuit
    half-open for good) passed every test."""
    now = [0.0]
    breaker = CircuitBreaker(WORKERS, failure_threshold=1, cooldown_s=10, clock=lambda: now[0])
    dispatcher = unstarted_dispatcher(breaker)
    worker = WORKERS[0]
    breaker.record_failure(worker, "call")
    now[0] = 10.0
    assert breaker.acquire(worker) == "probe"
    breaker.rate_limited(worker, 15.0, "probe")  # the probe's 429: Retry-After 5 s
    skipped: list[Attempt] = []
    assert dispatcher._may_call(worker, skipped) is None
    assert [attempt.outcome for attempt in skipped] == ["rate_limit"]
    now[0] = 15.0
    assert dispatcher._may_call(worker, []) == "probe"


def test_a_rate_limited_worker_is_skipped_to_the_end_of_its_limit_not_before() -> None:
    """Every test asked a rate-limited worker again after its whole Retry-After or well
    within it, so skipping it only while more than half a second of its limit was left (its
    provider then answering one more 429) passed them all."""
    now = [0.0]
    breaker = CircuitBreaker(WORKERS, clock=lambda: now[0])
    dispatcher = unstarted_dispatcher(breaker)
    worker = WORKERS[0]
    breaker.rate_limited(worker, 5.0, "call")  # a 429's Retry-After of 5 s
    now[0] = 4.9
    skipped: list[Attempt] = []
    assert dispatcher._may_call(worker, skipped) is None
    assert [attempt.outcome for attempt in skipped] == ["rate_limit"]
    assert not dispatcher.takes_request(worker)  # /health's count
    now[0] = 5.0
    assert dispatcher._may_call(worker, []) == "call"
    assert dispatcher.takes_request(worker)


@pytest.mark.parametrize("first_read", [True, False])
def test_health_reads_each_workers_process_and_limit_once(
    monkeypatch: pytest.MonkeyPatch, first_read: bool
) -> None:
    """/health read each worker's is_alive for its `alive` and again for its status (and
    its rate limit's clock for rate_limited_for_s and again for the status): a local
    worker's process ending between the two reads (or its limit ending) gave an answer at
    odds with itself, every worker alive and the status degraded, or a worker not alive
    and the status ok. Each is read once now. The reads are stand-ins that change at each
    call: a process ending between two reads microseconds apart cannot be timed here."""
    reads = {worker: 0 for worker in WORKERS}

    def is_alive(worker: str) -> bool:
        reads[worker] += 1
        return first_read if reads[worker] == 1 else not first_read

    now = [4.9]

    def clock() -> float:
        now[0] += 0.05  # the limits below end at the second read
        return now[0]

    breaker = CircuitBreaker(WORKERS, clock=clock)
    dispatcher = unstarted_dispatcher(breaker)
    monkeypatch.setattr(dispatcher.pool, "is_alive", is_alive)
    for worker in WORKERS:
        breaker.rate_limited(worker, 5.0, "call")
    router = SimpleNamespace(worker_ids=list(WORKERS), opt_out=[])
    server = SimpleNamespace(
        breaker=breaker, pool=dispatcher.pool, dispatcher=dispatcher, router=router,
        settings=SimpleNamespace(model_name=MODEL),
    )  # fmt: skip
    body = health_body(server)  # type: ignore[arg-type]
    assert reads == {worker: 1 for worker in WORKERS}
    workers = body["workers"]
    able = [w for w in WORKERS if workers[w]["alive"] and workers[w]["rate_limited_for_s"] == 0]
    expected = "ok" if len(able) == len(WORKERS) else "degraded" if able else "unavailable"
    assert body["status"] == expected
    assert workers[WORKERS[0]]["rate_limited_for_s"] == 0.1  # the first read: 0.05 s left


def test_health_reads_each_workers_circuit_once() -> None:
    """/health read each worker's circuit for its shown state (the breaker's snapshot) and
    again for its status (takes_request), each reading the clock: a cool-down ending
    between the two showed every circuit open with the status ok (or, the probe taken
    back between them, half_open with unavailable). Each circuit is read once now. The
    clock is a stand-in that moves at each read: microseconds between two reads cannot be
    timed here."""
    now = [0.0]

    def clock() -> float:
        now[0] += 0.01
        return now[0]

    breaker = CircuitBreaker(WORKERS, failure_threshold=1, cooldown_s=1.0, clock=clock)
    for worker in WORKERS:
        breaker.record_failure(worker)
        assert breaker.state(worker) == "open"
    dispatcher = unstarted_dispatcher(breaker)
    router = SimpleNamespace(worker_ids=list(WORKERS), opt_out=[])
    server = SimpleNamespace(
        breaker=breaker, pool=dispatcher.pool, dispatcher=dispatcher, router=router,
        settings=SimpleNamespace(model_name=MODEL),
    )  # fmt: skip
    seen: list[tuple[list[str], str]] = []
    while not seen or seen[-1][0] != ["half_open"] * len(WORKERS):
        body = health_body(server)  # type: ignore[arg-type]
        circuits = [body["workers"][w]["circuit"] for w in WORKERS]
        seen.append((circuits, body["status"]))
    for circuits, status in seen:
        usable = circuits.count("half_open")
        expected = "ok" if usable == len(WORKERS) else "degraded" if usable else "unavailable"
        assert status == expected, (circuits, status)


def test_failures_of_calls_started_before_the_circuit_opened_do_not_open_it_again() -> None:
    """Concurrent requests to a failing worker all fail, one after another: each failure
    after the one that opened its circuit opened it again, so 16 requests in flight made
    /health's times_opened 14 for one outage, and each late failure (a call timing out
    long after the others) started the cool-down over. An open circuit stays as opened
    until its cool-down ends; a failure then (of the probe) opens it again."""
    now = [0.0]
    breaker = CircuitBreaker(["a"], failure_threshold=2, cooldown_s=10, clock=lambda: now[0])
    assert all(breaker.acquire("a") for _ in range(5))  # five calls in flight, closed
    breaker.record_failure("a")
    breaker.record_failure("a")
    assert breaker.state("a") == "open"
    now[0] = 6.0
    for _ in range(3):  # the other three calls fail late
        breaker.record_failure("a")
    assert breaker.snapshot()["a"]["times_opened"] == 1
    assert breaker.retry_after_s(["a"]) == 4.0
    now[0] = 10.0
    assert breaker.acquire("a")  # the probe, on time
    breaker.record_failure("a")
    assert breaker.state("a") == "open" and breaker.snapshot()["a"]["times_opened"] == 2


def test_a_success_of_a_call_started_before_the_circuit_opened_does_not_close_it() -> None:
    """A slow call let through while the worker's circuit was closed, answering after
    other calls' failures opened it, closed the circuit again: requests went back to a
    worker that was failing, and a half-open circuit lost its one-probe guard. Only the
    probe, let through once the circuit is half-open, closes it now."""
    now = [0.0]
    breaker = CircuitBreaker(["a"], failure_threshold=2, cooldown_s=10, clock=lambda: now[0])
    slow, other = breaker.acquire("a"), breaker.acquire("a")
    assert (slow, other) == ("call", "call")
    breaker.record_failure("a")
    breaker.record_failure("a")
    assert breaker.state("a") == "open"
    breaker.record_success("a", "call")  # the slow call answers while the circuit is open
    assert breaker.state("a") == "open" and breaker.retry_after_s(["a"]) == 10
    now[0] = 10.0
    assert breaker.acquire("a") == "probe"
    breaker.record_success("a", "call")  # another slow call, while the probe is out
    assert breaker.state("a") == "half_open" and breaker.acquire("a") is None
    breaker.record_success("a", "probe")
    assert breaker.state("a") == "closed" and breaker.acquire("a") == "call"
    breaker.record_failure("a")
    breaker.record_success("a", "call")  # closed: a success resets the count
    breaker.record_failure("a")
    assert breaker.state("a") == "closed"


def test_a_failure_of_a_call_started_before_the_circuit_opened_leaves_a_half_open_one() -> None:
    """A slow call let through while the circuit was closed, failing once its cool-down had
    ended and the probe was out, opened the circuit again: the cool-down started over on
    news older than the probe, and the probe's guard was dropped while it was out. Like a
    late success, it now leaves the half-open circuit as it is; the probe decides."""
    now = [0.0]
    breaker = CircuitBreaker(["a"], failure_threshold=2, cooldown_s=10, clock=lambda: now[0])
    assert (breaker.acquire("a"), breaker.acquire("a"), breaker.acquire("a")) == ("call",) * 3
    breaker.record_failure("a", "call")
    breaker.record_failure("a", "call")
    assert breaker.state("a") == "open"
    now[0] = 10.0
    assert breaker.acquire("a") == "probe"
    breaker.record_failure("a", "call")  # the slow call fails while the probe is out
    assert breaker.state("a") == "half_open" and breaker.snapshot()["a"]["times_opened"] == 1
    assert breaker.acquire("a") is None  # still the one probe
    breaker.record_failure("a", "probe")
    assert breaker.state("a") == "open" and breaker.retry_after_s(["a"]) == 10


def test_a_failed_probe_is_no_longer_shown_out() -> None:
    """A half-open circuit's probe that failed opens the circuit again and is over: /health
    went on showing probe_in_flight true on the open circuit had its failure left the
    probe marked (no test read it after a failed probe; the cool-down's end clears it)."""
    now = [0.0]
    breaker = CircuitBreaker(["a"], failure_threshold=1, cooldown_s=10, clock=lambda: now[0])
    breaker.record_failure("a", "call")
    now[0] = 10.0
    assert breaker.acquire("a") == "probe" and breaker.snapshot()["a"]["probe_in_flight"]
    breaker.record_failure("a", "probe")
    assert breaker.snapshot()["a"] == {
        "circuit": "open", "probe_in_flight": False, "consecutive_failures": 2, "times_opened": 2,
    }  # fmt: skip


def test_the_retry_after_of_open_circuits_is_the_first_to_half_open() -> None:
    now = [0.0]
    breaker = CircuitBreaker(["a", "b"], failure_threshold=1, cooldown_s=10, clock=lambda: now[0])
    breaker.record_failure("a", "call")
    now[0] = 4.0
    breaker.record_failure("b", "call")
    assert breaker.retry_after_s(["a", "b"]) == 6.0  # a half-opens first
    assert breaker.retry_after_s(["b"]) == 10.0


def test_a_shorter_retry_after_does_not_cut_a_workers_rate_limit_short() -> None:
    """Two calls in flight to a worker both get a 429: the one answered later, with a
    shorter Retry-After, leaves the longer wait the provider asked for in place."""
    now = [0.0]
    breaker = CircuitBreaker(["a"], clock=lambda: now[0])
    breaker.rate_limited("a", 30.0, "call")
    breaker.rate_limited("a", 5.0, "call")
    assert breaker.limited_for("a") == 30.0
    breaker.rate_limited("a", None, "call")  # a 429 without Retry-After: the wait stays
    now[0] = 29.0
    assert breaker.limited_for("a") == 1.0 and breaker.state("a") == "closed"
    now[0] = 31.0
    assert breaker.limited_for("a") == 0.0


runner = CliRunner()


def serve_args() -> list[str]:
    """`serve` on a port free now: these commands stop before listening, but check first
    that they could, so a server on the default port 8000 (a developer's own `fugu-lite
    serve`) failed them all with "cannot listen on 127.0.0.1:8000"."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return ["serve", "--port", str(probe.getsockname()[1])]


def test_a_streams_estimated_usage_is_four_characters_a_prompt_token_and_a_token_a_chunk() -> None:
    """The usage of a stream whose worker reported none (llama.cpp's server), which its
    cost and the token metrics are counted from: ~4 characters of the prompt's texts as
    JSON strings per prompt token, at least one, and one token per content chunk (only the
    completion tokens were ever checked: any prompt estimate passed)."""
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "x" * 30}]
    # '"be brief"' and '"xx...x"': 10 + 32 characters, 10 prompt tokens
    assert estimated_usage(messages, 3, tools=[]) == {
        "prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13, "fugu_estimated": True,
    }  # fmt: skip
    assert (
        estimated_usage([{"role": "assistant", "content": None}], 0, tools=[])["prompt_tokens"] == 1
    )
    # null content (an assistant's tool-call turn) is no text: '""', not 'null' (32 + 2
    # characters, 8 tokens, where 32 + 4 made 9; no test told them apart)
    call_turn = [messages[1], {"role": "assistant", "content": None}]
    assert estimated_usage(call_turn, 0, tools=[])["prompt_tokens"] == 8


def test_a_streams_estimated_prompt_tokens_count_tool_calls_and_tool_schemas() -> None:
    """A tool conversation's estimate counted only each message's content: an assistant
    turn's tool_calls or deprecated function_call and the request's tools schemas were
    left out, so it ran low. Each is now counted as JSON, as content is."""
    call = {"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{}"}}
    turns = [{"role": "user", "content": "x" * 38}, {"role": "assistant", "content": None}]
    bare = estimated_usage(turns, 0, tools=[])["prompt_tokens"]  # 40 + 2 characters
    calls = [turns[0], {**turns[1], "tool_calls": [call]}]
    function_call = [turns[0], {**turns[1], "function_call": call["function"]}]
    tools = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]
    assert bare == 10
    # a null tool_calls (a program's own dict; the server leaves nulls out) is no call
    null_calls = [turns[0], {**turns[1], "tool_calls": None}]
    assert estimated_usage(null_calls, 0, tools=[])["prompt_tokens"] == bare  # not 'null': 11
    assert (
        estimated_usage(calls, 0, tools=[])["prompt_tokens"] == (42 + len(json.dumps([call]))) // 4
    )
    assert (
        estimated_usage(function_call, 0, tools=[])["prompt_tokens"]
        == (42 + len(json.dumps(call["function"]))) // 4
    )
    assert (
        estimated_usage(turns, 0, tools=tools)["prompt_tokens"]
        == (42 + len(json.dumps(tools))) // 4
    )


def test_a_streams_estimated_prompt_tokens_count_a_parts_text_and_a_fixed_amount_an_image() -> None:
    """Content parts were counted as their JSON: an image part's base64 data URL counted as
    text, so a screenshot of 40 kB made a prompt of ~10,000 tokens. Text and refusal parts
    count their text, as a string's content does; an image (or audio, or a file) part 85
    tokens, OpenAI's price of a low-detail image, whatever its URL's length."""

    def image(data: str) -> dict[str, Any]:
        return {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{data}"}}

    def prompt_tokens(content: list[dict[str, Any]], role: str = "user") -> int:
        return estimated_usage([{"role": role, "content": content}], 0, tools=[])["prompt_tokens"]

    text = {"type": "text", "text": "x" * 38}  # '"xx...x"': 40 characters
    assert prompt_tokens([text]) == 10
    assert prompt_tokens([text, image("A" * 40_000)]) == (40 + 85 * 4) // 4
    assert prompt_tokens([text, image("A" * 40_000)]) == prompt_tokens([text, image("A")])
    audio = {"type": "input_audio", "input_audio": {"data": "A" * 9_000, "format": "wav"}}
    assert prompt_tokens([audio]) == 85
    refusal = {"type": "refusal", "refusal": "x" * 38}
    assert prompt_tokens([refusal], role="assistant") == 10


def test_a_chunk_whose_choice_has_no_delta_counts_no_token() -> None:
    """The pool passes on a choice without a delta, or with `"delta": null` (a last chunk
    holding only its finish_reason): counting it must not fail on it (no test sent one:
    reading choice["delta"] passed), and it streams no token, as a delta with text does."""
    no_delta = {"choices": [{"index": 0, "finish_reason": "stop"}]}
    null_delta = {"choices": [{"index": 0, "delta": None, "finish_reason": "stop"}]}
    assert has_content(no_delta) == has_content(null_delta) == 0
    assert has_content({"choices": [{"index": 0, "delta": {"content": "hi"}}]}) == 1


def test_serve_command_refuses_bad_flags_before_loading_anything(
    checkpoint: Path, tmp_path: Path
) -> None:
    def serve_with(*flags: str) -> str:
        result = runner.invoke(cli_app, [*serve_args(), "--checkpoint", str(checkpoint), *flags])
        assert result.exit_code == 2, result.output
        return " ".join(result.output.split())

    assert "--log-level 'bogus' is not a log level" in serve_with("--log-level", "bogus")
    assert "--model-name is empty" in serve_with("--model-name", " ")
    # --host "$HOST" with HOST unset was refused as ':8000 (Name or service not known)'
    assert "--host is empty; give the interface to listen on" in serve_with("--host", "")
    # --api-keys-env "$VAR" with VAR unset served with no key asked: anyone could call (the
    # bad --log-level stops a serve that would take it, before it starts the embedded pool)
    assert (
        "is empty (an unset shell variable?); give the NAME of the variable holding the keys"
        in serve_with("--api-keys-env", "", "--log-level", "bogus")
    )
    assert "--log-requests" in serve_with("--log-requests", str(tmp_path))  # a folder
    assert "--cors-origin 'localhost:3000' is not an origin" in serve_with(
        "--cors-origin", "localhost:3000"
    )
    for flag, value in (("--max-body-bytes", "0"), ("--port", "70000"), ("--torch-threads", "-2"),
                        ("--max-batch-size", "0"), ("--breaker-failures", "0")):  # fmt: skip
        assert serve_with(flag, value).startswith(f"error: {flag} {value}: Input should be")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert f"cannot listen on 127.0.0.1:{port}" in serve_with("--port", str(port))


def test_a_pool_lacking_a_routers_worker_is_refused_and_one_with_more_is_warned_of(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """check_workers_match was read only by `serve` runs whose wrong acceptance of a pool
    lacking a router's worker left the server listening: a mutant passing it was caught by
    the test timing out, not by an assert. Each case is read here at once: a pool lacking a
    worker is refused naming it, one with a worker more is warned of, naming it, and a pool
    of exactly the router's workers passes without a word."""

    def pool_of(*ids: str) -> PoolConfig:
        return PoolConfig(
            workers=[WorkerConfig(id=i, model="m", base_url="http://127.0.0.1:9/v1") for i in ids]
        )

    with pytest.raises(ValueError, match=r"the pool has no worker \['coder'\]"):
        check_workers_match(WORKERS, pool_of("cheap-small", "mathematician", "extra"))
    with caplog.at_level(logging.WARNING, logger="fugu_lite.server.app"):
        check_workers_match(WORKERS, pool_of(*WORKERS))
        assert not caplog.records
        check_workers_match(WORKERS, pool_of("extra", *WORKERS))
    [warning] = [record.getMessage() for record in caplog.records]
    assert warning == "pool workers ['extra'] are unknown to the router and never chosen"


def test_serve_command_refuses_bad_setups_before_listening(
    checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = runner.invoke(cli_app, [*serve_args(), "--checkpoint", str(tmp_path / "nothing")])
    assert missing.exit_code == 2
    assert "not a fugu-lite router checkpoint" in " ".join(missing.output.split())

    pool = tmp_path / "pool.yaml"
    pool.write_text(
        "workers:\n  - {id: alpha, model: a, base_url: 'http://127.0.0.1:9/v1'}\n",
        encoding="utf-8",
    )
    mismatch = runner.invoke(
        cli_app, [*serve_args(), "--checkpoint", str(checkpoint), "--pool", str(pool)]
    )
    assert mismatch.exit_code == 2
    assert "has no worker" in " ".join(mismatch.output.split())

    keyless = tmp_path / "keyless.yaml"
    keyless.write_text(
        "workers:\n"
        + "".join(
            f"  - {{id: {w}, model: m, base_url: 'http://127.0.0.1:9/v1', "
            "api_key_env: FUGU_UNSET_WORKER_KEY}\n"
            for w in WORKERS
        ),
        encoding="utf-8",
    )
    monkeypatch.delenv("FUGU_UNSET_WORKER_KEY", raising=False)
    unset = runner.invoke(
        cli_app, [*serve_args(), "--checkpoint", str(checkpoint), "--pool", str(keyless)]
    )
    assert unset.exit_code == 2
    assert "FUGU_UNSET_WORKER_KEY" in unset.output

    monkeypatch.setenv("FUGU_UNSET_WORKER_KEY", "sk-test-copied-with-its-crlf\r\n")
    with pytest.raises(RuntimeError, match="line break") as crlf:  # serve would listen
        preflight(load_pool_config(keyless))
    assert "copied-with" not in str(crlf.value)

    monkeypatch.delenv("FUGU_NO_SUCH_KEYS", raising=False)
    no_keys = runner.invoke(
        cli_app,
        [*serve_args(), "--checkpoint", str(checkpoint), "--api-keys-env", "FUGU_NO_SUCH_KEYS"],
    )
    assert no_keys.exit_code == 2
    assert "FUGU_NO_SUCH_KEYS" in no_keys.output


def test_serve_command_refuses_short_or_missing_api_keys_before_listening(
    checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A pool the checkpoint does not match: keys wrongly accepted would stop `serve` there
    # ("has no worker") rather than let it listen, so this test cannot hang.
    pool = tmp_path / "pool.yaml"
    pool.write_text(
        "workers:\n  - {id: alpha, model: a, base_url: 'http://127.0.0.1:9/v1'}\n",
        encoding="utf-8",
    )

    def serve_with(*options: str) -> tuple[int, str]:
        result = runner.invoke(
            cli_app,
            [*serve_args(), "--checkpoint", str(checkpoint), "--pool", str(pool), *options],
            env={"COLUMNS": "1000"},  # paths in the messages stay on one line
        )
        return result.exit_code, result.output

    short = tmp_path / "short-keys.txt"
    short.write_text(f"{ENDPOINT_KEY}\nzq7x5\n", encoding="utf-8")
    code, output = serve_with("--api-keys-file", str(short))
    assert code == 2
    assert "1 API key(s) are shorter than 6 characters" in output
    assert "zq7x5" not in output  # the refusal does not print the key

    monkeypatch.setenv("FUGU_TEST_ENDPOINT_KEYS", f"{ENDPOINT_KEY},abc12")
    code, output = serve_with("--api-keys-env", "FUGU_TEST_ENDPOINT_KEYS")
    assert code == 2 and "shorter than 6 characters" in output

    empty = tmp_path / "empty-keys.txt"
    for text in ("", "\n\n", "# no key yet\n"):
        empty.write_text(text, encoding="utf-8")
        code, output = serve_with("--api-keys-file", str(empty))
        assert code == 2
        assert f"--api-keys-file {empty}: holds no key" in output

    code, output = serve_with("--api-keys-file", str(tmp_path / "no-such-file.txt"))
    assert code == 2 and "no-such-file.txt: cannot read it" in output

    good = tmp_path / "keys.txt"
    good.write_text(f"{ENDPOINT_KEY}\nsk-second-key-abcdef\n", encoding="utf-8")
    code, output = serve_with("--api-keys-file", str(good))
    assert code == 2 and "has no worker" in output  # past the keys, stopped by the tripwire


def test_serve_prints_fugu_lites_own_notes_at_its_log_level(
    capsys: pytest.CaptureFixture[str],
) -> None:
    dispatch = logging.getLogger("fugu_lite.server.dispatch")
    show_package_logs("info")
    show_package_logs("info")  # set up twice (a second serve in one process): one line each
    dispatch.info("worker a: the conversation is longer than its context")
    dispatch.warning("worker b failed: timeout")
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "INFO:     worker a: the conversation is longer than its context",
        "WARNING:  worker b failed: timeout",
    ]
    show_package_logs("warning")
    dispatch.info("hidden")
    dispatch.warning("shown")
    assert capsys.readouterr().err.splitlines() == ["WARNING:  shown"]


def decision(request_id: str) -> DecisionLogEntry:
    return DecisionLogEntry(
        request_id=request_id, model="fugu-lite", prompt_hash="h" * 16, worker_ids=WORKERS,
        probabilities=[1 / len(WORKERS)] * len(WORKERS), chosen=WORKERS[0], worker=WORKERS[0],
        fallback=False, outcome="ok", status=200, attempts=[], stream=False, ranking=WORKERS,
        routing_latency_s=0.001, latency_s=0.01,
    )  # fmt: skip


def test_the_decision_log_holds_a_conversation_only_when_content_logging_is_on(
    tmp_path: Path,
) -> None:
    """The decision log holds no prompt unless the server was started with content logging
    on, whatever its caller hands it: the log's own check was left to the caller, which
    passes none when it is off, so a log writing every conversation it was given passed
    every test."""
    messages = [{"role": "user", "content": "secret plans"}]
    for log_content in (False, True):
        path = tmp_path / f"{log_content}.jsonl"
        log = DecisionLog(path, log_content=log_content)
        log.write(decision("r"), messages)
        log.close()
        [line] = [json.loads(text) for text in path.read_text(encoding="utf-8").splitlines()]
        assert line.get("messages") == (messages if log_content else None)
        assert ("secret plans" in path.read_text(encoding="utf-8")) == log_content


def test_the_decision_log_survives_a_full_disk_whole_and_losing_nothing(tmp_path: Path) -> None:
    """A write that failed half-way (a full disk) left half a line in the decision log, and
    the next decision was appended to it: one line that is no JSON (whatever reads the log
    stops there), and the decisions of the failed write lost. A failed write now leaves the
    file as it was; its decisions are kept and written with the next ones once the disk
    takes them. A file grown past RLIMIT_FSIZE fails as a full disk does (EFBIG)."""
    path = tmp_path / "decisions.jsonl"
    log = DecisionLog(path)
    log.write(decision("before"), None)
    log.flush()
    size = path.stat().st_size
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    ignored = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    try:
        resource.setrlimit(resource.RLIMIT_FSIZE, (size + 100, hard))  # room for a part line
        log.write(decision("while full"), None)
        log.flush()
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, ignored)
    assert path.stat().st_size == size
    log.write(decision("after"), None)
    log.close()
    lines = path.read_text().splitlines()
    assert [json.loads(line)["request_id"] for line in lines] == ["before", "while full", "after"]


def test_the_decision_log_says_once_that_it_drops_decisions_and_then_how_many(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Past MAX_UNWRITTEN decisions kept while the disk was full, every new decision logged
    an error line of its own (one a request, on a disk already full) and no line said how
    many were lost in all. The dropping is said once, and the total once it is written."""
    monkeypatch.setattr(log_module, "MAX_UNWRITTEN", 2)
    path = tmp_path / "decisions.jsonl"
    log = DecisionLog(path)
    log.write(decision("before"), None)
    log.flush()
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    ignored = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    try:
        resource.setrlimit(resource.RLIMIT_FSIZE, (path.stat().st_size, hard))  # a full disk
        for index in range(6):
            log.write(decision(f"while full {index}"), None)
            log.flush()
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, ignored)
    log.write(decision("after"), None)
    log.close()
    lines = [json.loads(line)["request_id"] for line in path.read_text().splitlines()]
    assert lines == ["before", "while full 4", "while full 5", "after"]
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 2 and "the oldest are dropped" in errors[1], errors
    assert "(4 decisions were dropped meanwhile)" in caplog.text, caplog.text


def fillable_disk(
    monkeypatch: pytest.MonkeyPatch, full: bool, on_write: Callable[[], None] = lambda: None
) -> dict[str, bool]:
    """The decision log's disk, full (ENOSPC) while the returned {"full": ...} says so;
    `on_write` runs first at each write."""
    disk = {"full": full}
    real_append = log_module.append_jsonl

    def append(path: Path, rows: list[dict[str, object]]) -> int:
        on_write()
        if disk["full"]:
            raise OSError(28, "No space left on device")
        return real_append(path, rows)

    monkeypatch.setattr(log_module, "append_jsonl", append)
    return disk


def test_the_decision_log_counts_every_decision_dropped_from_one_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Decisions that reach the writer together (concurrent requests on a full disk) are
    dropped together past MAX_UNWRITTEN: each of them is counted, not one per batch."""
    monkeypatch.setattr(log_module, "MAX_UNWRITTEN", 2)
    writing, released = threading.Event(), threading.Event()

    def slow_disk() -> None:
        writing.set()
        released.wait(10)

    disk = fillable_disk(monkeypatch, full=True, on_write=slow_disk)
    path = tmp_path / "decisions.jsonl"
    log = DecisionLog(path)
    log.write(decision("first"), None)
    assert writing.wait(10)  # the writer waits on the disk while five more come
    for index in range(5):
        log.write(decision(f"while full {index}"), None)
    released.set()
    log.flush()
    disk["full"] = False
    log.write(decision("after"), None)
    log.close()
    lines = [json.loads(line)["request_id"] for line in path.read_text().splitlines()]
    assert lines == ["while full 3", "while full 4", "after"]
    assert "(4 decisions were dropped meanwhile)" in caplog.text, caplog.text


def test_a_second_full_disk_is_told_again_with_its_own_count_of_dropped_decisions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A disk full again after the log was written again is said again, and its recovery
    counts only the decisions it dropped itself."""
    monkeypatch.setattr(log_module, "MAX_UNWRITTEN", 1)
    disk = fillable_disk(monkeypatch, full=False)
    path = tmp_path / "decisions.jsonl"
    log = DecisionLog(path)
    for names in (["a", "b"], ["c"]):  # two full disks, the first dropping one decision
        disk["full"] = True
        for name in names:
            log.write(decision(name), None)
            log.flush()
        disk["full"] = False
        log.write(decision(f"after {names[-1]}"), None)
        log.flush()
    log.close()
    lines = [json.loads(line)["request_id"] for line in path.read_text().splitlines()]
    assert lines == ["b", "after b", "c", "after c"]
    assert caplog.text.count("could not append to the decision log") == 2, caplog.text
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        f"the decision log {path} is written again (1 decisions were dropped meanwhile)",
        f"the decision log {path} is written again",
    ]


def test_the_decision_log_is_written_again_where_its_file_or_folder_went(tmp_path: Path) -> None:
    """logrotate moving the file away, or its folder deleted, while the server runs: the
    next decisions go to a new file at the same path."""
    path = tmp_path / "logs" / "decisions.jsonl"
    log = DecisionLog(path)
    log.write(decision("first"), None)
    log.flush()
    path.rename(tmp_path / "rotated.jsonl")
    log.write(decision("after the rotation"), None)
    log.flush()
    assert [json.loads(line)["request_id"] for line in path.read_text().splitlines()] == [
        "after the rotation"
    ]
    path.unlink()
    path.parent.rmdir()
    log.write(decision("after the folder went"), None)
    log.close()
    assert json.loads(path.read_text())["request_id"] == "after the folder went"


def test_the_decision_log_writes_a_decision_made_after_it_closed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A request answered 503 as the server stopped could log its decision after the log
    closed: the line was queued for a thread that had ended, and lost without a word. It is
    written at once now, or its loss logged naming the request."""
    path = tmp_path / "decisions.jsonl"
    log = DecisionLog(path)
    log.write(decision("before"), None)
    log.close()
    log.write(decision("after the close"), None)
    assert [json.loads(line)["request_id"] for line in path.read_text().splitlines()] == [
        "before",
        "after the close",
    ]
    size = path.stat().st_size
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    ignored = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    try:
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, hard))  # a full disk
        log.write(decision("unwritable"), None)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, ignored)
    assert path.stat().st_size == size
    assert "request unwritable was never written" in caplog.text, caplog.text


def test_the_decision_log_says_when_it_could_not_finish_writing_at_close(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """close() gave up waiting for a stalled disk without a word: the process ended and the
    decisions still queued were lost unknown to anyone. Their possible loss is logged now,
    with the wait as it was (a sub-second one was said as "0 s")."""
    writing, stalled = threading.Event(), threading.Event()
    real_append = log_module.append_jsonl

    def stalling_append(path: Path, rows: list[dict[str, object]]) -> int:
        writing.set()
        stalled.wait(10)
        return real_append(path, rows)

    monkeypatch.setattr(log_module, "append_jsonl", stalling_append)
    log = DecisionLog(tmp_path / "decisions.jsonl")
    log.write(decision("stalled"), None)
    assert writing.wait(10)  # the writer thread waits on the disk
    log.write(decision("queued"), None)
    log.close(timeout_s=0.2)
    stalled.set()
    assert "still being written 0.2 s after" in caplog.text, caplog.text
    assert "1 still queued" in caplog.text, caplog.text


def test_a_decision_written_after_a_close_that_timed_out_is_not_truncated_away(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """After close() gave up on a stalled disk, a later decision (a 503 as the server stops)
    was appended at once while the writer thread was still in its own append; that append
    then failing (EIO) truncated the file back to where it began, the later line with it,
    lost without a word. The two appends take turns now: the later line is written, and the
    stalled one's loss is logged."""
    path = tmp_path / "decisions.jsonl"
    writing, stalled = threading.Event(), threading.Event()
    real_fsync = os.fsync

    def stalling_fsync(descriptor: int) -> None:
        if threading.current_thread().name != "fugu-decision-log":
            return real_fsync(descriptor)
        writing.set()
        stalled.wait(10)
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fsync", stalling_fsync)
    log = DecisionLog(path)
    writer = log._thread
    assert writer is not None
    log.write(decision("stalled"), None)
    assert writing.wait(10)  # the writer thread's line is written, not yet synced
    log.close(timeout_s=0.2)
    later = threading.Thread(target=log.write, args=(decision("after the close"), None))
    later.start()
    later.join(0.5)  # it waits for the stalled append now; it did not
    stalled.set()
    later.join(10)
    writer.join(10)
    assert [json.loads(line)["request_id"] for line in path.read_text().splitlines()] == [
        "after the close"
    ]
    assert "1 decisions were never written" in caplog.text, caplog.text


def test_the_decision_log_writes_a_worker_message_holding_half_a_surrogate_pair(
    tmp_path: Path,
) -> None:
    """A worker's error message holding half of a surrogate pair ("\\ud83d": an emoji cut in
    two by a JavaScript gateway) could not be encoded as UTF-8: the writer thread died on
    it, and that decision and every one after it were lost. The half is written as U+FFFD."""
    path = tmp_path / "decisions.jsonl"
    log = DecisionLog(path)
    failed = {"worker": WORKERS[0], "outcome": "client", "message": "bad: \ud83d", "calls": 1}
    log.write(decision("cut emoji").model_copy(update={"attempts": [failed]}), None)
    log.write(decision("next"), None)
    log.close()
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert [line["request_id"] for line in lines] == ["cut emoji", "next"]
    assert lines[0]["attempts"][0]["message"] == "bad: \ufffd"


def serve_with_stdout_on_a_terminal(checkpoint: Path, pool: Path, stderr: Path) -> str:
    """Run `fugu-lite serve` with stdout on a terminal (a pty) and stderr in the file
    `stderr`; ask /health once, stop it with Ctrl-C; what the terminal showed."""
    port = int(serve_args()[-1])
    main, terminal = pty.openpty()
    shown: list[bytes] = []

    def read_terminal() -> None:
        while True:
            try:
                chunk = os.read(main, 4096)
            except OSError:  # every writer closed its end
                return
            if not chunk:
                return
            shown.append(chunk)

    command = [sys.executable, "-m", "fugu_lite", "serve", "--checkpoint", str(checkpoint),
               "--pool", str(pool), "--port", str(port)]  # fmt: skip
    env = {key: value for key, value in os.environ.items() if key != "NO_COLOR"}
    with stderr.open("wb") as error_file:
        child = subprocess.Popen(
            command, stdout=terminal, stderr=error_file, env={**env, "TERM": "xterm"}
        )
    os.close(terminal)
    reader = threading.Thread(target=read_terminal, daemon=True)
    reader.start()
    try:
        with httpx.Client() as client:
            while child.poll() is None:
                try:
                    assert client.get(f"http://127.0.0.1:{port}/health").status_code == 200
                    break
                except httpx.TransportError:
                    time.sleep(0.2)
    finally:
        child.send_signal(signal.SIGINT)
        child.wait(timeout=60)
        reader.join(timeout=10)
        os.close(main)
    return b"".join(shown).decode("utf-8", "replace")


@pytest.mark.timeout(300)  # a real `serve` starting: torch, the router, uvicorn
def test_serve_writes_no_color_codes_into_its_log_file_from_a_terminal(
    checkpoint: Path, stubs: Stubs, tmp_path: Path
) -> None:
    """uvicorn colored serve's log lines whenever stdout was a terminal, whatever stderr
    was: `serve 2> serve.log` in a terminal wrote escape codes into serve.log."""
    pool = tmp_path / "pool.yaml"
    workers = [{"id": worker, "model": worker, "base_url": stub.base_url}
               for worker, stub in stubs.workers.items()]  # fmt: skip
    pool.write_text(json.dumps({"workers": workers}), encoding="utf-8")
    log = tmp_path / "serve.log"
    shown = serve_with_stdout_on_a_terminal(checkpoint, pool, log)
    logged = log.read_text(encoding="utf-8")
    assert "Uvicorn running on" in logged and "\x1b[" not in logged, logged
    assert "GET /health HTTP/1.1" in shown, shown  # the access line, on the terminal


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_serve_logs_without_colors_on_a_terminal_with_no_color(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """NO_COLOR=1 (no-color.org) changed nothing: serve's lines were colored on a terminal."""
    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    monkeypatch.setattr("sys.stdout", Terminal())
    monkeypatch.delenv("NO_COLOR", raising=False)
    show_package_logs("info")
    logging.getLogger("fugu_lite.server.dispatch").warning("worker b failed: timeout")
    assert "\x1b[" in terminal.getvalue()  # colored on a terminal, as before
    monkeypatch.setenv("NO_COLOR", "1")
    show_package_logs("info")
    logging.getLogger("fugu_lite.server.dispatch").warning("worker c failed: timeout")
    assert terminal.getvalue().splitlines()[-1] == "WARNING:  worker c failed: timeout"
    formatters = uvicorn_log_config()["formatters"]
    assert not formatters["default"]["use_colors"] and not formatters["access"]["use_colors"]


@pytest.mark.timeout(300)  # a real `serve` starting: torch, the router, uvicorn
@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_second_ctrl_c_still_answers_and_logs_the_requests_in_flight(
    checkpoint: Path, stubs: Stubs, tmp_path: Path, stop_signal: signal.Signals
) -> None:
    """A second Ctrl-C (uvicorn's force quit, while it waited for a slow request) skipped
    the app's shutdown: the request was neither answered nor given its decision log line
    (or only by luck), and the lifespan's cancellation printed a traceback. It is answered
    503 and logged now, and the app shut down without a traceback. A second SIGTERM did not
    end the wait at all (uvicorn forces its quit on SIGINT only): it does now, as said in
    the log."""
    for stub in stubs.workers.values():
        stub.mode = "hang"
    log, stderr = tmp_path / "decisions.jsonl", tmp_path / "serve.log"
    answers: list[httpx.Response] = []

    def ask(url: str) -> None:
        body = {"model": MODEL, "messages": user("hi")}
        with contextlib.suppress(httpx.TransportError):
            answers.append(httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120))

    flags = ("--log-requests", str(log), "--graceful-timeout-s", "120")
    with running_serve(SERVE, checkpoint, stubs, tmp_path, *flags) as (child, url):
        asking = threading.Thread(target=ask, args=(url,))
        asking.start()
        assert wait_until(lambda: any(s.in_flight for s in stubs.workers.values()), 30)
        child.send_signal(stop_signal)
        assert wait_until(lambda: "Waiting for connections" in stderr.read_text(), 30)
        child.send_signal(stop_signal)
        # well inside the graceful wait (120 s): the second signal ended it
        assert wait_until(lambda: child.poll() is not None, 30), stderr.read_text()
    asking.join(30)
    logged = stderr.read_text()
    assert "Application shutdown complete" in logged and "Traceback" not in logged, logged
    assert "stopped again: the requests still in flight (1) are not waited for" in logged
    assert child.returncode == 0, logged
    assert [answer.status_code for answer in answers] == [503]
    [line] = [json.loads(text) for text in log.read_text().splitlines()]
    assert (line["outcome"], line["status"]) == ("shutting_down", 503)


@pytest.mark.timeout(300)  # a real `serve` starting: torch, the router, uvicorn
def test_sigterm_stops_serve_as_ctrl_c_does(checkpoint: Path, stubs: Stubs, tmp_path: Path) -> None:
    """SIGTERM (systemd, docker stop, Kubernetes) ended serve with -15 (143 in a shell):
    uvicorn raised the signal again once it had stopped, whose default action killed the
    process, so a stream cut by that shutdown got its error event but lost its end of body
    (the client's "incomplete chunked read"). It stops as on Ctrl-C now: exit 0, the stream
    ended whole."""
    for stub in stubs.workers.values():
        stub.reply = " ".join(f"word{i}" for i in range(100))
        stub.stream_chunk_delay_s = 0.5  # ~50 s: still streaming when stopped
    log, stderr = tmp_path / "decisions.jsonl", tmp_path / "serve.log"
    lines: list[str] = []
    ends: list[BaseException | None] = []

    def ask(url: str) -> None:
        body = {"model": MODEL, "messages": user("hi"), "stream": True}
        try:
            with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=120) as r:
                for text in r.iter_lines():  # each as it comes: the stop waits for the first
                    lines.append(text)
            ends.append(None)
        except httpx.HTTPError as error:  # the body cut short
            ends.append(error)

    with running_serve(SERVE, checkpoint, stubs, tmp_path, "--log-requests", str(log)) as (
        child,
        url,
    ):
        asking = threading.Thread(target=ask, args=(url,))
        asking.start()
        assert wait_until(lambda: len(lines) > 2, 30)
        child.send_signal(signal.SIGTERM)
        child.wait(timeout=120)
    asking.join(30)
    logged = stderr.read_text()
    assert child.returncode == 0, logged
    assert "Application shutdown complete" in logged and "Traceback" not in logged, logged
    assert ends == [None] and '"code":"shutting_down"' in lines[-2], (ends, lines[-3:])
    [line] = [json.loads(text) for text in log.read_text().splitlines()]
    assert (line["outcome"], line["status"]) == ("shutting_down", 503)


@pytest.mark.timeout(300)  # a real `serve` starting: torch, the router, uvicorn
def test_a_shorter_graceful_timeout_answers_and_logs_in_flight_requests_within_a_10_s_grace(
    checkpoint: Path, stubs: Stubs, tmp_path: Path
) -> None:
    """After SIGTERM, serve waited a fixed 10 s (and a little more) for requests in flight,
    past the 10 s docker stop, Kubernetes and Cloud Run wait before their SIGKILL: a request
    in flight was cut off unanswered, its decision never logged, and a user whose runtime's
    wait is fixed could not fit the stop in it. --graceful-timeout-s shortens the wait."""
    for stub in stubs.workers.values():
        stub.mode = "hang"
    log = tmp_path / "decisions.jsonl"
    answers: list[httpx.Response] = []

    def ask(url: str) -> None:
        body = {"model": MODEL, "messages": user("hi")}
        with contextlib.suppress(httpx.TransportError):
            answers.append(httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120))

    flags = ("--log-requests", str(log), "--graceful-timeout-s", "1")
    with running_serve(SERVE, checkpoint, stubs, tmp_path, *flags) as (child, url):
        asking = threading.Thread(target=ask, args=(url,))
        asking.start()
        assert wait_until(lambda: any(s.in_flight for s in stubs.workers.values()), 30)
        child.send_signal(signal.SIGTERM)
        # a container runtime's SIGKILL, 10 s after its SIGTERM (this stop took under 2 s)
        stopped = wait_until(lambda: child.poll() is not None, 10)
    asking.join(30)
    assert stopped and child.returncode == 0, (tmp_path / "serve.log").read_text()
    assert [answer.status_code for answer in answers] == [503]
    [line] = [json.loads(text) for text in log.read_text().splitlines()]
    assert (line["outcome"], line["status"]) == ("shutting_down", 503)


EXIT_COUNTING_SERVE = """
import atexit, gc, sys
from fugu_lite.__main__ import main
# what the interpreter's exit collects again and again (gc.get_objects leaves frozen ones out)
atexit.register(lambda: print("left to collect:", len(gc.get_objects()), file=sys.stderr))
sys.argv = ["fugu-lite", "serve", *sys.argv[1:]]
main()
"""


@pytest.mark.timeout(300)  # a real `serve` starting: torch, the router, uvicorn
def test_serve_leaves_what_it_loaded_out_of_its_exits_garbage_collection(
    checkpoint: Path, stubs: Stubs, tmp_path: Path
) -> None:
    """serve took 10-25 s to exit after uvicorn's "Finished server process" on a loaded
    machine: the interpreter's exit ran its full garbage collections over everything serve
    had loaded (torch, the backbone, uvicorn: ~450,000 objects, 1.5-2 s a pass there). Once
    stopped, serve leaves them out of those collections."""
    script = tmp_path / "serve.py"
    script.write_text(EXIT_COUNTING_SERVE, encoding="utf-8")
    with running_serve([sys.executable, str(script)], checkpoint, stubs, tmp_path) as (child, _):
        child.send_signal(signal.SIGINT)
        child.wait(timeout=120)
    logged = (tmp_path / "serve.log").read_text()
    assert child.returncode == 0, logged
    left = int(logged.split("left to collect: ")[1].split()[0])
    assert left < 50_000, logged


SERVE = [sys.executable, "-m", "fugu_lite", "serve"]


@contextlib.contextmanager
def running_serve(
    launcher: list[str], checkpoint: Path, stubs: Stubs, tmp_path: Path, *flags: str
) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """A real `serve` subprocess (`launcher` and serve's flags) on the stub workers, its
    stderr in tmp_path/serve.log: yields it once healthy, with its URL, and kills it if the
    block leaves it running."""
    port = int(serve_args()[-1])
    pool = stubs_pool_file(stubs, tmp_path)
    command = [*launcher, "--checkpoint", str(checkpoint), "--pool", str(pool),
               "--port", str(port), *flags]  # fmt: skip
    with (tmp_path / "serve.log").open("wb") as error_file:
        child = subprocess.Popen(command, stderr=error_file)
    url = f"http://127.0.0.1:{port}"
    try:
        assert wait_until(lambda: healthy(url) or child.poll() is not None, 240)
        yield child, url
    finally:
        if child.poll() is None:
            child.kill()


def stubs_pool_file(stubs: Stubs, tmp_path: Path) -> Path:
    """A pool YAML of the stub workers, for a `serve` subprocess."""
    pool = tmp_path / "pool.yaml"
    workers = [{"id": worker, "model": worker, "base_url": stub.base_url}
               for worker, stub in stubs.workers.items()]  # fmt: skip
    pool.write_text(json.dumps({"workers": workers}), encoding="utf-8")
    return pool


def healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health").status_code == 200
    except httpx.TransportError:
        return False
