"""List tasks: largest, smallest, sum, length, sorting, counting and averages of numbers."""

from __future__ import annotations

import random
import re
from fractions import Fraction

from .drafts import EXACT_HINT, Draft, Maker, number_draft


def list_regex(values: list[int]) -> str:
    """Matches the list in this order, with commas or spaces, optional brackets, and no
    other element: "[0, 5, 12]" or "5 12 40" is not the list [5, 12]. (The grader
    collapses whitespace, so one space stands for any run of it.)"""
    separator = r"(?:\s*[,;]\s*|\s+)"
    body = separator.join(re.escape(str(value)) for value in values)
    starts = r"(?:\[\s*|(?<![\d.,;-])(?<![\d,;] ))"  # a bracket, or no number before
    ends = r"(?:\s*\]|(?!\s?[,;]?\s?-?\d|\.\d))"  # a bracket, or no number after
    return rf"{starts}{body}{ends}"


def _show(values: list[int]) -> str:
    return "[" + ", ".join(str(value) for value in values) + "]"


def _numbers(rng: random.Random, count: int, low: int, high: int) -> list[int]:
    return [rng.randint(low, high) for _ in range(count)]


def _list_max(rng: random.Random) -> Draft:
    values = _numbers(rng, rng.randint(3, 4), 1, 9)
    return number_draft(f"What is the largest number in the list {_show(values)}?", max(values))


def _list_min(rng: random.Random) -> Draft:
    values = _numbers(rng, rng.randint(3, 4), 1, 9)
    return number_draft(f"What is the smallest number in the list {_show(values)}?", min(values))


def _list_sum_small(rng: random.Random) -> Draft:
    values = _numbers(rng, 3, 1, 9)
    return number_draft(f"What is the sum of the numbers in {_show(values)}?", sum(values))


def _repeats_counted(counted: list[int]) -> str:
    """What a count over a list says when a number it counts repeats: "How many numbers are
    in [40, 2, 40]?" is 3 entries or 2 different numbers."""
    return " Count a number each time it appears." if len(set(counted)) < len(counted) else ""


def _list_length(rng: random.Random) -> Draft:
    values = _numbers(rng, rng.randint(2, 7), 1, 50)
    return number_draft(
        f"How many numbers are in the list {_show(values)}?{_repeats_counted(values)}",
        len(values),
    )


def _unsorted(rng: random.Random, count: int, low: int, high: int) -> list[int]:
    values = rng.sample(range(low, high + 1), count)
    while values == sorted(values) or values == sorted(values, reverse=True):
        rng.shuffle(values)
    return values


def _sort_ascending(rng: random.Random) -> Draft:
    values = _unsorted(rng, rng.randint(4, 5), 1, 40)
    return {
        "prompt": f"Sort the list {_show(values)} from smallest to largest. {EXACT_HINT}",
        "answer": list_regex(sorted(values)),
        "grader": "regex",
    }


def _list_sum(rng: random.Random) -> Draft:
    values = _numbers(rng, rng.randint(4, 5), 10, 99)
    return number_draft(f"What is the sum of the numbers in {_show(values)}?", sum(values))


def _max_with_negatives(rng: random.Random) -> Draft:
    values = _numbers(rng, 5, -30, 30)
    return number_draft(f"What is the largest number in the list {_show(values)}?", max(values))


def _sort_descending(rng: random.Random) -> Draft:
    values = _unsorted(rng, rng.randint(6, 7), -20, 60)
    return {
        "prompt": f"Sort the list {_show(values)} from largest to smallest. {EXACT_HINT}",
        "answer": list_regex(sorted(values, reverse=True)),
        "grader": "regex",
    }


def _second_largest(rng: random.Random) -> Draft:
    values = rng.sample(range(1, 100), 6)
    return number_draft(
        f"What is the second largest number in the list {_show(values)}?", sorted(values)[-2]
    )


def _count_even(rng: random.Random) -> Draft:
    values = _numbers(rng, 7, 1, 50)
    evens = [value for value in values if value % 2 == 0]
    return number_draft(
        f"How many even numbers are in the list {_show(values)}?{_repeats_counted(evens)}",
        len(evens),
    )


def _average(rng: random.Random) -> Draft:
    count, mean = rng.randint(3, 5), rng.randint(5, 30)
    values = _numbers(rng, count - 1, 1, 2 * mean)
    while not 1 <= count * mean - sum(values) <= 99:  # the last value, which sets the mean
        values = _numbers(rng, count - 1, 1, 2 * mean)
    values.append(count * mean - sum(values))
    rng.shuffle(values)
    return number_draft(
        f"What is the average of the numbers {_show(values)}?", Fraction(sum(values), count)
    )


MAKERS: dict[int, tuple[Maker, ...]] = {
    1: (_list_max, _list_min, _list_sum_small, _list_length),
    2: (_sort_ascending, _list_sum, _max_with_negatives),
    3: (_sort_descending, _second_largest, _count_even, _average),
}
