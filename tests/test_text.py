"""Words and numbers as the user reads them (text.py)."""

from __future__ import annotations

from fugu_lite.text import one_or_many


def test_a_word_agrees_with_its_count_zero_too() -> None:
    """English says "0 answers" (collect's summary: "the 0 graded answers"), as for any count
    but 1."""
    words = [one_or_many(count, "answer", "answers") for count in (0, 1, 2, 11)]
    assert words == ["answers", "answer", "answers", "answers"]
