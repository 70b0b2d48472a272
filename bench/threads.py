"""BLAS/OpenMP thread contention in the sklearn/numpy fits, with and without a busy core.

Run from the project root: `.venv/bin/python bench/threads.py`. On the LLMRouter records
(standard split) and their cached default features (MiniLM), times two workloads:

- reward head: `train_reward_head` (`fugu-lite train reward-head`) with one of the default's
  six clusterings (k=30, 4 k-means restarts, the logistic assignment), the ridge cost head
  and the validation summary;
- baselines: `run_baselines` (kNN k and ridge alpha chosen on validation, fitted on train,
  predicted on test) and `baseline_cost_predictions`, the fits of `eval` and `eval --pareto`;

each (a) "before": the BLAS and OpenMP pools as the libraries size them (one thread per
core), and (b) "after": `fugu_lite.threads.fit_threads()` as shipped (one thread), and
each (i) "idle": nothing started by this script, and (ii) "busy": one busy-loop process
pinned to each core but the first, started by this script. The four cells are
interleaved in every repeat (which variant goes first alternates), so slow drifts of the
machine's background load fall on all of them; the medians over repeats are compared.
The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table
from threadpoolctl import threadpool_info

from fugu_lite import reward_head, threads
from fugu_lite.config import DEFAULT_CONFIG, PipelineConfig, load_config
from fugu_lite.datasets import import_dataset, resolve_data_dir
from fugu_lite.evaluation import reward_table, run_baselines
from fugu_lite.evaluation.pareto import baseline_cost_predictions
from fugu_lite.features import compute_features
from fugu_lite.reward_head import RewardHeadConfig, RewardHeadTraining, train_reward_head
from fugu_lite.schemas import RewardRecord, records_in_split

os.environ.setdefault("HF_HUB_OFFLINE", "1")
console = Console(width=None if sys.stdout.isatty() else 140)  # full tables in logs
VARIANTS = {"before": None, "after": threads.FIT_THREADS}
CONDITIONS = ("idle", "busy")
SPLITS = ("train", "validation", "test")
HEAD_TRAINING = RewardHeadTraining(cluster_counts=[30], clusterings_per_count=1)


@contextmanager
def busy_cores(busy: bool) -> Iterator[list[int]]:
    """One busy-loop process pinned to each CPU this process may use but the first."""
    cpus = sorted(os.sched_getaffinity(0))
    loaders: list[subprocess.Popen] = []
    try:
        for cpu in cpus[1:] if busy else []:
            loader = subprocess.Popen([sys.executable, "-c", "while True: pass"])
            os.sched_setaffinity(loader.pid, {cpu})
            loaders.append(loader)
        time.sleep(0.5 if busy else 0.0)  # let the loaders get going
        yield cpus[1:] if busy else []
    finally:
        for loader in loaders:
            loader.terminate()
        for loader in loaders:
            loader.wait()


def split_features(records: list[RewardRecord], split: str, config: PipelineConfig) -> np.ndarray:
    prompts = [record.prompt for record in records_in_split(records, split)]
    return compute_features(prompts, config.model)[0].numpy()


def reward_head_workload(records: list[RewardRecord], config: PipelineConfig) -> Callable[[], dict]:
    head_config = RewardHeadConfig(model=config.model, training=HEAD_TRAINING)

    def run() -> dict:
        with tempfile.TemporaryDirectory(prefix="fugu-threads-") as folder:
            report = train_reward_head(records, head_config, Path(folder) / "head")
        return {"validation_reward": report["validation"]["reward_at_cost_weight_0"]}

    return run


def baselines_workload(records: list[RewardRecord], config: PipelineConfig) -> Callable[[], dict]:
    features = {split: split_features(records, split, config) for split in SPLITS}
    tables = {split: reward_table(records_in_split(records, split)) for split in features}

    def run() -> dict:
        _, info = run_baselines(
            features["train"],
            tables["train"],
            features["test"],
            features["validation"],
            tables["validation"],
        )
        baseline_cost_predictions(features["train"], tables["train"], features["test"], info)
        return {"knn_k": info["knn"]["chosen"], "ridge_alpha": info["ridge"]["chosen"]}

    return run


def timed(run: Callable[[], dict], fit_threads: int | None) -> tuple[float, dict]:
    threads.FIT_THREADS = fit_threads
    try:
        started = time.perf_counter()
        result = run()
        return time.perf_counter() - started, result
    finally:
        threads.FIT_THREADS = VARIANTS["after"]


def pool_sizes() -> str:
    return ", ".join(f"{pool['internal_api']} {pool['num_threads']}" for pool in threadpool_info())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    sized = [name for name in threads.THREAD_VARIABLES if name in os.environ]
    if sized:
        sys.exit(
            f"error: unset {', '.join(sized)}: this bench compares the libraries' own "
            "thread pools with fugu-lite's limit, which those variables switch off"
        )
    if len(os.sched_getaffinity(0)) < 2:
        sys.exit("error: this bench needs at least 2 CPUs (one of them is kept busy)")
    started = time.perf_counter()
    load_before = os.getloadavg()
    records = import_dataset("llmrouter", resolve_data_dir(args.data_dir))
    n_train = len(records_in_split(records, "train"))
    config = load_config(DEFAULT_CONFIG, PipelineConfig)
    reward_head.console.quiet = True  # its progress bar and validation line, per run
    workloads = {
        "reward_head": reward_head_workload(records, config),
        "baselines": baselines_workload(records, config),
    }
    console.print(f"CPUs {len(os.sched_getaffinity(0))}; thread pools: {pool_sizes()}")
    seconds: dict[tuple[str, str, str], list[float]] = {}
    results: dict[tuple[str, str], set[str]] = {}
    for repeat in range(args.repeats):
        order = list(VARIANTS) if repeat % 2 == 0 else list(reversed(VARIANTS))
        for condition in CONDITIONS:
            with busy_cores(condition == "busy"):
                for name, run in workloads.items():
                    for variant in order:
                        elapsed, result = timed(run, VARIANTS[variant])
                        seconds.setdefault((name, condition, variant), []).append(elapsed)
                        results.setdefault((name, variant), set()).add(json.dumps(result))
            console.print(
                f"repeat {repeat + 1}/{args.repeats} {condition}: "
                + ", ".join(
                    f"{name} {variant} {seconds[(name, condition, variant)][-1]:.1f} s"
                    for name in workloads
                    for variant in order
                )
            )
    medians = {key: statistics.median(values) for key, values in seconds.items()}

    title = "Median seconds over repeats (before: the libraries' pools; after: 1 thread)"
    table = Table("workload", "condition", "before s", "after s", "before / after", title=title)
    for name in workloads:
        for condition in CONDITIONS:
            before, after = (
                medians[(name, condition, "before")],
                medians[(name, condition, "after")],
            )
            table.add_row(
                name, condition, f"{before:.2f}", f"{after:.2f}", f"{before / after:.2f}x"
            )
    console.print(table)
    summary: dict = {}
    for name in workloads:
        idle_before, idle_after = (
            medians[(name, "idle", "before")],
            medians[(name, "idle", "after")],
        )
        busy_before, busy_after = (
            medians[(name, "busy", "before")],
            medians[(name, "busy", "after")],
        )
        same = results[(name, "before")] == results[(name, "after")]
        summary |= {
            f"{name}_busy_slowdown_before": round(busy_before / idle_before, 2),
            f"{name}_busy_slowdown_after": round(busy_after / idle_after, 2),
            f"{name}_speedup_busy": round(busy_before / busy_after, 2),
            f"{name}_speedup_idle": round(idle_before / idle_after, 2),
            f"{name}_seconds": {
                f"{condition}_{variant}": round(medians[(name, condition, variant)], 2)
                for condition in CONDITIONS
                for variant in VARIANTS
            },
            f"{name}_same_result": same,
        }
        console.print(
            f"{name}: a busy core slows it {busy_before / idle_before:.1f}x before, "
            f"{busy_after / idle_after:.1f}x after; after / before: busy "
            f"{busy_before / busy_after:.1f}x faster, idle {idle_before / idle_after:.2f}x; "
            f"same result: {same} ({sorted(results[(name, 'after')])[0]})"
        )
    summary |= {
        "repeats": args.repeats,
        "cpus": len(os.sched_getaffinity(0)),
        "load_average_1min": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        "data": f"llmrouter standard split ({n_train} train prompts), default features",
    }
    console.print(f"finished in {time.perf_counter() - started:.0f} s")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
