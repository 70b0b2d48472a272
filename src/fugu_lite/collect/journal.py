"""The run's two files on disk: the call log's line format (LogEntry) and its default path,
their lines read back validated (naming another of the project's files given by mistake),
and the repair of a torn last line (a write killed half-way).
"""

from __future__ import annotations

import errno
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from ..atomic_files import append_whole
from ..io import describe_validation_error, iter_jsonl
from ..text_reading import RecordFileError
from .errors import CollectError

LONE_SURROGATE = re.compile("[\ud800-\udfff]")  # a pair in a str is one character: a half


class LogEntry(BaseModel):
    """One line of the call log."""

    model_config = ConfigDict(extra="ignore")

    event: Literal["call", "grade", "judge"]
    task_id: str
    worker_id: str
    request_hash: str
    local_hash: str | None = None  # call and grade events of a local worker: its model file
    gguf_sha256: str | None = None  # ... and that file's content (a file replaced in place)
    grading_hash: str | None = None  # grade events: what the grade was computed against
    grading_code: str | None = None  # ... and with (grading_code_digest; not judge grades)
    judge_worker_id: str | None = None  # grade events of judge tasks: the judge that gave it
    judge_hash: str | None = None  # ... and the settings that shaped its verdict
    judge_gguf_sha256: str | None = None  # ... and a local judge's model file's content
    # (judge events carry the last two as well: the judge's own)
    judged_worker_id: str | None = None  # judge events: whose answer (worker_id: the judge)
    judged_request_hash: str | None = None  # judge events: the request hash of that answer
    prompt_hash: str | None = None
    output: str | None = None
    finish_reason: str | None = None  # call and judge events: "length" = cut at the limit
    usage: dict[str, int] | None = None
    cost: float | None = None
    latency_s: float | None = None
    error: str | None = None
    error_kind: str | None = None
    error_code: str | None = None  # the `code` of the worker's error body
    n_ctx: int | None = None  # context refusals of a local worker: its n_ctx then
    attempts: int | None = None
    started_at: float | None = None
    finished_at: float | None = None
    score: float | None = None
    grade_error: str | None = None
    detail: str | None = None

    @field_validator("output", "error", "grade_error", "detail")
    @classmethod
    def _writable_text(cls, text: str | None) -> str | None:
        """A worker's answer or message may hold half of a surrogate pair (`"\\ud83d"`: an
        emoji cut in two by a server counting UTF-16 units), which no UTF-8 file holds: its
        line could not be written, on every run. The half is kept as U+FFFD, as a UTF-8
        decoder keeps bytes it cannot read."""
        return None if text is None else LONE_SURROGATE.sub("\ufffd", text)


def default_log_path(output: Path) -> Path:
    return output.with_name(f"{output.stem}.calls.jsonl")


def repair_torn_tail(path: Path) -> str | None:
    """Cut an unterminated last line (a write killed half-way) and return it, or None.

    Every complete line ends with a newline because each append writes whole lines; a last
    line that is a whole JSON object without one (an editor that saves no final newline, a
    kill -9 between a line and its newline) is kept and given its newline. Only the file's
    tail is read: a call log of a long collection holds gigabytes of answers."""
    if not path.exists() or path.stat().st_size == 0:
        return None
    with path.open("rb+") as stream:
        size = stream.seek(0, os.SEEK_END)
        stream.seek(size - 1)
        if stream.read(1) == b"\n":
            return None
        keep = last_line_start(stream, size)
        stream.seek(keep)
        tail = stream.read()
        if not is_json_object(tail):
            fragment = tail.decode("utf-8", errors="replace")
            save_torn(path, fragment)  # before the cut: a line that cannot be saved stays
            stream.truncate(keep)
            stream.flush()
            os.fsync(stream.fileno())
            return fragment
    end_last_line(path)
    return None


# A whole string field naming a call-log line's cell or a record's task, its value still
# JSON-escaped: an answer's text never matches (a quote inside a string is escaped:
# \"task_id\").
_WHOLE_STRING_VALUE = r'": *"((?:[^"\\]|\\.)*)"'
CELL_FIELD = re.compile(r'"(event|task_id|worker_id)' + _WHOLE_STRING_VALUE)
RECORD_TASK_FIELD = re.compile(r'"(task|id)' + _WHOLE_STRING_VALUE)


def whole_fields(fragment: str, field: re.Pattern[str]) -> dict[str, str]:
    """The `field` fields a torn line still holds whole, by name; those cut off are missing."""
    return {match[1]: json.loads(f'"{match[2]}"') for match in field.finditer(fragment)}


def torn_line_cell(fragment: str) -> dict[str, str]:
    """The event, task_id and worker_id a torn call-log line still holds whole (they open
    its line), by name; those cut off are missing."""
    return whole_fields(fragment, CELL_FIELD)


def torn_record_task(fragment: str) -> dict[str, str]:
    """The task (family) and id a torn record still holds whole, by name: its last fields,
    read after its worker_ids only, as a prompt's messages may hold an "id" of their own (a
    tool call's)."""
    _, _, fields = fragment.partition('"worker_ids":')  # "" when cut before its worker_ids
    return whole_fields(fields, RECORD_TASK_FIELD)


def end_last_line(path: Path) -> None:
    """Give the whole last line of `path` its missing newline; a write that fails (a full
    disk) is a CollectError."""
    try:
        append_whole(path, b"\n")
    except OSError as error:
        raise CollectError(
            f"cannot write {path}: {error.strerror or error}; its last line, whole but without "
            f"its newline, gets one before anything else is written there: {write_fix(error)}, "
            "then run the same command again"
        ) from error


def save_torn(path: Path, fragment: str) -> None:
    """Append a torn line cut from `path` to `<path>.torn`, whole or not at all; a write
    that fails (a disk still full) is a CollectError, and the line stays in `path` until it
    can be saved."""
    torn_path = path.with_name(path.name + ".torn")
    try:
        append_whole(torn_path, fragment.encode("utf-8") + b"\n")
    except OSError as error:
        raise CollectError(
            f"cannot write {torn_path}: {error.strerror or error}; {path} ends in a line cut "
            f"short (a run stopped mid-write), left there until it can be saved in "
            f"{torn_path.name}: {write_fix(error)}, then run the same command again"
        ) from error


# What to do about a write that failed, by its errno (its strerror names the cause).
_WRITE_FIXES = {
    errno.ENOSPC: "free disk space",
    errno.EDQUOT: "free space within your disk quota",
    errno.EFBIG: (
        "raise your file size limit (ulimit -f), or move the records and call log to a file "
        "system that allows larger files"
    ),
    errno.EACCES: "give yourself write permission on the file and its folder",
    errno.EPERM: "give yourself write permission on the file and its folder",
    errno.EROFS: (
        "remount its file system read-write, or copy the records and call log to a folder you "
        "can write and collect there"
    ),
    errno.EISDIR: "move the folder at that path out of the way",
}


def write_fix(error: OSError) -> str:
    """What the user does about a write to a collection's file that failed: free disk space
    only for a full disk, not for a permission, a read-only mount or a folder in the way."""
    return _WRITE_FIXES.get(error.errno or 0, "fix what stops the write")


def is_json_object(line: bytes) -> bool:
    """Whether `line` is one whole JSON object: a write cut short never is one (its
    outermost closing brace is the line's last character)."""
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:  # JSONDecodeError, UnicodeDecodeError
        return False


TAIL_BLOCK = 1 << 16


def last_line_start(stream: BinaryIO, size: int) -> int:
    """The offset just after the last newline of a file of `size` bytes (0 for none), read
    backwards a block at a time."""
    end = size
    while end > 0:
        start = max(0, end - TAIL_BLOCK)
        stream.seek(start)
        found = stream.read(end - start).rfind(b"\n")
        if found != -1:
            return start + found + 1
        end = start
    return 0


M = TypeVar("M", bound=BaseModel)


def validated_lines(path: Path, model: type[M], what: str) -> Iterator[tuple[int, M]]:
    """Each line of one of collection's own files (records, call log) as `model`, with its
    line number; a line
    that is not one names the file, the line and each wrong field, to be fixed or deleted,
    unless it is a line of another of the project's files (a task file given as -o): that
    file is to be kept."""
    for line_number, value in iter_jsonl(path):
        try:
            yield line_number, model.model_validate(value)
        except ValidationError as error:
            where = f"{path}, line {line_number}"
            kind = other_file_kind(value, what)
            if kind is not None:
                raise RecordFileError(
                    f"{where}: this is {kind}, not {what}, so {path} is not this "
                    "collection's file; keep it as it is and give collect a file of its own "
                    "(-o for the records, --log for the call log; a new name is created)"
                ) from error
            raise RecordFileError(
                f"{where}: not {what} ({describe_validation_error(error, None)}); fix or "
                "delete that line"
            ) from error


def other_file_kind(row: object, expected: str) -> str | None:
    """Which of the project's files `row` is a line of (said with the key that tells), when
    that is not the `expected` kind; None for a line of no known file."""
    if not isinstance(row, dict):
        return None
    kinds = (  # (kind, the key that tells, whether the row is one)
        ("a task", "grader", "grader" in row and "rewards" not in row),
        ("a RewardRecord", "rewards", "rewards" in row and "worker_ids" in row),
        ("a call-log entry", "event", "event" in row and "request_hash" in row),
    )
    for kind, key, matches in kinds:
        if matches and kind != expected:
            return f"{kind} line (it has {key!r})"
    return None
