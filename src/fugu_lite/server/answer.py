"""Answering a chat-completions request: routing it (in the micro-batcher), then the
worker's answer at once or relayed as a stream, and giving up on a client that left."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fastapi import Request
from fastapi.responses import Response, StreamingResponse
from starlette.background import BackgroundTask
from starlette.types import Message, Receive, Scope, Send

from .api_error import ApiError
from .chat_request import ChatCompletionRequest
from .disconnect import ClientDisconnectedError, until_disconnected
from .dispatch import AllWorkersFailedError, Attempt, OpenedStream, WorkerRejectedError
from .errors import failure
from .responses import (
    JSONAnswer,
    Routed,
    completion_body,
    finish,
    request_id_for,
    routing_field,
    routing_headers,
    stream_cost,
    with_text_content,
)
from .routing import RouteRequest
from .stream import CLIENT_CLOSED_STATUS, SHUTTING_DOWN, RelayedStream

if TYPE_CHECKING:
    from .app import FuguServer

# nginx, the usual reverse proxy in front of such a server, buffers a response by default:
# the client got a stream's events all at once when it ended. X-Accel-Buffering turns that
# off for this response, as OpenAI-compatible servers send it.
STREAM_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


async def answer(
    server: FuguServer, request: Request, chat: ChatCompletionRequest, allowed: tuple[str, ...]
) -> Response:
    started = time.perf_counter()
    request_id = request_id_for(request.headers)
    try:
        route = await until_disconnected(
            request, server.route(RouteRequest(chat.messages, allowed, chat.cost_weight))
        )
    except ClientDisconnectedError:
        # Not routed, so no decision log line; counted as the client's leaving (it was
        # counted nowhere), as one leaving while its body is read.
        raise ApiError(
            CLIENT_CLOSED_STATUS,
            "the client closed the connection while its request waited for routing",
            code="client_disconnected",
        ) from None
    routing_s = time.perf_counter() - started
    server.metrics.routing_latency.observe(routing_s)
    server.metrics.worker_choices.labels(route.ranking[0]).inc()
    routed = Routed(request_id, chat, route, started, routing_s, chat.message_dicts())
    if chat.stream:
        return await answer_streaming(server, request, routed)
    return await answer_once(server, request, routed)


async def answer_once(server: FuguServer, request: Request, routed: Routed) -> Response:
    attempts: list[Attempt] = []  # the workers tried before the client left, if it did
    try:
        result, attempts = await until_disconnected(
            request,
            server.dispatcher.complete(
                routed.route.ranking, routed.messages, routed.chat.worker_params(), attempts
            ),
        )
    except ClientDisconnectedError:
        finish(server, routed, attempts, None, "client_disconnected", CLIENT_CLOSED_STATUS)
        return Response(status_code=CLIENT_CLOSED_STATUS)
    except (AllWorkersFailedError, WorkerRejectedError) as error:
        raise failure(server, routed, error) from None
    except asyncio.CancelledError:
        if not server.interrupted():
            raise
        raise given_up_at_shutdown(server, routed, attempts) from None
    usage = result.usage.model_dump() if result.usage else None
    raw = result.raw or completion_body(result.output or "", usage)
    body = server.redact.scrub(with_text_content(raw))
    assert isinstance(body, dict)
    body["id"] = routed.request_id
    body["model"] = server.settings.model_name
    if routed.chat.include_routing:
        body["fugu"] = routing_field(routed, attempts, result.cost)
    finish(server, routed, attempts, usage, "ok", 200, cost=result.cost)
    return JSONAnswer(body, headers=routing_headers(routed, attempts))


async def answer_streaming(server: FuguServer, request: Request, routed: Routed) -> Response:
    params = stream_params(routed.chat)
    attempts: list[Attempt] = []  # the workers tried before the client left, if it did
    try:
        opened = await until_disconnected(
            request,
            server.dispatcher.open_stream(routed.route.ranking, routed.messages, params, attempts),
        )
    except ClientDisconnectedError:
        finish(server, routed, attempts, None, "client_disconnected", CLIENT_CLOSED_STATUS)
        return Response(status_code=CLIENT_CLOSED_STATUS)
    except (AllWorkersFailedError, WorkerRejectedError) as error:
        raise failure(server, routed, error) from None
    except asyncio.CancelledError:
        if not server.interrupted():
            raise
        raise given_up_at_shutdown(server, routed, attempts) from None
    relay = relayed_stream(server, routed, opened)
    return RelayResponse(
        relay,
        server.interrupted,
        headers={**routing_headers(routed, opened.attempts), **STREAM_HEADERS},
    )


class RelayResponse(StreamingResponse):
    """A relayed stream's response. One still running when the server's graceful shutdown
    runs out (uvicorn cancels its task) ends with an error event (shutting_down) and its
    decision log line says so; the client's connection was cut, the line said
    client_disconnected and the server's log showed a traceback."""

    def __init__(
        self, relay: RelayedStream, stopping: Callable[[], bool], headers: dict[str, str]
    ) -> None:
        super().__init__(
            relay.events(),
            media_type="text/event-stream",
            headers=headers,
            background=BackgroundTask(relay.finalize),
        )
        self.relay = relay
        self.stopping = stopping

    async def listen_for_disconnect(self, receive: Receive) -> None:
        # Cancelled here while stopping is the shutdown's cancel: a client that leaves ends
        # this wait, and the stream's end cancels it once its line is recorded already.
        try:
            await super().listen_for_disconnect(receive)
        except asyncio.CancelledError:
            self.relay.cut_by_shutdown = self.stopping()
            raise

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = ended = False

        async def noting(message: Message) -> None:
            nonlocal started, ended
            started = started or message["type"] == "http.response.start"
            ended = message["type"] == "http.response.body" and not message.get("more_body")
            await send(message)

        try:
            await super().__call__(scope, receive, noting)
        except asyncio.CancelledError:
            if not self.relay.cut_by_shutdown:
                raise
            take_back_cancellation()
            self.relay.end_at_shutdown()
            if started and not ended:  # its events' end was cancelled with them
                await send({"type": "http.response.body", "body": b"", "more_body": False})


def given_up_at_shutdown(server: FuguServer, routed: Routed, attempts: list[Attempt]) -> ApiError:
    """The 503 for a request whose worker had not answered when the server's graceful
    shutdown ran out (uvicorn cancels its task), recorded: a plain-text 500, a traceback in
    the server's log and no decision log line before. The cancellation is taken back, so
    the answer can be sent."""
    take_back_cancellation()
    error = ApiError(
        503,
        "the server is shutting down and gave up on this request before a worker answered; "
        "send it again (to another instance, or once this one is back)",
        type="server_error",
        code=SHUTTING_DOWN,
        headers=routing_headers(routed, attempts),
    )
    finish(server, routed, attempts, None, SHUTTING_DOWN, 503, code=error.code)
    error.recorded = True
    return error


def take_back_cancellation() -> None:
    """Undo the shutdown's cancel of this task (uvicorn's, at its graceful timeout), so that
    its request can still be answered."""
    task = asyncio.current_task()
    if task is not None:
        task.uncancel()


def stream_params(chat: ChatCompletionRequest) -> dict[str, Any]:
    """The worker's parameters for a stream: usage asked for always (for metrics and cost;
    the client gets it only if it asked). The client's other stream_options
    (include_obfuscation, ...) go on as sent."""
    params = chat.worker_params()
    options = chat.stream_options
    params["stream_options"] = {**(options.model_dump() if options else {}), "include_usage": True}
    return params


def relayed_stream(server: FuguServer, routed: Routed, opened: OpenedStream) -> RelayedStream:
    """The opened stream relayed to the client, its end recorded (breaker, metrics, log)."""

    def done(
        usage: dict[str, Any] | None, outcome: str, status: int, failed_kind: str | None
    ) -> None:
        server.dispatcher.stream_ended(opened.worker, outcome, opened.permit, failed_kind)
        cost = stream_cost(server, opened.worker, usage)
        finish(server, routed, opened.attempts, usage, outcome, status, cost=cost)
        server.leave()

    return RelayedStream(
        opened,
        request_id=routed.request_id,
        model=server.settings.model_name,
        include_usage=routed.chat.include_usage,
        messages=server.pool.request_messages(opened.worker, routed.messages),
        tools=[*(routed.chat.tools or []), *(routed.chat.functions or [])],
        idle_timeout_s=server.pool.worker(opened.worker).timeout_s,
        redact=server.redact,
        on_done=done,
        worker_hosts=server.worker_hosts,
        first_extra=routing_field(routed, opened.attempts, None)
        if routed.chat.include_routing
        else None,
    )
