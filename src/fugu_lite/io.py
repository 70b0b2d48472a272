"""Reading and writing JSON and JSON Lines files, and pydantic models from them (a file that
cannot be read is a RecordFileError naming its line). Opening a file as text and the errors
that say why it cannot be read live in text_reading; the cache folder and file digests in
file_digests; the atomic writes used here in atomic_files."""

from __future__ import annotations

import ast
import contextlib
import json
import os
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from .atomic_files import append_whole, atomic_output, write_text_atomic
from .text_reading import (
    RecordFileError,
    beyond_python_message,
    check_no_lone_surrogate,
    json_error_reason,
    not_utf8_message,
    nul_text_message,
    open_for_reading,
    read_utf8_text,
)

M = TypeVar("M", bound=BaseModel)


def json_kind(value: Any) -> str:
    """What a JSON value is, in JSON's words (Python's said "a JSON list", "a JSON NoneType")."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return json.dumps(value)  # true or false
    kinds = {list: "an array", str: "a string", int: "a number", float: "a number"}
    return kinds.get(type(value), "a JSON value")


def write_json(path: str | Path, payload: Any) -> None:
    write_text_atomic(path, json.dumps(payload, indent=2, ensure_ascii=False, default=str) + "\n")


DOUBLE_BACKSLASHES = 'JSON writes a backslash twice, as in "C:\\\\Users" or "\\\\d+"'


TRAILING_COMMA = re.compile(r",(\s*[}\]])")
TRAILING_COMMA_ADVICE = (
    "a comma after the last item of an object or list (before its } or ]), which JSON does "
    "not take; delete that comma"
)


def _has_trailing_comma(text: str) -> bool:
    """Whether the text is JSON once the commas before a closing } or ] are deleted (Python
    and JavaScript take them): a hand-edited row was called a Python dict (single quotes,
    True, None), a JSON file's error only "Expecting value"."""
    return _is_json(TRAILING_COMMA.sub(r"\1", text))


ENDS_TOO_SOON_ADVICE = (
    "the file ends before its JSON does: it was cut short (an interrupted download or copy?) "
    "or lacks its closing brackets; fetch or copy it again"
)


def _ends_too_soon(text: str, error: json.JSONDecodeError) -> bool:
    """Whether the JSON is refused where the file ends, or for a string it never closes: a
    download cut short, which "Expecting ':' delimiter" at some column did not say. json
    calls a string unterminated only when the text ends inside it (a line break in it is
    another error), so a quote after its start is an escaped one: looking for one took a
    text cut short after 'Say \\"hi' for a fault inside."""
    if error.msg.startswith("Unterminated string"):
        return True
    return not text[error.pos :].strip()


def _bad_escape(error: json.JSONDecodeError) -> bool:
    """A single backslash in a string: a Windows path or a regex typed by hand."""
    return error.msg == "Invalid \\escape"


def read_json(path: str | Path) -> Any:
    path = Path(path)
    text = read_utf8_text(path).removeprefix("\ufeff")  # the UTF-8 BOM some editors write
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        if "\x00" in text:
            line = text[: text.index("\x00")].count("\n") + 1
            raise RecordFileError(nul_text_message(f"{path}, line {line}", text)) from error
        if not text.strip():  # 'Expecting value at line 1, column 1' did not say so
            raise RecordFileError(
                f"{path}: the file is empty, no JSON in it (a copy or download cut short?); "
                "give the file with its JSON"
            ) from error
        raise RecordFileError(
            f"{path}: not valid JSON at line {error.lineno}, column {error.colno}: "
            f"{json_error_reason(error)}"
            + (f"; {DOUBLE_BACKSLASHES}: double each backslash" if _bad_escape(error) else "")
            + (f"; {TRAILING_COMMA_ADVICE}" if _has_trailing_comma(text) else "")
            + (f"; {ENDS_TOO_SOON_ADVICE}" if _ends_too_soon(text, error) else "")
        ) from error
    except (ValueError, RecursionError) as error:
        raise RecordFileError(beyond_python_message(str(path), error)) from error
    check_no_lone_surrogate(text, value, str(path))
    return value


def write_jsonl(path: str | Path, rows: Iterable[dict | BaseModel]) -> int:
    """Write one JSON object a line, atomically, a line at a time (the file's text was held
    three times in memory: the lines, joined, encoded)."""
    count = 0
    with atomic_output(path) as stream:
        for row in rows:
            stream.write(_json_line(row).encode("utf-8"))
            count += 1
    return count


def append_jsonl(path: str | Path, rows: Iterable[dict | BaseModel]) -> int:
    """Append rows and fsync, whole or not at all: a write that fails (a full disk) leaves the
    file as it was, and a crash loses at most the line being written. After a last line
    without its newline (an append killed half-way) the rows start on a line of their own:
    glued onto that fragment, the first of them was lost with it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [_json_line(row) for row in rows]
    torn = _ends_without_newline(path)
    append_whole(path, (("\n" if torn else "") + "".join(lines)).encode("utf-8"))
    return len(lines)


def _ends_without_newline(path: Path) -> bool:
    try:
        with path.open("rb") as stream:
            if stream.seek(0, os.SEEK_END) == 0:
                return False
            stream.seek(-1, os.SEEK_END)
            return stream.read(1) != b"\n"
    except FileNotFoundError:
        return False


# Line breaks to str.splitlines() (and so to tools reading JSON Lines with it) that JSON
# leaves unescaped in a string; escaped, each row stays one line to any line splitter.
_LINE_BREAKS_IN_JSON = str.maketrans({"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"})


def _json_line(row: dict | BaseModel) -> str:
    if isinstance(row, BaseModel):
        text = row.model_dump_json(exclude_none=True)
    else:
        text = json.dumps(row, ensure_ascii=False, default=str)
    return text.translate(_LINE_BREAKS_IN_JSON) + "\n"


def iter_jsonl(path: str | Path) -> Iterator[tuple[int, dict]]:
    """Yield (line number, object) for each non-blank line; bad JSON names file and line."""
    path = Path(path)
    first = True  # a first line that is no JSON: another kind of file, not a line to delete
    with open_for_reading(path) as stream:
        for line_number, raw in enumerate(stream, start=1):
            line = _decoded_line(path, line_number, raw)
            if not line.strip():
                continue
            if first:
                _refuse_a_json_list(path, line_number, line, stream)
            value = _parsed_line(path, line_number, line, first, stream)
            first = False
            yield line_number, _checked_object(path, line_number, line, value)


def _decoded_line(path: Path, line_number: int, raw: bytes) -> str:
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise RecordFileError(not_utf8_message(path, line_number, error)) from error
    # the UTF-8 BOM some editors write: at the start of the file, or of each file
    # joined with `cat` (where "not valid JSON ...; delete that line" lost a good row)
    return line.removeprefix("\ufeff")


def _refuse_a_json_list(path: Path, line_number: int, line: str, rest: BinaryIO) -> None:
    """A JSON list (a .json saved under this name, or pretty-printed): "expected a JSON
    object ({...}), got an array" or "not valid JSON; fix that line" did not say so. A list
    on each line (a table's rows written with json.dumps(row)) is no list to split with jq."""
    if not line.lstrip().startswith("["):
        return
    if _is_list_of_values(line) and _is_list_of_values(_next_filled_line(rest) or ""):
        raise RecordFileError(
            f"{path}, line {line_number}: each line holds a JSON list ([...]), not a JSON "
            'object: write each row as an object naming its fields ({"field": value, ...}), '
            "e.g. json.dumps(dict(zip(header, row)))"
        )
    raise RecordFileError(
        f"{path}, line {line_number}: the file holds a JSON list, not JSON Lines "
        "(one JSON object a line, no enclosing [ ]); write each object on a line "
        f"of its own, e.g. jq -c '.[]' {path.name} > {path.stem}.lines.jsonl"
    )


def _is_list_of_values(text: str) -> bool:
    """Whether `text` is a JSON list of no objects (a row's cells, not a list of rows)."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return False
    return isinstance(value, list) and not any(isinstance(item, dict) for item in value)


def _parsed_line(path: Path, line_number: int, line: str, first: bool, rest: BinaryIO) -> object:
    """The line's JSON value; a line that is no JSON says what it looks like instead."""
    try:
        return json.loads(line)
    except json.JSONDecodeError as error:
        raise RecordFileError(
            _not_json_message(path, line_number, line, first, rest, error)
        ) from error
    except (ValueError, RecursionError) as error:
        raise RecordFileError(
            beyond_python_message(f"{path}, line {line_number}", error)
        ) from error


def _not_json_message(
    path: Path,
    line_number: int,
    line: str,
    first: bool,
    rest: BinaryIO,
    error: json.JSONDecodeError,
) -> str:
    where = f"{path}, line {line_number}"
    if "\x00" in line:
        return nul_text_message(where, line)
    if _ends_lines_with_cr(line):
        return _cr_line_ends_message(where, path)
    following = _next_filled_line(rest)
    if _line_break_in_string(line, error, following):
        return _line_break_message(where, error)
    if error.msg == "Invalid control character at" and line[error.pos] not in "\r\n":
        # a tab pasted from a spreadsheet; Python reads it, so it was taken for a Python dict
        return _control_character_message(where, line, error)
    if first and _pretty_printed(line, error, following):
        return _pretty_printed_message(where, path)
    if _bad_escape(error):
        # a Windows path or a regex typed by hand; Python reads it, so it was taken for a
        # Python dict (or, on line 1, for another kind of file)
        return _bad_escape_message(where, line, error)
    if _json_but_for_its_ends(line):
        return _not_a_json_space_message(where, line, error)
    near_miss = _near_miss(line)
    if near_miss is not None:
        return f"{where}: {near_miss}"
    if first and not line.endswith("\n") and _ends_too_soon(line, error):
        # the file's one line, a crash cut short: no other kind of file to look for
        reason = f"{json_error_reason(error)} at column {error.colno}"
        return f"{where}: not valid JSON ({reason}); {CUT_SHORT_ADVICE}"
    return _plain_not_json_message(where, first, error, _column_in_line(line, error))


CUT_SHORT_ADVICE = (
    "the file's only line ends before its JSON does: it was cut short (a run killed while "
    "writing it, a copy cut short); write it again"
)


def _cr_line_ends_message(where: str, path: Path) -> str:
    return (
        f"{where}: the lines end in a carriage return alone (CR, the line end "
        "of classic Mac OS), so the whole file reads as one line; JSON Lines "
        "ends each line in LF (or CRLF): re-save the file with LF line ends, "
        f"e.g. tr '\\r' '\\n' < {path.name} > {path.stem}.lf{path.suffix}"
    )


def _line_break_message(where: str, error: json.JSONDecodeError) -> str:
    return (
        f"{where}: a line break inside a string (column {error.colno}): JSON Lines holds "
        "each object on one line, so a line break in a text is written \\n; write each "
        "row with json.dumps(row)"
    )


def _control_character_message(where: str, line: str, error: json.JSONDecodeError) -> str:
    return (
        f"{where}: a control character ({line[error.pos]!r}) inside a string (column "
        f"{error.colno}): JSON writes it escaped (a tab as \\t); write each row with "
        "json.dumps(row)"
    )


def _pretty_printed_message(where: str, path: Path) -> str:
    return (
        f"{where}: the JSON object goes on past the end of the line: the file "
        "looks pretty-printed (an object over several lines), not JSON Lines "
        "(one JSON object a line); write each object on one line, e.g. jq -c "
        f". {path.name} > {path.stem}.lines.jsonl"
    )


def _bad_escape_message(where: str, line: str, error: json.JSONDecodeError) -> str:
    return (
        f"{where}: a backslash JSON does not take alone ('{line[error.pos : error.pos + 2]}' "
        f"at column {error.colno}): {DOUBLE_BACKSLASHES}; double each backslash, or write "
        "each row with json.dumps(row)"
    )


def _not_a_json_space_message(where: str, line: str, error: json.JSONDecodeError) -> str:
    return (
        f"{where}: {line[error.pos]!r} at column {error.colno} is no space to JSON, which "
        "takes only spaces, tabs and line ends around its values (a no-break space pasted "
        "from a web page or a document is another character); delete it"
    )


def _column_in_line(line: str, error: json.JSONDecodeError) -> int:
    """The column of the line where JSON refused it: one past its last character when JSON
    wanted more there, which json counts past the newline, as column 1 of a line after it (a
    line cut short was 'not valid JSON (Expecting ':' delimiter at column 1)')."""
    return min(error.pos, len(line.rstrip("\r\n"))) + 1


def _plain_not_json_message(
    where: str, first: bool, error: json.JSONDecodeError, column: int
) -> str:
    advice = (
        "the file does not start as JSON Lines (one JSON object a line): check that "
        "it is the file meant (a CSV or other table is imported with `fugu-lite data "
        "import` first), or fix that line"
        if first
        else "fix or delete that line"
    )
    return f"{where}: not valid JSON ({json_error_reason(error)} at column {column}); {advice}"


def _checked_object(path: Path, line_number: int, line: str, value: object) -> dict:
    if not isinstance(value, dict):
        raise RecordFileError(
            f"{path}, line {line_number}: expected a JSON object ({{...}}), got "
            f"{json_kind(value)}: each line of a JSON Lines file holds one JSON object; write "
            "each row as an object on a line of its own (json.dumps(row) for each row), or "
            "delete that line"
        )
    check_no_lone_surrogate(line, value, f"{path}, line {line_number}")
    return value


def _next_filled_line(rest: BinaryIO) -> str | None:
    """The next line holding any text, from `rest` (the file after the bad line), stripped
    on the left; None at the end of the file."""
    for raw in rest:
        following = raw.decode("utf-8", errors="replace").lstrip().removeprefix("\ufeff")
        if following:
            return following
    return None


def _pretty_printed(line: str, error: json.JSONDecodeError, following: str | None) -> bool:
    """Whether a first line that is no JSON opens an object that goes on over the next lines
    (pretty-printed): JSON stopped at its end wanting more, and the next line is no object of
    its own (as after a line cut short)."""
    if not line.lstrip().startswith("{") or error.pos < len(line.rstrip()):
        return False
    return following is not None and not following.startswith("{")


def _line_break_in_string(line: str, error: json.JSONDecodeError, following: str | None) -> bool:
    """Whether a string runs on past the end of the line into the next (a text pasted over two
    lines), rather than the line being cut short (the file ends, or an object follows)."""
    return (
        error.msg == "Invalid control character at"
        and line[error.pos] in "\r\n"
        and following is not None
        and not following.startswith("{")
    )


def _json_but_for_its_ends(line: str) -> bool:
    """Whether a line that is no JSON is JSON once the Unicode spaces around it are cut (a
    no-break space, a form feed): Python reads them as spaces, so it was called a Python
    dict ('single quotes, True, None') though it has none of those."""
    return _is_json(line.strip())


def _is_json(text: str) -> bool:
    """Whether json.loads reads the text (the probes above ask it of a changed text)."""
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return False
    return True


def _near_miss(line: str) -> str | None:
    """What a line that is no JSON is instead, when it is one of the usual near misses: a
    Python dict (written with str(row)), or an object followed by a comma (a JSON list's
    items with the brackets removed); None for anything else."""
    stripped = line.strip()
    if stripped.endswith(","):
        with contextlib.suppress(json.JSONDecodeError):
            if isinstance(json.loads(stripped[:-1]), dict):
                return (
                    "a comma after the JSON object: JSON Lines has nothing between its objects "
                    "(a JSON list's items with the [ ] removed keep theirs); delete the comma "
                    "at the end of each line"
                )
    if _has_trailing_comma(stripped):
        return TRAILING_COMMA_ADVICE
    try:
        value = ast.literal_eval(stripped)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    if not isinstance(value, dict):
        return None
    return (
        "a Python dict (single quotes, True, None), not JSON: write each row with "
        "json.dumps(row), not str(row) or print(row)"
    )


def _ends_lines_with_cr(line: str) -> bool:
    """Whether a line that is no JSON is JSON Lines whose lines end in CR alone: its first
    CR-ended piece is JSON (a raw CR cannot be inside a JSON string, only between values)."""
    pieces = [piece for piece in line.split("\r") if piece.strip()]
    if len(pieces) < 2:
        return False
    try:
        json.loads(pieces[0])
    except json.JSONDecodeError:
        return False
    return True


def read_models(path: str | Path, model: type[M]) -> list[M]:
    """Read a JSONL file of pydantic models; a bad line names the file, line and field."""
    return [item for _, item in iter_models(path, model)]


def iter_models(
    path: str | Path, model: type[M], other_kind: Callable[[dict], str | None] | None = None
) -> Iterator[tuple[int, M]]:
    """Yield (line number, model) for each non-blank line of a JSONL file. `other_kind`:
    for a line that does not validate, what kind of file it looks like instead (and what
    to do), said in place of the field errors; None when it does not tell."""
    for line_number, value in iter_jsonl(path):
        try:
            yield line_number, model.model_validate(value)
        except ValidationError as error:
            problem = (other_kind and other_kind(value)) or (
                f"not a valid {model.__name__}: {describe_validation_error(error)}"
            )
            raise RecordFileError(f"{path}, line {line_number}: {problem}") from error


def describe_validation_error(error: ValidationError, whole: str | None = "record") -> str:
    """Every problem of a pydantic error at its place ("rewards.1: ...; split: ..."); one of
    the whole object is put under `whole`, or said alone when `whole` is None."""
    parts = []
    for item in error.errors():
        location = ".".join(str(part) for part in item["loc"]) or whole
        message = check_message(item)
        parts.append(f"{location}: {message}" if location else message)
    return "; ".join(parts)


def check_message(item: ErrorDetails) -> str:
    """One problem of a pydantic error as its check says it: a validator's ValueError without
    the "Value error, " pydantic puts before it ("record: Value error, rewards has ..."), a
    word that tells a user nothing."""
    return str(item["msg"]).removeprefix("Value error, ")
