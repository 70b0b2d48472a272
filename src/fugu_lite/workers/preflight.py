"""What would make a pool fail to start, checked before anything long begins: `serve`
checks it before the server listens, `demo` before its first stage."""

from __future__ import annotations

from .api_keys import read_key
from .config import PoolConfig
from .llama_cpp_requests import check_chat_format, check_local_params
from .local_server import (
    check_extra_args,
    check_gguf_loads,
    check_llama_cpp_installed,
    check_n_threads,
    worker_gguf,
)


def preflight(pool_config: PoolConfig) -> None:
    """What would make the pool fail to start, found before anything starts: a missing
    or unusable API key, a missing GGUF file or one llama.cpp cannot load, a
    local.n_threads far over the machine's cores, llama.cpp's server not installed, a local
    worker's params, chat_format or extra_args that llama.cpp's server does not know."""
    for worker in pool_config.workers:
        read_key(worker)
        if worker.local is not None:
            check_llama_cpp_installed()
            worker_gguf(worker.id, worker.local)
            check_n_threads(worker.id, worker.local)
            check_extra_args(worker.id, worker.local)
            check_gguf_loads(worker.id, worker.local)
            check_local_params(worker)
            check_chat_format(worker)
