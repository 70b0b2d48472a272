"""Which failed calls the pool tries again, how long it waits before each retry, and how long
one call may take with all its retries (call_budget_s)."""

from __future__ import annotations

import random
import time

from .config import WorkerConfig
from .errors import retry_header

MAX_RETRY_AFTER_S = 60.0
MAX_DOUBLINGS = 64  # of retry_backoff_s (backoff)
BACKOFF_MARGIN_S = 5.0  # a call's budget for the waits between its attempts (call_budget_s)
# The least of the call's budget a retry's attempt must have after its wait (or the worker's
# whole timeout_s, if shorter): one with less is cut before any answer (ends_before).
MIN_ATTEMPT_S = 1.0
RATE_LIMITED = "rate_limit"  # a 429 (classify_error)
RETRYABLE_KINDS = frozenset({"timeout", "connection", RATE_LIMITED, "server"})


def call_budget_s(worker: WorkerConfig) -> float:
    """The longest one call may take with all its retries, once it has a slot of the worker:
    each attempt's timeout_s and a margin for the waits between them (serve cuts a call
    there too)."""
    return worker.timeout_s * (worker.max_retries + 1) + BACKOFF_MARGIN_S


def attempt_timeout_s(worker: WorkerConfig, deadline: float) -> float:
    """An attempt's timeout: the worker's timeout_s, cut to what is left of the call's budget
    (its deadline on time.perf_counter) after the waits before it."""
    return min(worker.timeout_s, deadline - time.perf_counter())


def ends_before(worker: WorkerConfig, wait_s: float, deadline: float) -> bool:
    """Whether a wait before a retry ends before the call's deadline (time.perf_counter)
    with time left for the attempt after it (MIN_ATTEMPT_S, or the worker's timeout_s if
    shorter); a longer one (a Retry-After beyond the budget) is not waited for: the call
    fails at once with the error before it, its caller told the wait (retry_after_s). An
    attempt left a sliver timed out: the call failed as a timeout (not as the 429 it had),
    and a local worker's server, healthy, was killed and started again."""
    needed = min(worker.timeout_s, MIN_ATTEMPT_S)
    return time.perf_counter() + wait_s + needed <= deadline


def backoff(worker: WorkerConfig, attempt: int, retry_after: float | None) -> float:
    """Exponential with full-range jitter (0.5x-1.5x); at least the server's Retry-After (up
    to MAX_RETRY_AFTER_S: a longer wait is left to the caller, who is told it; tried_again)."""
    # Doubled at most MAX_DOUBLINGS times: 2 ** 1024 is past a float (an OverflowError on a
    # down worker's 1025th attempt), and a wait that long is never taken anyway (ends_before).
    doublings = min(attempt - 1, MAX_DOUBLINGS)
    delay = worker.retry_backoff_s * (2**doublings) * random.uniform(0.5, 1.5)
    return max(delay, min(retry_after or 0.0, MAX_RETRY_AFTER_S))


def tried_again(
    worker: WorkerConfig,
    attempt: int,
    kind: str,
    retried: frozenset[str],
    error: BaseException,
    retry_after: float | None,
) -> bool:
    """Whether a failed attempt is tried again: the worker's max_retries are not used up; its
    kind is one the caller has retried, or a client error (a 409, say) the worker answered
    with `x-should-retry: true`; the worker did not answer `x-should-retry: false` (the
    openai SDK obeys that header both ways); its Retry-After is not over MAX_RETRY_AFTER_S
    (a retry sooner is refused again: the caller is told the wait in retry_after_s; the
    openai SDK does not retry then either); and a caller that does not retry 429s (serve,
    while another worker follows) is not held through any worker's Retry-After: a 503 asking
    to wait 3 s, retried twice, kept the client 6 s from the next worker."""
    said = retry_header(error)
    if said is False or attempt > worker.max_retries:
        return False
    if kind not in retried and not (said and kind == "client"):
        return False
    if retry_after and RATE_LIMITED not in retried:
        return False
    return retry_after is None or retry_after <= MAX_RETRY_AFTER_S


def retry_wait(
    worker: WorkerConfig,
    attempt: int,
    kind: str,
    retried: frozenset[str],
    error: BaseException,
    retry_after: float | None,
    deadline: float,
) -> float | None:
    """How long to wait before trying a failed attempt again (`backoff`); None when it is not
    tried again (`tried_again`) or the wait would not end before the call's deadline."""
    wait = backoff(worker, attempt, retry_after)
    if tried_again(worker, attempt, kind, retried, error, retry_after) and ends_before(
        worker, wait, deadline
    ):
        return wait
    return None
