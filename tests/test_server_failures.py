"""`fugu-lite serve` when workers fail: fallback to the next-best worker, the circuit
breaker, busy and rate-limited workers, broken or stalled streams, and clients that
disconnect (server_support.py starts the server)."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import re
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from conftest import WORKERS
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from server_support import (
    CODE,
    MATH,
    MODEL,
    WORKER_KEY,
    Running,
    Stubs,
    counted_stub,
    metric_samples,
    metric_value,
    pool_for,
    ranking_for,
    user,
    wait_until,
)

from fugu_lite.router_family import RouterFamily
from fugu_lite.server.app import ServeSettings, create_app
from fugu_lite.server.auth import Redactor
from fugu_lite.server.breaker import CircuitBreaker
from fugu_lite.server.dispatch import Dispatcher
from fugu_lite.server.errors import without_addresses
from fugu_lite.server.metrics import Metrics
from fugu_lite.server.thread import ServerThread, local_openai_client
from fugu_lite.testing.stub_worker import StubWorker
from fugu_lite.workers.local_server import free_port
from fugu_lite.workers.pool import WorkerPool

pytestmark = pytest.mark.timeout(120)


# --- fallback and the circuit breaker -----------------------------------------------------------


class AnsweringWhenReleased(StubWorker):
    """A stub whose answers wait until `released` is set (at most 30 s)."""

    def __init__(self) -> None:
        super().__init__()
        self.released = threading.Event()

    async def _respond(self, mode: str, body: dict[str, Any], auth: str | None) -> Response:
        deadline = time.monotonic() + 30
        while not self.released.is_set() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        return await super()._respond(mode, body, auth)


def test_a_call_that_is_not_the_probe_leaves_a_half_open_circuit_one_probe(
    stubs: Stubs,
) -> None:
    """A half-open circuit lets one probe through. A call that started while the circuit
    was closed and ended without a verdict (its client left) freed the probe as if it were
    it, so a second request probed the worker meanwhile, and a third: each one a request
    sent to a worker that may still be down. Only the probe's own end frees it now. The
    worker answers once the checks are made (a 2 s latency, which the probe's send held up
    as long on a loaded machine outlasted, let the early call end first)."""
    worker = "coder"
    breaker = CircuitBreaker(WORKERS, failure_threshold=1, cooldown_s=0.3)

    async def reached_the_worker(stub: StubWorker, calls: int) -> None:
        """Waits for the worker's `calls`-th call, not a fixed time a loaded machine outlasts."""
        while len(stub.bodies) < calls:
            await asyncio.sleep(0.01)

    async def scenario(stub: AnsweringWhenReleased) -> None:
        config = pool_for(stubs, overrides={worker: {"base_url": stub.base_url}})
        async with WorkerPool(config) as pool:
            dispatcher = Dispatcher(pool, breaker, Metrics(WORKERS), Redactor([]))
            ask = dispatcher.complete([worker], user(CODE), {})
            early = asyncio.ensure_future(ask)  # acquired while closed
            await asyncio.wait_for(reached_the_worker(stub, 1), 30)
            breaker.record_failure(worker)  # another call failed: open
            await asyncio.sleep(0.35)
            probe = asyncio.ensure_future(dispatcher.complete([worker], user(CODE), {}))
            await asyncio.wait_for(reached_the_worker(stub, 2), 30)
            assert breaker.state(worker) == "half_open" and not early.done()
            early.cancel()  # its client left
            with pytest.raises(asyncio.CancelledError):
                await early
            assert not breaker.acquire(worker), "a second probe while the first is out"
            stub.released.set()
            result, _ = await probe
            assert result.error is None and breaker.state(worker) == "closed"

    with AnsweringWhenReleased() as held:
        asyncio.run(scenario(held))


def test_the_circuit_gauge_reads_1_while_a_circuit_is_half_open(stubs: Stubs) -> None:
    """fugu_circuit_open is 1 while a worker's circuit is open or half-open: a stream let
    through while the circuit was closed, ending once it is half-open with its probe out,
    leaves it half-open, and the gauge at 1."""
    worker = "coder"
    now = [0.0]
    breaker = CircuitBreaker(WORKERS, failure_threshold=1, cooldown_s=10, clock=lambda: now[0])
    metrics = Metrics(WORKERS)
    dispatcher = Dispatcher(WorkerPool(pool_for(stubs)), breaker, metrics, Redactor([]))
    assert breaker.acquire(worker) == "call"  # the stream, opened while closed
    breaker.record_failure(worker, "call")  # another call failed: open
    now[0] = 10.0
    assert breaker.acquire(worker) == "probe"
    dispatcher.stream_ended(worker, "ok", "call")
    assert breaker.state(worker) == "half_open"
    assert metric_value(metrics.render().decode(), "fugu_circuit_open", worker=worker) == 1


@pytest.mark.parametrize("stream", [False, True])
def test_a_probe_whose_client_left_lets_the_next_request_probe(stubs: Stubs, stream: bool) -> None:
    """A half-open circuit's one probe, cancelled while it waits for the worker (its client
    left), must free the probe: kept, no request would ever be let through to the worker
    again, its circuit half-open for good. Dropping that release (streamed or not) passed
    every test."""
    worker = "coder"
    stubs.workers[worker].latency_s = 2.0  # the probe is still out when it is cancelled
    breaker = CircuitBreaker(WORKERS, failure_threshold=1, cooldown_s=0.0)
    breaker.record_failure(worker)  # open, and half-open at once (no cool-down)

    async def scenario() -> None:
        async with WorkerPool(pool_for(stubs)) as pool:
            dispatcher = Dispatcher(pool, breaker, Metrics(WORKERS), Redactor([]))
            ask = dispatcher.open_stream if stream else dispatcher.complete
            probe = asyncio.ensure_future(ask([worker], user(CODE), {}))
            while not stubs.workers[worker].bodies:
                await asyncio.sleep(0.01)
            assert breaker.acquire(worker) is None, "a second probe while the first is out"
            probe.cancel()  # its client left
            with pytest.raises(asyncio.CancelledError):
                await probe
            assert breaker.acquire(worker) == "probe"

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_a_worker_skipped_because_its_process_exited_adds_no_latency_sample(
    stubs: Stubs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A local worker whose llama.cpp process has exited is skipped without a call, yet its
    skip added a 0 s sample to fugu_upstream_latency_seconds, pulling that worker's latency
    quantiles towards 0 while it was down. The skip is still counted as a failed call."""
    dead, alive = WORKERS[0], WORKERS[1]
    metrics = Metrics(WORKERS)

    async def scenario() -> None:
        async with WorkerPool(pool_for(stubs)) as pool:
            monkeypatch.setattr(pool, "is_alive", lambda worker: worker != dead)
            dispatcher = Dispatcher(pool, CircuitBreaker(WORKERS), metrics, Redactor([]))
            result, attempts = await dispatcher.complete([dead, alive], user(CODE), {})
            assert result.worker_id == alive
            assert [(a.worker, a.outcome) for a in attempts] == [
                (dead, "connection"), (alive, "ok"),
            ]  # fmt: skip

    asyncio.run(scenario())
    samples = metrics.registry.get_sample_value
    # None: no sample of that worker (its series is made by its first one)
    assert (samples("fugu_upstream_latency_seconds_count", {"worker": dead}) or 0) == 0
    assert samples("fugu_upstream_latency_seconds_count", {"worker": alive}) == 1
    calls = {"worker": dead, "outcome": "connection"}
    assert samples("fugu_worker_calls_total", calls) == 1


def test_a_busy_worker_adds_no_upstream_latency_sample(
    stubs: Stubs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request that waited its whole deadline for a slot of a busy worker never called
    it, yet added the deadline (35 s with the default timeout_s) to that worker's
    fugu_upstream_latency_seconds, as if the worker had taken that long: a burst raised its
    latency quantiles while every call it made was quick. It is still counted as busy, and
    charges no failure to its circuit."""
    monkeypatch.setattr("fugu_lite.workers.retries.BACKOFF_MARGIN_S", 0.0)  # deadline = 1 s
    busy, other = WORKERS[0], WORKERS[1]
    one_slot = {"max_concurrency": 1, "timeout_s": 1.0, "max_retries": 0}
    metrics = Metrics(WORKERS)
    breaker = CircuitBreaker(WORKERS, failure_threshold=1)

    async def scenario() -> None:
        async with WorkerPool(pool_for(stubs, overrides={busy: one_slot})) as pool:
            holding = pool.stream_chat(busy, user(CODE))  # holds the only slot while open
            await anext(holding)
            dispatcher = Dispatcher(pool, breaker, metrics, Redactor([]))
            try:
                _, attempts = await dispatcher.complete([busy, other], user(CODE), {})
            finally:
                await holding.aclose()
            assert [(a.worker, a.outcome) for a in attempts] == [(busy, "busy"), (other, "ok")]

    asyncio.run(scenario())
    samples = metrics.registry.get_sample_value
    assert (samples("fugu_upstream_latency_seconds_count", {"worker": busy}) or 0) == 0
    assert samples("fugu_upstream_latency_seconds_count", {"worker": other}) == 1
    assert samples("fugu_worker_calls_total", {"worker": busy, "outcome": "busy"}) == 1
    assert breaker.snapshot()[busy]["consecutive_failures"] == 0


@pytest.mark.parametrize("failure", ["500", "503", "429", "close", "401", "bad_model", "conflict"])
def test_a_failing_worker_falls_back_to_the_next_best(
    serve, stubs: Stubs, family: RouterFamily, failure: str
) -> None:
    running = serve(pool_for(stubs))
    first, second = ranking_for(family, MATH).ranking[:2]
    stubs.workers[first].mode = failure
    raw = running.client().chat.completions.with_raw_response.create(
        model=MODEL, messages=user(MATH), extra_body={"include_routing": True}
    )
    assert raw.headers["x-fugu-worker"] == second
    assert raw.parse().choices[0].message.content == f"answer from {second}"
    assert raw.headers["x-fugu-attempts"].split(",")[-1] == f"{second}:ok"
    assert len(stubs.workers[first].bodies) == 1
    [line] = running.log_lines()
    assert (line["chosen"], line["worker"], line["fallback"]) == (first, second, True)
    assert line["attempts"][0]["worker"] == first and line["attempts"][0]["outcome"] != "ok"
    # a 401 from a worker, or a 400 for its model name, is its configuration, not the
    # caller's fault (the 400 was the caller's: no next worker was asked); nor is its 409
    # (a lock timeout, x-should-retry: true), which was the client's 400 and tried no other
    expected = {"500": "server", "503": "server", "429": "rate_limit", "401": "worker_config",
                "close": "connection", "bad_model": "worker_config",
                "conflict": "server"}  # fmt: skip
    assert line["attempts"][0]["outcome"] == expected[failure]
    # the `fugu` field says the same: the first choice, the worker that answered, each
    # attempt's latency in ms, and the answering worker's cost
    routing = raw.parse().model_extra["fugu"]
    assert (routing["chosen"], routing["worker"]) == (first, second)
    assert [a["latency_ms"] for a in routing["attempts"]] == pytest.approx(
        [a["latency_s"] * 1000 for a in line["attempts"]], abs=0.01
    )
    assert routing["cost"] == pytest.approx(line["cost"]) and line["cost"] > 0
    metrics = running.metrics()
    assert metric_value(metrics, "fugu_fallbacks_total") == 1
    # the tokens and their cost are the answering worker's, not the failed first choice's
    assert metric_value(metrics, "fugu_tokens_total", worker=second, kind="completion") == 3
    assert metric_value(metrics, "fugu_cost_total", worker=second) == pytest.approx(line["cost"])
    assert metric_value(metrics, "fugu_tokens_total", worker=first, kind="completion") == 0
    assert metric_value(metrics, "fugu_cost_total", worker=first) == 0


def retry_me_app() -> FastAPI:
    """An OpenAI-style upstream answering every call with a 400 that says, with
    `x-should-retry: true`, that the same request may succeed if tried again."""
    upstream = FastAPI()

    @upstream.post("/v1/chat/completions")
    async def chat() -> JSONResponse:
        error = {"message": "could not parse the model's output, please retry",
                 "type": "invalid_request_error", "param": None, "code": None}  # fmt: skip
        return JSONResponse({"error": error}, status_code=400, headers={"x-should-retry": "true"})

    return upstream


def test_a_worker_4xx_said_worth_retrying_falls_back_to_the_next_best(
    serve, stubs: Stubs, family: RouterFamily
) -> None:
    """A worker's 4xx sent with `x-should-retry: true` (which the openai SDK retries, as it
    does a 409) was taken for the request's fault once the pool's retries were spent: the
    client got a 400 worker_rejected_request, and no other worker was asked. Such a 4xx is
    the worker's own state now, as its 409 is: the next worker answers, streamed or not."""
    first, second = ranking_for(family, MATH).ranking[:2]
    with ServerThread(retry_me_app()) as retrying:
        running = serve(pool_for(stubs, overrides={first: {"base_url": retrying.base_url}}))
        for stream in (False, True):
            response = running.post({"model": MODEL, "messages": user(MATH), "stream": stream})
            assert response.status_code == 200, response.text
            assert response.headers["x-fugu-attempts"] == f"{first}:server,{second}:ok"


def overloaded_app(calls: list[float]) -> FastAPI:
    """An OpenAI-style upstream answering every call with a 503 asking to wait 2 s (an
    overloaded provider), noting each call's time in `calls`."""
    upstream = FastAPI()

    @upstream.post("/v1/chat/completions")
    async def chat() -> JSONResponse:
        calls.append(time.monotonic())
        error = {"message": "the engine is overloaded", "type": "server_error", "param": None,
                 "code": None}  # fmt: skip
        return JSONResponse({"error": error}, status_code=503, headers={"retry-after": "2"})

    return upstream


def test_a_5xx_asking_to_wait_goes_to_the_next_worker_at_once_not_after_its_waits(
    serve, stubs: Stubs, family: RouterFamily
) -> None:
    """A worker's 503 with a Retry-After was retried through those waits (the pool's
    max_retries, each at least the Retry-After) while the next worker could answer: 2 s
    retried twice kept the client 4 s. As for a 429, the next worker now answers at once;
    the worker alone, with no worker after it, is still retried after its waits."""
    first, second = ranking_for(family, MATH).ranking[:2]
    calls: list[float] = []
    with ServerThread(overloaded_app(calls)) as overloaded:
        worker = {"base_url": overloaded.base_url, "max_retries": 1, "retry_backoff_s": 0.0}
        running = serve(pool_for(stubs, overrides={first: worker}))
        response = running.post({"model": MODEL, "messages": user(MATH)})
        assert response.headers["x-fugu-attempts"] == f"{first}:server,{second}:ok"
        assert len(calls) == 1
        alone = running.post({"model": MODEL, "messages": user(MATH), "workers": [first]})
    assert alone.status_code == 502
    assert len(calls) == 3
    assert calls[2] - calls[1] >= 2.0


def test_killing_the_chosen_worker_falls_back(serve, stubs: Stubs, family: RouterFamily) -> None:
    first, second = ranking_for(family, CODE).ranking[:2]
    doomed, _ = counted_stub(reply="answer from the doomed worker")
    running = serve(pool_for(stubs, overrides={first: {"base_url": doomed.base_url}}))
    client = running.client()
    raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=user(CODE))
    assert raw.headers["x-fugu-worker"] == first
    doomed.stop()
    raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=user(CODE))
    assert raw.headers["x-fugu-worker"] == second
    assert raw.headers["x-fugu-attempts"] == f"{first}:connection,{second}:ok"
    stream = client.chat.completions.create(model=MODEL, messages=user(CODE), stream=True)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text == f"answer from {second}"


def test_streaming_falls_back_before_the_first_chunk(
    serve, stubs: Stubs, family: RouterFamily
) -> None:
    running = serve(pool_for(stubs))
    first, second = ranking_for(family, MATH).ranking[:2]
    stubs.workers[first].mode = "503"
    body = {"model": MODEL, "messages": user(MATH), "stream": True}
    with httpx.stream("POST", f"{running.url}/v1/chat/completions", json=body) as response:
        assert response.headers["x-fugu-worker"] == second
        assert response.headers["x-fugu-attempts"] == f"{first}:server,{second}:ok"
        events = [line for line in response.iter_lines() if line.startswith("data: {")]
    text = "".join(
        json.loads(event[6:])["choices"][0]["delta"].get("content") or "" for event in events
    )
    assert text == f"answer from {second}"


def broken_stream_app() -> FastAPI:
    """An OpenAI-style upstream whose stream dies after two chunks."""
    upstream = FastAPI()

    @upstream.post("/v1/chat/completions")
    async def chat() -> StreamingResponse:
        async def events() -> AsyncIterator[bytes]:
            for delta in ({"role": "assistant", "content": ""}, {"content": "half an"}):
                chunk = {"id": "x", "object": "chat.completion.chunk", "created": 0,
                         "model": "m", "choices": [{"index": 0, "delta": delta}]}  # fmt: skip
                yield f"data: {json.dumps(chunk)}\n\n".encode()
                await asyncio.sleep(0.05)
            raise ConnectionResetError("the worker crashed mid-answer")

        return StreamingResponse(events(), media_type="text/event-stream")

    return upstream


def test_a_stream_failing_after_its_first_chunk_ends_with_an_error_event(
    serve, stubs: Stubs, family: RouterFamily
) -> None:
    first = ranking_for(family, MATH).ranking[0]
    with ServerThread(broken_stream_app()) as broken:
        running = serve(pool_for(stubs, overrides={first: {"base_url": broken.base_url}}))
        stream = running.client().chat.completions.create(
            model=MODEL, messages=user(MATH), stream=True
        )
        received = []
        with pytest.raises(openai.APIError, match="after the answer started"):
            for chunk in stream:
                received.append(chunk.choices[0].delta.content)
        assert "half an" in received  # what was streamed stays streamed; no silent fallback
        assert wait_until(lambda: running.state.in_flight == 0, 3)  # recorded after its end
        [line] = running.log_lines()
        assert (line["outcome"], line["status"], line["worker"]) == ("stream_error", 502, first)
        assert running.health()["workers"][first]["consecutive_failures"] == 1
        # a first chunk is no success: failing mid-stream every time opens the circuit
        for _ in range(2):
            with pytest.raises(openai.APIError):
                list(
                    running.client().chat.completions.create(
                        model=MODEL, messages=user(MATH), stream=True
                    )
                )
        assert wait_until(lambda: running.state.in_flight == 0, 3)
        assert running.health()["workers"][first]["circuit"] == "open"


def stream_error_of_a_broken_connection(serve, stubs: Stubs, worker: str) -> tuple[str, str]:
    """The error a streamed MATH request gets when `worker`, ranked first, is a server whose
    connection breaks after its first chunks; and that server's base URL."""
    with ServerThread(broken_stream_app()) as broken:
        running = serve(pool_for(stubs, overrides={worker: {"base_url": broken.base_url}}))
        with pytest.raises(openai.APIError) as error:
            list(
                running.client().chat.completions.create(
                    model=MODEL, messages=user(MATH), stream=True
                )
            )
    return error.value.message, broken.base_url


def test_a_mid_stream_error_says_once_that_the_answer_had_started(
    serve, stubs: Stubs, family: RouterFamily
) -> None:
    """The error event of a stream that failed mid-answer read "the worker failed after the
    answer started: ... (after the stream started)": the worker's message ends with that
    already. It is said once now, for a broken connection as for a stream cut short."""
    first = ranking_for(family, MATH).ranking[0]
    messages = [stream_error_of_a_broken_connection(serve, stubs, first)[0]]
    stubs.workers[first].mode = "cut_stream"
    running = serve(pool_for(stubs))
    with pytest.raises(openai.APIError) as cut_error:
        list(
            running.client().chat.completions.create(model=MODEL, messages=user(MATH), stream=True)
        )
    messages.append(cut_error.value.message)
    for message in messages:
        assert message.startswith("the worker failed after the answer started: ")
        assert "started" not in message.removeprefix("the worker failed after the answer started")


def test_a_connection_lost_mid_stream_is_not_said_to_be_unreachable(
    serve, stubs: Stubs, family: RouterFamily
) -> None:
    """A worker whose connection broke after its first chunks was said to be one fugu-lite
    "could not reach the server at URL", which sent the operator to check base_url and
    whether its server runs, though it had answered half the reply. It says the connection
    was lost mid-answer now, and why; the client's error event, without the worker's address
    (the server's warning has it: test_a_stream_failing_mid_answer_is_logged_with_why)."""
    first = ranking_for(family, MATH).ranking[0]
    message, base_url = stream_error_of_a_broken_connection(serve, stubs, first)
    assert "could not reach" not in message
    assert "the connection to [worker address] was lost mid-answer" in message
    assert base_url.split("//")[1].split("/")[0] not in message
    assert "RemoteProtocolError" in message  # why


def test_a_stream_failing_mid_answer_is_logged_with_why(
    serve, stubs: Stubs, family: RouterFamily, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker failing after its stream's first chunk was logged nowhere by serve (a
    failure before it was, at WARNING): only the client's error event said why, and the
    decision log had the outcome alone. It is a warning naming the worker and why now."""
    first = ranking_for(family, MATH).ranking[0]
    caplog.set_level(logging.INFO, logger="fugu_lite")
    with ServerThread(broken_stream_app()) as broken:
        running = serve(pool_for(stubs, overrides={first: {"base_url": broken.base_url}}))
        with pytest.raises(openai.APIError):
            list(
                running.client().chat.completions.create(
                    model=MODEL, messages=user(MATH), stream=True
                )
            )
        assert wait_until(lambda: running.state.in_flight == 0, 3)
    ours = [r for r in caplog.records if r.name.startswith("fugu_lite")]
    [warning] = [r for r in ours if r.levelno >= logging.WARNING]
    assert warning.message.startswith(f"the worker failed after the answer started: worker {first}")
    assert "RemoteProtocolError" in warning.message
    assert f"the connection to {broken.base_url}/chat/completions was lost" in warning.message


def test_a_stream_failing_mid_answer_is_a_failed_worker_call_in_the_metrics(
    serve, stubs: Stubs, family: RouterFamily
) -> None:
    """A streamed call was counted in fugu_worker_calls_total as "ok" once its first chunk
    came: a worker failing every stream mid-answer showed only ok calls while its circuit
    opened and its clients got 502s. A stream's call is now counted when it ends: the
    error's kind when the worker failed, ok when it finished (or its client left)."""
    first = ranking_for(family, MATH).ranking[0]
    with ServerThread(broken_stream_app()) as broken:
        running = serve(pool_for(stubs, overrides={first: {"base_url": broken.base_url}}))
        with pytest.raises(openai.APIError, match="after the answer started"):
            list(
                running.client().chat.completions.create(
                    model=MODEL, messages=user(MATH), stream=True
                )
            )
        text = running.metrics()
    assert metric_value(text, "fugu_worker_calls_total", worker=first, outcome="ok") == 0
    [(outcome, calls)] = [
        (labels["outcome"], value)
        for labels, value in metric_samples(text, "fugu_worker_calls_total")
        if labels["worker"] == first
    ]
    assert calls == 1 and outcome in {"connection", "server"}

    running = serve(pool_for(stubs))
    worker = ranking_for(family, CODE).ranking[0]
    list(running.client().chat.completions.create(model=MODEL, messages=user(CODE), stream=True))
    text = running.metrics()
    assert metric_value(text, "fugu_worker_calls_total", worker=worker, outcome="ok") == 1


def non_finite_logprobs_app() -> FastAPI:
    """An upstream answering with numbers no JSON holds, as Python's json writes them:
    llama.cpp's logprob of a token its grammar or logit_bias ruled out is -Infinity (and a
    remote server may send NaN)."""
    upstream = FastAPI()
    token = {"token": "4", "bytes": [52], "logprob": -math.inf,
             "top_logprobs": [{"token": "4", "bytes": [52], "logprob": -math.inf}]}  # fmt: skip
    choice = {"index": 0, "logprobs": {"content": [token]}, "score": math.nan}

    @upstream.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        if not (await request.json()).get("stream"):
            body = {"id": "x", "object": "chat.completion", "created": 0, "model": "m",
                    "choices": [{**choice, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": "4"}}]}  # fmt: skip
            return Response(json.dumps(body), media_type="application/json")

        async def events() -> AsyncIterator[bytes]:
            for delta, finish in (({"role": "assistant", "content": "4"}, None), ({}, "stop")):
                streamed = {**choice, "delta": delta, "finish_reason": finish}
                chunk = {"id": "x", "object": "chat.completion.chunk", "created": 0,
                         "model": "m", "choices": [streamed]}  # fmt: skip
                yield f"data: {json.dumps(chunk)}\n\n".encode()
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    return upstream


def strict_json(text: str) -> Any:
    """JSON as the standard has it (and JavaScript's JSON.parse): no NaN, no Infinity."""

    def refuse(constant: str) -> None:
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_a_worker_answer_holding_infinity_is_passed_on_as_json(
    serve, stubs: Stubs, family: RouterFamily
) -> None:
    """A logprob of -Infinity in a worker's answer made a 500 (Starlette refuses to write
    it: the answer was lost) and went into a stream as `-Infinity`, which JSON parsers
    refuse. It is now OpenAI's -9999.0 ("very unlikely"); another such number is null."""
    first = ranking_for(family, MATH).ranking[0]
    with ServerThread(non_finite_logprobs_app()) as upstream:
        running = serve(pool_for(stubs, overrides={first: {"base_url": upstream.base_url}}))
        request = {"model": MODEL, "messages": user(MATH), "logprobs": True}
        response = running.post(request)
        assert response.status_code == 200, response.text
        [choice] = strict_json(response.text)["choices"]
        [token] = choice["logprobs"]["content"]
        assert token["logprob"] == -9999.0 and token["top_logprobs"][0]["logprob"] == -9999.0
        assert choice["score"] is None and choice["message"]["content"] == "4"
        streamed = running.post({**request, "stream": True})
        events = [line[6:] for line in streamed.text.splitlines() if line.startswith("data: ")]
        chunks = [strict_json(event) for event in events[:-1]]
        assert events[-1] == "[DONE]" and len(chunks) == 2
        assert chunks[0]["choices"][0]["logprobs"]["content"][0]["logprob"] == -9999.0
        completion = running.client().chat.completions.create(
            model=MODEL, messages=user(MATH), logprobs=True
        )
        assert completion.choices[0].logprobs.content[0].logprob == -9999.0


def test_a_stream_that_stalls_for_timeout_s_is_cut(
    serve, stubs: Stubs, family: RouterFamily
) -> None:
    worker = ranking_for(family, MATH).ranking[0]
    running = serve(pool_for(stubs, overrides={worker: {"timeout_s": 0.5}}))
    stubs.workers[worker].stream_chunk_delay_s = 5.0  # the role chunk, then 5 s before each word
    started = time.monotonic()
    stream = running.client().chat.completions.create(model=MODEL, messages=user(MATH), stream=True)
    received = []
    with pytest.raises(openai.APIError, match=re.escape(f"worker {worker}: no chunk for 0.5 s")):
        for chunk in stream:
            received.append((time.monotonic(), chunk))
    ended = time.monotonic()
    assert [chunk.choices[0].delta.role for _, chunk in received] == ["assistant"]
    # cut after about timeout_s (the stub's first word comes 5 s after its role chunk), timed
    # from the role chunk: the time to route and connect on a busy machine does not count, and
    # its other delays stay far from the stub's 5 s
    stalled = ended - received[0][0]
    assert ended - started >= 0.45 and stalled < 3.0, f"cut after {stalled:.2f} s of silence"
    assert wait_until(lambda: running.state.in_flight == 0, 3)  # recorded after its end
    [line] = running.log_lines()
    assert (line["outcome"], line["status"], line["worker"]) == ("stream_error", 502, worker)
    assert wait_until(lambda: stubs.counters[worker].active == 0, 3), "upstream left open"


def test_every_worker_failing_is_a_502_naming_what_was_tried(serve, stubs: Stubs) -> None:
    running = serve(pool_for(stubs))
    for stub in stubs.workers.values():
        stub.mode = "500"
    client = running.client()
    for stream in (False, True):
        with pytest.raises(openai.APIStatusError) as error:
            client.chat.completions.create(model=MODEL, messages=user(MATH), stream=stream)
        assert error.value.status_code == 502
        body = error.value.body
        assert body["code"] == "all_workers_failed" and body["type"] == "upstream_error"
        assert {attempt["worker"] for attempt in body["tried"]} == set(WORKERS)
        for worker in WORKERS:
            assert worker in body["message"]
    lines = running.log_lines()
    assert [line["outcome"] for line in lines] == ["error", "error"]
    assert all(line["worker"] is None and line["status"] == 502 for line in lines)
    assert [line["fallback"] for line in lines] == [False, False]  # no worker answered


def test_routed_requests_no_worker_answered_are_counted_by_their_error_code(
    serve, stubs: Stubs
) -> None:
    """fugu_errors_total (requests that ended in an error, "by error code or outcome")
    counted every routed request that no worker answered as code="error": the worker's 400,
    a 502 all_workers_failed and a 503 workers_unavailable alike, so a dashboard could not
    tell the client's bad requests from workers down, nor alert on either. Each is counted
    by its code now; the decision log's outcome stays "error"."""
    running = serve(pool_for(stubs), breaker_failures=1)
    body = {"model": MODEL, "messages": user(MATH), "workers": ["coder"]}
    assert running.post(body).status_code == 200  # an answer is no error
    stubs.workers["coder"].mode = "400"
    assert running.post(body).status_code == 400
    stubs.workers["coder"].mode = "500"
    assert running.post(body).status_code == 502  # which opens its circuit
    assert running.post(body).status_code == 503
    text = running.metrics()
    for code in ("worker_rejected_request", "all_workers_failed", "workers_unavailable"):
        assert metric_value(text, "fugu_errors_total", code=code) == 1, code
    assert metric_value(text, "fugu_errors_total", code="error") == 0
    assert metric_value(text, "fugu_errors_total", code="ok") == 0
    for status in ("200", "400", "502", "503"):  # and each by the status it was answered
        assert metric_value(text, "fugu_requests_total", status=status, stream="false") == 1
    assert [line["outcome"] for line in running.log_lines()] == ["ok"] + ["error"] * 3


def test_a_slow_worker_times_out_and_falls_back(serve, stubs: Stubs, family: RouterFamily) -> None:
    first, second = ranking_for(family, MATH).ranking[:2]
    running = serve(pool_for(stubs, overrides={first: {"timeout_s": 0.3}}))
    stubs.workers[first].mode = "hang"
    stubs.workers[first].hang_s = 3.0
    started = time.monotonic()
    raw = running.client().chat.completions.with_raw_response.create(
        model=MODEL, messages=user(MATH)
    )
    assert time.monotonic() - started < 2.5
    assert raw.headers["x-fugu-attempts"] == f"{first}:timeout,{second}:ok"


def test_circuit_breaker_opens_after_repeated_failures_and_closes_after_cooldown(
    serve, stubs: Stubs, family: RouterFamily
) -> None:
    running = serve(pool_for(stubs), breaker_failures=2, breaker_cooldown_s=1.0)
    client = running.client()
    first, second = ranking_for(family, MATH).ranking[:2]
    bad = stubs.workers[first]
    bad.mode = "500"

    def ask() -> str:
        raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=user(MATH))
        assert raw.headers["x-fugu-worker"] == second
        return raw.headers["x-fugu-attempts"]

    assert ask() == f"{first}:server,{second}:ok"
    assert running.health()["workers"][first]["circuit"] == "closed"
    assert ask() == f"{first}:server,{second}:ok"
    health = running.health()  # one reading: the circuit half-opens after 1 s
    assert (health["workers"][first]["circuit"], health["status"]) == ("open", "degraded")
    assert metric_value(running.metrics(), "fugu_circuit_open", worker=first) == 1
    calls = len(bad.bodies)
    assert ask() == f"{first}:circuit_open,{second}:ok"  # skipped without a call
    with client.chat.completions.with_streaming_response.create(
        model=MODEL, messages=user(MATH), stream=True
    ) as streamed:
        assert streamed.headers["x-fugu-worker"] == second  # streamed: skipped as well
    assert len(bad.bodies) == calls

    bad.mode = "ok"
    assert wait_until(lambda: running.health()["workers"][first]["circuit"] == "half_open", 3)
    # what the next request meets: the worker is called (the probe), so it is no outage
    assert running.health()["status"] == "ok"
    raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=user(MATH))
    assert raw.headers["x-fugu-worker"] == first  # the probe went through and succeeded
    assert running.health()["workers"][first]["circuit"] == "closed"
    assert running.health()["status"] == "ok"
    assert metric_value(running.metrics(), "fugu_circuit_open", worker=first) == 0


def test_health_counts_a_half_open_worker_whose_probe_is_out_as_unable_to_take_a_request(
    serve, stubs: Stubs, family: RouterFamily
) -> None:
    """A half-open circuit lets one probe through; while it is out, dispatch skips the worker
    (circuit_open). /health said half_open and status ok then, though the next request could
    not go to it; it says the probe is out and degraded now, and ok again once it is back."""
    running = serve(pool_for(stubs), breaker_failures=1, breaker_cooldown_s=0)
    first, second = ranking_for(family, MATH).ranking[:2]
    breaker = running.state.breaker
    breaker.record_failure(first)  # open, and half-open at once (no cool-down)
    assert running.health()["status"] == "ok"  # the next request would be the probe
    permit = breaker.acquire(first)  # as a request's dispatch takes it: the probe is out
    assert permit == "probe"
    health = running.health()
    assert (health["workers"][first]["circuit"], health["status"]) == ("half_open", "degraded")
    assert health["workers"][first]["probe_in_flight"]
    response = running.post({"model": MODEL, "messages": user(MATH)})
    assert response.headers["x-fugu-attempts"] == f"{first}:circuit_open,{second}:ok"
    breaker.release(first, permit)
    health = running.health()
    assert (health["workers"][first]["probe_in_flight"], health["status"]) == (False, "ok")


def test_health_counts_a_rate_limited_worker_as_unable_to_take_a_request_until_its_limit_ends(
    serve, stubs: Stubs, family: RouterFamily
) -> None:
    """A worker whose provider answered a 429 with a Retry-After is skipped without a call
    until it ends (rate_limit), but /health counted it as able to take a request: status ok
    while the next request could not go to it, and ok (not unavailable) while every request
    was a 429. It counts it as dispatch does now, and says how long its limit lasts."""
    running = serve(pool_for(stubs))
    first, second = ranking_for(family, MATH).ranking[:2]
    limited = stubs.workers[first]
    limited.mode, limited.retry_after_s = "429", 30.0
    response = running.post({"model": MODEL, "messages": user(MATH)})
    assert response.headers["x-fugu-attempts"] == f"{first}:rate_limit,{second}:ok"
    limited.mode = "ok"
    health = running.health()
    assert health["status"] == "degraded"
    assert 0 < health["workers"][first]["rate_limited_for_s"] <= 30
    assert health["workers"][second]["rate_limited_for_s"] == 0
    alone = running.post({"model": MODEL, "messages": user(MATH), "workers": [first]})
    assert (alone.status_code, alone.headers["x-fugu-attempts"]) == (429, f"{first}:rate_limit")

    breaker = running.state.breaker
    for worker in WORKERS:
        breaker.rate_limited(worker, breaker.clock() + 30.0, "call")
    response = httpx.get(f"{running.url}/health")
    assert (response.status_code, response.json()["status"]) == (503, "unavailable")


def test_every_allowed_circuit_open_is_a_503_with_retry_after(
    serve, stubs: Stubs, family: RouterFamily
) -> None:
    running = serve(pool_for(stubs), breaker_failures=1, breaker_cooldown_s=30)
    stubs.workers["coder"].mode = "500"
    body = {"model": MODEL, "messages": user(MATH), "workers": ["coder"]}
    assert running.post(body).status_code == 502
    response = running.post(body)
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "workers_unavailable"
    assert 1 <= int(response.headers["retry-after"]) <= 30
    assert len(stubs.workers["coder"].bodies) == 1


def test_the_retry_after_of_open_circuits_does_not_send_the_client_back_before_they_half_open(
    serve, stubs: Stubs
) -> None:
    """The 503's Retry-After was the circuits' cool-down left rounded to the nearest second:
    2.4 s left was answered "2", and a client (the openai SDK) back then found the circuit
    still open, got another 503 and spent a second retry. It is rounded up now, and the
    message says the same wait."""
    running = serve(pool_for(stubs), breaker_failures=1, breaker_cooldown_s=2.45)
    stubs.workers["coder"].mode = "500"
    body = {"model": MODEL, "messages": user(MATH), "workers": ["coder"]}
    assert running.post(body).status_code == 502
    response = running.post(body)
    left_s = 2.45 - (time.monotonic() - running.state.breaker.circuits["coder"].opened_at)
    assert response.status_code == 503
    retry_after = response.headers["retry-after"]
    assert int(retry_after) >= left_s
    assert response.json()["error"]["message"].endswith(f"retry in {retry_after} s")


def coders_probe_out(running: Running, stubs: Stubs, body: dict) -> threading.Thread:
    """coder's circuit (breaker_failures=1, no cool-down) opened by a 500 to `body` and at
    once half-open, and its one probe (`body` again, answered after 2 s) at the worker: the
    thread posting the probe, to join."""
    stub = stubs.workers["coder"]
    stub.mode = "500"
    assert running.post(body).status_code == 502  # open, and half-open at once
    stub.mode, stub.latency_s = "ok", 2.0
    probe = threading.Thread(target=running.post, args=(body,))
    probe.start()
    assert wait_until(lambda: len(stub.bodies) == 2, 5)  # the probe reached the worker
    return probe


def test_a_503_for_a_half_open_circuit_whose_probe_is_out_says_so(serve, stubs: Stubs) -> None:
    """A request that found a worker's circuit half-open, its one probe out, was told the
    worker was "cooling down after repeated failures (circuit open)" while /health said
    half_open and the cool-down was over. It is told the probe is out now."""
    running = serve(pool_for(stubs), breaker_failures=1, breaker_cooldown_s=0)
    body = {"model": MODEL, "messages": user(MATH), "workers": ["coder"]}
    probe = coders_probe_out(running, stubs, body)
    response = running.post(body)
    probe.join()
    assert response.status_code == 503
    message = response.json()["error"]["message"]
    assert "circuit half-open: coder" in message and "probe" in message
    assert "circuit open" not in message and "cooling down" not in message
    # no cool-down is left, yet the probe is out: a client back at once is refused again
    assert response.headers["retry-after"] == "1" and message.endswith("; retry in 1 s")


def test_a_502_names_a_half_open_circuit_whose_probe_is_out_as_such(serve, stubs: Stubs) -> None:
    """Every worker failing, one of them skipped because its half-open circuit's one probe
    was out, was a 502 naming it "(circuit open, skipped)", while /health said half_open.
    It is named as half-open with its probe out now."""
    running = serve(pool_for(stubs), breaker_failures=1, breaker_cooldown_s=0)
    coder = {"model": MODEL, "messages": user(MATH), "workers": ["coder"]}
    probe = coders_probe_out(running, stubs, coder)
    stubs.workers["mathematician"].mode = "500"
    both = {**coder, "workers": ["coder", "mathematician"]}
    response = running.post(both)
    probe.join()
    assert response.status_code == 502
    message = response.json()["error"]["message"]
    assert "coder (circuit half-open, its one probe request out; skipped)" in message
    assert "circuit open" not in message


def test_a_busy_worker_is_a_503_with_retry_after_that_the_sdk_retries(
    serve, stubs: Stubs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request that waited its whole deadline for a slot of a busy worker was a 502
    `all_workers_failed` (a gateway error, with no hint of when to come back); nothing
    failed, so it is a 503 with Retry-After, which the openai SDK waits for and retries.
    Each call has 0.6 s over its 1.4 s to spare and the third's wait for the slot ends 0.8 s
    before the slot frees (with 1 s and 0.7 s, a call 0.3 s slower on a loaded machine timed
    out: a 502)."""
    monkeypatch.setattr("fugu_lite.workers.retries.BACKOFF_MARGIN_S", 0.0)  # deadline = 2 s
    one_slot = {"max_concurrency": 1, "timeout_s": 2.0, "max_retries": 0}
    running = serve(pool_for(stubs, overrides={"coder": one_slot}))
    stubs.workers["coder"].latency_s = 1.4  # the second holds the slot until 2.8 s
    body = {"model": MODEL, "messages": user(CODE), "workers": ["coder"]}

    async def burst() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=30) as client:
            url = f"{running.url}/v1/chat/completions"
            return await asyncio.gather(*(client.post(url, json=body) for _ in range(3)))

    responses = asyncio.run(burst())
    assert sorted(r.status_code for r in responses)[0] == 200
    [busy, *_] = [r for r in responses if r.status_code != 200]
    assert busy.status_code == 503, busy.text
    assert busy.headers["retry-after"] == "1"
    error = busy.json()["error"]
    assert error["code"] == "workers_busy" and "busy" in error["message"]
    assert [a["outcome"] for a in error["tried"]] == ["busy"]
    assert running.health()["workers"]["coder"]["consecutive_failures"] == 0

    async def retried() -> list[str]:
        async with openai.AsyncOpenAI(base_url=running.thread.base_url, api_key="unused",
                                      max_retries=3) as client:  # fmt: skip
            answers = await asyncio.gather(
                *(client.chat.completions.create(model=MODEL, messages=user(CODE),
                                                 extra_body={"workers": ["coder"]})
                  for _ in range(3))
            )  # fmt: skip
        return [answer.choices[0].message.content or "" for answer in answers]

    assert asyncio.run(retried()) == ["answer from coder"] * 3


def test_every_worker_rate_limited_is_the_sdks_rate_limit_error(
    serve, stubs: Stubs, family: RouterFamily
) -> None:
    """Every allowed worker answering 429 (after the pool's retries) was a 502
    all_workers_failed: the openai SDK raised a generic APIStatusError, not the
    RateLimitError that clients catch to back off and try later."""
    running = serve(pool_for(stubs), breaker_failures=5)
    first, second = ranking_for(family, MATH).ranking[:2]
    for stub in stubs.workers.values():
        stub.mode = "429"
    client = running.client()
    pair = {"workers": [first, second]}
    for stream in (False, True):
        with pytest.raises(openai.RateLimitError) as error:
            client.chat.completions.create(
                model=MODEL, messages=user(MATH), stream=stream, extra_body=pair
            )
        body = error.value.body
        assert isinstance(body, dict) and body["code"] == "rate_limit_exceeded"
        assert body["type"] == "requests"  # OpenAI's type for a rate limit
        assert f"{first} (worker {first}: rate_limit: HTTP 429" in body["message"]
    assert [a["outcome"] for a in body["tried"]] == ["rate_limit", "rate_limit"]
    stubs.workers[second].mode = "500"  # a real failure among them: a 502, as before
    response = running.post({"model": MODEL, "messages": user(MATH), **pair})
    assert response.status_code == 502


def test_a_worker_out_of_quota_is_a_broken_worker_not_a_rate_limit(
    serve, stubs: Stubs, family: RouterFamily
) -> None:
    """A worker whose account is out of quota (OpenAI's 429 insufficient_quota) was taken
    as rate-limited: as the last worker it was retried up to max_retries, and the client
    got a 429 rate_limit_exceeded, which the openai SDK retries, for a refusal no wait
    clears. It is a worker that cannot answer now, as for a bad key: asked once, and a 502
    naming it as out of quota; the next worker answers when there is one."""
    retried = {worker: {"max_retries": 2, "retry_backoff_s": 0.01} for worker in WORKERS}
    running = serve(pool_for(stubs, overrides=retried), breaker_failures=5)
    first, second = ranking_for(family, MATH).ranking[:2]
    stubs.workers[first].mode = "quota"
    client = running.client()
    for stream in (False, True):
        with pytest.raises(openai.APIStatusError) as error:
            client.chat.completions.create(
                model=MODEL, messages=user(MATH), stream=stream, extra_body={"workers": [first]}
            )
        assert error.value.status_code == 502
        body = error.value.body
        assert isinstance(body, dict) and body["code"] == "all_workers_failed"
        assert "out of quota" in body["message"]
        assert [a["outcome"] for a in body["tried"]] == ["worker_config"]
    assert len(stubs.workers[first].bodies) == 2  # once a request, not retried
    response = running.post({"model": MODEL, "messages": user(MATH)})
    assert response.headers["x-fugu-attempts"] == f"{first}:worker_config,{second}:ok"


@pytest.mark.parametrize("status", ["401", "403"])
def test_a_workers_refused_key_is_told_by_its_variable_never_by_its_value(
    serve,
    stubs: Stubs,
    family: RouterFamily,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    status: str,
) -> None:
    """A worker answering 401 (bad key) or 403 (no access) was logged and recorded as
    "client: HTTP 401: ..." only: not which variable its key came from, nor what to fix.
    The warning, the decision log and the client's 502 name the worker and its api_key_env
    now, never the key nor the worker's address."""
    monkeypatch.setenv("FUGU_TEST_WORKER_KEY", WORKER_KEY)
    first = ranking_for(family, MATH).ranking[0]
    keyed = {first: {"api_key_env": "FUGU_TEST_WORKER_KEY"}}
    running = serve(pool_for(stubs, overrides=keyed))
    stubs.workers[first].mode = status
    caplog.set_level(logging.INFO, logger="fugu_lite")
    response = running.post({"model": MODEL, "messages": user(MATH), "workers": [first]})
    assert response.status_code == 502
    [line] = running.log_lines()
    [warning] = [r.message for r in caplog.records if r.levelno >= logging.WARNING]
    said = "from the environment variable FUGU_TEST_WORKER_KEY (its api_key_env)"
    for text in (response.json()["error"]["message"], line["attempts"][0]["message"], warning):
        assert f"worker {first}: client: HTTP {status}" in text and said in text
        assert "the key in FUGU_TEST_WORKER_KEY" in text
    address = stubs.workers[first].base_url.split("//")[1].split("/")[0]
    assert WORKER_KEY not in response.text and address not in response.text


def test_a_worker_that_is_down_is_named_to_the_client_without_its_address(
    serve, stubs: Stubs, family: RouterFamily, caplog: pytest.LogCaptureFixture
) -> None:
    """serve's 502 passed each worker's message on to its client, so a worker that was down
    showed the pool's internal address ("could not reach the server at
    http://127.0.0.1:PORT/v1/chat/completions (connection refused: nothing listens on
    127.0.0.1 port PORT ...)"). The client learns which worker failed and how (connection
    refused) now, never where it is; the operator's log and the decision log keep it all."""
    first = ranking_for(family, MATH).ranking[0]
    down = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    running = serve(pool_for(stubs, overrides={first: {"base_url": down}}))
    caplog.set_level(logging.INFO, logger="fugu_lite")
    address = down.split("//")[1].split("/")[0]
    for stream in (False, True):
        with pytest.raises(openai.APIStatusError) as error:
            running.client().chat.completions.create(
                model=MODEL, messages=user(MATH), stream=stream, extra_body={"workers": [first]}
            )
        assert error.value.status_code == 502
        said = error.value.response.text
        assert f"worker {first}: connection: could not reach the server" in said
        assert "connection refused" in said
        assert address not in said and "127.0.0.1" not in said
    for line in running.log_lines():
        assert (
            f"nothing listens on 127.0.0.1 port {address.split(':')[1]}"
            in line["attempts"][0]["message"]
        )
    [warning, *_] = [r.message for r in caplog.records if r.levelno >= logging.WARNING]
    assert f"could not reach the server at {down}/chat/completions" in warning


def test_a_remote_worker_and_its_proxy_are_named_to_the_client_without_their_hosts(
    serve, stubs: Stubs, family: RouterFamily, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A remote worker called through a company proxy (HTTP_PROXY) that is not found: the
    client's 502 says which worker failed and why, without the worker's host nor the
    proxy's; the decision log keeps both."""
    for name in ("ALL_PROXY", "all_proxy", "http_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", "http://no-such-proxy.invalid:3128")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")  # the stubs, and this test's calls
    first = ranking_for(family, MATH).ranking[0]
    remote = {"base_url": "http://worker.internal.example:8080/v1"}
    running = serve(pool_for(stubs, overrides={first: remote}))
    response = running.post({"model": MODEL, "messages": user(MATH), "workers": [first]})
    assert response.status_code == 502
    assert f"worker {first}: connection: could not reach the server at [worker address]" in (
        response.text
    )
    assert "of the proxy (HTTP_PROXY)" in response.text
    assert "no-such-proxy" not in response.text and "worker.internal" not in response.text
    [line] = running.log_lines()
    logged = line["attempts"][0]["message"]
    assert "http://worker.internal.example:8080/v1" in logged and "no-such-proxy" in logged


def test_a_worker_named_as_its_host_is_still_named_to_the_client() -> None:
    """A worker whose id is its host's name (a docker compose service: id vllm, base_url
    http://vllm:8000/v1) was shown to the client as "[worker address]" wherever the 502
    named it, so the client no longer learnt which worker failed. A host name of one label
    is hidden only where it is written as an address now (with a scheme or a port), a dotted
    one or an IP address wherever it is."""
    said = (
        "every worker failed: vllm (worker vllm: connection: could not reach the server at "
        "http://vllm:8000/v1/chat/completions (connection refused: nothing listens on vllm "
        "port 8000; ...)); smol (worker smol: server: HTTP 502: upstream 10.0.0.5:8080 and "
        "gpu-1.internal refused)"
    )
    assert without_addresses(said, {"vllm", "10.0.0.5", "gpu-1.internal"}) == (
        "every worker failed: vllm (worker vllm: connection: could not reach the server at "
        "[worker address] (connection refused: nothing listens on [worker address]; ...)); "
        "smol (worker smol: server: HTTP 502: upstream [worker address] and [worker address] "
        "refused)"
    )


def test_a_private_address_in_a_workers_own_error_is_hidden_from_the_client() -> None:
    """A worker that is a gateway (LiteLLM, a company proxy) relays its upstream's error,
    whose address is in no pool config: serve's client was shown it ("upstream connect
    error to http://10.0.0.5:8080/v1"). A private, loopback or link-local IP address is
    hidden wherever it is now; a public one, a version number and a host name are kept."""
    said = (
        "worker gw: server: HTTP 502: upstream connect error to http://10.0.0.5:8080/v1 "
        "(nothing listens on 192.168.1.7 port 8000; metadata 169.254.169.254/latest, "
        "[fd00::5]:3128); resolver 8.8.8.8:53; vllm 0.6.1.2; see https://status.example.com"
    )
    assert without_addresses(said, {"gateway.example.com"}) == (
        "worker gw: server: HTTP 502: upstream connect error to [worker address] "
        "(nothing listens on [worker address]; metadata [worker address], "
        "[worker address]); resolver 8.8.8.8:53; vllm 0.6.1.2; see https://status.example.com"
    )


def test_a_private_ipv6_address_written_bare_in_a_workers_own_error_is_hidden() -> None:
    """An IPv6 address was hidden only in brackets ("[fd00::5]:3128"): written bare, as a
    gateway's error often has it ("upstream fe80::1%eth0 refused", "::1 port 8080"), it was
    shown to serve's client. Each private, loopback, link-local or unique-local one is hidden
    now, as an IPv4 one is; a public one, a time, a MAC address and a hash are kept."""
    said = (
        "upstream fe80::1%eth0 refused; fd12:3456:789a::1: connection refused; ::1 port 8080; "
        "fd00::5:8080 and fe80::2%eth0:8080 down; http://[fe80::1%25eth0]:8080/v1 too "
        "(::ffff:10.0.0.5). Public 2606:4700::1111 and ::ffff:8.8.8.8 at 12:30:45, "
        "mac 00:1a:2b:3c:4d:5e, sha256:deadbeef01, vllm 0.6.1.2"
    )
    assert without_addresses(said, set()) == (
        "upstream [worker address] refused; [worker address]: connection refused; "
        "[worker address]; [worker address] and [worker address] down; [worker address] too "
        "([worker address]). Public 2606:4700::1111 and ::ffff:8.8.8.8 at 12:30:45, "
        "mac 00:1a:2b:3c:4d:5e, sha256:deadbeef01, vllm 0.6.1.2"
    )


# A project key as OpenAI issues them (sk-proj-, 164 characters), and a key of the older
# kind (sk-, 51).
PROJECT_KEY = "sk-proj-" + "Ab3dE" * 30 + "fG7hZq9X"
LEGACY_KEY = "sk-" + "T1hXr" * 9 + "Zq9X"


def openai_key_refusal_app() -> FastAPI:
    """An upstream answering every call as OpenAI does a key it does not accept: a 401 whose
    message shows the key masked, its first characters and its last four around asterisks."""
    upstream = FastAPI()

    @upstream.post("/v1/chat/completions")
    async def chat(request: Request) -> JSONResponse:
        key = request.headers["authorization"].removeprefix("Bearer ")
        head = "sk-proj-" if key.startswith("sk-proj-") else key[:7]
        masked = f"{head}{'*' * (len(key) - len(head) - 4)}{key[-4:]}"
        message = (
            f"Incorrect API key provided: {masked}. You can find your API key at "
            "https://platform.openai.com/account/api-keys."
        )
        error = {"message": message, "type": "invalid_request_error", "param": None,
                 "code": "invalid_api_key"}  # fmt: skip
        return JSONResponse({"error": error}, status_code=401)

    return upstream


@pytest.mark.parametrize("key", [PROJECT_KEY, LEGACY_KEY])
def test_a_workers_key_is_scrubbed_in_the_masked_form_openai_shows_it_in(
    serve,
    stubs: Stubs,
    family: RouterFamily,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    key: str,
) -> None:
    """OpenAI's 401 shows the key it refused masked ("sk-proj-****...****Zq9X"): its
    first characters and last four, which identify it. Only the key itself was scrubbed,
    so the masked form reached the client's 502, the decision log and the server's log.
    It is scrubbed as the key is now; the message still says the key was not accepted."""
    monkeypatch.setenv("FUGU_TEST_WORKER_KEY", key)
    first = ranking_for(family, MATH).ranking[0]
    with ServerThread(openai_key_refusal_app()) as refusing:
        worker = {"base_url": refusing.base_url, "api_key_env": "FUGU_TEST_WORKER_KEY"}
        running = serve(pool_for(stubs, overrides={first: worker}))
        caplog.set_level(logging.INFO, logger="fugu_lite")
        with pytest.raises(openai.APIStatusError) as error:
            running.client().chat.completions.create(
                model=MODEL, messages=user(MATH), extra_body={"workers": [first]}
            )
    assert error.value.status_code == 502
    [line] = running.log_lines()
    warnings = [r.message for r in caplog.records if r.levelno >= logging.WARNING]
    for text in (error.value.response.text, json.dumps(line), *warnings):
        assert "Incorrect API key provided: ***." in text
        assert "Zq9X" not in text and "****" not in text


def test_the_workers_retry_after_is_passed_on_in_the_rate_limit_answer(
    serve, stubs: Stubs, family: RouterFamily
) -> None:
    """fugu-lite's 429 carried no Retry-After when its workers' 429s did: the openai SDK
    then retried after its own half-second backoff, long before the providers' limits
    ended. It now passes on the soonest worker's wait, streamed or not."""
    first, second = ranking_for(family, MATH).ranking[:2]
    stubs.workers[first].retry_after_s = 40.0
    stubs.workers[second].retry_after_s = 7.0
    pair = {"model": MODEL, "messages": user(MATH), "workers": [first, second]}
    for stream in (False, True):
        running = serve(pool_for(stubs))  # of its own: each worker is held for its wait
        stubs.workers[first].fail_next("429")
        stubs.workers[second].fail_next("429")
        response = running.post({**pair, "stream": stream})
        assert response.status_code == 429, response.text
        assert response.headers["retry-after"] == "7"
        assert "retry in 7 s" in response.json()["error"]["message"]

    # The SDK waits that long before it asks again (its own backoff was ~0.5 s), and is
    # answered by the worker whose wait is over (the other asked for 40 s).
    running = serve(pool_for(stubs))
    stubs.workers[second].retry_after_s = 2.0
    stubs.workers[first].fail_next("429")
    stubs.workers[second].fail_next("429")
    started = time.monotonic()
    with openai.OpenAI(base_url=running.thread.base_url, api_key="unused", max_retries=1) as client:
        answer = client.chat.completions.create(
            model=MODEL, messages=user(MATH), extra_body={"workers": [first, second]}
        )
    assert answer.choices[0].message.content == f"answer from {second}"
    assert time.monotonic() - started >= 1.5

    # A worker whose 429 does not say how long: the soonest wait is not known, none is given.
    silent = FastAPI()

    @silent.post("/v1/chat/completions")
    async def limited() -> JSONResponse:
        return JSONResponse({"error": {"message": "slow down", "code": 429}}, status_code=429)

    with ServerThread(silent) as upstream:
        running = serve(pool_for(stubs, overrides={first: {"base_url": upstream.base_url}}))
        stubs.workers[second].fail_next("429")
        response = running.post(pair)
    assert response.status_code == 429 and "retry-after" not in response.headers
    assert "retry later" in response.json()["error"]["message"]


def test_a_rate_limited_worker_hands_the_request_on_at_once(
    serve, stubs: Stubs, family: RouterFamily
) -> None:
    """A worker's 429 was retried by the pool (max_retries times, each after its
    Retry-After) before the next worker was asked: with Retry-After 2 s the client waited
    4 s for an answer the next worker gave at once. The pool retries a 429 only for the
    last worker of the ranking now."""
    retrying = {"max_retries": 2, "retry_backoff_s": 0.01}
    pool = pool_for(stubs, overrides={w: retrying for w in stubs.workers})
    first, second = ranking_for(family, MATH).ranking[:2]
    limited = stubs.workers[first]
    limited.mode, limited.retry_after_s = "429", 2.0
    for stream in (False, True):
        running = serve(pool)  # a server of its own: a 429 holds the worker for 2 s
        started = time.monotonic()
        response = running.post({"model": MODEL, "messages": user(MATH), "stream": stream})
        assert response.status_code == 200, response.text
        assert time.monotonic() - started < 1.5
        assert response.headers["x-fugu-attempts"] == f"{first}:rate_limit,{second}:ok"
    assert len(limited.bodies) == 2  # one call per request, no retries

    # The last worker left still gets the pool's retries, honouring its Retry-After,
    # streamed too (no test streamed it: a stream's last worker not retried passed them).
    limited.mode, limited.retry_after_s = "ok", 0.3
    for calls, stream in ((4, False), (6, True)):
        limited.fail_next("429")
        started = time.monotonic()
        response = serve(pool).post(
            {"model": MODEL, "messages": user(MATH), "workers": [first], "stream": stream}
        )
        assert response.status_code == 200
        assert response.headers["x-fugu-attempts"] == f"{first}:ok"
        assert time.monotonic() - started >= 0.3 and len(limited.bodies) == calls


def test_a_rate_limited_worker_is_skipped_for_its_retry_after_not_taken_as_broken(
    serve, stubs: Stubs, family: RouterFamily
) -> None:
    """Each 429 counted as a failure of the worker: a burst over the provider's rate limit
    opened the circuit of a healthy worker (skipped for the whole cool-down, 30 s, when the
    provider asked for 1 s, and /health said degraded). A 429 now leaves the circuit alone;
    the worker is skipped until its Retry-After ends, then asked again. A 429
    insufficient_quota (no credit left) still counts: it does not pass by itself. The limit
    lasts 3 s, far longer than the two requests made within it take on a loaded machine (1 s
    was not: routing slowed by 0.4 s a request saw it end)."""
    running = serve(pool_for(stubs), breaker_failures=2)
    first, second = ranking_for(family, MATH).ranking[:2]
    limited = stubs.workers[first]
    limited.mode = "429"  # Retry-After: 0
    for _ in range(3):
        response = running.post({"model": MODEL, "messages": user(MATH)})
        assert response.headers["x-fugu-attempts"] == f"{first}:rate_limit,{second}:ok"
    state = running.health()["workers"][first]
    assert (state["circuit"], state["consecutive_failures"]) == ("closed", 0)
    assert running.health()["status"] == "ok"

    limited.retry_after_s = 3.0
    asked = time.monotonic()
    running.post({"model": MODEL, "messages": user(MATH)})
    limit_ends_by = time.monotonic() + 3.0
    calls = len(limited.bodies)
    limited.mode = "ok"
    response = running.post({"model": MODEL, "messages": user(MATH), "stream": True})
    assert response.headers["x-fugu-attempts"] == f"{first}:rate_limit,{second}:ok"
    assert len(limited.bodies) == calls  # skipped without a call while its limit lasts
    alone = running.post({"model": MODEL, "messages": user(MATH), "workers": [first]})
    left_at_least = math.ceil(asked + 3.0 - time.monotonic())  # of the worker's 3 s
    assert alone.status_code == 429
    assert left_at_least <= int(alone.headers["retry-after"]) <= 3
    time.sleep(max(0.0, limit_ends_by + 0.1 - time.monotonic()))
    response = running.post({"model": MODEL, "messages": user(MATH)})
    assert response.headers["x-fugu-attempts"] == f"{first}:ok"

    limited.mode = "quota"
    for _ in range(2):
        running.post({"model": MODEL, "messages": user(MATH)})
    assert running.health()["workers"][first]["circuit"] == "open"


@pytest.mark.parametrize("stream", [False, True])
def test_a_workers_rejection_names_the_parameter_it_refused(
    serve, stubs: Stubs, family: RouterFamily, stream: bool
) -> None:
    """A worker's 400 naming the parameter it refused (an o-series model's temperature) was
    answered with param "messages", whatever the worker named; the client's 400 now
    carries the worker's param, and "messages" only when the worker named none."""
    running = serve(pool_for(stubs))
    first = ranking_for(family, MATH).ranking[0]
    client = running.client()
    stubs.workers[first].mode = "unsupported_value"
    with pytest.raises(openai.BadRequestError) as error:
        client.chat.completions.create(
            model=MODEL, messages=user(MATH), temperature=0.5, stream=stream
        )
    body = error.value.body
    assert (body["param"], body["code"]) == ("temperature", "worker_rejected_request")
    assert "Unsupported value: 'temperature' does not support 0.5" in body["message"]
    stubs.workers[first].mode = "400"
    with pytest.raises(openai.BadRequestError) as error:
        client.chat.completions.create(model=MODEL, messages=user(MATH), stream=stream)
    assert error.value.body["param"] == "messages"
    assert sum(len(stub.bodies) for stub in stubs.workers.values()) == 2


def test_a_refused_request_after_a_rejected_one_carries_none_of_its_headers(
    serve, stubs: Stubs, family: RouterFamily
) -> None:
    """A worker's refusal answers with the request's routing headers (its x-request-id, the
    worker, the attempts), added to its error's headers; no test sent a request after one,
    so errors sharing one headers dict (ApiError's default) passed every test, and the next
    refused request carried the first one's request id and routing."""
    running = serve(pool_for(stubs))
    first = ranking_for(family, MATH).ranking[0]
    stubs.workers[first].mode = "400"
    rejected = running.post({"model": MODEL, "messages": user(MATH)})
    assert rejected.status_code == 400 and rejected.headers["x-fugu-worker"] == ""
    refused = running.post({"model": "gpt-4o", "messages": user(MATH)})
    assert refused.status_code == 404
    assert not any(header.startswith("x-fugu-") for header in refused.headers)
    assert refused.headers["x-request-id"] != rejected.headers["x-request-id"]


def test_a_request_the_worker_rejects_is_not_retried_elsewhere(
    serve, stubs: Stubs, family: RouterFamily
) -> None:
    running = serve(pool_for(stubs))
    first = ranking_for(family, MATH).ranking[0]
    stubs.workers[first].mode = "400"
    response = running.post({"model": MODEL, "messages": user(MATH)})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "worker_rejected_request" and "stub client error" in error["message"]
    assert sum(len(stub.bodies) for stub in stubs.workers.values()) == 1
    assert running.health()["workers"][first]["consecutive_failures"] == 0


@pytest.mark.parametrize("refusal", ["context", "vllm_context"])
def test_a_context_refusal_is_logged_as_a_note_and_a_real_failure_as_a_warning(
    serve, stubs: Stubs, family: RouterFamily, caplog: pytest.LogCaptureFixture, refusal: str
) -> None:
    """A worker refusing a conversation longer than its context, before the next worker
    answered it, was logged at WARNING as "worker ... failed": the logs showed failures
    where nothing failed. vLLM's refusal (a 400 without the context_length_exceeded code)
    was the client's fault: no other worker was tried."""
    running = serve(pool_for(stubs))
    first, second = ranking_for(family, MATH).ranking[:2]
    stubs.workers[first].mode = refusal
    caplog.set_level(logging.INFO, logger="fugu_lite")
    client = running.client()
    for stream in (False, True):
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=user(MATH), stream=stream
        )
        assert raw.headers["x-fugu-attempts"] == f"{first}:context_length_exceeded,{second}:ok"
    notes = [r for r in caplog.records if r.name.startswith("fugu_lite") and first in r.message]
    assert len(notes) == 2
    for note in notes:
        assert note.levelno == logging.INFO
        assert "failed" not in note.message
        assert "longer than its context of 100 tokens" in note.message
        assert "trying the next allowed worker" in note.message
    caplog.clear()
    stubs.workers[first].mode = "500"
    assert client.chat.completions.create(model=MODEL, messages=user(MATH))
    [warning] = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert f"worker {first} failed" in warning.message


def test_a_busy_or_rate_limited_worker_is_logged_as_a_note_not_a_failure(
    serve,
    stubs: Stubs,
    family: RouterFamily,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A worker rate-limited by its provider (a 429) or busy (no free slot in time) was
    logged at WARNING as "worker ... failed", though neither is a failure of the worker (its
    circuit is not charged): a burst filled the logs with warnings where nothing was wrong.
    Each is an INFO note now; a 429 insufficient_quota (no credit left) is still a warning."""
    caplog.set_level(logging.INFO, logger="fugu_lite")
    running = serve(pool_for(stubs))
    first, second = ranking_for(family, MATH).ranking[:2]
    stubs.workers[first].mode = "429"
    response = running.post({"model": MODEL, "messages": user(MATH)})
    assert response.headers["x-fugu-attempts"] == f"{first}:rate_limit,{second}:ok"

    monkeypatch.setattr("fugu_lite.workers.retries.BACKOFF_MARGIN_S", 0.0)  # deadline = 1 s
    busy, other = WORKERS[0], WORKERS[1]
    one_slot = {"max_concurrency": 1, "timeout_s": 1.0, "max_retries": 0}

    async def scenario() -> None:
        async with WorkerPool(pool_for(stubs, overrides={busy: one_slot})) as pool:
            holding = pool.stream_chat(busy, user(CODE))  # holds the only slot while open
            await anext(holding)
            dispatcher = Dispatcher(pool, CircuitBreaker(WORKERS), Metrics(WORKERS), Redactor([]))
            try:
                _, attempts = await dispatcher.complete([busy, other], user(CODE), {})
            finally:
                await holding.aclose()
            assert [a.outcome for a in attempts] == ["busy", "ok"]

    asyncio.run(scenario())
    records = [r for r in caplog.records if r.name == "fugu_lite.server.dispatch"]
    said = sorted(r.message.split(":")[0] for r in records)
    assert said == sorted(f"worker {w} did not take the request" for w in (first, busy))
    assert all(r.levelno == logging.INFO and "failed" not in r.message for r in records)

    caplog.clear()
    stubs.workers[first].mode = "quota"
    running.post({"model": MODEL, "messages": user(MATH)})
    [warning] = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert f"worker {first} failed" in warning.message


def test_a_conversation_too_long_for_every_worker_is_the_clients_400(
    serve, stubs: Stubs, family: RouterFamily, caplog: pytest.LogCaptureFixture
) -> None:
    """Every allowed worker refusing the conversation as longer than its context is the
    client's error, as OpenAI answers it: the SDK's BadRequestError with code
    context_length_exceeded and param messages, naming each worker's limit and what to
    shorten, and no Retry-After (retrying the same conversation cannot help). The log's
    note of the last refusal says no worker is left to try, not that the next one is."""
    caplog.set_level(logging.INFO, logger="fugu_lite")
    running = serve(pool_for(stubs))
    first, second = ranking_for(family, MATH).ranking[:2]
    for worker in (first, second):
        stubs.workers[worker].mode = "context"
    with pytest.raises(openai.BadRequestError) as refused:
        running.client().chat.completions.create(
            model=MODEL, messages=user(MATH), extra_body={"workers": [first, second]}
        )
    assert "retry-after" not in refused.value.response.headers
    error = refused.value.body
    assert (error["type"], error["code"], error["param"]) == (
        "invalid_request_error",
        "context_length_exceeded",
        "messages",
    )
    message = error["message"]
    assert message.startswith("the conversation is longer than the context of every worker")
    for worker in (first, second):
        assert f"{worker}: worker {worker}:" in message
    assert "maximum context length is 100 tokens" in message
    assert "shorten the messages or max_tokens" in message
    assert [a["outcome"] for a in error["tried"]] == ["context_length_exceeded"] * 2
    notes = [r.message for r in caplog.records if "longer than its context" in r.message]
    assert [note.split(":")[0] for note in notes] == [f"worker {first}", f"worker {second}"]
    assert "trying the next allowed worker" in notes[0]
    assert "no other allowed worker is left" in notes[1]


def test_a_conversation_too_long_for_some_workers_while_the_rest_are_down_is_retriable(
    serve, stubs: Stubs, family: RouterFamily
) -> None:
    """One worker refusing the conversation as too long and the other down was a 502 that
    did not say the down worker may take it once back; with its circuit open it is a 503
    with Retry-After, naming both facts (a client retries 5xx; a 400 would say never)."""
    running = serve(pool_for(stubs), breaker_failures=1, breaker_cooldown_s=30)
    first, second = ranking_for(family, MATH).ranking[:2]
    pair = {"model": MODEL, "messages": user(MATH), "workers": [first, second]}
    stubs.workers[first].mode = "context"
    stubs.workers[second].mode = "500"
    response = running.post(pair)
    assert response.status_code == 502
    error = response.json()["error"]
    assert error["code"] == "all_workers_failed"
    assert f"longer than the context of {first}" in error["message"]
    assert f"{second} (worker {second}: server" in error["message"]
    response = running.post(pair)  # second's circuit is open now
    assert response.status_code == 503
    assert 1 <= int(response.headers["retry-after"]) <= 30
    error = response.json()["error"]
    assert error["code"] == "workers_unavailable"
    assert [a["outcome"] for a in error["tried"]] == ["context_length_exceeded", "circuit_open"]
    assert f"longer than the context of {first}" in error["message"]
    assert "maximum context length is 100 tokens" in error["message"]
    assert f"({second}) are cooling down" in error["message"]
    assert running.health()["workers"][first]["consecutive_failures"] == 0


# --- disconnecting clients ----------------------------------------------------------------------


def test_a_disconnecting_streaming_client_leaves_no_upstream_stream(
    serve, stubs: Stubs, family: RouterFamily
) -> None:
    running = serve(pool_for(stubs))
    worker = ranking_for(family, CODE).ranking[0]
    stubs.workers[worker].reply = " ".join(f"word{i}" for i in range(400))
    stubs.workers[worker].stream_chunk_delay_s = 0.02  # ~8 s to stream it all
    counter = stubs.counters[worker]
    body = {"model": MODEL, "messages": user(CODE), "stream": True}
    with httpx.stream("POST", f"{running.url}/v1/chat/completions", json=body) as response:
        lines = response.iter_lines()
        received = [next(lines) for _ in range(6)]
        assert counter.active == 1  # the upstream stream is open while we read
        assert running.state.in_flight == 1
    assert any(line.startswith("data: {") for line in received)
    assert wait_until(lambda: counter.active == 0, 3), "the upstream stream was left open"
    assert wait_until(lambda: running.state.in_flight == 0, 3)
    [line] = running.log_lines()
    assert line["outcome"] == "client_disconnected" and line["worker"] == worker


def test_a_streamed_probe_whose_client_left_mid_answer_lets_the_next_request_through(
    serve, stubs: Stubs, family: RouterFamily
) -> None:
    """A half-open circuit's probe relayed as a stream whose client leaves mid-answer ends
    without a verdict, and must free the probe: kept, every later request to the worker
    was skipped as circuit_open (a 503 when it was the only one allowed), for good.
    Dropping that release in stream_ended passed every test."""
    worker = ranking_for(family, CODE).ranking[0]
    running = serve(pool_for(stubs), breaker_failures=1, breaker_cooldown_s=0)
    stub = stubs.workers[worker]
    stub.fail_next("500")
    body = {"model": MODEL, "messages": user(CODE), "workers": [worker]}
    assert running.post(body).status_code == 502  # open, and half-open at once
    stub.reply = " ".join(f"word{i}" for i in range(400))
    stub.stream_chunk_delay_s = 0.02  # ~8 s to stream it all
    url = f"{running.url}/v1/chat/completions"
    with httpx.stream("POST", url, json={**body, "stream": True}) as probe:
        lines = probe.iter_lines()
        assert next(lines).startswith("data: {")
    assert wait_until(lambda: running.state.in_flight == 0, 5)
    stub.stream_chunk_delay_s = 0.0
    response = running.post(body)
    assert response.status_code == 200, response.text
    assert response.headers["x-fugu-attempts"] == f"{worker}:ok"


def test_a_stream_cut_short_counts_the_tokens_it_streamed(
    serve, stubs: Stubs, family: RouterFamily
) -> None:
    """A stream that ended early (its worker failed mid-answer, or its client left) never
    got the worker's usage chunk, and its usage was counted nowhere: no tokens or cost in
    the metrics, `usage: null` in the decision log, while the worker had read the prompt
    and written part of an answer (a paid worker bills them). It now gets the estimate a
    stream without usage gets, marked fugu_estimated."""
    first = ranking_for(family, MATH).ranking[0]
    with ServerThread(broken_stream_app()) as broken:
        running = serve(pool_for(stubs, overrides={first: {"base_url": broken.base_url}}))
        with pytest.raises(openai.APIError, match="after the answer started"):
            list(running.client().chat.completions.create(model=MODEL, messages=user(MATH),
                                                          stream=True))  # fmt: skip
    assert wait_until(lambda: running.state.in_flight == 0, 3)  # recorded after its end
    [failed] = running.log_lines()
    assert failed["outcome"] == "stream_error"
    assert failed["usage"]["fugu_estimated"] is True
    assert failed["usage"]["completion_tokens"] == 1  # "half an": one content chunk
    text = running.metrics()
    assert metric_value(text, "fugu_tokens_total", worker=first, kind="completion") == 1
    assert metric_value(text, "fugu_cost_total", worker=first) > 0

    running = serve(pool_for(stubs))
    worker = ranking_for(family, CODE).ranking[0]
    stubs.workers[worker].reply = " ".join(f"word{i}" for i in range(400))
    stubs.workers[worker].stream_chunk_delay_s = 0.02
    stream = running.client().chat.completions.create(model=MODEL, messages=user(CODE), stream=True)
    received = [next(stream) for _ in range(4)]
    stream.close()
    assert wait_until(lambda: running.state.in_flight == 0, 3)
    [left] = running.log_lines()
    assert left["outcome"] == "client_disconnected"
    assert left["usage"]["fugu_estimated"] is True
    assert left["usage"]["completion_tokens"] >= len(received) - 1  # the first has no text
    tokens = metric_value(running.metrics(), "fugu_tokens_total", worker=worker, kind="prompt")
    assert tokens == left["usage"]["prompt_tokens"] > 0


def test_a_disconnecting_client_cancels_its_upstream_call(
    serve, stubs: Stubs, family: RouterFamily
) -> None:
    worker = ranking_for(family, MATH).ranking[0]
    # One call at a time: a call left running would hold the worker's only slot.
    running = serve(pool_for(stubs, overrides={worker: {"max_concurrency": 1}}))
    stubs.workers[worker].latency_s = 4.0
    with pytest.raises(httpx.ReadTimeout):
        running.post({"model": MODEL, "messages": user(MATH)}, timeout=0.5)
    assert wait_until(lambda: running.state.in_flight == 0, 2)
    [line] = running.log_lines()
    assert line["outcome"] == "client_disconnected" and line["status"] == 499
    stubs.workers[worker].latency_s = 0.0
    started = time.monotonic()
    response = running.post({"model": MODEL, "messages": user(MATH)})
    assert response.status_code == 200 and response.headers["x-fugu-worker"] == worker
    assert time.monotonic() - started < 2.0, "the abandoned call still held the worker's slot"


def test_a_client_leaving_during_a_fallback_keeps_the_workers_tried_in_its_log_line(
    serve, stubs: Stubs, family: RouterFamily
) -> None:
    """A client that left while its request was handed to the next worker (the first had
    failed: its circuit charged, its failed call counted) got a decision log line with no
    attempts at all, as if no worker had been called. The attempts made before it left
    are kept now, streamed or not."""
    first, second, _ = ranking_for(family, MATH).ranking
    stubs.workers[first].mode = "500"
    stubs.workers[second].mode = "hang"
    running = serve(pool_for(stubs))
    for stream in (False, True):
        with pytest.raises(httpx.ReadTimeout):
            running.post({"model": MODEL, "messages": user(MATH), "stream": stream}, timeout=1.0)
        assert wait_until(lambda: running.state.in_flight == 0, 5)
        # the stub's hang ends with its call (it held on for 600 s, in every later test)
        assert wait_until(lambda: stubs.workers[second].in_flight == 0, 3)
    lines = running.log_lines()
    assert [(line["stream"], line["outcome"], line["status"]) for line in lines] == [
        (False, "client_disconnected", 499),
        (True, "client_disconnected", 499),
    ]
    for line in lines:
        assert [(a["worker"], a["outcome"]) for a in line["attempts"]] == [(first, "server")]
        assert line["worker"] is None


def test_a_client_leaving_while_its_request_is_routed_is_counted(
    serve, stubs: Stubs, family: RouterFamily
) -> None:
    """A client that left while its request waited for routing (held for the batch window
    while another request was served) was answered 499 and counted nowhere: the metrics'
    requests by status missed it, while a client leaving at any other point is counted
    as a 499 client_disconnected."""
    running = serve(pool_for(stubs), batch_window_ms=3000)
    worker = ranking_for(family, CODE).ranking[0]
    stubs.workers[worker].reply = " ".join(f"word{i}" for i in range(100))
    stubs.workers[worker].stream_chunk_delay_s = 0.05  # ~5 s: in flight while the other waits
    body = {"model": MODEL, "messages": user(CODE), "stream": True}
    with httpx.stream("POST", f"{running.url}/v1/chat/completions", json=body) as streaming:
        lines = streaming.iter_lines()  # kept: a generator let go closes the stream
        assert next(lines).startswith("data: {") and running.state.in_flight == 1
        before = running.metrics()
        with pytest.raises(httpx.ReadTimeout):
            running.post({"model": MODEL, "messages": user(MATH)}, timeout=0.5)

        def counted(name: str, **labels: str) -> float:
            text = running.metrics()
            return metric_value(text, name, **labels) - metric_value(before, name, **labels)

        assert wait_until(lambda: counted("fugu_requests_total", status="499") == 1, 3)
        assert counted("fugu_errors_total", code="client_disconnected") == 1


def test_a_prompt_the_backbone_gives_nan_features_for_fails_alone_with_a_clear_error(
    serve, stubs: Stubs, checkpoint: Path
) -> None:
    """`route` refuses a prompt the backbone gives NaN or infinite features for (a damaged
    weight), but serve routed it on NaN probabilities: an arbitrary worker answered and
    x-fugu-probabilities said NaN, which is not JSON. It is now a 500 naming the backbone,
    and the prompts beside it are routed as before."""
    from fugu_lite.backbones import load_backbone
    from fugu_lite.features import FeatureExtractor
    from fugu_lite.router_family import load_family_or_single

    damaged = load_family_or_single(checkpoint)
    router = damaged.routers[0]
    backbone = load_backbone("tiny-random")
    token = backbone.tokenizer.convert_tokens_to_ids("z")
    backbone.model.get_input_embeddings().weight.data[token] = float("inf")
    torch_cfg = router.model_cfg.model_copy(update={"runtime": "torch"})  # no ONNX export
    router.extractor = FeatureExtractor(backbone, torch_cfg)
    running = serve(pool_for(stubs), router=damaged)
    response = running.post({"model": MODEL, "messages": user("a fizz")})
    assert response.status_code == 500, response.text
    error = response.json()["error"]
    assert error["type"] == "server_error" and error["code"] == "routing_failed"
    assert error["message"] == (
        "routing gave NaN or infinite probabilities for this request's prompt: the backbone "
        "tiny-random gives NaN, infinite or overflowing features for it (its weights are "
        "damaged, or overflow on this prompt); check model.backbone (a local folder: its "
        "weight files), or choose another backbone"
    )
    assert not any(stub.bodies for stub in stubs.workers.values())
    answered = running.post({"model": MODEL, "messages": user("hello")})
    assert answered.status_code == 200, answered.text
    assert "NaN" not in answered.headers["x-fugu-probabilities"]


def test_a_conversation_the_backbones_chat_template_refuses_is_a_400_for_it_alone(
    serve, stubs: Stubs, checkpoint: Path
) -> None:
    """A conversation the router's chat template refuses (Gemma's takes no system message)
    failed its routing batch: that client got a 500 'internal error' for its own input.
    It is now a 400 naming messages and the template's reason, for that request alone (a
    failed batch is routed again one request at a time)."""
    from fugu_lite.backbones import load_backbone
    from fugu_lite.features import FeatureExtractor
    from fugu_lite.router_family import load_family_or_single

    family = load_family_or_single(checkpoint)
    router = family.routers[0]
    backbone = load_backbone("tiny-random")
    backbone.tokenizer.chat_template = (
        "{% for m in messages %}{% if m['role'] == 'system' %}"
        "{{ raise_exception('System role not supported') }}{% endif %}"
        "{{ m['content'] }}{% endfor %}"
    )
    torch_cfg = router.model_cfg.model_copy(update={"runtime": "torch"})
    router.extractor = FeatureExtractor(backbone, torch_cfg)
    running = serve(pool_for(stubs), router=family)
    system = [{"role": "system", "content": "be brief"}, *user("hi")]

    async def both() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=30) as client:
            url = f"{running.url}/v1/chat/completions"
            return await asyncio.gather(
                *(
                    client.post(url, json={"model": MODEL, "messages": m})
                    for m in (system, user("hi"))
                )
            )

    refused, answered = asyncio.run(both())
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert error["param"] == "messages" and error["type"] == "invalid_request_error"
    assert error["message"].startswith(
        "the chat template of backbone tiny-random refuses this conversation (roles system, "
        "user): System role not supported."
    )
    assert answered.status_code == 200, answered.text


# --- stopping the server with requests in flight ------------------------------------------------


def stopped_while_answering(
    running: ServerThread, stream: bool, reached: Callable[[list[Any]], bool]
) -> tuple[list[Any], Exception | None]:
    """Stop `running` (its graceful timeout) once `reached(what the client got so far)` holds
    for a chat request sent to it with the openai SDK; the answer or chunks it got, and the
    error it raised, if it did."""
    got: list[Any] = []
    raised: list[Exception] = []

    def ask() -> None:
        try:
            with local_openai_client(running.base_url, max_retries=0) as client:
                answer = client.chat.completions.create(
                    model=MODEL, messages=user(MATH), stream=stream
                )
                got.extend(answer if stream else [answer])
        except Exception as error:
            raised.append(error)

    asking = threading.Thread(target=ask)
    asking.start()
    try:
        assert wait_until(lambda: reached(got), 30)
    finally:
        running.stop()
        asking.join(30)
    return got, raised[0] if raised else None


def stopping_server(
    stubs: Stubs, family: RouterFamily, checkpoint: Path, log: Path
) -> ServerThread:
    """A server on the stubs whose graceful shutdown gives up after 1 s."""
    settings = ServeSettings(checkpoint=checkpoint, log_requests=log)
    app = create_app(settings, family=family, pool_config=pool_for(stubs))
    return ServerThread(app, graceful_timeout_s=1).start()


def answering(chunks: list[Any]) -> bool:
    """Whether a streamed answer's text has begun."""
    return any(chunk.choices and chunk.choices[0].delta.content for chunk in chunks)


def uvicorn_tracebacks(records: list[logging.LogRecord]) -> list[str]:
    return [r.getMessage() for r in records if "Exception in ASGI application" in r.getMessage()]


@pytest.mark.parametrize("stream", [False, True])
def test_a_request_still_waiting_for_its_worker_when_the_server_stops_is_answered_503(
    stubs: Stubs,
    family: RouterFamily,
    checkpoint: Path,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    stream: bool,
) -> None:
    """A request whose worker had not answered when uvicorn's graceful shutdown ran out
    (Ctrl-C or SIGTERM while a worker was slow) had its task cancelled: the client got a
    plain-text 500, the server's log "Exception in ASGI application" with a traceback, and
    the decision log no line. It is answered an OpenAI-shaped 503 (shutting_down) now, saying
    to send it again, and has its line."""
    worker = ranking_for(family, MATH).ranking[0]
    stubs.workers[worker].mode = "hang"
    log = tmp_path / "decisions.jsonl"
    running = stopping_server(stubs, family, checkpoint, log)
    uvicorn_log = logging.getLogger("uvicorn.error")  # uvicorn's own, which caplog misses
    uvicorn_log.addHandler(caplog.handler)
    try:
        _, error = stopped_while_answering(
            running, stream, lambda _: stubs.workers[worker].in_flight == 1
        )
    finally:
        uvicorn_log.removeHandler(caplog.handler)
    assert isinstance(error, openai.APIStatusError) and error.status_code == 503, error
    assert error.code == "shutting_down" and "send it again" in error.message
    assert not uvicorn_tracebacks(caplog.records)
    [line] = [json.loads(text) for text in log.read_text().splitlines()]
    assert (line["outcome"], line["status"], line["stream"]) == ("shutting_down", 503, stream)
    # the worker's call ended with the server (its hang would have held on for 600 s)
    assert wait_until(lambda: stubs.workers[worker].in_flight == 0, 5)


def test_a_stream_still_running_when_the_server_stops_ends_with_an_error_event(
    stubs: Stubs,
    family: RouterFamily,
    checkpoint: Path,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A stream still being relayed when uvicorn's graceful shutdown ran out had its task
    cancelled: the client's connection was cut mid-answer (the openai SDK's 'Connection
    error.'), the server's log showed "Exception in ASGI application" with a traceback, and
    the decision log said the client had left (client_disconnected, 499). The stream ends
    with an error event (shutting_down) now, which the SDK raises, and its line says why."""
    worker = ranking_for(family, MATH).ranking[0]
    stubs.workers[worker].reply = " ".join(f"word{i}" for i in range(100))
    stubs.workers[worker].stream_chunk_delay_s = 0.5  # ~50 s: still streaming when stopped
    log = tmp_path / "decisions.jsonl"
    running = stopping_server(stubs, family, checkpoint, log)
    uvicorn_log = logging.getLogger("uvicorn.error")  # uvicorn's own, which caplog misses
    uvicorn_log.addHandler(caplog.handler)
    try:
        chunks, error = stopped_while_answering(running, True, answering)
    finally:
        uvicorn_log.removeHandler(caplog.handler)
    assert answering(chunks)
    assert isinstance(error, openai.APIError) and error.code == "shutting_down", error
    assert "cut this answer short; send the request again" in error.message
    assert not uvicorn_tracebacks(caplog.records)
    [line] = [json.loads(text) for text in log.read_text().splitlines()]
    assert (line["outcome"], line["status"], line["worker"]) == ("shutting_down", 503, worker)
