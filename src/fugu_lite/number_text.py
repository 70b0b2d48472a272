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
        multiplier = _multiplier(unit["after"] or "")
        if multiplier is not None:
            full = float(unit["number"]) * multiplier
            return (
                " (write the number alone and in full, without a currency sign, unit or "
                f"multiplier: {full:.15g})"
            )
        return f" (write the number alone, without a currency sign or unit: {unit['number']})"
    return ""


# a thousands or larger suffix after a number ("5k", "7B"): the number alone would be 1000 or
# more times too small. No "m": milli, metres and minutes write it too.
_MULTIPLIER_SUFFIXES: dict[str, float] = {
    **dict.fromkeys(("k", "K"), 1e3),
    "M": 1e6,
    **dict.fromkeys(("B", "bn"), 1e9),
}

# a magnitude word after a number ("5 thousand"), read in any case
_MULTIPLIER_WORDS: dict[str, float] = {
    "thousand": 1e3,
    "million": 1e6,
    "billion": 1e9,
    "trillion": 1e12,
}


def _multiplier(after: str) -> float | None:
    """What the text after a number multiplies it by: its first word, a suffix in its case
    ("k", "M": "m" is none) or a word in any case ("Thousand"), with or without a unit after
    it ("5 thousand tokens") or hyphened to one ("3 million-token"); None for a unit."""
    words = after.split()
    word = words[0].split("-")[0] if words else ""
    return _MULTIPLIER_SUFFIXES.get(word, _MULTIPLIER_WORDS.get(word.casefold()))


# ISO 4217's codes (2025): three capitals before a number that are none are a name's ("GPT4")
_ISO_4217 = """
AED AFN ALL AMD ANG AOA ARS AUD AWG AZN BAM BBD BDT BGN BHD BIF BMD BND BOB BOV BRL BSD BTN
BWP BYN BZD CAD CDF CHE CHF CHW CLF CLP CNY COP COU CRC CUC CUP CVE CZK DJF DKK DOP DZD EGP
ERN ETB EUR FJD FKP GBP GEL GHS GIP GMD GNF GTQ GYD HKD HNL HTG HUF IDR ILS INR IQD IRR ISK
JMD JOD JPY KES KGS KHR KMF KPW KRW KWD KYD KZT LAK LBP LKR LRD LSL LYD MAD MDL MGA MKD MMK
MNT MOP MRU MUR MVR MWK MXN MXV MYR MZN NAD NGN NIO NOK NPR NZD OMR PAB PEN PGK PHP PKR PLN
PYG QAR RON RSD RUB RWF SAR SBD SCR SDG SEK SGD SHP SLE SLL SOS SRD SSP STN SVC SYP SZL THB
TJS TMT TND TOP TRY TTD TWD TZS UAH UGX USD USN UYI UYU UYW UZS VED VES VND VUV WST XAF XAG
XAU XBA XBB XBC XBD XCD XCG XDR XOF XPD XPF XPT XSU XTS XUA XXX YER ZAR ZMW ZWG ZWL
"""
_CURRENCY_CODES = frozenset(_ISO_4217.split())

# GPT-4o's "o" (omni) right after the digits, alone: "4o", "4O mini" (not "4omni")
_OMNI_SUFFIX = re.compile(r"[oO](?![^\W\d_])")


def _digits_of_a_name(unit: re.Match[str]) -> bool:
    """Whether the number's digits are part of a name (a worker's, in a shifted column): a
    letter comes right before them ("m1", "gpt-4o", "claude-3-haiku", "GPT-4") other than a
    currency code's ("USD1.5", `_CURRENCY_CODES`), or the word right after them holds a hyphen
    ("3.5-turbo", "4o-mini"; not after a multiplier: "5k-token") or is GPT-4o's "o" ("4o"). A
    currency sign is no letter ("$1.5", "US$1.5"), and a word spaced from the number is read as
    a currency code ("USD 1.5"; so is "gpt 4")."""
    before, after = unit["before"], unit["after"] or ""
    lettered = before[-1:].isalpha() and unit.end("before") == unit.start("number")
    currency_code = before in _CURRENCY_CODES
    joined = unit.end("number") == unit.start("after")
    hyphened_name = "-" in after and _multiplier(after) is None
    named_after = joined and (hyphened_name or _OMNI_SUFFIX.match(after) is not None)
    return (lettered and not currency_code) or named_after


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
