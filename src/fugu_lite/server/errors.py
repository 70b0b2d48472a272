"""Errors in OpenAI's shape: what the workers' failures mean for the client (400, 429,
502, 503 with Retry-After), and the app's handlers for every other error (bad input, auth,
unknown routes, an unexpected exception as a 500 that leaks nothing)."""

from __future__ import annotations

import ipaddress
import logging
import math
import re
import time
import urllib.request
from collections.abc import Callable
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .api_error import ApiError
from .dispatch import (
    BUSY,
    RATE_LIMITED,
    AllWorkersFailedError,
    Attempt,
    WorkerRejectedError,
)
from .responses import (
    REQUEST_ID_HEADER,
    JSONAnswer,
    Routed,
    finish,
    request_id_for,
    routing_headers,
)

if TYPE_CHECKING:
    from ..workers.config import PoolConfig
    from .app import FuguServer

logger = logging.getLogger(__name__)

# A busy worker frees a slot as soon as one of its answers ends: a client may retry soon.
BUSY_RETRY_AFTER_S = 1.0
# What a client reads in place of a worker's address (or its proxy's): where the pool's
# workers are is the operator's to know; the server's log and decision log keep it.
HIDDEN_ADDRESS = "[worker address]"
# Where a local worker's llama.cpp server listens (workers.local_server starts it there).
LOCAL_WORKER_HOST = "127.0.0.1"
# An IP address (with any scheme, user, port and path written with it) in a worker's message:
# one in a private, loopback or link-local network is the operator's too (a gateway's upstream,
# in the error it relays), and no client could reach it. (Not ipaddress's is_private, which
# takes 0.6.1.2, a version number, for one of "this network".)
INTERNAL_NETWORKS = tuple(
    ipaddress.ip_network(network)
    for network in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "127.0.0.0/8",
                    "169.254.0.0/16", "::1/128", "fc00::/7", "fe80::/10")
)  # fmt: skip
# An IPv6 address is often written bare ("fe80::1%eth0", "::1"): hex groups and colons, an
# IPv4 address at its end, then a zone (%eth0; %25eth0 in a URL) or no colon and letter or
# digit (the address cut short). Times (12:30:45) and MAC addresses match too, and are kept
# as no IP address (hidden_if_internal).
BARE_IPV6 = (
    r"(?:[0-9a-f]{0,4}:){2,7}(?:\d{1,3}(?:\.\d{1,3}){3}|[0-9a-f]{1,4}|(?<=::))"
    r"(?:%[\w-]+|(?!:\w))"
)
IP_ADDRESS = re.compile(
    r"(?:\b[a-z][a-z0-9+.-]*://(?:[^\s/@]+@)?)?(?<![\w.:])"
    rf"(\d{{1,3}}(?:\.\d{{1,3}}){{3}}|\[[0-9a-f:.]+(?:%[\w-]+)?\]|{BARE_IPV6})(?![\w-]|\.\w)"
    r"(?::\d+| port \d+)?(?:/[^\s()'\",;]*)?",
    re.IGNORECASE,
)


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
            # the parameter the worker named, else the conversation it read
            param=attempts[-1].param or "messages",
            code="worker_rejected_request",
            extra={"tried": [attempt.summary() for attempt in attempts]},
        )
    else:
        api_error = workers_failed(server, error)
    hide_addresses(api_error, server.worker_hosts)
    api_error.headers.update(routing_headers(routed, attempts))
    finish(server, routed, attempts, None, "error", api_error.status, code=api_error.code)
    api_error.recorded = True
    return api_error


def worker_hosts(pool_config: PoolConfig) -> set[str]:
    """The hosts the pool's workers are called at: each remote worker's, a local one's
    loopback, and the environment's proxies (HTTP_PROXY ...) calls may go through, as the
    pool's clients read them at its start."""
    urls = [w.base_url or f"http://{LOCAL_WORKER_HOST}" for w in pool_config.workers]
    proxies = [url for scheme, url in urllib.request.getproxies().items() if scheme != "no"]
    urls += [proxy if "://" in proxy else f"http://{proxy}" for proxy in proxies]
    return {host for url in urls if (host := urlsplit(url).hostname)}


def hide_addresses(api_error: ApiError, hosts: set[str]) -> None:
    """The client's error without the workers' addresses (`hosts`) in its message and in
    each attempt it lists."""
    api_error.message = without_addresses(api_error.message, hosts)
    for tried in api_error.extra.get("tried", []):
        if tried.get("message"):
            tried["message"] = without_addresses(tried["message"], hosts)


def without_addresses(text: str, hosts: set[str]) -> str:
    """`text` with each of `hosts` (with any scheme, user, port and path written with it)
    shown as HIDDEN_ADDRESS: a dotted host or an IP address wherever it is, a host of one
    label (vllm, often a worker's own id too) where it is written as an address only; and
    each private, loopback or link-local IP address, in the pool or not (IP_ADDRESS)."""
    text = IP_ADDRESS.sub(hidden_if_internal, text)
    if not hosts:
        return text
    bare = [host for host in hosts if "." in host or ":" in host]
    single = [host for host in hosts if host not in bare]
    scheme = r"\b[a-z][a-z0-9+.-]*://(?:[^\s/@]+@)?"
    port, path, end = r"(?::\d+| port \d+)", r"(?:/[^\s()'\",;]*)?", r"(?![\w-]|\.\w)"
    forms = [rf"{scheme}\[?{names(hosts)}\]?{end}{port}?{path}"]
    if bare:
        forms.append(rf"(?<![\w.-])\[?{names(bare)}\]?{end}{port}?{path}")
    if single:
        forms.append(rf"(?<![\w.-]){names(single)}{port}{path}")
    return re.sub("|".join(forms), HIDDEN_ADDRESS, text, flags=re.IGNORECASE)


def hidden_if_internal(address: re.Match[str]) -> str:
    try:
        ip = ipaddress.ip_address(address[1].strip("[]"))
    except ValueError:  # 999.1.2.3, a version number; 12:30:45, a time
        return address[0]
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:  # ::ffff:10.0.0.5
        ip = ip.ipv4_mapped
    internal = any(ip in network for network in INTERNAL_NETWORKS)
    return HIDDEN_ADDRESS if internal else address[0]


def names(hosts: list[str] | set[str]) -> str:
    """A regular expression's group matching any of `hosts`, the longest first."""
    return f"(?:{'|'.join(re.escape(host) for host in sorted(hosts, key=len, reverse=True))})"


def workers_failed(server: FuguServer, error: AllWorkersFailedError) -> ApiError:
    """No allowed worker answered. The client's 400 context_length_exceeded when the
    conversation exceeds the context of every worker that was asked, and of every worker
    that is down as far as is known (a smaller context); otherwise a retriable 5xx (a
    worker that is down may take it once back): 503 with Retry-After when every worker
    that is down is cooling down (circuit open) or busy, 429 when some are rate-limited by
    their providers instead, else 502. A message names both facts."""
    if too_long_for_all(server, error):
        return context_exceeded(error)
    # A worker that is down may take the conversation once back: the client may retry.
    if all(attempt.outcome in ("circuit_open", BUSY) for attempt in error.down):
        return workers_unavailable(server, error)
    if all(attempt.outcome in ("circuit_open", BUSY, RATE_LIMITED) for attempt in error.down):
        return workers_rate_limited(server, error)
    return every_worker_failed(server, error)


def too_long_for_all(server: FuguServer, error: AllWorkersFailedError) -> bool:
    """Some worker refused the conversation as too long, and each worker that is down would
    refuse it too (a context no larger)."""
    refused_by = [attempt.worker for attempt in error.too_long]
    return bool(error.too_long) and all(
        server.dispatcher.would_refuse_too(a.worker, refused_by) for a in error.down
    )


def context_exceeded(error: AllWorkersFailedError) -> ApiError:
    """The client's 400 context_length_exceeded, naming each worker's limit."""
    too_long, down = error.too_long, error.down
    limits = "; ".join(f"{a.worker}: {a.message}" for a in too_long)
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
        extra={"tried": [attempt.summary() for attempt in error.attempts]},
    )


def every_worker_failed(server: FuguServer, error: AllWorkersFailedError) -> ApiError:
    """A 502 naming each worker that is down and why (and those that refused it as too
    long)."""
    too_long, down = error.too_long, error.down
    refusals = "; ".join(f"{a.worker} ({a.message})" for a in too_long)
    parts = [
        f"{a.worker} ({circuit_skip(server, a.worker)})"
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
        extra={"tried": [attempt.summary() for attempt in error.attempts]},
    )


def probe_out(server: FuguServer, worker: str) -> bool:
    """Whether a worker skipped for its circuit was skipped for its half-open circuit's one
    probe request being out (a half-open circuit skips every other request meanwhile)."""
    return server.breaker.state(worker) == "half_open"


def circuit_skip(server: FuguServer, worker: str) -> str:
    """Why a worker skipped for its circuit was: open, or half-open with its one probe out."""
    if probe_out(server, worker):
        return "circuit half-open, its one probe request out; skipped"
    return "circuit open, skipped"


def workers_unavailable(server: FuguServer, error: AllWorkersFailedError) -> ApiError:
    """A 503 with Retry-After (which OpenAI's SDKs and other clients retry after that
    wait) when no worker that could take the conversation failed: each is cooling down
    after repeated failures (circuit open), being tried by its one probe (half-open), or
    busy (all its max_concurrency slots taken for the whole deadline; worth trying again at
    once)."""
    too_long, down = error.too_long, error.down
    refusals = "; ".join(f"{a.worker} ({a.message})" for a in too_long)
    skipped = [a.worker for a in down if a.outcome == "circuit_open"]
    probing = [worker for worker in skipped if probe_out(server, worker)]
    cooling = [worker for worker in skipped if worker not in probing]
    busy = [a.worker for a in down if a.outcome == BUSY]
    states = []
    if cooling:
        states.append(f"cooling down after repeated failures (circuit open: {', '.join(cooling)})")
    if probing:
        states.append(
            "being tried again by one probe request after its cool-down (circuit half-open: "
            f"{', '.join(probing)})"
        )
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
    # Rounded up: a client back sooner finds every circuit still open (a half-open one
    # whose probe is out has 0 s left), and is answered another 503.
    seconds = max(1, math.ceil(retry))
    return ApiError(
        503,
        f"{reason}; retry in {seconds} s",
        type="server_error",
        code="workers_busy" if busy else "workers_unavailable",
        extra={"tried": [attempt.summary() for attempt in error.attempts]},
        headers={"Retry-After": str(seconds)},
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


def install_error_handlers(app: FastAPI, server: FuguServer) -> None:
    """Every error leaves in OpenAI's shape; nothing internal leaks out of a 500."""
    answers = ErrorAnswers(server)
    app.exception_handler(ApiError)(answers.api_error)
    app.exception_handler(RequestValidationError)(answers.validation_error)
    app.exception_handler(StarletteHTTPException)(answers.http_error)
    app.add_middleware(InternalErrorMiddleware, answer=answers.unexpected)


class ErrorAnswers:
    """The app's answer to each kind of error, counted in the server's metrics."""

    def __init__(self, server: FuguServer) -> None:
        self.server = server

    def count_refused(self, error: ApiError, label: str | None = None) -> None:
        """Metrics for a request answered without a decision log line: refused before
        routing (bad input, auth, unknown model or path) or failed inside fugu-lite, counted
        by `label`, else by its code or type."""
        self.server.metrics.requests.labels(str(error.status), "unknown").inc()
        self.server.metrics.errors.labels(label or error.code or error.type).inc()

    async def api_error(self, request: Request, error: ApiError) -> JSONAnswer:
        if not error.recorded:
            self.count_refused(error)
        body = self.server.redact.scrub(error.body())
        # a routed request's error has its id already (the one in its decision log line)
        headers = {REQUEST_ID_HEADER: request_id_for(request.headers), **error.headers}
        return JSONAnswer(body, status_code=error.status, headers=headers)

    async def validation_error(self, request: Request, error: RequestValidationError) -> JSONAnswer:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in item['loc'])}: {item['msg']}" for item in error.errors()
        )
        refused = ApiError(400, f"invalid request: {problems}")
        self.count_refused(refused)
        return JSONAnswer(
            refused.body(),
            status_code=400,
            headers={REQUEST_ID_HEADER: request_id_for(request.headers)},
        )

    async def http_error(self, request: Request, error: StarletteHTTPException) -> JSONAnswer:
        # OpenAI's code for an unknown route is null ("Invalid URL (POST /v1/x)"); the
        # metrics count such a refusal by its status, as before
        refused = ApiError(error.status_code, http_error_message(request, error))
        self.count_refused(refused, label=str(error.status_code))
        return JSONAnswer(
            refused.body(),
            status_code=error.status_code,
            headers={
                REQUEST_ID_HEADER: request_id_for(request.headers),
                **(getattr(error, "headers", None) or {}),
            },
        )

    def unexpected(self, scope: Scope) -> JSONAnswer:
        request_id = request_id_for(Headers(scope=scope))
        logger.exception("unexpected error while serving request %s", request_id)
        internal = ApiError(
            500,
            f"internal error in fugu-lite (logged on the server with request id {request_id}); "
            "please report it with that id",
            type="server_error",
            code="internal_error",
        )
        self.count_refused(internal)
        return JSONAnswer(internal.body(), status_code=500, headers={REQUEST_ID_HEADER: request_id})


def http_error_message(request: Request, error: StarletteHTTPException) -> str:
    """An unknown path names the ones this server answers (the Responses API's, what to
    call instead) and how to fix a wrong base_url; a wrong method says so, and how to fix
    the base_url that led to it (and, for the Responses API's path, what to call instead)."""
    path = request.url.path
    if error.status_code == 404:
        refused = f"no route {request.method} {path}"
    elif error.status_code == 405:
        refused = f"{request.method} is not allowed on {path}"
    else:
        return str(error.detail)
    # a Responses API call from a /v1/models base_url is a 405 (GET /v1/models/{id}): it is
    # told both fixes at once, not the base_url's first and the API's after it
    if is_under(path_meant(path), RESPONSES_PATH):
        return f"{refused}: {RESPONSES_API_FIX}{base_url_fix(request)}"
    if error.status_code == 404:
        return (
            f"{refused}; this server answers POST /v1/chat/completions, GET /v1/models, "
            f"/health and /metrics{base_url_fix(request)}"
        )
    return f"{refused}{base_url_fix(request)}"


# OpenAI's Responses API (the openai SDK's client.responses), which this server does not speak
RESPONSES_PATH = "/v1/responses"
RESPONSES_API_FIX = (
    "this server speaks OpenAI's Chat Completions API, not its Responses API; call "
    "client.chat.completions.create (POST /v1/chat/completions) instead"
)


# Paths a client reaches with a base_url lacking /v1 (the openai SDK appends these to it).
V1_PATHS = ("/chat/completions", "/models", RESPONSES_PATH.removeprefix("/v1"))

# What a client's base_url put before one of V1_PATHS in place of /v1, and what was wrong.
WRONG_BASE_URLS = (
    ("", "lacks /v1"),
    ("/v1/v1", "has /v1 twice"),
    ("/v1/chat/completions", "ends in /chat/completions, which the client adds itself"),
    # a chat request from it is a POST on GET /v1/models/{id}: a 405, not a 404
    ("/v1/models", "ends in /models, which the client adds itself"),
)


def base_url_fix(request: Request) -> str:
    """For a path the openai SDK calls under /v1 reached from a client's base_url written
    without it (http://host:8000 for http://host:8000/v1), with it twice
    (http://host:8000/v1/v1) or as an endpoint itself (http://host:8000/v1/chat/completions,
    http://host:8000/v1/models), what to set instead."""
    wrong = wrong_base_url(request.url.path)
    if wrong is None:
        return ""
    root = str(request.base_url).rstrip("/")
    return f"; the client's base_url {wrong[1]}: set it to {root}/v1"


def path_meant(path: str) -> str:
    """The path under /v1 that a client with a wrong base_url meant (/responses ->
    /v1/responses); `path` itself when its base_url was not wrong."""
    wrong = wrong_base_url(path)
    return path if wrong is None else f"/v1{path.removeprefix(wrong[0])}"


def wrong_base_url(path: str) -> tuple[str, str] | None:
    """(what the base_url put in place of /v1, what was wrong) of WRONG_BASE_URLS for a
    path of V1_PATHS reached from it, None for any other path."""
    for prefix, wrong in WRONG_BASE_URLS:
        rest = path.removeprefix(prefix)
        if path.startswith(f"{prefix}/") and any(is_under(rest, known) for known in V1_PATHS):
            return prefix, wrong
    return None


def is_under(path: str, route: str) -> bool:
    """`path` is `route` or a path below it (/v1/models/x, not /v1/modelsx)."""
    return path == route or path.startswith(f"{route}/")


class InternalErrorMiddleware:
    """Answers an unexpected exception with `answer(scope)` (the OpenAI-shaped 500) and stops
    it there. Starlette's handler for Exception re-raises it after the answer, so uvicorn
    logged the traceback a second time and closed the client's keep-alive connection. An
    exception after the answer started (a stream) still goes up: it cannot be answered."""

    def __init__(self, app: ASGIApp, answer: Callable[[Scope], Response]) -> None:
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
            await self.answer(scope)(scope, receive, send)
