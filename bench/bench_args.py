"""What the bench scripts share on their command lines: counts and the data folder, checked
before any work starts, so a wrong one is one line naming it, not a traceback minutes in."""

from __future__ import annotations

import argparse
import math
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
    value = _whole(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    """An argparse type: a whole number of at least 0 (warm-up reps, where 0 skips them)."""
    value = _whole(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {value}")
    return value


def positive_float(text: str) -> float:
    """An argparse type: a finite number above 0 (a run's seconds)."""
    value = _finite(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be above 0, got {text}")
    return value


def non_negative_float(text: str) -> float:
    """An argparse type: a finite number of at least 0 (a latency; seconds where 0 skips)."""
    value = _finite(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {text}")
    return value


def _whole(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None


def _finite(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value
