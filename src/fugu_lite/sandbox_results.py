"""What a sandbox run gave: its status, read from the harness's results.jsonl, the exit
and whether it timed out, with each test's outcome and the captured output."""

from __future__ import annotations

import contextlib
import json
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel

if TYPE_CHECKING:
    from .sandbox import SandboxLimits

Status = Literal["ok", "load_error", "timeout", "crashed", "internal_error", "tests_error"]
"""tests_error: the task's tests cannot run in the sandbox (an import of theirs fails)."""


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


def collect_results(
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
    tests_import = next((e for e in events if e.get("tests_import")), None)
    if tests_import is not None:  # a set-up line's, or a test's own import
        where = (
            f"line {tests_import['line']} of the tests"
            if "line" in tests_import
            else f"the test {tests_import.get('name')}"
        )
        return "tests_error", f"{where} raised {tests_import['error']}"
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
                events.append({key: _encodable(item) for key, item in value.items()})
    return events


def _encodable(value: object) -> object:
    """A message the code raised may hold a lone surrogate (`chr(0xD800)`), which no UTF-8
    file can hold (a grade's detail is written to the call log): kept as its escape."""
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value


def _read_capped(path: Path, limit: int) -> str:
    if not path.exists():
        return ""
    with path.open("rb") as stream:
        return stream.read(limit).decode("utf-8", errors="replace")
