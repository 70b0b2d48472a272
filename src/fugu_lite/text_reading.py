"""Opening a data file to read as text, and the errors that say why it cannot be read
(RecordFileError): a missing path, a folder, `-` (stdin), a compressed file, text that is not
UTF-8 (with a hint for UTF-16), NUL bytes, a lone surrogate escape, JSON's own reason."""

from __future__ import annotations

import errno
import json
import os
import sys
from io import BufferedReader
from pathlib import Path
from typing import Any


class RecordFileError(ValueError):
    """A data file could not be read; the message names the file and the line."""


STDIN_NOT_READ = "- (standard input) is not read here: save the input to a file and give its path"


def json_error_reason(error: json.JSONDecodeError) -> str:
    """Why JSON was refused, to be followed by where: some of json's reasons end in "at"
    ("Invalid control character at"), which read "at at line 1" before a position."""
    return error.msg.removesuffix(" at")


def beyond_python_message(where: str, error: ValueError | RecursionError) -> str:
    """Why json.loads refused JSON that is valid: an integer longer than Python converts, or
    nesting deeper than its recursion limit; json raised these past its JSONDecodeError, so
    they ended a command in a traceback naming no file or line."""
    if isinstance(error, RecursionError):
        return (
            f"{where}: JSON nested too deeply to be read (lists or objects inside each other "
            "about a thousand levels deep); write that value flatter"
        )
    return (
        f"{where}: an integer of more than {sys.get_int_max_str_digits()} digits, more than "
        "Python reads; write it as a string (in quotes)"
    )


def means_stdin(path: Path) -> bool:
    """`-` given as a file to read where no file has that name: stdin was meant, which only
    `route -` reads ("-: file not found" left users puzzled)."""
    return str(path) == "-" and not path.exists()


def leads_back_to_itself(path: Path) -> bool:
    """Whether following `path`'s links comes back to one of them (`ln -s loop loop`, or
    links pointing at each other), so it names nothing."""
    try:
        os.stat(path)
    except OSError as error:
        return error.errno == errno.ELOOP
    return False


def broken_link(path: Path) -> str:
    """What a path that is a symbolic link leading nowhere is, to follow `PATH is`: one that
    leads back to itself (`ln -s loop loop`), or one to a path that is not there; '' for any
    other path. Path.exists() is False for both, which read as "does not exist"."""
    if leads_back_to_itself(path):
        return "a link that leads back to itself (a loop of symbolic links)"
    if not path.is_symlink() or path.exists():
        return ""
    return (
        f"a link to {os.readlink(path)}, which is not there (a disk not mounted, a folder moved?)"
    )


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
        f"{path}, line {line}: not UTF-8 text ({error.reason}){utf16_hint(error.object)}; "
        "re-save the file as UTF-8"
    )


UTF16_HINT = ": it looks UTF-16 encoded (Excel's 'Unicode Text', Windows PowerShell's `>`)"


def utf16_hint(payload: bytes) -> str:
    """UTF-16 (a byte-order mark, or a NUL byte beside each ASCII character), the encoding of
    Excel's "Unicode Text" and of Windows PowerShell's `>`: said, since "invalid start byte"
    at line 1 does not tell the user which encoding to move away from."""
    start = bytes(payload[:200])
    if start.startswith((b"\xff\xfe", b"\xfe\xff")) or b"\x00" in start:
        return UTF16_HINT
    return ""


def nul_text_message(where: str, line: str = "") -> str:
    """For text that decoded as UTF-8 but holds NUL bytes: UTF-16 without a byte-order mark
    (its ASCII characters each beside a NUL) decodes without an error, and then failed as
    "not valid JSON" or as a header of columns named 'p\\x00r\\x00o\\x00...'. A `line`
    whose NULs are all before or after its text is no encoding's: it is the zero-filled end
    a power cut leaves of a file being appended to, which was called UTF-16."""
    if line and "\x00" not in line.strip("\x00\r\n"):
        return (
            f"{where}: NUL bytes, not text: what a crash or power cut leaves where a file "
            "was being written; delete them (tr -d '\\000' writes the file without them) "
            "and check that the rows beside them are whole"
        )
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
