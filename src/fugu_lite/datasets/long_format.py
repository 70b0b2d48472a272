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

import json
import logging
import math
from collections import Counter
from pathlib import Path

from ..schemas import RewardRecord
from ..text_reading import RecordFileError
from .common import (
    MissingPolicy,
    build_record,
    check_missing_policy,
    short,
    stable_id,
    warn_unused_split_column,
)
from .long_files import raw_rows
from .long_rows import COLUMNS, LongRow, check_reward_scale, is_percentage, parse_row
from .split import apply_given_split, apply_standard_split

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
    groups: dict[str, dict[str, LongRow]] = {}
    prompts: dict[str, str | list] = {}
    ignored: dict[str, None] = {}
    has_split = False
    percent_at: str | None = None  # the first row whose reward is written as a percentage
    plain_beyond_one: LongRow | None = None  # the first row whose plain reward is not in [0, 1]
    for where, raw in raw_rows(path):
        has_split = has_split or raw.get("split") is not None
        ignored.update(dict.fromkeys(key for key in raw if key not in COLUMNS and key.strip()))
        prompt, row = parse_row(raw, where, use_split_column, policy == "drop")
        if is_percentage(raw.get("reward")):
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
    check_reward_scale(path, percent_at, plain_beyond_one)
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
