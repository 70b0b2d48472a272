"""What a number written in text is worth: the ways numbers are written (thousands
separators, locale formats, LaTeX, fractions, powers, magnitude words, numbers in words),
one number's value, and whether it matches a reference answer.
"""

from __future__ import annotations

import math
import re
import unicodedata
from fractions import Fraction

from pydantic import BaseModel

from .common import clip, latex_fractions

NUMBER = re.compile(
    r"(?<![\w.])(?<!\^)(?<!\^\s)"  # "cm^2" has no number 2
    r"(?<![^\W\d_]-)"  # nor a name, "GPT-4o", "Llama-3", "COVID-19" (read 4, 3, 19)
    # "negative 7", "minus 7" ("10 minus 7" is a subtraction); a dollar escaped in markdown
    # keeps its sign: "-\$12" is -12
    r"(?P<sign>-|(?<![\w-])(?<!\d\s)(?<!\d\s\s)(?i:negative|minus)\s)?(?P<dollar>\\?\$\s?)?"
    r"(?P<body>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)"
    # 1e6, 1.5 x 10^6, 2^10, 10**3
    r"(?:[eE](?P<e_power>[+-]?\d+)(?!\w)"
    r"|\s?(?:×|x|\*|·|⋅|\\times|\\cdot)\s?10\s?(?:\^|\*\*)\s?\{?\s?(?P<ten_power>[+-]?\d+)\}?"
    r"|\s?(?:\^|\*\*)\s?\{?\s?(?P<power>[+-]?\d+)\}?)?(?!\d)"
    r"(?:\s?/\s?(?P<denominator>\d+)(?!\d|[.,]\d|\s?/))?"
    r"(?:(?P<percent>\s?(?:%|percent\b|per cent\b))"
    # "2.5 million", "1.5k", "1.5K", "$3M": "1 kg", "5 km", "1kB" and "3k+1" are no thousands
    r"|\s?(?P<magnitude_word>(?i:hundred|thousand|million|billion|trillion)\b)"
    r"|(?P<magnitude>(?(dollar)(?:[kKmMbB]|bn|mn)|[kK]))(?!\w|\s?[+*/^=(]))?"
)
_MAGNITUDES = {"hundred": 2, "thousand": 3, "million": 6, "billion": 9, "trillion": 12}
_MAGNITUDES |= {"k": 3, "m": 6, "mn": 6, "b": 9, "bn": 9}


class FoundNumber(BaseModel):
    value: float
    text: str
    decimals: int
    percent: bool = False
    """Written with a percent sign: "50%" is also read as 0.5 (see `numbers_match`)."""
    symbolic: bool = False
    """A coefficient or radicand of π or a root ("4π", "2√3", "\\sqrt{2}"): no answer."""
    as_written: tuple[float, int] | None = None
    """The value and decimals before a magnitude word or suffix (2.5 of "2.5 million"), also
    read: an answer in millions matches a reference counted in millions."""
    in_other_unit: tuple[float, int] | None = None
    """The same quantity given in another unit the question asks for, also read: "150
    minutes (9000 seconds)" for "... in minutes and seconds" matches 150 and 9000."""
    in_digits: bool = False
    """Written out digit by digit ("1000001", "$1,000,001.00"; not "1.000001e6", "2.5
    million", "3/4"): a whole number so written is no rounding of another one."""


NUMBER_WORDS: dict[str, int] = {
    word: value
    for value, word in enumerate(
        [
            "zero",
            "one",
            "two",
            "three",
            "four",
            "five",
            "six",
            "seven",
            "eight",
            "nine",
            "ten",
            "eleven",
            "twelve",
            "thirteen",
            "fourteen",
            "fifteen",
            "sixteen",
            "seventeen",
            "eighteen",
            "nineteen",
            "twenty",
        ]
    )
} | {"once": 1, "twice": 2, "thrice": 3}

_TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50}
_TENS |= {"sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90}
_UNITS = "one|two|three|four|five|six|seven|eight|nine"
# "twenty-six" is 26 (not six); a part of a longer number in words, "one hundred twenty-six",
# is not read
_LARGER_BEFORE = re.compile(
    r"\b(?:hundred|thousand|million|billion)(?:[\s-]+and)?[\s-]+$", re.IGNORECASE
)
WORDED_NUMBER = re.compile(
    rf"\b(?:(?P<tens>{'|'.join(_TENS)})(?:[-\s](?P<unit>{_UNITS}))?"
    rf"|(?P<word>{'|'.join(NUMBER_WORDS)}))\b"
    r"(?P<larger_after>[\s-]+(?:hundred|thousand|million|billion)\b)?",
    re.IGNORECASE,
)


# "negative seven", "minus seven" (not "ten minus seven" nor "10 minus seven": a subtraction)
_SIGN_BEFORE = re.compile(r"(?<![\w-])(?:negative|minus)\s$", re.IGNORECASE)
_OPERAND_BEFORE = re.compile(
    rf"(?:\d|\b(?:{'|'.join([*NUMBER_WORDS, *_TENS])}))\s+$", re.IGNORECASE
)


def worded_number(match: re.Match[str]) -> tuple[FoundNumber | None, str]:
    """The value of a number in words ("twelve", "twenty-six", "once", "negative seven"), or
    None and why when it is a part of a longer one ("one hundred twenty-six")."""
    shown = match.group(0).strip()
    text, start = match.string, match.start()
    if match["larger_after"] or _LARGER_BEFORE.search(text, max(0, start - 30), start):
        return None, f"a number in words the grader does not read: {clip(shown)!r}"
    if match["tens"]:
        value = _TENS[match["tens"].lower()]
        if match["unit"]:
            value += NUMBER_WORDS[match["unit"].lower()]
    else:
        value = NUMBER_WORDS[match["word"].lower()]
    sign = _SIGN_BEFORE.search(text, max(0, start - 9), start)
    if sign is not None and not _OPERAND_BEFORE.search(
        text, max(0, sign.start() - 12), sign.start()
    ):
        value, shown = -value, f"{sign.group(0)}{shown}"
    return FoundNumber(value=value, text=shown.lower(), decimals=0), "a number word"


def numbers_match(
    found: FoundNumber,
    reference: float,
    reference_decimals: int = 0,
    reference_percent: bool = False,
    decimals_asked: int | None = None,
) -> bool:
    """Equal within 1e-6 relative (but for two whole numbers, the found one written out in
    digits: 1000001 is not 1000000), or at the decimals shown (see `_equal`). "50%" matches a
    reference of 50 and, unless the reference itself is written with "%", one of 0.5 (a
    reference "50%" is 50 percent: "0.5" stays ambiguous and does not match it)."""
    readings = [(found.value, found.decimals)]
    if _different_whole_numbers(found, reference):
        readings = []  # 1000001 is not 1000000, though within 1e-6 of it
    if found.as_written is not None:
        readings.append(found.as_written)
    if found.in_other_unit is not None:
        readings.append(found.in_other_unit)
    if found.percent and not reference_percent:
        readings.append((found.value / 100, found.decimals + 2))
    return any(
        _equal(value, decimals, reference, reference_decimals, decimals_asked)
        for value, decimals in readings
    )


def _different_whole_numbers(found: FoundNumber, reference: float) -> bool:
    """Whether `found`, a whole number written out in digits, is another whole number than
    `reference` (also one written with decimals, "7006652.0", as a float column's CSV gives
    it): the relative tolerance is for float noise and roundings, and made an answer off in
    its last digits right (7006653 for 1234 * 5678 = 7006652)."""
    return (
        found.in_digits
        and found.value.is_integer()
        and reference.is_integer()
        and found.value != reference
    )


MIN_ROUNDED_REFERENCE_DECIMALS = 4


def _equal(
    value: float,
    decimals: int,
    reference: float,
    reference_decimals: int,
    decimals_asked: int | None = None,
) -> bool:
    """Equal, or one side the other rounded to its two or more decimals: "0.33" for 1/3 (or
    1/3 for a reference written 0.3333); "1.33" for a reference 1.333333, which is itself
    rounded, unless the question asks for more decimals than the answer gives; "1.333333"
    for a reference 1.33 of three significant digits or more, or of the decimals asked
    ("0.054" is no answer for a reference 0.05)."""
    # an absolute tolerance only beside a zero: between two small numbers it would make
    # 5.29e-10 equal 5.29e-11, and an answer 0 is no answer for a small key written as
    # such (1.6e-19), only for a key's float noise (5.551115123125783e-17)
    noise = reference == 0 or (value == 0 and _float_noise(reference, reference_decimals))
    near_zero = 1e-9 if noise else 0.0
    if math.isclose(value, reference, rel_tol=1e-6, abs_tol=near_zero):
        return True
    coarse = min(decimals, reference_decimals)
    if coarse == 0:
        rounded = max(decimals, reference_decimals) >= 2
    elif decimals < reference_decimals:
        rounded = (
            coarse >= 2
            and reference_decimals >= MIN_ROUNDED_REFERENCE_DECIMALS
            and (decimals_asked is None or decimals >= decimals_asked)
            # "0.00" keeps no digit of 1.6e-19 (unless the question asks for 2 decimals)
            and (decimals_asked == decimals or _significant_digits(reference, coarse) > 0)
        )
    elif decimals > reference_decimals:
        digits = f"{abs(reference):.{coarse}f}".replace(".", "").lstrip("0")
        rounded = coarse >= 2 and (len(digits) >= 3 or decimals_asked == coarse)
    else:
        rounded = False
    shown = max(decimals, reference_decimals) if coarse == 0 else coarse
    # the float error of a half-way rounding is relative: 1e-12 beside 6.6e-34 is no error
    return rounded and abs(value - reference) <= 0.5 * 10**-shown + 1e-12 * abs(reference)


def _significant_digits(number: float, decimals: int) -> int:
    """The significant digits of `number` written to `decimals` places: 0 for 1.6e-19 at 2."""
    return len(f"{abs(number):.{decimals}f}".replace(".", "").lstrip("0"))


# a computed key's float noise shows a double's full precision: 5.551115123125783e-17
_FLOAT_NOISE_DIGITS = 15


def _float_noise(reference: float, reference_decimals: int) -> bool:
    return _significant_digits(reference, reference_decimals) >= _FLOAT_NOISE_DIGITS


_PLACES = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6}
_DECIMALS_ASKED = re.compile(
    rf"\b(?P<places>\d|{'|'.join(_PLACES)})\s+(?:decimal\s+(?:places?|digits?)|d\.\s?p\.)"
    r"|\bnearest\s+(?P<unit>tenth|hundredth|thousandth)\b",
    re.IGNORECASE,
)


def decimals_asked(prompt: str) -> int | None:
    """The decimals a question asks the answer to be given to ("to 2 decimal places", "to
    the nearest hundredth"), or None."""
    match = _DECIMALS_ASKED.search(prompt)
    if match is None:
        return None
    if match.group("unit"):
        return {"tenth": 1, "hundredth": 2, "thousandth": 3}[match.group("unit").lower()]
    places = match.group("places").lower()
    return int(places) if places.isdigit() else _PLACES[places]


def decimals_shown(text: str) -> int:
    """The decimals a reference is written to: 2 for "1.33" or "50.00%", 20 for "1.6e-19"
    (the mantissa's one and the exponent's 19), 0 for "1.5e6"."""
    match = re.search(r"(?:\.(\d+))?(?:[eE](?P<power>[+-]?\d+))?\s*%?\s*$", text.strip())
    if match is None:
        return 0
    return max(0, len(match.group(1) or "") - int(match.group("power") or 0))


def find_numbers(text: str) -> list[re.Match[str]]:
    """The numbers of `text`, in order; only the one chosen is converted (`found_number`)."""
    return [match for match in NUMBER.finditer(text) if is_number(match)]


def is_number(match: re.Match[str]) -> bool:
    """False for a zero denominator ("1/0") or zero to a negative power ("0^-1")."""
    denominator = match.group("denominator")
    if denominator is not None and denominator.strip("0") == "":
        return False
    power = match.group("power")
    zero = match.group("body").replace(",", "").strip("0.") == ""
    return not (zero and power is not None and int(power) < 0)


# The whole a number is a part of, "14 apples left out of 17", "2 out of the 4", "2 of the 4"
# (not after more words: "3 packs for a total of 12"): not the answer unless the question
# asks for a whole
_WHOLE_BEFORE = re.compile(
    r"\d(?:[^\d.?!\n]{0,40}\bout|(?:\s+[^\W\d]+)?)\s+of\s+(?:the\s+|a\s+total\s+of\s+)?\$?$",
    re.IGNORECASE,
)


def is_the_whole(number: re.Match[str]) -> bool:
    """Whether `number` is the whole another number before it is a part of ("5 of 8": 8)."""
    start = number.start()
    before = number.string[max(0, start - 60) : start]
    # the plain test first: the search tries every start in the window, for every number
    return "of" in before.lower() and _WHOLE_BEFORE.search(before) is not None


SYMBOL_AFTER = re.compile(r"\s?(?:π|√|\\pi(?![a-zA-Z])|\\sqrt)")
# a constant's name after a number: "3 pi" is "3π" (not "3 pies")
PI_AFTER_A_NUMBER = re.compile(r"(?<=\d)\s?pi\b", re.IGNORECASE)
_SYMBOL_BEFORE = re.compile(r"(?:√|\\sqrt\s?(?:\[\d+\])?\{?)\s?$")


def _is_symbolic(match: re.Match[str]) -> bool:
    text = match.string
    return bool(
        SYMBOL_AFTER.match(text, match.end())
        or PI_AFTER_A_NUMBER.match(text, match.end())
        or _SYMBOL_BEFORE.search(text, max(0, match.start() - 12), match.start())
    )


def found_number(match: re.Match[str]) -> FoundNumber:
    body = match.group("body").replace(",", "")
    value = _exact_value(body)
    power = match.group("e_power") or match.group("ten_power")
    if power is not None:
        value *= _power(Fraction(10), int(power))
    elif match.group("power") is not None:
        value = _power(value, int(match.group("power")))
    if match.group("denominator"):
        value /= _exact_value(match.group("denominator"))
    if match.group("sign"):
        value = -value
    decimals = 0
    if "." in body and not match.group("denominator") and match.group("power") is None:
        decimals = max(0, len(body.split(".")[1]) - int(power or 0))
    magnitude = match.group("magnitude_word") or match.group("magnitude")
    if magnitude is None:
        return FoundNumber(
            value=_as_float(value),
            text=match.group(0).strip(),
            decimals=decimals,
            percent=match.group("percent") is not None,
            symbolic=_is_symbolic(match),
            in_digits=power is None
            and match.group("power") is None
            and not match.group("denominator"),
        )
    digits = _MAGNITUDES[magnitude.lower()]
    return FoundNumber(
        value=_as_float(value * _power(Fraction(10), digits)),
        text=match.group(0).strip(),
        decimals=max(0, decimals - digits),
        as_written=(_as_float(value), decimals),
    )


def _power(base: Fraction | float, exponent: int) -> Fraction | float:
    """base ** exponent, exact while it stays small; else a float (inf when it overflows):
    "1e999999" or a run of thousands of digits to a power is no answer, not an error."""
    small = isinstance(base, Fraction) and max(base.numerator, base.denominator) < 10**20
    if small and abs(exponent) <= 1000:
        return base**exponent
    try:
        return float(base) ** exponent
    except (OverflowError, ZeroDivisionError):  # 0.0 ** -n for a zero too long to check
        return math.inf


def _exact_value(body: str) -> Fraction | float:
    """Python refuses to read integers of more than 4300 digits (a model repeating "1"s):
    such a number is read as a float (inf for a huge integer)."""
    try:
        return Fraction(body)
    except ValueError:
        return float(body)


def _as_float(value: Fraction | float) -> float:
    """A run of hundreds of digits (small models repeat them) is a number no answer equals,
    not a grading failure."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


_SUPERSCRIPTS = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁺", "0123456789-+")
_SUPERSCRIPT_POWER = re.compile(r"(?<=\d)\s?([⁻⁺]?[⁰¹²³⁴⁵⁶⁷⁸⁹]+)")


# Unambiguous locale formats, written out plainly before NFKC (which turns the thin and
# no-break spaces into spaces and "½" into "1⁄2"): "1 234,5" (those spaces between
# thousands), "1.234,5" and "1.234.567" (dots between thousands), "1½".
_SPACED_THOUSANDS = re.compile(r"(?<![\d.,])\d{1,3}(?:[\u00a0\u2009\u202f]\d{3})+(?:,\d+)?(?!\d)")
# Plain spaces between thousands too ("2 500 grams", "1 234 567"): read as two numbers, "2
# 500" answered 500, a wrong answer for 2500 scored right against 500. Not a list's tail or
# head ("1 2 345 678", "12 345 6"), nor a first group written with a leading 0. A decimal
# comma may follow ("1 234,56", French; "Answer: 1 234,56" read 1), not one of three digits
# ("1 234,567" stays as it is).
_PLAIN_SPACED_THOUSANDS = re.compile(
    r"(?<![\w.,])(?<!\d )[1-9]\d{0,2}(?: \d{3})++(?:,(?!\d{3}(?!\d))\d+)?(?!\w| \d|[.,/]\d)"
)
_DOTTED_DECIMAL = re.compile(r"(?<![\w.,])\d{1,3}(?:\.\d{3})+,\d+(?!\d|[.,]\d)")
_DOTTED_THOUSANDS = re.compile(r"(?<![\w.,])\d{1,3}(?:\.\d{3}){2,}(?!\d|[.,]\d)")
# Indian grouping, "1,50,000" (one lakh fifty thousand) and "12,34,567", and apostrophes
# between thousands (Swiss), "1'234'567": read 1 and 12 before (or 50,000 and 34,567 as the
# last number); not in a bracketed list, "[10,20,300]"
_INDIAN_THOUSANDS = re.compile(r"(?<![\w.,\[(])\d{1,2}(?:,\d{2})+,\d{3}(?:\.\d+)?(?!\w|[.,]\d)")
_APOSTROPHE_THOUSANDS = re.compile(r"(?<![\w.,'’])\d{1,3}(?:['’]\d{3})+(?:\.\d+)?(?!\w|['’.,]\d)")
_VULGAR_FRACTION = re.compile(r"(?:(?<![\d.,])(?P<whole>\d{1,9})\s?)?(?P<fraction>[¼½¾⅐-⅞])")


def _plain_locale_number(match: re.Match[str], thousands: str) -> str:
    whole, _, decimals = match.group(0).partition(",")
    digits = re.sub(rf"[{thousands}]", "", whole)
    return f"{digits}.{decimals}" if decimals else digits


def _vulgar_fraction(match: re.Match[str]) -> str:
    value = Fraction(unicodedata.numeric(match.group("fraction"))).limit_denominator(10)
    value += int(match.group("whole") or 0)
    return f"{value.numerator}/{value.denominator}"


def normalise_number_text(text: str) -> str:
    # "10⁶" is 10^6 (NFKC would make it 106)
    text = _SUPERSCRIPT_POWER.sub(lambda m: "^" + m.group(1).translate(_SUPERSCRIPTS), text)
    text = _SPACED_THOUSANDS.sub(lambda m: _plain_locale_number(m, "\u00a0\u2009\u202f"), text)
    text = _PLAIN_SPACED_THOUSANDS.sub(lambda m: _plain_locale_number(m, " "), text)
    text = _DOTTED_DECIMAL.sub(lambda m: _plain_locale_number(m, "."), text)
    text = _DOTTED_THOUSANDS.sub(lambda m: _plain_locale_number(m, "."), text)
    text = _INDIAN_THOUSANDS.sub(lambda m: m.group(0).replace(",", ""), text)
    text = _APOSTROPHE_THOUSANDS.sub(lambda m: re.sub("['’]", "", m.group(0)), text)
    text = _VULGAR_FRACTION.sub(_vulgar_fraction, text)
    text = unicodedata.normalize("NFKC", text)
    text = _CJK_BEFORE_NUMBER.sub(" ", text.replace("\u3002", ". "))
    text = _CJK_SMALL_NUMBER_OF_A_BIG_UNIT.sub(_cjk_small_number, text)
    text = _CJK_MAGNITUDE.sub(_cjk_magnitude, text)
    text = text.replace("\u2212", "-").replace("\u2013", "-").replace("{,}", ",")
    text = _LATEX_THOUSANDS.sub(",", text)
    text = _LATEX_PERCENT.sub("%", text)
    text = _ASCII_MIXED_NUMBER.sub(_ascii_mixed_number, text)
    text = _AND_A_HALF.sub(_and_a_half, text)
    text = _WORDED_MAGNITUDE.sub(_worded_magnitude, text)
    text = _ONE_IN_N.sub(_one_in_n, text)
    return latex_fractions(text)  # "$\frac{1}{2}$" outside a \boxed{} too


# Chinese, Japanese and Korean script is made of word characters, so "答案是42" (the answer is
# 42) had no number (a number must not follow a word character) and "答案是-5" read 5: a
# space is put between such a character and a number after it, and the ideographic full
# stop "。" ends a sentence as ". " does.
_CJK = r"\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af"
_CJK_BEFORE_NUMBER = re.compile(rf"(?<=[{_CJK}])(?=[-+$]?\d)")
# "3万" is 30,000 and "1.2亿" 120,000,000 (not 3 and 1.2), and with smaller parts after it,
# each below the unit before it, "3万5千" 35,000 and "1亿2000万" 120,000,000 (read 5 and 2000
# before), and a last digit alone counts in the unit below the one before it, as spoken:
# "3万5" is 35,000 and "3千5" 3,500 (30,005 is written "3万零5"; read 30000 or 5 before),
# while two digits or more are the rest below that unit: "3万2000" is 32,000, "3万12" 30,012
# and "3千500" 3,500 (read 2000, 12, 500 before; a longer run, "3万12345", is a number of its
# own), neither after a decimal ("1.5万5" stays 15,000 and 5) nor with one ("3万5.5" is
# 30,000 and 5.5, not 35,000.5).
# (A run of digits past 20 is left as written: its value cannot be written as an int past
# 4300 digits, a grading error.)
# (A part may follow the space _CJK_BEFORE_NUMBER puts after 万.) A unit may be compound,
# "3千万" 30,000,000 and "3万亿" 3 * 10^12 (read 3 and 30000), and 千 or 百 alone is one too,
# "5千" 5000, but not the metric prefix of 千克 (kilogram), 千米 (kilometre), ..., and 十
# before a last digit, "3十5" 35 as "3百2十5" is 325 (not "3十分", very, nor "1.5十5").
_CJK_BIG_UNIT = r"[十百千]?(?:[万萬][亿億]|[万萬亿億])"
_CJK_MAGNITUDE = re.compile(
    r"(?<![\d.,])(?P<number>\d{1,20}(?P<decimals>\.\d{1,20})?)\s?"
    rf"(?P<unit>{_CJK_BIG_UNIT}|[百千](?![克米瓦卡焦赫帕伏升])"
    r"|(?(decimals)(?!)|十(?= ?[1-9](?![\d万萬亿億千百十]))))"
    rf"(?P<parts>(?: ?\d{{1,20}}(?:{_CJK_BIG_UNIT}|[千百十]))*+)"
    r"(?(decimals)|(?: ?(?:(?P<last_digit>[1-9])|(?P<rest>\d{2,20})))?)(?![\d万萬亿億千百十]|\.\d)"
)
# a number of thousands, hundreds and tens before a big unit counts in it, "3十5万" is 35万
# (350,000; read 50,000), "1百3十5万" 135万 and "3千5百万" 3500万 (read 5), written as "35万",
# "135万", "3500万" before the units are read; a last digit counts in the unit below the one
# before it, as "3千5" is 3500: "3千5万" is 3500万. Spaces may stand around 千, 百 and 十
# ("3 十 5 万" read 35), not a decimal before ("1.3十5万").
_CJK_SMALL_NUMBER_OF_A_BIG_UNIT = re.compile(
    r"(?<![\d.,])(?<![千百十] )(?<![千百十])(?=[1-9] ?[千百十])"
    r"(?:(?P<thousands>[1-9]) ?千 ?)?(?:(?P<hundreds>[1-9]) ?百 ?)?(?:(?P<tens>[1-9]) ?十 ?)?"
    rf"(?P<last_digit>[1-9])?(?= ?{_CJK_BIG_UNIT})"
)
_CJK_SMALL_UNITS = {"thousands": 3, "hundreds": 2, "tens": 1}
_CJK_PART = re.compile(rf" ?(?P<number>\d{{1,20}})(?P<unit>{_CJK_BIG_UNIT}|[千百十])")
_CJK_MAGNITUDES = {"万": 4, "萬": 4, "亿": 8, "億": 8, "千": 3, "百": 2, "十": 1}


def _cjk_unit_digits(unit: str) -> int:
    """The power of ten of a unit, compound ones too: 4 for 万, 7 for 千万, 12 for 万亿."""
    return sum(_CJK_MAGNITUDES[character] for character in unit)


def _cjk_small_number(match: re.Match[str]) -> str:
    """The value of thousands, hundreds and tens before a big unit: "135" for "1百3十5"."""
    value, digits = 0, 0
    for group, unit_digits in _CJK_SMALL_UNITS.items():
        if match[group]:
            value, digits = value + int(match[group]) * 10**unit_digits, unit_digits
    if match["last_digit"]:
        value += int(match["last_digit"]) * 10 ** (digits - 1)
    return str(value)


def _cjk_magnitude(match: re.Match[str]) -> str:
    digits = _cjk_unit_digits(match["unit"])
    value = Fraction(match["number"]) * 10**digits
    for part in _CJK_PART.finditer(match["parts"]):
        size = int(part["number"]) * 10 ** _cjk_unit_digits(part["unit"])
        if "." in match["number"] or size >= 10**digits:  # "1.5万5千", "3万12千": as written
            return match.group(0)
        value, digits = value + size, _cjk_unit_digits(part["unit"])
    if match["last_digit"]:
        value += int(match["last_digit"]) * 10 ** (digits - 1)
    rest = match["rest"]
    if rest is not None and len(rest) > digits:  # "3万12345": 30000, then 12345
        return f"{value} {rest}"
    if rest is not None:
        value += int(rest)
    if value.denominator == 1:
        return str(value.numerator)
    return _decimal_text(value, len(match["decimals"]) - 1 - digits)


def _decimal_text(value: Fraction, places: int) -> str:
    """`value`, a number of `places` decimals, written out exactly: "12345.6" for
    "1.23456万" (not 1.23456, nor a float's rounding)."""
    whole, rest = divmod(int(value * 10**places), 10**places)
    return f"{whole}.{rest:0{places}d}"


_SMALL_NUMBER_WORDS = {word: value for word, value in NUMBER_WORDS.items() if 1 <= value <= 20}
_SMALL_NUMBER = rf"(?:\d{{1,9}}|{'|'.join(_SMALL_NUMBER_WORDS)})"
# "a million", "one thousand", "two million" (read as "2 million"); not a part of a longer
# number in words ("twenty-two thousand", "one hundred and five", "half a million", "one in
# a million"): those are left as they are, not misread.
_WORDED_MAGNITUDE = re.compile(
    rf"(?<![\w-])(?P<word>a|{'|'.join(_SMALL_NUMBER_WORDS)})(?P<space>[ -])"
    r"(?P<magnitude>hundred|thousand|million|billion|trillion)\b",
    re.IGNORECASE,
)
_WORD_BEFORE = re.compile(r"(?:^|\W)(?P<word>\w+)[\s-]*$")
_WORD_AFTER = re.compile(r"[\s-]*(?:and[\s-]+)?(?P<word>\w+)")
_NUMBER_PARTS = set(NUMBER_WORDS) | {"half", "quarter", "third", "of", "in", "per"}
_NUMBER_PARTS |= {"thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"}
_NUMBER_PARTS |= {"hundred", "thousand", "million", "billion", "trillion"}


def _worded_magnitude(match: re.Match[str]) -> str:
    text, start, end = match.string, match.start(), match.end()
    before = _WORD_BEFORE.search(text, max(0, start - 30), start)
    after = _WORD_AFTER.match(text, end, end + 30)
    for word in (before, after):
        if word is not None and (
            word["word"].lower() in _NUMBER_PARTS or word["word"][0].isdigit()
        ):
            return match.group(0)
    value = _SMALL_NUMBER_WORDS.get(match["word"].lower(), 1)
    return f"{value} {match['magnitude']}"


# "1 in 4", "one in four chance": a probability, 1/4 (not the number 4), when it ends the
# clause or is a chance or odds; "7 in 10 days" is left as it is
_ONE_IN_N = re.compile(
    rf"(?<![\w.,/-])(?P<over>{_SMALL_NUMBER}) in (?P<under>{_SMALL_NUMBER})"
    r"(?![\w/]|[.,]\d)(?=(?:\s+(?:chance|odds)\b)?\s*(?:[.,;:!?)\]*_]|$))",
    re.IGNORECASE,
)


def _one_in_n(match: re.Match[str]) -> str:
    over, under = (
        int(part) if part[0].isdigit() else _SMALL_NUMBER_WORDS[part.lower()]
        for part in (match["over"], match["under"])
    )
    return f"{over}/{under}" if 0 < over < under else match.group(0)


# LaTeX spacing between thousands, as in the MATH data set: "10,\\!000", "1\\,234\\,567"
_LATEX_THOUSANDS = re.compile(r"(?<=\d),?\s?\\[,;:! ]\s?(?=\d{3}(?!\d))")  # and "1\\ 000"
# LaTeX's percent sign, "$25\\%$", "50\\,\\%": a percentage, as "25%" is (read 25 alone, so
# not 0.25)
_LATEX_PERCENT = re.compile(r"(?<=\d)\s?(?:\\[,;:! ]\s?)?\\%")
# "1 1/2" is 3/2 as "1½" is; "2 3/2" (not a proper fraction) stays two numbers
_ASCII_MIXED_NUMBER = re.compile(
    r"(?<![\w.,/])(?P<whole>\d{1,9}) (?P<over>\d{1,9})/(?P<under>\d{1,9})(?![\w/]|[.,]\d)"
)


def _ascii_mixed_number(match: re.Match[str]) -> str:
    whole, over, under = int(match["whole"]), int(match["over"]), int(match["under"])
    if not 0 < over < under:
        return match.group(0)
    return f"{whole * under + over}/{under}"


# "2 and a half", "two and a half" are 2.5 (read 2, a wrong answer for 2.5 scored right
# against 2); not a part of a longer number in words ("twenty-two and a half")
_AND_A_HALF = re.compile(
    rf"(?<![\w.,/-])(?P<whole>{_SMALL_NUMBER})\s+and\s+a\s+half\b", re.IGNORECASE
)


def _and_a_half(match: re.Match[str]) -> str:
    whole = match["whole"]
    value = int(whole) if whole[0].isdigit() else _SMALL_NUMBER_WORDS[whole.lower()]
    return f"{value}.5"
