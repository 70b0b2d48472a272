"""Reward collection against real llama.cpp servers with faults: a worker server killed
mid-run, the collector killed with kill -9 mid-run and resumed (integration)."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import psutil
import pytest
import yaml
from conftest import log_lines, record_ids
from typer.testing import CliRunner

from fugu_lite.cli import app
from fugu_lite.collect.journal import default_log_path
from fugu_lite.schemas import RewardRecord, read_records
from fugu_lite.task_families import generate_tasks
from fugu_lite.tasks import Task, write_tasks
from fugu_lite.workers.config import embedded_pool_config, resolve_gguf

FUGU = str(Path(sys.executable).with_name("fugu-lite"))


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
    if collector.stdout:
        collector.stdout.close()
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


@pytest.mark.integration
def test_a_worker_server_crashing_past_its_restarts_is_down_until_the_next_run(
    tmp_path: Path,
) -> None:
    """A local worker's server that exits more often than MAX_RESTARTS (3) per run is
    started again three times, then taken as down (not started a fourth time), its cells
    left pending for the next run, which answers them. The last exit's code and log were
    never shown (the log removed at the end of the run): the down worker's line said only
    'exited again after 3 restarts'."""
    pool = small_local_pool(tmp_path / "pool.yaml", n_workers=1, max_tokens=6)
    tasks = easy_tasks(tmp_path / "tasks.jsonl", 3)
    output = tmp_path / "rewards.jsonl"
    log = default_log_path(output)
    victim_id = embedded_pool_config().workers[0].id

    collector = start_collect(tmp_path, pool, tmp_path / "tasks.jsonl", output)
    killed: list[int] = []
    while collector.poll() is None and len(killed) < 4:
        answered = count_lines(log, "call") - count_errors(log)
        try:
            server = server_of(collector, f"model-{victim_id}")
        except (AssertionError, psutil.Error):
            time.sleep(0.05)
            continue
        # each server answers one call, then dies (the OOM killer, a crash)
        if server.pid not in killed and answered > len(killed):
            server.kill()
            killed.append(server.pid)
        time.sleep(0.05)
    text, _ = collector.communicate(timeout=240)
    assert len(killed) == 4, text
    assert collector.returncode == 1, text
    assert f"worker {victim_id} is down" in text, text
    assert "exited (code -9) again after 3 restarts this run" in text, text
    # the log of each server that exited, the last one too (removed when the run ended)
    assert text.count("Last lines of its log:") == 4, text
    assert len(set(re.findall(r"Started server process \[(\d+)\]", text))) == 4, text
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    failed = [e for e in calls if e["event"] == "call" and e.get("error")]
    assert len(failed) == 4  # one per crash; the cells after the last one were not called
    written = record_ids(output) if output.exists() else []
    assert 0 < len(written) < len(tasks)

    collector = start_collect(tmp_path, pool, tmp_path / "tasks.jsonl", output)
    text, _ = collector.communicate(timeout=240)
    assert collector.returncode == 0, text
    assert sorted(record_ids(output)) == sorted(task.id for task in tasks)


def count_errors(path: Path) -> int:
    if not path.exists():
        return 0
    return sum('"error":"' in line for line in path.read_text().splitlines())
