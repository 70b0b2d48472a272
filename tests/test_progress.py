"""Progress where rich cannot redraw its bars (progress.py's LineProgress, and who picks it)."""

from __future__ import annotations

import pytest
from rich.console import Console

from fugu_lite import features
from fugu_lite.collect.run import _progress
from fugu_lite.features import feature_progress
from fugu_lite.progress import LineProgress
from fugu_lite.training_common import stage_progress


@pytest.mark.parametrize("term", ["dumb", "unknown"])
def test_a_dumb_terminal_gets_progress_lines(monkeypatch: pytest.MonkeyPatch, term: str) -> None:
    """A terminal that cannot move its cursor (TERM=dumb: Emacs' shell, some CI runners with a
    pty) is a terminal, so rich's bars were chosen, and rich draws them there only once the
    work is done: minutes of feature extraction, training or collection said nothing."""
    dumb = Console(force_terminal=True, _environ={"TERM": term})
    assert dumb.is_terminal and not dumb.is_interactive
    monkeypatch.setattr(features, "console", dumb)
    assert isinstance(feature_progress(shown=True), LineProgress)
    assert isinstance(stage_progress("SFT epochs", dumb), LineProgress)
    with _progress(True, dumb) as progress:
        assert isinstance(progress, LineProgress)
