"""RouterBench (withmartian/routerbench) tables: one row a prompt, one score column a model."""

from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd

from ..io import RecordFileError
from ..schemas import RewardRecord
from .common import (
    MissingPolicy,
    build_record,
    check_missing_policy,
    require_text,
    stable_id,
    to_float,
)
from .split import apply_given_split, apply_standard_split

logger = logging.getLogger(__name__)

COST_SUFFIX = "|total_cost"
REQUIRED_COLUMNS: tuple[str, ...] = ("prompt", "eval_name")


def read_routerbench_table(path: str | Path) -> pd.DataFrame:
    """Read a .pkl or .csv table. A pickle can run code when loaded: load only trusted files."""
    path = Path(path)
    if not path.is_file():
        raise RecordFileError(f"{path}: file not found")
    if path.suffix == ".pkl":
        table = pd.read_pickle(path)
    elif path.suffix == ".csv":
        table = pd.read_csv(path)
    else:
        raise RecordFileError(f"{path}: expected a .pkl or .csv RouterBench table")
    if not isinstance(table, pd.DataFrame):
        raise RecordFileError(f"{path}: holds a {type(table).__name__}, not a pandas DataFrame")
    return table


def routerbench_models(table: pd.DataFrame, path: Path) -> list[str]:
    """Models are the columns that have a matching `<model>|total_cost` column, sorted."""
    columns = {str(column) for column in table.columns}
    with_cost = [c.removesuffix(COST_SUFFIX) for c in columns if c.endswith(COST_SUFFIX)]
    no_score = [model for model in with_cost if model not in columns]
    if no_score:
        raise RecordFileError(f"{path}: cost columns without a score column for {sorted(no_score)}")
    if not with_cost:
        raise RecordFileError(
            f"{path}: no model columns; each model needs a score column `<model>` and a "
            f"`<model>{COST_SUFFIX}` column"
        )
    return sorted(with_cost)


def import_routerbench(
    source: str | Path,
    *,
    split_column: str | None = None,
    on_missing: MissingPolicy = "error",
) -> list[RewardRecord]:
    """Rewards from the model score columns, costs (USD) from `<model>|total_cost`.

    task is eval_name, id is sample_id when that column exists. Prompts stay exactly as
    stored, including the stringified lists ("['...']") some RouterBench rows hold. A NaN
    or missing score or cost is an error by default; on_missing="drop" drops the row.
    """
    path = Path(source)
    policy = check_missing_policy(on_missing)
    table = read_routerbench_table(path)
    absent = [c for c in (*REQUIRED_COLUMNS, split_column) if c and c not in table.columns]
    if absent:
        raise RecordFileError(f"{path}: missing column(s) {absent}; found {list(table.columns)}")
    workers = routerbench_models(table, path)
    has_sample_id = "sample_id" in table.columns
    records: list[RewardRecord] = []
    splits: list[object] = []
    names: list[str] = []
    incomplete = 0
    for position, row in enumerate(table.to_dict("records"), start=1):
        where = f"{path}, row {position}"
        if has_sample_id:
            where += f" (sample_id={row['sample_id']})"
        prompt = require_text(row["prompt"], "prompt", where)
        rewards = [to_float(row[w]) for w in workers]
        costs = [to_float(row[w + COST_SUFFIX]) for w in workers]
        bad = [w for w, r, c in zip(workers, rewards, costs, strict=True) if r is None or c is None]
        if bad and policy == "error":
            raise RecordFileError(
                f"{where}: score or total_cost of {bad} is missing, NaN or not a number; "
                'fix the row, delete it, or pass on_missing="drop"'
            )
        if bad:
            incomplete += 1
            continue
        records.append(
            build_record(
                where,
                prompt=prompt,
                worker_ids=workers,
                rewards=rewards,
                costs=costs,
                task=require_text(row["eval_name"], "eval_name", where),
                id=str(row["sample_id"]) if has_sample_id else stable_id("routerbench", prompt),
            )
        )
        if split_column is not None:
            splits.append(row[split_column])
            names.append(where)
    if incomplete:
        logger.warning("%s: dropped %d rows with a missing score or cost", path, incomplete)
    if split_column is None:
        return apply_standard_split(records)
    return apply_given_split(records, splits, names)
