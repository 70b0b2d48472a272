"""LLMRouter (ulab-uiuc/LLMRouter, MIT): 9 open models x 14 tasks, with per-model prices."""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Annotated

from pydantic import Field

from ..io import iter_jsonl, read_json
from ..schemas import RewardRecord, warn_of_rewards_off_scale
from ..text_reading import RecordFileError
from .common import (
    build_record,
    refuse_control_characters,
    require_float,
    require_text,
    stable_id,
)
from .split import apply_standard_split

logger = logging.getLogger(__name__)

SCORE_FILES: tuple[str, ...] = (
    "data/dcrouter_preprocessed/train.json",
    "data/dcrouter_preprocessed/test.json",
)
QUERY_FILES: tuple[str, ...] = (
    "data/example_data/query_data/default_query_train.jsonl",
    "data/example_data/query_data/default_query_test.jsonl",
)
PRICE_FILE = "data/example_data/llm_candidates/default_llm.json"
LLMROUTER_FILES: tuple[str, ...] = (*SCORE_FILES, *QUERY_FILES, PRICE_FILE)

CHARS_PER_TOKEN = 4.0
DEFAULT_OUTPUT_TOKENS = 256


def llmrouter_root(source: str | Path) -> Path:
    """Accept the llmrouter folder itself or a data folder that contains `llmrouter/`."""
    source = Path(source)
    for root in (source, source / "llmrouter"):
        if (root / SCORE_FILES[0]).is_file():
            return root
    raise RecordFileError(
        f"{source}: no LLMRouter data here; expected {SCORE_FILES[0]} inside it or inside "
        f"{source / 'llmrouter'}"
    )


def import_llmrouter(
    source: str | Path,
    *,
    output_tokens: Annotated[float, Field(ge=0, allow_inf_nan=False)] = DEFAULT_OUTPUT_TOKENS,
) -> list[RewardRecord]:
    """Score rows of train then test, deduplicated, with the standard split.

    Costs are USD estimates, since the data has no token counts: input tokens are
    len(prompt) / 4 and every answer is assumed to be `output_tokens` long (256 by default,
    a typical short reasoning answer). With one fixed answer length the cost ranking of the
    workers on a prompt follows their prices; only the input part varies between prompts.
    """
    if not 0 <= output_tokens < math.inf:  # NaN too
        raise ValueError(
            f"output_tokens must be a finite number of at least 0, got {output_tokens}"
        )
    root = llmrouter_root(source)
    tasks = read_llmrouter_tasks(root)
    prices = read_llmrouter_prices(root / PRICE_FILE)
    records: list[RewardRecord] = []
    places: list[str] = []
    worker_ids: list[str] | None = None
    for relative in SCORE_FILES:
        for where, question, scores in _score_rows(root / relative):
            if worker_ids is None:
                worker_ids = sorted(scores)
                _check_prices(worker_ids, prices, root / PRICE_FILE)
            _check_same_models(where, scores, worker_ids)
            costs = _estimated_costs(question, worker_ids, prices, output_tokens)
            records.append(_score_record(where, question, scores, worker_ids, costs, tasks))
            places.append(where)
    _warn_unmatched(records)
    warn_of_rewards_off_scale(str(root), records, places)
    return apply_standard_split(records)


def _check_same_models(where: str, scores: dict[str, float], worker_ids: list[str]) -> None:
    if sorted(scores) != worker_ids:
        raise RecordFileError(
            f"{where}: scores has models {sorted(scores)}, but earlier rows have "
            f"{worker_ids}; every row needs a score for every model"
        )


def _estimated_costs(
    question: str,
    worker_ids: list[str],
    prices: dict[str, tuple[float, float]],
    output_tokens: float,
) -> list[float]:
    """USD per worker: len(question) / 4 input tokens and `output_tokens` output tokens."""
    input_tokens = len(question) / CHARS_PER_TOKEN
    return [(input_tokens * prices[w][0] + output_tokens * prices[w][1]) / 1e6 for w in worker_ids]


def _score_record(
    where: str,
    question: str,
    scores: dict[str, float],
    worker_ids: list[str],
    costs: list[float],
    tasks: dict[str, str],
) -> RewardRecord:
    return build_record(
        where,
        prompt=question,
        worker_ids=worker_ids,
        rewards=[scores[w] for w in worker_ids],
        costs=costs,
        task=tasks.get(question),
        id=stable_id("llmrouter", question),
    )


def _warn_unmatched(records: list[RewardRecord]) -> None:
    unmatched = sum(record.task is None for record in records)
    if unmatched:
        logger.warning("%d LLMRouter questions have no task in the query files", unmatched)


def _score_rows(path: Path) -> list[tuple[str, str, dict[str, float]]]:
    """(row name, question, scores) for each item of a dcrouter JSON list."""
    items = read_json(path)
    if not isinstance(items, list):
        raise RecordFileError(f"{path}: expected a JSON list of {{question, scores}} objects")
    rows: list[tuple[str, str, dict[str, float]]] = []
    for number, item in enumerate(items, start=1):
        where = f"{path}, item {number}"
        if not isinstance(item, dict):
            raise RecordFileError(f"{where}: expected an object, got {type(item).__name__}")
        question = require_text(item.get("question"), "question", where)
        raw_scores = item.get("scores")
        if not isinstance(raw_scores, dict) or not raw_scores:
            raise RecordFileError(f"{where}: scores must be a non-empty {{model: score}} object")
        for model in raw_scores:
            refuse_control_characters(
                str(model), "the model in scores", where, "rename the model in the file"
            )
        scores = {
            str(model): require_float(value, f"the score of {model}", where)
            for model, value in raw_scores.items()
        }
        rows.append((where, question, scores))
    return rows


def read_llmrouter_tasks(root: Path) -> dict[str, str]:
    """query -> task_name, train file first; the first task seen wins.

    A few queries (6 in the public files) carry two labels, e.g. mmlu and openbook_qa.
    """
    tasks: dict[str, str] = {}
    for relative in QUERY_FILES:
        path = root / relative
        for line_number, row in iter_jsonl(path):
            where = f"{path}, line {line_number}"
            query = require_text(row.get("query"), "query", where)
            task = require_text(row.get("task_name"), "task_name", where)
            tasks.setdefault(query, task)
    return tasks


def read_llmrouter_prices(path: Path) -> dict[str, tuple[float, float]]:
    """model -> (input, output) USD per 1M tokens."""
    payload = read_json(path)
    if not isinstance(payload, dict):
        raise RecordFileError(f"{path}: expected an object of {{model: {{input_price, ...}}}}")
    prices: dict[str, tuple[float, float]] = {}
    for model, entry in payload.items():
        where = f"{path}, model {model!r}"
        if not isinstance(entry, dict):
            raise RecordFileError(f"{where}: expected an object with input_price, output_price")
        prices[model] = (
            require_float(entry.get("input_price"), "input_price", where, minimum=0.0),
            require_float(entry.get("output_price"), "output_price", where, minimum=0.0),
        )
    return prices


def _check_prices(
    worker_ids: list[str], prices: dict[str, tuple[float, float]], path: Path
) -> None:
    missing = [worker for worker in worker_ids if worker not in prices]
    if missing:
        raise RecordFileError(
            f"{path}: no input_price/output_price for {missing}; add them to estimate costs"
        )
