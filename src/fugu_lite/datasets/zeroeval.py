"""ZeroEval compact scores (WildEval/ZeroEval, Apache-2.0): 28 models x gsm, math-l5, crux."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

from pydantic import NonNegativeFloat

from ..io import iter_jsonl
from ..schemas import RewardRecord, warn_of_rewards_off_scale
from ..text_reading import RecordFileError
from .common import (
    ImportedRecords,
    MissingPolicy,
    build_record,
    check_missing_policy,
    check_split_column,
    is_blank,
    refuse_a_record_or_task_row,
    refuse_control_characters,
    require_float,
    require_text,
    short,
    warn_unused_split_column,
)
from .long_files import DECOMPRESS_COMMANDS
from .split import apply_given_split, apply_standard_split, no_value

logger = logging.getLogger(__name__)

FILE_NAME = "scores_compact.jsonl"
CHARS_PER_TOKEN = 4.0


# Tables that other importers read: given here, iter_jsonl's "a CSV or other table is
# imported with `fugu-lite data import` first" was said to a user running data import
TABLE_IMPORTS = (
    "`data import long` (a row per prompt and worker) or `routerbench` (a row per prompt)"
)
OTHER_FORMATS: dict[str, str] = {
    ".csv": TABLE_IMPORTS,
    ".pkl": "`data import routerbench`",
    ".tsv": f"{TABLE_IMPORTS}, saved as CSV",
    ".parquet": f"{TABLE_IMPORTS}, saved as CSV",
    ".xlsx": f"{TABLE_IMPORTS}, saved as CSV",
}


def zeroeval_file(source: str | Path) -> Path:
    """Accept the JSONL file, its folder, or a data folder that contains `zeroeval/`."""
    source = Path(source)
    other = OTHER_FORMATS.get(source.suffix.lower())
    if other is not None and source.is_file():
        raise RecordFileError(
            f"{source}: the zeroeval importer reads ZeroEval's {FILE_NAME} (JSON Lines), not a "
            f"{source.suffix} table; import this one with {other}"
        )
    for path in (source, source / FILE_NAME, source / "zeroeval" / FILE_NAME):
        if path.is_file():
            return path
    raise RecordFileError(
        f"{source}: no {FILE_NAME} here, nor in {source / 'zeroeval'}"
        + _compressed_copy_hint(source)
    )


def _compressed_copy_hint(source: Path) -> str:
    """Where the folders hold the file compressed (as downloaded), how to decompress it."""
    for folder in (source, source / "zeroeval"):
        for suffix, command in DECOMPRESS_COMMANDS.items():
            compressed = folder / (FILE_NAME + suffix)
            if compressed.is_file():
                return (
                    f", but {compressed} is there compressed: decompress it "
                    f"(`{command} -k {compressed.name}`) and import again"
                )
    return ""


def import_zeroeval(
    source: str | Path,
    *,
    prices: Mapping[str, tuple[NonNegativeFloat, NonNegativeFloat]] | None = None,
    on_missing: MissingPolicy = "error",
    split_column: str | None = None,
) -> list[RewardRecord]:
    """One record per question; workers are all models seen in the file, sorted.

    Costs: the file has no prices and no token counts, so output tokens are estimated as
    out_chars / 4. With `prices` (model -> (input, output) USD per 1M tokens) the cost is
    USD, input tokens being len(question) / 4. Without prices the cost is the estimated
    output tokens: tokens, not USD.

    Rows with an empty question are dropped with a logged count: the public file has no
    question text for its 721 math-l5 rows, and an empty prompt cannot be routed. A row
    missing a model's score or out_chars is an error by default (the public file has none);
    `on_missing="drop"` drops such rows instead, logging how many.
    """
    path = zeroeval_file(source)
    policy = check_missing_policy(on_missing)
    check_split_column(split_column)
    rows = _read_rows(path)
    worker_ids = _scored_models(path, rows)
    if prices is not None:
        _check_prices(worker_ids, prices)
    imported, empty, incomplete = _import_rows(path, rows, worker_ids, prices, policy, split_column)
    _report_dropped(path, len(imported.records), empty, incomplete)
    warn_of_rewards_off_scale(str(path), imported.records, imported.names)
    if split_column is None:
        # a key with a split on some row: "split": "" on every row is no split to keep
        given = {key for _, row in rows for key, value in row.items() if not no_value(value)}
        for key in {key for key in given if key.strip().casefold() == "split"}:
            warn_unused_split_column(path, f"split_column={key}")
        return apply_standard_split(imported.records)
    return apply_given_split(imported.records, imported.splits, imported.names)


def _read_rows(path: Path) -> list[tuple[int, dict]]:
    rows = list(iter_jsonl(path))
    if not rows:
        raise RecordFileError(f"{path}: holds no rows")
    line_number, first = rows[0]
    refuse_a_record_or_task_row(first, f"{path}, line {line_number}")
    return rows


def _scored_models(path: Path, rows: list[tuple[int, dict]]) -> list[str]:
    """Every model some row scores, sorted: the workers."""
    worker_ids = sorted(
        {model for n, row in rows for model in _mapping(row, "scores", f"{path}, line {n}")}
    )
    if not worker_ids:
        raise RecordFileError(
            f"{path}: no row scores a model (every row's scores is {{}}); each row needs "
            "scores {model: score} and out_chars {model: characters} for every model"
        )
    return worker_ids


def _import_rows(
    path: Path,
    rows: list[tuple[int, dict]],
    worker_ids: list[str],
    prices: Mapping[str, tuple[float, float]] | None,
    policy: MissingPolicy,
    split_column: str | None,
) -> tuple[ImportedRecords, int, int]:
    """A record per row, and how many rows were dropped for an empty question and for a
    missing value."""
    imported = ImportedRecords()
    empty = incomplete = 0
    for line_number, row in rows:
        where = f"{path}, line {line_number}"
        checked = _checked_row(row, where)
        if not checked.question.strip():
            empty += 1
            continue
        record = _row_record(checked, where, worker_ids, prices, policy)
        if record is None:
            incomplete += 1
            continue
        imported.add(record, None if split_column is None else row.get(split_column), where)
    return imported, empty, incomplete


class _Row(NamedTuple):
    """A row's fields, of the types the format gives them."""

    task: str
    id: str | int
    question: str
    scores: dict
    out_chars: dict


def _checked_row(row: dict, where: str) -> _Row:
    # "gsm " and "1 " are the task gsm and the id 1, as the other importers read them: the
    # record id was "gsm :1 " beside the task "gsm"
    task = require_text(row.get("task"), "task", where).strip()
    row_id = row.get("id")
    if isinstance(row_id, float) and row_id.is_integer():
        row_id = int(row_id)  # 1.0, as pandas writes an integer column with a gap, is id 1
    if isinstance(row_id, str) and not row_id.strip():
        # every such row's record was the id "gsm:", shared, where a missing id is refused
        raise RecordFileError(
            f"{where}: id is blank ({row_id!r}); give every row an id of its own (a record's id "
            "is its task and this id, e.g. gsm:1)"
        )
    if isinstance(row_id, str):
        row_id = row_id.strip()
    if not isinstance(row_id, str | int) or isinstance(row_id, bool):
        raise RecordFileError(f"{where}: id must be a string or an integer, got {row_id!r}")
    question = row.get("question")
    if not isinstance(question, str):
        raise RecordFileError(f"{where}: question must be a string, got {question!r}")
    scores = _mapping(row, "scores", where)
    out_chars = _mapping(row, "out_chars", where)
    return _Row(task, row_id, question, scores, out_chars)


def _row_record(
    row: _Row,
    where: str,
    worker_ids: list[str],
    prices: Mapping[str, tuple[float, float]] | None,
    policy: MissingPolicy,
) -> RewardRecord | None:
    """The row's record; None for a row missing some model's values with policy "drop"."""
    # absent, null, NaN, or a text written for none ("NaN", "NA"): a string "NaN" failed
    # as "must be a finite number" with no word of on_missing, even with on_missing=drop
    missing = [
        w for w in worker_ids if is_blank(row.scores.get(w)) or is_blank(row.out_chars.get(w))
    ]
    if missing and policy == "error":
        raise RecordFileError(
            f"{where}: no score or out_chars for {missing} (question {short(row.question)}); "
            "complete the row, delete it, or pass --option on_missing=drop"
        )
    if missing:
        return None
    output_tokens = [
        require_float(row.out_chars[w], f"out_chars of {w}", where, minimum=0.0) / CHARS_PER_TOKEN
        for w in worker_ids
    ]
    return build_record(
        where,
        prompt=row.question,
        worker_ids=worker_ids,
        rewards=[require_float(row.scores[w], f"the score of {w}", where) for w in worker_ids],
        costs=_costs(row.question, worker_ids, output_tokens, prices),
        task=row.task,
        id=f"{row.task}:{row.id}",
    )


def _report_dropped(path: Path, kept: int, empty: int, incomplete: int) -> None:
    """Refuse a file with no row left; warn of the rows dropped."""
    if not kept:
        raise RecordFileError(
            f"{path}: no row is left to import: {empty} row(s) have an empty question (an empty "
            f"prompt cannot be routed) and {incomplete} row(s) miss a model's score or out_chars; "
            "give the rows their question text and every model's values"
        )
    if empty:
        logger.warning("%s: dropped %d rows with an empty question", path, empty)
    if incomplete:
        logger.warning("%s: dropped %d rows missing a model's score or out_chars", path, incomplete)


def _mapping(row: dict, key: str, where: str) -> dict:
    """The row's {model: value} object, each model named without the spaces around it (as
    the other importers read a worker's name): "m1 " is the model m1."""
    value = row.get(key)
    if not isinstance(value, dict):
        raise RecordFileError(f"{where}: {key} must be a {{model: value}} object, got {value!r}")
    stripped = {model.strip(): number for model, number in value.items()}
    if len(stripped) < len(value):
        _refuse_a_model_named_twice(value, key, where)
    if "" in stripped:
        blank = next(model for model in value if not model.strip())
        raise RecordFileError(
            f"{where}: {key} names a model {blank!r}, a blank name; name the model, or delete "
            "its entry"
        )
    for model in stripped:
        refuse_control_characters(
            model, f"the model in {key}", where, "rename the model in the file"
        )
    return stripped


def _refuse_a_model_named_twice(value: dict, key: str, where: str) -> None:
    spellings: dict[str, list[str]] = {}
    for model in value:
        spellings.setdefault(model.strip(), []).append(model)
    model, names = next((m, names) for m, names in spellings.items() if len(names) > 1)
    raise RecordFileError(
        f"{where}: {key} names the model {model!r} twice ({', '.join(map(repr, names))}); "
        "keep one of them"
    )


def _costs(
    question: str,
    worker_ids: list[str],
    output_tokens: list[float],
    prices: Mapping[str, tuple[float, float]] | None,
) -> list[float]:
    if prices is None:
        return output_tokens
    input_tokens = len(question) / CHARS_PER_TOKEN
    return [
        (input_tokens * prices[w][0] + tokens * prices[w][1]) / 1e6
        for w, tokens in zip(worker_ids, output_tokens, strict=True)
    ]


def _check_prices(worker_ids: list[str], prices: Mapping[str, tuple[float, float]]) -> None:
    missing = [w for w in worker_ids if w not in prices]
    if missing:
        raise ValueError(f"prices has no (input, output) USD per 1M tokens for {missing}")
    bad = {
        w: tuple(prices[w])
        for w in worker_ids
        if not all(math.isfinite(price) and price >= 0 for price in prices[w])
    }
    if bad:
        raise ValueError(
            f"prices must be finite numbers of at least 0 (USD per 1M tokens), got {bad}; "
            "a negative price would lower the cost"
        )
