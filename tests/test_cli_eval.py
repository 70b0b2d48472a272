"""`fugu-lite eval`."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from cli_support import PNG_MAGIC, Run, flat, invoke, ok
from conftest import WORKERS, generated_records

from fugu_lite.config import ModelConfig
from fugu_lite.evaluate_checkpoint import evaluated_and_train, evaluation_data
from fugu_lite.schemas import RewardRecord, read_records, write_records


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


class FeaturesOfTheirNumbers:
    """A router's stand-in for evaluation_data: a prompt "p X Y" has the features [X, Y]."""

    feature_dim = 2
    model_cfg = ModelConfig(backbone="stand-in")

    def features_for(self, prompts: list[str]) -> torch.Tensor:
        return torch.tensor([[float(x) for x in prompt.split()[1:]] for prompt in prompts])


def test_eval_fits_the_baselines_on_train_and_chooses_their_settings_on_validation() -> None:
    """kNN and ridge fitted on the evaluated split, or their k and alpha chosen on it, each
    passed every eval test (the report checks bound the methods, not the baselines)."""
    features = [(1, 0), (0, 1), (1, 1), (1, -1)]
    train = [([1.0, 0.0], x) for x in features[:2]] + [([1.0, 1.0], features[2])]
    train += [([0.0, 0.0], features[3])]  # mean rewards: a 0.75, b 0.25
    validation = [([0.0, 1.0], x) for x in features[:3]]
    test = [([0.0, 1.0], x) for x in features[:2]]
    records = [
        RewardRecord(prompt=f"p {x} {y}", split=split, worker_ids=["a", "b"], rewards=rewards)
        for split, rows in (("train", train), ("validation", validation), ("test", test))
        for rewards, (x, y) in rows
    ]
    evaluated, train_records = evaluated_and_train(records, "test")
    data = evaluation_data(FeaturesOfTheirNumbers(), records, "test", evaluated, train_records)
    for info in data.baseline_info.values():
        assert (info["selected_on"], info["n_validation"]) == ("validation", 3)
    # every k of the grid is above the 4 train prompts: k = 4, the mean of train's rewards
    assert data.baseline_info["knn"]["chosen"] == 4
    np.testing.assert_allclose(data.predictions["knn"], [[0.75, 0.25]] * 2)


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
    # --pareto said what differs but not what to do about it
    for pareto in ([], ["--pareto"]):
        result = invoke("eval", "--checkpoint", run.checkpoint, "--records", other, *pareto)
        assert result.exit_code == 2
        message = flat(result.output)
        assert "does not match" in message
        assert "workers:" in message
        assert "['w1', 'w2', 'w3']" in message
        # eval takes no model config: the advice is about the records, not a config to change
        assert "Use records with the checkpoint's workers" in message
        assert "config" not in message.partition("workers:")[2]


def reordered(record: RewardRecord, order: list[int]) -> RewardRecord:
    return record.model_copy(
        update={
            "worker_ids": [record.worker_ids[column] for column in order],
            "rewards": [record.rewards[column] for column in order],
            "costs": [(record.costs or [])[column] for column in order],
        }
    )


def test_eval_reads_records_listing_the_checkpoints_workers_in_another_order(
    run: Run, tmp_path: Path
) -> None:
    """Records collected with the pool's workers listed in another order name the same
    workers, but eval and eval --pareto refused them as other workers; their rewards and
    costs are now read in the checkpoint's order, giving the same reports."""
    records = read_records(run.records_path)
    shuffled = tmp_path / "shuffled.jsonl"
    write_records(shuffled, [reordered(record, [2, 0, 1]) for record in records])
    for pareto, report_name in (
        ([], "evaluation_report.json"),
        (["--pareto"], "pareto_report.json"),
    ):
        reports = []
        for path, name in ((run.records_path, "same"), (shuffled, "shuffled")):
            output = tmp_path / f"{name}-{report_name}"
            ok(invoke("eval", "--checkpoint", run.checkpoint, "-r", path, "-o", output,
                      *pareto))  # fmt: skip
            reports.append(json.loads((output / report_name).read_text()))
        same, shuffled_report = reports
        assert shuffled_report["worker_ids"] == WORKERS
        key = "curves" if pareto else "methods"
        assert shuffled_report[key] == same[key]
        assert shuffled_report["best_single"] == same["best_single"]
    # more or fewer workers are still refused
    fewer = tmp_path / "fewer.jsonl"
    write_records(fewer, [reordered(record, [1, 0]) for record in records])
    result = invoke("eval", "--checkpoint", run.checkpoint, "-r", fewer, "-o", tmp_path / "f")
    assert result.exit_code == 2
    assert "does not match: workers:" in flat(result.output)


def test_eval_names_the_workers_the_records_lack_or_add(run: Run, tmp_path: Path) -> None:
    """Records with one worker more or less than the checkpoint were refused with both lists
    of workers side by side, where in a pool of 11 the one that differs is hard to see; the
    message now names it."""
    records = read_records(run.records_path)
    more = [
        record.model_copy(
            update={
                "worker_ids": [*record.worker_ids, "new-worker"],
                "rewards": [*record.rewards, 0.5],
                "costs": [*(record.costs or []), 0.5],
            }
        )
        for record in records
    ]
    cases = [
        ([reordered(record, [0, 1]) for record in records], "the records lack ['mathematician']"),
        (more, "the checkpoint does not know ['new-worker']"),
    ]
    for index, (changed, named) in enumerate(cases):
        path = tmp_path / f"records-{index}.jsonl"
        write_records(path, changed)
        for pareto in ([], ["--pareto"]):
            result = invoke("eval", "--checkpoint", run.checkpoint, "-r", path, *pareto,
                            "-o", tmp_path / f"eval-{index}")  # fmt: skip
            assert result.exit_code == 2
            assert named in flat(result.output)
            # eval reads the records' workers in any order: asking for the same order misled
            assert "the checkpoint's workers (in any order)" in flat(result.output)
            assert "same order" not in flat(result.output)


def test_eval_draws_its_plots_whatever_matplotlib_backend_the_environment_names(
    run: Run, tmp_path: Path
) -> None:
    """The plots are drawn on the Agg canvas, but matplotlib checks MPLBACKEND when it is
    imported: an unknown name (Qt4Agg, removed in matplotlib 3.5) stopped `eval` with a
    traceback. The command line now uses Agg whatever the environment says."""
    output = tmp_path / "eval"
    done = subprocess.run(
        [sys.executable, "-m", "fugu_lite", "eval", "--checkpoint", str(run.checkpoint),
         "-r", str(run.records_path), "-o", str(output)],
        capture_output=True, text=True, timeout=300, env={**os.environ, "MPLBACKEND": "Qt4Agg"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (output / "mean_reward.png").read_bytes().startswith(PNG_MAGIC)
    assert (output / "evaluation_report.json").is_file()


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


@pytest.mark.parametrize("pareto", [False, True])
def test_an_empty_split_is_refused_before_the_checkpoint_is_read(
    tmp_path: Path, pareto: bool
) -> None:
    """A mutation round's eval (and eval --pareto) without its first check of the split
    passed every test, each naming a real checkpoint: an empty split given with a wrong
    checkpoint was then refused for the checkpoint, fixing which only led to the next error."""
    from fugu_lite.evaluate_checkpoint import run_evaluation, run_pareto_evaluation

    records = [record for record in generated_records() if record.split != "validation"]
    evaluate = run_pareto_evaluation if pareto else run_evaluation
    with pytest.raises(ValueError, match="no records in the 'validation' split to evaluate"):
        evaluate(tmp_path / "no-checkpoint", records, "validation", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_eval_without_a_train_split_says_it_needs_one() -> None:
    """Records of the test split alone ended in 'cannot build a reward table from zero
    records' without the check, naming no split."""
    records = [
        RewardRecord(prompt=f"p {index}", split="test", worker_ids=["a", "b"], rewards=[1, 0])
        for index in range(2)
    ]
    with pytest.raises(ValueError, match=r"evaluation needs a train split") as refused:
        evaluated_and_train(records, "test")
    assert "the records hold test 2; give some records the train split" in str(refused.value)


@pytest.mark.parametrize(
    ("name", "pareto"), [("predictions.jsonl", []), ("pareto_report.json", ["--pareto"])]
)
def test_eval_refuses_records_that_its_report_would_write_over(
    run: Run, tmp_path: Path, name: str, pareto: list[str]
) -> None:
    """`-r out/predictions.jsonl -o out` read the records, then replaced the file with the
    report's predictions: the records were gone, and eval said the report was written."""
    records = tmp_path / "out" / name
    records.parent.mkdir()
    records.write_bytes(run.records_path.read_bytes())
    result = invoke("eval", "--checkpoint", run.checkpoint, "-r", records,
                    "-o", tmp_path / "out", *pareto)  # fmt: skip
    assert result.exit_code == 2, result.output
    assert f"--records {records} is the report's {name} in {tmp_path / 'out'}, which eval " in (
        flat(result.stderr)
    )
    assert records.read_bytes() == run.records_path.read_bytes()


@pytest.mark.parametrize("pareto", [[], ["--pareto"]])
def test_eval_refuses_a_file_given_as_its_report_folder_before_any_work(
    run: Run, tmp_path: Path, pareto: list[str]
) -> None:
    """`-o report.md` (a file) must be refused as such before the records are read and the
    features computed (no test gave a file as --output)."""
    report = tmp_path / "report.md"
    report.write_text("mine")
    result = invoke("eval", "--checkpoint", run.checkpoint, "-r", run.records_path,
                    "-o", report, *pareto)  # fmt: skip
    assert result.exit_code == 2, result.output
    assert f"--output {report} is a file, not a folder" in flat(result.stderr)
    assert report.read_text() == "mine"


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
    ("costs", "shown", "e_notation"),
    [
        ([0.000012, 0.00004, 0.000075], "0.000040", r"\de-0\d"),
        ([1200, 25_000, 40_000], "25,000.00", r"\de\+0[34]"),  # not ridge's alpha 1e+06
    ],
)
def test_costs_are_written_without_e_notation(
    run: Run, tmp_path: Path, costs: list[float], shown: str, e_notation: str
) -> None:
    """eval, eval --pareto, route and data stats wrote costs with .4g (.3g): a per-prompt
    cost of $0.00004 as '4e-05', 25,000 tokens as '2.5e+04', read at a glance as 4 and 2.5.
    They are now written as collect writes money, without the $ (the unit is the records')."""
    records = [record.model_copy(update={"costs": costs}) for record in run.records]
    records_path = tmp_path / "records.jsonl"
    write_records(records_path, records)
    stats = flat(ok(invoke("data", "stats", records_path)))
    evaluated = flat(ok(invoke("eval", "--checkpoint", run.checkpoint, "-r", records_path,
                               "-o", tmp_path / "eval")))  # fmt: skip
    pareto = flat(ok(invoke("eval", "--checkpoint", run.checkpoint, "-r", records_path,
                            "--pareto", "-o", tmp_path / "pareto")))  # fmt: skip
    ok(invoke("train", "reward-head", "-r", records_path, "-o", tmp_path / "head",
              "-c", run.config_path))  # fmt: skip
    prompt = run.split("test")[0].prompt
    routed = flat(ok(invoke("route", "--checkpoint", tmp_path / "head", prompt)))
    reports = [
        (tmp_path / "eval" / "evaluation_report.md").read_text(),
        (tmp_path / "pareto" / "pareto_report.md").read_text(),
    ]
    for text in [stats, evaluated, pareto, routed, *reports]:
        assert not re.search(e_notation, text), text
    # the best single worker (coder) costs costs[1] on every prompt
    for text in [stats, evaluated, pareto, *reports]:
        assert shown in text, text
    assert "predicted cost" in routed  # the reward head's column, checked above


def test_only_a_report_on_validation_says_the_router_was_kept_for_its_validation_reward(
    tmp_path: Path, tiny_model_cfg: ModelConfig
) -> None:
    """In a manual mutation round the note that an SFT router kept its epoch for its
    validation reward given on every split but test (split == "test" for != "validation")
    passed every test, which read the notes of validation and test only: `eval --split
    train` then called the router's train score optimistic for a choice made on validation."""
    from fugu_lite.evaluate_checkpoint import router_selection_notes
    from fugu_lite.model import RouterModel

    history = [{"epoch": 1, "validation": 0.5}, {"epoch": 2, "validation": 0.6}]
    checkpoint = RouterModel(tiny_model_cfg, WORKERS, 32).save_checkpoint(
        tmp_path / "sft", metadata={"stage": "sft", "history": history}
    )
    [note] = router_selection_notes(checkpoint, "validation")
    assert "its SFT epoch was kept for its reward on the validation split" in note
    assert router_selection_notes(checkpoint, "train") == []
    assert router_selection_notes(checkpoint, "test") == []


@pytest.mark.parametrize("metadata", ["left out", None])
def test_a_checkpoint_without_a_metadata_object_gets_no_selection_note(
    tmp_path: Path, tiny_model_cfg: ModelConfig, metadata: str | None
) -> None:
    """router.json's "metadata" is no object when left out or null (hand-edited): a mutation
    round's note without its check of that passed every test, and then stopped `eval
    --split validation` on "'NoneType' object has no attribute 'get'"."""
    from fugu_lite.evaluate_checkpoint import router_selection_notes
    from fugu_lite.model import RouterModel

    checkpoint = RouterModel(tiny_model_cfg, WORKERS, 32).save_checkpoint(tmp_path / "router")
    saved = json.loads((checkpoint / "router.json").read_text())
    if metadata == "left out":
        del saved["metadata"]
    else:
        saved["metadata"] = metadata
    (checkpoint / "router.json").write_text(json.dumps(saved))
    assert router_selection_notes(checkpoint, "validation") == []


def test_a_familys_notes_on_validation_read_each_members_checkpoint(
    tmp_path: Path, tiny_model_cfg: ModelConfig
) -> None:
    """No test read a family member's note (stop 40's evalleft round: member_selection_notes
    reading the family's own folder survived its selection of tests): the test families were
    trained by `train pipeline`, whose RL members keep no epoch on validation, so no note was
    due. A family whose second member is an SFT router kept for its validation reward (its
    first an RL one) is reported so on validation, once though its third is one too (a
    mutation round's notes given once per member passed every test)."""
    from fugu_lite.evaluate_checkpoint import member_selection_notes
    from fugu_lite.model import RouterModel
    from fugu_lite.router_family import (
        FamilyManifest,
        FamilyMember,
        load_router_family,
        member_folder,
        write_family_manifest,
    )

    history = [{"epoch": 1, "validation": 0.5}, {"epoch": 2, "validation": 0.6}]
    family_folder = tmp_path / "family"
    members = []
    for weight, stage in ((0.0, "rl"), (0.5, "sft"), (1.0, "sft")):
        folder = member_folder(weight)
        RouterModel(tiny_model_cfg, WORKERS, 32).save_checkpoint(
            family_folder / folder, metadata={"stage": stage, "history": history}
        )
        members.append(FamilyMember(cost_weight=weight, checkpoint=folder))
    write_family_manifest(family_folder, FamilyManifest(worker_ids=WORKERS, members=members))
    family = load_router_family(family_folder)
    [note] = member_selection_notes(family_folder, family, "validation")
    assert "its SFT epoch was kept for its reward on the validation split" in note
    assert member_selection_notes(family_folder, family, "test") == []


def test_eval_pareto_weighs_costs_by_the_routers_own_reference_cost(
    tmp_path: Path, tiny_model_cfg: ModelConfig
) -> None:
    """In a manual mutation round the cost-quality report taking the evaluated records' mean
    train cost as its reference, not the reward head's (or family's) own, passed every test:
    each evaluated the records the router was trained on, where the two are equal. On
    records whose costs are ten times as high, kNN's and ridge's curves then charged a cost
    weight a tenth of what it charges the router, beside the router's curve."""
    from fugu_lite.evaluate_checkpoint import run_pareto_evaluation
    from fugu_lite.reward_head_training import RewardHeadConfig, train_reward_head

    records = generated_records(n_per_topic=10)
    train_reward_head(records, RewardHeadConfig(model=tiny_model_cfg), tmp_path / "head")
    trained = json.loads((tmp_path / "head" / "reward_head.json").read_text())["reference_cost"]
    dearer = [r.model_copy(update={"costs": [10 * c for c in r.costs or []]}) for r in records]
    report = run_pareto_evaluation(tmp_path / "head", dearer, "test", tmp_path / "pareto")
    assert trained == pytest.approx((0.1 + 1 + 2) / 3)  # the mean train cost
    assert report["reference_cost"] == trained  # not the dearer records' mean, ten times it


def test_eval_pareto_of_a_reward_head_on_validation_reads_no_router_checkpoint(
    tmp_path: Path, tiny_model_cfg: ModelConfig
) -> None:
    """In a manual mutation round, member_selection_notes without its reward-head check
    passed every test, none of which evaluated a reward head on validation (bench/cost.py
    does): it then read the head's folder as a router checkpoint and `eval --pareto --split
    validation` stopped on 'not a fugu-lite router checkpoint'. A reward head keeps no epoch
    on validation, so its report has no such note."""
    from fugu_lite.evaluate_checkpoint import run_pareto_evaluation
    from fugu_lite.reward_head_training import RewardHeadConfig, train_reward_head

    records = generated_records(n_per_topic=10)
    train_reward_head(records, RewardHeadConfig(model=tiny_model_cfg), tmp_path / "head")
    report = run_pareto_evaluation(tmp_path / "head", records, "validation", tmp_path / "out")
    assert report["split"] == "validation" and report["router_kind"] == "family"
    assert not [note for note in report["notes"] if note.startswith("router:")]


def test_plain_eval_of_a_reward_head_says_to_use_pareto(
    tmp_path: Path, tiny_model_cfg: ModelConfig
) -> None:
    """In a manual mutation round, eval without --pareto no longer refusing a reward head
    itself passed every test (only a family's refusal was read): the head's folder was then
    read as a router checkpoint after the records, and the refusal said what it is not
    rather than 'evaluate it with --pareto'."""
    from fugu_lite.reward_head_training import RewardHeadConfig, train_reward_head

    records = generated_records(n_per_topic=10)
    train_reward_head(records, RewardHeadConfig(model=tiny_model_cfg), tmp_path / "head")
    records_path = tmp_path / "records.jsonl"
    write_records(records_path, records)
    result = invoke("eval", "--checkpoint", tmp_path / "head", "-r", records_path)
    assert result.exit_code == 2, result.output
    assert f"{tmp_path / 'head'} is a reward head (any cost weight): evaluate it with --pareto" in (
        flat(result.stderr)
    )
    assert not (tmp_path / "head" / "eval-test").exists()


@pytest.mark.parametrize(
    ("pareto", "target", "report_file"),
    [
        (False, "run_evaluation", "evaluation_report.json"),
        (True, "run_pareto_evaluation", "pareto_report.json"),
    ],
)
def test_ctrl_c_during_eval_names_the_file_that_completes_its_report(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    pareto: bool,
    target: str,
    report_file: str,
) -> None:
    """In a manual mutation round, eval --pareto's interruption naming evaluation_report.json
    (the plain report's file, which a cost-quality report never holds) passed every test: no
    test interrupted eval. The Ctrl-C is raised where the evaluation runs, as
    test_ctrl_c_during_training_says_what_was_kept_and_how_to_go_on does for training."""

    def interrupted(*args: object, **kwargs: object) -> dict:
        raise KeyboardInterrupt

    monkeypatch.setattr(f"fugu_lite.evaluate_checkpoint.{target}", interrupted)
    (tmp_path / "c").mkdir()
    records = tmp_path / "records.jsonl"
    write_records(records, generated_records(n_per_topic=3))
    flags = ["--pareto"] if pareto else []
    result = invoke("eval", "--checkpoint", tmp_path / "c", "-r", records, "-o", tmp_path / "r",
                    *flags)  # fmt: skip
    assert result.exit_code == 130, result.output
    text = flat(result.output)
    assert text.startswith("interrupted:")
    assert f"the report in {tmp_path / 'r'} is not complete until it holds {report_file}" in text


def test_eval_that_cannot_write_its_report_says_so_without_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a manual mutation round, eval no longer turning an OSError into its one-line error
    passed every test: none had a report write fail. A full disk is the case; it cannot be
    run here (no test fills a disk), so the evaluation raises what the write would."""

    def disk_full(*args: object, **kwargs: object) -> dict:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("fugu_lite.evaluate_checkpoint.run_evaluation", disk_full)
    (tmp_path / "c").mkdir()
    records = tmp_path / "records.jsonl"
    write_records(records, generated_records(n_per_topic=3))
    result = invoke("eval", "--checkpoint", tmp_path / "c", "-r", records, "-o", tmp_path / "r")
    assert result.exit_code == 2, result.output
    assert flat(result.stderr) == (
        f"error: cannot write the report in {tmp_path / 'r'}: [Errno 28] No space left on "
        "device; choose another --output"
    )
