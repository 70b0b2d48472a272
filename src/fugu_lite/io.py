"""JSON / JSONL reading and atomic, durable writing."""

from __future__ import annotations

import atexit
import contextlib
import errno
import hashlib
import json
import logging
import os
import re
import shutil
import socket
import stat
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)
logger = logging.getLogger(__name__)


class RecordFileError(ValueError):
    """A data file could not be read; the message names the file and the line."""


def cache_root() -> Path:
    """fugu-lite's cache folder: $FUGU_LITE_CACHE_DIR, else ~/.cache/fugu-lite."""
    return Path(os.environ.get("FUGU_LITE_CACHE_DIR", Path.home() / ".cache" / "fugu-lite"))


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


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write UTF-8 text atomically and durably (see write_bytes_atomic)."""
    write_bytes_atomic(path, text.encode("utf-8"))


def read_utf8_text(path: Path) -> str:
    """The whole file as text; a file that is not UTF-8 is a RecordFileError naming the line."""
    with open_for_reading(path) as stream:
        payload = stream.read()
    try:
        return payload.decode("utf-8")
    except UnicodeDecodeError as error:
        line = payload[: error.start].count(b"\n") + 1
        raise RecordFileError(not_utf8_message(path, line, error)) from error


def open_for_reading(path: Path) -> BinaryIO:
    """The file opened in binary mode; a missing path, a folder or an unreadable file is a
    RecordFileError naming it."""
    if path.is_dir():
        raise RecordFileError(f"{path} is a directory, not a file; give the path of the file")
    if means_stdin(path):
        raise RecordFileError(STDIN_NOT_READ)
    try:
        return path.open("rb")
    except FileNotFoundError as error:
        raise RecordFileError(f"{path}: file not found") from error
    except OSError as error:
        raise RecordFileError(f"{path}: cannot be read ({error.strerror or error})") from error


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


def utf8_error_message(path: Path, error: UnicodeDecodeError) -> str:
    """Name the first line of `path` that is not UTF-8 (a reader's own error often only
    knows a position in some buffer)."""
    with path.open("rb") as stream:
        for line_number, raw in enumerate(stream, start=1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as line_error:
                return not_utf8_message(path, line_number, line_error)
    return f"{path}: not UTF-8 text ({error.reason}); re-save the file as UTF-8"


def write_bytes_atomic(path: str | Path, payload: bytes) -> None:
    """Write to a temporary file in the same folder, fsync, then rename over the target:
    a crash or kill leaves the old file or the new one, never a torn one. The file keeps
    the mode of the file it replaces; a new file gets the usual 0o666 minus the umask."""
    with atomic_output(path) as stream:
        stream.write(payload)


@contextlib.contextmanager
def atomic_output(path: str | Path) -> Iterator[BinaryIO]:
    """A binary stream that becomes `path` as write_bytes_atomic writes it, once the block ends
    without an error (an error or Ctrl-C leaves the old file): for output written piece by
    piece, never held whole in memory."""
    path = Path(path)
    if path.exists() and not path.is_file() and not path.is_dir():
        # os.replace would put a plain file in place of /dev/stdout or a FIFO (as root, for
        # every later user of /dev/stdout too), and nothing would reach the reader
        raise OSError(
            errno.EINVAL,
            f"{path} is a device, pipe or socket, not a file (a write would replace it)",
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_dead_writers_files(path.parent)
    mode = _mode_for(path)
    handle, temporary = tempfile.mkstemp(
        dir=path.parent, prefix=writer_prefix(path.name), suffix=".tmp"
    )
    try:
        os.fchmod(handle, mode)  # mkstemp creates 0o600
        with os.fdopen(handle, "wb") as stream:
            yield stream
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


# A temporary file or folder named by writer_prefix: its writer's host and pid, then the 8
# random characters of mkstemp/mkdtemp (or 8 hex digits) and the suffix fugu-lite gives it. The
# whole name must match: a user's own hidden file beside an output (`.report.w-2024-12.txt`)
# is none of ours.
_WRITER_NAME = re.compile(
    r"^\..+\.w-(?P<host>[A-Za-z0-9-]*)-(?P<pid>[0-9]+)\.[a-z0-9_]{8}(?:\.tmp|\.partial|\.log)?$"
)
# What earlier versions named them (without the writer): removed only once STALE_AFTER_S old,
# and only in fugu-lite's own cache folders (earlier_versions=True): beside a user's output, a
# `.notes.20241201.tmp` of theirs has this shape too.
_UNNAMED_WRITER = re.compile(
    r"^\..+(\.[a-z0-9_]{8}\.tmp|\.[0-9a-f]{32}\.partial|-layer-?[0-9]+-[0-9a-f]{16}\.[a-z0-9_]{8})$"
)
STALE_AFTER_S = 24 * 3600  # no write takes this long: older temporaries are leftovers
_SWEPT_FOLDERS: set[tuple[Path, bool]] = set()


def writer_prefix(name: str) -> str:
    """The start of a temporary name for `name` written by this process: hidden, naming this
    host and pid, so that a later run can tell a killed writer's leftover from a live one's."""
    return f".{name}.w-{_host()}-{os.getpid()}."


def remove_dead_writers_files(
    folder: str | Path,
    stale_after_s: float | None = STALE_AFTER_S,
    *,
    earlier_versions: bool = False,
) -> None:
    """Delete the temporary files and folders (writer_prefix) in `folder` that a killed run
    left: those of a pid not running on this host, and any older than `stale_after_s` (a pid
    reused since, another host's; None: never by age, for a folder holding files that live
    as long as their run, like a server's log). Runs sharing the folder keep their own.
    `earlier_versions`: also the unnamed temporaries of earlier versions once `stale_after_s`
    old, for a folder that only fugu-lite writes in (a cache). Once per process and folder; a
    file that cannot be removed stays."""
    folder = Path(folder)
    if (folder, earlier_versions) in _SWEPT_FOLDERS:
        return
    _SWEPT_FOLDERS.add((folder, earlier_versions))
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    for entry in entries:
        if not _is_leftover(entry.name, entry.path, stale_after_s, earlier_versions):
            continue
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):  # another user's, in a shared folder
                Path(entry.path).unlink(missing_ok=True)


def _is_leftover(name: str, path: str, stale_after_s: float | None, earlier_versions: bool) -> bool:
    written = _WRITER_NAME.match(name)
    unnamed = earlier_versions and stale_after_s is not None and _UNNAMED_WRITER.match(name)
    if written is None and not unnamed:
        return False
    try:
        age = time.time() - os.lstat(path).st_mtime
    except OSError:
        return False
    if stale_after_s is not None and age > stale_after_s:
        return True
    if written is None or written["host"] != _host():
        return False
    return not _pid_alive(int(written["pid"]))


def user_temp_folder() -> Path:
    """This user's fugu-lite folder in the system temp folder (`fugu-lite-UID` in
    tempfile.gettempdir(), mode 0o700), for temporaries named by writer_prefix that are not
    beside an output (sandbox folders, server logs); what killed runs left there is removed
    first. Never /tmp itself: other programs' files there are none of our business."""
    folder = Path(tempfile.gettempdir()) / f"fugu-lite-{os.getuid()}"
    with contextlib.suppress(OSError):
        folder.mkdir(mode=0o700)
    if not _is_private_folder(folder):
        folder = _own_temp_folder(folder)
    remove_dead_writers_files(folder, stale_after_s=None)
    return folder


def _is_private_folder(folder: Path) -> bool:
    """A folder (not a symlink) of this user, made 0o700 if it was not: in a shared /tmp,
    another user can have made the name first, as a folder or a symlink."""
    try:
        handle = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        info = os.fstat(handle)
        if info.st_uid != os.getuid():
            return False
        if stat.S_IMODE(info.st_mode) != 0o700:
            os.fchmod(handle, 0o700)
        return True
    finally:
        os.close(handle)


_OWN_TEMP_FOLDERS: dict[Path, Path] = {}


def _own_temp_folder(taken: Path) -> Path:
    """A new private folder for this process alone, used when `taken` is not ours."""
    if taken not in _OWN_TEMP_FOLDERS:
        logger.warning(
            "%s is not a private folder of this user (another user made it?): this run keeps "
            "its temporary files in a folder of its own, which a run killed outright leaves "
            "behind. Remove %s, or set TMPDIR to a folder of yours.",
            taken,
            taken,
        )
        folder = Path(tempfile.mkdtemp(prefix=f"{taken.name}-", dir=taken.parent))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        _OWN_TEMP_FOLDERS[taken] = folder
    return _OWN_TEMP_FOLDERS[taken]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    except (OverflowError, OSError):  # not a pid this system can have
        return False
    return True


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname())[:32]


def remove_files(folder: str | Path, names: Iterable[str]) -> None:
    """Delete these files of `folder` where present (the previous run's outputs)."""
    for name in names:
        (Path(folder) / name).unlink(missing_ok=True)


def write_tensors_atomic(
    path: str | Path, tensors: dict[str, Any], metadata: dict[str, str] | None = None
) -> None:
    """A safetensors file written like write_bytes_atomic. (safetensors' own save_file
    creates 0o600 files, which the other users of a shared checkpoint or cache cannot read.)"""
    from safetensors.torch import save  # imports torch: only for the callers that have it

    write_bytes_atomic(path, save(tensors, metadata=metadata))


def give_new_file_mode(path: str | Path) -> None:
    """Set the mode a new file gets from the umask (0o666 minus it) on a file that some
    library created 0o600."""
    os.chmod(path, 0o666 & ~_umask())


def _mode_for(path: Path) -> int:
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return 0o666 & ~_umask()


def _umask() -> int:
    # /proc avoids os.umask's set-and-restore, which races with other threads creating files
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    current = os.umask(0o022)
    os.umask(current)
    return current


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
            if line_number == 1:
                line = line.removeprefix("\ufeff")  # the UTF-8 BOM some editors write
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
    entry = cache_root() / "digests" / f"{_sha256_text(str(resolved))[:24]}.json"
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


def _sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
