"""The generic long format: one CSV or JSONL row per (prompt, worker).

A .csv may be compressed (.csv.gz, .csv.bz2, .csv.xz); JSON rows are read from a .jsonl,
.ndjson or .json file.

Columns: prompt, worker, reward, and optionally cost, task, id, split (a header name is read
without case and surrounding spaces: ` Cost` is cost). A prompt is text, or a list of chat
messages (in a CSV cell: the list as JSON or as Python's repr). Every prompt must have every
worker exactly once; workers come out sorted by name.
"""

from __future__ import annotations

import ast
import bz2
import contextlib
import csv
import gzip
import itertools
import json
import logging
import lzma
import math
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, NamedTuple

from ..io import (
    RecordFileError,
    iter_jsonl,
    nul_text_message,
    open_for_reading,
    read_json,
    utf8_error_message,
)
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
    short,
    stable_id,
    to_csv_hint,
    to_float,
    warn_unused_split_column,
)
from .split import apply_given_split, apply_standard_split, parse_split

logger = logging.getLogger(__name__)

REQUIRED_COLUMNS: tuple[str, ...] = ("prompt", "worker", "reward")
COLUMNS: tuple[str, ...] = (*REQUIRED_COLUMNS, "cost", "task", "split", "id")


class LongRow(NamedTuple):
    """One checked (prompt, worker) cell; `where` names its file and line. A tuple, and its
    prompt kept once beside the prompt's cells: a file of 10 workers held each prompt 10 times
    in pydantic objects, about 10x the file's size in memory."""

    where: str
    worker: str
    reward: float
    cost: float | None
    task: str | None
    id: str | None
    split: str | None


def import_long(
    source: str | Path, *, use_split_column: bool = False, on_missing: MissingPolicy = "error"
) -> list[RewardRecord]:
    """Group rows by prompt (first-appearance order) into records.

    With use_split_column=True every row's `split` must be train, validation or test;
    otherwise the standard split is applied. A prompt without a row for some worker is an
    error by default; on_missing="drop" drops such prompts, logging how many per worker.
    """
    path = Path(source)
    policy = check_missing_policy(on_missing)
    groups: dict[str, dict[str, LongRow]] = {}
    prompts: dict[str, str | list] = {}
    ignored: dict[str, None] = {}
    has_split = False
    percent_at: str | None = None  # the first row whose reward is written as a percentage
    plain_beyond_one: LongRow | None = None  # the first row whose plain reward is not in [0, 1]
    for where, raw in _raw_rows(path):
        has_split = has_split or raw.get("split") is not None
        ignored.update(dict.fromkeys(key for key in raw if key not in COLUMNS and key.strip()))
        prompt, row = _parse_row(raw, where, use_split_column, policy == "drop")
        if _is_percentage(raw.get("reward")):
            percent_at = percent_at or where
        elif plain_beyond_one is None and (row.reward < 0.0 or row.reward > 1.0):
            plain_beyond_one = row
        key = _prompt_key(prompt)
        prompts.setdefault(key, prompt)
        cells_by_worker = groups.setdefault(key, {})
        if row.worker in cells_by_worker:
            raise RecordFileError(
                f"{where}: duplicate cell for prompt {short(key)} and worker {row.worker!r} "
                f"(first at {cells_by_worker[row.worker].where}); keep one row per prompt "
                "and worker"
            )
        cells_by_worker[row.worker] = row
    if not groups:
        raise RecordFileError(f"{path}: holds no rows")
    _check_reward_scale(path, percent_at, plain_beyond_one)
    if ignored:
        logger.warning(
            "%s: column(s) %s are not read (the long format's columns: %s); rename a column "
            "that holds one of those",
            path, list(ignored), ", ".join(COLUMNS),
        )  # fmt: skip
    workers = sorted({worker for cells_by_worker in groups.values() for worker in cells_by_worker})
    case_hint = _worker_case_hint(workers)
    records: list[RewardRecord] = []
    splits: list[object] = []
    names: list[str] = []
    dropped: Counter[str] = Counter()
    for key, cells_by_worker in groups.items():
        first = next(iter(cells_by_worker.values())).where
        missing = [
            worker
            for worker in workers
            if worker not in cells_by_worker or math.isnan(cells_by_worker[worker].reward)
        ]
        if missing and policy == "error":
            raise RecordFileError(
                f"{first}: prompt {short(key)} has no row for worker(s) {missing}; every "
                "prompt needs one row per worker (add the rows, drop the prompt, or pass "
                "--option on_missing=drop)" + _spacing_hint(key, groups) + case_hint
            )
        if missing:
            dropped.update(missing)
            continue
        cells = [cells_by_worker[worker] for worker in workers]
        split = _one_value(key, "split", cells)
        records.append(
            build_record(
                first,
                prompt=prompts[key],
                worker_ids=workers,
                rewards=[cell.reward for cell in cells],
                costs=_costs(key, cells),
                task=_one_value(key, "task", cells),
                id=_one_value(key, "id", cells) or stable_id("long", key),
            )
        )
        splits.append(split)
        names.append(first)
    if dropped and not records:
        raise RecordFileError(
            f"{path}: every one of its {len(groups)} prompts misses a row or a reward for some "
            f"worker (prompts without each: {dict(dropped)}), so on_missing=drop leaves no "
            "records; add the missing rows and rewards" + case_hint
        )
    if dropped:
        logger.warning(
            "%s: dropped %d of %d prompts without a row and a reward for every worker (prompts "
            "without each: %s)%s",
            path, len(groups) - len(records), len(groups), dict(dropped), case_hint,
        )  # fmt: skip
    if use_split_column:
        return apply_given_split(records, splits, names)
    if has_split:
        warn_unused_split_column(path, "use_split_column=true")
    return apply_standard_split(records)


def _spacing_hint(key: str, groups: dict[str, dict[str, LongRow]]) -> str:
    """Where another prompt differs from `key` only in spaces or line breaks (a trailing space
    in a spreadsheet cell), say so: the error's shortened prompt shows the two alike."""
    flat = " ".join(key.split())
    for other, cells in groups.items():
        if other != key and " ".join(other.split()) == flat:
            where = next(iter(cells.values())).where
            shown = f" {other!r}" if len(other) <= 80 else ""
            against = f" {key!r}" if len(key) <= 80 else " this one"
            return (
                f"; {where} has the prompt{shown}, which differs from{against} only in spaces or "
                "line breaks: a prompt is read as written, so make the two the same"
            )
    return ""


def _worker_case_hint(workers: list[str]) -> str:
    """Workers whose names differ only in case (`GPT-4`, `gpt-4`: two sources, two spellings)
    are two workers, each missing from the other's prompts; the error named one of them as
    missing without a word of the other."""
    spellings: dict[str, list[str]] = {}
    for worker in workers:
        spellings.setdefault(worker.casefold(), []).append(worker)
    alike = [names for names in spellings.values() if len(names) > 1]
    if not alike:
        return ""
    shown = "; ".join(" and ".join(map(repr, names)) for names in alike)
    return (
        f"; the workers {shown} differ only in case: a worker is read as written, so spell "
        "each one the same way on every row"
    )


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


def _raw_rows(path: Path) -> Iterator[tuple[str, dict]]:
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
    else:
        raise RecordFileError(
            f"{path}: expected {FILE_KINDS} in the long format{to_csv_hint(path)}"
        )


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
    or a .jsonl that pandas' to_json(orient='records') wrote without lines=True (refused as
    "line 1: expected a JSON object, got list")."""
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
        try:
            header = next(reader, [])
            good_until = reader.line_num
            if any("\x00" in cell for cell in header):
                raise RecordFileError(nul_text_message(f"{path}, line 1"))
            columns = known_column_names(header, COLUMNS, f"{path}, line 1")
            absent = [c for c in REQUIRED_COLUMNS if c not in columns]
            if absent:
                raise RecordFileError(
                    f"{path}: missing column(s) {absent} in the header {header}"
                    + _header_hint(header)
                )
            for cells in reader:
                good_until = reader.line_num
                if not any(cell.strip() for cell in cells):
                    continue  # a blank line, or a spreadsheet's empty row (",,,")
                if is_header_copy(cells, header):
                    raise repeated_header(f"{path}, line {reader.line_num}")
                if any(extra.strip() for extra in cells[len(columns) :]):
                    raise RecordFileError(
                        f"{path}, line {reader.line_num}: {len(cells)} fields but the header has "
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
                yield f"{path}, line {reader.line_num}", row
        except UnicodeDecodeError as error:
            if compression:  # the file's own lines are compressed bytes: no line to name
                raise RecordFileError(
                    f"{path}: not UTF-8 text ({error.reason}); re-save the table as UTF-8"
                ) from error
            raise RecordFileError(utf8_error_message(path, error)) from error
        except csv.Error as error:
            raise RecordFileError(
                f"{path}, line {good_until + 1}: not readable as CSV ({error}); {CSV_QUOTING_HINT}"
            ) from error
        except (OSError, EOFError, lzma.LZMAError) as error:
            # a damaged archive, or another format under the name ("Not a gzipped file")
            raise RecordFileError(
                f"{path}: cannot be read ({type(error).__name__}: {error}); is it really "
                f"{compression}-compressed?"
            ) from error


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
    if len(header) == 1 and any(separator in header[0] for separator in ";\t|"):
        return (
            "; the header is one column: the long format's CSV is separated by commas (save "
            "it again as CSV with commas)"
        )
    if any(cell.strip().endswith("|total_cost") for cell in header):
        # a RouterBench table (one score column per model) given to the long importer
        return (
            "; its `<model>|total_cost` columns make it a RouterBench table (a row per prompt, "
            "a column per model): import it with `fugu-lite data import routerbench`"
        )
    return ""


def _parse_row(
    raw: dict, where: str, use_split_column: bool, reward_may_miss: bool
) -> tuple[str | list, LongRow]:
    """The row's prompt and cell; a blank reward is NaN when `reward_may_miss` (on_missing=drop
    then drops its prompt), else an error."""
    # a reward of NaN, "NA" or "null" (what pandas and spreadsheets write for none) is missing
    # too, so its error points to on_missing as an empty cell's does
    absent = [
        c for c in REQUIRED_COLUMNS if raw.get(c) is None or (c == "reward" and is_blank(raw[c]))
    ]
    if absent and not (reward_may_miss and absent == ["reward"]):
        hint = "" if absent != ["reward"] else " (or pass --option on_missing=drop)"
        given = (
            f" (the reward is {raw['reward']!r})"
            if "reward" in absent and raw.get("reward") is not None
            else ""
        )
        raise RecordFileError(f"{where}: no value for {absent}{given}{hint}{_keys_hint(raw)}")
    reward = raw.get("reward")
    prompt = raw["prompt"]
    if isinstance(prompt, dict) and "role" in prompt:
        raise RecordFileError(
            f"{where}: prompt is one message object (role {prompt['role']!r}), not a list of "
            "messages; a chat prompt is a list, even of one message: put it in [ ]"
        )
    if not isinstance(prompt, list):
        prompt = require_text(prompt, "prompt", where)
    cost = raw.get("cost")
    return prompt, LongRow(
        where=where,
        # "q, a, 1" (spaces after the commas) names the worker "a", as pool.yaml does
        worker=sys.intern(require_text(raw["worker"], "worker", where).strip()),
        reward=math.nan if reward_may_miss and is_blank(reward) else _reward(reward, where),
        # "NA" (R's write.csv), "NaN", "null": no cost, as an empty cell is, not a bad number
        cost=None if is_blank(cost) else require_float(cost, "cost", where, minimum=0.0),
        task=_optional_text(raw.get("task")),
        id=_optional_text(raw.get("id")),
        split=parse_split(raw.get("split"), where) if use_split_column else None,
    )


def _keys_hint(raw: dict) -> str:
    """A JSON row without the long format's keys: its own keys, which tell another format
    (ZeroEval's question and scores) or a misnamed column (text, model)."""
    if all(column in raw for column in REQUIRED_COLUMNS):
        return ""
    keys = ", ".join(map(str, raw)) or "none"
    return (
        f"; the row's keys are {keys}, the long format's {', '.join(COLUMNS)}: rename the "
        "keys, or import the file with its own format (zeroeval, routerbench)"
    )


def _is_percentage(value: object) -> bool:
    return isinstance(value, str) and value.strip().endswith("%")


def _reward(value: object, where: str) -> float:
    """The reward; `85%` (a spreadsheet's percentage format) is 0.85."""
    if not _is_percentage(value):
        return require_float(value, "reward", where)
    number = to_float(str(value).strip().removesuffix("%"))
    if number is None:
        raise RecordFileError(f"{where}: reward must be a finite number, got {value!r}")
    return number / 100


def _check_reward_scale(path: Path, percent_at: str | None, beyond: LongRow | None) -> None:
    """Percentages beside plain numbers above 1 mean two scales in one column (85% and 85 would
    both be read, as 0.85 and 85): refused. Plain rewards outside [0, 1] alone are read as
    given, with a warning: the graders score 0-1 and the training defaults assume that scale,
    so a 0-100 column would train very differently (near one-hot SFT targets)."""
    if beyond is None:
        return
    if percent_at is not None:
        raise RecordFileError(
            f"{path}: rewards are written both as percentages ({percent_at}) and as plain "
            f"numbers outside 0-1 ({beyond.where}: {beyond.reward:g}), so they are on two "
            "scales; write every reward as a fraction (0.85) or every one as a percentage (85%)"
        )
    logger.warning(
        "%s: rewards are read as written, and some lie outside 0-1 (%s: %g); fugu-lite's "
        "graders score 0-1 and its training defaults (SFT temperature 1, cost weights) assume "
        "that scale: if the column holds percentages, write them as fractions (0.85) or with "
        "a percent sign (85%%)",
        path, beyond.where, beyond.reward,
    )  # fmt: skip


def _optional_text(value: object) -> str | None:
    """The text, stripped; one string object for each value (a task repeats on every row).
    No value (None, NaN, "NA", "null": R's write.csv, pandas) is None: as text, "NA" was the
    id of every such prompt and a task of its own."""
    return None if is_blank(value) else sys.intern(str(value).strip())


def _prompt_key(prompt: str | list) -> str:
    return prompt if isinstance(prompt, str) else json.dumps(prompt, sort_keys=True)


def _one_value(key: str, column: str, cells: list[LongRow]) -> str | None:
    values = {getattr(cell, column) for cell in cells}
    if len(values) > 1:
        raise RecordFileError(
            f"{cells[0].where}: prompt {short(key)} has different {column} values across "
            f"its rows: {sorted(map(str, values))}; give one {column} per prompt"
        )
    return values.pop()


def _costs(key: str, cells: list[LongRow]) -> list[float] | None:
    without = [cell for cell in cells if cell.cost is None]
    if len(without) == len(cells):
        return None
    if without:
        raise RecordFileError(
            f"{without[0].where}: prompt {short(key)} has a cost for some workers but not "
            f"for {[cell.worker for cell in without]}; give every cost or none"
        )
    return [cell.cost for cell in cells if cell.cost is not None]
