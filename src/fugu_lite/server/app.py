"""`fugu-lite serve`: one OpenAI-compatible endpoint in front of the worker pool.

POST /v1/chat/completions routes each conversation with the coordinator, calls the chosen
worker (falling back to the next-best one while nothing was sent yet), and answers as the
router's model name, streaming or not. GET /v1/models, /health and /metrics (Prometheus).

This module holds the settings, the server's state (FuguServer), the app and its routes, and
running it under uvicorn. Answering a chat request is in answer.py (routing, then the
answer at once or streamed: stream.py), what an answer carries besides the worker's body in
responses.py, errors in errors.py, the body-size limit in body.py, the request's schema in
chat_request.py, parsing a body into it in request_parsing.py (the package's docstring lists
the rest).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import gc
import json
import logging
import math
import os
import re
import socket
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

import uvicorn
from fastapi import FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, Field, field_validator
from starlette.datastructures import Headers, MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..features import ChatTemplateRefusal
from ..router_family import RouterFamily, load_family_or_single
from ..workers.config import (
    PoolConfig,
    load_pool_config,
    one_call_at_a_time,
    pool_notes,
)
from ..workers.llama_cpp_requests import local_worker_gaps
from ..workers.pool import WorkerPool
from ..workers.preflight import preflight
from .answer import answer
from .api_error import ApiError
from .auth import ApiKeyChecker, Redactor, worker_secrets
from .batching import BatcherClosedError, MicroBatcher
from .body import read_body
from .breaker import CircuitBreaker
from .chat_request import ChatCompletionRequest
from .dispatch import Dispatcher
from .errors import install_error_handlers, worker_hosts
from .log import DecisionLog
from .metrics import Metrics
from .request_parsing import parse_request
from .responses import REQUEST_ID_HEADER, ROUTING_HEADERS, request_id_for
from .routing import RouteRequest, RouteResult, RouterService

logger = logging.getLogger(__name__)
RESTART_CHECK_S = 1.0  # how often crashed local workers are looked for
RESTART_MAX_WAIT_S = 300.0
TEXT_PART_TYPES = ("text", "refusal")  # content parts a local worker reads (as text)
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
    graceful_timeout_s: int = Field(
        default=10,
        ge=0,
        description="Seconds the requests in flight get to end once serve is stopping, before "
        "they are answered a 503 shutting_down.",
    )
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


class FuguServer:
    """The state behind the app: router, pool, batcher, breaker, metrics, log."""

    def __init__(
        self, settings: ServeSettings, family: RouterFamily, pool_config: PoolConfig
    ) -> None:
        self.settings = settings
        check_workers_match(family.worker_ids, pool_config)
        preflight(pool_config)
        for note in pool_notes(pool_config):
            logger.warning("%s", note)
        pool_config = one_call_at_a_time(pool_config)
        self.router = RouterService(
            family, [w for w in pool_config.opt_out if w in family.worker_ids]
        )
        self.pool_config = pool_config
        self.worker_hosts = worker_hosts(pool_config)  # hidden from clients' error messages
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
        # uvicorn is stopping (Ctrl-C, SIGTERM, ServerThread.stop): serve and ServerThread set it
        self.interrupted: Callable[[], bool] = lambda: False

    async def start(self) -> None:
        try:
            await self._start()
        except BaseException as error:
            self.startup_error = error
            if not isinstance(error, asyncio.CancelledError):  # a Ctrl-C: said by its caller
                logger.error("fugu-lite could not start: %s", error)
            if self.batcher is not None:
                await self.batcher.stop()
            self.log.close()  # no stop() follows a failed start
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
            # a failed batch is run again one request at a time: the refusal is this one's
            result = await self.batcher.submit(request)
        except BatcherClosedError as error:
            raise ApiError(503, str(error), type="server_error", code="shutting_down") from error
        except ChatTemplateRefusal as error:
            raise ApiError(400, str(error), param="messages") from error
        return self.router.require_finite(result)


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
    app = FastAPI(title="fugu-lite", lifespan=lifespan_of(server), docs_url=None, redoc_url=None)
    app.state.fugu = server
    install_error_handlers(app, server)
    add_middleware(app, settings)
    app.add_middleware(QuietStartInterruption, server=server)
    add_info_routes(app, server)
    add_chat_route(app, server)
    return app


def lifespan_of(server: FuguServer) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """The app's lifespan: the server starts with the app and stops with it."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await start_unless_interrupted(server)
        try:
            yield
        finally:
            await server.stop()

    return lifespan


def add_middleware(app: FastAPI, settings: ServeSettings) -> None:
    app.add_middleware(WithoutTrailingSlash)
    app.add_middleware(WithRequestId)
    if settings.cors_origins:
        # Added last, so outermost: its headers reach errors too.
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["GET", "HEAD", "POST"],
            allow_headers=["*"],
            expose_headers=[*ROUTING_HEADERS, "Retry-After"],
        )


def add_info_routes(app: FastAPI, server: FuguServer) -> None:
    """/health, /metrics, /v1/models and /v1/models/{id}."""

    # HEAD too: uptime monitors and load balancers probe with it (FastAPI's GET routes
    # answered it with a 405, read as the server being down).
    @app.api_route("/health", methods=["GET", "HEAD"])
    async def health() -> JSONResponse:
        """ "ok" when every worker the router may choose can take a request, "degraded" when
        some can, "unavailable" (HTTP 503, for load balancers) when none can."""
        body = health_body(server)
        return JSONResponse(body, status_code=503 if body["status"] == "unavailable" else 200)

    @app.api_route("/metrics", methods=["GET", "HEAD"])
    async def metrics(request: Request) -> Response:
        server.auth.check(request.headers)
        return Response(server.metrics.render(), media_type=server.metrics.content_type)

    @app.api_route("/v1/models", methods=["GET", "HEAD"])
    async def models(request: Request) -> dict[str, Any]:
        server.auth.check(request.headers)
        return {"object": "list", "data": [model_card(server)]}

    @app.api_route("/v1/models/{model_id:path}", methods=["GET", "HEAD"])
    async def model(model_id: str, request: Request) -> dict[str, Any]:
        server.auth.check(request.headers)
        check_model(server, model_id)
        return model_card(server)


def health_body(server: FuguServer) -> dict[str, Any]:
    """/health's answer: the status, and each worker's circuit, the rest of its provider's
    rate limit and whether it is alive."""
    workers = {}
    takes_request = set()
    for worker in server.breaker.circuits:
        standing = server.dispatcher.standing(worker)  # read once: see WorkerStanding
        state = workers[worker] = standing.circuit.shown()
        # rounded up: a limit with 0.04 s left still keeps the worker from a request
        state["rate_limited_for_s"] = math.ceil(standing.rate_limited_for_s * 10) / 10
        state["alive"] = standing.alive
        if standing.takes_request:
            takes_request.add(worker)
    choosable = [w for w in server.router.worker_ids if w not in server.router.opt_out]
    usable = [w for w in choosable if w in takes_request]
    status = "ok" if len(usable) == len(choosable) else "degraded" if usable else "unavailable"
    return {
        "status": status,
        "model": server.settings.model_name,
        "workers": workers,
        "opt_out": server.router.opt_out,
    }


def add_chat_route(app: FastAPI, server: FuguServer) -> None:
    """POST /v1/chat/completions: checked, routed among the workers that can read it, answered."""
    settings = server.settings

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        server.auth.check(request.headers)
        body = await read_body(request, settings.max_body_bytes)
        chat = parse_request(body, settings.max_tokens_limit, request.headers.get("content-type"))
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


class WithoutTrailingSlash:
    """Serves `/v1/chat/completions/` as `/v1/chat/completions` (a base_url written with a
    trailing slash). Starlette answered it with a 307 redirect and an empty body, which
    curl and httpx do not follow by default: the client saw neither an answer nor an
    error."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope.get("path", "")
        if scope["type"] == "http" and len(path) > 1 and path.endswith("/"):
            scope = {**scope, "path": path.rstrip("/") or "/"}
            scope.pop("raw_path", None)
        await self.app(scope, receive, send)


class QuietStartInterruption:
    """A start given up on a Ctrl-C or SIGTERM (start_unless_interrupted) is no failure, yet
    uvicorn logged Starlette's report of it: the KeyboardInterrupt's traceback. The report is
    left empty then; a start that failed keeps its traceback."""

    def __init__(self, app: ASGIApp, server: FuguServer) -> None:
        self.app = app
        self.server = server

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "lifespan":
            await self.app(scope, receive, send)
            return

        async def send_quietly(message: Message) -> None:
            interrupted = isinstance(self.server.startup_error, asyncio.CancelledError)
            if message["type"] == "lifespan.startup.failed" and interrupted:
                message = {**message, "message": ""}
            await send(message)

        await self.app(scope, receive, send_quietly)


class WithRequestId:
    """Gives an answer that has no x-request-id one (the client's own, when usable, as a
    chat answer has): OpenAI answers every request with it, and /v1/models, /health and
    /metrics sent none."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                if REQUEST_ID_HEADER not in headers:
                    headers[REQUEST_ID_HEADER] = request_id_for(Headers(scope=scope))
            await send(message)

        await self.app(scope, receive, send_with_id)


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
    name = server.settings.model_name
    if model == name:
        return
    if model in server.router.worker_ids:
        # the id a client saw in x-fugu-worker or /v1/models' `workers`
        message = (
            f"{model!r} is one of the router's workers, not a model of this server, which "
            f"serves {name!r}; to send a request to that worker, send model {name!r} with "
            f'"workers": [{json.dumps(model)}] (extra_body in the openai SDK)'
        )
    else:
        message = (
            f"the model {model!r} does not exist on this server; it serves {name!r} "
            "(see GET /v1/models)"
        )
    raise ApiError(404, message, param="model", code="model_not_found")


# --- running ---------------------------------------------------------------------------------


async def start_unless_interrupted(server: FuguServer) -> None:
    """server.start(), given up on a Ctrl-C (its local workers' servers stopped): uvicorn
    only notes the signal while the app starts, so serve waited out their start (up to
    their startup_timeout_s) before it stopped."""
    start = asyncio.ensure_future(server.start())
    while not start.done():
        await asyncio.wait({start}, timeout=0.1)
        if server.interrupted() and not start.done():
            start.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await start
            logger.warning("interrupted while starting: any local workers' servers are stopped")
            raise KeyboardInterrupt
    start.result()


class WhollyStoppingServer(uvicorn.Server):
    """uvicorn's server, whose second Ctrl-C (its force quit) skipped the app's shutdown:
    the requests in flight were neither answered nor logged, the decision log's queued lines
    could be lost, and the lifespan's cancellation printed a traceback. Those requests are
    cancelled then (a 503 and their lines, as when the graceful timeout ends) and the app
    shut down all the same (its local workers' servers stopped, its decision log closed)."""

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        """A second SIGTERM (`kill` or `systemctl stop` again) ends the wait for the requests
        in flight at once, as a second Ctrl-C does: uvicorn forces its quit on SIGINT only."""
        stopping = self.should_exit
        super().handle_exit(sig, frame)
        if stopping:
            self.force_exit = True

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        await super().shutdown(sockets)
        if self.force_exit:
            if self.server_state.tasks:  # logged here, not in the signal handler
                logger.warning(
                    "stopped again: the requests still in flight (%d) are not waited for, "
                    "each is answered 503 shutting_down now", len(self.server_state.tasks),
                )  # fmt: skip
            for task in self.server_state.tasks:
                task.cancel(msg="Task cancelled, forced quit")
            await self.lifespan.shutdown()


def serve(settings: ServeSettings, log_level: str = "info") -> None:
    """Build the app (loading and checking everything first) and run it under uvicorn."""
    import torch
    from uvicorn.config import STARTUP_FAILURE

    if settings.torch_threads is not None:
        torch.set_num_threads(settings.torch_threads)
    show_package_logs(log_level)
    app = create_app(settings)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=log_level,
        log_config=uvicorn_log_config(),
        timeout_graceful_shutdown=settings.graceful_timeout_s,
    )
    server = WhollyStoppingServer(config)
    app.state.fugu.interrupted = lambda: server.should_exit
    try:
        with contextlib.suppress(KeyboardInterrupt):  # uvicorn raises a Ctrl-C again as it stops
            server.run()
    except SystemExit:  # uvicorn's start-up failure, also when a Ctrl-C stopped the start
        if server.should_exit:
            raise KeyboardInterrupt from None  # the command's own "interrupted" line
        raise
    if not server.started:
        sys.exit(STARTUP_FAILURE)
    # Left to the process's exit: its full garbage collections over all serve loaded (torch,
    # the backbone, uvicorn: ~450,000 objects) took 10-25 s on a loaded machine after uvicorn's
    # "Finished server process". Everything was stopped and closed above.
    gc.freeze()


def colors_on(stream: TextIO) -> bool:
    """Whether log lines written to `stream` get colors: only on a terminal, and never with
    NO_COLOR set (no-color.org). uvicorn asked whether stdout is a terminal for every
    stream, so `serve 2> serve.log` in a terminal wrote escape codes into the log file."""
    return not os.environ.get("NO_COLOR") and stream.isatty()


def uvicorn_log_config() -> dict[str, Any]:
    """uvicorn's own logging, its start-up lines (stderr) and access lines (stdout) each
    colored as colors_on says for their stream."""
    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config["formatters"]["default"]["use_colors"] = colors_on(sys.stderr)
    config["formatters"]["access"]["use_colors"] = colors_on(sys.stdout)
    return config


def show_package_logs(log_level: str) -> None:
    """Print fugu-lite's own log lines (a worker failed, a context refusal, a local worker
    restarted) at `log_level` and above, formatted like uvicorn's. uvicorn sets up only its
    own loggers, so without this only warnings reached stderr, unformatted."""
    from uvicorn.logging import DefaultFormatter

    package = logging.getLogger("fugu_lite")
    # one way of printing them per process: serve's replaces the other commands' (cli/__init__.py)
    package.handlers = [h for h in package.handlers if not getattr(h, "fugu_lite_console", False)]
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        DefaultFormatter("%(levelprefix)s %(message)s", use_colors=colors_on(sys.stderr))
    )
    handler.fugu_lite_console = True  # type: ignore[attr-defined]
    package.addHandler(handler)
    package.setLevel(5 if log_level == "trace" else log_level.upper())  # uvicorn's TRACE is 5
