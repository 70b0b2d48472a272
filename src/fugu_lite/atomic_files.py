"""Atomic, durable writes (a temporary file beside the target, fsync, rename, fsync of the
folder; appends whole or not at all), the modes the written files get, and the removal of the
temporaries that killed writers leave behind."""

from __future__ import annotations

import atexit
import contextlib
import errno
import logging
import os
import re
import shutil
import socket
import stat
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

logger = logging.getLogger(__name__)


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write UTF-8 text atomically and durably (see write_bytes_atomic)."""
    write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path: str | Path, payload: bytes) -> None:
    """Write to a temporary file in the same folder, fsync, then rename over the target and
    fsync the folder: a crash, kill or power loss leaves the old file or the new one, never a
    torn one. The file keeps the mode of the file it replaces; a new file gets the usual
    0o666 minus the umask."""
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
    if path.is_symlink():
        # the file it names is written: a rename over the link itself put a plain file in its
        # place, and the linked (shared) file kept its old content
        path = Path(os.path.realpath(path))
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
    _sync_folder(path.parent)


def _sync_folder(folder: Path) -> None:
    """fsync a folder, so that a rename in it outlives a power loss (the file's own fsync
    does not write its new name). Where folders cannot be synced (some file systems refuse
    it), the write stays done."""
    with contextlib.suppress(OSError):
        descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)


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


def append_whole(path: str | Path, data: bytes) -> None:
    """Append `data` to `path` and fsync; a write that fails leaves the file as it was."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)
    try:
        size = os.lseek(descriptor, 0, os.SEEK_END)
        try:
            while data:
                data = data[os.write(descriptor, data) :]
            os.fsync(descriptor)
        except OSError:
            os.ftruncate(descriptor, size)
            raise
    finally:
        os.close(descriptor)


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
            remove_tree(entry.path)
        else:
            with contextlib.suppress(OSError):  # another user's, in a shared folder
                Path(entry.path).unlink(missing_ok=True)


_FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW


def remove_tree(folder: str | Path) -> None:
    """shutil.rmtree(folder, ignore_errors=True) for a tree of any depth: Python 3.11's
    recurses, and raised RecursionError on folders nested deeper than the recursion limit
    (code in the sandbox can make them). The folders inside are moved up into `folder` and
    removed from there, two open at most; what cannot be removed stays."""
    try:
        top = os.open(folder, _FOLDER_FLAGS)
    except OSError:
        return
    try:
        previous: list[str] = []
        while (names := _sorted_names(top)) and names != previous:  # until nothing changes
            for name in names:
                _remove_entry(top, name)
            previous = names
    finally:
        os.close(top)
    with contextlib.suppress(OSError):
        os.rmdir(folder)


def _sorted_names(folder: int) -> list[str]:
    try:
        return sorted(os.listdir(folder))
    except OSError:
        return []


def _remove_entry(top: int, name: str) -> None:
    """Remove `name` of the open folder `top`, a folder's own folders moved up into `top`."""
    with contextlib.suppress(OSError):
        if not stat.S_ISDIR(os.stat(name, dir_fd=top, follow_symlinks=False).st_mode):
            os.unlink(name, dir_fd=top)
            return
        with contextlib.suppress(OSError):  # the code may have made it unreadable
            os.chmod(name, 0o700, dir_fd=top)
        _move_folders_up(top, name)
        os.rmdir(name, dir_fd=top)


def _move_folders_up(top: int, name: str) -> None:
    """Delete the files of `top`'s folder `name` and move its folders into `top` (each under
    a free name)."""
    inner = os.open(name, _FOLDER_FLAGS, dir_fd=top)
    try:
        for entry in os.scandir(inner):
            if entry.is_dir(follow_symlinks=False):
                os.rename(entry.name, _free_name(top), src_dir_fd=inner, dst_dir_fd=top)
            else:
                os.unlink(entry.name, dir_fd=inner)
    finally:
        os.close(inner)


def _free_name(folder: int) -> str:
    """A name no entry of the open `folder` has."""
    while True:
        name = f".moved-{os.urandom(6).hex()}"
        try:
            os.stat(name, dir_fd=folder, follow_symlinks=False)
        except FileNotFoundError:
            return name


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
    # Only a name already taken is another user's: a full disk's error is the caller's to
    # report, not a warning that another user made the folder.
    with contextlib.suppress(FileExistsError):
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
        atexit.register(remove_tree, folder)
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


def move_folder_into_place(staging: Path, target: Path, made_last: str) -> None:
    """Rename a complete staging folder to `target`. A concurrent writer's finished folder
    there (one holding `made_last`, the file a folder gets last) wins; one without it (a file
    deleted from it, a cache clear stopped half-way) is nothing anyone reads: it is replaced."""
    try:
        staging.rename(target)
    except OSError:
        if not (target / made_last).exists():
            shutil.rmtree(target, ignore_errors=True)
            with contextlib.suppress(OSError):  # a concurrent writer's may be there now
                staging.rename(target)
            if not (target / made_last).exists():
                raise


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
