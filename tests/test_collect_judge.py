"""Collection graded by an LLM judge (a stub worker of the pool): its calls logged and
counted, a judge down or cut, and saved grades judged again after the judge changed."""

from __future__ import annotations

import asyncio
import io
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import AnsweringTogether, log_lines, number_tasks, run_collect, stub_pool
from rich.console import Console
from rich.progress import Progress, TaskID, TextColumn
from typer.testing import CliRunner, Result

from fugu_lite.cli import app
from fugu_lite.collect import hashes
from fugu_lite.collect import state as collect_state
from fugu_lite.collect.errors import CollectError
from fugu_lite.collect.journal import default_log_path
from fugu_lite.collect.run import Collector, collect
from fugu_lite.collect.state import CollectState, JudgeSummary
from fugu_lite.collect.summary import CollectSummary, WorkerSummary, summary_table
from fugu_lite.progress import LineProgress
from fugu_lite.schemas import read_records
from fugu_lite.tasks import Task, write_tasks
from fugu_lite.testing.stub_worker import Reply, StubWorker
from fugu_lite.workers.config import PoolConfig
from fugu_lite.workers.pool import WorkerPool


def collect_with_judge(config: PoolConfig, tmp_path: Path, output: Path) -> Result:
    """`fugu-lite collect` of tmp_path/tasks.jsonl into `output` by the pool `config`, graded
    by its worker `judge`, through the CLI (a wide terminal, no progress bars)."""
    pool_path = tmp_path / "pool.yaml"
    pool_path.write_text(yaml.safe_dump(config.model_dump(mode="json")))
    args = ["collect", "--pool", str(pool_path), "-t", str(tmp_path / "tasks.jsonl"),
            "-o", str(output), "--judge", "judge", "--no-progress"]  # fmt: skip
    return CliRunner().invoke(app, args, env={"COLUMNS": "400"})


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

    def state() -> collect_state.CollectState:
        return collect_state.CollectState(
            config, [task], tmp_path / "r.jsonl", log, judge_worker="judge"
        ).load()

    cell = {"task_id": task.id, "worker_id": "w",
            "request_hash": hashes.request_hash(config.workers[0], task)}  # fmt: skip
    call = {**cell, "event": "call", "output": "Rain."}
    grade = {**cell, "event": "grade", "score": 0.7, "judge_worker_id": "judge",
             "grading_hash": hashes.grading_hash(task),
             "judge_hash": hashes.judge_hash(config.workers[1])}  # fmt: skip
    digest = hashes.gguf_sha256(config.workers[1])
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


def test_a_runs_grade_and_judge_lines_name_its_judges_model_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The grade lines a run writes hold the SHA-256 of its judge's model file, which a
    later run compares (a local judge's GGUF replaced in place): without it, every later
    run took the old model's grades for the new one's. Faked here for a stub judge."""
    monkeypatch.setattr(collect_state, "gguf_sha256", lambda worker: f"sha-of-{worker.id}")
    tasks = haiku_tasks(2)
    output = tmp_path / "r.jsonl"
    with (
        StubWorker("Rain.") as worker,
        StubWorker(answer_or_verdict("Snow.", "SCORE: 7")) as judge,
    ):
        config = stub_pool(("w", worker), ("judge", judge))
        summary = run_collect(config, tasks, output, judge_worker="judge")
    assert summary.complete
    judged = [line for line in log_lines(output) if line["event"] in ("grade", "judge")]
    assert len(judged) == 8 and {line.get("judge_gguf_sha256") for line in judged} == {
        "sha-of-judge"
    }


def test_grades_of_a_local_judge_given_another_chat_format_are_judged_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A local judge's chat_format (its prompt template, which its requests do not name)
    fixed between runs gives other verdicts from the same GGUF file: its earlier verdicts
    are judged again, as those of a judge with another system_prompt are."""
    monkeypatch.setenv("FUGU_LITE_CACHE_DIR", str(tmp_path / "cache"))
    task = haiku_tasks(1)[0]
    gguf = tmp_path / "judge.gguf"
    gguf.write_bytes(b"GGUF judge")

    def pool(chat_format: str) -> PoolConfig:
        local = {"gguf": str(gguf), "chat_format": chat_format}
        return PoolConfig.model_validate(
            {"workers": [{"id": "w", "model": "m", "base_url": "http://127.0.0.1:9/v1"},
                         {"id": "judge", "model": "j", "local": local}]}
        )  # fmt: skip

    config, log = pool("chatml"), tmp_path / "r.calls.jsonl"
    cell = {"task_id": task.id, "worker_id": "w",
            "request_hash": hashes.request_hash(config.workers[0], task)}  # fmt: skip
    grade = {**cell, "event": "grade", "score": 0.7, "judge_worker_id": "judge",
             "grading_hash": hashes.grading_hash(task),
             "judge_hash": hashes.judge_hash(config.workers[1]),
             "judge_gguf_sha256": hashes.gguf_sha256(config.workers[1])}  # fmt: skip
    log.write_text(
        f"{json.dumps({**cell, 'event': 'call', 'output': 'Rain.'})}\n{json.dumps(grade)}\n"
    )

    def state(chat_format: str) -> collect_state.CollectState:
        return collect_state.CollectState(
            pool(chat_format), [task], tmp_path / "r.jsonl", log, judge_worker="judge"
        ).load()

    assert state("chatml").cells_to_grade() == []
    assert state("llama-3").cells_to_grade() == [(task.id, "w")]


def answer_or_verdict(answer: str, verdict: str) -> Reply:
    """A stub worker's reply: `verdict` when it is asked to judge, else `answer` (a judge
    echoing the response's own score line is not read as its verdict)."""

    def reply(messages: list[dict[str, Any]]) -> str:
        return verdict if "Score the RESPONSE" in str(messages[-1]["content"]) else answer

    return reply


def test_the_help_of_judge_says_what_collect_does_without_it(tmp_path: Path) -> None:
    """`collect --help` said that without --judge the judge-grader tasks' answers are
    collected and wait, ungraded, for a run with --judge; the command refuses such a task
    file instead, before any call."""
    tasks_path = tmp_path / "tasks.jsonl"
    write_tasks(tasks_path, [Task(id="j", prompt="Write a haiku.", grader="judge", task="poetry")])
    runner = CliRunner()
    with StubWorker(answer_or_verdict("Autumn wind.", "SCORE: 8")) as stub:
        pool_path = tmp_path / "pool.yaml"
        pool_path.write_text(yaml.safe_dump(stub_pool(("w", stub)).model_dump(mode="json")))
        args = ["collect", "--pool", str(pool_path), "-t", str(tasks_path), "--no-progress"]
        result = runner.invoke(app, [*args, "-o", str(tmp_path / "r.jsonl")])
        assert result.exit_code == 2 and "--judge" in result.output and stub.bodies == []
    help_text = runner.invoke(app, ["collect", "--help"], env={"COLUMNS": "200"}).output
    shown = " ".join(help_text.replace("│", " ").split())
    judge_help = shown[shown.index("--judge") :]
    assert "omitted: a task file with such tasks is refused" in judge_help
    assert "wait" not in judge_help[:200]


def test_judge_tasks_need_a_judge_worker(tmp_path: Path) -> None:
    tasks = [Task(id="j", prompt="Write a haiku.", grader="judge", task="poetry")]
    with StubWorker(answer_or_verdict("Autumn wind.", "SCORE: 8")) as stub:
        config = stub_pool(("w", stub))
        with pytest.raises(CollectError, match="--judge"):
            run_collect(config, tasks, tmp_path / "r.jsonl")
        summary = run_collect(config, tasks, tmp_path / "r.jsonl", judge_worker="w")
        judge_request = json.dumps(stub.bodies[-1]["messages"])
    assert summary.complete
    assert [line["event"] for line in log_lines(tmp_path / "r.jsonl")].count("judge") == 1
    assert read_records(tmp_path / "r.jsonl")[0].rewards == [pytest.approx(0.8)]  # 8 / 10
    assert "Write a haiku." in judge_request and "Autumn wind." in judge_request


def test_a_task_file_with_some_judge_tasks_needs_a_judge_before_any_call(tmp_path: Path) -> None:
    """A task file mixing judge tasks with others is refused without --judge as one of judge
    tasks alone is, before any call: its judge tasks' answers could never be graded, and the
    other tasks' answers would be paid for on a run that cannot finish."""
    tasks = [*number_tasks(2), *haiku_tasks(1)]
    with StubWorker(answer_or_verdict("The answer is 1.", "SCORE: 8")) as stub:
        with pytest.raises(CollectError, match="some tasks use the judge grader"):
            run_collect(stub_pool(("w", stub)), tasks, tmp_path / "r.jsonl")
        assert stub.bodies == []


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
        summary = run_collect(config, tasks, tmp_path / "r.jsonl", judge_worker="judge")
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
        summary = run_collect(config, tasks, output, judge_worker="judge")
        again = run_collect(config, tasks, output, judge_worker="judge")  # finished: from the log
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


def test_a_judge_reporting_no_usage_has_an_unknown_cost_not_zero(tmp_path: Path) -> None:
    """A judge whose server reports no token counts was captioned "cost $0" under the
    table, as if judging were free; its cost is now `?`."""
    tasks = haiku_tasks(2)
    with (
        StubWorker("Rain on the roof.") as worker,
        StubWorker(answer_or_verdict("Rain.", "SCORE: 8")) as judge,
    ):
        judge.mode = "no_usage"
        config = stub_pool(("w", worker), ("judge", judge), input_price_per_mtok=10.0)
        summary = run_collect(config, tasks, tmp_path / "r.jsonl", judge_worker="judge")
    judging = summary.judges[0]
    assert judging.calls == 4 and judging.unpriced == 4
    console = Console(width=100, record=True)
    console.print(summary_table(summary))
    assert "judge judge: 4 calls, cost ?" in console.export_text()


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


def test_a_cost_known_for_some_answers_only_shows_that_part_then_a_question_mark() -> None:
    """A worker (or judge) that reported token counts for some answers only: the table shows
    the cost of those, then `+?`, not `?` as for one that reported none, nor the known part
    alone as if it were the whole cost."""
    workers = [
        WorkerSummary(worker_id=worker_id, done=2, pending=0, calls=2, errors=0,
                      mean_score=1.0, cost=cost, unpriced=unpriced, mean_latency_s=1.0)
        for worker_id, cost, unpriced in (("some", 0.5, 1), ("none", 0.0, 2), ("all", 0.5, 0))
    ]  # fmt: skip
    judges = [JudgeSummary(worker_id="j", calls=3, cost=0.25, unpriced=1)]
    summary = CollectSummary(output="r.jsonl", log="r.calls.jsonl", tasks=1, records_total=1,
                             records_written=1, workers=workers, judges=judges)  # fmt: skip
    console = Console(width=100, record=True)
    console.print(summary_table(summary))
    text = console.export_text()
    costs = {line.split()[0]: line.split()[-2] for line in text.splitlines()
             if line.split()[:1] in (["some"], ["none"], ["all"])}  # fmt: skip
    assert costs == {"some": "$0.50+?", "none": "?", "all": "$0.50"}
    assert "judge j: 3 calls, cost $0.25+?" in text


def test_judge_calls_name_the_task_and_the_answer_they_judged(tmp_path: Path) -> None:
    tasks = haiku_tasks(2)
    output = tmp_path / "r.jsonl"
    with (
        StubWorker(answer_or_verdict("Rain.", "SCORE: 8")) as a,
        StubWorker(answer_or_verdict("Snow.", "SCORE: 6")) as b,
    ):
        config = stub_pool(("a", a), ("b", b))
        run_collect(config, tasks, output, judge_worker="a")
        summary = run_collect(config, tasks, output, judge_worker="a")  # reads its own judge lines
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
        summary = run_collect(config, tasks, output, judge_worker="judge")
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
    assert "0/3 records" in result.stdout and f"records: none written to {output}" in result.stdout
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
        summary = run_collect(config, tasks, tmp_path / "r.jsonl", judge_worker="judge")
    assert not summary.complete and summary.workers[0].ungraded == 1
    assert "task h0: the judge failed" in (summary.workers[0].grade_error or "")
    assert f"({limit} 24)" in (summary.workers[0].grade_error or "")
    assert f"raise params.{limit} of worker judge" in (summary.workers[0].grade_error or "")
    # the judge line keeps why the reply ended, as a call line does
    judged = [line for line in log_lines(tmp_path / "r.jsonl") if line["event"] == "judge"]
    assert judged and all(line.get("finish_reason") == "length" for line in judged), judged


def test_a_judge_cut_after_its_score_is_graded_by_it(tmp_path: Path) -> None:
    """A judge that scores first and explains after may be cut at its token limit in the
    explanation: its score is given, so the answer is graded by it, not left ungraded as a
    reply cut before its verdict."""
    tasks = haiku_tasks(2)
    with (
        StubWorker("Rain on the roof.") as worker,
        StubWorker(answer_or_verdict("Snow.", "SCORE: 7\nThe imagery is vivid, but")) as judge,
    ):
        judge.finish_reason = "length"
        config = stub_pool(("w", worker), ("judge", judge), params={"max_tokens": 24})
        summary = run_collect(config, tasks, tmp_path / "r.jsonl", judge_worker="judge")
    assert summary.complete and summary.workers[0].ungraded == 0
    assert all(
        record.rewards == [pytest.approx(0.7)] * 2 for record in read_records(tmp_path / "r.jsonl")
    )


def test_a_judge_cut_after_its_score_is_read_against_the_answer_without_its_thinking(
    tmp_path: Path,
) -> None:
    """The cut check reads the judge's reply as the judge grader does: without the score
    lines the judged answer itself holds, after that answer's thinking (the judge never sees
    the thinking). A score line only in the worker's thinking is no echo, so a judge cut
    after giving that very score has scored, and the answer is graded by it."""
    tasks = haiku_tasks(2)
    answer = "<think>\nSCORE: 7\n</think>\nRain on the roof."
    with StubWorker(answer_or_verdict(answer, "SCORE: 7\nThe imagery is vivid, but")) as stub:
        stub.finish_reason = "length"  # the judge's reply is cut; so is the answer, still whole
        config = stub_pool(("w", stub), ("judge", stub), params={"max_tokens": 24})
        summary = run_collect(config, tasks, tmp_path / "r.jsonl", judge_worker="judge")
    assert summary.complete and summary.workers[0].ungraded == 0, summary.workers[0].grade_error
    assert all(
        record.rewards[0] == pytest.approx(0.7) for record in read_records(tmp_path / "r.jsonl")
    )


def test_a_judges_reply_holding_half_an_emoji_grades_the_answer(tmp_path: Path) -> None:
    """The judge grader keeps the end of the judge's reply as its grade's detail: half of a
    surrogate pair there (`"\\ud83d"`, an emoji cut in two by a server counting UTF-16
    units) is kept as U+FFFD, as in an answer, or the grade line could not be written and
    every run paid the judge again and failed."""
    tasks = haiku_tasks(2)
    output = tmp_path / "r.jsonl"
    with StubWorker(answer_or_verdict("Rain.", "Vivid \ud83d\nSCORE: 7 \ud83d")) as stub:
        config = stub_pool(("w", stub), ("judge", stub))
        summary = run_collect(config, tasks, output, judge_worker="judge")
    assert summary.complete and summary.workers[0].ungraded == 0
    assert all(record.rewards == [pytest.approx(0.7)] * 2 for record in read_records(output))
    grades = [line for line in log_lines(output) if line["event"] == "grade"]
    assert all(grade["detail"].endswith("SCORE: 7 \ufffd") for grade in grades), grades


def test_a_judge_cut_after_echoing_the_answers_own_score_says_it_was_cut(
    tmp_path: Path,
) -> None:
    """A small judge that echoes the response (spending its tokens on it) and is cut at its
    token limit before its own verdict was told to be another model ('could not read a
    score ... judge with a model that follows this format'): the response's own 'Rating:
    9/10', echoed, was taken for the verdict that makes a cut reply whole. It is now said
    to be cut, with the limit to raise, as the judge grader reads no verdict in it."""
    tasks = haiku_tasks(1)
    echo = "The response reads:\nRain on the roof.\nRating: 9/10\nIt is"
    with (
        StubWorker("Rain on the roof.\nRating: 9/10") as worker,
        StubWorker(echo) as judge,
    ):
        judge.finish_reason = "length"
        config = stub_pool(("w", worker), ("judge", judge), params={"max_tokens": 24})
        summary = run_collect(config, tasks, tmp_path / "r.jsonl", judge_worker="judge")
    said = summary.workers[0].grade_error or ""
    assert summary.workers[0].ungraded == 1 and "(max_tokens 24)" in said, said
    assert "raise params.max_tokens of worker judge" in said


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
        summary = run_collect(config, tasks, output, judge_worker="judge")
        stats = {worker.worker_id: worker for worker in summary.workers}
        assert "its last 3 calls were refused with HTTP 401" in (stats["judge"].down or "")
        # 3 refusals in a row, and at most the 2 others already sent when it went down
        assert 3 <= len(judge.bodies) <= 5, len(judge.bodies)
        assert stats["w"].calls == 8 and stats["w"].ungraded == 8 and not summary.complete
        judged = [line for line in log_lines(output) if line["event"] == "judge"]
        assert len(judged) < 8
        assert any("worker judge is down (its last 3 calls" in (line.get("grade_error") or "")
                   for line in log_lines(output))  # fmt: skip
        # a refused call is billed nothing: known, not a cost the judge did not report
        assert summary.judges[0].unpriced == 0

        judge.mode = "ok"  # the key is fixed
        summary = run_collect(config, tasks, output, judge_worker="judge")
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
        run_collect(config, tasks, output, judge_worker="a", down_after=1)
        answers = len(w.bodies)
        summary = run_collect(config, tasks, output, judge_worker="b", down_after=1)
        assert len(w.bodies) == answers  # its saved answers were judged again, not asked again
        assert len(judged(output, "w")) == 4  # 2 by a, then 2 by b
        assert [line["worker_id"] for line in judged(output, "w")[2:]] == ["b", "b"]
        assert graded(output)["add-0"] == 3  # the number task's grades were kept
        assert summary.regrades == [
            "6 saved answers are graded again, without asking their workers again: they were "
            "judged by a, this run judges with b"
        ]
        again = run_collect(config, tasks, output, judge_worker="b", down_after=1)
        assert again.regrades == [] and len(judged(output, "w")) == 4  # the same judge: none

        config.workers[3].base_url = w.base_url  # the down worker is back
        summary = run_collect(config, tasks, output, judge_worker="b")
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
        run_collect(config, tasks, output, judge_worker="judge", down_after=1)
        settings = {**change, "base_url": moved.base_url} if "base_url" in change else change
        changed = config.model_copy(deep=True)
        changed.workers[1] = changed.workers[1].model_copy(update=settings)
        summary = run_collect(changed, tasks, output, judge_worker="judge", down_after=1)
    assert len(w.bodies) == 1  # never asked again
    assert len(judged(output, "w")) == (2 if regraded else 1)
    verdict_asked = [body for body in judge.bodies
                     if "Score the RESPONSE" in str(body["messages"][-1]["content"])]  # fmt: skip
    assert verdict_asked and {body.get("temperature") for body in verdict_asked} == {0.0}
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
        run_collect(config, tasks, output, judge_worker="judge", down_after=1)
        old = [{k: v for k, v in line.items() if k not in ("judge_worker_id", "judge_hash")}
               for line in log_lines(output)]  # fmt: skip
        log.write_text("".join(json.dumps(line) + "\n" for line in old))
        summary = run_collect(config, tasks, output, judge_worker="judge", down_after=1)
        assert len(judged(output, "w")) == 2 and graded(output)["add-0"] == 2  # kept
        assert len(summary.regrades) == 1
        assert summary.regrades[0].startswith("2 saved answers are graded again")
        assert "an older fugu-lite did not log which judge gave them" in summary.regrades[0]
        summary = run_collect(config, tasks, output, judge_worker="judge", down_after=1)
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
        run_collect(config, tasks, output, judge_worker="a")
        args = ["collect", "--pool", str(pool_path), "-t", str(tmp_path / "tasks.jsonl"),
                "-o", str(output), "--judge", "b", "--no-progress"]  # fmt: skip
        result = CliRunner().invoke(app, args, env={"COLUMNS": "400"})
        assert result.exit_code == 0, result.output
        text = " ".join(result.output.split())
        assert "2 records already written keep grades that this run would give differently" in text
        assert "they were judged by a, this run judges with b" in text
        assert f"a new -o with --log {default_log_path(output)}" in text
        summary = run_collect(config, tasks, output, judge_worker="b")
        assert [w.done for w in summary.workers] == [2, 2]  # the written records' grades
        assert len(a.bodies) == 2 + 4 and len(b.bodies) == 2  # nothing was called again

        fresh = tmp_path / "fresh.jsonl"  # the way out: one judge throughout
        summary = run_collect(config, tasks, fresh, log=default_log_path(output), judge_worker="b")
    assert summary.complete and len(a.bodies) == 6 and len(b.bodies) == 2 + 4
    assert all(r.rewards == [pytest.approx(0.2)] * 2 for r in read_records(fresh))


def as_killed_before_grading(output: Path) -> None:
    """The files of a finished run as they were when it was killed before its grade lines
    were written: its call log without them, and no records."""
    log = default_log_path(output)
    lines = log.read_text().splitlines(keepends=True)
    log.write_text("".join(line for line in lines if '"event":"grade"' not in line))
    output.unlink()


def test_a_verdict_logged_before_a_kill_is_not_paid_for_again(tmp_path: Path) -> None:
    """A run killed after the judge's reply was logged but before its grade line (kill -9,
    a power cut) lost the verdict: the judge line was only counted, and the next run paid
    the judge again for the same answer. The logged reply is now read as the verdict."""
    tasks = haiku_tasks(3)
    output = tmp_path / "r.jsonl"
    with (
        StubWorker(answer_or_verdict("Rain.", "SCORE: 6")) as w,
        StubWorker(answer_or_verdict("Snow.", "SCORE: 8")) as judge,
    ):
        config = stub_pool(("w", w), ("judge", judge))
        run_collect(config, tasks, output, judge_worker="judge")
        whole = read_records(output)
        as_killed_before_grading(output)
        paid = len(judge.bodies)
        summary = run_collect(config, tasks, output, judge_worker="judge")
    assert len(judge.bodies) == paid and len(w.bodies) == 3  # nobody was asked again
    # records are appended as tasks finish, so two runs may write them in another order
    assert summary.complete and sorted(read_records(output), key=lambda r: r.id) == sorted(
        whole, key=lambda r: r.id
    )
    assert summary.judges[0].calls == 6  # each answer judged once, in the first run


def test_a_verdict_logged_before_a_kill_under_another_rubric_is_asked_again(
    tmp_path: Path,
) -> None:
    """A judge's reply logged before a kill is reused only for the same messages: with the
    task's rubric fixed before the next run, the saved answers are judged again under it
    (a reply to the old rubric would have been read as the verdict)."""
    tasks = haiku_tasks(2)
    output = tmp_path / "r.jsonl"
    with (
        StubWorker(answer_or_verdict("Rain.", "SCORE: 6")) as w,
        StubWorker(answer_or_verdict("Snow.", "SCORE: 8")) as judge,
    ):
        config = stub_pool(("w", w), ("judge", judge))
        run_collect(config, tasks, output, judge_worker="judge")
        as_killed_before_grading(output)  # and the rubric is fixed before the next run
        fixed = [task.model_copy(update={"rubric": "Count the syllables."}) for task in tasks]
        paid = len(judge.bodies)
        summary = run_collect(config, fixed, output, judge_worker="judge")
        asked = judge.bodies[paid:]
    assert summary.complete and len(w.bodies) == 2 and len(asked) == 4  # each answer again
    assert all("Count the syllables." in str(body["messages"]) for body in asked)


@pytest.mark.parametrize("graders", [("number",), ("number", "judge")])
def test_a_judge_no_task_asks_for_is_said(tmp_path: Path, graders: tuple[str, ...]) -> None:
    """`--judge w` on tasks with no judge grader did nothing, silently: a user who meant the
    judge to grade every answer got the number grader's rewards without a word."""
    tasks = number_tasks(2)
    for task, grader in zip(tasks, graders, strict=False):
        task.grader = grader
    write_tasks(tmp_path / "tasks.jsonl", tasks)
    with StubWorker(answer_or_verdict("The answer is 1.", "SCORE: 9")) as stub:
        pool_path = tmp_path / "pool.yaml"
        config = stub_pool(("w", stub), max_concurrency=1)
        pool_path.write_text(yaml.safe_dump(config.model_dump(mode="json")))
        args = ["collect", "--pool", str(pool_path), "-t", str(tmp_path / "tasks.jsonl"),
                "-o", str(tmp_path / "r.jsonl"), "--judge", "w", "--no-progress"]  # fmt: skip
        result = CliRunner().invoke(app, args, env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    warned = "--judge w: no task of" in result.stderr
    assert warned == ("judge" not in graders)
    assert len(read_records(tmp_path / "r.jsonl")) == 2


def test_a_judge_not_in_the_pool_is_refused_without_a_warning_that_it_is_never_asked(
    tmp_path: Path,
) -> None:
    """`--judge` mistyped on tasks with no judge grader printed a warning that this judge is
    never asked (as if it were one of the pool's), then the error that it is not in the pool:
    two lines on one typo, the first of them moot. The error alone is said now."""
    write_tasks(tmp_path / "tasks.jsonl", number_tasks(2))
    with StubWorker("The answer is 1.") as stub:
        pool_path = tmp_path / "pool.yaml"
        pool_path.write_text(yaml.safe_dump(stub_pool(("w", stub)).model_dump(mode="json")))
        args = ["collect", "--pool", str(pool_path), "-t", str(tmp_path / "tasks.jsonl"),
                "-o", str(tmp_path / "r.jsonl"), "--judge", "ww", "--no-progress"]  # fmt: skip
        result = CliRunner().invoke(app, args, env={"COLUMNS": "400"})
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == ["error: --judge 'ww' is not in the pool; pick one of w"]
    assert stub.bodies == []


def test_a_reasoning_judges_draft_score_is_not_its_verdict(tmp_path: Path) -> None:
    """A reasoning judge (Qwen3, R1 distills) weighs a score inside `<think>`: cut there at its
    token limit, or ending without a verdict, it gave no score; its draft ("SCORE: 9") was
    read as one."""
    tasks = haiku_tasks(1)
    draft = "<think>The response is short. SCORE: 9? Let me weigh it against the rubric"
    with StubWorker("Rain.") as worker, StubWorker(draft) as judge:
        judge.finish_reason = "length"
        config = stub_pool(("w", worker), ("judge", judge), params={"max_tokens": 24})
        summary = run_collect(config, tasks, tmp_path / "r.jsonl", judge_worker="judge")
    assert summary.workers[0].ungraded == 1 and summary.workers[0].mean_score is None
    assert "raise params.max_tokens of worker judge" in (summary.workers[0].grade_error or "")
    with StubWorker("Rain.") as worker, StubWorker("<think>SCORE: 9?</think>Fine.") as judge:
        config = stub_pool(("w", worker), ("judge", judge))
        summary = run_collect(config, tasks, tmp_path / "s.jsonl", judge_worker="judge")
    assert summary.workers[0].ungraded == 1
    assert "could not read a score" in (summary.workers[0].grade_error or "")


def test_a_reasoning_judges_draft_score_is_asked_again_on_the_next_run(tmp_path: Path) -> None:
    """A judge's logged reply whose only score was a draft in its thinking was taken on the
    next run for a verdict paid for before a kill: the judge was not asked again, and the
    answers stayed ungraded run after run, while a reply with no score at all is judged
    again (README)."""
    tasks = haiku_tasks(2)
    output = tmp_path / "r.jsonl"
    draft = "<think>SCORE: 9?</think>Fine."
    with (
        StubWorker("Rain on the roof.") as worker,
        StubWorker(answer_or_verdict("Snow.", draft)) as judge,
    ):
        config = stub_pool(("w", worker), ("judge", judge))
        first = run_collect(config, tasks, output, judge_worker="judge")
        judge.reply = answer_or_verdict("Snow.", "Good.\nSCORE: 7")
        summary = run_collect(config, tasks, output, judge_worker="judge")
    assert first.workers[0].ungraded == 2
    assert summary.complete and summary.workers[0].mean_score == pytest.approx(0.7)
    assert len(worker.bodies) == 2  # judged again, not asked again


def test_the_judge_is_sent_as_many_calls_at_once_as_its_max_concurrency(tmp_path: Path) -> None:
    """Judging held one of collect's two grade slots (meant for the code grader's sandbox) for
    each call to the judge, so a judge taking 4 calls at once got 2: judging a collection took
    twice as long (8 times with a max_concurrency of 16). The judge holds its answers until it
    has had 4 calls at once: with a plain latency, collect's later sends raced the first
    answers on a loaded machine."""
    tasks = haiku_tasks(6)
    output = tmp_path / "r.jsonl"
    judge_stub = AnsweringTogether("I like it.", together=4)
    with StubWorker("Rain on the roof.") as worker, judge_stub as judge:
        config = stub_pool(("w", worker), ("judge", judge), max_concurrency=4)
        run_collect(config, tasks, output, judge_worker="judge")  # no verdict can be read
        judge.reply, judge.latency_s, judge.max_in_flight = "Good.\nSCORE: 7", 0.3, 0
        summary = run_collect(config, tasks, output, judge_worker="judge")  # judging only
    assert summary.complete and judge.max_in_flight == 4


def test_answers_waiting_for_a_judge_that_went_down_are_not_sent_to_it(tmp_path: Path) -> None:
    """Judging waits for the judge worker's own slots, where every answer to judge may queue:
    those queued when it is taken as down (a bad key) are not sent to it."""
    tasks = haiku_tasks(20)
    output = tmp_path / "r.jsonl"
    with StubWorker("Rain.") as worker, StubWorker("I like it.") as judge:
        config = stub_pool(("w", worker), ("judge", judge), max_concurrency=2)
        run_collect(config, tasks, output, judge_worker="judge")  # no verdict can be read
        judge.mode, judge.latency_s, asked = "401", 0.05, len(judge.bodies)
        summary = run_collect(config, tasks, output, judge_worker="judge")  # 40 to judge
    assert "refused with HTTP 401" in (summary.workers[1].down or "")
    assert len(judge.bodies) - asked <= 4  # 3 in a row, and 1 sent beside the third


def test_judging_saved_answers_again_shows_its_progress(tmp_path: Path) -> None:
    """A run whose work is judging saved answers again (the judge failed on them last run, or
    the judge changed) did it before any progress bar was drawn, each bar's total the calls
    still to make: hours of judging a large collection showed nothing. It now has a bar."""
    tasks = haiku_tasks(10)
    output = tmp_path / "r.jsonl"
    with StubWorker("Rain on the roof.") as worker, StubWorker("I like it.") as judge:
        config = stub_pool(("w", worker), ("judge", judge))
        run_collect(config, tasks, output, judge_worker="judge")  # no verdict can be read
        judge.reply = "Good.\nSCORE: 7"
        console = Console(width=200, record=True, force_terminal=False)
        summary = asyncio.run(collect(config, tasks, output, judge_worker="judge", console=console))
    assert summary.complete and len(worker.bodies) == 10  # judged again, not asked again
    lines = [line for line in console.export_text().splitlines() if "/20" in line]
    assert lines == [f"saved answers to grade: {done}/20" for done in range(2, 21, 2)], lines


def test_a_workers_bar_counts_answers_that_could_not_be_graded(tmp_path: Path) -> None:
    """A worker's bar said its errors as of its last call: an answer whose grading failed
    after it (the judge's reply unreadable) was left out, so the bar of a worker whose every
    answer could not be graded ended with no errors beside a table saying so; and one error
    read '1 errors'."""
    tasks = haiku_tasks(1)
    output = tmp_path / "r.jsonl"

    async def run(config: PoolConfig) -> Progress:
        state = CollectState(config, tasks, output, default_log_path(output), "judge").load()
        quiet = Console(file=io.StringIO())
        progress = Progress(TextColumn("{task.fields[status]}"), console=quiet)
        async with WorkerPool(config) as pool:
            await Collector(pool, state, judge_worker="judge", progress=progress).run()
        return progress

    with StubWorker("Rain on the roof.") as worker, StubWorker("I like it.") as judge:
        progress = asyncio.run(run(stub_pool(("w", worker), ("judge", judge))))
    statuses = {bar.description: bar.fields["status"] for bar in progress.tasks}
    # '1 error', not '1 errors'
    assert statuses == {"w": "[yellow]1 error[/yellow]", "judge": "[yellow]1 error[/yellow]"}


def test_a_workers_bar_is_full_once_its_answers_are_judged(tmp_path: Path) -> None:
    """A worker's bar moved on as each call came back, so with a judge slower than the workers
    every bar was full while most answers still waited for their verdict, and the run went on
    for as long with nothing moving. A bar now moves on as each answer is graded."""
    tasks = haiku_tasks(6)
    output = tmp_path / "r.jsonl"
    judged_when_full: list[int] = []

    class Watched(LineProgress):
        def update(self, bar: TaskID, advance: int = 0, **fields: Any) -> None:
            super().update(bar, advance, **fields)
            if self.bars[bar] == ("w", len(tasks)) and self.done[bar] == len(tasks):
                grades = [line for line in log_lines(output) if line["event"] == "grade"]
                judged_when_full.append(sum(line["worker_id"] == "w" for line in grades))

    async def run(config: PoolConfig) -> None:
        state = CollectState(config, tasks, output, default_log_path(output), "judge").load()
        progress = Watched(Console(file=io.StringIO()))
        async with WorkerPool(config) as pool:
            await Collector(pool, state, judge_worker="judge", progress=progress).run()

    with (
        StubWorker("Rain on the roof.") as worker,
        StubWorker(answer_or_verdict("Snow.", "SCORE: 7"), latency_s=0.1) as judge,
    ):
        asyncio.run(run(stub_pool(("w", worker), ("judge", judge), max_concurrency=1)))
    assert judged_when_full[:1] == [len(tasks)]
