"""The judge grader: an LLM judge (an async callable messages -> reply) scores 0-10 with the task's
rubric ("SCORE: 7" or '{"score": 7}', else "a score of 7", else agreeing ratios "7/10"); the score
is divided by 10. An empty (or whitespace) output scores 0 without asking the judge.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Awaitable, Callable

from ..tasks import Task
from .common import Grade, cannot_grade, without_thinking, wrong

Judge = Callable[[list[dict[str, str]]], Awaitable[str]]


DEFAULT_RUBRIC = (
    "Is the response correct, complete, and does it do what the task asks? "
    "Penalise wrong facts, wrong results and ignored instructions."
)
JUDGE_SYSTEM = "You are a strict, fair grader. You score one response to one task."
MAX_JUDGED_CHARS = 6000
# A response line this long found inside a reply line is an echo; a shorter one ("7/10")
# only when it is the whole line, since the judge's own verdict may hold the same text.
MIN_ECHO_CHARS = 20
# also in brackets, as the form "SCORE: N" may be read: "SCORE: [7]", "Score: [7/10]"; a
# number in exponent notation or with a decimal comma ("1e1", "7,5") is `unread`, not 1 or 7
_SCORE_VALUE = (
    r"[*_`\"']*+\s*+(?P<bracket>\[\s*)?(?P<value>-?\d+(?:\.\d+)?)"
    r"(?P<unread>[eE][+-]?\d+|,\d+)?(?![\d%])\s*[*_`]*"
    r"(?:\s*(?:/|out of)\s*(?P<scale>\d+))?(?(bracket)\s*\])"
)
# The form asked for, "SCORE: 7" (also "**Score**: 7", "Rating (0-10): 8", "Overall: 7/10",
# "Final score - 7", a JSON reply's '{"score": 7}'; a dash with a space after it: "Score -1"
# is no score of 1)
_SCORE_LINE = re.compile(
    r"\b(?:score|rating|grade|overall|total)[*_]*+(?:\s*\([^()\n]{0,20}\))?[*_\"']*+"
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
            if matches[-1].group("unread"):  # the verdict is there but not in a form read
                return None
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
    verdict = without_thinking(reply)  # a reasoning judge's draft score is not its verdict
    if verdict is None:
        return cannot_grade(
            "the judge's reply stopped inside its thinking, before a `SCORE: N` line; raise "
            "the judge worker's params.max_tokens (a reasoning judge thinks first) or judge "
            "with another worker (--judge)"
        )
    score = parse_judge_score(without_echoed_scores(verdict, output))
    if score is None:
        return cannot_grade(
            f"could not read a score in the judge's reply (it should end with a line "
            f"`SCORE: N`, N from 0 to 10): {reply.strip()[-120:]!r}; judge with a model that "
            "follows this format (a stronger --judge worker)"
        )
    return Grade(score=score, detail=f"judge score {score:.2f}: {reply.strip()[-160:]}")
