"""fugu-lite's cache folder, the SHA-256 of files (remembered in that folder's digests/) and
the check for a Git LFS pointer in place of a large file."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path

from .atomic_files import write_text_atomic

CACHE_DIR_ENV = "FUGU_LITE_CACHE_DIR"


def cache_root() -> Path:
    """fugu-lite's cache folder: $FUGU_LITE_CACHE_DIR, else ~/.cache/fugu-lite. A `~` of the
    variable is the home folder (set where no shell expands it: a service file, a container's
    env, quoted), not a folder named `~` in the working directory. An empty one is unset, as
    XDG's are (`FUGU_LITE_CACHE_DIR=` in an env file): as Path('') it was the working
    directory, which got features/, onnx/ and data/ put in it unasked."""
    named = os.environ.get(CACHE_DIR_ENV, "")
    return Path(named).expanduser() if named.strip() else Path.home() / ".cache" / "fugu-lite"


DigestStamp = tuple[str, int, int, int, int]  # path, size, mtime_ns, inode, ctime_ns
_FILE_DIGESTS: dict[DigestStamp, str] = {}


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file, remembered by (path, size, mtime_ns, inode, ctime_ns) in this
    process and in cache_root()/digests, so a weight file (a backbone's, a local worker's
    GGUF) is read once, not on every load; a file written again (another size, mtime, inode
    or ctime) is read again. Its ctime too: a file written over in place with its size and
    mtime kept (`cp -p`, `rsync --inplace -t`) differs in that alone, as gguf_version says;
    a chmod also moves it, costing only a reading again. A cache folder that cannot be
    written only costs the reading."""
    resolved = path.resolve()  # a hub snapshot's files are links into its blobs
    key = digest_stamp(resolved)
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


def digest_stamp(resolved: Path) -> DigestStamp:
    """What a file's remembered digest is kept under (file_sha256): its resolved path and
    what tells the file there from another written later."""
    info = resolved.stat()
    return str(resolved), info.st_size, info.st_mtime_ns, info.st_ino, info.st_ctime_ns


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
    """The name of the file in cache_root()/digests that keeps this file's SHA-256. By the
    path's bytes: a name that is not UTF-8 (a Latin-1 file in a backbone folder, a mount in
    another encoding) is text with surrogate escapes, which sha256_text cannot encode."""
    return f"{hashlib.sha256(os.fsencode(resolved_path)).hexdigest()[:24]}.json"
