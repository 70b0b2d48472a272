"""A cost-aware reward head: one checkpoint that answers any cost weight at routing time.

The head predicts, for a prompt, every worker's reward and cost; a request with cost
weight lambda gets

    utility_w = predicted_reward_w - lambda * predicted_cost_w / reference_cost

and the worker with the highest utility (the same trade as the training stages'
reward' = reward - lambda * cost / reference_cost, decided per prompt). The routing
"probabilities" are softmax(utility / temperature): a ranking for fallbacks, not a
calibrated distribution.

This module holds the head (`RewardCostHead`, `CostAwareRouter`, its view at one cost
weight) and its checkpoint files, stored as tensors in `reward_head.safetensors` +
`reward_head.json`; routing is a torch forward pass like any other head. Fitting it and
its training report live in `reward_head_training.py`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import torch
from pydantic import Field, StrictInt
from torch import nn

from .checkpoint import (
    CheckpointError,
    RouterShape,
    check_format,
    check_required_keys,
    check_shape,
    half_saved_hint,
    half_saved_kind,
    read_metadata_object,
    read_tensors,
)
from .checkpoint_backbone import loadable_model_config
from .config import ModelConfig
from .cost_weighting import CostWeightError, check_head_cost_weight
from .features import FeatureExtractor, Prompt
from .model import RouterModel

HEAD_FILE = "reward_head.safetensors"
META_FILE = "reward_head.json"
HEAD_FORMAT = "fugu-lite-reward-head"
# The cost weights `eval --pareto` sweeps and a server lists: 0, then 10 per decade from
# 1e-3 to 100 (neighbours 26% apart). Routing (`route`, `serve`) uses any requested weight.
SERVED_COST_WEIGHTS: tuple[float, ...] = (
    0.0,
    *(float(f"{10 ** (step / 10):.3g}") for step in range(-30, 21)),
)


# --- the head -------------------------------------------------------------------------------


class RewardCostHead(nn.Module):
    """Standardised features -> (predicted rewards [N, W], predicted costs [N, W]).

    `assign_*` stack every member's cluster-assignment layer (member i owns
    `group_sizes[i]` consecutive rows); `cluster_rewards` holds each cluster's mean train
    reward per worker; `cost_*` is the linear cost model (absolute cost units)."""

    assign_weight: torch.Tensor  # buffers, registered in __init__
    assign_bias: torch.Tensor
    cluster_rewards: torch.Tensor
    cost_weight: torch.Tensor
    cost_bias: torch.Tensor

    def __init__(self, feature_dim: int, n_workers: int, group_sizes: Sequence[int]) -> None:
        super().__init__()
        self.group_sizes = [int(size) for size in group_sizes]
        total = sum(self.group_sizes)
        self.register_buffer("assign_weight", torch.zeros(total, feature_dim))
        self.register_buffer("assign_bias", torch.zeros(total))
        self.register_buffer("cluster_rewards", torch.zeros(total, n_workers))
        self.register_buffer("cost_weight", torch.zeros(n_workers, feature_dim))
        self.register_buffer("cost_bias", torch.zeros(n_workers))

    def forward(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = features @ self.assign_weight.T + self.assign_bias
        members = [
            torch.softmax(group, dim=-1) @ rewards
            for group, rewards in zip(
                logits.split(self.group_sizes, dim=-1),
                self.cluster_rewards.split(self.group_sizes, dim=0),
                strict=True,
            )
        ]
        rewards = torch.stack(members).mean(dim=0)
        costs = (features @ self.cost_weight.T + self.cost_bias).clamp(min=0.0)
        return rewards, costs


class CostAwareRouter(RouterModel):
    """A RouterModel (same backbone features, normaliser, checkpoint discipline) whose head
    predicts per-worker reward and cost. Called like any router it returns the logits at
    cost weight 0; `at_cost_weight(lambda)` gives a view that routes at another weight."""

    tensor_file = HEAD_FILE
    metadata_file = META_FILE
    checkpoint_format = HEAD_FORMAT

    def __init__(
        self,
        model_cfg: ModelConfig,
        worker_ids: Sequence[str],
        feature_dim: int,
        group_sizes: Sequence[int],
        reference_cost: float | None,
        temperature: float,
        backbone_parameters: int = 0,
        extractor: FeatureExtractor | None = None,
    ) -> None:
        if model_cfg.svf_targets:
            raise ValueError(
                "the reward head is fitted on cached (frozen-backbone) features, so it cannot "
                f"use SVF (svf_targets={model_cfg.svf_targets}); leave svf_targets empty"
            )
        # The head's layers are fitted on standardised features.
        cfg = model_cfg.model_copy(update={"normalize_features": True})
        super().__init__(cfg, worker_ids, feature_dim, backbone_parameters, extractor)
        self.head = RewardCostHead(feature_dim, len(self.worker_ids), group_sizes)
        self.reference_cost = reference_cost
        self.temperature = temperature

    @property
    def predicts_costs(self) -> bool:
        return self.reference_cost is not None

    def forward(
        self,
        features: torch.Tensor | None = None,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return self.logits_at(self.resolve_features(features, input_ids, attention_mask), 0.0)

    def predict(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(predicted rewards, predicted costs), each [N, W]."""
        return self.head(self.normalize(features.to(self.device_ref)))

    def utilities(self, features: torch.Tensor, cost_weight: float) -> torch.Tensor:
        """predicted reward - cost_weight * predicted cost / reference cost, [N, W]."""
        check_head_cost_weight(cost_weight)
        rewards, costs = self.predict(features)
        if cost_weight == 0:
            return rewards
        if self.reference_cost is None:
            raise CostWeightError(
                f"this reward head was trained on records without costs, so it predicts no "
                f"costs and cannot serve cost weight {cost_weight:g}; retrain it on records "
                "with `costs`, or leave the cost weight out"
            )
        return rewards - cost_weight * costs / self.reference_cost

    def logits_at(self, features: torch.Tensor, cost_weight: float) -> torch.Tensor:
        return self.utilities(features, cost_weight) / self.temperature

    def at_cost_weight(self, cost_weight: float) -> CostWeightedView:
        check_head_cost_weight(cost_weight)
        return CostWeightedView(self, cost_weight)

    def checkpoint_fields(self) -> dict:
        return {
            "group_sizes": self.head.group_sizes,
            "reference_cost": self.reference_cost,
            "temperature": self.temperature,
        }


@dataclass
class CostWeightedView:
    """The reward head at one cost weight, with the parts of the RouterModel interface that
    routing, evaluation and the server use (they hold one of these per listed weight)."""

    router: CostAwareRouter
    cost_weight: float

    @property
    def worker_ids(self) -> list[str]:
        return self.router.worker_ids

    @property
    def model_cfg(self) -> ModelConfig:
        return self.router.model_cfg

    @property
    def feature_dim(self) -> int:
        return self.router.feature_dim

    @property
    def device_ref(self) -> torch.device:
        return self.router.device_ref

    def __call__(
        self,
        features: torch.Tensor | None = None,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        features = self.router.resolve_features(features, input_ids, attention_mask)
        return self.router.logits_at(features, self.cost_weight)

    @torch.inference_mode()
    def probabilities(
        self, features: torch.Tensor, allowed: Sequence[str] | None = None
    ) -> torch.Tensor:
        return torch.softmax(self.allowed_logits(features, allowed), dim=-1)

    @torch.inference_mode()
    def allowed_logits(
        self, features: torch.Tensor, allowed: Sequence[str] | None = None
    ) -> torch.Tensor:
        """utility / temperature; -inf for a worker not in `allowed`."""
        return self.router.without_disallowed(self(features=features.to(self.device_ref)), allowed)

    def features_for(self, prompts: Sequence[Prompt], use_cache: bool = True) -> torch.Tensor:
        return self.router.features_for(prompts, use_cache)

    def backbone_extractor(self) -> FeatureExtractor:
        return self.router.backbone_extractor()

    def worker_mask(self, allowed: Sequence[str]) -> torch.Tensor:
        return self.router.worker_mask(allowed)

    def eval(self) -> CostWeightedView:
        self.router.eval()
        return self

    def train(self, mode: bool = True) -> CostWeightedView:
        self.router.train(mode)
        return self

    def to(self, device: str | torch.device) -> CostWeightedView:
        self.router.to(device)
        return self


# --- loading --------------------------------------------------------------------------------


TRAIN_REWARD_HEAD = "`fugu-lite train reward-head`"
RETRAIN_HEAD = f"retrain with {TRAIN_REWARD_HEAD}"


class RewardHeadShape(RouterShape):
    """reward_head.json's keys beyond a router's: a negative reference cost turned every cost
    into a gain, so a cost weight favoured the dearest workers; a group size of 0 added a
    member predicting reward 0 to the mean, and a negative one failed every request.
    Infinity (which JSON readers take) passed gt=0: an infinite reference cost routed every
    cost weight as 0, and an infinite temperature tied every worker at every prompt."""

    group_sizes: list[Annotated[StrictInt, Field(ge=1)]] = Field(min_length=1)
    reference_cost: float | None = Field(gt=0, allow_inf_nan=False)
    temperature: float = Field(gt=0, allow_inf_nan=False)


def is_reward_head(path: str | Path) -> bool:
    return (Path(path) / META_FILE).is_file()


def _not_a_reward_head(directory: Path) -> str:
    """Why the folder is no reward-head checkpoint, naming the command that writes one once:
    the hint on a head whose save stopped before its metadata already says to run it again."""
    stopped = (
        half_saved_kind(directory) == (HEAD_FILE, META_FILE) and (directory / HEAD_FILE).exists()
    )
    written_by = "" if stopped else f" (written by {TRAIN_REWARD_HEAD})"
    return (
        f"{directory} is not a reward-head checkpoint: it needs {HEAD_FILE} and {META_FILE}"
        f"{written_by}{half_saved_hint(directory)}"
    )


def load_reward_head(
    directory: str | Path, worker_ids: Sequence[str] | None = None, backbone: str | None = None
) -> CostAwareRouter:
    """Load a reward-head checkpoint; with workers given, refuse one trained for others.
    `backbone` says where its backbone is now (see checkpoint_backbone.locate_backbone)."""
    directory = Path(directory)
    meta_path = directory / META_FILE
    if not meta_path.is_file() or not (directory / HEAD_FILE).is_file():
        raise CheckpointError(_not_a_reward_head(directory))
    try:
        meta = read_metadata_object(meta_path, RETRAIN_HEAD)
        check_format(meta, meta_path, HEAD_FORMAT, untagged_ok=False)
        check_required_keys(meta, meta_path, RETRAIN_HEAD)
        check_shape(RewardHeadShape, meta, meta_path, RETRAIN_HEAD)
        model_cfg = loadable_model_config(meta, meta_path, backbone)
        router = CostAwareRouter(
            model_cfg,
            meta["worker_ids"],
            int(meta["feature_dim"]),
            meta["group_sizes"],
            meta["reference_cost"],
            float(meta["temperature"]),
            int(meta["backbone_parameters"]),
        )
    except CheckpointError:
        raise
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as error:
        raise CheckpointError(f"{meta_path} is damaged ({error}); {RETRAIN_HEAD}") from error
    if worker_ids is not None and list(worker_ids) != router.worker_ids:
        raise CheckpointError(
            f"reward head {directory} does not match: workers: checkpoint {router.worker_ids} "
            f"vs records {list(worker_ids)}"
        )
    try:
        router.load_state_dict(read_tensors(directory / HEAD_FILE, meta, meta_path), strict=True)
    except RuntimeError as error:
        raise CheckpointError(
            f"reward head {directory} does not fit its metadata: {error}"
        ) from error
    return router.to(model_cfg.device).eval()
