"""Supervised stage: pull the router's distribution toward softmax(rewards / tau)."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from .config import SFTConfig, SFTTrainingConfig
from .cost_weighting import cost_weighting_summary
from .model import RouterModel
from .schemas import RewardRecord
from .training_common import (
    Batch,
    console,
    epoch_mean,
    evaluate_loader,
    make_loader,
    metrics_line,
    move_batch,
    optimizer_parameters,
    optional_loader,
    require_finite,
    require_finite_weights,
    run_epochs,
    save_stage,
    stage_inputs,
    start_stage,
)

TRAIN_KEYS = ("loss", "reward")


def soft_targets(rewards: torch.Tensor, temperature: float) -> torch.Tensor:
    return torch.softmax(rewards / temperature, dim=-1)


def tie_mask(rewards: torch.Tensor) -> torch.Tensor:
    """True for rows where every worker earned the same reward (no routing signal)."""
    spread = rewards.max(dim=-1).values - rewards.min(dim=-1).values
    return spread.abs() < 1e-8


def sft_loss(
    logits: torch.Tensor,
    rewards: torch.Tensor,
    temperature: float,
    tie_handling: str = "uniform",
) -> tuple[torch.Tensor, dict[str, float]]:
    """KL(softmax(rewards / tau) || policy), per row, averaged over the rows that count.

    tie_handling="uniform" keeps all-tie rows with a uniform target (it teaches the head
    to stay undecided on such prompts); "skip" drops them from the loss.
    """
    targets = soft_targets(rewards, temperature)
    log_probabilities = F.log_softmax(logits, dim=-1)
    per_row = F.kl_div(log_probabilities, targets, reduction="none").sum(dim=-1)
    ties = tie_mask(rewards)
    if tie_handling == "skip":
        weights = (~ties).float()
    elif tie_handling == "uniform":
        weights = torch.ones_like(per_row)
    else:
        raise ValueError(f"unknown tie_handling {tie_handling!r}; use uniform or skip")
    loss = (per_row * weights).sum() / weights.sum().clamp(min=1.0)
    metrics = {"loss": float(loss.detach()), "tie_fraction": float(ties.float().mean())}
    return loss, metrics


@dataclass
class BestEpoch:
    """The epoch with the best validation reward so far and its weights (a tie keeps the
    earlier epoch); epoch 0 and no state until an epoch is validated."""

    epoch: int = 0
    reward: float = float("-inf")
    state: dict[str, torch.Tensor] | None = None

    def offer(self, epoch: int, reward: float, model: RouterModel) -> None:
        if reward > self.reward:
            self.reward = reward
            self.epoch, self.state = epoch, copy.deepcopy(model.state_dict())


@dataclass
class SFTRun:
    """What the epochs share: the model, its data and optimiser, the steps taken, the best epoch."""

    model: RouterModel
    training: SFTTrainingConfig
    train_loader: DataLoader
    validation_loader: DataLoader | None
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    fix: str
    global_step: int = 0
    best: BestEpoch = field(default_factory=BestEpoch)


def train_sft(
    records: list[RewardRecord],
    config: SFTConfig,
    output_dir: str | Path,
    checkpoint: str | None = None,
) -> dict:
    """Train, keep the epoch with the best validation reward (if there is a validation
    split), write the checkpoint and training_report.json."""
    records_read = records
    records, model, warnings = start_stage(records, config.model, config.training, checkpoint)
    given = stage_inputs(config, records_read, checkpoint)
    run = prepare_run(records, model, config.training)
    history = run_epochs(
        "SFT", model, config.training.epochs, lambda epoch: run_epoch(run, epoch), TRAIN_KEYS
    )
    keep_best_epoch(run)
    output = Path(output_dir)
    cost_weighting = cost_weighting_summary(records, config.training)
    metadata, report = sft_outputs(run, history, config, output, cost_weighting, given, warnings)
    save_stage(model, output, metadata, report)
    return report


def prepare_run(
    records: list[RewardRecord], model: RouterModel, training: SFTTrainingConfig
) -> SFTRun:
    """The loaders (saying when there is no validation split), the optimiser and its cosine
    schedule over every step, and a line on the device and trainable parameters."""
    train_loader = make_loader(records, model, "train", training.batch_size, shuffle=True)
    validation_loader = optional_loader(records, model, "validation", training.batch_size)
    if validation_loader is None:
        console.print("[yellow]SFT: no validation split; keeping the last epoch[/yellow]")
    optimizer = torch.optim.AdamW(
        optimizer_parameters(model),
        lr=training.learning_rate,
        weight_decay=training.weight_decay,
    )
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(
        optimizer, T_max=training.epochs * len(train_loader)
    )
    trainable, total = model.trainable_parameter_counts()
    console.print(f"SFT device={model.device_ref}; trainable={trainable:,}/{total:,}")
    fix = (
        f"lower training.learning_rate (now {training.learning_rate:g}) or raise "
        f"training.temperature (now {training.temperature:g}), and run it again"
    )
    return SFTRun(model, training, train_loader, validation_loader, optimizer, scheduler, fix)


def run_epoch(run: SFTRun, epoch: int) -> dict[str, Any]:
    """One pass over the train batches, then the epoch's report (train metrics averaged over
    its prompts plus those of the whole train split, and validation's)."""
    run.model.train()
    steps = [(train_step(run, batch, epoch), len(batch["rewards"])) for batch in run.train_loader]
    report: dict[str, Any] = {"epoch": epoch, "train": epoch_mean(steps)}
    report["train"].update(evaluate_loader(run.model, run.train_loader))
    if run.validation_loader is not None:
        report["validation"] = evaluate_loader(run.model, run.validation_loader)
        run.best.offer(epoch, report["validation"]["reward"], run.model)
    return report


def train_step(run: SFTRun, batch: Batch, epoch: int) -> dict[str, float]:
    """One optimiser step on a batch (stopping on NaN or infinite numbers), with its line
    every log_every steps; returns the step's metrics."""
    model, training = run.model, run.training
    where = f"epoch {epoch}, step {run.global_step + 1}"
    inputs, rewards = move_batch(batch, model.device_ref)
    logits = model(**inputs)
    loss, metrics = sft_loss(logits, rewards, training.temperature, training.tie_handling)
    require_finite("SFT", where, run.fix, logits=logits, loss=loss)
    run.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(list(optimizer_parameters(model)), training.max_grad_norm)
    run.optimizer.step()
    require_finite_weights(model, "SFT", where, run.fix)
    run.scheduler.step()
    run.global_step += 1
    if run.global_step % training.log_every == 0:
        console.print(f"SFT step {run.global_step}: {metrics_line(metrics, TRAIN_KEYS)}")
    return metrics


def keep_best_epoch(run: SFTRun) -> None:
    """Load the best validated epoch's weights back (without validation: keep the last)."""
    if run.best.state is not None:
        run.model.load_state_dict(run.best.state)
        console.print(f"SFT: kept epoch {run.best.epoch} (validation reward {run.best.reward:.4f})")


def sft_outputs(
    run: SFTRun,
    history: list[dict],
    config: SFTConfig,
    output: Path,
    cost_weighting: dict,
    given: dict,
    warnings: list[str],
) -> tuple[dict, dict]:
    """The checkpoint's metadata and training_report.json."""
    best_epoch = run.best.epoch or config.training.epochs
    metadata = {
        "stage": "sft",
        "best_epoch": best_epoch,
        "history": history,
        "cost_weighting": cost_weighting,
        "inputs": given,
    }
    report = {
        "stage": "sft",
        "checkpoint": str(output),
        "worker_ids": run.model.worker_ids,
        "best_epoch": best_epoch,
        "best_validation_reward": run.best.reward if run.best.state is not None else None,
        "config": config.model_dump(mode="json"),
        "cost_weighting": cost_weighting,
        "svf_matrices": run.model.svf.names if run.model.svf is not None else [],
        "warnings": warnings,
        "history": history,
    }
    return metadata, report
