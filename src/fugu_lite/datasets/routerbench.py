"""RouterBench (withmartian/routerbench) tables: one row a prompt, one score column a model."""

from __future__ import annotations

import logging
import lzma
import pickle
import re
import zipfile
from pathlib import Path
from typing import Literal, cast

import pandas as pd

from ..io import RecordFileError, nul_text_message, open_for_reading, utf8_error_message
from ..schemas import RewardRecord
from .common import (
    CSV_QUOTING_HINT,
    MissingPolicy,
    build_record,
    check_missing_policy,
    csv_line_breaks,
    is_blank,
    is_header_copy,
    known_column_names,
    repeated_header,
    require_float,
    require_text,
    stable_id,
    to_csv_hint,
    to_float,
    warn_unused_split_column,
)
from .split import apply_given_split, apply_standard_split

logger = logging.getLogger(__name__)

COST_SUFFIX = "|total_cost"
# what pandas calls a CSV column with an empty header cell: the index that to_csv writes by
# default (0, 1, 2 ...), which was warned about as a model score "without a cost column"
UNNAMED_COLUMN = re.compile(r"Unnamed: \d+")
REQUIRED_COLUMNS: tuple[str, ...] = ("prompt", "eval_name")
NON_MODEL_COLUMNS: tuple[str, ...] = (*REQUIRED_COLUMNS, "sample_id", "oracle_model_to_route_to")


# What pandas reads (and infers from the name) with the standard library alone:
# `routerbench_0shot.pkl.gz` was refused as "expected a .pkl or .csv".
COMPRESSIONS: tuple[str, ...] = (".gz", ".bz2", ".xz", ".zip")
TableKind = Literal[".pkl", ".csv"]


def table_kind(path: Path) -> tuple[TableKind, str | None]:
    """(".pkl" or ".csv", the compression suffix or None) of a RouterBench table's name."""
    suffixes = [suffix.lower() for suffix in path.suffixes]
    compression = suffixes.pop() if suffixes and suffixes[-1] in COMPRESSIONS else None
    kind = suffixes[-1] if suffixes else ""
    if kind not in (".pkl", ".csv"):
        raise RecordFileError(
            f"{path}: expected a .pkl or .csv RouterBench table (either one may be compressed: "
            f"{', '.join(COMPRESSIONS)}){to_csv_hint(path)}"
        )
    return cast(TableKind, kind), compression


def read_routerbench_table(path: str | Path) -> pd.DataFrame:
    """Read a .pkl or .csv table, either one possibly compressed (.pkl.gz). A pickle can run
    code when loaded: load only trusted files.

    A CSV is read as text throughout, so pandas' type guessing cannot change the data
    (sample_id 007 -> 7, a prompt "42" -> 42, a prompt "NA" -> NaN); scores and costs are
    parsed by the importer, and "", "NaN", "NA" there count as missing."""
    path = Path(path)
    if path.is_dir():
        raise RecordFileError(f"{path} is a directory; give the .pkl or .csv table inside it")
    if not path.is_file():
        raise RecordFileError(f"{path}: file not found")
    kind, compression = table_kind(path)
    if compression is None:
        open_for_reading(path).close()  # an unreadable or compressed file, named
    try:
        table = _read_pickle(path) if kind == ".pkl" else _read_csv(path, compression)
    except (OSError, EOFError, zipfile.BadZipFile, lzma.LZMAError) as error:
        # a damaged archive, or another format under the name: gzip's "Not a gzipped file"
        # named no file
        raise RecordFileError(
            f"{path}: cannot be read ({type(error).__name__}: {error})"
            + (f"; is it really {compression}-compressed?" if compression else "")
        ) from error
    if not isinstance(table, pd.DataFrame):
        raise RecordFileError(f"{path}: holds a {type(table).__name__}, not a pandas DataFrame")
    if kind == ".csv" and any("\x00" in str(column) for column in table.columns):
        raise RecordFileError(nul_text_message(f"{path}, line 1"))
    return table


def _read_pickle(path: Path) -> object:
    try:
        return pd.read_pickle(path)
    # a damaged or foreign pickle can fail in many ways while it is being rebuilt
    except (
        pickle.UnpicklingError, EOFError, ImportError, AttributeError, ValueError, TypeError,
        IndexError, KeyError,
    ) as error:  # fmt: skip
        raise RecordFileError(
            f"{path}: not a readable pandas pickle ({type(error).__name__}: {error}); "
            "re-export the table with DataFrame.to_pickle, or as a .csv"
        ) from error


def _read_csv(path: Path, compression: str | None) -> pd.DataFrame:
    try:
        return pd.read_csv(path, dtype=str, keep_default_na=False, encoding="utf-8")
    except UnicodeDecodeError as error:
        if compression:  # the file's own lines are compressed bytes: no line to name
            raise RecordFileError(
                f"{path}: not UTF-8 text ({error.reason}); re-save the table as UTF-8"
            ) from error
        raise RecordFileError(utf8_error_message(path, error)) from error
    except pd.errors.EmptyDataError as error:
        raise RecordFileError(
            f"{path}: the file is empty; a RouterBench CSV needs a header line with prompt, "
            f"eval_name and, per model, `<model>` and `<model>{COST_SUFFIX}` columns"
        ) from error
    except pd.errors.ParserError as error:
        raise RecordFileError(
            f"{path}: not a readable CSV ({error}); {CSV_QUOTING_HINT}"
        ) from error
    except ValueError as error:  # a .zip of several files
        raise RecordFileError(f"{path}: not a readable CSV ({error})") from error


# routerbench_raw.pkl holds the 5-shot table in long form: a row per (sample_id, model_name)
RAW_COLUMNS: tuple[str, ...] = ("sample_id", "model_name", "performance", "cost")


def wide_from_raw(table: pd.DataFrame, path: Path, split_column: str | None) -> pd.DataFrame:
    """RouterBench's raw table (a row per sample and model: model_name, performance, cost, as
    routerbench_raw.pkl holds the 5-shot data) as the wide one (a row per sample, a score and
    a `<model>|total_cost` column per model); it was refused as having "no model columns".
    A sample without some model's row gets no score for it (see on_missing)."""
    _check_raw_sample_ids(table, path)
    repeated = table.duplicated(["sample_id", "model_name"])
    if repeated.any():
        first = table[repeated].iloc[0]
        raise RecordFileError(
            f"{path}: sample_id {first['sample_id']!r} has more than one row for model "
            f"{first['model_name']!r}; keep one row per sample and model"
        )
    kept = [
        c for c in (*NON_MODEL_COLUMNS, split_column) if c in table.columns and c != "sample_id"
    ]
    fixed = table.groupby("sample_id", sort=False)[kept].first()
    scores = table.pivot(index="sample_id", columns="model_name", values="performance")
    costs = table.pivot(index="sample_id", columns="model_name", values="cost")
    scores.columns = [str(model) for model in scores.columns]
    costs.columns = [f"{model}{COST_SUFFIX}" for model in costs.columns]
    return fixed.join(scores).join(costs).reset_index()


def _check_raw_sample_ids(table: pd.DataFrame, path: Path) -> None:
    """Every raw row needs its sample_id, the key its sample's models are joined by: a
    pickle's rows without one were left out without a word (groupby skips NaN keys)."""
    for position, value in enumerate(table["sample_id"], start=1):
        if is_blank(str(value)):
            raise RecordFileError(
                f"{path}, row {position}: no sample_id; the raw table (a row per sample and "
                "model) joins a sample's models by its sample_id, so every row needs one: fill "
                "it in, or delete the sample's rows"
            )


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
    table = _index_as_columns(read_routerbench_table(path), split_column)
    table = _with_known_column_names(table, path)
    absent = [c for c in (*REQUIRED_COLUMNS, split_column) if c and c not in table.columns]
    if absent:
        raise RecordFileError(f"{path}: missing column(s) {absent}; found {list(table.columns)}")
    if all(column in table.columns for column in RAW_COLUMNS):
        table = wide_from_raw(table, path, split_column)
    table = _with_stripped_model_names(table, path)
    workers = routerbench_models(table, path)
    if table.empty:
        raise RecordFileError(f"{path}: has a header but no data rows; add rows to import")
    skipped = _unpriced_numeric_columns(table, workers, split_column)
    if skipped:
        logger.warning(
            "%s: column(s) %s hold numbers but have no cost column %s, so they are not "
            "imported as models; add the cost column(s) to import them",
            path, skipped, [column + COST_SUFFIX for column in skipped],
        )  # fmt: skip
    has_sample_id = "sample_id" in table.columns
    from_csv = table_kind(path)[0] == ".csv"
    records: list[RewardRecord] = []
    splits: list[object] = []
    names: list[str] = []
    incomplete = 0
    for position, row in enumerate(table.to_dict("records"), start=1):
        if from_csv and not any(str(value).strip() for value in row.values()):
            continue  # a spreadsheet's empty row (",,,")
        where = f"{path}, row {position}"
        if from_csv and is_header_copy(*_named_cells(row)):
            raise repeated_header(where)
        if has_sample_id:
            where += f" (sample_id={row['sample_id']})"
        prompt = require_text(row["prompt"], "prompt", where)
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
            incomplete += 1
            continue
        records.append(
            build_record(
                where,
                prompt=prompt,
                worker_ids=workers,
                rewards=rewards,
                costs=costs,
                task=require_text(row["eval_name"], "eval_name", where).strip(),
                id=_record_id(row, has_sample_id, prompt),
            )
        )
        if split_column is not None:
            splits.append(row[split_column])
            names.append(where)
    if incomplete and not records:
        raise RecordFileError(
            f"{path}: every one of its {incomplete} rows misses a score or cost, so "
            "--option on_missing=drop leaves no records; fill in the missing values"
        )
    if incomplete:
        logger.warning("%s: dropped %d rows with a missing score or cost", path, incomplete)
    if split_column is None:
        for column in (c for c in table.columns if str(c).strip().casefold() == "split"):
            warn_unused_split_column(path, f"split_column={column}")
        return apply_standard_split(records)
    return apply_given_split(records, splits, names)


def _named_cells(row: dict) -> tuple[list[object], list[str]]:
    """The row's cells and their column names, less the columns of an empty header cell
    (pandas' index column, "Unnamed: 0", which a repeated header leaves empty)."""
    named = [(value, str(name)) for name, value in row.items()]
    kept = [(value, name) for value, name in named if not UNNAMED_COLUMN.fullmatch(name)]
    return [value for value, _ in kept], [name for _, name in kept]


def _number(value: object, what: str, where: str) -> float | None:
    """The cell's number, or None when it has none (empty, NaN, "NA", pandas' NA). Any other
    text that is no number ("0,5", "85%") is an error: on_missing=drop dropped its row as if
    the score were missing, without a word of the value."""
    if is_blank(str(value)):
        return None
    return require_float(value, what, where)


def _index_as_columns(table: pd.DataFrame, split_column: str | None) -> pd.DataFrame:
    """Index levels named as a fixed column (a table saved after `set_index("sample_id")`)
    are that column: the ids were replaced by ones made from the prompts without a word, and
    an eval_name in the index was "missing". Other index levels (pandas' 0, 1, 2) are not
    read."""
    levels = [
        name
        for name in table.index.names
        if name is not None
        and name not in table.columns
        and (str(name).strip().casefold() in NON_MODEL_COLUMNS or name == split_column)
    ]
    return table.reset_index(level=levels) if levels else table


def _with_known_column_names(table: pd.DataFrame, path: Path) -> pd.DataFrame:
    """` Prompt` or `Sample_ID` (a spreadsheet's header) is prompt or sample_id: a sample_id
    column named otherwise was skipped silently, its ids lost. Model columns keep their case."""
    names = [str(column) for column in table.columns]
    read = known_column_names(names, NON_MODEL_COLUMNS, str(path))
    renamed = {old: new for old, new in zip(table.columns, read, strict=True) if str(old) != new}
    return table.rename(columns=renamed) if renamed else table


def _with_stripped_model_names(table: pd.DataFrame, path: Path) -> pd.DataFrame:
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


def _record_id(row: dict, has_sample_id: bool, prompt: str) -> str:
    """sample_id, or an id made from the prompt where it has none (an empty cell, NaN): ""
    or "nan" shared by many records could not tell them apart."""
    if has_sample_id and not is_blank(str(row["sample_id"])):
        return str(row["sample_id"]).strip()
    return stable_id("routerbench", prompt)


def _unpriced_numeric_columns(
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
