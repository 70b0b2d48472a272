"""JSON / JSONL reading and atomic, durable writing."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)


class RecordFileError(ValueError):
    """A data file could not be read; the message names the file and the line."""


def write_json(path: str | Path, payload: Any) -> None:
    write_text_atomic(path, json.dumps(payload, indent=2, ensure_ascii=False, default=str) + "\n")


def read_json(path: str | Path) -> Any:
    path = Path(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as error:
        raise RecordFileError(f"{path}: file not found") from error
    except json.JSONDecodeError as error:
        raise RecordFileError(
            f"{path}: not valid JSON at line {error.lineno}, column {error.colno}: {error.msg}"
        ) from error


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write UTF-8 text atomically and durably (see write_bytes_atomic)."""
    write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path: str | Path, payload: bytes) -> None:
    """Write to a temporary file in the same folder, fsync, then rename over the target:
    a crash or kill leaves the old file or the new one, never a torn one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(payload)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def write_jsonl(path: str | Path, rows: Iterable[dict | BaseModel]) -> int:
    lines = [_json_line(row) for row in rows]
    write_text_atomic(path, "".join(lines))
    return len(lines)


def append_jsonl(path: str | Path, rows: Iterable[dict | BaseModel]) -> int:
    """Append rows and fsync, so that a crash loses at most the line being written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [_json_line(row) for row in rows]
    with path.open("a", encoding="utf-8") as stream:
        stream.write("".join(lines))
        stream.flush()
        os.fsync(stream.fileno())
    return len(lines)


def _json_line(row: dict | BaseModel) -> str:
    if isinstance(row, BaseModel):
        return row.model_dump_json(exclude_none=True) + "\n"
    return json.dumps(row, ensure_ascii=False, default=str) + "\n"


def iter_jsonl(path: str | Path) -> Iterator[tuple[int, dict]]:
    """Yield (line number, object) for each non-blank line; bad JSON names file and line."""
    path = Path(path)
    if not path.exists():
        raise RecordFileError(f"{path}: file not found")
    with path.open(encoding="utf-8") as stream:
        for line_number, line in enumerate(stream, start=1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as error:
                raise RecordFileError(
                    f"{path}, line {line_number}: not valid JSON ({error.msg} at column "
                    f"{error.colno}); fix or delete that line"
                ) from error
            if not isinstance(value, dict):
                raise RecordFileError(
                    f"{path}, line {line_number}: expected a JSON object, got "
                    f"{type(value).__name__}"
                )
            yield line_number, value


def read_models(path: str | Path, model: type[M]) -> list[M]:
    """Read a JSONL file of pydantic models; a bad line names the file, line and field."""
    items: list[M] = []
    for line_number, value in iter_jsonl(path):
        try:
            items.append(model.model_validate(value))
        except ValidationError as error:
            raise RecordFileError(
                f"{path}, line {line_number}: not a valid {model.__name__}: "
                f"{_describe_validation_error(error)}"
            ) from error
    return items


def _describe_validation_error(error: ValidationError) -> str:
    parts = []
    for item in error.errors():
        location = ".".join(str(part) for part in item["loc"]) or "record"
        parts.append(f"{location}: {item['msg']}")
    return "; ".join(parts)
