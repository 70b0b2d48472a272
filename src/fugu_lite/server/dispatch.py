"""Calling the routed worker, falling back to the next-best one while nothing was sent to
the client yet, and keeping each worker's circuit breaker up to date."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from ..workers.errors import (
    CONTEXT_LENGTH_EXCEEDED,
    WorkerCallError,
    context_limit,
    worker_refusal,
)
from ..workers.pool import WorkerPool
from ..workers.results import CallResult
from ..workers.retries import RATE_LIMITED, RETRYABLE_KINDS, call_budget_s
from .auth import Redactor
from .breaker import CircuitBreaker, CircuitReading, Permit
from .metrics import Metrics

logger = logging.getLogger(__name__)

FALLBACK_KINDS = frozenset({"timeout", "connection", "rate_limit", "server", "worker_config"})
# A worker refusing a conversation longer than its context: the next worker may have a
# larger one, so it is tried; the worker itself is fine (its circuit is not charged).
CONTEXT_LENGTH = CONTEXT_LENGTH_EXCEEDED
# A call that waited its whole deadline for one of the worker's max_concurrency slots: the
# worker is busy, not failing, so its circuit is not charged.
BUSY = "busy"
NEXT_WORKER_OUTCOMES = FALLBACK_KINDS | {CONTEXT_LENGTH, BUSY}  # outcomes that try the next one
# A worker rate-limited by its provider (429) asks to wait, often seconds (its Retry-After):
# while another worker may answer, the client is not held through those waits. Nor is it
# broken: its circuit is not charged (a 429 insufficient_quota, no credit left, is no rate
# limit: workers.errors.classify_error, and refine_kind's worker_config).
RETRIED_BEFORE_NEXT = RETRYABLE_KINDS - {RATE_LIMITED}
# A worker's 409 is a conflict in its own state (a lock timeout), which the openai SDK
# retries as it does a 5xx: not the request's fault, so the next worker is tried (as it is
# on any 4xx the worker answers with x-should-retry: true).
CONFLICT = 409


@dataclass(frozen=True)
class WorkerStanding:
    """Whether a worker takes a request now, with what that was decided on (/health's
    circuit, alive and rate_limited_for_s), each read once: its process polled, or the
    clock read, again for the status could disagree with the first reading."""

    circuit: CircuitReading
    alive: bool
    rate_limited_for_s: float
    takes_request: bool


@dataclass
class Attempt:
    worker: str
    outcome: str
    """"ok", an error kind (timeout, connection, rate_limit, server, worker_config, client),
    "context_length_exceeded" (the conversation is longer than the worker's context), or
    "circuit_open" (skipped without a call)."""
    message: str | None = None
    latency_s: float = 0.0
    calls: int = 0
    retry_at: float | None = None
    """time.monotonic() at which the worker's Retry-After (on its last error) ends."""
    code: str | None = None
    """The `code` of the worker's error body (insufficient_quota, ...)."""
    permit: Permit = "call"
    """What the worker's circuit let the call through as (the half-open probe, or not)."""
    param: str | None = None
    """The `param` of the worker's error body: the request parameter it refused."""

    def summary(self) -> dict[str, Any]:
        return {
            "worker": self.worker,
            "outcome": self.outcome,
            "message": self.message,
            "latency_s": round(self.latency_s, 6),
            "calls": self.calls,
        }


@dataclass
class SlotWait:
    """The deadline of one call to a worker, first over its wait for one of the worker's
    max_concurrency slots, then (called when it has one) over the call itself: a call that
    got its slot late is not cut short, and one that never got it was busy, not failing."""

    deadline_s: float
    limit: asyncio.Timeout | None = None
    had_slot: bool = False

    def __call__(self) -> None:
        self.had_slot = True
        if self.limit is not None:
            self.limit.reschedule(asyncio.get_running_loop().time() + self.deadline_s)


class AllWorkersFailedError(Exception):
    def __init__(self, attempts: list[Attempt]) -> None:
        super().__init__("every worker failed")
        self.attempts = attempts

    @property
    def too_long(self) -> list[Attempt]:
        """The workers that said the conversation exceeds their context."""
        return [attempt for attempt in self.attempts if attempt.outcome == CONTEXT_LENGTH]

    @property
    def down(self) -> list[Attempt]:
        """The workers that could not answer at all (failed, or skipped: circuit open)."""
        return [attempt for attempt in self.attempts if attempt.outcome != CONTEXT_LENGTH]


class WorkerRejectedError(Exception):
    """The worker refused the request itself (a 4xx other than 429): the request, not the
    worker, is at fault, so no other worker is tried."""

    def __init__(self, attempts: list[Attempt]) -> None:
        super().__init__(attempts[-1].message or "the worker rejected the request")
        self.attempts = attempts


@dataclass
class OpenedStream:
    worker: str
    first_chunk: dict[str, Any]
    chunks: AsyncIterator[dict[str, Any]]
    attempts: list[Attempt] = field(default_factory=list)
    opened_s: float = 0.0
    permit: Permit = "call"


class Dispatcher:
    def __init__(
        self, pool: WorkerPool, breaker: CircuitBreaker, metrics: Metrics, redactor: Redactor
    ) -> None:
        self.pool = pool
        self.breaker = breaker
        self.metrics = metrics
        self.redact = redactor

    def deadline_s(self, worker: str) -> float:
        """Upper bound on one call with all its retries: nothing waits forever, even if a
        worker's slot is held or the pool's own timeout does not fire."""
        return call_budget_s(self.pool.worker(worker))

    async def complete(
        self,
        ranking: list[str],
        messages: list[dict[str, Any]],
        params: dict[str, Any],
        attempts: list[Attempt] | None = None,
    ) -> tuple[CallResult, list[Attempt]]:
        """The first worker in ranking order that answers; AllWorkersFailedError when none.
        Each attempt is added to `attempts` as it ends: a caller cancelling the call (its
        client left) still has those made before."""
        attempts = [] if attempts is None else attempts
        for index, worker in enumerate(ranking):
            last = index == len(ranking) - 1
            permit = self._may_call(worker, attempts)
            if permit is None:
                continue
            result = await self._call(worker, messages, params, permit, last)
            attempt = self._call_attempt(worker, result, permit)
            attempts.append(attempt)
            self._record(attempt, last=last)
            if result.error is None:
                return result, attempts
            if attempt.outcome not in NEXT_WORKER_OUTCOMES:
                raise WorkerRejectedError(attempts)
        raise AllWorkersFailedError(attempts)

    async def _call(
        self,
        worker: str,
        messages: list[dict[str, Any]],
        params: dict[str, Any],
        permit: Permit,
        last: bool,
    ) -> CallResult:
        """One worker's answer (with the pool's retries) within its deadline; a cancelled
        call frees the worker's circuit probe, if it held it."""
        wait = SlotWait(self.deadline_s(worker))
        try:
            async with asyncio.timeout(wait.deadline_s) as wait.limit:
                return await self.pool.chat(worker, messages, wait, retried_kinds(last), **params)
        except TimeoutError:
            return self._timed_out(worker, wait.had_slot)
        except asyncio.CancelledError:
            self.breaker.release(worker, permit)
            raise

    def _call_attempt(self, worker: str, result: CallResult, permit: Permit) -> Attempt:
        outcome = (
            "ok"
            if result.error is None
            else refine_kind(
                result.error_kind, result.status_code, result.error_code, result.should_retry
            )
        )
        return Attempt(
            worker,
            outcome,
            self.redact(result.error) if result.error else None,
            result.latency_s,
            result.attempts,
            retry_at(result.retry_after_s),
            result.error_code,
            permit,
            result.error_param,
        )

    async def open_stream(
        self,
        ranking: list[str],
        messages: list[dict[str, Any]],
        params: dict[str, Any],
        attempts: list[Attempt] | None = None,
    ) -> OpenedStream:
        """Open the first worker's stream that yields a chunk; until that chunk nothing has
        gone to the client, so a failure moves on to the next worker. The attempts are added
        to `attempts` as they end, as complete's are."""
        attempts = [] if attempts is None else attempts
        for index, worker in enumerate(ranking):
            last = index == len(ranking) - 1
            permit = self._may_call(worker, attempts)
            if permit is None:
                continue
            opened = await self._open(worker, messages, params, permit, last)
            if isinstance(opened, Attempt):
                attempts.append(opened)
                self._record(opened, last=last)
                if opened.outcome not in NEXT_WORKER_OUTCOMES:
                    raise WorkerRejectedError(attempts)
                continue
            attempt = Attempt(worker, "ok", None, opened.opened_s, 1, permit=permit)
            attempts.append(attempt)
            # The breaker's verdict and the call's count wait for the stream's end
            # (stream_ended): a worker that always fails after its first chunk must still
            # open its circuit, and show as failing in the metrics.
            self._record(attempt, judged=False)
            opened.attempts = attempts
            return opened
        raise AllWorkersFailedError(attempts)

    async def _open(
        self,
        worker: str,
        messages: list[dict[str, Any]],
        params: dict[str, Any],
        permit: Permit,
        last: bool,
    ) -> OpenedStream | Attempt:
        """The worker's stream with its first chunk, or the failed attempt (its stream
        closed). Anything else (a cancellation) closes it, frees the worker's circuit probe
        if it held it, and goes on."""
        started = time.perf_counter()
        wait = SlotWait(self.deadline_s(worker))
        chunks = self.pool.stream_chat(worker, messages, wait, retried_kinds(last), **params)
        try:
            async with asyncio.timeout(wait.deadline_s) as wait.limit:
                first = await anext(chunks)
        except (WorkerCallError, TimeoutError, StopAsyncIteration) as error:
            await close_quietly(chunks)
            return self._stream_attempt(worker, error, wait.had_slot, started, permit)
        except BaseException:
            self.breaker.release(worker, permit)
            await close_quietly(chunks)
            raise
        return OpenedStream(worker, first, chunks, [], time.perf_counter() - started, permit)

    def _stream_attempt(
        self,
        worker: str,
        error: WorkerCallError | TimeoutError | StopAsyncIteration,
        had_slot: bool,
        started: float,
        permit: Permit,
    ) -> Attempt:
        """A stream that failed before its first chunk, as an attempt (busy: it never had
        one of the worker's slots)."""
        kind, message = describe_stream_error(worker, error)
        if isinstance(error, TimeoutError) and not had_slot:
            kind, message = BUSY, self.busy_message(worker)
        failed = error if isinstance(error, WorkerCallError) else None
        return Attempt(
            worker,
            kind,
            self.redact(message),
            time.perf_counter() - started,
            1,
            retry_at(failed.retry_after_s if failed else None),
            failed.code if failed else None,
            permit,
            failed.param if failed else None,
        )

    def _may_call(self, worker: str, attempts: list[Attempt]) -> Permit | None:
        """Whether the worker is called now (None: no): not while its provider's rate limit
        lasts, its circuit is open or its local process has exited (each noted in
        `attempts`). "probe" holds the worker's circuit probe, when it is half-open, for
        this call."""
        if self._still_rate_limited(worker, attempts):
            return None
        permit = self.breaker.acquire(worker)
        if permit is None:
            attempts.append(Attempt(worker, "circuit_open"))
            return None
        return None if self._process_exited(worker, permit, attempts) else permit

    def takes_request(self, worker: str) -> bool:
        """Would `_may_call` let a request through to the worker now (without taking its
        circuit's probe)? Not while its provider's rate limit lasts, its circuit is open (or
        half-open with its probe out) or its local process has exited (/health's count)."""
        return self.standing(worker).takes_request

    def standing(self, worker: str) -> WorkerStanding:
        """takes_request, with its process's state and its rate limit's rest as read for it."""
        limited_for_s = self.breaker.limited_for(worker)
        circuit = self.breaker.reading(worker)
        alive = self.pool.is_alive(worker)
        takes = limited_for_s <= 0 and circuit.takes_request and alive
        return WorkerStanding(circuit, alive, limited_for_s, takes)

    def _still_rate_limited(self, worker: str, attempts: list[Attempt]) -> bool:
        """A worker whose provider's rate limit (the Retry-After of its 429) has not ended
        is skipped without a call."""
        wait_s = self.breaker.limited_for(worker)
        if wait_s <= 0:
            return False
        message = f"worker {worker}: rate-limited by its provider for {wait_s:.1f} s more"
        attempts.append(Attempt(worker, RATE_LIMITED, message, retry_at=retry_at(wait_s)))
        return True

    def _process_exited(self, worker: str, permit: Permit, attempts: list[Attempt]) -> bool:
        """A local worker whose llama.cpp process has exited fails at once, without a call
        (and without the pool's retries against a closed port)."""
        if self.pool.is_alive(worker):
            return False
        message = f"worker {worker}: its local server has exited"
        attempt = Attempt(worker, "connection", message, permit=permit)
        attempts.append(attempt)
        self._record(attempt, called=False)
        return True

    def stream_ended(
        self, worker: str, outcome: str, permit: Permit, failed_kind: str | None = None
    ) -> None:
        """The breaker's verdict on a relayed stream: "ok" is a success, "stream_error" a
        failure; anything else (the client left) frees the worker's probe, if the stream
        held it, without one. The call is counted as `failed_kind` (the error's kind) when
        the worker failed, else as ok."""
        if outcome == "ok":
            self.breaker.record_success(worker, permit)
        elif outcome == "stream_error":
            self.breaker.record_failure(worker, permit)
        else:
            self.breaker.release(worker, permit)
        self.metrics.worker_calls.labels(worker, failed_kind or "ok").inc()
        self._show_circuit(worker)

    def _record(
        self, attempt: Attempt, judged: bool = True, last: bool = False, called: bool = True
    ) -> None:
        """Breaker and call count (when `judged`; an opened stream's wait for its end),
        latency (when `called`: a worker skipped without a call, or busy, never called,
        took no time upstream), circuit gauge and log for one call (`last`: no worker
        follows it in the ranking). A client error says the worker is up."""
        if judged and attempt.outcome == RATE_LIMITED:
            self.breaker.rate_limited(attempt.worker, attempt.retry_at, attempt.permit)
        elif judged and attempt.outcome in FALLBACK_KINDS:
            self.breaker.record_failure(attempt.worker, attempt.permit)
        elif judged and attempt.outcome == BUSY:
            self.breaker.release(attempt.worker, attempt.permit)
        elif judged:
            self.breaker.record_success(attempt.worker, attempt.permit)
        if judged:
            self.metrics.worker_calls.labels(attempt.worker, attempt.outcome).inc()
        if called and attempt.outcome != BUSY:
            self.metrics.upstream_latency.labels(attempt.worker).observe(attempt.latency_s)
        self._show_circuit(attempt.worker)
        if attempt.outcome == CONTEXT_LENGTH:
            # Not a failure: the worker is fine, the conversation does not fit it.
            logger.info("%s", self._too_long_note(attempt, last))
        elif held_back(attempt):
            # Back-pressure, not a fault (its circuit is not charged either).
            logger.info("worker %s did not take the request: %s", attempt.worker, attempt.message)
        elif attempt.outcome != "ok":
            logger.warning("worker %s failed: %s", attempt.worker, attempt.message)

    def context_limit(self, attempt: Attempt) -> int | None:
        """The context length, in tokens, of the worker that refused a conversation as too
        long: a local worker's n_ctx, else what its error message states, if it does."""
        local = self.pool.worker(attempt.worker).local
        if local is not None:
            return local.n_ctx
        return context_limit(attempt.message or "")

    def _too_long_note(self, attempt: Attempt, last: bool) -> str:
        limit = self.context_limit(attempt)
        size = f" of {limit} tokens" if limit is not None else ""
        then = "no other allowed worker is left" if last else "trying the next allowed worker"
        return (
            f"worker {attempt.worker}: the conversation is longer than its context{size}; "
            f"{then} ({attempt.message})"
        )

    def would_refuse_too(self, worker: str, refused_by: list[str]) -> bool:
        """Is `worker` known to refuse a conversation that the workers `refused_by` refused
        as longer than their context? Only for a local worker whose n_ctx is no larger than
        that of a local worker on the same GGUF that refused it: llama.cpp refuses a prompt
        of n_ctx tokens or more, counted by the model's own tokenizer. Any other worker's
        context is unknown here, so it may take the conversation."""
        local = self.pool.worker(worker).local
        if local is None:
            return False
        for other in refused_by:
            refuser = self.pool.worker(other).local
            if refuser is not None and refuser.gguf == local.gguf and refuser.n_ctx >= local.n_ctx:
                return True
        return False

    def _show_circuit(self, worker: str) -> None:
        state = self.breaker.state(worker)
        self.metrics.circuit_open.labels(worker).set(0 if state == "closed" else 1)

    def _timed_out(self, worker: str, had_slot: bool) -> CallResult:
        deadline = self.deadline_s(worker)
        error = f"worker {worker}: timeout: no answer within {deadline:g} s"
        return CallResult(
            worker_id=worker, output=None, usage=None, cost=None, latency_s=deadline,
            error=error if had_slot else self.busy_message(worker),
            error_kind="timeout" if had_slot else BUSY, attempts=1 if had_slot else 0,
        )  # fmt: skip

    def busy_message(self, worker: str) -> str:
        config = self.pool.worker(worker)
        busy = f"worker {worker}: busy: no free slot within {self.deadline_s(worker):g} s"
        if config.local is not None:
            return (
                f"{busy} (its llama.cpp server answers one request at a time, so it is sent "
                "one call at a time whatever its max_concurrency, and other requests held "
                "it); raise its timeout_s, or add workers"
            )
        return (
            f"{busy} (all {config.max_concurrency} of its max_concurrency taken by other "
            "requests); raise its max_concurrency or timeout_s, or add workers"
        )


def held_back(attempt: Attempt) -> bool:
    """Whether a worker did not take a call for back-pressure, no failure of its own: it was
    busy, or rate-limited by its provider."""
    return attempt.outcome in (BUSY, RATE_LIMITED)


def retried_kinds(last: bool) -> frozenset[str]:
    """The errors the pool tries a worker again on: a 429 only when no worker follows."""
    return RETRYABLE_KINDS if last else RETRIED_BEFORE_NEXT


def retry_at(retry_after_s: float | None) -> float | None:
    return None if retry_after_s is None else time.monotonic() + retry_after_s


def refine_kind(
    kind: str | None,
    status_code: int | None,
    code: str | None = None,
    should_retry: bool | None = None,
) -> str:
    """The pool's error kind, with "client" split into the request's fault ("client"), a
    conversation longer than this worker's context ("context_length_exceeded"), the
    worker's configuration ("worker_config": 401/403/404 from the worker, a 400 for its
    model name, or a 429 insufficient_quota) and its own state ("server": a 409 conflict,
    or any 4xx the worker said may succeed if tried again: `x-should-retry: true`, which
    the openai SDK obeys)."""
    if kind != "client":
        return kind or "server"
    if code == CONTEXT_LENGTH:
        return CONTEXT_LENGTH
    if status_code == CONFLICT or should_retry:
        return "server"
    # A worker answering 401/403/404 (or a 400 for its model name) is misconfigured (key,
    # model name, URL): the request is fine, so it goes to the next worker like any other
    # worker failure.
    return "worker_config" if worker_refusal(status_code, code) is not None else "client"


def describe_stream_error(worker: str, error: BaseException) -> tuple[str, str]:
    if isinstance(error, WorkerCallError):
        kind = refine_kind(error.kind, error.status_code, error.code, error.should_retry)
        return kind, str(error)
    if isinstance(error, TimeoutError):
        return "timeout", f"worker {worker}: timeout: no first chunk in time"
    return "server", f"worker {worker}: server: the stream ended before any chunk"


async def close_quietly(chunks: AsyncIterator[dict[str, Any]]) -> None:
    """Close an upstream stream (releasing its connection and worker slot), even while
    the surrounding task is being cancelled."""
    aclose = getattr(chunks, "aclose", None)
    if aclose is None:
        return
    with contextlib.suppress(Exception):
        await asyncio.shield(aclose())
