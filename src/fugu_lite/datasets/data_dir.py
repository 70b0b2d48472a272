"""Finding the public routing data: an explicit folder, the env var, ../shared/data, a cache."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import httpx

from ..atomic_files import write_text_atomic
from ..file_digests import cache_root
from .llmrouter import LLMROUTER_FILES

DATA_DIR_ENV = "FUGU_LITE_DATA_DIR"
LLMROUTER_REPO = "ulab-uiuc/LLMRouter"
LLMROUTER_COMMIT = "4e7a796942ce26e9d5f2b93191c7c2585c99c2e3"
LLMROUTER_DOWNLOADS: tuple[str, ...] = (*LLMROUTER_FILES, "LICENSE")


class DataNotFoundError(FileNotFoundError):
    """No folder with the requested dataset was found, and none could be downloaded."""


def default_search_paths() -> list[Path]:
    """../shared/data next to the working directory, then next to the project source tree."""
    package_dir = Path(__file__).resolve().parent
    return [
        Path.cwd() / ".." / "shared" / "data",
        *(parent / "shared" / "data" for parent in package_dir.parents),
    ]


def resolve_data_dir(
    data_dir: str | Path | None = None,
    *,
    dataset: str = "llmrouter",
    search_paths: Sequence[Path] | None = None,
    cache_dir: Path | None = None,
    download: bool = True,
    timeout: float = 60.0,
) -> Path:
    """A folder that contains `<dataset>/`.

    Order: `data_dir`, then $FUGU_LITE_DATA_DIR (either one, when given, must hold the
    dataset), then `search_paths`, then the cache; for llmrouter, last, a download of the
    MIT-licensed files from GitHub into the cache (`cache_dir`, default the `data/` folder of
    fugu-lite's cache: $FUGU_LITE_CACHE_DIR/data when set, as for every other cache).
    """
    cache_dir = cache_dir or cache_root() / "data"
    explicit = _explicit_data_dir(data_dir, dataset)
    if explicit is not None:
        return explicit
    found = _searched_data_dir(dataset, search_paths)
    if found is not None:
        return found
    if dataset == "llmrouter" and _has_all_files(cache_dir / "llmrouter"):
        return cache_dir
    return _downloaded_data_dir(dataset, cache_dir, download, timeout)


def _explicit_data_dir(data_dir: str | Path | None, dataset: str) -> Path | None:
    """`data_dir`, else $FUGU_LITE_DATA_DIR; either one, when given, must hold the dataset."""
    explicit_choices = ((data_dir, "--data-dir"), (os.environ.get(DATA_DIR_ENV), DATA_DIR_ENV))
    for explicit, origin in explicit_choices:
        if explicit:
            folder = Path(explicit).expanduser()
            problem = named_folder_problem(folder, dataset)
            if problem is not None:
                raise DataNotFoundError(f"{origin} points to {folder}, {problem}")
            return folder.resolve()
    return None


def named_folder_problem(folder: Path, dataset: str) -> str | None:
    """Why a data folder the user named cannot be used ("which does not exist", "which is not
    a folder", "which has no <dataset>/ folder inside"); None when it holds the dataset."""
    if not folder.exists():
        return "which does not exist"
    if not folder.is_dir():
        return "which is not a folder"
    if not (folder / dataset).is_dir():
        return f"which has no {dataset}/ folder inside"
    return None


def _searched_data_dir(dataset: str, search_paths: Sequence[Path] | None) -> Path | None:
    for candidate in default_search_paths() if search_paths is None else search_paths:
        if (candidate / dataset).is_dir():
            return candidate.resolve()
    return None


def _downloaded_data_dir(dataset: str, cache_dir: Path, download: bool, timeout: float) -> Path:
    """The cache after downloading LLMRouter into it; any other dataset is not found."""
    not_found = (
        f"no {dataset}/ data folder found; pass --data-dir or set {DATA_DIR_ENV} to a folder "
        f"containing {dataset}/"
    )
    if dataset != "llmrouter" or not download:
        raise DataNotFoundError(not_found)
    try:
        download_llmrouter(cache_dir / "llmrouter", timeout=timeout)
    except (httpx.HTTPError, OSError, UnicodeDecodeError) as error:  # a proxy's page
        raise DataNotFoundError(
            f"{not_found} (downloading it from github.com/{LLMROUTER_REPO} failed: {error})"
        ) from error
    return cache_dir


def _has_all_files(root: Path) -> bool:
    return all((root / relative).is_file() for relative in LLMROUTER_DOWNLOADS)


def download_llmrouter(
    target: Path, timeout: float = 60.0, transport: httpx.BaseTransport | None = None
) -> Path:
    """Fetch the LLMRouter files at a pinned commit; each file is written atomically."""
    base = f"https://raw.githubusercontent.com/{LLMROUTER_REPO}/{LLMROUTER_COMMIT}"
    with httpx.Client(timeout=timeout, follow_redirects=True, transport=transport) as client:
        for relative in LLMROUTER_DOWNLOADS:
            if (target / relative).is_file():
                continue
            response = client.get(f"{base}/{relative}")
            response.raise_for_status()
            write_text_atomic(target / relative, response.content.decode("utf-8"))
    write_text_atomic(
        target / "SOURCE.txt", f"source: github {LLMROUTER_REPO} commit {LLMROUTER_COMMIT}\n"
    )
    return target
