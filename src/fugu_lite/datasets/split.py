"""The standard split: drop exact duplicate prompts, then hash each prompt into a split."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence

from ..schemas import SPLIT_VALUES_TEXT, RewardRecord, Split, canonical_split, repeated_ids

logger = logging.getLogger(__name__)

PLACEHOLDER_SPLIT: Split = "train"
"""Importers build records with this split, then a function below assigns the real one."""

TEST_SALT = ""
VALIDATION_SALT = "validation:"


class SplitError(ValueError):
    """A user-given split value is not one of train / validation / test."""


def _bucket(salt: str, prompt_text: str) -> int:
    return int(hashlib.sha1((salt + prompt_text).encode("utf-8")).hexdigest(), 16) % 10


def standard_split(prompt_text: str) -> Split:
    """20% test; validation is 20% of the rest, drawn with a salted hash."""
    if _bucket(TEST_SALT, prompt_text) < 2:
        return "test"
    if _bucket(VALIDATION_SALT, prompt_text) < 2:
        return "validation"
    return "train"


def dedupe_prompts(records: Sequence[RewardRecord]) -> list[RewardRecord]:
    """Keep the first record of each exact prompt text, so no prompt can sit in two splits."""
    first_of: dict[str, RewardRecord] = {}
    dropped: list[RewardRecord] = []
    other_rewards = 0
    for record in records:
        text = record.prompt_text
        if text in first_of:
            dropped.append(record)
            other_rewards += first_of[text].rewards != record.rewards
            continue
        first_of[text] = record
    if dropped:
        logger.warning(
            "dropped %d records whose prompt already appeared earlier: the first record of a "
            "prompt is kept (%d of the dropped had other rewards than it; the first dropped: "
            "id %r, prompt %r)",
            len(dropped), other_rewards, dropped[0].id, dropped[0].prompt_text[:60],
        )  # fmt: skip
    return list(first_of.values())


def apply_standard_split(records: Sequence[RewardRecord]) -> list[RewardRecord]:
    split = [
        record.model_copy(update={"split": standard_split(record.prompt_text)})
        for record in dedupe_prompts(records)
    ]
    warn_repeated_ids(split)
    return split


def warn_repeated_ids(records: Sequence[RewardRecord]) -> None:
    """Ids that several imported prompts share (a user's id column, a RouterBench sample_id):
    said at import, where the source can still be fixed, not first by `data stats`."""
    repeated = repeated_ids(records)
    if not repeated:
        return
    prompts = [repr(record.prompt_text[:60]) for record in records if record.id == repeated[0]]
    logger.warning(
        "record ids repeat: %d of them are each given to more than one prompt (first: id %r, "
        "on the prompts %s); predictions.jsonl will not tell those records apart by id: give "
        "each prompt its own id in the source",
        len(repeated), repeated[0], " and ".join(prompts[:2]),
    )  # fmt: skip


def parse_split(value: object, where: str) -> Split:
    """Check one user-given split value (canonical_split: train, validation, test or an alias,
    in any case); `where` names the file and row for the error."""
    name = canonical_split(value)
    if name is not None:
        return name
    # None: the row has no such column (or an empty cell); say so rather than "split None"
    problem = (
        "no split value (the split column is absent or empty here)"
        if no_value(value)
        else f"unknown split {value!r}"
    )
    raise SplitError(
        f"{where}: {problem}; allowed values: {SPLIT_VALUES_TEXT}; fix the value, or import "
        "without --option split_column=... / use_split_column=true to get the standard split"
    )


def no_value(value: object) -> bool:
    """None, an empty text, or NaN or pandas' NA (a pickled table's empty cell, which was
    called "unknown split nan")."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return True
    try:
        return bool(value != value)  # only NaN differs from itself
    except TypeError:  # pandas' NA has no truth value
        return True
    except ValueError:  # an array
        return False


def apply_given_split(
    records: Sequence[RewardRecord], splits: Sequence[object], rows: Sequence[str]
) -> list[RewardRecord]:
    """Give record i the split `splits[i]` (checked, `rows[i]` names it), then dedupe."""
    if not len(records) == len(splits) == len(rows):
        raise ValueError(
            f"got {len(records)} records, {len(splits)} splits and {len(rows)} row names; "
            "give one split and one row name per record"
        )
    checked = [parse_split(value, where) for value, where in zip(splits, rows, strict=True)]
    assigned = [
        record.model_copy(update={"split": split})
        for record, split in zip(records, checked, strict=True)
    ]
    deduped = dedupe_prompts(assigned)
    warn_repeated_ids(deduped)
    return deduped
