"""Progress where rich cannot redraw its bars (progress.py's LineProgress, and who picks it)."""

from __future__ import annotations

import io

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


def test_a_bar_in_a_log_is_a_line_each_tenth_named_by_its_stages_label() -> None:
    """Piped, a stage's bar is a line each tenth of its total, named by the stage's label
    ("ES generations"), not by its task's short name ("es"); a resumed run's bar starts at
    the generations done, and each line says the status last given, an empty one too (as
    rich's bar shows it: a stale status read as what is being done now)."""
    log = io.StringIO()
    progress = LineProgress(Console(file=log, width=200), "ES generations")
    bar = progress.add_task("es", total=20, completed=4, status="")
    for generation in range(5, 20):
        progress.update(bar, completed=generation, status=f"best {generation}")
    progress.update(bar, completed=20, status="")
    expected = [f"ES generations: {done}/20 (best {done})" for done in range(6, 19, 2)]
    assert log.getvalue().splitlines() == [*expected, "ES generations: 20/20"]
