from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch.utils.data import DataLoader

from .config import RLConfig, RLTrainingConfig
from .cost_weighting import cost_weighting_summary
from .model import RouterModel
from .schemas import RewardRecord
from .text import console_text, notes_console
from .training_common import (
    Batch,
    epoch_mean,
    evaluate_loader,
    make_loader,
    make_model,
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

# The seed's names, for scripts that build their own loop from this module.
__all__ = [
    "RLConfig",
    "RewardRecord",
    "contextual_bandit_loss",
    "make_loader",
    "make_model",
    "train_rl",
]

# progress and notes; see training_common.console
console = notes_console()
TRAIN_KEYS = ("sampled_reward", "entropy")


def contextual_bandit_loss(
    logits: torch.Tensor,
    rewards: torch.Tensor,
    estimator: str = "reinforce",
    rollouts_per_prompt: int = 8,
    entropy_coefficient: float = 0.01,
    normalize_advantage: bool = False,
) -> tuple[torch.Tensor, dict[str, float]]:
    distribution = torch.distributions.Categorical(logits=logits)
    entropy = distribution.entropy().mean()
    probabilities = distribution.probs

    if estimator == "expected_reward":
        objective = (probabilities * rewards).sum(dim=-1).mean()
        policy_loss = -objective
        sampled_reward = objective.detach()
    elif estimator == "reinforce":
        if rollouts_per_prompt < 1:
            raise ValueError("rollouts_per_prompt must be at least 1")
        actions = distribution.sample((rollouts_per_prompt,))
        expanded_rewards = rewards.unsqueeze(0).expand(rollouts_per_prompt, -1, -1)
        sampled = expanded_rewards.gather(2, actions.unsqueeze(-1)).squeeze(-1)
        baseline = (probabilities.detach() * rewards).sum(dim=-1).unsqueeze(0)
        advantage = sampled - baseline
        if normalize_advantage and advantage.numel() > 1:
            advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-6)
        log_prob = distribution.log_prob(actions)
        policy_loss = -(log_prob * advantage.detach()).mean()
        sampled_reward = sampled.mean().detach()
    else:
        raise ValueError(f"Unknown estimator: {estimator}")

    loss = policy_loss - entropy_coefficient * entropy
    reward_spread = rewards.max(dim=-1).values - rewards.min(dim=-1).values
    metrics = {
        "loss": float(loss.detach()),
        "sampled_reward": float(sampled_reward),
        "entropy": float(entropy.detach()),
        "zero_spread_fraction": float((reward_spread.abs() < 1e-8).float().mean()),
    }
    return loss, metrics


@dataclass
class RLRun:
    """What the epochs share: the model, its data and optimiser, and the steps taken."""

    model: RouterModel
    training: RLTrainingConfig
    train_loader: DataLoader
    validation_loader: DataLoader | None
    optimizer: torch.optim.Optimizer
    fix: str
    global_step: int = 0


def train_rl(
    records: list[RewardRecord],
    config: RLConfig,
    output_dir: str | Path,
    checkpoint: str | None = None,
) -> dict:
    records_read = records
    records, model, warnings = start_stage(records, config.model, config.training, checkpoint)
    warnings += unused_settings(config.training)
    given = stage_inputs(config, records_read, checkpoint)
    run = prepare_run(records, model, config.training)
    run.optimizer.zero_grad(set_to_none=True)
    history = run_epochs(
        "RL",
        model,
        config.training.epochs,
        lambda epoch: run_epoch(run, epoch),
        TRAIN_KEYS,
        console,
    )
    output = Path(output_dir)
    cost_weighting = cost_weighting_summary(records, config.training)
    metadata, report = rl_outputs(run, history, config, output, cost_weighting, given, warnings)
    save_stage(model, output, metadata, report)
    return report


def unused_settings(training: RLTrainingConfig) -> list[str]:
    """The warning (printed here, returned for the report) on normalize_advantage set for the
    expected_reward estimator, which samples no advantages: the setting changed nothing."""
    if not training.normalize_advantage or training.estimator == "reinforce":
        return []
    warning = (
        "training.normalize_advantage applies to the reinforce estimator only: with "
        "expected_reward (the exact gradient, no sampled advantages) it changes nothing; set "
        "training.estimator to reinforce to use it, or leave it false"
    )
    console.print(f"[yellow]warning:[/yellow] {console_text(warning)}")
    return [warning]


def prepare_run(
    records: list[RewardRecord], model: RouterModel, training: RLTrainingConfig
) -> RLRun:
    """The loaders, the optimiser, and a line on the device and trainable parameters."""
    train_loader = make_loader(records, model, "train", training.batch_size, shuffle=True)
    validation_loader = optional_loader(records, model, "validation", training.batch_size)
    optimizer = torch.optim.AdamW(
        optimizer_parameters(model),
        lr=training.learning_rate,
        weight_decay=training.weight_decay,
    )
    trainable, total = model.trainable_parameter_counts()
    console.print(
        f"RL device={model.device_ref}; trainable={trainable:,}/{total:,} "
        f"({100 * trainable / total:.4f}%)"
    )
    fix = f"lower training.learning_rate (now {training.learning_rate:g}) and run it again"
    return RLRun(model, training, train_loader, validation_loader, optimizer, fix)


def run_epoch(run: RLRun, epoch: int) -> dict:
    """One pass over the train batches, then the epoch's report (train metrics averaged over
    its prompts, and validation's)."""
    run.model.train()
    steps = [
        (train_batch(run, batch, epoch, step), len(batch["rewards"]))
        for step, batch in enumerate(run.train_loader)
    ]
    epoch_report = {"epoch": epoch, "train": epoch_mean(steps)}
    if run.validation_loader is not None:
        epoch_report["validation"] = evaluate_loader(run.model, run.validation_loader)
    return epoch_report


def train_batch(run: RLRun, batch: Batch, epoch: int, step: int) -> dict[str, float]:
    """Accumulate one batch's gradient (stopping on NaN or infinite logits), and step the
    optimiser every gradient_accumulation_steps batches and on the epoch's last one."""
    model, training = run.model, run.training
    where = f"epoch {epoch}, step {run.global_step + 1}"
    inputs, rewards = move_batch(batch, model.device_ref)
    logits = model(**inputs)
    require_finite("RL", where, run.fix, logits=logits)
    loss, metrics = contextual_bandit_loss(
        logits,
        rewards,
        estimator=training.estimator,
        rollouts_per_prompt=training.rollouts_per_prompt,
        entropy_coefficient=training.entropy_coefficient,
        normalize_advantage=training.normalize_advantage,
    )
    (loss / training.gradient_accumulation_steps).backward()
    last = step + 1 == len(run.train_loader)
    if (step + 1) % training.gradient_accumulation_steps == 0 or last:
        optimizer_step(run, where, metrics)
    return metrics


def optimizer_step(run: RLRun, where: str, metrics: dict[str, float]) -> None:
    """Clip, step (stopping on NaN or infinite weights), zero the gradients, count the step
    and print its line every log_every steps."""
    torch.nn.utils.clip_grad_norm_(
        list(optimizer_parameters(run.model)), run.training.max_grad_norm
    )
    run.optimizer.step()
    require_finite_weights(run.model, "RL", where, run.fix)
    run.optimizer.zero_grad(set_to_none=True)
    run.global_step += 1
    if run.global_step % run.training.log_every == 0:
        console.print(f"RL step {run.global_step}: {metrics_line(metrics, TRAIN_KEYS)}")


def rl_outputs(
    run: RLRun,
    history: list[dict],
    config: RLConfig,
    output: Path,
    cost_weighting: dict,
    given: dict,
    warnings: list[str],
) -> tuple[dict, dict]:
    """The checkpoint's metadata and training_report.json."""
    metadata = {
        "stage": "rl",
        "global_step": run.global_step,
        "history": history,
        "cost_weighting": cost_weighting,
        "inputs": given,
    }
    report = {
        "stage": "rl",
        "checkpoint": str(output),
        "worker_ids": run.model.worker_ids,
        "global_step": run.global_step,
        "config": config.model_dump(mode="json"),
        "cost_weighting": cost_weighting,
        "warnings": warnings,
        "history": history,
    }
    return metadata, report
