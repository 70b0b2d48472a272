"""What the graders share: the Grade they return, and the text helpers more than one of them
reads an answer with (self-corrections and retractions, LaTeX, boxed answers, line ends).
"""

from __future__ import annotations

import re

from pydantic import BaseModel


class Grade(BaseModel):
    score: float | None
    error: str | None = None
    detail: str = ""


def wrong(detail: str) -> Grade:
    return Grade(score=0.0, detail=detail)


def cannot_grade(error: str) -> Grade:
    return Grade(score=None, error=error)


# the reply saying its earlier answer was wrong: "That's wrong", "that seems wrong", "I
# made a mistake", "I miscounted"
_SAID_WRONG = (
    r"(?:(?:that['’]s|that\s+is|this\s+is|I\s+was|(?:that|this)\s+(?:seems|looks))\s+"
    r"(?:wrong|incorrect)|I\s+(?:made|make)\s+an?\s+(?:mistake|error)"
    r"|I\s+(?:miscounted|miscalculated))"
)
# a self-correction: "Wait, no: it is 14", "Sorry, I meant 14", "Actually, it's (C)", "That's
# wrong; it is 14"
SELF_CORRECTION = (
    rf"\b(?:wait|no|sorry|oops|actually|{_SAID_WRONG})\b[\s,:;!.-]{{0,3}}"
    r"(?:(?:no|sorry)\b[\s,:;!.-]{0,3})?"
    r"(?:it(?:'s|’s| is| should be| must be)|(?:that )?should be|make that|I meant?)\b"
    r"(?!\s*not\b)"
)
# "the answer is" in Chinese: "答案是 42", "正确答案是B", "最终答案：42"
CJK_ANSWER_MARKER = r"答案\s*(?:应该?是|是|为|為|:|：)"
# a bare correction of a number starting a clause, "Hmm, actually 126.", "Wait, 126.", "I
# mean 126." (not "There are actually 5 boxes."): the number grader's only, and only when
# the number is the whole of its sentence (see `_CORRECTED_NUMBER_END`); to the regex
# grader, "Actually 3 numbers are listed." is a remark
BARE_CORRECTION_LEAD = (
    r"(?:(?<![\w'’] )|(?<=hmm )|(?<=oh )|(?<=ah )|(?<=\bno ))"
    r"\b(?:actually\b|wait\b\s*[,:;!.—–-]|I\s+mean\b)[\s,:;!.—–-]{0,3}"
    r"(?:(?:no|sorry)\b[\s,:;!.—–-]{0,3})?"
)
# a retraction leading a bare correction: "The answer is A. Oops, B.", "A. Sorry, B.", "That
# seems wrong. B.", "A. Hmm, B." (the choice grader's, and only when the letter ends its
# sentence: "Oops, B is wrong too." and "Hmm, B is wrong too." correct nothing; the number
# grader's too, as a bare correction's lead: "125. Hmm, 126.")
RETRACTION_LEAD = (
    rf"\b(?:oops|sorry|hm+|{_SAID_WRONG})\b[\s,:;!.—–-]{{0,3}}"
    r"(?:(?:no|sorry)\b[\s,:;!.—–-]{0,3})?"
)


def no_after(answer: str) -> str:
    """A sentence opening "No," right after an answer's sentence end, as a bare correction's
    lead: "125. No, 126.", "B. No, C." (`answer` matches the answer's last character; not in
    the shared RETRACTION, where "No, ..." mostly starts an explanation)."""
    return rf"(?:(?<={answer}[.!]\s)|(?<={answer}[.!]\s\s))no,"


# The reply says its earlier answer was wrong: "3\n\nWait, actually 5.", "The answer is 3.
# Oops, I miscounted: there are 5.", "[1, 2, 3]? No: [1, 3, 2].", "The answer is 5000. No:
# 500." (not a mere check: "Wait, let me verify: 1 + 2 = 3")
RETRACTION = re.compile(
    r"(?<=\?)\s*no(?=[,:;.!—–-])"
    r"|(?:(?<=[.!\n])|(?<=[.!]\s)|(?<=[.!]\s\s))no(?=\s*[:—–])"  # not \s* after: a run of lines
    rf"|\b(?:no,?\s+wait|wait,?\s+(?:no|actually)|oops|{_SAID_WRONG})\b",
    re.IGNORECASE,
)


def clip(text: str, size: int = 40) -> str:
    return text if len(text) <= size else text[:size] + "..."


_MIXED_NUMBER = re.compile(
    r"(?<![\d.,/])(?P<whole>\d{1,9})\s*\\[dt]?frac\{(?P<over>\d{1,9})\}\{(?P<under>\d{1,9})\}"
)


def latex_fractions(text: str) -> str:
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


def unlatex(text: str) -> str:
    text = latex_fractions(text).replace("\\times", "×").replace("\\cdot", "·")
    return re.sub(r"\\[a-zA-Z]+|[{}]", " ", text.replace("\\%", "%").replace("\\$", "$"))


REJECTED = re.compile(
    r"^\s*(?:(?:is|was|seems|looks)\s+(?:not|wrong|incorrect|false)|wrong|incorrect|false)\b"
    r"|^[\s*_)]*\?\s*no(?=[,:;.!—–-])"  # "The answer is B? No: C." asks, then takes B back
    r"|^[\s*_)]*[.!]\s*no(?=\s*[:—–])",  # "The answer is B. No: C."
    re.IGNORECASE,
)


def end_of_line(text: str, start: int) -> int:
    end = text.find("\n", start)
    return len(text) if end < 0 else end


# Reasoning models' thinking in the answer text: `<think>...</think>` (DeepSeek-R1 distills,
# Qwen3, QwQ), only the `</think>` when the chat template opened the block, or gpt-oss's
# harmony channels when llama.cpp leaves them in (`<|channel|>analysis<|message|>...`, then
# `<|channel|>final<|message|>` before the answer).
_THINK_OPEN = re.compile(r"\A\s*<think(?:ing)?>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</think(?:ing)?>", re.IGNORECASE)
_HARMONY_ANALYSIS = re.compile(r"\A\s*(?:<\|start\|>assistant)?<\|channel\|>analysis\b")
_HARMONY_FINAL = "<|channel|>final<|message|>"
CUT_IN_THINKING = (
    "no answer: the output stopped inside its thinking (a `<think>` with no `</think>`), "
    "most often at the worker's token limit"
)


def without_thinking(output: str) -> str | None:
    """A worker's answer without the thinking a reasoning model put before it (a draft answer
    there is not the answer), or None when the output stopped inside its thinking: it has no
    answer. Every grader reads this, and the judge sees only it."""
    final = output.rfind(_HARMONY_FINAL)
    if final >= 0:
        return output[final + len(_HARMONY_FINAL) :].removesuffix("<|return|>").strip()
    if _HARMONY_ANALYSIS.match(output):
        return None
    close = _THINK_CLOSE.search(output)
    if close is not None:
        return output[close.end() :].strip()
    return None if _THINK_OPEN.match(output) else output
