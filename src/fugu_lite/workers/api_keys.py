"""A worker's API key: read from the environment variable it names (the pool cannot start
without it), and scrubbed from every error message."""

from __future__ import annotations

import os

from .config import WorkerConfig
from .errors import MAX_ERROR_CHARS

NO_KEY = "fugu-lite-no-key"  # sent when a worker needs no key (local or open servers)


class PoolStartError(RuntimeError):
    """The pool could not start: a missing API key variable, or a local server that failed."""


def redact(text: str, secret: str | None) -> str:
    text = text[:MAX_ERROR_CHARS]
    if secret and secret != NO_KEY and len(secret) >= 4:
        text = text.replace(secret, "***")
    return text


def read_key(worker: WorkerConfig) -> str:
    if worker.api_key_env is None:
        return NO_KEY
    key = os.environ.get(worker.api_key_env)
    if not key:
        raise PoolStartError(
            f"worker {worker.id!r} reads its API key from the environment variable "
            f"{worker.api_key_env}, which is not set; `export {worker.api_key_env}=...` "
            "first, or remove the worker from the pool"
        )
    return key
