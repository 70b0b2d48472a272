"""Cost-aware routing: cost-weighted rewards, and a family of routers over cost weights.

Training with a cost weight lambda replaces every reward by

    reward' = reward - lambda * cost / reference_cost

where `reference_cost` defaults to the mean cost over the train split's cells (every
train prompt x every worker), so lambda = 1 charges one reward point for a worker of
average cost. A router family is one router per lambda, trained on the same cached
features, with a manifest (`router_family.json`) naming each member; a request may then
ask for its own lambda and gets the head trained for the nearest one.

A reward head (`reward_head.py`, `fugu-lite train reward-head`) is the other kind of
cost-aware checkpoint: one head predicting per-worker reward and cost, so any lambda is
answered exactly. `load_family_or_single` loads it as a family whose members are views
of that head at `SERVED_COST_WEIGHTS` (what `eval --pareto` sweeps), with
`RouterFamily.reward_head` set; `route_with_cost_weight` and the server then use the exact
lambda.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal

from pydantic import BaseModel, Field, ValidationError

from . import __version__
from .atomic_files import remove_files
from .checkpoint import CheckpointError, read_checkpoint_metadata
from .config import CostAware, PipelineConfig
from .features import Prompt
from .io import RecordFileError, describe_validation_error, read_json, write_json
from .model import RouterModel, load_router
from .routing import RoutingDecision, allowed_workers, excluded_workers, route_prompts
from .schemas import RewardRecord, records_in_split

if TYPE_CHECKING:
    from .reward_head import CostAwareRouter, CostWeightedView

FAMILY_FILE = "router_family.json"
FAMILY_FORMAT: Final = "fugu-lite-router-family"


class CostWeightError(CheckpointError):
    """A cost weight was asked of a checkpoint that was not trained for cost weights,
    or a family manifest is missing or inconsistent."""


# --- cost-weighted rewards ------------------------------------------------------------------


# The splits the training stages read (the test split is evaluation's: it needs no costs).
TRAINING_SPLITS = ("train", "validation")
TRAINING_FIX = "set reference_cost explicitly or leave cost_weight at 0"
FAMILY_FIX = "give the records their real costs, or train one router (without --cost-weights)"


def default_reference_cost(records: Sequence[RewardRecord], fix: str = TRAINING_FIX) -> float:
    """Mean cost over every (train prompt, worker) cell; `fix` ends the errors with what the
    caller's user can do."""
    train = records_in_split(list(records), "train")
    if not train:
        raise ValueError(
            "the default reference cost is the mean train cost, but there are no train "
            "records; set reference_cost explicitly"
        )
    require_costs(train, "the default reference cost", fix)
    cells = [cost for record in train for cost in record.costs or []]
    mean = math.fsum(cells) / len(cells)
    if mean <= 0:
        raise ValueError(f"every train cost is 0, so costs cannot be scaled by their mean; {fix}")
    return mean


def resolve_reference_cost(records: Sequence[RewardRecord], settings: CostAware) -> float:
    """The configured reference cost, or the mean train cost when it is None."""
    if settings.reference_cost is not None:
        return settings.reference_cost
    return default_reference_cost(records)


def training_records(records: Sequence[RewardRecord]) -> list[RewardRecord]:
    """The records the training stages read: the train split (to fit) and the validation
    split (to choose and report); the test split is evaluation's."""
    return [record for record in records if record.split in TRAINING_SPLITS]


def require_costs(
    records: Sequence[RewardRecord],
    purpose: str,
    fix: str = "give every record `costs` or set cost_weight to 0",
    counted: str = "records",
) -> None:
    """Refuse records without per-worker costs, naming the first one and the count;
    `counted` says what `records` are (e.g. the splits they were taken from)."""
    missing = [index for index, record in enumerate(records) if record.costs is None]
    if not missing:
        return
    record = records[missing[0]]
    name = f"id={record.id!r}" if record.id is not None else f"number {missing[0] + 1}"
    raise ValueError(
        f"{purpose} needs per-worker costs, but {len(missing)} of {len(records)} {counted} have "
        f"none, the first is record {name} ({record.split} split, prompt "
        f"{record.prompt_text[:60]!r}); {fix}"
    )


def apply_cost_weight(records: list[RewardRecord], settings: CostAware) -> list[RewardRecord]:
    """Records with reward' = reward - cost_weight * cost / reference_cost (costs kept).

    With cost_weight 0 the records are returned unchanged (and need no costs)."""
    if settings.cost_weight == 0:
        return records
    require_costs(records, f"cost_weight={settings.cost_weight:g}")
    scale = settings.cost_weight / resolve_reference_cost(records, settings)
    return [
        record.model_copy(
            update={
                "rewards": [
                    reward - scale * cost
                    for reward, cost in zip(record.rewards, record.costs or [], strict=True)
                ]
            }
        )
        for record in records
    ]


def cost_weighting_summary(records: Sequence[RewardRecord], settings: CostAware) -> dict:
    """What a stage records in its report and checkpoint: the lambda and reference cost used
    (reference None when lambda is 0 and none was configured: nothing was scaled)."""
    reference = settings.reference_cost
    if settings.cost_weight > 0:
        reference = resolve_reference_cost(records, settings)
    return {"cost_weight": settings.cost_weight, "reference_cost": reference}


# --- the family manifest --------------------------------------------------------------------


class FamilyMember(BaseModel):
    cost_weight: float = Field(ge=0)
    checkpoint: str = Field(description="Router checkpoint folder, relative to the family.")


class FamilyManifest(BaseModel):
    """`router_family.json`: one router checkpoint per cost weight, sharing one model config,
    one set of workers and one reference cost."""

    format: Literal["fugu-lite-router-family"] = FAMILY_FORMAT
    package_version: str = __version__
    worker_ids: list[str]
    reference_cost: float | None = Field(default=None, gt=0)
    members: list[FamilyMember] = Field(min_length=1)
    selection: str = "every trained cost weight"

    @property
    def cost_weights(self) -> list[float]:
        return [member.cost_weight for member in self.members]


@dataclass
class RouterFamily:
    """Loaded routers, sorted by cost weight; `kind` is "single" for a plain checkpoint
    wrapped as a one-member family (used by evaluation, never by routing). For a reward
    head, `reward_head` is the head and `routers` are its views at the listed weights."""

    directory: Path
    manifest: FamilyManifest
    routers: Sequence[RouterModel | CostWeightedView]
    kind: Literal["family", "single"] = "family"
    reward_head: CostAwareRouter | None = None

    @property
    def cost_weights(self) -> list[float]:
        return self.manifest.cost_weights

    @property
    def reference_cost(self) -> float | None:
        return self.manifest.reference_cost

    @property
    def worker_ids(self) -> list[str]:
        return self.manifest.worker_ids


MEMBER_PREFIX = "lambda-"


def member_folder(cost_weight: float) -> str:
    return f"{MEMBER_PREFIX}{cost_weight:g}"


def has_family_members(path: str | Path) -> bool:
    """Whether the folder holds trained family members (with or without the manifest)."""
    return any(Path(path).glob(f"{MEMBER_PREFIX}*/rl"))


def is_router_family(path: str | Path) -> bool:
    return (Path(path) / FAMILY_FILE).is_file()


def write_family_manifest(directory: str | Path, manifest: FamilyManifest) -> Path:
    path = Path(directory) / FAMILY_FILE
    write_json(path, manifest.model_dump())
    return path


def read_family_manifest(directory: str | Path) -> FamilyManifest:
    path = Path(directory) / FAMILY_FILE
    if not path.is_file():
        raise CostWeightError(
            f"{directory} is not a router family: it has no {FAMILY_FILE} (written by "
            "`fugu-lite train pipeline ... --cost-weights 0,0.5,1`)"
        )
    try:
        manifest = FamilyManifest.model_validate(read_json(path))
    except ValidationError as error:
        raise CostWeightError(
            f"{path} is damaged ({describe_validation_error(error, None)}); train the family "
            "again (`fugu-lite train pipeline ... --cost-weights`)"
        ) from error
    except (RecordFileError, ValueError) as error:
        raise CostWeightError(f"{path} is damaged: {error}") from error
    weights = manifest.cost_weights
    if len(set(weights)) != len(weights):
        raise CostWeightError(f"{path}: repeated cost weights {weights}")
    return manifest


def load_router_family(path: str | Path, backbone: str | None = None) -> RouterFamily:
    """Load every member of a family, checking they share the workers and the model config
    (`backbone`: where their backbone is now, see checkpoint.locate_backbone)."""
    directory = Path(path)
    manifest = read_family_manifest(directory)
    members = sorted(manifest.members, key=lambda member: member.cost_weight)
    manifest = manifest.model_copy(update={"members": members})
    routers = [
        load_router(
            directory / member.checkpoint, worker_ids=manifest.worker_ids, backbone=backbone
        )
        for member in members
    ]
    first = routers[0].model_cfg
    for member, router in zip(members, routers, strict=True):
        if router.model_cfg.model_dump(exclude={"device", "cache_dir"}) != first.model_dump(
            exclude={"device", "cache_dir"}
        ):
            raise CostWeightError(
                f"{directory}: member {member.checkpoint} has another model config than "
                f"{members[0].checkpoint}; a family shares one backbone and head shape"
            )
    return RouterFamily(directory=directory, manifest=manifest, routers=routers)


def load_family_or_single(path: str | Path, backbone: str | None = None) -> RouterFamily:
    """A family as is; a reward head as a family of its views (see the module docstring);
    a plain checkpoint as a one-member family at the cost weight it was trained with (0
    when its metadata does not say). `backbone`: where its backbone is now (see
    checkpoint.locate_backbone)."""
    from .reward_head import is_reward_head

    directory = Path(path)
    if is_router_family(directory):
        return load_router_family(directory, backbone)
    if is_reward_head(directory):
        return load_reward_head_family(directory, backbone)
    trained = trained_cost_weighting(directory)
    router = load_router(directory, backbone=backbone)
    manifest = FamilyManifest(
        worker_ids=router.worker_ids,
        reference_cost=trained["reference_cost"],
        members=[FamilyMember(cost_weight=trained["cost_weight"], checkpoint=".")],
        selection="a single checkpoint",
    )
    return RouterFamily(directory=directory, manifest=manifest, routers=[router], kind="single")


def load_reward_head_family(path: str | Path, backbone: str | None = None) -> RouterFamily:
    """A reward head as a family: its views at SERVED_COST_WEIGHTS, or (when it predicts no
    costs) one view at 0 as a "single" family, which refuses cost weights."""
    from .reward_head import SERVED_COST_WEIGHTS, load_reward_head

    directory = Path(path)
    head = load_reward_head(directory, backbone=backbone)
    weights = list(SERVED_COST_WEIGHTS) if head.predicts_costs else [0.0]
    manifest = FamilyManifest(
        worker_ids=head.worker_ids,
        reference_cost=head.reference_cost,
        members=[FamilyMember(cost_weight=weight, checkpoint=".") for weight in weights],
        selection="a reward head: any cost weight (these are the ones a server offers)",
    )
    return RouterFamily(
        directory=directory,
        manifest=manifest,
        routers=[head.at_cost_weight(weight) for weight in weights],
        kind="family" if head.predicts_costs else "single",
        reward_head=head,
    )


def trained_cost_weighting(checkpoint: str | Path) -> dict:
    """The {cost_weight, reference_cost} a plain checkpoint was trained with."""
    metadata = read_checkpoint_metadata(checkpoint).get("metadata", {})
    weighting = metadata.get("cost_weighting") or {}
    return {
        "cost_weight": float(weighting.get("cost_weight") or 0.0),
        "reference_cost": weighting.get("reference_cost"),
    }


# --- training a family ----------------------------------------------------------------------


def normalized_cost_weights(cost_weights: Sequence[float]) -> list[float]:
    """Sorted, without repeats; each one finite and >= 0."""
    weights = sorted({float(weight) for weight in cost_weights})
    if not weights:
        raise ValueError("give at least one cost weight, e.g. 0,0.25,0.5,1")
    bad = [weight for weight in weights if not math.isfinite(weight) or weight < 0]
    if bad:
        raise ValueError(f"cost weights must be finite and >= 0, got {bad}")
    return weights


def parse_cost_weights(text: str) -> list[float]:
    """ "0,0.25,0.5" -> [0.0, 0.25, 0.5]."""
    try:
        values = [float(part) for part in text.split(",") if part.strip()]
    except ValueError as error:
        raise ValueError(
            f"cost weights {text!r} must be comma-separated numbers, e.g. 0,0.25,0.5,1"
        ) from error
    return normalized_cost_weights(values)


def family_reference_cost(records: Sequence[RewardRecord], config: PipelineConfig) -> float | None:
    """One reference cost for every member, so a lambda means the same in each of them."""
    configured = config.sft.reference_cost or config.rl.reference_cost
    if configured is not None:
        return configured
    if all(record.costs is None for record in records):
        return None
    return default_reference_cost(records, FAMILY_FIX)


def check_family_cost_settings(config: PipelineConfig) -> None:
    """Refuse the config's own cost settings that a family would drop without a word: each
    member's cost weight is one of --cost-weights (sft.cost_weight and rl.cost_weight were
    replaced), and every member shares one reference cost (rl's was ignored when sft's
    differed)."""
    stages = {"sft": config.sft, "rl": config.rl}
    set_weights = [
        f"{name}.cost_weight={stage.cost_weight:g}"
        for name, stage in stages.items()
        if stage.cost_weight
    ]
    if set_weights:
        raise ValueError(
            f"--cost-weights gives each member its own cost weight, so the config's "
            f"{' and '.join(set_weights)} would be ignored; remove it from the config (or "
            "train one router without --cost-weights)"
        )
    references = {stage.reference_cost for stage in stages.values()} - {None}
    if len(references) > 1:
        raise ValueError(
            f"every member of a family uses one reference cost, but the config sets "
            f"sft.reference_cost={config.sft.reference_cost:g} and "
            f"rl.reference_cost={config.rl.reference_cost:g}; give both the same value (or "
            "set only one)"
        )


def train_router_family(
    records: list[RewardRecord],
    config: PipelineConfig,
    output_dir: str | Path,
    cost_weights: Sequence[float],
) -> dict:
    """Train the SFT -> RL pipeline once per cost weight into OUTPUT/lambda-<w>/ (every run
    after the first reads only the feature cache), then write OUTPUT/router_family.json."""
    from .pipeline import train_pipeline  # the pipeline's stages import this module
    from .training_common import remove_stale_evaluations, require_split

    require_split(records, "train")  # before the reference cost, the mean train cost
    started = time.perf_counter()
    output = Path(output_dir)
    weights = normalized_cost_weights(cost_weights)
    check_family_cost_settings(config)
    if any(weight > 0 for weight in weights):
        require_costs(
            training_records(records),
            f"a family with cost weights {weights}",
            FAMILY_FIX,
            "records of the train and validation splits",
        )
    reference = family_reference_cost(records, config)
    # An earlier family here lists members this run retrains in place: a run stopped
    # half-way must leave no manifest, not one that mixes two runs' members, nor the
    # `eval --pareto` report of the earlier family.
    remove_files(output, [FAMILY_FILE, "training_report.json"])
    remove_stale_evaluations(output)
    members, reports = [], {}
    for weight in weights:
        settings = {"cost_weight": weight, "reference_cost": reference}
        member_config = config.model_copy(
            update={
                "sft": config.sft.model_copy(update=settings),
                "rl": config.rl.model_copy(update=settings),
            }
        )
        report = train_pipeline(records, member_config, output / member_folder(weight))
        checkpoint = Path(report["checkpoint"]).relative_to(output).as_posix()
        members.append(FamilyMember(cost_weight=weight, checkpoint=checkpoint))
        reports[f"{weight:g}"] = report["checkpoint"]
    manifest = FamilyManifest(
        worker_ids=records[0].worker_ids, reference_cost=reference, members=members
    )
    write_family_manifest(output, manifest)
    report = {
        "stage": "family",
        "checkpoint": str(output),
        "cost_weights": weights,
        "reference_cost": reference,
        "members": reports,
        "seconds": time.perf_counter() - started,
    }
    write_json(output / "training_report.json", report)
    return report


# --- routing with a cost weight -------------------------------------------------------------


class CostRoutingDecision(RoutingDecision):
    requested_cost_weight: float | None
    cost_weight: float = Field(
        description="The cost weight the answer used: the one the family member was trained "
        "for, or the requested one itself for a reward head."
    )
    predicted_rewards: dict[str, float] | None = Field(
        default=None, description="A reward head's predicted reward per worker."
    )
    predicted_costs: dict[str, float] | None = Field(
        default=None, description="A reward head's predicted cost per worker."
    )


def check_cost_weight(cost_weight: float) -> None:
    if not math.isfinite(cost_weight) or cost_weight < 0:
        raise CostWeightError(f"a cost weight must be a finite number >= 0, got {cost_weight}")


def nearest_cost_weight(cost_weights: Sequence[float], requested: float) -> float:
    """The trained cost weight nearest to the requested one; a tie goes to the smaller
    (quality-first) weight, and requests beyond either end get that end."""
    check_cost_weight(requested)
    return min(sorted(cost_weights), key=lambda weight: abs(weight - requested))


def route_with_cost_weight(
    family: RouterFamily,
    prompts: Sequence[Prompt],
    cost_weight: float | None,
    exclude: Sequence[str] = (),
) -> list[CostRoutingDecision]:
    """Route prompts with the member trained for the nearest cost weight (see
    `nearest_cost_weight`); None uses the family's smallest cost weight. A reward head
    answers the requested cost weight exactly (None = 0)."""
    if family.reward_head is not None:
        return route_with_reward_head(family.reward_head, prompts, cost_weight, exclude)
    if family.kind != "family":
        raise CostWeightError(f"{family.directory} is a single checkpoint, not a router family")
    used = (
        min(family.cost_weights)
        if cost_weight is None
        else nearest_cost_weight(family.cost_weights, cost_weight)
    )
    router = family.routers[family.cost_weights.index(used)]
    return [
        CostRoutingDecision(
            **decision.model_dump(), requested_cost_weight=cost_weight, cost_weight=used
        )
        for decision in route_prompts(router, prompts, exclude)
    ]


def route_with_reward_head(
    head: CostAwareRouter,
    prompts: Sequence[Prompt],
    cost_weight: float | None,
    exclude: Sequence[str] = (),
) -> list[CostRoutingDecision]:
    """argmax of predicted reward - cost_weight * predicted cost / reference over the allowed
    workers, with the predictions and softmax(utility / temperature) as probabilities."""
    import torch

    used = 0.0 if cost_weight is None else float(cost_weight)
    allowed = allowed_workers(head.worker_ids, exclude)
    view = head.at_cost_weight(used)
    features = head.features_for(list(prompts), use_cache=False)
    probabilities = view.probabilities(features, allowed).cpu()
    with torch.inference_mode():
        rewards, costs = (value.cpu() for value in head.predict(features))
    decisions = []
    for row, reward_row, cost_row in zip(probabilities, rewards, costs, strict=True):
        decisions.append(
            CostRoutingDecision(
                worker=head.worker_ids[int(row.argmax())],
                probabilities=dict(zip(head.worker_ids, row.tolist(), strict=True)),
                excluded=excluded_workers(exclude),
                requested_cost_weight=cost_weight,
                cost_weight=used,
                predicted_rewards=dict(zip(head.worker_ids, reward_row.tolist(), strict=True)),
                predicted_costs=(
                    dict(zip(head.worker_ids, cost_row.tolist(), strict=True))
                    if head.predicts_costs
                    else None
                ),
            )
        )
    return decisions


def route_checkpoint(
    checkpoint: str | Path,
    prompt: Prompt,
    exclude: Sequence[str] = (),
    cost_weight: float | None = None,
    backbone: str | None = None,
) -> RoutingDecision:
    """Route one prompt with a plain checkpoint, a family or a reward head; a cost weight
    needs a family or a reward head (trained on records with costs). `backbone`: where the
    checkpoint's backbone is now (see checkpoint.locate_backbone)."""
    from .reward_head import is_reward_head, load_reward_head

    if cost_weight is not None:  # before any loading, and for a single checkpoint too
        check_cost_weight(cost_weight)
    if is_reward_head(checkpoint):
        head = load_reward_head(checkpoint, backbone=backbone)
        return route_with_reward_head(head, [prompt], cost_weight, exclude)[0]
    if is_router_family(checkpoint):
        family = load_router_family(checkpoint, backbone)
        return route_with_cost_weight(family, [prompt], cost_weight, exclude)[0]
    if cost_weight is not None:
        trained = trained_cost_weighting(checkpoint)["cost_weight"]
        raise CostWeightError(
            f"{checkpoint} is a single router checkpoint (trained with cost weight "
            f"{trained:g}), so it cannot serve cost weight {cost_weight:g}; train a router "
            "family with `fugu-lite train pipeline ... --cost-weights 0,0.25,0.5,1` or a "
            "reward head with `fugu-lite train reward-head ...` and pass its folder, or leave "
            "out --cost-weight"
        )
    return route_prompts(load_router(checkpoint, backbone=backbone), [prompt], exclude)[0]
