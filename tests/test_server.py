"""`fugu-lite serve` against in-process stub workers (real HTTP, real uvicorn, the openai SDK)
with a router trained on the tiny random backbone: routing, fallback, circuit breaker,
auth, bad input, streaming, disconnects, metrics and the decision log."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import re
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from conftest import WORKERS, generated_records
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from typer.testing import CliRunner

from fugu_lite.cli import app as cli_app
from fugu_lite.config import (
    ModelConfig,
    PipelineConfig,
    RLTrainingConfig,
    SFTConfig,
    SFTTrainingConfig,
)
from fugu_lite.costs import RouterFamily, load_family_or_single, train_router_family
from fugu_lite.pool import PoolConfig, WorkerConfig
from fugu_lite.schemas import ChatMessage, RewardRecord
from fugu_lite.server import ServeSettings, create_app, show_package_logs
from fugu_lite.server_auth import load_api_keys
from fugu_lite.server_batching import MicroBatcher
from fugu_lite.server_breaker import CircuitBreaker
from fugu_lite.server_routing import RouteRequest, RouterService
from fugu_lite.server_thread import ServerThread
from fugu_lite.testing.stub_worker import StubWorker, count_tokens
from fugu_lite.train_sft import train_sft

pytestmark = pytest.mark.timeout(120)

MODEL = "fugu-lite"
MATH = "compute the sum of the numbers 4242 item 7"
CODE = "write a python function that 4242 item 7"
ENDPOINT_KEY = "sk-fugu-endpoint-test-key-0123456789"
WORKER_KEY = "sk-worker-secret-do-not-leak-987654321"


# --- fixtures ---------------------------------------------------------------------------------


class InFlightCounter:
    """ASGI middleware around a stub's app: HTTP exchanges open right now, streaming
    bodies included (the stub's own counter stops when the handler returns)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.active = 0
        self.lock = threading.Lock()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        with self.lock:
            self.active += 1
        try:
            await self.app(scope, receive, send)
        finally:
            with self.lock:
                self.active -= 1


def counted_stub(**kwargs: Any) -> tuple[StubWorker, InFlightCounter]:
    stub = StubWorker(**kwargs)
    counter = InFlightCounter(stub.app)
    stub.app = counter  # type: ignore[assignment]
    return stub.start(), counter


@dataclass
class Stubs:
    workers: dict[str, StubWorker]
    counters: dict[str, InFlightCounter]

    def reset(self) -> None:
        """Every setting a test may change, back to StubWorker's default (hang_s stayed at
        one test's 3 s for every later test of the module)."""
        for worker, stub in self.workers.items():
            stub.mode = "ok"
            stub.failures.clear()
            stub.bodies.clear()
            stub.auth_headers.clear()
            stub.modes_served.clear()
            stub.arrivals.clear()
            stub.max_in_flight = 0
            stub.latency_s = 0.0
            stub.hang_s = 600.0
            stub.retry_after_s = 0.0
            stub.stream_chunk_delay_s = 0.0
            stub.finish_reason = "stop"
            stub.context_tokens = 100
            stub.reply = f"answer from {worker}"


@pytest.fixture(scope="module")
def stubs() -> Iterator[Stubs]:
    made = {worker: counted_stub() for worker in WORKERS}
    yield Stubs({w: s for w, (s, _) in made.items()}, {w: c for w, (_, c) in made.items()})
    for stub, _ in made.values():
        stub.stop()


@pytest.fixture(autouse=True)
def _fresh_stubs(request: pytest.FixtureRequest) -> None:
    if "stubs" in request.fixturenames:
        request.getfixturevalue("stubs").reset()


def tiny_config(cache_dir: Path) -> ModelConfig:
    return ModelConfig(
        backbone="tiny-random", layer=-1, head="linear", max_tokens=32, cache_dir=str(cache_dir)
    )


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("router")
    training = SFTTrainingConfig(epochs=8, batch_size=16, learning_rate=0.05)
    config = SFTConfig(model=tiny_config(root / "cache"), training=training)
    return Path(train_sft(generated_records(), config, root / "sft")["checkpoint"])


@pytest.fixture(scope="module")
def family(checkpoint: Path) -> RouterFamily:
    return load_family_or_single(checkpoint)


def pool_for(
    stubs: Stubs, *, opt_out: tuple[str, ...] = (), overrides: dict[str, dict] | None = None
) -> PoolConfig:
    workers = []
    for worker, stub in stubs.workers.items():
        fields: dict[str, Any] = {
            "id": worker, "model": f"model-{worker}", "base_url": stub.base_url,
            "max_retries": 0, "timeout_s": 10.0, "max_concurrency": 16,
            "input_price_per_mtok": 1.0, "output_price_per_mtok": 2.0,
        }  # fmt: skip
        fields.update((overrides or {}).get(worker, {}))
        workers.append(WorkerConfig(**fields))
    return PoolConfig(workers=workers, opt_out=list(opt_out))


@dataclass
class Running:
    thread: ServerThread
    settings: ServeSettings
    app: Any

    @property
    def url(self) -> str:
        return self.thread.url

    @property
    def state(self) -> Any:
        return self.app.state.fugu

    def client(self, api_key: str = "unused", **kwargs: Any) -> openai.OpenAI:
        return openai.OpenAI(
            base_url=self.thread.base_url, api_key=api_key, max_retries=0, **kwargs
        )

    def async_client(self, api_key: str = "unused") -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=self.thread.base_url, api_key=api_key, max_retries=0)

    def post(
        self, body: Any, headers: dict[str, str] | None = None, timeout: float = 30
    ) -> httpx.Response:
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        return httpx.post(
            f"{self.url}/v1/chat/completions",
            content=content,
            headers={"content-type": "application/json", **(headers or {})},
            timeout=timeout,
        )

    def log_lines(self) -> list[dict]:
        self.state.log.flush()
        path = self.settings.log_requests
        assert path is not None
        return [json.loads(line) for line in path.read_text().splitlines()]

    def metrics(self, api_key: str | None = None) -> str:
        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        return httpx.get(f"{self.url}/metrics", headers=headers).text

    def health(self) -> dict:
        return httpx.get(f"{self.url}/health").json()


@pytest.fixture
def serve(
    family: RouterFamily, checkpoint: Path, tmp_path: Path
) -> Iterator[Callable[..., Running]]:
    """serve(pool_config, **settings) -> a running fugu-lite server, stopped after the test."""
    started: list[ServerThread] = []

    def start(
        pool_config: PoolConfig, router: RouterFamily | None = None, **settings: Any
    ) -> Running:
        settings.setdefault("log_requests", tmp_path / f"decisions-{len(started)}.jsonl")
        serve_settings = ServeSettings(checkpoint=checkpoint, **settings)
        app = create_app(serve_settings, family=router or family, pool_config=pool_config)
        thread = ServerThread(app).start()
        started.append(thread)
        return Running(thread, serve_settings, app)

    yield start
    for thread in started:
        thread.stop()


def ranking_for(family: RouterFamily, prompt: str, allowed: tuple[str, ...] = tuple(WORKERS)):
    service = RouterService(family)
    request = RouteRequest([ChatMessage(role="user", content=prompt)], allowed)
    return service.route_batch([request])[0]


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def metric_value(text: str, name: str, **labels: str) -> float:
    """One sample of the Prometheus text exposition, 0 when absent."""
    for line in text.splitlines():
        if not line.startswith(name) or line.startswith("#"):
            continue
        match = re.match(r"([a-zA-Z_:]+)(\{[^}]*\})? (\S+)$", line)
        if not match or match.group(1) != name:
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', match.group(2) or ""))
        if all(found.get(key) == value for key, value in labels.items()):
            return float(match.group(3))
    return 0.0


def wait_until(condition: Callable[[], bool], timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


# --- the OpenAI surface -------------------------------------------------------------------------


def test_a_request_is_answered_by_the_routed_worker_under_the_router_name(
    serve, stubs: Stubs, family: RouterFamily
) -> None:
    running = serve(pool_for(stubs))
    client = running.client()
    for prompt in (MATH, CODE):
        expected = ranking_for(family, prompt)
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=user(prompt), extra_body={"include_routing": True}
        )
        completion = raw.parse()
        worker = expected.ranking[0]
        assert completion.model == MODEL
        assert completion.choices[0].message.content == f"answer from {worker}"
        assert raw.headers["x-fugu-worker"] == worker
        probabilities = json.loads(raw.headers["x-fugu-probabilities"])
        assert probabilities == pytest.approx(expected.probabilities, abs=1e-3)
        routing = completion.model_extra["fugu"]
        assert routing["worker"] == worker and routing["chosen"] == worker
        assert routing["ranking"] == expected.ranking
        assert sum(routing["probabilities"].values()) == pytest.approx(1.0, abs=1e-5)
        assert completion.usage is not None and completion.usage.completion_tokens == 3
        assert stubs.workers[worker].bodies[-1]["model"] == f"model-{worker}"
    # The two prompts are of kinds the router learned to send to different workers.
    assert ranking_for(family, MATH).ranking[0] == "mathematician"
    assert ranking_for(family, CODE).ranking[0] == "coder"


def test_routing_field_is_opt_in(serve, stubs: Stubs) -> None:
    running = serve(pool_for(stubs))
    completion = running.client().chat.completions.create(model=MODEL, messages=user(MATH))
    assert "fugu" not in (completion.model_extra or {})


def test_streaming_relabels_chunks_and_honours_include_usage(
    serve, stubs: Stubs, family: RouterFamily
) -> None:
    running = serve(pool_for(stubs))
    worker = ranking_for(family, CODE).ranking[0]
    stubs.workers[worker].reply = "one two three four five"
    client = running.client()
    chunks = list(
        client.chat.completions.create(
            model=MODEL, messages=user(CODE), stream=True, stream_options={"include_usage": True}
        )
    )
    assert {chunk.model for chunk in chunks} == {MODEL}
    assert len({chunk.id for chunk in chunks}) == 1
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "one two three four five"
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 5
    assert sum(chunk.usage is not None for chunk in chunks) == 1

    plain = list(client.chat.completions.create(model=MODEL, messages=user(CODE), stream=True))
    assert all(chunk.usage is None for chunk in plain)
    assert all(chunk.choices for chunk in plain)
    # the worker was asked for usage anyway, for metrics and cost
    assert stubs.workers[worker].bodies[-1]["stream_options"] == {"include_usage": True}
    tokens = metric_value(running.metrics(), "fugu_tokens_total", worker=worker, kind="completion")
    assert tokens == 10


def test_a_worker_refusing_stream_options_is_streamed_to_without_them(
    serve, stubs: Stubs, family: RouterFamily
) -> None:
    """serve asks each worker for the usage of a stream (stream_options), which some
    providers refuse (an older Azure API version: a 400 "Unrecognized request argument
    supplied: stream_options"): every streamed request to it was a 400
    worker_rejected_request naming a parameter the client never sent. The call is made
    once more without them, later calls to that worker leave them out, and the tokens are
    estimated as for a worker that reports no usage."""
    running = serve(pool_for(stubs))
    worker = ranking_for(family, CODE).ranking[0]
    other = next(w for w in WORKERS if w != worker)
    stub = stubs.workers[worker]
    stub.mode = "no_stream_options"
    stub.reply = "one two three four five"
    client = running.client()
    for _ in range(2):
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=user(CODE), stream=True, stream_options={"include_usage": True}
        )
        assert raw.headers["x-fugu-attempts"] == f"{worker}:ok"
        chunks = list(raw.parse())
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == "one two three four five"
        usage = chunks[-1].usage
        assert usage is not None and usage.completion_tokens == 5
        assert (usage.model_extra or {}).get("fugu_estimated") is True
    assert ["stream_options" in body for body in stub.bodies] == [True, False, False]
    assert stub.modes_served == ["no_stream_options"] * 3
    assert running.health()["workers"][worker]["consecutive_failures"] == 0
    tokens = metric_value(running.metrics(), "fugu_tokens_total", worker=worker, kind="completion")
    assert tokens == 10
    # Only that worker: another is still asked for its usage.
    list(client.chat.completions.create(model=MODEL, messages=user(CODE), stream=True,
                                        extra_body={"workers": [other]}))  # fmt: skip
    assert stubs.workers[other].bodies[-1]["stream_options"] == {"include_usage": True}


def test_streaming_raw_events_end_with_done_and_carry_routing_headers(
    serve, stubs: Stubs, family: RouterFamily
) -> None:
    running = serve(pool_for(stubs))
    body = {"model": MODEL, "messages": user(MATH), "stream": True, "include_routing": True}
    with httpx.stream("POST", f"{running.url}/v1/chat/completions", json=body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["x-fugu-worker"] == ranking_for(family, MATH).ranking[0]
        events = [line for line in response.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "data: [DONE]"
    first = json.loads(events[0].removeprefix("data: "))
    assert first["fugu"]["worker"] == response.headers["x-fugu-worker"]


def test_the_routing_field_comes_on_the_first_chunk_sent(
    serve, stubs: Stubs, family: RouterFamily
) -> None:
    """A worker whose stream opens with a chunk without choices (Azure OpenAI's content
    filter results) had the `fugu` field put on that chunk, which a client that did not
    ask for usage never gets: include_routing gave no routing at all."""
    upstream = FastAPI()

    @upstream.post("/v1/chat/completions")
    async def chat() -> StreamingResponse:
        async def events() -> AsyncIterator[bytes]:
            head = {"id": "", "object": "", "created": 0, "model": "", "choices": [],
                    "prompt_filter_results": [{"prompt_index": 0}]}  # fmt: skip
            yield f"data: {json.dumps(head)}\n\n".encode()
            for delta in ({"role": "assistant", "content": ""}, {"content": "hello"}):
                chunk = {"id": "x", "object": "chat.completion.chunk", "created": 0,
                         "model": "m", "choices": [{"index": 0, "delta": delta}]}  # fmt: skip
                yield f"data: {json.dumps(chunk)}\n\n".encode()
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    first = ranking_for(family, MATH).ranking[0]
    with ServerThread(upstream) as azure:
        running = serve(pool_for(stubs, overrides={first: {"base_url": azure.base_url}}))
        chunks = list(
            running.client().chat.completions.create(
                model=MODEL, messages=user(MATH), stream=True, extra_body={"include_routing": True}
            )
        )
    assert all(chunk.choices for chunk in chunks)
    assert chunks[0].model_extra is not None and chunks[0].model_extra["fugu"]["worker"] == first
    assert "".join(chunk.choices[0].delta.content or "" for chunk in chunks) == "hello"


def test_browser_origins_given_with_cors_origin_may_call_the_endpoint(serve, stubs: Stubs) -> None:
    """A web page (a chat UI on another origin) could not call fugu-lite at all: the
    browser's CORS preflight got a 405. Origins given with --cors-origin get CORS headers,
    the routing headers readable by the page; others, and every origin by default, none."""
    app = "http://localhost:3000"
    running = serve(pool_for(stubs), cors_origins=[app], api_keys=[ENDPOINT_KEY])
    url = f"{running.url}/v1/chat/completions"
    preflight = {"origin": app, "access-control-request-method": "POST",
                 "access-control-request-headers": "authorization, content-type"}  # fmt: skip
    response = httpx.options(url, headers=preflight)
    assert response.status_code == 200, response.text
    assert response.headers["access-control-allow-origin"] == app
    assert "authorization" in response.headers["access-control-allow-headers"].lower()
    other = httpx.options(url, headers={**preflight, "origin": "http://evil.test"})
    assert other.status_code == 400 and "access-control-allow-origin" not in other.headers

    auth = {"authorization": f"Bearer {ENDPOINT_KEY}", "origin": app}
    answer = running.post({"model": MODEL, "messages": user(MATH)}, headers=auth)
    assert answer.status_code == 200
    assert answer.headers["access-control-allow-origin"] == app
    exposed = answer.headers["access-control-expose-headers"].lower()
    assert "x-fugu-worker" in exposed and "retry-after" in exposed
    refused = running.post({"model": "gpt-4o", "messages": user(MATH)}, headers=auth)
    assert refused.status_code == 404 and refused.headers["access-control-allow-origin"] == app

    closed = serve(pool_for(stubs))
    response = httpx.options(f"{closed.url}/v1/chat/completions", headers=preflight)
    assert response.status_code == 405 and "access-control-allow-origin" not in response.headers
    assert (
        "access-control-allow-origin"
        not in closed.post(
            {"model": MODEL, "messages": user(MATH)}, headers={"origin": app}
        ).headers
    )


def test_every_answer_carries_its_request_id(serve, stubs: Stubs) -> None:
    running = serve(pool_for(stubs))
    client = running.client()
    raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=user(MATH))
    completion = raw.parse()
    assert raw.headers["x-request-id"] == completion.id

    streamed = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=user(CODE), stream=True
    )
    chunks = list(streamed.parse())
    assert len(chunks) > 1
    assert {chunk.id for chunk in chunks} == {streamed.headers["x-request-id"]}

    stubs.workers["coder"].mode = "500"
    failed = running.post({"model": MODEL, "messages": user(CODE), "workers": ["coder"]})
    assert failed.status_code == 502  # an error is an answer too

    ids = [raw.headers["x-request-id"], streamed.headers["x-request-id"]]
    ids.append(failed.headers["x-request-id"])
    assert len(set(ids)) == 3 and all(i.startswith("chatcmpl-") for i in ids)
    # the id joins an answer to its decision log line
    assert wait_until(lambda: len(running.log_lines()) == 3)
    assert {line["request_id"] for line in running.log_lines()} == set(ids)


def test_async_client_and_concurrent_requests_share_routing_batches(serve, stubs: Stubs) -> None:
    running = serve(pool_for(stubs), batch_window_ms=20)
    for stub in stubs.workers.values():
        stub.latency_s = 0.2  # the requests overlap in the server
    prompts = [f"{MATH} {index}" if index % 2 else f"{CODE} {index}" for index in range(24)]

    async def ask_all() -> list:
        async with running.async_client() as client:
            return await asyncio.gather(
                *(client.chat.completions.create(model=MODEL, messages=user(p)) for p in prompts)
            )

    completions = asyncio.run(ask_all())
    assert all(c.choices[0].message.content.startswith("answer from") for c in completions)
    metrics = running.metrics()
    assert metric_value(metrics, "fugu_routing_batch_size_sum") == 24
    batches = metric_value(metrics, "fugu_routing_batch_size_count")
    assert batches < 24, f"{batches} routing passes for 24 concurrent requests: no batching"
    assert metric_value(metrics, "fugu_requests_total", status="200", stream="false") == 24


def test_models_health_and_metrics(serve, stubs: Stubs) -> None:
    running = serve(pool_for(stubs))
    client = running.client()
    assert [model.id for model in client.models.list()] == [MODEL]
    assert client.models.retrieve(MODEL).id == MODEL
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-4o")
    health = running.health()
    assert health["status"] == "ok"
    assert {w: s["circuit"] for w, s in health["workers"].items()} == dict.fromkeys(
        WORKERS, "closed"
    )
    client.chat.completions.create(model=MODEL, messages=user(MATH))
    metrics = running.metrics()
    chosen = ranking_for(running.state.router.family, MATH).ranking[0]
    assert metric_value(metrics, "fugu_worker_choices_total", worker=chosen) == 1
    assert metric_value(metrics, "fugu_worker_calls_total", worker=chosen, outcome="ok") == 1
    assert metric_value(metrics, "fugu_routing_latency_seconds_count") == 1
    assert metric_value(metrics, "fugu_upstream_latency_seconds_count", worker=chosen) == 1
    # the stub counts whitespace tokens; prices are 1 (input) and 2 (output) per million
    prompt_tokens, completion_tokens = count_tokens(MATH), count_tokens(f"answer from {chosen}")
    assert metric_value(metrics, "fugu_tokens_total", worker=chosen, kind="prompt") == (
        prompt_tokens
    )
    assert metric_value(metrics, "fugu_cost_total", worker=chosen) == pytest.approx(
        (prompt_tokens * 1.0 + completion_tokens * 2.0) / 1e6
    )
    assert "# TYPE fugu_routing_latency_seconds histogram" in metrics


def test_health_says_degraded_or_unavailable_when_workers_are_down(
    serve, stubs: Stubs, monkeypatch: pytest.MonkeyPatch
) -> None:
    running = serve(pool_for(stubs))
    dead: set[str] = set()
    # Stub workers are remote (no local process to die here); the real-process version is
    # tests/test_server_llama.py::test_killing_the_chosen_worker_falls_back_to_the_other.
    monkeypatch.setattr(running.state.pool, "is_alive", lambda worker: worker not in dead)
    dead.add(WORKERS[0])  # e.g. its llama.cpp process exited
    response = httpx.get(f"{running.url}/health")
    assert (response.status_code, response.json()["status"]) == (200, "degraded")
    assert response.json()["workers"][WORKERS[0]]["alive"] is False
    dead.update(WORKERS)
    response = httpx.get(f"{running.url}/health")
    assert (response.status_code, response.json()["status"]) == (503, "unavailable")


def test_an_internal_error_is_a_counted_500_and_the_server_goes_on(
    serve, stubs: Stubs, monkeypatch: pytest.MonkeyPatch
) -> None:
    running = serve(pool_for(stubs))

    def broken(*args: Any) -> tuple[str, ...]:
        raise RuntimeError("a bug in fugu-lite")

    monkeypatch.setattr(running.state, "workers_reading", broken)
    response = running.post(VALID)
    assert response.status_code == 500
    assert response.json()["error"]["code"] == "internal_error"
    assert "a bug" not in response.text  # nothing internal leaks
    metrics = running.metrics()
    assert metric_value(metrics, "fugu_requests_total", status="500") == 1
    assert metric_value(metrics, "fugu_errors_total", code="internal_error") == 1
    monkeypatch.undo()
    assert running.post(VALID).status_code == 200


def test_an_internal_error_keeps_the_connection_and_is_logged_once(
    serve, stubs: Stubs, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The 500 was re-raised after it was sent: uvicorn logged the traceback a second
    time ("Exception in ASGI application") and closed the client's keep-alive connection,
    so the next request on it found it closed."""
    running = serve(pool_for(stubs))

    def broken(*args: Any) -> tuple[str, ...]:
        raise RuntimeError("a bug in fugu-lite")

    monkeypatch.setattr(running.state, "workers_reading", broken)
    body = json.dumps(VALID).encode()
    request = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
        f"\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    host, port = running.url.removeprefix("http://").split(":")
    caplog.set_level(logging.ERROR)
    with socket.create_connection((host, int(port)), timeout=10) as connection:
        for _ in range(2):  # the second request goes on the same connection
            connection.sendall(request)
            head = b""
            while b"\r\n\r\n" not in head:
                received = connection.recv(65536)
                assert received, "the server closed the connection"
                head += received
            header, _, rest = head.partition(b"\r\n\r\n")
            assert header.startswith(b"HTTP/1.1 500")
            length = int(re.search(rb"content-length: (\d+)", header.lower()).group(1))  # type: ignore[union-attr]
            while len(rest) < length:
                rest += connection.recv(65536)
            assert json.loads(rest)["error"]["code"] == "internal_error"
    tracebacks = [r for r in caplog.records if r.exc_info is not None]
    assert len(tracebacks) == 2  # one for each request
    assert all(r.name.startswith("fugu_lite") for r in tracebacks)


def test_openai_parameters_and_tools_are_passed_through(
    serve, stubs: Stubs, family: RouterFamily
) -> None:
    running = serve(pool_for(stubs))
    tools = [
        {
            "type": "function",
            "function": {
                "name": "add",
                "description": "add two numbers",
                "parameters": {"type": "object", "properties": {"a": {"type": "number"}}},
            },
        }
    ]
    running.client().chat.completions.create(
        model=MODEL,
        messages=[{"role": "system", "content": "be brief"}, *user(MATH)],
        temperature=0.3,
        top_p=0.9,
        seed=7,
        stop=["\n\n"],
        max_completion_tokens=64,
        tools=tools,
        tool_choice="auto",
        extra_body={"exclude_workers": ["coder"], "include_routing": True},
    )
    worker = ranking_for(family, MATH, ("cheap-small", "mathematician")).ranking[0]
    sent = stubs.workers[worker].bodies[-1]
    assert sent["tools"] == tools and sent["tool_choice"] == "auto"
    assert (sent["temperature"], sent["top_p"], sent["seed"], sent["stop"]) == (
        0.3, 0.9, 7, ["\n\n"],
    )  # fmt: skip
    assert sent["max_completion_tokens"] == 64 and "max_tokens" not in sent
    assert sent["messages"][0] == {"role": "system", "content": "be brief"}
    for key in ("exclude_workers", "include_routing", "workers", "cost_weight"):
        assert key not in sent


def reasoning_model_app(bodies: list[dict[str, Any]]) -> FastAPI:
    """A fake of OpenAI's o-series endpoint (a paid remote API): it refuses `max_tokens` as
    OpenAI does and answers anything else."""
    upstream = FastAPI()

    @upstream.post("/v1/chat/completions")
    async def chat(request: Request) -> JSONResponse:
        body = await request.json()
        bodies.append(body)
        if "max_tokens" in body:
            message = (
                "Unsupported parameter: 'max_tokens' is not supported with this model. "
                "Use 'max_completion_tokens' instead."
            )
            error = {"message": message, "type": "invalid_request_error",
                     "param": "max_tokens", "code": "unsupported_parameter"}  # fmt: skip
            return JSONResponse({"error": error}, status_code=400)
        return JSONResponse(
            {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
             "choices": [{"index": 0, "finish_reason": "stop",
                          "message": {"role": "assistant", "content": "reasoned"}}]}
        )  # fmt: skip

    return upstream


def test_the_output_limit_reaches_each_worker_under_the_name_it_reads(
    serve, stubs: Stubs, family: RouterFamily
) -> None:
    """A client's max_completion_tokens reached every worker as max_tokens, which OpenAI's
    o-series refuse: a correct request was a worker_rejected_request. It now keeps the
    client's name, or the name the worker's own params use."""
    first = ranking_for(family, MATH).ranking[0]
    bodies: list[dict[str, Any]] = []
    with ServerThread(reasoning_model_app(bodies)) as upstream:
        running = serve(pool_for(stubs, overrides={first: {"base_url": upstream.base_url}}))
        completion = running.client().chat.completions.create(
            model=MODEL, messages=user(MATH), max_completion_tokens=40
        )
        assert completion.choices[0].message.content == "reasoned"
        assert bodies[-1]["max_completion_tokens"] == 40 and "max_tokens" not in bodies[-1]
        # the pool names the worker's limit: a client's max_tokens goes under that name
        pinned = {"base_url": upstream.base_url, "params": {"max_completion_tokens": 100}}
        running = serve(pool_for(stubs, overrides={first: pinned}))
        completion = running.client().chat.completions.create(
            model=MODEL, messages=user(MATH), max_tokens=7
        )
        assert completion.choices[0].message.content == "reasoned"
        assert bodies[-1]["max_completion_tokens"] == 7 and "max_tokens" not in bodies[-1]
        running.client().chat.completions.create(model=MODEL, messages=user(MATH))
        assert bodies[-1]["max_completion_tokens"] == 100 and "max_tokens" not in bodies[-1]
    # and a worker whose params say max_tokens gets the client's max_completion_tokens so
    running = serve(pool_for(stubs, overrides={first: {"params": {"max_tokens": 24}}}))
    running.client().chat.completions.create(
        model=MODEL, messages=user(MATH), max_completion_tokens=9
    )
    sent = stubs.workers[first].bodies[-1]
    assert sent["max_tokens"] == 9 and "max_completion_tokens" not in sent


def test_the_deprecated_function_role_reaches_the_worker_unchanged(serve, stubs: Stubs) -> None:
    """OpenAI still takes legacy function calling (an assistant `function_call`, then a
    `function` message with the function's name and result): fugu-lite refused the role."""
    running = serve(pool_for(stubs))
    called = {"name": "weather", "arguments": '{"city": "Paris"}'}
    conversation = [
        *user("What is the weather in Paris?"),
        {"role": "assistant", "content": None, "function_call": called},
        {"role": "function", "name": "weather", "content": "sunny"},
    ]
    raw = running.client().chat.completions.with_raw_response.create(
        model=MODEL, messages=conversation
    )
    sent = stubs.workers[raw.headers["x-fugu-worker"]].bodies[-1]
    assert sent["messages"][-2:] == [
        {"role": "assistant", "function_call": called},
        {"role": "function", "name": "weather", "content": "sunny"},
    ]
    nameless = {"model": MODEL, "messages": [*user("hi"), {"role": "function", "content": "x"}]}
    response = running.post(nameless)
    assert response.status_code == 400
    assert "messages[1] is a function message without a string name" in response.text


def test_null_parameters_leave_the_workers_own_params_in_place(serve, stubs: Stubs) -> None:
    """OpenAI reads null as "the default": a client's `"temperature": null` must neither
    reach the worker (llama.cpp's server answers it with a 500) nor erase the pool's
    `params` (max_tokens: null lifted the worker's cap)."""
    params = {"temperature": 0.0, "max_tokens": 24}
    running = serve(pool_for(stubs, overrides={w: {"params": params} for w in WORKERS}))
    raw = running.client().chat.completions.with_raw_response.create(
        model=MODEL,
        messages=user(MATH),
        temperature=None,
        max_tokens=5,
        max_completion_tokens=None,
        top_p=None,
        stop=None,
        seed=None,
    )
    sent = stubs.workers[raw.headers["x-fugu-worker"]].bodies[-1]
    assert sent["temperature"] == 0.0 and sent["max_tokens"] == 5
    assert not {"top_p", "stop", "seed", "max_completion_tokens"} & sent.keys()
    response = running.post(
        {"model": MODEL, "messages": user(MATH), "max_tokens": None, "stream": None,
         "include_routing": None}
    )  # fmt: skip
    assert response.status_code == 200, response.text
    assert response.json()["object"] == "chat.completion" and "fugu" not in response.json()
    assert stubs.workers[raw.headers["x-fugu-worker"]].bodies[-1]["max_tokens"] == 24


def test_a_null_include_usage_streams_without_usage(serve, stubs: Stubs) -> None:
    """`"stream_options": {"include_usage": null}` (clients that write every unset field
    as null) was a 400 "Input should be a valid boolean", where null means the default,
    as `"stream": null` does: the stream now comes, without the usage chunk."""
    running = serve(pool_for(stubs))
    body = {"model": MODEL, "messages": user(MATH), "stream": True,
            "stream_options": {"include_usage": None}}  # fmt: skip
    with httpx.stream("POST", f"{running.url}/v1/chat/completions", json=body) as response:
        assert response.status_code == 200, response.read()
        events = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    assert chunks and all(chunk["choices"] and "usage" not in chunk for chunk in chunks)
    text = "".join(chunk["choices"][0]["delta"].get("content") or "" for chunk in chunks)
    assert text.startswith("answer from ")


# --- per-request and server-wide worker selection ----------------------------------------------


def test_exclude_workers_routes_to_the_best_remaining_worker(
    serve, stubs: Stubs, family: RouterFamily
) -> None:
    running = serve(pool_for(stubs))
    first, second = ranking_for(family, MATH).ranking[:2]
    raw = running.client().chat.completions.with_raw_response.create(
        model=MODEL, messages=user(MATH), extra_body={"exclude_workers": [first]}
    )
    assert raw.headers["x-fugu-worker"] == second
    probabilities = json.loads(raw.headers["x-fugu-probabilities"])
    assert probabilities[first] == 0
    assert sum(probabilities.values()) == pytest.approx(1.0, abs=1e-3)
    assert not stubs.workers[first].bodies


def test_excluding_every_worker_or_an_unknown_one_is_a_clear_400(serve, stubs: Stubs) -> None:
    running = serve(pool_for(stubs))
    client = running.client()
    with pytest.raises(openai.BadRequestError) as error:
        client.chat.completions.create(
            model=MODEL, messages=user(MATH), extra_body={"exclude_workers": WORKERS}
        )
    assert error.value.body["code"] == "no_worker_left"
    assert "no worker is left" in error.value.body["message"]
    with pytest.raises(openai.BadRequestError) as error:
        client.chat.completions.create(
            model=MODEL, messages=user(MATH), extra_body={"exclude_workers": ["gpt-5"]}
        )
    assert "gpt-5" in error.value.body["message"] and "coder" in error.value.body["message"]
    assert error.value.body["param"] == "exclude_workers"
    assert not any(stub.bodies for stub in stubs.workers.values())


def test_workers_allow_list(serve, stubs: Stubs, family: RouterFamily) -> None:
    running = serve(pool_for(stubs))
    client = running.client()
    for allowed in (["cheap-small"], ["cheap-small", "coder"]):
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=user(MATH), extra_body={"workers": allowed}
        )
        expected = ranking_for(family, MATH, tuple(allowed)).ranking[0]
        assert raw.headers["x-fugu-worker"] == expected
        probabilities = json.loads(raw.headers["x-fugu-probabilities"])
        assert {w for w, p in probabilities.items() if p > 0} == set(allowed)
    assert not stubs.workers["mathematician"].bodies


def test_server_wide_opt_out_is_never_routed_to(serve, stubs: Stubs, family: RouterFamily) -> None:
    favourite = ranking_for(family, MATH).ranking[0]
    running = serve(pool_for(stubs, opt_out=(favourite,)))
    client = running.client()
    for _ in range(3):
        raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=user(MATH))
        assert raw.headers["x-fugu-worker"] != favourite
    assert not stubs.workers[favourite].bodies
    with pytest.raises(openai.BadRequestError) as error:
        client.chat.completions.create(
            model=MODEL, messages=user(MATH), extra_body={"workers": [favourite]}
        )
    assert "opted out server-wide" in error.value.body["message"]
    assert running.health()["opt_out"] == [favourite]


def test_cost_weight_needs_a_router_family(serve, stubs: Stubs) -> None:
    running = serve(pool_for(stubs))
    with pytest.raises(openai.BadRequestError) as error:
        running.client().chat.completions.create(
            model=MODEL, messages=user(MATH), extra_body={"cost_weight": 0.5}
        )
    assert error.value.body["code"] == "cost_weight_unsupported"
    assert "--cost-weights" in error.value.body["message"]


@pytest.fixture(scope="module")
def router_family(tmp_path_factory: pytest.TempPathFactory) -> RouterFamily:
    root = tmp_path_factory.mktemp("family")
    config = PipelineConfig(
        model=tiny_config(root / "cache"),
        sft=SFTTrainingConfig(epochs=6, batch_size=16, learning_rate=0.05),
        rl=RLTrainingConfig(epochs=1, batch_size=16, learning_rate=0.01),
    )
    train_router_family(generated_records(), config, root / "family", [0.0, 10.0])
    return load_family_or_single(root / "family")


def test_cost_weight_picks_the_head_for_the_nearest_trained_weight(
    serve, stubs: Stubs, router_family: RouterFamily
) -> None:
    running = serve(pool_for(stubs), router=router_family)
    client = running.client()

    def routed(cost_weight: float | None) -> dict:
        extra: dict[str, Any] = {"include_routing": True}
        if cost_weight is not None:
            extra["cost_weight"] = cost_weight
        completion = client.chat.completions.create(
            model=MODEL, messages=user(MATH), extra_body=extra
        )
        return completion.model_extra["fugu"]

    assert routed(None)["cost_weight"] == 0.0
    assert routed(2.0)["cost_weight"] == 0.0
    expensive = routed(0.0)
    cheap = routed(8.0)
    assert cheap["cost_weight"] == 10.0
    # At lambda 10 the cheap worker's 0.1 cost beats the others' rewards on every prompt.
    assert cheap["worker"] == "cheap-small"
    assert expensive["worker"] == "mathematician"
    assert client.models.retrieve(MODEL).model_extra["cost_weights"] == [0.0, 10.0]
    with pytest.raises(openai.BadRequestError) as error:
        client.chat.completions.create(
            model=MODEL, messages=user(MATH), extra_body={"cost_weight": -1}
        )
    assert error.value.body["param"] == "cost_weight"


# --- fallback and the circuit breaker -----------------------------------------------------------


@pytest.mark.parametrize("failure", ["500", "503", "429", "close", "401"])
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
    # a 401 from a worker is its configuration, not the caller's fault
    expected = {"500": "server", "503": "server", "429": "rate_limit", "401": "worker_config",
                "close": "connection"}  # fmt: skip
    assert line["attempts"][0]["outcome"] == expected[failure]
    assert metric_value(running.metrics(), "fugu_fallbacks_total") == 1


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
        assert running.health()["workers"][first]["circuit"] == "open"


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
    stubs.workers[worker].stream_chunk_delay_s = 2.0  # the role chunk, then 2 s before each word
    started = time.monotonic()
    stream = running.client().chat.completions.create(model=MODEL, messages=user(MATH), stream=True)
    received = []
    with pytest.raises(openai.APIError, match=re.escape(f"worker {worker}: no chunk for 0.5 s")):
        for chunk in stream:
            received.append((time.monotonic(), chunk))
    ended = time.monotonic()
    assert [chunk.choices[0].delta.role for _, chunk in received] == ["assistant"]
    # cut after about timeout_s (the stub's first word comes 2 s after its role chunk), timed
    # from the role chunk: the time to route and connect on a busy machine does not count
    stalled = ended - received[0][0]
    assert ended - started >= 0.45 and stalled < 1.2, f"cut after {stalled:.2f} s of silence"
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
    assert running.health()["workers"][first]["circuit"] == "open"
    assert metric_value(running.metrics(), "fugu_circuit_open", worker=first) == 1
    calls = len(bad.bodies)
    assert ask() == f"{first}:circuit_open,{second}:ok"  # skipped without a call
    assert len(bad.bodies) == calls

    bad.mode = "ok"
    assert wait_until(lambda: running.health()["workers"][first]["circuit"] == "half_open", 3)
    raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=user(MATH))
    assert raw.headers["x-fugu-worker"] == first  # the probe went through and succeeded
    assert running.health()["workers"][first]["circuit"] == "closed"
    assert metric_value(running.metrics(), "fugu_circuit_open", worker=first) == 0


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


def test_a_busy_worker_is_a_503_with_retry_after_that_the_sdk_retries(
    serve, stubs: Stubs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request that waited its whole deadline for a slot of a busy worker was a 502
    `all_workers_failed` (a gateway error, with no hint of when to come back); nothing
    failed, so it is a 503 with Retry-After, which the openai SDK waits for and retries."""
    monkeypatch.setattr("fugu_lite.server_dispatch.BACKOFF_MARGIN_S", 0.0)  # deadline = 1 s
    one_slot = {"max_concurrency": 1, "timeout_s": 1.0, "max_retries": 0}
    running = serve(pool_for(stubs, overrides={"coder": one_slot}))
    stubs.workers["coder"].latency_s = 0.7
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
        client = openai.AsyncOpenAI(base_url=running.thread.base_url, api_key="unused",
                                    max_retries=3)  # fmt: skip
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
        assert f"{first} (worker {first}: rate_limit: HTTP 429" in body["message"]
    assert [a["outcome"] for a in body["tried"]] == ["rate_limit", "rate_limit"]
    stubs.workers[second].mode = "500"  # a real failure among them: a 502, as before
    response = running.post({"model": MODEL, "messages": user(MATH), **pair})
    assert response.status_code == 502


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
    client = openai.OpenAI(base_url=running.thread.base_url, api_key="unused", max_retries=1)
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

    # The last worker left still gets the pool's retries, honouring its Retry-After.
    limited.mode, limited.retry_after_s = "ok", 0.3
    limited.fail_next("429")
    started = time.monotonic()
    response = serve(pool).post({"model": MODEL, "messages": user(MATH), "workers": [first]})
    assert response.status_code == 200 and response.headers["x-fugu-attempts"] == f"{first}:ok"
    assert time.monotonic() - started >= 0.3 and len(limited.bodies) == 4


def test_a_rate_limited_worker_is_skipped_for_its_retry_after_not_taken_as_broken(
    serve, stubs: Stubs, family: RouterFamily
) -> None:
    """Each 429 counted as a failure of the worker: a burst over the provider's rate limit
    opened the circuit of a healthy worker (skipped for the whole cool-down, 30 s, when the
    provider asked for 1 s, and /health said degraded). A 429 now leaves the circuit alone;
    the worker is skipped until its Retry-After ends, then asked again. A 429
    insufficient_quota (no credit left) still counts: it does not pass by itself."""
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

    limited.retry_after_s = 1.0
    running.post({"model": MODEL, "messages": user(MATH)})
    calls = len(limited.bodies)
    limited.mode = "ok"
    response = running.post({"model": MODEL, "messages": user(MATH), "stream": True})
    assert response.headers["x-fugu-attempts"] == f"{first}:rate_limit,{second}:ok"
    assert len(limited.bodies) == calls  # skipped without a call while its limit lasts
    alone = running.post({"model": MODEL, "messages": user(MATH), "workers": [first]})
    assert alone.status_code == 429 and alone.headers["retry-after"] == "1"
    time.sleep(1.1)
    response = running.post({"model": MODEL, "messages": user(MATH)})
    assert response.headers["x-fugu-attempts"] == f"{first}:ok"

    limited.mode = "quota"
    for _ in range(2):
        running.post({"model": MODEL, "messages": user(MATH)})
    assert running.health()["workers"][first]["circuit"] == "open"


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


# --- auth and secrets ---------------------------------------------------------------------------


def test_api_keys_are_required_when_configured(serve, stubs: Stubs) -> None:
    running = serve(pool_for(stubs), api_keys=[ENDPOINT_KEY, "sk-second-key-abcdef"])
    with pytest.raises(openai.AuthenticationError) as error:
        running.client(api_key="sk-wrong-key-000000").chat.completions.create(
            model=MODEL, messages=user(MATH)
        )
    assert error.value.body["code"] == "invalid_api_key"
    for headers in ({}, {"authorization": "Basic abc"}, {"authorization": "Bearer"}):
        response = running.post({"model": MODEL, "messages": user(MATH)}, headers=headers)
        assert response.status_code == 401
        assert set(response.json()["error"]) >= {"message", "type", "param", "code"}
        assert ENDPOINT_KEY not in response.text
    for key in (ENDPOINT_KEY, "sk-second-key-abcdef"):
        completion = running.client(api_key=key).chat.completions.create(
            model=MODEL, messages=user(MATH)
        )
        assert completion.model == MODEL
    assert httpx.get(f"{running.url}/metrics").status_code == 401
    assert httpx.get(f"{running.url}/v1/models").status_code == 401
    assert "fugu_requests_total" in running.metrics(api_key=ENDPOINT_KEY)
    assert httpx.get(f"{running.url}/health").status_code == 200


def test_api_keys_come_from_a_file_one_a_line_and_an_env_var_comma_separated(
    serve, stubs: Stubs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys_file = tmp_path / "keys.txt"
    keys_file.write_text(f"# the endpoint's keys\n{ENDPOINT_KEY}\n\nsk-second-key-abcdef\n")
    assert load_api_keys(file=keys_file) == [ENDPOINT_KEY, "sk-second-key-abcdef"]
    monkeypatch.setenv("FUGU_TEST_ENDPOINT_KEYS", "sk-env-key-one-1234,sk-env-key-two-5678")
    keys = load_api_keys("FUGU_TEST_ENDPOINT_KEYS", keys_file)
    assert keys == ["sk-env-key-one-1234", "sk-env-key-two-5678", ENDPOINT_KEY,
                    "sk-second-key-abcdef"]  # fmt: skip
    running = serve(pool_for(stubs), api_keys=keys)
    for key in keys:
        completion = running.client(api_key=key).chat.completions.create(
            model=MODEL, messages=user(MATH)
        )
        assert completion.model == MODEL
    with pytest.raises(openai.AuthenticationError):
        running.client(api_key="# the endpoint's keys").chat.completions.create(
            model=MODEL, messages=user(MATH)
        )


def test_worker_keys_never_reach_responses_or_logs(
    serve, stubs: Stubs, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("FUGU_TEST_WORKER_KEY", WORKER_KEY)
    running = serve(
        pool_for(stubs, overrides={"coder": {"api_key_env": "FUGU_TEST_WORKER_KEY"}}),
        log_content=True,
    )
    stubs.workers["coder"].mode = "leak"  # its 500 echoes the Authorization header back
    for stream in (False, True):
        body = {"model": MODEL, "messages": user(CODE), "workers": ["coder"], "stream": stream}
        response = running.post(body)
        assert response.status_code == 502
        assert WORKER_KEY not in response.text
        assert "coder" in response.json()["error"]["message"]
    assert stubs.workers["coder"].auth_headers[-1] == f"Bearer {WORKER_KEY}"  # it was sent
    running.state.log.flush()
    assert WORKER_KEY not in running.settings.log_requests.read_text()
    assert WORKER_KEY not in caplog.text
    assert WORKER_KEY not in running.metrics()


# --- bad input ----------------------------------------------------------------------------------

VALID = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
TOOL = {"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}
BAD_INPUTS = [
    ("not json", b"{not json", 400, "not valid JSON"),
    ("empty body", b"", 400, "empty"),
    ("array body", b"[1, 2]", 400, "JSON object"),
    ("not utf-8", b'{"model": "\xff"}', 400, "not UTF-8"),
    ("missing messages", {"model": MODEL}, 400, "messages: is required"),
    ("missing model", {"messages": VALID["messages"]}, 400, "model: is required"),
    ("empty messages", {**VALID, "messages": []}, 400, "at least one message"),
    ("messages not a list", {**VALID, "messages": "hi"}, 400, "messages"),
    ("wrong role", {**VALID, "messages": [{"role": "robot", "content": "x"}]}, 400,
     "messages[0].role"),
    ("message without role", {**VALID, "messages": [{"content": "x"}]}, 400,
     "messages[0].role: is required"),
    # OpenAI refuses them; a local worker read "" and a remote one refused (routing decided)
    ("a user turn with null content", {**VALID, "messages": [{"role": "user", "content": None}]},
     400, "messages[0] is a user message without content"),
    # OpenAI's content parts are one at least; a local worker read "" (routing decided)
    ("a user turn with no content parts", {**VALID, "messages": [{"role": "user", "content": []}]},
     400, "messages[0].content is an empty list, which OpenAI's API refuses too"),
    ("a tool turn without content", {**VALID, "messages": [
        *VALID["messages"], {"role": "tool", "tool_call_id": "c1"}]}, 400,
     "messages[1] is a tool message without content"),
    ("unknown model", {**VALID, "model": "gpt-4o"}, 404, "does not exist"),
    ("absurd max_tokens", {**VALID, "max_tokens": 10**9}, 400, "max_tokens=1000000000"),
    ("absurd max_completion_tokens", {**VALID, "max_completion_tokens": 10**7}, 400,
     "max_completion_tokens"),
    ("zero max_tokens", {**VALID, "max_tokens": 0}, 400, "max_tokens"),
    ("max_tokens not a number", {**VALID, "max_tokens": "lots"}, 400, "max_tokens"),
    ("max_tokens a boolean", {**VALID, "max_tokens": True}, 400, "max_tokens"),
    ("stream a string", {**VALID, "stream": "yes"}, 400, "stream: Input should be a valid boolean"),
    ("n a string", {**VALID, "n": "1"}, 400, "n: Input should be a valid integer"),
    ("temperature out of range", {**VALID, "temperature": 7}, 400, "temperature"),
    ("n above 1", {**VALID, "n": 3}, 400, "n=3 is not supported"),
    # OpenAI's parameters typed as OpenAI types them: llama.cpp's server answers these 500
    ("temperature a word", {**VALID, "temperature": "hot"}, 400, "temperature"),
    # OpenAI's types, not pydantic's lax reading: each reached the worker as 1.0, true, []
    ("temperature a boolean", {**VALID, "temperature": True}, 400,
     "temperature: Input should be a valid number (got true)"),
    ("top_p a numeric string", {**VALID, "top_p": "0.5"}, 400, "top_p: Input should be a valid"),
    ("logit_bias a boolean", {**VALID, "logit_bias": {"42": True}}, 400, "logit_bias"),
    ("include_usage a word", {**VALID, "stream": True, "stream_options": {
        "include_usage": "yes"}}, 400, "stream_options.include_usage: Input should be a valid "
     "boolean"),
    ("no tools", {**VALID, "tools": []}, 400, "tools: is an empty list"),
    ("cost_weight a boolean", {**VALID, "cost_weight": True}, 400,
     "cost_weight: Input should be a valid number"),
    ("logit_bias not a map", {**VALID, "logit_bias": "x"}, 400, "logit_bias"),
    ("stop a number", {**VALID, "stop": 5}, 400, "stop"),
    ("unknown response_format", {**VALID, "response_format": {"type": "yaml"}}, 400,
     "response_format.type"),
    # OpenAI's API requires the name; a local worker ignored it (routing decided)
    ("json_schema without a name", {**VALID, "response_format": {"type": "json_schema",
        "json_schema": {"schema": {"type": "object"}}}}, 400,
     "response_format: json_schema.name is required"),
    ("json_schema name with a space", {**VALID, "response_format": {"type": "json_schema",
        "json_schema": {"name": "my answer", "schema": {"type": "object"}}}}, 400,
     'json_schema.name must be letters, digits, _ or - (at most 64), e.g. "answer"; got "my '),
    ("json_schema without its object", {**VALID, "response_format": {
        "type": "json_schema", "schema": {"type": "object"}}}, 400,
     'type "json_schema" needs a `json_schema` object'),
    ("too many top_logprobs", {**VALID, "logprobs": True, "top_logprobs": 50}, 400,
     "top_logprobs"),
    ("penalty out of range", {**VALID, "presence_penalty": 3}, 400, "presence_penalty"),
    ("seed a string", {**VALID, "seed": "5"}, 400, "seed"),
    ("tools not a list", {**VALID, "tools": {"type": "function"}}, 400, "tools"),
    ("stream_options without a stream", {**VALID, "stream_options": {"include_usage": True}},
     400, "stream_options is only allowed with stream: true"),
    ("five stop sequences", {**VALID, "stop": list("abcde")}, 400, "at most 4"),
    ("logit_bias key not a token id", {**VALID, "logit_bias": {"hello": 5}}, 400,
     "logit_bias keys are token ids"),
    ("logit_bias out of range", {**VALID, "logit_bias": {"42": 200}}, 400,
     "is outside -100..100"),
    ("tool without a function name", {**VALID, "tools": [{"type": "function"}]}, 400,
     "tools[0] is a function tool without"),
    # OpenAI's API refuses such a name; a local worker took it (routing decided)
    ("a tool name with a dot", {**VALID, "tools": [{"type": "function", "function": {
        "name": "weather.get"}}]}, 400,
     'tools[0].function.name must be letters, digits, _ or - (at most 64), e.g. "get_weather"; '
     'got "weather.get"'),
    ("tool_choice naming no tool", {**VALID, "tools": [TOOL], "tool_choice": {
        "type": "function", "function": {"name": "mul"}}}, 400,
     "names the function 'mul', which is not among the tools (add)"),
    ("tool_choice required without tools", {**VALID, "tool_choice": "required"}, 400,
     "tool_choice: is only allowed when `tools` are given"),
    ("unknown tool_choice", {**VALID, "tools": [TOOL], "tool_choice": "always"}, 400,
     "tool_choice 'always' is not one of"),
    # A worker got them as sent: OpenAI refused them, a local worker ignored the name
    ("a name not a string", {**VALID, "messages": [{"role": "user", "content": "hi",
        "name": 5}]}, 400, "messages[0].name must be a string (the participant's name"),
    ("an assistant's name an object", {**VALID, "messages": [{"role": "assistant",
        "content": "hi", "name": {"first": "Al"}}, {"role": "user", "content": "hi"}]}, 400,
     'messages[0].name must be a string (the participant\'s name, e.g. "alice"), as OpenAI\'s'
     ' API requires; got {"first": "Al"}'),
    ("an assistant turn's empty tool_calls", {**VALID, "messages": [
        {"role": "user", "content": "add"}, {"role": "assistant", "content": "no tool",
                                             "tool_calls": []}, *VALID["messages"]]}, 400,
     "messages[1].tool_calls is an empty list, which OpenAI's API refuses too"),
    ("tool message without its call id", {**VALID, "messages": [
        {"role": "user", "content": "add"}, {"role": "tool", "content": "5"}]}, 400,
     "messages[1] is a tool message without a string tool_call_id"),
    ("tool call arguments not a string", {**VALID, "messages": [
        {"role": "user", "content": "add"}, {"role": "assistant", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "add", "arguments": {}}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "5"}]}, 400,
     "messages[1].tool_calls[0] must be an object"),
    ("a schema no value matches", {**VALID, "response_format": {"type": "json_schema",
        "json_schema": {"name": "x", "schema": {"type": "object", "properties": {
            "enum": {"anyOf": []}, "b": {"const": {"enum": []}}}}}}}, 400,
     "response_format.json_schema.schema.properties.enum.anyOf is empty"),
    ("top_logprobs without logprobs", {**VALID, "top_logprobs": 2}, 400,
     "top_logprobs needs logprobs: true"),
    ("workers not a list", {**VALID, "workers": "coder"}, 400, "workers"),
    ("cost_weight not a number", {**VALID, "cost_weight": "cheap"}, 400, "cost_weight"),
    ("text part not a string", {**VALID, "messages": [{"role": "user", "content": [
        {"type": "text", "text": 5}]}]}, 400, "content[0] is a text part whose 'text' is not"),
    ("refusal part not a string", {**VALID, "messages": [{"role": "assistant", "content": [
        {"type": "refusal", "refusal": None}]}, {"role": "user", "content": "hi"}]}, 400,
     "content[0] is a refusal part whose 'refusal' is not a string"),
    ("content part without a type", {**VALID, "messages": [{"role": "user", "content": [
        {"text": "hi"}]}]}, 400, "content[0] must be an object with a string 'type'"),
    ("lone surrogate", b'{"model": "fugu-lite", "messages": [{"role": "user", "content": '
     b'"bad \\ud800 half pair"}]}', 400, "lone UTF-16 surrogate (\\ud800)"),
    ("deeply nested body", b'{"model": "fugu-lite", "messages": ' + b"[" * 1500 + b"]" * 1500
     + b"}", 400, "nested too deeply"),
]  # fmt: skip


@pytest.fixture(scope="module")
def shared_server(family: RouterFamily, checkpoint: Path, stubs: Stubs) -> Iterator[Running]:
    settings = ServeSettings(checkpoint=checkpoint, max_body_bytes=4096, max_tokens_limit=4096)
    app = create_app(settings, family=family, pool_config=pool_for(stubs))
    with ServerThread(app) as thread:
        yield Running(thread, settings, app)


@pytest.mark.parametrize(
    ("body", "status", "fragment"),
    [case[1:] for case in BAD_INPUTS],
    ids=[case[0] for case in BAD_INPUTS],
)
def test_bad_input_gets_a_clear_4xx(
    shared_server: Running, stubs: Stubs, body: Any, status: int, fragment: str
) -> None:
    response = shared_server.post(body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert fragment in error["message"]
    assert error["type"] == "invalid_request_error"
    assert not any(stub.bodies for stub in stubs.workers.values())


@pytest.mark.parametrize(
    "choice", ["none", "auto", "required", {"type": "function", "function": {"name": "add"}}]
)
def test_tool_choice_without_tools_is_a_400_naming_it(
    shared_server: Running, stubs: Stubs, choice: Any
) -> None:
    """OpenAI answers any tool_choice without `tools` with a 400 ("'tool_choice' is only
    allowed when 'tools' are specified"); "none" and "auto" went on to a worker, so whether
    the request failed depended on the worker routed to."""
    with pytest.raises(openai.BadRequestError) as error:
        shared_server.client().chat.completions.create(
            model=MODEL, messages=user("hi"), tool_choice=choice
        )
    assert error.value.body["param"] == "tool_choice"
    assert "tool_choice: is only allowed when `tools` are given" in error.value.body["message"]
    assert not any(stub.bodies for stub in stubs.workers.values())


def test_parallel_tool_calls_without_tools_is_a_400_naming_it(
    shared_server: Running, stubs: Stubs
) -> None:
    """OpenAI answers parallel_tool_calls without `tools` with a 400 ("'parallel_tool_calls'
    is only allowed when 'tools' are specified"); it went on to a worker, so whether the
    request failed depended on the worker routed to. With tools it is sent on."""
    client = shared_server.client()
    with pytest.raises(openai.BadRequestError) as error:
        client.chat.completions.create(model=MODEL, messages=user("hi"), parallel_tool_calls=False)
    assert error.value.body["param"] == "parallel_tool_calls"
    assert "is only allowed when `tools` are given" in error.value.body["message"]
    assert not any(stub.bodies for stub in stubs.workers.values())
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL,
        messages=user("hi"),
        tools=[TOOL],
        parallel_tool_calls=False,  # type: ignore[list-item]
    )
    assert stubs.workers[raw.headers["x-fugu-worker"]].bodies[-1]["parallel_tool_calls"] is False


def test_loosely_typed_parameters_are_refused_naming_the_parameter(
    shared_server: Running, stubs: Stubs
) -> None:
    """`temperature: true`, `include_usage: "yes"` and `tools: []` were read by pydantic's
    lax rules and sent on; OpenAI answers them 400 naming the parameter. Integers are
    numbers there, as in OpenAI's API."""
    for extra, param in (
        ({"temperature": True}, "temperature"),
        ({"frequency_penalty": "1"}, "frequency_penalty"),
        ({"stream": True, "stream_options": {"include_usage": 1}}, "stream_options.include_usage"),
        ({"tools": []}, "tools"),
    ):
        response = shared_server.post({**VALID, **extra})
        assert response.status_code == 400, response.text
        assert response.json()["error"]["param"] == param
    assert not any(stub.bodies for stub in stubs.workers.values())
    raw = shared_server.client().chat.completions.with_raw_response.create(
        model=MODEL, messages=user("hi"), temperature=1, top_p=1, presence_penalty=0,
        logit_bias={"42": 5},
    )  # fmt: skip
    sent = stubs.workers[raw.headers["x-fugu-worker"]].bodies[-1]
    assert (sent["temperature"], sent["top_p"], sent["presence_penalty"]) == (1, 1, 0)
    assert sent["logit_bias"] == {"42": 5}


def test_body_size_limit_is_a_413(shared_server: Running, stubs: Stubs) -> None:
    big = {**VALID, "messages": [{"role": "user", "content": "x" * 5000}]}
    response = shared_server.post(big)
    assert response.status_code == 413
    assert "4096 bytes" in response.json()["error"]["message"]

    def chunked():  # no Content-Length: the limit applies while reading
        yield json.dumps(big).encode()

    response = httpx.post(
        f"{shared_server.url}/v1/chat/completions",
        content=chunked(),
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 413
    assert "more than this server accepts (4096 bytes)" in response.json()["error"]["message"]
    assert not any(stub.bodies for stub in stubs.workers.values())


def test_unknown_routes_and_methods_answer_in_openai_shape(shared_server: Running) -> None:
    response = httpx.post(f"{shared_server.url}/v1/completions", json=VALID)
    assert response.status_code == 404
    assert "/v1/chat/completions" in response.json()["error"]["message"]
    response = httpx.get(f"{shared_server.url}/v1/chat/completions")
    assert response.status_code == 405
    assert "error" in response.json()


def test_head_is_answered_where_get_is(shared_server: Running) -> None:
    """An uptime monitor or load balancer probing /health with HEAD got a 405 (FastAPI's GET
    routes do not take HEAD) and reported the server down; HEAD answers as GET would,
    status and headers, without a body."""
    for path, status in [("/health", 200), ("/v1/models", 200), ("/metrics", 200),
                         (f"/v1/models/{MODEL}", 200), ("/v1/models/gpt-4o", 404)]:  # fmt: skip
        response = httpx.head(f"{shared_server.url}{path}")
        assert response.status_code == status, (path, response.status_code)
        assert response.content == b""
        assert response.headers["content-type"].startswith(
            httpx.get(f"{shared_server.url}{path}").headers["content-type"]
        )
    response = httpx.head(f"{shared_server.url}/v1/chat/completions")
    assert response.status_code == 405 and response.headers["allow"] == "POST"


def test_refused_requests_are_counted_in_the_metrics(shared_server: Running) -> None:
    before = shared_server.metrics()
    shared_server.post(b"{broken")
    shared_server.post({**VALID, "model": "gpt-4o"})
    httpx.post(f"{shared_server.url}/v1/completions", json=VALID)  # no such route
    after = shared_server.metrics()

    def delta(name: str, **labels: str) -> float:
        return metric_value(after, name, **labels) - metric_value(before, name, **labels)

    assert delta("fugu_requests_total", status="400", stream="unknown") == 1
    assert delta("fugu_requests_total", status="404", stream="unknown") == 2
    assert delta("fugu_errors_total", code="invalid_request_error") == 1
    assert delta("fugu_errors_total", code="model_not_found") == 1
    assert delta("fugu_errors_total", code="404") == 1


def test_sdk_surfaces_bad_input_as_its_exceptions(shared_server: Running) -> None:
    client = shared_server.client()
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="gpt-4o", messages=user("hi"))
    with pytest.raises(openai.BadRequestError) as error:
        client.chat.completions.create(model=MODEL, messages=[{"role": "wizard", "content": "x"}])
    assert "messages[0].role" in error.value.body["message"]
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=MODEL, messages=user("hi"), max_tokens=10**6)


# --- the decision log ---------------------------------------------------------------------------


def test_decision_log_lines_are_ready_to_become_training_records(
    serve, stubs: Stubs, family: RouterFamily
) -> None:
    running = serve(pool_for(stubs))
    messages = [{"role": "system", "content": "be brief"}, *user("secret plans for " + MATH)]
    running.client().chat.completions.create(model=MODEL, messages=messages)
    [line] = running.log_lines()
    record = RewardRecord(
        prompt=[ChatMessage(**m) for m in messages],
        split="train",
        worker_ids=line["worker_ids"],
        rewards=[1.0 if w == line["worker"] else 0.0 for w in line["worker_ids"]],
    )
    assert line["prompt_hash"] == record.prompt_hash
    assert line["worker_ids"] == WORKERS
    assert sum(line["probabilities"]) == pytest.approx(1.0, abs=1e-5)
    assert line["outcome"] == "ok" and line["status"] == 200
    prompt_tokens = sum(count_tokens(m["content"]) for m in messages)
    assert line["usage"] == {"prompt_tokens": prompt_tokens, "completion_tokens": 3}
    assert line["cost"] == pytest.approx((prompt_tokens * 1.0 + 3 * 2.0) / 1e6)
    assert line["latency_s"] >= line["routing_latency_s"] > 0
    assert "secret plans" not in json.dumps(line) and "messages" not in line

    with_content = serve(pool_for(stubs), log_content=True)
    with_content.client().chat.completions.create(model=MODEL, messages=messages)
    [line] = with_content.log_lines()
    assert line["messages"] == messages


# --- units: batcher, breaker, CLI ---------------------------------------------------------------


def test_micro_batcher_groups_waiting_requests_and_keeps_the_loop_free() -> None:
    asyncio.run(batcher_groups_waiting_requests_and_keeps_the_loop_free())


async def batcher_groups_waiting_requests_and_keeps_the_loop_free() -> None:
    batches: list[list[int]] = []

    def slow_double(items: list[int]) -> list[int]:
        batches.append(items)
        time.sleep(0.2)  # a forward pass: must not block the event loop
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
    assert ticks >= 30  # ~0.6 s of forward passes, and the loop kept ticking


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
    await batcher.stop()


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
    breaker.release("a")  # the probe's client left: someone else may probe
    assert breaker.acquire("a")
    breaker.record_success("a")
    assert breaker.state("a") == "closed" and breaker.acquire("a")
    assert breaker.snapshot()["a"]["times_opened"] == 2
    assert breaker.state("b") == "closed"


runner = CliRunner()


def test_serve_command_refuses_bad_flags_before_loading_anything(
    checkpoint: Path, tmp_path: Path
) -> None:
    def serve_with(*flags: str) -> str:
        result = runner.invoke(cli_app, ["serve", "--checkpoint", str(checkpoint), *flags])
        assert result.exit_code == 2, result.output
        return " ".join(result.output.split())

    assert "--log-level 'bogus' is not a log level" in serve_with("--log-level", "bogus")
    assert "--model-name is empty" in serve_with("--model-name", " ")
    assert "--log-requests" in serve_with("--log-requests", str(tmp_path))  # a folder
    assert "--cors-origin 'localhost:3000' is not an origin" in serve_with(
        "--cors-origin", "localhost:3000"
    )
    for flag, value in (("--max-body-bytes", "0"), ("--port", "70000"), ("--torch-threads", "-2"),
                        ("--max-batch-size", "0"), ("--breaker-failures", "0")):  # fmt: skip
        assert f"Invalid value for '{flag}'" in serve_with(flag, value)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert f"cannot listen on 127.0.0.1:{port}" in serve_with("--port", str(port))


def test_serve_command_refuses_bad_setups_before_listening(
    checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = runner.invoke(cli_app, ["serve", "--checkpoint", str(tmp_path / "nothing")])
    assert missing.exit_code == 2
    assert "not a fugu-lite router checkpoint" in " ".join(missing.output.split())

    pool = tmp_path / "pool.yaml"
    pool.write_text(
        "workers:\n  - {id: alpha, model: a, base_url: 'http://127.0.0.1:9/v1'}\n",
        encoding="utf-8",
    )
    mismatch = runner.invoke(
        cli_app, ["serve", "--checkpoint", str(checkpoint), "--pool", str(pool)]
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
        cli_app, ["serve", "--checkpoint", str(checkpoint), "--pool", str(keyless)]
    )
    assert unset.exit_code == 2
    assert "FUGU_UNSET_WORKER_KEY" in unset.output

    monkeypatch.delenv("FUGU_NO_SUCH_KEYS", raising=False)
    no_keys = runner.invoke(
        cli_app,
        ["serve", "--checkpoint", str(checkpoint), "--api-keys-env", "FUGU_NO_SUCH_KEYS"],
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
            ["serve", "--checkpoint", str(checkpoint), "--pool", str(pool), *options],
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
    dispatch = logging.getLogger("fugu_lite.server_dispatch")
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
