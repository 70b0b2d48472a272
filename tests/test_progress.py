"""Progress where rich cannot redraw its bars (progress.py's LineProgress, and who picks it)."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from fugu_lite import features
from fugu_lite.collect.run import _progress
from fugu_lite.config import ModelConfig
from fugu_lite.features import feature_progress
from fugu_lite.model import RouterModel
from fugu_lite.progress import LineProgress
from fugu_lite.training_common import run_epochs, stage_progress


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


def test_an_epoch_stages_bar_shares_its_console_and_advances_once_per_epoch() -> None:
    """On a terminal, RL printed its epoch lines on its own console while the epochs bar was
    drawn on training_common's (stage_progress bound that console as a default argument, and
    run_epochs never passed its own): each line came glued after a stale copy of the bar
    ('RL epochs ━━ 0/4 0:00:00  RL epoch 1/4: ...'). The bar is on the console given now, each
    epoch's line clears it and is drawn above it, and the bar counts one more each epoch."""
    terminal = io.StringIO()
    shown = Console(file=terminal, width=120, force_terminal=True, force_interactive=True)
    model = RouterModel(ModelConfig(head="linear", normalize_features=False), ["a", "b"], 3)

    def run_epoch(epoch: int) -> dict:
        return {"epoch": epoch, "train": {"loss": 1.0 / epoch}}

    history = run_epochs("RL", model, 4, run_epoch, ("loss",), shown)
    assert [report["epoch"] for report in history] == [1, 2, 3, 4]
    # What the terminal shows: each carriage return or erase starts the line again.
    drawn = re.split(r"\r|\n|\x1b\[2K", re.sub(r"\x1b\[[0-9;?]*[mlh]", "", terminal.getvalue()))
    pieces = [piece.strip() for piece in drawn if piece.strip()]
    lines = [piece for piece in pieces if piece.startswith("RL epoch ")]
    assert lines == [f"RL epoch {epoch}/4: train loss {1.0 / epoch:.4f}" for epoch in range(1, 5)]
    counts = [int(re.sub(r".* (\d+)/4 .*", r"\1", bar)) for bar in pieces if "RL epochs" in bar]
    # Drawn as the terminal refreshes: counting up by one per epoch, to the stage's epochs.
    assert counts and counts == sorted(counts) and set(counts) <= {0, 1, 2, 3, 4}
    assert counts[-1] == 4
