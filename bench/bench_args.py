"""What the bench scripts share on their command lines: counts and the data folder, checked
before any work starts, so a wrong one is one line naming it, not a traceback minutes in."""

from __future__ import annotations

import argparse
from pathlib import Path

from fugu_lite.datasets import DataNotFoundError, resolve_data_dir


def data_dir_or_exit(parser: argparse.ArgumentParser, data_dir: str | None) -> Path:
    """The folder holding `llmrouter/` (resolve_data_dir); a missing one exits as a usage
    error."""
    try:
        return resolve_data_dir(data_dir)
    except DataNotFoundError as error:
        parser.error(f"{error} (--data-dir is the folder that holds llmrouter/)")


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1 (calls, repeats, clients)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value
