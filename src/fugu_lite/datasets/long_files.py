"""Reading the long format's files into raw rows, each with where it is (file and line or
item): a CSV (possibly compressed), JSON Lines, or one JSON list of row objects. Tables of
another layout (pandas' by-column JSON, a RouterBench CSV, another separator) are refused
with how to write them."""

from __future__ import annotations

import ast
import bz2
import contextlib
import csv
import gzip
import itertools
import json
import lzma
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING

from ..io import iter_jsonl, read_json
from ..text_reading import RecordFileError, nul_text_message, open_for_reading, utf8_error_message
from .common import (
    CSV_QUOTING_HINT,
    compressed_file_advice,
    csv_line_breaks,
    is_header_copy,
    is_separator_line,
    known_column_names,
    other_separator_hint,
    repeated_header,
    to_csv_hint,
)
from .long_rows import COLUMNS, REQUIRED_COLUMNS

if TYPE_CHECKING:
    from _csv import Reader

# a CSV may be compressed (what pandas' to_csv("rows.csv.gz") writes); `.ndjson` is another
# name of JSON Lines
CSV_COMPRESSIONS: dict[str, Callable[..., IO[str]]] = {
    ".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open,
}  # fmt: skip
DECOMPRESS_COMMANDS: dict[str, str] = {".gz": "gunzip", ".bz2": "bunzip2", ".xz": "unxz"}
JSON_SUFFIXES: tuple[str, ...] = (".jsonl", ".ndjson", ".json")
FILE_KINDS = (
    f"a .csv (or a compressed {', '.join('.csv' + suffix for suffix in CSV_COMPRESSIONS)}), "
    ".jsonl, .ndjson or .json file"
)


def raw_rows(path: Path) -> Iterator[tuple[str, dict]]:
    suffixes = [suffix.lower() for suffix in path.suffixes[-2:]]
    compression = suffixes.pop() if suffixes and suffixes[-1] in CSV_COMPRESSIONS else None
    kind = suffixes[-1] if suffixes else ""
    if kind == ".csv":
        yield from _csv_rows(path, compression)
    elif kind in JSON_SUFFIXES and compression is not None:
        raise RecordFileError(
            f"{path}: a compressed JSON file is not read in the long format; decompress it "
            f"first (`{DECOMPRESS_COMMANDS[compression]} -k {path.name}`), or give the rows as "
            "a compressed CSV"
        )
    elif kind in JSON_SUFFIXES:
        for where, row in _json_array_rows(path) if _is_json_array(path) else _jsonl_rows(path):
            columns = known_column_names(list(row), COLUMNS, where)
            named = dict(zip(columns, row.values(), strict=True))
            _refuse_columns_layout(named, where)
            yield where, named
    elif path.is_dir():
        raise RecordFileError(_folder_message(path))
    else:
        raise RecordFileError(
            f"{path}: expected {FILE_KINDS} in the long format{to_csv_hint(path)}"
        )


def _folder_message(folder: Path) -> str:
    """A folder given for the long format's file: the files in it that it could read."""
    readable = sorted(
        child.name for child in folder.iterdir() if child.is_file() and _is_long_file_name(child)
    )
    if not readable:
        return f"{folder}: is a folder, and holds no {FILE_KINDS}; give the long format's file"
    return (
        f"{folder}: is a folder; the long format reads one file: give its path, e.g. "
        f"{folder / readable[0]} (the folder holds {', '.join(readable[:5])})"
    )


def _is_long_file_name(path: Path) -> bool:
    suffixes = [suffix.lower() for suffix in path.suffixes[-2:]]
    if suffixes and suffixes[-1] in CSV_COMPRESSIONS:
        return suffixes[:-1] == [".csv"]
    return bool(suffixes) and suffixes[-1] in (".csv", *JSON_SUFFIXES)


def _jsonl_rows(path: Path) -> Iterator[tuple[str, dict]]:
    if not _first_line_is_json(path):
        # one object over several lines (pretty-printed, in a .jsonl too): "line 1: not valid
        # JSON; fix or delete that line" would be wrong advice about a valid file
        try:
            value = read_json(path)
        except RecordFileError:
            if path.suffix.lower() == ".json":
                raise
            value = None  # JSON Lines with a bad first line: iter_jsonl names it below
        if isinstance(value, dict):
            yield str(path), value
            return
        if value is not None:
            raise RecordFileError(f"{path}: expected a JSON list of row objects")
    for line_number, row in iter_jsonl(path):
        yield f"{path}, line {line_number}", row


def _first_line_is_json(path: Path) -> bool:
    with open_for_reading(path) as stream:
        for raw in stream:
            if raw.strip():
                try:
                    json.loads(raw.decode("utf-8", errors="replace").removeprefix("\ufeff"))
                except json.JSONDecodeError:
                    return False
                except ValueError:  # JSON, with an integer of too many digits: named later
                    return True
                return True
    return True


WRITE_BY_ROWS = (
    "the long format takes one object per row: write it with to_json(path, orient='records') "
    "for a .json, or to_json(path, orient='records', lines=True) for a .jsonl"
)


def _refuse_columns_layout(row: dict, where: str) -> None:
    """pandas' DataFrame.to_json writes {column: {index: value}} by default (and
    to_dict("list") gives {column: [values]}): one object of columns, not rows, which read as
    one row whose prompt was a mapping. Its other whole-table layouts (orient='split',
    'table', 'index') were refused as a row without prompt, worker and reward, with the
    advice to rename its keys."""
    if all(isinstance(row.get(column), dict | list) for column in ("worker", "reward")):
        raise RecordFileError(
            f"{where}: holds the table by columns ({', '.join(map(str, row))} each map to all "
            f"their values), as pandas' DataFrame.to_json writes by default; {WRITE_BY_ROWS}"
        )
    orient = _pandas_orient(row)
    if orient is not None:
        raise RecordFileError(
            f"{where}: holds the whole table in pandas' orient='{orient}' layout, as "
            f"DataFrame.to_json(orient='{orient}') writes; {WRITE_BY_ROWS}"
        )
    wrapper = _key_of_rows(row)
    if wrapper is not None:
        raise RecordFileError(
            f"{where}: holds the rows in a list under its key {wrapper!r} (an export wrapping "
            "them), not a row; the long format reads the rows themselves: write that list alone "
            "to a .json file, or one row object a line to a .jsonl file"
        )


def _key_of_rows(row: dict) -> str | None:
    """The key of a list of row objects in an object that is no row (`{"data": [{"prompt":
    ...}, ...]}`): it was refused as a row without prompt, worker and reward, with the advice
    to rename its keys."""
    if "prompt" in row:
        return None
    for key, value in row.items():
        if isinstance(value, list) and value and isinstance(value[0], dict):
            names = {str(name).strip().casefold() for name in value[0]}
            if {"prompt", "worker"} <= names:
                return str(key)
    return None


def _pandas_orient(row: dict) -> str | None:
    """The to_json orient ('split', 'table' or 'index') whose whole table `row` is, if any."""
    keys = set(row)
    if isinstance(row.get("data"), list):
        if isinstance(row.get("columns"), list) and keys <= {"columns", "index", "data"}:
            return "split"
        if isinstance(row.get("schema"), dict) and keys == {"schema", "data"}:
            return "table"
    values = list(row.values())
    if values and all(isinstance(value, dict) for value in values):
        names = {str(name).strip().casefold() for value in values for name in value}
        if {"prompt", "worker"} <= names:
            return "index"
    return None


def _is_json_array(path: Path) -> bool:
    """The file holds one JSON list of row objects rather than one object a line: a .json,
    or a .jsonl that pandas' to_json(orient='records') wrote without lines=True (read as JSON
    Lines, refused as "line 1: the file holds a JSON list, not JSON Lines")."""
    with open_for_reading(path) as stream:
        start = stream.read(4096).decode("utf-8", errors="replace").removeprefix("\ufeff")
    return start.lstrip().startswith("[")


def _json_array_rows(path: Path) -> Iterator[tuple[str, dict]]:
    items = read_json(path)
    if not isinstance(items, list):
        raise RecordFileError(f"{path}: expected a JSON list of row objects")
    for number, item in enumerate(items, start=1):
        where = f"{path}, item {number}"
        if not isinstance(item, dict):
            layout = (
                " (pandas' orient='values' writes rows without their column names)"
                if isinstance(item, list)
                else ""
            )
            raise RecordFileError(
                f"{where}: expected an object with prompt, worker and reward, got "
                f"{type(item).__name__}{layout}; {WRITE_BY_ROWS}"
            )
        yield where, item


def _csv_rows(path: Path, compression: str | None) -> Iterator[tuple[str, dict]]:
    if compression is None:
        open_for_reading(path).close()  # a missing, unreadable or compressed file, named
    opener = CSV_COMPRESSIONS[compression] if compression else open
    with opener(path, "rt", encoding="utf-8-sig", newline="") as stream, _long_fields():
        reader = csv.reader(stream, strict=True)
        good_until = 0  # the line where the last good row ended
        header_read = False
        try:
            header, columns = _csv_header(path, reader)
            good_until, header_read = reader.line_num, True
            for cells in reader:
                good_until = reader.line_num
                where = f"{path}, line {reader.line_num}"
                row = _csv_row(where, cells, header, columns)
                if row is not None:
                    yield where, row
        except (UnicodeDecodeError, csv.Error, OSError, EOFError, lzma.LZMAError) as error:
            if not header_read:  # the header's line: after blank lines or Excel's "sep=" line
                good_until = max(reader.line_num - 1, 0)
            raise _csv_read_error(path, compression, good_until, header_read, error) from error


def _csv_header(path: Path, reader: Reader) -> tuple[list[str], list[str]]:
    """The header line as written, and as the long format's column names."""
    header = _first_filled_line(reader)
    if is_separator_line(header):
        header = _first_filled_line(reader)
    if not header:
        raise RecordFileError(
            f"{path}: the file is empty; a long-format CSV needs a header line "
            f"({', '.join(REQUIRED_COLUMNS)}) and a row per prompt and worker"
        )
    header_at = f"{path}, line {reader.line_num}"
    if any("\x00" in cell for cell in header):
        raise RecordFileError(nul_text_message(header_at))
    columns = known_column_names(header, COLUMNS, header_at)
    absent = [c for c in REQUIRED_COLUMNS if c not in columns]
    if absent:
        raise RecordFileError(
            f"{path}: missing column(s) {absent} in the header {header}" + _header_hint(header)
        )
    return header, columns


def _first_filled_line(reader: Reader) -> list[str]:
    """The cells of the next line holding any; blank lines (or a spreadsheet's empty rows)
    before the header are skipped, as pandas.read_csv does."""
    return next((cells for cells in reader if any(cell.strip() for cell in cells)), [])


def _csv_row(
    where: str, cells: list[str], header: list[str], columns: list[str]
) -> dict[str, object] | None:
    """The line's cells by column; None for a blank line."""
    if not any(cell.strip() for cell in cells):
        return None  # a blank line, or a spreadsheet's empty row (",,,")
    if is_header_copy(cells, header):
        raise repeated_header(where)
    if any(extra.strip() for extra in cells[len(columns) :]):
        raise RecordFileError(
            f"{where}: {len(cells)} fields but the header has "
            f"{len(columns)} ({cells[len(columns) :]} are left over); "
            f"{CSV_QUOTING_HINT}"
        )
    # a short row's missing cells are empty ones (None), as its blank cells are
    row: dict[str, object] = {
        column: csv_line_breaks(value) if value else None
        for column, value in itertools.zip_longest(columns, cells[: len(columns)])
    }
    prompt = row.get("prompt")
    if isinstance(prompt, str):
        row["prompt"] = _chat_messages_cell(prompt)
    return row


def _csv_read_error(
    path: Path, compression: str | None, good_until: int, header_read: bool, error: Exception
) -> RecordFileError:
    """What went wrong reading the file, named for the user: the encoding, the quoting after
    the last good line, or the compression."""
    if isinstance(error, UnicodeDecodeError):
        return RecordFileError(utf8_error_message(path, error, compressed=compression is not None))
    if isinstance(error, csv.Error):
        separator_hint = "" if header_read else _header_separator_hint(path, compression)
        return RecordFileError(
            f"{path}, line {good_until + 1}: not readable as CSV ({error})"
            + (separator_hint or f"; {CSV_QUOTING_HINT}")
        )
    # a damaged archive, or another format under the name ("Not a gzipped file")
    return RecordFileError(
        f"{path}: cannot be read ({type(error).__name__}: {error}); "
        + compressed_file_advice(error, str(compression))
    )


def _header_separator_hint(path: Path, compression: str | None) -> str:
    """For a header that is no CSV, one separated by another character without a comma: R's
    write.csv2 quotes each name, `"prompt";"worker";"reward"`, which failed as "',' expected
    after '"'", and the advice on quoting did not say the separator was the matter."""
    opener = CSV_COMPRESSIONS[compression] if compression else open
    with opener(path, "rt", encoding="utf-8-sig", newline="") as stream:
        for line in stream:
            if line.strip() and not is_separator_line([line.strip()]):
                return "" if "," in line else other_separator_hint([line], "the long format's CSV")
    return ""


def _chat_messages_cell(text: str) -> str | list:
    """A CSV cell holding a list of chat messages, as JSON (json.dumps) or Python's repr (what
    pandas' to_csv writes for a column of message lists), is that list: a CSV has no lists,
    and read as text, brackets and quotes included, the prompt was unlike the messages that
    clients send. Any other text, a list of strings among it, stays as written."""
    stripped = text.strip()
    if not (stripped.startswith("[{") and stripped.endswith("}]")):
        return text
    for parse in (json.loads, ast.literal_eval):
        try:
            value = parse(stripped)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        if isinstance(value, list) and all(
            isinstance(item, dict) and "role" in item for item in value
        ):
            return value
    return text


# csv refuses a field over 128 KiB by default: a long prompt (a document, a code file) is one
CSV_FIELD_LIMIT = 2**31 - 1


@contextlib.contextmanager
def _long_fields() -> Iterator[None]:
    previous = csv.field_size_limit(CSV_FIELD_LIMIT)
    try:
        yield
    finally:
        csv.field_size_limit(previous)


def _header_hint(header: list[str]) -> str:
    """What a header without the long format's columns is instead: another separator, or a
    RouterBench table."""
    separator_hint = other_separator_hint(header, "the long format's CSV")
    if separator_hint:
        return separator_hint
    if any(cell.strip().endswith("|total_cost") for cell in header):
        # a RouterBench table (one score column per model) given to the long importer
        return (
            "; its `<model>|total_cost` columns make it a RouterBench table (a row per prompt, "
            "a column per model): import it with `fugu-lite data import routerbench`"
        )
    return ""
