"""The pool's local workers on real llama.cpp servers (the shipped GGUF): they answer, and
their processes and logs never outlive fugu-lite (integration)."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import http.server
import importlib.util
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml
from cli_support import ctrl_c_at_its_default, flat, invoke
from conftest import finished_pid, set_time_back, writer_temporary

from fugu_lite.collect.errors import CollectError
from fugu_lite.config_errors import ConfigError
from fugu_lite.task_families import generate_tasks
from fugu_lite.tasks import write_tasks
from fugu_lite.workers import llama_cpp_requests, local_server
from fugu_lite.workers import pool as pool_module
from fugu_lite.workers.api_keys import PoolStartError
from fugu_lite.workers.config import (
    LocalServerConfig,
    PoolConfig,
    WorkerConfig,
    embedded_pool_config,
    resolve_gguf,
)
from fugu_lite.workers.local_server import LocalServer, LocalServerError, free_port
from fugu_lite.workers.pool import WorkerPool
from fugu_lite.workers.preflight import preflight
from fugu_lite.workers.results import CallResult


def two_local_workers() -> PoolConfig:
    """The embedded pool's direct and creative workers, whose system prompts are of different
    lengths (the direct and step-by-step ones are both 45 tokens with the question)."""
    config = embedded_pool_config()
    workers = [
        w.model_copy(update={"params": {**w.params, "max_tokens": 8}}) for w in config.workers
    ]
    return PoolConfig(workers=[workers[0], workers[2]])


def alive(pids: list[int]) -> list[int]:
    running = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                running.append(pid)
        except psutil.NoSuchProcess:
            pass
    return running


def stand_in_servers(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[str]:
    """Servers launched from here on are stand-in processes that sleep and never listen,
    their logs in tmp_path; returns their command."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    silent = [sys.executable, "-c", "import time; time.sleep(30)"]
    monkeypatch.setattr(local_server, "server_command", lambda *args: silent)
    return silent


@contextlib.contextmanager
def leaving_no_process_running() -> Iterator[None]:
    """Checks that every process the block started (a server it failed on, or the ones it
    started before) is stopped when the block ends."""
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    yield
    after = {p.pid for p in psutil.Process().children(recursive=True)}
    assert alive(list(after - before)) == []


async def answer(config: PoolConfig) -> CallResult:
    async with WorkerPool(config) as pool:
        return await pool.chat(config.worker_ids[0], [{"role": "user", "content": "hi"}])


def crash(pool: WorkerPool, worker_id: str) -> None:
    """Kill a local worker's server as a crash would, and wait for it to be gone."""
    process = pool.servers[worker_id].process
    assert process is not None
    process.kill()
    process.wait()


def stand_in_servers_taken_as_ready(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Launched servers are stand-in processes (stand_in_servers), ready as soon as launched."""
    stand_in_servers(monkeypatch, tmp_path)

    async def ready(self: LocalServer) -> None:
        return None

    monkeypatch.setattr(LocalServer, "wait_ready", ready)


def run_in_pool(config: PoolConfig, check: Callable[[WorkerPool], Awaitable[None]]) -> None:
    """Run `check` on a started pool of `config`, leaving no process running."""

    async def run() -> None:
        async with WorkerPool(config) as pool:
            await check(pool)

    with leaving_no_process_running():
        asyncio.run(run())


@pytest.mark.integration
def test_local_llama_cpp_workers_answer_and_are_stopped() -> None:
    config = two_local_workers()

    async def run() -> tuple[list[CallResult], list[int], list[dict]]:
        async with WorkerPool(config) as pool:
            pids = [server.pid for server in pool.servers.values()]
            assert len(set(pids)) == 2 and all(pool.is_alive(w) for w in pool.worker_ids)
            results = await asyncio.gather(
                *(pool.chat(w, [{"role": "user", "content": "What is 2 + 3?"}])
                  for w in pool.worker_ids)
            )  # fmt: skip
            chunks = [
                chunk
                async for chunk in pool.stream_chat(
                    pool.worker_ids[0], [{"role": "user", "content": "Say hi."}]
                )
            ]
            return results, pids, chunks

    results, pids, chunks = asyncio.run(run())
    for result, worker in zip(results, config.workers, strict=True):
        assert result.ok, result.error
        assert result.output and result.usage and 0 < result.usage.completion_tokens <= 8
        expected = (
            result.usage.prompt_tokens * worker.input_price_per_mtok
            + result.usage.completion_tokens * worker.output_price_per_mtok
        ) / 1e6
        assert result.cost == pytest.approx(expected)
    # The variants' system prompts reach the model. (Their answers' first 8 tokens, asserted
    # to differ before, are the same with some builds of llama.cpp.)
    prompt_tokens = [result.usage.prompt_tokens for result in results if result.usage]
    assert len(set(prompt_tokens)) == 2, prompt_tokens
    assert any(choice["delta"].get("content") for c in chunks for choice in c["choices"])
    deadline = time.monotonic() + 10
    while alive(pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert alive(pids) == []


@pytest.mark.integration
def test_servers_stop_when_the_body_raises() -> None:
    config = two_local_workers()
    pids: list[int] = []

    async def run() -> None:
        async with WorkerPool(config) as pool:
            pids.extend(server.pid for server in pool.servers.values())
            raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        asyncio.run(run())
    assert len(pids) == 2 and alive(pids) == []


@pytest.mark.integration
def test_servers_stop_when_the_pool_start_is_cancelled_after_they_came_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ctrl-C (the start cancelled) once the llama.cpp servers answered, while the pool read
    their models' vocabularies, left them running: `async with` calls no __aexit__ for a
    start that failed, and only the end of the process stopped them. The vocabulary read is
    held until the start is cancelled (polling for the servers raced a quick read: CI saw the
    start end first under load)."""
    reading, cancelled = threading.Event(), threading.Event()
    real_vocab_size = pool_module.vocab_size

    def held_vocab_size(gguf: Path) -> int | None:
        reading.set()
        cancelled.wait(timeout=30)
        return real_vocab_size(gguf)

    monkeypatch.setattr(pool_module, "vocab_size", held_vocab_size)
    config = PoolConfig(workers=two_local_workers().workers[:1])
    pool = WorkerPool(config)
    pids: list[int] = []

    async def run() -> None:
        start = asyncio.create_task(pool.__aenter__())
        while not reading.is_set() and not start.done():
            await asyncio.sleep(0.01)
        assert reading.is_set(), f"the start ended before the vocabulary read: {start}"
        pids.extend(server.pid for server in pool.servers.values() if server.pid is not None)
        assert start.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await start
        cancelled.set()

    try:
        asyncio.run(run())
    finally:
        cancelled.set()
    assert len(pids) == 1
    deadline = time.monotonic() + 10
    while alive(pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert alive(pids) == []


@pytest.mark.integration
def test_a_server_that_cannot_load_its_model_fails_with_its_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The log the error names is there to read (it was deleted as the error was raised),
    until the next server start after this run. (The pool's start refuses such a file
    before any server starts: see test_a_gguf_llama_cpp_cannot_load_is_refused_before_it_starts.)"""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"but not a model" * 100)  # llama.cpp cannot load it
    config = PoolConfig.model_validate(
        {"workers": [{"id": "broken", "model": "m", "local": {"gguf": str(bad)}}]}
    )
    with (
        leaving_no_process_running(),
        pytest.raises(LocalServerError, match="exited with code") as caught,
    ):
        asyncio.run(local_server.start_local_servers(config.workers))
    assert "broken" in str(caught.value) and "last lines of its log" in str(caught.value)
    named = re.search(r"last lines of its log \((.+)\):\n", str(caught.value))
    assert named is not None
    log = Path(named[1])
    assert log.parent == tmp_path / f"fugu-lite-{os.getuid()}"
    assert log.read_text(encoding="utf-8").strip().splitlines()[-1] in str(caught.value)


@pytest.mark.integration
def test_servers_die_with_a_killed_parent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """kill -9 of the process that started the servers leaves no orphan behind, and the next
    server start removes the log it left in the system temp folder (it stayed in /tmp)."""
    script = tmp_path / "parent.py"
    script.write_text(
        textwrap.dedent(
            """
            import asyncio, sys
            from fugu_lite.workers.config import PoolConfig, embedded_pool_config
            from fugu_lite.workers.pool import WorkerPool

            async def main():
                config = PoolConfig(workers=embedded_pool_config().workers[:1])
                async with WorkerPool(config) as pool:
                    print(*(s.pid for s in pool.servers.values()), flush=True)
                    await asyncio.sleep(600)

            asyncio.run(main())
            """
        )
    )
    parent = subprocess.Popen(
        [sys.executable, str(script)],
        stdout=subprocess.PIPE,
        text=True,
        env=os.environ | {"TMPDIR": str(tmp_path)},
    )
    try:
        line = parent.stdout.readline() if parent.stdout else ""
        pids = [int(pid) for pid in line.split()]
        assert pids and alive(pids) == pids
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(timeout=10)
        deadline = time.monotonic() + 15
        while alive(pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert alive(pids) == []
    finally:
        if parent.poll() is None:
            parent.kill()
        if parent.stdout:
            parent.stdout.close()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    server = launched(embedded_pool_config().workers[0])
    server.stop()
    folder = tmp_path / f"fugu-lite-{os.getuid()}"
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted([folder.name, script.name])
    assert list(folder.iterdir()) == []


BUSY_PARENT = """
import sys, time
from fugu_lite.workers import local_server
from fugu_lite.workers.config import WorkerConfig
# a stand-in llama.cpp server generating an answer: SIGTERM (uvicorn's graceful shutdown)
# would wait for it to end
busy = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(1, flush=True)"
busy += "; time.sleep(60)"
local_server.server_command = lambda *a: [sys.executable, "-c", busy]
worker = {"id": "w", "model": "m", "local": {"gguf": "embedded:smollm2"}}
server = local_server.LocalServer(WorkerConfig.model_validate(worker))
server.launch()
while not server.log_tail().strip().isdigit():  # its SIGTERM is ignored from here on
    time.sleep(0.02)
print(server.pid, flush=True)
time.sleep(60)
"""


def test_a_server_generating_an_answer_dies_with_a_killed_parent(tmp_path: Path) -> None:
    """kill -9 of fugu-lite left a server generating an answer running: PDEATHSIG sent it
    SIGTERM, and uvicorn's graceful shutdown waited for the answer no one would read (a
    real server outlived its parent by more than 40 s, holding its memory and cores). It
    gets SIGKILL now. The server is a stand-in that ignores SIGTERM, as uvicorn does then."""
    script = tmp_path / "busy.py"
    script.write_text(BUSY_PARENT, encoding="utf-8")
    parent = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
        env=os.environ | {"TMPDIR": str(tmp_path)},
    )  # fmt: skip
    pid = None
    try:
        line = parent.stdout.readline() if parent.stdout else ""
        pid = int(line)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(timeout=10)
        deadline = time.monotonic() + 10
        while alive([pid]) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert alive([pid]) == []
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        if parent.stdout:
            parent.stdout.close()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


LEFT_RUNNING = """
import sys
from fugu_lite.workers import local_server
from fugu_lite.workers.config import WorkerConfig
# a stand-in llama.cpp server that ignores SIGTERM: only a stop's SIGKILL ends it
stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
local_server.server_command = lambda *a: [sys.executable, "-c", stubborn]
worker = {"id": "w", "model": "m", "local": {"gguf": "embedded:smollm2"}}
server = local_server.LocalServer(WorkerConfig.model_validate(worker))
server.launch()
print(server.pid, server.log_path, flush=True)
sys.exit(0)  # no stop: a sys.exit inside a callback, say
"""


def run_exiting_script(text: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Run `text` as a Python script that exits with a server still running, its temp
    folder in tmp_path."""
    script = tmp_path / "leave.py"
    script.write_text(text, encoding="utf-8")
    return subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60,
        env=os.environ | {"TMPDIR": str(tmp_path)},
    )  # fmt: skip


def test_a_server_left_running_at_exit_is_stopped_and_its_log_removed(tmp_path: Path) -> None:
    """The last-resort stop at exit (atexit) was tested nowhere: without it a server left
    running when fugu-lite exited outlived it (when PDEATHSIG's signal was SIGTERM, which
    it may ignore) and its log stayed in the temp folder. The server is a stand-in."""
    done = run_exiting_script(LEFT_RUNNING, tmp_path)
    assert done.returncode == 0, done.stderr
    pid, log = done.stdout.split()
    deadline = time.monotonic() + 10
    while alive([int(pid)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    try:
        assert alive([int(pid)]) == []
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGKILL)
    assert Path(log).parent.parent == tmp_path and not Path(log).exists()


def launched(worker: WorkerConfig) -> LocalServer:
    """A local server started (not waited for: its log is made at the start)."""
    server = LocalServer(worker)
    try:
        server.launch()
    except BaseException:
        server.stop()
        raise
    return server


@pytest.mark.integration
def test_a_server_start_removes_killed_runs_logs_not_live_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    folder = tmp_path / f"fugu-lite-{os.getuid()}"
    folder.mkdir(mode=0o700)
    live_writer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    dead = folder / f"{writer_temporary('llama-w', finished_pid())}.log"
    live = folder / f"{writer_temporary('llama-w', live_writer.pid)}.log"
    try:
        for log in (dead, live):
            log.write_text("INFO: started\n")
        two_days_ago = time.time() - 2 * 24 * 3600
        os.utime(live, (two_days_ago, two_days_ago))  # a `serve` running for days: quiet log
        server = launched(embedded_pool_config().workers[0])
        log_path = server.log_path
        assert log_path is not None and log_path.parent == folder and log_path.exists()
        server.stop()
    finally:
        live_writer.kill()
        live_writer.wait()
    assert not dead.exists() and not log_path.exists()
    assert list(folder.iterdir()) == [live]


@pytest.mark.integration
def test_a_restarted_workers_old_log_is_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    config = PoolConfig(workers=embedded_pool_config().workers[:1])
    worker_id = config.workers[0].id

    async def crash_and_restart() -> tuple[Path | None, Path | None]:
        async with WorkerPool(config) as pool:
            old = pool.servers[worker_id]
            assert old.process is not None
            os.kill(old.process.pid, signal.SIGKILL)  # the OOM killer
            old.process.wait(timeout=10)
            assert pool.crashed_servers() == [worker_id]
            await pool.restart(worker_id)
            new = pool.servers[worker_id]
            assert new.log_path is not None and new.log_path.exists()
            return old.log_path, new.log_path

    old_log, new_log = asyncio.run(crash_and_restart())
    assert old_log is not None and new_log is not None and old_log != new_log
    assert list((tmp_path / f"fugu-lite-{os.getuid()}").iterdir()) == []


@pytest.mark.integration
def test_a_failed_restarts_log_is_kept_until_the_worker_starts_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gguf = tmp_path / "model.gguf"
    gguf.symlink_to(resolve_gguf("embedded:smollm2"))
    worker = embedded_pool_config().workers[0]
    local = worker.local.model_copy(update={"gguf": str(gguf)}) if worker.local else None
    config = PoolConfig(workers=[worker.model_copy(update={"local": local})])

    async def fail_then_restart() -> Path:
        async with WorkerPool(config) as pool:
            server = pool.servers[worker.id]
            assert server.process is not None
            server.process.kill()
            server.process.wait(timeout=10)
            gguf.unlink()
            gguf.write_bytes(b"GGUF" + b"corrupted" * 100)  # the disk file got corrupted, say
            # ... after the restart's check that llama.cpp loads it, which would refuse it
            monkeypatch.setattr(local_server, "_load_error", lambda gguf: None)
            with pytest.raises(LocalServerError, match="exited with code") as caught:
                await pool.restart(worker.id)
            named = re.search(r"last lines of its log \((.+)\):\n", str(caught.value))
            assert named is not None and Path(named[1]).exists()  # there to read
            gguf.unlink()
            gguf.symlink_to(resolve_gguf("embedded:smollm2"))
            monkeypatch.undo()
            await pool.restart(worker.id)
            assert not Path(named[1]).exists()
            return Path(named[1])

    failed_log = asyncio.run(fail_then_restart())
    assert list(failed_log.parent.iterdir()) == []


@pytest.mark.integration
def test_a_port_taken_while_the_server_starts_is_given_up_for_another(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """free_port's port can be bound by another process (another fugu-lite starting its
    servers, say) before llama.cpp's server listens on it: the start failed with
    'address already in use'."""
    config = PoolConfig(workers=two_local_workers().workers[:1])
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        ports = iter([int(taken.getsockname()[1])])
        monkeypatch.setattr(local_server, "free_port", lambda: next(ports, free_port()))

        async def run() -> tuple[int, CallResult]:
            async with WorkerPool(config) as pool:
                port = pool.servers[config.worker_ids[0]].port
                return port, await pool.chat(
                    config.worker_ids[0], [{"role": "user", "content": "hi"}]
                )

        port, result = asyncio.run(run())
        assert port != taken.getsockname()[1]
    assert result.ok, result.error


def test_llama_cpp_without_its_server_packages_says_to_install_the_server_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`pip install llama-cpp-python` (no `[server]`) started a server that exited at once,
    its log ending in a bare ModuleNotFoundError."""
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *args: None if name == "sse_starlette" else find_spec(name, *args),
    )
    server = LocalServer(two_local_workers().workers[0])
    with pytest.raises(LocalServerError, match=r"missing: sse_starlette\)") as caught:
        server.launch()
    assert "pip install 'llama-cpp-python[server]'" in str(caught.value)
    assert server.process is None


def test_a_local_worker_without_llama_cpp_says_to_install_it_or_use_a_remote_worker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """llama-cpp-python not installed at all was tested nowhere: without the check, `serve`
    listened and the server exited at once with a bare 'No module named llama_cpp'."""
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *args: None if name == "llama_cpp" else find_spec(name, *args),
    )
    config = PoolConfig(workers=two_local_workers().workers[:1])
    install = r"install it with `\.venv/bin/pip install 'llama-cpp-python\[server\]'`"
    with pytest.raises(LocalServerError, match=install):
        preflight(config)
    server = LocalServer(config.workers[0])
    with pytest.raises(LocalServerError, match="or give the worker a remote base_url"):
        server.launch()
    assert server.process is None
    # a pool of remote workers needs no llama.cpp (checking it for every worker passed)
    remote = {"id": "r", "model": "m", "base_url": "http://127.0.0.1:9/v1"}
    preflight(PoolConfig.model_validate({"workers": [remote]}))


class AnswersEverything(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b'{"object": "list", "data": []}')

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.integration
def test_a_server_is_ready_only_when_it_listens_itself_not_when_its_port_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Another process's server on the chosen port answered /v1/models while this one
    loaded its model: the worker was taken for ready, its calls went to the other server
    and its own process exited with 'address already in use'."""
    config = PoolConfig(workers=two_local_workers().workers[:1])
    other = http.server.ThreadingHTTPServer(("127.0.0.1", 0), AnswersEverything)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    try:
        ports = iter([other.server_address[1]])
        monkeypatch.setattr(local_server, "free_port", lambda: next(ports, free_port()))

        async def run() -> tuple[int, CallResult]:
            async with WorkerPool(config) as pool:
                server = pool.servers[config.worker_ids[0]]
                assert server.is_alive()
                chat = pool.chat(config.worker_ids[0], [{"role": "user", "content": "hi"}])
                return server.port, await chat

        port, result = asyncio.run(run())
    finally:
        other.shutdown()
        other.server_close()
    assert port != other.server_address[1]
    assert result.ok and result.output, result.error


def test_a_server_whose_sockets_the_system_hides_is_taken_at_its_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where psutil may not read a process's sockets (AccessDenied: simulated here, as on
    locked-down systems), `listens` said no, and a server that answered never became ready
    (a start timeout). A process not listening on the port is told apart."""
    server = LocalServer(two_local_workers().workers[0])
    script = "import socket, time; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); "
    script += "print(s.getsockname()[1], flush=True); time.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        server.process = child  # type: ignore[assignment]  # a text-mode pipe, unused here
        assert child.stdout is not None
        server.port = int(child.stdout.readline())
        assert server.listens()
        server.port = free_port()
        assert not server.listens()

        def denied(*args: object, **kwargs: object) -> list:
            raise psutil.AccessDenied(child.pid)

        monkeypatch.setattr(psutil.Process, "net_connections", denied)
        assert server.listens()
    finally:
        child.kill()
        child.communicate()  # waits, and closes the pipe


def test_a_start_timeout_under_a_second_is_named_as_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """startup_timeout_s: 0.4 timed out saying 'did not answer ... within 0 s' (:.0f), a
    timeout no one set; the error names it as given, and the slow server is stopped. The
    server here is a stand-in process that never listens."""
    stand_in_servers(monkeypatch, tmp_path)
    worker = WorkerConfig.model_validate(
        {"id": "w", "model": "m", "local": {"gguf": "embedded:smollm2", "startup_timeout_s": 0.4}}
    )
    within = r"within 0\.4 s; raise local\.startup_timeout_s"
    with leaving_no_process_running(), pytest.raises(LocalServerError, match=within):
        asyncio.run(local_server.start_local_servers([worker]))


def test_the_server_command_carries_each_local_setting() -> None:
    """A flag left out of llama.cpp's server command passed every test (the shipped pool
    sets neither n_batch nor chat_format nor extra_args, and a default n_threads): the
    server then ran with its own default without a word."""
    config = LocalServerConfig.model_validate(
        {"gguf": "embedded:smollm2", "n_ctx": 512, "n_threads": 3, "n_batch": 64,
         "chat_format": "chatml", "extra_args": ["--seed", "7"]}
    )  # fmt: skip
    command = local_server.server_command(Path("/m.gguf"), "alias", 4321, config)
    assert command[:3] == [sys.executable, "-m", "llama_cpp.server"]
    flags = dict(zip(command[3::2], command[4::2], strict=True))
    assert flags == {
        "--model": "/m.gguf", "--model_alias": "alias", "--host": "127.0.0.1",
        "--port": "4321", "--n_ctx": "512", "--n_threads": "3", "--n_threads_batch": "3",
        "--n_batch": "64", "--chat_format": "chatml", "--interrupt_requests": "False",
        "--verbose": "False", "--seed": "7",
    }  # fmt: skip
    unset = LocalServerConfig.model_validate({"gguf": "embedded:smollm2"})
    command = local_server.server_command(Path("/m.gguf"), "alias", 4321, unset)
    assert "--n_batch" not in command and "--chat_format" not in command


def test_a_gguf_template_named_as_chat_format_is_read_for_its_tool_calls(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """chat_format chat_template.tool_use (a GGUF's template for tool use, which renders an
    assistant's tool_calls) was taken for a format that renders none: each assistant turn's
    calls were also written into its text, so its prompt showed them twice."""
    templates = {"default": "{{ messages }}", "tool_use": "{{ messages[0].tool_calls }}"}
    monkeypatch.setattr(
        llama_cpp_requests, "chat_template", lambda gguf, name="default": templates.get(name)
    )

    def renders(chat_format: str | None) -> bool:
        local = LocalServerConfig(gguf="embedded:smollm2", chat_format=chat_format)
        return llama_cpp_requests.renders_tool_calls(local)

    assert renders("chat_template.tool_use") and renders("chatml-function-calling")
    assert not renders("chat_template.default") and not renders(None) and not renders("chatml")
    monkeypatch.undo()
    gguf = resolve_gguf("embedded:smollm2")  # its own template, and none of another name
    assert "im_start" in (local_server.chat_template(gguf, "default") or "")
    assert local_server.chat_template(gguf, "tool_use") is None


STUBBORN_SERVER = """
import signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a server stuck in a long answer, say
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
print(child.pid, flush=True)
time.sleep(60)
"""


def test_stopping_a_server_that_ignores_sigterm_kills_it_and_its_children(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """stop's SIGKILL after its grace, and the signals to the server's whole process group,
    were tested nowhere: without them a server that does not end on SIGTERM made stop
    raise TimeoutExpired, and a process the server started outlived it. The server is a
    stand-in process that ignores SIGTERM, with a child of its own."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    stubborn = [sys.executable, "-c", STUBBORN_SERVER]
    monkeypatch.setattr(local_server, "server_command", lambda *args: stubborn)
    for end in ("stop", "kill"):
        server = launched(WorkerConfig.model_validate(
            {"id": "w", "model": "m", "local": {"gguf": "embedded:smollm2"}}
        ))  # fmt: skip
        assert server.log_path is not None and server.process is not None
        deadline = time.monotonic() + 30
        while not server.log_path.read_text(encoding="utf-8").strip():
            assert time.monotonic() < deadline, "the stand-in server did not start its child"
            time.sleep(0.05)
        child = int(server.log_path.read_text(encoding="utf-8"))
        started = time.monotonic()
        server.stop(grace_s=0.5) if end == "stop" else server.kill()
        assert time.monotonic() - started < 5, end
        assert server.process.returncode == -signal.SIGKILL, end
        deadline = time.monotonic() + 5
        while alive([child]) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert alive([child]) == [], end


# What serve's check and the pool's start say of with_a_mistyped_gguf's pool.
MISTYPED_GGUF = r"^local worker 'typo': GGUF file .*modle\.gguf not found"


def with_a_mistyped_gguf(first: str, tmp_path: Path) -> PoolConfig:
    """A pool of two local workers: `first` on the embedded GGUF, then 'typo', whose GGUF
    path (in tmp_path) is mistyped."""
    return PoolConfig.model_validate(
        {"workers": [
            {"id": first, "model": "m", "local": {"gguf": "embedded:smollm2"}},
            {"id": "typo", "model": "m", "local": {"gguf": str(tmp_path / "modle.gguf")}},
        ]}
    )  # fmt: skip


def test_a_local_workers_missing_gguf_is_named_with_its_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pool of several local workers with one GGUF path wrong failed with 'GGUF file ...
    not found; check the worker's local.gguf path', naming no worker, in `serve`'s check and
    the pool's start alike; the servers started before it are stopped. Servers here are
    stand-in processes that never answer."""
    stand_in_servers(monkeypatch, tmp_path)
    config = with_a_mistyped_gguf("fine", tmp_path)
    with pytest.raises(ConfigError, match=MISTYPED_GGUF):
        preflight(config)
    with leaving_no_process_running(), pytest.raises(ConfigError, match=MISTYPED_GGUF):
        asyncio.run(local_server.start_local_servers(config.workers))


def test_a_local_workers_unreadable_gguf_is_named_with_its_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A GGUF the user may not read (another user's file) ended serve's check and the
    pool's start with a bare PermissionError traceback. Reading it is refused here as it is
    for a user without the right (root may read any file)."""
    gguf = tmp_path / "theirs.gguf"
    gguf.write_bytes(b"GGUF" + bytes(60))
    opened = Path.open

    def refused(path: Path, *args: Any, **kwargs: Any) -> Any:
        if path == gguf:
            raise PermissionError(13, "Permission denied", str(path))
        return opened(path, *args, **kwargs)

    monkeypatch.setattr(Path, "open", refused)
    config = PoolConfig.model_validate(
        {"workers": [{"id": "w", "model": "m", "local": {"gguf": str(gguf)}}]}
    )
    said = (
        f"^local worker 'w': cannot read GGUF file {re.escape(str(gguf))}: Permission denied; "
        r"make it readable by the user running fugu-lite \(chmod a\+r\)"
    )
    with pytest.raises(ConfigError, match=said):
        preflight(config)


def test_a_local_workers_gguf_given_as_its_folder_is_named_a_folder(tmp_path: Path) -> None:
    """local.gguf naming the model's folder (a download's, holding the .gguf) failed with
    'GGUF file ... not found', a file that is there; the error says it is a folder and
    names the GGUF files in it."""
    folder = tmp_path / "SmolLM2-GGUF"
    folder.mkdir()
    worker = {"id": "w", "model": "m", "local": {"gguf": str(folder)}}
    config = PoolConfig.model_validate({"workers": [worker]})
    with pytest.raises(ConfigError, match=r"is a folder, not a GGUF file; give the path of the "):
        preflight(config)
    (folder / "model.Q4_K_M.gguf").write_bytes(b"GGUF")
    with pytest.raises(ConfigError, match=r"the \.gguf file in it \(model\.Q4_K_M\.gguf\) as"):
        preflight(config)


def test_a_restart_that_failed_before_its_server_ran_is_tried_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crashed local server's restart that failed before its process ran (its GGUF being
    replaced, a fork out of memory after the OOM killer, a full temp folder) left the
    worker out of crashed_servers for good: serve's supervisor never tried it again, and
    the worker stayed down until fugu-lite was restarted. The server is a stand-in process
    that exits at once."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gguf = tmp_path / "model.gguf"
    gguf.symlink_to(resolve_gguf("embedded:smollm2"))
    exits = [sys.executable, "-c", "raise SystemExit(1)"]
    monkeypatch.setattr(local_server, "server_command", lambda *args: exits)
    config = PoolConfig.model_validate(
        {"workers": [{"id": "w", "model": "m", "local": {"gguf": str(gguf)}}]}
    )
    pool = WorkerPool(config)
    pool.servers = {"w": launched(config.workers[0])}
    assert pool.servers["w"].process is not None
    pool.servers["w"].process.wait(timeout=30)
    assert pool.crashed_servers() == ["w"]
    gguf.unlink()  # being downloaded again, say
    with pytest.raises(ConfigError, match=r"^local worker 'w': GGUF file"):
        asyncio.run(pool.restart("w"))
    assert pool.crashed_servers() == ["w"]


def test_a_server_killed_while_starting_names_the_signal_and_the_memory_it_may_lack(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A GGUF too big for the machine's memory gets the server SIGKILLed by the OOM killer
    as it loads (its log says nothing of it): the error said only 'exited with code -9'. The
    server here is a stand-in process that SIGKILLs itself."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    killed = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"]
    exits = [sys.executable, "-c", "raise SystemExit(3)"]
    worker = WorkerConfig.model_validate(
        {"id": "w", "model": "m", "local": {"gguf": "embedded:smollm2"}}
    )
    first_line = start_error_line(monkeypatch, worker, killed)
    assert "exited with signal SIGKILL while starting" in first_line
    assert "out-of-memory killer" in first_line and "local.n_ctx" in first_line
    first_line = start_error_line(monkeypatch, worker, exits)
    assert first_line.endswith("exited with code 3 while starting.")


def start_error_line(
    monkeypatch: pytest.MonkeyPatch, worker: WorkerConfig, command: list[str]
) -> str:
    """The first line of the error starting this worker, its server a stand-in command."""
    monkeypatch.setattr(local_server, "server_command", lambda *args: command)
    with pytest.raises(LocalServerError) as caught:
        asyncio.run(local_server.start_local_servers([worker]))
    return str(caught.value).splitlines()[0]


def test_a_server_without_memory_for_its_context_says_to_lower_n_ctx(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """local.n_ctx too big for the machine's memory (a 7B model at 131072 tokens, say; the
    embedded one at 10 million) failed with a log ending in a bare 'ValueError: Failed to
    create llama_context', saying neither why nor what to change. The server here is a
    stand-in process that ends as llama-cpp-python's server does then."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    fails = [sys.executable, "-c", "raise ValueError('Failed to create llama_context')"]
    exits = [sys.executable, "-c", "raise ValueError('no such file')"]
    worker = WorkerConfig.model_validate(
        {"id": "w", "model": "m", "local": {"gguf": "embedded:smollm2", "n_ctx": 131072}}
    )
    first_line = start_error_line(monkeypatch, worker, fails)
    assert "exited with code 1 while starting (llama.cpp could not make" in first_line
    assert "local.n_ctx 131072 tokens" in first_line and "lower local.n_ctx" in first_line
    first_line = start_error_line(monkeypatch, worker, exits)
    assert first_line.endswith("exited with code 1 while starting.")


def test_a_server_that_segfaults_with_amx_kernels_says_to_build_llama_cpp_without_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """llama.cpp's AMX kernels segfault on a server's first answer on some Intel Xeons
    (ggml-org/llama.cpp#20824; seen here: every local worker test failed with 'exited (code
    -11)' on a Sapphire Rapids machine), and the log shows nothing of it: a build with them
    is named, with the command that builds one without. The server is a stand-in process
    that segfaults, the build's AMX a stand-in too."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    segfaults = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"]
    worker = WorkerConfig.model_validate(
        {"id": "w", "model": "m", "local": {"gguf": "embedded:smollm2"}}
    )
    for has_amx in (True, False):
        monkeypatch.setattr(local_server, "llama_cpp_has_amx", lambda has_amx=has_amx: has_amx)
        first_line = start_error_line(monkeypatch, worker, segfaults)
        assert "exited with signal SIGSEGV while starting" in first_line
        hint = f"CFLAGS='{local_server.NO_AMX_FLAGS}'"
        assert ("AMX kernels" in first_line and hint in first_line) is has_amx, first_line


def test_llama_cpp_has_amx_reads_the_builds_system_info(monkeypatch: pytest.MonkeyPatch) -> None:
    llama_cpp = pytest.importorskip("llama_cpp")
    has_amx = local_server.llama_cpp_has_amx.__wrapped__
    info = b"CPU : SSE3 = 1 | AVX512 = 1 | AVX512_BF16 = 1 | AMX_INT8 = 1 | LLAMAFILE = 1 | "
    monkeypatch.setattr(llama_cpp, "llama_print_system_info", lambda: info)
    assert has_amx() is True
    monkeypatch.setattr(llama_cpp, "llama_print_system_info", lambda: info.replace(b"AMX", b""))
    assert has_amx() is False


@pytest.mark.skipif(
    os.uname().machine not in ("x86_64", "amd64"), reason="AMX is an x86-64 instruction set"
)
def test_make_install_builds_llama_cpp_without_its_amx_kernels() -> None:
    """The installed llama.cpp (built by `make install`'s flags, which the hint names too)
    has no AMX kernels, so its local workers run on a CPU that has AMX."""
    pytest.importorskip("llama_cpp")
    makefile = (Path(__file__).parents[1] / "Makefile").read_text(encoding="utf-8")
    assert f"NO_AMX_FLAGS := {local_server.NO_AMX_FLAGS}\n" in makefile
    assert local_server.llama_cpp_has_amx.__wrapped__() is False


STAND_IN_SERVE = """
import sys
from fugu_lite.workers import local_server
from fugu_lite.workers import pool as pool_module
# stand-in llama.cpp servers that never come up (a big model loading)
local_server.server_command = lambda *a: [sys.executable, "-c", "import time; time.sleep(60)"]
from fugu_lite.__main__ import main
sys.argv = ["fugu-lite", "serve", *sys.argv[1:]]
main()
"""


def stand_ins(parent: int) -> list[int]:
    return [
        child.pid
        for child in psutil.Process(parent).children(recursive=True)
        if "time.sleep(60)" in " ".join(child.cmdline())
    ]


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_while_serve_starts_its_local_workers_stops_it_and_them(
    checkpoint: Path, tmp_path: Path, stop: signal.Signals
) -> None:
    """uvicorn only notes a Ctrl-C while the app starts: serve waited out its local workers'
    start (up to startup_timeout_s, 120 s by default; a second Ctrl-C did no more) before it
    stopped. The servers here are stand-in processes that never answer. SIGTERM stops it
    alike, and neither prints the lifespan's KeyboardInterrupt as a traceback."""
    import json

    worker_ids = json.loads((checkpoint / "router.json").read_text())["worker_ids"]
    # their start's timeout far past the wait for serve's stop: a loaded machine takes tens
    # of seconds to stop it (20 s ran out at load 24), and still not the start's 600 s
    local = {"gguf": "embedded:smollm2", "startup_timeout_s": 600}
    workers = [{"id": w, "model": w, "local": local} for w in worker_ids]
    pool = tmp_path / "pool.yaml"
    pool.write_text(json.dumps({"workers": workers}), encoding="utf-8")
    script = tmp_path / "serve.py"
    script.write_text(STAND_IN_SERVE, encoding="utf-8")
    command = [sys.executable, str(script), "--checkpoint", str(checkpoint), "--pool", str(pool)]
    child = subprocess.Popen(
        [*command, "--port", str(free_port())], stderr=subprocess.PIPE,
        preexec_fn=ctrl_c_at_its_default,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 600  # serve imports torch and loads the router first
        while len(started := stand_ins(child.pid)) < len(worker_ids):
            assert child.poll() is None and time.monotonic() < deadline
            time.sleep(0.2)
        child.send_signal(stop)
        child.wait(timeout=300)
    finally:
        child.kill()
        _, stderr = child.communicate()
    assert alive(started) == []
    assert child.returncode == 130, stderr.decode()
    assert b"interrupted: serve stopped while starting" in stderr
    assert b"Traceback" not in stderr, stderr.decode()


def test_a_local_n_threads_far_over_the_machines_cores_is_refused_before_it_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """local.n_threads 100000 passed serve's check and the pool's start, and llama.cpp's
    server crashed on its first call ("Thread creation failed", a segfault; 20000 hung it);
    both now refuse it, saying what the machine has, and stop the servers started before."""
    stand_in_servers(monkeypatch, tmp_path)
    monkeypatch.setattr(local_server, "machine_cores", lambda: 2)
    config = PoolConfig.model_validate(
        {"workers": [
            {"id": "fine", "model": "m", "local": {"gguf": "embedded:smollm2", "n_threads": 8}},
            {"id": "many", "model": "m", "local": {"gguf": "embedded:smollm2", "n_threads": 10**5}},
        ]}
    )  # fmt: skip
    said = (
        r"^local worker 'many': local.n_threads 100000 is more threads than this machine can "
        r"run \(it has 2 cores.*set local.n_threads to at most 8, best to 2 or fewer"
    )
    with pytest.raises(ConfigError, match=said):
        preflight(config)
    with leaving_no_process_running(), pytest.raises(ConfigError, match=said):
        asyncio.run(local_server.start_local_servers(config.workers))


@pytest.mark.parametrize(
    ("extra_args", "said"),
    [
        (
            ["--n_gpu_layres", "1"],
            "'--n_gpu_layres' (did you mean '--n_gpu_layers'?) is not a flag",
        ),
        (["--flash-attn", "true"], "'--flash-attn' (did you mean '--flash_attn'?) is not a flag"),
        (["--seed", "one"], "would refuse them (argument --seed: invalid int value: 'one')"),
        (["--seed", "1", "2"], "'2' follows no flag that takes it"),
        (["\u2014seed", "1"], "'\u2014seed' starts with '\u2014', not '--' (a dash that a"),
        (["\u2013seed=1"], "start: unrecognized arguments); write '--seed=1'"),
    ],
)
def test_an_extra_arg_llama_cpps_server_refuses_is_named_before_it_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, extra_args: list[str], said: str
) -> None:
    """An unknown flag in local.extra_args (a typo) or a value its flag does not take passed
    serve's check and the pool's start, and llama.cpp's server exited at once, its usage
    text in the log (the pool's start failed on it, serve's after the checks were passed);
    both refuse it now against the server's own parser, naming the closest flag. A flag
    copied with a typographic dash (an em dash that an editor made of "--") was said to
    follow no flag, to be removed or put after its flag; it is said to start with that
    dash, with the flag to write."""
    stand_in_servers(monkeypatch, tmp_path)
    local = {"gguf": "embedded:smollm2", "extra_args": extra_args}
    config = PoolConfig.model_validate({"workers": [{"id": "w", "model": "m", "local": local}]})
    with pytest.raises(
        ConfigError, match=f"^local worker 'w': local.extra_args: .*{re.escape(said)}"
    ):
        preflight(config)
    with leaving_no_process_running(), pytest.raises(ConfigError, match=re.escape(said)):
        asyncio.run(local_server.start_local_servers(config.workers))
    fine = {**local, "extra_args": ["--seed", "-1", "--n_gpu_layers=0", "--flash_attn", "true"]}
    preflight(PoolConfig.model_validate({"workers": [{"id": "w", "model": "m", "local": fine}]}))


def extra_args_refusals(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, extra_args: list[str]
) -> list[str]:
    """The errors of serve's check (preflight) and of the pool's start for a local worker
    with these extra_args, which both must refuse; no server is left running."""
    stand_in_servers(monkeypatch, tmp_path)
    local = {"gguf": "embedded:smollm2", "extra_args": extra_args}
    config = PoolConfig.model_validate({"workers": [{"id": "w", "model": "m", "local": local}]})
    with pytest.raises(ConfigError) as by_preflight:
        preflight(config)
    with leaving_no_process_running(), pytest.raises(ConfigError) as at_start:
        asyncio.run(local_server.start_local_servers(config.workers))
    return [str(by_preflight.value), str(at_start.value)]


KEY = "sk-live-0123456789abcdefghij"


@pytest.mark.parametrize(
    ("extra_args", "said"),
    [
        (["--api-key", KEY], "'--api-key' is not a flag"),
        (["\u2014api_key=" + KEY], "starts with '\u2014', not '--' (a dash"),
        (["\u2014api_key", KEY], "'\u2014api_key' starts with '\u2014', not '--'"),
        (
            ["--verbose", "True", "--seed", "1", "--n_gpu_layres", "1"],
            "local.extra_args: '--n_gpu_layres' (did you mean '--n_gpu_layers'?)",
        ),
    ],
)
def test_an_extra_arg_llama_cpps_server_refuses_is_named_alone_and_no_key_is_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, extra_args: list[str], said: str
) -> None:
    """The error of an extra_args item that llama.cpp's server refuses showed the whole
    list: the item was lost in a long one, and a typo of --api_key (a hyphen for its
    underscore, or a typographic dash, which the config's check of --api_key does not
    take for it) showed the key given after it on the terminal and in CI logs. It names
    the item alone now, and the flag to write with its key as ***."""
    for error in extra_args_refusals(tmp_path, monkeypatch, extra_args):
        assert said in error
        assert KEY not in error and "--verbose" not in error


@pytest.mark.parametrize(
    ("extra_args", "meant", "instead"),
    [
        (["--api-key", KEY], "--api_key", "the server would refuse them all (401)"),
        (["\u2014api_key=" + KEY], "--api_key", "the server would refuse them all (401)"),
        (["\u2014api_key", KEY], "--api_key", "the server would refuse them all (401)"),
        (["--n-ctx", "4096"], "--n_ctx", "fugu-lite sets it (use local.n_ctx)"),
        (["\u2013chat_format", "chatml"], "--chat_format", "(use local.chat_format)"),
        (["\u2014interrupt", "True"], "--interrupt (which llama.cpp's server reads as "
         "--interrupt_requests)", "a new request waits"),
    ],
)  # fmt: skip
def test_a_typo_of_a_flag_extra_args_may_not_set_says_what_the_config_takes_instead(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    extra_args: list[str],
    meant: str,
    instead: str,
) -> None:
    """A typo of a flag that extra_args may not set ('--api-key', '--n-ctx', one copied
    with a typographic dash) was told "did you mean '--api_key'?" (or to write
    '--api_key=***'), which the config then refused in turn: two tries for one. It is told
    now that the flag it looks like may not be set either, and what to do instead (leave
    the key out, set local.n_ctx); the key stays unshown."""
    for error in extra_args_refusals(tmp_path, monkeypatch, extra_args):
        assert f"the flag it looks like, {meant}, is one extra_args may not set either" in error
        assert instead in error
        assert "did you mean" not in error and "write '" not in error
        assert KEY not in error


CHATTY_SERVER = """
import pathlib, sys, time
line = "INFO:     127.0.0.1:41738 - 'POST /v1/chat/completions HTTP/1.1' 200 OK\\n"
sys.stdout.write("Uvicorn running\\n" + line * 20000)  # about 1.4 MB: 20000 calls' lines
sys.stdout.flush()
go = pathlib.Path(sys.argv[1])
go.with_name("written").touch()
while not go.exists():
    time.sleep(0.02)
sys.stdout.write("the line after the cut\\n")
sys.stdout.flush()
time.sleep(30)
"""


def test_a_long_serves_server_log_is_cut_back_to_its_tail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server's log took a line for each call (more with --verbose True) for as long as it
    ran, and a crash's report read all of it; a call sent to it now cuts it back to its tail
    once over LOG_MAX_BYTES, and the server goes on writing at the new end (a log it wrote
    at its own offset stayed as big, its start turned to NUL bytes)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    go = tmp_path / "go"
    chatty = [sys.executable, "-c", CHATTY_SERVER, str(go)]
    monkeypatch.setattr(local_server, "server_command", lambda *args: chatty)
    config = PoolConfig.model_validate(
        {"workers": [{"id": "w", "model": "m", "local": {"gguf": "embedded:smollm2"}}]}
    )
    server = launched(config.workers[0])
    try:
        assert server.log_path is not None
        deadline = time.monotonic() + 20
        # the whole 1.4 MB written: a cut made while it was still being written was followed
        # by the rest of it (the flake of a loaded machine: 1 MB left after the cut)
        while not (tmp_path / "written").exists():
            assert time.monotonic() < deadline, "the stand-in server wrote no log"
            time.sleep(0.05)
        assert server.log_path.stat().st_size > local_server.LOG_MAX_BYTES
        pool = WorkerPool(config)
        pool.servers = {"w": server}
        pool._sent_call("w")
        assert server.log_path.stat().st_size <= local_server.LOG_KEPT_BYTES
        go.touch()
        while "the line after the cut" not in server.log_tail(1):
            assert time.monotonic() < deadline, server.log_tail(2)
            time.sleep(0.05)
        text = server.log_path.read_bytes()
        assert len(text) <= local_server.LOG_KEPT_BYTES + 100 and b"\0" not in text
        assert text.startswith(b"INFO:     127.0.0.1:41738 - 'POST")
    finally:
        server.stop()


def test_a_servers_log_is_cut_back_only_once_past_its_limit(tmp_path: Path) -> None:
    """In a manual mutation round, trim_log cutting a log from LOG_KEPT_BYTES on instead of
    past LOG_MAX_BYTES passed every test (the one log cut was 1.4 MB): each call then
    rewrote the log's last 64 KiB, and a crash's report lost all but that, where the
    README says a log is cut back past 1 MiB. A log of exactly LOG_MAX_BYTES is kept
    whole; a line more and it is cut back to its last whole lines."""
    server = LocalServer(two_local_workers().workers[0])
    server.log_path = tmp_path / "server.log"
    line = b"INFO:     127.0.0.1:41738 - 'POST /v1/chat/completions HTTP/1.1' 200 OK\n"
    lines, rest = divmod(local_server.LOG_MAX_BYTES, len(line))
    whole = b"x" * (rest - 1) + b"\n" + line * lines
    server.log_path.write_bytes(whole)
    server.trim_log()
    assert server.log_path.read_bytes() == whole
    with server.log_path.open("ab") as log:
        log.write(b"the last line\n")
    server.trim_log()
    kept = server.log_path.read_bytes()
    assert len(kept) <= local_server.LOG_KEPT_BYTES
    assert kept.startswith(line) and kept.endswith(line + b"the last line\n")


def test_a_server_whose_log_was_removed_takes_calls_and_says_it_has_no_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a manual mutation round, log_tail reading a log that is gone (its exists check
    dropped) and trim_log cutting one (FileNotFoundError no longer suppressed) each passed
    every test: a log removed while its server ran (a temp folder's cleaner, a user's rm),
    or by a restart whose launch failed after making it (a fork out of memory), then ended
    each call sent to the worker, or its crash's report, in a FileNotFoundError naming
    the log. The server is a stand-in process."""
    stand_in_servers(monkeypatch, tmp_path)
    config = PoolConfig.model_validate(
        {"workers": [{"id": "w", "model": "m", "local": {"gguf": "embedded:smollm2"}}]}
    )
    server = launched(config.workers[0])
    try:
        assert server.log_path is not None
        server.log_path.unlink()
        pool = WorkerPool(config)
        pool.servers = {"w": server}
        pool._sent_call("w")
        assert pool.exit_report("w") == (None, "(no log)")
    finally:
        server.stop()


def test_a_server_gets_none_of_the_variables_llama_cpp_reads_as_its_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """llama_cpp.server reads its settings from the environment too: a PORT exported for
    another program moved it off the port fugu-lite polls, an API_KEY made it answer
    fugu-lite's calls 401, and its start timed out after startup_timeout_s, its log showing
    no error. The server now gets fugu-lite's environment without them."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    shows = [sys.executable, "-c", "import os; print(' '.join(sorted(os.environ)), flush=True)"]
    monkeypatch.setattr(local_server, "server_command", lambda *args: shows)
    for name in ("PORT", "HOST", "API_KEY", "config_file", "N_Gpu_Layers", "OMP_NUM_THREADS"):
        monkeypatch.setenv(name, "8765")
    config = PoolConfig.model_validate(
        {"workers": [{"id": "w", "model": "m", "local": {"gguf": "embedded:smollm2"}}]}
    )
    server = launched(config.workers[0])
    try:
        assert server.process is not None and server.process.wait(timeout=20) == 0
        names = server.log_tail(1).split()
    finally:
        server.stop()
    assert "OMP_NUM_THREADS" in names and "PATH" in names
    assert not {"PORT", "HOST", "API_KEY", "config_file", "N_Gpu_Layers"} & set(names)


def test_a_server_that_cannot_be_stopped_leaves_none_of_the_others_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server still running after stop's SIGKILL and wait (stuck in the kernel, as on a hung
    disk) made stop raise TimeoutExpired, naming only the command: stop_local_servers never
    stopped the servers after it. Each is stopped now, and the one that could not be is named
    with its worker and pid afterwards. The servers are stand-in processes that never answer;
    the stuck one's wait never ends."""
    silent = stand_in_servers(monkeypatch, tmp_path)
    workers = [
        WorkerConfig.model_validate(
            {"id": name, "model": "m", "local": {"gguf": "embedded:smollm2"}}
        )
        for name in ("stuck", "fine")
    ]
    servers = [launched(worker) for worker in workers]
    stuck = servers[0].process
    assert stuck is not None

    def never_ends(timeout: float | None = None) -> int:
        raise subprocess.TimeoutExpired(silent, timeout or 0)

    # still running to the end, as a stuck process is: the stand-in itself ends on the
    # SIGTERM sent to both first, and a loaded machine could reap it before stop looked
    # (then stop found it gone and raised nothing: 1 run in 30 at load 20)
    monkeypatch.setattr(stuck, "poll", lambda: None)
    monkeypatch.setattr(stuck, "wait", never_ends)
    try:
        with pytest.raises(LocalServerError) as raised:
            local_server.stop_local_servers(servers)
        assert not servers[1].is_alive()
        assert str(raised.value).startswith(
            f"could not stop the llama.cpp server of local worker 'stuck' (pid {stuck.pid}): it "
            "was still running 5 s after SIGKILL"
        )
    finally:
        monkeypatch.undo()
        stuck.kill()
        stuck.wait()
        servers[0].stop()  # not left for the stop at exit


def test_collect_with_no_temp_folder_for_a_servers_log_names_the_folder_and_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A temp folder where a local server's log cannot be made (a full disk, a TMPDIR that
    is not there) ended collect's pool start with an OSError's traceback naming neither the
    log nor what to do, after a warning that another user had made the temp folder; it is
    one error line now, naming the worker and the folder, and saying to free space or set
    TMPDIR."""
    gone = tmp_path / "gone"
    monkeypatch.setattr(tempfile, "tempdir", str(gone))
    pool = tmp_path / "pool.yaml"
    worker = {"id": "w", "model": "m", "local": {"gguf": "embedded:smollm2"}}
    pool.write_text(yaml.safe_dump({"workers": [worker]}), encoding="utf-8")
    tasks = tmp_path / "tasks.jsonl"
    write_tasks(tasks, [t for t in generate_tasks(1, seed=3) if t.grader != "code"][:1])
    with leaving_no_process_running():
        result = invoke(
            "collect", "--pool", pool, "-t", tasks, "-o", tmp_path / "r.jsonl", "--no-progress"
        )
    assert result.exit_code == 2, result.output
    assert (
        f"error: local worker 'w': cannot make its llama.cpp server's log in the temp folder "
        f"({gone}/" in flat(result.output)
    )
    assert "free disk space there, or set TMPDIR to a folder" in flat(result.output)
    assert "another user made it?" not in flat(result.output)


def test_a_server_process_that_cannot_be_made_is_one_error_naming_the_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fork refused (too many processes, too little memory) ended collect's pool start in
    an OSError's traceback naming no worker; it is one error line now, naming the worker
    and what to do, and its empty log is not left in the temp folder. The refusal is made
    by a stand-in Popen: exhausting processes or memory here would hit the whole machine."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))

    def refused_fork(*args: object, **kwargs: object) -> subprocess.Popen:
        raise OSError(errno.EAGAIN, "Resource temporarily unavailable")

    monkeypatch.setattr(local_server.subprocess, "Popen", refused_fork)
    pool = tmp_path / "pool.yaml"
    worker = {"id": "w", "model": "m", "local": {"gguf": "embedded:smollm2"}}
    pool.write_text(yaml.safe_dump({"workers": [worker]}), encoding="utf-8")
    tasks = tmp_path / "tasks.jsonl"
    write_tasks(tasks, [t for t in generate_tasks(1, seed=3) if t.grader != "code"][:1])
    result = invoke(
        "collect", "--pool", pool, "-t", tasks, "-o", tmp_path / "r.jsonl", "--no-progress"
    )
    assert result.exit_code == 2, result.output
    assert (
        f"error: local worker 'w': cannot start its llama.cpp server ({sys.executable} -m "
        "llama_cpp.server): Resource temporarily unavailable; the machine is out of processes "
        "or memory" in flat(result.output)
    )
    assert not list(temp.rglob("*.log"))


def test_a_gguf_replaced_while_serving_is_read_again_when_its_crashed_server_restarts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The size of a local worker's vocabulary (and its chat template) was read once per
    path, at the pool's start: a crashed server started again on another GGUF put at its
    path (a new download) kept the old model's, so a logit_bias key of the new model was
    refused (or one beyond it sent on, and every bias ignored). They are read again at the
    restart. The server is a stand-in process taken as ready; the new model's vocabulary
    size is llama.cpp's reading patched."""
    import llama_cpp

    stand_in_servers_taken_as_ready(monkeypatch, tmp_path)
    gguf = tmp_path / "model.gguf"
    gguf.symlink_to(resolve_gguf("embedded:smollm2"))
    config = PoolConfig.model_validate(
        {"workers": [{"id": "w", "model": "m", "local": {"gguf": str(gguf)}}]}
    )
    worker = config.workers[0]
    key = {"logit_bias": {"60000": 5}}

    async def crash_and_restart(pool: WorkerPool) -> None:
        assert pool.vocab_sizes["w"] == 49152 and pool.unknown_token(worker, key) is not None
        gguf.unlink()
        shutil.copyfile(resolve_gguf("embedded:smollm2"), gguf)  # another model, said below
        monkeypatch.setattr(llama_cpp, "llama_vocab_n_tokens", lambda vocab: 151936)
        crash(pool, "w")
        await pool.restart("w")
        assert pool.vocab_sizes["w"] == 151936 and pool.unknown_token(worker, key) is None

    run_in_pool(config, crash_and_restart)


def test_a_gguf_replaced_by_one_without_its_chat_format_fails_its_crashed_servers_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A local worker's chat_format chat_template.NAME was checked against its GGUF at the
    pool's start only: a crashed server started again on another GGUF put at its path, one
    without that template, came back answering every call with an error ("Invalid chat
    handler"). The restart checks it again (the file's reading is cached per version) and
    fails, naming the template. The server is a stand-in process taken as ready; the new
    model is the embedded GGUF with its template's key renamed."""
    stand_in_servers_taken_as_ready(monkeypatch, tmp_path)
    gguf = tmp_path / "model.gguf"
    gguf.symlink_to(resolve_gguf("embedded:smollm2"))
    untemplated = tmp_path / "untemplated.gguf"
    key = b"tokenizer.chat_template"
    untemplated.write_bytes(gguf.read_bytes().replace(key, b"tokenizer.xhat_template"))
    local = {"gguf": str(gguf), "chat_format": "chat_template.default"}
    config = PoolConfig.model_validate({"workers": [{"id": "w", "model": "m", "local": local}]})

    async def crash_and_restart(pool: WorkerPool) -> None:
        untemplated.replace(gguf)  # another model at the path
        crash(pool, "w")
        with pytest.raises(PoolStartError, match=r"names a chat template that .* does not have"):
            await pool.restart("w")
        assert not pool.servers["w"].is_alive()

    run_in_pool(config, crash_and_restart)


def test_a_gguf_llama_cpp_cannot_load_is_refused_before_it_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A GGUF cut short (a download interrupted) passed serve's check and the pool's start,
    and llama.cpp's server exited with a bare "Failed to load model from file" in its log;
    with chat_format chat_template.default it was said to lack that template, and to leave
    chat_format out. Serve's check, the pool's start and a crashed server's restart on
    such a file now refuse it with llama.cpp's reason. The servers are stand-ins."""
    stand_in_servers_taken_as_ready(monkeypatch, tmp_path)
    cut = tmp_path / "cut.gguf"
    with resolve_gguf("embedded:smollm2").open("rb") as whole:
        cut.write_bytes(whole.read(20_000_000))
    said = (
        rf"^local worker 'w': llama.cpp cannot load {re.escape(str(cut))}: tensor "
        r"'token_embd.weight' data is not within the file bounds, model is corrupted or "
        r"incomplete; download it again if the download was cut short"
    )
    for chat_format in (None, "chat_template.default"):
        local = {"gguf": str(cut), "chat_format": chat_format}
        config = PoolConfig.model_validate({"workers": [{"id": "w", "model": "m", "local": local}]})
        with pytest.raises(ConfigError, match=said):
            preflight(config)
        with leaving_no_process_running(), pytest.raises(ConfigError, match=said):
            asyncio.run(answer(config))
    gguf = tmp_path / "model.gguf"
    gguf.symlink_to(resolve_gguf("embedded:smollm2"))
    config = PoolConfig.model_validate(
        {"workers": [{"id": "w", "model": "m", "local": {"gguf": str(gguf)}}]}
    )
    preflight(config)

    async def crash_and_restart(pool: WorkerPool) -> None:
        gguf.unlink()
        cut.rename(gguf)  # a new download, cut short
        crash(pool, "w")
        with pytest.raises(ConfigError, match=r"llama.cpp cannot load .* data is not within"):
            await pool.restart("w")

    run_in_pool(config, crash_and_restart)


def test_a_server_that_cannot_be_stopped_after_a_failure_leaves_the_failures_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A pool's start that failed (a worker's GGUF path wrong), or a run in it that failed,
    stops the servers; one that could not be stopped made its LocalServerError the one
    raised, and the failure's own error (what to fix) was lost. The failure's error is
    raised now, and the server that could not be stopped is logged. Servers are stand-in
    processes that never answer; the stop of one of them fails."""
    stand_in_servers(monkeypatch, tmp_path)
    real_stop = LocalServer.stop

    def stuck_stop(self: LocalServer, grace_s: float = 5.0) -> None:
        real_stop(self, grace_s)
        if self.worker_id == "stuck":
            raise LocalServerError("it was still running 5 s after SIGKILL")

    monkeypatch.setattr(LocalServer, "stop", stuck_stop)
    config = with_a_mistyped_gguf("stuck", tmp_path)
    with leaving_no_process_running(), pytest.raises(ConfigError, match=MISTYPED_GGUF):
        asyncio.run(local_server.start_local_servers(config.workers))
    assert "could not stop the llama.cpp server of local worker 'stuck'" in caplog.text
    caplog.clear()

    async def ready(self: LocalServer) -> None:
        return None

    async def failing_run() -> None:
        async with WorkerPool(PoolConfig(workers=config.workers[:1])):
            raise CollectError("cannot write records.jsonl: No space left on device")

    monkeypatch.setattr(LocalServer, "wait_ready", ready)
    with leaving_no_process_running(), pytest.raises(CollectError, match="cannot write"):
        asyncio.run(failing_run())  # the pool's end, after the body failed
    assert "could not stop the llama.cpp server of local worker 'stuck'" in caplog.text


LEFT_STUCK = """
import sys
from fugu_lite.workers import local_server
from fugu_lite.workers.config import WorkerConfig
local_server.server_command = lambda *a: [sys.executable, "-c", "import time; time.sleep(60)"]
real_stop = local_server.LocalServer.stop
def stuck_stop(self, grace_s=5.0):
    real_stop(self, grace_s)
    raise local_server.LocalServerError("it was still running 5 s after SIGKILL")
local_server.LocalServer.stop = stuck_stop
worker = {"id": "w", "model": "m", "local": {"gguf": "embedded:smollm2"}}
local_server.LocalServer(WorkerConfig.model_validate(worker)).launch()
sys.exit(0)  # no stop: a sys.exit inside a callback, say
"""


def test_a_server_that_cannot_be_stopped_at_exit_is_one_error_line_not_a_traceback(
    tmp_path: Path,
) -> None:
    """A server left running at exit that the last-resort stop (atexit) could not stop
    printed Python's "Exception ignored in atexit callback" and a traceback; it is logged
    as one error naming the worker now. The server is a stand-in whose stop fails."""
    done = run_exiting_script(LEFT_STUCK, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "could not stop the llama.cpp server of local worker 'w'" in done.stderr
    assert "Traceback" not in done.stderr, done.stderr


def test_servers_that_ignore_sigterm_are_stopped_in_one_grace_not_one_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """stop_local_servers gave each server its 5 s grace after SIGTERM in turn: a pool of
    three local workers busy with long answers took 15 s to close (a Ctrl-C during collect
    hung that long). All get SIGTERM at once now and share one grace. The servers are
    stand-in processes that ignore SIGTERM."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    stubborn = [sys.executable, "-c", STUBBORN_SERVER]
    monkeypatch.setattr(local_server, "server_command", lambda *args: stubborn)
    workers = [
        WorkerConfig.model_validate(
            {"id": name, "model": "m", "local": {"gguf": "embedded:smollm2"}}
        )
        for name in ("a", "b", "c")
    ]
    servers = [launched(worker) for worker in workers]
    for server in servers:  # each has set SIGTERM aside (its child's pid is in its log)
        assert server.log_path is not None
        deadline = time.monotonic() + 30
        while not server.log_path.read_text(encoding="utf-8").strip():
            assert time.monotonic() < deadline, "a stand-in server did not start"
            time.sleep(0.05)
    started = time.monotonic()
    with leaving_no_process_running():
        local_server.stop_local_servers(servers)
    assert time.monotonic() - started < 9
    assert all(
        server.process and server.process.returncode == -signal.SIGKILL for server in servers
    )


FINISHES_ITS_ANSWER = """
import signal, sys, time

def finish(signum, frame):
    time.sleep(float(sys.argv[1]))  # the answer being generated, which uvicorn finishes
    raise SystemExit(0)

signal.signal(signal.SIGTERM, finish)
print("ready", flush=True)
time.sleep(60)
"""


def test_servers_that_end_on_sigterm_finish_their_answers_stopped_alone_or_together(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a manual mutation round, stop without its SIGTERM (a server stopped alone, as a
    failed restart's, waited out its grace and was SIGKILLed) and stop_local_servers
    without SIGTERM to all at once (each got it when the one before had ended, the last
    ones SIGKILLed when the grace ran out) each passed every test: the only servers
    stopped in them ignored SIGTERM. The servers here are stand-ins that take 2 s to
    end on SIGTERM (an answer to finish): stopped alone, or three together within the 5 s
    grace they share, each ends on its own (code 0)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    finishing = [sys.executable, "-c", FINISHES_ITS_ANSWER, "2"]
    monkeypatch.setattr(local_server, "server_command", lambda *args: finishing)
    worker = WorkerConfig.model_validate(
        {"id": "w", "model": "m", "local": {"gguf": "embedded:smollm2"}}
    )
    with leaving_no_process_running():
        servers = [launched(worker) for _ in range(4)]
        try:
            for server in servers:  # each has its SIGTERM handler ("ready" in its log)
                assert server.log_path is not None
                deadline = time.monotonic() + 30
                while "ready" not in server.log_tail(1):
                    assert time.monotonic() < deadline, "a stand-in server did not start"
                    time.sleep(0.05)
            servers[0].stop()
            local_server.stop_local_servers(servers[1:])
        finally:
            local_server.stop_local_servers(servers)
    assert [server.process and server.process.returncode for server in servers] == [0] * 4


def test_a_local_workers_gguf_is_opened_once_by_serves_check_and_the_pools_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Serve's check and the pool's start opened a local worker's GGUF with llama.cpp three
    times (whether it loads, its vocabulary's size, its chat template), each open costing
    time and memory, more for a large model; it is opened once now, all read from that
    open. The GGUF is a copy of the embedded one (a file not read before); servers are
    stand-ins taken as ready."""
    stand_in_servers_taken_as_ready(monkeypatch, tmp_path)
    gguf = tmp_path / "model.gguf"
    shutil.copyfile(resolve_gguf("embedded:smollm2"), gguf)
    opened: list[Path] = []
    real_open = local_server.vocab_only_model

    def counted_open(path: Path) -> Any:
        opened.append(path)
        return real_open(path)

    monkeypatch.setattr(local_server, "vocab_only_model", counted_open)
    config = PoolConfig.model_validate(
        {"workers": [{"id": "w", "model": "m", "local": {"gguf": str(gguf)}}]}
    )
    preflight(config)

    async def read_its_model(pool: WorkerPool) -> None:
        assert pool.vocab_sizes["w"] == 49152 and pool.calls_as_text["w"]

    run_in_pool(config, read_its_model)
    assert opened == [gguf]


def untemplated_gguf(tmp_path: Path) -> Path:
    """The embedded GGUF without a chat template (its key renamed), in tmp_path."""
    untemplated = tmp_path / "untemplated.gguf"
    key = b"tokenizer.chat_template"
    untemplated.write_bytes(
        resolve_gguf("embedded:smollm2").read_bytes().replace(key, b"tokenizer.xhat_template")
    )
    return untemplated


def test_a_gguf_without_a_chat_template_and_no_chat_format_is_refused_before_it_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A local worker without a chat_format, its GGUF without a chat template of its own,
    passed serve's check and the pool's start: llama.cpp's server then wrote its prompts in
    the llama-2 format without a word, and an instruct model of another family answered
    with nonsense. Both refuse it now, saying to set chat_format and naming formats; a
    chat_format set is taken. The GGUF is the embedded one with its template's key renamed;
    servers are stand-ins taken as ready."""
    stand_in_servers_taken_as_ready(monkeypatch, tmp_path)
    untemplated = untemplated_gguf(tmp_path)
    local: dict[str, Any] = {"gguf": str(untemplated)}
    config = PoolConfig.model_validate({"workers": [{"id": "w", "model": "m", "local": local}]})
    said = (
        rf"^worker w: {re.escape(str(untemplated))} has no chat template of its own "
        r"\(no tokenizer.chat_template nor tokenizer.chat_template.default in its metadata\), "
        r"so llama.cpp's server would write its prompts in the llama-2 format.*; set "
        r"local.chat_format to the format the model was trained with, one llama.cpp's server "
        r"has \(such as chatml, llama-3, "
    )
    with pytest.raises(PoolStartError, match=said):
        preflight(config)
    with leaving_no_process_running(), pytest.raises(PoolStartError, match=said):
        asyncio.run(answer(config))
    formatted = {**local, "chat_format": "chatml"}
    preflight(
        PoolConfig.model_validate({"workers": [{"id": "w", "model": "m", "local": formatted}]})
    )


def test_a_gguf_without_templates_given_its_own_as_chat_format_is_told_to_set_one(
    tmp_path: Path,
) -> None:
    """chat_format chat_template.default on a GGUF without any chat template was refused
    saying to leave chat_format out for the GGUF's own template, which is refused in turn
    (it has none): the error says now to set a format llama.cpp's server has."""
    local = {"gguf": str(untemplated_gguf(tmp_path)), "chat_format": "chat_template.default"}
    config = PoolConfig.model_validate({"workers": [{"id": "w", "model": "m", "local": local}]})
    with pytest.raises(PoolStartError) as caught:
        preflight(config)
    said = str(caught.value)
    assert said.endswith(
        "does not have (llama.cpp's server would answer every call with an error); it has no "
        "chat template of its own either: set local.chat_format to the format the model was "
        "trained with, one llama.cpp's server has (such as chatml, llama-3, mistral-instruct, "
        "gemma, qwen; llama-2 for a Llama 2 model); or, given the model's tokenizer_config.json "
        "(from its Hugging Face repo) holding its chat_template, set local.chat_format to "
        "hf-tokenizer-config and local.extra_args to ['--hf_tokenizer_config_path', "
        "'/its/full/path/tokenizer_config.json']"
    )


def test_a_gguf_without_its_own_template_is_told_every_way_to_give_one(tmp_path: Path) -> None:
    """A GGUF without a template of its own, given no chat_format, was told only to set one
    of llama.cpp's formats, its missing template named as tokenizer.chat_template alone: a
    template it has under another name (tokenizer.chat_template.tool_use, which chat_format
    chat_template.tool_use renders with) went unsaid, as did the model's
    tokenizer_config.json (chat_format hf-tokenizer-config). Each is said now, and each
    way said is taken by the pool's check. The GGUF is the embedded one with its template's
    key renamed (another key shortened to keep the length)."""
    tool_use_only = embedded_gguf_with_keys_renamed(
        tmp_path / "tool_use_only.gguf",
        {"tokenizer.chat_template": "tokenizer.chat_template.tool_use",
         "general.organization": "general.org"},
    )  # fmt: skip

    def checked(**local: Any) -> None:
        worker = {"id": "w", "model": "m", "local": {"gguf": str(tool_use_only), **local}}
        preflight(PoolConfig.model_validate({"workers": [worker]}))

    with pytest.raises(PoolStartError) as caught:
        checked()
    said = str(caught.value)
    assert "(no tokenizer.chat_template nor tokenizer.chat_template.default in its" in said
    assert said.endswith(
        "answers with nonsense; set local.chat_format to chat_template.tool_use for its "
        "template of that name, or to the format the model was trained with, one llama.cpp's "
        "server has (such as chatml, llama-3, mistral-instruct, gemma, qwen; llama-2 for a "
        "Llama 2 model); or, given the model's tokenizer_config.json (from its Hugging Face "
        "repo) holding its chat_template, set local.chat_format to hf-tokenizer-config and "
        "local.extra_args to ['--hf_tokenizer_config_path', "
        "'/its/full/path/tokenizer_config.json']"
    )
    checked(chat_format="chat_template.tool_use")
    checked(chat_format="chatml")
    tokenizer_config = tmp_path / "tokenizer_config.json"
    checked(
        chat_format="hf-tokenizer-config",
        extra_args=["--hf_tokenizer_config_path", str(tokenizer_config)],
    )


def llama_cpp_log_callback() -> int | None:
    """The address of llama.cpp's log callback now."""
    import ctypes

    import llama_cpp

    callback, user_data = llama_cpp.llama_log_callback(), ctypes.c_void_p()
    llama_cpp.llama_log_get(ctypes.byref(callback), ctypes.byref(user_data))
    return ctypes.cast(callback, ctypes.c_void_p).value


def test_ggufs_read_at_once_keep_their_own_load_errors_and_llama_cpps_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A GGUF's reading sets llama.cpp's one log callback (for the whole process) to keep
    what it says, and set llama-cpp-python's own back after: two read at once (two workers'
    servers started again together) swapped each other's, one taking the other's load error
    and the other "it is not a model it can read"; and a callback set before (by the
    program using fugu-lite) was replaced by llama-cpp-python's. Readings now take turns
    and put back the callback that was set. The reading of a file llama.cpp refuses at
    once starts first; one of a file cut short (refused later) is held to enter llama.cpp's
    open with it (for up to 1 s: a reading that waits for the other's end cannot)."""
    import ctypes

    import llama_cpp

    cut = tmp_path / "cut.gguf"
    with resolve_gguf("embedded:smollm2").open("rb") as whole:
        cut.write_bytes(whole.read(20_000_000))
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"GGUF" + b"but not a model" * 100)
    together = threading.Barrier(2, timeout=1)
    real_open = local_server.vocab_only_model

    junk_inside = threading.Event()

    def open_together(gguf: Path) -> Any:
        if gguf == junk:
            junk_inside.set()
        with contextlib.suppress(threading.BrokenBarrierError):
            together.wait()
        return real_open(gguf)

    monkeypatch.setattr(local_server, "vocab_only_model", open_together)
    heard: list[bytes] = []

    @llama_cpp.llama_log_callback
    def programs_own(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
        heard.append(text)

    before = llama_cpp_log_callback()
    llama_cpp.llama_log_set(programs_own, ctypes.c_void_p(0))
    errors: dict[Path, str | None] = {}
    try:
        readers = [
            threading.Thread(
                target=lambda gguf=gguf: errors.update(
                    {gguf: local_server.gguf_reading(gguf).load_error}
                )
            )
            for gguf in (junk, cut)
        ]
        readers[0].start()
        assert junk_inside.wait(timeout=30)
        readers[1].start()
        for reader in readers:
            reader.join()
        assert llama_cpp_log_callback() == ctypes.cast(programs_own, ctypes.c_void_p).value
    finally:
        from llama_cpp import _logger

        llama_cpp.llama_log_set(_logger.llama_log_callback, ctypes.c_void_p(0))
    assert errors == {
        cut: "tensor 'token_embd.weight' data is not within the file bounds, model is "
        "corrupted or incomplete",
        junk: f"llama_model_loader: failed to load model from {junk}",
    }
    assert heard == []  # the readings' lines were kept, not passed on
    assert llama_cpp_log_callback() == before


def embedded_gguf_with_keys_renamed(path: Path, renames: dict[str, str]) -> Path:
    """The embedded GGUF at `path` with metadata keys renamed; the names of each side add up
    to the same length (a key is its length and its bytes), so the tensors stay where their
    offsets say."""

    def key(name: str) -> bytes:
        return len(name).to_bytes(8, "little") + name.encode()

    data = resolve_gguf("embedded:smollm2").read_bytes()
    for old, new in renames.items():
        assert data.count(key(old)) == 1, old
        data = data.replace(key(old), key(new))
    assert sum(map(len, renames)) == sum(map(len, renames.values()))
    path.write_bytes(data)
    return path


def test_a_gguf_rewritten_in_place_at_the_same_size_is_read_again(tmp_path: Path) -> None:
    """In a manual mutation round, a GGUF's version without its mtime (inode and size only)
    passed every test: each replaced GGUF was a new file (another inode). A GGUF written
    over in place (`cp new.gguf model.gguf` keeps the inode) by another of the same size (a
    fine-tune or quantisation of the same model) then kept the old one's reading, here its
    chat template, at a crashed server's restart. The new GGUF is the embedded one with its
    template's key renamed, written after the first reading."""
    gguf = tmp_path / "model.gguf"
    shutil.copyfile(resolve_gguf("embedded:smollm2"), gguf)
    before = gguf.stat()
    assert local_server.chat_template(gguf) is not None
    embedded_gguf_with_keys_renamed(gguf, {"tokenizer.chat_template": "tokenizer.xhat_template"})
    after = gguf.stat()
    assert (after.st_ino, after.st_size) == (before.st_ino, before.st_size)
    assert after.st_mtime_ns != before.st_mtime_ns
    assert local_server.chat_template(gguf) is None


def test_a_gguf_rewritten_in_place_keeping_its_size_and_mtime_is_read_again(
    tmp_path: Path,
) -> None:
    """A GGUF written over in place by another of the same size with its time kept (`cp -p`
    or `rsync --inplace -t` of a new quantisation, a restore from a backup) kept the old
    one's reading, here its chat template, at a crashed server's restart: its version was
    its inode, size and mtime, each the same. The file's change time (ctime), which a write
    or a time set moves and no user can set back, tells them apart; reading it does not
    move it, so a GGUF left alone is read once."""
    gguf = tmp_path / "model.gguf"
    shutil.copyfile(resolve_gguf("embedded:smollm2"), gguf)
    before = gguf.stat()
    assert local_server.chat_template(gguf) is not None
    assert gguf.stat().st_ctime_ns == before.st_ctime_ns
    embedded_gguf_with_keys_renamed(gguf, {"tokenizer.chat_template": "tokenizer.xhat_template"})
    set_time_back(gguf, before)
    assert local_server.chat_template(gguf) is None


def test_a_gguf_whose_template_is_under_its_default_name_has_its_own_template(
    tmp_path: Path,
) -> None:
    """A GGUF whose only chat template is `tokenizer.chat_template.default` (no plain
    `tokenizer.chat_template`) was said to have no chat template of its own, given no
    chat_format, and to lack chat_template.default given that: both refused, where
    llama-cpp-python's server renders prompts with that template (its chat_template.default
    is `tokenizer.chat_template`, else `tokenizer.chat_template.default`). Both are taken now;
    a GGUF with both keys is rendered with the plain one, as the server does. The GGUFs are
    the embedded one with keys renamed (another key shortened to keep the length)."""
    own = resolve_gguf("embedded:smollm2")
    template = local_server.chat_template(own)
    assert template is not None and "im_start" in template
    only_default = embedded_gguf_with_keys_renamed(
        tmp_path / "only_default.gguf",
        {"tokenizer.chat_template": "tokenizer.chat_template.default",
         "general.organization": "general.orga"},
    )  # fmt: skip
    for chat_format in (None, "chat_template.default"):
        local = {"gguf": str(only_default), "chat_format": chat_format}
        preflight(
            PoolConfig.model_validate({"workers": [{"id": "w", "model": "m", "local": local}]})
        )
    assert local_server.chat_template(only_default) == template
    both = embedded_gguf_with_keys_renamed(
        tmp_path / "both.gguf",  # tokenizer.chat_template.default: "HuggingFaceTB"
        {"general.organization": "tokenizer.chat_template.default",
         "general.size_label": "general"},
    )  # fmt: skip
    assert local_server.chat_template(both) == template
    assert local_server.chat_template(both, "tool_use") is None


def test_a_mistyped_chat_format_names_the_nearest_and_leaves_out_only_with_a_template(
    tmp_path: Path,
) -> None:
    """A mistyped local.chat_format was told "or leave chat_format out for the GGUF's own
    template" on a GGUF without one too, where leaving it out is refused in turn; and one
    in capitals ("ChatML") was given no format it meant, one with a space after it or
    without its dash one alone. The nearest formats are named now (the one it is but for
    case and spaces, else up to three), and leaving it out is said only for a GGUF with a
    template of its own."""
    untemplated = untemplated_gguf(tmp_path)
    meant = {
        "chatml ": "(did you mean 'chatml'?)",
        "ChatML": "(did you mean 'chatml'?)",
        "llama2": "(did you mean 'llama-2' or 'llama-3'?)",
    }
    leave_out = "or leave chat_format out for the GGUF's own template"
    for gguf, own in ((resolve_gguf("embedded:smollm2"), True), (untemplated, False)):
        for chat_format, hint in meant.items():
            local = {"gguf": str(gguf), "chat_format": chat_format}
            worker = WorkerConfig.model_validate({"id": "w", "model": "m", "local": local})
            with pytest.raises(PoolStartError) as caught:
                llama_cpp_requests.check_chat_format(worker)
            said = str(caught.value)
            assert said.startswith(f"worker w: local.chat_format {chat_format!r} {hint} is not")
            assert ("chatml, chatml-function-calling" in said) and said.endswith(leave_out) == own


@pytest.mark.parametrize(
    ("workers", "first"),
    [
        (
            [
                {"id": "w", "model": "m", "params": {"repetition_penalty": 1.1},
                 "local": {"gguf": "embedded:smollm2", "n_threads": 10**6}},
            ],
            "local worker 'w': local.n_threads 1000000 is more threads",
        ),
        (
            [
                {"id": "w", "model": "m", "local": {"gguf": "missing.gguf", "n_threads": 10**6}},
                {"id": "remote", "model": "m", "base_url": "http://127.0.0.1:9/v1",
                 "api_key_env": "FUGU_LITE_TEST_UNSET_KEY"},
            ],
            "worker 'remote' reads its API key from the environment variable "
            "FUGU_LITE_TEST_UNSET_KEY, which is not set",
        ),
        (  # the config's own problems before the GGUF's reading, an open of the file
            [
                {"id": "w", "model": "m", "params": {"repetition_penalty": 1.1},
                 "local": {"gguf": "missing.gguf"}},
            ],
            "worker w: params 'repetition_penalty' (did you mean 'repeat_penalty'?) are not",
        ),
    ],
)  # fmt: skip
def test_preflight_and_the_pools_start_say_the_same_first_problem(
    workers: list[dict[str, Any]], first: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """serve's and demo's check (preflight) and the pool's start checked a pool's workers
    in different orders, so a pool with two problems was told one by `serve` and the other
    by a program starting the pool itself (collect, a bench): params before local.n_threads
    at the start, after it in preflight; every worker's API key before any local worker's
    problem at the start, worker by worker in preflight. Both say the same one now."""
    monkeypatch.delenv("FUGU_LITE_TEST_UNSET_KEY", raising=False)
    stand_in_servers_taken_as_ready(monkeypatch, tmp_path)
    config = PoolConfig.model_validate({"workers": workers})
    with pytest.raises((PoolStartError, ConfigError)) as by_preflight:
        preflight(config)
    with leaving_no_process_running(), pytest.raises((PoolStartError, ConfigError)) as at_start:
        asyncio.run(answer(config))
    assert str(by_preflight.value).startswith(first)
    assert (at_start.type, str(at_start.value)) == (by_preflight.type, str(by_preflight.value))


NUMBERED_LINES_THEN_EXIT = "for n in range(1, 31): print(f'line {n}', flush=True)"


def test_a_server_that_exits_while_starting_is_told_by_its_code_and_its_kept_logs_tail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a manual mutation round, an exit code of 0 told as 'signal 0', the error showing
    24 of its log's last lines for 25, and the log the error names removed when the failed
    start's servers are stopped (keep_log not set, or not heeded), each passed every test
    outside the integration ones. The server here is a stand-in process that writes 30
    lines and exits at once."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    exits = [sys.executable, "-c", NUMBERED_LINES_THEN_EXIT]
    monkeypatch.setattr(local_server, "server_command", lambda *args: exits)
    worker = WorkerConfig.model_validate(
        {"id": "w", "model": "m", "local": {"gguf": "embedded:smollm2"}}
    )
    with leaving_no_process_running(), pytest.raises(LocalServerError) as caught:
        asyncio.run(local_server.start_local_servers([worker]))
    first_line, said = str(caught.value).split("\n", 1)
    assert first_line.endswith("exited with code 0 while starting.")
    named = re.search(r"last lines of its log \((.+)\):\n", said)
    assert named is not None
    tail = said[named.end() :].splitlines()
    assert tail == [f"line {n}" for n in range(31 - local_server.LOG_TAIL_LINES, 31)]
    assert Path(named[1]).read_text().splitlines()[-1] == "line 30"  # kept, to read


PORT_TAKEN_THEN_EXIT = """
import sys
with open(sys.argv[1], "a") as launches:
    launches.write(sys.argv[2] + "\\n")  # its port
print("ERROR:    [Errno 98] error while attempting to bind on address "
      "('127.0.0.1', 1234): address already in use", flush=True)
raise SystemExit(1)
"""


def test_a_server_whose_port_is_taken_is_started_again_on_another_a_few_times(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a manual mutation round, a start on another port tried once more than
    PORT_ATTEMPTS, the log of each start given up left behind, and each start again on the
    port that was taken (its new port chosen at the first launch only) passed every test
    outside the integration ones. The server here is a stand-in process whose port is
    always taken: it is started PORT_ATTEMPTS times, each on its own port, and only the
    last start's log, which the error names, is left."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    launches = tmp_path / "launches"

    def taken(gguf: Path, model: str, port: int, config: Any) -> list[str]:
        return [sys.executable, "-c", PORT_TAKEN_THEN_EXIT, str(launches), str(port)]

    monkeypatch.setattr(local_server, "server_command", taken)
    worker = WorkerConfig.model_validate(
        {"id": "w", "model": "m", "local": {"gguf": "embedded:smollm2"}}
    )
    with leaving_no_process_running(), pytest.raises(LocalServerError) as caught:
        asyncio.run(local_server.start_local_servers([worker]))
    assert "exited with code 1 while starting" in str(caught.value)
    assert "address already in use" in str(caught.value)
    ports = launches.read_text().splitlines()
    assert len(ports) == len(set(ports)) == local_server.PORT_ATTEMPTS
    named = re.search(r"last lines of its log \((.+)\):\n", str(caught.value))
    assert named is not None
    assert list((tmp_path / f"fugu-lite-{os.getuid()}").iterdir()) == [Path(named[1])]


def started_and_stopped(local: dict[str, Any]) -> None:
    """Start a local worker of these local settings, as a pool's start does, then stop it,
    leaving no process running."""
    worker = WorkerConfig.model_validate({"id": "w", "model": "m", "local": local})

    async def start_and_stop() -> None:
        servers = await local_server.start_local_servers([worker])
        local_server.stop_local_servers(servers.values())

    with leaving_no_process_running():
        asyncio.run(start_and_stop())


# A stand-in server's /v1/models: its port and status are its first two arguments.
SERVES_MODELS = """
import http.server, sys
port, status = int(sys.argv[1]), int(sys.argv[2])

class Models(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(status)
        self.end_headers()
        self.wfile.write(b'{"object": "list", "data": []}')

http.server.HTTPServer(("127.0.0.1", port), Models).serve_forever()
"""
LOSES_ITS_FIRST_PORT = (
    """
import pathlib, sys, time
port, launches, load_s = int(sys.argv[1]), pathlib.Path(sys.argv[3]), float(sys.argv[4])
first = not launches.exists()
with launches.open("a") as written:
    written.write("launched\\n")
time.sleep(load_s if first else load_s / 2)  # its model's load
if first:
    print("ERROR:    [Errno 98] error while attempting to bind on address "
          f"('127.0.0.1', {port}): address already in use", flush=True)
    raise SystemExit(1)
"""
    + SERVES_MODELS
)


def test_a_server_started_again_on_another_port_has_its_whole_start_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a manual mutation round, the start deadline left as it was when a server whose
    port was taken is started again on another port passed every test outside the
    integration ones: a server that lost its port after loading its model for most of
    local.startup_timeout_s then had what was left to load it again, and timed out. The
    server here is a stand-in process that loads (sleeps) for 3/4 of its 5 s timeout and
    finds its port taken, then, started again, loads for 3/8 of it and answers."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    launches, timeout_s = tmp_path / "launches", 5.0

    def loses_its_first_port(gguf: Path, model: str, port: int, config: Any) -> list[str]:
        load_s = str(timeout_s * 3 / 4)
        return [sys.executable, "-c", LOSES_ITS_FIRST_PORT, str(port), "200", str(launches), load_s]

    monkeypatch.setattr(local_server, "server_command", loses_its_first_port)
    local = {"gguf": "embedded:smollm2", "startup_timeout_s": timeout_s}
    started_and_stopped(local)
    assert launches.read_text().splitlines() == ["launched", "launched"]


def serving_models(status: int) -> Callable[..., list[str]]:
    """A server_command whose servers are stand-ins answering /v1/models with `status`."""

    def command(gguf: Path, model: str, port: int, config: Any) -> list[str]:
        return [sys.executable, "-c", SERVES_MODELS, str(port), str(status)]

    return command


def test_a_proxy_set_for_other_programs_does_not_reach_a_local_servers_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a manual mutation round, the start's probe of GET /v1/models reading the proxy
    variables (httpx's trust_env, on by default) passed every test: with an HTTP_PROXY or
    ALL_PROXY exported for other programs (a company proxy), each local worker's start was
    asked of the proxy, which cannot reach this machine's 127.0.0.1, and timed out. The
    proxy here is a port where nothing listens; the server a stand-in answering 200."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(local_server, "server_command", serving_models(200))
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(name, f"http://127.0.0.1:{free_port()}")
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    local = {"gguf": "embedded:smollm2", "startup_timeout_s": 20}
    started_and_stopped(local)


@pytest.mark.parametrize("answers", ["its own process, with 401", "another process, with 200"])
def test_a_server_is_ready_only_when_its_own_process_answers_200(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, answers: str
) -> None:
    """In a manual mutation round, a start's probe taking any answer of the server's own
    process (as its 401 when an API_KEY reached it) for ready, or a 200 from any process
    on its port (not checking that its own listens: the integration test of it alone
    caught that), passed every test outside the integration ones: the worker was then
    taken for ready, and each call failed (401) or went to another fugu-lite's server.
    The servers here are stand-ins: one answering 401, or one that never listens while
    another process answers on its port."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    other = http.server.ThreadingHTTPServer(("127.0.0.1", 0), AnswersEverything)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    try:
        if answers.startswith("its own"):
            monkeypatch.setattr(local_server, "server_command", serving_models(401))
        else:
            stand_in_servers(monkeypatch, tmp_path)
            monkeypatch.setattr(local_server, "free_port", lambda: other.server_address[1])
        local = {"gguf": "embedded:smollm2", "startup_timeout_s": 2}
        worker = WorkerConfig.model_validate({"id": "w", "model": "m", "local": local})
        within = r"did not answer on .* within 2 s"
        with leaving_no_process_running(), pytest.raises(LocalServerError, match=within):
            asyncio.run(local_server.start_local_servers([worker]))
    finally:
        other.shutdown()
        other.server_close()


def test_a_server_stopped_or_killed_on_purpose_is_not_taken_for_crashed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a manual mutation round, `crashed` taken as any server not running (stopped on
    purpose or not) passed every test outside the integration ones: a server the pool kills
    to drop an abandoned answer (stop_abandoned_answer, which starts it again itself) would
    be restarted a second time by serve's supervisor, or collect's, beside it. The servers
    here are stand-in processes."""
    stand_in_servers(monkeypatch, tmp_path)
    worker = WorkerConfig.model_validate(
        {"id": "w", "model": "m", "local": {"gguf": "embedded:smollm2"}}
    )
    with leaving_no_process_running():
        servers = killed, stopped, exited = launched(worker), launched(worker), launched(worker)
        try:
            assert not any(server.crashed for server in servers)
            killed.kill()
            stopped.stop()
            assert exited.process is not None
            exited.process.kill()  # as the OOM killer would
            exited.process.wait()
            assert (killed.crashed, stopped.crashed, exited.crashed) == (False, False, True)
        finally:
            for server in servers:
                server.stop()


CORES_OF_ONE = """
import os
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
from fugu_lite.workers.local_server import machine_cores
print(machine_cores())
"""


@pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or (os.cpu_count() or 1) < 2,
    reason="needs a process affinity to set, and two cores to tell it from the machine's",
)
def test_the_cores_a_local_worker_may_use_are_those_the_process_may_run_on() -> None:
    """In a manual mutation round, machine_cores counting the machine's cores (os.cpu_count)
    and not those the process may run on passed every test: in a container, or under
    taskset, local.n_threads was allowed up to 4 threads for each core of the host. A
    process here restricts itself to one core."""
    shown = subprocess.run(
        [sys.executable, "-c", CORES_OF_ONE], capture_output=True, text=True, timeout=60,
        check=True,
    )  # fmt: skip
    assert shown.stdout.split() == ["1"]


def test_servers_still_starting_when_their_start_is_cancelled_are_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a manual mutation round, start_local_servers stopping its servers on an Exception
    only (not on a cancellation: a Ctrl-C, a timeout around the pool's start) passed every
    test, those of a cancelled start included (they cancel it after the servers came up,
    or end the process, whose exit stops them): servers cancelled while loading their
    model ran on until the process ended. The servers here are stand-in processes that
    never listen."""
    stand_in_servers(monkeypatch, tmp_path)
    workers = [
        WorkerConfig.model_validate(
            {"id": name, "model": "m", "local": {"gguf": "embedded:smollm2"}}
        )
        for name in ("a", "b")
    ]

    before = set(local_server._running)

    async def cancelled_while_starting() -> None:
        start = asyncio.create_task(local_server.start_local_servers(workers))
        while len(local_server._running - before) < len(workers):  # both launched
            await asyncio.sleep(0.01)
        start.cancel()
        with pytest.raises(asyncio.CancelledError):
            await start

    with leaving_no_process_running():
        asyncio.run(cancelled_while_starting())
