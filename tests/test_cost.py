"""Cost-aware training, router families, reward heads, and the CLI (`eval --pareto` of a
family among it); the cost-quality maths on hand-made tables is in test_pareto.py."""

from __future__ import annotations

import json
import math
import random
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import cost_record, generated_records, save_tiny_backbone
from typer.testing import CliRunner

from fugu_lite.checkpoint import CheckpointError
from fugu_lite.cli import app
from fugu_lite.config import (
    MAX_COST_WEIGHT,
    MAX_SEED,
    CostAware,
    ESConfig,
    ESTrainingConfig,
    ModelConfig,
    PipelineConfig,
    RLConfig,
    RLTrainingConfig,
    SFTConfig,
    SFTTrainingConfig,
)
from fugu_lite.config_errors import ConfigError
from fugu_lite.config_loading import load_stage_config
from fugu_lite.cost_routing import (
    CostRoutingDecision,
    route_checkpoint,
    route_with_cost_weight,
)
from fugu_lite.cost_weighting import (
    CostWeightError,
    apply_cost_weight,
    cost_weighting_summary,
    default_reference_cost,
    nearest_cost_weight,
    parse_cost_weights,
    training_records,
)
from fugu_lite.datasets import standard_split
from fugu_lite.evaluate_checkpoint import run_pareto_evaluation
from fugu_lite.evaluation.table import RewardTable
from fugu_lite.model import RouterModel, load_router
from fugu_lite.reward_head import (
    SERVED_COST_WEIGHTS,
    CostAwareRouter,
    RewardCostHead,
    is_reward_head,
    load_reward_head,
)
from fugu_lite.reward_head_training import (
    RewardHeadConfig,
    RewardHeadTraining,
    effective_cluster_count,
    fewer_clusters_note,
    fit_cluster_mixture,
    fit_cost_model,
    head_warnings,
    start_router,
    train_reward_head,
    validation_summary,
)
from fugu_lite.router_family import (
    FAMILY_FILE,
    FamilyManifest,
    FamilyMember,
    family_reference_cost,
    is_router_family,
    load_family_or_single,
    load_router_family,
    member_folder,
    read_family_manifest,
    train_router_family,
    write_family_manifest,
)
from fugu_lite.routing import route_prompts
from fugu_lite.schemas import ChatMessage, RewardRecord, write_records
from fugu_lite.server.api_error import ApiError
from fugu_lite.server.routing import RouteRequest, RouterService
from fugu_lite.train_es import train_es
from fugu_lite.train_rl import train_rl
from fugu_lite.train_sft import train_sft

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
CHEAP, PREMIUM = "cheap", "premium"
STEMS = ("write a python function that", "compute the sum of the numbers", "say hello to")
CONFIG = """\
model:
  backbone: tiny-random
  layer: -1
  max_tokens: 32
  head_dropout: 0.0
  cache_dir: {cache_dir}
sft:
  epochs: 6
  batch_size: 16
  learning_rate: 0.01
  temperature: 0.1
rl:
  epochs: 2
  batch_size: 16
  learning_rate: 0.01
"""
runner = CliRunner()


def cost_case_records(n: int = 90, seed: int = 0) -> list[RewardRecord]:
    """The cheap worker is almost as good as the premium one, at a tenth of the cost."""
    rng = random.Random(seed)
    records = []
    for index in range(n):
        prompt = f"{STEMS[index % 3]} {rng.randint(0, 10**6)} item {index}"
        records.append(
            RewardRecord(
                prompt=prompt,
                split=standard_split(prompt),
                worker_ids=[CHEAP, PREMIUM],
                rewards=[0.85 + rng.uniform(-0.05, 0.05), 1.0],
                costs=[0.1, 1.0],
                id=f"p{index}",
            )
        )
    return records


def tiny_cfg(tmp_path: Path) -> ModelConfig:
    return ModelConfig(
        backbone="tiny-random",
        layer=-1,
        max_tokens=32,
        head_dropout=0.0,
        cache_dir=str(tmp_path / "cache"),
    )


def invoke(*args: str | Path, input: str | None = None):
    return runner.invoke(app, [str(arg) for arg in args], input=input)


def ok(result) -> str:
    assert result.exit_code == 0, f"exit {result.exit_code}:\n{result.output}\n{result.exception!r}"
    return result.output


def flat(text: str) -> str:
    return " ".join(text.split())


# --- cost-weighted rewards ------------------------------------------------------------------


def test_apply_cost_weight_subtracts_lambda_times_cost_over_the_reference() -> None:
    records = [
        cost_record("train", [1.0, 0.5], [1.0, 3.0], "t1"),
        cost_record("train", [0.0, 1.0], [2.0, 2.0], "t2"),
        cost_record("test", [1.0, 1.0], [100.0, 0.0], "x"),
    ]
    # the default reference is the mean over train cells only: (1 + 3 + 2 + 2) / 4 = 2
    assert default_reference_cost(records) == pytest.approx(2.0)
    weighted = apply_cost_weight(records, CostAware(cost_weight=0.5))
    assert weighted[0].rewards == pytest.approx([1.0 - 0.25, 0.5 - 0.75])
    assert weighted[1].rewards == pytest.approx([-0.5, 0.5])
    assert weighted[2].rewards == pytest.approx([1.0 - 25.0, 1.0])
    assert [r.costs for r in weighted] == [r.costs for r in records]
    assert records[0].rewards == [1.0, 0.5]  # the input is not modified

    explicit = apply_cost_weight(records, CostAware(cost_weight=1.0, reference_cost=4.0))
    assert explicit[0].rewards == pytest.approx([0.75, -0.25])
    assert cost_weighting_summary(records, CostAware(cost_weight=0.5)) == {
        "cost_weight": 0.5,
        "reference_cost": pytest.approx(2.0),
    }


def test_zero_cost_weight_leaves_records_alone_and_needs_no_costs() -> None:
    records = [cost_record("train", [1.0, 0.0], None, "t1")]
    assert apply_cost_weight(records, CostAware()) is records
    assert cost_weighting_summary(records, CostAware()) == {
        "cost_weight": 0.0,
        "reference_cost": None,
    }


def test_a_configured_reference_cost_is_recorded_at_cost_weight_zero() -> None:
    """A checkpoint of cost weight 0 records the reference cost it was configured with: eval
    --pareto of it as a single-checkpoint family scales costs by that reference, not by the
    mean train cost (no record needs costs for it)."""
    records = [cost_record("train", [1.0, 0.0], None, "t1")]
    settings = CostAware(cost_weight=0.0, reference_cost=2.5)
    assert cost_weighting_summary(records, settings) == {
        "cost_weight": 0.0,
        "reference_cost": settings.reference_cost,
    }


def test_missing_costs_are_refused_naming_the_record() -> None:
    records = [
        cost_record("train", [1.0, 0.0], [1.0, 2.0], "t1"),
        cost_record("test", [1, 0], None, "t2"),
    ]
    with pytest.raises(ValueError, match=r"record id='t2' \(test split, prompt 'prompt t2'\)"):
        apply_cost_weight(records, CostAware(cost_weight=0.1))
    with pytest.raises(ValueError, match="no train records; set reference_cost explicitly"):
        default_reference_cost([cost_record("test", [1.0, 0.0], [1.0, 1.0], "x")])
    with pytest.raises(ValueError, match="every train cost is 0"):
        default_reference_cost([cost_record("train", [1.0, 0.0], [0.0, 0.0], "z")])


def test_the_default_reference_cost_refuses_a_train_record_without_costs() -> None:
    """A mean over the train records that have costs would scale every cost by some prompts'
    mean: a train record without costs is refused, and the error ends with the caller's fix
    (its callers check costs before they call it: no test reached this refusal)."""
    records = [
        cost_record("train", [1.0, 0.0], [1.0, 3.0], "t1"),
        cost_record("train", [1.0, 0.0], None, "t2"),
    ]
    with pytest.raises(ValueError) as error:
        default_reference_cost(records, "give record t2 costs")
    said = str(error.value)
    assert said.startswith("the default reference cost needs per-worker costs, but 1 of 2 ")
    assert said.endswith(
        "it is record id='t2' (train split, prompt 'prompt t2'); give record t2 costs"
    )


def test_parse_and_nearest_cost_weights() -> None:
    assert parse_cost_weights("1, 0,0.25,0.25") == [0.0, 0.25, 1.0]
    # -0 named its family member's folder lambda--0 (and "-0,0" kept whichever came first)
    assert [member_folder(weight) for weight in parse_cost_weights("-0,0.5")] == [
        "lambda-0",
        "lambda-0.5",
    ]
    with pytest.raises(ValueError, match="comma-separated numbers"):
        parse_cost_weights("0,cheap")
    with pytest.raises(ValueError, match="finite and >= 0"):
        parse_cost_weights("-1,0")
    assert parse_cost_weights("0,0.5,") == [0.0, 0.5]  # a trailing comma is no weight
    assert parse_cost_weights("0,1000000") == [0.0, 1e6]  # the limit itself is allowed
    grid = [0.0, 0.5, 1.0]
    assert nearest_cost_weight(grid, 0.2) == 0.0
    assert nearest_cost_weight(grid, 0.25) == 0.0  # a tie goes to the smaller weight
    assert nearest_cost_weight(grid, 0.8) == 1.0
    assert nearest_cost_weight(grid, 7.0) == 1.0  # beyond the grid: its end
    with pytest.raises(CostWeightError, match="finite number >= 0"):
        nearest_cost_weight(grid, -0.5)
    with pytest.raises(CostWeightError, match="finite number >= 0, got nan"):
        nearest_cost_weight(grid, math.nan)


def test_a_request_halfway_between_two_decimal_cost_weights_gets_the_smaller() -> None:
    """Distances were taken in binary floats, where 0.3 - 0.2 < 0.2 - 0.1: a family of 0.1
    and 0.3 asked for 0.2 answered with its 0.3 head, against the quality-first tie rule."""
    assert nearest_cost_weight([0.1, 0.3], 0.2) == 0.1
    assert nearest_cost_weight([0.0, 0.3, 0.5], 0.4) == 0.3
    assert nearest_cost_weight([0.7, 0.9], 0.8) == 0.7
    assert nearest_cost_weight([0.7, 0.9], 0.8000001) == 0.9  # just past halfway: the larger


def test_a_tie_goes_to_the_smaller_cost_weight_whatever_the_order_given() -> None:
    """nearest_cost_weight taking the weights in the order given (its sorted() dropped) passed
    every test, each of which gave them ascending as a loaded family's are: weights given
    otherwise (a RouterFamily built by hand, another caller) then answered a request halfway
    between two with the larger, against the quality-first tie rule."""
    assert nearest_cost_weight([1.0, 0.5, 0.0], 0.25) == 0.0
    assert nearest_cost_weight([0.3, 0.1], 0.2) == 0.1


def test_cost_weights_that_are_none_or_not_a_number_are_refused() -> None:
    """parse_cost_weights (`train pipeline --cost-weights`) without its checks for no weight
    at all or a NaN passed every test of this file: ' , ' trained no member, and 'nan'
    passed as a weight (NaN is neither < 0 nor > the limit)."""
    with pytest.raises(ValueError, match="give at least one cost weight"):
        parse_cost_weights(" , ")
    with pytest.raises(ValueError, match=r"finite and >= 0, .*got \[nan\]"):
        parse_cost_weights("0,nan")


@pytest.mark.parametrize("bad", [-1.0, math.nan])
def test_a_reward_head_refuses_a_negative_or_nan_cost_weight_itself(bad: float) -> None:
    """check_head_cost_weight without its finite and >= 0 check passed every test: route
    and the server check first, so a reward head's own view at -1 (a Python caller of
    at_cost_weight) ranked the dearest workers first, and one at NaN made every utility NaN."""
    router = CostAwareRouter(ModelConfig(backbone="tiny-random"), ["a", "b"], 1, [1], 1.0, 0.5)
    with pytest.raises(CostWeightError, match="a cost weight must be a finite number >= 0"):
        router.at_cost_weight(bad)


@pytest.mark.parametrize("stage", ["sft", "rl", "es"])
def test_a_cost_weight_moves_the_choice_to_the_cheap_worker(stage: str, tmp_path: Path) -> None:
    records = cost_case_records()
    test_prompts = [r.prompt for r in records if r.split == "test"]
    cfg = tiny_cfg(tmp_path)

    def chosen(cost_weight: float) -> set[str]:
        output = tmp_path / f"{stage}-{cost_weight:g}"
        if stage == "sft":
            training = SFTTrainingConfig(
                epochs=6,
                batch_size=16,
                learning_rate=0.01,
                temperature=0.1,
                cost_weight=cost_weight,
            )
            report = train_sft(records, SFTConfig(model=cfg, training=training), output)
        elif stage == "rl":
            training = RLTrainingConfig(
                epochs=6, batch_size=16, learning_rate=0.01, cost_weight=cost_weight
            )
            report = train_rl(records, RLConfig(model=cfg, training=training), output)
        else:
            es_training = ESTrainingConfig(
                population_size=8, sigma0=0.5, samples=0, iterations=30, batch_size=64,
                validate_every=5, cost_weight=cost_weight,
            )  # fmt: skip
            report = train_es(records, ESConfig(model=cfg, training=es_training), output)
        expected_reference = None if cost_weight == 0 else pytest.approx(0.55)
        assert report["cost_weighting"] == {
            "cost_weight": cost_weight,
            "reference_cost": expected_reference,
        }
        metadata = json.loads((output / "router.json").read_text())["metadata"]
        assert metadata["cost_weighting"] == report["cost_weighting"]
        return {decision.worker for decision in route_prompts(load_router(output), test_prompts)}

    assert chosen(0.0) == {PREMIUM}
    assert chosen(0.5) == {CHEAP}


@pytest.mark.parametrize("stage", ["sft", "rl", "es"])
def test_a_cost_weight_needs_costs_on_the_splits_a_stage_trains_on_only(
    stage: str, tmp_path: Path
) -> None:
    """Test records without costs stopped every cost-weighted stage ('16 of 60 records have
    none ... (test split ...)'), though no stage reads the test split."""
    records = cost_case_records()
    no_test_costs = [
        r.model_copy(update={"costs": None}) if r.split == "test" else r for r in records
    ]
    cfg = tiny_cfg(tmp_path)

    def train(given: list[RewardRecord], output: Path) -> dict:
        if stage == "sft":
            training = SFTTrainingConfig(epochs=1, batch_size=16, cost_weight=0.5)
            return train_sft(given, SFTConfig(model=cfg, training=training), output)
        if stage == "rl":
            rl_training = RLTrainingConfig(epochs=1, batch_size=16, cost_weight=0.5)
            return train_rl(given, RLConfig(model=cfg, training=rl_training), output)
        es_training = ESTrainingConfig(population_size=4, iterations=2, samples=0, cost_weight=0.5)
        return train_es(given, ESConfig(model=cfg, training=es_training), output)

    trained = train(no_test_costs, tmp_path / "trained")
    same = train(records, tmp_path / "with-test-costs")
    assert trained["cost_weighting"] == same["cost_weighting"]
    assert torch.equal(
        load_router(tmp_path / "trained").output_layer.weight,
        load_router(tmp_path / "with-test-costs").output_layer.weight,
    )
    no_validation_costs = [
        r.model_copy(update={"costs": None}) if r.split == "validation" else r for r in records
    ]
    with pytest.raises(ValueError, match=r"\(validation split, prompt") as refused:
        train(no_validation_costs, tmp_path / "refused")
    # the counts are of the splits read, not of the whole file ('8 of 31 records' of 36)
    read = [r for r in records if r.split != "test"]
    missing = sum(r.split == "validation" for r in records)
    counted = f"{missing} of {len(read)} records of the train and validation splits have none"
    assert counted in str(refused.value)
    only_test = [r for r in records if r.split == "test"]
    with pytest.raises(
        ValueError, match=r"no records in the 'train' split \(the records hold test"
    ):
        train(only_test, tmp_path / "refused")


def test_records_without_a_train_split_are_refused_alike_by_every_trainer(
    tmp_path: Path,
) -> None:
    """A family run said 'set reference_cost explicitly' (which still fails: nothing to
    train on), the reward head 'there is none', the stages named the splits but no fix; each
    now names the splits the records hold and how to give them a train split."""
    only_test = [r.model_copy(update={"split": "test"}) for r in cost_case_records(n=12)]
    expected = (
        r"no records in the 'train' split \(the records hold test 12\); every stage learns "
        r"from the train split: give records the split 'train' \(a record's split field\)"
    )
    with pytest.raises(ValueError, match=expected):
        train_router_family(only_test, PipelineConfig(model=tiny_cfg(tmp_path)), tmp_path, [0, 1])
    with pytest.raises(ValueError, match=expected):
        train_reward_head(only_test, RewardHeadConfig(model=tiny_cfg(tmp_path)), tmp_path / "h")
    with pytest.raises(ValueError, match=expected):
        train_sft(only_test, SFTConfig(model=tiny_cfg(tmp_path)), tmp_path / "sft")
    assert list(tmp_path.iterdir()) == []  # refused before anything is written


# --- the family through the CLI -------------------------------------------------------------


@dataclass
class Family:
    root: Path
    records: list[RewardRecord]
    records_path: Path
    plain: Path
    family: Path

    def test_prompt(self) -> str:
        return next(r.prompt for r in self.records if r.split == "test")


@pytest.fixture(scope="module")
def family(tmp_path_factory: pytest.TempPathFactory) -> Family:
    root = tmp_path_factory.mktemp("cost")
    records = cost_case_records()
    records_path = root / "records.jsonl"
    write_records(records_path, records)
    config = root / "config.yaml"
    config.write_text(CONFIG.format(cache_dir=root / "cache"), encoding="utf-8")
    common = ["--records", records_path, "--config", config]
    output = ok(invoke("train", "pipeline", *common, "--output", root / "family",
                       "--cost-weights", "0.5,0"))  # fmt: skip
    assert f"checkpoint written to {root / 'family'}" in flat(output)
    ok(invoke("train", "pipeline", *common, "--output", root / "plain"))
    return Family(root, records, records_path, root / "plain" / "rl", root / "family")


def test_the_family_manifest_round_trips(family: Family) -> None:
    manifest = read_family_manifest(family.family)
    assert manifest.cost_weights == [0.0, 0.5]
    assert [m.checkpoint for m in manifest.members] == ["lambda-0/rl", "lambda-0.5/rl"]
    assert manifest.worker_ids == [CHEAP, PREMIUM]
    assert manifest.reference_cost == pytest.approx(0.55)
    loaded = load_router_family(family.family)
    assert loaded.cost_weights == [0.0, 0.5]
    assert [router.worker_ids for router in loaded.routers] == [[CHEAP, PREMIUM]] * 2
    rl_report = json.loads(
        (family.family / "lambda-0.5" / "rl" / "training_report.json").read_text()
    )
    assert rl_report["cost_weighting"] == {
        "cost_weight": 0.5,
        "reference_cost": pytest.approx(0.55),
    }

    prompts = [r.prompt for r in family.records if r.split == "test"]
    quality = route_with_cost_weight(loaded, prompts, 0.1)
    assert {d.worker for d in quality} == {PREMIUM} and quality[0].cost_weight == 0.0
    thrifty = route_with_cost_weight(loaded, prompts, 0.4, exclude=[])
    assert {d.worker for d in thrifty} == {CHEAP} and thrifty[0].cost_weight == 0.5


def test_a_single_checkpoint_wrapped_as_a_family_is_not_routed_by_cost_weight(
    family: Family,
) -> None:
    """Evaluation wraps a plain checkpoint as a one-member family: routing it by cost weight
    would answer every weight with the one it was trained for, so it is refused."""
    single = load_family_or_single(family.plain)
    with pytest.raises(CostWeightError, match="is a single checkpoint, not a router family"):
        route_with_cost_weight(single, [family.test_prompt()], 0.5)


def test_a_single_checkpoint_wrapped_as_a_family_keeps_its_trained_cost_weighting(
    family: Family, tmp_path: Path
) -> None:
    """`eval --pareto` of a plain checkpoint places its one point at the cost weight it was
    trained with, and sweeps the baselines with its reference cost (not the records' mean)."""
    plain = tmp_path / "plain"
    shutil.copytree(family.plain, plain)
    metadata = json.loads((plain / "router.json").read_text("utf-8"))
    metadata["metadata"]["cost_weighting"] = {"cost_weight": 0.25, "reference_cost": 2.5}
    (plain / "router.json").write_text(json.dumps(metadata), "utf-8")
    single = load_family_or_single(plain)
    assert single.kind == "single"
    assert single.cost_weights == [0.25] and single.reference_cost == 2.5


def test_a_damaged_or_missing_manifest_is_refused(family: Family, tmp_path: Path) -> None:
    with pytest.raises(CostWeightError, match=f"no {FAMILY_FILE}"):
        load_router_family(tmp_path)
    (tmp_path / FAMILY_FILE).write_text('{"worker_ids": ["a"], "members": []}', encoding="utf-8")
    with pytest.raises(CostWeightError, match="is damaged"):
        load_router_family(tmp_path)
    # pydantic's dump ('2 validation errors for FamilyManifest ... For further information
    # visit https://errors.pydantic.dev/...') on several lines: now one line and what to do
    (tmp_path / FAMILY_FILE).write_text("{}", encoding="utf-8")
    with pytest.raises(CostWeightError) as error:
        load_router_family(tmp_path)
    assert str(error.value) == (
        f"{tmp_path / FAMILY_FILE} is damaged (worker_ids: Field required; members: Field "
        "required); train the family again (`fugu-lite train pipeline ... --cost-weights`)"
    )


def test_a_manifest_listing_no_workers_is_said_to_be_damaged(
    family: Family, tmp_path: Path
) -> None:
    """A router_family.json with `"worker_ids": []` was read, then refused as if its member
    "was trained again since the family was" (routing to the workers [...], the manifest
    listing []); it is said to be damaged, naming worker_ids, before any member loads."""
    copied = tmp_path / "family"
    shutil.copytree(family.family, copied)
    manifest = json.loads((copied / FAMILY_FILE).read_text("utf-8"))
    manifest["worker_ids"] = []
    (copied / FAMILY_FILE).write_text(json.dumps(manifest), "utf-8")
    with pytest.raises(CostWeightError) as error:
        load_router_family(copied)
    assert str(error.value) == (
        f"{copied / FAMILY_FILE} is damaged (worker_ids: List should have at least 1 item after "
        "validation, not 0); train the family again (`fugu-lite train pipeline ... "
        "--cost-weights`)"
    )


@pytest.mark.parametrize(
    ("entries", "key"),
    [
        ('"reference_cost": 1e999, "members": [{"cost_weight": 0', "reference_cost"),
        ('"members": [{"cost_weight": 1e999', "members.0.cost_weight"),
    ],
    ids=["reference_cost", "cost_weight"],
)
def test_an_infinite_number_in_a_hand_edited_manifest_is_refused(
    tmp_path: Path, entries: str, key: str
) -> None:
    """`1e999` (infinity to JSON readers) passed ge=0 and gt=0: an infinite reference cost
    routed every cost weight as 0, an infinite cost weight made every reward -inf."""
    text = f'{{"worker_ids": ["a"], {entries}, "checkpoint": "lambda-0/rl"}}]}}'
    (tmp_path / FAMILY_FILE).write_text(text, encoding="utf-8")
    with pytest.raises(CostWeightError) as error:
        read_family_manifest(tmp_path)
    assert str(error.value).startswith(
        f"{tmp_path / FAMILY_FILE} is damaged ({key}: Input should be a finite number)"
    )


def test_a_negative_cost_weight_in_a_hand_edited_manifest_is_refused(tmp_path: Path) -> None:
    """A cost weight below 0 (a hand edit: training refuses one) was loaded as a member's,
    one a request's lambda could be routed to as the nearest."""
    text = '{"worker_ids": ["a"], "members": [{"cost_weight": -0.5, "checkpoint": "m/rl"}]}'
    (tmp_path / FAMILY_FILE).write_text(text, encoding="utf-8")
    with pytest.raises(CostWeightError) as error:
        read_family_manifest(tmp_path)
    assert str(error.value).startswith(
        f"{tmp_path / FAMILY_FILE} is damaged (members.0.cost_weight: Input should be greater "
        "than or equal to 0"
    )


def test_an_infinite_trained_cost_weighting_is_refused_naming_the_key(
    family: Family, tmp_path: Path
) -> None:
    """A plain checkpoint's router.json edited to `"reference_cost": 1e999` was wrapped as a
    family routing every cost weight as 0."""
    plain = tmp_path / "plain"
    shutil.copytree(family.plain, plain)
    metadata = json.loads((plain / "router.json").read_text("utf-8"))
    metadata["metadata"]["cost_weighting"] = {"cost_weight": 0.25, "reference_cost": 2.5}
    text = json.dumps(metadata).replace('"reference_cost": 2.5', '"reference_cost": 1e999')
    (plain / "router.json").write_text(text, "utf-8")
    with pytest.raises(CheckpointError) as error:
        load_family_or_single(plain)
    assert str(error.value).startswith(
        f"{plain / 'router.json'} is damaged (metadata.cost_weighting.reference_cost: Input "
        "should be a finite number)"
    )


def write_family_of_members(directory: Path, saved: dict[int, list[str]]) -> None:
    """A family of cost weights 0 and 1 routing to ['a', 'b'], with the members `saved` (cost
    weight: the workers it was trained on) saved in their folders."""
    for weight, workers in saved.items():
        RouterModel(tiny_cfg(directory), workers, 8).save_checkpoint(directory / f"{weight}" / "rl")
    members = [FamilyMember(cost_weight=weight, checkpoint=f"{weight}/rl") for weight in (0, 1)]
    manifest = FamilyManifest(worker_ids=["a", "b"], reference_cost=1.0, members=members)
    write_family_manifest(directory, manifest)


def test_a_member_trained_again_on_other_workers_is_said_as_the_familys(tmp_path: Path) -> None:
    """A member whose workers differ from the manifest's was refused as checkpoint vs
    'records', and told to use other records, on `route` and `serve`, which read none."""
    write_family_of_members(tmp_path, {0: ["a", "b"], 1: ["b", "a"]})
    with pytest.raises(CostWeightError) as error:
        load_family_or_single(tmp_path)
    assert str(error.value).startswith(
        f"{tmp_path}: member 1/rl routes to the workers ['b', 'a'], but {FAMILY_FILE} lists "
        "['a', 'b']"
    )
    assert "records" not in str(error.value) and "train the family again" in str(error.value)


def test_a_family_copied_without_a_members_folder_says_what_it_lacks(tmp_path: Path) -> None:
    """router_family.json copied with some of its members: the missing one read only
    '.../lambda-1/rl is not a fugu-lite router checkpoint ...; that folder does not exist'."""
    write_family_of_members(tmp_path, {0: ["a", "b"]})  # member 1 listed, not saved
    with pytest.raises(CostWeightError) as error:
        load_family_or_single(tmp_path)
    assert str(error.value).startswith(
        f"{tmp_path}: the members ['1/rl'] that {FAMILY_FILE} lists are not there: copy the "
        "whole family folder"
    )


def test_a_manifest_listing_a_cost_weight_twice_is_refused(tmp_path: Path) -> None:
    """Two members for one cost weight: which of them a request for it got was whichever
    came first."""
    for folder in ("a/rl", "b/rl"):
        RouterModel(tiny_cfg(tmp_path), ["a", "b"], 8).save_checkpoint(tmp_path / folder)
    members = [FamilyMember(cost_weight=0.5, checkpoint=f"{name}/rl") for name in ("a", "b")]
    manifest = FamilyManifest(worker_ids=["a", "b"], reference_cost=1.0, members=members)
    write_family_manifest(tmp_path, manifest)
    with pytest.raises(CostWeightError, match=r"repeated cost weights \[0\.5, 0\.5\]"):
        load_router_family(tmp_path)


def test_a_manifest_listing_its_members_out_of_order_loads_them_sorted(tmp_path: Path) -> None:
    """A hand-edited manifest may list lambda 1 before 0: the family is still sorted by cost
    weight (what `eval --pareto` draws its curve along), each member at its own weight."""
    for weight in (0, 1):
        router = RouterModel(tiny_cfg(tmp_path), ["a", "b"], 8 + weight)
        router.save_checkpoint(tmp_path / f"{weight}" / "rl")
    members = [FamilyMember(cost_weight=weight, checkpoint=f"{weight}/rl") for weight in (1, 0)]
    manifest = FamilyManifest(worker_ids=["a", "b"], reference_cost=1.0, members=members)
    write_family_manifest(tmp_path, manifest)
    family = load_router_family(tmp_path)
    assert family.cost_weights == [0.0, 1.0]
    assert [router.feature_dim for router in family.routers] == [8, 9]


@pytest.mark.parametrize("change", [{"head": "linear"}, {"layer": 1}], ids=str)
def test_a_member_of_another_model_config_is_refused(tmp_path: Path, change: dict) -> None:
    """Members share one backbone and head shape: one saved with another head is refused,
    not routed beside the others; and one of another layer, since `serve` and `eval` compute
    every member's features with the first member's extractor."""
    write_family_of_members(tmp_path, {0: ["a", "b"]})
    other = tiny_cfg(tmp_path).model_copy(update=change)
    RouterModel(other, ["a", "b"], 8).save_checkpoint(tmp_path / "1" / "rl")
    with pytest.raises(CostWeightError, match="member 1/rl has another model config than 0/rl"):
        load_router_family(tmp_path)


@pytest.mark.parametrize("stage", ["sft", "rl"])
def test_a_family_uses_the_reference_cost_either_stage_sets(tmp_path: Path, stage: str) -> None:
    """One stage's reference_cost is every member's, whichever stage the config sets it on."""
    training = {"sft": SFTTrainingConfig, "rl": RLTrainingConfig}[stage](reference_cost=3.0)
    config = PipelineConfig(model=tiny_cfg(tmp_path), **{stage: training})
    assert family_reference_cost(cost_case_records(), config) == 3.0


def test_every_member_is_trained_with_its_cost_weight_and_the_familys_reference_cost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reference cost set on one stage is the family's, and each member's SFT and RL run
    with it: a member left to find its own would weigh costs by another scale than the
    manifest says when the config sets one."""
    import fugu_lite.pipeline as pipeline

    trained: dict[float, tuple[float, ...]] = {}

    def recorded(records, member_config, member_output) -> dict:
        sft, rl = member_config.sft, member_config.rl
        trained[sft.cost_weight] = (rl.cost_weight, sft.reference_cost, rl.reference_cost)
        return {"checkpoint": str(Path(member_output) / "rl")}

    monkeypatch.setattr(pipeline, "train_pipeline", recorded)
    config = PipelineConfig(model=tiny_cfg(tmp_path), rl=RLTrainingConfig(reference_cost=3.0))
    report = train_router_family(cost_case_records(), config, tmp_path / "family", [0, 0.5])
    assert report["reference_cost"] == 3.0
    assert trained == {0.0: (0.0, 3.0, 3.0), 0.5: (0.5, 3.0, 3.0)}


def test_a_family_takes_the_same_reference_cost_set_on_both_stages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two stages' reference costs are refused only when they differ (the refusal says to give
    both the same value): set alike, they are the family's one reference cost."""
    import fugu_lite.pipeline as pipeline

    def trained(records, member_config, member_output) -> dict:
        return {"checkpoint": str(Path(member_output) / "rl")}

    monkeypatch.setattr(pipeline, "train_pipeline", trained)
    config = PipelineConfig(
        model=tiny_cfg(tmp_path),
        sft=SFTTrainingConfig(reference_cost=0.3),
        rl=RLTrainingConfig(reference_cost=0.3),
    )
    report = train_router_family(cost_case_records(), config, tmp_path / "family", [0, 0.5])
    assert report["reference_cost"] == 0.3


@pytest.mark.parametrize("costs", [None, [0.0, 0.0]])
def test_a_family_without_usable_costs_says_what_to_do(
    tmp_path: Path, costs: list[float] | None
) -> None:
    """The advice was a single stage's ('set cost_weight to 0', 'leave cost_weight at 0'):
    a family has no cost_weight key; its weights come from --cost-weights."""
    records = [r.model_copy(update={"costs": costs}) for r in cost_case_records()]
    config = PipelineConfig(model=tiny_cfg(tmp_path))
    with pytest.raises(ValueError) as raised:
        train_router_family(records, config, tmp_path / "family", [0.0, 1.0])
    message = str(raised.value)
    assert "give the records their real costs, or train one router (without --cost-weights)" in (
        message
    )
    assert "cost_weight" not in message
    assert not (tmp_path / "family").exists()


@pytest.mark.parametrize(
    ("sft", "rl", "expected"),
    [
        ({"cost_weight": 0.5}, {}, r"config's sft\.cost_weight=0\.5 would be ignored; remove"),
        ({"cost_weight": 1}, {"cost_weight": 2}, r"sft\.cost_weight=1 and rl\.cost_weight=2 "),
        (
            {"reference_cost": 0.2},
            {"reference_cost": 0.4},
            r"sets sft\.reference_cost=0\.2 and rl\.reference_cost=0\.4; give both the same",
        ),
    ],
)
def test_a_family_refuses_cost_settings_of_the_config_it_would_drop(
    tmp_path: Path, sft: dict, rl: dict, expected: str
) -> None:
    """`--cost-weights` replaced the config's sft/rl cost_weight without a word, and a family
    used sft's reference_cost when rl's differed: the user's settings were silently lost."""
    config = PipelineConfig(
        model=tiny_cfg(tmp_path), sft=SFTTrainingConfig(**sft), rl=RLTrainingConfig(**rl)
    )
    with pytest.raises(ValueError, match=expected):
        train_router_family(cost_case_records(), config, tmp_path / "family", [0.0, 1.0])
    assert not (tmp_path / "family").exists()


def test_a_family_needs_costs_on_the_train_and_validation_records_only(tmp_path: Path) -> None:
    """Test records without costs stopped `train pipeline --cost-weights`, though no member
    reads the test split."""
    records = [
        r.model_copy(update={"costs": None}) if r.split == "test" else r
        for r in cost_case_records()
    ]
    config = PipelineConfig(
        model=tiny_cfg(tmp_path),
        sft=SFTTrainingConfig(epochs=1, batch_size=16),
        rl=RLTrainingConfig(epochs=1, batch_size=16),
    )
    report = train_router_family(records, config, tmp_path / "family", [0.5])
    assert report["reference_cost"] == pytest.approx(0.55)
    assert is_router_family(tmp_path / "family")
    no_validation_costs = [
        r.model_copy(update={"costs": None}) if r.split == "validation" else r
        for r in cost_case_records()
    ]
    with pytest.raises(ValueError, match=r"records of the train and validation splits have none"):
        train_router_family(no_validation_costs, config, tmp_path / "refused", [0.5])
    assert not (tmp_path / "refused").exists()


def test_a_family_of_cost_weight_0_only_needs_no_costs(tmp_path: Path) -> None:
    """`--cost-weights 0` trains without costs, but was refused ('the default reference cost
    needs per-worker costs') when only the test records, or only some train records, had
    them; with no costs at all it trained."""
    cases = {
        "test only": lambda r: r if r.split == "test" else r.model_copy(update={"costs": None}),
        "some train": lambda r: r.model_copy(update={"costs": None}) if r.id == "p0" else r,
    }
    config = PipelineConfig(
        model=tiny_cfg(tmp_path),
        sft=SFTTrainingConfig(epochs=1, batch_size=16),
        rl=RLTrainingConfig(epochs=1, batch_size=16),
    )
    for name, change in cases.items():
        records = [change(r) for r in cost_case_records()]
        assert any(r.costs is None for r in records if r.split == "train"), name
        report = train_router_family(records, config, tmp_path / name, [0.0])
        assert report["reference_cost"] is None, name
        assert load_router_family(tmp_path / name).cost_weights == [0.0]
    with pytest.raises(ValueError, match=r"1 of \d+ records of the train and validation splits"):
        train_router_family([cases["some train"](r) for r in cost_case_records()], config,
                            tmp_path / "refused", [0.0, 0.5])  # fmt: skip


def test_an_interrupted_family_rerun_leaves_no_manifest_mixing_two_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Re-training a family in place and stopping it after its first member kept the old
    router_family.json: it loaded silently, its reference cost no longer the members'."""
    import fugu_lite.pipeline as pipeline

    config = PipelineConfig(
        model=tiny_cfg(tmp_path),
        sft=SFTTrainingConfig(epochs=1, batch_size=16),
        rl=RLTrainingConfig(epochs=1, batch_size=16),
    )
    output = tmp_path / "family"
    train_router_family(cost_case_records(), config, output, [0.0, 1.0])
    assert is_router_family(output)
    (output / "pareto-test").mkdir()  # `eval --checkpoint FAMILY --pareto`'s report
    (output / "pareto-test" / "pareto_report.json").write_text("{}")

    real_train_pipeline = pipeline.train_pipeline

    def stopped_after_the_first_member(records, member_config, member_output) -> dict:
        if member_config.sft.cost_weight > 0:
            raise KeyboardInterrupt
        return real_train_pipeline(records, member_config, member_output)

    pricier = [
        r.model_copy(update={"costs": [10 * c for c in r.costs]}) for r in cost_case_records()
    ]
    monkeypatch.setattr(pipeline, "train_pipeline", stopped_after_the_first_member)
    with pytest.raises(KeyboardInterrupt):
        train_router_family(pricier, config, output, [0.0, 1.0])
    assert not is_router_family(output)
    assert not (output / "training_report.json").exists()
    assert not (output / "pareto-test").exists()  # the earlier family's cost-quality report
    with pytest.raises(CheckpointError, match="interrupted; run it again"):
        load_family_or_single(output)


def test_route_with_a_cost_weight_through_the_cli(family: Family) -> None:
    prompt = family.test_prompt()
    output = flat(ok(invoke("route", "--checkpoint", family.family, "--cost-weight", "1", prompt)))
    assert "cost weight: 1 -> head trained for 0.5" in output
    assert "chosen worker: cheap" in output
    output = flat(ok(invoke("route", "--checkpoint", family.family, prompt)))
    assert "cost weight: default -> head trained for 0" in output
    assert "chosen worker: premium" in output

    result = invoke("route", "--checkpoint", family.family, "--cost-weight", "0", "--json", prompt)
    decision = json.loads(ok(result).strip().splitlines()[-1])
    assert decision["worker"] == PREMIUM
    assert decision["cost_weight"] == 0.0 and decision["requested_cost_weight"] == 0.0

    result = invoke("route", "--checkpoint", family.family, "--cost-weight", "0.5",
                    "--exclude", CHEAP, prompt)  # fmt: skip
    assert "chosen worker: premium" in flat(ok(result))


def test_a_cost_weight_of_minus_zero_is_echoed_as_zero(family: Family) -> None:
    """`route --cost-weight -0` printed "cost weight: -0 -> head trained for 0" and its
    --json "requested_cost_weight": -0.0."""
    prompt = family.test_prompt()
    asked = ["route", "--checkpoint", family.family, "--cost-weight", "-0"]
    assert "cost weight: 0 -> head trained for 0" in flat(ok(invoke(*asked, prompt)))
    line = ok(invoke(*asked, "--json", prompt)).strip().splitlines()[-1]
    assert '"requested_cost_weight": 0.0' in line


def test_a_plain_checkpoint_refuses_a_cost_weight(family: Family) -> None:
    result = invoke("route", "--checkpoint", family.plain, "--cost-weight", "0.5", "hello")
    assert result.exit_code == 2
    message = flat(result.output)
    assert "is a single router checkpoint (trained with cost weight 0)" in message
    assert "--cost-weights" in message
    assert "chosen worker" in flat(ok(invoke("route", "--checkpoint", family.plain, "hello")))


def test_a_plain_checkpoint_serves_the_cost_weight_it_was_trained_with(family: Family) -> None:
    """`route --cost-weight 0` (or a client sending cost_weight 0 every time) on a router
    trained with cost weight 0 was refused: 'trained with cost weight 0, so it cannot serve
    cost weight 0'."""
    output = flat(ok(invoke("route", "--checkpoint", family.plain, "--cost-weight", "0", "hi")))
    assert "cost weight: 0 -> head trained for 0" in output and "chosen worker" in output
    service = RouterService(load_family_or_single(family.plain))
    allowed = service.allowed_workers(None, None, 0.0)
    request = RouteRequest([ChatMessage(role="user", content="hi")], allowed, 0.0)
    assert service.route_batch([request])[0].cost_weight == 0.0
    minus_zero = route_checkpoint(family.plain, "hi", cost_weight=-0.0)  # the 0 it answers
    assert isinstance(minus_zero, CostRoutingDecision)
    assert math.copysign(1.0, minus_zero.cost_weight) == 1.0  # not -0.0 in route --json
    with pytest.raises(
        ApiError, match=r"trained with cost weight 0, the only one it serves\); leave"
    ):
        service.allowed_workers(None, None, 0.5)


def test_a_plain_checkpoint_trained_with_a_cost_weight_serves_that_one_only(
    tmp_path: Path,
) -> None:
    """The plain checkpoints of the tests were trained with cost weight 0, so a check of the
    requested weight against 0 instead of the trained one passed them (a mutation round):
    one trained with 0.5 would have refused 0.5 and answered 0."""
    weighting = {"cost_weighting": {"cost_weight": 0.5, "reference_cost": 1.0}}
    model = RouterModel(tiny_cfg(tmp_path), [CHEAP, PREMIUM], 32)
    directory = model.save_checkpoint(tmp_path / "c", weighting)
    decision = route_checkpoint(directory, "hi", cost_weight=0.5)
    assert isinstance(decision, CostRoutingDecision) and decision.cost_weight == 0.5
    with pytest.raises(
        CostWeightError, match=r"cost weight 0\.5\), so it cannot serve cost weight 0;"
    ):
        route_checkpoint(directory, "hi", cost_weight=0.0)


def test_a_checkpoint_recording_no_cost_weighting_serves_cost_weight_0_only(
    family: Family, tmp_path: Path
) -> None:
    """A router.json without metadata.cost_weighting (written before stages recorded it) was
    trained without a cost weight: route answers --cost-weight 0 with it, and refuses 0.5
    naming 0 as its own, like a checkpoint that records 0."""
    plain = tmp_path / "plain"
    shutil.copytree(family.plain, plain)
    metadata = json.loads((plain / "router.json").read_text("utf-8"))
    del metadata["metadata"]["cost_weighting"]
    (plain / "router.json").write_text(json.dumps(metadata), "utf-8")
    answered = route_checkpoint(plain, "hi", cost_weight=0.0)
    assert isinstance(answered, CostRoutingDecision) and answered.cost_weight == 0.0
    with pytest.raises(CostWeightError, match=r"trained with cost weight 0\), so it cannot"):
        route_checkpoint(plain, "hi", cost_weight=0.5)


def test_route_checkpoint_refuses_a_negative_cost_weight_as_one(family: Family) -> None:
    """route_checkpoint (the API under `route`, whose flag check comes first) checks the
    weight itself: without that, a plain checkpoint answered -1 or NaN with 'cannot serve
    cost weight -1; train a router family...', as if another checkpoint could."""
    for bad in (-1.0, math.nan):
        with pytest.raises(CostWeightError, match="a cost weight must be a finite number >= 0"):
            route_checkpoint(family.plain, "hi", cost_weight=bad)


def test_a_refused_cost_weight_is_named_with_every_digit(
    family: Family, reward_head: Head, tmp_path: Path
) -> None:
    """Refusals wrote cost weights with :g, six digits: a reward head said "up to 1,000,000,
    got 1e+06" for 1000001, and a checkpoint trained with 0.1234567 said it "cannot serve
    cost weight 0.123457" when asked for 0.123457, the weight it named as its own."""
    prompt = reward_head.test_prompts()[0]
    result = invoke("route", "--checkpoint", reward_head.head, "--cost-weight", "1000001", prompt)
    assert result.exit_code == 2
    assert "up to 1,000,000, got 1000001:" in flat(result.output)

    plain = tmp_path / "plain"
    shutil.copytree(family.plain, plain)
    metadata = json.loads((plain / "router.json").read_text("utf-8"))
    metadata["metadata"]["cost_weighting"]["cost_weight"] = 0.1234567
    (plain / "router.json").write_text(json.dumps(metadata), "utf-8")
    result = invoke("route", "--checkpoint", plain, "--cost-weight", "0.123457", "hi")
    assert result.exit_code == 2
    message = flat(result.output)
    assert "(trained with cost weight 0.1234567), so it cannot serve cost weight 0.123457;" in (
        message
    )
    service = RouterService(load_family_or_single(plain))
    with pytest.raises(ApiError, match=r"trained with cost weight 0\.1234567, the only one"):
        service.allowed_workers(None, None, 0.123457)


def test_bad_cost_weights_and_plain_eval_of_a_family_exit_2(family: Family) -> None:
    result = invoke("train", "pipeline", "--records", family.records_path, "--output",
                    family.root / "bad", "--cost-weights", "0,lots")  # fmt: skip
    assert result.exit_code == 2
    assert "comma-separated numbers" in flat(result.output)
    result = invoke("eval", "--checkpoint", family.family, "--records", family.records_path)
    assert result.exit_code == 2
    assert "is a router family: evaluate it with --pareto" in flat(result.output)


def check_curve(curve: dict) -> None:
    for point in curve["points"]:
        assert 0.0 <= point["mean_reward"] <= 1.0
        assert point["mean_cost"] >= 0.0
    hull = np.array(curve["hull"])
    assert np.all(np.diff(hull[:, 0]) > 0) and np.all(np.diff(hull[:, 1]) > 0)
    assert 0.0 <= curve["aiq"] <= 1.0


def test_eval_pareto_writes_sane_reports(family: Family, tmp_path: Path) -> None:
    output = tmp_path / "pareto"
    ok(invoke("eval", "--checkpoint", family.family, "--records", family.records_path,
              "--pareto", "--output", output))  # fmt: skip
    for name in ("pareto_report.json", "pareto_report.md"):
        assert (output / name).is_file(), name
    assert (output / "cost_quality.png").read_bytes().startswith(PNG_MAGIC)
    report = json.loads((output / "pareto_report.json").read_text())
    assert report["router_kind"] == "family"
    assert report["router_cost_weights"] == report["baseline_cost_weights"] == [0.0, 0.5]
    assert set(report["curves"]) == {"router", "knn", "ridge", "workers"}
    for curve in report["curves"].values():
        check_curve(curve)
    router = [(p["cost_weight"], p["mean_cost"]) for p in report["curves"]["router"]["points"]]
    assert router == [(0.0, pytest.approx(1.0)), (0.5, pytest.approx(0.1))]
    # 95% of premium's quality: on the hull between always-cheap and always-premium
    assert report["best_single"]["worker"] == PREMIUM
    (cheap_cost, cheap_reward), (premium_cost, premium_reward) = report["curves"]["router"]["hull"]
    share = (0.95 * premium_reward - cheap_reward) / (premium_reward - cheap_reward)
    expected = (cheap_cost + share * (premium_cost - cheap_cost)) / premium_cost
    assert report["curves"]["router"]["cost_fraction_at_target"] == pytest.approx(expected)
    assert 0.1 < expected < 1.0
    assert report["oracle"]["mean_reward"] == pytest.approx(1.0)
    assert "# Cost-quality evaluation on `test`" in (output / "pareto_report.md").read_text()


def test_eval_pareto_on_a_plain_checkpoint_gives_its_single_point(family: Family) -> None:
    ok(invoke("eval", "--checkpoint", family.plain, "--records", family.records_path, "--pareto"))
    report = json.loads((family.plain / "pareto-test" / "pareto_report.json").read_text())
    assert report["router_kind"] == "single"
    assert len(report["curves"]["router"]["points"]) == 1
    assert report["reference_cost"] == pytest.approx(0.55)  # the mean train cost
    for curve in report["curves"].values():
        check_curve(curve)


def test_eval_pareto_without_usable_costs_says_what_to_do(family: Family, tmp_path: Path) -> None:
    """Free workers (all costs 0) or costs on some records only: the advice was to 'leave
    cost_weight at 0' (eval has none) or claimed the records had no costs at all."""
    free = [r.model_copy(update={"costs": [0.0, 0.0]}) for r in family.records]
    some = [r.model_copy(update={"costs": None}) if i % 3 else r for i, r in enumerate(free)]
    for name, records in (("free", free), ("some", some)):
        path = tmp_path / f"{name}.jsonl"
        write_records(path, records)
        result = invoke("eval", "--checkpoint", family.plain, "--records", path, "--pareto",
                        "--output", tmp_path / name)  # fmt: skip
        assert result.exit_code == 2, result.output
        text = flat(result.output)
        assert "give the records their costs, or evaluate without --pareto" in text, text
        assert "cost_weight" not in text
    missing = sum(1 for r in some if r.costs is None and r.split in ("train", "test"))
    assert f"{missing} of " in text


@pytest.mark.parametrize(
    ("split", "expected"),
    [("test", "of the train and test splits"), ("train", "of the train split")],
)
def test_eval_pareto_counts_the_records_of_the_splits_it_names(
    tmp_path: Path, split: str, expected: str
) -> None:
    """Without costs the message said "N of N records" for the train and evaluated splits
    only (a reviewer's 480-record file gave "400 of 400"), and with --split train it counted
    each train record twice."""
    records = [r.model_copy(update={"costs": None}) for r in generated_records()]
    sizes = {name: sum(r.split == name for r in records) for name in ("train", "test")}
    assert any(r.split == "validation" for r in records)
    used = sizes["train"] + (sizes["test"] if split == "test" else 0)
    with pytest.raises(ValueError) as raised:
        # refused before the checkpoint is read
        run_pareto_evaluation(tmp_path / "no-checkpoint", records, split, tmp_path / "out")
    message = str(raised.value)
    assert f"{used} of {used} records {expected} have none" in message, message
    assert not (tmp_path / "out").exists()


# --- the reward head: per-worker reward and cost, any cost weight ----------------------------


def blob_case(n_per_blob: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Two well-separated blobs of 8-d features; worker 0 is good on blob A, worker 1 on B."""
    rng = np.random.default_rng(seed)
    centres = np.zeros((2, 8))
    centres[0, 0], centres[1, 1] = 6.0, 6.0
    features = np.vstack([centre + rng.normal(size=(n_per_blob, 8)) for centre in centres])
    rewards = np.vstack(
        [np.tile([0.9, 0.2], (n_per_blob, 1)), np.tile([0.2, 0.9], (n_per_blob, 1))]
    ) + rng.uniform(-0.05, 0.05, size=(2 * n_per_blob, 2))
    return features, rewards


def test_a_cluster_mixture_predicts_each_clusters_mean_reward() -> None:
    features, rewards = blob_case(40, seed=0)
    standardised = (features - features.mean(axis=0)) / features.std(axis=0)
    mixture = fit_cluster_mixture(features, standardised, rewards, 2, seed=0,
                                  assignment_c=1.0, restarts=2)  # fmt: skip
    # sklearn's binary logistic form is turned into a two-row softmax layer
    assert mixture.weight.shape == (2, 8) and mixture.rewards.shape == (2, 2)
    head = RewardCostHead(8, 2, [2])
    head.assign_weight.copy_(torch.from_numpy(mixture.weight).float())
    head.assign_bias.copy_(torch.from_numpy(mixture.bias).float())
    head.cluster_rewards.copy_(torch.from_numpy(mixture.rewards).float())
    new_features, new_rewards = blob_case(10, seed=1)
    new_standardised = (new_features - features.mean(axis=0)) / features.std(axis=0)
    predicted, costs = head(torch.from_numpy(new_standardised).float())
    assert np.abs(predicted.numpy() - new_rewards).max() < 0.1
    assert torch.all(costs == 0)  # no cost model fitted: zero weights

    one = fit_cluster_mixture(features, standardised, rewards, 1, 0, 1.0, 1)
    assert one.rewards == pytest.approx(rewards.mean(axis=0, keepdims=True))
    assert effective_cluster_count(80, n_train=70, n_distinct=70, per=10) == 7
    assert effective_cluster_count(80, n_train=5, n_distinct=5, per=10) == 1
    assert effective_cluster_count(30, n_train=900, n_distinct=12, per=10) == 12


def test_the_cost_model_predicts_in_cost_units_whatever_the_reference_cost() -> None:
    """The ridge is fitted on cost / reference, its weights and bias scaled back by the
    reference. The tests' records cost a worker the same on every prompt (its weights then
    0), so weights left in reference units (predicted costs varying between prompts
    1 / reference times as much as the costs do) passed every test."""
    x = np.linspace(-1.0, 1.0, 21)[:, None]
    costs = np.hstack([100.0 + 50.0 * x, 200.0 - 20.0 * x])
    for reference in (1.0, 150.0):
        weight, bias = fit_cost_model(x, costs, reference, alpha=1e-6)
        np.testing.assert_allclose(x @ weight.T + bias, costs, rtol=1e-4)


def test_the_assignment_and_cost_model_take_their_configured_strengths() -> None:
    """training.assignment_c and training.cost_alpha each passed every test with a fixed
    value in its place (C=1.0 in the assignment, alpha=1.0 in assembled_head): no test fitted
    with two strengths. A weaker L2 (larger C) leaves larger assignment weights; a ridge of
    alpha 1e-6 follows a cost that grows with the feature, one of 1e6 flattens it."""
    import fugu_lite.reward_head_training as training

    features, rewards = blob_case(20, seed=0)
    standardised = (features - features.mean(axis=0)) / features.std(axis=0)
    norms = [
        np.linalg.norm(fit_cluster_mixture(features, standardised, rewards, 2, 0, c, 1).weight)
        for c in (0.01, 10.0)
    ]
    assert norms[0] < norms[1] / 2
    x = np.linspace(-1.0, 1.0, 11)[:, None]
    costs = np.hstack([1.0 + x, np.ones_like(x)])
    table = RewardTable(np.zeros((11, 2)), costs, [None] * 11, [None] * 11,
                        [str(i) for i in range(11)], ["a", "b"])  # fmt: skip
    data = training.FitData(raw=x, standardised=x, table=table)
    member = fit_cluster_mixture(x, x, table.rewards, 1, 0, 1.0, 1)
    slopes = [
        float(training.assembled_head([member], data, 1.0, alpha).cost_weight[0, 0])
        for alpha in (1e-6, 1e6)
    ]
    assert slopes[0] == pytest.approx(1.0, abs=1e-3) and abs(slopes[1]) < 1e-3


def test_the_served_cost_weights_are_0_then_ten_a_decade_from_a_thousandth_to_100() -> None:
    weights = SERVED_COST_WEIGHTS
    assert weights[:3] == (0.0, 0.001, 0.00126) and weights[-1] == 100.0
    assert len(weights) == 1 + 10 * 5 + 1 and list(weights) == sorted(set(weights))


def test_the_reward_head_averages_its_members_and_predicts_no_negative_cost() -> None:
    """Two members on a 1-d feature: one of two clusters (assignment logits x and -x), one
    of a single cluster; the reward is the mean of the members' mixtures, and the linear cost
    model's negative predictions (which would make a dear worker look like a gain) are 0."""
    head = RewardCostHead(1, 2, [2, 1])
    head.assign_weight.copy_(torch.tensor([[1.0], [-1.0], [0.0]]))
    head.cluster_rewards.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]]))
    head.cost_weight.copy_(torch.tensor([[2.0], [-10.0]]))
    head.cost_bias.copy_(torch.tensor([1.0, 1.0]))
    x = math.log(3.0) / 2  # softmax([x, -x]) = [0.75, 0.25]
    rewards, costs = head(torch.tensor([[x], [0.0]]))
    member = [0.75, 0.25]
    expected = [[(member[0] + 0.5) / 2, (member[1] + 0.5) / 2], [0.5, 0.5]]
    torch.testing.assert_close(rewards, torch.tensor(expected))
    torch.testing.assert_close(costs, torch.tensor([[1.0 + 2 * x, 0.0], [1.0, 1.0]]))


def test_the_reward_head_predicts_on_features_standardised_as_in_training() -> None:
    """Its layers are fitted on features standardised by the train mean and spread: a
    prompt below the train mean belongs to the cluster below it, whatever the sign of its
    raw features, and its predicted cost is the cost model's at its standardised value. So
    with a model config of normalize_features false too (a mutation round saw that setting
    taken as it came, no test giving it)."""
    unnormalised = ModelConfig(backbone="tiny-random", normalize_features=False)
    router = CostAwareRouter(unnormalised, ["a", "b"], 1, [2], 1.0, 0.05)
    assert router.model_cfg.normalize_features
    router.fit_normalizer(torch.tensor([[90.0], [110.0]]))  # mean 100, spread 10 * sqrt(2)
    router.head.assign_weight.copy_(torch.tensor([[10.0], [-10.0]]))  # cluster 0: above it
    router.head.cluster_rewards.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0]]))
    router.head.cost_weight.copy_(torch.tensor([[1.0], [0.0]]))
    router.head.cost_bias.copy_(torch.tensor([1.0, 1.0]))
    rewards, costs = router.predict(torch.tensor([[95.0], [105.0]]))
    assert rewards.argmax(dim=-1).tolist() == [1, 0]
    z = 5.0 / (10.0 * math.sqrt(2.0))
    torch.testing.assert_close(costs, torch.tensor([[1.0 - z, 1.0], [1.0 + z, 1.0]]))


def test_a_reward_head_called_like_any_router_routes_at_cost_weight_0() -> None:
    """`head(features)` and `head.probabilities(features)` (the RouterModel interface) are
    the head at cost weight 0: its predicted rewards over the temperature, whatever the
    predicted costs."""
    router = CostAwareRouter(ModelConfig(backbone="tiny-random"), ["a", "b"], 1, [1], 1.0, 0.5)
    router.fit_normalizer(torch.tensor([[-1.0], [1.0]]))
    router.head.cluster_rewards.copy_(torch.tensor([[1.0, 0.5]]))
    router.head.cost_bias.copy_(torch.tensor([1.0, 0.0]))  # a costs 1, b nothing
    features = torch.tensor([[0.0]])
    torch.testing.assert_close(router(features=features), torch.tensor([[2.0, 1.0]]))
    torch.testing.assert_close(
        router.probabilities(features), router.at_cost_weight(0.0).probabilities(features)
    )
    assert router.at_cost_weight(1.0).probabilities(features).argmax().item() == 1


def test_a_reward_head_refuses_an_overflowing_cost_weight_however_it_is_asked() -> None:
    """route and serve check the cost weight before the head; its own utilities, logits_at
    and at_cost_weight (called by evaluation and by code of one's own) check it too, which no
    test read: without their checks a weight of 1e39 gave NaN utilities."""
    router = CostAwareRouter(ModelConfig(backbone="tiny-random"), ["a", "b"], 1, [1], 1.0, 0.5)
    router.fit_normalizer(torch.tensor([[-1.0], [1.0]]))
    router.head.cost_bias.copy_(torch.tensor([1.0, 0.0]))
    features = torch.tensor([[0.0]])
    for asked in (
        lambda: router.utilities(features, 1e39),
        lambda: router.logits_at(features, 1e39),
        lambda: router.at_cost_weight(1e39),
    ):
        with pytest.raises(CostWeightError, match="answers cost weights up to 1,000,000"):
            asked()
    assert torch.isfinite(router.utilities(features, 1e6)).all()


def test_a_cluster_mixture_clusters_prompts_by_the_direction_of_their_features() -> None:
    """k-means runs on unit-length features (cosine geometry): prompts of one kind whose
    features differ only in length are one cluster, however far apart their lengths."""
    lengths = [1.0, 2.0, 50.0, 100.0]
    features = np.array([[m, 0.0] for m in lengths] + [[0.0, m] for m in lengths])
    rewards = np.array([[1.0, 0.0]] * 4 + [[0.0, 1.0]] * 4)
    standardised = (features - features.mean(axis=0)) / features.std(axis=0)
    mixture = fit_cluster_mixture(features, standardised, rewards, 2, seed=0,
                                  assignment_c=1.0, restarts=4)  # fmt: skip
    assert sorted(mixture.rewards.tolist()) == [[0.0, 1.0], [1.0, 0.0]]


def test_distinct_prompts_of_one_direction_are_fitted_as_one_cluster() -> None:
    """Prompts whose features differ only in length are distinct rows (so the cluster count
    allows more than one) but one point on the unit sphere k-means clusters: it finds one
    cluster, which is fitted as the one-cluster mixture (the mean reward), not handed to a
    logistic regression that needs two classes."""
    features = np.array([[1.0, 0.0], [2.0, 0.0], [4.0, 0.0], [8.0, 0.0]])  # unit: [1, 0]
    rewards = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.0, 0.0]])
    standardised = features - features.mean(axis=0)
    mixture = fit_cluster_mixture(features, standardised, rewards, 2, seed=0,
                                  assignment_c=1.0, restarts=2)  # fmt: skip
    assert mixture.weight.shape == (1, 2) and mixture.bias.shape == (1,)
    assert mixture.rewards.tolist() == [[0.5, 0.5]]


def test_a_reward_head_is_fitted_on_the_features_it_routes_on(tmp_path: Path) -> None:
    """The clusterings' assignment and the cost model are fitted on the train features
    standardised as routing standardises them (the head's normaliser): fitted on the raw
    ones, they would be applied at routing to features of another scale."""
    train = [r for r in cost_case_records() if r.split == "train"]
    config = RewardHeadConfig(model=tiny_cfg(tmp_path))
    router, data = start_router(config, train, [CHEAP, PREMIUM], 0.55)
    routed = router.normalize(torch.from_numpy(data.raw).float()).numpy()
    assert not np.allclose(data.raw, routed, atol=1e-3)  # standardising changes them here
    np.testing.assert_allclose(data.standardised, routed, atol=1e-5)


def test_each_clustering_of_a_reward_head_is_seeded_with_its_own_seed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Clustering i seeds k-means with seed + i, as the training report says: with one seed
    for all, the clusterings of one count would be one clustering, an ensemble of copies."""
    import fugu_lite.reward_head_training as training

    seeds: list[tuple[int, int]] = []

    def recorded(raw, standardised, rewards, n_clusters, seed, assignment_c, restarts):
        seeds.append((n_clusters, seed))
        return fit_cluster_mixture(raw, standardised, rewards, 1, seed, assignment_c, restarts)

    monkeypatch.setattr(training, "fit_cluster_mixture", recorded)
    features, rewards = blob_case(10, seed=0)
    n = len(features)
    table = RewardTable(rewards, None, [None] * n, [None] * n, [str(i) for i in range(n)],
                        ["a", "b"])  # fmt: skip
    data = training.FitData(raw=features, standardised=features, table=table)
    settings = RewardHeadTraining(cluster_counts=[2, 3], clusterings_per_count=2, seed=5)
    training.fit_members(data, [2, 2, 3, 3], settings)
    assert seeds == [(2, 5), (2, 6), (3, 7), (3, 8)]


def test_each_clustering_restarts_k_means_as_often_as_configured() -> None:
    """No test fitted with two restart counts (left by stop 40's costmut round, which saw
    training.kmeans_restarts could be ignored unnoticed, as assignment_c could). On 60
    scattered prompts and 6 clusters, 1 and 10 restarts end in other clusterings: each
    member is the one of its configured count."""
    import fugu_lite.reward_head_training as training

    rng = np.random.default_rng(2)
    features, rewards = rng.normal(size=(60, 3)), rng.uniform(size=(60, 2))
    table = RewardTable(rewards, None, [None] * 60, [None] * 60, [str(i) for i in range(60)],
                        ["a", "b"])  # fmt: skip
    data = training.FitData(raw=features, standardised=features, table=table)
    fitted = {
        restarts: training.fit_members(
            data, [6], RewardHeadTraining(cluster_counts=[6], kmeans_restarts=restarts)
        )[0].rewards
        for restarts in (1, 10)
    }
    for restarts, table_fitted in fitted.items():
        expected = fit_cluster_mixture(features, features, rewards, 6, 0, 1.0, restarts)
        np.testing.assert_allclose(table_fitted, expected.rewards)
    assert not np.allclose(fitted[1], fitted[10])


@dataclass
class Head:
    root: Path
    records: list[RewardRecord]
    records_path: Path
    head: Path

    def test_prompts(self) -> list[str]:
        return [r.prompt for r in self.records if r.split == "test"]


@pytest.fixture(scope="module")
def reward_head(tmp_path_factory: pytest.TempPathFactory) -> Head:
    root = tmp_path_factory.mktemp("reward-head")
    records = cost_case_records()
    records_path = root / "records.jsonl"
    write_records(records_path, records)
    config = root / "config.yaml"
    config.write_text(CONFIG.format(cache_dir=root / "cache"), encoding="utf-8")
    output = ok(invoke("train", "reward-head", "--records", records_path, "--config", config,
                       "--output", root / "head"))  # fmt: skip
    assert f"checkpoint written to {root / 'head'}" in flat(output)
    return Head(root, records, records_path, root / "head")


def test_the_reward_head_predicts_rewards_and_costs_and_reports_validation(
    reward_head: Head,
) -> None:
    report = json.loads((reward_head.head / "training_report.json").read_text())
    assert report["stage"] == "reward_head" and report["predicts_costs"] is True
    # the config it was trained with, model and training, as the other stages' reports give
    assert report["config"]["model"]["backbone"] == "tiny-random"
    assert report["config"]["training"]["cluster_counts"] == [30, 50, 80]
    assert report["reference_cost"] == pytest.approx(0.55)  # mean train cost
    n_train = sum(r.split == "train" for r in reward_head.records)
    assert [c["clusters"] for c in report["clusterings"]] == [n_train // 10] * 6
    assert [c["seed"] for c in report["clusterings"]] == [0, 1, 2, 3, 4, 5]  # seed + i
    validation = report["validation"]
    assert validation["reward_at_cost_weight_0"] == pytest.approx(1.0)  # premium every time
    # AIQ is over the single workers' cost range, [0.1, 1]: the head's curve runs there from
    # the cheap worker's reward (all cheap) to the premium one's 1, never below the cheap
    cheap = np.mean([r.rewards[0] for r in reward_head.records if r.split == "validation"])
    assert cheap <= validation["aiq"] <= 1.0

    head = load_reward_head(reward_head.head, worker_ids=[CHEAP, PREMIUM])
    features = head.features_for(reward_head.test_prompts())
    rewards, costs = head.predict(features)
    assert rewards[:, 0].numpy() == pytest.approx(0.85, abs=0.05)
    assert rewards[:, 1].numpy() == pytest.approx(1.0, abs=0.02)
    assert costs.numpy() == pytest.approx(np.tile([0.1, 1.0], (len(features), 1)), abs=0.02)
    # the utility trade: premium until lambda ~ 0.15 * 0.55 / 0.9 ~ 0.09, then cheap
    assert head.utilities(features, 0.0).argmax(dim=1).tolist() == [1] * len(features)
    assert head.utilities(features, 0.5).argmax(dim=1).tolist() == [0] * len(features)
    with pytest.raises(CheckpointError, match="workers: checkpoint"):
        load_reward_head(reward_head.head, worker_ids=[PREMIUM, CHEAP])


def test_the_reward_head_answers_any_cost_weight_through_route(reward_head: Head) -> None:
    prompt = reward_head.test_prompts()[0]
    result = invoke("route", "--checkpoint", reward_head.head, "--cost-weight", "0.37",
                    "--json", prompt)  # fmt: skip
    decision = json.loads(ok(result).strip().splitlines()[-1])
    assert decision["worker"] == CHEAP
    assert decision["cost_weight"] == decision["requested_cost_weight"] == 0.37  # exactly
    assert decision["predicted_rewards"][PREMIUM] == pytest.approx(1.0, abs=0.02)
    assert decision["predicted_costs"][CHEAP] == pytest.approx(0.1, abs=0.02)
    assert decision["probabilities"][CHEAP] > 0.5

    output = flat(ok(invoke("route", "--checkpoint", reward_head.head, prompt)))
    assert "cost weight: 0 (reward head: answered exactly)" in output
    assert "chosen worker: premium" in output and "predicted reward" in output
    output = flat(ok(invoke("route", "--checkpoint", reward_head.head, "--cost-weight", "2",
                            "--exclude", CHEAP, prompt)))  # fmt: skip
    assert "chosen worker: premium" in output
    result = invoke("route", "--checkpoint", reward_head.head, "--cost-weight", "-1", prompt)
    assert result.exit_code == 2 and "finite number >= 0" in flat(result.output)


def test_a_reward_head_routed_without_a_cost_weight_says_none_was_requested(
    reward_head: Head,
) -> None:
    """route --json tells `--cost-weight 0` from no --cost-weight only by its
    requested_cost_weight (0.0 and null; both answer at 0): a reward head's decision echoing
    the weight it used for the one requested passed every test, each of which asked it for
    a weight."""
    prompt = reward_head.test_prompts()[0]
    for asked, requested in (([], None), (["--cost-weight", "0"], 0.0)):
        result = invoke("route", "--checkpoint", reward_head.head, *asked, "--json", prompt)
        decision = json.loads(ok(result).strip().splitlines()[-1])
        assert decision["requested_cost_weight"] == requested, asked
        assert decision["cost_weight"] == 0.0 and decision["worker"] == PREMIUM


def test_the_reward_head_loads_as_a_family_that_routing_and_serving_use(
    reward_head: Head,
) -> None:
    family = load_family_or_single(reward_head.head)
    assert family.kind == "family" and family.reward_head is not None
    assert family.cost_weights == list(SERVED_COST_WEIGHTS)
    assert family.reference_cost == pytest.approx(0.55)
    prompts = reward_head.test_prompts()
    quality = route_with_cost_weight(family, prompts, None)
    assert {d.worker for d in quality} == {PREMIUM} and quality[0].cost_weight == 0.0
    thrifty = route_with_cost_weight(family, prompts, 0.3)
    assert {d.worker for d in thrifty} == {CHEAP} and thrifty[0].cost_weight == 0.3

    # A view at a listed weight computes what the head does at that weight.
    view = family.routers[family.cost_weights.index(1.0)]
    features = view.features_for(prompts)
    expected = family.reward_head.utilities(features, 1.0) / family.reward_head.temperature
    assert torch.allclose(view(features=features), expected)

    # The server's batched routing: the exact requested weight, one backbone pass per batch.
    service = RouterService(family)
    assert service.supports_cost_weight
    requests = [
        RouteRequest([ChatMessage(role="user", content=prompts[0])], (CHEAP, PREMIUM), weight)
        for weight in (None, 0.0, 0.037, 1.0)
    ]
    results = service.route_batch(requests)
    assert [r.ranking[0] for r in results] == [PREMIUM, PREMIUM, PREMIUM, CHEAP]
    assert [r.cost_weight for r in results] == [0.0, 0.0, 0.037, 1.0]
    # 0.037 is not a listed weight: its probabilities are the head's at exactly 0.037.
    exact = torch.softmax(family.reward_head.logits_at(features[:1], 0.037), dim=-1)[0]
    assert results[2].probabilities[CHEAP] == pytest.approx(float(exact[0]), abs=1e-5)


def test_a_batch_mixing_cost_weights_routes_each_request_on_its_own_prompt(
    reward_head: Head,
) -> None:
    """The server routes a batch one member's rows at a time; no test's batch held other
    prompts at other weights, so a member reading the batch's first rows (another request's
    prompt) went unseen."""
    service = RouterService(load_family_or_single(reward_head.head))
    prompts = reward_head.test_prompts()[:3]
    requests = [
        RouteRequest([ChatMessage(role="user", content=prompt)], (CHEAP, PREMIUM), weight)
        for prompt, weight in zip(prompts, (0.0, 0.3, 0.3), strict=True)
    ]
    together = service.route_batch(requests)
    for request, routed in zip(requests, together, strict=True):
        alone = service.route_batch([request])[0]
        assert routed.probabilities == pytest.approx(alone.probabilities, abs=1e-5)


def test_a_reward_head_answers_a_cost_weight_of_minus_zero_as_zero(reward_head: Head) -> None:
    """--cost-weight -0 (or a request's -0.0) passed the >= 0 check and was answered and
    reported as cost weight -0.0 ('cost weight: -0'), where a family reports it as 0."""
    prompt = reward_head.test_prompts()[0]
    result = invoke("route", "--checkpoint", reward_head.head, "--cost-weight", "-0", "--json",
                    prompt)  # fmt: skip
    assert '"cost_weight": 0.0' in ok(result)
    output = flat(ok(invoke("route", "--checkpoint", reward_head.head, "--cost-weight", "-0",
                            prompt)))  # fmt: skip
    assert "cost weight: 0 (reward head" in output
    service = RouterService(load_family_or_single(reward_head.head))
    request = RouteRequest([ChatMessage(role="user", content=prompt)], (CHEAP, PREMIUM), -0.0)
    assert str(service.route_batch([request])[0].cost_weight) == "0.0"


def test_a_reward_head_refuses_a_cost_weight_that_overflows_its_utilities(
    reward_head: Head,
) -> None:
    """A cost weight of 1e39 overflowed the head's float32 utilities: route printed NaN
    probabilities and chose the worker it was told to exclude, and a server request's
    probabilities were NaN."""
    prompt = reward_head.test_prompts()[0]
    result = invoke("route", "--checkpoint", reward_head.head, "--cost-weight", "1e39",
                    "--exclude", CHEAP, prompt)  # fmt: skip
    assert result.exit_code == 2
    assert "answers cost weights up to 1,000,000, got 1e+39" in flat(result.output)
    assert route_checkpoint(reward_head.head, prompt, [CHEAP], 1e6).worker == PREMIUM
    service = RouterService(load_family_or_single(reward_head.head))
    with pytest.raises(ApiError, match="up to 1,000,000") as error:
        service.allowed_workers(None, None, 1e39)
    assert error.value.status == 400 and error.value.param == "cost_weight"
    assert service.allowed_workers(None, None, 1e6) == (CHEAP, PREMIUM)


def test_a_reward_head_copied_without_its_tensors_says_what_is_missing(
    reward_head: Head, tmp_path: Path
) -> None:
    """A reward head copied without reward_head.safetensors (a .gitignore of *.safetensors)
    was called 'not a reward-head checkpoint', where a router missing its tensors is told
    which file was left behind and where to get it."""
    copy = tmp_path / "head"
    copy.mkdir()
    for name in ("reward_head.json", "training_report.json"):
        (copy / name).write_bytes((reward_head.head / name).read_bytes())
    result = invoke("route", "--checkpoint", copy, reward_head.test_prompts()[0])
    assert result.exit_code == 2, result.output
    said = "it holds reward_head.json without reward_head.safetensors, which it was saved with"
    assert said in flat(result.output)
    with pytest.raises(CheckpointError, match=said):  # serve and eval --pareto load it so
        load_family_or_single(copy)


def test_a_reward_head_without_its_metadata_is_said_to_be_one(tmp_path: Path) -> None:
    """A reward head folder holding only reward_head.safetensors (its save stopped before
    reward_head.json was written) was told it 'is not a fugu-lite router checkpoint: it needs
    router_head.safetensors and router.json', where a router missing router.json is told
    which of its own files is missing."""
    head = CostAwareRouter(tiny_cfg(tmp_path), ["a", "b"], 8, [1], 1.0, 0.05)
    directory = head.save_checkpoint(tmp_path / "head")
    (directory / "reward_head.json").unlink()
    said = (
        f"{directory} looks like a reward head whose reward_head.json is missing; it holds "
        "reward_head.safetensors without reward_head.json: the training that saved it was "
        "stopped while writing the checkpoint; run it again (`fugu-lite train reward-head`)"
    )
    result = invoke("route", "--checkpoint", directory, "hello")
    assert result.exit_code == 2, result.output
    assert flat(result.output) == f"error: {said}"
    with pytest.raises(CheckpointError) as error:  # serve and eval load it so
        load_family_or_single(directory)
    assert str(error.value) == said


def test_load_reward_head_on_a_half_saved_head_names_the_command_to_run_once(
    tmp_path: Path,
) -> None:
    """load_reward_head on a reward head whose save stopped before reward_head.json said
    '(written by `fugu-lite train reward-head`)', then 'run it again (`fugu-lite train
    reward-head`)': the command twice in one message."""
    head = CostAwareRouter(tiny_cfg(tmp_path), ["a", "b"], 8, [1], 1.0, 0.05)
    directory = head.save_checkpoint(tmp_path / "head")
    (directory / "reward_head.json").unlink()
    with pytest.raises(CheckpointError) as error:
        load_reward_head(directory)
    said = str(error.value)
    assert said.count("`fugu-lite train reward-head`") == 1, said
    assert said == (
        f"{directory} is not a reward-head checkpoint: it needs reward_head.safetensors and "
        "reward_head.json; it holds reward_head.safetensors without reward_head.json: the "
        "training that saved it was stopped while writing the checkpoint; run it again "
        "(`fugu-lite train reward-head`)"
    )


def test_load_reward_head_on_a_head_without_its_tensors_names_the_command_and_the_copy(
    tmp_path: Path,
) -> None:
    """A head whose reward_head.safetensors was left behind (a copy of the small files
    only) is told which command writes a reward head, and to copy the tensor file."""
    head = CostAwareRouter(tiny_cfg(tmp_path), ["a", "b"], 8, [1], 1.0, 0.05)
    directory = head.save_checkpoint(tmp_path / "head")
    (directory / "reward_head.safetensors").unlink()
    with pytest.raises(CheckpointError) as error:
        load_reward_head(directory)
    assert str(error.value).startswith(
        f"{directory} is not a reward-head checkpoint: it needs reward_head.safetensors and "
        "reward_head.json (written by `fugu-lite train reward-head`); it holds "
        "reward_head.json without reward_head.safetensors, which it was saved with: copy it"
    )


def test_load_reward_head_beside_a_half_saved_router_names_the_command_that_writes_one(
    tmp_path: Path,
) -> None:
    """A folder holding both checkpoints' tensor files without their metadata is told of the
    router's stopped save, which names no reward-head command: the refusal names it."""
    for name in ("router_head.safetensors", "reward_head.safetensors"):
        (tmp_path / name).write_bytes(b"")
    with pytest.raises(CheckpointError) as error:
        load_reward_head(tmp_path)
    said = str(error.value)
    assert said.startswith(
        f"{tmp_path} is not a reward-head checkpoint: it needs reward_head.safetensors and "
        "reward_head.json (written by `fugu-lite train reward-head`); it holds "
        "router_head.safetensors without router.json: the training that saved it was stopped"
    )
    assert said.count("`fugu-lite train reward-head`") == 1, said


def test_load_reward_head_on_another_folder_names_the_command_that_writes_one(
    tmp_path: Path,
) -> None:
    """Where no half-saved reward head names the command, the refusal still says which one
    writes a reward head."""
    with pytest.raises(CheckpointError) as error:
        load_reward_head(tmp_path)
    assert str(error.value) == (
        f"{tmp_path} is not a reward-head checkpoint: it needs reward_head.safetensors and "
        "reward_head.json (written by `fugu-lite train reward-head`)"
    )


def test_eval_pareto_draws_the_reward_heads_curve(reward_head: Head, tmp_path: Path) -> None:
    output = tmp_path / "pareto"
    ok(invoke("eval", "--checkpoint", reward_head.head, "--records", reward_head.records_path,
              "--pareto", "--output", output))  # fmt: skip
    report = json.loads((output / "pareto_report.json").read_text())
    assert report["router_cost_weights"] == list(SERVED_COST_WEIGHTS)
    assert report["baseline_cost_weights"] == list(SERVED_COST_WEIGHTS)
    for curve in report["curves"].values():
        check_curve(curve)
    router_costs = {round(p["mean_cost"], 6) for p in report["curves"]["router"]["points"]}
    assert router_costs == {0.1, 1.0}  # all premium at small lambda, all cheap beyond ~0.09
    result = invoke("eval", "--checkpoint", reward_head.head, "--records",
                    reward_head.records_path)  # fmt: skip
    assert result.exit_code == 2 and "is a reward head" in flat(result.output)


@pytest.mark.parametrize("split", ["train", "validation"])
def test_a_reward_head_names_a_backbone_giving_nan_features(tmp_path: Path, split: str) -> None:
    """A damaged backbone stopped the reward head in k-means ('Input X contains NaN ... use an
    imputer'), naming neither the backbone nor a fix; NaN only on validation prompts went on
    into training_report.json as NaN (which JSON readers refuse). Both now get the other
    stages' error naming the backbone."""
    from safetensors.torch import load_file, save_file
    from transformers import AutoTokenizer

    folder = tmp_path / "bb"
    save_tiny_backbone(folder)
    records = cost_case_records()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    used = {
        token
        for r in records
        if r.split == "train"
        for token in tokenizer(r.prompt_text)["input_ids"]
    }
    damaged = next(token for token in range(3, tokenizer.vocab_size) if token not in used)
    marker = tokenizer.decode([damaged])
    if split == "validation":  # only validation prompts hold the damaged token
        records = [
            r.model_copy(update={"prompt": f"{marker} {r.prompt_text}"})
            if r.split == "validation"
            else r
            for r in records
        ]
    else:
        damaged = None  # every token but the first three
    weights = load_file(folder / "model.safetensors")
    name = next(key for key in weights if "embed_tokens" in key)
    if damaged is None:
        weights[name][3:] = float("nan")
    else:
        weights[name][damaged] = float("nan")
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    cfg = tiny_cfg(tmp_path).model_copy(update={"backbone": str(folder), "runtime": "torch"})
    with pytest.raises(ValueError) as raised:
        train_reward_head(records, RewardHeadConfig(model=cfg), tmp_path / "out")
    message = str(raised.value)
    assert message.startswith(f"the backbone {folder} gives NaN or infinite features for ")
    assert f"{split} prompts (the first: " in message
    assert not (tmp_path / "out" / "training_report.json").exists()


def test_a_reward_head_on_free_workers_names_its_own_setting(tmp_path: Path) -> None:
    """Every train cost 0 (a pool without prices): the advice was to 'leave cost_weight at
    0', which a reward head does not have."""
    records = [r.model_copy(update={"costs": [0.0, 0.0]}) for r in cost_case_records()]
    config = RewardHeadConfig(model=tiny_cfg(tmp_path))
    with pytest.raises(ValueError, match="every train cost is 0") as error:
        train_reward_head(records, config, tmp_path / "head")
    assert "set training.reference_cost" in str(error.value)
    assert "cost_weight at 0" not in str(error.value)
    config.training.reference_cost = 1.0
    report = train_reward_head(records, config, tmp_path / "head")
    assert report["reference_cost"] == 1.0
    # strict JSON: no NaN for the relative cost error of free workers
    written = (tmp_path / "head" / "training_report.json").read_text()
    json.loads(written, parse_constant=lambda name: pytest.fail(f"{name} in the report"))
    assert report["validation"]["cost_mean_abs_relative_error"] is None


def test_the_validation_cost_error_is_relative_to_the_mean_cost(tmp_path: Path) -> None:
    """cost_mean_abs_relative_error divides the mean absolute cost error by the validation
    records' mean cost (not, say, their largest): costs that vary from prompt to prompt,
    which no feature predicts, leave an error to divide."""
    rng = random.Random(1)
    records = [
        r.model_copy(update={"costs": [rng.uniform(0.05, 0.15), rng.uniform(0.5, 1.5)]})
        for r in cost_case_records()
    ]
    report = train_reward_head(records, RewardHeadConfig(model=tiny_cfg(tmp_path)), tmp_path / "h")
    head = load_reward_head(tmp_path / "h", worker_ids=[CHEAP, PREMIUM])
    checked = [r for r in records if r.split == "validation"]
    with torch.inference_mode():
        _, predicted = head.predict(head.features_for([r.prompt for r in checked]))
    actual = np.array([r.costs for r in checked])
    error = np.abs(predicted.numpy() - actual).mean()
    assert error > 0.01
    assert report["validation"]["cost_mean_abs_relative_error"] == pytest.approx(
        error / actual.mean(), rel=1e-4
    )


def test_the_validation_aiq_spans_the_single_workers_costs_not_the_heads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """training_report.json's validation AIQ is over the single workers' mean costs: taken
    over the head's own points (their dearest for the top) it passed every test, whose head
    at cost weight 0 always paid the dearest worker's price. Here a costs 10 on p1 and 0 on
    p2 (mean 5), b 1 on each; a hand-set head, knowing rewards and costs, takes a then b at
    small weights (cost 5.5, reward 1), b twice above 1/9 (1, 0.5), b then a above 1 (0.5,
    0). Its hull over [1, 5] is 0.5 + (c - 1) / 9: mean 0.5 + 2 / 9 (over [1, 5.5]: 0.75)."""
    router = CostAwareRouter(ModelConfig(backbone="tiny-random"), ["a", "b"], 1, [2], 1.0, 0.05)
    router.head.assign_weight.copy_(torch.tensor([[50.0], [-50.0]]))  # p1 (+1) -> cluster 0
    router.head.cluster_rewards.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0]]))
    router.head.cost_weight.copy_(torch.tensor([[5.0], [0.0]]))  # a: 5 + 5 x feature
    router.head.cost_bias.copy_(torch.tensor([5.0, 1.0]))
    features = torch.tensor([[1.0], [-1.0]])
    monkeypatch.setattr(router, "features_for", lambda prompts: features)
    records = [
        cost_record("validation", [1.0, 0.0], [10.0, 1.0], "p1"),
        cost_record("validation", [0.0, 1.0], [0.0, 1.0], "p2"),
    ]
    summary = validation_summary(router, records)
    assert summary is not None and summary["reward_at_cost_weight_0"] == pytest.approx(1.0)
    assert summary["aiq"] == pytest.approx(0.5 + 2 / 9)


def test_the_validation_aiq_is_at_the_lowest_reward_below_the_heads_cheapest_point(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Below the head's cheapest point the validation AIQ counts the lowest reward (rewards
    going below 0), as eval --pareto does: 0 in its place passed every test, whose rewards
    were all >= 0. a (cost 1, reward -1), b (2, 0), c (3, 0.5); a hand-set head that thinks
    a worst and dearest asks c at cost weight 0 and b above 0.5, never a: over [1, 3] its
    hull is -1 on [1, 2] then 0 -> 0.5 on [2, 3], a mean of (-1 + 0.25) / 2 (with 0: 0.125)."""
    router = CostAwareRouter(ModelConfig(backbone="tiny-random"), ["a", "b", "c"], 1, [1], 1.0,
                             0.05)  # fmt: skip
    router.head.cluster_rewards.copy_(torch.tensor([[-5.0, 0.0, 0.5]]))
    router.head.cost_bias.copy_(torch.tensor([5.0, 2.0, 3.0]))
    monkeypatch.setattr(router, "features_for", lambda prompts: torch.zeros(len(prompts), 1))
    records = [
        RewardRecord(prompt=f"p{i}", split="validation", worker_ids=["a", "b", "c"],
                     rewards=[-1.0, 0.0, 0.5], costs=[1.0, 2.0, 3.0], id=f"p{i}")
        for i in range(2)
    ]  # fmt: skip
    summary = validation_summary(router, records)
    assert summary is not None and summary["reward_at_cost_weight_0"] == pytest.approx(0.5)
    assert summary["aiq"] == pytest.approx((-1.0 + 0.25) / 2)


def test_a_reward_head_stopped_after_its_checkpoint_leaves_no_earlier_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Training a reward head into its folder again kept the earlier run's
    training_report.json until the new one was written: stopped in between (Ctrl-C, a kill),
    the folder held the new head beside a report of another head (its clusterings, its
    validation); as for the other stages, the old report now goes before the checkpoint."""
    records = cost_case_records()
    folder = tmp_path / "head"
    train_reward_head(records, RewardHeadConfig(model=tiny_cfg(tmp_path)), folder)
    assert (folder / "training_report.json").is_file()
    saving = CostAwareRouter.save_checkpoint

    def save_then_stop(self: CostAwareRouter, directory: Path, metadata: dict) -> Path:
        saving(self, directory, metadata)
        raise KeyboardInterrupt

    monkeypatch.setattr(CostAwareRouter, "save_checkpoint", save_then_stop)
    other = RewardHeadConfig(
        model=tiny_cfg(tmp_path), training=RewardHeadTraining(cluster_counts=[2])
    )
    with pytest.raises(KeyboardInterrupt):
        train_reward_head(records, other, folder)
    assert load_reward_head(folder).head.group_sizes == [2, 2]  # the new head is there
    assert not (folder / "training_report.json").exists()


def test_a_checkpoint_saved_over_another_kind_replaces_it(tmp_path: Path) -> None:
    """`train es -o X` over a reward head in X left reward_head.json beside the new
    router.json, and route/serve/eval kept loading the old reward head, not the new router;
    a reward head saved over a router left the router's files, which `--checkpoint X` read."""
    records = cost_case_records()
    config = RewardHeadConfig(model=tiny_cfg(tmp_path))
    es = ESConfig(
        model=tiny_cfg(tmp_path),
        training=ESTrainingConfig(population_size=4, iterations=2, batch_size=16, samples=0),
    )
    folder = tmp_path / "x"
    train_reward_head(records, config, folder)
    train_es(records, es, folder)
    assert not is_reward_head(folder)
    family = load_family_or_single(folder)
    assert family.reward_head is None and family.kind == "single"
    assert load_router(folder).worker_ids == [CHEAP, PREMIUM]

    train_reward_head(records, config, folder)
    assert load_family_or_single(folder).reward_head is not None
    assert sorted(path.name for path in folder.glob("router*")) == []


def test_training_a_reward_head_again_removes_its_old_pareto_report(tmp_path: Path) -> None:
    """`eval --pareto` writes HEAD/pareto-SPLIT; training the head again into that folder
    left the report of the earlier head beside the new one."""
    config = RewardHeadConfig(model=tiny_cfg(tmp_path))
    train_reward_head(cost_case_records(), config, tmp_path / "head")
    report = tmp_path / "head" / "pareto-test"
    report.mkdir()
    (report / "pareto_report.json").write_text("{}")
    (report / "cost_quality.png").write_bytes(b"png")
    train_reward_head(cost_case_records(), config, tmp_path / "head")
    assert not report.exists()


def test_a_reward_head_without_costs_serves_cost_weight_zero_only(tmp_path: Path) -> None:
    records = [r.model_copy(update={"costs": None}) for r in cost_case_records()]
    config = RewardHeadConfig(model=tiny_cfg(tmp_path))
    report = train_reward_head(records, config, tmp_path / "head")
    assert report["predicts_costs"] is False and report["reference_cost"] is None
    # which records lack costs, and what to do: it was 'some ... records have no costs'
    first = next(r for r in records if r.split != "test")
    assert f"the first is record id={first.id!r} ({first.split} split" in report["warnings"][0]
    assert "give those records their costs" in report["warnings"][0]
    assert "aiq" not in report["validation"]
    family = load_family_or_single(tmp_path / "head")
    assert family.kind == "single" and family.cost_weights == [0.0]
    prompt = next(r.prompt for r in records if r.split == "test")
    decision = route_checkpoint(tmp_path / "head", prompt)
    assert decision.worker == PREMIUM
    assert isinstance(decision, CostRoutingDecision)
    assert decision.predicted_rewards is not None and decision.predicted_costs is None
    excluded_twice = route_checkpoint(tmp_path / "head", prompt, [PREMIUM, PREMIUM])
    assert excluded_twice.worker == CHEAP and excluded_twice.excluded == [PREMIUM]
    with pytest.raises(CostWeightError, match="trained on records without costs"):
        route_checkpoint(tmp_path / "head", prompt, cost_weight=0.5)
    service = RouterService(family)
    with pytest.raises(ApiError, match="reward head was trained on records without costs"):
        service.allowed_workers(None, None, 0.5)
    assert service.allowed_workers(None, None, None) == (CHEAP, PREMIUM)


def test_a_reward_head_reports_why_it_cannot_choose_like_the_other_stages(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Train records whose workers all tie (or without costs) made SFT/RL/ES warn and list
    the warnings in training_report.json; the reward head said nothing of the ties and
    left its no-costs warning out of the report."""
    tied = [
        r.model_copy(update={"rewards": [0.5, 0.5], "costs": None}) for r in cost_case_records()
    ]
    report = train_reward_head(tied, RewardHeadConfig(model=tiny_cfg(tmp_path)), tmp_path / "h")
    assert len(report["warnings"]) == 2
    assert (
        "a cost-aware head needs per-worker costs, but 69 of 69 train and validation "
        in (report["warnings"][0])
    )
    assert "gives all workers the same reward" in report["warnings"][1]
    written = json.loads((tmp_path / "h" / "training_report.json").read_text())
    assert written["warnings"] == report["warnings"]
    assert "nothing to learn" in flat(capsys.readouterr().err)
    assert "chooses by predicted cost" not in report["warnings"][1]  # it predicts no costs
    priced = [r.model_copy(update={"rewards": [0.5, 0.5]}) for r in cost_case_records()]
    report = train_reward_head(priced, RewardHeadConfig(model=tiny_cfg(tmp_path)), tmp_path / "p")
    assert (
        len(report["warnings"]) == 1
        and "gives all workers the same reward" in (report["warnings"][0])
    )
    assert "above it the head chooses by predicted cost" in report["warnings"][0]
    fine = train_reward_head(cost_case_records(), RewardHeadConfig(model=tiny_cfg(tmp_path)),
                             tmp_path / "fine")  # fmt: skip
    assert fine["warnings"] == []


def test_the_reward_heads_tie_warning_adds_the_cost_weight_note_to_ties_only(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The note that predicted costs still choose above cost weight 0 belongs to a train
    split whose workers tie, with costs: not to records of one worker (the router can only
    ever choose it, at any weight) nor to one train prompt (nothing to choose between)."""
    records = cost_case_records(12)
    one_worker = [
        r.model_copy(update={"worker_ids": [CHEAP], "rewards": [0.5], "costs": [0.1]})
        for r in records
    ]
    train = [r for r in one_worker if r.split == "train"]
    warned, has_costs = head_warnings(one_worker, train, [CHEAP])
    assert has_costs and len(warned) == 1 and "the records have one worker" in warned[0]
    assert "chooses by predicted cost" not in warned[0]
    one_prompt = [r for r in records if r.split != "train"] + [
        next(r for r in records if r.split == "train")
    ]
    train = [r for r in one_prompt if r.split == "train"]
    warned, _ = head_warnings(one_prompt, train, [CHEAP, PREMIUM])
    assert len(warned) == 1 and "the train split has one prompt" in warned[0]
    assert "chooses by predicted cost" not in warned[0]
    tied = [r.model_copy(update={"rewards": [0.5, 0.5]}) for r in records]
    train = [r for r in tied if r.split == "train"]
    warned, _ = head_warnings(tied, train, [CHEAP, PREMIUM])
    assert len(warned) == 1 and "above it the head chooses by predicted cost" in warned[0]
    said = flat(capsys.readouterr().err)
    assert said.count("warning: reward head:") == 3


def test_the_fewer_clusters_note_names_the_count_the_train_split_allows() -> None:
    """No note when every count is fitted as asked; otherwise the most the split allows:
    its prompts / min_cluster_prompts, but no more than its distinct rows, and at least 1."""
    assert fewer_clusters_note([3, 5], [3, 5], 100, 100, 10) is None
    by_distinct = fewer_clusters_note([8], [4], 100, 4, 10)
    assert by_distinct is not None
    assert "(8 -> 4): the 100 train prompts (4 distinct) allow at most 4 " in by_distinct
    too_few = fewer_clusters_note([2], [1], 5, 5, 10)
    assert too_few is not None and "the 5 train prompts (5 distinct) allow at most 1 " in too_few


def test_a_reward_head_says_when_it_fits_fewer_clusters_than_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """cluster_counts larger than the train split allows were lowered without a word, and the
    report gave the fitted counts only, so a user could not tell their setting was ignored."""
    records = cost_case_records()
    n_train = sum(r.split == "train" for r in records)
    settings = RewardHeadTraining(cluster_counts=[500, 3], clusterings_per_count=1,
                                  min_cluster_prompts=10)  # fmt: skip
    config = RewardHeadConfig(model=tiny_cfg(tmp_path), training=settings)
    report = train_reward_head(records, config, tmp_path / "h")
    assert [c["requested"] for c in report["clusterings"]] == [500, 3]
    assert [c["clusters"] for c in report["clusterings"]] == [n_train // 10, 3]
    said = flat(capsys.readouterr().err)
    assert f"fewer clusters than training.cluster_counts asks for (500 -> {n_train // 10})" in said
    assert f"the {n_train} train prompts" in said and "min_cluster_prompts=10" in said
    assert "3 ->" not in said


def test_a_reward_heads_validation_figures_are_those_of_its_own_predictions(
    tmp_path: Path,
) -> None:
    """On rewards the head cannot learn (random), its validation reward is that of the
    workers it chooses (below the oracle's), and its error that of its predicted rewards."""
    rng = random.Random(1)
    records = [
        record.model_copy(update={"rewards": [rng.random(), rng.random()]})
        for record in cost_case_records()
    ]
    settings = RewardHeadTraining(cluster_counts=[3], clusterings_per_count=1,
                                  min_cluster_prompts=5, temperature=0.2)  # fmt: skip
    config = RewardHeadConfig(model=tiny_cfg(tmp_path), training=settings)
    validation = train_reward_head(records, config, tmp_path / "h")["validation"]
    head = load_reward_head(tmp_path / "h")
    assert head.temperature == 0.2  # its routing probabilities' setting, not the default
    held_out = [record for record in records if record.split == "validation"]
    predicted, _ = head.predict(head.features_for([record.prompt for record in held_out]))
    rewards = torch.tensor([record.rewards for record in held_out])
    chosen = rewards.gather(1, predicted.argmax(dim=1, keepdim=True)).mean()
    assert validation["reward_at_cost_weight_0"] == pytest.approx(float(chosen), abs=1e-6)
    assert validation["reward_at_cost_weight_0"] < float(rewards.max(dim=1).values.mean())
    error = (predicted.detach() - rewards).abs().mean()
    assert validation["reward_mean_abs_error"] == pytest.approx(float(error), abs=1e-5)
    # the assignment was fitted on features standardised by the train split's statistics
    train = head.features_for([record.prompt for record in records if record.split == "train"])
    torch.testing.assert_close(head.feature_mean, train.mean(dim=0))
    torch.testing.assert_close(head.feature_scale, train.std(dim=0).clamp(min=1e-4))


def test_a_served_reward_heads_fallbacks_follow_utility_at_a_large_cost_weight(
    tmp_path: Path,
) -> None:
    """At cost weight 100 every worker but the cheapest got probability exactly 0 (their
    utility / temperature underflowed the softmax), so the server's fallback ranking put
    them in the pool's order: the dearest worker before the middle one."""
    workers = ["premium", "middle", "cheap"]
    update = {"worker_ids": workers, "rewards": [1.0, 0.95, 0.9], "costs": [1.0, 0.3, 0.01]}
    records = [r.model_copy(update=update) for r in cost_case_records()]
    train_reward_head(records, RewardHeadConfig(model=tiny_cfg(tmp_path)), tmp_path / "head")
    service = RouterService(load_family_or_single(tmp_path / "head"))
    prompt = [ChatMessage(role="user", content=records[0].prompt)]
    results = service.route_batch(
        [RouteRequest(prompt, tuple(workers), weight) for weight in (0.0, 100.0)]
    )
    assert results[0].ranking == ["premium", "middle", "cheap"]
    assert results[1].probabilities["middle"] == 0.0  # underflowed, as the report said
    assert results[1].ranking == ["cheap", "middle", "premium"]
    excluded = service.route_batch([RouteRequest(prompt, ("premium", "middle"), 100.0)])
    assert excluded[0].ranking == ["middle", "premium"]


def test_a_reward_head_needs_costs_on_its_train_and_validation_records_only(
    tmp_path: Path,
) -> None:
    """Test records without costs (evaluation's, which needs none for a plain eval) made
    the head predict no costs at all, though it fits and validates on the other splits."""
    records = [
        r.model_copy(update={"costs": None}) if r.split == "test" else r
        for r in cost_case_records()
    ]
    report = train_reward_head(records, RewardHeadConfig(model=tiny_cfg(tmp_path)), tmp_path / "h")
    assert report["predicts_costs"] is True and report["reference_cost"] == pytest.approx(0.55)
    family = load_family_or_single(tmp_path / "h")
    prompt = next(r.prompt for r in records if r.split == "test")
    assert route_with_cost_weight(family, [prompt], 1.0)[0].worker == CHEAP


def test_a_reward_head_whose_validation_records_lack_costs_is_fitted_without_a_cost_model(
    tmp_path: Path,
) -> None:
    """Train records with costs but validation ones without: the head has no reference cost,
    so it fits no cost model on the train costs (which divides them by that reference) and
    serves cost weight 0 only, with a warning naming the records that lack costs."""
    records = [
        r.model_copy(update={"costs": None}) if r.split == "validation" else r
        for r in cost_case_records()
    ]
    report = train_reward_head(records, RewardHeadConfig(model=tiny_cfg(tmp_path)), tmp_path / "h")
    assert report["predicts_costs"] is False and report["reference_cost"] is None
    assert any("validation" in warning for warning in report["warnings"]), report["warnings"]
    head = load_reward_head(tmp_path / "h")
    assert torch.all(head.head.cost_weight == 0) and torch.all(head.head.cost_bias == 0)


def test_a_reward_head_loads_in_eval_mode_and_its_view_passes_on_the_mode_asked(
    tmp_path: Path,
) -> None:
    """A loaded head routes in eval mode (a backbone's dropout would make its features
    random), and a cost-weight view's train(mode) sets that mode on its router: no test read
    either (a mutation round dropped load_reward_head's eval() and passed `True` for `mode`)."""
    saved = CostAwareRouter(tiny_cfg(tmp_path), ["a", "b"], 8, [1], 1.0, 0.05)
    loaded = load_reward_head(saved.train().save_checkpoint(tmp_path / "head"))
    assert not loaded.training
    view = loaded.at_cost_weight(0.5)
    assert view.train() is view and loaded.training
    assert view.train(False) is view and not loaded.training
    view.train()
    assert view.eval() is view and not loaded.training


def test_damaged_reward_heads_and_bad_settings_are_refused(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="is not a reward-head checkpoint"):
        load_reward_head(tmp_path)
    (tmp_path / "reward_head.safetensors").write_bytes(b"")
    (tmp_path / "reward_head.json").write_text('{"format": "fugu-lite-reward-head"}')
    lacks = "lacks ['worker_ids', 'feature_dim', 'backbone_parameters', 'model']"
    with pytest.raises(CheckpointError, match=re.escape(lacks)):
        load_reward_head(tmp_path)
    with pytest.raises(ValueError, match="each cluster count must be >= 1"):
        RewardHeadTraining(cluster_counts=[30, 0])
    svf = tiny_cfg(tmp_path).model_copy(update={"svf_targets": ["layers.0.mlp.down_proj"]})
    with pytest.raises(ValueError, match="cannot use SVF"):
        CostAwareRouter(svf, [CHEAP, PREMIUM], 8, [1], 0.5, 0.05)
    result = invoke("train", "reward-head", "--records", tmp_path / "none.jsonl", "--output",
                    tmp_path / "out", "--set", "training.clusters=3")  # fmt: skip
    assert result.exit_code == 2 and "unknown key 'training.clusters'" in flat(result.output)
    result = invoke("train", "reward-head", "--records", tmp_path / "none.jsonl", "--output",
                    tmp_path / "out", "--set", "training.cluster_counts=[30,0]")  # fmt: skip
    said = flat(result.output)  # the value once: the message said 'got [30, 0] (got [30, 0])'
    assert result.exit_code == 2 and said.count("[30, 0]") == 1
    assert "--set training.cluster_counts: each cluster count must be >= 1" in said


@pytest.mark.parametrize(
    ("key", "value", "said"),
    [
        ("worker_ids", "ab", "worker_ids: Input should be a valid list"),
        ("reference_cost", -1.0, "reference_cost: Input should be greater than 0"),
        ("temperature", "x", "temperature: Input should be a valid number"),
        ("group_sizes", [], "group_sizes: List should have at least 1 item"),
        # they still sum to the saved head's 1 row: [1, 0] halved every predicted reward,
        # [2, -1] loaded and then failed every request
        ("group_sizes", [1, 0], "group_sizes.1: Input should be greater than or equal to 1"),
        ("group_sizes", [2, -1], "group_sizes.1: Input should be greater than or equal to 1"),
        # Infinity: every cost weight routed as 0 did, or every prompt to the first worker
        ("reference_cost", float("inf"), "reference_cost: Input should be a finite number"),
        ("temperature", float("inf"), "temperature: Input should be a finite number"),
        # 0 divides every utility: NaN probabilities (no test gave it: gt=0 made ge=0 passed)
        ("temperature", 0.0, "temperature: Input should be greater than 0"),
    ],
)
def test_a_reward_head_metadata_key_of_the_wrong_type_is_refused(
    tmp_path: Path, key: str, value: object, said: str
) -> None:
    """reward_head.json's worker_ids "ab" loaded a head of the workers a and b, and a
    negative reference_cost one whose cost weight favoured the dearest workers."""
    head = CostAwareRouter(tiny_cfg(tmp_path), [CHEAP, PREMIUM], 8, [1], 0.5, 0.05)
    directory = head.save_checkpoint(tmp_path / "head")
    meta = json.loads((directory / "reward_head.json").read_text())
    meta[key] = value
    (directory / "reward_head.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError) as error:
        load_reward_head(directory)
    assert str(error.value).startswith(f"{directory / 'reward_head.json'} is damaged ({said}")
    assert str(error.value).endswith("); retrain with `fugu-lite train reward-head`")


def test_a_reward_head_whose_tensor_file_lacks_a_tensor_is_refused(tmp_path: Path) -> None:
    """A tensor file of another layout (a tensor left out, its digest written with it) loaded
    the missing tensor as zeros unnoticed when the load was made lenient (a mutation round)."""
    from safetensors.torch import load_file, save_file

    from fugu_lite.checkpoint import TENSOR_DIGEST_KEY, file_digest, tensor_file_metadata

    head = CostAwareRouter(tiny_cfg(tmp_path), [CHEAP, PREMIUM], 8, [1], 0.5, 0.05)
    directory = head.save_checkpoint(tmp_path / "head")
    tensors = load_file(directory / "reward_head.safetensors")
    del tensors["head.cost_bias"]
    save_file(tensors, directory / "reward_head.safetensors",
              metadata=tensor_file_metadata([CHEAP, PREMIUM]))  # fmt: skip
    meta = json.loads((directory / "reward_head.json").read_text())
    meta[TENSOR_DIGEST_KEY] = file_digest(directory / "reward_head.safetensors")
    (directory / "reward_head.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match=r"(?s)does not fit its metadata: .*head\.cost_bias"):
        load_reward_head(directory)


def test_a_reward_head_json_without_its_format_tag_is_refused(tmp_path: Path) -> None:
    """Unlike the earliest routers' router.json, every reward_head.json was written with its
    format tag: one without it is another file renamed, not a head (a mutation round saw an
    untagged one load as a head and no test notice)."""
    head = CostAwareRouter(tiny_cfg(tmp_path), [CHEAP, PREMIUM], 8, [1], 0.5, 0.05)
    directory = head.save_checkpoint(tmp_path / "head")
    meta = json.loads((directory / "reward_head.json").read_text())
    del meta["format"]
    (directory / "reward_head.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="is tagged format None, not 'fugu-lite-reward-head'"):
        load_reward_head(directory)


@pytest.mark.parametrize("key", ["model", "worker_ids", "feature_dim", "backbone_parameters"])
def test_a_reward_head_metadata_lacking_a_key_names_the_key(tmp_path: Path, key: str) -> None:
    """reward_head.json without its `model` was said 'is damaged ('model')': a KeyError's
    repr, naming no missing key; a router's router.json says what it lacks."""
    head = CostAwareRouter(tiny_cfg(tmp_path), [CHEAP, PREMIUM], 8, [1], 0.5, 0.05)
    directory = head.save_checkpoint(tmp_path / "head")
    meta = json.loads((directory / "reward_head.json").read_text())
    del meta[key]
    (directory / "reward_head.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError) as error:
        load_reward_head(directory)
    assert str(error.value) == (
        f"{directory / 'reward_head.json'} lacks [{key!r}]; retrain with `fugu-lite train "
        "reward-head`"
    )


def test_a_reward_head_on_a_backbone_folder_updated_in_place_is_refused_by_route(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FUGU_LITE_CACHE_DIR", str(tmp_path / "fugu-cache"))
    save_tiny_backbone(tmp_path / "bb", seed=0)
    records = cost_case_records()
    cfg = tiny_cfg(tmp_path).model_copy(update={"backbone": str(tmp_path / "bb")})
    train_reward_head(records, RewardHeadConfig(model=cfg), tmp_path / "head")
    prompt = next(r.prompt for r in records if r.split == "test")
    ok(invoke("route", "--checkpoint", tmp_path / "head", prompt))
    save_tiny_backbone(tmp_path / "bb", seed=1)  # other weights, same architecture
    result = invoke("route", "--checkpoint", tmp_path / "head", prompt)
    assert result.exit_code != 0
    message = flat(result.output)
    assert f"but {tmp_path / 'bb'} now has weights of SHA-256" in message
    assert "--backbone PATH" in message


def test_a_reward_head_seed_numpy_cannot_take_is_refused_naming_its_key(tmp_path: Path) -> None:
    """`training.seed: -1` (or one near 2**32, which each clustering's seed + its index takes
    past it) passed the reward head's config and stopped the run in k-means, naming no key."""
    path = tmp_path / "head.yaml"
    counts = "  cluster_counts: [2, 3]\n  clusterings_per_count: 2\n"  # 4 clusterings
    for seed in (-1, MAX_SEED + 1):
        path.write_text(f"training:\n{counts}  seed: {seed}\n")
        with pytest.raises(ConfigError) as error:
            load_stage_config(path, RewardHeadConfig, "reward_head")
        assert "  training.seed: Input should be " in str(error.value)
        assert f"(got {seed})" in str(error.value)
    path.write_text(f"training:\n{counts}  seed: {MAX_SEED - 2}\n")
    with pytest.raises(ConfigError) as error:
        load_stage_config(path, RewardHeadConfig, "reward_head")
    assert f"use a seed <= {MAX_SEED - 3}" in str(error.value)
    path.write_text(f"training:\n{counts}  seed: {MAX_SEED - 3}\n")
    settings = load_stage_config(path, RewardHeadConfig, "reward_head").training
    for index in range(4):  # the seed each clustering gives k-means, which numpy takes
        np.random.RandomState(settings.seed + index)


def test_the_cost_weights_help_names_their_limit() -> None:
    """`train pipeline --help` gave --cost-weights with no range, though a weight above
    MAX_COST_WEIGHT (or below 0) is refused; the help names both bounds."""
    shown = CliRunner().invoke(app, ["train", "pipeline", "--help"], terminal_width=200)
    assert shown.exit_code == 0
    said = " ".join(shown.output.split())
    assert f"0,0.25,0.5,1 (each >= 0, at most {MAX_COST_WEIGHT:,.0f})" in said


@pytest.mark.parametrize("config_type", [SFTTrainingConfig, RLTrainingConfig, ESTrainingConfig])
def test_a_cost_weight_that_overflows_the_weighted_rewards_is_refused(
    config_type: type[CostAware], tmp_path: Path
) -> None:
    """cost_weight=1e39 (or a family's --cost-weights 0,1e39) made every weighted reward
    -inf in float32: `train es` ran every generation at fitness -inf, said 'no generation
    beat the starting point' and wrote a checkpoint; now the cost weight is refused."""
    with pytest.raises(ValueError, match="less than or equal to 1000000"):
        config_type(cost_weight=1e39)
    assert config_type(cost_weight=1e6).cost_weight == 1e6
    with pytest.raises(ValueError, match=r"at most 1,000,000 .*, got \[1e\+39\]"):
        parse_cost_weights("0,1e39")
    output = tmp_path / "es"
    result = invoke("train", "es", "-r", tmp_path / "records.jsonl", "-o", output,
                    "--set", "training.cost_weight=1e39")  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "--set training.cost_weight: Input should be less than or equal to 1000000" in flat(
        result.output
    )
    assert not output.exists()


def test_a_record_without_costs_or_id_is_not_named_by_a_wrong_number() -> None:
    """A train record without costs (nor an id) was named 'record number 4': its place among
    the train and validation records, not in the file, where test records came before it (it
    was the file's 6th); the message now names it by its split and prompt only."""
    records = [
        cost_record("test", [1.0, 0.0], None, "t1"),
        cost_record("test", [1.0, 0.0], None, "t2"),
        cost_record("train", [1.0, 0.0], [1.0, 2.0], "a"),
        cost_record("validation", [0.0, 1.0], [1.0, 2.0], "b"),
        cost_record("train", [0.0, 1.0], [1.0, 2.0], "c"),
        cost_record("train", [1.0, 0.0], None, "d"),
    ]
    records = [record.model_copy(update={"id": None}) for record in records]
    with pytest.raises(ValueError) as refused:
        apply_cost_weight(training_records(records), CostAware(cost_weight=0.5))
    message = str(refused.value)
    assert "number" not in message
    assert (
        f"it is a record without an id (train split, prompt {records[5].prompt_text!r})" in message
    )


def test_one_record_without_costs_is_said_as_one() -> None:
    """One record of four without costs was said '1 of 4 records ... have none, the first
    is ...'."""
    records = [
        cost_record("train", [1.0, 0.0], [1.0, 2.0], "a"),
        cost_record("train", [0.0, 1.0], None, "b"),
        cost_record("validation", [0.0, 1.0], [1.0, 2.0], "c"),
        cost_record("validation", [1.0, 0.0], None, "d"),
    ]
    settings = CostAware(cost_weight=0.5)
    with pytest.raises(ValueError, match="1 of 4 records of the train and validation splits has"):
        apply_cost_weight([*records[:3], records[2]], settings)
    with pytest.raises(ValueError, match="has none, it is record id='b'"):
        apply_cost_weight([*records[:3], records[2]], settings)
    with pytest.raises(ValueError, match="2 of 4 records of the train and validation splits have"):
        apply_cost_weight(records, settings)
    with pytest.raises(ValueError, match="have none, the first is record id='b'"):
        apply_cost_weight(records, settings)
