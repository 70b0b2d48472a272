"""Which failed calls the pool tries again, and how long it waits before each retry."""

from __future__ import annotations

import random

from .config import WorkerConfig
from .errors import retry_header

MAX_RETRY_AFTER_S = 60.0
RETRYABLE_KINDS = frozenset({"timeout", "connection", "rate_limit", "server"})


def backoff(worker: WorkerConfig, attempt: int, retry_after: float | None) -> float:
    """Exponential with full-range jitter (0.5x-1.5x); at least the server's Retry-After (up
    to MAX_RETRY_AFTER_S: a longer wait is left to the caller, who is told it; tried_again)."""
    delay = worker.retry_backoff_s * (2 ** (attempt - 1)) * random.uniform(0.5, 1.5)
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
    openai SDK obeys that header both ways); and its Retry-After is not over
    MAX_RETRY_AFTER_S (a retry sooner is refused again: the caller is told the wait in
    retry_after_s; the openai SDK does not retry then either)."""
    said = retry_header(error)
    if said is False or attempt > worker.max_retries:
        return False
    if kind not in retried and not (said and kind == "client"):
        return False
    return retry_after is None or retry_after <= MAX_RETRY_AFTER_S
