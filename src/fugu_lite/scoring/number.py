"""The number grader: the final number of a worker's output (GSM8K style), compared with the
task's answer (number_values.py reads a number's text and compares it, number_units.py reads
quantities in units and amounts at rates, number_closing.py finds an explanation closing the
output after its answer). Priority: the last
`\\boxed{}`, then `#### X`, then the number after the last "answer is" / "Answer:" / "answer
should be" / a JSON reply's `"answer": 42` marker (not "answer would be" after an "if": a
what-if) or self-correction ("Wait, no: it is 14", "Corrected: 14", "Hmm, actually 14.",
"Wait, 14.", "I mean 14.", "Hmm, 14.", "Sorry, 14." when the number is the whole sentence
and the last) (after its last `=` when the marker's sentence holds an equation, or alone on
the next line when the marker ends its line; not one the marker rules out, "answer is not
41", nor the first operand of arithmetic, "3 more than 9"), else a count of the pairs listed
after it ("4 ways: (1,2), (2,1), (3,0), (0,3)."), else the last number in the output (before a
closing parenthetical that shows the working: "12 apples (15 - 3).", "5 kg (5000 g /
1000).", or an explanation that restates the question's numbers: "3 when 15 is divided by
4", "15 (he had 12, got 8, gave 5)", "15 — he had 12 ...", a closing reason: "3000 grams
because 1 kilogram is 1000 grams.", or a check working back to the question's number: "4
days.\\n\\nCheck: 4 × 5 = 20 pages ✓"). Two numbers as the answer ("5 or 7", "5 and 7", "5
apples or 7 apples" (not "60 minutes or 1 hour", one answer restated in another unit), two
roots "x = 3 or x = -3" or "±3", a range or an undone subtraction "5-7", "5 minus 7" or
"5, minus 7", or another operation not done at the end, "20 + 3", "20 plus 3", "20 times
3", "12 ÷ 4"; "-2, 3" in a box),
an operation in a box or after `####` ("\\boxed{3 \\cdot 4}", "#### 20 + 3": the grader does not
compute it; it only checks "\\boxed{12 = 3 \\cdot 4}", 12, "#### 12 = 2 * 3 * 2" (a chain
of operations, '*' and '/' before '+' and '-') and "The answer is 12 = 3 * 4."; one
dividing by zero, "#### 5 = 10 / 0", is no answer, nor is "#### 5 or 1/0";
after `####` a chain's side after its last '=' is the answer, no step checked: "#### 20 + 3 +
4 = 27", "#### 20 + 3 = 23 - 2 = 21"),
times or ratios ("3:30") and a comma between digits ("1,5": a decimal comma or a
list) are ambiguous; a number ruled out ("42, not 32"), a confidence
("not 100% sure"), a precision ("to 2 decimal places"), a tolerance ("5 ± 0.1"), the
whole another number is out of ("2 left out of 4", "2 of the 4", unless a whole is asked)
or one inside a copy of a sentence of the question ("What is 9 * 11 + 27?", also cut before
its "?" where a line ends) is no answer; a
quantity in two units ("2 hours and 30 minutes") is read in the one unit of its kind the
question asks for ("to hours": 2.5), else (or when it is the question's own) is ambiguous
too; one amount at two rates ("$18 a day, or $126 a week") is read at the rate asked ("per
week"). Commas between thousands (also LaTeX's `10,\\!000`, Indian `1,50,000`, Swiss
`1'234'567`), `$`, `%`, units and a trailing period are ignored; `3/4`, `\\frac{3}{4}`
and `\\frac34` are fractions, `1\\frac{1}{2}` and `1 1/2` mixed numbers ("2 and a half"
2.5); `1e6`, `1.5 x 10^6` (`10⁶`) and `2^10` are their values, as are "2.5
million", "a million", "1.5k", "1.5K" and "$3M" (also read as written: 2.5 matches a
reference in millions), "1 in 4" (a chance: 1/4) and "negative 7" or "minus 7" (also
"negative seven") is -7;
numbers in Chinese text are read ("答案是42。", "3万" is 30000, "3万5千" 35000,
"3万2000" 32000, "5千" 5000, "3万亿" 3 * 10^12). A
symbolic answer ("4π", "4 pi", "2√3", "\\sqrt{2}") or a boxed factorial ("\\boxed{5!}") is no
number: 0. A number in words is read after a marker with no digit in its sentence ("The
answer is five."), else only when the output holds no digit. Equal when within 1e-6
relative (not two whole numbers written out: 1000001 is not 1000000), or when the output
rounds the reference at the number of decimals it shows (2 or more), e.g. 0.33 for 1/3.
"""

from __future__ import annotations

import bisect
import itertools
import math
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Literal

from ..tasks import Task, parse_number
from .common import (
    BARE_CORRECTION_LEAD,
    CJK_ANSWER_MARKER,
    RETRACTION,
    RETRACTION_LEAD,
    SELF_CORRECTION,
    Grade,
    cannot_grade,
    clip,
    end_of_line,
    last_boxed,
    no_after,
    unlatex,
    wrong,
)
from .number_closing import (
    EXPLANATION_START,
    SENTENCE_END,
    check_at_the_end,
    method_at_the_end,
    question_at_the_end,
    reason_at_the_end,
    restates_only_the_setup,
    setup_at_the_end,
    working_at_the_end,
)
from .number_units import (
    in_the_rate_asked,
    in_the_unit_asked,
    in_two_units,
    one_quantity_in_two_units,
    same_unit,
    units_asked,
)
from .number_values import (
    NUMBER,
    NUMBER_WORDS,
    PI_AFTER_A_NUMBER,
    SYMBOL_AFTER,
    WORDED_NUMBER,
    FoundNumber,
    decimals_asked,
    decimals_shown,
    find_numbers,
    found_number,
    is_number,
    is_the_whole,
    normalise_number_text,
    numbers_match,
    worded_number,
)

# "±3" (no number before it: "5 ± 0.1", "5 cm ± 0.1 cm" is a tolerance) is two answers,
# "3 or -3"
_LATEX_PLUS_OR_MINUS = re.compile(r"\\pm(?![a-zA-Z])")
_PLUS_OR_MINUS = re.compile(r"(?:±|\+/-)[^\S\n]?(?P<number>\d+(?:\.\d+)?(?:/\d+)?)(?![\d,/]|\.\d)")
# the tolerance of a measurement: "5 ± 0.1", "5 cm +/- 0.1 cm"
_TOLERANCE_BEFORE = re.compile(r"\d[^\S\n]?(?:[^\W\d_]+[^\S\n]?)?(?:±|\+/-)[^\S\n]?$")


def _both_signs(match: re.Match[str]) -> str:
    """Write "±3" as "3 or -3", unless it is a tolerance ("5 ± 0.1")."""
    start = max(0, match.start() - 20)
    if _TOLERANCE_BEFORE.search(match.string, start, match.start("number")):
        return match.group(0)
    return f"{match['number']} or -{match['number']}"


# LaTeX's division sign (unlatex blanks it, leaving "12   4" for "12 \\div 4")
_LATEX_DIVIDE = re.compile(r"\\div(?![a-zA-Z])")
# a factorial in math: "5!", "(n+1)!" (not "!=", nor LaTeX's "\\!" spacing: "10,\\!000")
_FACTORIAL = re.compile(r"[\d)]\s*!(?!=)")
# a sentence opening "No," right after a number and right before another: "125. No, 126."
_NO_AFTER_A_NUMBER = no_after(r"\d")
# "Wait, 126.", and as the choice grader reads "A. Hmm, B.": "125. Hmm, 126.", "Sorry, 126."
_BARE_CORRECTION = (
    rf"(?:{BARE_CORRECTION_LEAD}|{RETRACTION_LEAD}|{_NO_AFTER_A_NUMBER})[^\S\n]*(?=[$-]?\d|\.\d)"
)
_ANSWER_MARKER = re.compile(
    r"(?:final answer|answer is|answer[\"']?\s*[:=]|answer (?:would|should|must|will) be|result is|"
    rf"result\s*:|solution is|total is|correct(?:ion|ed)\s*:|{SELF_CORRECTION}"
    rf"|(?P<bare>{_BARE_CORRECTION})"
    rf"|{CJK_ANSWER_MARKER})",
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


def grade_number(task: Task, output: str) -> Grade:
    reference = parse_number(task.answer or "")
    if reference is None:
        return cannot_grade(f"the task's answer {task.answer!r} is not a number")
    found, source = extract_number(output, task.prompt_text())
    if found is None:
        return wrong(source or "no number in the output")
    detail = f"extracted {clip(found.text)!r} ({source}); expected {task.answer}"
    if found.symbolic:  # "4π", "2√3": the grader does not compute them
        return wrong(f"{detail}; it is part of a symbolic answer (π or a root), not a number")
    answer = (task.answer or "").strip()
    asked = decimals_asked(task.prompt_text())
    matched = numbers_match(found, reference, decimals_shown(answer), answer.endswith("%"), asked)
    return Grade(score=1.0 if matched else 0.0, detail=detail)


# a number found and where, or None and why not: what the steps of `extract_number` give
_Extracted = tuple[FoundNumber | None, str]


def extract_number(output: str, prompt: str = "") -> tuple[FoundNumber | None, str]:
    """The final answer's number and where it was found, or None and why not ("" when
    the output holds no number). `prompt`'s numbers tell a closing clause that restates the
    question ("3 when 15 is divided by 4") from the answer."""
    question = normalise_number_text(prompt)
    text = _text_to_read(output, question)
    boxed = _boxed_answer(text)
    if boxed is not None:
        return boxed
    after_hashes = _answer_after_hashes(text)
    if after_hashes is not None:
        return after_hashes
    numbers = find_numbers(text)
    stated = _answer_stated(text, numbers, units_asked(question))
    if stated is not None:
        return stated
    closing = _closing_explanation(text, numbers, question)
    worded = _worded_answer_before(text, numbers, closing)
    if worded is not None:  # "She has fourteen apples (12 + 5 - 3)."
        return worded
    numbers = _before_the_closing(numbers, closing)
    kept = _outside_the_question_echoed(text, numbers, question)
    # "What is 12 - 6?" or "... Each child then eats 2 of them." alone, "He bought 8. He ate 4."
    if (numbers and not kept) or restates_only_the_setup(text, kept, question):
        return None, "the output only restates the question, with no answer"
    said = _numbers_said(kept, question)
    if kept and not said and _is_ruled_out(kept[-1]):  # "Not 32."
        return None, f"the output rules out {clip(kept[-1].group(0).strip())!r}"
    return _the_last_number(text, said or kept, question)


def _text_to_read(output: str, question: str) -> str:
    """`output` with its numbers written plainly, a quantity in two units or at two rates in
    the one the question asks for, and "±3" written as its two answers."""
    text = in_the_rate_asked(in_the_unit_asked(normalise_number_text(output), question), question)
    return _PLUS_OR_MINUS.sub(_both_signs, _LATEX_PLUS_OR_MINUS.sub("±", text))


def _boxed_answer(text: str) -> _Extracted | None:
    """The last number in the last `\\boxed{}`, or why it gives none (a symbol, a factorial,
    two numbers); None when there is no box or no number in it."""
    boxed = last_boxed(text)
    if boxed is None:
        return None
    if SYMBOL_AFTER.search(boxed) or PI_AFTER_A_NUMBER.search(boxed):
        shown = clip(boxed.strip())
        return None, f"a symbolic answer (π or a root), not a number, in \\boxed{{}}: {shown!r}"
    if _FACTORIAL.search(boxed.rsplit("=", 1)[-1]):  # "\\boxed{5!}" is 120, not 5
        shown = clip(boxed.strip())
        return None, f"a factorial, not a number, in \\boxed{{}}: {shown!r}"
    boxed = unlatex(_LATEX_DIVIDE.sub("÷", boxed))
    no_number = _no_number_before(boxed, len(boxed))
    if no_number is not None:  # "\\boxed{5 = 10 / 0 + 1}" read 1
        return None, f"not a number (a division by zero): {clip(no_number)!r} in \\boxed{{}}"
    numbers = [number for number in find_numbers(boxed) if not _is_a_tolerance(number)]
    equation = _around_the_last_equals(boxed, numbers)
    holds = _equation_holds(boxed, equation)
    if holds:  # "\\boxed{12 = 3 \\cdot 4}", "\\boxed{8 = 12 - 4}" (no range)
        return found_number(equation[0]), "\\boxed{}, before the operation giving it"
    if holds is False:  # "\\boxed{9 = 12 - 4}": a false equation, no "12 - 4" range
        shown = clip(boxed[equation[1].start() : equation[-1].end()])
        return None, f"the answer is an expression, not a number: {shown!r} in \\boxed{{}}"
    hedge = _not_one_number(boxed, numbers[-2:], _IN_A_BOX)
    if hedge is not None:
        return None, f"{hedge} in \\boxed{{}}"
    restated = _restated_first(boxed, numbers[-2:])
    if restated is not None:  # "\\boxed{60 \\text{ minutes or } 1 \\text{ hour}}": 60
        return found_number(restated), "\\boxed{}, before its restatement in another unit"
    expression = _operation_not_done(boxed, numbers[-2:])
    if expression is None:
        return (found_number(numbers[-1]), "\\boxed{}") if numbers else None
    # "\\boxed{3 \\cdot 4}": the grader does not compute
    return None, f"the answer is an expression, not a number: {expression!r} in \\boxed{{}}"


def _divided(dividend: float, divisor: float) -> float:
    return dividend / divisor if divisor else math.nan


# what `_OPERATION_BETWEEN` joins two numbers by (words, then signs), and what it does with
# them
_OPERATIONS: dict[str, Callable[[float, float], float]] = {
    "+": operator.add,
    "plus": operator.add,
    "minus": operator.sub,
    **dict.fromkeys(["*", "×", "·", "⋅", "times", "multiplied by"], operator.mul),
    **dict.fromkeys(["÷", "divided by"], _divided),
}


def _around_the_last_equals(text: str, numbers: list[re.Match[str]]) -> list[re.Match[str]]:
    """The number right before the last '=' of `text` and the numbers after it ("x = 12 =
    3 · 4": 12, 3, 4); [] when `text` holds no '='."""
    equals = text.rfind("=")
    if equals < 0:
        return []
    before = [number for number in numbers if number.end() <= equals]
    return before[-1:] + [number for number in numbers if number.start() > equals]


def _equation_holds(text: str, numbers: list[re.Match[str]], start: int = 0) -> bool | None:
    """Whether the operations of the numbers after `numbers[0]` give it when it makes up the
    side before their '=' ("12 = 3 · 4" and "12 = 2 · 3 · 2" do, as "3 · 4 = 12" answers 12;
    "12 = 3 + 4" does not: 7 or 12?); None when `numbers` is no such equation. The side
    starts at the '=' before it, or at `start` (after an answer marker). The grader computes
    no answer, it only checks one given."""
    if len(numbers) < 3:
        return None
    result, operands = numbers[0], numbers[1:]
    side_start = max(text.rfind("=", 0, result.start()) + 1, start)
    if text[side_start : result.start()].strip() or not _EQUALS.fullmatch(
        text, result.end(), operands[0].start()
    ):
        return None
    value = _value_of_the_operations(text, operands)
    return None if value is None else numbers_match(found_number(result), value)


def _value_of_the_operations(text: str, operands: list[re.Match[str]]) -> float | None:
    """What the operations joining `operands` one after another give, '*' and '/' before
    '+' and '-' ("2 + 3 * 4": 14); None when two of them are joined by no operation, or when
    operations in words mix the two kinds: spoken, "2 plus 3 times 4" may mean 20."""
    operations = []
    for previous, operand in itertools.pairwise(operands):
        operation = _step_operation(text, previous.end(), operand.start())
        if operation is None:
            return None
        operations.append(operation)
    additive = {operation in (operator.add, operator.sub) for operation in operations}
    in_words = re.search(r"[^\W\d_]", text[operands[0].end() : operands[-1].start()])
    if len(additive) > 1 and in_words:
        return None
    terms = [found_number(operands[0]).value]
    for operation, operand in zip(operations, operands[1:], strict=True):
        value = found_number(operand).value
        if operation is operator.add or operation is operator.sub:
            terms.append(value if operation is operator.add else -value)
        else:
            terms[-1] = operation(terms[-1], value)
    return sum(terms)


def _operation_between(text: str, start: int, end: int) -> Callable[[float, float], float] | None:
    """What the operation joining two numbers side by side, `text[start:end]` between them,
    does ("3 · 4", "3 times 4"), or None when something else joins them."""
    joined_by = " ".join(text[start:end].replace(",", " ").lower().split())
    return _OPERATIONS.get(joined_by)


def _step_operation(text: str, start: int, end: int) -> Callable[[float, float], float] | None:
    """What the operation joining two numbers of a chain's step does: also a '-' between
    them, which subtracts next to an '=' ("20 - 3 = 17", "8 = 12 - 4"): no range there."""
    if text[start:end].strip() == "-":
        return operator.sub
    return _operation_between(text, start, end)


# a unit after an operand of a chain, before its '=' or operation: "20 apples + 3 apples =
# 23"; two letters or more, so that "3x = 23" is no chain, and no constant: "3 pi" is "3π"
_UNIT_IN_A_CHAIN = re.compile(r"[^\S\n]*(?!pi\b)[^\W\d_]{2,}", re.IGNORECASE)


def _chain_step(
    text: str, previous: re.Match[str], number: re.Match[str]
) -> Literal["=", "operation"] | None:
    """How two numbers side by side join as a step of a chain, also after a unit of the
    first: by an '=' or an operation (a '-' subtracts), or None when they join as none."""
    unit = _UNIT_IN_A_CHAIN.match(text, previous.end(), number.start())
    starts = [previous.end()] if unit is None else [previous.end(), unit.end()]
    for start in starts:
        if _EQUALS.fullmatch(text, start, number.start()):
            return "="
        if _step_operation(text, start, number.start()) is not None:
            return "operation"
    return None


def _last_side_of_the_chain(
    text: str, numbers: list[re.Match[str]]
) -> tuple[re.Match[str] | None, bool]:
    """The number after the last '=' of the chain of operations and '=' steps `numbers`
    starts with, when the chain ends on it ("20 + 3 = 23 - 2 = 21": 21; None when there is
    no '=' or its last side is an operation, "20 + 3 = 23 - 2"), and whether the chain holds
    an operation ("12 = 12" holds none). The side after the last '=' of a chain with an
    operation is the answer given, as lm-eval's minerva_math reads it: the grader checks no
    step ("20 + 3 = 24" answers 24). A '-' between two numbers subtracts here, not a range:
    a range is no step before an '='."""
    last_side, operated = None, False
    for previous, number in itertools.pairwise(numbers):
        step = _chain_step(text, previous, number)
        if step == "=":
            last_side = number
        elif step == "operation":
            last_side, operated = None, True
        else:
            break
    return last_side, operated


def _answer_after_hashes(text: str) -> _Extracted | None:
    """The first number after the last `####` (GSM8K's answer line), or the side after the
    last '=' of a chain of operations it starts, or why it gives none (two numbers, an
    operation not done: "#### 20 + 3", "#### 20 + 3 = 23 or 24", "#### 12 = 12 or 13"); None
    when there is no `####` or no number after it."""
    hashes = text.rfind("####")
    if hashes < 0:
        return None
    after = text[hashes + 4 :]
    numbers = find_numbers(after)
    first = numbers[0].start() if numbers else len(after)
    no_number = _no_number_before(after, first) or _division_by_zero_in_the_chain(
        after, first, len(after)
    )
    if no_number is not None:  # "#### 5 / 0 = 5", "#### 5 = 10 / 0" read 5
        return None, f"not a number (a division by zero): {clip(no_number)!r} after ####"
    last_side, operated = _last_side_of_the_chain(after, numbers)
    if operated and last_side is None and _chain_step(after, numbers[0], numbers[1]) == "=":
        return _result_before_the_chains_operation(after, numbers)
    side = 0 if last_side is None else numbers.index(last_side)
    answer = side if operated else 0  # "#### 20 + 3 = 23": 23, "#### 120 = 2 hours": 120
    # a number after the last side of any '=' hedges ("#### 12 = 12 or 13"), as one after
    # the answer does: the answer and the numbers up to that side are joined by '='
    hedge = _not_one_number(after, numbers[side : side + 2], _IN_A_BOX)
    if hedge is not None:
        return None, f"{hedge} after ####"
    alternative = _division_by_zero_joined(after, numbers[side]) if numbers else None
    if alternative is not None:  # "#### 5 or 1/0", a hedge as "#### 5 or 6" is
        return None, f"not a number (a division by zero): {clip(alternative)!r} after ####"
    expression = _operation_not_done(after, numbers[answer : answer + 2])
    if expression is not None:
        return None, f"the answer is an expression, not a number: {expression!r} after ####"
    if not numbers:
        return None
    source = "after ####" if answer == 0 else "after #### and its last '='"
    return found_number(numbers[answer]), source


def _result_before_the_chains_operation(text: str, numbers: list[re.Match[str]]) -> _Extracted:
    """The number before the '=' of a chain "12 = 3 * 4" (or "12 = 2 * 3 * 2") after `####`
    when its operations give it, as "The answer is 12 = 3 * 4." reads it; else why there is
    no answer ("12 = 3 + 4": 7 or 12?, "12 = 3 * 4 + 1", "12 = 3 * 4 or 13")."""
    last = 1  # the last operand of the operations after the '='
    while last + 1 < len(numbers) and (
        _chain_step(text, numbers[last], numbers[last + 1]) == "operation"
    ):
        last += 1
    hedge = _not_one_number(text, numbers[last : last + 2], _IN_A_BOX)
    if hedge is not None:
        return None, f"{hedge} after ####"
    # an '=' after the operations: "12 = 3 * 4 = 6 + 6"
    goes_on = (
        last + 1 < len(numbers) and _chain_step(text, numbers[last], numbers[last + 1]) is not None
    )
    if goes_on or not _equation_holds(text, numbers[: last + 1]):
        shown = clip(text[numbers[0].start() : numbers[-1 if goes_on else last].end()])
        return None, f"the answer is an expression, not a number: {shown!r} after ####"
    return found_number(numbers[0]), "after ####, before the operation giving it"


def _no_number_before(text: str, end: int) -> str | None:
    """What looks like a number but is none ("5 / 0", "0^-1": `find_numbers` drops it)
    before `end`, or None."""
    dropped = next((match for match in NUMBER.finditer(text, 0, end) if not is_number(match)), None)
    return None if dropped is None else dropped.group(0).strip()


def _division_by_zero_joined(text: str, number: re.Match[str]) -> str | None:
    """The division by zero ("1/0", which `find_numbers` drops) right after `number`, joined
    to it as another answer alone after #### would be ("5 or 1/0"), or None."""
    following = NUMBER.search(text, number.end())
    if following is None or is_number(following):
        return None
    if not _IN_A_BOX.fullmatch(text, number.end(), following.start()):
        return None  # "#### 12 (1/0 is undefined)"
    return following.group(0).strip()


# how far after an answer marker the chain it gives may start (bounded: each marker looks)
MAX_CHARS_BEFORE_THE_CHAIN = 40


def _division_by_zero_in_the_chain(text: str, start: int, end: int) -> str | None:
    """The division by zero ("10 / 0", which `find_numbers` drops) in the chain of '=' and
    operations starting at `start`, up to `end` ("5 = 10 / 0 + 1"): an equation dividing by
    zero does not hold. None when there is none, or no chain ("12 (1/0 is undefined)"). The
    chain starts at the first number-like text within MAX_CHARS_BEFORE_THE_CHAIN of `start`
    ("The answer is clearly 5 = 1 / 0 + 3.")."""
    near = NUMBER.search(text, start, min(end, start + MAX_CHARS_BEFORE_THE_CHAIN))
    first = None if near is None else NUMBER.match(text, near.start(), end)
    if first is None:
        return None
    chain = [first]
    while (following := NUMBER.search(text, chain[-1].end(), end)) is not None and _chain_step(
        text, chain[-1], following
    ):
        chain.append(following)
    dropped = next((match for match in chain if not is_number(match)), None)
    return None if len(chain) < 2 or dropped is None else dropped.group(0).strip()


# an operation's '=' before its result, on the operation's line: "20 + 3 = 23"
_EQUALS = re.compile(r"[^\S\n]*=[^\S\n]*")


def _answer_stated(text: str, numbers: list[re.Match[str]], units: set[str]) -> _Extracted | None:
    """The answer the output states: a count in words of the numbers listed after it, the
    number after the last answer marker, a count of the pairs listed after it, or a first
    line holding only a number (unless a retraction takes it back); else None."""
    counted = _count_in_words(text, numbers)
    if counted is not None:
        return counted, "a number word counting the numbers listed after it"
    retracted = _retracted_before(text, numbers)
    after_marker = _number_after_marker(text, numbers, retracted, units)
    if after_marker is not None:
        return after_marker
    counted = _count_of_tuples(text, numbers)
    if counted is not None:
        return counted, "a count of the pairs listed after it"
    first_line = _lone_first_line(text) if retracted == 0 else None
    if first_line is not None:
        return found_number(first_line), "a first line holding only a number"
    return None


def _closing_explanation(text: str, numbers: list[re.Match[str]], question: str) -> int | None:
    """Where the explanation closing the output after its answer starts (the first of the
    rules of number_closing.py that finds one, in order), or None."""
    rules: tuple[Callable[[], int | None], ...] = (
        lambda: working_at_the_end(text),
        lambda: method_at_the_end(text, numbers),
        lambda: question_at_the_end(text, numbers, question),
        lambda: reason_at_the_end(text, numbers),
        lambda: setup_at_the_end(text, numbers, question),
        lambda: check_at_the_end(text, numbers, question),
    )
    return next((start for rule in rules if (start := rule()) is not None), None)


def _worded_answer_before(
    text: str, numbers: list[re.Match[str]], closing: int | None
) -> _Extracted | None:
    """The last number in words before a closing explanation that holds every number of the
    output ("She has fourteen apples (12 + 5 - 3)."), else None."""
    if closing is None or any(number.end() <= closing for number in numbers):
        return None
    words = list(WORDED_NUMBER.finditer(text, 0, closing))
    return worded_number(words[-1]) if words else None


def _before_the_closing(numbers: list[re.Match[str]], closing: int | None) -> list[re.Match[str]]:
    """The numbers before the closing explanation (all of them when none comes before it)."""
    if closing is None:
        return numbers
    return [number for number in numbers if number.end() <= closing] or numbers


def _outside_the_question_echoed(
    text: str, numbers: list[re.Match[str]], question: str
) -> list[re.Match[str]]:
    """The numbers outside the output's copies of the question's sentences."""
    echoes = _echoes_of_the_question(text, question)
    if not echoes:
        return numbers
    return [number for number in numbers if not _inside(number.start(), echoes)]


def _numbers_said(numbers: list[re.Match[str]], question: str) -> list[re.Match[str]]:
    """The numbers the output gives as answers: no asides (one ruled out, a confidence, a
    tolerance, a precision: "to 2 decimal places") nor, unless the question asks for a whole,
    the whole another number is a part of ("2 candies left out of 4": the answer is 2)."""
    said = [number for number in numbers if not _is_aside(number)]
    if not _RATE_ASKED.search(question):  # "120 minutes, 60 minutes in each hour.": 120
        said = [number for number in said if not _is_a_conversion_rate(number)]
    if _PERCENTAGE_ASKED.search(question):  # "20 is 25% of 80." for "What percentage ...?"
        said = [number for number in said if not _is_what_a_percentage_is_of(number)] or said
    if _WHOLE_ASKED.search(question):
        return said
    return [number for number in said if not is_the_whole(number)] or said


def _the_last_number(text: str, numbers: list[re.Match[str]], question: str) -> _Extracted:
    """The answer among the numbers left: the one said to be what the question asks, a
    quantity in the unit asked, the first of two joined by "or" when the second restates it
    in another unit, else the last (or why it is none: two numbers side by side), else the
    last number in words when the output holds no digit."""
    stated = _said_to_be_the_one_asked(text, numbers, question)
    if stated is not None:  # "The largest is 12, and the smallest is -30." for "the largest"
        return found_number(stated), "the number said to be what the question asks"
    twice = one_quantity_in_two_units(text, numbers[-2:], units_asked(question))
    if twice is not None:
        return twice, "the unit asked of one quantity in two units"
    hedge = _not_one_number(text, numbers[-2:], _JOINED)
    if hedge is not None:
        return None, f"{hedge} at the end"
    restated = _restated_first(text, numbers[-2:])
    if restated is not None and _JOINED.fullmatch(text, restated.end(), numbers[-1].start()):
        # "So it takes 60 minutes or 1 hour.": 60, as "The answer is 60 minutes or 1 hour."
        return found_number(restated), "the last number, before its restatement in another unit"
    expression = _operation_not_done(text, numbers[-2:])
    if expression is not None:
        return None, f"the answer is an expression, not a number: {expression!r} at the end"
    if numbers:
        return found_number(numbers[-1]), "the last number"
    words = list(WORDED_NUMBER.finditer(text))
    if words:  # only when no digit at all: "The letter 'i' appears once."
        return worded_number(words[-1])
    return None, ""


# an operation not done, as "15-3" is one: a subtraction in words, "He spent 20 minus 3
# dollars.", "The value is 20, minus 3" (where the "minus" after a comma is read as the 3's
# sign; not after a word, "5 degrees, minus 3 at night", "from 5 to minus 3", where it is), a
# sum, product or quotient, "20 plus 3", "20 + 3", "20 times 3", "20 × 3", "20 divided by 3"
# ("x" is left out: "a 20 x 30 room" gives its sides)
_SPACE = r"[^\S\n]"  # a space that is no line break
_OPERATION_WORDS = "|".join(
    name.replace(" ", f"{_SPACE}+") for name in _OPERATIONS if name[0].isalpha() and name != "minus"
)
_OPERATION_SIGNS = re.escape("".join(name for name in _OPERATIONS if not name[0].isalpha()))
_OPERATION_BETWEEN = re.compile(
    rf",?{_SPACE}+minus{_SPACE}+"
    rf"|{_SPACE}+(?:{_OPERATION_WORDS}){_SPACE}+"
    rf"|{_SPACE}*[{_OPERATION_SIGNS}]{_SPACE}*",
    re.IGNORECASE,
)


def _operation_not_done(text: str, pair: list[re.Match[str]]) -> str | None:
    """The text of two numbers side by side that are an operation not done, or None."""
    if len(pair) < 2:
        return None
    first, second = pair
    operand = second.start("dollar") if second["dollar"] else second.start("body")
    if not _OPERATION_BETWEEN.fullmatch(text, first.end(), operand):
        return None
    return clip(text[first.start() : second.end()])


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
        spans += [m.span() for m in re.finditer(_copy_of(sentence), text, re.IGNORECASE)]
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def _copy_of(sentence: str) -> str:
    """A pattern of `sentence` written out again, also cut before its end mark where the
    output or its line ends ("Each child then eats 2 of them" for "... 2 of them.")."""
    body, mark = sentence[:-1], sentence[-1]
    if mark not in ".?!":
        body, mark = sentence, ""
    words = r"\s+".join(re.escape(word) for word in body.split())
    return rf"{words}(?:{re.escape(mark)}|(?=[^\S\n]*(?:\n|\Z)))" if mark else words


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
    if not EXPLANATION_START.search(text, word.end(), numbers[0].start()):
        return None
    gaps = [text[a.end() : b.start()] for a, b in itertools.pairwise(numbers)]
    gaps.append(text[numbers[-1].end() :])
    if not all(_LIST_GAP.fullmatch(gap) for gap in gaps):
        return None
    value = NUMBER_WORDS[word.group(1).lower()]
    return FoundNumber(value=value, text=word.group(1), decimals=0)


_TUPLE = re.compile(r"\(\s*-?\d+(?:\s*,\s*-?\d+)+\s*\)")
MAX_COUNT_GAP = 60


def _count_of_tuples(text: str, numbers: list[re.Match[str]]) -> FoundNumber | None:
    """A count followed by the pairs (or triples) it counts and nothing else: "There are 4
    ways: (1,2), (2,1), (3,0), (0,3)." answers 4 (the numbers in the pairs are no answer)."""
    tuples = list(_TUPLE.finditer(text))
    if not tuples or not _LIST_GAP.fullmatch(text, tuples[-1].end()):
        return None
    first = len(tuples) - 1
    while first > 0 and _LIST_GAP.fullmatch(text, tuples[first - 1].end(), tuples[first].start()):
        first -= 1
    listed = len(tuples) - first
    start = tuples[first].start()
    index = bisect.bisect_right([number.end() for number in numbers], start) - 1
    if index < 0 or start - numbers[index].end() > MAX_COUNT_GAP:
        return None
    count = numbers[index]
    gap = text[count.end() : start]
    if re.search(r"\d", gap) or not EXPLANATION_START.search(gap):
        return None
    found = found_number(count)
    return found if found.value == listed else None


# A number that is no answer the reply gives: one it rules out ("It's 42, not 32.", "42
# rather than 32") or its confidence ("I'm not 100% sure", "Confidence: 95%")
_RULED_OUT_BEFORE = re.compile(r"\b(?:not|rather\s+than|instead\s+of)\s+\$?$", re.IGNORECASE)
_CONFIDENCE_BEFORE = re.compile(r"\bconfidence\W{0,4}$", re.IGNORECASE)
_CONFIDENCE_AFTER = re.compile(r"\s+(?:sure|certain|confident)\b", re.IGNORECASE)
# the precision an answer is given to: "12.57 (to 2 decimal places)", "rounded to 3 s.f."
_PRECISION_BEFORE = re.compile(r"\b(?:to|at)\s+$", re.IGNORECASE)
_PRECISION_AFTER = re.compile(
    r"\s*(?:decimal\s+places?\b|decimals\b|d\.\s?p\.|dp\b|significant\s+(?:figures|digits)\b"
    r"|sig\.?\s*figs?\b|s\.\s?f\.)",
    re.IGNORECASE,
)


def _is_aside(number: re.Match[str]) -> bool:
    text, start = number.string, number.start()
    return bool(
        _is_ruled_out(number)
        or _CONFIDENCE_BEFORE.search(text[max(0, start - 20) : start])
        or (number.group("percent") is not None and _CONFIDENCE_AFTER.match(text, number.end()))
        or _is_a_tolerance(number)
        or _is_a_precision(number)
    )


# a conversion rate after a quantity, "120 minutes, 60 minutes in each hour" (the 60), when
# the question asks for no rate ("How many minutes are in each hour?")
_QUANTITY_AND_COMMA_BEFORE = re.compile(r"\d(?:[^\S\n]?[^\W\d_]+)?,[^\S\n]$")
_RATE_AFTER = re.compile(
    r"[^\S\n]?[^\W\d_]+[^\S\n]+(?:in[^\S\n]+(?:each|every|a|an|one)|per|each|every|a|an)"
    r"[^\S\n]+[^\W\d_]+[^\S\n]*(?:[.!;)\n]|$)",
    re.IGNORECASE,
)
_RATE_ASKED = re.compile(r"\b(?:in\s+(?:each|every|a|an|one)|per|each|every)\s", re.IGNORECASE)


def _is_a_conversion_rate(number: re.Match[str]) -> bool:
    start = number.start()
    return bool(
        _QUANTITY_AND_COMMA_BEFORE.search(number.string[max(0, start - 40) : start])
        and _RATE_AFTER.match(number.string, number.end())
    )


def _is_a_precision(number: re.Match[str]) -> bool:
    start = number.start()
    return bool(
        _PRECISION_BEFORE.search(number.string[max(0, start - 10) : start])
        and _PRECISION_AFTER.match(number.string, number.end())
    )


def _is_a_tolerance(number: re.Match[str]) -> bool:
    start = number.start()
    return _TOLERANCE_BEFORE.search(number.string, max(0, start - 20), start) is not None


# the question asks for a whole ("How many in total?", "out of how many?"): the whole a number
# is a part of may be the answer
_WHOLE_ASKED = re.compile(r"\b(?:total|in\s+all|altogether|out\s+of)\b", re.IGNORECASE)


# what a percentage is of, "25% of 80", when the question asks for the percentage
_PERCENT_OF_BEFORE = re.compile(r"\d\s?%[*_]*\s+of\s+(?:the\s+)?\$?$")
_PERCENTAGE_ASKED = re.compile(r"\bwhat\s+(?:percent(?:age)?|%)", re.IGNORECASE)


def _is_what_a_percentage_is_of(number: re.Match[str]) -> bool:
    start = number.start()
    return _PERCENT_OF_BEFORE.search(number.string[max(0, start - 20) : start]) is not None


def _is_ruled_out(number: re.Match[str]) -> bool:
    start = number.start()
    return _RULED_OUT_BEFORE.search(number.string[max(0, start - 20) : start]) is not None


def _retracted_before(text: str, numbers: list[re.Match[str]]) -> int:
    """Where the last retraction followed by a number starts (0 when none): answers given
    before it (a marker's, a first line's) are taken back."""
    retractions = list(RETRACTION.finditer(text))
    if not retractions or not numbers or numbers[-1].start() < retractions[-1].end():
        return 0
    return retractions[-1].start()


class _Then(Enum):
    """Where to look when a marker's number is no answer by itself and gives no reason why."""

    EARLIER_MARKER = "an earlier marker"  # "Wait, 126 is wrong.": an earlier answer stands
    USUAL_RULES = "the usual rules"  # "not 41, it is 42": they find the number after it


@dataclass(frozen=True)
class _Landmarks:
    """Where the output's numbers, sentence ends and '=' are, found once for all markers."""

    text: str
    numbers: list[re.Match[str]]
    starts: list[int]
    sentence_ends: list[int]
    equals: list[int]
    last_said: re.Match[str] | None  # the last number that is no aside ("Confidence: 90%")
    units_asked: set[str]  # "How many grams ...?": grams


def _landmarks(text: str, numbers: list[re.Match[str]], units_asked: set[str]) -> _Landmarks:
    return _Landmarks(
        text=text,
        numbers=numbers,
        starts=[number.start() for number in numbers],
        sentence_ends=[end.start() for end in SENTENCE_END.finditer(text)],
        equals=[equal.start() for equal in re.finditer("=", text)],
        last_said=next((number for number in reversed(numbers) if not _is_aside(number)), None),
        units_asked=units_asked,
    )


@dataclass(frozen=True)
class _MarkedNumber:
    """The first number in a marker's sentence (after its last '='), cut to the sentence
    ("3\\n/4" is 3), and the output's next number."""

    marker: re.Match[str]
    index: int  # in the output's numbers
    number: re.Match[str]
    sentence_end: int
    following: re.Match[str] | None

    @property
    def marker_text(self) -> str:
        return self.marker.group(0).strip()


def _number_after_marker(
    text: str, numbers: list[re.Match[str]], retracted: int, units: set[str]
) -> tuple[FoundNumber | None, str] | None:
    """The first number in the sentence of the last answer marker that has one (after the
    sentence's last '=' when it holds one), or alone on the next line when the marker ends
    its line. (None, why) when that number is no answer by itself: one of two ("5 or 7",
    "3:30"), or, with no number after it, an operand ("3 more than 9") or a number the
    marker rules out ("not 41"); a quantity in two units ("5 kg (5000 g)") is read in the
    one of `units` (those the question asks for). Markers before `retracted` are taken
    back. None when no marker has one, or when the usual rules should find the number after
    such an operand or ruled-out number. Positions are looked up, not searched again for
    each marker: an output repeating "the answer is" 100,000 times takes linear time."""
    landmarks = _landmarks(text, numbers, units)
    for marker in reversed(list(_ANSWER_MARKER.finditer(text, retracted))):
        if _is_hypothetical(marker, landmarks.sentence_ends):
            continue  # "If instead there were 5 boxes, the answer would be 20."
        read = _read_after_marker(marker, landmarks)
        if read is _Then.USUAL_RULES:
            return None
        if read is not _Then.EARLIER_MARKER:
            return read
    return None


def _read_after_marker(marker: re.Match[str], landmarks: _Landmarks) -> _Extracted | _Then:
    """The answer `marker` gives (on its line, or alone on the next when it ends its line),
    why it gives none, or where to look instead."""
    text = marker.string
    blank = _BLANK_OR_MARKUP.match(text, marker.end())
    line_start = blank.end() if blank else marker.end()
    if text.find("\n", marker.end(), line_start) >= 0:  # "Answer:\n\n18\n\nExplanation: ..."
        return _answer_on_the_next_line(marker, line_start)
    end, index = _first_number_in_sentence(landmarks, marker.end())
    no_number = _division_by_zero_in_the_chain(text, line_start, end)
    if no_number is not None:  # "The answer is 5 = 1 / 0 + 3." read 3
        after = f"after {marker.group(0).strip()!r}"
        return None, f"not a number (a division by zero): {clip(no_number)!r} {after}"
    if index is None:
        worded = _worded_answer_at(text, line_start, end, _CORRECTED_NUMBER_END)
        # "He had 3 and got 2 more. The answer is five."
        return worded if worded is not None else _Then.EARLIER_MARKER
    in_words = _answer_in_words_before(text, line_start, landmarks.numbers, index)
    if in_words is not None:
        return in_words
    number = landmarks.numbers[index]
    if number.end() > end:  # "3\n/4": only the part inside the sentence counts
        number = NUMBER.match(text, number.start(), end) or number
    if not is_number(number):
        return _Then.EARLIER_MARKER
    following = landmarks.numbers[index + 1] if index + 1 < len(landmarks.numbers) else None
    marked = _MarkedNumber(marker, index, number, end, following)
    return (
        _ruled_out_by_the_marker(marked)
        or _not_a_bare_correction(marked, landmarks)
        or _one_of_two_roots(marked, landmarks)
        or _number_or_expression(marked, landmarks)
    )


def _answer_on_the_next_line(marker: re.Match[str], line_start: int) -> _Extracted | _Then:
    """The number (or number in words) alone on the line after a marker ending its line."""
    text = marker.string
    on_next_line = _lone_number_at(text, line_start)
    if on_next_line is not None:
        return found_number(on_next_line), f"on the line after {marker.group(0).strip()!r}"
    line_end = end_of_line(text, line_start)
    worded = _worded_answer_at(text, line_start, line_end, _LONE_NUMBER_SUFFIX)
    return worded if worded is not None else _Then.EARLIER_MARKER  # "Answer:\n\nfive"


def _first_number_in_sentence(landmarks: _Landmarks, start: int) -> tuple[int, int | None]:
    """The end of the sentence starting at `start` and the index of its first number after
    its last '=' (None when it has none there)."""
    index = bisect.bisect_left(landmarks.sentence_ends, start)
    ends = landmarks.sentence_ends
    end = ends[index] if index < len(ends) else len(landmarks.text)
    index = bisect.bisect_left(landmarks.equals, end) - 1
    if index >= 0 and landmarks.equals[index] >= start:
        start = landmarks.equals[index] + 1
    index = bisect.bisect_left(landmarks.starts, start)
    if index == len(landmarks.numbers) or landmarks.starts[index] >= end:
        return end, None
    return end, index


def _answer_in_words_before(
    text: str, line_start: int, numbers: list[re.Match[str]], index: int
) -> _Extracted | _Then | None:
    """What a number in words right after the marker, before the sentence's first number
    (`numbers[index]`), makes of it: the answer when the number's parenthesis shows the
    working ("five (3 + 2)"), an operand when an operator follows ("one more than 3");
    None when there is no such word."""
    word = _worded_number_at(text, line_start)
    if word is None:
        return None
    first = numbers[index]
    if (
        not word["larger_after"]  # "one hundred (100)": the number in the parenthesis
        and _PARENTHESIS_AFTER_WORD.fullmatch(text, word.end(), first.start())
    ):
        return worded_number(word)  # "The answer is five (3 + 2).": not the working's 3
    if _OPERATOR.fullmatch(text, word.end(), first.start()):
        # "The answer is one more than 3, so 4": an operand in words, not the answer 3
        if index + 1 < len(numbers):
            return _Then.USUAL_RULES
        shown = clip(text[word.start() : first.end()])
        return None, f"the answer is an expression, not a number: {shown!r}"
    return None


def _ruled_out_by_the_marker(marked: _MarkedNumber) -> _Extracted | _Then | None:
    """ "The answer is not 41": no answer (the usual rules read a number after it, ", it is
    42"); None when the marker does not rule its number out."""
    text, number = marked.marker.string, marked.number
    negated = _NEGATED.match(text, marked.marker.end(), number.start() + 1)
    if not negated or negated.end() != number.start():
        return None
    if marked.following is not None:
        return _Then.USUAL_RULES  # ", it is 42": the usual rules find it
    return None, f"the answer rules out {clip(number.group(0).strip())!r}"


def _not_a_bare_correction(
    marked: _MarkedNumber, landmarks: _Landmarks
) -> _Extracted | _Then | None:
    """Why a bare correction ("Actually 126.") gives no answer: a clause follows its number
    (or a second number: "Actually 126 or 127."), or a later number takes its place; None
    when it gives its number (or is no bare correction)."""
    if not marked.marker["bare"]:
        return None
    text, number, following = marked.marker.string, marked.number, marked.following
    if not _CORRECTED_NUMBER_END.fullmatch(text, number.end(), marked.sentence_end):
        in_sentence = following is not None and following.start() < marked.sentence_end
        two = [number, following] if following is not None and in_sentence else [number]
        hedge = _not_one_number(text, two, _JOINED)
        if hedge is not None:  # "Actually 126 or 127.": no single answer
            return None, f"{hedge} after {marked.marker_text!r}"
        # "Wait, 126 is wrong.": no correction, an earlier answer stands
        return _Then.EARLIER_MARKER
    if not _stands_to_the_end(number, landmarks.last_said):
        # "Wait, 5 boxes. Each holds 4, so 20.": a step of the working
        return _Then.EARLIER_MARKER
    return None


def _one_of_two_roots(marked: _MarkedNumber, landmarks: _Landmarks) -> _Extracted | None:
    """Why the number after the sentence's last '=' is no answer when a number after the
    marker comes before it: one of two roots ("The answer is x = 5 or x = 7."); else None."""
    index = marked.index
    if index == 0 or landmarks.starts[index - 1] < marked.marker.end():
        return None
    previous = landmarks.numbers[index - 1]
    hedge = _not_one_number(marked.marker.string, [previous, marked.number], _JOINED)
    return None if hedge is None else (None, f"{hedge} after {marked.marker_text!r}")


def _number_or_expression(marked: _MarkedNumber, landmarks: _Landmarks) -> _Extracted | _Then:
    """The marker's number, unless the next number in its sentence makes it an operand ("3
    more than 9", "the sum of 5 and 7") or one of two answers ("5 or 7"), or the two are one
    quantity in two units ("5 kg (5000 g)": the one in the unit asked)."""
    text, marker = marked.marker.string, marked.marker
    number, following = marked.number, marked.following
    if following is None or following.start() >= marked.sentence_end:
        return found_number(number), f"after {marked.marker_text!r}"
    twice = one_quantity_in_two_units(text, [number, following], landmarks.units_asked)
    if twice is not None:  # "The answer is 5 kg (5000 g)." for "How many grams ...?"
        return twice, f"the unit asked of one quantity in two units after {marked.marker_text!r}"
    between = text[number.end() : following.start()]
    operated = _OPERATOR.fullmatch(between) is not None
    last = marked.index + 1  # the expression's last operand
    if operated or between.strip() == "-":
        equation = _equation_of_the_sentence(marked, landmarks)
        holds = _equation_holds(text, equation, marker.end())
        if holds:  # "The answer is 12 = 3 * 4.", "... 8 = 12 - 4." (no range)
            result = found_number(equation[0])
            return result, f"after {marked.marker_text!r}, before the operation"
        if holds is False:  # "The answer is 9 = 12 - 4.": a false equation, no range
            operated, last = True, marked.index + len(equation) - 2
    if operated:
        # "Actually, it's 3 more than 9": an operand, and the grader does not compute;
        # a number after the expression (", so 12") is found by the usual rules
        if last + 1 < len(landmarks.numbers):
            return _Then.USUAL_RULES
        shown = clip(text[number.start() : landmarks.numbers[last].end()])
        return None, f"the answer is an expression, not a number: {shown!r}"
    hedge = _not_one_number(text, [number, following], _JOINED)
    if hedge is not None and _OPERATION.search(text, marker.end(), number.start()):
        # "The answer is the sum of 5 and 7, which is 12": operands, not two answers
        if marked.index + 2 < len(landmarks.numbers):
            return _Then.USUAL_RULES
        shown = clip(text[marker.end() : following.end()].strip())
        return None, f"the answer is an expression, not a number: {shown!r}"
    if hedge is not None:
        return None, f"{hedge} after {marked.marker_text!r}"
    return found_number(number), f"after {marked.marker_text!r}"


def _equation_of_the_sentence(marked: _MarkedNumber, landmarks: _Landmarks) -> list[re.Match[str]]:
    """The number before the sentence's last '=' and the numbers after it to the end of the
    sentence ("The answer is 12 = 2 * 3 * 2.": 12, 2, 3, 2), for `_equation_holds` to check;
    [] when the marked number is the output's first."""
    if marked.index == 0:
        return []
    end = bisect.bisect_left(landmarks.starts, marked.sentence_end)
    return landmarks.numbers[marked.index - 1 : end]


# between a marker's number in words and a parenthesis opening on a number: "five (3 + 2)",
# "**five** apples (3 + 2)"
_PARENTHESIS_AFTER_WORD = re.compile(r"[*_]*(?:\s+[^\W\d_]+)?[\s*_]*\(\s*")
# a condition before "the answer would be" in its sentence: a what-if, not the answer
_CONDITION = re.compile(r"\b(?:if|suppose|supposing|assuming|otherwise)\b", re.IGNORECASE)


def _is_hypothetical(marker: re.Match[str], sentence_ends: list[int]) -> bool:
    """Whether `marker` is "answer would be" after a condition in its sentence ("The answer
    is 12. If instead there were 5 boxes, the answer would be 20."): the answer is 12."""
    if "would" not in marker.group(0).lower():
        return False
    index = bisect.bisect_left(sentence_ends, marker.start()) - 1
    sentence_start = sentence_ends[index] + 1 if index >= 0 else 0
    return _CONDITION.search(marker.string, sentence_start, marker.start()) is not None


def _worded_answer_at(
    text: str, position: int, end: int, rest: re.Pattern[str]
) -> tuple[FoundNumber | None, str] | None:
    """The number in words a marker gives at `position` when only `rest` (a unit) follows it
    up to `end` ("The answer is five apples."), read by `worded_number` (which declines a part
    of a longer one, "one hundred twenty-five"); None when there is none."""
    word = _worded_number_at(text, position)
    if word is None or not (word["larger_after"] or rest.fullmatch(text, word.end(), end)):
        return None
    return worded_number(word)


_SIGN_WORD = re.compile(r"(?:negative|minus)\s", re.IGNORECASE)


def _worded_number_at(text: str, position: int) -> re.Match[str] | None:
    """The number in words at `position`, after its sign ("negative seven")."""
    sign = _SIGN_WORD.match(text, position)
    return WORDED_NUMBER.match(text, sign.end() if sign else position)


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
# The second number may repeat its variable: the two roots "x = 3 or x = -3", "x_1 = 5, x_2 = 7".
# Alone in a box or after ####, an alternative may also follow a comma, a parenthesis or a
# "maybe": "#### 5, or 6", "#### 5 (or 6)", "#### 5 or maybe 6".
# A unit may follow the first number before an "or" ("5 apples or 7 apples"), not before an
# "and": "5 boxes and 20 pens" gives two quantities, not two answers.
_VARIABLE_AGAIN = r"(?:[A-Za-z](?:_\{?\w{1,3}\}?)?\s*=[\s$*]*)?"
_UNIT_BEFORE_OR = r"(?:[^\W\d_]+[\s$*]*(?=(?:,[\s$*]*)?or\b))?"
_JOINED = re.compile(
    rf"[\s$*]*(?:{_UNIT_BEFORE_OR}\b(?:or|and)\b[\s$*]*{_VARIABLE_AGAIN}|-)[\s$*]*", re.IGNORECASE
)
_IN_A_BOX = re.compile(
    rf"[\s$*]*(?:(?:{_UNIT_BEFORE_OR}(?:,[\s$*]*)?\b(?:or|and)\b|\([\s$*]*or\b)"
    r"(?:\s+(?:maybe|possibly|perhaps)\b)?"
    rf"[\s$*]*{_VARIABLE_AGAIN}|,[\s$*]*{_VARIABLE_AGAIN}|-)[\s$*]*",
    re.IGNORECASE,
)


def _not_one_number(text: str, pair: list[re.Match[str]], joiners: re.Pattern[str]) -> str | None:
    """Why a pair of numbers side by side is no single answer (joined by `joiners`, or a
    time or ratio "3:30"), or None (also when `pair` holds a single number)."""
    if len(pair) < 2 or pair[1].start() - pair[0].end() > 20:
        return None
    first, second = pair
    between = text[first.end() : second.start()]
    shown = clip(text[first.start() : second.end()])
    if between == ":":
        return f"a time or ratio, not a number: {shown!r}"
    if between == ",":  # "1,5": a decimal comma (1.5) or a list (1 and 5), never 1
        return f"a decimal comma or a list, not one number: {shown!r}"
    if in_two_units(text, first, second):
        return f"a quantity in two units, not one number: {shown!r}"
    if (
        joiners.fullmatch(between)
        and not _same_value(first, second)  # "1/4 or 25%"
        and not _restated_in_another_unit(text, between, second)
    ):
        return f"two numbers, not one answer: {shown!r}"
    return None


# A unit after each of two numbers joined by "or": "60 minutes or 1 hour", "12 eggs, or 1
# dozen". A word that starts a clause names no unit, nor does a comparative: "5 apples or 6
# in all" and "5 apples or 7 more" are hedges.
_UNIT_THEN_OR = re.compile(r"[\s$*]*(?P<unit>[^\W\d_]+)[\s$*]*(?:,[\s$*]*)?or\b", re.IGNORECASE)
_UNIT_AFTER_SECOND = re.compile(
    r"[\s$*]*(?!(?:and|or|in|if|of|to|for|is|are|at|by|more|less|fewer)\b)(?P<unit>[^\W\d_]+)",
    re.IGNORECASE,
)


def _restated_in_another_unit(text: str, between: str, second: re.Match[str]) -> bool:
    """Whether the second of two numbers joined by "or" restates the first in another unit
    ("60 minutes or 1 hour": the answer is the first), not a hedge in the same unit or none
    ("5 apples or 7 apples", "18 eggs or 19"). Units are words: "5 apples or 7 oranges" is
    read as a restatement too."""
    unit = _UNIT_THEN_OR.match(between)
    other_unit = _UNIT_AFTER_SECOND.match(text, second.end())
    if unit is None or other_unit is None:
        return False
    return not same_unit(unit["unit"], other_unit["unit"])


def _restated_first(text: str, pair: list[re.Match[str]]) -> re.Match[str] | None:
    """The first of two numbers side by side when the second restates it in another unit
    ("60 minutes or 1 hour", "12 eggs, or about 1 dozen": 60, 12), else None."""
    if len(pair) < 2:
        return None
    first, second = pair
    between = text[first.end() : second.start()]
    return first if _restated_in_another_unit(text, between, second) else None


def _same_value(first: re.Match[str], second: re.Match[str]) -> bool:
    one, other = found_number(first), found_number(second)
    return numbers_match(one, other.value, other.decimals) or numbers_match(
        other, one.value, one.decimals
    )


_LONE_NUMBER_PREFIX = re.compile(r"[\s*_`>#]*")
_LONE_NUMBER_SUFFIX = re.compile(r"(?:\s+[^\W\d]+){0,2}(?:[\s*_`.!$]|\\[\])])*")  # "\\[ 260 \\]"


def _lone_number_at(text: str, position: int) -> re.Match[str] | None:
    """The number at `position` when the rest of its line is only a unit or two."""
    line_end = text.find("\n", position)
    line_end = len(text) if line_end < 0 else line_end
    number = NUMBER.match(text, position, line_end)
    if number is None or not is_number(number):
        return None
    return number if _LONE_NUMBER_SUFFIX.fullmatch(text, number.end(), line_end) else None


def _lone_first_line(text: str) -> re.Match[str] | None:
    """The number of a first line that holds only it (and a unit or two) when more lines
    follow: "5\n\nExplanation: 2 + 3 = 5, checked in 1 step." answers 5, not 1."""
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) < 2:
        return None
    numbers = find_numbers(lines[0])
    if len(numbers) != 1:
        return None
    number = numbers[0]
    lone = _LONE_NUMBER_PREFIX.fullmatch(lines[0][: number.start()]) and (
        _LONE_NUMBER_SUFFIX.fullmatch(lines[0][number.end() :])
    )
    return number if lone else None
