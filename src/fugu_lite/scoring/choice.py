"""The choice grader: the option letter (A-E) a worker's output chooses: "\\boxed{B}", "Answer: B",
"<answer>B</answer>", "The answer must be B", "The answer is most likely B", the last
self-correction ("Wait, actually it's (C)", "Wait, actually C.", "Oops, C.", "Hmm, C."), "The
correct option is b.", "The letter is B", "I would choose B", "so it must be B", "It's B.", "So B.",
"Based on the heights, B.", "(B)", "B) foo", "B - foo" (unless its line retracts it: "B - no wait,
..."), "B is taller" for "Who is taller?" (the word after the question's "is"; "54 is larger than 9"
alike for an option's text), "..., so the smallest is B." for "Which is the smallest?", "A is not
the tallest; B is.", the one option checked ("- [x] B", "B) Bob ✅"; for a question asking for the
one that is NOT so, only a reply's one mark beside a letter alone on its line: "B ✅"), a line
holding just "B", a last sentence holding just a letter ("Not A, not C. B."), or the text of exactly
one option (the answer, or its first or last clause when no other option is named: "Yes, all wugs
are feps.", or the only option named when it is cited with its letter: "The capital is B) Paris.").
Two different letters with no answer marker ("A or B", "(A) ... (C)"), or a second one hedged after
the answer ("The answer is B (or C).") are ambiguous and score 0. A JSON reply's '{"answer": "B"}'
is an "Answer: B".
"""

from __future__ import annotations

import re
import unicodedata

from ..tasks import OPTION_LINE, Task, choice_letter
from .asked import (
    CLAUSE_LEAD,
    CLAUSES,
    MAX_PREDICATE_CHARS,
    QUESTION,
    SAID_TO_BE,
    Predicate,
    is_asked,
    predicates_asked,
)
from .common import (
    BARE_CORRECTION_LEAD,
    CJK_ANSWER_MARKER,
    REJECTED,
    RETRACTION,
    RETRACTION_LEAD,
    SELF_CORRECTION,
    Grade,
    cannot_grade,
    end_of_line,
    last_boxed,
    no_after,
    unlatex,
    wrong,
)
from .exact import WRAPPERS, answer_candidates, normalise, without_closing_note

# how sure a reply is of the letter after "the answer is": "most likely B", "definitely B"
_CERTAINTY = r"(?:most\s+likely|likely|probably|definitely|clearly|certainly|surely)"
# "No," opening the sentence after a letter's: "The answer is A. No, B." (not after a word
# ending in a letter: "... the race. No, ...")
_NO_AFTER_A_LETTER = no_after(r"\b[A-E]")
_CHOICE_MARKER = re.compile(
    # (not "Let's weigh each option: A is 150 cm, B is ...", a list of them)
    r"(?:(?<!each )(?<!every )(?:answer|(?P<option>option|choice))[\"']?\s*+"  # JSON: "answer": "B"
    # "The answer must be B.", "The answer is most likely B."
    rf"(?P<said>(?:is|(?:would|will|should|must) be|[:=>\-])(?:\s+{_CERTAINTY})?)?"
    r"|result\s*(?:is|:)"
    rf"|{CJK_ANSWER_MARKER}"
    # "I would choose B" (not "I cannot choose A", "wouldn't pick A", "should not go with C")
    r"|(?<!not )(?<!n't )(?<!cannot )(?<!never )\b(?:choose|select|pick|go with)\b"
    # "So B.", "Based on the heights, B." (the letter ends it)
    r"|\b(?P<conclusion>(?:so|thus|therefore|hence)\b|(?:based\s+on|given|looking\s+at|"
    r"considering|comparing|judging\s+by|according\s+to)\b[^.!?\n,]{1,80}(?=,)),?"
    # "The letter is B.", "My letter: B" (not "the last letter is e")
    r"|\b(?:the|my)\s+(?:(?:correct|right|final|chosen)\s+)?letter\s*"
    rf"(?:is|:|(?:would|should|must)\s+be)(?:\s+{_CERTAINTY})?"
    r"|\bit(?:'s|’s|\s+is|\s+(?:must|has\s+to|should)\s+be)\b"  # "so it must be C"
    # a bare correction: "Answer: A. Wait, actually B.", "The answer is A. Oops, B.", "The
    # answer is A. No, B." (the letter ends it, as a conclusion's), and a guess: "I'm not
    # sure, but I think B."
    rf"|{SELF_CORRECTION}|(?P<bare>{BARE_CORRECTION_LEAD}|{RETRACTION_LEAD}|{_NO_AFTER_A_LETTER}"
    r"|\bI\s+(?:think|guess|believe)\b,?))\s*+"
    # (not the "e" of "Oops, e.g. ..."; a dash after a bold label: "**Answer** — B"; the spaces
    # taken whole: a run of them after a marker took time growing as its length to the sixth
    # power)
    r"(?:option|choice|letter)?[*_]*+\s*+[:\-—–]?\s*+[*$\"']*\s*+[(\[]?\s*+(?P<letter>[A-Ea-e])(?![A-Za-z]|\.[A-Za-z])\s*[)\]]?"
    r"(?=(?P<after>[^\n]{0,12}))",  # looked at, not consumed: "B. Wait, it's C"
    re.IGNORECASE,
)
_ARTICLE_A = re.compile(r"\s+[A-Za-z]")
# an option named in a comparison, not chosen: "Option A (42) is larger than option B (17).",
# "Option A, Mars, is the smallest.", "Unlike option D, ..." (what follows "option B", and
# what comes before "option B")
_OPTION_SAID_TO_BE = re.compile(
    r"[)\]]?\s*(?:\([^()\n]{0,40}\)\s*|,[^,\n]{1,40},\s*)?(?:is|are)\s+(?:the\s+)?(?P<most>[a-z]+)",
    re.IGNORECASE,
)
_COMPARED_TO = re.compile(
    r"\b(?:than|to|with|and|or|over|vs\.?|versus|unlike|except|besides)\s+$", re.IGNORECASE
)
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
# an option ruled out, then the one given: "Not A, but B.", "The answer is not (A) but (C)."
# (the second letter ends its sentence: "Not A, but B is also short." gives none)
_NOT_THIS_BUT = re.compile(
    r"(?<![\w'])[Nn]ot\s+(?:option\s+)?\(?(?P<other>[A-E])\)?\s*[,;]?\s*but\s+(?:rather\s+)?"
    r"(?:option\s+)?[*_]*\(?(?P<letter>[A-E])\)?[*_]*(?=\s*(?:[.!\n]|$))"
)
_A_LETTER = re.compile(r"(?<![\w'])[A-E](?![\w'])")
# what the question asks said to be an option: "..., so the smallest is B.", "The tallest
# one is (C)."
_ASKED_IS_LETTER = re.compile(
    r"\b(?:[Tt]he\s+)?(?P<most>[a-z]+(?:\s+[a-z]+)?)\s+(?:one\s+)?is\s+(?:option\s+)?[*_]*\(?"
    r"(?P<letter>[A-E])\)?[*_]*(?=\s*(?:[.!,;\n]|$))"
)
# an option marked chosen on its line: "- [x] B", "☑ B", "(B) 3 ✅", "B ✔" (a line also
# holding a box left empty or a cross, "[x] B  [ ] C", "A ❌ B ✅", is read by its marks)
_TICKS = "☑✅✔✓"
_CROSSES = "☐❌✗✘❎"
_CHECK = rf"\[[xX✓✔]\]|[{_TICKS}]"
_CROSS = rf"\[\s\]|[{_CROSSES}]"
_CHECK_MARK = re.compile(_CHECK)
_CROSS_MARK = re.compile(_CROSS)
_LINE_MARKS = re.compile(
    rf"(?P<check>{_CHECK})|(?P<cross>{_CROSS})"
    # a letter starting its line or right after a mark ("✅ Option A is wrong" marks no A)
    rf"|(?:^|(?<=[\]{_TICKS}{_CROSSES}\ufe0f]))[\s>*_•+-]*[(\[]?(?P<letter>[A-E])(?![\w'])"
)
# a reply's one mark next to a bare letter on its line: "B ✅", "**B** ✔️", "✅ (B)" (not a
# checkbox "- [x] B", an item of a checklist)
_LETTER_WITH_A_MARK = re.compile(
    rf"[\s*_]*(?:[{_TICKS}]\ufe0f?[\s*_]*)?[(\[]?(?P<letter>[A-E])[)\]]?[\s*_.]*"
    rf"(?:[{_TICKS}]\ufe0f?)?[\s*_]*"
)
_CORRECT_WORDS = {"correct", "right", "true", "answer", "correct answer", "right answer"}
# a reply whose last sentence is only a letter: "Not A, not C. B.", "not a, not c. b."
# (not "Wrong: A.")
_LAST_SENTENCE_LETTER = re.compile(r"[.!?;]\s++[*_]*\(?(?P<letter>[A-Ea-e])\)?[*_]*[.!]?[*_]*\s*$")
# an option's text said to be what the question asks: "17 is the smallest." (tried where a
# run of spaces starts: a reply of 200,000 spaces took minutes)
_IS_THE_MOST = re.compile(r"(?<!\s)\s++is\s+the\s+(?P<most>[a-z]+est)$", re.IGNORECASE)
_ASKED_ONE_IS = re.compile(
    rf"{CLAUSE_LEAD}(?:the\s+)?(?P<predicate>[a-z]+(?:\s+[a-z]+)?)\s+(?:is|are)\s+"
    r"(?P<subject>\S(?:.*\S)?)\s*$",
    re.IGNORECASE,
)


_LETTER_OR_LETTER = re.compile(r"(?<![\w'])\(?[A-E]\)?\s*(?:or|/)\s*\(?[A-E]\)?(?![\w'])")
# a line ending in a label and its letter: "It is easy: C", "My pick: **(B)**." (not "Wrong: A")
_REJECTING_LABEL = re.compile(
    r"\b(?:not|wrong|incorrect|false|eliminated|ruled\s+out)\b", re.IGNORECASE
)
_LABELLED_LETTER = re.compile(r":[*_]*[ \t]+[*_$]*[(\[]?(?P<letter>[A-E])[)\]]?[*_$]*[.!]?[ \t]*$")
# a second letter after the one given: "B or C", "B/C", "B (or C)", "B, or possibly C" (not
# "B, and C is wrong")
_OR_ANOTHER = re.compile(
    r"\s*(?:or|and|/|,\s*or\b|\(\s*or\b)\s*(?:(?:maybe|perhaps|possibly|probably)\s+)?"
    r"\(?(?:option\s*)?[A-E](?![a-z])\)?",
    re.IGNORECASE,
)


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


# a letter chosen and how it was found, or None and why not
_Choice = tuple[str | None, str]


def extract_choice(output: str, prompt: str = "") -> tuple[str | None, str]:
    """(letter, how it was found) or (None, why not)."""
    text = unicodedata.normalize("NFKC", output).strip()
    if not text:
        return None, "empty output"
    boxed = _boxed_letter(text)
    if boxed is not None:
        return boxed, "\\boxed{}"
    asked = predicates_asked(prompt)  # "the smallest", "Which number is larger?"
    return (
        _letter_after_marker(text, asked)
        or _letter_checked(text, prompt)
        or _letter_said_to_be_asked(text, asked)
        or _letter_on_the_first_line(text)
        or _letter_standing_alone(text)
        or _choice_by_option_text(text, prompt)
    )


def _letter_after_marker(text: str, asked: set[Predicate]) -> _Choice | None:
    """The letter after the last answer marker that gives one ("Answer: B", "So B."), or
    why it is ambiguous ("Answer: A or B"); None when no marker gives one."""
    for match in reversed(list(_CHOICE_MARKER.finditer(text))):
        letter, after = match.group("letter"), match.group("after")
        if match["option"] and _only_labelled(match) and _only_compared(text, match, asked):
            continue  # "Option A (42) is larger than option B (17).": B is no answer
        if letter == "a" and _ARTICLE_A.match(text, match.end("letter")):
            continue  # "the answer is a bit..." is the article, not option a
        if REJECTED.match(text[match.end() : match.end() + 40]):  # past `after`'s 12
            continue  # "option A is wrong" names a letter, but not as the answer
        if (
            (match["conclusion"] or match["bare"])
            and not _CONCLUSION_END.match(after)
            and not (match["bare"] and _said_correct(text, match, asked))
        ):
            continue  # "so C is taller than A": a letter in a sentence, not its conclusion
        another = _OR_ANOTHER.match(text, match.end())
        if another:
            return None, f"ambiguous: {text[match.start() : another.end()].strip()!r}"
        if _begins_a_list(text, letter, match.end("letter")):
            continue  # "Let me consider each option:\nA) Ann\nB) Bob"
        return letter.upper(), "after an answer marker"
    return None


def _only_labelled(match: re.Match[str]) -> bool:
    """Whether "option" names its letter bare or as a label ("option B", "Option: B"), not
    said to be the answer ("The correct option is B")."""
    return not match["said"] or not match["said"][0].isalpha()


def _said_correct(text: str, match: re.Match[str], asked: set[Predicate]) -> bool:
    """Whether a bare correction's letter is said to be correct or what the question asks:
    "Answer: A. Wait, actually B is correct.", "Oops, B is the tallest." """
    said = _LETTER_IS_CORRECT.match(text, match.start("letter"))
    return bool(
        said
        and (said["most"] is None or is_asked(_clause_at(text, said.start("most")), asked))
        and not _TOO.match(text, said.end())  # "B is correct too": a second answer
    )


_TOO = re.compile(r"\s*,?\s*(?:too|as\s+well)\b", re.IGNORECASE)


def _letter_checked(text: str, prompt: str) -> _Choice | None:
    """The one option marked chosen ("- [x] B"), or why it is ambiguous (two are); None when
    none is, or when the question asks for the wrong one (the marks then tick the others)."""
    if _asks_for_a_wrong_one(prompt):
        return _letter_alone_with_the_one_mark(text)
    checked = _checked_letters(text)
    if len(checked) == 1:
        return checked.pop(), "the option checked"
    if checked:
        return None, f"ambiguous: checks {', '.join(sorted(checked))}"
    return None


def _letter_alone_with_the_one_mark(text: str) -> _Choice | None:
    """For a question asking for the wrong one, the letter alone on its line with the reply's
    one check mark ("4 is even.\n\nB ✅"): a reply ticking the options that are so ticks
    more than one, or crosses the others; None otherwise."""
    if len(_CHECK_MARK.findall(text)) != 1 or _CROSS_MARK.search(text):
        return None
    for line in text.splitlines():
        alone = _LETTER_WITH_A_MARK.fullmatch(line) if _CHECK_MARK.search(line) else None
        if alone is not None:
            return alone["letter"], "the one check mark, beside a letter alone on its line"
    return None


def _letter_said_to_be_asked(text: str, asked: set[Predicate]) -> _Choice | None:
    """The letter said to be correct or what the question asks ("B is the smallest.", "...,
    so the smallest is B."), the one said to be it after another said not to be ("A is not
    the tallest; B is."), or the one given after another ruled out ("Not A, but B.")."""
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
    not_but = [m for m in _NOT_THIS_BUT.finditer(text) if m["letter"] != m["other"]]
    if not_but and not _A_LETTER.search(text, not_but[-1].end()):  # "Not A, but B."
        return not_but[-1].group("letter"), "'not X but Y'"
    return None


def _letter_on_the_first_line(text: str) -> _Choice | None:
    """A first line holding only a letter ("C" then an explanation that mentions other
    options), also before a closing note ("B (Bob is the tallest)")."""
    line = text.splitlines()[0]
    first_line = choice_letter(line.strip("*_ `")) or choice_letter(
        (without_closing_note(line) or "").strip("*_ `")
    )
    return (first_line, "a first line holding only a letter") if first_line else None


def _letter_standing_alone(text: str) -> _Choice | None:
    """A letter standing alone: the only bracketed one (two are ambiguous), one starting the
    output ("B) Bob", unless its line retracts it: "A - no wait, B"), one on a line or in a
    last sentence of its own ("Not A, not C. B."), or after a label ending its line ("My
    pick: (B)"); "A or B" is ambiguous."""
    bracketed = {m.upper() for m in re.findall(r"\(([A-Ea-e])\)", text)}
    if len(bracketed) > 1:
        return None, f"ambiguous: mentions {', '.join(sorted(bracketed))}"
    leading = _LEADING_LETTER.match(text)
    if (
        leading
        and not _begins_a_list(text, leading.group("letter"), leading.end("letter"))
        and not RETRACTION.search(text, leading.end(), end_of_line(text, leading.end()))
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
    return None


# a question asking for the option that is not so: a check mark may then mark the others
_WRONG_ONE = re.compile(r"\b(?:not|false|incorrect|wrong|untrue|invalid|except)\b", re.IGNORECASE)


def _asks_for_a_wrong_one(prompt: str) -> bool:
    """Whether a question of `prompt` asks for the option that is not so ("Which of these
    is NOT even?"): a reply ticking the true statements then ticks the wrong options."""
    return any(_WRONG_ONE.search(question.group(0)) for question in QUESTION.finditer(prompt))


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
    Bob", "- (A) Ann\n- (B) Bob", "A: Ann is 150 cm, B: Bob ..."): the next letter follows
    with the same delimiter at the start of a line (after a bullet or not) or after a comma,
    within a few lines (a bounded look: linear)."""
    delimiter = text[end : end + 1]
    if delimiter not in {")", "]", ":", "."} or letter.upper() == "E":
        return False
    following = chr(ord(letter.upper()) + 1)
    pattern = rf"(?:\n[\s*_]*(?:[-+•][\s*_]*)?|[,;]\s*)[(\[]?{following}{re.escape(delimiter)}"
    return re.search(pattern, text[end : end + 300]) is not None


def _boxed_letter(text: str) -> str | None:
    """The letter of "\\boxed{B}", "\\boxed{(b)}", "\\boxed{\\text{B}}" or "\\boxed{B) Bob}"."""
    boxed = last_boxed(text)
    if boxed is None:
        return None
    leading = _LEADING_LETTER.match(unlatex(boxed).strip("*_ `$"))
    return leading.group("letter").upper() if leading else None


def _choice_by_option_text(text: str, prompt: str) -> tuple[str | None, str]:
    """An answer that is one option's text ("Bob", "The tallest is Bob."): the text must
    be the whole answer, not a word inside prose ("No idea" does not choose option "No")."""
    options = {
        letter: normalise(option)
        for letter, option in (
            (m.group("letter"), m.group("text").strip()) for m in OPTION_LINE.finditer(prompt)
        )
        if option
    }
    candidates = answer_candidates(text)
    answers = {normalise(candidate) for candidate in candidates.values()}
    answered = [letter for letter, option in options.items() if option in answers]
    if len(answered) == 1:
        return answered[0], f"the answer is option {answered[0]}'s text"
    # "Answer: Ann\nHmm, no. Answer: Bob": the last answer given, not the first line's
    marked = normalise(candidates.get("the text after the answer marker", ""))
    last = [letter for letter in answered if options[letter] == marked]
    if last:
        return last[0], f"the last answer is option {last[0]}'s text"
    said = normalise(text)
    named = [
        letter
        for letter, option in options.items()
        if re.search(rf"(?<!\w){re.escape(option)}(?!\w)", said)
    ]
    asked = predicates_asked(prompt)
    said_to_be = {
        letter
        for clause in CLAUSES.split(text)
        for letter in _option_said_to_be(clause, options, asked)
    }
    if len(said_to_be) == 1:  # "54 is larger than 9." for "Which number is larger?"
        letter = said_to_be.pop()
        return letter, f"option {letter}'s text is said to be what the question asks"
    if len(answered) > 1 or len(named) > 1:
        return None, f"ambiguous: names the text of options {', '.join(answered or named)}"
    clauses = [
        _IS_THE_MOST.sub(lambda m: "" if is_asked(m["most"], asked) else m.group(0), clause)
        for clause in CLAUSES.split(text)
        if clause.strip(WRAPPERS)
    ]
    if named and clauses and options[named[0]] in {normalise(clauses[0]), normalise(clauses[-1])}:
        # "Yes, all wugs are feps.", "..., so all wugs are feps. Yes.": the only option named
        return named[0], f"the first or last clause is option {named[0]}'s text"
    if len(named) == 1 and _cited_with_its_text(said, named[0], options[named[0]]):
        # "The capital of France is B) Paris.": the only option named, with its own letter
        return named[0], f"option {named[0]} is cited with its text"
    return None, "no option letter in the output"


_NOT_BEFORE = re.compile(r"\bnot\s+(?:option\s+)?$")


def _cited_with_its_text(said: str, letter: str, option: str) -> bool:
    """Whether `said` (normalised) cites option `letter` as "B) Paris", "(B) Paris" or "B.
    Paris", not ruled out ("not B) Paris", "B) Paris is wrong")."""
    cited = rf"(?<![\w'])\(?{letter.lower()}\s*[).:]\s*[*_]*{re.escape(option)}(?!\w)"
    return any(
        not _NOT_BEFORE.search(said, max(0, match.start() - 20), match.start())
        and not REJECTED.match(said[match.end() :].lstrip("*_"))
        for match in re.finditer(cited, said)
    )


def _clause_at(text: str, start: int) -> str:
    """The clause starting at `start`, up to its first punctuation (a bounded look)."""
    return CLAUSES.split(text[start : start + MAX_PREDICATE_CHARS], maxsplit=1)[0]


def _option_said_to_be(clause: str, options: dict[str, str], asked: set[Predicate]) -> list[str]:
    """The option a clause says is what the question asks ("54 is larger than 9", "the
    larger number is 54"), as a list of at most one letter."""
    for pattern in (SAID_TO_BE, _ASKED_ONE_IS):
        said = pattern.match(clause)
        if said is not None and is_asked(said["predicate"], asked):
            text = normalise(said["subject"])
            return [letter for letter, option in options.items() if option == text][:1]
    return []
