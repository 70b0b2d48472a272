"""Records exchanged between the stages: one prompt with one reward per worker."""

from __future__ import annotations

import hashlib
import logging
import math
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Literal, cast

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from .io import iter_models, write_jsonl
from .number_text import number_hint, to_float
from .text import visible_controls
from .text_reading import RecordFileError

logger = logging.getLogger(__name__)

Split = Literal["train", "validation", "test"]
SPLITS: tuple[str, ...] = ("train", "validation", "test")
# What datasets call their splits besides our names (read without case): `dev` and `val` are
# the validation split of most benchmarks, so refusing them only made users edit their file.
# The one table for every split a user gives: an importer's split column, a task's or a
# record's `split`, `eval --split`.
SPLIT_ALIASES: dict[str, Split] = {
    "training": "train",
    "val": "validation",
    "valid": "validation",
    "dev": "validation",
    "testing": "test",
}
SPLIT_VALUES_TEXT = f"{', '.join(SPLITS)} (in any case; also {', '.join(SPLIT_ALIASES)})"


def canonical_split(value: object) -> Split | None:
    """The split a user's value names (`Dev` -> validation), or None when it names none."""
    if not isinstance(value, str):
        return None
    folded = value.strip().casefold()
    if folded in SPLITS:
        return cast(Split, folded)
    return SPLIT_ALIASES.get(folded)


def split_alias_to_name(value: object) -> object:
    """A pydantic before-validator's step: a split alias becomes its name, any other value
    stays for the Literal to accept or refuse."""
    return canonical_split(value) or value


# A split field of a model: an alias (`dev`) is read as its name, anything else is left for
# the Literal to accept or refuse.
SplitField = Annotated[Split, BeforeValidator(split_alias_to_name)]


class PartError(ValueError):
    """A content part's error, with its place in the content: a request's 400 names the
    part (messages[0].content[2]) and shows it, not the whole content."""

    def __init__(self, index: int, message: str, part: object) -> None:
        super().__init__(message)
        self.index = index
        self.part = part


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    # "function": OpenAI's deprecated function calling, which its API still takes.
    role: Literal["system", "user", "assistant", "tool", "developer", "function"]
    content: str | list | None = None

    @field_validator("content")
    @classmethod
    def _parts_are_typed(cls, content: str | list | None) -> str | list | None:
        """OpenAI's content parts: objects with a string `type`; a text part's `text` is a
        string."""
        for index, part in enumerate(content if isinstance(content, list) else []):
            if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                raise PartError(
                    index,
                    f"content[{index}] must be an object with a string 'type', e.g. "
                    '{"type": "text", "text": "..."}',
                    part,
                )
            if part["type"] == "text" and not isinstance(part.get("text"), str):
                raise PartError(
                    index,
                    f"content[{index}] is a text part whose 'text' is not a string; give the "
                    'part\'s text as a string: {"type": "text", "text": "..."}',
                    part,
                )
            if part["type"] == "refusal" and not isinstance(part.get("refusal"), str):
                raise PartError(
                    index,
                    f"content[{index}] is a refusal part whose 'refusal' is not a string; give "
                    "the words the assistant declined with as a string: "
                    '{"type": "refusal", "refusal": "..."}',
                    part,
                )
        return content


def text_only(content: list) -> bool:
    """Content parts that are all text (so they can travel as one string)."""
    return all(part.get("type") == "text" for part in content)


def parts_text(content: list) -> str:
    return "\n".join(part["text"] for part in content if part.get("type") == "text")


def message_text(message: ChatMessage) -> str:
    """Plain text of a message; multi-part content keeps only its text parts."""
    if message.content is None:
        return ""
    if isinstance(message.content, str):
        return message.content
    return parts_text(message.content)


def number_as_text(value: object) -> object:
    """A pydantic before-validator's step: a hand-written file's `"id": 7` means "7" (a bool
    is not a number here: `true` stays an error); any other value stays as it is. NaN (what
    json.dumps writes for pandas' missing value) and Infinity are no value (None), not the
    texts "nan" and "inf"."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return value


def whole_number(value: float) -> bool:
    """A float that is exactly an integer a JSON writer would write as one: 1e30 is none
    (as an int its digits would be 1000000000000000019884624838656)."""
    return value.is_integer() and abs(value) < 2**53


def id_as_read(value: str) -> str:
    """A task's id or name as a task file's is read: "q1 " is the id q1 (a duplicate of
    another q1), "math " the family math; a blank value stays as it is, for task_problems to
    name. A record's id and task are read so too, and saved lines written when ids were read as
    written are matched so."""
    return value.strip() or value


def prompt_form(value: object) -> str | None:
    """Which form a prompt takes (None: neither), so that a bad one is told against that
    form alone: "prompt.str: Input should be a valid string" beside a message's problem
    told a list of messages to be a string."""
    if isinstance(value, str):
        return "text"
    if isinstance(value, list):
        return "messages"
    return None


def texts_in_a_message_list(prompt: object) -> str | None:
    """What is wrong with a prompt list holding texts (a conversation's turns as texts, or texts
    beside message objects), or None: pydantic said "prompt.messages.0: Input should be a
    valid dictionary or instance of ChatMessage", neither what a prompt is nor what to do."""
    if not isinstance(prompt, list):
        return None
    texts = [index for index, item in enumerate(prompt) if isinstance(item, str)]
    if not texts:
        return None
    if len(texts) == len(prompt):
        return (
            f"prompt is a list of {len(prompt)} texts, not of chat messages; a prompt is text, "
            'or a list of messages such as {"role": "user", "content": "..."}: join the texts '
            "into one, or give each its role"
        )
    message = next(index for index, item in enumerate(prompt) if not isinstance(item, str))
    return (
        f"prompt mixes texts and chat messages (texts at position {', '.join(map(str, texts))}, "
        f"a message at position {message}); a prompt is one text, or a list of messages only: "
        'write each text as a message, {"role": "user", "content": "..."} (or the role it has)'
    )


# A record's prompt: its text, or a list of chat messages.
PromptField = Annotated[
    Annotated[str, Tag("text")] | Annotated[list[ChatMessage], Tag("messages")],
    Discriminator(
        prompt_form,
        custom_error_type="prompt_type",
        custom_error_message="Input should be a string or a list of chat messages",
    ),
]


class RewardRecord(BaseModel):
    """One prompt, the workers that answered it, and the reward each one earned."""

    model_config = ConfigDict(extra="forbid")

    prompt: PromptField
    split: SplitField
    worker_ids: list[str] = Field(min_length=1)
    rewards: list[float]
    costs: list[float] | None = None
    task: str | None = None
    id: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _no_texts_among_messages(cls, data: object) -> object:
        problem = texts_in_a_message_list(data.get("prompt") if isinstance(data, dict) else None)
        if problem is not None:  # a custom error: said without pydantic's "Value error, "
            raise PydanticCustomError("prompt_texts", problem)
        return data

    @field_validator("id", "task", mode="before")
    @classmethod
    def _number_as_text(cls, value: object, info: ValidationInfo) -> object:
        if info.field_name == "id" and isinstance(value, float) and whole_number(value):
            value = int(value)  # pandas' integer ids with a gap: 1.0 is the id 1, as a task's
        return number_as_text(value)

    @field_validator("id", mode="after")
    @classmethod
    def _id_not_blank(cls, value: str | None) -> str | None:
        """A blank id ("", "  ") names no record: many such records shared one id, where a
        task's blank id is refused. Other ids are read without surrounding spaces, as a task
        file's and every importer's: " q1" was another id than "q1" (no repeat warned of, a
        join by id missed it)."""
        if value is not None and not value.strip():
            raise ValueError(
                f"id is blank ({value!r}); give the record an id of its own, or leave 'id' out"
            )
        return None if value is None else id_as_read(value)

    @field_validator("task", mode="after")
    @classmethod
    def _family_without_surrounding_spaces(cls, value: str | None) -> str | None:
        """'math ' (a record written when task names were read as written) is the family
        math, as a task file's 'math ' is now read."""
        return None if value is None else id_as_read(value)

    @field_validator("rewards", "costs", mode="before")
    @classmethod
    def _values_read_as_the_importers_read_them(
        cls, values: object, info: ValidationInfo
    ) -> object:
        """A value is read by the importers' rule (to_float), not by pydantic's lax mode,
        which read `"1_0"` as 10 and refused `"True"`: `true`/`false` (a pass/fail column,
        as JSON booleans or text in any case) is 1 and 0, a number written as text is that
        number; other text is refused, naming its worker and how to write it."""
        if not isinstance(values, list):
            return values
        read = [to_float(value) if isinstance(value, bool | str) else value for value in values]
        bad = next((i for i, value in enumerate(values) if isinstance(value, str)
                    and read[i] is None), None)  # fmt: skip
        if bad is not None:
            value = values[bad]
            raise ValueError(
                f"{info.field_name} holds a text that is no finite number for "
                f"{_places([bad], info)[0]}: {value!r}{number_hint(value)}; write each "
                "value as a JSON number (0.5) or true/false"
            )
        return read

    @field_validator("rewards", "costs", mode="before")
    @classmethod
    def _nulls_are_missing_values(cls, values: object, info: ValidationInfo) -> object:
        """null is JSON's missing value (pandas writes NaN as it): said as one, with what to
        do, as NaN is, not as "Input should be a valid number" at each position."""
        if not isinstance(values, list) or not any(value is None for value in values):
            return values
        missing = _places([index for index, value in enumerate(values) if value is None], info)
        fix = (
            "give every worker its cost, or leave costs out of the record"
            if info.field_name == "costs"
            else "drop the record or replace the missing scores"
        )
        raise ValueError(f"{info.field_name} has no value (null) for {', '.join(missing)}; {fix}")

    @model_validator(mode="after")
    def _check_lengths_and_values(self) -> RewardRecord:
        n_workers = len(self.worker_ids)
        if len(set(self.worker_ids)) != n_workers:
            raise ValueError(f"worker_ids has duplicates: {self.worker_ids}")
        blank = [index for index, worker in enumerate(self.worker_ids) if not worker.strip()]
        if blank:
            # no pool can name such a worker, so a router trained on it could never serve it
            raise ValueError(
                f"worker_ids has a blank id at position(s) {blank}: {self.worker_ids}; give "
                "each worker its id (the pool's id of the worker that answered)"
            )
        if len(self.rewards) != n_workers:
            raise ValueError(
                f"rewards has {len(self.rewards)} values but worker_ids has {n_workers}; "
                "give exactly one reward per worker, in the order of worker_ids"
            )
        _check_finite("rewards", self.rewards)
        if self.costs is not None:
            if len(self.costs) != n_workers:
                raise ValueError(
                    f"costs has {len(self.costs)} values but worker_ids has {n_workers}; "
                    "give one cost per worker or leave costs out"
                )
            _check_finite("costs", self.costs)
            if any(cost < 0 for cost in self.costs):
                raise ValueError(f"costs must not be negative: {self.costs}")
        if isinstance(self.prompt, list) and not self.prompt:
            raise ValueError("prompt is an empty list of messages")
        if isinstance(self.prompt, list) and not any(
            message_text(message).strip() for message in self.prompt
        ):
            # as a blank text prompt: every such record gave the same features
            raise ValueError(
                "prompt's messages hold no text (every 'content' is empty or missing)"
                + text_elsewhere_hint(self.prompt)
                + "; give a message its 'content' or drop the record"
            )
        if isinstance(self.prompt, str) and not self.prompt.strip():
            # an empty prompt cannot be routed: every such record gave the same features
            raise ValueError(
                "prompt is blank: a record needs the text its workers answered; fill in its "
                "prompt or drop the record"
            )
        return self

    @property
    def prompt_text(self) -> str:
        """The prompt as one string: the text itself, or the messages joined."""
        if isinstance(self.prompt, str):
            return self.prompt
        return "\n".join(f"{m.role}: {message_text(m)}" for m in self.prompt)

    @property
    def prompt_hash(self) -> str:
        return prompt_hash(self.prompt_text)

    def reward_of(self, worker_id: str) -> float:
        return self.rewards[self.worker_ids.index(worker_id)]


def _places(indexes: list[int], info: ValidationInfo) -> list[str]:
    """The workers at these positions of a record's rewards or costs (a position past its
    worker_ids named as such)."""
    workers = info.data.get("worker_ids") or []
    return [
        str(workers[index]) if index < len(workers) else f"position {index}" for index in indexes
    ]


def text_elsewhere_hint(messages: list[ChatMessage]) -> str:
    """Messages holding their text under another key ('text', ShareGPT's 'value'), which is
    kept but not sent: "every message's 'content' is empty" alone did not say where it went."""
    keys = sorted(
        {
            key
            for message in messages
            for key, value in (message.model_extra or {}).items()
            if isinstance(value, str) and value.strip()
        }
    )
    if not keys:
        return ""
    return f" (a message's text goes in 'content'; {', '.join(map(repr, keys))} is not read)"


def _check_finite(name: str, values: list[float]) -> None:
    bad = [index for index, value in enumerate(values) if not math.isfinite(value)]
    if bad:
        raise ValueError(
            f"{name} must be finite numbers, but positions {bad} are NaN or infinite; "
            "drop the record or replace the missing scores"
        )


def prompt_hash(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


def read_records(path: str | Path) -> list[RewardRecord]:
    """Read a RewardRecord JSONL file and check that every record has the same workers; warn
    of rewards off the 0-1 scale."""
    numbered = list(iter_models(path, RewardRecord, _other_file_hint))
    if not numbered:
        raise RecordFileError(f"{path}: holds no records")
    records = [record for _, record in numbered]
    check_same_workers(records, source=str(path), lines=[line for line, _ in numbered])
    warn_of_rewards_off_scale(str(path), records, [f"{path}, line {line}" for line, _ in numbered])
    return records


AS_FRACTIONS = "if they are percentages, write them as fractions (0.85)"


def warn_of_a_reward_off_scale(
    source: str, where: str, reward: float, advice: str = AS_FRACTIONS
) -> None:
    """Rewards outside [0, 1] are read as given, with this warning, whatever the file's
    format: the graders score 0-1 and the training defaults assume that scale, so a 0-100
    column trains very differently (near one-hot SFT targets). `where` names the first such
    reward's row; `advice` is how the format writes a percentage."""
    logger.warning(
        "%s: rewards are read as written, and some lie outside 0-1 (%s: %g); fugu-lite's "
        "graders score 0-1 and its training defaults (SFT temperature 1, cost weights) assume "
        "that scale: %s",
        source, where, reward, advice,
    )  # fmt: skip


def warn_of_rewards_off_scale(
    source: str, records: Sequence[RewardRecord], places: Sequence[str]
) -> None:
    """warn_of_a_reward_off_scale for the first record (named by its place: its file's line
    or row) holding a reward outside [0, 1]; nothing when every reward is on the scale."""
    for place, record in zip(places, records, strict=True):
        beyond = [reward for reward in record.rewards if not 0.0 <= reward <= 1.0]
        if beyond:
            warn_of_a_reward_off_scale(source, place, beyond[0])
            return


def _other_file_hint(row: dict) -> str | None:
    """A task line (the step before records), a task's `messages` in a record, or a
    dataset's row not yet imported, given where records are expected: said as such, not as
    a list of missing and extra fields."""
    if "messages" in row and "grader" not in row:  # a task's field, copied into a record
        return (
            "a record has no 'messages' field: its prompt is 'prompt', as text or as the "
            "list of messages; give the messages as 'prompt' (alone)"
        )
    if "rewards" in row:
        return None
    if "grader" in row:
        return (
            "this is a task (it has 'grader'), not a RewardRecord: a task file is "
            "collect's input; `fugu-lite collect --tasks FILE -o records.jsonl` makes the "
            "records to use here"
        )
    imports = {
        "long": all(key in row for key in ("prompt", "worker", "reward")),
        "zeroeval": "question" in row and "scores" in row,
    }
    for format, matches in imports.items():
        if matches:
            return (
                f"this is a {format} dataset's row (it has {', '.join(map(repr, row))}), "
                f"not a RewardRecord: `fugu-lite data import {format} FILE -o records.jsonl` "
                "makes the records to use here"
            )
    return None


def write_records(path: str | Path, records: list[RewardRecord]) -> int:
    return write_jsonl(path, records)


def check_same_workers(
    records: list[RewardRecord], source: str = "records", lines: list[int] | None = None
) -> list[str]:
    """The workers of the first record, after checking every record has them; `lines` (the
    file line of each record) makes the error name the line instead of the record number."""
    worker_ids = records[0].worker_ids
    for index, record in enumerate(records):
        if record.worker_ids != worker_ids:
            where = f"{source}, line {lines[index]}" if lines else f"{source}: record {index + 1}"
            raise RecordFileError(
                f"{where} (id={visible_controls(str(record.id))}) has workers {record.worker_ids}, "
                f"but the first record has {worker_ids}; every record needs the same workers "
                "in the same order"
            )
    return worker_ids


def repeated_ids(records: Sequence[RewardRecord]) -> list[str]:
    """The ids given to more than one record, in file order (records without an id aside)."""
    counts = Counter(record.id for record in records if record.id is not None)
    return [record_id for record_id, count in counts.items() if count > 1]


def records_in_split(records: list[RewardRecord], split: str) -> list[RewardRecord]:
    name = canonical_split(split)
    if name is None:
        raise ValueError(f"unknown split {split!r}; use one of {SPLIT_VALUES_TEXT}")
    return [record for record in records if record.split == name]


def split_sizes(records: list[RewardRecord]) -> str:
    """How many records each split holds, e.g. "train 24 · test 8" (empty splits left out)."""
    counts = {split: sum(1 for record in records if record.split == split) for split in SPLITS}
    return " · ".join(f"{split} {count}" for split, count in counts.items() if count)
