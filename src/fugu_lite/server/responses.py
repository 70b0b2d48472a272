"""What a routed request's answer carries besides the worker's own body (the routing
headers, the opt-in `fugu` field, a chat.completion built from an output alone, a stream's
cost) and its bookkeeping once it ends (`finish`: metrics and the decision log line)."""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fastapi.responses import JSONResponse

from ..workers.results import read_usage, text_of_parts
from .chat_request import ChatCompletionRequest
from .dispatch import Attempt
from .log import DecisionLogEntry, conversation_hash
from .routing import RouteResult

if TYPE_CHECKING:
    from .app import FuguServer

WORKER_HEADER = "x-fugu-worker"
PROBABILITIES_HEADER = "x-fugu-probabilities"
ATTEMPTS_HEADER = "x-fugu-attempts"
REQUEST_ID_HEADER = "x-request-id"
ROUTING_HEADERS = (WORKER_HEADER, PROBABILITIES_HEADER, ATTEMPTS_HEADER, REQUEST_ID_HEADER)
# A client's own X-Request-Id is taken only as given: an altered one (cut short, cleaned)
# would no longer match what the client logged, the only thing it is for.
USABLE_REQUEST_ID = re.compile(r"[\x21-\x7e]{1,200}")


class JSONAnswer(JSONResponse):
    """A JSON answer as FastAPI writes it (UTF-8, text beyond ASCII as written), except one
    holding half of a surrogate pair (a worker's `"\\ud83d"`: an emoji cut in two by a
    server counting UTF-16 units), which no UTF-8 body holds. That one is written with `\\u`
    escapes, as a stream's chunks are; it was a 500 that the decision log recorded as ok."""

    def render(self, content: Any) -> bytes:
        try:
            return super().render(content)
        except UnicodeEncodeError:
            return json.dumps(content, allow_nan=False, separators=(",", ":")).encode("ascii")


def new_request_id() -> str:
    """An answer's id (its body's `id`, its x-request-id header and its decision log line),
    or a refused request's (its x-request-id, and the log line of an internal error)."""
    return f"chatcmpl-{uuid.uuid4().hex}"


def request_id_for(headers: Mapping[str, str]) -> str:
    """The client's own X-Request-Id (sent by it or by the proxy in front) when it is
    usable as given (visible ASCII, at most 200 characters), so that its logs join the
    answer and the decision log; else a new one."""
    sent = headers.get(REQUEST_ID_HEADER)
    if sent is not None and USABLE_REQUEST_ID.fullmatch(sent):
        return sent
    return new_request_id()


@dataclass
class Routed:
    request_id: str
    chat: ChatCompletionRequest
    route: RouteResult
    started: float
    routing_s: float
    messages: list[dict[str, Any]]


def routing_headers(routed: Routed, attempts: list[Attempt]) -> dict[str, str]:
    return {
        WORKER_HEADER: answered_by(attempts) or "",
        PROBABILITIES_HEADER: json.dumps(
            {w: round(p, 4) for w, p in routed.route.probabilities.items()}, separators=(",", ":")
        ),
        ATTEMPTS_HEADER: ",".join(f"{a.worker}:{a.outcome}" for a in attempts),
        REQUEST_ID_HEADER: routed.request_id,
    }


def routing_field(routed: Routed, attempts: list[Attempt], cost: float | None) -> dict[str, Any]:
    """The opt-in `fugu` body field (request key include_routing)."""
    return {
        "worker": answered_by(attempts),
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


def with_text_content(body: dict[str, Any], key: str = "message") -> dict[str, Any]:
    """A worker's chat.completion (or chunk: key "delta") with each choice's content given
    as a list of parts (Mistral's reasoning models', some gateways') as OpenAI gives it: a
    string, its text parts joined (a thinking part is not the answer). The openai SDK types
    it as a string, and a client reading it as one (`content.strip()`) failed on the list."""
    choices = body.get("choices")
    if not isinstance(choices, list):
        return dict(body)
    shaped = []
    for choice in choices:
        message = choice.get(key) if isinstance(choice, dict) else None
        if isinstance(message, dict) and isinstance(message.get("content"), list):
            choice = {**choice, key: {**message, "content": text_of_parts(message["content"])}}
        shaped.append(choice)
    return {**body, "choices": shaped}


def stream_cost(server: FuguServer, worker: str, usage: dict[str, Any] | None) -> float | None:
    counts = read_usage(usage)
    return None if counts is None else server.pool.cost(worker, counts)


def finish(
    server: FuguServer,
    routed: Routed,
    attempts: list[Attempt],
    usage: dict[str, Any] | None,
    outcome: str,
    status: int,
    cost: float | None = None,
    code: str | None = None,
) -> None:
    """Metrics and the decision log line for a routed request (`code`: the error's, which
    the metrics count it by instead of its outcome)."""
    answered = answered_by(attempts)
    count_request(server, routed, answered, usage, code or outcome, status, cost)
    entry = decision_entry(server, routed, attempts, answered, usage, outcome, status, cost)
    messages = server.redact.scrub(routed.messages) if server.log.log_content else None
    server.log.write(entry, messages)  # type: ignore[arg-type]


def answered_by(attempts: list[Attempt]) -> str | None:
    """The worker whose call answered, if one did."""
    return next((a.worker for a in attempts if a.outcome == "ok"), None)


def count_request(
    server: FuguServer,
    routed: Routed,
    answered: str | None,
    usage: dict[str, Any] | None,
    outcome: str,
    status: int,
    cost: float | None,
) -> None:
    """The request's metrics: its status, its error (`outcome`, or the error's code), and
    the answering worker's usage."""
    metrics = server.metrics
    metrics.requests.labels(str(status), str(routed.chat.stream).lower()).inc()
    if outcome != "ok":
        metrics.errors.labels(outcome).inc()
    if answered is not None:
        metrics.record_usage(answered, usage, cost)
        if answered != routed.route.ranking[0]:
            metrics.fallbacks.inc()


def decision_entry(
    server: FuguServer,
    routed: Routed,
    attempts: list[Attempt],
    answered: str | None,
    usage: dict[str, Any] | None,
    outcome: str,
    status: int,
    cost: float | None,
) -> DecisionLogEntry:
    worker_ids = server.router.worker_ids
    return DecisionLogEntry(
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
