"""Which failed calls the pool tries again, and how long it waits before each retry."""

from __future__ import annotations

import random

from .config import WorkerConfig

MAX_RETRY_AFTER_S = 60.0
RETRYABLE_KINDS = frozenset({"timeout", "connection", "rate_limit", "server"})


def backoff(worker: WorkerConfig, attempt: int, retry_after: float | None) -> float:
    """Exponential with full-range jitter (0.5x-1.5x); at least the server's Retry-After (up
    to MAX_RETRY_AFTER_S: a longer wait is left to the caller, who is told it)."""
    delay = worker.retry_backoff_s * (2 ** (attempt - 1)) * random.uniform(0.5, 1.5)
    return max(delay, min(retry_after or 0.0, MAX_RETRY_AFTER_S))
