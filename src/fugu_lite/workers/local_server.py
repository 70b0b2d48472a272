"""Local workers: one `python -m llama_cpp.server` process per worker, started and stopped
by fugu-lite.

Each server listens on 127.0.0.1 on a free port (another one if a process takes it
first). Start-up waits until GET /v1/models answers; a server that dies fails with the
tail of its log. Servers never outlive fugu-lite: they are stopped on exit and on errors
(terminate, then kill), and on Linux they also get SIGKILL if the process that started
them dies (even by kill -9).
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import contextlib
import ctypes
import difflib
import errno
import functools
import importlib.util
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import httpx
import psutil

from ..atomic_files import user_temp_folder, writer_prefix
from ..config_errors import ConfigError
from ..text import exact_number
from .config import (
    LocalServerConfig,
    WorkerConfig,
    refused_flag,
    resolve_gguf,
    shown_args_text,
    why_refused,
)

LOG_TAIL_LINES = 25
# A server's log is cut back to its last LOG_KEPT_BYTES once past LOG_MAX_BYTES (trim_log).
LOG_MAX_BYTES = 2**20
LOG_KEPT_BYTES = 64 * 2**10
THREADS_PER_CORE = 4  # the most local.n_threads per core of the machine (check_n_threads)
STOP_GRACE_S = 5.0  # how long a server has to end after SIGTERM, before SIGKILL
KILL_WAIT_S = 5.0  # how long a server has to end after SIGKILL (see _wait_killed)
PORT_ATTEMPTS = 3  # starts on a new port when another process took the chosen one first
PORT_TAKEN = "address already in use"  # uvicorn's words for EADDRINUSE, in the server's log
# Compiler flags that leave llama.cpp's AMX kernels out of its build (see segfault_hint).
NO_AMX_FLAGS = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
_PR_SET_PDEATHSIG = 1
logger = logging.getLogger(__name__)
_running: set[LocalServer] = set()


class LocalServerError(RuntimeError):
    """A local llama.cpp server could not be started (or stopped); the message says why and
    what to do."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# The modules that llama-cpp-python's `[server]` extra installs and its server imports.
SERVER_MODULES = ("uvicorn", "fastapi", "pydantic_settings", "sse_starlette", "starlette_context")


def check_llama_cpp_installed() -> None:
    if importlib.util.find_spec("llama_cpp") is None:
        raise LocalServerError(
            "local workers need llama.cpp's OpenAI-compatible server; install it with "
            "`.venv/bin/pip install 'llama-cpp-python[server]'` (builds from source, a few "
            "minutes), or give the worker a remote base_url instead of `local:`"
        )
    missing = [name for name in SERVER_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        # Without them the server exits at once with a bare ModuleNotFoundError in its log.
        raise LocalServerError(
            "llama-cpp-python is installed without its server's packages (missing: "
            f"{', '.join(missing)}); add them with `.venv/bin/pip install "
            "'llama-cpp-python[server]'` (llama.cpp itself is not built again)"
        )


def worker_gguf(worker_id: str, config: LocalServerConfig) -> Path:
    """A local worker's GGUF file (resolve_gguf), with an error that names the worker: a
    missing or broken file named only its path, leaving a pool's user to find its worker."""
    try:
        return resolve_gguf(config.gguf)
    except ConfigError as error:
        raise ConfigError(f"local worker {worker_id!r}: {error}") from None


def machine_cores() -> int:
    """The cores this process may run on (its affinity: a container's or taskset's share)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def check_n_threads(worker_id: str, config: LocalServerConfig) -> None:
    """ConfigError for a local.n_threads far over the machine's cores: llama.cpp's server
    started all the same, then hung on its first call (20000 threads) or crashed with
    "Thread creation failed" or a segfault (100000); threads beyond the cores only wait for
    each other."""
    cores = machine_cores()
    most = cores * THREADS_PER_CORE
    if config.n_threads > most:
        raise ConfigError(
            f"local worker {worker_id!r}: local.n_threads {config.n_threads} is more threads "
            f"than this machine can run (it has {cores} cores: llama.cpp's threads beyond them "
            f"only wait for each other); set local.n_threads to at most {most}, best to "
            f"{cores} or fewer"
        )


class _RefusingParser(argparse.ArgumentParser):
    """An argparse parser that raises its error: llama_cpp.server's exits, printing usage."""

    def error(self, message: str) -> NoReturn:
        raise ValueError(message)


@functools.cache
def server_flag_parser() -> argparse.ArgumentParser:
    """llama_cpp.server's command-line parser, built as its __main__ builds it (a flag for
    each of its Settings, and --config_file), so its flags are those of the version
    installed; without -h, whose help would be printed here."""
    from llama_cpp.server.cli import add_args_from_model
    from llama_cpp.server.settings import Settings

    parser = _RefusingParser(add_help=False)
    add_args_from_model(parser, Settings)
    parser.add_argument("--config_file", type=str)
    return parser


def check_extra_args(worker_id: str, config: LocalServerConfig) -> None:
    """ConfigError for a local.extra_args that llama_cpp.server's parser refuses (an unknown
    flag, a typo such as --n_gpu_layres, a value of the wrong type, a flag without its
    value): the server started all the same, and exited at once with its usage text in its
    log, which the pool's start then showed. The error names the item, not the list: a
    long list hid it, and a typo of --api_key (which the config refuses) showed its key."""
    parser = server_flag_parser()
    where = f"local worker {worker_id!r}: local.extra_args"
    try:
        _, unknown = parser.parse_known_args(config.extra_args)
    except ValueError as error:
        raise ConfigError(
            f"{where}: llama.cpp's server would refuse them ({error}); see its flags with "
            "`python -m llama_cpp.server --help`"
        ) from None
    if unknown:
        raise ConfigError(f"{where}: {unknown_flag_problem(unknown[0], parser)}")


# Dashes that editors put for "--" (en and em dash, minus sign...), none of them a flag's.
TYPOGRAPHIC_DASHES = "\u2010\u2011\u2012\u2013\u2014\u2015\u2212\ufe58\ufe63\uff0d"


def unknown_flag_problem(arg: str, parser: argparse.ArgumentParser) -> str:
    """What is wrong with an extra_args item that llama_cpp.server's parser left over: a
    flag written with a typographic dash, a flag it does not have (with its closest flag),
    or a word that follows no flag."""
    flags = [flag for action in parser._actions for flag in action.option_strings]
    flag = arg.split("=", 1)[0]
    if flag.startswith(tuple(TYPOGRAPHIC_DASHES)):
        dashed = "--" + flag.lstrip(TYPOGRAPHIC_DASHES + "-")
        typographic = (
            f"{flag!r} starts with {flag[0]!r}, not '--' (a dash that a word processor or web "
            "page made of two hyphens, copied with the flag; llama.cpp's server would exit at "
            "its start: unrecognized arguments)"
        )
        refused = closest_flag_refused(dashed)
        if refused is not None:
            return f"{typographic}; {refused}"
        meant = shown_args_text("--" + arg.lstrip(TYPOGRAPHIC_DASHES + "-"))
        return f"{typographic}; write {meant!r}"
    if not flag.startswith("-"):
        return (
            f"{arg!r} follows no flag that takes it (llama.cpp's server would exit at its "
            "start: unrecognized arguments); remove it, or put its flag before it"
        )
    close = difflib.get_close_matches(flag, flags, n=1)
    refused = closest_flag_refused(close[0]) if close else None
    if refused is not None:
        return (
            f"{flag!r} is not a flag of llama.cpp's server, which would exit at its start "
            f"(unrecognized arguments); {refused}"
        )
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return (
        f"{flag!r}{hint} is not a flag of llama.cpp's server, which would exit at its start "
        "(unrecognized arguments); see its flags with `python -m llama_cpp.server --help`"
    )


def closest_flag_refused(flag: str) -> str | None:
    """What to say of the flag that an extra_args typo is closest to when extra_args may not
    set it either (None when it may): "did you mean '--api_key'?" sent the user to a flag
    the config then refused, two tries for one."""
    refused = refused_flag(flag)
    if refused is None:
        return None
    read_as = "" if refused == flag else f" (which llama.cpp's server reads as {refused})"
    return (
        f"the flag it looks like, {flag}{read_as}, is one extra_args may not set either: "
        f"{why_refused(refused)}"
    )


@contextlib.contextmanager
def vocab_only_model(gguf: Path) -> Iterator[Any]:
    """llama.cpp's model of a GGUF with its vocabulary and metadata only (~0.3 s, quietly),
    None if llama.cpp cannot read it; freed on the way out."""
    import llama_cpp

    quiet = logging.getLogger("llama-cpp-python")  # llama.cpp's load log goes through it
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        params = llama_cpp.llama_model_default_params()
        params.vocab_only = True
        model = llama_cpp.llama_model_load_from_file(str(gguf).encode(), params)
        try:
            yield model or None
        finally:
            if model:
                llama_cpp.llama_model_free(model)
    finally:
        quiet.setLevel(level)


GgufVersion = tuple[int, int, int, int]  # inode, size, mtime and ctime, in ns (gguf_version)


def gguf_version(gguf: Path) -> GgufVersion | None:
    """What tells the GGUF file at a path from another put there later (a new download, a
    symlink moved), None if it is not there: readings of a GGUF are cached per version, and
    a crashed server started again serves the file then at its path. Its ctime too: a file
    written over in place with its size and mtime kept (`cp -p`, `rsync --inplace -t`)
    differs in that alone; a chmod also moves it, costing only a reading again."""
    with contextlib.suppress(OSError):
        info = gguf.stat()
        return info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns
    return None


def check_gguf_loads(worker_id: str, config: LocalServerConfig) -> None:
    """ConfigError for a local worker's GGUF that llama.cpp cannot load (a download cut
    short, an architecture newer than this llama.cpp), with llama.cpp's reason: the server
    started all the same and exited with a bare "Failed to load model from file" in its log
    (and a chat_format chat_template.NAME was said to name a template the GGUF lacks)."""
    gguf = worker_gguf(worker_id, config)
    reason = _load_error(gguf)
    if reason is not None:
        raise ConfigError(
            f"local worker {worker_id!r}: llama.cpp cannot load {gguf}: {reason}; download "
            "it again if the download was cut short, or update llama-cpp-python if its model "
            "is newer than this llama.cpp"
        )


LOAD_ERROR = re.compile(r"error loading model: (.+)")  # llama.cpp's words, in its log
CHAT_TEMPLATE_KEY = "tokenizer.chat_template"  # and tokenizer.chat_template.NAME


@dataclass(frozen=True)
class GgufReading:
    """What fugu-lite reads of a GGUF with llama.cpp, in one vocabulary-only open: why it
    cannot load (None if it can), its vocabulary's size and its chat templates by metadata
    key. Each open costs time and memory, more for a large model: the pool's start opened
    it three times (its load, its vocabulary, its template)."""

    load_error: str | None
    vocab_size: int | None = None
    chat_templates: dict[str, str] = field(default_factory=dict)


def gguf_reading(gguf: Path) -> GgufReading:
    """The GGUF's reading (GgufReading), cached per version of the file at its path."""
    return _gguf_reading(gguf, gguf_version(gguf))


@functools.cache
def _gguf_reading(gguf: Path, version: GgufVersion | None) -> GgufReading:
    import llama_cpp

    with llama_cpp_log_kept() as said, vocab_only_model(gguf) as model:
        if model is not None:
            vocab = llama_cpp.llama_model_get_vocab(model)
            return GgufReading(
                load_error=None,
                vocab_size=int(llama_cpp.llama_vocab_n_tokens(vocab)),
                chat_templates=chat_templates(model),
            )
    reasons = [found.group(1).strip() for found in map(LOAD_ERROR.search, said) if found]
    return GgufReading(load_error=reasons[0] if reasons else "it is not a model it can read")


# llama.cpp has one log callback for the whole process: two GGUFs read at once (two
# workers' servers started again together) swapped each other's, one reading taking the
# other's load error and the other none.
_llama_cpp_log_lock = threading.Lock()


@contextlib.contextmanager
def llama_cpp_log_kept() -> Iterator[list[str]]:
    """The lines llama.cpp logs inside, kept in a list instead of printed; one thread at a
    time, and llama.cpp's log callback is the one it had before on the way out."""
    import llama_cpp

    said: list[str] = []

    @llama_cpp.llama_log_callback
    def keep(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
        said.append(text.decode("utf-8", errors="replace"))

    with _llama_cpp_log_lock:
        previous, previous_data = llama_cpp.llama_log_callback(), ctypes.c_void_p()
        llama_cpp.llama_log_get(ctypes.byref(previous), ctypes.byref(previous_data))
        llama_cpp.llama_log_set(keep, ctypes.c_void_p(0))
        try:
            yield said
        finally:
            llama_cpp.llama_log_set(previous, previous_data)


def chat_templates(model: Any) -> dict[str, str]:
    """A loaded model's chat templates (tokenizer.chat_template and
    tokenizer.chat_template.NAME metadata), by key."""
    import llama_cpp

    templates = {}
    for index in range(llama_cpp.llama_model_meta_count(model)):
        key = _meta_text(llama_cpp.llama_model_meta_key_by_index, model, index)
        if key == CHAT_TEMPLATE_KEY or key.startswith(f"{CHAT_TEMPLATE_KEY}."):
            templates[key] = _meta_text(llama_cpp.llama_model_meta_val_str_by_index, model, index)
    return templates


def _meta_text(read: Any, model: Any, index: int) -> str:
    """One of a model's metadata keys or values, by index, as read by `read` (llama.cpp's
    snprintf-like reader, told its buffer's size)."""
    size = read(model, index, ctypes.create_string_buffer(1), 1)
    buffer = ctypes.create_string_buffer(max(size, 0) + 1)
    read(model, index, buffer, max(size, 0) + 1)
    return buffer.value.decode("utf-8", errors="replace")


def _load_error(gguf: Path) -> str | None:
    """Why llama.cpp cannot load the GGUF (from what it logs while trying), None if it can."""
    return gguf_reading(gguf).load_error


def vocab_size(gguf: Path) -> int | None:
    """How many tokens the GGUF's vocabulary has, None if llama.cpp cannot read it."""
    return gguf_reading(gguf).vocab_size


def chat_template(gguf: Path, name: str = "default") -> str | None:
    """The GGUF's own chat template, which llama.cpp's server renders prompts with when the
    worker sets no chat_format, or chat_format chat_template.default (its
    `tokenizer.chat_template`, else its `tokenizer.chat_template.default`, as the server
    reads them), or another it names (`tokenizer.chat_template.tool_use`, for chat_format
    chat_template.tool_use); None when it has none or llama.cpp cannot read it."""
    templates = gguf_reading(gguf).chat_templates
    if name == "default" and CHAT_TEMPLATE_KEY in templates:
        return templates[CHAT_TEMPLATE_KEY]
    return templates.get(f"{CHAT_TEMPLATE_KEY}.{name}")


def server_command(gguf: Path, model: str, port: int, config: LocalServerConfig) -> list[str]:
    command = [
        sys.executable, "-m", "llama_cpp.server",
        "--model", str(gguf),
        "--model_alias", model,
        "--host", "127.0.0.1",
        "--port", str(port),
        "--n_ctx", str(config.n_ctx),
        "--n_threads", str(config.n_threads),
        "--n_threads_batch", str(config.n_threads),
        # One request at a time per server: a new request must wait, not cut off a stream.
        "--interrupt_requests", "False",
        "--verbose", "False",
    ]  # fmt: skip
    if config.n_batch is not None:
        command += ["--n_batch", str(config.n_batch)]
    if config.chat_format is not None:
        command += ["--chat_format", config.chat_format]
    return command + list(config.extra_args)


def server_environment() -> dict[str, str]:
    """fugu-lite's environment without the variables that llama_cpp.server reads as its
    settings (pydantic-settings reads each one's name in any case; its __main__ also HOST,
    PORT and CONFIG_FILE): a PORT or API_KEY exported for another program moved the server
    off the port fugu-lite polls, or made it refuse fugu-lite's calls (401), and its start
    timed out after startup_timeout_s."""
    from llama_cpp.server.settings import Settings

    read = {name.lower() for name in Settings.model_fields} | {"config_file"}
    return {name: value for name, value in os.environ.items() if name.lower() not in read}


def _die_with_parent(parent_pid: int) -> None:
    """Runs in the child before exec: SIGKILL it when the starting thread's process dies.
    Not SIGTERM: uvicorn's graceful shutdown waits for the answer being generated, which
    no one would read, so the server outlived its parent by as long as that took."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        return
    if os.getppid() != parent_pid:
        os._exit(1)


class LocalServer:
    """One llama.cpp server process serving one local worker."""

    def __init__(self, worker: WorkerConfig) -> None:
        if worker.local is None:
            raise ValueError(f"worker {worker.id!r} is not local")
        self.worker_id = worker.id
        self.model = worker.model
        self.config = worker.local
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path: Path | None = None
        self.command: list[str] = []
        self.stopped = False  # stopped on purpose (not to be restarted)
        self.keep_log = False  # its start failed: the error names the log, for users to read

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    def is_alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def crashed(self) -> bool:
        """The process exited without being stopped (a crash, the OOM killer, kill -9), or
        a start again (pool.restart, which leaves it not stopped) failed before it ran."""
        return not self.stopped and not self.is_alive()

    def launch(self) -> None:
        """Start the process (returns at once; `wait_ready` waits for it to answer)."""
        check_llama_cpp_installed()
        check_n_threads(self.worker_id, self.config)
        check_extra_args(self.worker_id, self.config)
        gguf = worker_gguf(self.worker_id, self.config)
        self.port = free_port()
        self.command = server_command(gguf, self.model, self.port, self.config)
        self.log_path = self._new_log()
        parent = os.getpid()
        try:
            # Appending (O_APPEND): the server writes at the log's end after trim_log cuts it.
            with self.log_path.open("ab") as log:
                self.process = subprocess.Popen(
                    self.command,
                    stdin=subprocess.DEVNULL,
                    env=server_environment(),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # Ctrl-C reaches fugu-lite, which stops it in order
                    preexec_fn=(
                        (lambda: _die_with_parent(parent)) if sys.platform == "linux" else None
                    ),
                )
        except OSError as error:
            self.log_path.unlink(missing_ok=True)
            raise LocalServerError(self._not_started(error)) from error
        _running.add(self)

    def _not_started(self, error: OSError) -> str:
        """Why its process could not be made (no fork: too many processes, too little
        memory): the bare OSError ended collect or serve in a traceback naming no worker."""
        return (
            f"local worker {self.worker_id!r}: cannot start its llama.cpp server "
            f"({self.command[0]} -m llama_cpp.server): {error.strerror or error}; "
            + (
                "the machine is out of processes or memory: stop other programs (or raise "
                "ulimit -u), or use fewer local workers, and run it again"
                if error.errno in (errno.EAGAIN, errno.ENOMEM)
                else f"check that {self.command[0]} runs, and run it again"
            )
        )

    def _new_log(self) -> Path:
        """An empty log file in this user's temp folder; LocalServerError naming the folder
        when it cannot be made (a full disk, a TMPDIR that is not there): the bare OSError
        ended collect with a traceback."""
        try:
            handle, log_name = tempfile.mkstemp(
                prefix=writer_prefix(f"llama-{_safe(self.worker_id)}"),
                suffix=".log",
                dir=user_temp_folder(),
            )
        except OSError as error:
            where = error.filename or tempfile.tempdir or "the system temp folder"
            raise LocalServerError(
                f"local worker {self.worker_id!r}: cannot make its llama.cpp server's log in "
                f"the temp folder ({where}): {error.strerror or error}; free disk space there, "
                "or set TMPDIR to a folder with space that you can write to"
            ) from error
        os.close(handle)
        return Path(log_name)

    async def wait_ready(self) -> None:
        """Poll GET /v1/models until it answers 200; fail clearly if the process dies (the
        log that the error names is then kept: see remove_log)."""
        try:
            await self._poll_until_ready()
        except LocalServerError:
            self.keep_log = True
            raise

    async def _poll_until_ready(self) -> None:
        deadline = self._start_deadline()
        delay = 0.05
        attempts = 1
        async with httpx.AsyncClient(timeout=2.0, trust_env=False) as client:
            while True:
                if not self.is_alive() and self.port_taken() and attempts < PORT_ATTEMPTS:
                    self._launch_on_another_port()
                    attempts += 1
                    deadline = self._start_deadline()
                    continue
                self._fail_if_exited()
                if await self._answers_itself(client):
                    return
                self._fail_if_past(deadline)
                await asyncio.sleep(delay)
                delay = min(delay * 1.5, 0.5)

    def _start_deadline(self) -> float:
        return time.monotonic() + self.config.startup_timeout_s

    def _launch_on_another_port(self) -> None:
        # free_port's port was free when chosen; another process bound it while this server
        # loaded its model.
        logger.warning(
            "local worker %s: port %d was taken before its llama.cpp server "
            "could listen on it; starting it again on another port",
            self.worker_id,
            self.port,
        )
        self.remove_log()
        self.launch()

    def _fail_if_exited(self) -> None:
        if not self.is_alive():
            code = None if self.process is None else self.process.returncode
            tail = self.log_tail()
            hints = killed_hint(code) + segfault_hint(code) + context_hint(tail, self.config.n_ctx)
            raise LocalServerError(
                f"local worker {self.worker_id!r}: the llama.cpp server exited with "
                f"{how_it_ended(code)} while starting{hints}.\n"
                f"command: {' '.join(self.command)}\n"
                f"last lines of its log ({self.log_path}):\n{tail}"
            )

    async def _answers_itself(self, client: httpx.AsyncClient) -> bool:
        """Whether GET /v1/models answers 200 from this server's own process: another
        process that took the port (another fugu-lite's server of the same model, say)
        answers too, while this one is loading its model."""
        with contextlib.suppress(httpx.HTTPError):
            response = await client.get(f"{self.base_url}/models")
            return response.status_code == 200 and self.listens()
        return False

    def _fail_if_past(self, deadline: float) -> None:
        if time.monotonic() > deadline:
            raise LocalServerError(
                f"local worker {self.worker_id!r}: the llama.cpp server did not answer "
                f"on {self.base_url} within {exact_number(self.config.startup_timeout_s)} s; raise "
                f"local.startup_timeout_s if the machine is busy.\nlast lines of its "
                f"log ({self.log_path}):\n{self.log_tail()}"
            )

    def listens(self) -> bool:
        """Whether this server's own process listens on its port (True when the system
        does not let us see its sockets: its answer is then all there is to go by)."""
        if self.process is None:
            return False
        try:
            connections = psutil.Process(self.process.pid).net_connections(kind="tcp")
        except psutil.AccessDenied:
            return True
        except psutil.Error:  # it exited
            return False
        return any(
            c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == self.port
            for c in connections
        )

    def port_taken(self) -> bool:
        """Whether the log says the server could not listen: its port was in use."""
        return PORT_TAKEN in self.log_tail().lower()

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        if self.log_path is None or not self.log_path.exists():
            return "(no log)"
        with self.log_path.open("rb") as log:
            log.seek(max(0, log.seek(0, os.SEEK_END) - LOG_KEPT_BYTES))
            text = log.read().decode("utf-8", errors="replace")
        return "\n".join(text.splitlines()[-lines:]) or "(empty log)"

    def trim_log(self) -> None:
        """Cut the log back to its last LOG_KEPT_BYTES (what log_tail reads) once it is
        over LOG_MAX_BYTES: a long serve's grew without limit, a line for each call (more
        with --verbose True)."""
        if self.log_path is None:
            return
        with contextlib.suppress(FileNotFoundError):
            if self.log_path.stat().st_size <= LOG_MAX_BYTES:
                return
            with self.log_path.open("r+b") as log:
                log.seek(-LOG_KEPT_BYTES, os.SEEK_END)
                tail = log.read()
                tail = tail[tail.find(b"\n") + 1 :]  # from the first whole line
                log.seek(0)
                log.write(tail)
                log.truncate()

    def terminate(self) -> None:
        """Send SIGTERM, without waiting (stop waits)."""
        if self.process is not None and self.process.poll() is None:
            _signal_group(self.process, signal.SIGTERM)

    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """Terminate, wait up to grace_s, then kill. Safe to call twice."""
        self.stopped = True
        process = self.process
        if process is not None and process.poll() is None:
            self.terminate()
            try:
                process.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                _signal_group(process, signal.SIGKILL)
                _wait_killed(process, KILL_WAIT_S)
        _running.discard(self)
        if not self.keep_log:
            self.remove_log()

    def kill(self) -> None:
        """Stop at once (SIGKILL), dropping whatever the server is doing: SIGTERM lets
        uvicorn finish the answer being generated first."""
        self.stopped = True
        process = self.process
        if process is not None and process.poll() is None:
            _signal_group(process, signal.SIGKILL)
            _wait_killed(process, KILL_WAIT_S)
        _running.discard(self)
        if not self.keep_log:
            self.remove_log()

    def remove_log(self) -> None:
        """Delete the log, also one kept after a failed start (a log kept when the process
        exits is removed by the next server start, see atomic_files.user_temp_folder)."""
        if self.log_path is not None:
            self.log_path.unlink(missing_ok=True)


async def start_local_servers(workers: list[WorkerConfig]) -> dict[str, LocalServer]:
    """Start one server per local worker, all at once; on any failure stop them all."""
    servers = {worker.id: LocalServer(worker) for worker in workers if worker.is_local}
    try:
        for server in servers.values():
            server.launch()
        await asyncio.gather(*(server.wait_ready() for server in servers.values()))
    except BaseException:
        stop_after_failure(servers.values())
        raise
    return servers


def stop_local_servers(servers: Iterable[LocalServer]) -> None:
    """Stop every server, then raise LocalServerError naming each one that could not be
    stopped: the first that failed left the others running."""
    servers = list(servers)
    for server in servers:  # all at once: they share one grace, not one each in turn
        server.terminate()
    deadline = time.monotonic() + STOP_GRACE_S
    failures: list[str] = []
    for server in servers:
        try:
            server.stop(grace_s=max(0.0, deadline - time.monotonic()))
        except Exception as error:
            failures.append(f"local worker {server.worker_id!r} (pid {server.pid}): {error}")
    if failures:
        raise LocalServerError("could not stop the llama.cpp server of " + "; of ".join(failures))


def stop_after_failure(servers: Iterable[LocalServer]) -> None:
    """stop_local_servers on the way out of a failure, which stays the error raised, or at
    exit: a server that could not be stopped is logged (its error took the failure's place,
    and what to fix was lost; at exit it was a traceback)."""
    try:
        stop_local_servers(servers)
    except LocalServerError as error:
        logger.error("%s", error)


def how_it_ended(code: int | None) -> str:
    """A server's exit code, or the signal that killed it by name (-9 read as a code)."""
    if code is None or code >= 0:
        return f"code {code}"
    try:
        return f"signal {signal.Signals(-code).name}"
    except ValueError:
        return f"signal {-code}"


def killed_hint(code: int | None) -> str:
    """Why a server may have been SIGKILLed, '' for any other end. The server never
    SIGKILLs itself and fugu-lite's own stop is no crash: most often it is the kernel's
    out-of-memory killer, which says so only in the system log (dmesg)."""
    if code != -signal.SIGKILL:
        return ""
    return (
        " (most often by the out-of-memory killer: if the model is too big for the machine's "
        "free memory, use a smaller GGUF or quantisation, or a smaller local.n_ctx)"
    )


CONTEXT_FAILED = "failed to create llama_context"  # llama-cpp-python's words, in the log


def context_hint(log_tail: str, n_ctx: int) -> str:
    """What to do when llama.cpp could not make the model's context, '' for any other end:
    its server's log (not verbose) ends in a bare 'Failed to create llama_context', most
    often for a KV cache of local.n_ctx tokens too big for the machine's memory."""
    if CONTEXT_FAILED not in log_tail.lower():
        return ""
    return (
        f" (llama.cpp could not make the model's context: most often its cache for local.n_ctx "
        f"{n_ctx} tokens does not fit in the machine's free memory; lower local.n_ctx)"
    )


def segfault_hint(code: int | None) -> str:
    """What to do about a segfault of a llama.cpp built with its AMX kernels, '' for any
    other end: they crash on the first answer on some Intel Xeons (ggml-org/llama.cpp#20824),
    and the server's log shows only uvicorn's lines."""
    if code != -signal.SIGSEGV or not llama_cpp_has_amx():
        return ""
    return (
        " (this llama-cpp-python was built with llama.cpp's AMX kernels, which crash on some "
        "Intel Xeons: build it without them, as `make install` does: "
        f"CFLAGS='{NO_AMX_FLAGS}' CXXFLAGS='{NO_AMX_FLAGS}' .venv/bin/pip install "
        "--force-reinstall --no-cache-dir --no-deps 'llama-cpp-python[server]')"
    )


@functools.cache
def llama_cpp_has_amx() -> bool:
    """Whether the installed llama.cpp was built with its AMX kernels, which it runs where
    the CPU has AMX; False where llama_cpp cannot be loaded."""
    try:
        import llama_cpp
    except (ImportError, OSError):
        return False
    info = llama_cpp.llama_print_system_info().decode("utf-8", errors="replace")
    return "AMX_INT8 = 1" in info


def _wait_killed(process: subprocess.Popen[bytes], wait_s: float) -> None:
    """Wait for a SIGKILLed process to end; LocalServerError if it outlives wait_s."""
    try:
        process.wait(timeout=wait_s)
    except subprocess.TimeoutExpired:
        raise LocalServerError(
            f"it was still running {exact_number(wait_s)} s after SIGKILL (stuck in the "
            f"kernel, as reading from a hung disk); see it with `ps -o stat,cmd -p "
            f"{process.pid}`, and end it with `kill -9 {process.pid}` if it is still there"
        ) from None


def _signal_group(process: subprocess.Popen[bytes], signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signum)
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(signum)


def _safe(text: str) -> str:
    return "".join(char if char.isalnum() or char in "-_." else "_" for char in text)


@atexit.register
def _stop_leftovers() -> None:
    """Last resort, e.g. after sys.exit inside a callback: never leave a server behind."""
    stop_after_failure(list(_running))
