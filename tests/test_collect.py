"""Reward collection: against the in-process OpenAI-compatible stub (unit), and against real
llama.cpp servers with faults: a worker server killed mid-run, the collector killed with
kill -9 mid-run and resumed (integration)."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time
import tracemalloc
from collections import Counter
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml
from rich.console import Console
from typer.testing import CliRunner, Result

from fugu_lite import collect as collect_module
from fugu_lite.cli import app
from fugu_lite.collect import (
    CollectError,
    CollectSummary,
    JudgeSummary,
    WorkerSummary,
    collect,
    default_log_path,
    summary_table,
)
from fugu_lite.pool import PoolConfig, embedded_pool_config, resolve_gguf
from fugu_lite.schemas import RewardRecord, prompt_hash, read_records
from fugu_lite.scoring import Grade
from fugu_lite.tasks import Task, generate_tasks, write_tasks
from fugu_lite.testing.stub_worker import Reply, StubWorker

PROJECT = Path(__file__).resolve().parents[1]
FUGU = str(Path(sys.executable).with_name("fugu-lite"))


def number_tasks(n: int = 6) -> list[Task]:
    return [
        Task(id=f"add-{i}", prompt=f"What is {i} + {i + 1}?", answer=str(2 * i + 1),
             grader="number", task="arithmetic")
        for i in range(n)
    ]  # fmt: skip


def solver(tasks: list[Task]):
    answers = {task.prompt: task.answer for task in tasks}
    return lambda messages: f"The answer is {answers[messages[-1]['content']]}."


def stub_pool(*stubs: tuple[str, StubWorker], **overrides) -> PoolConfig:
    workers = [
        {"id": worker_id, "model": "stub-model", "base_url": stub.base_url,
         "input_price_per_mtok": 1.0, "output_price_per_mtok": 2.0, "max_concurrency": 2,
         "retry_backoff_s": 0.01, "max_retries": 1, "timeout_s": 5.0, **overrides}
        for worker_id, stub in stubs
    ]  # fmt: skip
    return PoolConfig.model_validate({"workers": workers})


def run(config: PoolConfig, tasks: list[Task], output: Path, **options):
    return asyncio.run(collect(config, tasks, output, show_progress=False, **options))


def collect_with_judge(config: PoolConfig, tmp_path: Path, output: Path) -> Result:
    """`fugu-lite collect` of tmp_path/tasks.jsonl into `output` by the pool `config`, graded
    by its worker `judge`, through the CLI (a wide terminal, no progress bars)."""
    pool_path = tmp_path / "pool.yaml"
    pool_path.write_text(yaml.safe_dump(config.model_dump(mode="json")))
    args = ["collect", "--pool", str(pool_path), "-t", str(tmp_path / "tasks.jsonl"),
            "-o", str(output), "--judge", "judge", "--no-progress"]  # fmt: skip
    return CliRunner().invoke(app, args, env={"COLUMNS": "400"})


def log_lines(output: Path) -> list[dict]:
    path = default_log_path(output)
    return [json.loads(line) for line in path.read_text().splitlines()]


def record_ids(output: Path) -> list[str]:
    return [json.loads(line)["id"] for line in output.read_text().splitlines()]


# -- unit: the stub -------------------------------------------------------------------------


def test_collect_writes_records_and_a_call_log(tmp_path: Path) -> None:
    tasks = number_tasks(6)
    output = tmp_path / "rewards.jsonl"
    with StubWorker(solver(tasks)) as good, StubWorker("No idea, sorry.") as bad:
        summary = run(stub_pool(("good", good), ("bad", bad)), tasks, output)

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
        run(config, tasks, output)
        before = output.read_bytes()
        summary = run(config, tasks, output)
        assert len(a.bodies) == 4 and len(b.bodies) == 4  # nothing was called again
        assert summary.records_written == 0 and summary.complete
        assert output.read_bytes() == before

        more = [*tasks, *number_tasks(6)[4:]]  # two new tasks: only they are called
        summary = run(config, more, output)
    assert len(a.bodies) == 6 and summary.records_written == 2
    assert sorted(record_ids(output)) == sorted(t.id for t in more)


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
        summary = run(config, tasks, output, down_after=2)
        stats = {worker.worker_id: worker for worker in summary.workers}
        assert stats["down"].down and "in a row failed" in stats["down"].down
        assert stats["down"].calls == 2  # then it was taken as down; no more calls
        assert stats["down"].pending == 8 and stats["down"].done == 0
        assert stats["up"].done == 8 and stats["up"].pending == 0
        assert not summary.complete and summary.records_total == 0
        assert not output.exists() or output.read_text() == ""  # no record with a 0 for it

        with StubWorker(solver(tasks)) as back:
            config.workers[1].base_url = back.base_url
            summary = run(config, tasks, output)
            assert len(back.bodies) == 8
        assert len(up.bodies) == 8  # the up worker's answers were kept, not asked again
    assert summary.complete
    records = read_records(output)
    assert len(records) == 8 and all(r.rewards == [1.0, 1.0] for r in records)


def test_a_fixed_answer_key_regrades_saved_answers_without_new_calls(tmp_path: Path) -> None:
    tasks = number_tasks(2)
    wrong_key = [tasks[0].model_copy(update={"answer": "99"}), tasks[1]]
    output = tmp_path / "rewards.jsonl"
    with StubWorker(solver(tasks)) as up:
        down = StubWorker(solver(tasks)).start()
        down_url = down.base_url
        down.stop()  # no record is written while it is down: the cells stay pending
        worker = stub_pool(("up", up)).workers[0].model_dump()
        config = PoolConfig.model_validate(
            {"workers": [worker, {**worker, "id": "down", "base_url": down_url}]}
        )
        run(config, wrong_key, output, down_after=1)
        graded = {line["task_id"]: line["score"] for line in log_lines(output)
                  if line["event"] == "grade"}  # fmt: skip
        assert graded == {"add-0": 0.0, "add-1": 1.0}  # against the wrong key

        with StubWorker(solver(tasks)) as back:
            config.workers[1].base_url = back.base_url
            summary = run(config, tasks, output)  # the key is fixed
        assert len(up.bodies) == 2  # its saved answers were graded again, not asked again
    assert summary.complete
    assert all(record.rewards == [1.0, 1.0] for record in read_records(output))


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
        summary = run(config, tasks, output)
        assert summary.records_total == 2 and "add-1" not in record_ids(output)
        assert summary.workers[0].errors == 1 and summary.workers[0].pending == 1
        failed = [line for line in log_lines(output) if line.get("grade_error")]
        assert failed and failed[0]["task_id"] == "add-1" and "score" not in failed[0]

        monkeypatch.setattr(collect_module, "grade", real_grade)
        summary = run(config, tasks, output)
        assert len(stub.bodies) == 3  # regraded from the logged answer
    assert summary.complete and sorted(record_ids(output)) == ["add-0", "add-1", "add-2"]


def test_a_worker_whose_quota_is_used_up_is_down_at_once(tmp_path: Path) -> None:
    """OpenAI's 429 insufficient_quota (no credit left) was a rate limit like any other: every
    task's call was sent and retried with backoff, for a refusal that could not change."""
    tasks = number_tasks(6)
    with StubWorker(solver(tasks)) as good, StubWorker(mode="quota") as broke:
        config = stub_pool(("good", good), ("broke", broke), max_concurrency=1)
        summary = run(config, tasks, tmp_path / "r.jsonl")
    stats = {worker.worker_id: worker for worker in summary.workers}
    assert stats["broke"].calls == 1 and len(broke.bodies) == 2  # one call, and its retry
    assert "quota is used up" in (stats["broke"].down or "")
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
        summary = run(config, tasks, tmp_path / "r.jsonl")
    stats = {worker.worker_id: worker for worker in summary.workers}
    assert stats["bad"].calls == 3 and len(bad.bodies) == 3  # then taken as down: no more
    assert f"its last 3 calls were refused with HTTP {status}" in (stats["bad"].down or "")
    assert stats["bad"].pending == 8 and stats["good"].done == 8 and not summary.complete
    lines = collect_module.end_of_run_lines(summary, config)
    assert any("worker bad is down" in line and "fix " in line for line in lines)


def test_a_worker_failing_every_call_with_a_5xx_is_down_after_3(tmp_path: Path) -> None:
    """A gateway whose model is gone answers every call with a 500 or 503: each task's call
    was still sent and retried with backoff to the end of the run (three timeouts in a row
    took a worker down, three 5xx never did)."""
    tasks = number_tasks(8)
    with StubWorker(solver(tasks)) as good, StubWorker(mode="503") as broken:
        config = stub_pool(("good", good), ("broken", broken), max_concurrency=1)
        summary = run(config, tasks, tmp_path / "r.jsonl")
    stats = {worker.worker_id: worker for worker in summary.workers}
    assert stats["broken"].calls == 3 and len(broken.bodies) == 6  # each call and its retry
    assert "3 calls in a row failed (server): worker broken: server: HTTP 503" in (
        stats["broken"].down or ""
    )
    assert stats["broken"].pending == 8 and stats["good"].done == 8 and not summary.complete
    with StubWorker(solver(tasks)) as flaky:  # 5xx not in a row: up, every task asked
        flaky.fail_next("500", "500", "ok", "500", "500", "ok", "500", "500", "ok", "500", "500")
        config = stub_pool(("flaky", flaky), max_concurrency=1, max_retries=0)
        summary = run(config, tasks, tmp_path / "flaky.jsonl")
    assert summary.workers[0].down is None and summary.workers[0].calls == 8


def test_refusals_not_in_a_row_or_of_other_statuses_keep_the_worker_up(tmp_path: Path) -> None:
    """A proxy's stray 401 or 404 must not take a healthy worker down for the run."""
    tasks = number_tasks(8)
    with StubWorker(solver(tasks)) as flaky:
        config = stub_pool(("flaky", flaky), max_concurrency=1, max_retries=0)
        flaky.fail_next("401", "401", "ok", "404", "404", "401", "400", "404")
        summary = run(config, tasks, tmp_path / "r.jsonl")
    worker = summary.workers[0]
    assert worker.down is None and worker.calls == 8 and worker.failed_calls == 7


def test_failed_calls_are_logged_and_retried_next_run(tmp_path: Path) -> None:
    tasks = number_tasks(3)
    output = tmp_path / "rewards.jsonl"
    with StubWorker(solver(tasks)) as stub:
        config = stub_pool(("w", stub), max_concurrency=1, max_retries=0)
        stub.fail_next("400")  # a client error: not retried in this run, not scored 0
        summary = run(config, tasks, output)
        assert summary.records_total == 2 and summary.workers[0].errors == 1
        errors = [line for line in log_lines(output) if line.get("error")]
        assert len(errors) == 1 and errors[0]["error_kind"] == "client"
        summary = run(config, tasks, output)
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

        write_tasks(tmp_path / "tasks.jsonl", number_tasks(4))  # add-0's refusal is reused
        result = CliRunner().invoke(app, args, env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    assert len(short.bodies) == 4 and "longer than the context" not in result.stderr
    summary = {worker.worker_id: worker for worker in run(config, number_tasks(4), output).workers}
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
        summary = run(config, tasks, output)
        assert summary.complete and len(short.bodies) == 3
        refused = summary.workers[0]
        assert refused.refused == 1 and refused.failed_calls == 0 and refused.mean_score == 2 / 3
        records = {record.id: record for record in read_records(output)}
        assert records["add-0"].rewards == [0.0, 1.0]
        assert run(config, tasks, output).complete and len(short.bodies) == 3  # reused


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
        summary = run(config, tasks, output)
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
    [note] = collect_module.end_of_run_lines(summary, config)
    assert "stopped at its token limit (max_completion_tokens 300)" in note
    assert "raise its params.max_completion_tokens" in note and "max_tokens" not in note.replace(
        "max_completion_tokens", ""
    )


def test_a_second_collect_on_the_same_files_is_refused_while_the_first_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two `collect` runs on one -o (started twice by mistake, in two terminals) both called
    every worker for every task and both appended each record: every record twice in the
    output and every call paid twice."""
    tasks = number_tasks(4)
    output = tmp_path / "r.jsonl"
    with StubWorker(solver(tasks), latency_s=0.2) as stub:
        config = stub_pool(("w", stub), max_concurrency=1)

        async def twice(second_output: Path, log: Path | None = None) -> list[Any]:
            first = asyncio.create_task(collect(config, tasks, output, show_progress=False))
            await asyncio.sleep(0.1)  # the first is running: its calls take 0.2 s each
            second = collect(config, tasks, second_output, log, show_progress=False)
            return await asyncio.gather(first, second, return_exceptions=True)

        first, second = asyncio.run(twice(output))
        assert isinstance(first, CollectSummary) and first.complete
        assert isinstance(second, CollectError) and f"{output} is in use by another" in str(second)
        assert sorted(record_ids(output)) == [t.id for t in tasks] and len(stub.bodies) == 4
        output.unlink()
        default_log_path(output).unlink()  # so that the first run calls again
        other = tmp_path / "other.jsonl"  # another -o, but the same call log: refused too
        first, second = asyncio.run(twice(other, default_log_path(output)))
        assert isinstance(second, CollectError) and "calls.jsonl is in use" in str(second)
        assert not other.exists()  # the refused run left no empty file behind

        monkeypatch.delenv("NO_SUCH_KEY", raising=False)  # a run that cannot start: no files
        keyed = stub_pool(("w", stub), api_key_env="NO_SUCH_KEY")
        with pytest.raises(Exception, match="NO_SUCH_KEY"):
            run(keyed, tasks, tmp_path / "new" / "r.jsonl")
    assert list((tmp_path / "new").iterdir()) == []


def test_prices_fixed_between_runs_cost_every_record_still_to_write(tmp_path: Path) -> None:
    """Prices fixed in the pool file (per 1k tokens given as per million, say) between runs:
    a saved answer of a task still pending kept its cost at the old prices, so one record
    mixed two price lists, and nothing said the records already written hold the old ones."""
    tasks = number_tasks(3)
    output = tmp_path / "r.jsonl"
    with StubWorker(solver(tasks)) as a, StubWorker(solver(tasks)) as b:
        b.fail_next("400")  # add-0 waits for b: a's answer to it is saved, its record not
        run(stub_pool(("a", a), ("b", b), max_concurrency=1), tasks, output)
        assert sorted(record_ids(output)) == ["add-1", "add-2"]
        fixed = stub_pool(("a", a), ("b", b), input_price_per_mtok=10.0, output_price_per_mtok=20.0)
        console = Console(record=True, width=400)
        summary = run(fixed, tasks, output, console=console)
        assert len(a.bodies) == 3  # a's answer to add-0 was reused
    # whitespace tokens: "What is i + j?" 5 in, "The answer is N." 4 out
    record = {r.id: r for r in read_records(output)}["add-0"]
    assert record.costs == pytest.approx([(5 * 10 + 4 * 20) / 1e6] * 2)
    assert summary.workers[0].cost == pytest.approx(((5 * 10 + 4 * 20) / 1e6) * 3)
    assert "2 records already written hold costs at other prices" in console.export_text()
    assert summary.reprices and f"--log {default_log_path(output)}" in summary.reprices[0]


def test_torn_last_lines_are_cut_reported_and_redone(tmp_path: Path) -> None:
    tasks = number_tasks(4)
    output = tmp_path / "rewards.jsonl"
    with StubWorker(solver(tasks)) as stub:
        config = stub_pool(("w", stub))
        run(config, tasks, output)
        lines = output.read_text().splitlines(keepends=True)
        torn_id = json.loads(lines[-1])["id"]
        output.write_text("".join(lines[:-1]) + lines[-1][:25])  # kill -9 mid-write
        log = default_log_path(output)
        log.write_text(log.read_text() + '{"event": "call", "task_')
        summary = run(config, tasks, output)
        assert len(stub.bodies) == 4  # the torn record is rebuilt from the call log
    assert len(summary.torn_lines) == 2 and str(output) in summary.torn_lines[0]
    ids = record_ids(output)
    assert sorted(ids) == sorted(t.id for t in tasks) and ids[-1] == torn_id
    assert Path(str(output) + ".torn").read_text().startswith(lines[-1][:25])
    log_lines(output)  # every line of the log is whole JSON again


@pytest.mark.parametrize("tail", [b"", b"\n", b'{"event": "call", "task_', b"\xe2\x82"])
def test_a_torn_tail_is_cut_reading_only_the_tail(tmp_path: Path, tail: bytes) -> None:
    """Checking a call log for a torn last line read the whole file into memory on every
    start: gigabytes for the log of a long collection, to look at its last bytes."""
    log = tmp_path / "r.calls.jsonl"
    whole = b'{"event": "call", "output": "' + b"x" * (20 << 20) + b'"}\n'
    log.write_bytes(whole + tail)
    tracemalloc.start()
    try:
        fragment = collect_module.repair_torn_tail(log)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, peak  # a few blocks, not the 20 MB line
    whole_lines = tail in (b"", b"\n")  # nothing torn: the file is left as it is
    assert log.read_bytes() == (whole + tail if whole_lines else whole)
    assert fragment == (None if whole_lines else tail.decode("utf-8", errors="replace"))


def test_corrupt_middle_line_is_a_clear_error(tmp_path: Path) -> None:
    tasks = number_tasks(2)
    output = tmp_path / "rewards.jsonl"
    output.write_text("not json\n{}\n")
    with StubWorker(solver(tasks)) as stub, pytest.raises(Exception, match="line 1"):
        run(stub_pool(("w", stub)), tasks, output)


def test_other_workers_in_the_output_are_refused_with_a_way_out_that_keeps_the_answers(
    tmp_path: Path,
) -> None:
    """A worker added to (or removed from) the pool: the refusal said only "write to a new
    --output", whose default call log is new too, so every saved answer was paid for again.
    It now names the old call log to pass with --log, which reuses them."""
    tasks = number_tasks(2)
    output = tmp_path / "rewards.jsonl"
    with StubWorker(solver(tasks)) as stub, StubWorker(solver(tasks)) as added:
        run(stub_pool(("a", stub), ("b", stub)), tasks, output)
        assert len(stub.bodies) == 4
        grown = stub_pool(("a", stub), ("b", stub), ("c", added))
        with pytest.raises(CollectError) as refused:
            run(grown, tasks, output)
        assert f"a new -o with --log {default_log_path(output)}" in str(refused.value)
        summary = run(grown, tasks, tmp_path / "grown.jsonl", log=default_log_path(output))
        assert summary.complete and len(stub.bodies) == 4 and len(added.bodies) == 2
        with pytest.raises(CollectError, match="another order"):
            run(stub_pool(("b", stub), ("a", stub)), tasks, output)


@pytest.mark.parametrize(
    "change",
    [{}, {"system_prompt": "Be brief."}, {"params": {"temperature": 0.7}}, {"model": "other"}],
)
def test_a_changed_request_is_asked_again(tmp_path: Path, change: dict) -> None:
    """A saved answer counts only for the same request: system prompt, params and model."""
    tasks = number_tasks(2)
    output = tmp_path / "rewards.jsonl"
    with StubWorker(solver(tasks)) as stub:
        down = StubWorker(solver(tasks)).start()
        down_url = down.base_url
        down.stop()  # no record is written, so both cells of `w` stay pending

        def pool(**worker_change: Any) -> PoolConfig:
            worker = stub_pool(("w", stub)).workers[0].model_dump()
            closed = {**worker, "id": "down", "base_url": down_url}
            return PoolConfig.model_validate({"workers": [{**worker, **worker_change}, closed]})

        run(pool(), tasks, output, down_after=1)
        assert len(stub.bodies) == 2
        summary = run(pool(**change), tasks, output, down_after=1)
    assert len(stub.bodies) == (2 if not change else 4)
    assert summary.reasks == (
        []
        if not change
        else [
            "2 saved answers of w are not reused and asked again: its request (model, "
            "system_prompt, params, a local worker's gguf or chat_format, or the task's "
            "prompt) changed since they were answered"
        ]
    )
    for body in stub.bodies[2:]:
        assert body["messages"][0]["content"] == "Be brief." or "system_prompt" not in change
        assert body.get("temperature") == 0.7 or "params" not in change
        assert body["model"] == "other" or "model" not in change


def test_written_records_of_an_earlier_request_are_reported(tmp_path: Path) -> None:
    """Records are never rewritten: after a worker's params change, the run says how many
    written records keep its answers to the earlier request, and how to get one request."""
    tasks = number_tasks(3)
    output = tmp_path / "rewards.jsonl"
    with StubWorker(solver(tasks)) as stub:
        config = stub_pool(("w", stub), ("v", stub))
        run(config, tasks[:2], output)
        changed = config.model_copy(deep=True)
        changed.workers[0].params = {"temperature": 0.7}
        summary = run(changed, tasks, output)  # one more task: asked with the new params
        assert len(stub.bodies) == 4 + 2
        assert summary.complete and summary.reasks == [
            "2 records already written keep w's answers to its earlier request (its request "
            "(model, system_prompt, params, a local worker's gguf or chat_format, or the "
            "task's prompt) changed since they were answered); records are never rewritten: "
            "to have one request throughout, collect "
            f"into a new -o with --log {default_log_path(output)} (answers to the current "
            "requests are reused)"
        ]
        assert run(config, tasks[:2], output).reasks == []  # the earlier request again

        fresh = tmp_path / "fresh.jsonl"  # the way out: w asked again with the new params
        summary = run(changed, tasks, fresh, log=default_log_path(output))
    assert summary.complete and len(stub.bodies) == 6 + 2
    assert [body.get("temperature") for body in stub.bodies[6:]] == [0.7, 0.7]


def test_a_local_worker_with_another_model_file_is_asked_again(tmp_path: Path) -> None:
    """A local worker's `model` is only a label: an answer of another GGUF file (or chat
    format) is not reused. Call lines of older versions, which do not name the file, are."""
    task = number_tasks(1)[0]
    log = tmp_path / "r.calls.jsonl"

    def local_pool(gguf: str, chat_format: str | None = None) -> PoolConfig:
        local = {"gguf": gguf, "chat_format": chat_format}
        return PoolConfig.model_validate({"workers": [{"id": "loc", "model": "m", "local": local}]})

    def state(config: PoolConfig) -> collect_module.CollectState:
        return collect_module.CollectState(config, [task], tmp_path / "r.jsonl", log).load()

    first = local_pool(str(tmp_path / "q4.gguf"))
    worker = first.workers[0]
    answer = {"event": "call", "task_id": task.id, "worker_id": "loc", "output": "1",
              "request_hash": collect_module.request_hash(worker, task)}  # fmt: skip
    log.write_text(json.dumps({**answer, "local_hash": collect_module.local_hash(worker)}) + "\n")
    assert state(first).cells_to_call("loc") == []
    for changed in (local_pool(str(tmp_path / "q8.gguf")), local_pool(worker.local.gguf, "chatml")):
        again = state(changed)
        assert again.cells_to_call("loc") == [task.id]
        assert again.reask_notes() == [
            "1 saved answer of loc is not reused and asked again: its request (model, "
            "system_prompt, params, a local worker's gguf or chat_format, or the task's "
            "prompt) changed since it was answered"
        ]
    log.write_text(json.dumps(answer) + "\n")  # an older version's line
    assert state(local_pool(str(tmp_path / "q8.gguf"))).cells_to_call("loc") == []


def test_a_local_worker_whose_model_file_was_replaced_in_place_is_asked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another GGUF downloaded under the same file name (another quant, another model) gave
    the same local_hash, which names the path only: the old file's answers were reused and
    mixed with the new one's in the records. Call lines now hold the file's SHA-256."""
    monkeypatch.setenv("FUGU_LITE_CACHE_DIR", str(tmp_path / "cache"))
    task = number_tasks(1)[0]
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF q4 weights")
    config = PoolConfig.model_validate(
        {"workers": [{"id": "loc", "model": "m", "local": {"gguf": str(gguf)}}]}
    )
    log = tmp_path / "r.calls.jsonl"

    def state() -> collect_module.CollectState:
        return collect_module.CollectState(config, [task], tmp_path / "r.jsonl", log).load()

    worker = config.workers[0]
    answer = {"event": "call", "task_id": task.id, "worker_id": "loc", "output": "1",
              "request_hash": collect_module.request_hash(worker, task),
              "local_hash": collect_module.local_hash(worker)}  # fmt: skip
    digest = collect_module.gguf_sha256(worker)
    assert digest == hashlib.sha256(b"GGUF q4 weights").hexdigest()
    log.write_text(json.dumps({**answer, "gguf_sha256": digest}) + "\n")
    assert state().cells_to_call("loc") == []

    gguf.write_bytes(b"GGUF q8 weights, another file")  # replaced under the same name
    again = state()
    assert again.cells_to_call("loc") == [task.id] and len(again.reask_notes()) == 1
    log.write_text(json.dumps(answer) + "\n")  # an older version's line: taken as the same
    assert state().cells_to_call("loc") == []


def test_grades_of_a_local_judge_whose_model_file_was_replaced_are_judged_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A local judge's GGUF replaced under the same name gave the same judge_hash (its path
    only): the old model's verdicts were reused beside the new one's. Grade lines now hold
    the judge's file SHA-256, and a grade of other content is judged again."""
    monkeypatch.setenv("FUGU_LITE_CACHE_DIR", str(tmp_path / "cache"))
    task = haiku_tasks(1)[0]
    gguf = tmp_path / "judge.gguf"
    gguf.write_bytes(b"GGUF judge one")
    config = PoolConfig.model_validate(
        {"workers": [{"id": "w", "model": "m", "base_url": "http://127.0.0.1:9/v1"},
                     {"id": "judge", "model": "j", "local": {"gguf": str(gguf)}}]}
    )  # fmt: skip
    log = tmp_path / "r.calls.jsonl"

    def state() -> collect_module.CollectState:
        return collect_module.CollectState(
            config, [task], tmp_path / "r.jsonl", log, judge_worker="judge"
        ).load()

    cell = {"task_id": task.id, "worker_id": "w",
            "request_hash": collect_module.request_hash(config.workers[0], task)}  # fmt: skip
    call = {**cell, "event": "call", "output": "Rain."}
    grade = {**cell, "event": "grade", "score": 0.7, "judge_worker_id": "judge",
             "grading_hash": collect_module.grading_hash(task),
             "judge_hash": collect_module.judge_hash(config.workers[1])}  # fmt: skip
    digest = collect_module.gguf_sha256(config.workers[1])
    log.write_text(f"{json.dumps(call)}\n{json.dumps({**grade, 'judge_gguf_sha256': digest})}\n")
    assert state().cells_to_grade() == []

    gguf.write_bytes(b"GGUF judge two, another model")  # replaced under the same name
    again = state()
    assert again.cells_to_grade() == [(task.id, "w")]
    assert again.regrade_notes() == [
        "1 saved answer is graded again, without asking its worker again: the model file of "
        "judge judge (its gguf) changed since it judged them"
    ]
    log.write_text(f"{json.dumps(call)}\n{json.dumps(grade)}\n")  # an older version's lines
    assert state().cells_to_grade() == []


def answer_or_verdict(answer: str, verdict: str) -> Reply:
    """A stub worker's reply: `verdict` when it is asked to judge, else `answer` (a judge
    echoing the response's own score line is not read as its verdict)."""

    def reply(messages: list[dict[str, Any]]) -> str:
        return verdict if "Score the RESPONSE" in str(messages[-1]["content"]) else answer

    return reply


def test_judge_tasks_need_a_judge_worker(tmp_path: Path) -> None:
    tasks = [Task(id="j", prompt="Write a haiku.", grader="judge", task="poetry")]
    with StubWorker(answer_or_verdict("Autumn wind.", "SCORE: 8")) as stub:
        config = stub_pool(("w", stub))
        with pytest.raises(CollectError, match="--judge"):
            run(config, tasks, tmp_path / "r.jsonl")
        summary = run(config, tasks, tmp_path / "r.jsonl", judge_worker="w")
        judge_request = json.dumps(stub.bodies[-1]["messages"])
    assert summary.complete
    assert [line["event"] for line in log_lines(tmp_path / "r.jsonl")].count("judge") == 1
    assert read_records(tmp_path / "r.jsonl")[0].rewards == [pytest.approx(0.8)]  # 8 / 10
    assert "Write a haiku." in judge_request and "Autumn wind." in judge_request


def haiku_tasks(n: int) -> list[Task]:
    return [Task(id=f"h{i}", prompt=f"Write haiku {i}.", grader="judge", task="poetry")
            for i in range(n)]  # fmt: skip


@pytest.mark.parametrize("empty", ["", " \n\t "])
def test_an_empty_answer_scores_0_without_asking_the_judge(tmp_path: Path, empty: str) -> None:
    """An empty (or whitespace) answer to a judge task was sent to the judge, which was paid
    for and could score nothing at all above 0 (a lenient judge said `SCORE: 7`)."""
    tasks = haiku_tasks(2)
    with StubWorker(empty) as silent, StubWorker(answer_or_verdict("Rain.", "SCORE: 7")) as judge:
        config = stub_pool(("silent", silent), ("judge", judge))
        summary = run(config, tasks, tmp_path / "r.jsonl", judge_worker="judge")
    assert summary.complete
    assert [record.rewards for record in read_records(tmp_path / "r.jsonl")] == [[0.0, 0.7]] * 2
    assert len(judge.bodies) == 2 + 2  # its own answers and their judging, never silent's
    grades = [line for line in log_lines(tmp_path / "r.jsonl") if line["event"] == "grade"]
    assert {line["detail"] for line in grades if line["worker_id"] == "silent"} == {"empty output"}


def test_the_judges_calls_and_cost_are_shown_under_the_table(tmp_path: Path) -> None:
    """A paid judge's calls were in no count and no cost: the table's cost is the graded
    answers' (the records'), so what judging cost could only be summed from the call log."""
    tasks = haiku_tasks(2)
    output = tmp_path / "r.jsonl"
    with StubWorker(answer_or_verdict("Rain on the roof.", "SCORE: 8")) as stub:
        config = stub_pool(("w", stub), ("judge", stub))
        summary = run(config, tasks, output, judge_worker="judge")
        again = run(config, tasks, output, judge_worker="judge")  # finished: from the log
    judged = [line for line in log_lines(output) if line["event"] == "judge"]
    assert len(judged) == 4 and all(line["cost"] > 0 for line in judged)
    cost = sum(line["cost"] for line in judged)
    for result in (summary, again):
        assert [(j.worker_id, j.calls) for j in result.judges] == [("judge", 4)]
        assert result.judges[0].cost == pytest.approx(cost)
    console = Console(width=100, record=True)
    console.print(summary_table(again))
    caption = re.search(r"judge judge: 4 calls, cost \$(0\.0*\d\d)\b", console.export_text())
    assert caption is not None and float(caption[1]) == pytest.approx(cost, rel=0.05)


def test_the_summary_table_shows_money_as_money() -> None:
    """Costs were printed with two significant digits in e-notation where large or small:
    $123.40 as '1.2e+02' (read at a glance as 1.2) and $0.0000156 as '1.6e-05'."""
    workers = [
        WorkerSummary(worker_id=worker_id, done=1, pending=0, calls=1, errors=0,
                      mean_score=1.0, cost=cost, mean_latency_s=1.0)
        for worker_id, cost in (("big", 1234.5), ("dear", 123.4), ("cheap", 0.0000156),
                                ("free", 0.0))
    ]  # fmt: skip
    summary = CollectSummary(output="r.jsonl", log="r.calls.jsonl", tasks=1, records_total=1,
                             records_written=1, workers=workers,
                             judges=[JudgeSummary(worker_id="j", calls=3, cost=0.25)])  # fmt: skip
    console = Console(width=100, record=True)
    console.print(summary_table(summary))
    text = console.export_text()
    costs = {line.split()[0]: line.split()[-2] for line in text.splitlines()
             if line.split()[:1] in (["big"], ["dear"], ["cheap"], ["free"])}  # fmt: skip
    assert costs == {"big": "$1,234.50", "dear": "$123.40", "cheap": "$0.000016", "free": "$0"}
    assert "judge j: 3 calls, cost $0.25" in text and "e+" not in text and "e-0" not in text


def test_judge_calls_name_the_task_and_the_answer_they_judged(tmp_path: Path) -> None:
    tasks = haiku_tasks(2)
    output = tmp_path / "r.jsonl"
    with (
        StubWorker(answer_or_verdict("Rain.", "SCORE: 8")) as a,
        StubWorker(answer_or_verdict("Snow.", "SCORE: 6")) as b,
    ):
        config = stub_pool(("a", a), ("b", b))
        run(config, tasks, output, judge_worker="a")
        summary = run(config, tasks, output, judge_worker="a")  # reads its own judge lines
    assert summary.complete and summary.records_written == 0
    lines = log_lines(output)
    answers = {(x["task_id"], x["worker_id"]): x for x in lines if x["event"] == "call"}
    judged = [line for line in lines if line["event"] == "judge"]
    assert sorted((x["task_id"], x["judged_worker_id"]) for x in judged) == sorted(answers)
    for line in judged:
        answer = answers[(line["task_id"], line["judged_worker_id"])]
        assert line["worker_id"] == "a" and line["judged_request_hash"] == answer["request_hash"]


def test_an_unreadable_judge_is_explained_retried_and_never_scored_zero(tmp_path: Path) -> None:
    tasks = haiku_tasks(1)
    write_tasks(tmp_path / "tasks.jsonl", tasks)
    output = tmp_path / "r.jsonl"
    with StubWorker("Rain on the roof.") as worker, StubWorker("I like it.") as judge:
        config = stub_pool(("w", worker), ("judge", judge))
        result = collect_with_judge(config, tmp_path, output)
        assert result.exit_code == 1 and not output.exists()
        assert "1 answer of w could not be graded" in result.output
        assert "`SCORE: N`" in result.output and "stronger --judge" in result.output
        assert "'I like it.'" in result.output
        failed = [line for line in log_lines(output) if line["event"] == "grade"]
        assert sorted(line["worker_id"] for line in failed) == ["judge", "w"]  # both answers
        assert all("`SCORE: N`" in line["grade_error"] for line in failed)

        judge.reply = "Good.\nSCORE: 7"
        summary = run(config, tasks, output, judge_worker="judge")
        assert len(worker.bodies) == 1  # the saved answer is judged again, not asked again
    assert summary.complete and read_records(output)[0].rewards == [pytest.approx(0.7)] * 2
    assert summary.workers[0].ungraded == 0 and summary.workers[0].grade_error is None


def test_collect_shows_task_ids_and_paths_as_they_are(tmp_path: Path) -> None:
    """A task id holding an ESC went raw to the terminal in the line naming an answer that
    could not be graded, and an output folder named `[bold]runs` lost its name to rich
    markup in the warning about a torn line."""
    task = Task(id="h\x1b[31m\n0", prompt="Write a haiku.", grader="judge", task="poetry")
    write_tasks(tmp_path / "tasks.jsonl", [task])
    output = tmp_path / "[bold]runs" / "r.jsonl"
    output.parent.mkdir()
    output.write_text('{"prompt": "torn')
    with StubWorker("Rain on the roof.") as worker, StubWorker("I like it.") as judge:
        config = stub_pool(("w", worker), ("judge", judge))
        result = collect_with_judge(config, tmp_path, output)
    assert result.exit_code == 1, result.output
    assert "\x1b" not in result.output
    assert r"the first: task h\x1b[31m\n0: could not read a score" in result.output
    assert f"{output}: cut an unfinished last line" in result.output, result.output


def test_collect_prints_its_result_on_stdout_and_its_warnings_on_stderr(tmp_path: Path) -> None:
    """The end-of-run warnings (answers that could not be graded, a worker down, tasks still
    missing) went to stdout with the table, where errors, notes and every other command's
    warnings go to stderr: `collect ... > summary.txt` hid them from the terminal."""
    write_tasks(tmp_path / "tasks.jsonl", haiku_tasks(3))
    output = tmp_path / "r.jsonl"
    with StubWorker("Rain on the roof.") as worker, StubWorker("I like it.") as judge:
        config = judge_pool(closed_url(), w=worker, judge=judge)
        result = collect_with_judge(config, tmp_path, output)
    assert result.exit_code == 1, result.output
    assert "0/3 records" in result.stdout and f"records: {output}" in result.stdout
    for warning in ("could not be graded", "worker down is down", "3 of 3 tasks still wait"):
        assert warning not in result.stdout and warning in result.stderr, result.output
    # each a `warning:` line, as every command's warnings (the last one had no prefix)
    assert [line.split(":")[0] for line in result.stderr.splitlines()[-3:]] == ["warning"] * 3


@pytest.mark.parametrize("limit", ["max_tokens", "max_completion_tokens"])
def test_a_judge_cut_at_its_token_limit_says_so(tmp_path: Path, limit: str) -> None:
    """A judge limited by max_completion_tokens (OpenAI's o-series refuse max_tokens) was
    said to stop at 'max_tokens the server's default', to be raised where it was not set."""
    tasks = haiku_tasks(1)
    with StubWorker("Rain.") as worker, StubWorker("The response is") as judge:
        judge.finish_reason = "length"
        config = stub_pool(("w", worker), ("judge", judge), params={limit: 24})
        summary = run(config, tasks, tmp_path / "r.jsonl", judge_worker="judge")
    assert not summary.complete and summary.workers[0].ungraded == 1
    assert "task h0: the judge failed" in (summary.workers[0].grade_error or "")
    assert f"({limit} 24)" in (summary.workers[0].grade_error or "")
    assert f"raise params.{limit} of worker judge" in (summary.workers[0].grade_error or "")


def test_a_judge_refusing_every_call_is_down_and_its_answers_wait(tmp_path: Path) -> None:
    """A judge with a bad key (a paid remote API, faked by the stub) refused every verdict
    alike: each answer was sent to it, failed and logged one by one to the end of the run. It
    is now taken as down as a worker is, the other answers are not sent to it and wait,
    saved, for the next run, which judges them without asking their worker again."""
    tasks = haiku_tasks(8)
    output = tmp_path / "r.jsonl"
    verdict = answer_or_verdict("Snow.", "SCORE: 7")
    with StubWorker("Rain.") as worker, StubWorker(verdict, mode="401") as judge:
        config = stub_pool(("w", worker), ("judge", judge), max_concurrency=1)
        summary = run(config, tasks, output, judge_worker="judge")
        stats = {worker.worker_id: worker for worker in summary.workers}
        assert "its last 3 calls were refused with HTTP 401" in (stats["judge"].down or "")
        # 3 refusals in a row, and at most the 2 others already sent when it went down
        assert 3 <= len(judge.bodies) <= 5, len(judge.bodies)
        assert stats["w"].calls == 8 and stats["w"].ungraded == 8 and not summary.complete
        judged = [line for line in log_lines(output) if line["event"] == "judge"]
        assert len(judged) < 8
        assert any("worker judge is down (its last 3 calls" in (line.get("grade_error") or "")
                   for line in log_lines(output))  # fmt: skip

        judge.mode = "ok"  # the key is fixed
        summary = run(config, tasks, output, judge_worker="judge")
    assert summary.complete and len(worker.bodies) == 8  # the saved answers were judged
    assert all(record.rewards == [pytest.approx(0.7)] * 2 for record in read_records(output))


def judge_pool(down_url: str, **stubs: StubWorker) -> PoolConfig:
    """The stubs as workers (each answers and may judge), plus `down`: nothing listens on its
    port, so with down_after=1 no record is written and every task stays pending."""
    workers = stub_pool(*stubs.items()).model_dump()["workers"]
    closed = {**workers[0], "id": "down", "base_url": down_url}
    return PoolConfig.model_validate({"workers": [*workers, closed]})


def closed_url() -> str:
    down = StubWorker("").start()
    down.stop()
    return down.base_url


def judged(output: Path, judged_worker: str) -> list[dict]:
    return [line for line in log_lines(output)
            if line["event"] == "judge" and line["judged_worker_id"] == judged_worker]  # fmt: skip


def graded(output: Path) -> Counter:
    return Counter(line["task_id"] for line in log_lines(output) if line["event"] == "grade")


def test_another_judge_regrades_saved_answers_calling_only_the_judge(tmp_path: Path) -> None:
    """A resume with another --judge judges the saved answers of unfinished tasks again (and
    says so); answers are not asked again, other graders' grades stay; the same judge next
    time redoes nothing."""
    tasks = [*haiku_tasks(2), *number_tasks(1)]
    output = tmp_path / "r.jsonl"
    with (
        StubWorker(answer_or_verdict("Rain. The answer is 1.", "SCORE: 9")) as w,
        StubWorker(answer_or_verdict("Snow.", "SCORE: 2")) as a,
        StubWorker(answer_or_verdict("Sun.", "SCORE: 6")) as b,
    ):
        config = judge_pool(closed_url(), w=w, a=a, b=b)
        run(config, tasks, output, judge_worker="a", down_after=1)
        answers = len(w.bodies)
        summary = run(config, tasks, output, judge_worker="b", down_after=1)
        assert len(w.bodies) == answers  # its saved answers were judged again, not asked again
        assert len(judged(output, "w")) == 4  # 2 by a, then 2 by b
        assert [line["worker_id"] for line in judged(output, "w")[2:]] == ["b", "b"]
        assert graded(output)["add-0"] == 3  # the number task's grades were kept
        assert summary.regrades == [
            "6 saved answers are graded again, without asking their workers again: they were "
            "judged by a, this run judges with b"
        ]
        again = run(config, tasks, output, judge_worker="b", down_after=1)
        assert again.regrades == [] and len(judged(output, "w")) == 4  # the same judge: none

        config.workers[3].base_url = w.base_url  # the down worker is back
        summary = run(config, tasks, output, judge_worker="b")
    assert summary.complete and summary.regrades == []
    rewards = {record.id: record.rewards for record in read_records(output)}
    assert rewards["h0"] == [pytest.approx(0.6)] * 4 and rewards["add-0"] == [1.0, 0, 0, 1.0]


@pytest.mark.parametrize(
    ("change", "regraded"),
    [
        ({}, False),
        ({"params": {"temperature": 0.7}}, False),  # a judge call is always temperature 0
        ({"params": {"max_tokens": 64}}, True),
        ({"system_prompt": "Be strict."}, True),
        ({"model": "another-model"}, True),
        ({"base_url": "moved"}, True),
    ],
)
def test_a_judge_whose_settings_changed_judges_again(
    tmp_path: Path, change: dict, regraded: bool
) -> None:
    tasks = haiku_tasks(1)
    output = tmp_path / "r.jsonl"
    with (
        StubWorker(answer_or_verdict("Rain.", "SCORE: 9")) as w,
        StubWorker(answer_or_verdict("Snow.", "SCORE: 2")) as judge,
        StubWorker(answer_or_verdict("Snow.", "SCORE: 3")) as moved,
    ):
        config = judge_pool(closed_url(), w=w, judge=judge)
        run(config, tasks, output, judge_worker="judge", down_after=1)
        settings = {**change, "base_url": moved.base_url} if "base_url" in change else change
        changed = config.model_copy(deep=True)
        changed.workers[1] = changed.workers[1].model_copy(update=settings)
        summary = run(changed, tasks, output, judge_worker="judge", down_after=1)
    assert len(w.bodies) == 1  # never asked again
    assert len(judged(output, "w")) == (2 if regraded else 1)
    if not regraded:
        assert summary.regrades == []
        return
    # the judge's own answer too when it stays the same request (it answers as a worker)
    count = (
        "2 saved answers are graded again, without asking their workers"
        if "base_url" in change
        else "1 saved answer is graded again, without asking its worker"
    )
    assert summary.regrades == [
        f"{count} again: the settings of judge "
        "judge that shape its verdict (model, base_url or local, system_prompt, params) "
        "changed since it judged them"
    ]


def test_grades_of_an_older_log_without_their_judge_are_judged_again_once(
    tmp_path: Path,
) -> None:
    """Grade lines from before the judge was logged: the judge cells of unfinished tasks are
    judged again with a note saying why, other graders' grades are kept."""
    tasks = [*haiku_tasks(1), *number_tasks(1)]
    output = tmp_path / "r.jsonl"
    log = default_log_path(output)
    with (
        StubWorker(answer_or_verdict("The answer is 1.", "SCORE: 9")) as w,
        StubWorker(answer_or_verdict("Snow.", "SCORE: 2")) as judge,
    ):
        config = judge_pool(closed_url(), w=w, judge=judge)
        run(config, tasks, output, judge_worker="judge", down_after=1)
        old = [{k: v for k, v in line.items() if k not in ("judge_worker_id", "judge_hash")}
               for line in log_lines(output)]  # fmt: skip
        log.write_text("".join(json.dumps(line) + "\n" for line in old))
        summary = run(config, tasks, output, judge_worker="judge", down_after=1)
        assert len(judged(output, "w")) == 2 and graded(output)["add-0"] == 2  # kept
        assert len(summary.regrades) == 1
        assert summary.regrades[0].startswith("2 saved answers are graded again")
        assert "an older fugu-lite did not log which judge gave them" in summary.regrades[0]
        summary = run(config, tasks, output, judge_worker="judge", down_after=1)
    assert summary.regrades == [] and len(judged(output, "w")) == 2


def test_written_records_of_another_judge_are_reported_with_the_way_out(tmp_path: Path) -> None:
    tasks = haiku_tasks(2)
    write_tasks(tmp_path / "tasks.jsonl", tasks)
    output = tmp_path / "r.jsonl"
    with (
        StubWorker(answer_or_verdict("Rain.", "SCORE: 9")) as a,
        StubWorker(answer_or_verdict("Snow.", "SCORE: 2")) as b,
    ):
        config = stub_pool(("a", a), ("b", b))
        pool_path = tmp_path / "pool.yaml"
        pool_path.write_text(yaml.safe_dump(config.model_dump(mode="json")))
        run(config, tasks, output, judge_worker="a")
        args = ["collect", "--pool", str(pool_path), "-t", str(tmp_path / "tasks.jsonl"),
                "-o", str(output), "--judge", "b", "--no-progress"]  # fmt: skip
        result = CliRunner().invoke(app, args, env={"COLUMNS": "400"})
        assert result.exit_code == 0, result.output
        text = " ".join(result.output.split())
        assert "2 records already written keep grades that this run would give differently" in text
        assert "they were judged by a, this run judges with b" in text
        assert f"a new -o with --log {default_log_path(output)}" in text
        summary = run(config, tasks, output, judge_worker="b")
        assert [w.done for w in summary.workers] == [2, 2]  # the written records' grades
        assert len(a.bodies) == 2 + 4 and len(b.bodies) == 2  # nothing was called again

        fresh = tmp_path / "fresh.jsonl"  # the way out: one judge throughout
        summary = run(config, tasks, fresh, log=default_log_path(output), judge_worker="b")
    assert summary.complete and len(a.bodies) == 6 and len(b.bodies) == 2 + 4
    assert all(r.rewards == [pytest.approx(0.2)] * 2 for r in read_records(fresh))


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
    with StubWorker("The answer is 1.") as stub:
        pool_path = tmp_path / "pool.yaml"
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
        ]  # fmt: skip
        for args, expected in cases:
            result = CliRunner().invoke(app, [*base, *args], env={"COLUMNS": "400"})
            assert result.exit_code == 2 and expected in result.output, result.output
        assert not stub.bodies
    assert tasks_path.read_text() == tasks_text and pool_path.read_text() == pool_text
    assert sorted(path.name for path in tmp_path.iterdir()) == ["pool.yaml", "tasks.jsonl"]


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


# -- integration: real llama.cpp servers -------------------------------------------------------


def small_local_pool(path: Path, n_workers: int = 3, max_tokens: int = 12) -> Path:
    """The embedded pool with small token budgets (and distinct model names, so a test can
    tell the server processes apart)."""
    workers = []
    for worker in embedded_pool_config().workers[:n_workers]:
        data = worker.model_dump(mode="json", exclude_none=True)
        data["params"] = {**data["params"], "max_tokens": max_tokens}
        data["model"] = f"model-{worker.id}"
        data["timeout_s"] = 30
        data["max_retries"] = 1
        data["retry_backoff_s"] = 0.1
        workers.append(data)
    path.write_text(yaml.safe_dump({"workers": workers}))
    return path


def easy_tasks(path: Path, n_per_family: int) -> list[Task]:
    tasks = [t for t in generate_tasks(n_per_family, seed=3) if t.grader != "code"]
    write_tasks(path, tasks)
    return tasks


def start_collect(tmp_path: Path, pool: Path, tasks: Path, output: Path) -> subprocess.Popen:
    """`fugu-lite collect` with `tmp_path/tmp` as its system temp folder."""
    command = [FUGU, "collect", "--pool", str(pool), "--tasks", str(tasks), "-o", str(output),
               "--no-progress"]  # fmt: skip
    (tmp_path / "tmp").mkdir(exist_ok=True)
    return subprocess.Popen(
        command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "COLUMNS": "160", "TMPDIR": str(tmp_path / "tmp")},
    )  # fmt: skip


def wait_for(condition, timeout_s: float, process: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if process is not None and process.poll() is not None:
            raise AssertionError(f"the collector ended early:\n{process.stdout.read()}")
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        time.sleep(0.05)


def count_lines(path: Path, event: str | None = None) -> int:
    if not path.exists():
        return 0
    lines = [line for line in path.read_text().splitlines() if line.endswith("}")]
    return sum(event is None or f'"event":"{event}"' in line for line in lines)


def server_of(collector: subprocess.Popen, model: str) -> psutil.Process:
    for child in psutil.Process(collector.pid).children(recursive=True):
        if model in child.cmdline():
            return child
    raise AssertionError(f"no llama.cpp server for {model}")


@pytest.mark.integration
def test_collect_with_real_llama_cpp_workers(tmp_path: Path) -> None:
    pool = small_local_pool(tmp_path / "pool.yaml", n_workers=3, max_tokens=12)
    tasks = easy_tasks(tmp_path / "tasks.jsonl", 1)
    output = tmp_path / "rewards.jsonl"
    result = CliRunner().invoke(
        app,
        ["collect", "--pool", str(pool), "--tasks", str(tmp_path / "tasks.jsonl"),
         "-o", str(output), "--no-progress"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    records = read_records(output)
    assert len(records) == len(tasks)
    assert records[0].worker_ids == [w.id for w in embedded_pool_config().workers[:3]]
    for record in records:
        assert all(reward in (0.0, 1.0) for reward in record.rewards)  # 0/1 graders here
        assert record.costs is not None and all(cost > 0 for cost in record.costs)
    calls = [line for line in log_lines(output) if line["event"] == "call"]
    assert len(calls) == 3 * len(tasks)
    assert all(0 < line["usage"]["completion_tokens"] <= 12 for line in calls)
    model_files = {line["worker_id"]: line["local_hash"] for line in calls}  # all one GGUF
    assert len(model_files) == 3 and len(set(model_files.values())) == 1
    gguf = resolve_gguf(embedded_pool_config().workers[0].local.gguf)
    assert {line["gguf_sha256"] for line in calls} == {
        hashlib.sha256(gguf.read_bytes()).hexdigest()
    }


@pytest.mark.integration
def test_a_prompt_over_a_local_workers_n_ctx_is_scored_0_until_n_ctx_is_raised(
    tmp_path: Path,
) -> None:
    """llama.cpp's server refuses a prompt over its n_ctx (400 context_length_exceeded): the
    task got a record with 0 for that worker instead of staying pending for ever; with a
    larger n_ctx the refusal is not reused and the prompt is asked again."""
    pool = small_local_pool(tmp_path / "pool.yaml", n_workers=1, max_tokens=8)
    config = yaml.safe_load(pool.read_text())
    config["workers"][0]["local"]["n_ctx"] = 256
    pool.write_text(yaml.safe_dump(config))
    filler = "Read this sentence and then forget it again please. " * 40  # ~400 tokens
    tasks = [
        Task(id="short", prompt="What is 2 + 2?", answer="4", grader="number", task="arithmetic"),
        Task(
            id="long",
            prompt=f"{filler}What is 2 + 2?",
            answer="4",
            grader="number",
            task="arithmetic",
        ),
    ]
    write_tasks(tmp_path / "tasks.jsonl", tasks)
    output = tmp_path / "rewards.jsonl"
    args = ["collect", "--pool", str(pool), "--tasks", str(tmp_path / "tasks.jsonl"),
            "--no-progress"]  # fmt: skip
    result = CliRunner().invoke(app, [*args, "-o", str(output)], env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    assert "1 prompt is longer than the context of smollm2-direct" in result.stderr
    assert "maximum context length is 256 tokens" in result.stderr
    assert {r.id: r.rewards for r in read_records(output)}["long"] == [0.0]

    config["workers"][0]["local"]["n_ctx"] = 1024
    pool.write_text(yaml.safe_dump(config))
    larger = tmp_path / "larger.jsonl"
    log = default_log_path(output)
    result = CliRunner().invoke(app, [*args, "-o", str(larger), "--log", str(log)])
    assert result.exit_code == 0, result.output
    calls = [line for line in log_lines(output) if line["event"] == "call"]
    assert [line["task_id"] for line in calls if line.get("output") is not None] == [
        "short",
        "long",
    ]  # the short answer was reused, the long prompt asked again
    assert "longer than the context" not in result.stderr


@pytest.mark.integration
def test_a_local_worker_is_sent_one_call_at_a_time(tmp_path: Path) -> None:
    """A local worker with max_concurrency 4 had 4 calls sent at once to its llama.cpp
    server, which answers one at a time: the others waited in its queue while their
    timeout_s ran, timed out, got the server restarted and the healthy worker taken as down
    (2 of 6 tasks done with answers of ~4 s and timeout_s 10 on 2 busy cores)."""
    pool = small_local_pool(tmp_path / "pool.yaml", n_workers=1, max_tokens=8)
    config = yaml.safe_load(pool.read_text())
    config["workers"][0]["max_concurrency"] = 4
    pool.write_text(yaml.safe_dump(config))
    tasks = easy_tasks(tmp_path / "tasks.jsonl", 1)[:4]
    write_tasks(tmp_path / "tasks.jsonl", tasks)
    output = tmp_path / "rewards.jsonl"
    args = ["collect", "--pool", str(pool), "--tasks", str(tmp_path / "tasks.jsonl"),
            "-o", str(output), "--no-progress"]  # fmt: skip
    result = CliRunner().invoke(app, args, env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    calls = sorted(
        (line["started_at"], line["finished_at"])
        for line in log_lines(output)
        if line["event"] == "call"
    )
    assert len(calls) == 4
    # each call was sent after the one before it was answered, never queued behind it
    assert all(finished <= started for (_, finished), (started, _) in itertools.pairwise(calls))
    assert "smollm2-direct is sent one call at a time, not max_concurrency 4" in result.stderr


@pytest.mark.integration
def test_a_worker_server_killed_mid_run_is_started_again(tmp_path: Path) -> None:
    """A local worker's llama.cpp server that exited mid-run (a crash, the OOM killer) took
    the worker down for the rest of the run: every later cell of it waited for the next run.
    It is now started again and answers the rest; only the calls it failed wait."""
    pool = small_local_pool(tmp_path / "pool.yaml", n_workers=2, max_tokens=10)
    tasks = easy_tasks(tmp_path / "tasks.jsonl", 2)
    output = tmp_path / "rewards.jsonl"
    log = default_log_path(output)
    victim_id, survivor_id = (w.id for w in embedded_pool_config().workers[:2])

    collector = start_collect(tmp_path, pool, tmp_path / "tasks.jsonl", output)
    wait_for(lambda: count_lines(log, "call") >= 4, 120, collector)
    killed = server_of(collector, f"model-{victim_id}")
    killed.kill()
    killed_at = time.time()
    text, _ = collector.communicate(timeout=240)

    first_run = [json.loads(line) for line in log.read_text().splitlines()]
    victim_calls = [e for e in first_run if e["worker_id"] == victim_id and e["event"] == "call"]
    failed = [e for e in victim_calls if e.get("error")]
    assert collector.returncode == (1 if failed else 0), text
    assert all(e["error_kind"] in ("connection", "timeout") for e in failed)
    assert f"worker {victim_id} is down" not in text
    assert f"the llama.cpp server of {victim_id} exited 1 time this run" in text, text
    answered_after = [e for e in victim_calls if not e.get("error") and e["started_at"] > killed_at]
    assert answered_after  # the server started again answered the rest in this run
    written = record_ids(output) if output.exists() else []
    assert len(written) == len(tasks) - len({e["task_id"] for e in failed})

    collector = start_collect(tmp_path, pool, tmp_path / "tasks.jsonl", output)
    text, _ = collector.communicate(timeout=180)
    assert collector.returncode == 0, text
    ids = record_ids(output)
    assert sorted(ids) == sorted(t.id for t in tasks) and ids[: len(written)] == written
    calls = Counter(
        (e["task_id"], e["worker_id"]) for e in log_lines(output)
        if e["event"] == "call" and not e.get("error")
    )  # fmt: skip
    assert all(count == 1 for count in calls.values())  # nobody answered a cell twice
    assert {w for _, w in calls} == {victim_id, survivor_id}


def running(pids: list[int]) -> list[int]:
    alive = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.NoSuchProcess:
            pass
    return alive


def whole_lines(path: Path) -> bytes:
    data = path.read_bytes()
    return data[: data.rfind(b"\n") + 1]


@pytest.mark.integration
def test_ctrl_c_then_kill_9_then_resume_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    pool = small_local_pool(tmp_path / "pool.yaml", n_workers=2, max_tokens=10)
    tasks = easy_tasks(tmp_path / "tasks.jsonl", 4)
    output = tmp_path / "rewards.jsonl"

    # 1. Ctrl-C (SIGINT): a clean stop, servers shut down, every line whole.
    collector = start_collect(tmp_path, pool, tmp_path / "tasks.jsonl", output)
    wait_for(lambda: count_lines(output) >= 2, 180, collector)
    servers = [child.pid for child in psutil.Process(collector.pid).children(recursive=True)]
    collector.send_signal(signal.SIGINT)
    text, _ = collector.communicate(timeout=30)
    assert collector.returncode == 130 and "run the same command again" in text
    assert running(servers) == []
    after_interrupt = output.read_bytes()
    assert after_interrupt.endswith(b"\n")
    n_interrupted = len(after_interrupt.splitlines())

    # 2. kill -9 mid-run: the servers die with it; whatever was fully written stays.
    collector = start_collect(tmp_path, pool, tmp_path / "tasks.jsonl", output)
    wait_for(lambda: count_lines(output) >= n_interrupted + 2, 180, collector)
    servers = [child.pid for child in psutil.Process(collector.pid).children(recursive=True)]
    os.kill(collector.pid, signal.SIGKILL)
    collector.wait(timeout=10)
    complete = whole_lines(output)
    assert complete.startswith(after_interrupt)
    kept = [RewardRecord.model_validate_json(line) for line in complete.splitlines()]
    assert n_interrupted + 2 <= len(kept) < len(tasks)
    wait_for(lambda: running(servers) == [], 15)
    temp = tmp_path / "tmp" / f"fugu-lite-{os.getuid()}"
    left = sorted(path.name.split(".w-")[0] for path in temp.iterdir())
    assert left == sorted(f".llama-{w.id}" for w in embedded_pool_config().workers[:2])

    # 3. Resume to the end: its server starts remove the killed run's logs.
    collector = start_collect(tmp_path, pool, tmp_path / "tasks.jsonl", output)
    text, _ = collector.communicate(timeout=180)
    assert collector.returncode == 0, text
    assert output.read_bytes().startswith(complete)  # nothing written was lost or rewritten
    ids = record_ids(output)
    assert len(ids) == len(set(ids)) == len(tasks)
    assert set(ids) == {task.id for task in tasks}
    answered = Counter(
        (e["task_id"], e["worker_id"]) for e in log_lines(output)
        if e["event"] == "call" and not e.get("error")
    )  # fmt: skip
    assert len(answered) == 2 * len(tasks) and set(answered.values()) == {1}
    assert list(temp.iterdir()) == []
