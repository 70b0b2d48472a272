"""BLAS/OpenMP/torch thread contention in the fits and backbone forwards, with and without
a busy core.

Run from the project root: `.venv/bin/python bench/threads.py`. On the LLMRouter records
(standard split) and their cached default features (MiniLM), times two fit workloads:

- reward head: `train_reward_head` (`fugu-lite train reward-head`) with one of the default's
  six clusterings (k=30, 4 k-means restarts, the logistic assignment), the ridge cost head
  and the validation summary;
- baselines: `run_baselines` (kNN k and ridge alpha chosen on validation, fitted on train,
  predicted on test) and `baseline_cost_predictions`, the fits of `eval` and `eval --pareto`;

and, on FORWARD_PROMPTS short generated prompts and the embedded MiniLM, three backbone
workloads, which no thread limit covers (torch's intra-op pool, or ONNX Runtime's, sized from
it when the session opens):

- forward_onnx: their features, uncached, as the default config computes them with a cold
  cache (`eval`, `train`: ONNX Runtime, int8, one prompt per run);
- forward_torch: the same with `runtime: torch` (batches of 16; also an SVF router's
  uncached features, without the offsets);
- svf_step: SVF_STEPS training steps (batch 16) of a router with SVF on one matrix
  (SVF_TARGET): backbone forward with the offsets, SFT loss, backward, AdamW;

each (a) "before": the BLAS and OpenMP pools as the libraries size them, and torch's intra-op
pool as torch does (one thread per core), and (b) "after": one thread (`fit_threads()` as
shipped for the fits; `torch_fit_threads` as if the path were a head fit for the backbone
workloads), and
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
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import numpy as np
import torch
from bench_args import data_dir_or_exit, positive_int
from rich.console import Console
from rich.table import Table
from threadpoolctl import threadpool_info

from fugu_lite import features, reward_head_training, threads
from fugu_lite.backbones import load_backbone
from fugu_lite.cli.common import interrupts_stop_the_run
from fugu_lite.config import PipelineConfig
from fugu_lite.config_loading import DEFAULT_CONFIG, load_config
from fugu_lite.datasets import import_dataset
from fugu_lite.evaluation import reward_table, run_baselines
from fugu_lite.evaluation.curves import baseline_cost_predictions
from fugu_lite.feature_cache import compute_features
from fugu_lite.features import FeatureExtractor, uncached_features
from fugu_lite.model import RouterModel
from fugu_lite.reward_head_training import RewardHeadConfig, RewardHeadTraining, train_reward_head
from fugu_lite.schemas import RewardRecord, records_in_split
from fugu_lite.train_sft import sft_loss

os.environ.setdefault("HF_HUB_OFFLINE", "1")
console = Console(width=None if sys.stdout.isatty() else 140)  # full tables in logs
VARIANTS = {"before": None, "after": threads.FIT_THREADS}
CONDITIONS = ("idle", "busy")
SPLITS = ("train", "validation", "test")
HEAD_TRAINING = RewardHeadTraining(cluster_counts=[30], clusterings_per_count=1)
FORWARD_PROMPTS = 256
SVF_TARGET = "encoder.layer.3.output.dense"
SVF_STEPS = 2
SVF_BATCH = 16
WORDS = (
    *("route", "the", "question", "to", "a", "model", "that", "answers", "math", "code"),
    *("history", "briefly", "explain", "why", "a", "prime", "number", "cannot", "be", "even"),
    *("except", "two", "and", "write", "a", "short", "python", "loop", "for", "chemistry"),
)


# A busy loop that ends when the bench's process is gone: SIGTERM (`timeout`, a cancelled
# job) or SIGKILL ends the bench without busy_cores' `finally`, which left it spinning.
LOADER = """
import os
parent = os.getppid()
while os.getppid() == parent:
    for _ in range(1_000_000):
        pass
"""


@contextmanager
def busy_cores(busy: bool) -> Iterator[list[int]]:
    """One busy-loop process pinned to each CPU this process may use but the first."""
    cpus = sorted(os.sched_getaffinity(0))
    loaders: list[subprocess.Popen] = []
    try:
        for cpu in cpus[1:] if busy else []:
            loader = subprocess.Popen([sys.executable, "-c", LOADER])
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


def generated_prompts(count: int, seed: int = 0) -> list[str]:
    """Short prompts of 6-40 words drawn from WORDS (lengths vary, as real prompts do)."""
    rng = np.random.default_rng(seed)
    return [
        " ".join(rng.choice(WORDS, size=int(rng.integers(6, 41)))).capitalize() + "?"
        for _ in range(count)
    ]


def torch_extractor(config: PipelineConfig) -> FeatureExtractor:
    model_cfg = config.model.model_copy(update={"runtime": "torch", "quantization": "none"})
    return FeatureExtractor(load_backbone(model_cfg.backbone, model_cfg.device), model_cfg)


def in_variant_threads() -> AbstractContextManager[None]:
    """torch's intra-op pool as the variant timed has it: one thread after, as is before."""
    return threads.torch_fit_threads(runs_backbone=False)


def forward_onnx_workload(config: PipelineConfig) -> Callable[[], dict]:
    """ONNX Runtime sizes its pool from torch's when the session opens: one session per
    variant, each opened under that variant's torch threads."""
    prompts = generated_prompts(FORWARD_PROMPTS)
    extractors: dict[int | None, FeatureExtractor] = {}
    for fit_threads in VARIANTS.values():
        threads.FIT_THREADS = fit_threads
        extractor = FeatureExtractor(load_backbone(config.model.backbone), config.model)
        with in_variant_threads():
            if extractor.runtime.onnx is None:
                sys.exit("error: forward_onnx needs onnxruntime and the MiniLM export")
            extractor.encode(prompts[:1])
        extractors[fit_threads] = extractor
    threads.FIT_THREADS = VARIANTS["after"]

    def run() -> dict:
        extractor = extractors[threads.FIT_THREADS]
        rows = uncached_features(prompts, extractor, None, config.model.feature_batch_size)
        return {"feature_sum": round(float(rows.sum()), 1)}

    return run


def forward_torch_workload(config: PipelineConfig) -> Callable[[], dict]:
    prompts = generated_prompts(FORWARD_PROMPTS)
    extractor = torch_extractor(config)

    def run() -> dict:
        with in_variant_threads():
            rows = uncached_features(prompts, extractor, None, config.model.feature_batch_size)
        return {"feature_sum": round(float(rows.sum()), 1)}

    return run


def svf_step_workload(config: PipelineConfig) -> Callable[[], dict]:
    """SVF_STEPS SFT steps from the same start each run (fresh offsets and head)."""
    model_cfg = config.model.model_copy(
        update={"runtime": "torch", "quantization": "none", "svf_targets": [SVF_TARGET]}
    )
    extractor = FeatureExtractor(load_backbone(model_cfg.backbone), model_cfg)
    prompts = generated_prompts(SVF_STEPS * SVF_BATCH, seed=1)
    batches = [
        extractor.tokenize(prompts[start : start + SVF_BATCH])
        for start in range(0, len(prompts), SVF_BATCH)
    ]
    workers = ["a", "b", "c"]
    rewards = torch.rand(SVF_BATCH, len(workers), generator=torch.Generator().manual_seed(0))

    def run() -> dict:
        torch.manual_seed(0)
        model = RouterModel(model_cfg, workers, extractor.dim, extractor=extractor)
        model.train()
        optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad])
        losses = []
        with in_variant_threads():
            for tokens in batches:
                logits = model(
                    input_ids=tokens["input_ids"], attention_mask=tokens["attention_mask"]
                )
                loss, _ = sft_loss(logits, rewards, temperature=1.0)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                losses.append(round(loss.item(), 3))
        return {"losses": losses}

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
    parser.add_argument("--repeats", type=positive_int, default=3)
    args = parser.parse_args()
    refuse_unfit_machine()
    started = time.perf_counter()
    load_before = os.getloadavg()
    records = import_dataset("llmrouter", data_dir_or_exit(parser, args.data_dir))
    n_train = len(records_in_split(records, "train"))
    config = load_config(DEFAULT_CONFIG, PipelineConfig)
    reward_head_training.console.quiet = True  # its progress bar and validation line, per run
    features.console.quiet = True  # the forwards' progress bars, per run
    workloads = {
        "reward_head": reward_head_workload(records, config),
        "baselines": baselines_workload(records, config),
        "forward_onnx": forward_onnx_workload(config),
        "forward_torch": forward_torch_workload(config),
        "svf_step": svf_step_workload(config),
    }
    console.print(
        f"CPUs {len(os.sched_getaffinity(0))}; thread pools: {pool_sizes()}, "
        f"torch {torch.get_num_threads()}"
    )
    seconds, results = run_repeats(workloads, args.repeats)
    medians = {key: statistics.median(values) for key, values in seconds.items()}
    print_medians(list(workloads), medians)
    summary: dict = {}
    for name in workloads:
        summary |= workload_summary(name, medians, results)
    summary |= {
        "repeats": args.repeats,
        "cpus": len(os.sched_getaffinity(0)),
        "load_average_1min": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        "data": f"llmrouter standard split ({n_train} train prompts), default features; "
        f"{FORWARD_PROMPTS} generated prompts for the forwards, {SVF_STEPS} SVF steps of "
        f"batch {SVF_BATCH} on {SVF_TARGET}",
    }
    console.print(f"finished in {time.perf_counter() - started:.0f} s")
    print(json.dumps(summary))


def refuse_unfit_machine() -> None:
    """Exit when the comparison cannot be made here: a thread variable set, or one CPU."""
    sized = [name for name in threads.THREAD_VARIABLES if name in os.environ]
    if sized:
        sys.exit(
            f"error: unset {', '.join(sized)}: this bench compares the libraries' own "
            "thread pools with fugu-lite's limit, which those variables switch off"
        )
    if len(os.sched_getaffinity(0)) < 2:
        sys.exit("error: this bench needs at least 2 CPUs (one of them is kept busy)")


# a cell's timings: (workload, condition, variant) -> seconds, one per repeat
Timings = dict[tuple[str, str, str], list[float]]
# each side's results: (workload, variant) -> the distinct results (JSON) over the repeats
Results = dict[tuple[str, str], set[str]]


def run_repeats(workloads: dict[str, Callable[[], dict]], repeats: int) -> tuple[Timings, Results]:
    """Every cell once per repeat, interleaved; the side that goes first alternates. SIGTERM
    (`timeout`, a cancelled job) is taken as a Ctrl-C meanwhile: by default it ends the script
    at once, leaving a running workload's temporary folder (the reward head's files)."""
    with interrupts_stop_the_run():
        return interleaved_repeats(workloads, repeats)


def interleaved_repeats(
    workloads: dict[str, Callable[[], dict]], repeats: int
) -> tuple[Timings, Results]:
    seconds: Timings = {}
    results: Results = {}
    for repeat in range(repeats):
        order = list(VARIANTS) if repeat % 2 == 0 else list(reversed(VARIANTS))
        for condition in CONDITIONS:
            with busy_cores(condition == "busy"):
                for name, run in workloads.items():
                    for variant in order:
                        elapsed, result = timed(run, VARIANTS[variant])
                        seconds.setdefault((name, condition, variant), []).append(elapsed)
                        results.setdefault((name, variant), set()).add(json.dumps(result))
            console.print(
                f"repeat {repeat + 1}/{repeats} {condition}: "
                + ", ".join(
                    f"{name} {variant} {seconds[(name, condition, variant)][-1]:.1f} s"
                    for name in workloads
                    for variant in order
                )
            )
    return seconds, results


def print_medians(workloads: list[str], medians: dict[tuple[str, str, str], float]) -> None:
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


def workload_summary(
    name: str, medians: dict[tuple[str, str, str], float], results: Results
) -> dict:
    """One workload's keys of the last line, also printed as a sentence."""
    idle_before, idle_after = (
        medians[(name, "idle", "before")],
        medians[(name, "idle", "after")],
    )
    busy_before, busy_after = (
        medians[(name, "busy", "before")],
        medians[(name, "busy", "after")],
    )
    same = results[(name, "before")] == results[(name, "after")]
    console.print(
        f"{name}: a busy core slows it {busy_before / idle_before:.1f}x before, "
        f"{busy_after / idle_after:.1f}x after; after / before: busy "
        f"{busy_before / busy_after:.1f}x faster, idle {idle_before / idle_after:.2f}x; "
        f"same result: {same} ({sorted(results[(name, 'after')])[0]})"
    )
    return {
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


if __name__ == "__main__":
    main()
