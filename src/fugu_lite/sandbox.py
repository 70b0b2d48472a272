"""Run untrusted Python (a worker's answer) against unit tests in a limited subprocess.

Layers, from the kernel up:

- a fresh process group, killed whole at the wall-clock time limit;
- rlimits set by the harness before the code runs: CPU seconds, address space (memory),
  file size (also caps what the code can print), no core dumps, a process count;
- a network namespace with no interfaces (`unshare -rn`) when unprivileged user namespaces
  work on this machine (probed once), so no socket can reach anything;
- `python -I -S -B` (isolated, standard library only, no .pyc writes) in a temporary
  working folder (in atomic_files.user_temp_folder: a killed run's is removed by the next run);
- an audit hook installed before the code runs that refuses sockets, subprocesses, fork,
  exec, signals to other processes, ctypes, raising rlimits, and writing or deleting files
  outside the working folder;
- stdout / stderr past `output_bytes` are dropped.

This stops the accidents of a model's code (infinite loops, huge prints, memory hogs, fork
bombs, network calls, stray file writes). It is not a security boundary against code written
to escape it: run untrusted pools in a container if that matters.

Tests are the task's `tests` code: each top-level `assert` and each top-level `test*`
function counts as one test; other top-level statements run as set-up, in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import weakref
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .atomic_files import user_temp_folder, writer_prefix

Status = Literal["ok", "load_error", "timeout", "crashed", "internal_error"]


class SandboxLimits(BaseModel):
    model_config = ConfigDict(extra="forbid")

    timeout_s: float = Field(default=10.0, gt=0)
    """Wall-clock limit for the whole run; the CPU limit is its ceiling in seconds."""
    memory_mb: int = Field(default=512, ge=64)
    output_bytes: int = Field(default=64_000, ge=1_000)
    max_processes: int = Field(default=256, ge=1)
    network_isolation: Literal["auto", "unshare", "hook"] = "auto"
    """auto: a network namespace when available, else the audit hook alone."""
    python: str | None = None
    """Interpreter for the code (default: the one running fugu-lite)."""
    max_concurrent: int | None = None
    """Sandboxes running at once per event loop (default: the number of CPUs)."""


class TestOutcome(BaseModel):
    name: str
    passed: bool
    error: str | None = None


class SandboxResult(BaseModel):
    status: Status
    passed: int = 0
    total: int = 0
    detail: str = ""
    tests: list[TestOutcome] = []
    stdout: str = ""
    stderr: str = ""
    duration_s: float = 0.0
    network_isolation: str = ""


async def run_python_tests(
    code: str, tests: str, limits: SandboxLimits | None = None
) -> SandboxResult:
    """Run `code`, then `tests` in the same namespace, in a limited subprocess."""
    limits = limits or SandboxLimits()
    async with _slot(limits):
        # writer-named, so that the next run removes it if this process is killed
        with tempfile.TemporaryDirectory(
            prefix=writer_prefix("sandbox"), dir=user_temp_folder()
        ) as folder:
            return await _run_in(Path(folder), code, tests, limits)


async def _run_in(folder: Path, code: str, tests: str, limits: SandboxLimits) -> SandboxResult:
    workdir = folder / "work"
    workdir.mkdir()
    # A reply decoded from JSON may hold a lone surrogate ("\ud83d", half an emoji) that
    # UTF-8 cannot encode: written as its escape, it is the same character in a string
    # literal, nothing in a comment, and a syntax error (the code's) anywhere else.
    (folder / "solution.py").write_text(code, encoding="utf-8", errors="backslashreplace")
    (folder / "tests.py").write_text(tests, encoding="utf-8", errors="backslashreplace")
    (folder / "harness.py").write_text(HARNESS, encoding="utf-8")
    python = limits.python or sys.executable
    isolation = _isolation(limits, python)
    settings = {
        "memory_bytes": limits.memory_mb * 1024 * 1024,
        "cpu_s": math.ceil(limits.timeout_s),
        "output_bytes": limits.output_bytes,
        "max_processes": limits.max_processes,
        "parent_pid": os.getpid(),
    }
    command = [python, "-I", "-S", "-B", str(folder / "harness.py"), str(folder)]
    command.append(json.dumps(settings))
    if isolation == "unshare":
        command = ["unshare", "--user", "--map-root-user", "--net", *command]
    started = time.perf_counter()
    try:
        with (folder / "stdout").open("wb") as out, (folder / "stderr").open("wb") as err:
            process = await asyncio.create_subprocess_exec(
                *command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                cwd=workdir,
                start_new_session=True,
                env=_child_env(),
            )
    except OSError as error:
        return SandboxResult(
            status="internal_error",
            detail=f"could not start the sandbox ({python}): {error}",
            network_isolation=isolation,
        )
    timed_out = False
    try:
        await asyncio.wait_for(process.wait(), timeout=limits.timeout_s)
    except TimeoutError:
        timed_out = True
    finally:
        _kill_group(process.pid)
        if process.returncode is None:
            await process.wait()
    result = _collect(folder, process.returncode, timed_out, limits)
    result.duration_s = time.perf_counter() - started
    result.network_isolation = isolation
    return result


def _collect(
    folder: Path, returncode: int | None, timed_out: bool, limits: SandboxLimits
) -> SandboxResult:
    events = _read_events(folder / "results.jsonl")
    stdout = _read_capped(folder / "stdout", limits.output_bytes)
    stderr = _read_capped(folder / "stderr", limits.output_bytes)
    outcomes = [
        TestOutcome(name=str(e["name"]), passed=bool(e["passed"]), error=e.get("error"))
        for e in events
        if e.get("event") == "test"
    ]
    total = next((int(e["total"]) for e in events if e.get("event") == "ready"), 0)
    passed = sum(outcome.passed for outcome in outcomes)
    tally = f"{passed}/{total} tests passed"
    status, detail = _verdict(events, returncode, timed_out, stderr, limits, tally)
    return SandboxResult(
        status=status,
        detail=detail,
        passed=passed,
        total=total,
        tests=outcomes,
        stdout=stdout,
        stderr=stderr,
    )


def _verdict(
    events: list[dict],
    returncode: int | None,
    timed_out: bool,
    stderr: str,
    limits: SandboxLimits,
    tally: str,
) -> tuple[Status, str]:
    """The run's status and its detail, from the harness's events and the exit (`tally`
    is the detail of a run that finished)."""
    kinds = {event.get("event") for event in events}
    if "ready" not in kinds:
        if timed_out:
            return "internal_error", (
                "the sandbox did not start within the time limit (machine overloaded?)"
            )
        detail = f"the sandbox failed before running the code (exit {returncode}): "
        return "internal_error", detail + (stderr[-1500:].strip() or "no output")
    if timed_out:
        return "timeout", f"still running after {limits.timeout_s:g} s {_where(events)}"
    load_error = next((e for e in events if e.get("event") == "load_error"), None)
    if load_error is not None:
        return "load_error", str(load_error["error"])
    if "done" not in kinds:
        return "crashed", f"{_describe_exit(returncode)}, {_where(events)}"
    return "ok", tally


def _where(events: list[dict]) -> str:
    """Where a run that did not finish was: loading the code, or in which test (the harness
    announces each test and set-up statement before running it)."""
    steps = [event for event in events if event.get("event") in ("start", "test")]
    if not steps:
        return "while running the code, before any test"
    if steps[-1]["event"] != "start":
        return "after the tests"
    passed = sum(bool(event.get("passed")) for event in steps if event["event"] == "test")
    return f"in {steps[-1].get('where')} ({passed} test{'s' * (passed != 1)} passed before it)"


def _describe_exit(returncode: int | None) -> str:
    if returncode is not None and returncode < 0:
        number = -returncode
        if number == signal.SIGXCPU:
            return "killed: CPU time limit exceeded"
        return f"killed by signal {_signal_name(number)}"
    return f"the process exited (code {returncode}) before the tests finished"


def _signal_name(number: int) -> str:
    """SIGALRM for 14 (`number in signal.Signals` raises TypeError before Python 3.12)."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


def _read_events(path: Path) -> list[dict]:
    if not path.exists():
        return []
    events = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            value = json.loads(line)
            if isinstance(value, dict):
                events.append(value)
    return events


def _read_capped(path: Path, limit: int) -> str:
    if not path.exists():
        return ""
    with path.open("rb") as stream:
        return stream.read(limit).decode("utf-8", errors="replace")


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _child_env() -> dict[str, str]:
    keep = ("PATH", "LANG", "LC_ALL", "TMPDIR", "SYSTEMROOT")
    return {name: os.environ[name] for name in keep if name in os.environ} | {
        "PYTHONIOENCODING": "utf-8"
    }


def _isolation(limits: SandboxLimits, python: str) -> str:
    if limits.network_isolation == "hook":
        return "hook"
    if _unshare_works(python):
        return "unshare"
    if limits.network_isolation == "unshare":
        raise RuntimeError(
            "network_isolation='unshare' but `unshare --user --net` does not work here; "
            "use 'auto' or 'hook'"
        )
    return "hook"


@functools.cache
def _unshare_works(python: str) -> bool:
    """Can we make an empty network namespace without root? Probed once per interpreter."""
    if shutil.which("unshare") is None:
        return False
    try:
        probe = subprocess.run(
            ["unshare", "--user", "--map-root-user", "--net", python, "-I", "-S", "-c", "0"],
            capture_output=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


_SLOTS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
    weakref.WeakKeyDictionary()
)


@contextlib.asynccontextmanager
async def _slot(limits: SandboxLimits):
    """At most max_concurrent sandboxes at once, so that time limits stay meaningful."""
    loop = asyncio.get_running_loop()
    if loop not in _SLOTS:
        _SLOTS[loop] = asyncio.Semaphore(limits.max_concurrent or os.cpu_count() or 1)
    async with _SLOTS[loop]:
        yield


# The harness runs inside the sandbox, standard library only. It reports through
# results.jsonl: "ready" (limits set, about to run the code), "start" before each test or
# set-up statement (where a run that never ends was), one "test" per test, "load_error"
# when the code itself does not run, and "done".
HARNESS = r'''
import ast, io, json, os, resource, signal, sys, threading, time, traceback

folder, settings = sys.argv[1], json.loads(sys.argv[2])
workdir = os.path.realpath(os.path.join(folder, "work"))
results = open(os.path.join(folder, "results.jsonl"), "w", encoding="utf-8")
solution_code = open(os.path.join(folder, "solution.py"), encoding="utf-8").read()
tests_code = open(os.path.join(folder, "tests.py"), encoding="utf-8").read()
tests_tree = ast.parse(tests_code)
test_functions = [
    node.name for node in tests_tree.body
    if isinstance(node, ast.FunctionDef) and node.name.startswith("test")
]
total = sum(isinstance(node, ast.Assert) for node in tests_tree.body) + len(test_functions)


def emit(**event):
    results.write(json.dumps(event) + "\n")
    results.flush()


def short_error(error):
    lines = traceback.format_exception_only(type(error), error)
    text = "".join(lines).strip()[-800:]
    if isinstance(error, EOFError):  # input() with nothing to read
        text += (
            " (the code reads standard input, which is empty when graded: the tests call"
            " its functions, so input belongs under `if __name__ == \"__main__\":`)"
        )
    if isinstance(error, ModuleNotFoundError):  # python -I -S: no site-packages
        text += (
            " (the sandbox runs the standard library only: installed packages such as"
            " numpy are not importable there)"
        )
    if isinstance(error, NameError) and getattr(error, "name", None) and raised_in_tests(error):
        text += " (" + defined_functions_hint(error.name) + ")"
    return text


def raised_in_tests(error):
    """Whether the tests' own line raised `error` (a NameError in the code is its own typo)."""
    frame = error.__traceback__
    while frame is not None and frame.tb_next is not None:
        frame = frame.tb_next
    return frame is not None and frame.tb_frame.f_code.co_filename == "tests.py"


def defined_functions_hint(missing):
    """The code's own functions, for tests that call one it does not define (another name)."""
    names = sorted(
        name for name, value in namespace.items()
        if callable(value) and getattr(value, "__module__", None) == "solution"
    )
    if not names:
        return f"the code defines no function; the tests call {missing}()"
    return f"the code defines {', '.join(name + '()' for name in names)}, not {missing}()"


def exit_with_parent(parent):
    """A killed grading process must not leave this one behind: an answer that sleeps never
    reaches its CPU limit."""
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(1)


threading.Thread(target=exit_with_parent, args=(settings["parent_pid"],), daemon=True).start()


def limit(name, value):
    try:
        resource.setrlimit(getattr(resource, name), (value, value))
    except (ValueError, OSError, AttributeError):
        pass  # e.g. a lower hard limit already in place


memory = settings["memory_bytes"]
limit("RLIMIT_AS", memory)
limit("RLIMIT_DATA", memory)
try:
    resource.setrlimit(resource.RLIMIT_CPU, (settings["cpu_s"], settings["cpu_s"] + 1))
except (ValueError, OSError):
    limit("RLIMIT_CPU", settings["cpu_s"])
limit("RLIMIT_FSIZE", settings["output_bytes"] + 1_000_000)
limit("RLIMIT_CORE", 0)
limit("RLIMIT_NPROC", settings["max_processes"])
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


class CappedBytes(io.RawIOBase):
    """Writes to a file descriptor until the cap (in bytes), then drops the rest silently."""

    def __init__(self, fd, cap):
        self.fd, self.left = fd, cap

    def writable(self):
        return True

    def fileno(self):
        return self.fd

    def write(self, data):
        part = bytes(data[: max(self.left, 0)])
        self.left -= len(part)
        try:
            while part:
                part = part[os.write(self.fd, part):]
        except OSError:
            self.left = 0
        return len(data)


def capped_stream(fd, cap):
    """A text stream like sys.stdout (with .buffer, .encoding, .reconfigure), capped, and
    written through at once: a killed run keeps what it printed."""
    return io.TextIOWrapper(
        CappedBytes(fd, cap), encoding="utf-8", errors="backslashreplace", write_through=True
    )


# kept referenced, as sys.__stdout__ keeps Python's: a wrapper the code builds on
# sys.stdout.buffer must not see it closed when the code replaces sys.stdout
capped_streams = tuple(capped_stream(fd, settings["output_bytes"]) for fd in (1, 2))
sys.stdout, sys.stderr = capped_streams

BLOCKED = {
    "socket.__new__", "socket.connect", "socket.bind", "socket.getaddrinfo",
    "socket.gethostbyname", "socket.gethostbyname_ex", "socket.gethostbyaddr",
    "socket.sendto", "socket.sendmsg", "os.system", "os.fork", "os.forkpty",
    "os.posix_spawn", "os.spawn", "os.exec", "subprocess.Popen", "os.kill", "os.killpg",
    "signal.pthread_kill", "ctypes.dlopen", "ctypes.dlsym", "ctypes.cdata",
    "resource.setrlimit", "resource.prlimit", "os.setuid", "os.setgid", "os.setsid",
    "os.chroot", "pty.spawn",
}
BLOCKED_IMPORTS = {"ctypes", "_ctypes", "cffi", "_multiprocessing"}
PATH_EVENTS = {
    "os.remove": (0,), "os.rmdir": (0,), "os.rename": (0, 1), "os.replace": (0, 1),
    "os.mkdir": (0,), "os.chmod": (0,), "os.chown": (0,), "os.truncate": (0,),
    "os.link": (0, 1), "os.symlink": (1,), "os.utime": (0,), "shutil.rmtree": (0,),
    "shutil.move": (0, 1), "shutil.copyfile": (1,), "os.chflags": (0,),
}
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


class SandboxViolation(PermissionError):
    pass


def inside(path):
    if isinstance(path, int):
        return True
    if isinstance(path, bytes):
        path = path.decode("utf-8", "replace")
    real = os.path.realpath(os.fspath(path))
    return real == workdir or real.startswith(workdir + os.sep) or real == os.devnull


def refuse(what):
    raise SandboxViolation(f"fugu-lite sandbox: {what} is not allowed")


def hook(event, args):
    if event in BLOCKED:
        refuse(event)
    if event == "import" and args[0].split(".")[0] in BLOCKED_IMPORTS:
        refuse(f"importing {args[0]}")
    if event == "open":
        path, mode, flags = args
        writes = any(c in mode for c in "wax+") if isinstance(mode, str) else bool(
            (flags or 0) & WRITE_FLAGS
        )
        if writes and path is not None and not inside(path):
            refuse(f"writing {path!r} (only the working folder is writable)")
    if event in PATH_EVENTS:
        for index in PATH_EVENTS[event]:
            if index < len(args) and args[index] is not None and not inside(args[index]):
                refuse(f"{event} on {args[index]!r} outside the working folder")


for name in list(sys.modules):
    if name.split(".")[0] in BLOCKED_IMPORTS:
        del sys.modules[name]


def no_fork_exec(*args, **kwargs):
    refuse("starting a process")


# `import subprocess` (or asyncio, which imports it) must work; starting a process must not.
# fork_exec raises no audit event of its own, so the module keeps a refusing stand-in.
import _posixsubprocess  # noqa: E402

_posixsubprocess.fork_exec = no_fork_exec
sys.addaudithook(hook)
emit(event="ready", total=total)

module = type(sys)("solution")
sys.modules["solution"] = module
namespace = module.__dict__
try:
    exec(compile(solution_code, "solution.py", "exec"), namespace)
except BaseException as error:  # the model's code failed: every test fails
    emit(event="load_error", error="the code raised " + short_error(error))
    for node in tests_tree.body:
        if isinstance(node, ast.Assert):
            emit(event="test", name=f"line {node.lineno}", passed=False, error="not run")
    for name in test_functions:
        emit(event="test", name=name, passed=False, error="not run")
    emit(event="done")
    results.close()
    os._exit(0)


def run(name, action):
    emit(event="start", where=f"the test {name}")
    try:
        action()
    except BaseException as error:
        emit(event="test", name=name, passed=False, error=short_error(error))
    else:
        emit(event="test", name=name, passed=True)


for node in tests_tree.body:
    code = compile(ast.Module(body=[node], type_ignores=[]), "tests.py", "exec")
    if isinstance(node, ast.Assert):
        source = ast.get_source_segment(tests_code, node) or ""
        run(f"line {node.lineno}: {source[:120]}", lambda code=code: exec(code, namespace))
    else:
        emit(event="start", where=f"the tests' set-up line {node.lineno}")
        try:
            exec(code, namespace)
        except BaseException as error:
            emit(event="setup_error", line=node.lineno, error=short_error(error))
for name in test_functions:
    run(name, lambda name=name: namespace[name]())
emit(event="done")
results.close()
sys.stdout.flush()
os._exit(0)
'''
