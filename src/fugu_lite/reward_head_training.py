"""Fitting the reward head (`reward_head.py`) and its training report.

Predicted reward: an ensemble of cluster mixtures. Each member clusters the train
prompts' backbone features (k-means on unit-length features), learns to assign a prompt
to those clusters (multinomial logistic regression on standardised features), and
predicts the assignment-weighted mean train reward of each cluster. Why clusters: on
LLMRouter a worker's reward is mostly a property of the kind of prompt, so pooling whole
clusters estimates it with less noise than the k nearest prompts or a regression on
single prompts (5-fold cross-validation over train + validation, bench/README.md).
Predicted cost: ridge regression on the standardised features (costs are prices x
tokens, so they follow the prompt).

Everything is fitted in closed form or by sklearn on cached features (no gradient
steps).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from pydantic import Field, field_validator, model_validator
from sklearn.cluster import KMeans
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression, Ridge

from .config import MAX_SEED, ModelConfig, StrictModel
from .cost_weighting import default_reference_cost, require_costs, training_records
from .evaluation.curves import baseline_curve, worker_points
from .evaluation.hull import aiq, non_decreasing_hull, reward_floor
from .evaluation.table import RewardTable, argmax_choices, reward_table
from .feature_cache import backbone_shape, compute_features
from .reward_head import SERVED_COST_WEIGHTS, CostAwareRouter, RewardCostHead
from .schemas import RewardRecord, check_same_workers, records_in_split
from .text import console_text, notes_console
from .threads import fit_threads
from .training_common import (
    nothing_to_learn,
    require_finite_features,
    require_split,
    stage_progress,
    write_stage_files,
)

console = notes_console()


class RewardHeadTraining(StrictModel):
    """How the reward head is fitted (defaults chosen by cross-validation on LLMRouter's
    train + validation splits; see bench/README.md)."""

    cluster_counts: list[int] = Field(
        default_factory=lambda: [30, 50, 80],
        min_length=1,
        description="k-means cluster counts; each gives `clusterings_per_count` members.",
    )
    clusterings_per_count: int = Field(default=2, ge=1)
    min_cluster_prompts: int = Field(
        default=10, ge=1, description="Fewer clusters on small data: at most n_train / this."
    )
    assignment_c: float = Field(
        default=0.1, gt=0, description="Inverse L2 strength of the cluster assignment."
    )
    kmeans_restarts: int = Field(default=4, ge=1)
    cost_alpha: float = Field(default=1e4, gt=0, description="Ridge strength of the cost head.")
    temperature: float = Field(
        default=0.05, gt=0, description="Routing probabilities = softmax(utility / this)."
    )
    reference_cost: float | None = Field(
        default=None, gt=0, description="None = mean cost over the train split's cells."
    )
    seed: int = Field(default=0, ge=0, le=MAX_SEED)

    @field_validator("cluster_counts")
    @classmethod
    def _positive_counts(cls, counts: list[int]) -> list[int]:
        if any(count < 1 for count in counts):
            raise ValueError("each cluster count must be >= 1")  # the error shows the list
        return counts

    @model_validator(mode="after")
    def _seeds_in_range(self) -> RewardHeadTraining:
        """Clustering i seeds k-means with seed + i, which numpy takes up to MAX_SEED: a seed
        near it passed the config and stopped the run in k-means, naming no key."""
        clusterings = len(self.cluster_counts) * self.clusterings_per_count
        if self.seed + clusterings - 1 > MAX_SEED:
            raise ValueError(
                f"seed {self.seed}: its {clusterings} clusterings seed k-means with seed + 0 to "
                f"seed + {clusterings - 1}, which must stay <= {MAX_SEED}; use a seed <= "
                f"{MAX_SEED - clusterings + 1}"
            )
        return self


NO_COSTS_FIX = (
    "without them the head predicts rewards only and serves cost weight 0 only; give those "
    "records their costs for any other"
)
HEAD_COST_FIX = (
    "set training.reference_cost (e.g. --set training.reference_cost=1: every cost weight "
    "then routes as 0 does), or give the records their real costs"
)


class RewardHeadConfig(StrictModel):
    model: ModelConfig = ModelConfig()
    training: RewardHeadTraining = RewardHeadTraining()


# --- fitting --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClusterMixture:
    """One member: assignment logits = standardised features @ weight.T + bias over its
    clusters, and each cluster's mean train reward per worker."""

    weight: np.ndarray  # [K, D]
    bias: np.ndarray  # [K]
    rewards: np.ndarray  # [K, W]


def effective_cluster_count(requested: int, n_train: int, n_distinct: int, per: int) -> int:
    """The clusters fitted for `requested`: at most `cluster_count_cap`, and at least 1."""
    return max(1, min(requested, cluster_count_cap(n_train, n_distinct, per)))


def cluster_count_cap(n_train: int, n_distinct: int, per: int) -> int:
    """The most clusters a train split allows: n_train / per, no more than distinct feature
    rows, and at least 1."""
    return max(1, min(n_train // per, n_distinct))


def fewer_clusters_note(
    requested: Sequence[int], planned: Sequence[int], n_train: int, n_distinct: int, per: int
) -> str | None:
    """What a user who asked for more clusters than the train split allows should read: the
    counts asked and fitted, and why (None when every count is fitted as asked)."""
    capped = {
        asked: fitted for asked, fitted in zip(requested, planned, strict=True) if fitted < asked
    }
    if not capped:
        return None
    counts = ", ".join(f"{asked} -> {fitted}" for asked, fitted in capped.items())
    allowed = cluster_count_cap(n_train, n_distinct, per)
    return (
        f"fewer clusters than training.cluster_counts asks for ({counts}): the {n_train} train "
        f"prompts ({n_distinct} distinct) allow at most {allowed} "
        f"(training.min_cluster_prompts={per} prompts per cluster); add train records or "
        "lower min_cluster_prompts for more"
    )


def fit_cluster_mixture(
    raw: np.ndarray,
    standardised: np.ndarray,
    rewards: np.ndarray,
    n_clusters: int,
    seed: int,
    assignment_c: float,
    restarts: int,
) -> ClusterMixture:
    """k-means on the unit-length raw features (cosine geometry, like the kNN baseline),
    then a logistic assignment to the clusters on the standardised ones."""
    if n_clusters == 1:
        return ClusterMixture(
            weight=np.zeros((1, standardised.shape[1])),
            bias=np.zeros(1),
            rewards=rewards.mean(axis=0, keepdims=True),
        )
    unit = raw / np.maximum(np.linalg.norm(raw, axis=1, keepdims=True), 1e-12)
    with fit_threads(), warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # duplicate rows: fewer clusters
        labels = KMeans(n_clusters, n_init=restarts, random_state=seed).fit(unit).labels_
        classes = np.unique(labels)
        if len(classes) == 1:
            return fit_cluster_mixture(raw, standardised, rewards, 1, seed, assignment_c, restarts)
        assignment = LogisticRegression(C=assignment_c, max_iter=3000).fit(standardised, labels)
    weight, bias = assignment.coef_, assignment.intercept_
    if len(classes) == 2:  # sklearn's binary form: p(class 1) = sigmoid(z) = softmax([0, z])
        weight = np.vstack([np.zeros_like(weight), weight])
        bias = np.concatenate([[0.0], bias])
    table = np.stack([rewards[labels == label].mean(axis=0) for label in assignment.classes_])
    return ClusterMixture(weight=weight, bias=bias, rewards=table)


def fit_cost_model(
    standardised: np.ndarray, costs: np.ndarray, reference: float, alpha: float
) -> tuple[np.ndarray, np.ndarray]:
    """Ridge on standardised features for cost / reference; returned in cost units."""
    with fit_threads():
        ridge = Ridge(alpha=alpha).fit(standardised, costs / reference)
    return ridge.coef_ * reference, np.asarray(ridge.intercept_) * reference


@dataclass(frozen=True)
class FitData:
    """The train split as the fits read it: raw and standardised features, and rewards
    (and costs) per prompt and worker."""

    raw: np.ndarray
    standardised: np.ndarray
    table: RewardTable

    @property
    def n_prompts(self) -> int:
        return len(self.raw)

    @property
    def n_distinct(self) -> int:
        return len(np.unique(self.standardised, axis=0))


def train_reward_head(
    records: list[RewardRecord], config: RewardHeadConfig, output_dir: str | Path
) -> dict:
    """Fit the reward head on the train split's cached features; report validation figures
    (mean reward at cost weight 0, and AIQ over `SERVED_COST_WEIGHTS` when there are costs);
    write the checkpoint and training_report.json into OUTPUT."""
    started = time.perf_counter()
    settings = config.training
    output = Path(output_dir)
    worker_ids = check_same_workers(records)
    train = require_split(records, "train")
    warnings_seen, has_costs = head_warnings(records, train, worker_ids)
    reference = None
    if has_costs:
        reference = settings.reference_cost or default_reference_cost(records, HEAD_COST_FIX)
    router, data = start_router(config, train, worker_ids, reference)
    requested, plan = cluster_plan(settings, data)
    members = fit_members(data, plan, settings)
    router.head = assembled_head(members, data, reference, settings.cost_alpha)
    router.eval()
    validation = validation_summary(router, records)
    report = {
        "stage": "reward_head",
        "checkpoint": str(output),
        "worker_ids": worker_ids,
        "n_train": data.n_prompts,
        "clusterings": [
            {"requested": requested[i], "clusters": len(m.bias), "seed": settings.seed + i}
            for i, m in enumerate(members)
        ],
        "reference_cost": reference,
        "predicts_costs": reference is not None,
        "config": config.model_dump(),
        "validation": validation,
        "warnings": warnings_seen,
        "seconds": time.perf_counter() - started,
    }
    metadata = {key: value for key, value in report.items() if key != "seconds"}
    write_stage_files(router, output, metadata, report)
    console.print(f"reward head: {_describe(validation)}", markup=False)
    return report


def head_warnings(
    records: list[RewardRecord], train: list[RewardRecord], worker_ids: list[str]
) -> tuple[list[str], bool]:
    """The warnings for the report (printed here): train or validation records without costs
    (not an error: a head without costs serves cost weight 0), and a train split that cannot
    teach a choice; and whether there are costs."""
    # The test split is evaluation's: its records need no costs (as for the other stages).
    warnings_seen = []
    try:
        require_costs(
            training_records(records),
            "a cost-aware head",
            NO_COSTS_FIX,
            "train and validation records",
        )
    except ValueError as missing:
        warnings_seen.append(str(missing))
    has_costs = not warnings_seen
    cannot_choose = nothing_to_learn(train)
    if cannot_choose and has_costs and len(worker_ids) > 1 and len(train) > 1:
        # the rewards tie, yet the predicted costs still order the workers
        cannot_choose += (
            " (this holds at cost weight 0, which a request without one gets; above it the "
            "head chooses by predicted cost)"
        )
    if cannot_choose:
        warnings_seen.append(cannot_choose)
    for warning in warnings_seen:
        console.print(f"[yellow]warning:[/yellow] reward head: {console_text(warning)}")
    return warnings_seen, has_costs


def start_router(
    config: RewardHeadConfig,
    train: list[RewardRecord],
    worker_ids: list[str],
    reference: float | None,
) -> tuple[CostAwareRouter, FitData]:
    """A router with a placeholder head and its normaliser fitted on the train features, and
    those features (raw and standardised) with the train rewards."""
    shape, extractor = backbone_shape(config.model)
    features, loaded = compute_features(
        [record.prompt for record in train], config.model, extractor
    )
    require_finite_features(features, train, config.model.backbone, "train")
    router = CostAwareRouter(
        config.model,
        worker_ids,
        shape.hidden_size,
        [1],
        reference,
        config.training.temperature,
        shape.parameters,
        loaded or extractor,
    )
    router.fit_normalizer(features)
    data = FitData(
        raw=features.numpy().astype(np.float64),
        standardised=router.normalize(features).numpy().astype(np.float64),
        table=reward_table(train),
    )
    return router, data


def cluster_plan(settings: RewardHeadTraining, data: FitData) -> tuple[list[int], list[int]]:
    """Each member's requested and fitted cluster count (saying when fewer are fitted)."""
    n_train, n_distinct = data.n_prompts, data.n_distinct
    requested = [
        count for count in settings.cluster_counts for _ in range(settings.clusterings_per_count)
    ]
    plan = [
        effective_cluster_count(count, n_train, n_distinct, settings.min_cluster_prompts)
        for count in requested
    ]
    fewer = fewer_clusters_note(requested, plan, n_train, n_distinct, settings.min_cluster_prompts)
    if fewer:
        console.print(f"reward head: {fewer}", markup=False)
    return requested, plan


def fit_members(
    data: FitData, plan: list[int], settings: RewardHeadTraining
) -> list[ClusterMixture]:
    """One cluster mixture per planned count (member i seeded with seed + i), under a
    progress bar."""
    members = []
    with stage_progress("reward head", console) as progress:
        task = progress.add_task("clusterings", total=len(plan), status="")
        for member_index, count in enumerate(plan):
            progress.update(task, status=f"k={count}")
            members.append(
                fit_cluster_mixture(
                    data.raw,
                    data.standardised,
                    data.table.rewards,
                    count,
                    settings.seed + member_index,
                    settings.assignment_c,
                    settings.kmeans_restarts,
                )
            )
            progress.advance(task)
    return members


def assembled_head(
    members: list[ClusterMixture], data: FitData, reference: float | None, cost_alpha: float
) -> RewardCostHead:
    """The members stacked into one head, with the cost model fitted when there are costs."""
    n_workers = data.table.rewards.shape[1]
    head = RewardCostHead(data.raw.shape[1], n_workers, [len(m.bias) for m in members])
    head.assign_weight.copy_(_tensor(np.vstack([m.weight for m in members])))
    head.assign_bias.copy_(_tensor(np.concatenate([m.bias for m in members])))
    head.cluster_rewards.copy_(_tensor(np.vstack([m.rewards for m in members])))
    if reference is not None and data.table.costs is not None:
        weight, bias = fit_cost_model(data.standardised, data.table.costs, reference, cost_alpha)
        head.cost_weight.copy_(_tensor(weight))
        head.cost_bias.copy_(_tensor(bias))
    return head


def validation_summary(router: CostAwareRouter, records: list[RewardRecord]) -> dict | None:
    """Validation mean reward at cost weight 0, the prediction errors, and (with costs) the
    AIQ over SERVED_COST_WEIGHTS on the validation cost range of the single workers."""
    validation = records_in_split(records, "validation")
    if not validation:
        return None
    table = reward_table(validation)
    features = router.features_for([record.prompt for record in validation])
    require_finite_features(features, validation, router.model_cfg.backbone, "validation")
    with torch.inference_mode():
        rewards, costs = (value.cpu().numpy() for value in router.predict(features))
    summary: dict = {
        "n_prompts": table.n_prompts,
        "reward_at_cost_weight_0": float(
            table.rewards[np.arange(table.n_prompts), argmax_choices(rewards)].mean()
        ),
        "reward_mean_abs_error": float(np.abs(rewards - table.rewards).mean()),
    }
    if router.reference_cost is None or table.costs is None:
        return summary
    points = baseline_curve(table, rewards, costs, SERVED_COST_WEIGHTS, router.reference_cost)
    workers = worker_points(table)
    worker_costs = [point.mean_cost for point in workers]
    # Relative to the mean cost; None (not NaN in the JSON report) when every cost is 0.
    mean_cost = float(table.costs.mean())
    cost_error = float(np.abs(costs - table.costs).mean())
    summary["cost_mean_abs_relative_error"] = cost_error / mean_cost if mean_cost > 0 else None
    summary["aiq"] = aiq(
        non_decreasing_hull([(p.mean_cost, p.mean_reward) for p in points]),
        min(worker_costs),
        max(worker_costs),
        reward_floor(table.rewards),
    )
    return summary


def _describe(validation: dict | None) -> str:
    if validation is None:
        return "no validation split"
    text = (
        f"validation reward at cost weight 0: {validation['reward_at_cost_weight_0']:.4f} "
        f"({validation['n_prompts']} prompts)"
    )
    if "aiq" in validation:
        text += f"; validation AIQ {validation['aiq']:.4f}"
    return text


def _tensor(array: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.asarray(array, dtype=np.float32))
