"""Cost-quality evaluation: operating points over cost weights, their hulls, AIQ, and the
cost to reach a share of the best single worker's quality.

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

The hull of a set of points is the non-decreasing concave upper hull: sort by cost, keep
the points that raise the best reward so far (the Pareto front), then the upper concave
hull of those. Every point on a hull segment is reachable by sending each request to one
of the segment's two end points at random.

AIQ (RouterBench's average improvement in quality, arXiv 2403.12031), as implemented here:

    AIQ = 1 / (c_max - c_min) * integral from c_min to c_max of H(c) dc

where [c_min, c_max] spans every operating point of every compared curve (router, kNN,
ridge, single workers; not the oracle), and H is the curve's hull, linearly interpolated
between its vertices, extended flat (at its best reward) beyond its most expensive vertex
and at the floor below its cheapest vertex (a method earns no quality at costs it cannot
run at; RouterBench's code likewise integrates from each curve's first point). The floor
is 0, or the lowest reward of the evaluated split when rewards go below 0 (-1..1 scores):
a curve that cannot run cheaply must never gain from it. When every point costs the same,
AIQ is H at that cost.

The target is `quality_fraction` x the best single worker's mean reward; when that reward
is <= 0 a share of it is no quality target, and the target and the costs read off it are
None with a note.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.legend import Legend
from matplotlib.transforms import Bbox
from rich.console import Console
from rich.table import Column, Table

from ..atomic_files import remove_files, write_text_atomic
from ..io import write_json
from ..text import console_name, console_text, cost_text
from ..threads import fit_threads
from .baselines import fit_ridge, knn_predict
from .plots import legend_beside, plain_text, save_png
from .report import best_single_worker, oracle_choices, train_split_notes
from .table import RewardTable, argmax_choices, markdown_cell, picked

PARETO_JSON = "pareto_report.json"
PARETO_MARKDOWN = "pareto_report.md"
PARETO_PLOT = "cost_quality.png"
PARETO_FILES = (PARETO_JSON, PARETO_MARKDOWN, PARETO_PLOT)
QUALITY_FRACTION = 0.95
CURVE_LABELS = {"router": "router", "knn": "kNN", "ridge": "ridge", "workers": "single workers"}

Hull = list[tuple[float, float]]


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


# --- operating points -----------------------------------------------------------------------


def operating_point(
    table: RewardTable,
    choices: np.ndarray,
    cost_weight: float | None = None,
    label: str | None = None,
) -> OperatingPoint:
    costs = _require_costs(table)
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
    costs = _require_costs(table)
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
    train_costs = _require_costs(train)
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


# --- hulls and the numbers read off them ----------------------------------------------------


def non_decreasing_hull(points: Sequence[tuple[float, float]]) -> Hull:
    """Vertices (cost, reward) of the non-decreasing concave upper hull, cost ascending;
    both cost and reward strictly increase along it."""
    if not points:
        raise ValueError("a hull needs at least one point")
    frontier: Hull = []
    for cost, reward in sorted(points, key=lambda point: (point[0], -point[1])):
        if frontier and reward <= frontier[-1][1]:
            continue  # costs at least as much as a point already kept, earns no more
        frontier.append((float(cost), float(reward)))
    hull: Hull = []
    for point in frontier:
        while len(hull) >= 2 and _turn(hull[-2], hull[-1], point) >= 0:
            hull.pop()  # hull[-1] lies on or below the segment hull[-2] -> point
        hull.append(point)
    return hull


def _turn(a: tuple[float, float], b: tuple[float, float], c: tuple[float, float]) -> float:
    """> 0 when b lies below the line from a to c (for a, b, c in cost order)."""
    return (b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0])


def hull_reward_at(hull: Hull, cost: float, floor: float = 0.0) -> float:
    """H(cost): interpolated on the hull, flat beyond its end, `floor` below its start."""
    costs, rewards = zip(*hull, strict=True)
    if cost < costs[0]:
        return floor
    return float(np.interp(cost, costs, rewards))


def aiq(hull: Hull, cost_min: float, cost_max: float, floor: float = 0.0) -> float:
    """The mean of H over [cost_min, cost_max] (see the module docstring); `floor` is H
    below the hull's cheapest point (`reward_floor`)."""
    if cost_max < cost_min:
        raise ValueError(f"cost range [{cost_min}, {cost_max}] is empty")
    if cost_max == cost_min:
        return hull_reward_at(hull, cost_max, floor)
    start = max(cost_min, hull[0][0])
    if start >= cost_max:
        return floor
    knots = sorted({start, cost_max, *(cost for cost, _ in hull if start < cost < cost_max)})
    values = [hull_reward_at(hull, knot, floor) for knot in knots]
    area = np.trapezoid(values, knots) + floor * (start - cost_min)
    return float(area / (cost_max - cost_min))


def reward_floor(rewards: np.ndarray) -> float:
    """H below a hull's cheapest point: 0, or the lowest reward when rewards go below 0,
    so that no curve gains from costs it cannot run at."""
    return min(0.0, float(rewards.min()))


def cost_to_reach(hull: Hull, target_reward: float) -> float | None:
    """The least cost at which the hull reaches target_reward (interpolated); None if never."""
    if hull[0][1] >= target_reward:
        return hull[0][0]
    for (left_cost, left_reward), (right_cost, right_reward) in pairwise(hull):
        if left_reward < target_reward <= right_reward:
            share = (target_reward - left_reward) / (right_reward - left_reward)
            return float(left_cost + share * (right_cost - left_cost))
    return None


# --- the report -----------------------------------------------------------------------------


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
    _require_costs(train)
    evaluated_costs = _require_costs(evaluated)
    if not router_probabilities:
        raise ValueError("give the probabilities of at least one router")
    if reference_cost <= 0:
        raise ValueError(f"reference_cost must be > 0, got {reference_cost}")
    info = baseline_info or {}
    curves: dict[str, list[OperatingPoint]] = {
        "router": router_curve(evaluated, router_probabilities)
    }
    for name, (rewards, costs) in baseline_predictions.items():
        curves[name] = baseline_curve(
            evaluated, rewards, costs, baseline_cost_weights, reference_cost
        )
    curves["workers"] = worker_points(evaluated)

    all_costs = [point.mean_cost for points in curves.values() for point in points]
    cost_min, cost_max = min(all_costs), max(all_costs)
    best = best_single_worker(train.rewards)
    best_cost = float(evaluated_costs[:, best].mean())
    best_reward = float(evaluated.rewards[:, best].mean())
    target = quality_fraction * best_reward if best_reward > 0 else None
    floor = reward_floor(evaluated.rewards)
    oracle = operating_point(evaluated, oracle_choices(evaluated.rewards, evaluated_costs))

    entries = {}
    for name, points in curves.items():
        hull = non_decreasing_hull([(p.mean_cost, p.mean_reward) for p in points])
        reach = None if target is None else cost_to_reach(hull, target)
        entries[name] = {
            "label": _curve_label(name, len(points), info.get(name)),
            "points": [point.as_dict() for point in points],
            "hull": [list(vertex) for vertex in hull],
            "aiq": aiq(hull, cost_min, cost_max, floor),
            "cost_at_target": reach,
            "cost_fraction_at_target": _cost_fraction(reach, best_cost),
        }
    return {
        "split": split_name,
        "n_prompts": evaluated.n_prompts,
        "worker_ids": list(evaluated.worker_ids),
        "reference_cost": reference_cost,
        "router_cost_weights": sorted(router_probabilities),
        "baseline_cost_weights": sorted(baseline_cost_weights),
        "cost_range": [cost_min, cost_max],
        "best_single": {
            "worker": evaluated.worker_ids[best],
            "chosen_on": "train",
            "mean_cost": best_cost,
            "mean_reward": best_reward,
        },
        "quality_fraction": quality_fraction,
        "target_reward": target,
        "aiq_floor": floor,
        "oracle": {
            "mean_cost": oracle.mean_cost,
            "mean_reward": oracle.mean_reward,
            "detail": "best worker per prompt; the cheapest among equally good ones",
        },
        "curves": entries,
        "baselines": {name: dict(value) for name, value in info.items()},
        "notes": train_split_notes(split_name)
        + _pareto_notes(best_reward, best_cost, cost_min, cost_max, quality_fraction),
        "definitions": {
            "hull": "non-decreasing concave upper hull of the curve's (mean cost, mean reward) "
            "points",
            "aiq": f"mean over [c_min, c_max] of the hull's reward ({floor:g} below its cheapest "
            "point: 0, or the lowest reward when rewards go below 0; flat beyond its most "
            "expensive); [c_min, c_max] spans every point of every curve",
            "cost_at_target": f"least cost on the hull reaching {quality_fraction:g} x the best "
            "single worker's mean reward (interpolated); fraction = that cost / the best "
            "single worker's mean cost (none when that worker is free)",
        },
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


def _require_costs(table: RewardTable) -> np.ndarray:
    if table.costs is None:
        raise ValueError(
            "cost-quality evaluation needs per-worker costs on every record of the train and "
            "evaluated splits; these records have none"
        )
    return table.costs


# --- output ---------------------------------------------------------------------------------


def write_pareto(report: dict, output_dir: Path) -> list[str]:
    """Write the cost-quality plot, pareto_report.md, then pareto_report.json; returns names.

    Like write_evaluation: the previous run's files go first and the JSON comes last, so a
    run stopped half-way never leaves a report beside another run's plot."""
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    names = list(PARETO_FILES)
    remove_files(output_dir, names)
    save_png(plot_pareto(report), output_dir / PARETO_PLOT)
    write_text_atomic(output_dir / PARETO_MARKDOWN, pareto_markdown(report))
    write_json(output_dir / PARETO_JSON, report)
    return names


def summary_rows(report: dict) -> list[list[str]]:
    """Curve, AIQ, cost at target, fraction of the best single worker's cost."""
    return [
        [
            curve["label"],
            f"{curve['aiq']:.4f}",
            _cost(curve["cost_at_target"]),
            _share(curve, report),
        ]
        for curve in report["curves"].values()
    ]


def cost_weight_rows(report: dict) -> tuple[list[str], list[list[str]]]:
    """Per cost weight: (mean cost, mean reward) of the router, kNN and ridge."""
    names = [name for name in report["curves"] if name != "workers"]
    weights = sorted({p["cost_weight"] for name in names for p in report["curves"][name]["points"]})
    header = ["lambda", *[f"{CURVE_LABELS.get(name, name)} {kind}" for name in names
                          for kind in ("cost", "reward")]]  # fmt: skip
    rows = []
    for weight in weights:
        cells = [f"{weight:g}"]
        for name in names:
            point = next(
                (p for p in report["curves"][name]["points"] if p["cost_weight"] == weight), None
            )
            cells += ["—", "—"] if point is None else [
                _cost(point["mean_cost"]), f"{point['mean_reward']:.4f}"
            ]  # fmt: skip
        rows.append(cells)
    return header, rows


def reference_rows(report: dict) -> list[list[str]]:
    """Each single worker and the oracle: mean cost, mean reward."""
    best = report["best_single"]["worker"]
    rows = [
        [
            f"{point['label']}{' (best single)' if point['label'] == best else ''}",
            _cost(point["mean_cost"]),
            f"{point['mean_reward']:.4f}",
        ]
        for point in report["curves"]["workers"]["points"]
    ]
    oracle = report["oracle"]
    rows.append(["oracle", _cost(oracle["mean_cost"]), f"{oracle['mean_reward']:.4f}"])
    return rows


def pareto_markdown(report: dict) -> str:
    best = report["best_single"]
    header, rows = cost_weight_rows(report)
    lines = [
        f"# Cost-quality evaluation on `{report['split']}`",
        "",
        f"{report['n_prompts']} prompts · reference cost {_cost(report['reference_cost'])} "
        f"(lambda = 1 charges one reward point per reference cost) · best single worker "
        f"{markdown_cell(best['worker'])} (chosen on {best['chosen_on']}): mean reward "
        f"{best['mean_reward']:.4f} at mean cost {_cost(best['mean_cost'])} · target "
        f"{report['quality_fraction']:g} x its reward = {_target(report)}.",
        "",
        "## Summary",
        "",
        *_markdown_table(
            ["Curve", "AIQ", "Cost at target", "Share of best single's cost"],
            summary_rows(report),
        ),
        f"![Cost-quality curves]({PARETO_PLOT})",
        "",
        "## Per cost weight",
        "",
        *_markdown_table(header, rows),
        "## Single workers and oracle",
        "",
        *_markdown_table(["Worker", "Mean cost", "Mean reward"], reference_rows(report)),
        *(
            ["## Notes", "", *[f"- {note}" for note in report["notes"]], ""]
            if report["notes"]
            else []
        ),
        "## Definitions",
        "",
        *[f"- **{name}**: {text}" for name, text in report["definitions"].items()],
        f"- cost range: [{_cost(report['cost_range'][0])}, {_cost(report['cost_range'][1])}]",
    ]
    return "\n".join(lines).rstrip() + "\n"


def _markdown_table(header: list[str], rows: list[list[str]]) -> list[str]:
    separator = ["---"] + ["---:"] * (len(header) - 1)
    return [
        "| " + " | ".join(markdown_cell(cell) for cell in header) + " |",
        "| " + " | ".join(separator) + " |",
        *["| " + " | ".join(markdown_cell(cell) for cell in row) + " |" for row in rows],
        "",
    ]


def print_pareto(report: dict, console: Console) -> None:
    header, rows = cost_weight_rows(report)
    per_weight = Table(title=f"Cost and reward per cost weight ({report['split']})")
    for index, column in enumerate(header):
        per_weight.add_column(console_name(column), justify="left" if index == 0 else "right")
    for row in rows:
        per_weight.add_row(*row)
    console.print(per_weight)
    # numbers right-aligned, as in the table above: left-aligned, a cost of 25,000.00 and
    # one of 0.10 began in the same column
    references = Table(
        Column("worker", overflow="fold"),  # a worker cut short with "…" could be anyone
        Column("mean cost", justify="right"),
        Column("mean reward", justify="right"),
        title="Single workers and oracle",
    )
    for row in reference_rows(report):
        references.add_row(*(console_name(cell) for cell in row))
    console.print(references)
    summary = Table(
        "curve",
        Column("AIQ", justify="right"),
        Column("cost at target", justify="right"),
        Column("share of best single's cost", justify="right"),
        title=f"AIQ and cost to reach {report['quality_fraction']:g} x best single's reward "
        f"({_target(report)})",
    )
    for row in summary_rows(report):
        summary.add_row(*(console_name(cell) for cell in row))
    console.print(summary)
    for note in report["notes"]:
        console.print(f"[yellow]note:[/] {console_text(note)}")


def plot_pareto(report: dict) -> Figure:
    """Every curve's points and hull (dashed where extended flat), the workers, the oracle."""
    figure = Figure(figsize=(8.0, 5.5), layout="constrained")
    axes = figure.add_subplot()
    cost_max = report["cost_range"][1]
    colors = {"router": "tab:blue", "knn": "tab:orange", "ridge": "tab:purple", "workers": "gray"}
    for name, curve in report["curves"].items():
        color = colors.get(name, "black")
        hull = np.array(curve["hull"])
        axes.plot(
            hull[:, 0],
            hull[:, 1],
            color=color,
            label=plain_text(f"{curve['label']}, AIQ {curve['aiq']:.3f}"),
        )
        axes.plot([hull[-1, 0], cost_max], [hull[-1, 1]] * 2, color=color, linestyle=":")
        points = np.array([[p["mean_cost"], p["mean_reward"]] for p in curve["points"]])
        axes.scatter(points[:, 0], points[:, 1], color=color, s=18, zorder=3)
    oracle = report["oracle"]
    axes.scatter(
        [oracle["mean_cost"]], [oracle["mean_reward"]], marker="*", s=120, color="tab:green",
        label="oracle (cheapest correct)", zorder=4,
    )  # fmt: skip
    if report["target_reward"] is not None:
        axes.axhline(
            report["target_reward"],
            color="tab:red",
            linestyle="--",
            linewidth=0.8,
            label=plain_text(
                f"{report['quality_fraction']:g} x best single ({report['best_single']['worker']})"
            ),
        )
    axes.set_xlabel("mean cost per prompt")
    axes.set_ylabel("mean reward")
    axes.set_title(f"Cost vs quality ({report['split']}, n={report['n_prompts']})")
    legend = legend_beside(figure, axes, fontsize=7)
    workers = report["curves"]["workers"]["points"]
    label_points(
        figure,
        axes,
        [(p["mean_cost"], p["mean_reward"], plain_text(p["label"])) for p in workers],
        legend,
        stars=[(oracle["mean_cost"], oracle["mean_reward"])],
    )
    return figure


# Where a point's label may go: offsets (points) at these distances, in these directions
# (the nearest free one wins; beyond the first distance a thin line leads to the point).
_LABEL_DISTANCES = (4.0, 10.0, 18.0, 28.0, 40.0, 55.0, 75.0, 100.0, 130.0, 170.0)
_LABEL_ANGLES = tuple(np.radians(np.arange(45.0, 405.0, 22.5)))
_LABEL_FONT_SIZE = 6
_LABEL_GAP_PX = 1.0
_MARKER_HALF_PX = 3.0
_STAR_HALF_POINTS = 6.0  # the oracle's marker (s=120)


def label_points(
    figure: Figure,
    axes: Axes,
    points: Sequence[tuple[float, float, str]],
    legend: Legend,
    stars: Sequence[tuple[float, float]] = (),
) -> None:
    """Label each (x, y, text) point where its label overlaps no other label, no other point
    (nor the big `stars` markers), the legend nor the axes' edge: close workers' labels would
    otherwise print over each other. Placed once the figure's layout is settled (the labels
    do not move it)."""
    renderer = FigureCanvasAgg(figure).get_renderer()
    figure.draw_without_rendering()
    bounds = axes.get_window_extent(renderer)
    anchors = [axes.transData.transform((x, y)) for x, y, _ in points]
    markers = [_box(x, y, _MARKER_HALF_PX, _MARKER_HALF_PX) for x, y in anchors]
    star_half = _STAR_HALF_POINTS * figure.dpi / 72.0
    taken = [legend.get_window_extent(renderer)]
    for star_x, star_y in (axes.transData.transform(star) for star in stars):
        taken.append(_box(star_x, star_y, star_half, star_half))
    for index, ((x, y, text), anchor) in enumerate(zip(points, anchors, strict=True)):
        probe = figure.text(0, 0, text, fontsize=_LABEL_FONT_SIZE)
        size = probe.get_window_extent(renderer)
        probe.remove()
        others = [*taken, *markers[:index], *markers[index + 1 :]]
        dx, dy, box = _label_spot(anchor, size, others, bounds, figure.dpi / 72.0)
        leader = {"arrowstyle": "-", "color": "gray", "linewidth": 0.4, "shrinkA": 0, "shrinkB": 2}
        annotation = axes.annotate(
            text,
            (x, y),
            xytext=(dx, dy),
            textcoords="offset points",
            fontsize=_LABEL_FONT_SIZE,
            ha=_alignment(dx, ("right", "center", "left")),
            va=_alignment(dy, ("top", "center", "bottom")),
            arrowprops=leader if np.hypot(dx, dy) > _LABEL_DISTANCES[0] else None,
            annotation_clip=False,
            # the leader lines of other labels pass behind it, not through its letters
            bbox={"boxstyle": "square,pad=0.1", "facecolor": "white", "edgecolor": "none"},
            zorder=5,
        )
        annotation.set_in_layout(False)
        taken.append(box)


def _label_spot(
    anchor: np.ndarray, size: Bbox, others: list[Bbox], bounds: Bbox, pixels_per_point: float
) -> tuple[float, float, Bbox]:
    """The nearest offset (points) from `anchor` (display pixels) where a label of `size`
    touches none of `others` and stays inside `bounds`; when there is none, the one that
    overlaps least. Returns the offset and the label's box."""
    best: tuple[float, float, float, Bbox] | None = None
    for distance, angle in _label_candidates():
        dx, dy = distance * float(np.cos(angle)), distance * float(np.sin(angle))
        x, y = anchor[0] + dx * pixels_per_point, anchor[1] + dy * pixels_per_point
        box = _label_box(x, y, dx, dy, size)
        clash = sum(_overlap(box, other) for other in others) + _outside(box, bounds)
        if clash == 0:
            return dx, dy, box
        if best is None or clash < best[0]:
            best = (clash, dx, dy, box)
    assert best is not None  # there are candidates
    return best[1], best[2], best[3]


def _label_candidates() -> list[tuple[float, float]]:
    return [(distance, angle) for distance in _LABEL_DISTANCES for angle in _LABEL_ANGLES]


def _alignment(offset: float, names: tuple[str, str, str]) -> str:
    """The side of the label that faces the point: its right edge when left of it, ..."""
    if offset < -0.5:
        return names[0]
    return names[1] if offset <= 0.5 else names[2]


def _label_box(x: float, y: float, dx: float, dy: float, size: Bbox) -> Bbox:
    """The label's box (display pixels, padded) with its facing side at (x, y)."""
    width, height = size.width, size.height
    left = {"right": x - width, "center": x - width / 2, "left": x}
    bottom = {"top": y - height, "center": y - height / 2, "bottom": y}
    x0 = left[_alignment(dx, ("right", "center", "left"))]
    y0 = bottom[_alignment(dy, ("top", "center", "bottom"))]
    return Bbox.from_extents(
        x0 - _LABEL_GAP_PX, y0 - _LABEL_GAP_PX, x0 + width + _LABEL_GAP_PX,
        y0 + height + _LABEL_GAP_PX,
    )  # fmt: skip


def _box(x: float, y: float, half_width: float, half_height: float) -> Bbox:
    return Bbox.from_extents(x - half_width, y - half_height, x + half_width, y + half_height)


def _overlap(first: Bbox, second: Bbox) -> float:
    """The area the two boxes share (0 when apart or only touching)."""
    width = min(first.x1, second.x1) - max(first.x0, second.x0)
    height = min(first.y1, second.y1) - max(first.y0, second.y0)
    return max(0.0, width) * max(0.0, height)


def _outside(box: Bbox, bounds: Bbox) -> float:
    """The area of `box` outside `bounds`."""
    return box.width * box.height - _overlap(box, bounds)


def _cost(value: float | None) -> str:
    return "—" if value is None else cost_text(value)


def _target(report: dict) -> str:
    target = report["target_reward"]
    return "undefined (see the notes)" if target is None else f"{target:.4f}"


def _share(curve: dict, report: dict) -> str:
    if report["target_reward"] is None:
        return "— (no target)"
    if curve["cost_at_target"] is None:
        return "not reached"
    if curve["cost_fraction_at_target"] is None:
        return f"— (best single costs {_cost(report['best_single']['mean_cost'])})"
    return f"{100 * curve['cost_fraction_at_target']:.1f}%"
