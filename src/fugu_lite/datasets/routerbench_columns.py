"""A RouterBench table's columns: the fixed ones (prompt, eval_name, sample_id) read in any
case and spacing or from the index, the models (a score column with a `<model>|total_cost`
column), and the numeric columns skipped for want of a cost column."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from ..number_text import to_float
from ..text_reading import RecordFileError
from .common import (
    folded_name,
    is_blank,
    is_header_copy,
    known_column_names,
    refuse_control_characters,
    repeated_header,
    unicode_text,
)

COST_SUFFIX = "|total_cost"
# what pandas calls a CSV column with an empty header cell: the index that to_csv writes by
# default (0, 1, 2 ...), which was warned about as a model score "without a cost column";
# ".1" where that name is taken (a CSV read back and saved again with its index)
UNNAMED_COLUMN = re.compile(r"Unnamed: \d+(?:\.\d+)?")
REQUIRED_COLUMNS: tuple[str, ...] = ("prompt", "eval_name")
NON_MODEL_COLUMNS: tuple[str, ...] = (*REQUIRED_COLUMNS, "sample_id", "oracle_model_to_route_to")
# routerbench_raw.pkl holds the 5-shot table in long form: a row per (sample_id, model_name)
RAW_COLUMNS: tuple[str, ...] = ("sample_id", "model_name", "performance", "cost")


def named_cells(row: dict) -> tuple[list[object], list[str]]:
    """The row's cells and their column names, less the columns of an empty header cell
    (pandas' index column, "Unnamed: 0", which a repeated header leaves empty)."""
    named = [(value, str(name)) for name, value in row.items()]
    kept = [(value, name) for value, name in named if not UNNAMED_COLUMN.fullmatch(name)]
    return [value for value, _ in kept], [name for _, name in kept]


def refuse_a_header_copy(row: dict, where: str, from_csv: bool) -> None:
    """A row whose cells are its columns' names: a CSV's header repeated (files joined with
    `cat`), or a pickle's table holding its header as a row (a CSV read with header=None).
    The pickle's was refused as a score that is no number ("got 'm1' (write the number alone,
    without a currency sign or unit: 1)"), or a raw one's pivoted into a model 'model_name'
    that every sample missed."""
    if not is_header_copy(*named_cells(row)):
        return
    if from_csv:
        raise repeated_header(where)
    raise RecordFileError(
        f"{where}: holds the column names, not data (a header read as a row: a CSV read with "
        "header=None, or tables joined with their headers); drop that row and save the table "
        "again"
    )


def names_its_column(value: object, column: str) -> bool:
    """Whether a cell is its column's name as a header copy holds it (any case, spaces): the
    one cell of a row looked at before the whole row, as comparing every cell of every row of
    a large table took seconds."""
    return folded_name(value) == column


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
            f"`<model>{COST_SUFFIX}` column" + cost_spelling_hint(columns) + raw_table_hint(columns)
        )
    for model in with_cost:
        unicode_text(model, f"the model column {model!r}", str(path))
        refuse_control_characters(
            model, "the model column", str(path), "rename the model in the table"
        )
    return sorted(with_cost)


def cost_spelling_hint(columns: Iterable[object]) -> str:
    """For cost columns spelt otherwise (`m1|Total_Cost`, `m1| total_cost`), which are not read
    as a model's cost: the table was said to have no model columns, or to need a cost column
    that it has, its model left out."""
    spelt_otherwise = [
        str(column)
        for column in columns
        if not str(column).strip().endswith(COST_SUFFIX)
        and "_".join(str(column).rpartition("|")[2].split()).casefold() == "total_cost"
    ]
    if not spelt_otherwise:
        return ""
    return (
        f"; the column(s) {spelt_otherwise} are cost columns spelt otherwise: name each "
        f"`<model>{COST_SUFFIX}`, in that case and without spaces after the |"
    )


def raw_table_hint(columns: Iterable[str]) -> str:
    """For a table with a model_name column (in any case) that is not read as the raw table
    (a row per sample and model) for want of one of its columns as named: it was said to have
    "no model columns", each needing `<model>` and `<model>|total_cost`, not a word of the raw
    table's columns."""
    names = set(columns)
    if not any(name.strip().casefold() == "model_name" for name in names):
        return ""
    missing = [column for column in RAW_COLUMNS if column not in names]
    return (
        f"; with a model_name column it is the raw table (a row per sample and model), whose "
        f"columns are {', '.join(RAW_COLUMNS)}, named so (in that case): it has no {missing}"
    )


def fixed_column_keys(split_column: str | None) -> tuple[str, ...]:
    """The fixed columns' names as read (without case or surrounding spaces), the split column
    given last."""
    if split_column is None:
        return NON_MODEL_COLUMNS
    return (*NON_MODEL_COLUMNS, split_column.strip().casefold())


def index_as_columns(table: pd.DataFrame, split_column: str | None) -> pd.DataFrame:
    """Index levels named as a fixed column (a table saved after `set_index("sample_id")`)
    are that column: the ids were replaced by ones made from the prompts without a word, and
    an eval_name in the index was "missing". Other index levels (pandas' 0, 1, 2) are not
    read."""
    fixed = fixed_column_keys(split_column)
    levels = [
        name
        for name in table.index.names
        if name is not None and name not in table.columns and str(name).strip().casefold() in fixed
    ]
    return table.reset_index(level=levels) if levels else table


def with_known_column_names(
    table: pd.DataFrame, path: Path, split_column: str | None
) -> pd.DataFrame:
    """` Prompt` or `Sample_ID` (a spreadsheet's header) is prompt or sample_id: a sample_id
    column named otherwise was skipped silently, its ids lost. The split column given is read
    so too, and named as given (` fold` for split_column=fold was refused as missing, its
    neighbours ` prompt` and ` eval_name` found). Model columns keep their case."""
    names = [str(column) for column in table.columns]
    keys = fixed_column_keys(split_column)
    read = known_column_names(names, keys, str(path))
    if split_column is not None:
        read = [split_column if name == keys[-1] else name for name in read]
    renamed = {old: new for old, new in zip(table.columns, read, strict=True) if str(old) != new}
    return table.rename(columns=renamed) if renamed else table


def with_stripped_model_names(table: pd.DataFrame, path: Path) -> pd.DataFrame:
    """Model columns without the spaces around their model's name (`prompt, eval_name, gpt-4`:
    a CSV written with a space after each comma), which named a worker ' gpt-4' that no
    pool's worker matches. Two columns of one model so (`gpt-4`, ` gpt-4`) are an error."""
    models = {
        str(column).strip().removesuffix(COST_SUFFIX).strip()
        for column in table.columns
        if str(column).strip().endswith(COST_SUFFIX)
    }
    read: dict[str, list[str]] = {}
    renamed: dict[object, str] = {}
    for column in table.columns:
        name = stripped = str(column).strip()
        if name.endswith(COST_SUFFIX):
            stripped = name.removesuffix(COST_SUFFIX).strip() + COST_SUFFIX
        elif name not in models:
            stripped = str(column)  # not a model's column: left as it is
        read.setdefault(stripped, []).append(str(column))
        if stripped != str(column):
            renamed[column] = stripped
    for stripped, spellings in read.items():
        if len(spellings) > 1:
            raise RecordFileError(
                f"{path}: the model columns {spellings} name one model "
                f"{stripped.removesuffix(COST_SUFFIX)!r} (spaces around a name are not part of "
                "it); keep one of them"
            )
    return table.rename(columns=renamed) if renamed else table


def unpriced_numeric_columns(
    table: pd.DataFrame, workers: list[str], split_column: str | None
) -> list[str]:
    """Columns that look like model scores but have no cost column (so they are skipped)."""
    known = {*NON_MODEL_COLUMNS, *workers, split_column}
    return sorted(
        str(column)
        for column in table.columns
        if str(column) not in known
        and "|" not in str(column)
        and not UNNAMED_COLUMN.fullmatch(str(column))
        and _numeric(table[column])
    )


def _numeric(values: pd.Series) -> bool:
    """Every value a number or blank, and at least one number."""
    found = False
    for value in values:
        if to_float(value) is not None:
            found = True
        elif not is_blank(str(value)):
            return False
    return found
