"""Reading and writing JSON / JSONL files (a file that cannot be read is a RecordFileError naming
its line), fugu-lite's cache folder and cached file digests. The atomic writes they use, and
the sweeping of killed writers' temporaries, live in atomic_files."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Callable, Iterable, Iterator
from io import BufferedReader
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from .atomic_files import atomic_output, write_text_atomic

M = TypeVar("M", bound=BaseModel)


class RecordFileError(ValueError):
    """A data file could not be read; the message names the file and the line."""


def cache_root() -> Path:
    """fugu-lite's cache folder: $FUGU_LITE_CACHE_DIR, else ~/.cache/fugu-lite. A `~` of the
    variable is the home folder (set where no shell expands it: a service file, a container's
    env, quoted), not a folder named `~` in the working directory."""
    return Path(
        os.environ.get("FUGU_LITE_CACHE_DIR", Path.home() / ".cache" / "fugu-lite")
    ).expanduser()


STDIN_NOT_READ = "- (standard input) is not read here: save the input to a file and give its path"


def means_stdin(path: Path) -> bool:
    """`-` given as a file to read where no file has that name: stdin was meant, which only
    `route -` reads ("-: file not found" left users puzzled)."""
    return str(path) == "-" and not path.exists()


def write_json(path: str | Path, payload: Any) -> None:
    write_text_atomic(path, json.dumps(payload, indent=2, ensure_ascii=False, default=str) + "\n")


def read_json(path: str | Path) -> Any:
    path = Path(path)
    text = read_utf8_text(path).removeprefix("\ufeff")  # the UTF-8 BOM some editors write
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        if "\x00" in text:
            raise RecordFileError(nul_text_message(f"{path}, line 1")) from error
        raise RecordFileError(
            f"{path}: not valid JSON at line {error.lineno}, column {error.colno}: {error.msg}"
        ) from error
    check_no_lone_surrogate(text, value, str(path))
    return value


def check_no_lone_surrogate(text: str, value: Any, where: str) -> None:
    """JSON lets a string hold half a surrogate pair (`"\\ud800"`), which is no Unicode text:
    hashing or writing such a prompt failed later with no file or line named."""
    if "\\ud" not in text and "\\uD" not in text:
        return
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as error:
        bad = error.object[error.start : error.end].encode("unicode_escape").decode("ascii")
        raise RecordFileError(
            f"{where}: holds a lone UTF-16 surrogate escape ({bad}), which is not Unicode text "
            "(half of a pair, such as an emoji cut in two); fix the text or delete it"
        ) from error


def read_utf8_text(path: Path) -> str:
    """The whole file as text; a file that is not UTF-8 is a RecordFileError naming the line."""
    with open_for_reading(path) as stream:
        payload = stream.read()
    try:
        return payload.decode("utf-8")
    except UnicodeDecodeError as error:
        line = payload[: error.start].count(b"\n") + 1
        raise RecordFileError(not_utf8_message(path, line, error)) from error


def open_for_reading(path: Path) -> BufferedReader:
    """The file opened in binary mode; a missing path, a folder or an unreadable file is a
    RecordFileError naming it."""
    if path.is_dir():
        raise RecordFileError(f"{path} is a directory, not a file; give the path of the file")
    if means_stdin(path):
        raise RecordFileError(STDIN_NOT_READ)
    try:
        stream = path.open("rb")
    except FileNotFoundError as error:
        raise RecordFileError(f"{path}: file not found") from error
    except OSError as error:
        raise RecordFileError(f"{path}: cannot be read ({error.strerror or error})") from error
    try:
        check_not_compressed(path, stream.peek(16)[:16])  # peek: a pipe (<(zcat ...)) too
    except BaseException:
        stream.close()
        raise
    return stream


# What a compressed file starts with, its kind and the command that writes it out as text
COMPRESSED_STARTS: dict[bytes, tuple[str, str]] = {
    b"\x1f\x8b": ("gzip", "gunzip -c"),
    **{  # "BZh", the block size, then a block's or the stream end's magic: "BZh" alone is text
        b"BZh" + level + block: ("bzip2", "bunzip2 -c")
        for level in (b"1", b"2", b"3", b"4", b"5", b"6", b"7", b"8", b"9")
        for block in (b"1AY&SY", b"\x17rE8P\x90")
    },
    b"\xfd7zXZ\x00": ("xz", "unxz -c"),
    b"(\xb5/\xfd": ("zstd", "zstd -dc"),
    b"PK\x03\x04": ("zip", "unzip -p"),
}
COMPRESSION_SUFFIXES: tuple[str, ...] = (".gz", ".bz2", ".xz", ".zst", ".zip")


def check_not_compressed(path: Path, start: bytes) -> None:
    """A compressed file where text is read (records.jsonl.gz, a download kept compressed)
    failed as "not UTF-8 text: it looks UTF-16 encoded" (its header holds a NUL byte) or as
    a line that is no JSON: say what it is and how to decompress it."""
    for magic, (kind, command) in COMPRESSED_STARTS.items():
        if start.startswith(magic):
            plain = (
                path.stem
                if path.suffix.lower() in COMPRESSION_SUFFIXES
                else f"{path.stem}.decompressed{path.suffix}"
            )
            raise RecordFileError(
                f"{path}: the file is {kind}-compressed, not text; decompress it first "
                f"(`{command} {path.name} > {plain}`) and give the decompressed file"
            )


def not_utf8_message(path: Path, line: int, error: UnicodeDecodeError) -> str:
    return (
        f"{path}, line {line}: not UTF-8 text ({error.reason}){_utf16_hint(error.object)}; "
        "re-save the file as UTF-8"
    )


UTF16_HINT = ": it looks UTF-16 encoded (Excel's 'Unicode Text', Windows PowerShell's `>`)"


def _utf16_hint(payload: bytes) -> str:
    """UTF-16 (a byte-order mark, or a NUL byte beside each ASCII character), the encoding of
    Excel's "Unicode Text" and of Windows PowerShell's `>`: said, since "invalid start byte"
    at line 1 does not tell the user which encoding to move away from."""
    start = bytes(payload[:200])
    if start.startswith((b"\xff\xfe", b"\xfe\xff")) or b"\x00" in start:
        return UTF16_HINT
    return ""


def nul_text_message(where: str) -> str:
    """For text that decoded as UTF-8 but holds NUL bytes: UTF-16 without a byte-order mark
    (its ASCII characters each beside a NUL) decodes without an error, and then failed as
    "not valid JSON" or as a header of columns named 'p\\x00r\\x00o\\x00...'."""
    return f"{where}: not UTF-8 text (it holds NUL bytes){UTF16_HINT}; re-save the file as UTF-8"


def utf8_error_message(path: Path, error: UnicodeDecodeError, compressed: bool = False) -> str:
    """Name the first line of `path` that is not UTF-8 (a reader's own error often only
    knows a position in some buffer); a compressed table's own lines are compressed bytes,
    with no line to name."""
    if compressed:
        return f"{path}: not UTF-8 text ({error.reason}); re-save the table as UTF-8"
    with path.open("rb") as stream:
        for line_number, raw in enumerate(stream, start=1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as line_error:
                return not_utf8_message(path, line_number, line_error)
    return f"{path}: not UTF-8 text ({error.reason}); re-save the file as UTF-8"


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
    first = True  # a first line that is no JSON: another kind of file, not a line to delete
    with open_for_reading(path) as stream:
        for line_number, raw in enumerate(stream, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise RecordFileError(not_utf8_message(path, line_number, error)) from error
            # the UTF-8 BOM some editors write: at the start of the file, or of each file
            # joined with `cat` (where "not valid JSON ...; delete that line" lost a good row)
            line = line.removeprefix("\ufeff")
            if not line.strip():
                continue
            if first and line.lstrip().startswith("["):
                # a JSON list (a .json saved under this name, or pretty-printed): "expected a
                # JSON object, got list" or "not valid JSON; fix that line" did not say so
                raise RecordFileError(
                    f"{path}, line {line_number}: the file holds a JSON list, not JSON Lines "
                    "(one JSON object a line, no enclosing [ ]); write each object on a line "
                    f"of its own, e.g. jq -c '.[]' {path.name} > {path.stem}.lines.jsonl"
                )
            try:
                value = json.loads(line)
            except json.JSONDecodeError as error:
                where = f"{path}, line {line_number}"
                if "\x00" in line:
                    raise RecordFileError(nul_text_message(where)) from error
                if _ends_lines_with_cr(line):
                    raise RecordFileError(
                        f"{where}: the lines end in a carriage return alone (CR, the line end "
                        "of classic Mac OS), so the whole file reads as one line; JSON Lines "
                        "ends each line in LF (or CRLF): re-save the file with LF line ends, "
                        f"e.g. tr '\\r' '\\n' < {path.name} > {path.stem}.lf{path.suffix}"
                    ) from error
                advice = (
                    "the file does not start as JSON Lines (one JSON object a line): check that "
                    "it is the file meant (a CSV or other table is imported with `fugu-lite data "
                    "import` first), or fix that line"
                    if first
                    else "fix or delete that line"
                )
                raise RecordFileError(
                    f"{path}, line {line_number}: not valid JSON ({error.msg} at column "
                    f"{error.colno}); {advice}"
                ) from error
            first = False
            if not isinstance(value, dict):
                raise RecordFileError(
                    f"{path}, line {line_number}: expected a JSON object, got "
                    f"{type(value).__name__}"
                )
            check_no_lone_surrogate(line, value, f"{path}, line {line_number}")
            yield line_number, value


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
        parts.append(f"{location}: {item['msg']}" if location else str(item["msg"]))
    return "; ".join(parts)


_FILE_DIGESTS: dict[tuple[str, int, int, int], str] = {}


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file, remembered by (path, size, mtime_ns, inode) in this process and
    in cache_root()/digests, so a weight file (a backbone's, a local worker's GGUF) is read
    once, not on every load; a file written again (another size, mtime or inode) is read
    again. A cache folder that cannot be written only costs the reading."""
    resolved = path.resolve()  # a hub snapshot's files are links into its blobs
    info = resolved.stat()
    key = (str(resolved), info.st_size, info.st_mtime_ns, info.st_ino)
    stamp = list(key)  # as JSON writes it back
    if key in _FILE_DIGESTS:
        return _FILE_DIGESTS[key]
    entry = cache_root() / "digests" / digest_file_name(str(resolved))
    digest = _cached_digest(entry, stamp)
    if digest is None:
        with resolved.open("rb") as handle:
            digest = hashlib.file_digest(handle, "sha256").hexdigest()
        with contextlib.suppress(OSError):  # an unwritable cache costs only reading again
            write_text_atomic(entry, json.dumps({"stamp": stamp, "sha256": digest}))
    _FILE_DIGESTS[key] = digest
    return digest


def _cached_digest(entry: Path, stamp: list) -> str | None:
    try:
        saved = json.loads(entry.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(saved, dict) or saved.get("stamp") != stamp:
        return None
    digest = saved.get("sha256")
    return digest if isinstance(digest, str) else None


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


LFS_POINTER_START = b"version https://git-lfs.github.com/spec/"


def is_lfs_pointer(path: Path) -> bool:
    """Whether a file is a Git LFS pointer (what a clone without git-lfs holds in place of a
    large file) rather than the file itself."""
    try:
        with path.open("rb") as handle:
            return handle.read(len(LFS_POINTER_START)) == LFS_POINTER_START
    except OSError:
        return False


def digest_file_name(resolved_path: str) -> str:
    """The name of the file in cache_root()/digests that keeps this file's SHA-256."""
    return f"{sha256_text(resolved_path)[:24]}.json"
