"""Cost-aware routing on LLMRouter (standard split): a router family over cost weights
against kNN and ridge on the same features, on the test split.

Run from the project root: `.venv/bin/python bench/cost.py`. The model and training
settings are the shipped default config; the router family is trained for every
candidate cost weight, and the cost weights kept are those whose validation operating
points lie on the validation hull (the test split is only evaluated). kNN and ridge get
every candidate cost weight. Costs are the importer's USD estimates (prices x tokens).
The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch
from rich.console import Console

from fugu_lite import train_rl, training_common
from fugu_lite.config import DEFAULT_CONFIG, PipelineConfig, load_config
from fugu_lite.costs import (
    load_router_family,
    read_family_manifest,
    train_router_family,
    write_family_manifest,
)
from fugu_lite.datasets import import_dataset, resolve_data_dir
from fugu_lite.evaluation import non_decreasing_hull, reward_table
from fugu_lite.evaluation.pareto import OperatingPoint, router_curve
from fugu_lite.pipeline import run_pareto_evaluation
from fugu_lite.schemas import RewardRecord, records_in_split

os.environ.setdefault("HF_HUB_OFFLINE", "1")
console = Console()
# lambda = 1 charges one reward point per mean train cost; on LLMRouter the 49-51B models
# cost ~2.1x the mean and the 7-9B ones ~0.24-0.47x, with mean rewards within ~0.1.
CANDIDATE_COST_WEIGHTS = (0.0, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
TARGET_COST_FRACTION = 0.60


def validation_points(family_dir: Path, records: list[RewardRecord]) -> list[OperatingPoint]:
    family = load_router_family(family_dir)
    validation = records_in_split(records, "validation")
    features = family.routers[0].features_for([record.prompt for record in validation])
    probabilities = {
        weight: router.probabilities(features).cpu().numpy()
        for weight, router in zip(family.cost_weights, family.routers, strict=True)
    }
    return router_curve(reward_table(validation), probabilities)


def keep_validation_hull(family_dir: Path, records: list[RewardRecord]) -> list[float]:
    """Restrict the family to the cost weights whose validation points are hull vertices."""
    points = validation_points(family_dir, records)
    vertices = set(non_decreasing_hull([(p.mean_cost, p.mean_reward) for p in points]))
    kept: list[float | None] = []
    for point in points:  # by cost weight; of equal points the smallest weight stays
        if (point.mean_cost, point.mean_reward) in vertices:
            vertices.discard((point.mean_cost, point.mean_reward))
            kept.append(point.cost_weight)
    for point in points:
        mark = "kept" if point.cost_weight in kept else "dropped"
        console.print(
            f"validation lambda={point.cost_weight:g}: cost {point.mean_cost:.4g}, "
            f"reward {point.mean_reward:.4f} -> {mark}"
        )
    manifest = read_family_manifest(family_dir)
    members = [member for member in manifest.members if member.cost_weight in kept]
    candidates = ",".join(f"{weight:g}" for weight in manifest.cost_weights)
    write_family_manifest(
        family_dir,
        manifest.model_copy(
            update={
                "members": members,
                "selection": f"the validation hull's vertices among cost weights {candidates}",
            }
        ),
    )
    return [float(weight) for weight in kept if weight is not None]


def headline(report: dict) -> dict:
    curves = report["curves"]
    return {
        "router_aiq": round(curves["router"]["aiq"], 4),
        "knn_aiq": round(curves["knn"]["aiq"], 4),
        "ridge_aiq": round(curves["ridge"]["aiq"], 4),
        "workers_aiq": round(curves["workers"]["aiq"], 4),
        "cost_fraction_at_95pct": _rounded(curves["router"]["cost_fraction_at_target"]),
        "knn_cost_fraction_at_95pct": _rounded(curves["knn"]["cost_fraction_at_target"]),
        "ridge_cost_fraction_at_95pct": _rounded(curves["ridge"]["cost_fraction_at_target"]),
    }


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--output", default="bench/results/cost")
    args = parser.parse_args()
    started = time.perf_counter()
    if "OMP_NUM_THREADS" not in os.environ:
        # Tiny tensors on cached features: on a busy 2-core machine two OpenMP threads
        # spin-wait each other and made one pipeline run 20x slower (266 s vs 12.5 s).
        torch.set_num_threads(1)
    records = import_dataset("llmrouter", resolve_data_dir(args.data_dir))
    config = load_config(DEFAULT_CONFIG, PipelineConfig)
    output = Path(args.output)
    family_dir = output / "family"
    # Per-epoch logs of len(CANDIDATE_COST_WEIGHTS) trainings would bury the tables; each
    # stage's training_report.json keeps them.
    train_rl.console.quiet = training_common.console.quiet = True
    training = train_router_family(records, config, family_dir, CANDIDATE_COST_WEIGHTS)
    train_rl.console.quiet = training_common.console.quiet = False
    console.print(
        f"trained {len(CANDIDATE_COST_WEIGHTS)} routers in {training['seconds']:.0f} s; "
        f"reference cost {training['reference_cost']:.4g} (mean train cost)"
    )
    kept = keep_validation_hull(family_dir, records)
    report = run_pareto_evaluation(
        family_dir, records, "test", output / "pareto", baseline_cost_weights=CANDIDATE_COST_WEIGHTS
    )

    figures = headline(report)
    best = report["best_single"]
    beats = figures["router_aiq"] > max(figures["knn_aiq"], figures["ridge_aiq"])
    fraction = figures["cost_fraction_at_95pct"]
    cheap_enough = fraction is not None and fraction <= TARGET_COST_FRACTION
    console.print(f"cost weights kept on validation: {kept}")
    console.print(
        f"AIQ: router {figures['router_aiq']:.4f} vs kNN {figures['knn_aiq']:.4f}, ridge "
        f"{figures['ridge_aiq']:.4f} (single workers {figures['workers_aiq']:.4f}) -> router "
        f"above both: {'MET' if beats else 'NOT MET'}"
    )
    reached = "never" if fraction is None else f"{100 * fraction:.1f}% of its cost"
    console.print(
        f"95% of the best single worker's quality ({best['worker']}, "
        f"{report['target_reward']:.4f}): {reached}; target <= "
        f"{100 * TARGET_COST_FRACTION:.0f}% -> {'MET' if cheap_enough else 'NOT MET'}"
    )
    console.print(f"finished in {time.perf_counter() - started:.0f} s")
    summary = {
        **figures,
        "router_cost_weights": kept,
        "candidate_cost_weights": list(CANDIDATE_COST_WEIGHTS),
        "reference_cost": report["reference_cost"],
        "best_single": best["worker"],
        "target_aiq_above_baselines_met": beats,
        "target_cost_fraction": TARGET_COST_FRACTION,
        "target_cost_fraction_met": cheap_enough,
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
