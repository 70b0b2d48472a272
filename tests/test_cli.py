"""What every `fugu-lite` command shares, through typer's CliRunner: output paths checked
before any work, help texts, names shown as they are, one-line errors, interruptions; and
the smaller commands (tasks, serve, cache). The commands' own tests are in
test_cli_<command>.py."""

from __future__ import annotations

import inspect
import json
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from cli_support import CONFIG, Run, ctrl_c_at_its_default, flat, invoke, ok, runner
from conftest import WORKERS, generated_records, number_tasks, stub_pool

from fugu_lite.cli import app
from fugu_lite.cli.common import same_path
from fugu_lite.schemas import write_records
from fugu_lite.tasks import Task, write_tasks
from fugu_lite.testing.stub_worker import StubWorker


def test_tasks_generate_and_demo_refuse_unusable_paths_before_any_work(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    result = invoke("tasks", "generate", "-o", tmp_path)  # a folder, not a file
    assert result.exit_code == 2 and f"-o {tmp_path} is a directory" in flat(result.output)
    # the example is a task file's name: "e.g. DIR/records.jsonl" named a task file records
    assert f"give a file path, e.g. {tmp_path / 'tasks.jsonl'}" in flat(result.output)
    tasks = tmp_path / "t.jsonl"
    result = invoke("collect", "-t", tasks, "-o", tmp_path / "r.jsonl", "--log", tmp_path)
    assert f"e.g. {tmp_path / 'calls.jsonl'}" in flat(result.output)
    result = invoke("tasks", "generate", "-o", tmp_path / "afile" / "t.jsonl")
    assert result.exit_code == 2 and "is a file, so nothing can be created" in flat(result.output)
    result = invoke("demo", "--no-serve", "-o", tmp_path / "afile")
    assert result.exit_code == 2 and "is a file, not a folder" in flat(result.output)
    result = invoke("demo", "--no-serve", "-o", tmp_path / "d", "--pool", tmp_path / "no.yaml")
    assert result.exit_code == 2 and "pool file" in flat(result.output)
    assert not (tmp_path / "d").exists()  # refused before the LLMRouter stage


def test_an_output_through_a_link_loop_is_refused_naming_the_loop(tmp_path: Path) -> None:
    """`-o runs/x` with `runs` a link to itself (`ln -s runs runs`) was said to be a link to a
    disk not mounted ("which is not there ... create it"), and `-o loop.jsonl`, the file
    itself such a link, failed only once the output was written, after the work; each is
    refused before any work now, saying the link leads back to itself."""
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    records = tmp_path / "records.jsonl"  # never read: the output is checked first
    for args in (
        ("tasks", "generate", "-o", loop),
        ("tasks", "generate", "-o", loop / "tasks.jsonl"),
        ("train", "sft", "-r", records, "-o", loop),
        ("train", "sft", "-r", records, "-o", loop / "sft"),
    ):
        result = invoke(*args)
        assert result.exit_code == 2, (args, result.output)
        assert flat(result.stderr) == (
            f"error: -o {args[-1]}: {loop} is a link that leads back to itself ({loop} -> "
            f"{loop}), so it names nothing; remove the link or point it elsewhere, or give "
            "another path"
        ), args
    assert loop.readlink() == loop


@pytest.mark.parametrize(
    ("command", "flag", "advice"),
    [
        (["eval", "--checkpoint", "c", "-r", "r.jsonl"], "-o",
         "give the report folder, or leave -o out for the default"),
        (["demo", "--no-serve"], "-o",
         "give the folder for the demo's outputs, or leave -o out"),
        (["demo", "--no-serve", "-o", "d"], "-c",
         "give the pipeline YAML file, or leave -c out for the default"),
    ],
)  # fmt: skip
def test_an_empty_eval_or_demo_path_is_refused_not_read_as_the_working_directory(
    tmp_path: Path, monkeypatch, command: list[str], flag: str, advice: str
) -> None:
    """`eval -o "$OUT"` with OUT unset is `-o ''`, which a Path reads as `.`: the report was
    written into the working directory, replacing a predictions.jsonl of the user's there;
    `demo -o ''` put its runs there too, and `demo -c ''` was refused as ". is a directory"."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "predictions.jsonl").write_text("mine\n", encoding="utf-8")
    result = invoke(*command, flag, "")
    assert result.exit_code == 2, result.output
    expected = f"error: {flag} '': is empty (an unset shell variable?); {advice}"
    assert flat(result.output) == expected
    assert [path.name for path in tmp_path.iterdir()] == ["predictions.jsonl"]
    assert (tmp_path / "predictions.jsonl").read_text(encoding="utf-8") == "mine\n"


@pytest.mark.parametrize(
    "command",
    [
        ["route", "--checkpoint", "", "hi"],
        ["eval", "-r", "r.jsonl", "--checkpoint", ""],
        ["serve", "--checkpoint", ""],
        ["serve", "--checkpoint", "c", "--api-keys-file", ""],
        ["serve", "--checkpoint", "c", "--log-requests", ""],
        ["collect", "-o", "r.jsonl", "--tasks", ""],
        ["collect", "-t", "t.jsonl", "--output", ""],
        ["collect", "-t", "t.jsonl", "-o", "r.jsonl", "--log", ""],
        ["collect", "-t", "t.jsonl", "-o", "r.jsonl", "--pool", ""],
        ["data", "import", "long", "long.csv", "--output", ""],
        ["tasks", "generate", "--output", ""],
        ["demo", "--no-serve", "--data-dir", ""],
        ["cache", "list", "--cache-dir", ""],
        ["cache", "clear", "--cache-dir", ""],
        ["route", "--checkpoint", "c", "--backbone", "", "hi"],
        ["eval", "--checkpoint", "c", "-r", "r.jsonl", "--backbone", ""],
        ["train", "rl", "-r", "r.jsonl", "-o", "o", "--checkpoint", ""],
        ["train", "es", "-r", "r.jsonl", "-o", "o", "--checkpoint", ""],
        # blank, not only empty: a file named ' ' was written in the working directory
        ["tasks", "generate", "--output", " "],
        ["route", "--checkpoint", "c", "--backbone", "\t", "hi"],
    ],
)
def test_every_path_option_refuses_an_empty_path(
    tmp_path: Path, monkeypatch, command: list[str]
) -> None:
    """`--checkpoint ''` (an unset shell variable) was refused as ". is not a fugu-lite router
    checkpoint", `--backbone ''` as "could not load the backbone folder CWD", `collect --pool
    ''` as ". is a directory", `-o ''` as "-o CWD is a directory", names the user never
    wrote, and `cache list --cache-dir ''` said "nothing cached in .": each now says the path
    is empty, naming its option."""
    monkeypatch.chdir(tmp_path)
    result = invoke(*command)
    flag = command[next(index for index, part in enumerate(command) if not part.strip()) - 1]
    message = flat(result.output)
    assert result.exit_code == 2, message
    assert message.startswith(f"error: {flag} '"), message
    assert "': is empty (an unset shell variable?); give" in message, message
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("command", "said"),
    [
        (["tasks", "generate", "--per-family", "0"],
         "error: --per-family 0: Input should be greater than or equal to 1"),
        (["tasks", "generate", "--per-family=ten"],
         "error: --per-family ten: Input should be a valid integer, unable to parse string as "
         "an integer"),
        (["tasks", "generate", "--per-family", "5", "--per-family", "0"],  # the last one counts
         "error: --per-family 0: Input should be greater than or equal to 1"),
        (["route", "--checkpoint", "c", "--cost-weight", "a lot", "hi"],
         "error: --cost-weight 'a lot': Input should be a valid number, unable to parse string "
         "as a number"),
    ],
)  # fmt: skip
def test_an_option_value_out_of_range_or_of_the_wrong_type_is_one_error_line(
    tmp_path: Path, monkeypatch, command: list[str], said: str
) -> None:
    """`tasks generate --per-family 0` (or `--port 0`, `--cost-weight x`) was refused by
    Click: its usage lines, then "Error: Invalid value for '--per-family': ...", unlike every
    other refusal's one `error:` line naming the option and the value given."""
    monkeypatch.chdir(tmp_path)
    result = invoke(*command, "-o", tmp_path / "out") if command[0] == "tasks" else invoke(*command)
    assert result.exit_code == 2, result.output
    assert result.output == f"{said}\n"
    assert list(tmp_path.iterdir()) == []


def test_a_missing_or_unknown_option_keeps_the_usage_lines() -> None:
    """Only a refused value is one error line: a missing argument or an unknown option is told
    with the command's usage, which says what it takes."""
    for args, error in ((["route"], "Missing argument"), (["tasks", "generate", "--bogus"],
                        "No such option: --bogus")):  # fmt: skip
        result = invoke(*args)
        assert result.exit_code == 2 and result.output.startswith("Usage: "), result.output
        assert error in result.output


def test_collect_with_a_directory_where_its_default_call_log_goes_says_so(tmp_path: Path) -> None:
    """A directory named like -o's default call log (r.calls.jsonl) ended collect in an
    IsADirectoryError traceback; now it is refused up front with the way out."""
    tasks = tmp_path / "t.jsonl"
    write_tasks(tasks, number_tasks(1))
    (tmp_path / "r.calls.jsonl").mkdir()
    result = invoke("collect", "-t", tasks, "-o", tmp_path / "r.jsonl")
    message = flat(result.output)
    assert result.exit_code == 2, message
    assert f"{tmp_path / 'r.calls.jsonl'} by default, and that is a directory" in message
    assert f"--log {tmp_path / 'r.log.jsonl'}" in message
    assert not (tmp_path / "r.jsonl").exists()


@pytest.mark.parametrize("flag", ["--pool", "--api-keys-file"])
def test_serve_refuses_a_decision_log_that_is_one_of_its_inputs(
    run: Run, tmp_path: Path, flag: str
) -> None:
    """`serve --pool pool.yaml --log-requests pool.yaml` appended its JSON lines to the pool
    file (the next start failed on it), and to a keys file each line became an API key."""
    shared = tmp_path / "shared.txt"
    shared.write_text("workers: []\n", encoding="utf-8")
    result = invoke("serve", "--checkpoint", run.checkpoint, flag, shared,
                    "--log-requests", shared)  # fmt: skip
    assert result.exit_code == 2, result.output
    assert f"--log-requests {shared} is the {flag} file itself" in result.stderr, result.stderr
    assert shared.read_text(encoding="utf-8") == "workers: []\n"


def test_serve_refuses_a_decision_log_that_holds_other_lines(tmp_path: Path) -> None:
    """`serve --log-requests runs/rewards.jsonl` appended its decision lines to the records
    `collect` had gathered, which `data stats` and training then refused line by line; an
    existing decision log is still appended to."""
    records = tmp_path / "rewards.jsonl"
    write_records(records, generated_records(n_per_topic=1))
    before = records.read_bytes()
    result = invoke("serve", "--checkpoint", tmp_path / "missing", "--log-requests", records)
    assert result.exit_code == 2, result.output
    assert (f"--log-requests {records} holds lines other than serve's decision log") in flat(
        result.stderr
    ), result.stderr
    assert records.read_bytes() == before
    log = tmp_path / "requests.jsonl"
    log.write_text('{"time": "t", "request_id": "chatcmpl-1", "prompt_hash": "h"}\n')
    result = invoke("serve", "--checkpoint", tmp_path / "missing", "--log-requests", log)
    assert result.exit_code == 2 and "is not a fugu-lite router checkpoint" in flat(result.stderr)


def test_a_task_file_and_a_record_file_given_for_each_other_say_so(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    ok(invoke("tasks", "generate", "-o", tasks, "--per-family", "1"))
    records = tmp_path / "records.jsonl"
    write_records(records, generated_records(n_per_topic=2))
    result = invoke("train", "sft", "-r", tasks, "-o", tmp_path / "sft")
    assert result.exit_code == 2
    assert "this is a task (it has 'grader'), not a RewardRecord" in flat(result.stderr)
    assert "fugu-lite collect --tasks FILE" in flat(result.stderr)
    for command in (
        ["tasks", "check", records],
        ["collect", "-t", records, "-o", tmp_path / "out.jsonl"],
    ):
        result = invoke(*command)
        assert result.exit_code == 2
        assert "this is a RewardRecord (it has 'rewards'), not a task" in flat(result.stderr)


def test_help_paragraphs_are_not_broken_mid_sentence() -> None:
    """typer prints a docstring's line breaks as they are (in the command list too), so a
    wrapped paragraph showed as a line cut after a few words."""
    import click
    import typer

    def commands(command: click.Command, name: str) -> list[tuple[str, click.Command]]:
        found = [(name, command)]
        for sub_name, sub in getattr(command, "commands", {}).items():
            found += commands(sub, f"{name} {sub_name}")
        return found

    for name, command in commands(typer.main.get_command(app), "fugu-lite"):
        paragraphs = inspect.cleandoc(command.help or "").split("\n\n")
        assert not [p for p in paragraphs if "\n" in p], name


def test_route_refuses_an_empty_prompt(run: Run) -> None:
    for prompt, stdin in (("", None), ("   ", None), ("-", "\n")):
        result = invoke("route", "--checkpoint", run.checkpoint, prompt, input=stdin)
        assert result.exit_code == 2
        assert "the prompt is empty" in flat(result.output)


def test_route_json_carries_the_decision(run: Run) -> None:
    result = invoke("route", "--checkpoint", run.checkpoint, "--json", "--exclude", "coder", "hi")
    ok(result)
    line = result.stdout.strip().splitlines()[-1]
    decision = json.loads(line)
    assert decision["excluded"] == ["coder"]
    assert decision["probabilities"]["coder"] == 0.0
    assert decision["worker"] in {"cheap-small", "mathematician"}
    assert sum(decision["probabilities"].values()) == pytest.approx(1.0, abs=1e-5)


def test_route_json_prints_only_json(run: Run) -> None:
    result = invoke("route", "--checkpoint", run.checkpoint, "--json", "hello")
    ok(result)
    assert json.loads(result.stdout)["worker"] in WORKERS


def test_route_json_errors_go_to_stderr_not_into_the_json(run: Run) -> None:
    result = invoke("route", "--checkpoint", run.checkpoint, "--json", "--exclude", "nope", "hi")
    assert result.exit_code == 2
    assert result.stdout == ""
    assert "cannot exclude unknown worker(s) ['nope']" in flat(result.stderr)


def with_worker_ids_renamed(run: Run, names: dict[str, str], path: Path) -> Path:
    """The run's records with each worker id renamed by `names`, written to `path`."""
    records = [
        record.model_copy(update={"worker_ids": [names[worker] for worker in record.worker_ids]})
        for record in run.records
    ]
    write_records(path, records)
    return path


def test_worker_ids_holding_brackets_are_printed_as_they_are(run: Run, tmp_path: Path) -> None:
    """`qwen[awq]` lost its `[awq]` to rich markup and `m[/x]` stopped stats and route with
    a MarkupError."""
    names = {"cheap-small": "qwen[awq]", "coder": "m[/x]", "mathematician": "[bold]z[/bold]"}
    records_path = with_worker_ids_renamed(run, names, tmp_path / "records.jsonl")
    stats = ok(invoke("data", "stats", records_path))
    assert all(name in stats for name in names.values()), stats
    ok(invoke("train", "sft", "--records", records_path, "--output", tmp_path / "sft",
              "--config", run.config_path, "--set", "training.epochs=1"))  # fmt: skip
    output = ok(invoke("route", "--checkpoint", tmp_path / "sft", "hello"))
    assert all(name in output for name in names.values()), output
    assert re.search(r"chosen worker: (qwen\[awq\]|m\[/x\]|\[bold\]z\[/bold\])\n", output)


def test_control_characters_in_names_are_shown_as_escapes(run: Run, tmp_path: Path) -> None:
    """An ESC in a worker id, task name or record id went raw to the terminal from `data
    stats`, `route`, `tasks check` and their warnings and errors (`\x1b[31m` turned the rest
    red), and a newline in a worker id read as two rows; a task name holding markup lost it."""
    names = {"cheap-small": "red\x1b[31mx", "coder": "two\nlines", "mathematician": "m"}
    records = [
        record.model_copy(
            update={"worker_ids": [names[worker] for worker in record.worker_ids], "id": "i\x1b[1m"}
        )
        for record in run.records
    ]
    records_path = tmp_path / "records.jsonl"
    write_records(records_path, records)
    shown = [r"red\x1b[31mx", r"two\nlines"]
    stats = invoke("data", "stats", records_path)
    assert "\x1b" not in ok(stats) and all(name in stats.output for name in shown), stats.output
    assert "lines " not in stats.output.replace(r"two\nlines", ""), stats.output
    assert r"(first: i\x1b[1m)" in flat(stats.output)

    ok(invoke("train", "sft", "--records", records_path, "--output", tmp_path / "sft",
              "--config", run.config_path, "--set", "training.epochs=1"))  # fmt: skip
    routed = ok(invoke("route", "--checkpoint", tmp_path / "sft", "hello"))
    assert "\x1b" not in routed and all(name in routed for name in shown), routed
    assert re.search(r"chosen worker: (red\\x1b\[31mx|two\\nlines|m)\n", routed), routed
    refused = invoke("route", "--checkpoint", tmp_path / "sft", "hello", "--exclude", "nope")
    assert refused.exit_code == 2 and r"red\x1b[31mx" in refused.output, refused.output
    assert "\x1b" not in refused.output
    everyone = [arg for name in names.values() for arg in ("--exclude", name)]
    for exclude in (["--exclude", "nope"], everyone):  # one line: the id's newline as `\n`
        refused = invoke("route", "--checkpoint", tmp_path / "sft", "hello", *exclude)
        assert refused.exit_code == 2 and refused.stderr.count("\n") == 1, refused.stderr
        assert r"two\nlines, " in refused.stderr, refused.stderr
    other = records[1].model_copy(update={"id": "x\ny", "worker_ids": ["p", "q", "r"]})
    write_records(records_path, [records[0], other])
    refused = invoke("data", "stats", records_path)
    assert refused.exit_code == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert r"line 2 (id=x\ny)" in refused.stderr, refused.stderr

    tasks = tmp_path / "tasks.jsonl"
    task = {"id": "q\x1b[2J", "prompt": "2+2?", "answer": "4", "grader": "number"}
    tasks.write_text(json.dumps({**task, "task": "[red]math\x1b[31m"}) + "\n", encoding="utf-8")
    checked = ok(invoke("tasks", "check", tasks))
    assert r"[red]math\x1b[31m" in flat(checked) and "\x1b" not in checked, checked


def test_an_error_of_several_problems_keeps_one_line_per_problem(tmp_path: Path) -> None:
    """A config with two wrong keys is told one problem a line, as describe_config_error
    writes it: the error's control characters are shown as escapes, its line breaks are not
    (one '\\n'-joined line of problems is hard to read and to grep)."""
    config = tmp_path / "bad.yaml"
    config.write_text("training:\n  epochs: -1\n  lr: abc\n", encoding="utf-8")
    result = invoke("train", "sft", "-r", tmp_path / "records.jsonl", "-o", tmp_path / "sft",
                    "-c", config)  # fmt: skip
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert lines[0] == f"error: {config}: invalid SFTConfig:", result.stderr
    assert lines[1].startswith("  training.epochs: "), result.stderr
    assert lines[2].startswith("  unknown key 'training.lr'"), result.stderr


def test_errors_warnings_and_progress_lines_are_one_line_each_when_piped(
    run: Run, tmp_path: Path
) -> None:
    """Piped or redirected (`2> log`), stderr was folded at 80 columns: `error:` stood alone
    on its line, a long path was cut in two mid-name, and an epoch line lost its end to the
    next line, so neither grep nor a copied path worked."""
    missing = tmp_path / ("experiment_runs_" * 6) / "missing_records_file.jsonl"
    result = invoke("data", "stats", missing)
    assert result.exit_code == 2
    assert f"error: {missing}: file not found\n" in result.stderr, result.stderr
    tied = [record.model_copy(update={"id": "same"}) for record in run.records]
    records_path = tmp_path / ("records_" * 8 + ".jsonl")
    write_records(records_path, tied)
    result = invoke("train", "rl", "-r", records_path, "-o", tmp_path / "rl",
                    "-c", run.config_path, "--set", "training.epochs=1")  # fmt: skip
    lines = ok(result) and result.stderr.splitlines()
    assert any(
        line.startswith(f"warning: {records_path}: ") and line.endswith("its own id")
        for line in lines
    ), result.stderr
    assert any(re.fullmatch(r"RL epoch 1/1: .* \| validation reward [\d.]+", line)
               for line in lines), result.stderr  # fmt: skip


def test_the_one_worker_warning_shows_the_worker_id_as_it_is(run: Run, tmp_path: Path) -> None:
    """Training on records of one worker warned with its id raw: an ESC in it restyled the
    terminal."""
    solo = [
        record.model_copy(update={"worker_ids": ["solo\x1b[31m"], "rewards": record.rewards[:1],
                                  "costs": None})
        for record in run.records
    ]  # fmt: skip
    records_path = tmp_path / "solo.jsonl"
    write_records(records_path, solo)
    result = invoke("train", "sft", "-r", records_path, "-o", tmp_path / "sft",
                    "-c", run.config_path, "--set", "training.epochs=1")  # fmt: skip
    ok(result)
    assert r"one worker (solo\x1b[31m)" in result.stderr and "\x1b" not in result.stderr


def test_the_unused_judge_warning_shows_the_task_file_as_it_is(tmp_path: Path) -> None:
    """`collect --judge w` on a task file named `tasks[x].jsonl` warned of `tasks.jsonl`:
    rich took the path's `[x]` for markup."""
    tasks = tmp_path / "tasks[x].jsonl"
    write_tasks(tasks, number_tasks(1))
    with StubWorker("The answer is 1.") as stub:
        pool = tmp_path / "pool.yaml"
        pool.write_text(yaml.safe_dump(stub_pool(("w", stub)).model_dump(mode="json")))
        result = invoke("collect", "--pool", pool, "-t", tasks, "-o", tmp_path / "r.jsonl",
                        "--judge", "w", "--no-progress")  # fmt: skip
    ok(result)
    assert f"--judge w: no task of {tasks} uses the judge grader" in flat(result.stderr)
    judged = Task(id="j", prompt="Say hi.", grader="judge", task="chat")
    mixed = tmp_path / "mixed.jsonl"  # one task the judge grades: no warning
    write_tasks(mixed, [*number_tasks(1), judged])
    with StubWorker(lambda m: "SCORE: 10" if "SCORE" in str(m) else "The answer is 1.") as stub:
        pool.write_text(yaml.safe_dump(stub_pool(("w", stub)).model_dump(mode="json")))
        result = invoke("collect", "--pool", pool, "-t", mixed, "-o", tmp_path / "m.jsonl",
                        "--judge", "w", "--no-progress")  # fmt: skip
    ok(result)
    assert "uses the judge grader" not in flat(result.stderr)


def test_stats_and_route_never_cut_a_long_worker_id(run: Run, tmp_path: Path) -> None:
    """Piped (80 columns), `data stats` and `route` cut long worker ids with '…'
    ('openrouter/meta-llama/llama-3.1-40…'), so ids sharing a long prefix could not be told
    apart; a long id now folds over lines, as eval's tables do."""
    prefix = "openrouter/meta-llama/llama-3.1-405b-instruct-turbo-"
    names = {worker: f"{prefix}{worker}" for worker in WORKERS}
    records_path = with_worker_ids_renamed(run, names, tmp_path / "records.jsonl")
    stats = ok(invoke("data", "stats", records_path))
    ok(invoke("train", "sft", "--records", records_path, "--output", tmp_path / "sft",
              "--config", run.config_path, "--set", "training.epochs=1"))  # fmt: skip
    routed = ok(invoke("route", "--checkpoint", tmp_path / "sft", "hello"))
    for output in (stats, routed):
        assert "…" not in output, output
        cells = "".join(line.split("│")[1].strip() for line in output.splitlines()
                        if line.count("│") > 2)  # fmt: skip
        assert all(name in cells for name in names.values()), output


def test_tasks_check_never_cuts_a_long_family_name(tmp_path: Path) -> None:
    """Piped (80 columns), two families sharing a long prefix were both cut to the same
    'agentverse-logicgrid-extremely-long-fa…'."""
    families = [f"agentverse-logicgrid-extremely-long-family-name-{n}" for n in ("one", "two")]
    tasks = tmp_path / "tasks.jsonl"
    rows = [
        {"id": f"q{n}", "prompt": f"{n} + 1?", "answer": str(n + 1), "grader": "number",
         "task": family}
        for n, family in enumerate(families)
    ]  # fmt: skip
    tasks.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    output = ok(invoke("tasks", "check", tasks))
    cells = "".join(line.split("│")[1].strip() for line in output.splitlines()
                    if line.count("│") > 2)  # fmt: skip
    assert "…" not in output and all(family in cells for family in families), output


def test_feature_progress_is_shown_in_a_log(run: Run, tmp_path: Path) -> None:
    """With stderr piped (a CI log, `2> log`), rich drew the backbone features' bar only
    once they were all computed: minutes on a cold cache said nothing until then."""
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG.format(cache_dir=tmp_path / "cold-cache"), encoding="utf-8")
    result = invoke("train", "sft", "-r", run.records_path, "-o", tmp_path / "sft",
                    "-c", config, "--set", "training.epochs=1")  # fmt: skip
    lines = re.findall(r"^Backbone features: (\d+)/(\d+)$", ok(result) and result.stderr, re.M)
    assert len(lines) >= 5 and lines[-1][0] == lines[-1][1], result.stderr


# --- interruptions ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "target", "kept"),
    [
        (["train", "sft"], "fugu_lite.train_sft.train_sft", "starts over: run the same command"),
        (
            ["train", "pipeline"],
            "fugu_lite.pipeline.train_sft",
            "a finished SFT stays and is not trained again when you run the same command again",
        ),
        (
            ["train", "es", "--set", "training.save_every=7"],
            "fugu_lite.train_es.es_outcome",
            "the search state is saved every 7 generations and at a stop, in "
            "{output}/es_state; run the same command again to continue from the last one saved",
        ),
        (
            ["train", "es", "--no-resume"],
            "fugu_lite.train_es.es_outcome",
            "run the command without --no-resume again to continue",
        ),
    ],
)
def test_ctrl_c_during_training_says_what_was_kept_and_how_to_go_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str], target: str, kept: str
) -> None:
    """Ctrl-C ended a stage with exit 130 and not a word about what was saved."""

    def interrupted(*args: object, **kwargs: object) -> dict:
        raise KeyboardInterrupt

    monkeypatch.setattr(target, interrupted)
    records = tmp_path / "records.jsonl"
    write_records(records, generated_records(n_per_topic=3))
    result = invoke(*command, "-r", records, "-o", tmp_path / "out")
    assert result.exit_code == 130, result.output
    text = flat(result.output)
    assert text.startswith("interrupted:") and kept.format(output=tmp_path / "out") in text


@pytest.mark.parametrize("existed", [True, False])
def test_ctrl_c_while_writing_a_new_file_does_not_say_it_holds_old_content(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, existed: bool
) -> None:
    """Ctrl-C while `tasks generate` (or `data import`) wrote an -o file that did not exist
    said the file "holds its old content or the complete new one": there was none, so a
    user went looking for a file that was never written."""

    def interrupted(*args: object, **kwargs: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr("fugu_lite.tasks.write_tasks", interrupted)
    output = tmp_path / "tasks.jsonl"
    if existed:
        write_tasks(output, number_tasks(1))
    result = invoke("tasks", "generate", "-o", output, "--per-family", "1", "--force")
    assert result.exit_code == 130, result.output
    text = flat(result.stderr)
    assert text.startswith(f"interrupted: {output} ") and "run the same command again" in text
    assert ("holds its old content" in text) == existed, text
    assert output.exists() == existed


def test_ctrl_c_during_the_demo_says_to_run_the_same_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`fugu-lite demo -o elsewhere` stopped with 'rerun `make demo`', which runs another
    output folder and options."""

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("fugu_lite.demo.run_demo", interrupted)
    result = invoke("demo", "-o", tmp_path / "demo", "--no-serve")
    assert result.exit_code == 130, result.output
    assert result.stderr.startswith("interrupted: run the same command again (or `make demo`)")


SIGTERM_WHILE_WRITING = """\
import os, signal, sys
import fugu_lite.atomic_files

def terminated(source, target):
    os.kill(os.getpid(), signal.SIGTERM)  # `kill PID` while the new file is being written

fugu_lite.atomic_files.os.replace = terminated
from fugu_lite.cli import app
sys.argv = ["fugu-lite", *sys.argv[1:]]
app()
"""


def test_sigterm_while_writing_keeps_the_old_file_and_leaves_no_temporary_one(
    tmp_path: Path,
) -> None:
    """SIGTERM killed `tasks generate` (or `data import`) mid-write without a word, leaving
    a hidden temporary file beside the output on every kill."""
    output = tmp_path / "tasks.jsonl"
    output.write_text("the old tasks\n", encoding="utf-8")
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            SIGTERM_WHILE_WRITING,
            "tasks",
            "generate",
            "--force",
            "-o",
            str(output),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
        timeout=120,
    )
    assert child.returncode == 130, child.stdout + child.stderr
    assert "interrupted:" in child.stderr and "run the same command again" in child.stderr
    assert output.read_text(encoding="utf-8") == "the old tasks\n"
    assert [path.name for path in tmp_path.iterdir()] == ["tasks.jsonl"]


CTRL_C_WHILE_IMPORTING = """\
import builtins, os, signal, sys, tomllib
from importlib import import_module

module_name, argv = sys.argv[1], sys.argv[2:]
real_import = builtins.__import__


def interrupting(name, *args, **kwargs):
    if name == module_name:  # Ctrl-C while this module is being imported
        builtins.__import__ = real_import
        os.kill(os.getpid(), signal.SIGINT)
    return real_import(name, *args, **kwargs)


with open("pyproject.toml", "rb") as stream:  # the installed `fugu-lite` script calls this
    target = tomllib.load(stream)["project"]["scripts"]["fugu-lite"]
sys.argv = ["fugu-lite", *argv]
builtins.__import__ = interrupting
entry_module, _, entry = target.partition(":")
getattr(import_module(entry_module), entry)()
"""


@pytest.mark.parametrize("module", ["typer", "torch"])
def test_ctrl_c_while_the_command_line_imports_says_so_in_one_line(
    tmp_path: Path, module: str
) -> None:
    """Ctrl-C in the first second of `fugu-lite train ...` printed a KeyboardInterrupt
    traceback (while the CLI imported typer) or ended without a word (torch)."""
    records = tmp_path / "records.jsonl"
    write_records(records, generated_records(n_per_topic=3))
    argv = ["train", "sft", "-r", str(records), "-o", str(tmp_path / "out")]
    child = subprocess.run(
        [sys.executable, "-c", CTRL_C_WHILE_IMPORTING, module, *argv],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
        env={**os.environ, "COLUMNS": "200"},
        timeout=120,
        preexec_fn=ctrl_c_at_its_default,
    )
    assert child.returncode == 130, child.stdout + child.stderr
    output = child.stdout + child.stderr
    assert "Traceback" not in output and "interrupted:" in child.stderr, output
    assert "interrupted" not in child.stdout, output  # stdout may be a command's results
    assert not (tmp_path / "out").exists()


A_COMMAND_WITH_A_BUG = """\
import sys
import fugu_lite.cli


def broken() -> None:
    raise RuntimeError("a bug in a command")


fugu_lite.cli.app = broken
from fugu_lite.__main__ import main
main()
"""


def test_an_error_with_no_ctrl_c_is_not_said_to_be_an_interruption() -> None:
    """The console script says a Ctrl-C during its imports in one line; an error raised with
    no Ctrl-C pressed keeps its traceback and exit status, not "interrupted: ..." and 130."""
    child = subprocess.run(
        [sys.executable, "-c", A_COMMAND_WITH_A_BUG],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=ctrl_c_at_its_default,
    )
    assert child.returncode == 1, child.stderr
    assert "RuntimeError: a bug in a command" in child.stderr
    assert "interrupted" not in child.stderr


A_COMMAND_THAT_EXITS_130_ITSELF = """\
import os, signal, sys
import fugu_lite.cli
from fugu_lite.cli.common import report_interruption


def exits_130_without_a_ctrl_c() -> None:
    raise SystemExit(130)  # as a command passing on a child's exit status would


def reports_its_own_ctrl_c() -> None:
    try:
        os.kill(os.getpid(), signal.SIGINT)  # under the entry point's own Ctrl-C handler
    except KeyboardInterrupt:
        report_interruption("what the command kept")
        raise SystemExit(130)


fugu_lite.cli.app = globals()[sys.argv[1]]
from fugu_lite.__main__ import main
main()
"""


@pytest.mark.parametrize(
    ("command", "said"),
    [
        ("exits_130_without_a_ctrl_c", ""),
        ("reports_its_own_ctrl_c", "interrupted: what the command kept\n"),
    ],
    ids=["no-ctrl-c", "ctrl-c-reported"],
)
def test_the_entry_point_adds_no_interrupted_line_of_its_own_to_an_exit_130(
    command: str, said: str
) -> None:
    """The console script says "interrupted: stopped before any output was written" only
    for a Ctrl-C no command spoke of: not after a command's own `interrupted:` line (two
    lines that contradict each other), nor for an exit status 130 with no Ctrl-C at all."""
    child = subprocess.run(
        [sys.executable, "-c", A_COMMAND_THAT_EXITS_130_ITSELF, command],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=ctrl_c_at_its_default,
    )
    assert (child.returncode, child.stdout, child.stderr) == (130, "", said)


def test_a_logged_line_is_said_once_under_its_own_level_after_earlier_commands(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """fugu-lite's logged warnings are the commands' own `warning: ...` lines on stderr:
    each said once, also when an app or notebook runs commands one after another in one
    process (each command sets the handler up again), an error as `error:`, and nothing
    below a warning, whatever level the package logger was left at (serve sets it)."""
    import logging

    source = tmp_path / "ze.jsonl"
    rows = [{"id": n, "task": "gsm", "question": question, "scores": {"a": 1},
             "out_chars": {"a": 3}} for n, question in enumerate([" ", "q"])]  # fmt: skip
    source.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    for attempt in ("first", "second"):
        result = invoke("data", "import", "zeroeval", source, "-o", tmp_path / f"{attempt}.jsonl")
        said = ok(result) and result.stderr
        assert said.count(f"warning: {source}: dropped 1 rows") == 1, said
    package = logging.getLogger("fugu_lite")
    level = package.level
    try:
        package.setLevel(logging.INFO)  # as serve --log-level info leaves it
        capsys.readouterr()
        logging.getLogger("fugu_lite.test").info("an info line")
        logging.getLogger("fugu_lite.test").error("a worker id \x1b[31m")
    finally:
        package.setLevel(level)
    assert capsys.readouterr().err == "error: a worker id \\x1b[31m\n"


def test_serve_help_says_what_each_log_level_shows() -> None:
    """`serve --help` said only "uvicorn log level: critical, error, ...", so a user could
    not tell which level hides the access lines or shows a failed worker call."""
    from fugu_lite.cli.serve import LOG_LEVELS

    shown = flat(ok(runner.invoke(app, ["serve", "--help"])).replace("│", " "))
    for level in LOG_LEVELS:
        assert re.search(rf"\b{level}\b[^;]*\(", shown), f"{level} is not explained"
    assert "access line per request" in shown and "failed worker calls" in shown


def test_every_help_names_each_option_whole_at_80_columns() -> None:
    """At 80 columns (a terminal's default; piped too) rich's option table cut what did not
    fit its column: `serve --help` listed `--max-body-byt…`, `--breaker-cool…`, `demo --help`
    `--tasks-per-fami…`, and `train es --help` `src/fugu_lite/configs/defa…` for -c; and
    the summaries in a group's list must not be cut either ("... random, kNN,...")."""
    import typer

    root = typer.main.get_command(app)
    groups: list[tuple[list[str], typer.core.TyperGroup]] = [([], root)]
    while groups:
        path, group = groups.pop()
        listing = ok(runner.invoke(app, [*path, "--help"], terminal_width=80))
        assert not re.search(r"\.\.\.$|…", listing.split("Commands:")[1], re.M), listing
        for name, command in getattr(group, "commands", {}).items():
            if getattr(command, "commands", None):
                groups.append(([*path, name], command))
                continue
            shown = ok(runner.invoke(app, [*path, name, "--help"], terminal_width=80))
            assert "…" not in shown, f"{' '.join([*path, name])} --help cuts text:\n{shown}"
            for param in command.params:
                for option in (*param.opts, *param.secondary_opts):
                    if option.startswith("--"):
                        assert re.search(rf"{re.escape(option)}(?![\w-])", shown), (path, option)


def test_a_groups_list_gives_each_command_the_first_paragraph_of_its_help() -> None:
    """`fugu-lite --help` lists each command with what its own --help opens with (the
    first paragraph, as written), not a later one: `demo`'s says "The main job", not "Last,
    the router is served"."""
    listing = ok(runner.invoke(app, ["--help"], terminal_width=400))  # one line a command
    for command in app.registered_commands:
        assert command.callback is not None and command.callback.__doc__
        first, *later = inspect.cleandoc(command.callback.__doc__).split("\n\n")
        line = rf"^ +{command.name} +{re.escape(flat(first))}$"
        assert re.search(line, listing, re.MULTILINE), listing
        assert not [paragraph for paragraph in later if flat(paragraph) in flat(listing)], listing


def test_a_repeatable_option_shows_one_value_in_every_help() -> None:
    """`tasks generate --help` showed `--family <list[str]>`, read as "give a list" (and
    `--family arithmetic,logic` is refused); each repeatable option shows one value."""
    import click

    def walk(command: Any, path: str) -> list[tuple[str, str]]:
        shown = []
        for name, sub in getattr(command, "commands", {}).items():
            shown += walk(sub, f"{path} {name}".strip())
        context = click.Context(command)
        for param in command.params:
            record = param.get_help_record(context) if param.param_type_name == "option" else None
            if record and getattr(param, "multiple", False):
                shown.append((path, record[0]))
        return shown

    repeatable = walk(typer.main.get_command(app), "")
    assert ("tasks generate", "--family <family>") in repeatable
    assert not [(path, name) for path, name in repeatable if "list[" in name], repeatable


def test_an_option_shows_the_same_names_and_value_in_every_command() -> None:
    """`train sft|rl|es --help` showed `--checkpoint <str>`, `eval`, `route` and `serve`
    `--checkpoint <path>`: one option, read two ways (a name to look up, a folder)."""
    import click

    shown: dict[str, dict[str, str]] = {}

    def walk(command: Any, path: str) -> None:
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, f"{path} {name}".strip())
        if getattr(command, "commands", None):
            return
        context = click.Context(command)
        for param in command.params:
            record = param.get_help_record(context) if param.param_type_name == "option" else None
            if record:
                long = next(opt for opt in param.opts if opt.startswith("--"))
                shown.setdefault(long, {})[path] = record[0]

    walk(typer.main.get_command(app), "")
    assert {"train sft", "eval", "route"} <= set(shown["--checkpoint"])
    differing = {option: by for option, by in shown.items() if len(set(by.values())) > 1}
    assert not differing, f"one option shown differently by command: {differing}"


def test_every_option_without_a_default_says_what_leaving_it_out_does() -> None:
    """`serve --help` did not say that without --api-keys-env or --api-keys-file anyone who
    can reach the port may call the endpoint, nor `collect --help` what becomes of tasks with
    the judge grader without --judge, nor `train sft|rl --help` where a stage starts without
    --checkpoint (train es's said it)."""
    import click

    silent = []

    def walk(command: Any, path: str) -> None:
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, f"{path} {name}".strip())
        context = click.Context(command)
        for param in command.params:
            if (
                param.param_type_name != "option"
                or param.required
                or param.is_flag
                or param.multiple
                or param.default is not None
            ):
                continue
            shown = " ".join((param.get_help_record(context) or ("", ""))[1].lower().split())
            if "omitted" not in shown and "default" not in shown:
                silent.append(f"{path} {param.opts[0]}")

    walk(typer.main.get_command(app), "")
    assert "train pipeline -c" not in silent  # its help says what -c left out means
    assert not silent, f"--help does not say what leaving these out does: {silent}"


def test_repeatable_options_show_what_one_takes_not_a_python_type() -> None:
    """`--set <list[str]>`, `--option <list[str]>`, `--exclude <list[str]>` read as "give a
    list", as in `--set '[training.epochs=5]'`; each takes one value, repeated."""
    expected = {
        ("data", "import"): "--option <key=value>",
        ("train", "sft"): "--set <key=value>",
        ("train", "reward-head"): "--set <key=value>",
        ("route",): "--exclude <worker>",
        ("serve",): "--cors-origin <origin>",
    }
    for path, shown in expected.items():
        help_text = ok(runner.invoke(app, [*path, "--help"], terminal_width=200))
        assert shown in help_text and "list[" not in help_text, help_text


def test_demo_help_says_where_the_llmrouter_data_is_found_without_data_dir() -> None:
    """`demo --help` said only "Folder holding llmrouter/.", so a user could not tell that
    the option may be left out, nor where the demo then looks (the README's order)."""
    shown = flat(ok(runner.invoke(app, ["demo", "--help"], env={"COLUMNS": "200"})))
    assert "$FUGU_LITE_DATA_DIR, else ../shared/data, else a download" in shown
    assert "skipped" in shown


def test_train_sft_help_writes_its_target_with_the_config_key_that_sets_it() -> None:
    """`train sft --help` said "softmax(rewards / tau)", a name no config, --set or README line
    takes (the key is training.temperature, sft.temperature in a pipeline file)."""
    from fugu_lite.config import SFTTrainingConfig

    shown = flat(ok(runner.invoke(app, ["train", "sft", "--help"], env={"COLUMNS": "200"})))
    [divisor] = re.findall(r"softmax\(rewards / (\w+)\)", shown)
    assert divisor in SFTTrainingConfig.model_fields


def test_eval_output_help_says_which_default_folder_goes_with_pareto() -> None:
    """`eval -o`'s help gave "default CHECKPOINT/eval-SPLIT (CHECKPOINT/pareto-SPLIT)" without
    saying when the second one is the default."""
    command = typer.main.get_command(app).commands["eval"]  # type: ignore[attr-defined]
    [output] = [param for param in command.params if "--output" in param.opts]
    assert re.search(r"--pareto\W+CHECKPOINT/pareto-SPLIT", output.help)


def test_every_config_file_a_help_text_names_exists() -> None:
    """`demo --help` gave its default config as configs/default.yaml, which is nowhere (the
    file is src/fugu_lite/configs/default.yaml, as `train --help` says): `-c` with the path
    as shown was refused as not found."""
    root = typer.main.get_command(app)
    project = Path(__file__).resolve().parents[1]
    shown: dict[str, str] = {}
    for name, command in root.commands.items():
        for leaf in [command, *getattr(command, "commands", {}).values()]:
            texts = [
                leaf.help or "",
                *(getattr(param, "help", None) or "" for param in leaf.params),
            ]
            for path in re.findall(r"[\w./-]+/[\w.-]+\.yaml", " ".join(texts)):
                shown[path] = name if leaf is command else f"{name} {leaf.name}"
    assert "src/fugu_lite/configs/default.yaml" in shown
    missing = {path: where for path, where in shown.items() if not (project / path).is_file()}
    assert not missing, f"--help names config files that do not exist: {missing}"


def test_cache_clear_removes_the_digests_of_weight_files_gone_or_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`cache list` and `cache clear` left out digests/, where every weight file ever checked
    (each test run's, each backbone folder since deleted) left a digest for good."""
    from fugu_lite.file_digests import file_sha256

    root = tmp_path / "cache"
    monkeypatch.setenv("FUGU_LITE_CACHE_DIR", str(root))
    weights = {name: tmp_path / f"{name}.safetensors" for name in ("kept", "gone", "changed")}
    for path in weights.values():
        path.write_bytes(b"weights")
        file_sha256(path)
    weights["gone"].unlink()
    weights["changed"].write_bytes(b"other weights")
    foreign = root / "digests" / "notes.json"  # not fugu-lite's: never listed nor removed
    foreign.write_text("mine", encoding="utf-8")

    def cache(*args: str) -> str:
        shown = ok(runner.invoke(app, ["cache", *args], env={"COLUMNS": "300"}))
        return flat(shown.replace("│", " "))

    listed = cache("list")
    assert "current digests 0.0 MB 1 weight file digests/" in listed, listed
    assert "stale (its file is gone) digests" in listed
    assert "stale (its file changed since) digests" in listed
    assert "removed 2 cached items" in cache("clear")
    (left,) = (root / "digests").glob("*[0-9a-f].json")
    assert json.loads(left.read_text())["stamp"][0] == str(weights["kept"].resolve())
    listed = cache("list")
    assert "1 cached item in" in listed and "items" not in listed, listed
    assert "removed 1 cached item (" in cache("clear", "--all")
    assert "nothing cached in" in cache("list")
    assert [path.name for path in (root / "digests").iterdir()] == ["notes.json"]


def test_dash_for_stdin_or_stdout_is_refused_saying_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`-o -` wrote a file (or a training folder) named `-` into the working directory, and
    `data stats -` (stdin, as `route -` reads) said only "-: file not found"."""
    monkeypatch.chdir(tmp_path)
    records = tmp_path / "records.jsonl"
    write_records(records, generated_records(n_per_topic=2))
    refused_outputs = [
        (("tasks", "generate", "-o", "-"), "-o -: the output is a file, whole or not at all, not"),
        (("data", "import", "long", "x.csv", "-o", "-"), "-o -: the output is a file"),
        (("train", "sft", "-r", records, "-o", "-"), "-o -: the output is a folder, not stdout"),
    ]
    for command, expected in refused_outputs:
        result = invoke(*command)
        assert result.exit_code == 2, result.output
        assert expected in flat(result.stderr)
    refused_inputs = [("data", "stats", "-"), ("tasks", "check", "-"),
                      ("train", "sft", "-r", "-", "-o", tmp_path / "sft")]  # fmt: skip
    for command in refused_inputs:
        result = invoke(*command)
        assert result.exit_code == 2, result.output
        assert "- (standard input) is not read here" in flat(result.stderr)
    result = invoke("data", "import", "long", "-", "-o", tmp_path / "out.jsonl")
    assert "the source - (standard input) is not read" in flat(result.stderr)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["records.jsonl"]


def test_dash_for_a_config_pool_or_key_file_is_refused_saying_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`cat config.yaml | ... -c -` said "config file - not found", `--pool -` "pool file -
    not found", `--api-keys-file -` "cannot read it (No such file or directory)": none said
    that stdin is not read there, as the record and task files' `-` does."""
    from fugu_lite.workers.local_server import free_port

    monkeypatch.chdir(tmp_path)
    records = tmp_path / "records.jsonl"
    write_records(records, generated_records(n_per_topic=2))
    tasks = tmp_path / "tasks.jsonl"
    ok(invoke("tasks", "generate", "-o", tasks, "--per-family", "1"))
    commands = {
        "-c": ("train", "sft", "-r", records, "-o", tmp_path / "sft", "-c", "-"),
        "--pool": ("collect", "--tasks", tasks, "-o", tmp_path / "rewards.jsonl", "--pool", "-"),
        "--api-keys-file": (
            "serve", "--checkpoint", tmp_path / "router", "--port", str(free_port()),
            "--api-keys-file", "-",
        ),
    }  # fmt: skip
    for flag, command in commands.items():
        result = invoke(*command)
        assert result.exit_code == 2, result.output
        assert f"{flag} - (standard input) is not read here" in flat(result.stderr)
    assert not (tmp_path / "sft").exists() and not (tmp_path / "rewards.jsonl").exists()


def test_serve_takes_a_log_level_in_capitals(tmp_path: Path) -> None:
    """`--log-level INFO` (or `DEBUG`, as Python's logging writes them) was refused as "not a
    log level", though uvicorn's own command line takes it."""
    import socket

    with socket.socket() as probe:  # a port no other test run holds
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = invoke("serve", "--checkpoint", tmp_path / "none", "--log-level", "DEBUG",
                    "--port", str(port))  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "not a log level" not in flat(result.stderr)
    assert "is not a fugu-lite router checkpoint" in flat(result.stderr)


def test_ctrl_c_during_cache_clear_says_what_is_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C during `cache clear` ended without a word (or, from the fugu-lite script, with
    "stopped before any output was written", though items were already removed)."""
    import fugu_lite.caches

    remove = fugu_lite.caches.remove_entries

    def interrupted(entries: list) -> int:
        remove(entries[:1])
        raise KeyboardInterrupt

    monkeypatch.setattr(fugu_lite.caches, "remove_entries", interrupted)
    cache = tmp_path / "cache"
    for name in ("old", "older"):
        (cache / "features" / name).mkdir(parents=True)
    result = invoke("cache", "clear", "--all", "--cache-dir", cache)
    assert result.exit_code == 130, result.output
    assert flat(result.stderr).startswith(
        "interrupted: the cached items removed so far are gone and the others are still there"
    )
    assert len(list((cache / "features").iterdir())) == 1


def test_cache_clear_refuses_a_folder_that_holds_more_than_caches(tmp_path: Path) -> None:
    """`cache clear --all --cache-dir .` in a project with a `features/` folder of its own
    deleted every folder inside it, as if they were feature caches."""
    project = tmp_path / "project"
    own = project / "features" / "login"
    own.mkdir(parents=True)
    (project / "README.md").write_text("mine", encoding="utf-8")
    result = invoke("cache", "clear", "--all", "--cache-dir", project)
    assert result.exit_code == 2, result.output
    assert f"error: {project} holds more than fugu-lite's caches (README.md)" in flat(result.stderr)
    assert "nothing was removed" in flat(result.stderr) and own.is_dir()
    cache = tmp_path / "cache"
    (cache / "features" / "old").mkdir(parents=True)
    (cache / "data").mkdir()  # the downloaded datasets live beside the caches
    cleared = flat(ok(invoke("cache", "clear", "--all", "--cache-dir", cache)))
    assert f"removed 1 cached item (0.0 MB) from {cache}" in cleared


def test_cache_clear_removes_a_linked_cache_item_and_keeps_what_it_points_to(
    tmp_path: Path,
) -> None:
    """A cache item that is a symbolic link (a feature cache moved to a bigger disk) was never
    removed: `cache clear --all` said 'removed 0 cached items' and that it 'could not be
    removed (another user's?)'. The link is now removed (nothing reads it again), and the
    folder it points to is kept and named with its size, freed only by hand."""
    cache, elsewhere = tmp_path / "cache", tmp_path / "big-disk" / "features-key"
    elsewhere.mkdir(parents=True)
    (elsewhere / "shard-1.safetensors").write_bytes(b"x" * 2_000_000)
    (cache / "features").mkdir(parents=True)
    link = cache / "features" / "key"
    link.symlink_to(elsewhere)
    result = invoke("cache", "clear", "--all", "--cache-dir", cache)
    assert f"removed 1 cached item (0.0 MB) from {cache}" in flat(ok(result))
    assert not link.is_symlink() and (elsewhere / "shard-1.safetensors").is_file()
    said = flat(result.stderr)
    assert "could not be removed" not in said
    assert f"{link} was a link to {elsewhere}" in said
    assert "remove it by hand to free 2.0 MB" in said


@pytest.mark.parametrize("command", ["list", "clear"])
def test_cache_commands_refuse_a_cache_dir_that_does_not_exist(
    tmp_path: Path, command: str
) -> None:
    """A mistyped --cache-dir (~/.cache/fugu_lite) said 'nothing cached in ...' (list) or
    'removed 0 cached items' (clear), as if that were the cache and it were empty."""
    missing = tmp_path / "fugu_lite"
    result = invoke("cache", command, "--cache-dir", missing)
    assert result.exit_code == 2, (result.output, result.exception)
    assert f"error: --cache-dir {missing} does not exist" in flat(result.stderr)
    assert not missing.exists()


@pytest.mark.parametrize("command", ["list", "clear"])
def test_a_cache_dir_that_is_one_kinds_folder_names_the_cache_folder(
    run: Run, command: str
) -> None:
    """`cache list --cache-dir CACHE/features` said 'nothing cached in CACHE/features' of a
    folder holding a feature cache, and `cache clear` said it held more than fugu-lite's
    caches (naming the cache's own key folder)."""
    features = run.root / "cache" / "features"
    assert any(features.iterdir())
    result = invoke("cache", command, "--cache-dir", features)
    assert result.exit_code == 2, (result.output, result.exception)
    assert (
        f"error: --cache-dir {features} is the features/ folder of the cache folder "
        f"{features.parent}; give the cache folder itself: --cache-dir {features.parent}"
    ) in flat(result.stderr)
    assert any(features.iterdir())
    ok(invoke("cache", "list", "--cache-dir", features.parent))


@pytest.mark.parametrize("command", ["list", "clear"])
def test_a_cache_folder_variable_naming_one_kinds_folder_names_the_cache_folder(
    run: Run, command: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """$FUGU_LITE_CACHE_DIR set to CACHE/features got past the check --cache-dir has: `cache
    list` said 'nothing cached in CACHE/features' of a folder holding a feature cache, and
    `cache clear` refused it naming the cache's own key folder and saying to give --cache-dir,
    while the variable was the cause; both name the variable and the folder to set it to."""
    features = run.root / "cache" / "features"
    monkeypatch.setenv("FUGU_LITE_CACHE_DIR", str(features))
    result = invoke("cache", command)
    assert result.exit_code == 2, (result.output, result.exception)
    said = flat(result.stderr)
    assert (
        f"error: FUGU_LITE_CACHE_DIR names {features}, the features/ folder of the cache "
        f"folder {features.parent}; set it to the cache folder itself: "
        f"FUGU_LITE_CACHE_DIR={features.parent}"
    ) in said
    assert "--cache-dir" not in said and any(features.iterdir())
    monkeypatch.setenv("FUGU_LITE_CACHE_DIR", str(features.parent))
    ok(invoke("cache", "list"))


@pytest.mark.parametrize("command", ["list", "clear"])
def test_a_file_where_the_cache_folder_should_be_is_named_by_where_it_came_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    """$FUGU_LITE_CACHE_DIR (or ~/.cache/fugu-lite) naming a file was refused as "--cache-dir
    FILE is a file", an option the user never gave; the error names the variable, or the
    default folder, and what to do."""
    file = tmp_path / "cache-file"
    file.write_text("not a folder", encoding="utf-8")
    monkeypatch.setenv("FUGU_LITE_CACHE_DIR", str(file))
    result = invoke("cache", command)
    assert result.exit_code == 2, (result.output, result.exception)
    said = flat(result.stderr)
    assert "--cache-dir" not in said
    assert f"error: FUGU_LITE_CACHE_DIR names {file}, which is a file, not a folder" in said
    monkeypatch.delenv("FUGU_LITE_CACHE_DIR")
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".cache").mkdir()
    file.rename(tmp_path / ".cache" / "fugu-lite")
    said = flat(invoke("cache", command).stderr)
    assert f"error: the cache folder {tmp_path / '.cache' / 'fugu-lite'} is a file" in said
    assert "--cache-dir" not in said.split(";")[0]
    result = invoke("cache", command, "--cache-dir", tmp_path / ".cache" / "fugu-lite")
    assert "error: --cache-dir" in flat(result.stderr)


def test_version_is_printed_by_the_command_and_by_python_m() -> None:
    """`fugu-lite --version` failed with "No such option: --version", though a checkpoint's
    refusal names the version that wrote it and the one running ("this is 0.1.0")."""
    from fugu_lite import __version__

    assert ok(invoke("--version")) == f"fugu-lite {__version__}\n"
    child = subprocess.run(
        [sys.executable, "-m", "fugu_lite", "--version"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (child.returncode, child.stdout, child.stderr) == (0, f"fugu-lite {__version__}\n", "")


def test_a_command_invoked_outside_the_main_thread_runs(tmp_path: Path) -> None:
    """Commands set the SIGTERM (and Ctrl-C) handler while they run, which Python allows in
    the main thread only: invoked from another thread (an app's worker thread, a notebook's
    background job), they ended with 'ValueError: signal only works in main thread'. Signals
    come to the main thread alone, so elsewhere the handlers are now left as they are."""
    cache = tmp_path / "cache"
    cache.mkdir()
    results = []
    thread = threading.Thread(
        target=lambda: results.append(invoke("cache", "clear", "--all", "--cache-dir", cache))
    )
    thread.start()
    thread.join()
    assert "removed 0 cached items" in ok(results[0])


@pytest.mark.parametrize("outcome", ["trained", "failed", "interrupted"])
def test_a_command_puts_back_the_sigterm_and_ctrl_c_handlers_it_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, outcome: str
) -> None:
    """A command takes SIGTERM as a Ctrl-C while it runs: an app (or notebook) invoking it
    in-process kept that handler after, so its own `kill PID` handling was gone (no test
    looked at the handlers after a command)."""

    def stage(*args: object) -> dict:
        if outcome == "interrupted":
            raise KeyboardInterrupt
        if outcome == "failed":
            raise ValueError("the records hold no training split")
        return {"checkpoint": str(tmp_path / "out")}

    def apps_own(signum: int, frame: object) -> None:
        raise AssertionError("not called")

    monkeypatch.setattr("fugu_lite.train_sft.train_sft", stage)
    records = tmp_path / "records.jsonl"
    write_records(records, generated_records(n_per_topic=3))
    found = {number: signal.getsignal(number) for number in (signal.SIGTERM, signal.SIGINT)}
    try:
        for number in found:
            signal.signal(number, apps_own)
        result = invoke("train", "sft", "-r", records, "-o", tmp_path / "out")
        after = {number: signal.getsignal(number) for number in found}
    finally:
        for number, handler in found.items():
            signal.signal(number, handler)
    assert result.exit_code == {"trained": 0, "failed": 2, "interrupted": 130}[outcome]
    assert after == {signal.SIGTERM: apps_own, signal.SIGINT: apps_own}


def test_collect_refuses_records_and_call_log_named_alike_in_a_folder_that_ignores_case(
    tmp_path: Path,
) -> None:
    """On a file system that ignores case (macOS's and Windows' default) `-o R.jsonl --log
    r.jsonl` name one file: neither there yet, they passed as two, and the first run wrote
    the call log into the records. Linux makes no such file system here (this kernel's tmpfs
    has no casefold), so the folder answers as one does: its entry `A` is the file `a`. In a
    folder that tells case apart the two names stay two files."""
    tasks = tmp_path / "tasks.jsonl"
    write_tasks(tasks, number_tasks(1))
    alike = tmp_path / "alike"
    alike.mkdir()
    (alike / "a").touch()
    (alike / "A").symlink_to("a")
    result = invoke("collect", "-t", tasks, "-o", alike / "R.jsonl", "--log", alike / "r.jsonl")
    assert result.exit_code == 2, result.output
    assert f"--log {alike / 'r.jsonl'} is the records file (-o) itself" in flat(result.output)
    assert sorted(path.name for path in alike.iterdir()) == ["A", "a"]
    apart = tmp_path / "apart"
    apart.mkdir()
    (apart / "a").touch()
    assert not same_path(apart / "R.jsonl", apart / "r.jsonl")
    assert not same_path(tmp_path / "new" / "R.jsonl", tmp_path / "new" / "r.jsonl")
    assert same_path(alike / "new" / "R.jsonl", alike / "new" / "r.jsonl")


def test_collect_refuses_records_that_are_a_hard_link_of_its_task_file(tmp_path: Path) -> None:
    """Two names of one file (a hard link, as `cp -al` snapshots make) are one path to
    same_path, as a symlink is: `collect -o` such a link of its task file would append the
    records to the tasks (no test linked two files)."""
    tasks = tmp_path / "tasks.jsonl"
    write_tasks(tasks, number_tasks(1))
    before = tasks.read_bytes()
    for link, make in (("hard.jsonl", os.link), ("soft.jsonl", os.symlink)):
        make(tasks, tmp_path / link)
        result = invoke("collect", "-t", tasks, "-o", tmp_path / link)
        assert result.exit_code == 2, result.output
        assert f"-o {tmp_path / link} is the task file (--tasks) itself" in flat(result.output)
    assert tasks.read_bytes() == before
