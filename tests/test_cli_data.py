"""`fugu-lite data import` and `data stats`."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from cli_support import Run, flat, invoke, ok
from conftest import WORKERS

from fugu_lite.schemas import RewardRecord, read_records, write_records


def test_import_writes_the_records_with_the_standard_split(run: Run) -> None:
    assert f"wrote {len(run.records)} records" in flat(run.import_output)
    imported = {record.id: record for record in read_records(run.records_path)}
    assert len(imported) == len(run.records)
    for original in run.records:
        copy = imported[original.id]
        assert copy.worker_ids == sorted(WORKERS)
        assert (copy.prompt, copy.split, copy.task) == (
            original.prompt,
            original.split,
            original.task,
        )
        for worker in WORKERS:
            assert copy.reward_of(worker) == pytest.approx(original.reward_of(worker))


def test_data_stats_prints_split_sizes_and_each_workers_mean_reward(run: Run) -> None:
    output = flat(ok(invoke("data", "stats", run.records_path)))
    for split in ("train", "validation", "test"):
        assert re.search(rf"\b{split} {len(run.split(split))}\b", output), output
    train = run.split("train")
    for worker in WORKERS:
        mean = sum(record.reward_of(worker) for record in train) / len(train)
        assert re.search(rf"{re.escape(worker)}\s*│\s*{mean:.3f}\s*│", output), output
    oracle = sum(max(record.rewards) for record in train) / len(train)
    assert re.search(rf"oracle\s*│\s*{oracle:.3f}\s*│", output), output


def test_data_stats_says_how_many_records_on_one_line_above_a_narrow_table(
    tmp_path: Path,
) -> None:
    """The summary was the table's title, folded to the width of a narrow table (two short
    worker ids): '1 records (test' / '1), 0 tasks: mean' / 'reward per worker'."""
    records_path = tmp_path / "one.jsonl"
    write_records(records_path, [RewardRecord(prompt="hello", split="test", worker_ids=["a", "b"],
                                               rewards=[1.0, 0.0])])  # fmt: skip
    lines = ok(invoke("data", "stats", records_path)).splitlines()
    assert lines[0] == "1 record (test 1), 0 tasks: mean reward per worker", lines


def test_data_stats_says_when_the_mean_cost_leaves_records_out(tmp_path: Path) -> None:
    """The mean cost column averaged only the records that have costs and did not say so:
    one costed record of three showed as the workers' mean cost."""
    records = [
        RewardRecord(prompt=f"p{index}", split="train", worker_ids=["a", "b"],
                     rewards=[1.0, 0.0], costs=[1.0, 2.0] if index == 0 else None)
        for index in range(3)
    ]  # fmt: skip
    records_path = tmp_path / "records.jsonl"
    write_records(records_path, records)
    output = flat(ok(invoke("data", "stats", records_path)))
    assert "mean cost: over the records that have costs, 1 of 3" in output, output
    write_records(records_path, [r.model_copy(update={"costs": [1.0, 2.0]}) for r in records])
    assert "that have costs" not in ok(invoke("data", "stats", records_path))


def test_data_commands_report_bad_files(tmp_path: Path) -> None:
    broken = tmp_path / "broken.jsonl"
    broken.write_text(
        '{"prompt": "p", "split": "train", "worker_ids": ["a"], "rewards": [1]}\n{oops\n'
    )
    result = invoke("data", "stats", broken)
    assert result.exit_code == 2
    assert "line 2: not valid JSON" in flat(result.output)
    assert "fix or delete that line" in flat(result.output)
    # the table itself given for the records: its header is no line to fix or delete
    table = tmp_path / "scores.csv"
    table.write_text("prompt,worker,reward\nhi,a,1\n", encoding="utf-8")
    for command in (("data", "stats", table), ("train", "sft", "-r", table, "-o", tmp_path / "o")):
        result = invoke(*command)
        assert result.exit_code == 2
        shown = flat(result.stderr)
        assert "scores.csv, line 1: not valid JSON" in shown
        assert "does not start as JSON Lines" in shown and "fugu-lite data import" in shown
        assert "delete" not in shown

    result = invoke("data", "import", "parquet", broken, "--output", tmp_path / "out.jsonl")
    assert result.exit_code == 2
    assert "unknown dataset format 'parquet'" in flat(result.output)

    no_header = tmp_path / "long.csv"
    no_header.write_text("text,worker\nhello,a\n", encoding="utf-8")
    result = invoke("data", "import", "long", no_header, "--output", tmp_path / "out.jsonl")
    assert result.exit_code == 2
    assert "missing column(s) ['prompt', 'reward']" in flat(result.output)
    assert not (tmp_path / "out.jsonl").exists()


@pytest.mark.parametrize("format", ["long", "zeroeval"])
def test_a_record_or_task_file_given_to_import_says_what_it_is(
    run: Run, tmp_path: Path, format: str
) -> None:
    """The records `data import` wrote, given to it again, or a task file, were told to
    rename their keys to the long format's (or to import with zeroeval), or that their scores
    were None."""
    result = invoke("data", "import", format, run.records_path, "-o", tmp_path / "again.jsonl")
    assert result.exit_code == 2
    assert flat(result.output).endswith(
        "line 1: this is a RewardRecord (it has 'worker_ids' and 'rewards'): the file holds "
        "records already, as `data import` writes them; give it as it is to train, eval or "
        "`data stats` (-r FILE), with no import"
    )
    tasks = tmp_path / "tasks.jsonl"
    ok(invoke("tasks", "generate", "-o", tasks, "--per-family", "1", "--family", "arithmetic"))
    result = invoke("data", "import", format, tasks, "-o", tmp_path / "again.jsonl")
    assert result.exit_code == 2
    assert flat(result.output).endswith(
        "line 1: this is a task (it has 'grader'), not a row of rewards: the workers answer a "
        "task file in `fugu-lite collect --tasks FILE`, which writes the records; it is not "
        "imported"
    )


def test_records_sharing_an_id_are_read_with_a_warning(run: Run, tmp_path: Path) -> None:
    unique = flat(ok(invoke("data", "stats", run.records_path)))
    assert "warning" not in unique
    doubled = tmp_path / "doubled.jsonl"
    write_records(doubled, run.records + run.records[:2])
    output = flat(ok(invoke("data", "stats", doubled)))
    assert f"2 record ids occur more than once (first: {run.records[0].id})" in output


ROUTERBENCH_HEADER = "prompt,eval_name,m1,m1|total_cost\n"


@pytest.mark.parametrize(
    ("format", "name", "content", "options", "expected"),
    [
        ("routerbench", "rb.csv", ROUTERBENCH_HEADER, [], "has a header but no data rows"),
        ("routerbench", "rb.csv", ROUTERBENCH_HEADER + "p,t,,0.1\n", ["on_missing=drop"],
         "--option on_missing=drop leaves no records"),
        ("zeroeval", "ze.jsonl", json.dumps({"id": 1, "task": "gsm", "question": " ",
         "scores": {"a": 1}, "out_chars": {"a": 3}}) + "\n", [], "1 row(s) have an empty question"),
    ],
)  # fmt: skip
def test_import_without_records_fails_and_writes_nothing(
    tmp_path: Path, format: str, name: str, content: str, options: list[str], expected: str
) -> None:
    source = tmp_path / name
    source.write_text(content, encoding="utf-8")
    output = tmp_path / "out" / "records.jsonl"
    extra = [part for option in options for part in ("--option", option)]
    result = invoke("data", "import", format, source, "-o", output, *extra)
    assert result.exit_code == 2, result.output
    assert f"{source}" in flat(result.output) and expected in flat(result.output)
    assert not output.exists()


def test_import_warnings_carry_the_warning_prefix(tmp_path: Path) -> None:
    """An importer's warning (rows dropped) reached stderr bare, where every other
    command's warnings start with `warning:`, so a grep for warnings missed it."""
    source = tmp_path / "ze.jsonl"
    rows = [{"id": n, "task": "gsm", "question": question, "scores": {"a": 1},
             "out_chars": {"a": 3}} for n, question in enumerate([" ", "q"])]  # fmt: skip
    source.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    result = invoke("data", "import", "zeroeval", source, "-o", tmp_path / "records.jsonl")
    ok(result)
    assert f"warning: {source}: dropped 1 rows with an empty question\n" in result.stderr


def test_record_summary_of_no_records_does_not_crash(capsys: pytest.CaptureFixture[str]) -> None:
    from fugu_lite.cli.data import print_record_summary

    print_record_summary([])
    assert capsys.readouterr().out.strip() == "0 records"


def test_import_option_values_are_checked_and_strings_stay_strings(tmp_path: Path) -> None:
    source = tmp_path / "rb.csv"
    source.write_text(
        "sample_id,prompt,eval_name,m1,m1|total_cost,2024\n007,42,t,1,0.1,test\n",
        encoding="utf-8",
    )
    output = tmp_path / "rb.jsonl"
    options = ("--option", "split_column=2024")
    ok(invoke("data", "import", "routerbench", source, "-o", output, *options))
    (imported,) = read_records(output)
    assert (imported.id, imported.prompt, imported.split) == ("007", "42", "test")
    result = invoke("data", "import", "llmrouter", tmp_path / "llmrouter", "-o",
                    tmp_path / "o.jsonl", "--option", "output_tokens=abc")  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "option output_tokens='abc' is not valid: expected a number" in flat(result.output)


def test_import_refuses_to_overwrite_its_source(tmp_path: Path) -> None:
    source = tmp_path / "same.jsonl"
    content = '{"prompt":"hi","worker":"a","reward":1}\n{"prompt":"hi","worker":"b","reward":0}\n'
    source.write_text(content, encoding="utf-8")
    result = invoke("data", "import", "long", source, "-o", source)
    assert result.exit_code == 2, result.output
    assert "is the source file itself" in flat(result.output)
    assert source.read_text(encoding="utf-8") == content
    (tmp_path / "zeroeval").mkdir()
    result = invoke("data", "import", "zeroeval", tmp_path, "-o", tmp_path / "zeroeval" / "o.jsonl")
    assert result.exit_code == 2, result.output
    assert f"lies inside the source folder {tmp_path}" in flat(result.output)


def test_a_link_loop_given_to_import_is_one_error_line(tmp_path: Path) -> None:
    """A source or -o through a link that leads back to itself (`ln -s data data`) ended
    import in a RuntimeError traceback, 'Symlink loop', from comparing the two; each is one
    error line now, and nothing is written."""
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    source = tmp_path / "long.csv"
    source.write_text("prompt,worker,reward\nhi,a,1\nhi,b,0\n", encoding="utf-8")
    output = tmp_path / "records.jsonl"
    for args, expected in (
        ((source, "-o", loop / "records.jsonl"), f"error: -o {loop / 'records.jsonl'}: {loop} is "
         "a link that leads back to itself"),
        ((loop / "long.csv", "-o", output), f"error: {loop / 'long.csv'}: cannot be read (Too "
         "many levels of symbolic links)"),
    ):  # fmt: skip
        result = invoke("data", "import", "long", *args)
        assert result.exit_code == 2, f"{result.output}\n{result.exception!r}"
        assert flat(result.stderr).startswith(expected), result.stderr
    assert not output.exists()
    assert loop.readlink() == loop


def test_import_and_generate_refuse_to_replace_an_existing_file_without_force(
    tmp_path: Path,
) -> None:
    """`data import -o runs/rewards.jsonl` (or `tasks generate -o`) over the records that
    `collect` had gathered with paid calls replaced them without a word."""
    source = tmp_path / "long.csv"
    source.write_text("prompt,worker,reward\nhi,a,1\nhi,b,0\n", encoding="utf-8")
    output = tmp_path / "rewards.jsonl"
    collected = '{"collected": "by paid calls"}\n'
    commands = [
        ("data", "import", "long", source, "-o", output),
        ("tasks", "generate", "-o", output, "--per-family", "1"),
    ]
    for command in commands:
        output.write_text(collected, encoding="utf-8")
        result = invoke(*command)
        assert result.exit_code == 2, result.output
        assert f"error: -o {output} already exists" in flat(result.stderr)
        assert "pass --force to replace it" in flat(result.stderr)
        assert output.read_text(encoding="utf-8") == collected
        ok(invoke(*command, "--force"))
        assert output.read_text(encoding="utf-8") != collected
    output.write_text("", encoding="utf-8")  # an empty file holds nothing to lose
    ok(invoke("tasks", "generate", "-o", output, "--per-family", "1"))


def test_unreadable_inputs_give_a_clear_error(tmp_path: Path) -> None:
    records = tmp_path / "r.jsonl"
    records.write_bytes(b'{"prompt":"h\xe9","split":"train","worker_ids":["a"],"rewards":[1]}\n')
    result = invoke("data", "stats", records)
    assert result.exit_code == 2, result.output
    assert "r.jsonl, line 1: not UTF-8 text" in flat(result.output)
    result = invoke("data", "stats", tmp_path)
    assert result.exit_code == 2, result.output
    assert "is a directory, not a file" in flat(result.output)
    tasks = tmp_path / "t.jsonl"
    row = '{"id":"q1","prompt":"x","answer":"1","grader":"number","task":"a"}\n'
    tasks.write_bytes(row.encode() + b"\xff\xfe\n")
    result = invoke("tasks", "check", tasks)
    assert result.exit_code == 2, result.output
    assert "t.jsonl, line 2: not UTF-8 text" in flat(result.output)
    config = tmp_path / "c.yaml"
    config.write_bytes(b"model:\n  backbone: caf\xe9\n")
    for bad_config, expected in ((config, "c.yaml, line 2: not UTF-8"), (tmp_path, "directory")):
        result = invoke("train", "sft", "-r", records, "-o", tmp_path / "out", "-c", bad_config)
        assert result.exit_code == 2, result.output
        assert expected in flat(result.output)


def test_unusable_output_paths_fail_before_any_work(tmp_path: Path) -> None:
    source = tmp_path / "long.csv"
    source.write_text("prompt,worker,reward\nhi,a,1\nhi,b,0\n", encoding="utf-8")
    a_file = tmp_path / "afile"
    a_file.touch()
    records = tmp_path / "records.jsonl"  # never read: the output is checked first
    attempts = [
        (("data", "import", "long", source, "-o", a_file / "x.jsonl"), "afile is a file, so"),
        (("data", "import", "long", source, "-o", tmp_path), "is a directory; give a file path"),
        (("train", "sft", "-r", records, "-o", a_file), "afile is a file, not a folder"),
        (("train", "pipeline", "-r", records, "-o", a_file / "run"), "afile is a file, so"),
        (("eval", "--checkpoint", tmp_path, "-r", records, "-o", a_file), "is a file, not a"),
        (("eval", "--checkpoint", tmp_path, "-r", records, "-o", a_file, "--pareto"),
         "is a file, not a folder"),
    ]  # fmt: skip
    for args, expected in attempts:
        result = invoke(*args)
        assert result.exit_code == 2, (args, result.output, result.exception)
        assert expected in flat(result.output), args


def test_import_help_names_each_importers_options() -> None:
    """--help said only "Importer option key=value" and that a split column is used
    "(--option)", naming no option: which keys an importer takes (use_split_column for long,
    split_column for the others, on_missing, prices) was found by trial and error."""
    import inspect

    from fugu_lite.datasets import IMPORTERS

    text = flat(ok(invoke("data", "import", "--help")))
    for format, importer in IMPORTERS.items():
        options = [
            name
            for name, parameter in inspect.signature(importer).parameters.items()
            if parameter.kind is inspect.Parameter.KEYWORD_ONLY
        ]
        assert f"{format}: {', '.join(options)}" in text, (format, options, text)


def test_a_compressed_output_name_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    """`data import -o records.jsonl.gz` (or `tasks generate -o tasks.jsonl.gz`) wrote plain
    JSON Lines under a .gz name: gunzip, zcat and any reader going by the name then failed
    on it, and fugu-lite itself reads no compressed record file."""
    source = tmp_path / "long.csv"
    source.write_text("prompt,worker,reward\nhi,a,1\nhi,b,0\n", encoding="utf-8")
    for name, command in [
        ("records.jsonl.gz", ("data", "import", "long", source)),
        ("records.JSONL.ZST", ("data", "import", "long", source)),
        ("tasks.jsonl.xz", ("tasks", "generate", "--per-family", "1")),
    ]:
        output = tmp_path / name
        result = invoke(*command, "-o", output)
        assert result.exit_code == 2, result.output
        message = flat(result.stderr)
        assert f"-o {output}: the output is plain JSON Lines, not compressed" in message, message
        assert f"e.g. -o {output.with_suffix('')}" in message, message
        assert not output.exists()
    ok(invoke("data", "import", "long", source, "-o", tmp_path / "records.jsonl"))
