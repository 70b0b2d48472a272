"""Reading a RouterBench table (.pkl or .csv, either one possibly compressed) into a pandas
DataFrame, and turning its raw form (a row per sample and model) into the wide one (a row
per sample, a score and a cost column per model)."""

from __future__ import annotations

import lzma
import pickle
import warnings
import zipfile
from pathlib import Path
from typing import Literal, cast

import numpy as np
import pandas as pd

from ..schemas import canonical_split
from ..text_reading import RecordFileError, nul_text_message, open_for_reading, utf8_error_message
from .common import (
    CSV_QUOTING_HINT,
    CUT_SHORT_ADVICE,
    compressed_file_advice,
    is_blank,
    is_separator_line,
    refuse_control_characters,
    to_csv_hint,
)
from .routerbench_columns import (
    COST_SUFFIX,
    NON_MODEL_COLUMNS,
    names_its_column,
    refuse_a_header_copy,
)

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
            + (f"; {compressed_file_advice(error, compression)}" if compression else "")
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
            + _pickle_advice(path, error)
        ) from error


def _pickle_advice(path: Path, error: Exception) -> str:
    if isinstance(error, ImportError | AttributeError):
        return _other_version_advice(path)
    if isinstance(error, EOFError) or "truncated" in str(error):
        # a download cut short was told to "re-export the table with DataFrame.to_pickle"
        return CUT_SHORT_ADVICE
    return "re-export the table with DataFrame.to_pickle, or as a .csv"


def _other_version_advice(path: Path) -> str:
    """A class or module the pickle names is not here: the pandas or numpy that wrote it is
    another version (numpy 2's `numpy._core` is unknown to numpy 1). Re-exporting needs the
    table read first, so say to do it where it can be read."""
    return (
        f"it was likely written by another pandas or numpy version (this is pandas "
        f"{pd.__version__}, numpy {np.__version__}): load it with the versions that wrote it "
        f"and save it as CSV, pandas.read_pickle('{path.name}').to_csv('{_stem(path)}.csv', "
        "index=False), then import the .csv"
    )


def _stem(path: Path) -> str:
    """The name without .pkl and a compression suffix (`routerbench_0shot.pkl.gz`)."""
    name = path.name
    for suffix in (*COMPRESSIONS, ".pkl"):
        if name.lower().endswith(suffix):
            name = name[: -len(suffix)]
    return name


def _read_csv(path: Path, compression: str | None) -> pd.DataFrame:
    try:
        skiprows = int(_starts_with_a_separator_line(path))
        table = _csv_table(path, skiprows)
    except UnicodeDecodeError as error:
        message = utf8_error_message(path, error, compressed=compression is not None)
        raise RecordFileError(message) from error
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
    if isinstance(table.index, pd.RangeIndex) or len(table.columns) == 1:
        return table  # a header of one column: refused as missing columns, saying why
    _refuse_fields_beyond_the_header(table, path)
    with warnings.catch_warnings():  # "a loss of data": only the empty fields checked above
        warnings.simplefilter("ignore", pd.errors.ParserWarning)
        return _csv_table(path, skiprows, index_col=False)


def _csv_table(path: Path, skiprows: int, index_col: Literal[False] | None = None) -> pd.DataFrame:
    return pd.read_csv(
        path,
        dtype=str,
        keep_default_na=False,
        encoding="utf-8",
        skiprows=skiprows,
        index_col=index_col,
    )


def _refuse_fields_beyond_the_header(table: pd.DataFrame, path: Path) -> None:
    """A first data row with a field more than the header (a prompt's comma outside quotes)
    makes pandas read the first column as the index, every column shifted one to the left:
    the prompt "What is 1,000 + 1?" was imported as "000 + 1?", or the last model's cost was
    "missing" from every row. Its last column holds the fields beyond the header: refused
    where one has a value, read without them where all are empty (a trailing comma a line)."""
    header = len(table.columns)
    for position, value in enumerate(table.iloc[:, -1], start=1):
        if not is_blank(str(value)):
            raise RecordFileError(
                f"{path}, row {position}: {header + 1} fields but the header has {header} "
                f"(the last, {value!r}, has no column); {CSV_QUOTING_HINT}"
            )


def _starts_with_a_separator_line(path: Path) -> bool:
    """Whether Excel's "sep=," line comes before the header."""
    first = pd.read_csv(
        path, header=None, nrows=1, dtype=str, keep_default_na=False, encoding="utf-8"
    )
    return bool(len(first)) and is_separator_line(list(first.iloc[0]))


def wide_from_raw(table: pd.DataFrame, path: Path, split_column: str | None) -> pd.DataFrame:
    """RouterBench's raw table (a row per sample and model: model_name, performance, cost, as
    routerbench_raw.pkl holds the 5-shot data) as the wide one (a row per sample, a score and
    a `<model>|total_cost` column per model); it was refused as having "no model columns".
    A sample without some model's row gets no score for it (see on_missing)."""
    table = table.reset_index(drop=True)  # the table's row n is index n - 1, as named below
    from_csv = table_kind(path)[0] == ".csv"
    _refuse_header_copies(table, path, from_csv)
    if from_csv:
        table = _filled_csv_rows(table)
    _check_raw_keys(table, path)
    # a model named with spaces around it on some rows (" m2", "m2 ") is that model, as a
    # wide table's column is: it was refused as the "model columns [' m2', 'm2 ']"; and a
    # sample_id so is that sample, as a wide table's id is (its rows were another sample)
    fixed_columns = [c for c in ("prompt", "eval_name", split_column) if c and c in table.columns]
    table = table.assign(
        model_name=table["model_name"].map(_stripped),
        sample_id=table["sample_id"].map(_stripped),
        # a CSV's empty cell is "" where a pickle's is NaN: a pickle with a sample's prompt
        # on one of its rows imported, and the same table saved as CSV was refused
        **{column: table[column].map(_empty_text_as_none) for column in fixed_columns},
    )
    repeated = table.duplicated(["sample_id", "model_name"])
    if repeated.any():
        first = table[repeated].iloc[0]
        raise RecordFileError(
            f"{path}: sample_id {first['sample_id']!r} has more than one row for model "
            f"{first['model_name']!r}; keep one row per sample and model"
        )
    _check_one_value_per_sample(table, path, fixed_columns, split_column)
    kept = [
        c for c in (*NON_MODEL_COLUMNS, split_column) if c in table.columns and c != "sample_id"
    ]
    fixed = table.groupby("sample_id", sort=False)[kept].first()
    scores = table.pivot(index="sample_id", columns="model_name", values="performance")
    costs = table.pivot(index="sample_id", columns="model_name", values="cost")
    scores.columns = [str(model) for model in scores.columns]
    costs.columns = [f"{model}{COST_SUFFIX}" for model in costs.columns]
    return fixed.join(scores).join(costs).reset_index()


def _refuse_header_copies(table: pd.DataFrame, path: Path, from_csv: bool) -> None:
    """A raw row repeating the header (CSVs joined with `cat`, a pickle's header read as a
    row) is named: it was pivoted into a model 'model_name' that every sample missed."""
    suspects = table["model_name"].map(lambda value: names_its_column(value, "model_name"))
    for index in table.index[suspects]:
        row = table.loc[index].to_dict()
        refuse_a_header_copy(row, f"{path}, row {index + 1}", from_csv)


def _filled_csv_rows(table: pd.DataFrame) -> pd.DataFrame:
    """A raw CSV's rows less a spreadsheet's empty ones (",,,"), skipped as a wide CSV skips
    them (they were refused as a row without a sample_id)."""
    filled = [any(str(value).strip() for value in row) for row in table.itertuples(index=False)]
    return table[filled]


def _stripped(value: object) -> object:
    return value.strip() if isinstance(value, str) else value


def _empty_text_as_none(value: object) -> object:
    return None if isinstance(value, str) and not value.strip() else value


def _check_one_value_per_sample(
    table: pd.DataFrame, path: Path, columns: list[str], split_column: str | None
) -> None:
    """A sample's model rows must agree on its prompt, eval_name and split: rows of one
    sample_id with two prompts (ids reused across evals: 0, 1, 2 in each) were joined into one
    record with the first row's prompt, the other prompt's scores mixed in. An empty cell
    disagrees with nothing; the first row's value with one is taken. Values are compared as
    the record reads them: an eval_name without the spaces around it, a split in any case."""
    for column in columns:
        values = table[column].apply(_as_read, args=(column, split_column))
        counts = values.groupby(table["sample_id"], sort=False).nunique()
        if not (counts > 1).any():
            continue
        sample = counts.index[counts > 1][0]
        rows = [
            (position, value)
            for position, sample_id, value in zip(
                table.index + 1, table["sample_id"], values, strict=True
            )
            if sample_id == sample and not pd.isna(value)
        ]
        first = rows[0]
        other = next(row for row in rows if row[1] != first[1])
        raise RecordFileError(
            f"{path}: sample_id {sample!r} has different {column} values on its rows "
            f"{first[0]} and {other[0]} ({first[1]!r}, {other[1]!r}); the raw table joins a "
            "sample's model rows by sample_id, so they must agree: give each sample its own "
            f"sample_id (ids reused across evals?), or make its rows' {column} the same"
        )


def _as_read(value: object, column: str, split_column: str | None) -> object:
    """A prompt, eval_name or split cell as its record reads it, to be compared: a list, dict
    or numpy array (a pickle's chat turns) by its text, as no such value can be hashed."""
    if isinstance(value, list | dict | np.ndarray):
        return repr(value)
    if column == split_column:
        return canonical_split(value) or value
    return _stripped(value) if column == "eval_name" else value


def _check_raw_keys(table: pd.DataFrame, path: Path) -> None:
    """Every raw row needs its sample_id, the key its sample's models are joined by (a
    pickle's rows without one were left out without a word: groupby skips NaN keys), and its
    model_name."""
    for position, value in zip(table.index + 1, table["sample_id"], strict=True):
        if is_blank(str(value)):
            raise RecordFileError(
                f"{path}, row {position}: no sample_id; the raw table (a row per sample and "
                "model) joins a sample's models by its sample_id, so every row needs one: fill "
                "it in, or delete the sample's rows"
            )
    for position, sample_id, value in zip(
        table.index + 1, table["sample_id"], table["model_name"], strict=True
    ):
        if is_blank(str(value)):
            # the pivot leaves such a row out: its score and cost were lost without a word
            raise RecordFileError(
                f"{path}, row {position} (sample_id={sample_id}): no model_name; the raw table "
                "has a row per sample and model, and the row's score and cost belong to its "
                "model: fill it in, or delete the row"
            )
        where = f"{path}, row {position} (sample_id={sample_id})"
        refuse_control_characters(
            str(value).strip(), "model_name", where, "rename the model in the table"
        )
