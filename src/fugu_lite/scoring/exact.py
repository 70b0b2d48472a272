"""The exact and regex graders: a worker's answer as text.

exact: normalised string equality (whitespace, surrounding quotes / markdown / trailing
punctuation, a leading bullet, quote or heading "- tac", "> tac", "### tac", closing
emoji "tac ✅", LaTeX text "$\\text{tac}$", a closing note "tac (reversed)"
unless it may retract the answer, an "Answer:" prefix; case too
unless `task.case_sensitive`). The whole output,
the text after the last answer marker ("Answer:", "The answer is", "Output:", a label
without its colon starting its line, "**Final answer** tac", or a self-correction "Wait,
no, it's tac", "Wait, actually tac.") or the last line's last "is" / "gives us" / "get" / "it's"
(also without a "the letter" / "the word" naming it: "... is the letter a"; also before
a closing aside: "It is tac, which reads cat backwards.", "It is tac, the same letters in
reverse."),
the text before "is the answer" ("tac is the reversed word."), the subject of the last
line's clause saying it is what the question asks ("Bob is taller" for "Who is taller?"), the last
`\\boxed{}`, the text in `<answer>` tags, and the first and last non-empty lines, the
last quoted text, the last fenced block and the text after the last line's label or
arrow or "=" ("Reversed: tac", "c-a-t → tac", "S + C + D = SCD") are tried; when the
output states an answer (a marker, a box, tags), only that answer and the lines after it
count: "The answer is cta, not 'tac'" is cta. When the question asks for letters or
words in an order ("Sort the letters of ..."), a candidate listing them one by one is
also read joined: "e, i, l, r, s, v" is eilrsv, "cherry, banana, (and) apple" cherry banana
apple. A word spelled out with hyphens is the word: "t-o-b-o-r" is tobor.

regex: `re.search` of `task.answer` in the output with runs of whitespace collapsed
(ignoring case unless `task.case_sensitive`) in its first and last 20,000 characters;
anchor the pattern with ^...$ for a full match. When the output gives a final answer
("The answer is", "Answer:", "Final answer", "The answer should be", a self-correction, a
bare "Actually [1, 3, 2]." whose list is its whole sentence), only the answer after the
last one is searched: the rest of its line (or the next line)
up to the end of its sentence, without markdown around it or a closing period, so a
right list written before a different final one, or named by the explanation after it,
does not count; a marker followed by nothing or by a remark ("The answer is correct.")
is no final answer. "3, 8, 15, and 22" is also searched as "3, 8, 15, 22". An empty
output scores 0.
"""

from __future__ import annotations

import json
import re
import unicodedata

from ..tasks import Task
from .asked import CLAUSES, SAID_TO_BE, Predicate, is_asked, predicates_asked
from .code import FENCE
from .common import (
    BARE_CORRECTION_LEAD,
    CJK_ANSWER_MARKER,
    REJECTED,
    RETRACTION,
    SELF_CORRECTION,
    Grade,
    cannot_grade,
    clip,
    end_of_line,
    last_boxed,
    wrong,
)

_PREFIX = re.compile(
    r"^(?:(?:the\s+)?(?:final\s+)?(?:answer|result|output)\s*(?:is|:|=)|final answer\s*:?)\s*",
    re.IGNORECASE,
)
# "Final answer tac", "**Final answer** tac", "**Answer** — tac", "### Final answer\ntac": an
# answer label starting its line without its colon (not "Final answer is tac" nor "Final
# answer: tac", which the other markers read, nor "tac is my final answer.")
_LABEL_WITHOUT_COLON = (
    r"(?:^|(?<=\n))[ \t#>]*(?:[*_]+(?:final\s+)?answer[*_]+|final\s+answer\b[*_]*)"
    r"(?![ \t]*(?:(?:is|was|would|should|must|will)\b|[:=]))(?:[ \t]*[—–-](?=[ \t]))?"
)
_MARKER_SEGMENT = re.compile(
    rf"(?:(?:answer|result)\s*(?:is|:|=)|{_LABEL_WITHOUT_COLON})\s*(?P<rest>[^\n]*)",
    re.IGNORECASE,
)
_ANSWER_TAG = re.compile(r"<answer>([^<]*)</answer>", re.IGNORECASE)
WRAPPERS = "\"'`*_“”‘’「」«» \t"
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


def normalise(text: str, case_sensitive: bool = False) -> str:
    text = unicodedata.normalize("NFKC", text).strip()
    text = _LATEX_TEXT.sub(r"\1", text.rstrip(_CLOSING_SYMBOLS + _WHITESPACE))
    text = _PREFIX.sub("", _BULLET.sub("", text))
    # one strip each side (stripping wrappers, then dots, then spaces in turn until nothing
    # changes took a pass per character on ". . . . ." a million times over)
    text = text.lstrip(WRAPPERS + _WHITESPACE).rstrip(WRAPPERS + _WHITESPACE + ".!,;:。")
    text = re.sub(r"\s+", " ", text)
    return text if case_sensitive else text.casefold()


# what states the answer after it: "... is t", "... gives us tac", "you get tac", "it reads
# tac", "It's tac."
_VERDICT_VERB = re.compile(
    r"(?:\b(?:is|are|be|gives(?:\s+us)?|gets?|becomes|yields|reads)\b"
    r"|\b(?:it|that|this|here)['’]s)\s*:?\s+",
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
# an answer ruled out and then given: "The answer is not act, it is tac." -> "tac." (a
# comma after the word, "rather, tac", is no part of it)
_NOT_THIS_BUT = re.compile(
    r"not\b[^\n]*?(?:\bbut\b|[,;.]\s*(?:it|that)(?:\s+is|['’]s)\b|[,;.]\s*rather\b)\s*[:,]?\s*"
    r"(?P<answer>[^\n]+)",
    re.IGNORECASE,
)


# an aside closing the last line after the answer it states: "The reversed word is olleh,
# which reads hello backwards.", "..., since we read it from the end", "It is olleh, not
# hello.", "..., which is not hello.", and a noun phrase after it: "Reversed, it becomes
# olleh, the same letters in reverse." (not one that may take the answer back: ", which is
# wrong; it is tca"; nor a clause: "It is olleh, the answer is ollhe.")
_CLOSING_ASIDE = re.compile(
    r",\s+(?:which|since|because|as|not|(?P<appositive>the|an?))\b(?P<aside>[^\n]*)$",
    re.IGNORECASE,
)
_TAKEN_BACK = re.compile(r"\b(?:wrong|mistake|incorrect|typo|oops|error)\b", re.IGNORECASE)
# a "not" judging the answer stated: "which is not right", "which doesn't look right", "which
# I'm not sure of" (not one saying what else it is not: "which is not hello")
_NOT = re.compile(r"\bnot\b|n['’]t\b", re.IGNORECASE)
_NOT_SO = re.compile(
    r"(?:\bnot|n['’]t)\s+(?:\w+\s+){0,2}?(?:right|true|correct|valid|ok|okay|good|sure|it|so|"
    r"what|possible|accurate|the\s+answer|the\s+one)\b",
    re.IGNORECASE,
)


def _takes_back(aside: str) -> bool:
    """Whether a closing aside may take back the answer before it: a retracting word (no,
    wait, or, rather, ...), or a "not" judging that answer; a "not" saying what else it is
    not ("which is not hello", "since it is not a palindrome") takes nothing back."""
    return bool(_NOT_SO.search(aside) or _RETRACTING_NOTE.search(_NOT.sub(" ", aside)))


def _verb_said(verdict: re.Match[str]) -> str:
    """The verdict verb as a grade's detail names it: "is", "gives us", "get", "it's"."""
    return " ".join(verdict.group(0).split()).rstrip(" :")


def _said_before_a_closing_aside(line: str) -> tuple[str, str] | None:
    """The verdict verb and the text after it before a closing aside of `line`, or None."""
    aside = _CLOSING_ASIDE.search(line)
    if aside is None or _takes_back(aside["aside"]) or _TAKEN_BACK.search(line):
        return None
    if aside["appositive"] and (
        _VERDICT_VERB.search(aside["aside"]) or _LABEL_END.search(aside["aside"])
    ):
        return None  # "It is olleh, the answer is ollhe.", "..., the fix: ollhe": another
    verdict = list(_VERDICT_VERB.finditer(line, 0, aside.start()))
    if not verdict:
        return None
    return _verb_said(verdict[-1]), line[verdict[-1].end() : aside.start()]


# the candidates after the last line's verdict verb are named by that verb: "the text after
# the last 'get'" (the stated answer's later lines copy the one not before an aside)
_AFTER_THE_VERB = "the text after the last "
_BEFORE_AN_ASIDE = " before a closing aside"


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
        verb = _verb_said(verdict[-1])
        said = last_line[verdict[-1].end() :]
        candidates[f"{_AFTER_THE_VERB}'{verb}'"] = said
        named = _without_its_kind(said)
        if named is not None:  # "The last letter of the word banana is the letter a."
            candidates[f"the letter or word named after the last '{verb}'"] = named
    before_aside = _said_before_a_closing_aside(last_line)
    if before_aside is not None:  # "The reversed word is olleh, which reads hello backwards."
        verb, said = before_aside
        candidates[f"{_AFTER_THE_VERB}'{verb}'{_BEFORE_AN_ASIDE}"] = said
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
        if not REJECTED.match(text[match.end() : match.end() + 40])
    ]


# "The answer is: X", "**Answer**: X", "Output: X" (the exact grader's own markers: the
# choice grader reads option texts through `answer_candidates`)
# and a self-correction ("tca\n\nWait, no, it's tac.": the correction is the answer)
# and a bare one giving a single word as its whole sentence ("tac\n\nWait, actually tca.",
# "No wait, tca."; not "Actually, this was easy.")
_EXACT_MARKER = re.compile(
    rf"(?:(?:answer|result|output)[*_\"']*\s*(?:is\b|[:=])|{_LABEL_WITHOUT_COLON}"
    rf"|{CJK_ANSWER_MARKER}|{SELF_CORRECTION}"
    rf"|(?:{BARE_CORRECTION_LEAD}|\bno,?\s+wait\b[\s,:;!.—–-]{{0,3}})"
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
    stated = max(
        markers[-1].start() if markers else -1,
        max(output.rfind("\\boxed{"), output.rfind("\\fbox{")),
        tags[-1].start() if tags else -1,
    )
    if stated < 0:
        return _candidates_of_an_unstated_answer(output, prompt)
    candidates = {"the whole output": output}
    if markers:
        candidates |= _candidates_after_the_marker(output, markers[-1])
    boxed = last_boxed(output)
    if boxed is not None:
        candidates["the boxed text"] = re.sub(r"\\(?:text|mathrm)\{([^{}]*)\}", r"\1", boxed)
    if tags:
        candidates["the text in <answer> tags"] = tags[-1].group(1)
    return candidates | _candidates_after_the_stated_answer(output, stated)


def _candidates_of_an_unstated_answer(output: str, prompt: str) -> dict[str, str]:
    """The candidates of an output with no explicit answer: `answer_candidates` but a last
    quoted text the question quotes, then the last fenced block, the text after the last
    line's label, the line after the last label line, and what the last line says is what
    the question asks."""
    candidates = answer_candidates(output)
    asked = {normalise(text) for text in _quoted_texts(prompt)}
    if normalise(candidates.get("the last quoted text", "")) in asked:
        del candidates["the last quoted text"]
    fenced = list(FENCE.finditer(output))
    if fenced:  # "```text\ntac\n```"
        candidates["the fenced text"] = fenced[-1].group("code")
    lines = output.strip().splitlines()
    labelled = _after_label(lines[-1]) if lines else None
    if labelled is not None:
        candidates["the text after the last line's label"] = labelled
    filled = [line for line in lines if line.strip()]
    after_label_line = _line_after_the_last_label_line(filled)
    if after_label_line is not None:
        candidates["the line after the last label line"] = after_label_line
    subject = _said_to_be_asked(filled[-1] if filled else "", predicates_asked(prompt))
    if subject is not None:  # "Between Ann and Bob, Bob is taller." for "Who is taller?"
        candidates["what the last line says is what the question asks"] = subject
    return candidates


def _line_after_the_last_label_line(filled: list[str]) -> str | None:
    """The line after the last line ending in a label, when no later line holds a label:
    "The reversed word is:\n\ntac\n\n(c-a-t backwards)" (not "Tried:\ntac\nFinal: cta")."""
    label_lines = [i for i, line in enumerate(filled[:-1]) if line.rstrip("*_ \t").endswith(":")]
    after = label_lines[-1] + 1 if label_lines else 0
    if label_lines and all(_after_label(line) is None for line in filled[after:]):
        return filled[after]
    return None


def _candidates_after_the_marker(output: str, marker: re.Match[str]) -> dict[str, str]:
    """The rest of the marker's line, its first clause, and the answer it names ("the word
    tac"), gives after one ruled out ("not act, it is tac"), after a label ("e, r → er") or
    quotes ("**tac** because ...")."""
    line_end = output.find("\n", marker.end())
    rest = output[marker.end() : None if line_end < 0 else line_end]
    candidates = {
        "the text after the answer marker": rest,
        "the answer marker's clause": _CLAUSE_END.split(rest, maxsplit=1)[0],
    }
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
    return candidates


def _candidates_after_the_stated_answer(output: str, stated: int) -> dict[str, str]:
    """A fenced block after where the answer is stated ("Answer:\n```text\ntac\n```"), and
    the answer on a line of its own after it: the last line, the text after its last 'is'."""
    candidates: dict[str, str] = {}
    fenced_after = FENCE.search(output, stated)
    if fenced_after is not None:  # "Answer:\n```text\ntac\n```"
        candidates["the fenced text after the answer marker"] = fenced_after.group("code")
    line_end = output.find("\n", stated)
    if line_end >= 0:  # the answer on a line of its own after the marker
        later = answer_candidates(output[line_end:])
        for name, said in later.items():
            after_the_verb = name.startswith(_AFTER_THE_VERB) and not name.endswith(
                _BEFORE_AN_ASIDE
            )
            if name == "the last line" or after_the_verb:
                candidates[name] = said
        if "the last line" not in later and output[line_end:].strip():
            candidates["the last line"] = output[line_end:]
    return candidates


def _said_to_be_asked(line: str, asked: set[Predicate]) -> str | None:
    """What the last clause of `line` that says something is what the question asks says it
    of ("Bob" of "Between Ann and Bob, Bob is taller." for "Who is taller?"), or None."""
    for clause in reversed(CLAUSES.split(line)):
        said = SAID_TO_BE.match(clause)
        if said is not None and is_asked(said["predicate"], asked):
            return said["subject"]
    return None


# A note that may take the answer back or give another: "tca (no wait, tac)", "tac (or cta)"
_RETRACTING_NOTE = re.compile(
    r"\b(?:no|not|wait|actually|sorry|correct\w*|or|rather|instead|but|answer\w*)\b",
    re.IGNORECASE,
)


def without_closing_note(text: str) -> str | None:
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
# those items listed one by one: "e, i, l, r, s, v", "e i l r s, and v"; "cherry, banana, apple",
# "cherry, banana, and apple"
_LISTED_LETTERS = re.compile(r"[^\W\d_](?:(?:\s*[,;-]\s*|\s+)(?:(?i:and)\s+)?[^\W\d_])+")
_LETTER = re.compile(r"(?<![^\W\d_])[^\W\d_](?![^\W\d_])")  # a letter standing alone
_WORD_SEPARATOR = r"\s*[,;]\s*(?:and\s+)?|\s+and\s+"
_LISTED_WORDS = re.compile(rf"[^\s,;]+(?:(?:{_WORD_SEPARATOR})[^\s,;]+)+")


# a word spelled out letter by letter: "t-o-b-o-r" is "tobor" (not a list: "t, a, c")
_SPELLED = re.compile(r"[^\W\d_](?:-[^\W\d_])+")


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
    if items == "letters" and _LISTED_LETTERS.fullmatch(text):  # "e, i, l, r, s, and v"
        return "".join(_LETTER.findall(text))
    if items == "words" and _LISTED_WORDS.fullmatch(text):
        return " ".join(word.strip(WRAPPERS) for word in re.split(_WORD_SEPARATOR, text))
    return None


def grade_exact(task: Task, output: str) -> Grade:
    if task.answer is None:
        return cannot_grade("the exact grader needs the task's answer")
    expected = normalise(task.answer, task.case_sensitive)
    if not output.strip():
        return wrong("empty output")
    items = _items_asked(task.prompt_text())
    for name, candidate in exact_candidates(output, task.prompt_text()).items():
        normalised = normalise(candidate, task.case_sensitive)
        if normalised == expected:
            return Grade(score=1.0, detail=f"{name} matches {task.answer!r}")
        noted = without_closing_note(candidate)
        if noted is not None and normalise(noted, task.case_sensitive) == expected:
            return Grade(score=1.0, detail=f"{name}, without its note, matches {task.answer!r}")
        joined = _joined_items(normalised, items) if items else None
        if joined is not None and joined == expected:  # "e, i, l, r, s, v" for "eilrsv"
            return Grade(score=1.0, detail=f"{name}, its {items} joined, matches {task.answer!r}")
        if _SPELLED.fullmatch(normalised) and normalised.replace("-", "") == expected:
            return Grade(score=1.0, detail=f"{name}, spelled out, matches {task.answer!r}")
    shown = normalise(output, True)
    return wrong(f"no match for {task.answer!r} in {shown[:80]!r}")


REGEX_WINDOW = 20_000
# the "and" before the last number of a list: "3, 8, 15, and 22", "3, 8, 15 and 22"
_AND_IN_A_LIST = re.compile(r"(?<=\d),?\s+and\s+(?=-?\d)", re.IGNORECASE)


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
    listed = _AND_IN_A_LIST.sub(", ", text)
    if match is None and listed != text:  # "3, 8, 15, and 22" is the list [3, 8, 15, 22]
        match = pattern.search(listed[:REGEX_WINDOW]) or pattern.search(listed[-REGEX_WINDOW:])
        where += " (its 'and' read as a comma)"
    if match is None:
        return wrong(f"pattern not found in {text[:80]!r}{where}")
    return Grade(score=1.0, detail=f"matched {match.group(0)[:80]!r}{where}")


# Markers of a final answer (the number grader's, without its "result is" / "total is",
# which also begin remarks: "The result is sorted."), and self-corrections ("[1, 3, 2].
# Wait, no, it's [1, 2, 3].") unless a remark follows them ("Actually, it is correct.")
# and a bare correction giving a list of numbers ("[1, 2, 3]. Actually [1, 3, 2].", "Wait,
# 1, 3, 2."), taken only when the list is the whole of its sentence (see `_LIST_ANSWER`)
_FINAL_ANSWER_MARKER = re.compile(
    r"(?:final answer|answer)(?P<key>[\"'])?"  # and a JSON key: "answer": [1, 2, 3]
    r"(?:\s*(?:is|was|(?:would|should|must|will) be)\b|\s*[:=])"
    rf"|final answer|{SELF_CORRECTION}"
    rf"|(?P<bare>{BARE_CORRECTION_LEAD}(?=[\[(]\s*-?\d|-?\d+(?:\.\d+)?\s*[,;]\s*-?\d))",
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
        line = text[marker.end() : end_of_line(text, marker.end())].lstrip(" :*_#>`$")
        if re.match(r"not\b", line, re.IGNORECASE):  # "The answer is not [3, 2, 1], ..."
            corrected = _NOT_THIS_BUT.match(line)
            if corrected is None:
                return "", f" ({marker.group(0).strip()!r} {clip(line.strip())!r} rules it out)"
            return corrected.group("answer").rstrip(" .*_`$"), where
        json_value = _json_value(text, marker.end()) if marker["key"] else None
        if json_value is not None:  # '{"answer": [1, 2, 3], "steps": 2}': the key's value
            return json_value, where
        answer = _answer_at(text, marker.end()).strip(" :*_#>`$").rstrip(" .!*_`$")
        if marker["bare"] and not _LIST_ANSWER.fullmatch(answer):
            continue  # "Actually [1, 2, 3] is right.": a remark, no new answer
        return answer, where
    if retracted:  # "Wait, no, it's yes.": "yes" for a pattern ^yes$
        after = _RETRACTION_REMARK.match(text, retracted).end()  # type: ignore[union-attr]
        return text[after:].rstrip(" .!*_`$"), " (after the retraction)"
    return text, ""


def _json_value(text: str, start: int) -> str | None:
    """The JSON value starting at `start` (past spaces), written back as JSON (a string as
    its text), or None when none starts there."""
    index = len(text) - len(text[start:].lstrip())
    try:
        value, _ = json.JSONDecoder().raw_decode(text, index)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


_RETRACTION_REMARK = re.compile(r"[\s,:;.!?-]*(?:(?:it|that)(?:['’]s|\s+is)\s+)?", re.IGNORECASE)


def _answer_retracted_before(text: str) -> int:
    """Where the text after the last retraction starts ("[1, 2, 3]? No wait: [1, 3, 2]."),
    when more than a remark follows it ("No wait, it's fine."); else 0."""
    retractions = list(RETRACTION.finditer(text))
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
    end = end_of_line(text, start)
    if text[start:end].rstrip(" *_").endswith(":"):  # "The answer is as follows:\n[1, 2, 3]"
        start = _ANSWER_START.match(text, end).end()  # type: ignore[union-attr]
        end = end_of_line(text, start)
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


def _closing_bracket(text: str, start: int, depth: int) -> int | None:
    """Where the `depth` brackets left open before `start` close (a bounded look)."""
    for index in range(start, min(len(text), start + MAX_ANSWER_CONTINUATION)):
        depth += {"[": 1, "]": -1}.get(text[index], 0)
        if depth == 0:
            return index
    return None
