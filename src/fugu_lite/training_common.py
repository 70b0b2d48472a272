"""The helpers every training stage shares (names fixed by the seed's train_rl.py)."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from .atomic_files import remove_files
from .backbone_identity import canonical_backbone
from .checkpoint import HEAD_FILE, META_FILE, tensor_digest
from .config import (
    ESTrainingConfig,
    ModelConfig,
    RLConfig,
    RLTrainingConfig,
    SFTConfig,
    SFTTrainingConfig,
)
from .cost_weighting import apply_cost_weight, training_records
from .evaluation.output import remove_evaluations
from .feature_cache import backbone_shape
from .features import FeatureExtractor, Prompt
from .io import write_json
from .model import RouterModel, load_router, trainable_parameters
from .progress import LineProgress
from .schemas import RewardRecord, check_same_workers, records_in_split, split_sizes
from .text import console_text, notes_console
from .threads import torch_fit_threads

# Progress bars, per-step lines, warnings and notes of the training stages: stderr, so a
# stage's stdout holds only its result (`checkpoint written to ...`), as in `route --json`.
console = notes_console()

Batch = dict[str, torch.Tensor]
STAGE_REPORT = "training_report.json"
# Where features are cached and how many are computed at once do not change a trained model.
RESULT_NEUTRAL_MODEL_KEYS = ("cache_dir", "feature_batch_size")
# How often a step's line is printed does not either.
RESULT_NEUTRAL_TRAINING_KEYS = ("log_every",)


class TrainingDiverged(ValueError):
    """A stage's logits, loss or weights became NaN or infinite: it stops before a checkpoint."""


def require_finite(stage: str, where: str, fix: str, **tensors: torch.Tensor) -> None:
    """Stop a stage whose numbers blew up (a learning rate or temperature out of range): left
    to run, NaN weights reach the checkpoint, or torch stops it with a dump of the tensor."""
    bad = [name for name, tensor in tensors.items() if not bool(torch.isfinite(tensor).all())]
    if bad:
        raise TrainingDiverged(
            f"{stage} diverged at {where}: its {' and '.join(bad)} became NaN or infinite, so "
            f"it stopped and wrote no checkpoint; {fix}"
        )


def require_finite_weights(model: nn.Module, stage: str, where: str, fix: str) -> None:
    """require_finite over every tensor of the model's state, naming those that blew up."""
    bad = [
        name
        for name, tensor in model.state_dict().items()
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all())
    ]
    if bad:
        raise TrainingDiverged(
            f"{stage} diverged at {where}: its weights ({', '.join(bad)}) became NaN or "
            f"infinite, so it stopped and wrote no checkpoint; {fix}"
        )


DIVERGED_FIX = "lower training.learning_rate (ES: training.sigma0) and run it again"


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def make_model(
    model_cfg: ModelConfig, worker_ids: list[str], checkpoint: str | None = None
) -> RouterModel:
    """A fresh router, or one continued from a checkpoint (which must match cfg and workers).

    When the feature cache already knows the backbone's shape, the backbone is not loaded
    (unless SVF needs it).
    """
    if checkpoint is not None:
        return load_router(checkpoint, model_cfg, worker_ids)
    shape, extractor = backbone_shape(model_cfg)
    model = RouterModel(model_cfg, worker_ids, shape.hidden_size, shape.parameters, extractor)
    return model.to(model_cfg.device)


def start_stage(
    records: list[RewardRecord],
    model_cfg: ModelConfig,
    training: SFTTrainingConfig | RLTrainingConfig | ESTrainingConfig,
    checkpoint: str | None = None,
) -> tuple[list[RewardRecord], RouterModel, list[str]]:
    """What every stage does first: keep the records of the splits it reads (train and
    validation) and cost-weight their rewards, warn when the train split cannot teach a
    choice (the warnings are returned for the stage's report), seed, build or continue the
    model."""
    require_split(records, "train")
    # The test split is evaluation's: its records need no costs for a cost weight.
    records = apply_cost_weight(training_records(records), training)
    warning = nothing_to_learn(
        records_in_split(records, "train"), checkpoint is not None, training.cost_weight > 0
    )
    if warning:
        console.print(f"[yellow]warning:[/yellow] {console_text(warning)}")
    seed_everything(training.seed)
    model = make_model(model_cfg, records[0].worker_ids, checkpoint)
    return records, model, [warning] if warning else []


def records_digest(records: list[RewardRecord]) -> str:
    """sha1 of the records as read, in order (every field: prompt, split, rewards, costs...)."""
    digest = hashlib.sha1()
    for record in records:
        digest.update(record.model_dump_json().encode("utf-8"))
        digest.update(b"\n")
    return digest.hexdigest()


def stage_inputs(
    config: SFTConfig | RLConfig, records: list[RewardRecord], checkpoint: str | None
) -> dict:
    """What a gradient stage's result depends on, saved in its checkpoint's metadata: the
    config (less the RESULT_NEUTRAL_ keys; a local backbone folder as its absolute path,
    so `bb` and `./bb` are one backbone, and `bb` from another folder another), the digest
    of the records it reads (train and validation, see training_records: an edit to a test
    record alone retrained every stage of a pipeline), and the checkpoint it continued from
    (its path and the SHA-256 of its tensors, as its metadata names it) or None."""
    dumped = config.model_dump(mode="json")
    for key in RESULT_NEUTRAL_MODEL_KEYS:
        dumped["model"].pop(key, None)
    for key in RESULT_NEUTRAL_TRAINING_KEYS:
        dumped["training"].pop(key, None)
    dumped["model"]["backbone"] = canonical_backbone(config.model.backbone)
    start = None
    if checkpoint is not None:
        start = {"checkpoint": str(checkpoint), "sha256": tensor_digest(checkpoint)}
    return {
        "config": dumped,
        "records_sha1": records_digest(training_records(records)),
        "continued_from": start,
    }


def save_stage(model: RouterModel, output: Path, metadata: dict, report: dict) -> None:
    """The checkpoint, then its training_report.json. The old report and the old checkpoint's
    evaluation reports go first: a run killed while saving never leaves another run's
    report beside the new checkpoint."""
    require_finite_weights(
        model, str(metadata.get("stage", "training")).upper(), "the end", DIVERGED_FIX
    )
    write_stage_files(model, output, metadata, report)


def write_stage_files(model: RouterModel, output: Path, metadata: dict, report: dict) -> None:
    """save_stage's files in its order, for a stage whose weights are not trained by steps
    (the reward head): the old report and evaluation reports, then the checkpoint, then
    training_report.json."""
    remove_files(output, [STAGE_REPORT])
    remove_stale_evaluations(output)
    model.save_checkpoint(output, metadata)
    write_json(output / STAGE_REPORT, report)


def remove_stage(folder: Path) -> None:
    """Delete a stage's checkpoint, report and evaluation reports (the metadata first, so that
    even a kill half-way leaves no loadable checkpoint)."""
    remove_files(folder, [META_FILE, HEAD_FILE, STAGE_REPORT])
    remove_stale_evaluations(folder)


def remove_stale_evaluations(folder: Path) -> None:
    """Delete the `eval` reports inside a checkpoint folder whose checkpoint is being replaced
    or deleted (see remove_evaluations), and say which."""
    cleared = remove_evaluations(folder)
    if cleared:
        console.print(
            f"removed the evaluation reports of the earlier checkpoint in {folder}: "
            f"{', '.join(cleared)} (they describe a model that is no longer there)",
            markup=False,
        )


def nothing_to_learn(
    train: list[RewardRecord], continued: bool = False, cost_weighted: bool = False
) -> str | None:
    """Why the train split cannot teach any choice (one worker, one prompt of a fresh head,
    or every prompt's workers tie), or None; training still runs, but the user should know
    before reading a report. A `continued` head keeps its normaliser, fitted on its own
    stage's train split; `cost_weighted`: the rewards are the cost-weighted ones."""
    if not train:
        return None
    workers = train[0].worker_ids
    if len(workers) == 1:
        return (
            f"the records have one worker ({workers[0]}): the router can only ever choose it; "
            "add the other workers' rewards to learn a choice"
        )
    if len(train) == 1 and not continued:
        # fit_normalizer centres the features on the train split's mean: one prompt's are zero
        return (
            "the train split has one prompt: the feature normaliser fitted on it centres its "
            "features to zero, so the router learns no choice between prompts (a linear head "
            "learns nothing at all); add train records"
        )
    if all(min(record.rewards) == max(record.rewards) for record in train):
        return (
            f"every one of the {len(train)} train prompts gives all workers the same reward"
            f"{' (after the cost weight)' if cost_weighted else ''}: there is nothing to learn "
            "about which to choose; check how the rewards were graded"
        )
    return None


def make_loader(
    records: list[RewardRecord],
    model: RouterModel,
    split: str,
    batch_size: int,
    shuffle: bool,
) -> DataLoader:
    """Batches of one split: cached backbone features and rewards, or, when the model has
    SVF offsets (features move with them), tokenized prompts and rewards, so every step
    runs the backbone.

    The first train loader of an unfitted model also fits its feature normaliser, so
    every later stage (and routing) uses the training split's statistics.
    """
    selected = require_split(records, split)
    check_same_workers(selected, source=f"{split} split")
    if selected[0].worker_ids != model.worker_ids:
        raise ValueError(
            f"the {split} split's records have workers {selected[0].worker_ids}, the model "
            f"{model.worker_ids}: every split must list the model's workers in the same order"
        )
    prompts = [record.prompt for record in selected]
    rewards = torch.tensor([record.rewards for record in selected], dtype=torch.float32)
    generator = torch.Generator().manual_seed(torch.initial_seed() % (2**31))
    if model.svf is not None:
        model.announce_uncached_features()
        if split == "train" and not bool(model.normalizer_fitted):
            model.fit_normalizer(model.features_for(prompts).to(model.device_ref))
        return DataLoader(
            TensorDataset(torch.arange(len(prompts)), rewards),
            batch_size=batch_size,
            shuffle=shuffle,
            generator=generator,
            collate_fn=TokenizingCollate(prompts, model.backbone_extractor()),
        )
    features = model.features_for(prompts)
    require_finite_features(features, selected, model.model_cfg.backbone, split)
    if split == "train" and not bool(model.normalizer_fitted):
        model.fit_normalizer(features.to(model.device_ref))
    return DataLoader(
        TensorDataset(features, rewards),
        batch_size=batch_size,
        shuffle=shuffle,
        generator=generator,
        collate_fn=_collate,
    )


def require_finite_features(
    features: torch.Tensor, records: list[RewardRecord], backbone: str, split: str
) -> None:
    """Refuse NaN or infinite backbone features: training on them stopped at its first step
    blaming the learning rate, which no setting of it could fix."""
    bad = (~torch.isfinite(features)).flatten(1).any(dim=1).nonzero().flatten().tolist()
    if bad:
        first = records[bad[0]]
        raise ValueError(
            f"the backbone {backbone} gives NaN or infinite features for {len(bad)} of the "
            f"{len(records)} {split} prompts (the first: {first.prompt_text[:60]!r}): its "
            "weights are damaged or overflow; check model.backbone (a local folder: its weight "
            "files), or choose another backbone"
        )


def require_split(records: list[RewardRecord], split: str) -> list[RewardRecord]:
    """The records of `split`; a ValueError naming the splits there are when it is empty."""
    selected = records_in_split(records, split)
    if not selected:
        learns = "every stage learns from the train split: " if split == "train" else ""
        raise ValueError(
            f"no records in the {split!r} split (the records hold {split_sizes(records)}); "
            f"{learns}give records the split {split!r} (a record's split field), or import "
            "them with `fugu-lite data import`, which gives them the standard split"
        )
    return selected


def optional_loader(
    records: list[RewardRecord], model: RouterModel, split: str, batch_size: int
) -> DataLoader | None:
    """`make_loader` for a split that may be absent (validation): None when it has no records.
    Any other problem with the split (other workers, ...) still raises."""
    if not records_in_split(records, split):
        return None
    return make_loader(records, model, split, batch_size, shuffle=False)


def _collate(items: list[tuple[torch.Tensor, torch.Tensor]]) -> Batch:
    features, rewards = zip(*items, strict=True)
    return {"features": torch.stack(features), "rewards": torch.stack(rewards)}


@dataclass(frozen=True)
class TokenizingCollate:
    """(prompt index, rewards) items -> the batch's tokenized prompts and rewards."""

    prompts: list[Prompt]
    extractor: FeatureExtractor

    def __call__(self, items: list[tuple[torch.Tensor, torch.Tensor]]) -> Batch:
        indices, rewards = zip(*items, strict=True)
        tokens = self.extractor.tokenize([self.prompts[int(index)] for index in indices])
        return {
            "input_ids": tokens["input_ids"],
            "attention_mask": tokens["attention_mask"],
            "rewards": torch.stack(rewards),
        }


def move_batch(batch: Batch, device: torch.device) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Split a batch into the model's inputs and the reward matrix, on the model's device."""
    inputs = {key: value.to(device) for key, value in batch.items() if key != "rewards"}
    return inputs, batch["rewards"].to(device)


VALIDATION_KEYS = ("reward",)  # of evaluate_loader, for the per-epoch log line


@torch.no_grad()
def evaluate_loader(model: RouterModel, loader: DataLoader) -> dict[str, float]:
    """Mean reward of the argmax choice, expected reward of the policy, oracle, entropy."""
    was_training = model.training
    model.eval()
    totals = {"reward": 0.0, "expected_reward": 0.0, "oracle_reward": 0.0, "entropy": 0.0}
    count = 0
    for batch in loader:
        inputs, rewards = move_batch(batch, model.device_ref)
        logits = model(**inputs)
        probabilities = torch.softmax(logits, dim=-1)
        choice = logits.argmax(dim=-1, keepdim=True)
        totals["reward"] += float(rewards.gather(1, choice).sum())
        totals["expected_reward"] += float((probabilities * rewards).sum())
        totals["oracle_reward"] += float(rewards.max(dim=-1).values.sum())
        distribution = torch.distributions.Categorical(probs=probabilities)
        totals["entropy"] += float(distribution.entropy().sum())
        count += rewards.shape[0]
    model.train(was_training)
    return {key: value / max(1, count) for key, value in totals.items()}


def metrics_line(metrics: dict[str, float], keys: tuple[str, ...]) -> str:
    """'sampled reward 0.7227 · entropy 0.4853': the named metrics that are present."""
    return " · ".join(
        f"{key.replace('_', ' ')} {metrics[key]:.4f}" for key in keys if key in metrics
    )


def epoch_line(stage: str, report: dict, epochs: int, train_keys: tuple[str, ...]) -> str:
    """One line per epoch: 'RL epoch 3/8: train … | validation …'."""
    line = f"{stage} epoch {report['epoch']}/{epochs}: train "
    line += metrics_line(report["train"], train_keys)
    if "validation" in report:
        line += f" | validation {metrics_line(report['validation'], VALIDATION_KEYS)}"
    return line


def epoch_mean(steps: list[tuple[dict[str, float], int]]) -> dict[str, float]:
    """Each metric over an epoch's (step metrics, rows of its batch): weighted by the rows,
    so a last short batch counts for its prompts, not as much as a full one."""
    rows = sum(size for _, size in steps)
    return {key: sum(metrics[key] * size for metrics, size in steps) / rows for key in steps[0][0]}


def run_epochs(
    stage: str,
    model: RouterModel,
    epochs: int,
    run_epoch: Callable[[int], dict],
    train_keys: tuple[str, ...],
    output: Console | None = None,
) -> list[dict]:
    """A gradient stage's epochs under its progress bar: each epoch's report (run_epoch(1),
    run_epoch(2), ...), printed as its line on `output` (this module's console if None), the
    console of the bar too: a line printed on another console while the bar is drawn is glued
    after a stale copy of the bar."""
    output = output or console
    history: list[dict] = []
    with (
        torch_fit_threads(model.svf is not None),
        stage_progress(f"{stage} epochs", output, each_step_printed=True) as progress,
    ):
        task = progress.add_task(stage.lower(), total=epochs, status="")
        for epoch in range(1, epochs + 1):
            report = run_epoch(epoch)
            history.append(report)
            output.print(epoch_line(stage, report, epochs, train_keys))
            progress.update(task, advance=1)
    return history


def optimizer_parameters(model: nn.Module) -> Iterator[nn.Parameter]:
    """What the gradient stages optimise: every parameter that requires grad (the seed's
    name for model.trainable_parameters)."""
    return trainable_parameters(model)


def stage_progress(
    label: str, output: Console | None = None, each_step_printed: bool = False
) -> Progress | LineProgress:
    """The progress bar of a training stage on `output` (this module's console if None):
    label, bar, n/total, elapsed, a status field. Where bars are not redrawn (stderr piped)
    rich drew it only at the end: there it is a line each tenth (see LineProgress), or
    nothing when the stage prints a line for each step anyway (`SFT epoch 3/8: ...`)."""
    output = output or console
    if not output.is_interactive:
        return Progress(disable=True) if each_step_printed else LineProgress(output, label)
    return Progress(
        TextColumn(label),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[status]}"),
        console=output,
    )
