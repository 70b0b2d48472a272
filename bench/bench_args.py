"""What the bench scripts share on their command lines: the data folder, checked before any
work starts, so a wrong one is one line naming it (and how to give the right one), not a
traceback."""

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
