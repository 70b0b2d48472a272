"""The stages chained: SFT -> RL, evaluation of a checkpoint, and the demo job."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from . import __version__, code_digest
from .atomic_files import remove_files
from .config import PipelineConfig
from .costs import default_reference_cost, load_family_or_single, require_costs
from .evaluation import (
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
from .features import pooling_meant, versions_moved
from .io import read_json, write_json
from .model import (
    BACKBONE_FINGERPRINT_KEY,
    CODE_DIGEST_KEY,
    FEATURE_VERSIONS_KEY,
    HEAD_FILE,
    META_FILE,
    CheckpointError,
    RouterModel,
    backbone_weights_difference,
    load_router,
    locate_backbone,
    mismatch_fix,
    read_checkpoint_metadata,
    read_tensors,
    workers_mismatch,
)
from .schemas import RewardRecord, records_in_split, split_sizes
from .text import notes_console, results_console
from .train_rl import train_rl
from .train_sft import train_sft
from .training_common import STAGE_REPORT, remove_stage, stage_inputs

if TYPE_CHECKING:
    from .reward_head import CostWeightedView

console = results_console()  # an evaluation's tables: the result of `eval`
# what training says on the way (as training_common.console)
notes = notes_console()
PARETO_COST_FIX = (
    "a cost-quality curve needs the workers' real costs on the train and evaluated splits: "
    "give the records their costs, or evaluate without --pareto"
)


def train_pipeline(records: list[RewardRecord], config: PipelineConfig, output_dir: Path) -> dict:
    """SFT into OUTPUT/sft, then RL from that checkpoint into OUTPUT/rl.

    A finished SFT of the same config and records (an earlier run that stopped in RL) is
    kept, not trained again, and so is a finished RL of the same config and records trained
    from that very SFT (the SHA-256 of its tensors). Any other RL is deleted before SFT may
    change, so a run stopped half-way never leaves an RL trained from another SFT."""
    output_dir = Path(output_dir)
    started = time.perf_counter()
    remove_files(output_dir, [STAGE_REPORT])
    sft_config, sft_dir, rl_dir = config.sft_config(), output_dir / "sft", output_dir / "rl"
    keep_sft = finished_stage(sft_dir, stage_inputs(sft_config, records, None), "SFT")
    keep_rl = keep_sft and finished_stage(
        rl_dir, stage_inputs(config.rl_config(), records, str(sft_dir)), "RL"
    )
    if not keep_rl:
        remove_stage(rl_dir)
    if keep_sft:
        notes.print(
            f"SFT: {sft_dir} already holds the SFT of this config and these records; kept it "
            "(delete that folder to train it again)",
            markup=False,
        )
    else:
        train_sft(records, sft_config, sft_dir)
    if keep_rl:
        notes.print(
            f"RL: {rl_dir} already holds the RL of this config and these records, trained "
            f"from {sft_dir}; kept it (delete that folder to train it again)",
            markup=False,
        )
    else:
        train_rl(records, config.rl_config(), rl_dir, str(sft_dir))
    report = {
        "stage": "pipeline",
        "checkpoint": str(rl_dir),
        "stages": {"sft": str(sft_dir), "rl": str(rl_dir)},
        "kept": [name for name, kept in (("sft", keep_sft), ("rl", keep_rl)) if kept],
        "seconds": time.perf_counter() - started,
    }
    write_json(output_dir / STAGE_REPORT, report)
    return report


def finished_stage(folder: Path, inputs: dict, stage: str) -> bool:
    """Whether `folder` holds a complete checkpoint (and its report) that this code (version
    and sources, see code_digest) trained from exactly these inputs (see stage_inputs). A
    stage that only other code of this version trained is said to be trained again."""
    try:
        metadata = read_checkpoint_metadata(folder)
        read_tensors(folder / HEAD_FILE, metadata, folder / META_FILE)
        read_json(folder / STAGE_REPORT)
    except (OSError, ValueError):  # no checkpoint, or a damaged one: train it again
        return False
    saved = metadata.get("metadata")
    try:
        backbone = locate_backbone(metadata, folder)
    except CheckpointError:  # its backbone folder is nowhere: not the config's
        return False
    same = (
        metadata.get("package_version") == __version__
        and isinstance(saved, dict)
        and comparable_inputs(with_backbone(saved.get("inputs"), backbone))
        == comparable_inputs(inputs)
        and _same_backbone_weights(metadata, backbone)
    )
    if same and metadata.get(CODE_DIGEST_KEY) != code_digest():
        notes.print(
            f"{stage}: {folder} holds the {stage} of this config and these records, but "
            f"fugu-lite {__version__} with other sources trained it (the code changed since, "
            "e.g. in a checkout or an editable install); training it again",
            markup=False,
        )
        return False
    moved = versions_moved(metadata.get(FEATURE_VERSIONS_KEY))
    if same and moved:
        notes.print(
            f"{stage}: {folder} holds the {stage} of this config and these records, but its "
            f"features were computed under other package versions ({moved}), which may compute "
            "other ones; training it again",
            markup=False,
        )
        return False
    return same


def _same_backbone_weights(metadata: dict, backbone: str) -> bool:
    """Whether the checkpoint's backbone (where it is now) still holds the weights it was
    trained on (a folder updated in place has the same name in the config, but other
    features)."""
    fingerprint = metadata.get(BACKBONE_FINGERPRINT_KEY)
    return not isinstance(fingerprint, dict) or (
        backbone_weights_difference(fingerprint, backbone) is None
    )


def with_backbone(inputs: object, backbone: str) -> object:
    """Saved stage inputs naming the backbone where the checkpoint's backbone is now (see
    locate_backbone): a local folder moved with the project, or spelt relative to another
    working directory, is compared as the folder it is."""
    if not isinstance(inputs, dict) or not isinstance(inputs.get("config"), dict):
        return inputs
    model = inputs["config"].get("model")
    if not isinstance(model, dict):
        return inputs
    return {**inputs, "config": {**inputs["config"], "model": {**model, "backbone": backbone}}}


def comparable_inputs(inputs: object) -> object:
    """Stage inputs with `model.pooling` as what it means on the backbone (see pooling_meant):
    `auto` and its meaning give the same features, hence the same stage; and the checkpoint
    continued from by the SHA-256 of its tensors only, not its path as `-o` spelt it
    (`runs/x`, `./runs/x` and `/abs/runs/x`, or the run folder moved, are one SFT)."""
    if not isinstance(inputs, dict):
        return inputs
    start = inputs.get("continued_from")
    if isinstance(start, dict):
        inputs = {**inputs, "continued_from": {"sha256": start.get("sha256")}}
    if not isinstance(inputs.get("config"), dict):
        return inputs
    model = inputs["config"].get("model")
    if not isinstance(model, dict):
        return inputs
    try:
        pooling = pooling_meant(model)
    except (KeyError, ValueError):  # not a model config this version reads: compared as it is
        return inputs
    return {**inputs, "config": {**inputs["config"], "model": {**model, "pooling": pooling}}}


def split_features(
    model: RouterModel | CostWeightedView, records: list[RewardRecord], split: str
) -> np.ndarray:
    selected = records_in_split(records, split)
    if not selected:
        return np.zeros((0, model.feature_dim), dtype=np.float32)
    return model.features_for([record.prompt for record in selected]).numpy()


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


def require_pareto_costs(records: list[RewardRecord], split: str) -> None:
    """Refuse records of the train or evaluated split without costs; the count names those
    splits (the others are not used), and a record in both (split train) counts once."""
    splits = list(dict.fromkeys(("train", split)))
    used = [record for record in records if record.split in splits]
    counted = f"records of the {' and '.join(splits)} split{'s' if len(splits) > 1 else ''}"
    require_costs(used, "eval --pareto", PARETO_COST_FIX, counted)


def run_evaluation(
    checkpoint: Path,
    records: list[RewardRecord],
    split: str,
    output_dir: Path,
    backbone: str | None = None,
) -> dict:
    """Evaluate a checkpoint on one split beside baselines fitted on the train split
    (`backbone`: where its backbone is now, see model.locate_backbone)."""
    evaluated_records, train_records = evaluated_and_train(records, split)
    model = load_router(checkpoint, worker_ids=records[0].worker_ids, backbone=backbone)
    validation_records = records_in_split(records, "validation")
    train_x = split_features(model, records, "train")
    evaluated_x = split_features(model, records, split)
    validation_x = split_features(model, records, "validation") if validation_records else None
    probabilities = model.probabilities(torch.from_numpy(evaluated_x)).cpu().numpy()
    train, evaluated = reward_table(train_records), reward_table(evaluated_records)
    validation = reward_table(validation_records) if validation_records else None
    predictions, info = run_baselines(train_x, train, evaluated_x, validation_x, validation)
    report = evaluation_report(train, evaluated, split, probabilities, predictions, info)
    report["checkpoint"] = str(checkpoint)
    report["notes"] += router_selection_notes(checkpoint, split)
    write_evaluation(report, router_predictions(evaluated, probabilities), Path(output_dir))
    print_evaluation(report, console)
    console.print(f"report written to {output_dir}", markup=False, soft_wrap=True)
    return report


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


def run_pareto_evaluation(
    checkpoint: Path,
    records: list[RewardRecord],
    split: str,
    output_dir: Path,
    baseline_cost_weights: Sequence[float] | None = None,
    backbone: str | None = None,
) -> dict:
    """Cost-quality curves on one split: each member of a router family (a plain checkpoint
    gives its one point), kNN and ridge over the family's cost weights (or the ones given),
    the single workers and the oracle; writes pareto_report.json/.md and a plot."""
    evaluated_records, train_records = evaluated_and_train(records, split)
    require_pareto_costs(records, split)
    family = load_family_or_single(checkpoint, backbone)
    if family.worker_ids != records[0].worker_ids:
        problem = workers_mismatch(family.worker_ids, records[0].worker_ids)
        raise ValueError(
            f"checkpoint {checkpoint} does not match: {problem}. {mismatch_fix([problem])}"
        )
    model = family.routers[0]  # every member shares the model config, so the features
    validation_records = records_in_split(records, "validation")
    train_x = split_features(model, records, "train")
    evaluated_x = split_features(model, records, split)
    validation_x = split_features(model, records, "validation") if validation_records else None
    train, evaluated = reward_table(train_records), reward_table(evaluated_records)
    validation = reward_table(validation_records) if validation_records else None
    _, info = run_baselines(train_x, train, evaluated_x, validation_x, validation)
    features = torch.from_numpy(evaluated_x)
    probabilities = {
        weight: router.probabilities(features).cpu().numpy()
        for weight, router in zip(family.cost_weights, family.routers, strict=True)
    }
    weights = family.cost_weights if baseline_cost_weights is None else baseline_cost_weights
    report = pareto_report(
        train,
        evaluated,
        split,
        probabilities,
        baseline_cost_predictions(train_x, train, evaluated_x, info),
        weights,
        family.reference_cost or default_reference_cost(records, PARETO_COST_FIX),
        info,
    )
    report["checkpoint"] = str(checkpoint)
    report["router_kind"] = family.kind
    write_pareto(report, Path(output_dir))
    print_pareto(report, console)
    console.print(f"cost-quality report written to {output_dir}", markup=False, soft_wrap=True)
    return report
