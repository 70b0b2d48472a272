"""The long format's rows: its columns, and one raw row (as read from a file) checked into
its prompt and a LongRow cell (worker, reward, cost, task, id, split); a reward may be a
percentage (`85%`), and the scale of a file's rewards is checked as a whole."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import NamedTuple

from ..number_text import number_hint, to_float
from ..schemas import texts_in_a_message_list, warn_of_a_reward_off_scale
from ..text_reading import RecordFileError
from .common import (
    id_text,
    is_blank,
    refuse_a_record_or_task_row,
    refuse_control_characters,
    require_float,
    require_text,
)
from .split import parse_split

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


def parse_row(
    raw: dict, where: str, use_split_column: bool, reward_may_miss: bool
) -> tuple[str | list, LongRow]:
    """The row's prompt and cell; a blank reward is NaN when `reward_may_miss` (on_missing=drop
    then drops its prompt), else an error."""
    _check_required(raw, where, reward_may_miss)
    return _prompt(raw["prompt"], where), _cell(raw, where, use_split_column, reward_may_miss)


def _check_required(raw: dict, where: str, reward_may_miss: bool) -> None:
    """Every required column has a value (a blank reward too, unless `reward_may_miss`)."""
    refuse_a_record_or_task_row(raw, where)
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
        keys_hint = _keys_hint(raw)
        # the row has every column, some cells empty: fill them in (a row of other keys is
        # another format, which keys_hint says)
        advice = "" if keys_hint else "; fill in the cell or delete the row"
        raise RecordFileError(f"{where}: no value for {absent}{given}{advice}{hint}{keys_hint}")


def _prompt(prompt: object, where: str) -> str | list:
    """The prompt: a list of chat messages as given, else text; an object is neither."""
    if isinstance(prompt, dict) and "role" in prompt:
        raise RecordFileError(
            f"{where}: prompt is one message object (role {prompt['role']!r}), not a list of "
            "messages; a chat prompt is a list, even of one message: put it in [ ]"
        )
    if isinstance(prompt, dict):
        raise RecordFileError(
            f"{where}: prompt must be a non-empty string, got {prompt!r}; a prompt is a text, "
            'or a list of chat messages ({"role": ..., "content": ...}): write the object\'s '
            "text as the prompt"
        )
    problem = texts_in_a_message_list(prompt)
    if problem is not None:
        raise RecordFileError(f"{where}: {problem}")
    if isinstance(prompt, list):
        return prompt
    return require_text(prompt, "prompt", where)


def _cell(raw: dict, where: str, use_split_column: bool, reward_may_miss: bool) -> LongRow:
    reward = raw.get("reward")
    cost = raw.get("cost")
    return LongRow(
        where=where,
        worker=_worker(raw["worker"], where),
        reward=math.nan if reward_may_miss and is_blank(reward) else _reward(reward, where),
        # "NA" (R's write.csv), "NaN", "null": no cost, as an empty cell is, not a bad number
        cost=None if is_blank(cost) else require_float(cost, "cost", where, minimum=0.0),
        task=_optional_text(raw.get("task")),
        id=_optional_id(raw.get("id")),
        split=parse_split(raw.get("split"), where) if use_split_column else None,
    )


def _worker(value: object, where: str) -> str:
    """The worker's name, stripped: "q, a, 1" (spaces after the commas) names the worker "a",
    as pool.yaml does. A number is its text, the worker a CSV's cell names (pandas' to_json
    writes an integer worker column as numbers: `"worker": 1` was refused as no string)."""
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return sys.intern(id_text(value))
    name = require_text(value, "worker", where).strip()
    refuse_control_characters(name, "worker", where, "rename the worker in the file")
    return sys.intern(name)


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


def is_percentage(value: object) -> bool:
    return isinstance(value, str) and value.strip().endswith("%")


def _reward(value: object, where: str) -> float:
    """The reward; `85%` (a spreadsheet's percentage format) is 0.85."""
    if not is_percentage(value):
        return require_float(value, "reward", where)
    text = str(value).strip().removesuffix("%")
    number = to_float(text)
    if number is None:
        raise RecordFileError(
            f"{where}: reward must be a finite number, got {value!r}{number_hint(text)}"
        )
    return number / 100


def is_off_scale(reward: float) -> bool:
    """Whether a reward lies outside the graders' 0-1 (a missing one, NaN, does not)."""
    return reward < 0.0 or reward > 1.0


def check_reward_scale(
    path: Path, percent_at: str | None, beyond: LongRow | None, percent_beyond: LongRow | None
) -> None:
    """Percentages beside plain numbers above 1 mean two scales in one column (85% and 85 would
    both be read, as 0.85 and 85): refused. Plain rewards outside [0, 1] alone are read as
    given, with a warning: the graders score 0-1 and the training defaults assume that scale,
    so a 0-100 column would train very differently (near one-hot SFT targets). A percentage
    outside 0-100% (`120%`, read as 1.2) gets the same warning."""
    if beyond is not None and percent_at is not None:
        raise RecordFileError(
            f"{path}: rewards are written both as percentages ({percent_at}) and as plain "
            f"numbers outside 0-1 ({beyond.where}: {beyond.reward:g}), so they are on two "
            "scales; write every reward as a fraction (0.85) or every one as a percentage (85%)"
        )
    if beyond is not None:
        warn_of_a_reward_off_scale(
            str(path),
            beyond.where,
            beyond.reward,
            "if the column holds percentages, write them as fractions (0.85) or with a percent "
            "sign (85%)",
        )
    elif percent_beyond is not None:
        reward = percent_beyond.reward
        warn_of_a_reward_off_scale(
            str(path),
            percent_beyond.where,
            reward,
            f"a percentage is read as a fraction ({reward * 100:g}% as {reward:g}), so check the "
            "percentages above 100% or below 0%",
        )


def _optional_text(value: object) -> str | None:
    """The text, stripped; one string object for each value (a task repeats on every row).
    No value (None, NaN, "NA", "null": R's write.csv, pandas) is None: as text, "NA" was the
    id of every such prompt and a task of its own."""
    return None if is_blank(value) else sys.intern(str(value).strip())


def _optional_id(value: object) -> str | None:
    """The id as `_optional_text` reads it; a whole number stored as a float (1.0) is "1"."""
    return None if is_blank(value) else sys.intern(id_text(value))
