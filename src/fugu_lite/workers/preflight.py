"""What would make a pool fail to start, checked before anything long begins: `serve`
checks it before the server listens, `demo` before its first stage, and the pool's start
checks the same, in the same order (so each path shows a pool's user the same first error)."""

from __future__ import annotations

from .api_keys import read_key
from .config import PoolConfig, WorkerConfig
from .llama_cpp_requests import check_chat_format, check_local_params
from .local_server import (
    check_extra_args,
    check_gguf_loads,
    check_llama_cpp_installed,
    check_n_threads,
)


def preflight(pool_config: PoolConfig) -> None:
    """What would make the pool fail to start, found before anything starts: a missing
    or unusable API key (every worker's first), then each local worker's problems
    (check_local_worker)."""
    for worker in pool_config.workers:
        read_key(worker)
    for worker in pool_config.workers:
        check_local_worker(worker)


def check_local_worker(worker: WorkerConfig) -> None:
    """What would stop a local worker's server, or its calls, before it starts: llama.cpp's
    server not installed, a local.n_threads far over the machine's cores, extra_args its
    server refuses, a missing GGUF file or one llama.cpp cannot load, params or a
    chat_format its server does not know. The checks of the config alone come first, the
    GGUF's reading (an open of the file) after them."""
    local = worker.local
    if local is None:
        return
    check_llama_cpp_installed()
    check_n_threads(worker.id, local)
    check_extra_args(worker.id, local)
    check_local_params(worker)  # loads the request model: not on a request's loop
    check_gguf_loads(worker.id, local)
    check_chat_format(worker)
