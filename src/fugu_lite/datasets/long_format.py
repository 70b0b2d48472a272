"""The generic long format: one CSV or JSONL row per (prompt, worker).

A .csv may be compressed (.csv.gz, .csv.bz2, .csv.xz); JSON rows are read from a .jsonl,
.ndjson or .json file.

Columns: prompt, worker, reward, and optionally cost, task, id, split (a header name is read
without case and surrounding spaces: ` Cost` is cost). A prompt is text, or a list of chat
messages (in a CSV cell: the list as JSON or as Python's repr). Every prompt must have every
worker exactly once; workers come out sorted by name.

This module groups the rows into records (import_long); reading the files into raw rows
lives in long_files, checking one row (and the rewards' scale) in long_rows.
"""

from __future__ import annotations

import difflib
import json
import logging
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ..schemas import RewardRecord
from ..text_reading import RecordFileError
from .common import (
    ImportedRecords,
    MissingPolicy,
    build_record,
    check_missing_policy,
    short,
    stable_id,
    warn_unused_split_column,
)
from .long_files import raw_rows
from .long_rows import (
    COLUMNS,
    LongRow,
    check_reward_scale,
    is_off_scale,
    is_percentage,
    parse_row,
)
from .split import apply_given_split, apply_standard_split, no_value

logger = logging.getLogger(__name__)


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
    cells = _read_cells(path, use_split_column, policy == "drop")
    _check_cells(path, cells)
    workers = sorted({worker for by_worker in cells.groups.values() for worker in by_worker})
    case_hint = _worker_case_hint(workers)
    imported, dropped = _group_records(cells, workers, policy, case_hint)
    _report_dropped(path, len(cells.groups), len(imported.records), dropped, case_hint)
    if use_split_column:
        return apply_given_split(imported.records, imported.splits, imported.names)
    if cells.has_split:
        warn_unused_split_column(path, "use_split_column=true")
    return apply_standard_split(imported.records)


@dataclass
class _Cells:
    """The file's rows, read: each prompt's row per worker (prompts in first-appearance order),
    and what the checks after reading need to know of the rows."""

    groups: dict[str, dict[str, LongRow]] = field(default_factory=dict)
    prompts: dict[str, str | list] = field(default_factory=dict)
    ignored: dict[str, None] = field(default_factory=dict)  # columns not read, in file order
    has_split: bool = False
    percent_at: str | None = None  # the first row whose reward is written as a percentage
    plain_beyond_one: LongRow | None = None  # the first row whose plain reward is not in [0, 1]
    percent_beyond_one: LongRow | None = None  # the first whose percentage is not in 0-100%


def _read_cells(path: Path, use_split_column: bool, drop_missing: bool) -> _Cells:
    """Every row parsed and filed under its prompt; a second row of one prompt and worker is
    an error."""
    cells = _Cells()
    for where, raw in raw_rows(path):
        # a split given: a JSON row's "split": "" (as an empty CSV cell) is none, and the
        # unused-column warning's advice to keep it then failed on 'no split value'
        cells.has_split = cells.has_split or not no_value(raw.get("split"))
        cells.ignored.update(dict.fromkeys(k for k in raw if k not in COLUMNS and k.strip()))
        prompt, row = parse_row(raw, where, use_split_column, drop_missing)
        if is_percentage(raw.get("reward")):
            cells.percent_at = cells.percent_at or where
            if cells.percent_beyond_one is None and is_off_scale(row.reward):
                cells.percent_beyond_one = row
        elif cells.plain_beyond_one is None and is_off_scale(row.reward):
            cells.plain_beyond_one = row
        key = _prompt_key(prompt)
        cells.prompts.setdefault(key, prompt)
        cells_by_worker = cells.groups.setdefault(key, {})
        if row.worker in cells_by_worker:
            first = cells_by_worker[row.worker]
            raise RecordFileError(
                f"{where}: duplicate cell for prompt {short(key)} and worker {row.worker!r} "
                f"(first at {first.where}); keep one row per prompt and worker: "
                + _duplicate_advice(first, row)
            )
        cells_by_worker[row.worker] = row
    return cells


def _duplicate_advice(first: LongRow, repeat: LongRow) -> str:
    """What to do with a second row of a prompt and worker: the same reward is a repeat, another
    reward is another attempt (or a mistake)."""
    if first.reward == repeat.reward or (math.isnan(first.reward) and math.isnan(repeat.reward)):
        return "it repeats that row's reward, so delete it"
    return (
        f"its rewards differ ({first.reward:g} there, {repeat.reward:g} here), so keep the "
        "right one, or average a worker's attempts at a prompt into one row"
    )


def _check_cells(path: Path, cells: _Cells) -> None:
    """Refuse a file without rows or with rewards on two scales; warn of unread columns."""
    if not cells.groups:
        raise RecordFileError(f"{path}: holds no rows")
    check_reward_scale(path, cells.percent_at, cells.plain_beyond_one, cells.percent_beyond_one)
    if cells.ignored:
        logger.warning(
            "%s: column(s) %s are not read (the long format's columns: %s); rename a column "
            "that holds one of those",
            path, list(cells.ignored), ", ".join(COLUMNS),
        )  # fmt: skip


def _group_records(
    cells: _Cells, workers: list[str], policy: MissingPolicy, case_hint: str
) -> tuple[ImportedRecords, Counter[str]]:
    """One record per prompt with a row and a reward for every worker; the others are an error,
    or with policy "drop" counted per missing worker."""
    imported = ImportedRecords()
    dropped: Counter[str] = Counter()
    for key, cells_by_worker in cells.groups.items():
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
                "--option on_missing=drop)"
                + _spacing_hint(key, cells.groups)
                + case_hint
                + _rare_worker_hint(missing, workers, cells.groups)
            )
        if missing:
            dropped.update(missing)
            continue
        row_cells = [cells_by_worker[worker] for worker in workers]
        split = _one_value(key, "split", row_cells)
        record = build_record(
            first,
            prompt=cells.prompts[key],
            worker_ids=workers,
            rewards=[cell.reward for cell in row_cells],
            costs=_costs(key, row_cells),
            task=_one_value(key, "task", row_cells),
            id=_one_value(key, "id", row_cells) or stable_id("long", key),
        )
        imported.add(record, split, first)
    return imported, dropped


def _report_dropped(
    path: Path, prompts: int, kept: int, dropped: Counter[str], case_hint: str
) -> None:
    """Refuse a file whose every prompt was dropped; warn of the prompts dropped."""
    if dropped and not kept:
        raise RecordFileError(
            f"{path}: every one of its {prompts} prompts misses a row or a reward for some "
            f"worker (prompts without each: {dict(dropped)}), so on_missing=drop leaves no "
            "records; add the missing rows and rewards" + case_hint
        )
    if dropped:
        logger.warning(
            "%s: dropped %d of %d prompts without a row and a reward for every worker (prompts "
            "without each: %s)%s",
            path, prompts - kept, prompts, dict(dropped), case_hint,
        )  # fmt: skip


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


def _rare_worker_hint(
    missing: list[str], workers: list[str], groups: dict[str, dict[str, LongRow]]
) -> str:
    """A missing worker with rows for under half the prompts, and the worker its name is
    close to: a name misspelt on one row ('gpt4' for 'gpt-4') made a worker that every other
    prompt misses, and the error advised adding its rows to them all."""
    for worker in missing:
        rows = [cells[worker].where for cells in groups.values() if worker in cells]
        if not rows or 2 * len(rows) >= len(groups):
            continue
        others = [name for name in workers if name != worker]
        close = difflib.get_close_matches(worker, others, n=1, cutoff=0.6)
        guess = f": a misspelling of {close[0]!r}?" if close else ": check its name"
        return (
            f"; the worker {worker!r} has rows for {len(rows)} of the {len(groups)} prompts "
            f"only (the first at {rows[0]}){guess}"
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
