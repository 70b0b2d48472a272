"""`fugu-lite` end to end through typer's CliRunner: import -> train -> eval -> route."""

from __future__ import annotations

import csv
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import WORKERS, generated_records
from typer.testing import CliRunner

from fugu_lite.cli import app
from fugu_lite.config import ModelConfig
from fugu_lite.schemas import RewardRecord, read_records, write_records

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
CONFIG = """\
model:
  backbone: tiny-random
  layer: -1
  head: linear
  max_tokens: 32
  cache_dir: {cache_dir}
sft:
  epochs: 8
  batch_size: 16
  learning_rate: 0.05
  temperature: 0.1
rl:
  epochs: 3
  batch_size: 16
  learning_rate: 0.01
  estimator: reinforce
"""

runner = CliRunner()


def invoke(*args: str | Path, input: str | None = None):
    return runner.invoke(app, [str(arg) for arg in args], input=input)


def flat(text: str) -> str:
    """The output with rich's line wrapping undone."""
    return " ".join(text.split())


def ok(result) -> str:
    assert result.exit_code == 0, f"exit {result.exit_code}:\n{result.output}\n{result.exception!r}"
    return result.output


def write_long_csv(path: Path, records: list[RewardRecord]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as stream:
        writer = csv.writer(stream)
        writer.writerow(["prompt", "worker", "reward", "cost", "task", "id"])
        for record in records:
            for worker, reward, cost in zip(
                record.worker_ids, record.rewards, record.costs or [], strict=True
            ):
                writer.writerow([record.prompt, worker, repr(reward), cost, record.task, record.id])
    return path


@dataclass
class Run:
    root: Path
    records: list[RewardRecord]
    records_path: Path
    config_path: Path
    run_dir: Path
    import_output: str
    train_output: str

    @property
    def checkpoint(self) -> Path:
        return self.run_dir / "rl"

    def split(self, name: str) -> list[RewardRecord]:
        return [record for record in self.records if record.split == name]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """Import the generated records from a long CSV and train the pipeline once."""
    root = tmp_path_factory.mktemp("cli")
    records = generated_records()
    csv_path = write_long_csv(root / "long.csv", records)
    records_path = root / "records.jsonl"
    import_output = ok(invoke("data", "import", "long", csv_path, "--output", records_path))
    config_path = root / "config.yaml"
    config_path.write_text(CONFIG.format(cache_dir=root / "cache"), encoding="utf-8")
    run_dir = root / "run"
    train_output = ok(
        invoke(
            "train", "pipeline", "--records", records_path, "--output", run_dir,
            "--config", config_path,
        )
    )  # fmt: skip
    return Run(root, records, records_path, config_path, run_dir, import_output, train_output)


# --- data import / stats --------------------------------------------------------------------


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
    from fugu_lite.cli import print_record_summary

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


# --- train ----------------------------------------------------------------------------------


def test_train_pipeline_writes_both_stages(run: Run) -> None:
    assert f"checkpoint written to {run.checkpoint}" in flat(run.train_output)
    for stage in ("sft", "rl"):
        for name in ("router.json", "router_head.safetensors", "training_report.json"):
            assert (run.run_dir / stage / name).is_file(), f"{stage}/{name}"
        stage_report = json.loads((run.run_dir / stage / "training_report.json").read_text())
        assert stage_report["config"]["model"]["backbone"] == "tiny-random"
    report = json.loads((run.run_dir / "training_report.json").read_text())
    assert report["checkpoint"] == str(run.checkpoint)
    config = json.loads((run.run_dir / "sft" / "training_report.json").read_text())["config"]
    assert config["model"]["backbone"] == "tiny-random"
    assert config["training"]["epochs"] == 8


def test_train_pipeline_prints_one_line_per_epoch(run: Run) -> None:
    output = flat(run.train_output)
    for stage, epochs, train_metric in (("SFT", 8, "loss"), ("RL", 3, "sampled reward")):
        pattern = rf"{stage} epoch (\d+)/{epochs}: train {train_metric} -?[\d.]+"
        assert [int(epoch) for epoch in re.findall(pattern, output)] == list(range(1, epochs + 1))
    rewards = re.findall(r"\| validation reward ([\d.]+)", output)
    assert len(rewards) == 8 + 3 and all(0.0 <= float(reward) <= 1.0 for reward in rewards)
    assert "{'epoch'" not in output
    assert "━" not in run.train_output  # the epoch lines say it: no bar drawn at the end


def test_reward_head_and_es_progress_is_shown_in_a_log(run: Run, tmp_path: Path) -> None:
    """With stderr piped (a CI log, `2> log`), rich drew the reward head's and ES's bars only
    once they were done, so their long runs said nothing until then."""
    head = invoke("train", "reward-head", "-r", run.records_path, "-o", tmp_path / "head",
                  "-c", run.config_path)  # fmt: skip
    lines = re.findall(r"^reward head: (\d+)/(\d+) \(k=\d+\)$", ok(head) and head.stderr, re.M)
    assert len(lines) >= 2 and lines[-1][0] == lines[-1][1], head.stderr
    es = invoke("train", "es", "-r", run.records_path, "-o", tmp_path / "es",
                "--checkpoint", run.run_dir / "sft", "-c", run.config_path,
                "--set", "training.iterations=20", "--set", "training.population_size=4",
                "--set", "training.log_every=100")  # fmt: skip
    line = r"^ES generations: (\d+)/20 \(best validation [\d.]+\)$"
    done = re.findall(line, ok(es) and es.stderr, re.M)
    assert [int(count) for count in done] == list(range(2, 21, 2)), es.stderr
    assert "━" not in head.stderr + es.stderr


@pytest.mark.parametrize(
    ("stage", "options", "progress"),
    [
        ("sft", ["--set", "training.epochs=1"], "SFT epoch 1/1"),
        ("rl", ["--set", "training.epochs=1"], "RL epoch 1/1"),
        ("es", ["--set", "training.iterations=2", "--set", "training.search=head"], "ES device"),
        ("reward-head", ["--set", "model.layer=-1"], "reward head"),
    ],
)
def test_training_prints_its_result_on_stdout_and_progress_and_warnings_on_stderr(
    run: Run, tmp_path: Path, stage: str, options: list[str], progress: str
) -> None:
    """Progress bars, per-epoch lines, notes and warnings of `train ...` went to stdout with
    the result, so `fugu-lite train ... > log` or a script reading the result got them all."""
    tied = [record.model_copy(update={"rewards": [0.5, 0.5, 0.5]}) for record in run.records]
    records_path = tmp_path / "tied.jsonl"
    write_records(records_path, tied)
    output = tmp_path / stage
    result = runner.invoke(
        app,
        ["train", stage, "-r", str(records_path), "-o", str(output), "-c", str(run.config_path),
         *options],
    )  # fmt: skip
    ok(result)
    assert flat(result.stdout) == f"checkpoint written to {output}"
    assert progress in flat(result.stderr)
    if stage != "reward-head":  # its own note on ties; the gradient stages warn
        assert "warning: every one of the" in flat(result.stderr)


def test_train_pipeline_prints_only_its_result_on_stdout(run: Run, tmp_path: Path) -> None:
    output = tmp_path / "pipeline"
    shutil.copytree(run.run_dir, output)  # both stages kept: their notes are said too
    result = invoke("train", "pipeline", "-r", run.records_path, "-o", output,
                    "-c", run.config_path)  # fmt: skip
    ok(result)
    assert flat(result.stdout) == f"checkpoint written to {output / 'rl'}"
    assert "already holds the SFT" in flat(result.stderr)


def test_result_lines_print_their_paths_whole_and_as_they_are(run: Run, tmp_path: Path) -> None:
    """Piped (80 columns), `checkpoint written to PATH` and `report written to PATH` were
    folded inside a long path, and a `[x]` in it was eaten as rich markup, so a script
    reading the result got another path (and so did the notes naming a folder)."""
    output = tmp_path / "runs[x]" / ("a-rather-long-folder-name-" * 3) / "pipeline"
    shutil.copytree(run.run_dir, output)
    result = invoke("train", "pipeline", "-r", run.records_path, "-o", output,
                    "-c", run.config_path)  # fmt: skip
    ok(result)
    assert result.stdout == f"checkpoint written to {output / 'rl'}\n"
    said = "".join(result.stderr.split())  # notes for people may fold a long path
    assert "".join(f"SFT: {output / 'sft'} already holds".split()) in said
    report = output / "eval[test]"
    result = invoke("eval", "--checkpoint", output / "rl", "-r", run.records_path, "-o", report)
    ok(result)
    assert result.stdout.endswith(f"\nreport written to {report}\n")


@pytest.mark.parametrize(
    ("config_text", "extra", "expected"),
    [
        ("sft:\n  epoch: 3\n", [], "unknown key 'sft.epoch': did you mean 'epochs'?"),
        ("model:\n  backbone: tiny-random\n", ["--set", "rl.estimater=reinforce"],
         "unknown key 'rl.estimater': did you mean 'estimator'?"),
        ("sft:\n  epochs: lots\n", [], "sft.epochs: Input should be a valid integer"),
        ("training:\n  epochs: 2\n", [],
         "unknown key 'training': a pipeline config puts stage settings under sft:, rl: or es:"),
    ],
)  # fmt: skip
def test_train_with_a_bad_config_exits_2_naming_the_key(
    run: Run, tmp_path: Path, config_text: str, extra: list[str], expected: str
) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text(config_text, encoding="utf-8")
    result = invoke(
        "train", "pipeline", "--records", run.records_path, "--output", tmp_path / "out",
        "--config", config, *extra,
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "error:" in result.output
    assert expected in flat(result.output)
    assert not (tmp_path / "out").exists()


def test_train_with_a_bad_set_option_exits_2(run: Run, tmp_path: Path) -> None:
    result = invoke(
        "train", "sft", "--records", run.records_path, "--output", tmp_path / "out",
        "--set", "training.epochs",
    )  # fmt: skip
    assert result.exit_code == 2
    assert "needs the form key=value" in flat(result.output)
    result = invoke(
        "train", "sft", "--records", run.records_path, "--output", tmp_path / "out",
        "--config", run.config_path, "--set", "sft.epochs=2",
    )  # fmt: skip
    assert result.exit_code == 2
    assert (
        "--set sft.epochs: a single stage's keys are model.* and training.*; use "
        "training.epochs" in flat(result.output)
    )
    # a bad value given by --set was reported as the -c file's, where the user looked for it
    for pairs, expected in (
        (["training.epochs=0"], "--set training.epochs: Input should be greater than or equal"),
        (["training.epoch=2"], "log_every (given by --set training.epoch)\n"),
        (["training.epochs.x=2"], "--set training.epochs.x: 'epochs' is a value here, not a"),
        (["=2"], "--set '=2' has no key before '='; e.g. --set training.epochs=5\n"),
        (["training=5", "training.epochs=2"], "--set training.epochs: 'training' is a value"),
    ):
        sets = [part for pair in pairs for part in ("--set", pair)]
        result = invoke("train", "sft", "-r", run.records_path, "-o", tmp_path / "out",
                        "-c", run.config_path, *sets)  # fmt: skip
        assert result.exit_code == 2 and expected in result.stderr, result.stderr


def test_set_and_option_errors_name_their_flag(run: Run, tmp_path: Path) -> None:
    result = invoke("train", "sft", "-r", run.records_path, "-o", tmp_path / "out",
                    "--set", "training.epochs=[1")  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "--set training.epochs=[1: the value '[1' is not valid YAML" in flat(result.output)
    assert not (tmp_path / "out").exists()
    result = invoke("data", "import", "long", run.records_path, "-o", tmp_path / "o.jsonl",
                    "--option", "use_split_column")  # fmt: skip
    assert result.exit_code == 2, result.output
    message = flat(result.output)
    assert "--option 'use_split_column' needs the form key=value, e.g. --option " in message
    assert "--set" not in message and "training.epochs" not in message


@pytest.mark.parametrize("stage", ["sft", "rl", "es"])
def test_train_refuses_to_write_over_its_own_checkpoint(
    run: Run, tmp_path: Path, stage: str
) -> None:
    """`train rl -o runs/sft --checkpoint runs/sft` replaced the SFT it continued from, with
    no word, and `train es` saved its search where its start then changed under it."""
    checkpoint = tmp_path / "sft"
    shutil.copytree(run.run_dir / "sft", checkpoint)
    before = {path.name: path.read_bytes() for path in checkpoint.iterdir()}
    result = invoke("train", stage, "-r", run.records_path, "-c", run.config_path,
                    "-o", f"{checkpoint}/", "--checkpoint", checkpoint)  # fmt: skip
    assert result.exit_code == 2, result.output
    assert f"-o {checkpoint} is the --checkpoint this stage starts from" in result.stderr
    assert f"e.g. -o {checkpoint}-{stage}\n" in result.stderr, result.stderr
    assert {path.name: path.read_bytes() for path in checkpoint.iterdir()} == before


def test_train_continuing_from_a_mismatched_checkpoint_exits_2(run: Run, tmp_path: Path) -> None:
    settings = {
        "model.backbone": "tiny-random",
        "model.max_tokens": 32,
        "model.cache_dir": run.root / "cache",
        "model.layer": 1,  # the checkpoint was trained on the last layer
    }
    sets = [part for key, value in settings.items() for part in ("--set", f"{key}={value}")]
    result = invoke(
        "train", "rl", "--records", run.records_path, "--output", tmp_path / "out",
        "--checkpoint", run.run_dir / "sft", *sets,
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "model.layer: checkpoint -1 vs config 1" in flat(result.output)
    assert "Use the model config the checkpoint was trained with" in flat(result.output)
    assert "records with the checkpoint's workers" not in flat(result.output)
    assert not (tmp_path / "out").exists()


# --- eval -----------------------------------------------------------------------------------


def test_eval_writes_sane_reports(run: Run, tmp_path: Path) -> None:
    output_dir = tmp_path / "eval"
    ok(
        invoke(
            "eval", "--checkpoint", run.checkpoint, "--records", run.records_path,
            "--split", "test", "--output", output_dir,
        )
    )  # fmt: skip
    for name in ("evaluation_report.json", "evaluation_report.md", "predictions.jsonl"):
        assert (output_dir / name).is_file(), name
    plots = sorted(output_dir.glob("*.png"))
    assert {p.name for p in plots} >= {"mean_reward.png", "router_choices.png"}
    for plot in plots:
        assert plot.read_bytes().startswith(PNG_MAGIC), plot.name

    test = run.split("test")
    report = json.loads((output_dir / "evaluation_report.json").read_text())
    assert report["split"] == "test"
    assert report["checkpoint"] == str(run.checkpoint)
    assert report["sizes"]["evaluated"] == len(test)
    assert report["sizes"]["train"] == len(run.split("train"))
    methods = report["methods"]
    random_mean = sum(sum(r.rewards) / len(r.rewards) for r in test) / len(test)
    oracle_mean = sum(max(r.rewards) for r in test) / len(test)
    assert methods["random"]["mean_reward"] == pytest.approx(random_mean)
    assert methods["oracle"]["mean_reward"] == pytest.approx(oracle_mean)
    router = methods["router"]["mean_reward"]
    assert random_mean + 0.1 < router <= oracle_mean + 1e-9
    assert router >= methods["best_single"]["mean_reward"]

    by_id = {record.id: record for record in test}
    predictions = [
        json.loads(line) for line in (output_dir / "predictions.jsonl").read_text().splitlines()
    ]
    assert sorted(p["id"] for p in predictions) == sorted(by_id)
    for prediction in predictions:
        record = by_id[prediction["id"]]
        assert prediction["chosen_worker"] in record.worker_ids
        assert prediction["reward"] == pytest.approx(record.reward_of(prediction["chosen_worker"]))
        assert prediction["oracle_reward"] == pytest.approx(max(record.rewards))
        assert sum(prediction["probabilities"].values()) == pytest.approx(1.0, abs=1e-5)
        best = max(prediction["probabilities"], key=prediction["probabilities"].get)
        assert best == prediction["chosen_worker"]
    mean_prediction = sum(p["reward"] for p in predictions) / len(predictions)
    assert mean_prediction == pytest.approx(router)
    assert "# Evaluation on `test`" in (output_dir / "evaluation_report.md").read_text()


def test_eval_prints_each_sentence_and_path_on_one_line_when_piped(
    run: Run, tmp_path: Path
) -> None:
    """`eval > report.txt` (stdout piped: 80 columns) folded the sentence under the tables,
    each note and the report's path, so a grep for them or a copied path failed."""
    output_dir = tmp_path / ("evaluation_reports_" * 5) / "eval"
    result = invoke("eval", "--checkpoint", run.checkpoint, "-r", run.records_path,
                    "-o", output_dir)  # fmt: skip
    lines = ok(result) and result.stdout.splitlines()
    assert f"report written to {output_dir}" in lines, result.stdout
    sentence = r"The router picks the best single worker \(.+\) on .+ and less on [\d.]+%\."
    assert any(re.fullmatch(sentence, line) for line in lines), result.stdout


def test_eval_defaults_to_a_folder_beside_the_checkpoint(run: Run) -> None:
    ok(
        invoke(
            "eval", "--checkpoint", run.run_dir / "sft", "--records", run.records_path,
            "--split", "validation",
        )
    )  # fmt: skip
    report = json.loads(
        (run.run_dir / "sft" / "eval-validation" / "evaluation_report.json").read_text()
    )
    assert report["split"] == "validation"
    assert report["sizes"]["evaluated"] == len(run.split("validation"))


def test_eval_split_takes_the_aliases_the_importers_read(run: Run) -> None:
    """`eval --split dev` was refused as an unknown split, though `data import` reads dev
    (and val, valid) as the validation split."""
    ok(invoke("eval", "--checkpoint", run.checkpoint, "--records", run.records_path,
              "--split", "Dev"))  # fmt: skip
    report = json.loads((run.checkpoint / "eval-validation" / "evaluation_report.json").read_text())
    assert report["split"] == "validation"
    assert report["sizes"]["evaluated"] == len(run.split("validation"))
    assert not (run.checkpoint / "eval-Dev").exists()


def test_eval_refuses_unknown_split_and_other_workers(run: Run, tmp_path: Path) -> None:
    result = invoke(
        "eval", "--checkpoint", run.checkpoint, "--records", run.records_path, "--split",
        "holdout", "--output", tmp_path / "eval",
    )  # fmt: skip
    assert result.exit_code == 2
    assert "--split 'holdout': unknown split; use one of train, validation, test" in flat(
        result.output
    )
    assert not (tmp_path / "eval").exists()

    renamed = [
        r.model_copy(update={"worker_ids": ["w1", "w2", "w3"]})
        for r in read_records(run.records_path)
    ]
    other = tmp_path / "other.jsonl"
    write_records(other, renamed)
    result = invoke("eval", "--checkpoint", run.checkpoint, "--records", other)
    assert result.exit_code == 2
    message = flat(result.output)
    assert "does not match" in message
    assert "workers:" in message
    # eval takes no model config: the advice is about the records, not a config to change
    assert "Use records with the checkpoint's workers" in message
    assert "config" not in message.partition("workers:")[2]


@pytest.mark.parametrize(
    "command",
    [["sft"], ["rl"], ["es"], ["reward-head"], ["pipeline"], ["pipeline", "--cost-weights", "0,1"]],
)
def test_training_on_bad_records_prints_one_error(command: list[str], tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    result = invoke("train", command[0], "-r", empty, "-o", tmp_path / "out", *command[1:])
    assert result.exit_code == 2
    assert flat(result.output) == f"error: {empty}: holds no records"


def test_eval_on_an_empty_split_names_the_splits_there_are(run: Run, tmp_path: Path) -> None:
    no_validation = [r for r in run.records if r.split != "validation"]
    path = tmp_path / "records.jsonl"
    write_records(path, no_validation)
    sizes = f"train {len(run.split('train'))} · test {len(run.split('test'))}"
    for pareto in ([], ["--pareto"]):
        result = invoke("eval", "--checkpoint", run.checkpoint, "--records", path, "--split",
                        "validation", "--output", tmp_path / "eval", *pareto)  # fmt: skip
        assert result.exit_code == 2
        assert f"(the records hold {sizes}); choose another one with --split" in flat(result.output)


# --- route ----------------------------------------------------------------------------------


def chosen(output: str) -> str:
    match = re.search(r"chosen worker: (\S+)", output)
    assert match, output
    return match.group(1)


def probability_rows(output: str) -> dict[str, float | str]:
    """worker -> probability, or the word "excluded" for an opted-out worker."""
    return {
        worker: value if value == "excluded" else float(value)
        for worker, value in re.findall(r"│\s*([\w-]+)\s*│\s*([0-9.]+|excluded)\s*│", output)
    }


def test_route_picks_the_best_worker_and_honours_opt_outs(run: Run) -> None:
    math_prompt = next(r for r in run.split("test") if r.task == "math")
    best = math_prompt.worker_ids[max(range(3), key=lambda i: math_prompt.rewards[i])]
    output = ok(invoke("route", "--checkpoint", run.checkpoint, math_prompt.prompt))
    assert chosen(output) == best == "mathematician"
    probabilities = probability_rows(output)
    assert set(probabilities) == set(WORKERS)
    assert max(probabilities, key=probabilities.get) == best
    assert sum(probabilities.values()) == pytest.approx(1.0, abs=2e-4)

    output = ok(
        invoke("route", "--checkpoint", run.checkpoint, "--exclude", best, math_prompt.prompt)
    )
    assert chosen(output) != best
    rows = probability_rows(output)
    assert rows[best] == "excluded"
    assert sum(p for w, p in rows.items() if w != best) == pytest.approx(1.0, abs=2e-4)

    both = ["--exclude", best, "--exclude", chosen(output)]
    output = ok(invoke("route", "--checkpoint", run.checkpoint, *both, math_prompt.prompt))
    (left,) = set(WORKERS) - {best, both[3]}
    assert chosen(output) == left
    assert probability_rows(output)[left] == pytest.approx(1.0)


def test_route_reads_the_prompt_from_stdin(run: Run) -> None:
    code_prompt = next(r for r in run.split("test") if r.task == "code")
    from_argument = chosen(ok(invoke("route", "--checkpoint", run.checkpoint, code_prompt.prompt)))
    from_stdin = chosen(
        ok(invoke("route", "--checkpoint", run.checkpoint, "-", input=code_prompt.prompt))
    )
    assert from_stdin == from_argument == "coder"


def test_route_help_says_how_to_give_a_prompt_that_starts_with_a_dash(run: Run) -> None:
    """`route --checkpoint DIR '-5 + 3?'` failed with click's "No such option: -5", and
    nothing said that such a prompt goes after `--`."""
    shown = flat(ok(runner.invoke(app, ["route", "--help"])).replace("│", " "))
    assert "starts with '-' goes after '--'" in shown, shown
    output = ok(invoke("route", "--checkpoint", run.checkpoint, "--", "-5 + 3?"))
    assert chosen(output) in WORKERS


def test_route_reads_an_echoed_prompt_as_the_same_prompt(run: Run) -> None:
    """`echo PROMPT | fugu-lite route -` routed the prompt with echo's line break: other
    features, other probabilities than `route PROMPT`."""
    prompt = run.split("test")[0].prompt
    assert isinstance(prompt, str)
    args = ("route", "--checkpoint", run.checkpoint, "--json")
    from_argument = json.loads(ok(invoke(*args, prompt)))
    for piped in (f"{prompt}\n", f"{prompt}\r\n"):
        assert json.loads(ok(invoke(*args, "-", input=piped))) == from_argument
    kept = json.loads(ok(invoke(*args, "-", input=f"{prompt}\n\n")))  # a line of its own
    assert kept["probabilities"] != from_argument["probabilities"]


def test_route_reading_a_terminal_says_what_it_waits_for(run: Run) -> None:
    """`route ... -` with nothing piped in waited for stdin without a word: it looked hung."""
    import pty

    parent, child = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "fugu_lite", "route", "--checkpoint", str(run.checkpoint), "-"],
        stdin=child, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    os.close(child)
    os.write(parent, b"write a python function\n\x04")
    stdout, stderr = process.communicate(timeout=120)
    os.close(parent)
    assert process.returncode == 0, stderr
    assert "type the prompt to route, then Ctrl-D" in stderr
    assert chosen(stdout) in WORKERS


def test_route_refuses_excluding_every_worker(run: Run) -> None:
    excludes = [part for worker in WORKERS for part in ("--exclude", worker)]
    result = invoke("route", "--checkpoint", run.checkpoint, *excludes, "hello")
    assert result.exit_code == 2
    message = flat(result.output)
    assert "every worker is excluded" in message
    assert "leave at least one of" in message
    assert "chosen worker" not in message


@pytest.mark.parametrize("weight", ["-1", "nan"])
def test_route_refuses_a_cost_weight_no_router_could_take(run: Run, weight: str) -> None:
    """`route --cost-weight -1` on a single checkpoint advised training a router family for
    cost weight -1, which that family then refused as well."""
    result = invoke("route", "--checkpoint", run.checkpoint, "hi", "--cost-weight", weight)
    assert result.exit_code == 2, result.output
    assert f"error: a cost weight must be a finite number >= 0, got {float(weight)}\n" == (
        result.stderr
    )


def test_route_refuses_an_unknown_worker(run: Run) -> None:
    result = invoke("route", "--checkpoint", run.checkpoint, "--exclude", "nobody", "hello")
    assert result.exit_code == 2
    message = flat(result.output)
    assert "cannot exclude unknown worker(s) ['nobody']" in message
    assert "cheap-small, coder, mathematician" in message


def test_eval_of_a_file_given_as_checkpoint_names_the_checkpoint(tmp_path: Path) -> None:
    """`eval --checkpoint records.jsonl` (a file) was refused as "--output
    records.jsonl/eval-test: records.jsonl is a file", an option the user never gave."""
    records = tmp_path / "records.jsonl"
    write_records(records, generated_records(n_per_topic=2))
    result = invoke("eval", "--checkpoint", records, "-r", records)
    assert result.exit_code == 2, result.output
    shown = flat(result.stderr)
    assert f"--checkpoint {records} is a file, not a checkpoint folder" in shown
    assert "--output" not in shown


def test_route_refuses_a_folder_that_is_not_a_checkpoint(tmp_path: Path) -> None:
    result = invoke("route", "--checkpoint", tmp_path, "hello")
    assert result.exit_code == 2
    assert "is not a fugu-lite router checkpoint" in flat(result.output)


def test_route_says_why_a_newer_versions_checkpoint_cannot_load_without_a_traceback(
    tmp_path: Path, tiny_model_cfg: ModelConfig
) -> None:
    """(A checkpoint whose backbone folder moved: test_route_and_eval_take_the_backbone_...)"""
    from fugu_lite.model import RouterModel

    checkpoint = RouterModel(tiny_model_cfg, ["a", "b"], 32).save_checkpoint(tmp_path / "c")
    meta = json.loads((checkpoint / "router.json").read_text())
    meta["model"]["speculative_layers"] = 2  # written by a newer fugu-lite
    (checkpoint / "router.json").write_text(json.dumps(meta))
    result = invoke("route", "--checkpoint", checkpoint, "hello")
    assert result.exit_code == 2, result.output
    assert "unknown key 'speculative_layers'" in flat(result.output)


def test_route_and_eval_take_the_backbone_where_it_is_now(
    tmp_path: Path, tiny_model_cfg: ModelConfig
) -> None:
    """A checkpoint copied to another machine, whose backbone folder is at another path."""
    from fugu_lite.backbones import load_backbone
    from fugu_lite.model import RouterModel

    backbone = load_backbone("tiny-random")
    backbone.model.save_pretrained(tmp_path / "backbone")
    backbone.tokenizer.save_pretrained(tmp_path / "backbone")
    cfg = tiny_model_cfg.model_copy(
        update={"backbone": str(tmp_path / "backbone"), "runtime": "torch"}
    )
    checkpoint = RouterModel(cfg, WORKERS, 32).save_checkpoint(tmp_path / "c")
    (tmp_path / "backbone").rename(tmp_path / "models-here")
    result = invoke("route", "--checkpoint", checkpoint, "hello")
    assert result.exit_code == 2, result.output
    assert "Give the folder it is in now: `--backbone PATH`" in flat(result.output)
    moved = ["--backbone", tmp_path / "models-here"]
    decision = json.loads(ok(invoke("route", "--checkpoint", checkpoint, *moved, "--json", "hi")))
    assert decision["worker"] in WORKERS
    records = tmp_path / "records.jsonl"
    write_records(records, generated_records(n_per_topic=6))
    ok(invoke("eval", "--checkpoint", checkpoint, "-r", records, *moved, "-o", tmp_path / "e"))
    assert (tmp_path / "e" / "evaluation_report.json").exists()


def test_eval_says_why_a_backbone_cannot_load_without_a_traceback(
    tmp_path: Path, tiny_model_cfg: ModelConfig
) -> None:
    from fugu_lite.model import RouterModel

    cfg = tiny_model_cfg.model_copy(update={"backbone": "fugu-test/not-downloaded"})
    checkpoint = RouterModel(cfg, WORKERS, 32).save_checkpoint(tmp_path / "c")
    records = tmp_path / "records.jsonl"
    write_records(records, generated_records(n_per_topic=4))
    result = invoke("eval", "--checkpoint", checkpoint, "-r", records, "-o", tmp_path / "e")
    assert result.exit_code == 2, (result.output, result.exception)
    assert "could not load backbone 'fugu-test/not-downloaded'" in flat(result.output)


@pytest.mark.parametrize(
    ("kind", "tensors"), [("router", "router_head"), ("reward_head", "reward_head")]
)
@pytest.mark.parametrize("content", ["[]", "null", '"a string"'])
def test_route_refuses_checkpoint_metadata_that_is_not_a_json_object(
    tmp_path: Path, kind: str, tensors: str, content: str
) -> None:
    (tmp_path / f"{tensors}.safetensors").write_bytes(b"")
    (tmp_path / f"{kind}.json").write_text(content)
    result = invoke("route", "--checkpoint", tmp_path, "hello")
    assert result.exit_code == 2, result.output
    assert f"{kind}.json is damaged (a JSON " in flat(result.output)


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
            ["train", "es"],
            "fugu_lite.train_es.train_es",
            "run the same command again to continue from the last one saved",
        ),
        (
            ["train", "es", "--no-resume"],
            "fugu_lite.train_es.train_es",
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
    assert text.startswith("interrupted:") and kept in text


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
import fugu_lite.io

def terminated(source, target):
    os.kill(os.getpid(), signal.SIGTERM)  # `kill PID` while the new file is being written

fugu_lite.io.os.replace = terminated
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
    )
    assert child.returncode == 130, child.stdout + child.stderr
    output = child.stdout + child.stderr
    assert "Traceback" not in output and "interrupted:" in output, output
    assert not (tmp_path / "out").exists()


def test_serve_help_says_what_each_log_level_shows() -> None:
    """`serve --help` said only "uvicorn log level: critical, error, ...", so a user could
    not tell which level hides the access lines or shows a failed worker call."""
    from fugu_lite.cli import LOG_LEVELS

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


def test_demo_help_says_where_the_llmrouter_data_is_found_without_data_dir() -> None:
    """`demo --help` said only "Folder holding llmrouter/.", so a user could not tell that
    the option may be left out, nor where the demo then looks (the README's order)."""
    shown = flat(ok(runner.invoke(app, ["demo", "--help"], env={"COLUMNS": "200"})))
    assert "$FUGU_LITE_DATA_DIR, else ../shared/data, else a download" in shown
    assert "skipped" in shown


def test_cache_clear_removes_the_digests_of_weight_files_gone_or_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`cache list` and `cache clear` left out digests/, where every weight file ever checked
    (each test run's, each backbone folder since deleted) left a digest for good."""
    from fugu_lite.backbones import file_sha256

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
    from fugu_lite.local_server import free_port

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
