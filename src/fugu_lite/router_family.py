"""Router families: one router per cost weight, trained on the same cached features, with a
manifest (`router_family.json`) naming each member; a request may then ask for its own
lambda and gets the head trained for the nearest one (`cost_routing.py`).

A reward head (`reward_head.py`, `fugu-lite train reward-head`) is the other kind of
cost-aware checkpoint: one head predicting per-worker reward and cost, so any lambda is
answered exactly. `load_family_or_single` loads it as a family whose members are views
of that head at `SERVED_COST_WEIGHTS` (what `eval --pareto` sweeps), with
`RouterFamily.reward_head` set; `route_with_cost_weight` and the server then use the exact
lambda.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal

from pydantic import BaseModel, Field, ValidationError

from . import __version__
from .atomic_files import remove_files
from .checkpoint import META_FILE, check_shape, read_checkpoint_metadata
from .config import PipelineConfig
from .cost_weighting import (
    CostWeightError,
    default_reference_cost,
    normalized_cost_weights,
    require_costs,
    training_records,
)
from .io import describe_validation_error, read_json, write_json
from .model import RouterModel, load_router
from .schemas import RewardRecord
from .text import exact_number
from .text_reading import RecordFileError

if TYPE_CHECKING:
    from .reward_head import CostAwareRouter, CostWeightedView

FAMILY_FILE = "router_family.json"
FAMILY_FORMAT: Final = "fugu-lite-router-family"
FAMILY_FIX = "give the records their real costs, or train one router (without --cost-weights)"


# --- the family manifest --------------------------------------------------------------------


# A hand-edited manifest or metadata's `1e999` is infinity to JSON readers, which passed ge=0
# and gt=0: an infinite reference cost routed every cost weight as 0, and an infinite cost
# weight made every weighted reward -inf (or NaN).
class FamilyMember(BaseModel):
    cost_weight: float = Field(ge=0, allow_inf_nan=False)
    checkpoint: str = Field(description="Router checkpoint folder, relative to the family.")


class FamilyManifest(BaseModel):
    """`router_family.json`: one router checkpoint per cost weight, sharing one model config,
    one set of workers and one reference cost."""

    format: Literal["fugu-lite-router-family"] = FAMILY_FORMAT
    package_version: str = __version__
    worker_ids: list[str] = Field(min_length=1)
    reference_cost: float | None = Field(default=None, gt=0, allow_inf_nan=False)
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
    (`backbone`: where their backbone is now, see checkpoint_backbone.locate_backbone)."""
    directory = Path(path)
    manifest = read_family_manifest(directory)
    members = sorted(manifest.members, key=lambda member: member.cost_weight)
    manifest = manifest.model_copy(update={"members": members})
    missing = [
        member.checkpoint for member in members if not (directory / member.checkpoint).exists()
    ]
    if missing:  # load_router said only "that folder does not exist"
        raise CostWeightError(
            f"{directory}: the members {missing} that {FAMILY_FILE} lists are not there: copy "
            "the whole family folder (with every member's folder), or train the family again "
            "(`fugu-lite train pipeline ... --cost-weights`)"
        )
    routers = [load_router(directory / member.checkpoint, backbone=backbone) for member in members]
    first = routers[0].model_cfg
    for member, router in zip(members, routers, strict=True):
        if router.worker_ids != manifest.worker_ids:
            # said as the family's: a member's mismatch, said against "records", named none
            raise CostWeightError(
                f"{directory}: member {member.checkpoint} routes to the workers "
                f"{router.worker_ids}, but {FAMILY_FILE} lists {manifest.worker_ids}: the member "
                "was trained again since the family was; train the family again (`fugu-lite "
                "train pipeline ... --cost-weights`)"
            )
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
    checkpoint_backbone.locate_backbone)."""
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


class TrainedCostWeighting(BaseModel):
    """The `cost_weighting` a training stage writes into its checkpoint's `metadata`."""

    cost_weight: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    reference_cost: float | None = Field(default=None, gt=0, allow_inf_nan=False)


class TrainingMetadata(BaseModel):
    """A checkpoint's `metadata`, as far as its cost weighting is read (older ones lack it)."""

    cost_weighting: TrainedCostWeighting | None = None


class CostWeightingShape(BaseModel):
    """The router.json key trained_cost_weighting reads, for checkpoint.check_shape."""

    metadata: TrainingMetadata | None = None


def trained_cost_weighting(checkpoint: str | Path) -> dict:
    """The {cost_weight, reference_cost} a plain checkpoint was trained with; a damaged one
    (router.json edited by hand) is a CheckpointError naming the key."""
    metadata = read_checkpoint_metadata(checkpoint)
    meta_path = Path(checkpoint) / META_FILE
    check_shape(CostWeightingShape, metadata, meta_path, "retrain or restore the checkpoint")
    weighting = (metadata.get("metadata") or {}).get("cost_weighting") or {}
    return {
        "cost_weight": float(weighting.get("cost_weight") or 0.0),
        "reference_cost": weighting.get("reference_cost"),
    }


# --- training a family ----------------------------------------------------------------------


def family_reference_cost(records: Sequence[RewardRecord], config: PipelineConfig) -> float | None:
    """One reference cost for every member, so a lambda means the same in each of them; None
    when train or validation records lack costs, which only a family of cost weight 0 may
    (train_router_family refuses them for the others)."""
    configured = config.sft.reference_cost or config.rl.reference_cost
    if configured is not None:
        return configured
    if any(record.costs is None for record in training_records(records)):
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
    from .training_common import remove_stale_evaluations, require_split

    require_split(records, "train")  # before the reference cost, the mean train cost
    started = time.perf_counter()
    output = Path(output_dir)
    weights = normalized_cost_weights(cost_weights)
    check_member_folders(weights)
    check_family_cost_settings(config)
    _require_costs_for(records, weights)
    reference = family_reference_cost(records, config)
    # An earlier family here lists members this run retrains in place: a run stopped
    # half-way must leave no manifest, not one that mixes two runs' members, nor the
    # `eval --pareto` report of the earlier family.
    remove_files(output, [FAMILY_FILE, "training_report.json"])
    remove_stale_evaluations(output)
    members, reports = _train_members(records, config, output, weights, reference)
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


def check_member_folders(weights: list[float]) -> None:
    """Refuse weights that differ only past the 6 significant digits a member's folder names:
    both were trained into one folder (lambda-0.123457), the second over the first, and the
    manifest listed that folder for both."""
    first_of: dict[str, float] = {}
    for weight in weights:
        folder = member_folder(weight)
        if folder in first_of:
            raise ValueError(
                f"--cost-weights {exact_number(first_of[folder])} and {exact_number(weight)} "
                f"would both be trained into {folder} (a member's folder names its cost weight "
                "to 6 significant digits); give weights that differ within those, or only one "
                "of the two"
            )
        first_of[folder] = weight


def _require_costs_for(records: list[RewardRecord], weights: list[float]) -> None:
    if any(weight > 0 for weight in weights):
        require_costs(
            training_records(records),
            f"a family with cost weights {weights}",
            FAMILY_FIX,
            "records of the train and validation splits",
        )


def _train_members(
    records: list[RewardRecord],
    config: PipelineConfig,
    output: Path,
    weights: list[float],
    reference: float | None,
) -> tuple[list[FamilyMember], dict[str, str]]:
    """One SFT -> RL run per cost weight into OUTPUT/lambda-<w>/: the members, and each
    weight's checkpoint as its report names it."""
    from .pipeline import train_pipeline  # the pipeline's stages import this module

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
    return members, reports
