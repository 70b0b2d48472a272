"""SFT vs SFT -> RL vs SFT -> sep-CMA-ES on LLMRouter (standard split), and ES speed.

Run from the project root: `.venv/bin/python bench/es.py`. SFT, RL and ES use the shipped
default config; the ES run starts from the SFT checkpoint and keeps its best generation on
validation. ES's default settings (search the head's output layer, fitness of 8 sampled
choices, sigma0 0.03, 600 generations) were chosen by 5-fold cross-validation over train +
validation (bench/README.md), never on test. The test split is evaluated once per router
(reward of the argmax choice). Also times one ES generation, population 32 on 1,000
prompts of cached features, with those settings and with the whole head searched. The
last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Literal, NamedTuple

import torch
from bench_args import data_dir_or_exit
from cmaes import SepCMA
from rich.console import Console
from rich.table import Table

from fugu_lite.config import ESConfig, ESTrainingConfig, PipelineConfig
from fugu_lite.config_loading import DEFAULT_CONFIG, load_config
from fugu_lite.datasets import import_dataset
from fugu_lite.es_population import parameter_vector, policy_metrics, restrict_search, split_data
from fugu_lite.model import load_router
from fugu_lite.schemas import RewardRecord
from fugu_lite.train_es import run_generation, train_es
from fugu_lite.train_rl import train_rl
from fugu_lite.train_sft import train_sft

os.environ.setdefault("HF_HUB_OFFLINE", "1")
console = Console(width=None if sys.stdout.isatty() else 140)  # full tables in logs

# What ES runs: the shipped defaults (config.ESTrainingConfig). Batch: 1,000 of the ~3,800
# train prompts per generation (the whole train split overfits it, 250 was worse on
# validation in trial runs).
ES_SETTINGS = ("sigma0", "population_size", "batch_size", "iterations", "samples", "search")
TIMING = {"population_size": 32, "batch_size": 1000, "generations": 10}


def split_metrics(checkpoint: str | Path, records: list[RewardRecord], split: str) -> dict:
    """Argmax reward (and the other evaluate_loader metrics) of a checkpoint on one split."""
    model = load_router(checkpoint, worker_ids=records[0].worker_ids)
    return policy_metrics(model, split_data(records, model, split))


def run_es(records: list[RewardRecord], config: PipelineConfig, sft: str, output: Path) -> dict:
    """One ES run from the SFT checkpoint with the shipped ES settings."""
    training = config.es.model_copy(update={"log_every": 50})
    settings = training.model_dump(include=set(ES_SETTINGS))
    console.rule(f"ES: {settings}")
    started = time.perf_counter()
    report = train_es(
        records, ESConfig(model=config.model, training=training), output / "es", sft, resume=False
    )
    return {"settings": settings, "report": report, "seconds": time.perf_counter() - started}


@torch.no_grad()
def chosen_rewards(checkpoint: str | Path, records: list[RewardRecord], split: str) -> torch.Tensor:
    """Per prompt of the split, the reward of the router's argmax choice."""
    model = load_router(checkpoint, worker_ids=records[0].worker_ids)
    data = split_data(records, model, split)
    choice = model(**data.inputs).argmax(dim=-1, keepdim=True)
    return data.rewards.gather(1, choice).squeeze(1)


def paired_difference(first: torch.Tensor, second: torch.Tensor) -> tuple[float, float]:
    """Mean of first - second over the same prompts, and its standard error."""
    difference = first - second
    return float(difference.mean()), float(difference.std() / len(difference) ** 0.5)


def time_generations(
    records: list[RewardRecord], sft: str, search: Literal["head", "output_layer"], samples: int
) -> dict[str, float]:
    """Seconds per generation (median) on cached features, for the default head searched as
    given, population and batch as in TIMING."""
    model = load_router(sft, worker_ids=records[0].worker_ids)
    training = ESTrainingConfig(
        population_size=TIMING["population_size"],
        batch_size=TIMING["batch_size"],
        search=search,
        samples=samples,
    )
    restrict_search(model, training.search)
    train = split_data(records, model, "train")
    optimizer = SepCMA(
        mean=parameter_vector(model), sigma=0.01, seed=0, population_size=training.population_size
    )
    seconds = []
    for generation in range(1, TIMING["generations"] + 3):
        started = time.perf_counter()
        run_generation(model, optimizer, train, training, generation)
        if generation > 2:  # the first generations warm up allocators and vmap tracing
            seconds.append(time.perf_counter() - started)
    return {
        "median": statistics.median(seconds),
        "max": max(seconds),
        "parameters": optimizer.dim,
        "threads": torch.get_num_threads(),
    }


def oracle_and_best_single(records: list[RewardRecord], split: str) -> tuple[float, float]:
    rows = torch.tensor([record.rewards for record in records if record.split == split])
    train = torch.tensor([record.rewards for record in records if record.split == "train"])
    best = int(train.mean(dim=0).argmax())
    return float(rows.max(dim=1).values.mean()), float(rows[:, best].mean())


def print_tables(rows: dict[str, dict], run: dict) -> None:
    grid = Table(title="ES from the SFT checkpoint (best generation on validation)")
    columns = ("search", "samples", "sigma0", "pop", "batch", "iters", "best gen", "val reward")
    for column in (*columns, "s/gen", "s"):
        grid.add_column(column, justify="right")
    settings, report = run["settings"], run["report"]
    grid.add_row(
        settings["search"],
        str(settings["samples"]),
        f"{settings['sigma0']:g}",
        str(settings["population_size"]),
        str(settings["batch_size"]),
        str(settings["iterations"]),
        str(report["best_generation"]),
        f"{report['best_validation_reward']:.4f}",
        f"{report['seconds_per_generation']:.3f}",
        f"{run['seconds']:.0f}",
    )
    console.print(grid)
    table = Table(title="LLMRouter: reward of the argmax choice")
    for column in ("router", "validation", "test", "test expected", "train s"):
        table.add_column(column, justify="right" if column != "router" else "left")
    for name, row in rows.items():
        table.add_row(
            name,
            f"{row['validation']['reward']:.4f}",
            f"{row['test']['reward']:.4f}",
            f"{row['test']['expected_reward']:.4f}",
            f"{row['seconds']:.0f}",
        )
    console.print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--output", default="bench/results/es")
    args = parser.parse_args()
    output = Path(args.output)
    records = import_dataset("llmrouter", data_dir_or_exit(parser, args.data_dir))
    config = load_config(DEFAULT_CONFIG, PipelineConfig)
    sizes = {s: sum(r.split == s for r in records) for s in ("train", "validation", "test")}
    console.print(f"LLMRouter: {len(records)} records {sizes}; model {config.model.model_dump()}")

    trained = train_routers(records, config, output)
    es = trained.es
    rows = evaluate_routers(trained, records)
    settings = es["settings"]
    timing = time_generations(records, trained.sft, settings["search"], settings["samples"])
    whole_head = time_generations(records, trained.sft, search="head", samples=0)
    print_tables(rows, es)
    oracle, best_single = oracle_and_best_single(records, "test")
    console.print(
        f"test: best single worker (chosen on train) {best_single:.4f}, oracle {oracle:.4f}"
    )
    print_speed(timing, whole_head, settings)
    difference, error = paired_difference(
        chosen_rewards(trained.checkpoints["SFT -> ES"][0], records, "test"),
        chosen_rewards(trained.rl, records, "test"),
    )
    es_reward, rl_reward = rows["SFT -> ES"]["test"]["reward"], rows["SFT -> RL"]["test"]["reward"]
    console.print(
        f"target: SFT -> ES test reward {es_reward:.4f} >= SFT -> RL {rl_reward:.4f} -> "
        f"{'MET' if es_reward >= rl_reward else 'NOT MET'}; paired difference on test "
        f"{difference:+.4f} ± {error:.4f} (standard error); ES settings: {settings}"
    )
    print(json.dumps(summary(rows, es, timing, whole_head, difference, error, oracle, best_single)))


def summary(
    rows: dict[str, dict[str, Any]],
    es: dict,
    timing: dict[str, float],
    whole_head: dict[str, float],
    difference: float,
    error: float,
    oracle: float,
    best_single: float,
) -> dict:
    """The last line's figures."""
    es_reward, rl_reward = rows["SFT -> ES"]["test"]["reward"], rows["SFT -> RL"]["test"]["reward"]
    return {
        "sft_test_reward": round(rows["SFT"]["test"]["reward"], 4),
        "sft_rl_test_reward": round(rl_reward, 4),
        "sft_es_test_reward": round(es_reward, 4),
        "es_seconds_per_generation": round(timing["median"], 4),
        "es_target_met": es_reward >= rl_reward,
        "es_minus_rl_test": round(difference, 4),
        "es_minus_rl_test_standard_error": round(error, 4),
        "speed_target_met": timing["median"] < 1,
        "es_seconds_per_generation_whole_head": round(whole_head["median"], 4),
        "es_chosen": es["settings"],
        "es_best_generation": es["report"]["best_generation"],
        "validation_rewards": {
            name: round(row["validation"]["reward"], 4) for name, row in rows.items()
        },
        "test_oracle_reward": round(oracle, 4),
        "test_best_single_reward": round(best_single, 4),
    }


def evaluate_routers(trained: Trained, records: list[RewardRecord]) -> dict[str, dict[str, Any]]:
    """Each router's validation and test metrics, and its training seconds."""
    return {
        name: {
            "validation": split_metrics(path, records, "validation"),
            "test": split_metrics(path, records, "test"),
            "seconds": seconds,
        }
        for name, (path, seconds) in trained.checkpoints.items()
    }


class Trained(NamedTuple):
    sft: str  # the SFT checkpoint, which RL and ES start from
    rl: str
    es: dict  # the ES run: its settings, report (checkpoint, best generation) and seconds
    checkpoints: dict[str, tuple[str, float]]  # router -> (checkpoint, training seconds)


def train_routers(records: list[RewardRecord], config: PipelineConfig, output: Path) -> Trained:
    """SFT, then RL and ES from its checkpoint."""
    started = time.perf_counter()
    sft = train_sft(records, config.sft_config(), output / "sft")["checkpoint"]
    sft_seconds = time.perf_counter() - started
    started = time.perf_counter()
    rl = train_rl(records, config.rl_config(), output / "rl", sft)["checkpoint"]
    rl_seconds = time.perf_counter() - started
    es = run_es(records, config, sft, output)
    checkpoints = {
        "SFT": (sft, sft_seconds),
        "SFT -> RL": (rl, rl_seconds),
        "SFT -> ES": (es["report"]["checkpoint"], es["seconds"]),
    }
    return Trained(sft, rl, es, checkpoints)


def print_speed(timing: dict, whole_head: dict, settings: dict) -> None:
    console.print(
        f"ES generation, population {TIMING['population_size']} on {TIMING['batch_size']} "
        f"prompts, {timing['parameters']:,} parameters, {timing['threads']} threads: "
        f"median {timing['median']:.3f} s (max {timing['max']:.3f} s) vs target < 1 s -> "
        f"{'MET' if timing['median'] < 1 else 'NOT MET'} (the ES run's search "
        f"{settings['search']}, samples {settings['samples']}); "
        f"the whole head ({whole_head['parameters']:,} parameters, argmax): median "
        f"{whole_head['median']:.3f} s"
    )


if __name__ == "__main__":
    main()
