"""What closes a worker's output after its answer and is no answer itself: a parenthetical
showing the working ("12 apples (15 - 3)."), instructions for computing it ("To convert,
multiply 36 by 1000."), an explanation restating the question's numbers ("3 when 15 is
divided by 4"), its setup ("Tom started with 8 and gave away 3."), a reason ("because 1
kilogram is 1000 grams") or a check working back to the question ("Check: 4 × 5 = 20 ✓").
Each rule gives where that closing part starts; the number grader (number.py) reads the
answer before it.
"""

from __future__ import annotations

import bisect
import re

from .number_values import FoundNumber, find_numbers, found_number, is_the_whole, numbers_match

# the end of a sentence (a period before a space or the end of the text) or of a line
SENTENCE_END = re.compile(r"\.(?:\s|$)|\n")

# A closing parenthetical showing the working, not the answer: "12 apples (15 - 3).",
# "391 (17 × 20 = 340, 17 × 3 = 51)",
# "x = 5 (since 2x = 10)", "68°F (using F = C × 9/5 + 32)", "(1 km = 1,000 m)". One that
# restates the answer, "(= 12)", "(i.e. 12)", stays.
# (an operand may carry its unit: "5 kilograms (5000 grams / 1000)." answers 5, "68°F
# (20°C × 9/5 + 32)" 68, and up to two more words that say what it counts: "24 eggs (4
# boxes × 6 eggs each).", "$12 ($10 plus $2 in tax).", "$45 (3 hours × $15 an hour).")
# (each operand read one way only, so that a parenthetical that is no working fails in
# linear time: "\s?°?\s?" read the one space of "1 m" as either, and a unit and the words
# after it could share them out, so n operands were tried in 2^n ways; its unit and words
# are no operator word and taken whole)
_OPERATOR_WORD = r"(?:x|plus|minus|times|divided|multiplied)(?![^\W\d_])"
_OPERAND_WORD = rf"(?!{_OPERATOR_WORD})[^\W\d_]+"
_OPERAND = (
    rf"\$?\d[\d.,]*%?(?:\s?°(?:\s?{_OPERAND_WORD})?|\s?{_OPERAND_WORD})?+"
    rf"(?:\s{_OPERAND_WORD}){{0,2}}+"
)
# a sign or its word: "(15 - 3)", "(20 minus 3)"
_OPERATOR = r"(?:\s*[-+*/×x·÷]\s*|\s+(?:plus|minus|times|(?:divided|multiplied)\s+by)\s+)"
_ARITHMETIC = rf"{_OPERAND}(?:{_OPERATOR}{_OPERAND})+"
# "17 × 20 = 340" (its numbers possessive: a run of "1,1,1,..." is read one way, not split
# into steps in every way, which took quadratic time)
_STEP_NUMBER = r"\$?\d+(?:[.,]\d+)*+%?"
_STEP = rf"{_STEP_NUMBER}(?:\s*[-+*/×x·÷]\s*{_STEP_NUMBER})+\s*=\s*{_STEP_NUMBER}"
_WORKING = re.compile(
    r"\((?:\s*(?:since|because|as|from|using|via|where|given|note|assuming)\b[^()]*"
    rf"|\s*{_ARITHMETIC}\s*"
    # the steps: "391 (17 × 20 = 340, 17 × 3 = 51)"
    rf"|\s*{_STEP}(?:\s*(?:[,;]|\band\b)\s*{_STEP})*\s*"
    # a unit's conversion fact: "(1 kilometer = 1,000 meters)"
    r"|\s*1\s?[^\W\d]+\s*=\s*[\d.,]+\s?[^\W\d]+\s*"
    # what is counted, listed: "4 times (positions 3, 4, 6, 7)", "3 (at 2, 5 and 9)"
    # (not a hedge: "4 (or 5, 6)")
    r"|\s*(?:(?!(?:or|not|maybe|perhaps|possibly|else)\b)[^\W\d_]+\s+){0,3}"
    r"\d+(?:\s*,\s*\d+)*(?:\s*,\s*|\s*,?\s+and\s+)\d+\s*)"
    r"\)[\s.!*_$]*",
    re.IGNORECASE,
)


# A closing clause showing the working after the answer and a comma: "17 left, from 20 minus
# 3.", "17 apples, i.e. 20 - 3.", and a "which is" after none: "17 left which is 20 - 3" (tried
# on the output's last characters only: linear)
_WORKING_CLAUSE = re.compile(
    rf"(?:,\s*(?:from|i\.e\.,?|that\s+is,?|which\s+is)|\s+which\s+is)\s+{_ARITHMETIC}"
    r"[\s.!*_$]*\Z",
    re.IGNORECASE,
)
MAX_WORKING_CLAUSE_CHARS = 200


def working_at_the_end(text: str) -> int | None:
    """Where a parenthetical or a comma's clause ending the output that only shows the
    working starts (a parenthetical's own parentheses read as plain working: "10°C ((50°F -
    32) × 5/9)")."""
    clause = _WORKING_CLAUSE.search(text, max(0, len(text) - MAX_WORKING_CLAUSE_CHARS))
    if clause is not None:
        return clause.start()
    end = text.rfind(")")
    depth, start = 0, end
    while start >= 0:
        depth += {")": 1, "(": -1}.get(text[start], 0)
        if depth == 0:
            break
        start -= 1
    if end < 0 or start < 0:
        return None
    inside = text[start + 1 : end].replace("(", "").replace(")", "")
    return start if _WORKING.fullmatch(f"({inside}{text[end:]}") else None


# Closing instructions for computing the answer: "10 m/s. To convert, multiply 36 by 1000 and
# divide by 3600." (their numbers are operands, and a result on the way is one of their steps:
# "15 apples. Multiply 3 by 4 to get 12, then add 3.")
_METHOD = re.compile(
    r"(?:^|(?<=[.!?])\s++|(?<!\s)[^\S\n]*+\n\s*+)(?:to\s+(?:convert|get|find|calculate|compute|work)\b[^.\n]{0,80}?"
    r",\s*)?(?:(?:first|just|simply|you|we)\s+)?(?:multiply|divide|add|subtract)\b",
    re.IGNORECASE,
)
_RESULT = re.compile(
    r"[=≈:→⇒]|->|\b(?:equals?|gives?|giving|gets?|obtain|is|are|was|makes?|leaves?|results?"
    r"|yields?|so|thus|hence|therefore)\b",
    re.IGNORECASE,
)


_OPERAND_BEFORE = re.compile(
    r"\b(?:by|from|to|with|into|multiply|divide|add|subtract)\s+\$?$", re.IGNORECASE
)


def method_at_the_end(text: str, numbers: list[re.Match[str]]) -> int | None:
    """Where closing instructions start after a number, when they end on an operand ("...
    divide by 3600.", "..., to get 12, then add 3."; "Add 5 and you have 17." ends on its
    result, 17)."""
    methods = list(_METHOD.finditer(text))
    if not methods or not numbers or numbers[0].end() > methods[-1].start():
        return None
    method, last = methods[-1], numbers[-1]
    if last.start() < method.end():
        return None
    operand = _OPERAND_BEFORE.search(text, max(method.end(), last.start() - 20), last.start())
    return method.start() if operand else None


# How many of the question's numbers an explanation may restate: as many as the question
# gives ("25 (Tom had 12, got 8, 4 and 6, gave 5)"), at least 4 ("64 when you multiply 8 by
# 8" restates one twice) and at most 20 (each is compared with each of the question's); so
# a list of them all with the answer again is more ("The sum is 43; sorted: 2, 3, 4, 6, 8,
# 9, 11 and the median is 6" for a list of 7 is no restatement after 43). Past 4, only
# words restate them: a bare list of more may be the answer's ("Step 1: sort: 2, 3, 4, 6, 8,
# 9, 11" for the largest is no restatement after 1)
MIN_RESTATED_NUMBERS = 4
MAX_RESTATED_NUMBERS = 20
_WORD = re.compile(r"\b(?!and\b)[^\W\d_]+", re.IGNORECASE)
# What begins an explanation after the answer: a closing clause ("The remainder is 3 when 15
# is divided by 4.", "12 apples left after giving away 3", "240 minutes in 4 hours"), a dash,
# colon or parenthesis ("15 (Tom had 12, got 8, gave 5)", "15 apples: he had 12, ..."), or a
# note ("15.\nNote: ...")
EXPLANATION_START = re.compile(
    r",?\s+(?:when|whenever|if|after|before|because|since|given|once|by|from|in|out\s+of)\s"
    r"|\s*(?:[—–]|--)\s|:\s|;\s|\s\("
    r"|[.!]?\s+(?:this\s+is\s+)?(?:because|since|note|explanation|reasoning)\b",
    re.IGNORECASE,
)
EXPLANATION_GAP = 200
# an explanation is one clause or sentence: one that ends, or concludes, before the last
# number lets that number answer ("The sum is 16. Sorted: 3, 4, 9. The median is 4.", "He had
# 15 after buying. He has 10 cows.", "...; sorted: 2, 3, 4, 6, so the median is 3")
_ENDS_OR_CONCLUDES = re.compile(
    rf"{SENTENCE_END.pattern}|\b(?:so|thus|therefore|hence)\b", re.IGNORECASE
)


def question_at_the_end(text: str, numbers: list[re.Match[str]], prompt: str) -> int | None:
    """Where an explanation after the answer starts when the few numbers after it (no more
    than the question gives) are all the question's: a number, then an explanation start (a
    clause, a dash, a colon, a parenthesis, a note), then only the question's numbers ("3
    even numbers: 8, 10 and 12" also when the answer is one of them). A clause with a number
    of its own ("He has $20 after 4 weeks." for "how many weeks") may hold the answer, and
    the question's numbers with no explanation start before them ("..., so the largest is
    45") too."""
    if len(numbers) < 2 or not prompt:
        return None
    asked = [found_number(number) for number in find_numbers(prompt)]
    most = min(MAX_RESTATED_NUMBERS, max(MIN_RESTATED_NUMBERS, len(asked)))
    found = None  # the earliest: "3 when 15 is divided by 4" restates from "when", not "by"
    restated: list[FoundNumber] = []
    for index in range(len(numbers) - 1, max(0, len(numbers) - 1 - most), -1):
        restated.append(found_number(numbers[index]))
        if not any(numbers_match(restated[-1], q.value) for q in asked):
            break  # a number of the reply's own follows: the usual rules decide
        if len(restated) > MIN_RESTATED_NUMBERS and not _WORD.search(
            text, numbers[index].end(), numbers[-1].start()
        ):
            break
        answer = numbers[index - 1]
        if any(numbers_match(found_number(answer), number.value) for number in restated):
            continue  # "Comparing 3 and 9: 9 is larger." states its answer again: no explanation
        end = min(numbers[index].start(), answer.end() + EXPLANATION_GAP)
        explanation = EXPLANATION_START.search(text, answer.end(), end)
        if explanation is not None and not _ENDS_OR_CONCLUDES.search(
            text, explanation.end(), numbers[-1].start()
        ):
            found = explanation.start()
    return found


_SENTENCE_BREAK = re.compile(r"[.!?]\s+|\n\s*")
_WORD_BEFORE = re.compile(r"([^\W\d_]+)[^\S\n]*\$?$")
# a state, not an event: "He had 15 then. He has 10 cows." may answer the question's 10
_STATE_WORDS = {"has", "have", "had", "is", "are", "was", "were"}


def _said_as_in_the_question(number: re.Match[str], asked: list[re.Match[str]]) -> bool:
    """Whether `number` follows the word it follows in the question ("He gave away 5." for
    "... and gives away 5."), not a "has" or "is": a copy of the question's event, not a
    result said anew."""
    word = _word_before(number)
    if word is None or word in _STATE_WORDS:
        return False
    return _times_said(number, word, asked) > 0


def _word_before(number: re.Match[str]) -> str | None:
    """The word right before `number` (its verb or noun: "ate" in "Bob ate 3"), casefolded."""
    word = _WORD_BEFORE.search(number.string, max(0, number.start() - 30), number.start())
    return None if word is None else word[1].casefold()


def _times_said(number: re.Match[str], word: str, among: list[re.Match[str]]) -> int:
    """How many of `among` are `number`'s value after `word`."""
    value = found_number(number).value
    return sum(
        numbers_match(found_number(other), value) and _word_before(other) == word for other in among
    )


def _said_more_often_than_asked(numbers: list[re.Match[str]], asked: list[re.Match[str]]) -> bool:
    """Whether one of the question's events is said more often than the question says it:
    "Ann ate 3. Bob ate 3." for "Ann ate 3 pears. Bob ate as many as Ann. ..." says its
    second "ate 3" of its own (Bob's: the answer), no copy of the question's."""
    return any(
        (word := _word_before(number)) is not None
        and _times_said(number, word, numbers) > _times_said(number, word, asked)
        for number in numbers
    )


def setup_at_the_end(text: str, numbers: list[re.Match[str]], prompt: str) -> int | None:
    """Where a closing sentence that only restates the question's setup starts: two or more
    numbers, all the question's, or one said after the word it follows there, and no result
    ("5 apples. Tom started with 8 and gave away 3.", "5 apples. He gave away 3."), after an
    answer of the reply's own, read before the whole it is out of ("He keeps 5 of 8. He
    started with 8 and gave away 3."; the question's number before it may be the answer:
    "Compare 9 and 3. The larger is 9." is no case, it states a result)."""
    if len(numbers) < 2 or not prompt:
        return None
    starts = [m.end() for m in _SENTENCE_BREAK.finditer(text, 0, numbers[-1].start())]
    if not starts:
        return None
    start = starts[-1]
    restated = [number for number in numbers if number.start() >= start]
    before = [number for number in numbers if number.end() <= start]
    if not restated or not before or _RESULT.search(text, start):
        return None
    question_numbers = find_numbers(prompt)
    if len(restated) == 1 and not _said_as_in_the_question(restated[0], question_numbers):
        return None  # "He had 15 then. He has 10 cows.": one number may be the answer
    asked = [found_number(number).value for number in question_numbers]
    if not all(any(numbers_match(found_number(n), q) for q in asked) for n in restated):
        return None
    answer = next((n for n in reversed(before) if not is_the_whole(n)), before[-1])
    if any(numbers_match(found_number(answer), q) for q in asked):
        return None
    return start


def restates_only_the_setup(text: str, numbers: list[re.Match[str]], prompt: str) -> bool:
    """Whether the output's numbers (2 to MAX_RESTATED_NUMBERS of them) only copy the
    question's events, each after the word it follows there, and no result is said: "He
    bought 8. He ate 4." for "Tom bought 8 apples and ate 4. How many are left?" gives no
    answer (not 4)."""
    if not 2 <= len(numbers) <= MAX_RESTATED_NUMBERS or _RESULT.search(text) is not None:
        return False
    asked = find_numbers(prompt)
    return all(
        _said_as_in_the_question(number, asked) for number in numbers
    ) and not _said_more_often_than_asked(numbers, asked)


# A check after the answer: "4 days.\n\nCheck: 4 × 5 = 20 pages ✓", "Let me verify: ...",
# "**Verification:** ...", "To double-check, ..."
_CHECK = re.compile(
    r"\b(?:let(?:\s+me|\s+us|['’]s)\s+(?:double[-\s]?)?(?:check|verify)"
    r"|to\s+(?:double[-\s]?)?(?:check|verify)"
    r"|(?:double[-\s]?|sanity\s+)?(?:check(?:ing)?|verif(?:y|ying|ication))[*_]*\s*:)",
    re.IGNORECASE,
)
_RESULT_BEFORE = re.compile(r"[=≈]\s*[*_$]*$")
# after a check's result, anything but a unit or an approval ("✓", "Correct!", "which
# matches") may go on to another answer: "= 20, but we need 25, so 5 days."
_CHECK_GOES_ON = re.compile(
    r"\d|\b(?:so|thus|therefore|hence|answer|actually|wait|but|however|instead|not|no|wrong|"
    r"incorrect|mistake|error|oops|only|should|need|needs|less|more|short|off)\b",
    re.IGNORECASE,
)


def check_at_the_end(text: str, numbers: list[re.Match[str]], prompt: str) -> int | None:
    """Where a closing check of the answer starts ("4 days.\n\nCheck: 4 × 5 = 20 pages."),
    when it ends on a result that is one of the question's numbers (it works back to what the
    question gives) and nothing after that result goes on to another answer."""
    if len(numbers) < 2 or not prompt:
        return None
    checks = list(_CHECK.finditer(text, numbers[0].end(), numbers[-1].start()))
    if not checks:
        return None
    last = numbers[-1]
    if not _RESULT_BEFORE.search(text, checks[-1].end(), last.start()):
        return None
    if _CHECK_GOES_ON.search(text, last.end()):
        return None
    given = [found_number(number).value for number in find_numbers(prompt)]
    if not any(numbers_match(found_number(last), value) for value in given):
        return None
    return checks[-1].start()


_REASON = re.compile(r",?\s+(?:because|since)\s", re.IGNORECASE)
_GOES_ON = re.compile(r"[,;:]\s|\b(?:so|then|thus|therefore|hence)\b", re.IGNORECASE)


def reason_at_the_end(text: str, numbers: list[re.Match[str]]) -> int | None:
    """Where a closing "because" / "since" clause of the last sentence starts when a number
    comes before it in that sentence: "3 kilograms is 3000 grams because 1 kilogram is 1000
    grams." gives its reason after the answer."""
    if not numbers:
        return None
    last = numbers[-1].start()
    sentence_start = 0
    for end in SENTENCE_END.finditer(text, 0, last):
        sentence_start = end.end()
    first = bisect.bisect_left([number.start() for number in numbers], sentence_start)
    reason = _REASON.search(text, numbers[first].end(), last)
    if reason is None or _GOES_ON.search(text, reason.end()):
        return None  # "20, since 12 + 8 = 20, and after giving 5 he has 15": more follows
    return reason.start()
