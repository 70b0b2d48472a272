"""Quantities in units and amounts at rates, for the number grader: a quantity in two units
("2 hours and 30 minutes") read in the unit the question asks for, one quantity given in two
units ("150 minutes (9000 seconds)"), and one amount at two rates ("$18 a day, or $126 a
week") cut to the rate asked.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from itertools import pairwise

from ..tasks import format_number
from .number_values import FoundNumber, found_number

# A quantity in two units, "2 hours and 30 minutes", "5 feet 3 inches": its value depends
# on the unit the question asks for. Surface form -> (kind, size in the kind's smallest unit).
_UNIT_SIZES: dict[str, tuple[str, int]] = {
    **dict.fromkeys(("week", "weeks"), ("time", 604_800)),
    **dict.fromkeys(("day", "days"), ("time", 86_400)),
    **dict.fromkeys(("hour", "hours", "hr", "hrs", "h"), ("time", 3_600)),
    **dict.fromkeys(("minute", "minutes", "min", "mins"), ("time", 60)),
    **dict.fromkeys(("second", "seconds", "sec", "secs"), ("time", 1)),
    **dict.fromkeys(("yard", "yards", "yd"), ("imperial length", 36)),
    **dict.fromkeys(("foot", "feet", "ft"), ("imperial length", 12)),
    **dict.fromkeys(("inch", "inches"), ("imperial length", 1)),
    **dict.fromkeys(
        ("kilometer", "kilometers", "kilometre", "kilometres", "km"), ("length", 100_000)
    ),
    **dict.fromkeys(("meter", "meters", "metre", "metres", "m"), ("length", 100)),
    **dict.fromkeys(
        ("centimeter", "centimeters", "centimetre", "centimetres", "cm"), ("length", 1)
    ),
    **dict.fromkeys(("kilogram", "kilograms", "kg"), ("mass", 1_000)),
    **dict.fromkeys(("gram", "grams", "g"), ("mass", 1)),
    **dict.fromkeys(("pound", "pounds", "lb", "lbs"), ("imperial mass", 16)),
    **dict.fromkeys(("ounce", "ounces", "oz"), ("imperial mass", 1)),
}
_UNIT = "|".join(sorted(_UNIT_SIZES, key=len, reverse=True))
_UNIT_PART = rf"(?<![\w.,/])\d{{1,9}}(?:\.\d+)?\s?(?:{_UNIT})\b"
_COMPOUND_QUANTITY = re.compile(
    rf"{_UNIT_PART}(?:,?\s(?:and\s)?{_UNIT_PART}){{1,2}}", re.IGNORECASE
)
_QUANTITY_PART = re.compile(rf"(?P<value>\d{{1,9}}(?:\.\d+)?)\s?(?P<unit>{_UNIT})\b", re.IGNORECASE)
# the unit a question asks for: "Convert 150 minutes to hours.", "How many minutes are ...?"
_UNIT_ASKED = re.compile(
    rf"\b(?:to|into|in|how\s+many|number\s+of)\s+(?P<unit>{_UNIT})\b", re.IGNORECASE
)
# every unit asked, also those joined to the first: "to hours and minutes", "in g or in oz"
_UNITS_ASKED_CHAIN = re.compile(
    rf"\b(?:to|into|in|how\s+many|number\s+of)\s+(?:{_UNIT})\b"
    rf"(?:,?\s+(?:and|or)\s+(?:(?:in|to|how\s+many)\s+)?(?:{_UNIT})\b)*",
    re.IGNORECASE,
)
_UNIT_WORD = re.compile(rf"\b(?:{_UNIT})\b", re.IGNORECASE)
_UNITS_BETWEEN = re.compile(rf"\s?(?P<unit>{_UNIT})\b(?P<joiner>,?\s(?:and\s)?)", re.IGNORECASE)
_UNIT_AFTER = re.compile(rf"\s?(?P<unit>{_UNIT})\b", re.IGNORECASE)


# after a part in a smaller unit, what makes it a rate: "60 minutes in each hour", "per hour"
_RATE_AFTER = re.compile(r"\s+(?:(?:in\s+)?(?:each|every|an?|one)|per)\b", re.IGNORECASE)
_AND = re.compile(r"\s+and\s+", re.IGNORECASE)


def _summed_past_a_whole(separators: list[str], text: str, end: int) -> bool:
    """Whether parts of which one is a whole larger unit or more are still one quantity: joined
    by "and" alone ("1 hour and 60 minutes", a carry not made: 120 minutes), not a list
    ("2 hours, 60 minutes") and not a rate (`text` going on "in each hour" at `end`)."""
    return all(_AND.fullmatch(separator) for separator in separators) and not _RATE_AFTER.match(
        text, end
    )


def _quantity(match: re.Match[str]) -> tuple[str, Fraction] | None:
    """The kind and size (in the kind's smallest unit) of "2 hours and 30 minutes", or None
    when its parts are of different kinds, not from the largest unit down, or one is a whole
    unit before it or more unless summed ("2 hours, 60 minutes in each hour" is no 3 hours)."""
    found = list(_QUANTITY_PART.finditer(match.group(0)))
    parts = [(_UNIT_SIZES[m["unit"].lower()], Fraction(m["value"])) for m in found]
    kinds = {kind for (kind, _), _ in parts}
    sizes = [size for (_, size), _ in parts]
    if len(kinds) != 1 or sizes != sorted(set(sizes), reverse=True):
        return None
    separators = [match.group(0)[one.end() : other.start()] for one, other in pairwise(found)]
    if any(
        size * value >= larger for larger, ((_, size), value) in zip(sizes, parts[1:], strict=False)
    ) and not _summed_past_a_whole(separators, match.string, match.end()):
        return None
    return kinds.pop(), sum((size * value for (_, size), value in parts), Fraction(0))


def in_the_unit_asked(text: str, prompt: str) -> str:
    """`text` with each quantity in two units ("2 hours and 30 minutes") written in the one
    unit of its kind the question asks for ("2.5 hours" for "Convert 150 minutes to hours."),
    unless the question holds that very quantity (an echo of it answers nothing). Left as it
    is when the question asks for no unit of its kind: it is then no single number."""
    asked: dict[str, set[str]] = {}
    for match in _UNIT_ASKED.finditer(prompt):
        unit = match["unit"].lower()
        asked.setdefault(_UNIT_SIZES[unit][0], set()).add(unit)
    if not asked:
        return text
    in_question = {_quantity(m) for m in _COMPOUND_QUANTITY.finditer(prompt)}

    def convert(match: re.Match[str]) -> str:
        quantity = _quantity(match)
        if quantity is None or quantity in in_question:
            return match.group(0)
        kind, size = quantity
        units = asked.get(kind, set())
        if not units:
            return match.group(0)
        # "How many hours and how many minutes ...?": the largest unit asked, as for "to
        # hours and minutes" (the same quantity in any of them)
        unit = max(sorted(units), key=lambda name: _UNIT_SIZES[name][1])
        value = size / _UNIT_SIZES[unit][1]
        shown = format_number(value) if value == Fraction(format_number(value)) else str(value)
        return f"{shown} {unit}"

    return _COMPOUND_QUANTITY.sub(convert, text)


# One amount given at two rates: "$18 a day, or $126 a week", "25 m/s (90 km/h)". Surface
# form -> the rate's unit.
_RATE_UNITS = {
    **dict.fromkeys(("hour", "hours", "hr", "hrs"), "hour"),
    **dict.fromkeys(("minute", "minutes", "min", "mins"), "minute"),
    **dict.fromkeys(("second", "seconds", "sec", "secs"), "second"),
    **dict.fromkeys(("day", "days"), "day"),
    **dict.fromkeys(("week", "weeks", "wk"), "week"),
    **dict.fromkeys(("month", "months"), "month"),
    **dict.fromkeys(("year", "years", "yr"), "year"),
}
_RATE_ADVERBS = {
    "hourly": "hour",
    "daily": "day",
    "weekly": "week",
    "monthly": "month",
    "yearly": "year",
    "annually": "year",
}
_RATE_UNIT = "|".join(sorted(_RATE_UNITS, key=len, reverse=True))
_RATE_ADVERB = "|".join(_RATE_ADVERBS)
# "a day", "per day", "each day", "/day", "/h", "daily"
_RATE = (
    rf"(?:\s+(?:a|an|per|each|every)\s+(?P<{{0}}>{_RATE_UNIT})\b"
    rf"|\s?/\s?(?P<{{0}}_short>{_RATE_UNIT}|h|s)\b|\s+(?P<{{0}}_adverb>{_RATE_ADVERB})\b)"
)
_RATE_AMOUNT = r"(?<![\w.,])-?\$?\d[\d,]*+(?:\.\d+)?(?:\s?[^\W\d]+){0,2}?"
_TWO_RATES = re.compile(
    rf"(?P<first>{_RATE_AMOUNT}{_RATE.format('unit')})"
    r"\s?(?:[,;]\s?)?(?:\(|=|or\b|i\.e\.,?|that\s+is,?|which\s+is|so\b)?\s?"
    rf"(?P<second>{_RATE_AMOUNT}{_RATE.format('other')})",
    re.IGNORECASE,
)
# a rate in the question: asked ("How much per week?", "in a week", "her hourly wage"), or
# given with its amount ("She earns $18 a day", "90 kilometers per hour")
_RATE_IN_QUESTION = re.compile(
    rf"(?:\s+(?:a|an|per|each|every|in\s+(?:a|an|one))\s+(?P<unit>{_RATE_UNIT})\b"
    rf"|\s?/\s?(?P<short>{_RATE_UNIT})\b|\s+(?P<adverb>{_RATE_ADVERB})\b)",
    re.IGNORECASE,
)
_AMOUNT_BEFORE = re.compile(r"\d(?:\s?[^\W\d]+){0,2}$")


def _rate_unit(match: re.Match[str], name: str) -> str:
    unit = match[name] or match[f"{name}_short"]
    if unit is not None:
        return {"h": "hour", "s": "second"}.get(unit.lower()) or _RATE_UNITS[unit.lower()]
    return _RATE_ADVERBS[match[f"{name}_adverb"].lower()]


def rates_asked(prompt: str) -> set[str]:
    """The time units of the rates a question asks for ("How much does she earn per week?":
    week), not those it gives with their amount ("She earns $18 a day")."""
    asked = set()
    for match in _RATE_IN_QUESTION.finditer(prompt):
        if _AMOUNT_BEFORE.search(prompt, max(0, match.start() - 40), match.start()):
            continue
        unit = match["unit"] or match["short"]
        asked.add(_RATE_UNITS[unit.lower()] if unit else _RATE_ADVERBS[match["adverb"].lower()])
    return asked


def in_the_rate_asked(text: str, prompt: str) -> str:
    """`text` with one amount given at two rates ("$18 a day, or $126 a week") cut to the
    rate the question asks for ("$126 a week" for "How much per week?"); left as it is when
    the question asks for neither or both."""
    asked = rates_asked(prompt)
    if not asked:
        return text

    def cut(match: re.Match[str]) -> str:
        first, second = _rate_unit(match, "unit"), _rate_unit(match, "other")
        if first == second or (first in asked) == (second in asked):
            return match.group(0)
        return match["first"] if first in asked else match["second"]

    return _TWO_RATES.sub(cut, text)


def units_asked(prompt: str) -> set[str]:
    """Every unit the question asks for ("Convert 2.5 hours to minutes and seconds.")."""
    return {
        unit.lower()
        for chain in _UNITS_ASKED_CHAIN.finditer(prompt)
        for unit in _UNIT_WORD.findall(chain.group(0))
    }


# "150 minutes (9000 seconds)", "**5000 grams** (i.e. 5 kg)", "5000 g, or 5 kg", "150 minutes,
# the same as 2.5 hours", "150 minutes. That is the same as 2.5 hours.", and the answer stated
# before the question's quantity: "300 centimeters is 3 meters.", "... equals ...", "... make
# ..." (the two must be one quantity: "3 meters is 30 centimeters" is none)
_SAME_AS = r"(?:the\s+same\s+as|equal\s+to|equivalent\s+to)"
_BETWEEN_UNITS = re.compile(
    rf"[*_]*\s?(?:\.\s(?:that|this)\s+is(?:\s+{_SAME_AS})?\s?"
    rf"|,?\s?\(?\s?(?:=|or|i\.e\.,?|that\s+is,?|(?:which\s+)?(?:is|are)(?:\s+{_SAME_AS})?"
    rf"|equals|makes?|{_SAME_AS})?\s?)[*_]*",
    re.IGNORECASE,
)


def one_quantity_in_two_units(
    text: str, pair: list[re.Match[str]], asked: set[str]
) -> FoundNumber | None:
    """Two numbers that give one quantity in two units ("150 minutes (9000 seconds)", "150
    minutes or 9000 seconds"): the one in the unit the question asks for, or the first read
    in both when it asks for both, or None."""
    if len(pair) != 2 or not asked:
        return None
    unit, other_unit = (_UNIT_AFTER.match(text, number.end()) for number in pair)
    if unit is None or other_unit is None:
        return None
    # "g" and "grams" are one unit: compared by kind and size
    units = [_UNIT_SIZES[unit["unit"].lower()], _UNIT_SIZES[other_unit["unit"].lower()]]
    sizes_asked = {_UNIT_SIZES[name] for name in asked}
    if units[0] == units[1] or not sizes_asked & set(units):
        return None
    if not _BETWEEN_UNITS.fullmatch(text, unit.end(), pair[1].start()):
        return None
    (kind, size), (other_kind, other_size) = units
    first, second = found_number(pair[0]), found_number(pair[1])
    if kind != other_kind or not math.isclose(first.value * size, second.value * other_size):
        return None
    if units[0] not in sizes_asked:
        return second
    if units[1] not in sizes_asked:
        return first
    return first.model_copy(update={"in_other_unit": (second.value, second.decimals)})


def same_unit(word: str, other: str) -> bool:
    """Whether two unit words name one unit: "hours" and "hour", "boxes" and "box", or "m" and
    "meters" (by size when both are units it knows)."""
    one, two = word.lower(), other.lower()
    if one in _UNIT_SIZES and two in _UNIT_SIZES:
        return _UNIT_SIZES[one] == _UNIT_SIZES[two]
    shorter, longer = sorted((one, two), key=len)
    return longer in (shorter, f"{shorter}s", f"{shorter}es")


def in_two_units(text: str, first: re.Match[str], second: re.Match[str]) -> bool:
    """Whether two numbers side by side are one quantity in two units ("2 hours and 30
    minutes"): the larger unit after the first, a smaller one of its kind after the second,
    less than one of the larger ("2 hours, 60 minutes" is none)."""
    between = _UNITS_BETWEEN.fullmatch(text, first.end(), second.start())
    after = _UNIT_AFTER.match(text, second.end())
    if between is None or after is None:
        return False
    (kind, size), (other_kind, other_size) = (
        _UNIT_SIZES[match["unit"].lower()] for match in (between, after)
    )
    part_size = found_number(second).value * other_size
    return (
        kind == other_kind
        and size > other_size
        and (part_size < size or _summed_past_a_whole([between["joiner"]], text, after.end()))
    )
