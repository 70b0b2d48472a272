"""Cost-quality operating points: one (mean cost, mean reward) per method and cost weight.

Pure functions over arrays, like the rest of `evaluation`; the caller computes features
and router probabilities.

Each method gives one operating point (mean cost, mean reward) per cost weight lambda:
  router   one point per family member (argmax of its probabilities); a plain
           checkpoint gives one point
  knn      argmax over workers of  predicted reward - lambda * predicted cost / reference,
  ridge    both predicted by the baseline with its validation-chosen k / alpha (fitted on
           train rewards and train costs; this equals fitting it on the cost-weighted
           rewards, so the baselines never see the evaluated prompts' costs)
  workers  each single worker (RouterBench's "zero router" is their hull: any point on
           it is a random mix of two workers)
plus the oracle's point (best reward per prompt, the cheapest among equally good workers).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ..threads import fit_threads
from .baselines import fit_ridge, knn_predict
from .table import RewardTable, argmax_choices, picked


@dataclass(frozen=True)
class OperatingPoint:
    mean_cost: float
    mean_reward: float
    cost_weight: float | None = None
    label: str | None = None

    def as_dict(self) -> dict:
        return {
            "cost_weight": self.cost_weight,
            "label": self.label,
            "mean_cost": self.mean_cost,
            "mean_reward": self.mean_reward,
        }


def operating_point(
    table: RewardTable,
    choices: np.ndarray,
    cost_weight: float | None = None,
    label: str | None = None,
) -> OperatingPoint:
    costs = require_table_costs(table)
    return OperatingPoint(
        mean_cost=float(picked(costs, choices).mean()),
        mean_reward=float(picked(table.rewards, choices).mean()),
        cost_weight=cost_weight,
        label=label,
    )


def cost_weighted_choices(
    predicted_rewards: np.ndarray,
    predicted_costs: np.ndarray,
    cost_weight: float,
    reference_cost: float,
) -> np.ndarray:
    """argmax of predicted reward - cost_weight * predicted cost / reference_cost."""
    return argmax_choices(predicted_rewards - cost_weight * predicted_costs / reference_cost)


def router_curve(
    table: RewardTable, probabilities_by_weight: Mapping[float, np.ndarray]
) -> list[OperatingPoint]:
    """One point per router (argmax of its probabilities), sorted by cost weight."""
    return [
        operating_point(table, argmax_choices(probabilities_by_weight[weight]), weight)
        for weight in sorted(probabilities_by_weight)
    ]


def baseline_curve(
    table: RewardTable,
    predicted_rewards: np.ndarray,
    predicted_costs: np.ndarray,
    cost_weights: Sequence[float],
    reference_cost: float,
) -> list[OperatingPoint]:
    return [
        operating_point(
            table,
            cost_weighted_choices(predicted_rewards, predicted_costs, weight, reference_cost),
            weight,
        )
        for weight in sorted(cost_weights)
    ]


def worker_points(table: RewardTable) -> list[OperatingPoint]:
    costs = require_table_costs(table)
    return [
        OperatingPoint(
            mean_cost=float(costs[:, column].mean()),
            mean_reward=float(table.rewards[:, column].mean()),
            label=worker,
        )
        for column, worker in enumerate(table.worker_ids)
    ]


def baseline_cost_predictions(
    train_features: np.ndarray,
    train: RewardTable,
    evaluated_features: np.ndarray,
    baseline_info: Mapping[str, Mapping],
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """(predicted rewards, predicted costs) [N, W] each, from kNN and ridge with the k and
    alpha `run_baselines` chose on validation, fitted on train rewards and costs."""
    train_costs = require_table_costs(train)
    targets = np.hstack([train.rewards, train_costs])
    n_workers = train.n_workers
    k = int(baseline_info["knn"]["chosen"])
    alpha = float(baseline_info["ridge"]["chosen"])
    with fit_threads():
        knn = knn_predict(train_features, targets, evaluated_features, k)
        ridge = fit_ridge(train_features, targets, alpha).predict(evaluated_features)
    return {
        "knn": (knn[:, :n_workers], knn[:, n_workers:]),
        "ridge": (ridge[:, :n_workers], ridge[:, n_workers:]),
    }


def require_table_costs(table: RewardTable) -> np.ndarray:
    if table.costs is None:
        raise ValueError(
            "cost-quality evaluation needs per-worker costs on every record of the train and "
            "evaluated splits; these records have none"
        )
    return table.costs
