"""Evaluation: the router against best-single, oracle, random, per-task best, kNN and ridge.

Pure functions over arrays and records: the caller computes features and router
probabilities; nothing here loads a model.

    train, test = reward_table(train_records), reward_table(test_records)
    predictions, info = run_baselines(train_features, train, test_features,
                                      validation_features, validation)
    report = evaluation_report(train, test, "test", probabilities, predictions, info)
    write_evaluation(report, router_predictions(test, probabilities), output_dir)
    print_evaluation(report, console)

Where things live: `table` (records as arrays), `baselines` (kNN, ridge), `report` (the
evaluation report), `output` and `plots` (its files and console tables); the cost-quality
report of `eval --pareto` in `curves` (operating points), `hull` (hulls, AIQ, cost to
reach a quality), `pareto` (the report), `pareto_output` and `pareto_plot`.
"""

from .baselines import (
    DEFAULT_ALPHA,
    DEFAULT_K,
    Selection,
    fit_ridge,
    knn_baseline,
    knn_predict,
    ridge_baseline,
    run_baselines,
    select_on_validation,
)
from .curves import baseline_cost_predictions
from .hull import aiq, cost_to_reach, non_decreasing_hull
from .output import evaluation_markdown, print_evaluation, write_evaluation
from .pareto import curve_entry_in, pareto_report
from .pareto_output import print_pareto, write_pareto
from .report import evaluation_report, router_predictions
from .table import RewardTable, argmax_choices, reward_table

__all__ = [
    "DEFAULT_ALPHA",
    "DEFAULT_K",
    "RewardTable",
    "Selection",
    "aiq",
    "argmax_choices",
    "baseline_cost_predictions",
    "cost_to_reach",
    "curve_entry_in",
    "evaluation_markdown",
    "evaluation_report",
    "fit_ridge",
    "knn_baseline",
    "knn_predict",
    "non_decreasing_hull",
    "pareto_report",
    "print_evaluation",
    "print_pareto",
    "reward_table",
    "ridge_baseline",
    "router_predictions",
    "run_baselines",
    "select_on_validation",
    "write_evaluation",
    "write_pareto",
]
