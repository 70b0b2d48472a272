"""One attempt at a worker call: its answer read as asked (Answer, answer_as_asked) or why it
failed, described with the worker's API key scrubbed (Failure, describe_failure,
broken_stream_error), and the CallResult of a call refused before it was sent
(refused_result) or whose last attempt failed (failed_result)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import openai

from .api_keys import redact
from .config import WorkerConfig
from .errors import (
    CONTEXT_LENGTH_EXCEEDED,
    WorkerCallError,
    classify_error,
    connection_reason,
    error_code,
    error_param,
    request_address,
    retry_header,
    status_code,
    worker_refusal,
)
from .llama_cpp_answers import one_call_style, top_logprobs_as_asked
from .results import NON_FINITE_MARK, CallResult, Usage, json_safe
from .streams import AFTER_STREAM_START, IN_FIRST_CHUNK

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Answer:
    """A call's answered attempt: its completion, tokens, their cost and the worker's JSON."""

    output: str
    usage: Usage | None
    cost: float | None
    raw: Any


@dataclass(frozen=True)
class Failure:
    """A failed attempt: its error, kind, message (keys scrubbed) and Retry-After."""

    error: Exception
    kind: str
    message: str
    retry_after: float | None


def answer_as_asked(worker: WorkerConfig, body: dict[str, Any], content: bytes, raw: Any) -> Any:
    """A worker's answer with the numbers JSON cannot hold replaced, and a local worker's in
    the shape OpenAI gives (one call style, the top_logprobs asked)."""
    if NON_FINITE_MARK.search(content):
        raw = json_safe(raw)
    if worker.local is not None and isinstance(raw, dict):
        raw = one_call_style(raw, legacy=bool(body.get("functions")))
        raw = top_logprobs_as_asked(raw, body.get("top_logprobs"))
    return raw


def describe_failure(
    worker: WorkerConfig, error: BaseException, key: str | None
) -> tuple[str, str, float | None]:
    """A failed attempt's kind, message (the worker's API key scrubbed; what to fix in the
    pool for a refusal for the worker's own settings) and Retry-After."""
    kind, detail, retry_after = classify_error(error)
    message = redact(f"worker {worker.id}: {kind}: {detail}", key)
    fix = refusal_fix(worker, status_code(error), error_code(error))
    return kind, message if fix is None else f"{message.rstrip('.')}; {fix}", retry_after


def refusal_fix(worker: WorkerConfig, status: int | None, code: str | None) -> str | None:
    """What to fix in the pool for the worker's refusal of a call for its own settings
    (worker_refusal); for a bad key or no access (401, 403), naming the environment
    variable its key came from (never the key), or saying it has none; None for any other
    error."""
    if status not in (401, 403):
        return worker_refusal(status, code)
    env = worker.api_key_env
    access = f"has no access to model {worker.model!r} or this endpoint"
    if env is None:
        sent = "it was sent no API key, as it has no api_key_env"
        fix = "fix api_key_env: set it to the name of the environment variable that holds its key"
        return f"{sent}: {fix}" if status == 401 else f"{sent}, and {access}: {fix}, or fix model"
    sent = f"its API key, from the environment variable {env} (its api_key_env),"
    if status == 401:
        return (
            f"{sent} was not accepted: fix the key in {env}, or set api_key_env to the "
            "variable that holds a valid one"
        )
    return f"{sent} {access}: fix model, or the key in {env} to one with that access"


# A stream's timeout after its first chunk: it answered, then stalled.
STALLED_STREAM = "no chunk within the worker's timeout_s: the stream stalled"


def broken_stream_error(
    worker: WorkerConfig, error: Exception, key: str | None, started: bool
) -> WorkerCallError:
    """A failure of an opened stream, said so: after its first chunk was yielded (`started`)
    or in that first chunk (nothing yielded: serve tries another worker). A connection that
    failed then had reached the worker: not "could not reach the server at URL", which sent
    one to check base_url and whether the server runs."""
    worker_id = worker.id
    kind, message, _ = describe_failure(worker, error, key)
    if kind == "timeout" and status_code(error) is None:
        message = f"worker {worker_id}: timeout: {STALLED_STREAM}"
    elif kind == "connection" and isinstance(error, openai.APIConnectionError):
        lost = f"the connection to {request_address(error)} was lost mid-answer"
        message = redact(f"worker {worker_id}: connection: {lost}{connection_reason(error)}", key)
    message = f"{message}{AFTER_STREAM_START if started else IN_FIRST_CHUNK}"
    return WorkerCallError(
        kind, message, status_code(error), error_code(error), param=error_param(error)
    )


def refused_result(worker_id: str, refused: WorkerCallError) -> CallResult:
    """A call refused before it was sent (`refused_locally`)."""
    return CallResult(
        worker_id=worker_id, output=None, usage=None, cost=None, latency_s=0.0,
        error=str(refused), error_kind=refused.kind, attempts=0,
        status_code=refused.status_code, started_at=time.time(), finished_at=time.time(),
    )  # fmt: skip


def failed_result(
    worker_id: str, failure: Failure, attempt: int, start: float, started_at: float
) -> CallResult:
    """A call whose last attempt failed, logged."""
    error = failure.error
    # A prompt over the worker's context is no failure of the worker.
    too_long = error_code(error) == CONTEXT_LENGTH_EXCEEDED
    logger.log(
        logging.DEBUG if too_long else logging.INFO,
        "worker %s failed after %d attempt(s): %s", worker_id, attempt, failure.message,
    )  # fmt: skip
    return CallResult(
        worker_id=worker_id, output=None, usage=None, cost=None,
        latency_s=time.perf_counter() - start, error=failure.message,
        error_kind=failure.kind, attempts=attempt, started_at=started_at,
        finished_at=time.time(), status_code=status_code(error),
        error_code=error_code(error), retry_after_s=failure.retry_after,
        error_param=error_param(error), should_retry=retry_header(error),
    )  # fmt: skip
