"""Supervised stage: pull the router's distribution toward softmax(rewards / tau)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from .config import SFTConfig
from .cost_weighting import cost_weighting_summary
from .schemas import RewardRecord
from .threads import torch_fit_threads
from .training_common import (
    console,
    epoch_line,
    evaluate_loader,
    make_loader,
    metrics_line,
    move_batch,
    optimizer_parameters,
    optional_loader,
    require_finite,
    require_finite_weights,
    save_stage,
    stage_inputs,
    stage_progress,
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
    worker_ids = records[0].worker_ids
    train_loader = make_loader(records, model, "train", config.training.batch_size, shuffle=True)
    validation_loader = optional_loader(records, model, "validation", config.training.batch_size)
    if validation_loader is None:
        console.print("[yellow]SFT: no validation split; keeping the last epoch[/yellow]")
    optimizer = torch.optim.AdamW(
        optimizer_parameters(model),
        lr=config.training.learning_rate,
        weight_decay=config.training.weight_decay,
    )
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(
        optimizer, T_max=config.training.epochs * len(train_loader)
    )
    trainable, total = model.trainable_parameter_counts()
    console.print(f"SFT device={model.device_ref}; trainable={trainable:,}/{total:,}")

    fix = (
        f"lower training.learning_rate (now {config.training.learning_rate:g}) or raise "
        f"training.temperature (now {config.training.temperature:g}), and run it again"
    )
    history: list[dict] = []
    global_step = 0
    best_state, best_epoch, best_reward = None, 0, float("-inf")
    with (
        torch_fit_threads(model.svf is not None),
        stage_progress("SFT epochs", each_step_printed=True) as progress,
    ):
        task = progress.add_task("sft", total=config.training.epochs, status="")
        for epoch in range(config.training.epochs):
            model.train()
            epoch_metrics = []
            for batch in train_loader:
                where = f"epoch {epoch + 1}, step {global_step + 1}"
                inputs, rewards = move_batch(batch, model.device_ref)
                logits = model(**inputs)
                loss, metrics = sft_loss(
                    logits, rewards, config.training.temperature, config.training.tie_handling
                )
                require_finite("SFT", where, fix, logits=logits, loss=loss)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(
                    list(optimizer_parameters(model)), config.training.max_grad_norm
                )
                optimizer.step()
                require_finite_weights(model, "SFT", where, fix)
                scheduler.step()
                epoch_metrics.append(metrics)
                global_step += 1
                if global_step % config.training.log_every == 0:
                    console.print(f"SFT step {global_step}: {metrics_line(metrics, TRAIN_KEYS)}")
            report: dict[str, Any] = {"epoch": epoch + 1, "train": _average(epoch_metrics)}
            report["train"].update(evaluate_loader(model, train_loader))
            if validation_loader is not None:
                report["validation"] = evaluate_loader(model, validation_loader)
                if report["validation"]["reward"] > best_reward:
                    best_reward = report["validation"]["reward"]
                    best_epoch, best_state = epoch + 1, copy.deepcopy(model.state_dict())
            history.append(report)
            console.print(epoch_line("SFT", report, config.training.epochs, TRAIN_KEYS))
            progress.update(task, advance=1)

    if best_state is not None:
        model.load_state_dict(best_state)
        console.print(f"SFT: kept epoch {best_epoch} (validation reward {best_reward:.4f})")
    output = Path(output_dir)
    cost_weighting = cost_weighting_summary(records, config.training)
    metadata = {
        "stage": "sft",
        "best_epoch": best_epoch or config.training.epochs,
        "history": history,
        "cost_weighting": cost_weighting,
        "inputs": given,
    }
    report = {
        "stage": "sft",
        "checkpoint": str(output),
        "worker_ids": worker_ids,
        "best_epoch": best_epoch or config.training.epochs,
        "best_validation_reward": best_reward if best_state is not None else None,
        "config": config.model_dump(),
        "cost_weighting": cost_weighting,
        "svf_matrices": model.svf.names if model.svf is not None else [],
        "warnings": warnings,
        "history": history,
    }
    save_stage(model, output, metadata, report)
    return report


def _average(items: list[dict[str, float]]) -> dict[str, float]:
    return {key: sum(item[key] for item in items) / max(1, len(items)) for key in items[0]}
