"""CollectError: the output files do not fit this pool or these tasks."""

from __future__ import annotations


class CollectError(RuntimeError):
    """The output files do not fit this pool or these tasks; the message says how to fix it."""
