"""What fugu-lite keeps in its cache folder, and which of it this installation can no longer
read (`fugu-lite cache list|clear`).

Every cache is keyed by what it was computed from, so nothing is ever overwritten: a backbone
folder edited or removed, a newer hub download or embedded package, another torch or
transformers release, or a new feature format each start a new entry beside the old one,
which stays on disk (an ONNX export is ~76 MB for MiniLM at layer 4 and its int8 copy ~55 MB,
a dequantized SmolLM2 540 MB).
`digests/` remembers the SHA-256 of backbone weight files by path, size, modification time,
inode and change time:
one small file per weight file ever checked, read again only while that file is unchanged.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
from contextlib import suppress
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ValidationError
from rich.console import Console
from rich.table import Table

from .atomic_files import remove_dead_writers_files
from .backbone_identity import (
    EMBEDDED_BACKBONES,
    TINY_RANDOM,
    backbone_identity,
    hub_snapshot,
    safe_name,
)
from .config import ModelConfig
from .config_errors import ConfigError
from .feature_cache import feature_cache_key
from .file_digests import digest_file_name, digest_stamp
from .onnx_export import SETTINGS_FILE, export_folder, export_settings
from .text import console_text
from .text_reading import broken_link

Status = Literal["current", "stale", "unknown"]
Kind = Literal["features", "onnx", "backbones", "digests"]
CACHE_KINDS: tuple[Kind, ...] = ("features", "onnx", "backbones", "digests")
DIGEST_NAME = re.compile(r"^[0-9a-f]{24}\.json$")


class CacheEntry(BaseModel):
    """One cached item: `stale` = this installation never reads it again (its key is not the
    one its settings give now); `unknown` = it cannot tell (written by another version, or its
    backbone's package is not installed), so only `clear --all` removes it."""

    kind: Kind
    path: Path
    size_bytes: int
    what: str
    status: Status
    reason: str = ""


def cache_entries(root: Path) -> list[CacheEntry]:
    """Every feature cache, ONNX export, dequantized backbone copy and weight-file digest
    under `root`."""
    judges = {"features": _feature_entry, "onnx": _export_entry, "backbones": _copy_entry,
              "digests": _digest_entry}  # fmt: skip
    entries = []
    for kind in CACHE_KINDS:
        try:
            children = sorted((root / kind).iterdir())
        except OSError:  # none of this kind, or a folder this user cannot read
            children = []
        for child in children:
            nowhere = broken_link(child) if kind != "digests" else ""
            if nowhere:  # its disk not mounted, maybe: kept but by --all
                entries.append(CacheEntry(kind=kind, path=child, size_bytes=0, what="?",
                                          status="unknown", reason=nowhere))  # fmt: skip
            elif _is_item(kind, child):
                status, what, reason = judges[kind](child)
                entries.append(CacheEntry(kind=kind, path=child, size_bytes=_size(child),
                                          what=what, status=status, reason=reason))  # fmt: skip
    return entries


def _is_item(kind: Kind, child: Path) -> bool:
    """A folder (a writer's temporary one starts with "."), or for digests a file named as
    backbones.file_sha256 names them: nothing else in a --cache-dir is taken for one."""
    if kind == "digests":
        return DIGEST_NAME.match(child.name) is not None and child.is_file()
    return child.is_dir() and not child.name.startswith(".")


def foreign_names(root: Path) -> list[str]:
    """What `root` holds besides fugu-lite's caches (and `data/`, the downloaded datasets):
    a folder given as --cache-dir by mistake (a project with a `features/` folder of its
    own), which `clear --all` must not empty."""
    try:
        names = sorted(child.name for child in root.iterdir())
    except OSError:
        return []
    return [n for n in names if n not in (*CACHE_KINDS, "data") and not n.startswith(".")]


def remove_entries(entries: list[CacheEntry]) -> int:
    """Delete these entries; the bytes freed. An entry that is a symbolic link (a cache moved
    to another disk) is the link alone: what it points to may not be fugu-lite's to delete."""
    freed = 0
    for entry in entries:
        if entry.path.is_symlink():
            with suppress(OSError):
                entry.path.unlink()
            continue
        if entry.path.is_dir():
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            with suppress(OSError):
                entry.path.unlink()
        if not entry.path.exists():
            freed += entry.size_bytes
    return freed


def remove_killed_writers_files(root: Path) -> None:
    """Remove what runs killed outright (kill -9, the out-of-memory killer) left half-written
    in the cache: the staging folders of an ONNX export, its int8 copy or a dequantized copy
    (~540 MB for SmolLM2), a shard's temporary file. No entry names them, so only a later write
    to the same folder removed them; a live run's are kept (see remove_dead_writers_files)."""
    for kind in CACHE_KINDS:
        remove_dead_writers_files(root / kind, earlier_versions=True)
        try:
            children = list((root / kind).iterdir())
        except OSError:
            continue
        for child in children:
            if child.is_dir() and not child.is_symlink():
                remove_dead_writers_files(child, earlier_versions=True)


def _feature_entry(folder: Path) -> tuple[Status, str, str]:
    try:
        settings = json.loads((folder / "settings.json").read_text(encoding="utf-8"))
        cfg = ModelConfig.model_validate(settings)
    except (OSError, ValueError, ValidationError):
        return "unknown", "?", "no settings this version reads"
    what = f"{cfg.backbone}, layer {cfg.layer}, {cfg.pooling}, {cfg.quantization}"
    absent = _backbone_absent(cfg.backbone)
    if absent is not None:
        return absent[0], what, absent[1]
    try:
        key = feature_cache_key(cfg)
    except (OSError, RuntimeError, ConfigError) as error:  # ConfigError: its config.json
        return "unknown", what, str(error)
    if ".stale-" in folder.name:
        return "stale", what, "set aside: the features moved with an upgrade"
    if key != folder.name:
        return "stale", what, "its backbone or the feature format changed since"
    return "current", what, ""


class ExportSettingsShape(BaseModel):
    """The keys of an export's settings.json that name it: a hand-edited `"layer": 1e400` or
    a `backbone_name` of another type ended `cache list` in an OverflowError or TypeError."""

    layer: int
    backbone_name: str | None = None


def _export_entry(folder: Path) -> tuple[Status, str, str]:
    try:
        settings = json.loads((folder / SETTINGS_FILE).read_text(encoding="utf-8"))
        shape = ExportSettingsShape.model_validate(settings)
    except (OSError, ValueError):  # a ValidationError is a ValueError
        return "unknown", "?", "no settings this version reads"
    layer = shape.layer
    name = shape.backbone_name or _embedded_name_of(folder.name.split("-layer")[0])
    what = f"{name or '?'}, layer {layer}"
    now = export_settings("", layer)
    versions = [key for key in ("torch", "transformers", "format", "opset")
                if settings.get(key) != now[key]]  # fmt: skip
    if versions:
        return "stale", what, f"made for another {', '.join(versions)}"
    if name is None:
        return "unknown", what, "its backbone is not named in its settings"
    absent = _backbone_absent(name)
    if absent is not None:
        return absent[0], what, absent[1]
    identity, unreadable = _identity_or_why_not(name)
    if identity is None:
        return "unknown", what, unreadable
    # by name: the folder export_folder gives is under $FUGU_LITE_CACHE_DIR, not --cache-dir
    if export_folder(name, identity, layer).name != folder.name:
        return "stale", what, "its backbone changed since"
    return "current", what, ""


def _copy_entry(folder: Path) -> tuple[Status, str, str]:
    """A dequantized copy of an embedded GGUF backbone (backbones._load_gguf_cached)."""
    for name, embedded in EMBEDDED_BACKBONES.items():
        if embedded.gguf_file is None or not folder.name.startswith(f"{name}_"):
            continue
        absent = _backbone_absent(name)
        if absent is not None:
            return absent[0], name, absent[1]
        identity, unreadable = _identity_or_why_not(name)
        if identity is None:
            return "unknown", name, unreadable
        if folder.name == safe_name(identity):
            return "current", name, ""
        return "stale", name, "its package's weights changed since"
    return "unknown", "?", "not a backbone this version embeds"


def _digest_entry(path: Path) -> tuple[Status, str, str]:
    """A weight file's SHA-256 as backbones.file_sha256 keeps it: read again only while the
    file at its path keeps its size, modification time, inode and change time (else computed
    anew)."""
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
        file_path, _size, _mtime_ns, _inode, _ctime_ns = stamp = saved["stamp"]
    except OSError as error:
        return "unknown", "?", f"cannot be read ({error.strerror or error})"
    except (ValueError, KeyError, TypeError):
        return "stale", "?", "not a digest this version reads"
    if path.name != digest_file_name(str(file_path)):
        return "stale", str(file_path), "not a digest this version reads"
    try:
        current = digest_stamp(Path(file_path))
    except OSError:
        return "stale", str(file_path), "its file is gone"
    if list(current) != stamp:
        return "stale", str(file_path), "its file changed since"
    return "current", str(file_path), ""


def _backbone_absent(name: str) -> tuple[Status, str] | None:
    """Why a cache of this backbone cannot be judged or read here; None when it can. A name
    that is neither embedded nor an absolute folder is a hub id (or a folder relative to a
    working directory of an earlier version): judged only while its snapshot is here."""
    embedded = EMBEDDED_BACKBONES.get(name)
    if embedded is not None:
        found = importlib.util.find_spec(embedded.package) is not None
        return None if found else ("unknown", f"package {embedded.package} not installed")
    if name == TINY_RANDOM:
        return None
    if Path(name).is_absolute():
        return None if Path(name).exists() else ("stale", "its backbone folder is gone")
    if hub_snapshot(name) is None:
        return "unknown", "not in the local Hugging Face cache"
    return None


def _identity_or_why_not(name: str) -> tuple[str | None, str]:
    """The backbone's identity, or None and why it cannot be read: a file of its folder that
    cannot be read, an embedded package broken on disk (a weight file linking to nowhere, an
    uninstall that left its folder without __init__.py: RuntimeError)."""
    try:
        return backbone_identity(name), ""
    except (OSError, RuntimeError) as error:
        return None, f"its backbone cannot be read ({error})"


def _embedded_name_of(readable: str) -> str | None:
    """The backbone of an export folder named before its settings named it (embedded ones)."""
    names = [*EMBEDDED_BACKBONES, TINY_RANDOM]
    return next((name for name in names if readable == name.replace("-", "_")), None)


def _size(folder: Path) -> int:
    if folder.is_file():  # a digest
        return folder.stat().st_size
    total = 0
    for path in folder.rglob("*"):
        try:
            if path.is_file() and not path.is_symlink():
                total += path.stat().st_size
        except OSError:
            continue
    return total


def print_entries(entries: list[CacheEntry], root: Path, console: Console) -> None:
    """One row per cached item, then what `fugu-lite cache clear` would free."""
    if not entries:
        console.print(f"nothing cached in {root}", markup=False, soft_wrap=True)
        return
    table = Table()
    for column in ("status", "kind", "size", "made for", "folder"):
        table.add_column(column, overflow="fold", justify="right" if column == "size" else "left")
    digests: dict[tuple[Status, str], list[CacheEntry]] = {}
    for entry in entries:
        if entry.kind == "digests":  # hundreds of tiny files: one row per status and reason
            digests.setdefault((entry.status, entry.reason), []).append(entry)
            continue
        table.add_row(_status(entry.status, entry.reason), entry.kind, megabytes(entry.size_bytes),
                      console_text(entry.what), console_text(entry.path.name))  # fmt: skip
    for (status, reason), group in sorted(digests.items()):
        size = megabytes(sum(entry.size_bytes for entry in group))
        what = f"{len(group)} weight file{'s' * (len(group) != 1)}"
        table.add_row(_status(status, reason), "digests", size, what, "digests/")
    console.print(table)
    stale = [entry for entry in entries if entry.status == "stale"]
    total = sum(entry.size_bytes for entry in entries)
    console.print(
        f"{len(entries)} cached item{'s' * (len(entries) != 1)} in {root}, {megabytes(total)}; "
        "stale (never read again by this installation): "
        f"{len(stale)}, {megabytes(sum(e.size_bytes for e in stale))}"
        + (": `fugu-lite cache clear` removes them" if stale else ""),
        markup=False,
        soft_wrap=True,
    )


def _status(status: Status, reason: str) -> str:
    """The status column, its reason as text (a path or error in it is no rich markup)."""
    return console_text(f"{status} ({reason})" if reason else status)


def megabytes(size: int) -> str:
    return f"{size / 1e6:,.1f} MB"
