"""Which failed calls the pool tries again, and how long it waits before each retry."""

from __future__ import annotations

import random

from .config import WorkerConfig
from .errors import says_no_retry

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
    """Whether a failed attempt is tried again: its kind is one the caller has retried, the
    worker's max_retries are not used up, the worker did not answer `x-should-retry: false`
    (a retry will not help; the openai SDK obeys it too), and its Retry-After is not over
    MAX_RETRY_AFTER_S (a retry sooner is refused again: the caller is told the wait in
    retry_after_s; the openai SDK does not retry then either)."""
    if kind not in retried or attempt > worker.max_retries or says_no_retry(error):
        return False
    return retry_after is None or retry_after <= MAX_RETRY_AFTER_S
