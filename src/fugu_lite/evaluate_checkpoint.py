"""Evaluation of a checkpoint on records: `fugu-lite eval` (the router beside baselines fit
on the train split) and `eval --pareto` (a router family's cost-quality curves). Loads the
router and computes features; the report itself is fugu_lite.evaluation's."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from .checkpoint import read_checkpoint_metadata
from .checkpoint_mismatch import workers_mismatch
from .cost_weighting import default_reference_cost, require_costs
from .evaluation import (
    RewardTable,
    baseline_cost_predictions,
    evaluation_report,
    pareto_report,
    print_evaluation,
    print_pareto,
    reward_table,
    router_predictions,
    run_baselines,
    write_evaluation,
    write_pareto,
)
from .model import RouterModel, load_router
from .reward_head import is_reward_head
from .router_family import RouterFamily, load_family_or_single
from .schemas import RewardRecord, records_in_split, split_sizes
from .text import results_console
from .training_common import require_finite_features

if TYPE_CHECKING:
    from .reward_head import CostWeightedView

console = results_console()  # an evaluation's tables: the result of `eval`
PARETO_COST_FIX = (
    "a cost-quality curve needs the workers' real costs on the train and evaluated splits: "
    "give the records their costs, or evaluate without --pareto"
)


def split_features(
    model: RouterModel | CostWeightedView, records: list[RewardRecord], split: str
) -> np.ndarray:
    """The backbone features of the split's prompts (evaluation_data asks only for splits
    holding records); NaN or infinite ones (damaged weights) are refused naming the
    backbone, before a baseline stops on them in scikit-learn."""
    selected = records_in_split(records, split)
    features = model.features_for([record.prompt for record in selected])
    require_finite_features(features, selected, model.model_cfg.backbone, split)
    return features.numpy()


def evaluated_and_train(
    records: list[RewardRecord], split: str
) -> tuple[list[RewardRecord], list[RewardRecord]]:
    """The evaluated split's records and the train split's (best single and the baselines
    fit on it); an empty one is refused, naming the splits the records do have."""
    evaluated, train = records_in_split(records, split), records_in_split(records, "train")
    if not evaluated:
        raise ValueError(
            f"no records in the {split!r} split to evaluate (the records hold "
            f"{split_sizes(records)}); choose another one with --split"
        )
    if not train:
        raise ValueError(
            f"evaluation needs a train split (best single and the baselines fit on it), but "
            f"the records hold {split_sizes(records)}; give some records the train split"
        )
    return evaluated, train


def in_checkpoint_order(
    records: list[RewardRecord], checkpoint: Path, worker_ids: Sequence[str]
) -> list[RewardRecord]:
    """The records with their rewards and costs in the checkpoint's worker order: records
    collected with the pool's workers listed in another order name the same workers, and
    were refused. Records with other workers (more, fewer, renamed) still are."""
    given = records[0].worker_ids
    if given == list(worker_ids):
        return records
    if sorted(given) != sorted(worker_ids):
        problem = workers_mismatch(worker_ids, given)
        raise ValueError(
            f"checkpoint {checkpoint} does not match: {problem}. Use records with the "
            "checkpoint's workers (in any order), or train a new checkpoint on these records."
        )
    columns = [given.index(worker) for worker in worker_ids]
    return [
        record.model_copy(
            update={
                "worker_ids": list(worker_ids),
                "rewards": [record.rewards[column] for column in columns],
                "costs": None
                if record.costs is None
                else [record.costs[column] for column in columns],
            }
        )
        for record in records
    ]


def require_pareto_costs(records: list[RewardRecord], split: str) -> None:
    """Refuse records of the train or evaluated split without costs; the count names those
    splits (the others are not used), and a record in both (split train) counts once."""
    splits = list(dict.fromkeys(("train", split)))
    used = [record for record in records if record.split in splits]
    counted = f"records of the {' and '.join(splits)} split{'s' if len(splits) > 1 else ''}"
    require_costs(used, "eval --pareto", PARETO_COST_FIX, counted)


@dataclass(frozen=True)
class EvaluationData:
    """The reward tables and router features of the train, evaluated and validation splits,
    with the kNN and ridge baselines fit on train (tuned on validation when there is one)."""

    train: RewardTable
    evaluated: RewardTable
    train_x: np.ndarray
    evaluated_x: np.ndarray
    predictions: dict[str, np.ndarray]
    baseline_info: dict[str, dict]


def evaluation_data(
    model: RouterModel | CostWeightedView,
    records: list[RewardRecord],
    split: str,
    evaluated_records: list[RewardRecord],
    train_records: list[RewardRecord],
) -> EvaluationData:
    """What `eval` and `eval --pareto` share: features from `model`, reward tables, and the
    baselines (`evaluated_records` and `train_records` from evaluated_and_train)."""
    validation_records = records_in_split(records, "validation")
    # each split's features once: `--split train` or `validation` is also a baseline's split
    used = ("train", split, "validation") if validation_records else ("train", split)
    features = {name: split_features(model, records, name) for name in dict.fromkeys(used)}
    train_x, evaluated_x = features["train"], features[split]
    validation_x = features.get("validation")
    train, evaluated = reward_table(train_records), reward_table(evaluated_records)
    validation = reward_table(validation_records) if validation_records else None
    predictions, info = run_baselines(train_x, train, evaluated_x, validation_x, validation)
    return EvaluationData(train, evaluated, train_x, evaluated_x, predictions, info)


def run_evaluation(
    checkpoint: Path,
    records: list[RewardRecord],
    split: str,
    output_dir: Path,
    backbone: str | None = None,
) -> dict:
    """Evaluate a checkpoint on one split beside baselines fitted on the train split
    (`backbone`: where its backbone is now, see checkpoint_backbone.locate_backbone)."""
    evaluated_and_train(records, split)  # an empty split is refused before anything loads
    workers = read_checkpoint_metadata(checkpoint)["worker_ids"]
    records = in_checkpoint_order(records, checkpoint, workers)
    evaluated_records, train_records = evaluated_and_train(records, split)
    model = load_router(checkpoint, backbone=backbone)
    data = evaluation_data(model, records, split, evaluated_records, train_records)
    probabilities = model.probabilities(torch.from_numpy(data.evaluated_x)).cpu().numpy()
    report = evaluation_report(
        data.train, data.evaluated, split, probabilities, data.predictions, data.baseline_info
    )
    report["checkpoint"] = report_checkpoint(checkpoint)
    report["notes"] += router_selection_notes(checkpoint, split)
    write_evaluation(report, router_predictions(data.evaluated, probabilities), Path(output_dir))
    print_evaluation(report, console)
    console.print(f"report written to {output_dir}", markup=False, soft_wrap=True)
    return report


def report_checkpoint(checkpoint: Path) -> str:
    """The checkpoint as a report names it: absolute, so the name means the same folder to
    whoever reads the report from wherever (retraining it removes the report it wrote)."""
    return str(Path(checkpoint).absolute())


# What a stage keeps by its validation reward (RL keeps its last epoch).
KEPT_ON_VALIDATION = {"sft": "epoch", "es": "generation"}


def router_selection_notes(checkpoint: Path, split: str) -> list[str]:
    """On the validation split, a note when the checkpoint's stage kept its epoch or
    generation by the validation reward: the router's score there is as optimistic as that
    of a baseline whose hyperparameter was chosen on it, which the report says."""
    if split != "validation":
        return []
    saved = read_checkpoint_metadata(checkpoint).get("metadata")
    if not isinstance(saved, dict) or saved.get("stage") not in KEPT_ON_VALIDATION:
        return []
    history = saved.get("history")
    validated = isinstance(history, list) and any(
        isinstance(entry, dict) and "validation" in entry for entry in history
    )
    if not validated:
        return []
    stage = str(saved["stage"])
    return [
        f"router: its {stage.upper()} {KEPT_ON_VALIDATION[stage]} was kept for its reward on "
        "the validation split of the records it was trained on: on those records its score "
        "here is optimistic"
    ]


def member_selection_notes(checkpoint: Path, family: RouterFamily, split: str) -> list[str]:
    """router_selection_notes of each router checkpoint of the family (a plain checkpoint's
    one member is its own folder, "."); a reward head keeps no epoch or generation."""
    if split != "validation" or is_reward_head(checkpoint):
        return []
    folders = [family.directory / member.checkpoint for member in family.manifest.members]
    notes = [note for folder in folders for note in router_selection_notes(folder, split)]
    return list(dict.fromkeys(notes))


def run_pareto_evaluation(
    checkpoint: Path,
    records: list[RewardRecord],
    split: str,
    output_dir: Path,
    backbone: str | None = None,
) -> dict:
    """Cost-quality curves on one split: each member of a router family (a plain checkpoint
    gives its one point), kNN and ridge over the family's cost weights, the single workers
    and the oracle; writes pareto_report.json/.md and a plot."""
    evaluated_and_train(records, split)  # refused before the family loads, as are
    require_pareto_costs(records, split)  # records without costs
    family = load_family_or_single(checkpoint, backbone)
    records = in_checkpoint_order(records, checkpoint, family.worker_ids)
    evaluated_records, train_records = evaluated_and_train(records, split)
    model = family.routers[0]  # every member shares the model config, so the features
    data = evaluation_data(model, records, split, evaluated_records, train_records)
    report = pareto_report(
        data.train,
        data.evaluated,
        split,
        member_probabilities(family, data.evaluated_x),
        baseline_cost_predictions(data.train_x, data.train, data.evaluated_x, data.baseline_info),
        family.cost_weights,
        family.reference_cost or default_reference_cost(records, PARETO_COST_FIX),
        data.baseline_info,
    )
    report["checkpoint"] = report_checkpoint(checkpoint)
    report["router_kind"] = family.kind
    report["notes"] += member_selection_notes(Path(checkpoint), family, split)
    write_pareto(report, Path(output_dir))
    print_pareto(report, console)
    console.print(f"cost-quality report written to {output_dir}", markup=False, soft_wrap=True)
    return report


def member_probabilities(family: RouterFamily, features: np.ndarray) -> dict[float, np.ndarray]:
    """Each member's [N, W] probabilities on the evaluated `features`, by its cost weight."""
    evaluated = torch.from_numpy(features)
    return {
        weight: router.probabilities(evaluated).cpu().numpy()
        for weight, router in zip(family.cost_weights, family.routers, strict=True)
    }
