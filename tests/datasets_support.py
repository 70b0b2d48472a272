"""Shared helpers of the importer tests (test_datasets*.py): small generated files."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from fugu_lite.schemas import RewardRecord

# --- helpers -------------------------------------------------------------------------------


def record(prompt: str, rewards: list[float], split: str = "train") -> RewardRecord:
    return RewardRecord(prompt=prompt, split=split, worker_ids=["a", "b"], rewards=rewards)


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def write_json(path: Path, payload: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload), encoding="utf-8")
    return path


def split_figures(records: list[RewardRecord], split: str) -> tuple[int, str, float, float, float]:
    """(count, best single worker, its mean, oracle mean, random mean) on one split."""
    rows = [r for r in records if r.split == split]
    workers = rows[0].worker_ids
    means = [sum(r.rewards[i] for r in rows) / len(rows) for i in range(len(workers))]
    best = max(range(len(workers)), key=lambda i: means[i])
    oracle = sum(max(r.rewards) for r in rows) / len(rows)
    random = sum(sum(r.rewards) / len(workers) for r in rows) / len(rows)
    return len(rows), workers[best], means[best], oracle, random


# --- ZeroEval ------------------------------------------------------------------------------


def zeroeval_row(question: str, task: str = "gsm", **overrides: object) -> dict:
    row = {
        "task": task,
        "id": f"{task}-{question}",
        "question": question,
        "gold": "1",
        "scores": {"m2": 1, "m1": 0},
        "out_chars": {"m1": 40, "m2": 400},
    }
    row.update(overrides)
    return row


# --- RouterBench ---------------------------------------------------------------------------

ROUTERBENCH_MODELS = ("gpt-4-1106-preview", "meta/llama-2-70b-chat")


def routerbench_table(**changes: list) -> pd.DataFrame:
    columns: dict[str, list] = {
        "sample_id": ["mmlu.0", "gsm.1", "mtbench.2"],
        "prompt": ["['What is 2+2?']", "Tom has 3 apples.", "Write a poem."],
        "eval_name": ["mmlu-math", "gsm8k", "mt-bench"],
    }
    for index, model in enumerate(ROUTERBENCH_MODELS):
        columns[model] = [1.0, float(index), 0.5 + 0.25 * index]
        columns[f"{model}|total_cost"] = [0.01 * (index + 1)] * 3
        columns[f"{model}|model_response"] = ["4", "3", "roses"]
    columns["oracle_model_to_route_to"] = ["x", "y", "z"]
    columns.update(changes)
    return pd.DataFrame(columns)


# --- the long format -----------------------------------------------------------------------


def long_rows() -> list[dict]:
    return [
        {"prompt": "p1", "worker": "w2", "reward": 1, "cost": 0.2, "task": "t"},
        {"prompt": "p1", "worker": "w1", "reward": 0, "cost": 0.1, "task": "t"},
        {"prompt": "p2", "worker": "w1", "reward": 0.5, "cost": 0.1, "task": "u"},
        {"prompt": "p2", "worker": "w2", "reward": 0.25, "cost": 0.3, "task": "u"},
    ]


def write_long_csv(path: Path, rows: list[dict]) -> Path:
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


# --- LLMRouter (test_datasets_llmrouter.py, and the demo's LLMRouter stage) --------------------

LLMROUTER_PRICES = {
    "big": {"input_price": 0.9, "output_price": 1.2},
    "small": {"input_price": 0.1, "output_price": 0.2},
    "unused": {"input_price": 5.0, "output_price": 5.0},
}


def make_llmrouter(root: Path, train: list[dict] | None = None) -> Path:
    """A tiny llmrouter/ folder under `root`; returns the data folder `root`."""
    base = root / "llmrouter" / "data"
    train = train or [
        {"question": "q1", "scores": {"small": 1.0, "big": 0.0}, "cluster_id": 3},
        {"question": "q2 longer", "scores": {"small": 0.0, "big": 1.0}, "cluster_id": 1},
    ]
    write_json(base / "dcrouter_preprocessed/train.json", train)
    write_json(
        base / "dcrouter_preprocessed/test.json",
        [
            {"question": "q3", "scores": {"big": 0.5, "small": 0.25}},
            {"question": "q1", "scores": {"big": 1.0, "small": 1.0}},
        ],
    )
    queries = base / "example_data/query_data"
    write_jsonl(
        queries / "default_query_train.jsonl",
        [{"task_name": "math", "query": "q1"}, {"task_name": "qa", "query": "q2 longer"}],
    )
    write_jsonl(
        queries / "default_query_test.jsonl",
        [{"task_name": "other", "query": "q1"}, {"task_name": "code", "query": "q3"}],
    )
    write_json(base / "example_data/llm_candidates/default_llm.json", LLMROUTER_PRICES)
    return root
