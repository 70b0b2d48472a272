"""Words and numbers as the user reads them (text.py)."""

from __future__ import annotations

import math

from fugu_lite.text import cost_text, one_or_many, usd


def test_a_word_agrees_with_its_count_zero_too() -> None:
    """English says "0 answers" (collect's summary: "the 0 graded answers"), as for any count
    but 1."""
    words = [one_or_many(count, "answer", "answers") for count in (0, 1, 2, 11)]
    assert words == ["answers", "answer", "answers", "answers"]


def test_a_cost_that_is_no_finite_number_is_written_as_it_is() -> None:
    """A NaN cost is written 'nan', not taken through the decimals for a cost below 1
    (math.floor of NaN raises ValueError), and an infinite one 'inf', as :g writes them
    (whether a run can hand either to a table was not checked)."""
    assert [cost_text(math.nan), cost_text(math.inf), usd(-math.inf)] == ["nan", "inf", "$-inf"]
