"""`fugu-lite serve`: one OpenAI-compatible endpoint in front of the worker pool.

POST /v1/chat/completions routes each conversation with the coordinator, calls the chosen
worker (falling back to the next-best one while nothing was sent yet), and answers as the
router's model name, streaming or not. GET /v1/models, /health and /metrics (Prometheus).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import re
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, Field, field_validator
from starlette.background import BackgroundTask
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .costs import RouterFamily, load_family_or_single
from .llama_cpp_requests import local_worker_gaps
from .local_server import check_llama_cpp_installed
from .pool import (
    PoolConfig,
    load_pool_config,
    one_call_at_a_time,
    queued_locally,
    resolve_gguf,
)
from .server_auth import ApiKeyChecker, Redactor, worker_secrets
from .server_batching import BatcherClosedError, MicroBatcher
from .server_breaker import CircuitBreaker
from .server_dispatch import (
    BUSY,
    RATE_LIMITED,
    AllWorkersFailedError,
    Attempt,
    Dispatcher,
    WorkerRejectedError,
)
from .server_log import DecisionLog, DecisionLogEntry, conversation_hash
from .server_metrics import Metrics
from .server_routing import RouteRequest, RouteResult, RouterService
from .server_schemas import ApiError, ChatCompletionRequest, parse_request
from .server_stream import CLIENT_CLOSED_STATUS, RelayedStream
from .workers import Usage, WorkerPool

logger = logging.getLogger(__name__)
T = TypeVar("T")

WORKER_HEADER = "x-fugu-worker"
PROBABILITIES_HEADER = "x-fugu-probabilities"
ATTEMPTS_HEADER = "x-fugu-attempts"
REQUEST_ID_HEADER = "x-request-id"
ROUTING_HEADERS = (WORKER_HEADER, PROBABILITIES_HEADER, ATTEMPTS_HEADER, REQUEST_ID_HEADER)
RESTART_CHECK_S = 1.0  # how often crashed local workers are looked for
RESTART_MAX_WAIT_S = 300.0
TEXT_PART_TYPES = ("text", "refusal")  # content parts a local worker reads (as text)
# A busy worker frees a slot as soon as one of its answers ends: a client may retry soon.
BUSY_RETRY_AFTER_S = 1.0
ORIGIN = re.compile(r"^[a-z][a-z0-9+.-]*://[^/\s]+$")


class ServeSettings(BaseModel):
    """Everything `fugu-lite serve` is started with."""

    checkpoint: Path
    backbone: str | None = Field(
        default=None,
        description="Where the checkpoint's backbone is now (a local folder that moved); "
        "None = where the checkpoint says.",
    )
    pool: Path | None = Field(default=None, description="Pool YAML; None = the embedded pool.")
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    model_name: str = Field(default="fugu-lite", min_length=1)
    api_keys: list[str] = Field(default_factory=list, repr=False)
    log_requests: Path | None = None
    log_content: bool = False
    max_body_bytes: int = Field(default=1_000_000, ge=1024)
    max_tokens_limit: int = Field(default=32_768, ge=1)
    batch_window_ms: float = Field(default=2.0, ge=0)
    max_batch_size: int = Field(default=32, ge=1)
    breaker_failures: int = Field(default=3, ge=1)
    breaker_cooldown_s: float = Field(default=30.0, ge=0)
    cors_origins: list[str] = Field(
        default_factory=list,
        description="Browser origins (https://app.example.com, or *) allowed to call the "
        "endpoint (CORS); none by default, so no web page can use a server on the machine.",
    )
    torch_threads: int | None = Field(
        default=1,
        ge=1,
        description="Intra-op threads for the routing forward (None = torch's default). "
        "One keeps the other cores for the event loop and local workers; on a busy 2-core "
        "machine two threads make routing many times slower (OpenMP spin-waits).",
    )

    @field_validator("cors_origins")
    @classmethod
    def _origins(cls, origins: list[str]) -> list[str]:
        """A browser sends its origin as scheme://host[:port]; anything else never matches."""
        for origin in origins:
            if origin != "*" and not ORIGIN.match(origin):
                raise ValueError(
                    f"--cors-origin {origin!r} is not an origin; give scheme://host[:port] "
                    "without a path or trailing slash, e.g. http://localhost:3000, or *"
                )
        return origins


class ClientDisconnectedError(Exception):
    """The client closed the connection before the answer was ready."""


@dataclass
class Routed:
    request_id: str
    chat: ChatCompletionRequest
    route: RouteResult
    started: float
    routing_s: float
    messages: list[dict[str, Any]]


class FuguServer:
    """The state behind the app: router, pool, batcher, breaker, metrics, log."""

    def __init__(
        self, settings: ServeSettings, family: RouterFamily, pool_config: PoolConfig
    ) -> None:
        self.settings = settings
        check_workers_match(family.worker_ids, pool_config)
        preflight(pool_config)
        for note in queued_locally(pool_config):
            logger.warning("%s", note)
        pool_config = one_call_at_a_time(pool_config)
        self.router = RouterService(
            family, [w for w in pool_config.opt_out if w in family.worker_ids]
        )
        self.pool_config = pool_config
        self.pool = WorkerPool(pool_config)
        self.metrics = Metrics(self.router.worker_ids)
        self.breaker = CircuitBreaker(
            self.router.worker_ids, settings.breaker_failures, settings.breaker_cooldown_s
        )
        self.redact = Redactor(
            [*worker_secrets(w.api_key_env for w in pool_config.workers), *settings.api_keys]
        )
        self.auth = ApiKeyChecker(settings.api_keys)
        self.dispatcher = Dispatcher(self.pool, self.breaker, self.metrics, self.redact)
        self.log = DecisionLog(settings.log_requests, settings.log_content)
        self.in_flight = 0
        self.batcher: MicroBatcher[RouteRequest, RouteResult] | None = None
        self.startup_error: BaseException | None = None
        self.supervisor: asyncio.Task[None] | None = None

    async def start(self) -> None:
        try:
            await self._start()
        except BaseException as error:
            self.startup_error = error
            logger.error("fugu-lite could not start: %s", error)
            if self.batcher is not None:
                await self.batcher.stop()
            raise

    async def _start(self) -> None:
        self.batcher = MicroBatcher(
            self.router.route_batch,
            window_s=self.settings.batch_window_ms / 1000,
            max_batch=self.settings.max_batch_size,
            # A lone request is never held back: wait only when others are being served.
            should_wait=lambda waiting: self.in_flight > waiting,
            on_batch=lambda size, _: self.metrics.routing_batch_size.observe(size),
        )
        self.batcher.start()
        await self.batcher.run_in_thread(self.router.warm_up)
        await self.pool.__aenter__()
        if self.pool.servers:
            self.supervisor = asyncio.create_task(self.supervise_local_workers())

    async def supervise_local_workers(self) -> None:
        """Start a local worker's llama.cpp server again when its process exits on its own
        (a crash, the OOM killer): without this it stayed down until fugu-lite restarted.
        A server that will not come up is tried again later, waiting twice as long each
        time (up to RESTART_MAX_WAIT_S)."""
        waits: dict[str, float] = {}
        next_try: dict[str, float] = {}
        while True:
            await asyncio.sleep(RESTART_CHECK_S)
            for worker in self.pool.crashed_servers():
                if time.monotonic() < next_try.get(worker, 0.0):
                    continue
                try:
                    await self.pool.restart(worker)
                except Exception as error:  # LocalServerError, or the launch itself failing
                    waits[worker] = min(2 * waits.get(worker, RESTART_CHECK_S), RESTART_MAX_WAIT_S)
                    next_try[worker] = time.monotonic() + waits[worker]
                    logger.error(
                        "local worker %s did not start again (next try in %.0f s): %s",
                        worker, waits[worker], error,
                    )  # fmt: skip
                    continue
                waits.pop(worker, None)
                logger.warning("local worker %s is serving again", worker)

    async def stop(self) -> None:
        try:
            if self.supervisor is not None:
                self.supervisor.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self.supervisor
            if self.batcher is not None:
                await self.batcher.stop()
        finally:
            await self.pool.__aexit__(None, None, None)
            self.log.close()

    def enter(self) -> None:
        self.in_flight += 1
        self.metrics.in_flight.inc()

    def leave(self) -> None:
        self.in_flight -= 1
        self.metrics.in_flight.dec()

    def workers_reading(
        self, chat: ChatCompletionRequest, allowed: tuple[str, ...]
    ) -> tuple[str, ...]:
        """Local llama.cpp workers read text only, and cannot give some things a request
        may ask (`local_worker_gaps`: audio output, non-function tools, ...): such a request
        may go only to the other workers."""
        kinds = sorted(
            {
                part["type"]
                for message in chat.messages
                if isinstance(message.content, list)
                for part in message.content
                if part["type"] not in TEXT_PART_TYPES
            }
        )
        gaps = local_worker_gaps(chat.worker_params())
        if not kinds and not gaps:
            return allowed
        readers = tuple(w for w in allowed if self.pool.worker(w).local is None)
        if not readers and not kinds:
            raise ApiError(
                400,
                f"the request asks for {'; '.join(gaps)}, which the workers it may go to "
                f"({', '.join(allowed)}) cannot give: they are local llama.cpp servers; drop "
                "it, or allow a remote worker that gives it",
                code="unsupported_parameter",
            )
        if not readers:
            raise ApiError(
                400,
                f"the conversation has {', '.join(kinds)} content parts, but the workers it "
                f"may go to ({', '.join(allowed)}) are local llama.cpp servers that read "
                "text only; send text parts only, or allow a remote worker that reads them",
                param="messages",
                code="unsupported_content",
            )
        return readers

    async def route(self, request: RouteRequest) -> RouteResult:
        if self.batcher is None:
            raise ApiError(503, "the server is starting", type="server_error")
        try:
            return await self.batcher.submit(request)
        except BatcherClosedError as error:
            raise ApiError(503, str(error), type="server_error", code="shutting_down") from error


def check_workers_match(router_workers: list[str], pool_config: PoolConfig) -> None:
    """Every worker the router can choose must be in the pool, under the same id."""
    missing = [worker for worker in router_workers if worker not in pool_config.worker_ids]
    if missing:
        raise ValueError(
            f"the router was trained for workers {router_workers}, but the pool has no "
            f"worker {missing} (it has {pool_config.worker_ids}); give the pool workers with "
            "exactly these ids, or train a router on records with the pool's worker ids"
        )
    extra = [worker for worker in pool_config.worker_ids if worker not in router_workers]
    if extra:
        logger.warning("pool workers %s are unknown to the router and never chosen", extra)


def preflight(pool_config: PoolConfig) -> None:
    """What would make the pool fail to start, found before the server listens: a missing
    API-key variable, a missing GGUF file, llama.cpp's server not installed."""
    for worker in pool_config.workers:
        if worker.api_key_env and not os.environ.get(worker.api_key_env):
            raise ValueError(
                f"worker {worker.id!r} reads its API key from ${worker.api_key_env}, which is "
                f"not set; `export {worker.api_key_env}=...` first, or remove the worker"
            )
        if worker.local is not None:
            check_llama_cpp_installed()
            resolve_gguf(worker.local.gguf)


# --- app --------------------------------------------------------------------------------------


def create_app(
    settings: ServeSettings,
    *,
    family: RouterFamily | None = None,
    pool_config: PoolConfig | None = None,
) -> FastAPI:
    """Load and check the router and the pool config now (errors surface before the server
    listens); the pool's local servers and the batcher start with the app's lifespan."""
    server = FuguServer(
        settings,
        family or load_family_or_single(settings.checkpoint, settings.backbone),
        pool_config or load_pool_config(settings.pool),
    )

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await server.start()
        try:
            yield
        finally:
            await server.stop()

    app = FastAPI(title="fugu-lite", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.fugu = server
    install_error_handlers(app, server)
    if settings.cors_origins:
        # Added last, so outermost: its headers reach errors too.
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["GET", "HEAD", "POST"],
            allow_headers=["*"],
            expose_headers=[*ROUTING_HEADERS, "Retry-After"],
        )

    # HEAD too: uptime monitors and load balancers probe with it (FastAPI's GET routes
    # answered it with a 405, read as the server being down).
    @app.api_route("/health", methods=["GET", "HEAD"])
    async def health() -> JSONResponse:
        """ "ok" when every worker the router may choose can take a request, "degraded" when
        some can, "unavailable" (HTTP 503, for load balancers) when none can."""
        workers = server.breaker.snapshot()
        for worker, state in workers.items():
            state["alive"] = server.pool.is_alive(worker)
        choosable = [w for w in server.router.worker_ids if w not in server.router.opt_out]
        usable = [w for w in choosable if workers[w]["circuit"] != "open" and workers[w]["alive"]]
        status = "ok" if len(usable) == len(choosable) else "degraded" if usable else "unavailable"
        body = {
            "status": status,
            "model": settings.model_name,
            "workers": workers,
            "opt_out": server.router.opt_out,
        }
        return JSONResponse(body, status_code=503 if status == "unavailable" else 200)

    @app.api_route("/metrics", methods=["GET", "HEAD"])
    async def metrics(request: Request) -> Response:
        server.auth.check(request.headers.get("authorization"))
        return Response(server.metrics.render(), media_type=server.metrics.content_type)

    @app.api_route("/v1/models", methods=["GET", "HEAD"])
    async def models(request: Request) -> dict[str, Any]:
        server.auth.check(request.headers.get("authorization"))
        return {"object": "list", "data": [model_card(server)]}

    @app.api_route("/v1/models/{model_id:path}", methods=["GET", "HEAD"])
    async def model(model_id: str, request: Request) -> dict[str, Any]:
        server.auth.check(request.headers.get("authorization"))
        check_model(server, model_id)
        return model_card(server)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        server.auth.check(request.headers.get("authorization"))
        body = await read_body(request, settings.max_body_bytes)
        chat = parse_request(body, settings.max_tokens_limit)
        check_model(server, chat.model)
        allowed = server.router.allowed_workers(
            chat.exclude_workers, chat.workers, chat.cost_weight
        )
        allowed = server.workers_reading(chat, allowed)
        server.enter()
        response: Response | None = None
        try:
            response = await answer(server, request, chat, allowed)
            return response
        finally:
            # A stream is still being served: its relay calls leave() when it ends.
            if not isinstance(response, StreamingResponse):
                server.leave()

    return app


def model_card(server: FuguServer) -> dict[str, Any]:
    return {
        "id": server.settings.model_name,
        "object": "model",
        "created": 0,
        "owned_by": "fugu-lite",
        "workers": server.router.worker_ids,
        "cost_weights": server.router.family.cost_weights
        if server.router.supports_cost_weight
        else None,
    }


def check_model(server: FuguServer, model: str) -> None:
    if model != server.settings.model_name:
        raise ApiError(
            404,
            f"the model {model!r} does not exist on this server; it serves "
            f"{server.settings.model_name!r} (see GET /v1/models)",
            param="model",
            code="model_not_found",
        )


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refused with 413 as soon as it is known to exceed the limit."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_large(int(declared), limit)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large(None, limit)  # reading stopped here: the real size is unknown
        chunks.append(chunk)
    return b"".join(chunks)


def too_large(size: int | None, limit: int) -> ApiError:
    body = "the request body is" + (f" {size} bytes," if size is not None else "")
    return ApiError(
        413,
        f"{body} more than this server accepts ({limit} bytes); shorten the conversation, "
        "or start the server with a larger --max-body-bytes",
        code="request_too_large",
    )


# --- answering ----------------------------------------------------------------------------------


async def answer(
    server: FuguServer, request: Request, chat: ChatCompletionRequest, allowed: tuple[str, ...]
) -> Response:
    started = time.perf_counter()
    request_id = f"chatcmpl-{uuid.uuid4().hex}"
    try:
        route = await until_disconnected(
            request, server.route(RouteRequest(chat.messages, allowed, chat.cost_weight))
        )
    except ClientDisconnectedError:
        return Response(status_code=CLIENT_CLOSED_STATUS)
    routing_s = time.perf_counter() - started
    server.metrics.routing_latency.observe(routing_s)
    server.metrics.worker_choices.labels(route.ranking[0]).inc()
    routed = Routed(request_id, chat, route, started, routing_s, chat.message_dicts())
    if chat.stream:
        return await answer_streaming(server, request, routed)
    return await answer_once(server, request, routed)


async def answer_once(server: FuguServer, request: Request, routed: Routed) -> Response:
    try:
        result, attempts = await until_disconnected(
            request,
            server.dispatcher.complete(
                routed.route.ranking, routed.messages, routed.chat.worker_params()
            ),
        )
    except ClientDisconnectedError:
        finish(server, routed, [], None, "client_disconnected", CLIENT_CLOSED_STATUS)
        return Response(status_code=CLIENT_CLOSED_STATUS)
    except (AllWorkersFailedError, WorkerRejectedError) as error:
        raise failure(server, routed, error) from None
    usage = result.usage.model_dump() if result.usage else None
    body = server.redact.scrub(dict(result.raw or completion_body(result.output or "", usage)))
    assert isinstance(body, dict)
    body["id"] = routed.request_id
    body["model"] = server.settings.model_name
    if routed.chat.include_routing:
        body["fugu"] = routing_field(routed, attempts, result.cost)
    finish(server, routed, attempts, usage, "ok", 200, cost=result.cost)
    return JSONResponse(body, headers=routing_headers(routed, attempts))


async def answer_streaming(server: FuguServer, request: Request, routed: Routed) -> Response:
    params = routed.chat.worker_params()
    # Ask for usage always (for metrics and cost); the client gets it only if it asked.
    params["stream_options"] = {"include_usage": True}
    try:
        opened = await until_disconnected(
            request, server.dispatcher.open_stream(routed.route.ranking, routed.messages, params)
        )
    except ClientDisconnectedError:
        finish(server, routed, [], None, "client_disconnected", CLIENT_CLOSED_STATUS)
        return Response(status_code=CLIENT_CLOSED_STATUS)
    except (AllWorkersFailedError, WorkerRejectedError) as error:
        raise failure(server, routed, error) from None

    def done(usage: dict[str, Any] | None, outcome: str, status: int) -> None:
        server.dispatcher.stream_ended(opened.worker, outcome)
        cost = stream_cost(server, opened.worker, usage)
        finish(server, routed, opened.attempts, usage, outcome, status, cost=cost)
        server.leave()

    relay = RelayedStream(
        opened,
        request_id=routed.request_id,
        model=server.settings.model_name,
        include_usage=routed.chat.include_usage,
        messages=server.pool.request_messages(opened.worker, routed.messages),
        idle_timeout_s=server.pool.worker(opened.worker).timeout_s,
        redact=server.redact,
        on_done=done,
        first_extra=routing_field(routed, opened.attempts, None)
        if routed.chat.include_routing
        else None,
    )
    return StreamingResponse(
        relay.events(),
        media_type="text/event-stream",
        headers={**routing_headers(routed, opened.attempts), "Cache-Control": "no-cache"},
        background=BackgroundTask(relay.finalize),
    )


def stream_cost(server: FuguServer, worker: str, usage: dict[str, Any] | None) -> float | None:
    if usage is None:
        return None
    return server.pool.cost(
        worker,
        Usage(
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            completion_tokens=int(usage.get("completion_tokens") or 0),
        ),
    )


def completion_body(output: str, usage: dict[str, Any] | None) -> dict[str, Any]:
    """A chat.completion for a worker whose raw response the pool did not keep."""
    return {
        "object": "chat.completion",
        "created": int(time.time()),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": output},
                "finish_reason": "stop",
            }
        ],
        "usage": usage,
    }


# --- routing information, failures, bookkeeping ------------------------------------------------


def routing_headers(routed: Routed, attempts: list[Attempt]) -> dict[str, str]:
    answered = next((a.worker for a in attempts if a.outcome == "ok"), "")
    return {
        WORKER_HEADER: answered,
        PROBABILITIES_HEADER: json.dumps(
            {w: round(p, 4) for w, p in routed.route.probabilities.items()}, separators=(",", ":")
        ),
        ATTEMPTS_HEADER: ",".join(f"{a.worker}:{a.outcome}" for a in attempts),
        REQUEST_ID_HEADER: routed.request_id,
    }


def routing_field(routed: Routed, attempts: list[Attempt], cost: float | None) -> dict[str, Any]:
    """The opt-in `fugu` body field (request key include_routing)."""
    return {
        "worker": next((a.worker for a in attempts if a.outcome == "ok"), None),
        "chosen": routed.route.ranking[0],
        "probabilities": routed.route.probabilities,
        "ranking": routed.route.ranking,
        "attempts": [
            {"worker": a.worker, "outcome": a.outcome, "latency_ms": round(a.latency_s * 1000, 3)}
            for a in attempts
        ],
        "cost_weight": routed.route.cost_weight,
        "cost": cost,
        "routing_ms": round(routed.routing_s * 1000, 3),
    }


def failure(
    server: FuguServer, routed: Routed, error: AllWorkersFailedError | WorkerRejectedError
) -> ApiError:
    """The worker's own 4xx as a 400 when it rejected the request itself; else what the
    workers' answers mean for the client (`workers_failed`)."""
    attempts = error.attempts
    if isinstance(error, WorkerRejectedError):
        api_error = ApiError(
            400,
            f"worker {attempts[-1].worker} rejected the request: {attempts[-1].message}",
            param="messages",
            code="worker_rejected_request",
            extra={"tried": [attempt.summary() for attempt in attempts]},
        )
    else:
        api_error = workers_failed(server, error)
    api_error.headers.update(routing_headers(routed, attempts))
    finish(server, routed, attempts, None, "error", api_error.status)
    api_error.recorded = True
    return api_error


def workers_failed(server: FuguServer, error: AllWorkersFailedError) -> ApiError:
    """No allowed worker answered. The client's 400 context_length_exceeded when the
    conversation exceeds the context of every worker that was asked, and of every worker
    that is down as far as is known (a smaller context); otherwise a retriable 5xx (a
    worker that is down may take it once back): 503 with Retry-After when every worker
    that is down is cooling down (circuit open) or busy, 429 when some are rate-limited by
    their providers instead, else 502. A message names both facts."""
    tried = [attempt.summary() for attempt in error.attempts]
    too_long, down = error.too_long, error.down
    refused_by = [attempt.worker for attempt in too_long]
    limits = "; ".join(f"{a.worker}: {a.message}" for a in too_long)
    refusals = "; ".join(f"{a.worker} ({a.message})" for a in too_long)
    if too_long and all(server.dispatcher.would_refuse_too(a.worker, refused_by) for a in down):
        smaller = (
            f"; {', '.join(a.worker for a in down)} (down) {'has' if len(down) == 1 else 'have'}"
            " no larger a context"
            if down
            else ""
        )
        return ApiError(
            400,
            "the conversation is longer than the context of every worker it may go to "
            f"({limits}{smaller}); shorten the messages or max_tokens, or allow a worker "
            "with a larger context",
            param="messages",
            code="context_length_exceeded",
            extra={"tried": tried},
        )
    # A worker that is down may take the conversation once back: the client may retry.
    if all(attempt.outcome in ("circuit_open", BUSY) for attempt in down):
        return workers_unavailable(server, error)
    if all(attempt.outcome in ("circuit_open", BUSY, RATE_LIMITED) for attempt in down):
        return workers_rate_limited(server, error)
    parts = [
        f"{a.worker} (circuit open, skipped)"
        if a.outcome == "circuit_open"
        else f"{a.worker} ({a.message or a.outcome})"
        for a in down
    ]
    reason = (
        f"the conversation is longer than the context of {refusals}, and every other worker it "
        "may go to failed (they may take it once back)"
        if too_long
        else "every worker failed"
    )
    return ApiError(
        502,
        f"{reason}: {'; '.join(parts)}",
        type="upstream_error",
        code="all_workers_failed",
        extra={"tried": tried},
    )


def workers_unavailable(server: FuguServer, error: AllWorkersFailedError) -> ApiError:
    """A 503 with Retry-After (which OpenAI's SDKs and other clients retry after that
    wait) when no worker that could take the conversation failed: each is cooling down
    after repeated failures (circuit open), or busy (all its max_concurrency slots taken
    for the whole deadline; worth trying again at once)."""
    too_long, down = error.too_long, error.down
    refusals = "; ".join(f"{a.worker} ({a.message})" for a in too_long)
    cooling = [a.worker for a in down if a.outcome == "circuit_open"]
    busy = [a.worker for a in down if a.outcome == BUSY]
    states = []
    if cooling:
        states.append(f"cooling down after repeated failures (circuit open: {', '.join(cooling)})")
    if busy:
        states.append(f"busy (every max_concurrency slot taken: {', '.join(busy)})")
    names = ", ".join(a.worker for a in down)
    reason = (
        f"the conversation is longer than the context of {refusals}, and the other workers "
        f"it may go to ({names}) are {' or '.join(states)} and may take it once back"
        if too_long
        else f"every allowed worker is {' or '.join(states)}"
    )
    retry = BUSY_RETRY_AFTER_S if busy else server.breaker.retry_after_s(cooling)
    return ApiError(
        503,
        f"{reason}; retry in {retry:.0f} s",
        type="server_error",
        code="workers_busy" if busy else "workers_unavailable",
        extra={"tried": [attempt.summary() for attempt in error.attempts]},
        headers={"Retry-After": str(max(1, round(retry)))},
    )


def workers_rate_limited(server: FuguServer, error: AllWorkersFailedError) -> ApiError:
    """A 429 `rate_limit_exceeded`, OpenAI's shape, when the workers that could take the
    conversation were rate-limited by their providers or were cooling down or busy: the
    openai SDK raises it as RateLimitError, which clients back off on and retry later; a
    502 read as a broken gateway. Its Retry-After is the soonest any of them may take a
    request again, as far as known (`retry_after_s`)."""
    limited = "; ".join(
        f"{a.worker} ({a.message or a.outcome})" for a in error.down if a.outcome == RATE_LIMITED
    )
    others = [f"{a.worker} ({a.outcome})" for a in error.down if a.outcome != RATE_LIMITED]
    refusals = [f"{a.worker} (longer than its context)" for a in error.too_long]
    rest = f"; the others: {', '.join(others + refusals)}" if others or refusals else ""
    retry = retry_after_s(server, error.down)
    return ApiError(
        429,
        f"every allowed worker that could answer is rate-limited by its provider: {limited}"
        f"{rest}; retry {'later' if retry is None else f'in {retry} s'}",
        type="requests",
        code="rate_limit_exceeded",
        extra={"tried": [attempt.summary() for attempt in error.attempts]},
        headers={} if retry is None else {"Retry-After": str(retry)},
    )


def retry_after_s(server: FuguServer, down: list[Attempt]) -> int | None:
    """Whole seconds until the first of these workers may take a request again: a
    rate-limited one when its provider's Retry-After ends, a busy one at once (1 s), one
    cooling down when its circuit turns half-open. None when that is not known (a 429
    without Retry-After): the client then backs off as it does by itself."""
    now = time.monotonic()
    waits = []
    for attempt in down:
        if attempt.outcome == RATE_LIMITED and attempt.retry_at is None:
            return None
        if attempt.outcome == RATE_LIMITED and attempt.retry_at is not None:
            waits.append(attempt.retry_at - now)
        elif attempt.outcome == BUSY:
            waits.append(BUSY_RETRY_AFTER_S)
        elif attempt.outcome == "circuit_open":
            waits.append(server.breaker.retry_after_s([attempt.worker]))
    if not waits:
        return None
    return max(1, math.ceil(min(waits)))


def finish(
    server: FuguServer,
    routed: Routed,
    attempts: list[Attempt],
    usage: dict[str, Any] | None,
    outcome: str,
    status: int,
    cost: float | None = None,
) -> None:
    """Metrics and the decision log line for a routed request."""
    answered = next((a.worker for a in attempts if a.outcome == "ok"), None)
    metrics = server.metrics
    metrics.requests.labels(str(status), str(routed.chat.stream).lower()).inc()
    if outcome != "ok":
        metrics.errors.labels(outcome).inc()
    if answered is not None:
        metrics.record_usage(answered, usage, cost)
        if answered != routed.route.ranking[0]:
            metrics.fallbacks.inc()
    worker_ids = server.router.worker_ids
    entry = DecisionLogEntry(
        request_id=routed.request_id,
        model=server.settings.model_name,
        prompt_hash=conversation_hash(routed.chat.messages),
        worker_ids=worker_ids,
        probabilities=[routed.route.probabilities[w] for w in worker_ids],
        chosen=routed.route.ranking[0],
        worker=answered,
        fallback=answered is not None and answered != routed.route.ranking[0],
        outcome=outcome,
        status=status,
        attempts=[attempt.summary() for attempt in attempts],
        stream=routed.chat.stream,
        ranking=list(routed.route.ranking),
        cost_weight=routed.route.cost_weight,
        routing_latency_s=routed.routing_s,
        latency_s=time.perf_counter() - routed.started,
        usage=usage,
        cost=cost,
    )
    messages = server.redact.scrub(routed.messages) if server.log.log_content else None
    server.log.write(entry, messages)  # type: ignore[arg-type]


async def until_disconnected(request: Request, work: Awaitable[T]) -> T:
    """Await `work`, cancelling it if the client disconnects first (uvicorn does not
    cancel a handler whose client went away)."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(wait_for_disconnect(request))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        raise
    finally:
        watcher.cancel()
    if task.done():
        return task.result()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task
    raise ClientDisconnectedError()


async def wait_for_disconnect(request: Request) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


# --- errors ---------------------------------------------------------------------------------


def install_error_handlers(app: FastAPI, server: FuguServer) -> None:
    """Every error leaves in OpenAI's shape; nothing internal leaks out of a 500."""

    def count_refused(error: ApiError) -> None:
        """Metrics for a request answered without a decision log line: refused before
        routing (bad input, auth, unknown model or path) or failed inside fugu-lite."""
        server.metrics.requests.labels(str(error.status), "unknown").inc()
        server.metrics.errors.labels(error.code or error.type).inc()

    @app.exception_handler(ApiError)
    async def api_error(_: Request, error: ApiError) -> JSONResponse:
        if not error.recorded:
            count_refused(error)
        body = server.redact.scrub(error.body())
        return JSONResponse(body, status_code=error.status, headers=error.headers)

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, error: RequestValidationError) -> JSONResponse:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in item['loc'])}: {item['msg']}" for item in error.errors()
        )
        refused = ApiError(400, f"invalid request: {problems}")
        count_refused(refused)
        return JSONResponse(refused.body(), status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
        if error.status_code == 404:
            message = (
                f"no route {request.method} {request.url.path}; this server answers POST "
                "/v1/chat/completions, GET /v1/models, /health and /metrics"
            )
        elif error.status_code == 405:
            message = f"{request.method} is not allowed on {request.url.path}"
        else:
            message = str(error.detail)
        refused = ApiError(error.status_code, message, code=str(error.status_code))
        count_refused(refused)
        return JSONResponse(
            refused.body(),
            status_code=error.status_code,
            headers=getattr(error, "headers", None),
        )

    def unexpected() -> JSONResponse:
        logger.exception("unexpected error while serving a request")
        internal = ApiError(
            500,
            "internal error in fugu-lite (logged on the server); please report it",
            type="server_error",
            code="internal_error",
        )
        count_refused(internal)
        return JSONResponse(internal.body(), status_code=500)

    app.add_middleware(InternalErrorMiddleware, answer=unexpected)


class InternalErrorMiddleware:
    """Answers an unexpected exception with `answer()` (the OpenAI-shaped 500) and stops
    it there. Starlette's handler for Exception re-raises it after the answer, so uvicorn
    logged the traceback a second time and closed the client's keep-alive connection. An
    exception after the answer started (a stream) still goes up: it cannot be answered."""

    def __init__(self, app: ASGIApp, answer: Callable[[], Response]) -> None:
        self.app = app
        self.answer = answer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def send_noting_start(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, send_noting_start)
        except Exception:
            if started:
                raise
            await self.answer()(scope, receive, send)


# --- running ---------------------------------------------------------------------------------


def serve(settings: ServeSettings, log_level: str = "info") -> None:
    """Build the app (loading and checking everything first) and run it under uvicorn."""
    import torch
    import uvicorn

    if settings.torch_threads is not None:
        torch.set_num_threads(settings.torch_threads)
    show_package_logs(log_level)
    app = create_app(settings)
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        log_level=log_level,
        timeout_graceful_shutdown=10,
    )


def show_package_logs(log_level: str) -> None:
    """Print fugu-lite's own log lines (a worker failed, a context refusal, a local worker
    restarted) at `log_level` and above, formatted like uvicorn's. uvicorn sets up only its
    own loggers, so without this only warnings reached stderr, unformatted."""
    from uvicorn.logging import DefaultFormatter

    package = logging.getLogger("fugu_lite")
    # one way of printing them per process: serve's replaces the other commands' (cli/__init__.py)
    package.handlers = [h for h in package.handlers if not getattr(h, "fugu_lite_console", False)]
    handler = logging.StreamHandler()
    handler.setFormatter(DefaultFormatter("%(levelprefix)s %(message)s"))
    handler.fugu_lite_console = True  # type: ignore[attr-defined]
    package.addHandler(handler)
    package.setLevel(5 if log_level == "trace" else log_level.upper())  # uvicorn's TRACE is 5
