"""A score or cost as a table or a hand-written file gives it (a CSV cell's text, a JSON
value): one rule for every importer and for a records file (`True` and `false` are 1 and 0, a
number written as text is that number), and how to write a value that is no number."""

from __future__ import annotations

import math
import re

BOOLEAN_TEXT: dict[str, float] = {"true": 1.0, "false": 0.0}


def to_float(value: object) -> float | None:
    """The value as a finite float, or None when it is missing, not a number, NaN or infinite.
    A boolean is 1 or 0, and so is its text in a CSV (`True`, `false`: what pandas' to_csv
    writes for a boolean column), as a JSON true/false is. The minus sign U+2212 (a table
    copied from a web page or a document) is a minus. A text with an underscore is no number:
    Python's float() reads `1_0` as 10, a reward of ten where 1.0 was meant."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float):
        try:
            number = float(value)
        except OverflowError:  # a JSON integer beyond a float's range (10**400) crashed
            return None
    elif isinstance(value, str):
        if value.strip().casefold() in BOOLEAN_TEXT:
            return BOOLEAN_TEXT[value.strip().casefold()]
        if "_" in value:
            return None
        try:
            number = float(value.strip().replace("\u2212", "-"))
        except ValueError:
            return None
    else:
        try:
            number = float(value)  # type: ignore[arg-type]  # numpy scalars
        except (TypeError, ValueError):
            return None
    return number if math.isfinite(number) else None


# a number with a currency sign before it or a unit after it ($0.002, 0.01 USD, 120 tokens):
# a spreadsheet's currency format, or a unit typed into the cell
UNIT_AROUND_NUMBER = re.compile(
    r"\s*(?P<before>[^\s\d.,+-]*)\s*(?P<number>[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"
    r"\s*(?P<after>[^\s\d.,%][^\d.,]*)?"
)

# a spreadsheet's percentage format (85%), which only the long format reads as a fraction
PERCENTAGE = re.compile(r"\s*(?P<number>[-+]?(?:\d+\.?\d*|\.\d+))\s*%\s*")


# what a spreadsheet writes for a formula that failed (#N/A, a lookup that found nothing, is
# a missing value: BLANKS)
SPREADSHEET_ERROR = re.compile(
    r"\s*#(?:DIV/0!|VALUE!|REF!|NAME\?|NUM!|NULL!|SPILL!|CALC!)\s*", re.IGNORECASE
)


def number_hint(value: object) -> str:
    """How to write a number that a spreadsheet or a person wrote otherwise: with a decimal
    comma ("0,5") or a thousands separator ("1,000", "1_000"), as a percentage ("85%"), or
    with a currency sign or unit ("$0.002"; not a name with a digit, "gpt-4", "3.5-turbo":
    see `_digits_of_a_name`), which a number here cannot hold; or what a spreadsheet's
    formula error ("#DIV/0!", told to be written as 0) is."""
    if not isinstance(value, str):
        return ""
    if SPREADSHEET_ERROR.fullmatch(value):
        return (
            " (a spreadsheet's formula error: fix the formula in the sheet and save the CSV "
            "again, or empty the cell where the value is missing)"
        )
    if "_" in value:
        return _underscore_hint(value.strip())
    percentage = PERCENTAGE.fullmatch(value)
    if percentage is not None:
        return f" (write the percentage as a fraction: {float(percentage['number']) / 100:g})"
    if re.fullmatch(r"\s*[-+]?[0-9.]*[0-9],[0-9][0-9,.]*\s*", value):
        return " (write numbers with a decimal point and no thousands separator: 0.5, 1000)"
    unit = UNIT_AROUND_NUMBER.fullmatch(value)
    if unit is not None and (unit["before"] or unit["after"]) and not _digits_of_a_name(unit):
        return f" (write the number alone, without a currency sign or unit: {unit['number']})"
    return ""


def _digits_of_a_name(unit: re.Match[str]) -> bool:
    """Whether the number's digits are part of a name (a worker's, in a shifted column): a
    letter comes right before them ("m1", "gpt-4o", "claude-3-haiku") other than a currency
    code's three capitals ("USD1.5"), or the word right after them holds a hyphen
    ("3.5-turbo", "4o-mini"). A currency sign is no letter ("$1.5", "US$1.5"), and a word
    spaced from the number is read as a currency code ("USD 1.5"; so is "gpt 4")."""
    before, after = unit["before"], unit["after"] or ""
    lettered = before[-1:].isalpha() and unit.end("before") == unit.start("number")
    currency_code = re.fullmatch(r"[A-Z]{3}", before) is not None
    hyphenated = unit.end("number") == unit.start("after") and "-" in after
    return (lettered and not currency_code) or hyphenated


def _underscore_hint(value: str) -> str:
    """`1_0`: 10 without the underscore, or 1.0 if it stood for a decimal point."""
    joined = value.replace("_", "")
    if to_float(joined) is None:
        return ""
    dotted = value.replace("_", ".")
    if value.count("_") == 1 and "." not in joined and to_float(dotted) is not None:
        return (
            f" (write the number without underscores: {joined}, or {dotted} if a decimal "
            "point was meant)"
        )
    return f" (write the number without underscores: {joined})"
