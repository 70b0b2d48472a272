"""`fugu-lite train ...`."""

from __future__ import annotations

import errno
import json
import re
import shutil
from pathlib import Path

import pytest
from cli_support import Run, flat, invoke, ok, runner

from fugu_lite.cli import app
from fugu_lite.schemas import write_records


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


def test_train_es_run_again_after_it_finished_says_it_kept_the_finished_runs_generation(
    run: Run, tmp_path: Path
) -> None:
    """The same `train es` after a finished search said it had finished, then printed the
    opening line of a search ('ES device=cpu; search=head; ...') that never ran and 'kept the
    checkpoint and report already in ...' without naming the generation kept, and its result
    line 'checkpoint written to ...' although nothing was written."""
    output = tmp_path / "es"
    arguments = ("train", "es", "-r", run.records_path, "-o", output, "-c", run.config_path,
                 "--set", "training.iterations=3", "--set", "training.search=head",
                 "--set", "training.population_size=4")  # fmt: skip
    first = flat(ok(invoke(*arguments)))
    kept = re.search(r"ES: kept (generation \d+ \(validation reward [\d.]+\))", first)
    assert kept is not None, first

    again = invoke(*arguments)
    ok(again)
    said = flat(again.stderr)
    finished = "has already finished its 3 generations"
    kept_line = f"ES: kept {kept[1]}, the checkpoint and report already in {output}"
    assert finished in said and kept_line in said, said
    assert said.index(finished) < said.index(kept_line)
    assert "ES device" not in said  # no search is run: none is announced
    # it said 'checkpoint written to ...', though this run wrote nothing
    assert flat(again.stdout) == f"ES already finished; checkpoint at {output}"


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


@pytest.mark.parametrize("blank", ["", "  "], ids=["empty", "spaces"])
@pytest.mark.parametrize("stage", ["sft", "rl", "es", "pipeline", "reward-head"])
def test_an_empty_output_folder_is_refused_not_the_working_directory(
    tmp_path: Path, monkeypatch, stage: str, blank: str
) -> None:
    """`-o "$OUT"` with OUT unset is `-o ''`, which a Path reads as `.`: `train sft` wrote its
    checkpoint files (router.json, training_report.json) among the working directory's own;
    `-o "$RUN $NAME"` with both unset is `-o ' '`, a folder named by a space."""
    monkeypatch.chdir(tmp_path)
    result = invoke("train", stage, "-r", tmp_path / "missing.jsonl", "-o", blank)
    assert result.exit_code == 2
    said = flat(result.output)
    assert said.startswith("error: -o '") and said.endswith(
        "': is empty (an unset shell variable?); give the output folder, or . for the working "
        "directory"
    ), said
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", [["train", "sft"], ["train", "pipeline"], ["eval"]])
def test_an_empty_records_path_is_refused_as_empty(tmp_path: Path, command: list[str]) -> None:
    """`-r "$RECORDS"` with RECORDS unset was refused as ". is a directory, not a file",
    naming a folder the user never wrote."""
    checkpoint = ["--checkpoint", tmp_path / "c"] if command == ["eval"] else []
    result = invoke(*command, "-r", "", "-o", tmp_path / "o", *checkpoint)
    assert result.exit_code == 2
    assert (
        "error: -r '': is empty (an unset shell variable?); give the RewardRecord JSONL file"
    ) in flat(result.output)


@pytest.mark.parametrize("stage", ["sft", "pipeline", "reward-head"])
def test_an_empty_config_path_is_refused_as_empty(tmp_path: Path, stage: str) -> None:
    """`-c "$CONFIG"` with CONFIG unset was refused as ". is a directory, not a config file",
    naming a folder the user never wrote."""
    result = invoke("train", stage, "-r", tmp_path / "r.jsonl", "-o", tmp_path / "o", "-c", "")
    assert result.exit_code == 2
    assert (
        "error: -c '': is empty (an unset shell variable?); give the "
        "YAML config file, or leave -c out for the defaults"
    ) in flat(result.output)


@pytest.mark.parametrize("stage", ["sft", "es", "pipeline", "reward-head"])
def test_a_device_torch_cannot_use_here_is_refused_naming_the_key_and_the_file(
    tmp_path: Path, stage: str
) -> None:
    """`model.device: cuda` in a training config, run on a machine without it, ended the run
    in torch's AssertionError 'Torch not compiled with CUDA enabled' (no key, no file)."""
    config = tmp_path / "gpu.yaml"
    config.write_text("model:\n  device: 'cuda:63'\n", encoding="utf-8")  # no machine has 64
    records = tmp_path / "r.jsonl"
    records.write_text("", encoding="utf-8")
    result = invoke("train", stage, "-r", records, "-o", tmp_path / "o", "-c", config)
    assert result.exit_code == 2, result.output
    message = flat(result.output)
    assert f"error: model.device in {config} is 'cuda:63', which torch cannot use on this" in (
        message
    )
    assert "set it to cpu (`device: cpu` under `model:`, or --set model.device=cpu)" in message
    result = invoke(
        "train", stage, "-r", records, "-o", tmp_path / "o", "--set", "model.device=cuda:63"
    )  # fmt: skip
    assert "error: --set model.device is 'cuda:63', which torch cannot use" in flat(result.output)
    assert not (tmp_path / "o").exists()
    # a whole model section given by --set, with and without -c (said to be in None)
    for config_options in ([], ["-c", config]):
        result = invoke("train", stage, "-r", records, "-o", tmp_path / "o", *config_options,
                        "--set", "model={device: 'cuda:63'}")  # fmt: skip
        assert result.exit_code == 2, result.output
        assert flat(result.stderr).startswith(
            "error: model.device (given by --set model) is 'cuda:63', which torch cannot use"
        ), result.stderr


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


def files_of(folder: Path) -> dict[Path, bytes]:
    # the shared run's checkpoints also hold folders that other tests' eval runs wrote there
    return {
        path.relative_to(folder): path.read_bytes() for path in folder.rglob("*") if path.is_file()
    }


@pytest.mark.parametrize("stage", ["sft", "rl", "es"])
def test_train_refuses_to_write_over_its_own_checkpoint(
    run: Run, tmp_path: Path, stage: str
) -> None:
    """`train rl -o runs/sft --checkpoint runs/sft` replaced the SFT it continued from, with
    no word, and `train es` saved its search where its start then changed under it."""
    checkpoint = tmp_path / "sft"
    shutil.copytree(run.run_dir / "sft", checkpoint)
    before = files_of(checkpoint)
    result = invoke("train", stage, "-r", run.records_path, "-c", run.config_path,
                    "-o", f"{checkpoint}/", "--checkpoint", checkpoint)  # fmt: skip
    assert result.exit_code == 2, result.output
    assert f"-o {checkpoint} is the --checkpoint this stage starts from" in result.stderr
    assert f"e.g. -o {checkpoint}-{stage}\n" in result.stderr, result.stderr
    assert files_of(checkpoint) == before


def test_a_backbone_that_cannot_load_is_one_error_line(run: Run, tmp_path: Path) -> None:
    """A backbone that does not load (a RuntimeError, here a folder that is not there) is
    the stage's one `error:` line and exit 2, not a traceback (no test ran one through
    `train`)."""
    gone = tmp_path / "gone"
    result = invoke("train", "sft", "-r", run.records_path, "-c", run.config_path,
                    "-o", tmp_path / "out", "--set", f"model.backbone={gone}")  # fmt: skip
    assert result.exit_code == 2, result.output
    assert flat(result.stderr).startswith(f"error: the backbone folder {gone} does not exist")


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


def test_a_stage_refuses_an_output_folder_holding_another_stages_checkpoint(
    run: Run, tmp_path: Path
) -> None:
    """`train rl -o runs/sft` (the --checkpoint forgotten or -o mistyped) replaced the SFT
    checkpoint in that folder with an RL one without a word, and `train sft -o` a pipeline's
    folder deleted its report; both are refused now, the folder left as it was, while a
    stage trained again into its own folder still replaces its checkpoint."""
    sft = tmp_path / "sft"
    shutil.copytree(run.run_dir / "sft", sft)
    before = files_of(sft)
    common = ["-r", run.records_path, "-c", run.config_path, "--set", "training.epochs=1"]
    refused = invoke("train", "rl", "-o", sft, *common)
    assert refused.exit_code == 2, refused.output
    message = flat(refused.output)
    assert f"-o {sft} holds an SFT checkpoint" in message
    assert f"-o {sft}-rl" in message and "delete" in message
    assert files_of(sft) == before
    refused = invoke("train", "es", "-o", sft, "-r", run.records_path, "-c", run.config_path)
    assert refused.exit_code == 2, refused.output
    assert f"-o {sft} holds an SFT checkpoint, which this ES would replace" in flat(refused.output)
    assert files_of(sft) == before

    pipeline = tmp_path / "run"
    shutil.copytree(run.run_dir, pipeline)
    refused = invoke("train", "sft", "-o", pipeline, *common)
    assert refused.exit_code == 2 and "holds a pipeline" in flat(refused.output)
    assert (pipeline / "training_report.json").read_bytes() == (
        run.run_dir / "training_report.json"
    ).read_bytes()

    ok(invoke("train", "sft", "-o", sft, *common))
    assert json.loads((sft / "training_report.json").read_text())["history"][-1]["epoch"] == 1


def test_a_reward_head_refuses_an_output_folder_holding_a_routers_checkpoint(
    run: Run, tmp_path: Path
) -> None:
    """`train reward-head -o runs/sft` (-o mistyped) deleted the SFT checkpoint there and
    put a reward head in its place without a word, where sft, rl and es refuse another
    stage's folder; it is refused now, the folder left as it was, and a reward head trained
    again into its own folder still replaces it."""
    sft = tmp_path / "sft"
    shutil.copytree(run.run_dir / "sft", sft)
    before = files_of(sft)
    common = ["-r", run.records_path, "-c", run.config_path]
    refused = invoke("train", "reward-head", "-o", sft, *common)
    assert refused.exit_code == 2, refused.output
    message = flat(refused.output)
    assert f"-o {sft} holds an SFT checkpoint, which this reward head would replace" in message
    assert f"-o {sft}-reward-head" in message
    assert files_of(sft) == before

    head = tmp_path / "head"
    ok(invoke("train", "reward-head", "-o", head, *common))
    ok(invoke("train", "reward-head", "-o", head, *common))
    refused = invoke("train", "sft", "-o", head, *common)
    assert refused.exit_code == 2 and f"-o {head} holds a reward head" in flat(refused.output)
    # told by its reward_head.json too: a copy without training_report.json was replaced
    (head / "training_report.json").unlink()
    before = files_of(head)
    refused = invoke("train", "sft", "-o", head, *common)
    assert refused.exit_code == 2 and f"-o {head} holds a reward head" in flat(refused.output)
    assert files_of(head) == before


def test_a_pipeline_refuses_an_output_folder_holding_a_stages_checkpoint(
    run: Run, tmp_path: Path
) -> None:
    """`train pipeline -o runs/sft` deleted the SFT's training_report.json there (the
    pipeline's own report has that name) and trained sft/ and rl/ inside that checkpoint."""
    sft = tmp_path / "sft"
    shutil.copytree(run.run_dir / "sft", sft)
    before = files_of(sft)
    for weights in ([], ["--cost-weights", "0,1"]):
        refused = invoke("train", "pipeline", "-r", run.records_path, "-o", sft,
                         "-c", run.config_path, *weights)  # fmt: skip
        assert refused.exit_code == 2, refused.output
        assert f"-o {sft} holds an SFT checkpoint" in flat(refused.output)
        assert files_of(sft) == before


@pytest.mark.parametrize(
    ("weights", "what"),
    [
        ("", "give at least one cost weight, e.g. 0,0.25,0.5,1"),
        (" , ", "give at least one cost weight, e.g. 0,0.25,0.5,1"),
        ("0,lots", "'lots' is not a number; cost weights are comma-separated numbers, e.g. "
         "0,0.25,0.5,1"),
        ("0,-1", "cost weights must be finite and >= 0, at most 1,000,000"),
    ],
)  # fmt: skip
def test_bad_cost_weights_are_refused_naming_the_flag(
    tmp_path: Path, weights: str, what: str
) -> None:
    """`--cost-weights "$WEIGHTS"` with WEIGHTS unset was refused as "give at least one cost
    weight", naming no flag (the config's sft.cost_weight is one too); the refusal names
    --cost-weights and what it was given now, before any work."""
    result = invoke("train", "pipeline", "-r", tmp_path / "never-read.jsonl",
                    "-o", tmp_path / "family", "--cost-weights", weights)  # fmt: skip
    assert result.exit_code == 2, f"{result.output}\n{result.exception!r}"
    assert flat(result.stderr).startswith(f"error: --cost-weights {weights!r}: {what}")
    assert not (tmp_path / "family").exists()


@pytest.mark.parametrize(
    ("override", "advice"),
    [("es.iterations=300", "training.iterations=..."), ("es={sigma0: 0.5}", "training.KEY=...")],
)
def test_an_es_setting_given_to_the_pipeline_is_refused(
    tmp_path: Path, override: str, advice: str
) -> None:
    """`train pipeline --set es.iterations=300` trained SFT and RL without a word, the
    setting doing nothing (the pipeline runs no ES); it is refused now, saying which command
    reads it."""
    result = invoke("train", "pipeline", "-r", tmp_path / "never-read.jsonl",
                    "-o", tmp_path / "run", "--set", override)  # fmt: skip
    assert result.exit_code == 2, f"{result.output}\n{result.exception!r}"
    key = override.partition("=")[0]
    assert flat(result.stderr) == (
        f"error: --set {key}: the pipeline trains SFT, then RL, and reads no es.* setting; "
        f"give it to `fugu-lite train es` (--set {advice}), or leave it out"
    )


def test_cost_weights_sharing_a_member_folder_are_refused_before_training(
    run: Run, tmp_path: Path
) -> None:
    """`--cost-weights 0.1234567,0.1234568` trained both members into lambda-0.123457 (the
    folder names a weight to 6 significant digits), the second over the first, and the
    manifest listed that folder for both; they are refused before any training now."""
    output = tmp_path / "family"
    result = invoke("train", "pipeline", "-r", run.records_path, "-c", run.config_path,
                    "-o", output, "--cost-weights", "0,0.1234568,0.1234567")  # fmt: skip
    assert result.exit_code == 2, f"{result.output}\n{result.exception!r}"
    assert flat(result.stderr) == (
        "error: --cost-weights 0.1234567 and 0.1234568 would both be trained into "
        "lambda-0.123457 (a member's folder names its cost weight to 6 significant digits); "
        "give weights that differ within those, or only one of the two"
    )
    assert not output.exists()


@pytest.mark.parametrize(
    ("held", "weights", "trains"),
    [
        ("family", [], "fugu_lite.pipeline.train_pipeline"),
        ("pipeline", ["--cost-weights", "0,1"], "fugu_lite.router_family.train_router_family"),
    ],
)
def test_a_pipeline_and_a_router_family_may_share_an_output_folder(
    run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, held: str, weights: list, trains: str
) -> None:
    """A pipeline (OUTPUT/sft, OUTPUT/rl) and a family (OUTPUT/lambda-<w>) keep no checkpoint
    in the folder itself: either may be trained where the other's report is (no test did)."""
    output = tmp_path / "out"
    output.mkdir()
    (output / "training_report.json").write_text(json.dumps({"stage": held}))
    monkeypatch.setattr(trains, lambda *args: {"checkpoint": str(output / "trained")})
    result = invoke("train", "pipeline", "-r", run.records_path, "-o", output,
                    "-c", run.config_path, *weights)  # fmt: skip
    assert flat(ok(result) and result.stdout) == f"checkpoint written to {output / 'trained'}"


@pytest.mark.parametrize("stage", ["rl", "es"])
def test_continuing_without_a_config_says_the_default_model_config_was_compared(
    run: Run, tmp_path: Path, stage: str
) -> None:
    """`train rl --checkpoint runs/sft` without -c, the SFT trained with -c FILE, listed
    five model differences against a config the user never gave, without saying where it
    came from; now the error says no -c was given and to pass the SFT's. `train es
    --checkpoint runs/sft` (ES typically starts from SFT's) did not say so either."""
    result = invoke("train", stage, "-r", run.records_path, "-o", tmp_path / stage,
                    "--checkpoint", run.run_dir / "sft")  # fmt: skip
    assert result.exit_code == 2, result.output
    message = flat(result.output)
    assert "model.backbone: checkpoint 'tiny-random'" in message
    assert "no -c was given, so the default config's model was compared" in message
    with_config = invoke("train", stage, "-r", run.records_path, "-o", tmp_path / stage,
                         "--checkpoint", run.run_dir / "sft", "-c", run.config_path,
                         "--set", "model.layer=1")  # fmt: skip
    assert with_config.exit_code == 2, with_config.output
    assert "model.layer: checkpoint -1 vs config 1" in flat(with_config.output)
    assert "no -c was given" not in flat(with_config.output)


@pytest.mark.parametrize("stage", ["sft", "rl", "es"])
@pytest.mark.parametrize("spelling", ["relative", "symlink"])
def test_train_refuses_its_own_checkpoint_spelt_another_way(
    run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stage: str, spelling: str
) -> None:
    """`--checkpoint sft -o /abs/sft`, or -o a link to the checkpoint's folder, names the
    checkpoint the stage starts from as well as `-o sft` does (no test spelt it another way)."""
    checkpoint = tmp_path / "sft"
    shutil.copytree(run.run_dir / "sft", checkpoint)
    before = files_of(checkpoint)
    monkeypatch.chdir(tmp_path)
    output = tmp_path / "link"
    if spelling == "symlink":
        output.symlink_to(checkpoint, target_is_directory=True)
    else:
        output = checkpoint
    result = invoke("train", stage, "-r", run.records_path, "-c", run.config_path,
                    "-o", output, "--checkpoint", "sft")  # fmt: skip
    assert result.exit_code == 2, result.output
    assert f"-o {output} is the --checkpoint this stage starts from" in flat(result.stderr)
    assert files_of(checkpoint) == before


def test_a_stage_refuses_another_stages_folder_whose_checkpoint_metadata_is_damaged(
    run: Run, tmp_path: Path
) -> None:
    """An SFT folder whose router.json is cut short (a copy that ran out of disk) still says
    what it holds by its training_report.json: `train rl -o` that folder is refused, the
    folder left as it was (no test damaged the first file read, so giving up there passed)."""
    sft = tmp_path / "sft"
    shutil.copytree(run.run_dir / "sft", sft)
    meta = sft / "router.json"
    meta.write_bytes(meta.read_bytes()[:40])
    before = files_of(sft)
    refused = invoke("train", "rl", "-o", sft, "-r", run.records_path, "-c", run.config_path,
                     "--set", "training.epochs=1")  # fmt: skip
    assert refused.exit_code == 2, refused.output
    assert f"-o {sft} holds an SFT checkpoint, which this RL would replace" in flat(refused.output)
    assert files_of(sft) == before


def test_a_stage_whose_checkpoint_cannot_be_written_is_one_error_line(
    run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A disk that fills while the checkpoint is saved is the stage's one `error:` line
    naming the -o folder and what to do, exit 2, no traceback and no checkpoint left (no
    test ran a write failure through `train`)."""

    def disk_full(path: Path, payload: bytes) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr("fugu_lite.model.write_bytes_atomic", disk_full)
    output = tmp_path / "out"
    result = invoke("train", "sft", "-r", run.records_path, "-c", run.config_path,
                    "-o", output, "--set", "training.epochs=1")  # fmt: skip
    assert result.exit_code == 2, result.output
    tensors = output / "router_head.safetensors"
    assert flat(result.stderr).endswith(
        f" error: cannot write the output in {output}: [Errno 28] No space left on device: "
        f"'{tensors}'; choose another -o folder"
    )
    assert not (output / "router.json").exists()


@pytest.mark.parametrize(
    ("pair", "expected"),
    [
        (" training.epochs=0", "--set training.epochs: Input should be greater than or equal"),
        ("training.epochs = 0", "--set training.epochs: Input should be greater than or equal"),
        ("model.backbone={gone}", "error: the backbone folder {gone} does not exist"),
    ],
    ids=["space-before-key", "spaces-around-equals", "equals-in-value"],
)
def test_a_set_key_is_read_without_spaces_and_its_value_whole(
    run: Run, tmp_path: Path, pair: str, expected: str
) -> None:
    """`--set "training.epochs = 0"` names the key training.epochs, and a value holding `=`
    (a folder named `v=2`, a base64 text) is the value whole, not cut at its `=` (no test
    gave either)."""
    gone = tmp_path / "models" / "tiny=v2"
    result = invoke("train", "sft", "-r", run.records_path, "-c", run.config_path,
                    "-o", tmp_path / "out", "--set", pair.format(gone=gone))  # fmt: skip
    assert result.exit_code == 2, result.output
    assert expected.format(gone=gone) in flat(result.stderr), result.stderr


@pytest.mark.parametrize("command", [["rl"], ["sft", "--checkpoint", "."]])
def test_a_refused_output_given_as_the_working_directory_names_a_folder_beside_it(
    run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    """`cd runs/sft && fugu-lite train rl -o .` (or `train sft --checkpoint . -o .`) ended in
    a ValueError traceback, '. has an empty name', while building the folder to suggest
    instead; it is refused now, suggesting a folder beside the working directory."""
    sft = tmp_path / "sft"
    shutil.copytree(run.run_dir / "sft", sft)
    before = files_of(sft)
    monkeypatch.chdir(sft)
    stage = command[0]
    result = invoke("train", *command, "-o", ".", "-r", run.records_path, "-c", run.config_path)
    assert result.exit_code == 2, f"{result.output}\n{result.exception!r}"
    message = flat(result.stderr)
    assert message.startswith("error: -o . ") and f"e.g. -o {sft}-{stage}" in message, message
    assert files_of(sft) == before


def test_an_output_under_a_dangling_link_is_refused_before_training(
    run: Run, tmp_path: Path
) -> None:
    """`-o runs/x` with `runs` a link to a scratch disk that is not mounted trained the
    whole stage, then failed saving it with 'File exists: runs'; it is refused before any
    work now, naming the link and where it points."""
    runs = tmp_path / "runs"
    scratch = tmp_path / "scratch" / "runs"
    runs.symlink_to(scratch, target_is_directory=True)
    for output in (runs / "x", runs):
        result = invoke("train", "sft", "-r", run.records_path, "-c", run.config_path,
                        "-o", output)  # fmt: skip
        assert result.exit_code == 2, result.output
        assert flat(result.stderr) == (
            f"error: -o {output}: {runs} is a link to {scratch}, which is not there (a disk "
            "not mounted, a folder moved?); create it, or give another path"
        )
    assert not scratch.exists()


def test_a_checkpoint_that_is_a_link_loop_is_one_error_line(run: Run, tmp_path: Path) -> None:
    """`--checkpoint runs/sft` with runs/sft a link to itself (a `ln -s` gone wrong) ended
    in a RuntimeError traceback, 'Symlink loop', from comparing it with -o; it is the stage's
    one error line now, saying it is no checkpoint."""
    loop = tmp_path / "sft"
    loop.symlink_to(loop)
    result = invoke("train", "rl", "-r", run.records_path, "-c", run.config_path,
                    "-o", tmp_path / "rl", "--checkpoint", loop)  # fmt: skip
    assert result.exit_code == 2, f"{result.output}\n{result.exception!r}"
    assert flat(result.stderr).startswith(f"error: {loop} is not a fugu-lite router checkpoint")
    assert not (tmp_path / "rl" / "router.json").exists()
