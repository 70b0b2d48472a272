"""The stages chained: SFT -> RL, evaluation of a checkpoint, and the demo job."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch
from rich.console import Console

from .config import PipelineConfig
from .evaluation import (
    evaluation_report,
    print_evaluation,
    reward_table,
    router_predictions,
    run_baselines,
    write_evaluation,
)
from .io import write_json
from .model import RouterModel, load_router
from .schemas import RewardRecord, records_in_split, write_records
from .train_rl import train_rl
from .train_sft import train_sft

console = Console()


def train_pipeline(records: list[RewardRecord], config: PipelineConfig, output_dir: Path) -> dict:
    """SFT into OUTPUT/sft, then RL from that checkpoint into OUTPUT/rl."""
    output_dir = Path(output_dir)
    started = time.perf_counter()
    sft_report = train_sft(records, config.sft_config(), output_dir / "sft")
    rl_report = train_rl(records, config.rl_config(), output_dir / "rl", sft_report["checkpoint"])
    report = {
        "stage": "pipeline",
        "checkpoint": rl_report["checkpoint"],
        "stages": {"sft": sft_report["checkpoint"], "rl": rl_report["checkpoint"]},
        "seconds": time.perf_counter() - started,
    }
    write_json(output_dir / "training_report.json", report)
    return report


def split_features(model: RouterModel, records: list[RewardRecord], split: str) -> np.ndarray:
    selected = records_in_split(records, split)
    if not selected:
        return np.zeros((0, model.feature_dim), dtype=np.float32)
    return model.features_for([record.prompt for record in selected]).numpy()


def run_evaluation(
    checkpoint: Path, records: list[RewardRecord], split: str, output_dir: Path
) -> dict:
    """Evaluate a checkpoint on one split beside baselines fitted on the train split."""
    evaluated_records = records_in_split(records, split)
    train_records = records_in_split(records, "train")
    if not evaluated_records:
        raise ValueError(f"no records in the {split!r} split to evaluate")
    if not train_records:
        raise ValueError("evaluation needs a train split (best single and baselines fit on it)")
    model = load_router(checkpoint, worker_ids=records[0].worker_ids)
    validation_records = records_in_split(records, "validation")
    train_x = split_features(model, records, "train")
    evaluated_x = split_features(model, records, split)
    validation_x = split_features(model, records, "validation") if validation_records else None
    probabilities = model.probabilities(torch.from_numpy(evaluated_x)).cpu().numpy()
    train, evaluated = reward_table(train_records), reward_table(evaluated_records)
    validation = reward_table(validation_records) if validation_records else None
    predictions, info = run_baselines(train_x, train, evaluated_x, validation_x, validation)
    report = evaluation_report(train, evaluated, split, probabilities, predictions, info)
    report["checkpoint"] = str(checkpoint)
    write_evaluation(report, router_predictions(evaluated, probabilities), Path(output_dir))
    print_evaluation(report, console)
    console.print(f"report written to {output_dir}")
    return report


def run_demo(data_dir: Path | None, output_dir: Path, config: PipelineConfig) -> dict:
    """Import LLMRouter, train SFT -> RL, evaluate on test: the README's main job."""
    from .datasets import import_dataset, resolve_data_dir

    started = time.perf_counter()
    root = resolve_data_dir(str(data_dir) if data_dir else None)
    records = import_dataset("llmrouter", root)
    output_dir = Path(output_dir)
    write_records(output_dir / "records.jsonl", records)
    console.print(f"imported {len(records)} LLMRouter records from {root}")
    training = train_pipeline(records, config, output_dir / "router")
    report = run_evaluation(
        Path(training["checkpoint"]), records, "test", output_dir / "evaluation"
    )
    console.print(f"demo finished in {time.perf_counter() - started:.0f} s")
    return report
