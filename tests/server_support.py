"""What the `fugu-lite serve` tests (test_server*.py) share: stub workers counted while they
serve, a router trained on the tiny random backbone, a server started on a pool of stubs and
reading its answers, metrics and decision log. The fixtures built from these (stubs,
checkpoint, family, serve) are in conftest.py."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
from conftest import WORKERS, generated_records

from fugu_lite.config import ModelConfig, SFTConfig, SFTTrainingConfig
from fugu_lite.router_family import RouterFamily
from fugu_lite.schemas import ChatMessage
from fugu_lite.server.app import ServeSettings, create_app
from fugu_lite.server.routing import RouteRequest, RouterService
from fugu_lite.server.thread import ServerThread
from fugu_lite.testing.stub_worker import StubWorker
from fugu_lite.train_sft import train_sft
from fugu_lite.workers.config import PoolConfig, WorkerConfig

MODEL = "fugu-lite"
MATH = "compute the sum of the numbers 4242 item 7"
CODE = "write a python function that 4242 item 7"
ENDPOINT_KEY = "sk-fugu-endpoint-test-key-0123456789"
WORKER_KEY = "sk-worker-secret-do-not-leak-987654321"


# --- stubs, router, server -------------------------------------------------------------------


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
            stub.usage = None
            stub.reply = f"answer from {worker}"


def running_stubs() -> Iterator[Stubs]:
    """One counted stub per worker of WORKERS, stopped when the generator is closed."""
    made = {worker: counted_stub() for worker in WORKERS}
    yield Stubs({w: s for w, (s, _) in made.items()}, {w: c for w, (_, c) in made.items()})
    for stub, _ in made.values():
        stub.stop()


def tiny_config(cache_dir: Path) -> ModelConfig:
    return ModelConfig(
        backbone="tiny-random", layer=-1, head="linear", max_tokens=32, cache_dir=str(cache_dir)
    )


def trained_checkpoint(root: Path) -> Path:
    """A router trained on generated_records() with the tiny random backbone."""
    training = SFTTrainingConfig(epochs=8, batch_size=16, learning_rate=0.05)
    config = SFTConfig(model=tiny_config(root / "cache"), training=training)
    return Path(train_sft(generated_records(), config, root / "sft")["checkpoint"])


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


def server_starter(
    family: RouterFamily, checkpoint: Path, tmp_path: Path
) -> Iterator[Callable[..., Running]]:
    """start(pool_config, **settings) -> a running fugu-lite server; each is stopped when the
    generator is closed."""
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


def metric_samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """Every sample of one metric in the Prometheus text exposition, with its labels."""
    samples = []
    for line in text.splitlines():
        match = re.match(r"([a-zA-Z_:]+)\{([^}]*)\} (\S+)$", line)
        if match and match.group(1) == name:
            samples.append(
                (dict(re.findall(r'(\w+)="([^"]*)"', match.group(2))), float(match.group(3)))
            )
    return samples


def wait_until(condition: Callable[[], bool], timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


VALID = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
