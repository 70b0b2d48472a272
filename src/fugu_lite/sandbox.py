"""Run untrusted Python (a worker's answer) against unit tests in a limited subprocess.

Layers, from the kernel up:

- a fresh process group, killed whole at the wall-clock time limit;
- rlimits set by the harness before the code runs: CPU seconds, address space (memory),
  file size (also caps what the code can print), no core dumps, a process count;
- a network namespace with no interfaces (`unshare -rn`) when unprivileged user namespaces
  work on this machine (probed once), so no socket can reach anything;
- `python -I -S -B` (isolated, standard library only, no .pyc writes) in a temporary
  working folder (in atomic_files.user_temp_folder: a killed run's is removed by the next run);
- an audit hook installed before the code runs that refuses sockets (but the local pair an
  asyncio event loop makes, never bound or connected), subprocesses, fork, exec, signals to
  other processes, ctypes, raising rlimits, and writing or deleting files outside the
  working folder;
- stdout / stderr past `output_bytes` are dropped.

This stops the accidents of a model's code (infinite loops, huge prints, memory hogs, fork
bombs, network calls, stray file writes). It is not a security boundary against code written
to escape it: run untrusted pools in a container if that matters.
Nor can it vouch for a score against such code: the tests run in the code's own process,
which can write results.jsonl itself (every test passed, none run).

Tests are the task's `tests` code: each top-level `assert`, each top-level statement holding
one (a loop over cases) and each top-level `test*` function counts as one test; other
top-level statements run as set-up, in order. The code's own top-level asserts, loops
holding one, calls of its test functions and of unittest.main() (its examples, right or wrong,
and its own tests) are left out, also inside a top-level if, try or with.

This module starts and limits the run; the script run inside it is sandbox_harness.py, and
reading what it reported back is sandbox_results.py.
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

from .atomic_files import remove_tree, user_temp_folder, writer_prefix
from .sandbox_harness import HARNESS
from .sandbox_results import SandboxResult, collect_results


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


async def run_python_tests(
    code: str, tests: str, limits: SandboxLimits | None = None
) -> SandboxResult:
    """Run `code`, then `tests` in the same namespace, in a limited subprocess."""
    limits = limits or SandboxLimits()
    async with _slot(limits):
        # writer-named, so that the next run removes it if this process is killed
        folder = Path(tempfile.mkdtemp(prefix=writer_prefix("sandbox"), dir=user_temp_folder()))
        try:
            return await _run_in(folder, code, tests, limits)
        finally:
            remove_tree(folder)  # the code may have nested folders too deep for shutil.rmtree


async def _run_in(folder: Path, code: str, tests: str, limits: SandboxLimits) -> SandboxResult:
    workdir = _write_files(folder, code, tests)
    python = limits.python or sys.executable
    isolation = _isolation(limits, python)
    command = _harness_command(folder, limits, python, isolation)
    started = time.perf_counter()
    try:
        process = await _start(command, folder, workdir)
    except OSError as error:
        return SandboxResult(
            status="internal_error",
            detail=f"could not start the sandbox ({python}): {error}",
            network_isolation=isolation,
        )
    timed_out = await _wait_or_kill(process, limits.timeout_s)
    result = collect_results(folder, process.returncode, timed_out, limits)
    result.duration_s = time.perf_counter() - started
    result.network_isolation = isolation
    return result


def _write_files(folder: Path, code: str, tests: str) -> Path:
    """The code, its tests and the harness written into FOLDER; returns the empty working
    folder the code runs in."""
    workdir = folder / "work"
    workdir.mkdir()
    # A reply decoded from JSON may hold a lone surrogate ("\ud83d", half an emoji) that
    # UTF-8 cannot encode: written as its escape, it is the same character in a string
    # literal, nothing in a comment, and a syntax error (the code's) anywhere else.
    (folder / "solution.py").write_text(code, encoding="utf-8", errors="backslashreplace")
    (folder / "tests.py").write_text(tests, encoding="utf-8", errors="backslashreplace")
    (folder / "harness.py").write_text(HARNESS, encoding="utf-8")
    return workdir


def _harness_command(folder: Path, limits: SandboxLimits, python: str, isolation: str) -> list[str]:
    """The harness's command line with the limits it sets, inside a network namespace when
    `isolation` is "unshare"."""
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
    return command


async def _start(command: list[str], folder: Path, workdir: Path) -> asyncio.subprocess.Process:
    """The harness started in a new session (its own process group), its output going to
    FOLDER's stdout and stderr files; raises OSError when it cannot start."""
    with (folder / "stdout").open("wb") as out, (folder / "stderr").open("wb") as err:
        return await asyncio.create_subprocess_exec(
            *command,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            cwd=workdir,
            start_new_session=True,
            env=_child_env(),
        )


async def _wait_or_kill(process: asyncio.subprocess.Process, timeout_s: float) -> bool:
    """Wait up to timeout_s for the run, then kill its whole process group (also when the
    wait is cancelled); whether it timed out."""
    timed_out = False
    try:
        await asyncio.wait_for(process.wait(), timeout=timeout_s)
    except TimeoutError:
        timed_out = True
    finally:
        _kill_group(process.pid)
        if process.returncode is None:
            await process.wait()
    return timed_out


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
