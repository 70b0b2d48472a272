"""The `fugu-lite` console entry point (and `python -m fugu_lite`).

Ctrl-C while the command line is still importing (typer, torch, transformers: the first
seconds) used to print a traceback, or a misleading "could not import" error when it broke
a library's lazy import, or end without a word. Here it is always one line and exit 130.
"""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType

INTERRUPTED_EARLY = "interrupted: stopped before any output was written; run the command again"
_interrupts: list[int] = []


def _record_interrupt(signum: int, frame: FrameType | None) -> None:
    _interrupts.append(signum)
    signal.default_int_handler(signum, frame)


def _stopped_early() -> None:
    print(INTERRUPTED_EARLY, file=sys.stderr)
    raise SystemExit(130)


def main() -> None:
    # The commands draw PNG files on matplotlib's Agg canvas and never open a window: a
    # backend named in the environment is never used, and an unknown one (MPLBACKEND=Qt4Agg
    # of an older setup) stopped `eval` with a traceback from matplotlib's import.
    os.environ["MPLBACKEND"] = "agg"
    # Ctrl-C ignored stays ignored, as Python leaves it: a script's shell starts
    # `fugu-lite collect ... &` so, for a Ctrl-C meant for the script to leave it running
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, _record_interrupt)
    try:
        from .cli import app, interruption_reported

        app()
    except SystemExit as done:
        # typer ends a Ctrl-C outside the commands' own handling with a silent exit 130
        if done.code == 130 and _interrupts and not interruption_reported():
            _stopped_early()
        raise
    except (KeyboardInterrupt, Exception):
        if not _interrupts:
            raise
        _stopped_early()  # an import that Ctrl-C cut short fails with its own error


if __name__ == "__main__":
    main()
