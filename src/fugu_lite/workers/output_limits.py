"""The output-token limit of a call: OpenAI has two names for it (max_completion_tokens, the
older max_tokens), and each worker reads one."""

from __future__ import annotations

from typing import Any

from .config import WorkerConfig

OUTPUT_LIMITS = ("max_completion_tokens", "max_tokens")  # OpenAI's names for one limit


def output_limit(params: dict[str, Any]) -> tuple[str, Any] | None:
    """The output-token limit that params set, as (its name, its value), None for none."""
    for name in OUTPUT_LIMITS:
        if params.get(name) is not None:
            return name, params[name]
    return None


def output_limit_name(worker: WorkerConfig, params: dict[str, Any]) -> str:
    """The name a worker gets its output-token limit under: `max_tokens` for a local
    worker (llama-cpp-python's server reads no other), the name the worker's own params
    use (the pool knows its server: OpenAI's o-series refuse `max_tokens`, some servers
    read only `max_tokens`), else the name the caller used."""
    if worker.local is not None:
        return "max_tokens"
    named = [name for name in OUTPUT_LIMITS if name in worker.params] or [
        name for name in OUTPUT_LIMITS if params.get(name) is not None
    ]
    return named[0] if named else "max_tokens"


def with_output_limit(worker: WorkerConfig, params: dict[str, Any]) -> dict[str, Any]:
    """The worker's params overridden by the call's, with one output-token limit (the
    call's, max_completion_tokens first, else the worker's) under the worker's name for
    it: `max_tokens` beside the worker's `max_completion_tokens` would be two limits."""
    merged = {**worker.params, **params}
    limit = output_limit(params) or output_limit(worker.params)
    if limit is not None:
        for name in OUTPUT_LIMITS:
            merged.pop(name, None)
        merged[output_limit_name(worker, params)] = limit[1]
    return merged
