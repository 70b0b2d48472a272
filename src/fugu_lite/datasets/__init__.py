"""Importers for public routing datasets, and the standard split.

Each importer reads one source and returns RewardRecords with the standard split applied
(or a user-given split column): `import_dataset("llmrouter", Path("../shared/data"))`.

What lives where:
- llmrouter.py, zeroeval.py: those datasets' importers;
- routerbench.py: RouterBench's importer (rows to records); routerbench_table.py reads its
  table (and pivots the raw one), routerbench_columns.py finds its fixed and model columns;
- long_format.py: the long format's importer; long_files.py reads its files into raw rows,
  long_rows.py checks each row (columns, percentages, the rewards' scale);
- split.py: the standard split (duplicate prompts dropped, then a hash of each prompt);
- common.py: small checks the importers share;
- data_dir.py: finding the public data (--data-dir, $FUGU_LITE_DATA_DIR, ../shared/data, a
  download into the cache).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin, get_type_hints

import yaml
from pydantic import TypeAdapter, ValidationError

from ..io import describe_validation_error
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
    hints = get_type_hints(importer, include_extras=True)
    checked = {
        name: _check_option(format, name, value, hints.get(name, Any))
        for name, value in options.items()
    }
    return importer(Path(source), **checked)


def _check_option(format: str, name: str, value: Any, annotation: Any) -> Any:
    """The option value checked against the importer's annotation. A string (from the command
    line) is kept as is when the parameter takes strings, else read as YAML: `2024` stays the
    column name "2024" for split_column, `300` becomes a number for output_tokens."""
    adapter = TypeAdapter(annotation)
    given = value
    if isinstance(value, str):
        try:
            return adapter.validate_python(value, strict=True)
        except ValidationError:
            pass
        try:
            value = yaml.safe_load(value)
        except yaml.YAMLError as error:
            problem = getattr(error, "problem", None) or error
            raise ValueError(
                f"the {format} importer's option {name}: {value!r} is not valid YAML "
                f"({problem}); expected {describe_type(annotation)}"
            ) from error
    try:
        return adapter.validate_python(value)
    except ValidationError as error:
        # every problem, each at its place: only the first was said, without saying where
        # ("Input should be a valid number" for one price of many)
        problem = describe_validation_error(error, whole=None)
        raise ValueError(
            f"the {format} importer's option {name}={given!r} is not valid: expected "
            f"{describe_type(annotation)} ({problem})"
        ) from error


def describe_type(annotation: Any) -> str:
    """A type annotation in words, for error messages: `float | None` -> "a number or null"."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return describe_type(args[0])
    if origin is Literal:
        return "one of " + ", ".join(str(arg) for arg in args)
    if origin in (Union, UnionType):
        return " or ".join(describe_type(arg) for arg in args)
    if origin in (dict, Mapping):
        return f"a mapping {{{describe_type(args[0])}: {describe_type(args[1])}}}"
    if origin is tuple:
        return "[" + ", ".join(describe_type(arg) for arg in args) + "]"
    names = {type(None): "null", bool: "true or false", int: "an integer", float: "a number"}
    return names.get(annotation, "a string" if annotation is str else str(annotation))


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
