"""`fugu-lite cache list` and `cache clear`: fugu-lite's caches and their status."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ..file_digests import CACHE_DIR_ENV
from ..text import console_text
from .common import (
    command_group,
    console,
    err_console,
    fail,
    non_empty_path,
    print_result,
    stopped_cleanly,
)

if TYPE_CHECKING:
    from ..caches import CacheEntry

cache_app = command_group(
    "See and clear fugu-lite's caches (features, ONNX exports, dequantized backbones, "
    "weight-file digests)."
)


CacheDirOption = Annotated[
    Path | None,
    typer.Option(
        "--cache-dir",
        parser=non_empty_path("give the cache folder, or leave --cache-dir out for the default"),
        metavar="<path>",
        help="The cache folder: default $FUGU_LITE_CACHE_DIR, else ~/.cache/fugu-lite (a "
        "config's model.cache_dir holds only that config's features).",
    ),
]


def cache_folder_or_fail(cache_dir: Path | None) -> Path:
    from ..file_digests import cache_root

    root = cache_dir or cache_root()
    if root.exists() and not root.is_dir():
        fail(not_a_folder(root, cache_dir is not None))
    if cache_dir is not None and not root.exists():  # a mistyped one said 'nothing cached'
        fail(
            f"--cache-dir {root} does not exist; give the cache folder (default "
            f"$FUGU_LITE_CACHE_DIR, else ~/.cache/fugu-lite: here {cache_root()})"
        )
    if is_one_kinds_folder(root):  # never the default folder, named fugu-lite
        fail(one_kinds_folder(root, cache_dir is not None))
    return root


def one_kinds_folder(root: Path, given: bool) -> str:
    """Why one kind's folder at the cache folder's place is refused, named by where that place
    came from: --cache-dir or $FUGU_LITE_CACHE_DIR (whose runs would cache inside it)."""
    what = f"the {root.name}/ folder of the cache folder {root.parent}"
    if given:
        return (
            f"--cache-dir {root} is {what}; give the cache folder itself: --cache-dir {root.parent}"
        )
    return (
        f"{CACHE_DIR_ENV} names {root}, {what}; set it to the cache folder itself: "
        f"{CACHE_DIR_ENV}={root.parent} (as it is, runs cache everything anew inside it)"
    )


def is_one_kinds_folder(root: Path) -> bool:
    """Whether `root` is one kind's folder inside a cache folder (`CACHE/features`, holding
    key folders, no kind folders): as the cache folder, `list` said 'nothing cached' there."""
    from ..caches import CACHE_KINDS

    if root.name not in CACHE_KINDS or any((root / kind).exists() for kind in CACHE_KINDS):
        return False
    try:
        return any(not child.name.startswith(".") for child in root.iterdir())
    except OSError:  # unreadable: the commands' own reading says so
        return False


def not_a_folder(root: Path, given: bool) -> str:
    """Why a file at the cache folder's place is refused, named by where that place came from:
    --cache-dir, $FUGU_LITE_CACHE_DIR, or the default folder."""
    if given:
        return f"--cache-dir {root} is a file, not a folder; give the cache folder"
    if os.environ.get(CACHE_DIR_ENV, "").strip():
        return (
            f"{CACHE_DIR_ENV} names {root}, which is a file, not a folder; set it to the "
            "cache folder (or unset it for ~/.cache/fugu-lite)"
        )
    return (
        f"the cache folder {root} is a file, not a folder; move that file away, or set "
        f"{CACHE_DIR_ENV} (or give --cache-dir) to another folder"
    )


@cache_app.command("list")
def cache_list(cache_dir: CacheDirOption = None) -> None:
    """Every cached item, its size and whether this installation still reads it."""
    from ..caches import cache_entries, print_entries

    root = cache_folder_or_fail(cache_dir)
    print_entries(cache_entries(root), root, console)


@cache_app.command("clear")
def cache_clear(
    cache_dir: CacheDirOption = None,
    everything: Annotated[
        bool,
        typer.Option(
            "--all",
            help="Remove every feature cache, export, copy and digest, not only the stale ones "
            "(each is made again when next needed: SmolLM2's features over LLMRouter take ~45 "
            "min).",
        ),
    ] = False,
) -> None:
    """Remove the cached items this installation never reads again (`cache list`: stale)."""
    from ..caches import cache_entries, megabytes, remove_killed_writers_files

    root = cache_folder_or_fail(cache_dir)
    refuse_a_foreign_folder(root)
    remove_killed_writers_files(root)
    entries = [e for e in cache_entries(root) if everything or e.status == "stale"]
    links = {  # a link to nowhere has no target kept to note
        entry.path: entry.path.resolve()
        for entry in entries
        if entry.path.is_symlink() and entry.path.exists()
    }
    freed = remove_or_say_how_far(entries)
    kept = [entry for entry in entries if entry.path.is_symlink() or entry.path.exists()]
    warn_of_kept(kept)
    note_link_targets([entry for entry in entries if entry.path in links], links)
    removed = len(entries) - len(kept)
    print_result(
        f"removed {removed} cached item{'s' * (removed != 1)} ({megabytes(freed)}) from {root}"
    )


def refuse_a_foreign_folder(root: Path) -> None:
    """Fail, removing nothing, when `root` holds more than fugu-lite's caches."""
    from ..caches import CACHE_KINDS, foreign_names

    foreign = foreign_names(root)
    if foreign:
        shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
        fail(
            f"{root} holds more than fugu-lite's caches ({shown}), so it may be another folder "
            f"whose {'/, '.join(CACHE_KINDS)}/ are not caches; nothing was removed. Give the "
            "cache folder itself with --cache-dir (it holds only those folders and data/)"
        )


def remove_or_say_how_far(entries: list[CacheEntry]) -> int:
    """Remove the entries (the bytes freed); stopped by Ctrl-C, say what is gone and what not."""
    from ..caches import remove_entries

    # the entry point's "stopped before any output was written" was wrong here
    gone_so_far = (
        "the cached items removed so far are gone and the others are still there; run the "
        "same command again to remove the rest"
    )
    with stopped_cleanly(gone_so_far):
        return remove_entries(entries)


def note_link_targets(linked: list[CacheEntry], targets: dict[Path, Path]) -> None:
    """Each removed link's target, which stays (freed only by hand)."""
    from ..caches import megabytes

    for entry in linked:
        if not entry.path.is_symlink():
            err_console.print(
                f"note: {console_text(str(entry.path))} was a link to "
                f"{console_text(str(targets[entry.path]))}: the link is removed, what it points "
                f"to is kept; remove it by hand to free {megabytes(entry.size_bytes)}"
            )


def warn_of_kept(kept: list[CacheEntry]) -> None:
    for entry in kept:
        err_console.print(f"[yellow]warning:[/yellow] {console_text(str(entry.path))} could not "
                          "be removed (another user's?); remove it by hand")  # fmt: skip
