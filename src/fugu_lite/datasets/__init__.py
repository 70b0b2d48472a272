"""Importers for public routing datasets, and the standard split.

Each importer reads one source and returns RewardRecords with the standard split applied
(or a user-given split column): `import_dataset("llmrouter", Path("../shared/data"))`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..schemas import RewardRecord
from .data_dir import DATA_DIR_ENV, DataNotFoundError, download_llmrouter, resolve_data_dir
from .llmrouter import import_llmrouter, llmrouter_root
from .long_format import import_long
from .routerbench import import_routerbench
from .split import (
    SplitError,
    apply_given_split,
    apply_standard_split,
    dedupe_prompts,
    parse_split,
    standard_split,
)
from .zeroeval import import_zeroeval

Importer = Callable[..., list[RewardRecord]]

IMPORTERS: dict[str, Importer] = {
    "llmrouter": import_llmrouter,
    "zeroeval": import_zeroeval,
    "routerbench": import_routerbench,
    "long": import_long,
}


def import_dataset(format: str, source: str | Path, **options: Any) -> list[RewardRecord]:
    """Run the importer named `format`; unknown formats and options list the known ones."""
    if format not in IMPORTERS:
        known = ", ".join(IMPORTERS)
        raise ValueError(f"unknown dataset format {format!r}; known formats: {known}")
    importer = IMPORTERS[format]
    accepted = [
        name
        for name, parameter in inspect.signature(importer).parameters.items()
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY
    ]
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise ValueError(
            f"the {format} importer has no option(s) {unknown}; its options: "
            f"{', '.join(accepted) or 'none'}"
        )
    return importer(Path(source), **options)


__all__ = [
    "DATA_DIR_ENV",
    "IMPORTERS",
    "DataNotFoundError",
    "Importer",
    "SplitError",
    "apply_given_split",
    "apply_standard_split",
    "dedupe_prompts",
    "download_llmrouter",
    "import_dataset",
    "import_llmrouter",
    "import_long",
    "import_routerbench",
    "import_zeroeval",
    "llmrouter_root",
    "parse_split",
    "resolve_data_dir",
    "standard_split",
]
