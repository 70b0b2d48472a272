from __future__ import annotations

from pathlib import Path

import torch

from .config import RLConfig
from .cost_weighting import cost_weighting_summary
from .schemas import RewardRecord
from .text import notes_console
from .threads import torch_fit_threads
from .training_common import (
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


def train_rl(
    records: list[RewardRecord],
    config: RLConfig,
    output_dir: str | Path,
    checkpoint: str | None = None,
) -> dict:
    records_read = records
    records, model, warnings = start_stage(records, config.model, config.training, checkpoint)
    given = stage_inputs(config, records_read, checkpoint)
    worker_ids = records[0].worker_ids
    train_loader = make_loader(records, model, "train", config.training.batch_size, shuffle=True)
    validation_loader = optional_loader(records, model, "validation", config.training.batch_size)
    optimizer = torch.optim.AdamW(
        optimizer_parameters(model),
        lr=config.training.learning_rate,
        weight_decay=config.training.weight_decay,
    )
    trainable, total = model.trainable_parameter_counts()
    console.print(
        f"RL device={model.device_ref}; trainable={trainable:,}/{total:,} "
        f"({100 * trainable / total:.4f}%)"
    )

    fix = f"lower training.learning_rate (now {config.training.learning_rate:g}) and run it again"
    history: list[dict] = []
    global_step = 0
    optimizer.zero_grad(set_to_none=True)
    with (
        torch_fit_threads(model.svf is not None),
        stage_progress("RL epochs", each_step_printed=True) as progress,
    ):
        task = progress.add_task("rl", total=config.training.epochs, status="")
        for epoch in range(config.training.epochs):
            model.train()
            epoch_metrics: list[dict[str, float]] = []
            for step, batch in enumerate(train_loader):
                where = f"epoch {epoch + 1}, step {global_step + 1}"
                inputs, rewards = move_batch(batch, model.device_ref)
                logits = model(**inputs)
                require_finite("RL", where, fix, logits=logits)
                loss, metrics = contextual_bandit_loss(
                    logits,
                    rewards,
                    estimator=config.training.estimator,
                    rollouts_per_prompt=config.training.rollouts_per_prompt,
                    entropy_coefficient=config.training.entropy_coefficient,
                    normalize_advantage=config.training.normalize_advantage,
                )
                (loss / config.training.gradient_accumulation_steps).backward()
                epoch_metrics.append(metrics)
                should_step = (
                    step + 1
                ) % config.training.gradient_accumulation_steps == 0 or step + 1 == len(
                    train_loader
                )
                if should_step:
                    torch.nn.utils.clip_grad_norm_(
                        list(optimizer_parameters(model)), config.training.max_grad_norm
                    )
                    optimizer.step()
                    require_finite_weights(model, "RL", where, fix)
                    optimizer.zero_grad(set_to_none=True)
                    global_step += 1
                    if global_step % config.training.log_every == 0:
                        console.print(f"RL step {global_step}: {metrics_line(metrics, TRAIN_KEYS)}")
            averaged = {
                key: sum(item[key] for item in epoch_metrics) / max(1, len(epoch_metrics))
                for key in epoch_metrics[0]
            }
            epoch_report = {"epoch": epoch + 1, "train": averaged}
            if validation_loader is not None:
                epoch_report["validation"] = evaluate_loader(model, validation_loader)
            history.append(epoch_report)
            console.print(epoch_line("RL", epoch_report, config.training.epochs, TRAIN_KEYS))
            progress.update(task, advance=1)

    output = Path(output_dir)
    cost_weighting = cost_weighting_summary(records, config.training)
    metadata = {
        "stage": "rl",
        "global_step": global_step,
        "history": history,
        "cost_weighting": cost_weighting,
        "inputs": given,
    }
    report = {
        "stage": "rl",
        "checkpoint": str(output),
        "worker_ids": worker_ids,
        "global_step": global_step,
        "config": config.model_dump(),
        "cost_weighting": cost_weighting,
        "warnings": warnings,
        "history": history,
    }
    save_stage(model, output, metadata, report)
    return report
