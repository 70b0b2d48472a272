"""The cost-quality report (`eval --pareto`): each curve's points, hull, AIQ and cost to reach
a share of the best single worker's quality, as a JSON-serialisable dict.

Where the rest lives: the operating points in `curves`, the hulls and AIQ (defined there)
in `hull`, the Markdown, console and files in `pareto_output`, the plot in `pareto_plot`.

The target is `quality_fraction` x the best single worker's mean reward; when that reward
is <= 0 a share of it is no quality target, and the target and the costs read off it are
None with a note.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ..text import cost_text, exact_number
from .curves import (
    OperatingPoint,
    baseline_curve,
    operating_point,
    require_table_costs,
    router_curve,
    worker_points,
)
from .hull import aiq, cost_to_reach, non_decreasing_hull, reward_floor
from .report import (
    baseline_notes,
    best_single_worker,
    check_train_and_evaluated,
    oracle_choices,
    train_split_notes,
)
from .table import RewardTable, check_aligned

QUALITY_FRACTION = 0.95
CURVE_LABELS = {"router": "router", "knn": "kNN", "ridge": "ridge", "workers": "single workers"}


def pareto_report(
    train: RewardTable,
    evaluated: RewardTable,
    split_name: str,
    router_probabilities: Mapping[float, np.ndarray],
    baseline_predictions: Mapping[str, tuple[np.ndarray, np.ndarray]],
    baseline_cost_weights: Sequence[float],
    reference_cost: float,
    baseline_info: Mapping[str, Mapping] | None = None,
    quality_fraction: float = QUALITY_FRACTION,
) -> dict:
    """Cost-quality curves of the router family, the baselines and the single workers on the
    evaluated split. `router_probabilities` maps each member's cost weight to its [N, W]
    probabilities; `baseline_predictions` maps a baseline to (predicted rewards, predicted
    costs); the best single worker is chosen on train. Returns a JSON-serialisable dict."""
    evaluated_costs = _check_pareto_inputs(
        train,
        evaluated,
        router_probabilities,
        baseline_predictions,
        baseline_cost_weights,
        reference_cost,
    )
    info = baseline_info or {}
    curves = _curves(
        evaluated, router_probabilities, baseline_predictions, baseline_cost_weights, reference_cost
    )
    cost_min, cost_max = _cost_range(curves)
    best = _best_single_on_train(train, evaluated, evaluated_costs)
    target = quality_fraction * best.mean_reward if best.mean_reward > 0 else None
    floor = reward_floor(evaluated.rewards)
    return {
        "split": split_name,
        "n_prompts": evaluated.n_prompts,
        "worker_ids": list(evaluated.worker_ids),
        "reference_cost": reference_cost,
        "router_cost_weights": sorted(router_probabilities),
        "baseline_cost_weights": sorted(baseline_cost_weights),
        "cost_range": [cost_min, cost_max],
        "best_single": best.as_dict(evaluated.worker_ids),
        "quality_fraction": quality_fraction,
        "target_reward": target,
        "aiq_floor": floor,
        "oracle": _oracle_summary(evaluated, evaluated_costs),
        "curves": _curve_entries(curves, info, (cost_min, cost_max), floor, target, best),
        "baselines": {name: dict(value) for name, value in info.items()},
        "notes": train_split_notes(split_name)
        + baseline_notes(split_name, info)
        + _pareto_notes(best.mean_reward, best.mean_cost, cost_min, cost_max, quality_fraction),
        "definitions": _definitions(floor, quality_fraction),
    }


@dataclass(frozen=True)
class _BestSingle:
    """The worker with the best mean train reward, and its mean cost and reward on the
    evaluated split."""

    column: int
    mean_cost: float
    mean_reward: float

    def as_dict(self, worker_ids: list[str]) -> dict:
        return {
            "worker": worker_ids[self.column],
            "chosen_on": "train",
            "mean_cost": self.mean_cost,
            "mean_reward": self.mean_reward,
        }


def _check_pareto_inputs(
    train: RewardTable,
    evaluated: RewardTable,
    router_probabilities: Mapping[float, np.ndarray],
    baseline_predictions: Mapping[str, tuple[np.ndarray, np.ndarray]],
    baseline_cost_weights: Sequence[float],
    reference_cost: float,
) -> np.ndarray:
    """Refuse what gives no cost-quality curve, or a wrong one (splits of other workers,
    predictions not aligned with the evaluated prompts and workers); returns the evaluated
    split's costs."""
    check_train_and_evaluated(train, evaluated)
    require_table_costs(train)
    evaluated_costs = require_table_costs(evaluated)
    if not router_probabilities:
        raise ValueError("give the probabilities of at least one router")
    if reference_cost <= 0:
        raise ValueError(f"reference_cost must be > 0, got {reference_cost}")
    if baseline_predictions and not baseline_cost_weights:
        # each baseline's curve has a point per cost weight: none left it without a hull
        raise ValueError(
            f"baseline_cost_weights is empty, so the baselines {sorted(baseline_predictions)} "
            "would have no point; give the cost weights to trace them at (eval --pareto "
            "gives the router's), or no baseline predictions"
        )
    for weight, probabilities in router_probabilities.items():
        label = f"router probabilities (cost weight {exact_number(weight)})"
        check_aligned(label, probabilities, evaluated)
    for name, (rewards, costs) in baseline_predictions.items():
        check_aligned(f"baseline {name!r} predicted rewards", rewards, evaluated)
        check_aligned(f"baseline {name!r} predicted costs", costs, evaluated)
    return evaluated_costs


def _curves(
    evaluated: RewardTable,
    router_probabilities: Mapping[float, np.ndarray],
    baseline_predictions: Mapping[str, tuple[np.ndarray, np.ndarray]],
    baseline_cost_weights: Sequence[float],
    reference_cost: float,
) -> dict[str, list[OperatingPoint]]:
    """The operating points of the router, each baseline and the single workers."""
    curves: dict[str, list[OperatingPoint]] = {
        "router": router_curve(evaluated, router_probabilities)
    }
    for name, (rewards, costs) in baseline_predictions.items():
        curves[name] = baseline_curve(
            evaluated, rewards, costs, baseline_cost_weights, reference_cost
        )
    curves["workers"] = worker_points(evaluated)
    return curves


def _cost_range(curves: Mapping[str, list[OperatingPoint]]) -> tuple[float, float]:
    """The least and greatest mean cost of any point of any curve (AIQ's range)."""
    all_costs = [point.mean_cost for points in curves.values() for point in points]
    return min(all_costs), max(all_costs)


def _best_single_on_train(
    train: RewardTable, evaluated: RewardTable, evaluated_costs: np.ndarray
) -> _BestSingle:
    column = best_single_worker(train.rewards)
    return _BestSingle(
        column=column,
        mean_cost=float(evaluated_costs[:, column].mean()),
        mean_reward=float(evaluated.rewards[:, column].mean()),
    )


def _oracle_summary(evaluated: RewardTable, evaluated_costs: np.ndarray) -> dict:
    oracle = operating_point(evaluated, oracle_choices(evaluated.rewards, evaluated_costs))
    return {
        "mean_cost": oracle.mean_cost,
        "mean_reward": oracle.mean_reward,
        "detail": "best worker per prompt; the cheapest among equally good ones",
    }


def _curve_entries(
    curves: Mapping[str, list[OperatingPoint]],
    info: Mapping[str, Mapping],
    cost_range: tuple[float, float],
    floor: float,
    target: float | None,
    best: _BestSingle,
) -> dict[str, dict]:
    """Each curve's _curve_entry, by name."""
    return {
        name: _curve_entry(name, points, info.get(name), cost_range, floor, target, best.mean_cost)
        for name, points in curves.items()
    }


def curve_entry_in(
    report: Mapping, name: str, points: list[OperatingPoint], info: Mapping | None = None
) -> dict:
    """A curve traced outside `report` (bench/cost.py's router family) figured as the report
    figures its own: AIQ over its cost range and floor, cost to reach its target and that
    cost's share of its best single worker's."""
    cost_min, cost_max = report["cost_range"]
    best_cost = report["best_single"]["mean_cost"]
    floor, target = report["aiq_floor"], report["target_reward"]
    return _curve_entry(name, points, info, (cost_min, cost_max), floor, target, best_cost)


def _curve_entry(
    name: str,
    points: list[OperatingPoint],
    info: Mapping | None,
    cost_range: tuple[float, float],
    floor: float,
    target: float | None,
    best_cost: float,
) -> dict:
    """One curve's points, hull, AIQ over `cost_range` and cost to reach `target`."""
    hull = non_decreasing_hull([(p.mean_cost, p.mean_reward) for p in points])
    reach = None if target is None else cost_to_reach(hull, target)
    return {
        "label": _curve_label(name, len(points), info),
        "points": [point.as_dict() for point in points],
        "hull": [list(vertex) for vertex in hull],
        "aiq": aiq(hull, *cost_range, floor),
        "cost_at_target": reach,
        "cost_fraction_at_target": _cost_fraction(reach, best_cost),
    }


def _definitions(floor: float, quality_fraction: float) -> dict[str, str]:
    return {
        "hull": "non-decreasing concave upper hull of the curve's (mean cost, mean reward) points",
        "aiq": f"mean over [c_min, c_max] of the hull's reward ({floor:g} below its cheapest "
        "point: 0, or the lowest reward when rewards go below 0; flat beyond its most "
        "expensive); [c_min, c_max] spans every point of every curve",
        "cost_at_target": f"least cost on the hull reaching {quality_fraction:g} x the best "
        "single worker's mean reward (interpolated); fraction = that cost / the best "
        "single worker's mean cost (none when that worker is free)",
    }


def _pareto_notes(
    best_reward: float,
    best_cost: float,
    cost_min: float,
    cost_max: float,
    quality_fraction: float,
) -> list[str]:
    """Where a figure of the report is undefined, and why."""
    notes = []
    if best_reward <= 0:
        notes.append(
            f"the best single worker's mean reward is {best_reward:g} (<= 0): "
            f"{quality_fraction:g} x it is no quality target, so the target and the cost "
            "to reach it are undefined (null)"
        )
    elif best_cost <= 0:
        notes.append(
            "the best single worker costs nothing: a share of its cost is undefined (null)"
        )
    if cost_min == cost_max:
        notes.append(
            f"every point costs {cost_text(cost_max)}: AIQ is each hull's reward at that cost"
        )
    return notes


def _cost_fraction(cost: float | None, best_cost: float) -> float | None:
    """cost / the best single worker's mean cost; None when the target is not reached or
    the best single worker is free (a share of nothing)."""
    if cost is None or best_cost <= 0:
        return None
    return cost / best_cost


def _curve_label(name: str, n_points: int, info: Mapping | None) -> str:
    label = CURVE_LABELS.get(name, name)
    if name == "router":
        return f"{label} ({n_points} cost weight{'s' if n_points != 1 else ''})"
    if info and "parameter" in info and "chosen" in info:
        return f"{label} ({info['parameter']}={info['chosen']:g})"
    return label
