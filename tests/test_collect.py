"""Reward collection against the in-process OpenAI-compatible stub: records and the call
log, resume, down workers, failed and refused calls, the summary table and the CLI."""

from __future__ import annotations

import asyncio
import math
import os
import re
import selectors
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from cli_support import (
    SIGNAL_AFTER_TWO_CALLS_AS_CONSOLE_SCRIPT,
    SIGTERM_AFTER_TWO_CALLS,
    ctrl_c_at_its_default,
    ignore_ctrl_c,
)
from conftest import (
    AnsweringTogether,
    collect_with_file_limit,
    log_lines,
    number_tasks,
    record_ids,
    run_collect,
    solver,
    stub_pool,
)
from rich.console import Console
from typer.testing import CliRunner

import fugu_lite
from fugu_lite.cli import app
from fugu_lite.collect import hashes as collect_hashes
from fugu_lite.collect import run as collect_module
from fugu_lite.collect import state as collect_state
from fugu_lite.collect.errors import CollectError
from fugu_lite.collect.hashes import grading_code_digest
from fugu_lite.collect.journal import LogEntry, default_log_path
from fugu_lite.collect.sigterm import SigtermStop, run_until_stopped
from fugu_lite.collect.summary import CollectSummary, WorkerSummary, end_of_run_lines, summary_table
from fugu_lite.schemas import prompt_hash, read_records
from fugu_lite.scoring import Grade
from fugu_lite.tasks import Task, write_tasks
from fugu_lite.testing.stub_worker import StubWorker
from fugu_lite.workers.config import PoolConfig

# -- unit: the stub -------------------------------------------------------------------------


def test_collect_writes_records_and_a_call_log(tmp_path: Path) -> None:
    tasks = number_tasks(6)
    output = tmp_path / "rewards.jsonl"
    with StubWorker(solver(tasks)) as good, StubWorker("No idea, sorry.") as bad:
        summary = run_collect(stub_pool(("good", good), ("bad", bad)), tasks, output)

    assert summary.complete and summary.records_written == 6
    records = read_records(output)
    assert sorted(r.id for r in records) == sorted(t.id for t in tasks)
    by_id = {task.id: task for task in tasks}
    for record in records:
        task = by_id[record.id]
        assert record.worker_ids == ["good", "bad"] and record.rewards == [1.0, 0.0]
        assert record.task == "arithmetic" and record.prompt == task.prompt
        assert record.split == task.resolved_split()
        # whitespace tokens: "What is i + j?" 5 in; "The answer is N." 4 / "No idea, sorry." 3 out
        assert record.costs == pytest.approx([(5 + 2 * 4) / 1e6, (5 + 2 * 3) / 1e6])
    calls = [line for line in log_lines(output) if line["event"] == "call"]
    grades = [line for line in log_lines(output) if line["event"] == "grade"]
    assert len(calls) == 12 and len(grades) == 12
    for call in calls:
        assert call["prompt_hash"] == prompt_hash(by_id[call["task_id"]].prompt_text())
        assert call["usage"]["prompt_tokens"] == 5 and call["latency_s"] > 0
        assert call["output"]
    stats = {worker.worker_id: worker for worker in summary.workers}
    assert stats["good"].mean_score == 1.0 and stats["bad"].mean_score == 0.0
    assert stats["good"].done == 6 and stats["good"].errors == 0


def test_rerun_skips_finished_cells(tmp_path: Path) -> None:
    tasks = number_tasks(4)
    output = tmp_path / "rewards.jsonl"
    everything = solver(number_tasks(6))
    with StubWorker(everything) as a, StubWorker(everything) as b:
        config = stub_pool(("a", a), ("b", b))
        run_collect(config, tasks, output)
        before = output.read_bytes()
        summary = run_collect(config, tasks, output)
        assert len(a.bodies) == 4 and len(b.bodies) == 4  # nothing was called again
        assert summary.records_written == 0 and summary.complete
        assert output.read_bytes() == before

        more = [*tasks, *number_tasks(6)[4:]]  # two new tasks: only they are called
        summary = run_collect(config, more, output)
    assert len(a.bodies) == 6 and summary.records_written == 2
    assert sorted(record_ids(output)) == sorted(t.id for t in more)


def test_a_worker_is_sent_as_many_calls_at_once_as_its_max_concurrency(tmp_path: Path) -> None:
    """No test counted a worker's calls at once: one caller too few per worker (a worker
    taking 3 calls at once sent 2 at a time, a slower collection) passed every test. The stub
    holds its answers until it has had 3 calls at once; the pool never lets it have more."""
    tasks = number_tasks(6)
    output = tmp_path / "rewards.jsonl"
    with AnsweringTogether(solver(tasks), together=3) as stub:
        summary = run_collect(stub_pool(("w", stub), max_concurrency=3), tasks, output)
    assert summary.complete and stub.max_in_flight == 3


def test_a_down_worker_is_reported_and_retried_next_run_not_scored_zero(tmp_path: Path) -> None:
    tasks = number_tasks(8)
    output = tmp_path / "rewards.jsonl"
    with StubWorker(solver(tasks)) as up:
        down = StubWorker(solver(tasks)).start()
        down_url = down.base_url
        down.stop()  # nothing listens on its port any more
        config = PoolConfig.model_validate(
            {
                "workers": [
                    stub_pool(("up", up)).workers[0].model_dump(),
                    {**stub_pool(("up", up)).workers[0].model_dump(), "id": "down",
                     "base_url": down_url, "max_concurrency": 1},
                ]
            }
        )  # fmt: skip
        summary = run_collect(config, tasks, output, down_after=2)
        stats = {worker.worker_id: worker for worker in summary.workers}
        assert stats["down"].down and "in a row failed" in stats["down"].down
        assert stats["down"].calls == 2  # then it was taken as down; no more calls
        assert stats["down"].pending == 8 and stats["down"].done == 0
        assert stats["up"].done == 8 and stats["up"].pending == 0
        assert not summary.complete and summary.records_total == 0
        assert not output.exists() or output.read_text() == ""  # no record with a 0 for it

        with StubWorker(solver(tasks)) as back:
            config.workers[1].base_url = back.base_url
            summary = run_collect(config, tasks, output)
            assert len(back.bodies) == 8
        assert len(up.bodies) == 8  # the up worker's answers were kept, not asked again
    assert summary.complete
    records = read_records(output)
    assert len(records) == 8 and all(r.rewards == [1.0, 1.0] for r in records)


def pool_with_a_down_worker(up: StubWorker, tasks: list[Task]) -> PoolConfig:
    """Workers "up" and "down", whose server is gone: no record is written while it is down,
    so every task stays pending (point config.workers[1].base_url at a server to bring it back)."""
    down = StubWorker(solver(tasks)).start()
    down_url = down.base_url
    down.stop()
    worker = stub_pool(("up", up)).workers[0].model_dump()
    return PoolConfig.model_validate(
        {"workers": [worker, {**worker, "id": "down", "base_url": down_url}]}
    )


def test_a_fixed_answer_key_regrades_saved_answers_without_new_calls(tmp_path: Path) -> None:
    tasks = number_tasks(2)
    wrong_key = [tasks[0].model_copy(update={"answer": "99"}), tasks[1]]
    output = tmp_path / "rewards.jsonl"
    with StubWorker(solver(tasks)) as up:
        config = pool_with_a_down_worker(up, tasks)
        run_collect(config, wrong_key, output, down_after=1)
        graded = {line["task_id"]: line["score"] for line in log_lines(output)
                  if line["event"] == "grade"}  # fmt: skip
        assert graded == {"add-0": 0.0, "add-1": 1.0}  # against the wrong key

        with StubWorker(solver(tasks)) as back:
            config.workers[1].base_url = back.base_url
            summary = run_collect(config, tasks, output)  # the key is fixed
        assert len(up.bodies) == 2  # its saved answers were graded again, not asked again
    assert summary.complete
    assert all(record.rewards == [1.0, 1.0] for record in read_records(output))


@pytest.mark.parametrize("logged", ["other code", "no code"])
def test_a_fixed_grader_regrades_saved_answers_of_pending_tasks_without_new_calls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, logged: str
) -> None:
    """Grades given by an older grader (an upgrade, an edited checkout) were reused on
    resume: grading_hash covers the task's answer key, not the code that grades it."""
    tasks = number_tasks(2)
    output = tmp_path / "rewards.jsonl"
    real_grade = collect_module.grade

    async def buggy_grader(task, output_text, judge=None):  # e.g. misreads "The answer is N."
        return Grade(score=0.0)

    with StubWorker(solver(tasks)) as up:
        config = pool_with_a_down_worker(up, tasks)
        monkeypatch.setattr(collect_module, "grade", buggy_grader)
        monkeypatch.setattr(collect_state, "grading_code_digest", lambda: "0" * 64)
        run_collect(config, tasks, output, down_after=1)
        grades = [line for line in log_lines(output) if line["event"] == "grade"]
        assert [line["score"] for line in grades] == [0.0, 0.0]
        assert all(line["grading_code"] == "0" * 64 for line in grades)
        if logged == "no code":  # lines of a fugu-lite that did not log it
            log = default_log_path(output)
            log.write_text(log.read_text().replace(f',"grading_code":"{"0" * 64}"', ""))

        monkeypatch.undo()  # the fixed grader, and this code's digest
        with StubWorker(solver(tasks)) as back:
            config.workers[1].base_url = back.base_url
            summary = run_collect(config, tasks, output)
        assert len(up.bodies) == 2  # its saved answers were graded again, not asked again
    assert summary.complete
    assert all(record.rewards == [1.0, 1.0] for record in read_records(output))
    reason = (
        "fugu-lite's grading code (scoring, sandbox, tasks) changed since they were graded"
        if logged == "other code"
        else "an older fugu-lite graded them and did not log its grading code"
    )
    assert summary.regrades == [
        f"2 saved answers are graded again, without asking their workers again: {reason}"
        + (" (an upgrade, or an edited checkout)" if logged == "other code" else "")
    ]
    regraded = [line for line in log_lines(output) if line["event"] == "grade"][2:]
    assert {line["grading_code"] for line in regraded} == {grading_code_digest()}
    assert real_grade is collect_module.grade


@pytest.mark.parametrize(
    ("source", "grades"),
    [("tasks.py", True), ("scoring/number.py", True), ("sandbox.py", True),
     ("sandbox_harness.py", True), ("collect/run.py", False)],
)  # fmt: skip
def test_only_an_edit_to_the_code_that_grades_changes_the_grading_code(
    tmp_path: Path, source: str, grades: bool
) -> None:
    """A saved grade holds the digest of the code that grades (tasks.py reads the answer
    keys): an edit to any of those files grades saved answers again, an edit elsewhere (the
    collection's own loop) does not."""
    package = tmp_path / "fugu_lite"
    shutil.copytree(
        Path(fugu_lite.__file__).parent, package, ignore=shutil.ignore_patterns("__pycache__")
    )
    before = fugu_lite.sources_digest(package, collect_hashes.GRADING_SOURCES)
    with (package / source).open("a") as stream:
        stream.write("# fixed\n")
    after = fugu_lite.sources_digest(package, collect_hashes.GRADING_SOURCES)
    assert (after != before) is grades


@pytest.mark.parametrize(
    "fix",
    [{"answer": "4"}, {"tests": "assert f() == 4"}, {"rubric": "Count the syllables."},
     {"case_sensitive": True}, {"grader": "exact"}],
)  # fmt: skip
def test_a_fix_to_any_part_of_a_tasks_answer_key_grades_saved_answers_again(fix: dict) -> None:
    """Each part of a task that a grade depends on besides the answer (its answer, tests,
    rubric, case_sensitive and grader) is in its grading hash: a fixed one grades the saved
    answers of unfinished tasks again, without asking their workers again."""
    task = Task(id="t", prompt="2 + 2?", answer="5", grader="number", task="arithmetic")
    fixed = task.model_copy(update=fix)
    assert collect_hashes.grading_hash(fixed) != collect_hashes.grading_hash(task)


def test_grading_errors_stay_pending_and_are_regraded_without_a_new_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tasks = number_tasks(3)
    output = tmp_path / "rewards.jsonl"
    real_grade = collect_module.grade

    async def broken_sandbox(task, output_text, judge=None):  # a grader that cannot run
        if task.id == "add-1":
            return Grade(score=None, error="sandbox unavailable")
        return await real_grade(task, output_text, judge)

    with StubWorker(solver(tasks)) as stub:
        config = stub_pool(("w", stub))
        monkeypatch.setattr(collect_module, "grade", broken_sandbox)
        summary = run_collect(config, tasks, output)
        assert summary.records_total == 2 and "add-1" not in record_ids(output)
        assert summary.workers[0].errors == 1 and summary.workers[0].pending == 1
        failed = [line for line in log_lines(output) if line.get("grade_error")]
        assert failed and failed[0]["task_id"] == "add-1" and "score" not in failed[0]

        monkeypatch.setattr(collect_module, "grade", real_grade)
        summary = run_collect(config, tasks, output)
        assert len(stub.bodies) == 3  # regraded from the logged answer
    assert summary.complete and sorted(record_ids(output)) == ["add-0", "add-1", "add-2"]


@pytest.mark.parametrize(
    ("verdict", "said"),
    [(1.5, "grader returned 1.5, not in [0, 1]"), (-0.5, "grader returned -0.5, not in [0, 1]"),
     (math.nan, "grader returned nan, not in [0, 1]"),
     (RuntimeError("regex too big"), "grader raised RuntimeError: regex too big")],
)  # fmt: skip
def test_a_grader_that_raises_or_scores_out_of_range_leaves_the_answer_to_grade(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, verdict: float | Exception, said: str
) -> None:
    """A grader bug (an exception, a score outside [0, 1]) must neither end the run nor
    become a reward: the answer stays ungraded, the error is said, and the next run grades
    it again without asking its worker again."""
    tasks = number_tasks(2)
    output = tmp_path / "rewards.jsonl"
    real_grade = collect_module.grade

    async def buggy(task, output_text, judge=None):
        if task.id != "add-1":
            return await real_grade(task, output_text, judge)
        if isinstance(verdict, Exception):
            raise verdict
        return Grade(score=verdict)

    with StubWorker(solver(tasks)) as stub:
        config = stub_pool(("w", stub))
        monkeypatch.setattr(collect_module, "grade", buggy)
        summary = run_collect(config, tasks, output)
        assert record_ids(output) == ["add-0"] and summary.workers[0].ungraded == 1
        assert summary.workers[0].grade_error == f"task add-1: {said}"

        monkeypatch.setattr(collect_module, "grade", real_grade)
        summary = run_collect(config, tasks, output)
        assert len(stub.bodies) == 2  # graded again from the logged answer
    assert summary.complete and all(r.rewards == [1.0] for r in read_records(output))


def test_answers_are_graded_here_two_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A grader that runs here (the code grader's sandbox takes a core) has 2 grade slots: no
    test counted grades at once, so grading every answer as it came (as many sandboxes at
    once as answers in flight) passed every test."""
    tasks = number_tasks(8)
    output = tmp_path / "rewards.jsonl"
    real_grade = collect_module.grade
    at_once = [0, 0]  # now, most

    async def slow(task, output_text, judge=None):
        at_once[0] += 1
        at_once[1] = max(at_once)
        await asyncio.sleep(0.2)
        at_once[0] -= 1
        return await real_grade(task, output_text, judge)

    monkeypatch.setattr(collect_module, "grade", slow)
    with StubWorker(solver(tasks)) as stub:
        summary = run_collect(stub_pool(("w", stub), max_concurrency=4), tasks, output)
    assert summary.complete and at_once[1] == 2


def test_a_worker_whose_quota_is_used_up_is_down_at_once(tmp_path: Path) -> None:
    """OpenAI's 429 insufficient_quota (no credit left) was a rate limit like any other: every
    task's call was sent and retried with backoff, for a refusal that could not change; then
    its one call was still retried. Its down line said to add credit twice (the error's own
    fix, then its own); once now."""
    tasks = number_tasks(6)
    with StubWorker(solver(tasks)) as good, StubWorker(mode="quota") as broke:
        config = stub_pool(("good", good), ("broke", broke), max_concurrency=1)
        summary = run_collect(config, tasks, tmp_path / "r.jsonl")
    stats = {worker.worker_id: worker for worker in summary.workers}
    assert stats["broke"].calls == 1 and len(broke.bodies) == 1  # one call, not retried
    assert "quota is used up" in (stats["broke"].down or "")
    assert "out of quota" in (stats["broke"].down or "")
    assert (stats["broke"].down or "").count("add credit") == 1, stats["broke"].down
    assert stats["broke"].pending == 6 and stats["good"].done == 6 and not summary.complete


@pytest.mark.parametrize("status", ["401", "403", "404"])
def test_a_worker_refusing_every_call_for_its_settings_is_down_after_3(
    tmp_path: Path, status: str
) -> None:
    """A bad key (401), no access (403) or a wrong model name (404) refuses every call alike:
    each task's call was still sent, failed and logged, to the end of the run. (A paid
    remote API with a wrong key, faked by the stub.)"""
    tasks = number_tasks(8)
    with StubWorker(solver(tasks)) as good, StubWorker(mode=status) as bad:
        config = stub_pool(("good", good), ("bad", bad), max_concurrency=1)
        summary = run_collect(config, tasks, tmp_path / "r.jsonl")
    stats = {worker.worker_id: worker for worker in summary.workers}
    assert stats["bad"].calls == 3 and len(bad.bodies) == 3  # then taken as down: no more
    down = stats["bad"].down or ""
    assert f"its last 3 calls were refused with HTTP {status}" in down
    fix = {"401": "fix api_key_env", "403": "fix api_key_env", "404": "fix model or base_url"}
    assert down.count(fix[status]) == 1  # said once, not twice
    assert stats["bad"].pending == 8 and stats["good"].done == 8 and not summary.complete
    lines = end_of_run_lines(summary, config)
    assert any("worker bad is down" in line and "fix " in line for line in lines)


def test_a_worker_whose_model_name_is_refused_with_a_400_is_down_after_3(tmp_path: Path) -> None:
    """A model name the worker's server does not know (a typo) is a 404 at OpenAI but a 400
    at Mistral's API ("Invalid model: ..."), DeepSeek's or a LiteLLM proxy: it was taken
    for a fault of each request, every task's call sent and failed to the end of the run."""
    tasks = number_tasks(8)
    with StubWorker(solver(tasks)) as good, StubWorker(mode="bad_model") as bad:
        config = stub_pool(("good", good), ("bad", bad), max_concurrency=1)
        summary = run_collect(config, tasks, tmp_path / "r.jsonl")
    stats = {worker.worker_id: worker for worker in summary.workers}
    assert stats["bad"].calls == 3 and len(bad.bodies) == 3
    down = stats["bad"].down or ""
    assert "its last 3 calls were refused with HTTP 400" in down
    assert "fix model or base_url" in down and "Invalid model: stub-model" in down
    assert stats["good"].done == 8


def test_a_worker_failing_every_call_with_a_5xx_is_down_after_3(tmp_path: Path) -> None:
    """A gateway whose model is gone answers every call with a 500 or 503: each task's call
    was still sent and retried with backoff to the end of the run (three timeouts in a row
    took a worker down, three 5xx never did)."""
    tasks = number_tasks(8)
    with StubWorker(solver(tasks)) as good, StubWorker(mode="503") as broken:
        config = stub_pool(("good", good), ("broken", broken), max_concurrency=1)
        summary = run_collect(config, tasks, tmp_path / "r.jsonl")
    stats = {worker.worker_id: worker for worker in summary.workers}
    assert stats["broken"].calls == 3 and len(broken.bodies) == 6  # each call and its retry
    assert "3 calls in a row failed (server): worker broken: server: HTTP 503" in (
        stats["broken"].down or ""
    )
    assert stats["broken"].pending == 8 and stats["good"].done == 8 and not summary.complete
    with StubWorker(solver(tasks)) as flaky:  # 5xx not in a row: up, every task asked
        flaky.fail_next("500", "500", "ok", "500", "500", "ok", "500", "500", "ok", "500", "500")
        config = stub_pool(("flaky", flaky), max_concurrency=1, max_retries=0)
        summary = run_collect(config, tasks, tmp_path / "flaky.jsonl")
    assert summary.workers[0].down is None and summary.workers[0].calls == 8


def test_a_worker_timing_out_on_every_call_is_down_after_3(tmp_path: Path) -> None:
    """A server that hangs (a model that never finishes loading, a stuck GPU) times out on
    every call: after three timeouts in a row it is down, its tasks left for the next run
    and not scored 0, instead of each task waiting out its timeout to the end of the run."""
    tasks = number_tasks(6)
    with StubWorker(solver(tasks)) as good, StubWorker(mode="hang") as hung:
        config = stub_pool(("good", good), ("hung", hung), max_concurrency=1, max_retries=0,
                           timeout_s=0.3)  # fmt: skip
        summary = run_collect(config, tasks, tmp_path / "r.jsonl")
    stats = {worker.worker_id: worker for worker in summary.workers}
    assert stats["hung"].calls == 3 and len(hung.bodies) == 3
    assert "3 calls in a row failed (timeout)" in (stats["hung"].down or "")
    assert stats["hung"].pending == 6 and stats["good"].done == 6 and not summary.complete


def test_refusals_not_in_a_row_or_of_other_statuses_keep_the_worker_up(tmp_path: Path) -> None:
    """A proxy's stray 401 or 404 must not take a healthy worker down for the run."""
    tasks = number_tasks(8)
    with StubWorker(solver(tasks)) as flaky:
        config = stub_pool(("flaky", flaky), max_concurrency=1, max_retries=0)
        flaky.fail_next("401", "401", "ok", "404", "404", "401", "400", "404")
        summary = run_collect(config, tasks, tmp_path / "r.jsonl")
    worker = summary.workers[0]
    assert worker.down is None and worker.calls == 8 and worker.failed_calls == 7


def test_failed_calls_are_logged_and_retried_next_run(tmp_path: Path) -> None:
    tasks = number_tasks(3)
    output = tmp_path / "rewards.jsonl"
    with StubWorker(solver(tasks)) as stub:
        config = stub_pool(("w", stub), max_concurrency=1, max_retries=0)
        stub.fail_next("400")  # a client error: not retried in this run, not scored 0
        summary = run_collect(config, tasks, output)
        assert summary.records_total == 2 and summary.workers[0].errors == 1
        errors = [line for line in log_lines(output) if line.get("error")]
        assert len(errors) == 1 and errors[0]["error_kind"] == "client"
        summary = run_collect(config, tasks, output)
    assert summary.complete and len(stub.bodies) == 4


@pytest.mark.parametrize(("mode", "refused"), [("404", True), ("500", False)])
def test_failed_calls_are_explained_at_the_end(tmp_path: Path, mode: str, refused: bool) -> None:
    """A worker whose every call failed (a wrong model name: 404; a 500 after the retries)
    showed only an `errors` count and "run the same command again", which for a refused
    request fails the same way again: the reason was only in the call log."""
    tasks = number_tasks(2)
    write_tasks(tmp_path / "tasks.jsonl", tasks)
    with StubWorker(solver(tasks)) as good, StubWorker(solver(tasks), mode=mode) as bad:
        pool_path = tmp_path / "pool.yaml"
        config = stub_pool(("good", good), ("bad", bad), max_concurrency=1)
        pool_path.write_text(yaml.safe_dump(config.model_dump(mode="json")))
        args = ["collect", "--pool", str(pool_path), "-t", str(tmp_path / "tasks.jsonl"),
                "-o", str(tmp_path / "r.jsonl"), "--no-progress"]  # fmt: skip
        result = CliRunner().invoke(app, args, env={"COLUMNS": "400"})
    assert result.exit_code == 1, result.output
    assert "2 calls to bad failed" in result.stderr and "calls to good" not in result.stderr
    kind = "client" if refused else "server"
    assert f"the first: task add-0: worker bad: {kind}: HTTP {mode}" in result.stderr
    assert ("refused again until the worker's settings" in result.stderr) == refused


def test_a_run_that_wrote_no_record_says_so(tmp_path: Path) -> None:
    """`records: PATH` was printed under '0/2 records' with no such file: the path read as
    where the records were."""
    tasks = number_tasks(2)
    write_tasks(tmp_path / "tasks.jsonl", tasks)
    output = tmp_path / "r.jsonl"
    with StubWorker(solver(tasks)) as good, StubWorker(solver(tasks), mode="500") as bad:
        pool_path = tmp_path / "pool.yaml"
        config = stub_pool(("good", good), ("bad", bad), max_concurrency=1)
        pool_path.write_text(yaml.safe_dump(config.model_dump(mode="json")))
        args = ["collect", "--pool", str(pool_path), "-t", str(tmp_path / "tasks.jsonl"),
                "-o", str(output), "--no-progress"]  # fmt: skip
        result = CliRunner().invoke(app, args, env={"COLUMNS": "400"})
        assert result.exit_code == 1, result.output
        assert not output.exists()
        assert f"records: none written to {output} (a task's record is written once every " in (
            result.stdout
        )
        assert f"call log: {default_log_path(output)}" in result.stdout
        bad.mode = "ok"
        result = CliRunner().invoke(app, args, env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    assert f"records: {output} · call log: " in result.stdout


def test_a_prompt_over_a_workers_context_is_scored_0_and_said(tmp_path: Path) -> None:
    """A prompt longer than a worker's context (its 400 context_length_exceeded) was a
    failed call left pending: asked again on every run and refused again, the task never got
    a record and `collect` exited 1 for ever, telling the user to run it again."""
    tasks = number_tasks(3)
    write_tasks(tmp_path / "tasks.jsonl", tasks)
    output = tmp_path / "r.jsonl"
    everything = solver(number_tasks(4))
    with StubWorker(everything) as short, StubWorker(everything) as long:
        pool_path = tmp_path / "pool.yaml"
        config = stub_pool(("short", short), ("long", long), max_concurrency=1)
        pool_path.write_text(yaml.safe_dump(config.model_dump(mode="json")))
        args = ["collect", "--pool", str(pool_path), "-t", str(tmp_path / "tasks.jsonl"),
                "-o", str(output), "--no-progress"]  # fmt: skip
        short.fail_next("context")  # add-0 is over its context
        result = CliRunner().invoke(app, args, env={"COLUMNS": "400"})
        assert result.exit_code == 0, result.output
        assert "1 prompt is longer than the context of short" in result.stderr
        assert "the first: task add-0: worker short: client: HTTP 400: This model's" in (
            result.stderr
        )
        records = {record.id: record for record in read_records(output)}
        assert records["add-0"].rewards == [0.0, 1.0] and records["add-1"].rewards == [1, 1]
        assert records["add-0"].costs is not None and records["add-0"].costs[0] == 0.0
        grade = next(
            line
            for line in log_lines(output)
            if line["event"] == "grade"
            and (line["task_id"], line["worker_id"]) == ("add-0", "short")
        )
        assert grade["score"] == 0.0 and grade["detail"].startswith("refused: worker short")
        refusal = next(line for line in log_lines(output) if line.get("error_code"))
        assert refusal.get("cost") == 0.0  # billed nothing: a known cost in the call log too

        write_tasks(tmp_path / "tasks.jsonl", number_tasks(4))  # add-0's refusal is reused
        result = CliRunner().invoke(app, args, env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    assert len(short.bodies) == 4 and "longer than the context" not in result.stderr
    summary = {
        worker.worker_id: worker for worker in run_collect(config, number_tasks(4), output).workers
    }
    assert summary["short"].done == 4 and summary["short"].mean_score == 0.75


@pytest.mark.parametrize("mode", ["vllm_context", "prompt_too_long", "tgi_context"])
def test_a_context_refusal_without_its_code_is_scored_0_not_left_pending(
    tmp_path: Path, mode: str
) -> None:
    """vLLM (and Anthropic's compatible API, faked by the stub) refuse a prompt over the
    context with a 400 holding no context_length_exceeded code, Hugging Face TGI with a 422
    `Input validation error`: the cell was a failed call, asked again and refused again on
    every run, so the task never got a record."""
    tasks = number_tasks(3)
    output = tmp_path / "r.jsonl"
    with StubWorker(solver(tasks)) as short, StubWorker(solver(tasks)) as long:
        config = stub_pool(("short", short), ("long", long), max_concurrency=1)
        short.fail_next(mode)  # add-0 is over its context
        summary = run_collect(config, tasks, output)
        assert summary.complete and len(short.bodies) == 3
        refused = summary.workers[0]
        assert refused.refused == 1 and refused.failed_calls == 0 and refused.mean_score == 2 / 3
        records = {record.id: record for record in read_records(output)}
        assert records["add-0"].rewards == [0.0, 1.0]
        assert run_collect(config, tasks, output).complete and len(short.bodies) == 3  # reused


@pytest.mark.parametrize("mode", ["vllm_context", "tgi_context"])
def test_a_prompt_refused_for_the_workers_max_tokens_says_to_lower_it(
    tmp_path: Path, mode: str
) -> None:
    """A prompt that fits the context, refused because the worker's own max_tokens does not
    fit beside it, was said to be 'longer than the context', to be given a longer context,
    where lowering max_tokens has it answered."""
    tasks = number_tasks(3)
    write_tasks(tmp_path / "tasks.jsonl", tasks)
    output = tmp_path / "r.jsonl"
    with StubWorker(solver(tasks)) as greedy, StubWorker(solver(tasks)) as long:
        greedy.context_tokens = 100
        greedy.fail_next(mode, "context")  # add-0: max_tokens 90 over; add-1: the prompt over
        pool_path = tmp_path / "pool.yaml"
        config = stub_pool(("greedy", greedy), ("long", long), max_concurrency=1,
                           params={"max_tokens": 90})  # fmt: skip
        pool_path.write_text(yaml.safe_dump(config.model_dump(mode="json")))
        args = ["collect", "--pool", str(pool_path), "-t", str(tmp_path / "tasks.jsonl"),
                "-o", str(output), "--no-progress"]  # fmt: skip
        result = CliRunner().invoke(app, args, env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    said = [line for line in result.stderr.splitlines() if "greedy" in line]
    assert any("1 prompt fits the context of greedy, but not beside its max_tokens of 90" in line
               and "lower its params.max_tokens" in line and "task add-0" in line
               for line in said), result.stderr  # fmt: skip
    assert any("1 prompt is longer than the context of greedy" in line and "task add-1" in line
               for line in said), result.stderr  # fmt: skip
    records = {record.id: record.rewards for record in read_records(output)}
    assert records == {"add-0": [0.0, 1.0], "add-1": [0.0, 1.0], "add-2": [1.0, 1.0]}


@pytest.mark.parametrize(
    ("mode", "asked"), [("vllm_context", "64 in the completion"), ("tgi_context", "64 `max_new")]
)
def test_a_max_tokens_as_long_as_the_context_is_no_prompt_refusal(
    tmp_path: Path, mode: str, asked: str
) -> None:
    """vLLM's (or TGI's) same words when the worker's own max_tokens fills its context: every
    prompt is refused alike, for a setting to fix, so none is scored 0 for it."""
    tasks = number_tasks(2)
    output = tmp_path / "r.jsonl"
    with StubWorker(solver(tasks), mode=mode) as stub:
        stub.context_tokens = 64
        config = stub_pool(("w", stub), max_concurrency=1, params={"max_tokens": 64})
        summary = run_collect(config, tasks, output)
    worker = summary.workers[0]
    assert worker.refused == 0 and worker.failed_calls == 2 and worker.pending == 2
    assert worker.call_error is not None and asked in worker.call_error


def test_answers_cut_at_the_token_limit_are_flagged(tmp_path: Path) -> None:
    """An answer that stopped at the worker's max_tokens (finish_reason "length": a step by
    step answer cut before its final line) was graded as it was, scoring 0, with nothing in
    the call log or the output to tell it from a wrong answer."""
    tasks = number_tasks(3)
    write_tasks(tmp_path / "tasks.jsonl", tasks)
    output = tmp_path / "r.jsonl"
    with StubWorker(solver(tasks)) as whole, StubWorker("Let us think. First,") as cut:
        cut.finish_reason = "length"
        pool_path = tmp_path / "pool.yaml"
        config = stub_pool(("whole", whole), ("cut", cut), params={"max_tokens": 24})
        pool_path.write_text(yaml.safe_dump(config.model_dump(mode="json")))
        args = ["collect", "--pool", str(pool_path), "-t", str(tmp_path / "tasks.jsonl"),
                "-o", str(output), "--no-progress"]  # fmt: skip
        result = CliRunner().invoke(app, args, env={"COLUMNS": "400"})
        assert result.exit_code == 0, result.output
        note = "3 of the 3 graded answers of cut stopped at its token limit (max_tokens 24)"
        assert note in result.stderr and "answers of whole" not in result.stderr
        calls = [line for line in log_lines(output) if line["event"] == "call"]
        assert {line["worker_id"]: line["finish_reason"] for line in calls} == {
            "whole": "stop", "cut": "length"
        }  # fmt: skip
        again = CliRunner().invoke(app, args, env={"COLUMNS": "400"})  # resumed: still said
    assert again.exit_code == 0 and note in again.stderr
    assert all(record.rewards == [1.0, 0.0] for record in read_records(output))


def test_answers_withheld_by_a_content_filter_are_flagged(tmp_path: Path) -> None:
    """An answer its provider's content filter withheld (finish_reason "content_filter",
    Azure OpenAI's, often with no content) was graded as an empty answer, scoring 0, with
    nothing at the end of the run to tell it from a wrong one."""
    tasks = number_tasks(2)
    output = tmp_path / "r.jsonl"
    with StubWorker(solver(tasks)) as whole, StubWorker("") as filtered:
        filtered.finish_reason = "content_filter"
        config = stub_pool(("whole", whole), ("filtered", filtered))
        summary = run_collect(config, tasks, output)
    lines = end_of_run_lines(summary, config)
    note = "2 of the 2 graded answers of filtered were withheld or cut by its provider's content"
    assert any(note in line for line in lines)
    assert not any("of whole were withheld" in line for line in lines)
    assert [worker.filtered for worker in summary.workers] == [0, 2]


def test_answers_cut_at_max_completion_tokens_name_that_limit() -> None:
    """A worker limited by max_completion_tokens (OpenAI's o-series refuse max_tokens) was
    told to raise its params.max_tokens, which it does not have."""
    config = PoolConfig.model_validate(
        {"workers": [{"id": "o", "model": "o4-mini", "base_url": "http://127.0.0.1:9/v1",
                      "params": {"max_completion_tokens": 300}}]}
    )  # fmt: skip
    worker = WorkerSummary(worker_id="o", done=4, pending=0, calls=4, errors=0, cut=2,
                           mean_score=0.5, cost=0.0, mean_latency_s=1.0)  # fmt: skip
    summary = CollectSummary(output="r.jsonl", log="r.calls.jsonl", tasks=4, records_total=4,
                             records_written=4, workers=[worker])  # fmt: skip
    [note] = end_of_run_lines(summary, config)
    assert "stopped at its token limit (max_completion_tokens 300)" in note
    assert "raise its params.max_completion_tokens" in note and "max_tokens" not in note.replace(
        "max_completion_tokens", ""
    )


def test_cli_collect(tmp_path: Path) -> None:
    tasks = number_tasks(3)
    tasks_path = tmp_path / "tasks.jsonl"
    write_tasks(tasks_path, tasks)
    output = tmp_path / "rewards.jsonl"
    runner = CliRunner()
    with StubWorker(solver(tasks)) as stub:
        pool_path = tmp_path / "pool.yaml"
        pool_path.write_text(yaml.safe_dump(stub_pool(("w", stub)).model_dump(mode="json")))
        args = ["collect", "--pool", str(pool_path), "--tasks", str(tasks_path), "-o", str(output)]
        result = runner.invoke(app, [*args, "--no-progress"])
        assert result.exit_code == 0, result.output
        assert "3/3 records" in result.output
        stub.mode = "500"
        result = runner.invoke(app, [*args, "--no-progress", "-t", str(tmp_path / "more.jsonl")])
        assert result.exit_code == 2 and "more.jsonl" in result.output

        write_tasks(tasks_path, number_tasks(5))
        result = runner.invoke(app, [*args, "--no-progress"])
    assert result.exit_code == 1, result.output  # two tasks could not be answered
    assert "run the same command again" in result.output
    assert len(record_ids(output)) == 3


def test_a_finished_collection_is_summarised_without_starting_the_pool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Running `collect` again on a finished collection (to see its table) started every
    worker: each local llama.cpp server loaded its model (minutes for a large GGUF), and a
    worker's API key had to be exported again although no worker was called."""
    tasks = number_tasks(3)
    tasks_path = tmp_path / "tasks.jsonl"
    write_tasks(tasks_path, tasks)
    output = tmp_path / "rewards.jsonl"
    monkeypatch.setenv("STUB_KEY", "stub-key-123")
    with StubWorker(solver(tasks)) as stub:
        pool_path = tmp_path / "pool.yaml"
        config = stub_pool(("w", stub), api_key_env="STUB_KEY")
        pool_path.write_text(yaml.safe_dump(config.model_dump(mode="json")))
        args = ["collect", "--pool", str(pool_path), "-t", str(tasks_path), "-o", str(output),
                "--no-progress"]  # fmt: skip
        assert CliRunner().invoke(app, args).exit_code == 0
        monkeypatch.delenv("STUB_KEY")
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
        assert "3/3 records" in result.stdout and len(stub.bodies) == 3
        write_tasks(tasks_path, number_tasks(4))  # one more task: the pool is needed again
        result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and "STUB_KEY, which is not set" in result.output


def test_a_worker_without_graded_answers_has_no_cost_in_the_table(tmp_path: Path) -> None:
    """A worker down from the start (its server gone) has no graded answer: the table showed
    its score and latency as '-' but its cost as '$0', read as answers given for free."""
    tasks = number_tasks(2)
    with StubWorker(solver(tasks)) as up:
        summary = run_collect(pool_with_a_down_worker(up, tasks), tasks, tmp_path / "r.jsonl",
                              down_after=1)  # fmt: skip
    console = Console(width=100, record=True)
    console.print(summary_table(summary))
    rows = {line.split()[0]: line.split()[-3:] for line in console.export_text().splitlines()
            if line.split()[:1] in (["up"], ["down"])}  # fmt: skip
    assert rows["down"] == ["-", "-", "-"], rows  # score, cost, latency
    assert rows["up"][0] == "1.000" and rows["up"][1].startswith("$0.0000"), rows


def test_the_summary_table_keeps_its_numbers_whole_beside_long_worker_ids() -> None:
    """Piped (80 columns), the table of a pool with long worker ids, as remote models have
    them, cut every number to '…' (and the ids too): nothing of the summary could be read."""
    ids = ["meta-llama/Llama-3.1-70B-Instruct-Turbo", "openrouter/anthropic/claude-3.5-sonnet"]
    workers = [
        WorkerSummary(worker_id=worker_id, done=1200, pending=10, calls=1210, errors=3,
                      ungraded=0, mean_score=0.5, cost=0.0123, mean_latency_s=12.25)
        for worker_id in ids
    ]  # fmt: skip
    summary = CollectSummary(output="r.jsonl", log="r.calls.jsonl", tasks=1300,
                             records_total=1200, records_written=0, workers=workers)  # fmt: skip
    console = Console(width=80, record=True)
    console.print(summary_table(summary))
    text = console.export_text()
    assert "…" not in text, text
    rows = [line for line in text.splitlines() if "1210" in line]
    assert len(rows) == 2 and all(re.search(r"1200 +10 +1210 +3 +0\.500 +\$0\.012 +12\.25s", row)
                                  for row in rows), text  # fmt: skip
    lines = text.splitlines()
    width = next(line.index(" done") for line in lines if " done" in line)
    first_column = "".join(line[:width].strip() for line in lines)
    assert all(worker_id in first_column for worker_id in ids), text


def test_cli_collect_shows_its_progress_in_a_log(tmp_path: Path) -> None:
    """With stderr piped (a CI log, `2> log`, nohup), rich drew the progress bars only once
    the run ended: hours of collection said nothing until then."""
    tasks = number_tasks(20)
    tasks_path = tmp_path / "tasks.jsonl"
    write_tasks(tasks_path, tasks)
    with StubWorker(solver(tasks)) as stub:
        pool_path = tmp_path / "pool.yaml"
        pool_path.write_text(yaml.safe_dump(stub_pool(("w", stub)).model_dump(mode="json")))
        args = ["collect", "--pool", str(pool_path), "-t", str(tasks_path),
                "-o", str(tmp_path / "rewards.jsonl")]  # fmt: skip
        result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith("w: ")]
    assert lines == [f"w: {done}/20" for done in range(2, 21, 2)], result.stderr


def test_cli_collect_refuses_an_unusable_output_before_starting(tmp_path: Path) -> None:
    write_tasks(tmp_path / "t.jsonl", number_tasks(1))
    (tmp_path / "afile").write_text("x")
    for flag, path in (("-o", tmp_path), ("-o", tmp_path / "afile" / "r.jsonl"),
                       ("--log", tmp_path)):  # fmt: skip
        output = tmp_path / "r.jsonl" if flag == "--log" else path
        extra = ["--log", str(path)] if flag == "--log" else []
        result = CliRunner().invoke(
            app, ["collect", "-t", str(tmp_path / "t.jsonl"), "-o", str(output), *extra]
        )
        assert result.exit_code == 2, result.output
        assert f"{flag} {path}" in " ".join(result.output.split())


def test_cli_collect_refuses_one_file_for_two_roles(tmp_path: Path) -> None:
    """`--log` naming the records file wrote the call log into it (the records could no
    longer be read), and the task file given as -o was refused with advice to 'fix or
    delete that line' of the task file (and of the pool file)."""
    tasks_path = tmp_path / "tasks.jsonl"
    write_tasks(tasks_path, number_tasks(2))
    tasks_text = tasks_path.read_text()
    output = tmp_path / "rewards.jsonl"
    default_log_path(output).write_text(tasks_text)
    (tmp_path / "hard.jsonl").hardlink_to(tasks_path)  # one file, two names
    (tmp_path / "soft.jsonl").symlink_to(pool_path := tmp_path / "pool.yaml")
    with StubWorker("The answer is 1.") as stub:
        pool_path.write_text(yaml.safe_dump(stub_pool(("w", stub)).model_dump(mode="json")))
        pool_text = pool_path.read_text()
        base = ["collect", "--pool", str(pool_path), "-t", str(tasks_path), "--no-progress"]
        cases = [
            (["-o", str(output), "--log", str(output)], "is the records file (-o) itself"),
            (["-o", str(tasks_path)], "is the task file (--tasks) itself"),
            (["-o", str(output), "--log", str(tasks_path)], "is the task file (--tasks) itself"),
            (["-o", str(tmp_path / "tasks.calls.jsonl"), "--log", str(tmp_path / "x" / ".." /
              "tasks.calls.jsonl")], "is the records file (-o) itself"),
            # it said "pool.yaml, line 1: not valid JSON ...; fix or delete that line"
            (["-o", str(pool_path)], "is the pool file (--pool) itself"),
            (["-o", str(output), "--log", str(pool_path)], "is the pool file (--pool) itself"),
            # a task file named as -o's call log is by default
            (["-o", str(output), "-t", str(default_log_path(output))],
             f"the call log {default_log_path(output)} is the task file (--tasks) itself"),
            (["-o", str(tmp_path / "hard.jsonl")], "is the task file (--tasks) itself"),
            (["-o", str(output), "--log", str(tmp_path / "hard.jsonl")],
             "is the task file (--tasks) itself"),
            (["-o", str(tmp_path / "soft.jsonl")], "is the pool file (--pool) itself"),
        ]  # fmt: skip
        for args, expected in cases:
            result = CliRunner().invoke(app, [*base, *args], env={"COLUMNS": "400"})
            assert result.exit_code == 2 and expected in result.output, result.output
        assert not stub.bodies
    assert tasks_path.read_text() == tasks_text and pool_path.read_text() == pool_text
    assert default_log_path(output).read_text() == tasks_text
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "hard.jsonl",
        "pool.yaml",
        "rewards.calls.jsonl",
        "soft.jsonl",
        "tasks.jsonl",
    ]


def test_cli_bad_pool_file(tmp_path: Path) -> None:
    (tmp_path / "pool.yaml").write_text("workers:\n  - {id: a, model: m}\n")
    write_tasks(tmp_path / "t.jsonl", number_tasks(1))
    result = CliRunner().invoke(
        app,
        ["collect", "--pool", str(tmp_path / "pool.yaml"), "-t", str(tmp_path / "t.jsonl"),
         "-o", str(tmp_path / "r.jsonl")],
    )  # fmt: skip
    assert result.exit_code == 2 and "needs a base_url" in result.output
    no_scheme = "workers:\n  - {id: a, model: m, base_url: 127.0.0.1:9/v1}\n"
    (tmp_path / "pool.yaml").write_text(no_scheme)
    result = CliRunner().invoke(
        app,
        ["collect", "--pool", str(tmp_path / "pool.yaml"), "-t", str(tmp_path / "t.jsonl"),
         "-o", str(tmp_path / "r.jsonl")],
    )  # fmt: skip
    assert result.exit_code == 2
    assert "needs its scheme, e.g. http://127.0.0.1:9/v1" in " ".join(result.output.split())


def test_answers_cut_inside_their_thinking_are_said_to_have_no_answer(tmp_path: Path) -> None:
    """A reasoning worker stopped at max_tokens while thinking gave no answer; nothing said
    so, and its draft (the number inside `<think>`) was graded as its answer."""
    tasks = number_tasks(2)
    draft = "<think>\nThe answer is " + tasks[0].answer + ". Let me check that"
    with StubWorker(solver(tasks)) as whole, StubWorker(draft) as thinker:
        thinker.finish_reason = "length"
        config = stub_pool(("whole", whole), ("thinker", thinker), params={"max_tokens": 24})
        summary = run_collect(config, tasks, tmp_path / "r.jsonl")
    lines = end_of_run_lines(summary, config)
    note = "2 of the 2 graded answers of thinker stopped inside their thinking"
    assert any(note in line and "raise its params.max_tokens" in line for line in lines)
    assert not any("answers of whole stopped inside" in line for line in lines)
    assert [worker.cut_in_thinking for worker in summary.workers] == [0, 2]
    assert summary.workers[1].mean_score == 0.0
    with StubWorker("") as silent:  # an empty answer that ended on its own: not cut anywhere
        config = stub_pool(("silent", silent), params={"max_tokens": 24})
        summary = run_collect(config, tasks, tmp_path / "silent.jsonl")
    assert [(worker.done, worker.cut_in_thinking) for worker in summary.workers] == [(2, 0)]
    assert not any("thinking" in line for line in end_of_run_lines(summary, config))


def test_a_reasoning_field_is_not_the_answer_and_a_cut_there_is_said(tmp_path: Path) -> None:
    """A reasoning parser (llama.cpp's, vLLM's) puts the thinking in `reasoning_content`: its
    draft is not the answer, and a reply cut while thinking (empty content at the token
    limit) gave no answer, which was noted only as an answer cut short."""
    tasks = number_tasks(2)
    with (
        StubWorker(solver(tasks), mode="reasoning") as whole,
        StubWorker("", mode="reasoning") as cut,
    ):
        cut.finish_reason = "length"
        config = stub_pool(("whole", whole), ("cut", cut), params={"max_tokens": 24})
        summary = run_collect(config, tasks, tmp_path / "r.jsonl")
    assert [worker.mean_score for worker in summary.workers] == [1.0, 0.0]
    assert [worker.cut_in_thinking for worker in summary.workers] == [0, 2]
    note = "2 of the 2 graded answers of cut stopped inside their thinking (max_tokens 24)"
    assert any(note in line for line in end_of_run_lines(summary, config))


def test_a_grade_line_that_cannot_be_written_ends_the_run_with_its_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A grading task whose line could not be written (a full disk) was dropped unseen: the
    workers were asked on, the run ended as if fine, and Python printed the lost error's
    traceback at exit."""
    tasks = number_tasks(6)
    output = tmp_path / "rewards.jsonl"
    real_add = collect_state.CollectState.add

    def disk_full_at_grades(state: collect_state.CollectState, entry: LogEntry) -> None:
        if entry.event == "grade":
            raise CollectError(f"cannot write {state.log}: No space left on device")
        real_add(state, entry)

    monkeypatch.setattr(collect_state.CollectState, "add", disk_full_at_grades)
    with StubWorker(solver(tasks)) as stub:
        with pytest.raises(CollectError, match="No space left on device"):
            run_collect(stub_pool(("w", stub), max_concurrency=1), tasks, output)
        assert len(stub.bodies) < len(tasks)  # not every worker asked on


def test_a_full_disk_while_writing_is_one_error_line_and_the_next_run_continues(
    tmp_path: Path,
) -> None:
    """A disk that fills up mid-collection (here: a file size limit, which fails the write
    alike, with EFBIG instead of ENOSPC) ended `collect` with a Python traceback and no word
    of what was kept or what to do."""
    tasks = number_tasks(6)
    output = tmp_path / "rewards.jsonl"
    with StubWorker(solver(tasks)) as stub:
        config = stub_pool(("w", stub), max_concurrency=1)
        full = collect_with_file_limit(config, tasks, output, 2048)
        said = full.stdout + full.stderr
        assert full.returncode == 2, said  # fail(): an error the user fixes
        assert "Traceback" not in said and f"cannot write {default_log_path(output)}" in said
        assert "run the same command again" in said and "raise your file size limit" in said
        written = len(stub.bodies)
        assert 0 < written < len(tasks)

        summary = run_collect(config, tasks, output)  # room again: it continues
        assert summary.complete
        assert len(stub.bodies) - written <= len(tasks) - written + 1  # at most the torn one
    assert sorted(record_ids(output)) == sorted(t.id for t in tasks)
    log_lines(output)  # every line whole JSON


def test_a_remote_worker_given_no_prices_beside_priced_ones_is_noted(tmp_path: Path) -> None:
    """A remote worker whose prices were left out (or half of them) counted as free, cost 0 in
    its records, beside workers with prices: a cost-aware router trained on them took it for
    the cheapest, with no word of it. Collect now says so at its start (serve logs it)."""
    tasks = number_tasks(2)
    with StubWorker(solver(tasks)) as stub:
        priced = stub_pool(("priced", stub)).workers[0].model_dump()
        remote = {"model": "stub-model", "base_url": stub.base_url, "max_retries": 0}
        config = PoolConfig.model_validate(
            {
                "workers": [
                    priced,
                    {**remote, "id": "unpriced"},
                    {**remote, "id": "half", "input_price_per_mtok": 1.0},
                    {**remote, "id": "free", "input_price_per_mtok": 0, "output_price_per_mtok": 0},
                ]
            }
        )
        console = Console(width=400, record=True)
        run_collect(config, tasks, tmp_path / "rewards.jsonl", console=console)
    notes = [line for line in console.export_text().splitlines() if "price" in line]
    assert len(notes) == 2, notes
    assert "worker unpriced has no prices" in notes[0] and "cost 0" in notes[0]
    assert "worker half has input_price_per_mtok but no output_price_per_mtok" in notes[1]


def test_a_price_given_per_token_is_noted_with_its_price_per_million(tmp_path: Path) -> None:
    """A worker priced per token (0.00000015, as some price pages give it) where the pool
    takes USD per million tokens cost a million times too little in its records, with no
    word of it: a cost-aware router trained on them took it for nearly free. Collect now
    says so at its start, with the price per million it would be (serve logs it)."""
    tasks = number_tasks(2)
    with StubWorker(solver(tasks)) as stub:
        priced = stub_pool(("priced", stub)).workers[0].model_dump()
        per_token = {**priced, "id": "per-token", "input_price_per_mtok": 1.5e-7}
        config = PoolConfig.model_validate({"workers": [priced, per_token]})
        console = Console(width=400, record=True)
        run_collect(config, tasks, tmp_path / "rewards.jsonl", console=console)
    notes = [line for line in console.export_text().splitlines() if "price" in line]
    assert len(notes) == 1, notes
    assert "worker per-token's input_price_per_mtok is 1.5e-07 USD per million tokens" in notes[0]
    assert "if it is a price per token, write 0.15;" in notes[0]


def test_sigterm_stops_collect_as_ctrl_c_does(tmp_path: Path) -> None:
    """SIGTERM was raised as KeyboardInterrupt wherever the run was, inside one of its asyncio
    tasks too: after the `interrupted:` line Python printed that task's traceback ("Task
    exception was never retrieved"), and the run's other tasks were not wound down as on
    Ctrl-C. It now stops the run as Ctrl-C does: one line, exit 130, and the next run goes on."""
    _stop_collect_after_two_calls(tmp_path, SIGTERM_AFTER_TWO_CALLS, "SIGTERM")


@pytest.mark.parametrize("stop_signal", ["SIGTERM", "SIGINT"])
def test_a_signal_stops_collect_run_as_the_console_script_without_a_traceback(
    tmp_path: Path, stop_signal: str
) -> None:
    """Run as the `fugu-lite` console script, whose entry point has its own Ctrl-C handler
    (noting a Ctrl-C during its imports), asyncio.run did not cancel the run on a Ctrl-C:
    a SIGTERM or a Ctrl-C broke out of one of the run's tasks, and after the `interrupted:`
    line Python printed its traceback ('Task exception was never retrieved')."""
    _stop_collect_after_two_calls(tmp_path, SIGNAL_AFTER_TWO_CALLS_AS_CONSOLE_SCRIPT, stop_signal)


@pytest.mark.parametrize(
    "script",
    [SIGTERM_AFTER_TWO_CALLS, SIGNAL_AFTER_TWO_CALLS_AS_CONSOLE_SCRIPT],
    ids=["app", "console-script"],
)
def test_sigterm_stops_collect_started_with_ctrl_c_ignored_as_ctrl_c_does(
    tmp_path: Path, script: str
) -> None:
    """Started with Ctrl-C ignored (`fugu-lite collect ... &` in a script), asyncio.run did
    not cancel the run on the SIGTERM taken as a Ctrl-C: its KeyboardInterrupt broke out of
    one of the run's tasks and Python printed the traceback. The SIGTERM now cancels the run
    itself: one line, exit 130, what was answered kept, and the next run goes on."""
    _stop_collect_after_two_calls(tmp_path, script, "SIGTERM", ctrl_c_ignored=True)


def test_a_ctrl_c_ignored_when_collect_started_stays_ignored_under_the_console_script(
    tmp_path: Path,
) -> None:
    """A script's shell starts `fugu-lite collect ... &` with Ctrl-C ignored, so that a
    Ctrl-C meant for the script's foreground command leaves it running (Python keeps it
    ignored). The console script's entry point set its own Ctrl-C handler whatever it
    found, so that Ctrl-C stopped the collection. It is ignored now: the run goes on."""
    tasks = number_tasks(8)
    output = tmp_path / "rewards.jsonl"
    with StubWorker(solver(tasks)) as stub:
        finished = _collect_signalled_after_two_calls(
            tmp_path, tasks, stub, SIGNAL_AFTER_TWO_CALLS_AS_CONSOLE_SCRIPT, "SIGINT", True
        )
    said = finished.stdout + finished.stderr
    assert finished.returncode == 0 and "interrupted" not in said, said
    assert sorted(record_ids(output)) == sorted(task.id for task in tasks)


def test_a_sigterm_cancels_the_run_then_goes_to_the_handler_it_found() -> None:
    """run_until_stopped, with Ctrl-C ignored (asyncio.run then cancels nothing on one): the
    SIGTERM cancels the run's task where it waits, and the SIGTERM handler found (the CLI's
    raises KeyboardInterrupt) gets it once the event loop is gone, not inside one of its
    tasks; the handler is put back after."""
    seen: list[object] = []

    def found(signum: int, frame: object) -> None:
        try:
            asyncio.get_running_loop()
            seen.append("handler inside the loop")
        except RuntimeError:
            seen.append("handler after the loop")
        raise KeyboardInterrupt

    async def waiting() -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    term = signal.signal(signal.SIGTERM, found)
    ctrl_c = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with pytest.raises(KeyboardInterrupt):
            run_until_stopped(waiting())
        after = signal.getsignal(signal.SIGTERM)
    finally:
        signal.signal(signal.SIGTERM, term)
        signal.signal(signal.SIGINT, ctrl_c)
    assert seen == ["cancelled", "handler after the loop"]
    assert after is found


def test_a_second_sigterm_or_one_outside_the_run_goes_to_the_handler_at_once() -> None:
    """A second SIGTERM while the run winds down (a local server slow to stop) must force a
    stop, as a second Ctrl-C does, not cancel the run again; one that comes once the run's
    task is done (asyncio.run closing the loop), or before it has started (asyncio.run still
    making its loop), must not be swallowed."""
    handled: list[int] = []
    stop = SigtermStop(lambda signum, frame: handled.append(signum))

    async def stopped_twice() -> None:
        stop.on_sigterm(signal.SIGTERM, None)  # cancels this task at its next await
        stop.on_sigterm(signal.SIGTERM, None)
        await asyncio.sleep(0)

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(stop.watched(stopped_twice()))
    assert handled == [signal.SIGTERM]

    async def done() -> None:
        return None

    after = SigtermStop(lambda signum, frame: handled.append(signum))
    asyncio.run(after.watched(done()))
    after.on_sigterm(signal.SIGTERM, None)
    assert handled == [signal.SIGTERM, signal.SIGTERM]
    SigtermStop(lambda signum, frame: handled.append(signum)).on_sigterm(signal.SIGTERM, None)
    assert handled == [signal.SIGTERM] * 3


def test_a_sigterm_ignored_stays_ignored_and_a_run_outside_the_main_thread_runs() -> None:
    """run_until_stopped leaves SIGTERM alone where Python's handler is not its own: ignored
    (a SIGTERM then must not cancel the run, nor reach SIG_IGN as if it were a handler to
    call), and outside the main thread, where Python refuses to set one (ValueError)."""
    seen: list[object] = []

    async def sigtermed() -> str:
        seen.append(signal.getsignal(signal.SIGTERM))
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(10):  # a handler would run at one of these
            await asyncio.sleep(0)
        return "done"

    term = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        assert run_until_stopped(sigtermed()) == "done"
    finally:
        signal.signal(signal.SIGTERM, term)
    assert seen == [signal.SIG_IGN]

    async def answer() -> int:
        return 42

    results: list[object] = []

    def in_a_thread() -> None:
        try:
            results.append(run_until_stopped(answer()))
        except Exception as error:
            results.append(error)

    thread = threading.Thread(target=in_a_thread)
    term = signal.signal(signal.SIGTERM, lambda signum, frame: None)  # one of its own
    try:
        thread.start()
        thread.join(timeout=60)
    finally:
        signal.signal(signal.SIGTERM, term)
    assert results == [42]


def test_a_run_cancelled_without_a_sigterm_is_not_handed_to_the_sigterm_handler() -> None:
    """Only a cancellation that a SIGTERM asked for goes to the SIGTERM handler (the CLI's
    raises KeyboardInterrupt): one of the run's own stays a CancelledError."""
    handled: list[int] = []

    async def cancels_itself() -> None:
        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        await asyncio.sleep(0)

    term = signal.signal(signal.SIGTERM, lambda signum, frame: handled.append(signum))
    try:
        with pytest.raises(asyncio.CancelledError):
            run_until_stopped(cancels_itself())
    finally:
        signal.signal(signal.SIGTERM, term)
    assert handled == []


class WaitNotingSelector(selectors.DefaultSelector):
    """An event loop's selector that says (`waiting`) while the loop sits in select() with
    nothing due for more than a second: a signal landing then finds it there, as a `kill`
    finds a run whose every call waits on a worker."""

    def __init__(self, waiting: threading.Event) -> None:
        super().__init__()
        self.waiting = waiting

    def select(self, timeout: float | None = None) -> list:
        if timeout is None or timeout > 1:
            self.waiting.set()
        try:
            return super().select(timeout)
        finally:
            self.waiting.clear()


def test_a_sigterm_while_collect_waits_on_a_worker_stops_it_at_once_keeping_the_answers(
    tmp_path: Path,
) -> None:
    """A SIGTERM's cancel of the run is only scheduled: an event loop waiting in select()
    (a worker that does not answer, its timeout_s a minute away) ran it only when that wait
    ended, unless the SIGTERM also wakes the loop. No test reached that wait (the signal
    tests send it from within a call, the loop busy). Here the third call hangs, and the
    SIGTERM is sent once the loop is seen waiting in select(): the run stops far sooner than
    the hang's 60 s timeout, with exit 130 and the two answers kept."""
    tasks = number_tasks(3)
    output = tmp_path / "rewards.jsonl"
    write_tasks(tmp_path / "tasks.jsonl", tasks)
    waiting = threading.Event()
    sent_at: list[float] = []
    with StubWorker(solver(tasks)) as stub:
        stub.fail_next("ok", "ok", "hang")
        config = stub_pool(("w", stub), max_concurrency=1, max_retries=0, timeout_s=60.0)
        (tmp_path / "pool.yaml").write_text(yaml.safe_dump(config.model_dump(mode="json")))

        def sigterm_once_the_hang_is_waited_on() -> None:
            deadline = time.monotonic() + 60
            while stub.modes_served[2:] != ["hang"] and time.monotonic() < deadline:
                time.sleep(0.01)
            if stub.modes_served[2:] == ["hang"] and waiting.wait(timeout=60):
                sent_at.append(time.monotonic())
                os.kill(os.getpid(), signal.SIGTERM)

        class NotingPolicy(asyncio.DefaultEventLoopPolicy):
            def new_event_loop(self) -> asyncio.AbstractEventLoop:
                return asyncio.SelectorEventLoop(WaitNotingSelector(waiting))

        sender = threading.Thread(target=sigterm_once_the_hang_is_waited_on, daemon=True)
        args = ["collect", "--pool", str(tmp_path / "pool.yaml"), "-t",
                str(tmp_path / "tasks.jsonl"), "-o", str(output), "--no-progress"]  # fmt: skip
        term = signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a late one must not end pytest
        asyncio.set_event_loop_policy(NotingPolicy())
        try:
            sender.start()
            result = CliRunner().invoke(app, args, env={"COLUMNS": "400"})
            ended_at = time.monotonic()
            sender.join(timeout=60)
        finally:
            asyncio.set_event_loop_policy(None)
            signal.signal(signal.SIGTERM, term)
    assert sent_at, f"the hanging call was not waited on in select(): {result.output}"
    assert result.exit_code == 130 and "interrupted:" in result.output, result.output
    assert ended_at - sent_at[0] < 30, "the SIGTERM did not stop the run before the hang's end"
    assert sorted(record_ids(output)) == ["add-0", "add-1"]


def _stop_collect_after_two_calls(
    tmp_path: Path, script: str, stop_signal: str, ctrl_c_ignored: bool = False
) -> None:
    """collect stopped by the signal after its second call: one line, exit 130, no
    traceback, and the next run asks only what was not answered."""
    tasks = number_tasks(8)
    output = tmp_path / "rewards.jsonl"
    with StubWorker(solver(tasks)) as stub:
        stopped = _collect_signalled_after_two_calls(
            tmp_path, tasks, stub, script, stop_signal, ctrl_c_ignored
        )
        said = stopped.stdout + stopped.stderr
        assert stopped.returncode == 130, said
        assert "interrupted:" in said and "Traceback" not in said, said
        asked = len(stub.bodies)
        answered = sum(line["event"] == "call" for line in log_lines(output))
        assert answered < 2 * len(tasks)
        summary = run_collect(stub_pool(("a", stub), ("b", stub)), tasks, output)
        assert summary.complete and summary.torn_lines == []
        assert len(stub.bodies) - asked == 2 * len(tasks) - answered  # no answer asked again
    assert sorted(record_ids(output)) == sorted(task.id for task in tasks)


def _collect_signalled_after_two_calls(
    tmp_path: Path, tasks: list[Task], stub: StubWorker, script: str, stop_signal: str,
    ctrl_c_ignored: bool,
) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """`script` (collect into tmp_path/rewards.jsonl, two workers of `stub`) sent
    `stop_signal` after its second call. `ctrl_c_ignored`: started with SIGINT ignored, as a
    script's shell starts a command run in the background."""
    tasks_path, pool_path = tmp_path / "tasks.jsonl", tmp_path / "pool.yaml"
    write_tasks(tasks_path, tasks)
    config = stub_pool(("a", stub), ("b", stub))
    pool_path.write_text(yaml.safe_dump(config.model_dump(mode="json")))
    output = tmp_path / "rewards.jsonl"
    args = ["collect", "--pool", str(pool_path), "--tasks", str(tasks_path), "-o", str(output)]
    return subprocess.run(
        [sys.executable, "-c", script, *args, "--no-progress"],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "COLUMNS": "200",
             "STOP_SIGNAL": stop_signal},
        preexec_fn=ignore_ctrl_c if ctrl_c_ignored else ctrl_c_at_its_default,
    )  # fmt: skip


def test_an_answer_holding_half_an_emoji_is_kept_and_graded(tmp_path: Path) -> None:
    """A worker whose answer held half of a surrogate pair (`"\\ud83d"`: an emoji cut in two
    by a server or gateway counting UTF-16 units) ended collect with a traceback: its call
    line could not be written as UTF-8, and every run asked and failed again. The half is
    kept as U+FFFD, as a UTF-8 decoder keeps bytes it cannot read, and the answer graded."""
    tasks = number_tasks(3)
    output = tmp_path / "rewards.jsonl"
    answers = solver(tasks)
    with StubWorker(lambda messages: answers(messages) + " \ud83d") as stub:
        summary = run_collect(stub_pool(("w", stub)), tasks, output)
    assert summary.complete and [record.rewards for record in read_records(output)] == [[1.0]] * 3
    calls = [line for line in log_lines(output) if line["event"] == "call"]
    assert all(call["output"].endswith(". \ufffd") for call in calls), calls


def test_records_and_answers_saved_under_an_id_with_spaces_around_it_are_resumed(
    tmp_path: Path,
) -> None:
    """Task ids were read as written ('add-0 ') until they were read without their spaces: a
    collection of such a task file continued after that read its saved records and answers
    as another task file's, said so, asked every worker again (paying again) and added a
    second record of each task. Saved lines are now matched as the task file is read."""
    tasks = number_tasks(3)
    output = tmp_path / "rewards.jsonl"
    with StubWorker(solver(tasks)) as stub:
        config = stub_pool(("a", stub), ("b", stub))
        run_collect(config, tasks, output)
        log = default_log_path(output)
        for path in (output, log):  # as written when the ids were read with their spaces
            text = path.read_text()
            for task in tasks:
                text = text.replace(f'"{task.id}"', f'"{task.id} "')
            path.write_text(text)
        output.write_text("".join(output.read_text().splitlines(keepends=True)[:2]))
        asked = len(stub.bodies)
        summary = run_collect(config, tasks, output)
    assert len(stub.bodies) == asked  # the third task's saved answers made its record
    assert summary.complete
    assert sorted(record_id.strip() for record_id in record_ids(output)) == [t.id for t in tasks]


def test_task_ids_differing_only_by_case_are_collected_and_kept_apart(tmp_path: Path) -> None:
    """On a case-insensitive file system (macOS, Windows) a file or folder named after a task
    id would be one for Q1 and q1. Collect names none after an id (its two files are named
    after -o; a code grader's sandbox folder is a temporary one), so the two are two tasks
    throughout: each answered, graded by its own key, recorded and resumed on its own."""
    upper, lower = number_tasks(2)
    tasks = [upper.model_copy(update={"id": "Q1"}), lower.model_copy(update={"id": "q1"})]
    output = tmp_path / "rewards.jsonl"
    with StubWorker(solver(tasks)) as stub:
        config = stub_pool(("w", stub))
        first = run_collect(config, tasks, output)
        second = run_collect(config, tasks, output)
    assert first.complete and first.records_written == 2 and second.records_written == 0
    assert len(stub.bodies) == 2  # the second run asked nothing again
    records = {record.id: record for record in read_records(output)}
    assert sorted(records) == ["Q1", "q1"]
    assert [records[task.id].prompt for task in tasks] == [task.prompt for task in tasks]
    assert all(records[task.id].rewards == [1.0] for task in tasks)
    assert sorted(line["task_id"] for line in log_lines(output)) == ["Q1", "Q1", "q1", "q1"]
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "rewards.calls.jsonl",
        "rewards.jsonl",
    ]


def test_a_records_family_with_spaces_around_it_is_that_family(tmp_path: Path) -> None:
    """A task file's 'arithmetic ' is read as arithmetic, but a records file continued across
    that change (or written by another tool) held 'arithmetic ' beside 'arithmetic', two
    families in every per-task table; a record's task is now read without the spaces too."""
    tasks = number_tasks(2)
    output = tmp_path / "rewards.jsonl"
    with StubWorker(solver(tasks)) as stub:
        run_collect(stub_pool(("a", stub)), tasks, output)
    lines = output.read_text().splitlines(keepends=True)
    output.write_text(lines[0].replace('"arithmetic"', '"arithmetic "') + lines[1])
    assert '"arithmetic "' in output.read_text()
    assert [record.task for record in read_records(output)] == ["arithmetic", "arithmetic"]


def test_notes_of_one_answer_agree_with_one() -> None:
    """Notes counting one answer read as of many: '1 of the 2 graded answers ... were graded
    as they are', 'stopped inside their thinking ... and have no answer', 'its 1 pending
    cells are retried'."""
    config = PoolConfig.model_validate(
        {"workers": [{"id": "w", "model": "m", "base_url": "http://127.0.0.1:9/v1",
                      "params": {"max_tokens": 24}}]}
    )  # fmt: skip
    # its failed calls and restarts are said in its down line alone (the four unpacked below)
    worker = WorkerSummary(worker_id="w", done=1, pending=1, calls=1, errors=1, cut=1,
                           cut_in_thinking=1, filtered=1, down="its server is gone",
                           failed_calls=1, call_error="task q: gone", restarts=2,
                           mean_score=0.0, cost=0.0, mean_latency_s=1.0)  # fmt: skip
    summary = CollectSummary(output="r.jsonl", log="r.calls.jsonl", tasks=2, records_total=1,
                             records_written=1, workers=[worker])  # fmt: skip
    cut, thinking, filtered, down = end_of_run_lines(summary, config)
    assert "1 of the 1 graded answer of w stopped at its token limit (max_tokens 24) and was " \
        "graded as it is, often without its final answer;" in cut  # fmt: skip
    assert "1 of the 1 graded answer of w stopped inside its thinking (max_tokens 24) and " \
        "has no answer" in thinking  # fmt: skip
    assert "1 of the 1 graded answer of w was withheld or cut by its provider's content " \
        "filter and graded as it is, often empty (its call line says" in filtered  # fmt: skip
    assert "its 1 pending cell is retried" in down
    worker = worker.model_copy(update={"done": 3, "cut": 2, "pending": 2})
    summary = summary.model_copy(update={"workers": [worker]})
    cut, _, _, down = end_of_run_lines(summary, config)
    assert "2 of the 3 graded answers of w stopped at its token limit (max_tokens 24) and " \
        "were graded as they are, often without their final answer;" in cut  # fmt: skip
    assert "its 2 pending cells are retried" in down


@pytest.mark.parametrize(
    ("tasks", "done", "written", "said"),
    [
        (1, 0, 0, "1 of 1 task still waits for an answer or a grade; run the same command "
                  "again to retry it"),
        (3, 2, 2, "1 of 3 tasks still waits for an answer or a grade; run the same command "
                  "again to retry it"),
        (3, 1, 1, "2 of 3 tasks still wait for an answer or a grade; run the same command "
                  "again to retry them"),
        # a resumed run: its records are those of every run, not only this one's
        (3, 2, 0, "1 of 3 tasks still waits for an answer or a grade; run the same command "
                  "again to retry it"),
    ],
)  # fmt: skip
def test_the_tasks_still_waiting_agree_with_their_count(
    tasks: int, done: int, written: int, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The last warning of an unfinished collection said '1 of 3 tasks still wait ...; run
    the same command again to retry them' of one task. A resumed run that wrote no record
    itself names the file holding the earlier runs' records as where the records are."""
    import typer

    from fugu_lite.cli.collect import report_collection

    config = PoolConfig.model_validate(
        {"workers": [{"id": "w", "model": "m", "base_url": "http://127.0.0.1:9/v1"}]}
    )
    summary = CollectSummary(output="r.jsonl", log="r.calls.jsonl", tasks=tasks,
                             records_total=done, records_written=written, workers=[])  # fmt: skip
    with pytest.raises(typer.Exit):
        report_collection(summary, config)
    captured = capsys.readouterr()
    assert f"warning: {said}" in captured.err
    records = "records: r.jsonl · call log" if done else "records: none written to r.jsonl"
    assert records in captured.out
