"""Scoring an ES population: a split's data as one batch, many flat parameter vectors'
logits in one forward (or in turn with SVF), their fitness, and the policy metrics of one
model on a split. `train_es.py` runs the search with these."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.func import functional_call

from .model import RouterModel
from .schemas import RewardRecord
from .training_common import make_loader, move_batch, optimizer_parameters


@dataclass(frozen=True)
class SplitData:
    """Every prompt of one split as one batch: the model's inputs and the reward matrix."""

    inputs: dict[str, torch.Tensor]
    rewards: torch.Tensor

    def __len__(self) -> int:
        return int(self.rewards.shape[0])

    def subset(self, index: torch.Tensor) -> SplitData:
        return SplitData(
            {key: value[index] for key, value in self.inputs.items()}, self.rewards[index]
        )


def split_data(records: list[RewardRecord], model: RouterModel, split: str) -> SplitData:
    """One split's cached features (tokenized prompts with SVF) and rewards (ValueError on an
    empty split, like make_loader)."""
    loader = make_loader(records, model, split, batch_size=len(records), shuffle=False)
    inputs, rewards = move_batch(next(iter(loader)), model.device_ref)
    return SplitData(inputs, rewards)


# --- the policy of many parameter vectors at once --------------------------------------------


def trainable_names(model: nn.Module) -> list[str]:
    """Names of `optimizer_parameters(model)`, in the same order."""
    return [name for name, parameter in model.named_parameters() if parameter.requires_grad]


def parameter_vector(model: nn.Module) -> np.ndarray:
    vector = torch.nn.utils.parameters_to_vector(optimizer_parameters(model))
    return vector.detach().cpu().double().numpy().copy()


def set_parameter_vector(model: nn.Module, vector: np.ndarray) -> None:
    parameters = list(optimizer_parameters(model))
    values = torch.as_tensor(vector, dtype=parameters[0].dtype, device=parameters[0].device)
    torch.nn.utils.vector_to_parameters(values, parameters)


@torch.no_grad()
def population_logits(
    model: RouterModel,
    candidates: torch.Tensor,
    inputs: dict[str, torch.Tensor],
    scored: Callable[[int], None] | None = None,
) -> torch.Tensor:
    """Logits [P, B, W] of P flat parameter vectors [P, D] on one batch, in eval mode.

    A bias-free linear head is one matmul; any other head is vmapped functional calls; with
    SVF every candidate runs the backbone in turn, and `scored` is told how many are done
    after each one.
    """
    model.eval()
    if model.svf is not None:
        return _population_logits_in_turn(model, candidates, inputs, scored)
    if searches_output_weights_only(model) and set(inputs) == {"features"}:
        # Everything before the output layer is fixed: run it once, then one einsum.
        hidden = model.output_layer_inputs(inputs["features"])
        weights = candidates.view(len(candidates), *model.output_layer.weight.shape)
        return torch.einsum("bd,pwd->pbw", hidden, weights)
    names = trainable_names(model)
    shapes = [parameter.shape for parameter in optimizer_parameters(model)]
    pieces = torch.split(candidates, [shape.numel() for shape in shapes], dim=1)
    stacked = {
        name: piece.reshape(len(candidates), *shape)
        for name, piece, shape in zip(names, pieces, shapes, strict=True)
    }
    return torch.func.vmap(lambda params: functional_call(model, params, (), inputs))(stacked)


def searches_output_weights_only(model: RouterModel) -> bool:
    """True when the search vector is exactly the bias-free output layer's weight."""
    searched = list(optimizer_parameters(model))
    output = model.output_layer
    return len(searched) == 1 and searched[0] is output.weight and output.bias is None


def restrict_search(model: RouterModel, search: str) -> None:
    """search='output_layer': freeze the head's layers before its output layer, so only the
    output layer's weights (and the SVF offsets, when enabled) evolve."""
    if search == "head":
        return
    searched = {id(parameter) for parameter in model.output_layer.parameters()}
    for parameter in model.head.parameters():
        if id(parameter) not in searched:
            parameter.requires_grad_(False)


def _population_logits_in_turn(
    model: RouterModel,
    candidates: torch.Tensor,
    inputs: dict[str, torch.Tensor],
    scored: Callable[[int], None] | None,
) -> torch.Tensor:
    parameters = list(optimizer_parameters(model))
    start = torch.nn.utils.parameters_to_vector(parameters).detach().clone()
    try:
        logits = []
        for candidate in candidates:
            torch.nn.utils.vector_to_parameters(candidate.clone(), parameters)
            logits.append(batched_logits(model, inputs))
            if scored is not None:
                scored(len(logits))
        return torch.stack(logits)
    finally:
        torch.nn.utils.vector_to_parameters(start, parameters)


def batched_logits(model: RouterModel, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """`model(**inputs)`; tokenized prompts go through the backbone `feature_batch_size` at a
    time, each chunk cut to its longest prompt (padding is on the right)."""
    if "input_ids" not in inputs:
        return model(**inputs)
    size = model.model_cfg.feature_batch_size
    chunks = []
    for start in range(0, len(inputs["input_ids"]), size):
        mask = inputs["attention_mask"][start : start + size]
        width = max(1, int(mask.sum(dim=1).max()))
        ids = inputs["input_ids"][start : start + size, :width]
        chunks.append(model(input_ids=ids, attention_mask=mask[:, :width]))
    return torch.cat(chunks)


def population_fitness(
    logits: torch.Tensor,
    rewards: torch.Tensor,
    samples: int,
    entropy_coefficient: float,
    generator: torch.Generator | None = None,
) -> dict[str, torch.Tensor]:
    """Per candidate [P]: mean reward of its choices, mean entropy, and the fitness.

    samples=0 scores the argmax choice; N > 0 scores N sampled choices per prompt, drawn
    with the same uniform numbers for every candidate (common random numbers make the
    ranking depend on the policies, not on the luck of the draw).
    """
    log_probabilities = torch.log_softmax(logits, dim=-1)
    probabilities = log_probabilities.exp()
    entropy = -(probabilities * log_probabilities).sum(dim=-1).mean(dim=-1)
    n_candidates, batch, n_workers = logits.shape
    if samples == 0:
        choices = logits.argmax(dim=-1).unsqueeze(1)  # [P, 1, B]
    else:
        uniforms = torch.rand(samples, batch, generator=generator, device=logits.device)
        cumulative = probabilities.cumsum(dim=-1).unsqueeze(1)  # [P, 1, B, W]
        below = cumulative < uniforms[None, :, :, None]
        choices = below.sum(dim=-1).clamp(max=n_workers - 1)  # [P, N, B]
    expanded = rewards.expand(n_candidates, choices.shape[1], batch, n_workers)
    reward = expanded.gather(3, choices.unsqueeze(-1)).squeeze(-1).mean(dim=(1, 2))
    return {
        "fitness": reward + entropy_coefficient * entropy,
        "reward": reward,
        "entropy": entropy,
    }


def policy_metrics(model: RouterModel, data: SplitData) -> dict[str, float]:
    """The metrics of evaluate_loader: argmax reward, expected reward, oracle, entropy."""
    return logits_metrics(policy_logits(model, data), data.rewards)


@torch.no_grad()
def policy_logits(model: RouterModel, data: SplitData) -> torch.Tensor:
    """The logits [B, W] of the model's own parameters on a split, in eval mode."""
    model.eval()
    return batched_logits(model, data.inputs)


def logits_metrics(logits: torch.Tensor, rewards: torch.Tensor) -> dict[str, float]:
    """policy_metrics of these logits [B, W] (finite: torch refuses NaN probabilities)."""
    probabilities = torch.softmax(logits, dim=-1)
    choice = logits.argmax(dim=-1, keepdim=True)
    entropy = torch.distributions.Categorical(probs=probabilities).entropy()
    return {
        "reward": float(rewards.gather(1, choice).mean()),
        "expected_reward": float((probabilities * rewards).sum(dim=-1).mean()),
        "oracle_reward": float(rewards.max(dim=-1).values.mean()),
        "entropy": float(entropy.mean()),
    }
