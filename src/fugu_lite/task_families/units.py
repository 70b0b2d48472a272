"""Unit conversion tasks: lengths, masses, times, speeds and temperatures."""

from __future__ import annotations

import random
from fractions import Fraction

from .drafts import Draft, Maker, number_draft

EASY_UNITS = (
    ("meters", "centimeters", 100), ("kilometers", "meters", 1000), ("kilograms", "grams", 1000),
    ("hours", "minutes", 60), ("minutes", "seconds", 60), ("days", "hours", 24),
    ("liters", "milliliters", 1000), ("weeks", "days", 7), ("dozens", "items", 12),
)  # fmt: skip
MEDIUM_UNITS = (
    ("centimeters", "meters", 100), ("grams", "kilograms", 1000), ("minutes", "hours", 60),
    ("seconds", "minutes", 60), ("inches", "feet", 12), ("millimeters", "centimeters", 10),
)  # fmt: skip


def _scale_up(rng: random.Random) -> Draft:
    source, target, factor = rng.choice(EASY_UNITS)
    value = rng.choice((1, 1, 1, 2, 2, 3, 4, 5, 10))  # one unit is a fact small models know
    if value == 1:
        return number_draft(f"How many {target} are in one {source[:-1]}?", factor)
    return number_draft(f"How many {target} are in {value} {source}?", value * factor)


def _scale_down(rng: random.Random) -> Draft:
    source, target, factor = rng.choice(MEDIUM_UNITS)
    value = factor * rng.randint(1, 20) // rng.choice((1, 2, 4))
    return number_draft(f"Convert {value} {source} to {target}.", Fraction(value, factor))


def _feet(rng: random.Random) -> Draft:
    source, target, factor = rng.choice((("feet", "inches", 12), ("yards", "feet", 3)))
    value = rng.randint(2, 15)
    return number_draft(f"Convert {value} {source} to {target}.", value * factor)


def _hours_and_minutes(rng: random.Random) -> Draft:
    hours, minutes = rng.randint(2, 9), rng.randint(1, 59)
    return number_draft(
        f"How many minutes are {hours} hours and {minutes} minute{'s' * (minutes != 1)}?",
        60 * hours + minutes,
    )


def _speed(rng: random.Random) -> Draft:
    k = rng.randint(1, 8)
    return number_draft(f"Convert {18 * k} kilometers per hour to meters per second.", 5 * k)


def _celsius(rng: random.Random) -> Draft:
    celsius = 5 * rng.randint(-8, 20)
    return number_draft(
        f"Convert {celsius} degrees Celsius to degrees Fahrenheit.", celsius * 9 // 5 + 32
    )


def _fahrenheit(rng: random.Random) -> Draft:
    k = rng.randint(-4, 20)
    return number_draft(f"Convert {32 + 9 * k} degrees Fahrenheit to degrees Celsius.", 5 * k)


def _hours_to_seconds(rng: random.Random) -> Draft:
    hours = rng.randint(2, 12)
    return number_draft(f"How many seconds are in {hours} hours?", 3600 * hours)


MAKERS: dict[int, tuple[Maker, ...]] = {
    1: (_scale_up,),
    2: (_scale_down, _feet),
    3: (_hours_and_minutes, _speed, _celsius, _fahrenheit, _hours_to_seconds),
}
