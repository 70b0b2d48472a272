"""RewardRecords as arrays: one row per prompt, one column per worker."""

from __future__ import annotations

import html
import json
import re
from collections.abc import Collection
from dataclasses import dataclass

import numpy as np

from ..schemas import RewardRecord, check_same_workers
from ..text import visible_controls


@dataclass(frozen=True)
class RewardTable:
    """Rewards (and costs, when every record has them) of one split, as [N, W] arrays."""

    rewards: np.ndarray
    costs: np.ndarray | None
    tasks: list[str | None]
    ids: list[str | None]
    prompt_hashes: list[str]
    worker_ids: list[str]
    # Prompts whose record had costs; with some but not all, `costs` is None (see reward_table).
    n_with_costs: int = 0

    def __post_init__(self) -> None:
        if self.rewards.ndim != 2:
            raise ValueError(f"rewards must be a [N, W] array, got shape {self.rewards.shape}")
        n_prompts, n_workers = self.rewards.shape
        if n_workers != len(self.worker_ids):
            raise ValueError(
                f"rewards has {n_workers} columns but there are {len(self.worker_ids)} worker_ids"
            )
        if self.costs is not None and self.costs.shape != self.rewards.shape:
            raise ValueError(
                f"costs has shape {self.costs.shape} but rewards has {self.rewards.shape}"
            )
        for name, column in (
            ("tasks", self.tasks),
            ("ids", self.ids),
            ("prompt_hashes", self.prompt_hashes),
        ):
            if len(column) != n_prompts:
                raise ValueError(f"{name} has {len(column)} entries but rewards has {n_prompts}")
        self._check_finite("rewards", self.rewards)
        if self.costs is not None:
            self._check_finite("costs", self.costs)

    def _check_finite(self, name: str, values: np.ndarray) -> None:
        """NaN would win np.argmax (a worker missing one reward as the best single worker)
        and reach the report's JSON, where it is not valid."""
        bad = np.argwhere(~np.isfinite(values))
        if len(bad) == 0:
            return
        row, column = (int(index) for index in bad[0])
        prompt = f"prompt {self.ids[row]!r}" if self.ids[row] is not None else f"row {row}"
        raise ValueError(
            f"{name} hold {len(bad)} NaN or infinite value(s), the first for worker "
            f"{self.worker_ids[column]!r} on {prompt}; give every worker a finite value on "
            "every prompt"
        )

    @property
    def n_prompts(self) -> int:
        return int(self.rewards.shape[0])

    @property
    def n_workers(self) -> int:
        return int(self.rewards.shape[1])

    def __len__(self) -> int:
        return self.n_prompts


def reward_table(records: list[RewardRecord]) -> RewardTable:
    """Stack records into arrays, keeping their order.

    Costs are kept only when every record has them; with some records missing costs
    the table has `costs=None`, because a mean over a subset would not compare methods
    on the same prompts.
    """
    if not records:
        raise ValueError("cannot build a reward table from zero records")
    worker_ids = check_same_workers(records)
    rewards = np.array([record.rewards for record in records], dtype=np.float64)
    costs = None
    if all(record.costs is not None for record in records):
        costs = np.array([record.costs for record in records], dtype=np.float64)
    return RewardTable(
        rewards=rewards,
        costs=costs,
        tasks=[record.task for record in records],
        ids=[record.id for record in records],
        prompt_hashes=[record.prompt_hash for record in records],
        worker_ids=list(worker_ids),
        n_with_costs=sum(record.costs is not None for record in records),
    )


NO_TASK = "(no task)"
# A task or worker name starting with one of these is shown quoted: rows that are no task or
# worker, the unlabelled prompts' NO_TASK and a plot's pooled "(N other tasks)" and
# "(N other workers)", are in parentheses.
_QUOTED_NAME_STARTS = ("(", '"')
# What follows the best single worker's name in a table or plot of the single workers; a
# name ending so is shown quoted ("x (best single)" read as the best single worker x).
BEST_SINGLE_MARK = " (best single)"


def task_label(task: str | None) -> str:
    """A per-task row's task as shown: the unlabelled prompts' row (task None) as NO_TASK,
    a named task as row_name shows it."""
    return NO_TASK if task is None else row_name(task)


def row_name(name: str, other_rows: Collection[str] = ()) -> str:
    """A task's or worker's name as its row shows it: in double quotes as JSON writes it when
    it starts with a parenthesis or a double quote (a task named "(no task)"), is blank (an
    empty cell read as no name), ends with BEST_SINGLE_MARK or is one of `other_rows`, the
    rows of its table that are no task or worker ("oracle" below the single workers), so
    that no name reads as a row of another kind or as another blank name."""
    if (
        not name.strip()
        or name.startswith(_QUOTED_NAME_STARTS)
        or name.endswith(BEST_SINGLE_MARK)
        or name in other_rows
    ):
        return json.dumps(name, ensure_ascii=False)
    return name


def worker_row_name(worker: str, best_single: str, other_rows: Collection[str] = ()) -> str:
    """A single worker's row name (row_name), BEST_SINGLE_MARK after the best single
    worker's."""
    name = row_name(worker, other_rows)
    return f"{name}{BEST_SINGLE_MARK}" if worker == best_single else name


def check_aligned(name: str, matrix: np.ndarray, table: RewardTable) -> None:
    """Refuse a [N, W] matrix of `name` (probabilities, predictions) that is not one finite
    row per prompt of `table` and one column per worker: argmax would read it anyway."""
    if matrix.shape != table.rewards.shape:
        raise ValueError(
            f"{name} have shape {matrix.shape}, expected {table.rewards.shape} "
            f"(one row per evaluated prompt, one column per worker in {table.worker_ids})"
        )
    if not np.all(np.isfinite(matrix)):
        raise ValueError(f"{name} contain NaN or infinite values")


def argmax_choices(scores: np.ndarray) -> np.ndarray:
    """Column index of the highest score per row; ties go to the lowest index."""
    if scores.ndim != 2 or scores.shape[1] == 0:
        raise ValueError(f"scores must be a [N, W] array with W >= 1, got shape {scores.shape}")
    return np.argmax(scores, axis=1)


def picked(values: np.ndarray, choices: np.ndarray) -> np.ndarray:
    """values[i, choices[i]] for every row i."""
    return np.take_along_axis(values, choices[:, None], axis=1)[:, 0]


# Backslash-escaped in a cell: a backslash (it would escape what follows), a backtick (code),
# `*`, `_` and `~` (emphasis, strike-through), `]` (no link or image closes without it) and
# `|` (the next cell).
_MARKDOWN_MARKERS = re.compile(r"([\\`*_~\]|])")


def markdown_cell(text: str) -> str:
    """`text` as one Markdown table cell, or inline in a one-line paragraph: a `|` would
    split the cell and a line break would end the row or the line (task names and worker
    ids are the user's own strings); `<`, `>` and `&` as HTML entities and Markdown's inline
    markers escaped, or `vector<int>` lost its `<int>` as an unknown HTML tag, a backtick
    started code and `__init__` showed as a bold `init`; other control characters are shown
    as escapes."""
    escaped = _MARKDOWN_MARKERS.sub(r"\\\1", html.escape(text, quote=False))
    return "<br>".join(visible_controls(line) for line in escaped.splitlines())


def markdown_table(
    header: list[str], rows: list[list[str]], right_aligned: list[int] | None = None
) -> list[str]:
    """The lines of a Markdown table, each cell a markdown_cell, then a blank line; the
    columns at `right_aligned` (indices) aligned right."""
    right = set(right_aligned or [])
    separator = ["---:" if index in right else "---" for index in range(len(header))]
    lines = [_markdown_row(header), _markdown_row(separator)]
    lines += [_markdown_row(row) for row in rows]
    return [*lines, ""]


def _markdown_row(cells: list[str]) -> str:
    return "| " + " | ".join(markdown_cell(cell) for cell in cells) + " |"
