"""RouterBench (withmartian/routerbench) tables: one row a prompt, one score column a model.

This module turns the table's rows into records (import_routerbench); reading the file (and
a raw table's pivot to the wide one) lives in routerbench_table, finding the fixed and the
model columns in routerbench_columns.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pandas as pd

from ..schemas import RewardRecord, warn_of_rewards_off_scale
from ..text_reading import RecordFileError
from .common import (
    ImportedRecords,
    MissingPolicy,
    build_record,
    check_missing_policy,
    check_split_column,
    csv_line_breaks,
    id_text,
    is_blank,
    other_separator_hint,
    require_float,
    require_text,
    stable_id,
    unicode_text,
    warn_unused_split_column,
)
from .routerbench_columns import (
    COST_SUFFIX,
    RAW_COLUMNS,
    REQUIRED_COLUMNS,
    cost_spelling_hint,
    index_as_columns,
    names_its_column,
    refuse_a_header_copy,
    routerbench_models,
    unpriced_numeric_columns,
    with_known_column_names,
    with_stripped_model_names,
)
from .routerbench_table import read_routerbench_table, table_kind, wide_from_raw
from .split import apply_given_split, apply_standard_split, no_value

logger = logging.getLogger(__name__)


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
    check_split_column(split_column)
    table, raw = _read_table(path, split_column)
    workers = routerbench_models(table, path)
    if table.empty:
        raise RecordFileError(f"{path}: has a header but no data rows; add rows to import")
    _warn_unpriced_columns(path, table, workers, split_column)
    imported, incomplete = _import_rows(path, table, workers, policy, split_column, raw)
    _report_dropped(path, len(imported.records), incomplete)
    warn_of_rewards_off_scale(str(path), imported.records, imported.names)
    if split_column is None:
        for column in (c for c in table.columns if _is_a_split_column(c, table[c])):
            # named without its spaces (split_column is read so): ' split' from a CSV with a
            # space after each comma made the hint 'split_column= split', two shell words
            warn_unused_split_column(path, f"split_column={str(column).strip()}")
        return apply_standard_split(imported.records)
    return apply_given_split(imported.records, imported.splits, imported.names)


def _is_a_split_column(column: object, values: pd.Series) -> bool:
    """A column named split with a split on some row: an empty one (a spreadsheet's column
    left blank) was warned of as unused, and keeping it as said failed on 'no split value'."""
    return str(column).strip().casefold() == "split" and not values.map(no_value).all()


def _read_table(path: Path, split_column: str | None) -> tuple[pd.DataFrame, bool]:
    """The file as a wide table (a raw one pivoted), its known columns named as RouterBench
    names them, and whether it was raw; a missing required column is an error."""
    table = index_as_columns(read_routerbench_table(path), split_column)
    table = with_known_column_names(table, path, split_column)
    absent = [c for c in (*REQUIRED_COLUMNS, split_column) if c and c not in table.columns]
    if absent:
        separator_hint = (
            other_separator_hint([str(c) for c in table.columns], "a RouterBench CSV")
            if table_kind(path)[0] == ".csv"
            else ""
        )
        raise RecordFileError(
            f"{path}: missing column(s) {absent}; found {list(table.columns)}{separator_hint}"
        )
    raw = all(column in table.columns for column in RAW_COLUMNS)
    if raw:
        table = wide_from_raw(table, path, split_column)
    return with_stripped_model_names(table, path), raw


def _warn_unpriced_columns(
    path: Path, table: pd.DataFrame, workers: list[str], split_column: str | None
) -> None:
    skipped = unpriced_numeric_columns(table, workers, split_column)
    if skipped:
        logger.warning(
            "%s: column(s) %s hold numbers but have no cost column %s, so they are not "
            "imported as models; add the cost column(s) to import them%s",
            path, skipped, [column + COST_SUFFIX for column in skipped],
            cost_spelling_hint(table.columns),
        )  # fmt: skip


def _import_rows(
    path: Path,
    table: pd.DataFrame,
    workers: list[str],
    policy: MissingPolicy,
    split_column: str | None,
    raw: bool,
) -> tuple[ImportedRecords, int]:
    """A record per row, and how many rows were dropped for a missing value. A raw table's
    row here is a sample, named by its sample_id: its position in the pivoted table named a
    row of the file that was another sample's or model's."""
    has_sample_id = "sample_id" in table.columns
    from_csv = table_kind(path)[0] == ".csv"
    imported = ImportedRecords()
    incomplete = 0
    for position, row in enumerate(table.to_dict("records"), start=1):
        if from_csv and not any(str(value).strip() for value in row.values()):
            continue  # a spreadsheet's empty row (",,,")
        where = f"{path}, row {position}"
        if names_its_column(row["prompt"], "prompt"):
            refuse_a_header_copy(row, where, from_csv)
        if raw:
            where = f"{path}, the rows of sample_id={row['sample_id']}"
        elif has_sample_id:
            where += f" (sample_id={row['sample_id']})"
        record = _row_record(row, where, workers, policy, from_csv, has_sample_id)
        if record is None:
            incomplete += 1
            continue
        imported.add(record, None if split_column is None else row[split_column], where)
    return imported, incomplete


def _row_record(
    row: dict,
    where: str,
    workers: list[str],
    policy: MissingPolicy,
    from_csv: bool,
    has_sample_id: bool,
) -> RewardRecord | None:
    """The row's record; None for a row missing a score or cost with policy "drop"."""
    prompt = _prompt_text(row["prompt"], where)
    if from_csv:
        prompt = csv_line_breaks(prompt)
    rewards = [_number(row[w], f"the score of {w}", where) for w in workers]
    costs = [_number(row[w + COST_SUFFIX], f"the total_cost of {w}", where) for w in workers]
    bad = [w for w, r, c in zip(workers, rewards, costs, strict=True) if r is None or c is None]
    if bad and policy == "error":
        raise RecordFileError(
            f"{where}: score or total_cost of {bad} is missing or NaN; "
            "fix the row, delete it, or pass --option on_missing=drop"
        )
    if bad:
        return None
    task = unicode_text(require_text(row["eval_name"], "eval_name", where), "eval_name", where)
    return build_record(
        where,
        prompt=prompt,
        worker_ids=workers,
        rewards=rewards,
        costs=costs,
        task=task.strip(),
        id=unicode_text(_record_id(row, has_sample_id, prompt), "sample_id", where),
    )


def _prompt_text(value: object, where: str) -> str:
    """The row's prompt, which is one text here; a pickle's list of chat turns (a list, a
    tuple or a numpy array) is refused saying how to import it."""
    if isinstance(value, list | tuple | np.ndarray):
        raise RecordFileError(
            f"{where}: prompt must be a non-empty string, got {value!r}; routerbench takes a "
            "prompt as one text: join the chat turns into one string, or write the table in the "
            "long format (a row per prompt and model: prompt, worker, reward, cost), whose prompt "
            'may be a list of chat messages ({"role": ..., "content": ...})'
        )
    return unicode_text(require_text(value, "prompt", where), "prompt", where)


def _report_dropped(path: Path, kept: int, incomplete: int) -> None:
    """Refuse a file whose every row was dropped or empty; warn of the rows dropped."""
    if incomplete and not kept:
        raise RecordFileError(
            f"{path}: every one of its {incomplete} rows misses a score or cost, so "
            "--option on_missing=drop leaves no records; fill in the missing values"
        )
    if not kept:  # a spreadsheet's empty rows (",,,") alone below the header
        raise RecordFileError(f"{path}: has a header but only empty rows; add rows to import")
    if incomplete:
        logger.warning("%s: dropped %d rows with a missing score or cost", path, incomplete)


def _number(value: object, what: str, where: str) -> float | None:
    """The cell's number, or None when it has none (empty, NaN, "NA", pandas' NA). Any other
    text that is no number ("0,5", "85%") is an error: on_missing=drop dropped its row as if
    the score were missing, without a word of the value."""
    if is_blank(str(value)):
        return None
    return require_float(value, what, where)


def _record_id(row: dict, has_sample_id: bool, prompt: str) -> str:
    """sample_id, or an id made from the prompt where it has none (an empty cell, NaN): ""
    or "nan" shared by many records could not tell them apart."""
    if has_sample_id and not is_blank(str(row["sample_id"])):
        return id_text(row["sample_id"])
    return stable_id("routerbench", prompt)
