"""Graders: score a worker's output to a task in [0, 1].

`await grade(task, output, judge)` dispatches on `task.grader`:

- number: the final number (GSM8K style). Priority: the last `\\boxed{}`, then `#### X`,
  then the number after the last "answer is" / "Answer:" / "answer should be" marker or
  self-correction ("Wait, no: it is 14", "Corrected: 14", "Hmm, actually 14.", "Wait, 14.",
  "I mean 14." when the number is the whole sentence and the last) (after its last `=` when the
  marker's sentence holds an equation, or alone on the next line when the marker ends its
  line; not one the marker rules out, "answer is not 41", nor the first operand of
  arithmetic, "3 more than 9"), else the last number in the output (before a closing
  parenthetical that shows the working: "12 apples (15 - 3).", "5 kg (5000 g / 1000).", or
  an explanation that restates the question's numbers: "3 when 15 is divided by 4", "15
  (he had 12, got 8, gave 5)", "15 — he had 12 ...", or a closing reason: "3000 grams
  because 1 kilogram is 1000 grams."). Two numbers as the
  answer ("5 or 7", "5 and 7", a range or an undone subtraction "5-7"; "-2, 3" in a box)
  and times or ratios ("3:30") are ambiguous; a number ruled out ("42, not 32"), a
  confidence ("not 100% sure") or one inside a copy of a sentence of the question ("What
  is 9 * 11 + 27?") is no answer; a quantity in two units ("2 hours and 30
  minutes") is read in the one unit of its kind the question asks for ("to hours": 2.5),
  else (or when it is the question's own) is ambiguous too; one amount at two rates ("$18 a
  day, or $126 a week") is read at the rate asked ("per week"). Commas between
  thousands (also LaTeX's `10,\\!000`), `$`, `%`, units and a trailing period are ignored;
  `3/4`, `\\frac{3}{4}` and `\\frac34` are fractions, `1\\frac{1}{2}` and `1 1/2` mixed
  numbers; `1e6`, `1.5 x 10^6` (`10⁶`) and `2^10` are their values, as are "2.5 million",
  "a million", "1.5k", "1.5K" and "$3M" (also read as written: 2.5 matches a reference in
  millions), "1 in 4" (a chance: 1/4) and "negative 7" or "minus 7" is -7. A symbolic answer ("4π",
  "2√3", "\\sqrt{2}") is no number: 0. Equal when within 1e-6 relative, or when the output
  rounds the reference at the number of decimals it shows (2 or more), e.g. 0.33 for 1/3.
- choice: the option letter (A-E): "\\boxed{B}", "Answer: B", "<answer>B</answer>", the
  last self-correction ("Wait, actually it's (C)", "Wait, actually C."), "The correct
  option is b.", "I would
  choose B", "so it must be B", "It's B.", "So B.", "(B)", "B) foo", "B - foo" (unless
  its line retracts it: "B - no wait, ..."), "B is taller" for "Who is taller?" (the
  word after the question's "is"; "54 is larger than 9" alike for an option's text), "...,
  so the smallest is B." for "Which is the smallest?", "A is not the tallest; B is.", the
  one option checked ("- [x] B", "B) Bob ✅"), a line holding just "B", a last sentence
  holding just a letter ("Not A, not C. B."), or the text of exactly one option (the
  answer, or its first or last clause when no other option is named: "Yes, all wugs are
  feps."). Two different letters with no answer marker ("A or B", "(A) ... (C)") are
  ambiguous and score 0.
- exact: normalised string equality (whitespace, surrounding quotes / markdown / trailing
  punctuation, a leading bullet, quote or heading "- tac", "> tac", "### tac", closing
  emoji "tac ✅", LaTeX text "$\\text{tac}$", a closing note "tac (reversed)"
  unless it may retract the answer, an "Answer:" prefix; case too
  unless `task.case_sensitive`). The whole output,
  the text after the last answer marker ("Answer:", "The answer is", "Output:", or a
  self-correction "Wait, no, it's tac", "Wait, actually tac.") or the last line's last "is"
  / "gives us" / "it's" (also without a "the letter" / "the word" naming it: "... is the letter a"),
  the text before "is the answer" ("tac is the reversed word."), the subject of the last
  line's clause saying it is what the question asks ("Bob is taller" for "Who is taller?"), the last
  `\\boxed{}`, the text in `<answer>` tags, and the first and last non-empty lines, the
  last quoted text, the last fenced block and the text after the last line's label or
  arrow or "=" ("Reversed: tac", "c-a-t → tac", "S + C + D = SCD") are tried; when the
  output states an answer (a marker, a box, tags), only that answer and the lines after it
  count: "The answer is cta, not 'tac'" is cta. When the question asks for letters or
  words in an order ("Sort the letters of ..."), a candidate listing them one by one is
  also read joined: "e, i, l, r, s, v" is eilrsv, "cherry, banana, (and) apple" cherry banana
  apple.
- regex: `re.search` of `task.answer` in the output with runs of whitespace collapsed
  (ignoring case unless `task.case_sensitive`) in its first and last 20,000 characters;
  anchor the pattern with ^...$ for a full match. When the output gives a final answer
  ("The answer is", "Answer:", "Final answer", "The answer should be", a self-correction, a
  bare "Actually [1, 3, 2]." whose list is its whole sentence), only the answer after the
  last one is searched: the rest of its line (or the next line)
  up to the end of its sentence, without markdown around it or a closing period, so a
  right list written before a different final one, or named by the explanation after it,
  does not count; a marker followed by nothing or by a remark ("The answer is correct.")
  is no final answer. An empty output scores 0.
- code: the Python in the output (fenced blocks, or raw, dedented when the reply indents it
  as a markdown code block) runs against `task.tests` in the
  sandbox (see sandbox.py); score = fraction of tests passed. An infinite loop, a crash or a
  refused operation is the model's fault: 0 with the reason in `detail`.
- judge: an LLM judge (an async callable messages -> reply) scores 0-10 with the task's
  rubric ("SCORE: 7", else "a score of 7", else agreeing ratios "7/10"); the score is
  divided by 10. An empty (or whitespace) output scores 0 without asking the judge.

A score of 0.0 means the answer is wrong or missing (`detail` says why). When we cannot
grade (no reference answer, judge down or unparseable, sandbox broken), `score` is None and
`error` says why: never a silent 0.
"""

from __future__ import annotations

import ast
import bisect
import itertools
import math
import re
import textwrap
import unicodedata
from collections.abc import Awaitable, Callable
from fractions import Fraction

from pydantic import BaseModel

from .sandbox import SandboxLimits, run_python_tests
from .tasks import Task, choice_letter, format_number, parse_number

Judge = Callable[[list[dict[str, str]]], Awaitable[str]]


class Grade(BaseModel):
    score: float | None
    error: str | None = None
    detail: str = ""


def wrong(detail: str) -> Grade:
    return Grade(score=0.0, detail=detail)


def cannot_grade(error: str) -> Grade:
    return Grade(score=None, error=error)


async def grade(
    task: Task,
    output: object,
    judge: Judge | None = None,
    *,
    sandbox: SandboxLimits | None = None,
) -> Grade:
    """Score `output` (a worker's reply to `task`) with the task's grader (anything but
    text is recorded as ungradable)."""
    if not isinstance(output, str):
        return cannot_grade(f"expected the worker's output as text, got {type(output).__name__}")
    try:
        if task.grader == "code":
            return await grade_code(task, output, sandbox)
        if task.grader == "judge":
            return await grade_judge(task, output, judge)
        grader = SIMPLE_GRADERS.get(task.grader)
        if grader is None:
            return cannot_grade(f"unknown grader {task.grader!r}")
        return grader(task, output)
    except Exception as error:  # a bug of ours must not look like a wrong answer
        return cannot_grade(f"the {task.grader} grader failed: {type(error).__name__}: {error}")


# --- number ----------------------------------------------------------------------------------

_NUMBER = re.compile(
    r"(?<![\w.])(?<!\^)(?<!\^\s)"  # "cm^2" has no number 2
    # "negative 7", "minus 7" ("10 minus 7" is a subtraction)
    r"(?P<sign>-|(?<![\w-])(?<!\d\s)(?<!\d\s\s)(?i:negative|minus)\s)?(?P<dollar>\$\s?)?"
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
# a self-correction: "Wait, no: it is 14", "Sorry, I meant 14", "Actually, it's (C)"
_SELF_CORRECTION = (
    r"\b(?:wait|no|sorry|oops|actually)\b[\s,:;!.-]{0,3}(?:(?:no|sorry)\b[\s,:;!.-]{0,3})?"
    r"(?:it(?:'s|’s| is| should be| must be)|(?:that )?should be|make that|I meant?)\b"
    r"(?!\s*not\b)"
)
# a bare correction of a number starting a clause, "Hmm, actually 126.", "Wait, 126.", "I
# mean 126." (not "There are actually 5 boxes."): the number grader's only, and only when
# the number is the whole of its sentence (see `_CORRECTED_NUMBER_END`); to the regex
# grader, "Actually 3 numbers are listed." is a remark
_BARE_CORRECTION_LEAD = (
    r"(?:(?<![\w'’] )|(?<=hmm )|(?<=oh )|(?<=ah ))"
    r"\b(?:actually\b|wait\b\s*[,:;!.—–-]|I\s+mean\b)[\s,:;!.—–-]{0,3}"
    r"(?:(?:no|sorry)\b[\s,:;!.—–-]{0,3})?"
)
_BARE_CORRECTION = rf"{_BARE_CORRECTION_LEAD}(?=[$-]?\d|\.\d)"
_ANSWER_MARKER = re.compile(
    r"(?:final answer|answer is|answer\s*[:=]|answer (?:would|should|must|will) be|result is|"
    rf"result\s*:|solution is|total is|correct(?:ion|ed)\s*:|{_SELF_CORRECTION}"
    rf"|(?P<bare>{_BARE_CORRECTION}))",
    re.IGNORECASE,
)
# what may follow a number given by a bare correction to the end of its sentence: a unit
# ("Actually 126 apples."), not a clause ("Wait, 126 is wrong.", "Actually 3 more.", "Wait,
# 126? No, 125.")
_CORRECTED_NUMBER_END = re.compile(
    r"(?:\s+(?!(?:is|was|are|were|isn|wasn|would|will|could|should|might|may|seems?|looks?|"
    r"not|more|less|fewer|times|or|and|to|of|out|than|plus|minus)\b)[^\W\d_]+)?[\s*_!.)]*",
    re.IGNORECASE,
)
_MARKUP = r"(?:[\s:*_#>`$]|\\[\[(])*"  # "**Answer:**\n\n\\[\n18\n\\]"
_BLANK_OR_MARKUP = re.compile(rf"{_MARKUP}(?:(?:is|was)\b{_MARKUP})?", re.IGNORECASE)
_NEGATED = re.compile(r"[\s:*]*not\b[\s*]*", re.IGNORECASE)
_SENTENCE_END = re.compile(r"\.(?:\s|$)|\n")
# between an answer's number and the next one: the answer is arithmetic, not a number
_OPERATOR = re.compile(
    r"\s*(?:(?:more|less|fewer|greater|larger|smaller|bigger|higher|lower)\s+than|plus|minus|"
    r"times|multiplied\s+by|divided\s+by|[+*×·÷x])\s*",
    re.IGNORECASE,
)


# between a marker and its first number: the numbers are operands ("the sum of 5 and 7")
_OPERATION = re.compile(
    r"\b(?:sum|product|difference|total|quotient|average|mean)\s+(?:of|between)\b",
    re.IGNORECASE,
)


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


def grade_number(task: Task, output: str) -> Grade:
    reference = parse_number(task.answer or "")
    if reference is None:
        return cannot_grade(f"the task's answer {task.answer!r} is not a number")
    found, source = extract_number(output, task.prompt_text())
    if found is None:
        return wrong(source or "no number in the output")
    detail = f"extracted {_clip(found.text)!r} ({source}); expected {task.answer}"
    if found.symbolic:  # "4π", "2√3": the grader does not compute them
        return wrong(f"{detail}; it is part of a symbolic answer (π or a root), not a number")
    answer = (task.answer or "").strip()
    asked = decimals_asked(task.prompt_text())
    matched = numbers_match(found, reference, _decimals(answer), answer.endswith("%"), asked)
    return Grade(score=1.0 if matched else 0.0, detail=detail)


def extract_number(output: str, prompt: str = "") -> tuple[FoundNumber | None, str]:
    """The final answer's number and where it was found, or None and why not ("" when
    the output holds no number). `prompt`'s numbers tell a closing clause that restates the
    question ("3 when 15 is divided by 4") from the answer."""
    question = _normalise_number_text(prompt)
    text = _in_the_rate_asked(
        _in_the_unit_asked(_normalise_number_text(output), question), question
    )
    boxed = last_boxed(text)
    if boxed is not None:
        if _SYMBOL_AFTER.search(boxed):
            shown = _clip(boxed.strip())
            return None, f"a symbolic answer (π or a root), not a number, in \\boxed{{}}: {shown!r}"
        boxed = _unlatex(boxed)
        numbers = _numbers(boxed)
        hedge = _not_one_number(boxed, numbers[-2:], _IN_A_BOX)
        if hedge is not None:
            return None, f"{hedge} in \\boxed{{}}"
        if numbers:
            return _found(numbers[-1]), "\\boxed{}"
    hashes = text.rfind("####")
    if hashes >= 0:
        after = text[hashes + 4 :]
        numbers = _numbers(after)
        hedge = _not_one_number(after, numbers[:2], _IN_A_BOX)
        if hedge is not None:
            return None, f"{hedge} after ####"
        if numbers:
            return _found(numbers[0]), "after ####"
    numbers = _numbers(text)
    counted = _count_in_words(text, numbers)
    if counted is not None:
        return counted, "a number word counting the numbers listed after it"
    retracted = _retracted_before(text, numbers)
    after_marker = _number_after_marker(text, numbers, retracted)
    if after_marker is not None:
        return after_marker
    first_line = _lone_first_line(text) if retracted == 0 else None
    if first_line is not None:
        return _found(first_line), "a first line holding only a number"
    working = _working_at_the_end(text)
    if working is None:
        working = _method_at_the_end(text, numbers)
    if working is None:
        working = _question_at_the_end(text, numbers, question)
    if working is None:
        working = _reason_at_the_end(text, numbers)
    if working is None:
        working = _setup_at_the_end(text, numbers, question)
    if working is not None and any(number.end() <= working for number in numbers):
        numbers = [number for number in numbers if number.end() <= working]
    elif working is not None:  # "She has fourteen apples (12 + 5 - 3)."
        words = list(_WORDED_NUMBER.finditer(text, 0, working))
        if words:
            return _worded_number(words[-1])
    echoes = _echoes_of_the_question(text, question)
    if echoes and numbers:  # "What is 12 - 6?" or "... Each child then eats 2 of them." alone
        numbers = [number for number in numbers if not _inside(number.start(), echoes)]
        if not numbers:
            return None, "the output only restates the question, with no answer"
    said = [number for number in numbers if not _is_aside(number)]
    if numbers and not said and _is_ruled_out(numbers[-1]):  # "Not 32."
        return None, f"the output rules out {_clip(numbers[-1].group(0).strip())!r}"
    numbers = said or numbers
    stated = _said_to_be_the_one_asked(text, numbers, question)
    if stated is not None:  # "The largest is 12, and the smallest is -30." for "the largest"
        return _found(stated), "the number said to be what the question asks"
    twice = _one_quantity_in_two_units(text, numbers[-2:], units_asked(question))
    if twice is not None:
        return twice, "the unit asked of one quantity in two units"
    hedge = _not_one_number(text, numbers[-2:], _JOINED)
    if hedge is not None:
        return None, f"{hedge} at the end"
    if numbers:
        return _found(numbers[-1]), "the last number"
    words = list(_WORDED_NUMBER.finditer(text))
    if words:  # only when no digit at all: "The letter 'i' appears once."
        return _worded_number(words[-1])
    return None, ""


# A sentence of the question with a number in it, copied into the output
_QUESTION_SENTENCE = re.compile(r"[^.?!\n]*\d[^.?!\n]*[.?!]?")
MIN_ECHO_SENTENCE_CHARS = 12
MAX_ECHO_SENTENCES = 20


def _echoes_of_the_question(text: str, question: str) -> list[tuple[int, int]]:
    """Where `text` copies a sentence of the question that holds a number (ignoring case
    and runs of whitespace): its numbers are the question's, no answer."""
    sentences = [
        sentence.group(0).strip()
        for sentence in _QUESTION_SENTENCE.finditer(question)
        if len(sentence.group(0).strip()) >= MIN_ECHO_SENTENCE_CHARS
    ][-MAX_ECHO_SENTENCES:]
    spans = []
    for sentence in sentences:
        pattern = r"\s+".join(re.escape(word) for word in sentence.split())
        spans += [m.span() for m in re.finditer(pattern, text, re.IGNORECASE)]
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


# a superlative a question asks for, "the (second) largest", and one said of a number:
# "the smallest is -30", "the smallest number is **2**", "-30 is the smallest"
_SUPERLATIVE = r"(?:(?:second|third)\s+)?[a-z]+est"
_THE_SUPERLATIVE = re.compile(rf"\bthe\s+(?P<most>{_SUPERLATIVE})\b", re.IGNORECASE)
_SUPERLATIVE_BEFORE = re.compile(
    rf"\bthe\s+(?P<most>{_SUPERLATIVE})(?:\s+(?:number|one|value))?\s+(?:is|was)\s*[:*_$]*$",
    re.IGNORECASE,
)
_SUPERLATIVE_AFTER = re.compile(rf"[*_$]*\s+is\s+the\s+(?P<most>{_SUPERLATIVE})\b", re.IGNORECASE)


def _said_to_be_the_one_asked(
    text: str, numbers: list[re.Match[str]], prompt: str
) -> re.Match[str] | None:
    """When the last number is said to be another superlative than the one the question
    asks ("The largest is 12, and the smallest is -30." for "What is the largest ...?"),
    the last number said to be the one asked (12); else None."""
    asked = {" ".join(m["most"].lower().split()) for m in _THE_SUPERLATIVE.finditer(prompt)}
    if len(asked) != 1 or not numbers:
        return None

    def said_of(number: re.Match[str]) -> str | None:
        before = _SUPERLATIVE_BEFORE.search(text, max(0, number.start() - 60), number.start())
        after = _SUPERLATIVE_AFTER.match(text, number.end())
        said = before or after
        return " ".join(said["most"].lower().split()) if said else None

    last = said_of(numbers[-1])
    if last is None or last in asked:
        return None
    return next((n for n in reversed(numbers[:-1]) if said_of(n) in asked), None)


def _inside(position: int, spans: list[tuple[int, int]]) -> bool:
    """Whether `position` lies in one of `spans` (sorted, disjoint)."""
    index = bisect.bisect_right(spans, (position, math.inf)) - 1
    return index >= 0 and position < spans[index][1]


_LIST_GAP = re.compile(r"[\s,;:()\[\].!*_]*(?:\band\b[\s,;:()\[\].!*_]*)?")


def _count_in_words(text: str, numbers: list[re.Match[str]]) -> FoundNumber | None:
    """A count in words followed by the numbers it counts and nothing else: "three even
    numbers (8, 10, 12)" answers 3 (the listed numbers are no answer then)."""
    if len(numbers) < 2 or len(numbers) > 20:
        return None
    before = text[: numbers[0].start()]
    words = list(re.finditer(rf"\b({'|'.join(NUMBER_WORDS)})\b", before, re.IGNORECASE))
    if not words or NUMBER_WORDS[words[-1].group(1).lower()] != len(numbers):
        return None
    word = words[-1]
    if not _EXPLANATION_START.search(text, word.end(), numbers[0].start()):
        return None
    gaps = [text[a.end() : b.start()] for a, b in itertools.pairwise(numbers)]
    gaps.append(text[numbers[-1].end() :])
    if not all(_LIST_GAP.fullmatch(gap) for gap in gaps):
        return None
    value = NUMBER_WORDS[word.group(1).lower()]
    return FoundNumber(value=value, text=word.group(1), decimals=0)


# A closing parenthetical showing the working, not the answer: "12 apples (15 - 3).",
# "391 (17 × 20 = 340, 17 × 3 = 51)",
# "x = 5 (since 2x = 10)", "68°F (using F = C × 9/5 + 32)", "(1 km = 1,000 m)". One that
# restates the answer, "(= 12)", "(i.e. 12)", stays.
# (an operand may carry its unit: "5 kilograms (5000 grams / 1000)." answers 5, "68°F
# (20°C × 9/5 + 32)" 68)
_OPERAND = r"\$?\d[\d.,]*%?(?:\s?°?\s?[^\W\d_]+|°)?"
_ARITHMETIC = rf"{_OPERAND}(?:\s*[-+*/×x·÷]\s*{_OPERAND})+"
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


def _working_at_the_end(text: str) -> int | None:
    """Where a parenthetical ending the output that only shows the working starts (its
    own parentheses read as plain working: "10°C ((50°F - 32) × 5/9)")."""
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
# divide by 3600." (their numbers are operands), unless a result follows ("..., giving 10")
_METHOD = re.compile(
    r"(?:^|(?<=[.!?])\s+|\n\s*)(?:to\s+(?:convert|get|find|calculate|compute|work)\b[^.\n]{0,80}?"
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


def _method_at_the_end(text: str, numbers: list[re.Match[str]]) -> int | None:
    """Where closing instructions start after a number, when they end on an operand ("...
    divide by 3600.") and give no result ("Add 5 and you have 17." gives 17)."""
    methods = list(_METHOD.finditer(text))
    if not methods or not numbers or numbers[0].end() > methods[-1].start():
        return None
    method, last = methods[-1], numbers[-1]
    if _RESULT.search(text, method.end()) or last.start() < method.end():
        return None
    operand = _OPERAND_BEFORE.search(text, max(method.end(), last.start() - 20), last.start())
    return method.start() if operand else None


MAX_RESTATED_NUMBERS = 4
# What begins an explanation after the answer: a closing clause ("The remainder is 3 when 15
# is divided by 4.", "12 apples left after giving away 3"), a dash, colon or parenthesis ("15
# (Tom had 12, got 8, gave 5)", "15 apples: he had 12, ..."), or a note ("15.\nNote: ...")
_EXPLANATION_START = re.compile(
    r",?\s+(?:when|whenever|if|after|before|because|since|given|once|by|from|out\s+of)\s"
    r"|\s*(?:[—–]|--)\s|:\s|;\s|\s\("
    r"|[.!]?\s+(?:this\s+is\s+)?(?:because|since|note|explanation|reasoning)\b",
    re.IGNORECASE,
)
EXPLANATION_GAP = 200


def _question_at_the_end(text: str, numbers: list[re.Match[str]], prompt: str) -> int | None:
    """Where an explanation after the answer starts when the few numbers after it are all
    the question's: a number, then an explanation start (a clause, a dash, a colon, a
    parenthesis, a note), then only the question's numbers ("3 even numbers: 8, 10 and 12"
    also when the answer is one of them). A clause with a number of its own ("He has $20
    after 4 weeks." for "how many weeks") may hold the answer, and the question's numbers
    with no explanation start before them ("..., so the largest is 45") too."""
    if len(numbers) < 2 or not prompt:
        return None
    asked = [_found(number) for number in _numbers(prompt)]
    found = None  # the earliest: "3 when 15 is divided by 4" restates from "when", not "by"
    restated: list[FoundNumber] = []
    for index in range(len(numbers) - 1, max(0, len(numbers) - 1 - MAX_RESTATED_NUMBERS), -1):
        restated.append(_found(numbers[index]))
        if not any(numbers_match(restated[-1], q.value) for q in asked):
            break  # a number of the reply's own follows: the usual rules decide
        answer = numbers[index - 1]
        if any(numbers_match(_found(answer), number.value) for number in restated):
            continue  # "Comparing 3 and 9: 9 is larger." states its answer again: no explanation
        end = min(numbers[index].start(), answer.end() + EXPLANATION_GAP)
        explanation = _EXPLANATION_START.search(text, answer.end(), end)
        if explanation is not None:
            found = explanation.start()
    return found


_SENTENCE_BREAK = re.compile(r"[.!?]\s+|\n\s*")


def _setup_at_the_end(text: str, numbers: list[re.Match[str]], prompt: str) -> int | None:
    """Where a closing sentence that only restates the question's setup starts: two or more
    numbers, all the question's, and no result ("5 apples. Tom started with 8 and gave away
    3."), after an answer of the reply's own (the question's number before it may be the
    answer: "Compare 9 and 3. The larger is 9." is no case, it states a result)."""
    if len(numbers) < 3 or not prompt:
        return None
    starts = [m.end() for m in _SENTENCE_BREAK.finditer(text, 0, numbers[-1].start())]
    if not starts:
        return None
    start = starts[-1]
    restated = [number for number in numbers if number.start() >= start]
    before = [number for number in numbers if number.end() <= start]
    if len(restated) < 2 or not before or _RESULT.search(text, start):
        return None
    asked = [_found(number).value for number in _numbers(prompt)]
    if not all(any(numbers_match(_found(n), q) for q in asked) for n in restated):
        return None
    if any(numbers_match(_found(before[-1]), q) for q in asked):
        return None
    return start


# A number that is no answer the reply gives: one it rules out ("It's 42, not 32.", "42
# rather than 32") or its confidence ("I'm not 100% sure", "Confidence: 95%")
_RULED_OUT_BEFORE = re.compile(r"\b(?:not|rather\s+than|instead\s+of)\s+\$?$", re.IGNORECASE)
_CONFIDENCE_BEFORE = re.compile(r"\bconfidence\W{0,4}$", re.IGNORECASE)
_CONFIDENCE_AFTER = re.compile(r"\s+(?:sure|certain|confident)\b", re.IGNORECASE)


def _is_aside(number: re.Match[str]) -> bool:
    text, start = number.string, number.start()
    return bool(
        _is_ruled_out(number)
        or _CONFIDENCE_BEFORE.search(text[max(0, start - 20) : start])
        or (number.group("percent") is not None and _CONFIDENCE_AFTER.match(text, number.end()))
    )


def _is_ruled_out(number: re.Match[str]) -> bool:
    start = number.start()
    return _RULED_OUT_BEFORE.search(number.string[max(0, start - 20) : start]) is not None


_REASON = re.compile(r",?\s+(?:because|since)\s", re.IGNORECASE)
_GOES_ON = re.compile(r"[,;:]\s|\b(?:so|then|thus|therefore|hence)\b", re.IGNORECASE)


def _reason_at_the_end(text: str, numbers: list[re.Match[str]]) -> int | None:
    """Where a closing "because" / "since" clause of the last sentence starts when a number
    comes before it in that sentence: "3 kilograms is 3000 grams because 1 kilogram is 1000
    grams." gives its reason after the answer."""
    if not numbers:
        return None
    last = numbers[-1].start()
    sentence_start = 0
    for end in _SENTENCE_END.finditer(text, 0, last):
        sentence_start = end.end()
    first = bisect.bisect_left([number.start() for number in numbers], sentence_start)
    reason = _REASON.search(text, numbers[first].end(), last)
    if reason is None or _GOES_ON.search(text, reason.end()):
        return None  # "20, since 12 + 8 = 20, and after giving 5 he has 15": more follows
    return reason.start()


# The reply says its earlier answer was wrong: "3\n\nWait, actually 5.", "The answer is 3.
# Oops, I miscounted: there are 5.", "[1, 2, 3]? No: [1, 3, 2]." (not a mere check: "Wait,
# let me verify: 1 + 2 = 3")
_RETRACTION = re.compile(
    r"(?<=\?)\s*no(?=[,:;.!—–-])"
    r"|\b(?:no,?\s+wait|wait,?\s+(?:no|actually)|oops|I\s+(?:made|make)\s+an?\s+(?:mistake|error)"
    r"|I\s+(?:miscounted|miscalculated)|(?:that's|that\s+is|this\s+is|I\s+was)\s+(?:wrong|"
    r"incorrect))\b",
    re.IGNORECASE,
)


def _retracted_before(text: str, numbers: list[re.Match[str]]) -> int:
    """Where the last retraction followed by a number starts (0 when none): answers given
    before it (a marker's, a first line's) are taken back."""
    retractions = list(_RETRACTION.finditer(text))
    if not retractions or not numbers or numbers[-1].start() < retractions[-1].end():
        return 0
    return retractions[-1].start()


def _number_after_marker(
    text: str, numbers: list[re.Match[str]], retracted: int = 0
) -> tuple[FoundNumber | None, str] | None:
    """The first number in the sentence of the last answer marker that has one (after the
    sentence's last '=' when it holds one), or alone on the next line when the marker ends
    its line. (None, why) when that number is no answer by itself: one of two ("5 or 7",
    "3:30"), or, with no number after it, an operand ("3 more than 9") or a number the
    marker rules out ("not 41"). Markers before `retracted` are taken back. None when no
    marker has one, or when the usual rules
    should find the number after such an operand or ruled-out number. Positions are looked
    up, not searched again for each marker: an output repeating "the answer is" 100,000
    times takes linear time."""
    starts = [number.start() for number in numbers]
    sentence_ends = [end.start() for end in _SENTENCE_END.finditer(text)]
    equals = [equal.start() for equal in re.finditer("=", text)]
    last_said = next((number for number in reversed(numbers) if not _is_aside(number)), None)
    for marker in reversed(list(_ANSWER_MARKER.finditer(text, retracted))):
        start = marker.end()
        blank = _BLANK_OR_MARKUP.match(text, start)
        line_start = blank.end() if blank else start
        if text.find("\n", start, line_start) >= 0:  # "Answer:\n\n18\n\nExplanation: ..."
            on_next_line = _lone_number_at(text, line_start)
            if on_next_line is not None:
                return _found(on_next_line), f"on the line after {marker.group(0).strip()!r}"
            continue
        index = bisect.bisect_left(sentence_ends, start)
        end = sentence_ends[index] if index < len(sentence_ends) else len(text)
        index = bisect.bisect_left(equals, end) - 1
        if index >= 0 and equals[index] >= start:
            start = equals[index] + 1
        index = bisect.bisect_left(starts, start)
        if index == len(numbers) or starts[index] >= end:
            continue
        number = numbers[index]
        if number.end() > end:  # "3\n/4": only the part inside the sentence counts
            number = _NUMBER.match(text, number.start(), end) or number
        if not _is_number(number):
            continue
        negated = _NEGATED.match(text, marker.end(), number.start() + 1)
        if negated and negated.end() == number.start():  # "The answer is not 41": ruled out
            if index + 1 < len(numbers):
                return None  # ", it is 42": the usual rules find it
            return None, f"the answer rules out {_clip(number.group(0).strip())!r}"
        following = numbers[index + 1] if index + 1 < len(numbers) else None
        if marker["bare"] and not _CORRECTED_NUMBER_END.fullmatch(text, number.end(), end):
            two = [number, following] if following and following.start() < end else [number]
            hedge = _not_one_number(text, two, _JOINED)
            if hedge is not None:  # "Actually 126 or 127.": no single answer
                return None, f"{hedge} after {marker.group(0).strip()!r}"
            continue  # "Wait, 126 is wrong.": no correction, an earlier answer stands
        if marker["bare"] and not _stands_to_the_end(number, last_said):
            continue  # "Wait, 5 boxes. Each holds 4, so 20.": a step of the working
        if following is None or following.start() >= end:
            return _found(number), f"after {marker.group(0).strip()!r}"
        if _OPERATOR.fullmatch(text[number.end() : following.start()]):
            # "Actually, it's 3 more than 9": an operand, and the grader does not compute;
            # a number after the expression (", so 12") is found by the usual rules
            if index + 2 < len(numbers):
                return None
            shown = _clip(text[number.start() : following.end()])
            return None, f"the answer is an expression, not a number: {shown!r}"
        hedge = _not_one_number(text, [number, following], _JOINED)
        if hedge is not None and _OPERATION.search(text, marker.end(), number.start()):
            # "The answer is the sum of 5 and 7, which is 12": operands, not two answers
            if index + 2 < len(numbers):
                return None
            shown = _clip(text[marker.end() : following.end()].strip())
            return None, f"the answer is an expression, not a number: {shown!r}"
        if hedge is not None:
            return None, f"{hedge} after {marker.group(0).strip()!r}"
        return _found(number), f"after {marker.group(0).strip()!r}"
    return None


def _stands_to_the_end(number: re.Match[str], last_said: re.Match[str] | None) -> bool:
    """Whether nothing after `number` gives another value: `last_said`, the output's last
    number that is no aside ("Confidence: 90%"), is it or comes before it, or ends on its
    value again ("Check: 5 * 25 + 1 = 126")."""
    return (
        last_said is None or last_said.start() <= number.start() or _same_value(number, last_said)
    )


# What joins two numbers given as one answer, where the answer is: "5 or 7", "5 and 7",
# "5-7" (a range, or a subtraction not done: "So we compute 15-3" does not answer 3) at the
# end of the output or after a marker; also a list "-2, 3" alone in a box or after ####.
# A negative number is no pair: "x = -3", "from 5 to -3", "5 -3" (a sign, not a joiner).
_JOINED = re.compile(r"[\s$*]*(?:\b(?:or|and)\b|-)[\s$*]*", re.IGNORECASE)
_IN_A_BOX = re.compile(r"[\s$*]*(?:\b(?:or|and)\b|-|,)[\s$*]*", re.IGNORECASE)


def _not_one_number(text: str, pair: list[re.Match[str]], joiners: re.Pattern[str]) -> str | None:
    """Why a pair of numbers side by side is no single answer (joined by `joiners`, or a
    time or ratio "3:30"), or None (also when `pair` holds a single number)."""
    if len(pair) < 2 or pair[1].start() - pair[0].end() > 20:
        return None
    first, second = pair
    between = text[first.end() : second.start()]
    shown = _clip(text[first.start() : second.end()])
    if between == ":":
        return f"a time or ratio, not a number: {shown!r}"
    if _in_two_units(text, first, second):
        return f"a quantity in two units, not one number: {shown!r}"
    if joiners.fullmatch(between) and not _same_value(first, second):  # "1/4 or 25%"
        return f"two numbers, not one answer: {shown!r}"
    return None


def _same_value(first: re.Match[str], second: re.Match[str]) -> bool:
    one, other = _found(first), _found(second)
    return numbers_match(one, other.value, other.decimals) or numbers_match(
        other, one.value, one.decimals
    )


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
_UNITS_BETWEEN = re.compile(rf"\s?(?P<unit>{_UNIT})\b,?\s(?:and\s)?", re.IGNORECASE)
_UNIT_AFTER = re.compile(rf"\s?(?P<unit>{_UNIT})\b", re.IGNORECASE)


def _quantity(text: str) -> tuple[str, Fraction] | None:
    """The kind and size (in the kind's smallest unit) of "2 hours and 30 minutes", or None
    when its parts are of different kinds or not from the largest unit down."""
    parts = [
        (_UNIT_SIZES[m["unit"].lower()], Fraction(m["value"]))
        for m in _QUANTITY_PART.finditer(text)
    ]
    kinds = {kind for (kind, _), _ in parts}
    sizes = [size for (_, size), _ in parts]
    if len(kinds) != 1 or sizes != sorted(set(sizes), reverse=True):
        return None
    return kinds.pop(), sum((size * value for (_, size), value in parts), Fraction(0))


def _in_the_unit_asked(text: str, prompt: str) -> str:
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
    in_question = {_quantity(m.group(0)) for m in _COMPOUND_QUANTITY.finditer(prompt)}

    def convert(match: re.Match[str]) -> str:
        quantity = _quantity(match.group(0))
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


def _in_the_rate_asked(text: str, prompt: str) -> str:
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


# "150 minutes (9000 seconds)", "**5000 grams** (i.e. 5 kg)", "5000 g, or 5 kg"
_BETWEEN_UNITS = re.compile(
    r"[*_]*\s?,?\s?\(?\s?(?:=|or|i\.e\.,?|that\s+is,?|which\s+is)?\s?[*_]*", re.IGNORECASE
)


def _one_quantity_in_two_units(
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
    first, second = _found(pair[0]), _found(pair[1])
    if kind != other_kind or not math.isclose(first.value * size, second.value * other_size):
        return None
    if units[0] not in sizes_asked:
        return second
    if units[1] not in sizes_asked:
        return first
    return first.model_copy(update={"in_other_unit": (second.value, second.decimals)})


def _in_two_units(text: str, first: re.Match[str], second: re.Match[str]) -> bool:
    """Whether two numbers side by side are one quantity in two units ("2 hours and 30
    minutes"): the larger unit after the first, a smaller one of its kind after the second."""
    between = _UNITS_BETWEEN.fullmatch(text, first.end(), second.start())
    after = _UNIT_AFTER.match(text, second.end())
    if between is None or after is None:
        return False
    (kind, size), (other_kind, other_size) = (
        _UNIT_SIZES[match["unit"].lower()] for match in (between, after)
    )
    return kind == other_kind and size > other_size


def _clip(text: str, size: int = 40) -> str:
    return text if len(text) <= size else text[:size] + "..."


_LONE_NUMBER_PREFIX = re.compile(r"[\s*_`>#]*")
_LONE_NUMBER_SUFFIX = re.compile(r"(?:\s+[^\W\d]+){0,2}(?:[\s*_`.!$]|\\[\])])*")  # "\\[ 260 \\]"


def _lone_number_at(text: str, position: int) -> re.Match[str] | None:
    """The number at `position` when the rest of its line is only a unit or two."""
    line_end = text.find("\n", position)
    line_end = len(text) if line_end < 0 else line_end
    number = _NUMBER.match(text, position, line_end)
    if number is None or not _is_number(number):
        return None
    return number if _LONE_NUMBER_SUFFIX.fullmatch(text, number.end(), line_end) else None


def _lone_first_line(text: str) -> re.Match[str] | None:
    """The number of a first line that holds only it (and a unit or two) when more lines
    follow: "5\n\nExplanation: 2 + 3 = 5, checked in 1 step." answers 5, not 1."""
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) < 2:
        return None
    numbers = _numbers(lines[0])
    if len(numbers) != 1:
        return None
    number = numbers[0]
    lone = _LONE_NUMBER_PREFIX.fullmatch(lines[0][: number.start()]) and (
        _LONE_NUMBER_SUFFIX.fullmatch(lines[0][number.end() :])
    )
    return number if lone else None


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
_WORDED_NUMBER = re.compile(
    rf"\b(?:(?P<tens>{'|'.join(_TENS)})(?:[-\s](?P<unit>{_UNITS}))?"
    rf"|(?P<word>{'|'.join(NUMBER_WORDS)}))\b"
    r"(?P<larger_after>[\s-]+(?:hundred|thousand|million|billion)\b)?",
    re.IGNORECASE,
)


def _worded_number(match: re.Match[str]) -> tuple[FoundNumber | None, str]:
    """The value of a number in words ("twelve", "twenty-six", "once"), or None and why
    when it is a part of a longer one ("one hundred twenty-six")."""
    shown = match.group(0).strip()
    text, start = match.string, match.start()
    if match["larger_after"] or _LARGER_BEFORE.search(text, max(0, start - 30), start):
        return None, f"a number in words the grader does not read: {_clip(shown)!r}"
    if match["tens"]:
        value = _TENS[match["tens"].lower()]
        if match["unit"]:
            value += NUMBER_WORDS[match["unit"].lower()]
    else:
        value = NUMBER_WORDS[match["word"].lower()]
    return FoundNumber(value=value, text=shown.lower(), decimals=0), "a number word"


def numbers_match(
    found: FoundNumber,
    reference: float,
    reference_decimals: int = 0,
    reference_percent: bool = False,
    decimals_asked: int | None = None,
) -> bool:
    """Equal within 1e-6 relative, or at the decimals shown (see `_equal`). "50%" matches a
    reference of 50 and, unless the reference itself is written with "%", one of 0.5 (a
    reference "50%" is 50 percent: "0.5" stays ambiguous and does not match it)."""
    readings = [(found.value, found.decimals)]
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
    if math.isclose(value, reference, rel_tol=1e-6, abs_tol=1e-9):
        return True
    coarse = min(decimals, reference_decimals)
    if coarse == 0:
        rounded = max(decimals, reference_decimals) >= 2
    elif decimals < reference_decimals:
        rounded = (
            coarse >= 2
            and reference_decimals >= MIN_ROUNDED_REFERENCE_DECIMALS
            and (decimals_asked is None or decimals >= decimals_asked)
        )
    elif decimals > reference_decimals:
        digits = f"{abs(reference):.{coarse}f}".replace(".", "").lstrip("0")
        rounded = coarse >= 2 and (len(digits) >= 3 or decimals_asked == coarse)
    else:
        rounded = False
    shown = max(decimals, reference_decimals) if coarse == 0 else coarse
    return rounded and abs(value - reference) <= 0.5 * 10**-shown + 1e-12


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


def _decimals(text: str) -> int:
    match = re.search(r"\.(\d+)\s*%?\s*$", text.strip())
    return len(match.group(1)) if match else 0


def _numbers(text: str) -> list[re.Match[str]]:
    """The numbers of `text`, in order; only the one chosen is converted (`_found`)."""
    return [match for match in _NUMBER.finditer(text) if _is_number(match)]


def _is_number(match: re.Match[str]) -> bool:
    """False for a zero denominator ("1/0") or zero to a negative power ("0^-1")."""
    denominator = match.group("denominator")
    if denominator is not None and denominator.strip("0") == "":
        return False
    power = match.group("power")
    zero = match.group("body").replace(",", "").strip("0.") == ""
    return not (zero and power is not None and int(power) < 0)


_SYMBOL_AFTER = re.compile(r"\s?(?:π|√|\\pi(?![a-zA-Z])|\\sqrt)")
_SYMBOL_BEFORE = re.compile(r"(?:√|\\sqrt\s?(?:\[\d+\])?\{?)\s?$")


def _is_symbolic(match: re.Match[str]) -> bool:
    text = match.string
    return bool(
        _SYMBOL_AFTER.match(text, match.end())
        or _SYMBOL_BEFORE.search(text, max(0, match.start() - 12), match.start())
    )


def _found(match: re.Match[str]) -> FoundNumber:
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
# head ("1 2 345 678", "12 345 6"), nor a first group written with a leading 0.
_PLAIN_SPACED_THOUSANDS = re.compile(
    r"(?<![\w.,])(?<!\d )[1-9]\d{0,2}(?: \d{3})++(?!\w| \d|[.,/]\d)"
)
_DOTTED_DECIMAL = re.compile(r"(?<![\w.,])\d{1,3}(?:\.\d{3})+,\d+(?!\d|[.,]\d)")
_DOTTED_THOUSANDS = re.compile(r"(?<![\w.,])\d{1,3}(?:\.\d{3}){2,}(?!\d|[.,]\d)")
_VULGAR_FRACTION = re.compile(r"(?:(?<![\d.,])(?P<whole>\d{1,9})\s?)?(?P<fraction>[¼½¾⅐-⅞])")


def _plain_locale_number(match: re.Match[str], thousands: str) -> str:
    whole, _, decimals = match.group(0).partition(",")
    digits = re.sub(rf"[{thousands}]", "", whole)
    return f"{digits}.{decimals}" if decimals else digits


def _vulgar_fraction(match: re.Match[str]) -> str:
    value = Fraction(unicodedata.numeric(match.group("fraction"))).limit_denominator(10)
    value += int(match.group("whole") or 0)
    return f"{value.numerator}/{value.denominator}"


def _normalise_number_text(text: str) -> str:
    # "10⁶" is 10^6 (NFKC would make it 106)
    text = _SUPERSCRIPT_POWER.sub(lambda m: "^" + m.group(1).translate(_SUPERSCRIPTS), text)
    text = _SPACED_THOUSANDS.sub(lambda m: _plain_locale_number(m, "\u00a0\u2009\u202f"), text)
    text = _PLAIN_SPACED_THOUSANDS.sub(lambda m: m.group(0).replace(" ", ""), text)
    text = _DOTTED_DECIMAL.sub(lambda m: _plain_locale_number(m, "."), text)
    text = _DOTTED_THOUSANDS.sub(lambda m: _plain_locale_number(m, "."), text)
    text = _VULGAR_FRACTION.sub(_vulgar_fraction, text)
    text = unicodedata.normalize("NFKC", text)
    text = text.replace("\u2212", "-").replace("\u2013", "-").replace("{,}", ",")
    text = _LATEX_THOUSANDS.sub(",", text)
    text = _ASCII_MIXED_NUMBER.sub(_ascii_mixed_number, text)
    text = _WORDED_MAGNITUDE.sub(_worded_magnitude, text)
    text = _ONE_IN_N.sub(_one_in_n, text)
    return _latex_fractions(text)  # "$\frac{1}{2}$" outside a \boxed{} too


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
_LATEX_THOUSANDS = re.compile(r"(?<=\d),?\s?\\[,;:!]\s?(?=\d{3}(?!\d))")
# "1 1/2" is 3/2 as "1½" is; "2 3/2" (not a proper fraction) stays two numbers
_ASCII_MIXED_NUMBER = re.compile(
    r"(?<![\w.,/])(?P<whole>\d{1,9}) (?P<over>\d{1,9})/(?P<under>\d{1,9})(?![\w/]|[.,]\d)"
)


def _ascii_mixed_number(match: re.Match[str]) -> str:
    whole, over, under = int(match["whole"]), int(match["over"]), int(match["under"])
    if not 0 < over < under:
        return match.group(0)
    return f"{whole * under + over}/{under}"


_MIXED_NUMBER = re.compile(
    r"(?<![\d.,/])(?P<whole>\d{1,9})\s*\\[dt]?frac\{(?P<over>\d{1,9})\}\{(?P<under>\d{1,9})\}"
)


def _latex_fractions(text: str) -> str:
    """\\frac{3}{4}, \\dfrac{3}{4} and \\frac34 -> 3/4; the mixed number 1\\frac{1}{2} -> 3/2."""
    text = _MIXED_NUMBER.sub(
        lambda m: f"{int(m['whole']) * int(m['under']) + int(m['over'])}/{m['under']}", text
    )
    text = re.sub(r"\\[dt]?frac\{([^{}]*)\}\{([^{}]*)\}", r"(\1)/(\2)", text)
    text = re.sub(r"\\[dt]?frac\s*(\d)(\d)(?!\d)", r"(\1)/(\2)", text)
    return re.sub(r"\((-?[\d.,]+)\)/\(([\d.,]+)\)", r"\1/\2", text)


def last_boxed(text: str) -> str | None:
    """Content of the last \\boxed{...} (or \\fbox{...}), braces balanced."""
    start = max(text.rfind("\\boxed{"), text.rfind("\\fbox{"))
    if start < 0:
        return None
    position = text.index("{", start) + 1
    depth = 1
    for index in range(position, len(text)):
        depth += {"{": 1, "}": -1}.get(text[index], 0)
        if depth == 0:
            return text[position:index]
    return text[position:]


def _unlatex(text: str) -> str:
    text = _latex_fractions(text).replace("\\times", "×").replace("\\cdot", "·")
    return re.sub(r"\\[a-zA-Z]+|[{}]", " ", text.replace("\\%", "%").replace("\\$", "$"))


# --- choice ----------------------------------------------------------------------------------

_CHOICE_MARKER = re.compile(
    r"(?:(?:answer|(?P<option>option|choice))\s*(?P<said>is|would be|will be|should be|[:=>\-])?"
    r"|result\s*(?:is|:)"
    # "I would choose B" (not "I cannot choose A", "wouldn't pick A", "should not go with C")
    r"|(?<!not )(?<!n't )(?<!cannot )(?<!never )\b(?:choose|select|pick|go with)\b"
    r"|\b(?P<conclusion>so|thus|therefore|hence)\b,?"  # "So B." (the letter ends it)
    r"|\bit(?:'s|’s|\s+is|\s+(?:must|has\s+to|should)\s+be)\b"  # "so it must be C"
    # a bare correction: "Answer: A. Wait, actually B." (the letter ends it, as a conclusion's),
    # and a guess: "I'm not sure, but I think B."
    rf"|{_SELF_CORRECTION}|(?P<bare>{_BARE_CORRECTION_LEAD}|\bI\s+(?:think|guess|believe)\b,?))\s*"
    r"(?:option|choice|letter)?\s*[:\-]?\s*[*$]*\s*[(\[]?\s*(?P<letter>[A-Ea-e])(?![A-Za-z])\s*[)\]]?"
    r"(?=(?P<after>[^\n]{0,12}))",  # looked at, not consumed: "B. Wait, it's C"
    re.IGNORECASE,
)
_ARTICLE_A = re.compile(r"\s+[A-Za-z]")
# an option named in a comparison, not chosen: "Option A (42) is larger than option B (17)."
# (what follows "option B", and what comes before "option B")
_OPTION_SAID_TO_BE = re.compile(
    r"[)\]]?\s*(?:\([^()\n]{0,40}\)\s*)?(?:is|are)\s+(?:the\s+)?(?P<most>[a-z]+)", re.IGNORECASE
)
_COMPARED_TO = re.compile(r"\b(?:than|to|with|and|or|over|vs\.?|versus)\s+$", re.IGNORECASE)
_CONCLUSION_END = re.compile(r"[*_]*\s*(?:[.!]|$)")
# "B", "(B)", "B) Bob", "B. Bob", "B: Bob", "B - Bob", "B — Bob"
_LEADING_LETTER = re.compile(
    r"^\W{0,3}[(\[]?(?P<letter>[A-Ea-e])(?:[)\]:]|\.(?!\w)|\s+[-–—]\s|\s*$)"
)
_LETTER_IS_CORRECT = re.compile(
    r"(?<![\w'])\(?(?P<letter>[A-E])\)?\s+is\s+(?:the\s+|an?\s+)?(?:correct|right|true|answer"
    # what the question asks: "B is the smallest." ("Which ... is the smallest?"), "Between A
    # and B, B is taller." ("Who is taller?")
    r"|(?P<most>[a-z]+))\b"
)
# an option said not to be what the question asks, then another said to be: "A is not the
# tallest; B is.", "A isn't taller, but B is."
_NOT_THIS_ONE_IS = re.compile(
    r"(?<![\w'])\(?(?P<other>[A-E])\)?\s+(?:is\s+not|isn['’]t)\s+(?:the\s+|an?\s+)?"
    r"(?P<most>[a-z][^,;:.!?\n]{0,80}?)\s*(?:[,;:—–-]|\.\s)\s*(?:but\s+|while\s+|whereas\s+)?"
    r"\(?(?P<letter>[A-E])\)?\s+is\b[*_]*\s*(?:[.!]|$)"
)
# what the question asks said to be an option: "..., so the smallest is B.", "The tallest
# one is (C)."
_ASKED_IS_LETTER = re.compile(
    r"\b(?:[Tt]he\s+)?(?P<most>[a-z]+(?:\s+[a-z]+)?)\s+(?:one\s+)?is\s+(?:option\s+)?[*_]*\(?"
    r"(?P<letter>[A-E])\)?[*_]*(?=\s*(?:[.!,;\n]|$))"
)
# an option marked chosen on its line: "- [x] B", "☑ B", "(B) 3 ✅", "B ✔" (a line also
# holding a box left empty or a cross, "[x] B  [ ] C", "A ❌ B ✅", is read by its marks)
_CHECK_MARK = re.compile(r"\[[xX✓✔]\]|[☑✅✔✓]")
_LINE_MARKS = re.compile(
    r"(?P<check>\[[xX✓✔]\]|[☑✅✔✓])|(?P<cross>\[\s\]|[☐❌✗✘❎])"
    # a letter starting its line or right after a mark ("✅ Option A is wrong" marks no A)
    r"|(?:^|(?<=[\]☑✅✔✓☐❌✗✘❎\ufe0f]))[\s>*_•+-]*[(\[]?(?P<letter>[A-E])(?![\w'])"
)
_CORRECT_WORDS = {"correct", "right", "true", "answer", "correct answer", "right answer"}
# a reply whose last sentence is only a letter: "Not A, not C. B.", "not a, not c. b."
# (not "Wrong: A.")
_LAST_SENTENCE_LETTER = re.compile(r"[.!?;]\s++[*_]*\(?(?P<letter>[A-Ea-e])\)?[*_]*[.!]?[*_]*\s*$")
# an option's text said to be what the question asks: "17 is the smallest." (tried where a
# run of spaces starts: a reply of 200,000 spaces took minutes)
_IS_THE_MOST = re.compile(r"(?<!\s)\s++is\s+the\s+(?P<most>[a-z]+est)$", re.IGNORECASE)
_THE_MOST = re.compile(r"\bthe\s+([a-z]+est)\b", re.IGNORECASE)
# what a question asks an option to be: "Which number is larger?", "Who is taller, A or B?",
# "Which of these numbers is even?", "What is the first letter of ...?" (after its "is")
_QUESTION = re.compile(r"(?:^|(?<=[.?!\n]))[^.?!\n]*+\?")  # tried at sentence starts only
_ASKED_PREDICATE = re.compile(
    r"\b(?:is|are)\s+(?:the\s+|an?\s+)?(?P<phrase>[a-z][a-z0-9']*(?:[ \t]+[a-z0-9']+){0,2})",
    re.IGNORECASE,
)
_NO_PREDICATE = {"not", "it", "this", "that", "there", "he", "she", "they", "one"}
_PREDICATE_WORD = re.compile(r"[a-z0-9']+", re.IGNORECASE)
PREDICATE_WORDS = 3
MAX_PREDICATE_CHARS = 200
# an option's text said to be what the question asks, or the reverse: "54 is larger than
# 9", "The larger number is 54"
_CLAUSE_LEAD = r"\s*(?:(?:and|so|but|thus|hence|therefore|then)\s+)?"
_SAID_TO_BE = re.compile(
    rf"{_CLAUSE_LEAD}(?P<subject>\S.*?)(?<!\s)\s++(?:is|are)\s++(?:the\s+|an?\s+)?"
    r"(?P<predicate>[a-z].*)",
    re.IGNORECASE,
)
_ASKED_ONE_IS = re.compile(
    rf"{_CLAUSE_LEAD}(?:the\s+)?(?P<predicate>[a-z]+(?:\s+[a-z]+)?)\s+(?:is|are)\s+"
    r"(?P<subject>\S(?:.*\S)?)\s*$",
    re.IGNORECASE,
)
Predicate = tuple[str, ...]


def _predicate(text: str) -> Predicate:
    """The first words of a predicate, lowercased: "Taller than Ann" -> ("taller", "than")."""
    words = itertools.islice(_PREDICATE_WORD.finditer(text), PREDICATE_WORDS)
    return tuple(word.group(0).lower() for word in words)


def predicates_asked(prompt: str) -> set[Predicate]:
    """What a question asks an answer to be: its superlatives ("the tallest") and the first
    words after the "is" of its question ("Which number is larger?": larger; "What is the
    first letter of ...?": first letter)."""
    asked: set[Predicate] = {(most.lower(),) for most in _THE_MOST.findall(prompt)}
    asked |= {
        _predicate(match["phrase"])
        for question in _QUESTION.finditer(prompt)
        for match in _ASKED_PREDICATE.finditer(question.group(0))
    }
    return {predicate for predicate in asked if predicate and predicate[0] not in _NO_PREDICATE}


def is_asked(text: str, asked: set[Predicate]) -> bool:
    """Whether the predicate `text` is what the question asks: the words of one start the
    other's ("taller than Ann" for "taller"; not "first vowel" for "first letter")."""
    said = _predicate(text)
    return bool(said) and any(
        said[: len(predicate)] == predicate[: len(said)] for predicate in asked
    )


_OPTION_LINE = re.compile(
    r"(?:^|\s)\(?(?P<letter>[A-E])[).:]\s+(?P<text>[^\n]+?)(?=\s+\(?[A-E][).:]\s|\n|$)"
)
_REJECTED = re.compile(
    r"^\s*(?:(?:is|was|seems|looks)\s+(?:not|wrong|incorrect|false)|wrong|incorrect|false)\b"
    r"|^[\s*_)]*\?\s*no(?=[,:;.!—–-])",  # "The answer is B? No: C." asks, then takes B back
    re.IGNORECASE,
)
_LETTER_OR_LETTER = re.compile(r"(?<![\w'])\(?[A-E]\)?\s*(?:or|/)\s*\(?[A-E]\)?(?![\w'])")
# a line ending in a label and its letter: "It is easy: C", "My pick: **(B)**." (not "Wrong: A")
_REJECTING_LABEL = re.compile(
    r"\b(?:not|wrong|incorrect|false|eliminated|ruled\s+out)\b", re.IGNORECASE
)
_LABELLED_LETTER = re.compile(r":[*_]*[ \t]+[*_$]*[(\[]?(?P<letter>[A-E])[)\]]?[*_$]*[.!]?[ \t]*$")
_OR_ANOTHER = re.compile(r"^\s*(?:or|and|/)\s*\(?(?:option\s*)?[A-E](?![a-z])", re.IGNORECASE)


def grade_choice(task: Task, output: str) -> Grade:
    expected = choice_letter(task.answer or "")
    if expected is None:
        return cannot_grade(f"the task's answer {task.answer!r} is not an option letter A-E")
    letter, how = extract_choice(output, task.prompt_text())
    if letter is None:
        return wrong(how)
    return Grade(
        score=1.0 if letter == expected else 0.0,
        detail=f"extracted {letter} ({how}); expected {expected}",
    )


def extract_choice(output: str, prompt: str = "") -> tuple[str | None, str]:
    """(letter, how it was found) or (None, why not)."""
    text = unicodedata.normalize("NFKC", output).strip()
    if not text:
        return None, "empty output"
    boxed = _boxed_letter(text)
    if boxed is not None:
        return boxed, "\\boxed{}"
    asked = predicates_asked(prompt)  # "the smallest", "Which number is larger?"
    for match in reversed(list(_CHOICE_MARKER.finditer(text))):
        letter, after = match.group("letter"), match.group("after")
        if match["option"] and not match["said"] and _only_compared(text, match, asked):
            continue  # "Option A (42) is larger than option B (17).": B is no answer
        if letter == "a" and _ARTICLE_A.match(text, match.end("letter")):
            continue  # "the answer is a bit..." is the article, not option a
        if _REJECTED.match(after):
            continue  # "option A is wrong" names a letter, but not as the answer
        if (match["conclusion"] or match["bare"]) and not _CONCLUSION_END.match(after):
            continue  # "so C is taller than A": a letter in a sentence, not its conclusion
        if _OR_ANOTHER.match(after):
            return None, f"ambiguous: {(match.group(0) + after).strip()!r}"
        if _begins_a_list(text, letter, match.end("letter")):
            continue  # "Let me consider each option:\nA) Ann\nB) Bob"
        return letter.upper(), "after an answer marker"
    checked = _checked_letters(text) if not _asks_for_a_wrong_one(prompt) else set()
    if len(checked) == 1:
        return checked.pop(), "the option checked"
    if checked:
        return None, f"ambiguous: checks {', '.join(sorted(checked))}"
    is_correct = [
        match
        for match in _LETTER_IS_CORRECT.finditer(text)
        if match.group("most") is None or is_asked(_clause_at(text, match.start("most")), asked)
    ] + [match for match in _ASKED_IS_LETTER.finditer(text) if is_asked(match["most"], asked)]
    if is_correct:  # "B is the smallest.", "..., so the smallest is B."
        last = max(is_correct, key=lambda match: match.start())
        return last.group("letter"), "'X is correct'"
    not_this = [
        match
        for match in _NOT_THIS_ONE_IS.finditer(text)
        if match["letter"] != match["other"]
        and (match["most"].lower() in _CORRECT_WORDS or is_asked(match["most"], asked))
    ]
    if not_this:  # "A is not the tallest; B is."
        return not_this[-1].group("letter"), "'X is not ...; Y is'"
    line = text.splitlines()[0]
    first_line = choice_letter(line.strip("*_ `")) or choice_letter(
        (_without_closing_note(line) or "").strip("*_ `")
    )  # "B (Bob is the tallest)"
    if first_line:  # "C" then an explanation that mentions other options
        return first_line, "a first line holding only a letter"
    bracketed = {m.upper() for m in re.findall(r"\(([A-Ea-e])\)", text)}
    if len(bracketed) > 1:
        return None, f"ambiguous: mentions {', '.join(sorted(bracketed))}"
    leading = _LEADING_LETTER.match(text)
    if (
        leading
        and not _begins_a_list(text, leading.group("letter"), leading.end("letter"))
        and not _RETRACTION.search(text, leading.end(), _line_end(text, leading.end()))
    ):  # "A - no wait, B" takes A back
        return leading.group("letter").upper(), "at the start of the output"
    if bracketed:
        return bracketed.pop(), "the only bracketed letter"
    lines = [line for line in text.splitlines() if choice_letter(line.strip("*_ `"))]
    if lines:
        return choice_letter(lines[-1].strip("*_ `")), "a line holding only a letter"
    last_sentence = _LAST_SENTENCE_LETTER.search(text.rsplit("\n", 1)[-1])
    if last_sentence:  # "Not A, not C. B."
        return last_sentence.group("letter").upper(), "a last sentence holding only a letter"
    either = _LETTER_OR_LETTER.search(text)
    if either:
        return None, f"ambiguous: {either.group(0)!r}"
    labelled = [
        match
        for match in map(_LABELLED_LETTER.search, text.splitlines())
        if match and not _REJECTING_LABEL.search(match.string, 0, match.start())
    ]
    if labelled:
        return labelled[-1].group("letter"), "a letter after a label ending its line"
    return _choice_by_option_text(text, prompt)


# a question asking for the option that is not so: a check mark may then mark the others
_WRONG_ONE = re.compile(r"\b(?:not|false|incorrect|wrong|untrue|invalid|except)\b", re.IGNORECASE)


def _asks_for_a_wrong_one(prompt: str) -> bool:
    """Whether a question of `prompt` asks for the option that is not so ("Which of these
    is NOT even?"): a reply ticking the true statements then ticks the wrong options."""
    return any(_WRONG_ONE.search(question.group(0)) for question in _QUESTION.finditer(prompt))


def _only_compared(text: str, match: re.Match[str], asked: set[Predicate]) -> bool:
    """Whether an option named as "option B" is only compared, not chosen: it follows
    "than" / "to" / "and" ... ("larger than option B"), or is said to be something other
    than what the question asks ("Option B is smaller ..." for "Which is larger?")."""
    if _COMPARED_TO.search(text, max(0, match.start() - 12), match.start()):
        return True
    said = _OPTION_SAID_TO_BE.match(text, match.end("letter"))
    return bool(
        said
        and asked
        and said["most"].lower() not in _CORRECT_WORDS
        and not is_asked(said["most"], asked)
    )


def _checked_letters(text: str) -> set[str]:
    """The option letters marked chosen: on each line with a check mark ("[x]", "☑", "✅",
    "✔"), the letter next to it, before ("B ✅") or after ("- [x] (B) 3"); a line's marks
    are paired with its letters in order when it holds as many of both ("[x] B  [ ] C")."""
    checked: set[str] = set()
    for line in text.splitlines():
        if not _CHECK_MARK.search(line):
            continue
        marks, letters = [], []
        for match in _LINE_MARKS.finditer(line):
            if match["letter"]:
                letters.append(match["letter"])
            else:
                marks.append(match["check"] is not None)
        if len(letters) == len(marks):
            checked |= {letter for letter, check in zip(letters, marks, strict=True) if check}
    return checked


def _begins_a_list(text: str, letter: str, end: int) -> bool:
    """Whether the option letter ending at `end` begins a list of the options ("A) Ann\nB)
    Bob", "A: Ann is 150 cm, B: Bob ..."): the next letter follows with the same delimiter
    at the start of a line or after a comma, within a few lines (a bounded look: linear)."""
    delimiter = text[end : end + 1]
    if delimiter not in {")", "]", ":", "."} or letter.upper() == "E":
        return False
    following = chr(ord(letter.upper()) + 1)
    pattern = rf"(?:\n[\s*_]*|[,;]\s*)[(\[]?{following}{re.escape(delimiter)}"
    return re.search(pattern, text[end : end + 300]) is not None


def _boxed_letter(text: str) -> str | None:
    """The letter of "\\boxed{B}", "\\boxed{(b)}", "\\boxed{\\text{B}}" or "\\boxed{B) Bob}"."""
    boxed = last_boxed(text)
    if boxed is None:
        return None
    leading = _LEADING_LETTER.match(_unlatex(boxed).strip("*_ `$"))
    return leading.group("letter").upper() if leading else None


_CLAUSES = re.compile(r"[,.;:!?\n]+")


def _choice_by_option_text(text: str, prompt: str) -> tuple[str | None, str]:
    """An answer that is one option's text ("Bob", "The tallest is Bob."): the text must
    be the whole answer, not a word inside prose ("No idea" does not choose option "No")."""
    options = {
        letter: _normalise(option)
        for letter, option in (
            (m.group("letter"), m.group("text").strip()) for m in _OPTION_LINE.finditer(prompt)
        )
        if option
    }
    answers = {_normalise(candidate) for candidate in answer_candidates(text).values()}
    answered = [letter for letter, option in options.items() if option in answers]
    if len(answered) == 1:
        return answered[0], f"the answer is option {answered[0]}'s text"
    said = _normalise(text)
    named = [
        letter
        for letter, option in options.items()
        if re.search(rf"(?<!\w){re.escape(option)}(?!\w)", said)
    ]
    asked = predicates_asked(prompt)
    said_to_be = {
        letter
        for clause in _CLAUSES.split(text)
        for letter in _option_said_to_be(clause, options, asked)
    }
    if len(said_to_be) == 1:  # "54 is larger than 9." for "Which number is larger?"
        letter = said_to_be.pop()
        return letter, f"option {letter}'s text is said to be what the question asks"
    if len(answered) > 1 or len(named) > 1:
        return None, f"ambiguous: names the text of options {', '.join(answered or named)}"
    clauses = [
        _IS_THE_MOST.sub(lambda m: "" if is_asked(m["most"], asked) else m.group(0), clause)
        for clause in _CLAUSES.split(text)
        if clause.strip(_WRAPPERS)
    ]
    if named and clauses and options[named[0]] in {_normalise(clauses[0]), _normalise(clauses[-1])}:
        # "Yes, all wugs are feps.", "..., so all wugs are feps. Yes.": the only option named
        return named[0], f"the first or last clause is option {named[0]}'s text"
    return None, "no option letter in the output"


def _clause_at(text: str, start: int) -> str:
    """The clause starting at `start`, up to its first punctuation (a bounded look)."""
    return _CLAUSES.split(text[start : start + MAX_PREDICATE_CHARS], maxsplit=1)[0]


def _option_said_to_be(clause: str, options: dict[str, str], asked: set[Predicate]) -> list[str]:
    """The option a clause says is what the question asks ("54 is larger than 9", "the
    larger number is 54"), as a list of at most one letter."""
    for pattern in (_SAID_TO_BE, _ASKED_ONE_IS):
        said = pattern.match(clause)
        if said is not None and is_asked(said["predicate"], asked):
            text = _normalise(said["subject"])
            return [letter for letter, option in options.items() if option == text][:1]
    return []


# --- exact / regex ---------------------------------------------------------------------------

_PREFIX = re.compile(
    r"^(?:(?:the\s+)?(?:final\s+)?(?:answer|result|output)\s*(?:is|:|=)|final answer\s*:?)\s*",
    re.IGNORECASE,
)
_MARKER_SEGMENT = re.compile(r"(?:answer|result)\s*(?:is|:|=)\s*(?P<rest>[^\n]*)", re.IGNORECASE)
_ANSWER_TAG = re.compile(r"<answer>([^<]*)</answer>", re.IGNORECASE)
_WRAPPERS = "\"'`*_“”‘’「」«» \t"
_WHITESPACE = "".join(chr(code) for code in range(0x3001) if chr(code).isspace())


# a markdown bullet or quote before an answer: "- tac", "> tac", "• tac" (a "-" only with a
# space after it: "-5" is a negative number)
_BULLET = re.compile(r"^(?:[-+•]\s+|>\s*|#{1,6}\s+)+")  # and a heading: "### tac"
# LaTeX text around an answer: "$\\text{tac}$", "\\(\\mathrm{tac}\\)"
_LATEX_TEXT = re.compile(r"^(?:\$|\\\()\s*\\(?:text|mathrm|textbf)\{([^{}]*)\}\s*(?:\$|\\\))$")
# a closing check mark or emoji: "tac ✅" (stripped, not searched: linear on any text)
_CLOSING_SYMBOLS = (
    "".join(
        chr(code)
        for low, high in ((0x2600, 0x27BF), (0x1F300, 0x1FAFF))
        for code in range(low, high + 1)
    )
    + "\ufe0f"
)


def _normalise(text: str, case_sensitive: bool = False) -> str:
    text = unicodedata.normalize("NFKC", text).strip()
    text = _LATEX_TEXT.sub(r"\1", text.rstrip(_CLOSING_SYMBOLS + _WHITESPACE))
    text = _PREFIX.sub("", _BULLET.sub("", text))
    # one strip each side (stripping wrappers, then dots, then spaces in turn until nothing
    # changes took a pass per character on ". . . . ." a million times over)
    text = text.lstrip(_WRAPPERS + _WHITESPACE).rstrip(_WRAPPERS + _WHITESPACE + ".!,;:")
    text = re.sub(r"\s+", " ", text)
    return text if case_sensitive else text.casefold()


# what states the answer after it: "... is t", "... gives us tac", "It's tac."
_VERDICT_VERB = re.compile(
    r"(?:\b(?:is|are|be|gives(?:\s+us)?|becomes|yields)\b|\b(?:it|that|this|here)['’]s)\s*:?\s+",
    re.IGNORECASE,
)
# the answer named by its kind: "... is the letter a", "... is the word 'tac'"
_LETTER_OR_WORD_NAMED = re.compile(r"[\s:*_]*(?:the\s+)?(?:letter|word)\s+(?=\S)", re.IGNORECASE)


def _without_its_kind(text: str) -> str | None:
    """The answer after "the letter" / "the word" starting `text`, or None."""
    named = _LETTER_OR_WORD_NAMED.match(text)
    return text[named.end() :] if named else None


# an answer stated before what it is: "tac is the reversed word.", "TAC is the answer."
_STATED_FIRST = re.compile(
    r"(?P<answer>\S[^\n]*?)(?<!\s)\s+(?:is|would\s+be)\s+(?:the\s+|my\s+)?"
    r"(?:(?:final|correct|right)\s+)?(?:answer|result|output|reversed|acronym|uppercase|"
    r"lowercase)\b"
    # "'tac' is 'cat' reversed", "tac is cat spelled backwards"
    r"|(?P<stated>\S[^\n]*?)(?<!\s)\s+is\s+(?:'[^'\n]{1,80}'|\"[^\"\n]{1,80}\"|\S+)\s+"
    r"(?:reversed|backwards|(?:spelled|written|read)\s+backwards|in\s+reverse)\b",
    re.IGNORECASE,
)
# an answer ruled out and then given: "The answer is not act, it is tac." -> "tac."
_NOT_THIS_BUT = re.compile(
    r"not\b[^\n]*?(?:\bbut\b|[,;.]\s*(?:it|that)(?:\s+is|['’]s)\b|[,;.]\s*rather\b)\s*:?\s*"
    r"(?P<answer>[^\n]+)",
    re.IGNORECASE,
)


def answer_candidates(output: str) -> dict[str, str]:
    """The parts of an output that may hold the answer, by name."""
    candidates = {"the whole output": output}
    markers = list(_MARKER_SEGMENT.finditer(output))
    if markers:
        candidates["the text after the answer marker"] = markers[-1].group("rest")
    boxed = last_boxed(output)
    if boxed is not None:  # "\\boxed{olleh}", "\\boxed{\\text{olleh}}"
        candidates["the boxed text"] = re.sub(r"\\(?:text|mathrm)\{([^{}]*)\}", r"\1", boxed)
    tagged = _ANSWER_TAG.findall(output)
    if tagged:
        candidates["the text in <answer> tags"] = tagged[-1]
    lines = [line for line in output.splitlines() if line.strip()]
    if len(lines) > 1:
        candidates["the first line"] = lines[0]
        candidates["the last line"] = lines[-1]
    last_line = lines[-1] if lines else ""
    verdict = list(_VERDICT_VERB.finditer(last_line))
    if verdict:  # "The last letter of 'cat' is 't'.", "Reversing 'cat' gives us tac."
        said = last_line[verdict[-1].end() :]
        candidates["the text after the last 'is'"] = said
        named = _without_its_kind(said)
        if named is not None:  # "The last letter of the word banana is the letter a."
            candidates["the letter or word named after the last 'is'"] = named
    for line in lines[:1] + lines[-1:]:
        stated = _STATED_FIRST.match(line)
        if stated and stated.group("answer"):  # "tac is the reversed word."
            candidates["the text before 'is the answer'"] = stated.group("answer")
        elif stated:  # "'tac' is 'cat' reversed"
            candidates["the text before 'is ... reversed'"] = stated.group("stated")
    quoted = _quoted_texts(output)
    if quoted:
        candidates["the last quoted text"] = quoted[-1]
    return candidates


def _quoted_texts(text: str) -> list[str]:
    """The texts in 'quotes', "double quotes", `backticks` or **bold**, in order, but those
    said to be wrong ("'tobor' is wrong; it is tobro.")."""
    found = re.finditer(r"(?:'([^'\n]+)'|\"([^\"\n]+)\"|`([^`\n]+)`|\*\*([^*\n]+)\*\*)", text)
    return [
        next(part for part in match.groups() if part)
        for match in found
        if not _REJECTED.match(text[match.end() : match.end() + 40])
    ]


# "The answer is: X", "**Answer**: X", "Output: X" (the exact grader's own markers: the
# choice grader reads option texts through `answer_candidates`)
# and a self-correction ("tca\n\nWait, no, it's tac.": the correction is the answer)
# and a bare one giving a single word as its whole sentence ("tac\n\nWait, actually tca.",
# "No wait, tca."; not "Actually, this was easy.")
_EXACT_MARKER = re.compile(
    rf"(?:(?:answer|result|output)[*_]*\s*(?:is\b|[:=])|{_SELF_CORRECTION}"
    rf"|(?:{_BARE_CORRECTION_LEAD}|\bno,?\s+wait\b[\s,:;!.—–-]{{0,3}})"
    r"(?!(?:yes|no|right|correct|true|fine|ok|okay|sure|hmm|wait)\b)"  # "Actually, yes."
    r"(?=[*_'\"`“‘]*[^\W_][^\s.,;:!?*_'\"`”’]*[*_'\"`”’]*(?:[.!]+(?=\s|$)|[ \t]*(?:\n|$))))[\s:]*",
    re.IGNORECASE,
)
_QUOTED_START = re.compile(r"\s*(?:'([^'\n]+)'|\"([^\"\n]+)\"|`([^`\n]+)`|\*\*([^*\n]+)\*\*)")
_CLAUSE_END = re.compile(r"[.,;!?](?=\s|$)")
# "Reversed: tac", "c-a-t → tac", "S + C + D = SCD" (not "==", "<=", ">=")
_LABEL_END = re.compile(r":[*_]*\s|→|->|=>|⇒|(?<![<>=!])=(?![=>])")  # "**Reversed:** tac"


def _after_label(line: str) -> str | None:
    """The text after a line's last label or arrow, or None when it has none."""
    ends = list(_LABEL_END.finditer(line))
    return line[ends[-1].end() :] if ends else None


def exact_candidates(output: str, prompt: str = "") -> dict[str, str]:
    """The parts of an output that may hold its answer for the exact grader. An explicit
    answer (the last "Answer:"-like marker, a `\\boxed{}`, `<answer>` tags) is the answer:
    then text before it (a first line, quoted text: "The answer is cta, not 'tac'") does not
    count, only the explicit answers and the last line after them ("Answer:\ntac"). Text
    quoted in `prompt` and echoed last ("Write 'tac' backwards." -> "Write 'tac' backwards: cat")
    is the question's, not a quoted answer."""
    markers = list(_EXACT_MARKER.finditer(output))
    tags = list(_ANSWER_TAG.finditer(output))
    starts = [
        markers[-1].start() if markers else -1,
        max(output.rfind("\\boxed{"), output.rfind("\\fbox{")),
        tags[-1].start() if tags else -1,
    ]
    if max(starts) < 0:
        candidates = answer_candidates(output)
        asked = {_normalise(text) for text in _quoted_texts(prompt)}
        if _normalise(candidates.get("the last quoted text", "")) in asked:
            del candidates["the last quoted text"]
        fenced = list(_FENCE.finditer(output))
        if fenced:  # "```text\ntac\n```"
            candidates["the fenced text"] = fenced[-1].group("code")
        lines = output.strip().splitlines()
        labelled = _after_label(lines[-1]) if lines else None
        if labelled is not None:
            candidates["the text after the last line's label"] = labelled
        filled = [line for line in lines if line.strip()]
        label_lines = [
            i for i, line in enumerate(filled[:-1]) if line.rstrip("*_ \t").endswith(":")
        ]
        after = label_lines[-1] + 1 if label_lines else 0
        if label_lines and all(_after_label(line) is None for line in filled[after:]):
            # "The reversed word is:\n\ntac\n\n(c-a-t backwards)" (not "Tried:\ntac\nFinal: cta")
            candidates["the line after the last label line"] = filled[after]
        subject = _said_to_be_asked(filled[-1] if filled else "", predicates_asked(prompt))
        if subject is not None:  # "Between Ann and Bob, Bob is taller." for "Who is taller?"
            candidates["what the last line says is what the question asks"] = subject
        return candidates
    candidates = {"the whole output": output}
    if markers:
        line_end = output.find("\n", markers[-1].end())
        rest = output[markers[-1].end() : None if line_end < 0 else line_end]
        candidates["the text after the answer marker"] = rest
        candidates["the answer marker's clause"] = _CLAUSE_END.split(rest, maxsplit=1)[0]
        named = _without_its_kind(rest)
        if named is not None:  # "The result is the word tac."
            candidates["the letter or word named after the answer marker"] = named
        corrected = _NOT_THIS_BUT.match(rest.lstrip(" :*_"))
        if corrected:  # "The answer is not act, it is tac."
            candidates["the answer given after the one ruled out"] = corrected.group("answer")
        labelled = _after_label(rest)
        if labelled is not None:  # "The answer is: e, e, r, t → eert"
            candidates["the text after the answer's last label"] = labelled
        quoted = _QUOTED_START.match(rest)
        if quoted:  # "The answer is **tac** because ..."
            candidates["the quoted text after the answer marker"] = next(
                part for part in quoted.groups() if part
            )
    boxed = last_boxed(output)
    if boxed is not None:
        candidates["the boxed text"] = re.sub(r"\\(?:text|mathrm)\{([^{}]*)\}", r"\1", boxed)
    if tags:
        candidates["the text in <answer> tags"] = tags[-1].group(1)
    fenced_after = _FENCE.search(output, max(starts))
    if fenced_after is not None:  # "Answer:\n```text\ntac\n```"
        candidates["the fenced text after the answer marker"] = fenced_after.group("code")
    line_end = output.find("\n", max(starts))
    if line_end >= 0:  # the answer on a line of its own after the marker
        later = answer_candidates(output[line_end:])
        for name in ("the last line", "the text after the last 'is'"):
            if name in later:
                candidates[name] = later[name]
        if "the last line" not in later and output[line_end:].strip():
            candidates["the last line"] = output[line_end:]
    return candidates


def _said_to_be_asked(line: str, asked: set[Predicate]) -> str | None:
    """What the last clause of `line` that says something is what the question asks says it
    of ("Bob" of "Between Ann and Bob, Bob is taller." for "Who is taller?"), or None."""
    for clause in reversed(_CLAUSES.split(line)):
        said = _SAID_TO_BE.match(clause)
        if said is not None and is_asked(said["predicate"], asked):
            return said["subject"]
    return None


# A note that may take the answer back or give another: "tca (no wait, tac)", "tac (or cta)"
_RETRACTING_NOTE = re.compile(
    r"\b(?:no|not|wait|actually|sorry|correct\w*|or|rather|instead|but|answer\w*)\b",
    re.IGNORECASE,
)


def _without_closing_note(text: str) -> str | None:
    """The text before a closing parenthetical note ("tac (reversed from cat)." -> "tac"),
    or None when there is none, or when the note may retract or change the answer."""
    text = text.rstrip().rstrip(".!*_ ")
    start = text.rfind("(")
    if not text.endswith(")") or start <= 0 or ")" in text[start:-1]:
        return None
    if _RETRACTING_NOTE.search(text, start):
        return None
    return text[:start]


# a question that asks for letters or words in an order: "Sort the letters of the word
# 'silver' in alphabetical order.", "Reverse the order of the words in: '...'."
_LETTERS_ORDERED = re.compile(
    r"\bsort\w*\s+(?:the\s+)?letters\b|\bletters\b[^.?!\n]{0,80}\b(?:alphabetical|sorted)",
    re.IGNORECASE,
)
_WORDS_ORDERED = re.compile(
    r"\b(?:revers|sort|order|arrang)\w*\b[^.?!\n]{0,40}\bwords\b", re.IGNORECASE
)
# those items listed one by one: "e, i, l, r, s, v", "e i l r s v"; "cherry, banana, apple",
# "cherry, banana, and apple"
_LISTED_LETTERS = re.compile(r"[^\W\d_](?:(?:\s*[,;-]\s*|\s+)[^\W\d_])+")
_WORD_SEPARATOR = r"\s*[,;]\s*(?:and\s+)?|\s+and\s+"
_LISTED_WORDS = re.compile(rf"[^\s,;]+(?:(?:{_WORD_SEPARATOR})[^\s,;]+)+")


def _items_asked(prompt: str) -> str | None:
    """ "letters" or "words" when the question asks for them in an order, else None."""
    if _LETTERS_ORDERED.search(prompt):
        return "letters"
    if _WORDS_ORDERED.search(prompt):
        return "words"
    return None


def _joined_items(text: str, items: str) -> str | None:
    """The letters or words `text` lists one by one, joined as an answer writes them
    ("e, i, l, r, s, v" -> "eilrsv", "cherry, banana, apple" -> "cherry banana apple"), or
    None when it is no such list."""
    if items == "letters" and _LISTED_LETTERS.fullmatch(text):
        return re.sub(r"[\s,;-]", "", text)
    if items == "words" and _LISTED_WORDS.fullmatch(text):
        return " ".join(word.strip(_WRAPPERS) for word in re.split(_WORD_SEPARATOR, text))
    return None


def grade_exact(task: Task, output: str) -> Grade:
    if task.answer is None:
        return cannot_grade("the exact grader needs the task's answer")
    expected = _normalise(task.answer, task.case_sensitive)
    if not output.strip():
        return wrong("empty output")
    items = _items_asked(task.prompt_text())
    for name, candidate in exact_candidates(output, task.prompt_text()).items():
        normalised = _normalise(candidate, task.case_sensitive)
        if normalised == expected:
            return Grade(score=1.0, detail=f"{name} matches {task.answer!r}")
        noted = _without_closing_note(candidate)
        if noted is not None and _normalise(noted, task.case_sensitive) == expected:
            return Grade(score=1.0, detail=f"{name}, without its note, matches {task.answer!r}")
        joined = _joined_items(normalised, items) if items else None
        if joined is not None and joined == expected:  # "e, i, l, r, s, v" for "eilrsv"
            return Grade(score=1.0, detail=f"{name}, its {items} joined, matches {task.answer!r}")
    shown = _normalise(output, True)
    return wrong(f"no match for {task.answer!r} in {shown[:80]!r}")


REGEX_WINDOW = 20_000


def grade_regex(task: Task, output: str) -> Grade:
    if task.answer is None:
        return cannot_grade("the regex grader needs the task's answer (a pattern)")
    flags = 0 if task.case_sensitive else re.IGNORECASE
    try:
        pattern = re.compile(task.answer, flags)
    except re.error as error:
        return cannot_grade(f"the task's pattern {task.answer!r} does not compile: {error}")
    text = unicodedata.normalize("NFKC", output).replace("\u2212", "-")  # "[−3, 5]"
    if not text.strip():  # a pattern that checks only what is absent, "^(?!.*no)", matches ""
        return wrong("empty output")
    text, where = _final_answer_part(text)
    text = re.sub(r"\s+", " ", text).strip()
    if not text:
        return wrong(f"no answer{where}")
    # The pattern is searched in at most 2 x 20,000 characters (a task's pattern may
    # backtrack); the final answer of a long reply is at its end.
    match = pattern.search(text[:REGEX_WINDOW]) or pattern.search(text[-REGEX_WINDOW:])
    if match is None:
        return wrong(f"pattern not found in {text[:80]!r}{where}")
    return Grade(score=1.0, detail=f"matched {match.group(0)[:80]!r}{where}")


# Markers of a final answer (the number grader's, without its "result is" / "total is",
# which also begin remarks: "The result is sorted."), and self-corrections ("[1, 3, 2].
# Wait, no, it's [1, 2, 3].") unless a remark follows them ("Actually, it is correct.")
# and a bare correction giving a list of numbers ("[1, 2, 3]. Actually [1, 3, 2].", "Wait,
# 1, 3, 2."), taken only when the list is the whole of its sentence (see `_LIST_ANSWER`)
_FINAL_ANSWER_MARKER = re.compile(
    r"(?:final answer|answer)(?:\s*(?:is|was|(?:would|should|must|will) be)\b|\s*[:=])"
    rf"|final answer|{_SELF_CORRECTION}"
    rf"|(?P<bare>{_BARE_CORRECTION_LEAD}(?=[\[(]\s*-?\d|-?\d+(?:\.\d+)?\s*[,;]\s*-?\d))",
    re.IGNORECASE,
)
# a list of numbers and nothing else: not "[1, 2, 3] is right" nor "[1, 2, 3]? No, [1, 3, 2]"
_LIST_ANSWER = re.compile(
    r"[\[(]?\s*-?\d+(?:\.\d+)?(?:(?:\s*[,;]\s*|\s+)-?\d+(?:\.\d+)?)*\s*[\])]?"
)
# a remark on an answer given before, not an answer: "The answer is correct because ..."
_VERDICT = re.compile(
    r"[\s:*_#>`$]*+(?:(?:not\s+)?(?:correct|right|wrong|incorrect|valid|accurate|above|shown|"
    r"given|sorted|the\s+same|fine|ok|okay|good)\b|\W*+$)",
    re.IGNORECASE,
)


# Where the answer after a marker starts: past markdown, and a fence opening on its own line
_ANSWER_START = re.compile(r"(?:[\s:*_#>`$]|(?<=```)[\w+#.-]+(?=\n))*+")
# The end of the answer's sentence: "[3, 2, 1]. That is [1, 2, 3] sorted." ("[1.5, 2]" is one)
_ANSWER_SENTENCE_END = re.compile(r"\.\s+(?=[A-Z])")
MAX_ANSWER_CONTINUATION = 2_000


def _final_answer_part(text: str) -> tuple[str, str]:
    """The answer after the last final-answer marker ("The answer is [1, 2, 3]"), without
    markdown around it or a closing period, and where it was found; else the whole text. A
    pattern searched in the whole reply would credit a right list the reply wrote before it
    answered another one, or one its explanation names after it. A marker followed by no
    text ("[1, 2, 3] is my final answer.") or a remark ("The answer is correct.") is no final
    answer."""
    retracted = _answer_retracted_before(text)
    for marker in reversed(list(_FINAL_ANSWER_MARKER.finditer(text, retracted))):
        if _VERDICT.match(text, marker.end()):
            continue
        where = f" (the answer after {marker.group(0).strip()!r})"
        line = text[marker.end() : _line_end(text, marker.end())].lstrip(" :*_#>`$")
        if re.match(r"not\b", line, re.IGNORECASE):  # "The answer is not [3, 2, 1], ..."
            corrected = _NOT_THIS_BUT.match(line)
            if corrected is None:
                return "", f" ({marker.group(0).strip()!r} {_clip(line.strip())!r} rules it out)"
            return corrected.group("answer").rstrip(" .*_`$"), where
        answer = _answer_at(text, marker.end()).strip(" :*_#>`$").rstrip(" .!*_`$")
        if marker["bare"] and not _LIST_ANSWER.fullmatch(answer):
            continue  # "Actually [1, 2, 3] is right.": a remark, no new answer
        return answer, where
    if retracted:
        return text[retracted:], " (after the retraction)"
    return text, ""


_RETRACTION_REMARK = re.compile(r"[\s,:;.!?-]*(?:(?:it|that)(?:['’]s|\s+is)\s+)?", re.IGNORECASE)


def _answer_retracted_before(text: str) -> int:
    """Where the text after the last retraction starts ("[1, 2, 3]? No wait: [1, 3, 2]."),
    when more than a remark follows it ("No wait, it's fine."); else 0."""
    retractions = list(_RETRACTION.finditer(text))
    if not retractions:
        return 0
    after = _RETRACTION_REMARK.match(text, retractions[-1].end()).end()  # type: ignore[union-attr]
    if _VERDICT.match(text, after):
        return 0
    return retractions[-1].end()


def _answer_at(text: str, start: int) -> str:
    """The answer starting at `start`: the rest of its line (the next line when the marker
    ends its line, or its line is a lead-in ending in ':'), up to the end of its sentence;
    a list whose bracket the line leaves open ("[1,\n2,\n3]") runs to its closing one, and
    a bullet list is its items."""
    start = _ANSWER_START.match(text, start).end()  # type: ignore[union-attr]
    end = _line_end(text, start)
    if text[start:end].rstrip(" *_").endswith(":"):  # "The answer is as follows:\n[1, 2, 3]"
        start = _ANSWER_START.match(text, end).end()  # type: ignore[union-attr]
        end = _line_end(text, start)
    items = _bullet_items(text, start)
    if len(items) > 1:  # "The answer is:\n- 3\n- 9\n- 14": the list of its items
        return " ".join(items)
    depth = text.count("[", start, end) - text.count("]", start, end)
    if depth > 0:
        closing = _closing_bracket(text, end, depth)
        end = end if closing is None else closing + 1
    answer = text[start:end]
    sentence_end = _ANSWER_SENTENCE_END.search(answer)
    return answer if sentence_end is None else answer[: sentence_end.start()]


_BULLET_ITEM = re.compile(r"[ \t]*[-•+][ \t]+(?P<item>[^\n]*)(?:\n|\Z)")


def _bullet_items(text: str, start: int) -> list[str]:
    """The items of a markdown bullet list starting at `start`, one a line."""
    items: list[str] = []
    item = _BULLET_ITEM.match(text, start)
    while item is not None and item.end() > start:
        items.append(item.group("item").strip())
        start = item.end()
        item = _BULLET_ITEM.match(text, start)
    return items


def _line_end(text: str, start: int) -> int:
    end = text.find("\n", start)
    return len(text) if end < 0 else end


def _closing_bracket(text: str, start: int, depth: int) -> int | None:
    """Where the `depth` brackets left open before `start` close (a bounded look)."""
    for index in range(start, min(len(text), start + MAX_ANSWER_CONTINUATION)):
        depth += {"[": 1, "]": -1}.get(text[index], 0)
        if depth == 0:
            return index
    return None


# --- code ------------------------------------------------------------------------------------

# The info string holds no backtick (as in CommonMark): "`" * 100_000 is no fence, and
# rejecting it takes linear time.
_FENCE = re.compile(r"```[ \t]*(?P<language>[\w+#.-]*)[^\n`]*\n(?P<code>.*?)(?:```|\Z)", re.DOTALL)
_PYTHON_TAGS = {"python", "py", "python3", "py3"}
_LANGUAGE_LINE = re.compile(r"\A\s*(?:python|py)3?[ \t]*\r?\n", re.IGNORECASE)
_CODE_START = re.compile(r"^[ \t]*(?:def |class |import |from |@|async def )", re.MULTILINE)


def extract_code(output: str) -> str | None:
    """The Python in a reply: fenced python blocks that parse (joined, with untagged blocks
    that define a function or class), else untagged blocks, else the raw code."""
    if not output.strip():
        return None
    # A fence inside a list item is indented as a whole; the code itself is not.
    blocks = [
        (m.group("language").lower(), textwrap.dedent(m.group("code")))
        for m in _FENCE.finditer(output)
    ]
    if blocks:
        candidates = [code for language, code in blocks if language in _PYTHON_TAGS]
        if not candidates:
            candidates = [code for language, code in blocks if not language]
        else:  # "```\ndef add(...)```" then "```python\nprint(add(2, 3))```"
            candidates = [
                code
                for language, code in blocks
                if language in _PYTHON_TAGS or (not language and _defines(code))
            ]
        if candidates:
            parsing = [code for code in candidates if _parses(code)]
            return "\n\n".join(parsing) if parsing else candidates[-1]
    output = _LANGUAGE_LINE.sub("", output, count=1)  # "python\ndef add(...)": a lost fence
    if _parses(output):
        return output
    start = _CODE_START.search(output)
    if start is None:
        return output
    lines = output[start.start() :].splitlines()
    end = _indented_block_end(lines)
    while end > 0:  # the longest run of lines from there that parses (prose may follow)
        # dedented: a markdown code block is indented as a whole ("    def add(...)")
        code = textwrap.dedent("\n".join(lines[:end]))
        error_line = _syntax_error_line(code)
        if error_line is None:
            return code if code.strip() else output
        # every run that holds the faulty line fails too: one parse per error, not per line
        end = min(end, error_line) - 1
    return output


def _indented_block_end(lines: list[str]) -> int:
    """How many lines an indented first line's block holds (up to the first non-empty line
    indented less: the prose after it); all of them when the first line is not indented."""
    indent = len(lines[0]) - len(lines[0].lstrip()) if lines else 0
    if indent == 0:
        return len(lines)
    for index, line in enumerate(lines):
        if line.strip() and len(line) - len(line.lstrip()) < indent:
            return index
    return len(lines)


def _defines(code: str) -> bool:
    """Whether `code` parses and defines a function or class at its top level (an untagged
    block of output, "Fizz", parses too but defines nothing)."""
    if not _parses(code):
        return False
    tree = ast.parse(code)
    return any(
        isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        for node in tree.body
    )


def _parses(code: str) -> bool:
    return _syntax_error_line(code) is None and bool(code.strip())


def _syntax_error_line(code: str) -> int | None:
    """None when `code` parses, else the line of the error (the end when unknown). Deep
    nesting ("((((...") makes the parser run out of stack or memory: a syntax error too."""
    try:
        ast.parse(code)
    except SyntaxError as error:
        return error.lineno or code.count("\n") + 1
    except (ValueError, MemoryError, RecursionError):
        return code.count("\n") + 1
    return None


async def grade_code(task: Task, output: str, limits: SandboxLimits | None = None) -> Grade:
    if not task.tests:
        return cannot_grade("the code grader needs the task's tests")
    code = extract_code(output)
    if code is None:
        return wrong("no code in the output")
    result = await run_python_tests(code, task.tests, limits)
    if result.status == "internal_error":
        return cannot_grade(f"the code sandbox failed: {result.detail}")
    if result.total == 0:
        return cannot_grade("the task's tests hold no test")
    if result.status == "ok":
        failure = next((t for t in result.tests if not t.passed), None)
        detail = result.detail
        if failure is not None:
            detail += f"; first failure: {failure.name}: {failure.error}"
        return Grade(score=result.passed / result.total, detail=detail[:1000])
    return wrong(f"{result.status}: {result.detail}"[:1000])


# --- judge -----------------------------------------------------------------------------------

DEFAULT_RUBRIC = (
    "Is the response correct, complete, and does it do what the task asks? "
    "Penalise wrong facts, wrong results and ignored instructions."
)
JUDGE_SYSTEM = "You are a strict, fair grader. You score one response to one task."
MAX_JUDGED_CHARS = 6000
# A response line this long found inside a reply line is an echo; a shorter one ("7/10")
# only when it is the whole line, since the judge's own verdict may hold the same text.
MIN_ECHO_CHARS = 20
_SCORE_VALUE = (
    r"[*_`]*+\s*+(?P<value>-?\d+(?:\.\d+)?)(?![\d%])\s*[*_`]*"
    r"(?:\s*(?:/|out of)\s*(?P<scale>\d+))?"
)
# The form asked for, "SCORE: 7" (also "**Score**: 7", "Rating (0-10): 8", "Overall: 7/10",
# "Final score - 7"; a dash with a space after it: "Score -1" is no score of 1)
_SCORE_LINE = re.compile(
    r"\b(?:score|rating|grade|overall|total)[*_]*+(?:\s*\([^()\n]{0,20}\))?[*_]*+"
    r"(?:\s*[:=]|\s+[-–—](?=\s))\s*+" + _SCORE_VALUE,
    re.IGNORECASE,
)
# A score in words: "I'd give it a score of 7", "My score is 7.", "I'd give it a 7", "I would
# rate this response a 9", "rate it as 6", "It scores a 6", "SCORE 7"; read when no
# "SCORE: N" is given (a remark such as "a perfect answer would score 10/10" after "SCORE:
# 7/10" is no verdict)
_SCORE_PHRASE = re.compile(
    r"(?:\b(?:score|rating|grade)\s+(?:is|of|would\s+be|will\s+be)(?:\s+an?)?"
    r"|\b(?:give|rate|score|award)\s+(?:it|this(?:\s+(?:response|answer|reply))?)"
    r"(?:\s+as)?(?:\s+an?)?"
    r"|\b(?:scores?|scored|rated)(?:\s+an?)?)\s*+" + _SCORE_VALUE,
    re.IGNORECASE,
)
_RATIO = re.compile(r"(?P<value>-?\d+(?:\.\d+)?)\s*(?:/|out of)\s*(?P<scale>10|100|5)\b")
_SCORE_PATTERNS = (_SCORE_LINE, _SCORE_PHRASE, _RATIO)


def judge_messages(task: Task, output: str) -> list[dict[str, str]]:
    response = output
    if len(response) > MAX_JUDGED_CHARS:
        response = response[:MAX_JUDGED_CHARS] + "\n[... response truncated ...]"
    parts = [
        "Score the RESPONSE to the TASK below.",
        f"Rubric: {task.rubric or DEFAULT_RUBRIC}",
        f"TASK:\n<<<\n{task.prompt_text()}\n>>>",
    ]
    if task.answer:
        parts.append(f"REFERENCE ANSWER:\n<<<\n{task.answer}\n>>>")
    parts.append(f"RESPONSE:\n<<<\n{response}\n>>>")
    parts.append(
        "Think briefly if you need to, then end with one line of the form `SCORE: N`, "
        "where N is an integer from 0 (wrong or useless) to 10 (fully correct and complete)."
    )
    return [
        {"role": "system", "content": JUDGE_SYSTEM},
        {"role": "user", "content": "\n\n".join(parts)},
    ]


def parse_judge_score(reply: str) -> float | None:
    """A 0-1 score from the judge's reply, or None when none can be read.

    Read on a 0-10 scale; an explicit scale ("4/5", "80/100") is honoured, and a decimal
    between 0 and 1 ("SCORE: 0.8") is read on a 0-1 scale. The last "SCORE: 7" (or
    "Rating: 7", "Overall: 7/10") counts, else the last score in words ("a score of 7",
    "I'd give it a 7"), else a ratio ("7/10", "7 out of 10") when all the reply's ratios
    agree ("6/10 rather than 10/10" is no verdict), else a reply that is only a number.
    """
    text = unicodedata.normalize("NFKC", reply or "")
    for pattern in (_SCORE_LINE, _SCORE_PHRASE):
        matches = list(pattern.finditer(text))
        if matches:
            return _score(matches[-1].group("value"), matches[-1].group("scale"))
    ratios = {_score(m.group("value"), m.group("scale")) for m in _RATIO.finditer(text)}
    if ratios:
        return ratios.pop() if len(ratios) == 1 else None
    if re.fullmatch(r"\s*\**\s*-?\d+(?:\.\d+)?\s*\**\s*\.?\s*", text):
        return _score(text.strip(" *.\n\t"), None)
    return None


def _score(value_text: str, scale_text: str | None) -> float | None:
    """value / scale in [0, 1] (scale 10 unless given, or 1 for "0.8"), or None outside it."""
    value = float(value_text)
    if scale_text is not None:
        scale = float(scale_text)
    elif "." in value_text and 0 < value < 1:
        scale = 1.0
    else:
        scale = 10.0
    if scale <= 0 or not 0 <= value <= scale:
        return None
    return value / scale


def without_echoed_scores(reply: str, output: str) -> str:
    """The judge's reply without the judged response's own score-like lines. A judge that
    echoes the response (small models do) would otherwise be read as giving the score the
    response wrote for itself ("SCORE: 10" at its end), by accident or on purpose."""
    text = unicodedata.normalize("NFKC", reply or "")
    response = unicodedata.normalize("NFKC", output[:MAX_JUDGED_CHARS])
    echoed = {
        line.strip()
        for line in response.splitlines()
        if any(pattern.search(line) for pattern in _SCORE_PATTERNS)
    }
    kept = [
        line
        for line in text.splitlines()
        if line.strip() not in echoed
        and not any(len(copy) >= MIN_ECHO_CHARS and copy in line for copy in echoed)
    ]
    return "\n".join(kept)


async def grade_judge(task: Task, output: str, judge: Judge | None) -> Grade:
    if judge is None:
        return cannot_grade("the judge grader needs a judge (a worker of the pool); none given")
    if not output.strip():  # a lenient judge scored nothing at all as half right
        return wrong("empty output")
    try:
        reply: object = await judge(judge_messages(task, output))  # a user's judge: any type
    except Exception as error:
        return cannot_grade(f"the judge failed: {type(error).__name__}: {error}")
    if not isinstance(reply, str):
        return cannot_grade(f"the judge replied {type(reply).__name__}, not text")
    score = parse_judge_score(without_echoed_scores(reply, output))
    if score is None:
        return cannot_grade(
            f"could not read a score in the judge's reply (it should end with a line "
            f"`SCORE: N`, N from 0 to 10): {reply.strip()[-120:]!r}; judge with a model that "
            "follows this format (a stronger --judge worker)"
        )
    return Grade(score=score, detail=f"judge score {score:.2f}: {reply.strip()[-160:]}")


SIMPLE_GRADERS: dict[str, Callable[[Task, str], Grade]] = {
    "number": grade_number,
    "choice": grade_choice,
    "exact": grade_exact,
    "regex": grade_regex,
}
