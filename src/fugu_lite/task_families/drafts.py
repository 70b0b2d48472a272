"""What every task family's makers share: the answer hints, the draft of one task
(prompt, answer, grader) before `generate_tasks` gives it an id, and the makers of number,
exact and multiple-choice drafts."""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from fractions import Fraction

from ..tasks import CHOICE_LETTERS, format_number

NUMBER_HINT = "Answer with just the number."
CHOICE_HINT = "Answer with the letter of the correct option."
EXACT_HINT = "Reply with only the result."
CODE_HINT = "Reply with the Python code only."

NAMES = ("Ana", "Ben", "Cleo", "Dev", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jun", "Kai", "Lea")
Draft = dict[str, object]
"""A generated task's fields before it gets its id and family."""
Maker = Callable[[random.Random], Draft]
"""Draws one task's draft from a random generator."""


def number_draft(prompt: str, value: float | Fraction | int) -> Draft:
    return {"prompt": f"{prompt} {NUMBER_HINT}", "answer": format_number(value), "grader": "number"}


def exact_draft(prompt: str, answer: str, case_sensitive: bool = False) -> Draft:
    return {
        "prompt": f"{prompt} {EXACT_HINT}",
        "answer": answer,
        "grader": "exact",
        "case_sensitive": case_sensitive,
    }


def choice_draft(rng: random.Random, question: str, correct: str, wrong: list[str]) -> Draft:
    options = [correct, *wrong]
    rng.shuffle(options)
    lines = "\n".join(f"({CHOICE_LETTERS[i]}) {option}" for i, option in enumerate(options))
    letter = CHOICE_LETTERS[options.index(correct)]
    return {"prompt": f"{question}\n{lines}\n{CHOICE_HINT}", "answer": letter, "grader": "choice"}


_OPTION_LETTER = re.compile(r"^\([A-E]\) ", re.MULTILINE)


def question_key(draft: Draft) -> str:
    """What tells two drafts' questions apart: the prompt, with a choice question's options
    in one order, since the same options lettered otherwise ask the same question."""
    prompt = str(draft["prompt"])
    if draft["grader"] != "choice":
        return prompt
    lines = prompt.split("\n")
    options = sorted(_OPTION_LETTER.sub("", line) for line in lines if _OPTION_LETTER.match(line))
    rest = [line for line in lines if not _OPTION_LETTER.match(line)]
    return "\n".join([*rest, *options])
