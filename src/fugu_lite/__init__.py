"""fugu-lite: an open, learned LLM orchestrator."""

import hashlib
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

try:
    __version__ = version("fugu-lite")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0"


def sources_digest(root: Path, patterns: tuple[str, ...] = ("**/*.py",)) -> str:
    """The SHA-256 of the files under `root` that match `patterns` (by default every Python
    file): each one's relative path and bytes."""
    digest = hashlib.sha256()
    for path in sorted({path for pattern in patterns for path in root.glob(pattern)}):
        content = path.read_bytes()
        digest.update(f"{path.relative_to(root).as_posix()}\0{len(content)}\0".encode())
        digest.update(content)
    return digest.hexdigest()


@cache
def code_digest() -> str:
    """sources_digest of this package: a checkpoint records it beside __version__, since a
    checkout or an editable install changes its code under one version string."""
    return sources_digest(Path(__file__).parent)
