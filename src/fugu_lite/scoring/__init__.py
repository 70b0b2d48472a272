"""Graders: score a worker's output to a task in [0, 1].

`await grade(task, output, judge)` dispatches on `task.grader`.

One module a grader: number.py (with number_values.py, how a number's text is read and
compared, number_units.py, quantities in units and amounts at rates, and number_closing.py,
the explanation closing an output after its answer: working, a reason, a check), choice.py,
exact.py (exact and regex), code.py and judge.py; common.py holds the Grade they return
and the text helpers they share, asked.py what a question asks an answer to be.
The package re-exports the grading API used outside it: `grade`, `Grade`, `Judge`.

A score of 0.0 means the answer is wrong or missing (`detail` says why). When we cannot
grade (no reference answer, judge down or unparseable, sandbox broken), `score` is None and
`error` says why: never a silent 0.
"""

from __future__ import annotations

from collections.abc import Callable

from ..sandbox import SandboxLimits
from ..tasks import Task
from .choice import grade_choice
from .code import grade_code
from .common import CUT_IN_THINKING, Grade, cannot_grade, without_thinking, wrong
from .exact import grade_exact, grade_regex
from .judge import Judge, grade_judge
from .number import grade_number

__all__ = ["Grade", "Judge", "grade"]


async def grade(
    task: Task,
    output: object,
    judge: Judge | None = None,
    *,
    sandbox: SandboxLimits | None = None,
) -> Grade:
    """Score `output` (a worker's reply to `task`) with the task's grader (anything but
    text is recorded as ungradable). The graders read the answer after a reasoning model's
    thinking (`without_thinking`); an output cut inside its thinking has none and scores 0."""
    if not isinstance(output, str):
        return cannot_grade(f"expected the worker's output as text, got {type(output).__name__}")
    answer = without_thinking(output)
    if answer is None:
        return wrong(CUT_IN_THINKING)
    try:
        if task.grader == "code":
            return await grade_code(task, answer, sandbox)
        if task.grader == "judge":
            return await grade_judge(task, answer, judge)
        grader = SIMPLE_GRADERS.get(task.grader)
        if grader is None:
            return cannot_grade(f"unknown grader {task.grader!r}")
        return grader(task, answer.translate(_INVISIBLE))
    except Exception as error:  # a bug of ours must not look like a wrong answer
        return cannot_grade(f"the {task.grader} grader failed: {type(error).__name__}: {error}")


# characters that show nothing and join nothing (a zero-width space, a word joiner, a byte
# order mark), which a reply may carry: "B\u200b" is the answer B, "1\u200b4" the number 14
_INVISIBLE = dict.fromkeys(map(ord, "\u200b\u2060\ufeff"))

SIMPLE_GRADERS: dict[str, Callable[[Task, str], Grade]] = {
    "number": grade_number,
    "choice": grade_choice,
    "exact": grade_exact,
    "regex": grade_regex,
}
