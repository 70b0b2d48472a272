"""The exclusive lock on a collection's records and call log: one `collect` at a time."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from .errors import CollectError


@contextmanager
def exclusive_files(paths: list[Path]) -> Iterator[None]:
    """Hold an exclusive lock on the records and the call log (each created if missing, and
    removed again if the run leaves it empty): a second `collect` on either would append
    every record twice and pay for every call twice. The lock goes with the process, so a
    run killed outright never leaves one behind."""
    if sys.platform == "win32":  # pragma: no cover - no flock there: unlocked, as before
        yield
        return
    import fcntl

    with ExitStack() as stack:
        for path in dict.fromkeys(path.absolute() for path in paths):
            created = not path.exists()
            descriptor = open_for_appending(path)
            stack.callback(os.close, descriptor)
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise CollectError(
                    f"{path} is in use by another `fugu-lite collect`; wait for it to finish "
                    "(or stop it), then run this again: two runs on one records file or call "
                    "log would write every record twice and pay for every call twice"
                ) from None
            if created:  # removed before the lock goes, so no other run holds it
                stack.callback(_remove_if_empty, path)
        yield


def open_for_appending(path: Path) -> int:
    """A descriptor of `path` open for appending (the file and its folders created if
    missing); a path that cannot be opened so is a CollectError naming it."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o666)
    except OSError as error:
        raise CollectError(
            f"cannot open {path} for writing: {error.strerror or error}; check that its "
            "folder is there (a link into a disk that is not mounted?) and that you may write "
            "it, or give another -o (or --log) path"
        ) from error


def _remove_if_empty(path: Path) -> None:
    if path.exists() and path.stat().st_size == 0:
        path.unlink()
