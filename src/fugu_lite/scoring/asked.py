"""What a question asks an answer to be ("Which number is larger?": larger; "Who is the
tallest?": tallest), read by the choice and exact graders.
"""

from __future__ import annotations

import itertools
import re

_THE_MOST = re.compile(r"\bthe\s+([a-z]+est)\b", re.IGNORECASE)
# what a question asks an option to be: "Which number is larger?", "Who is taller, A or B?",
# "Which of these numbers is even?", "What is the first letter of ...?" (after its "is")
QUESTION = re.compile(r"(?:^|(?<=[.?!\n]))[^.?!\n]*+\?")  # tried at sentence starts only
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
CLAUSE_LEAD = r"\s*(?:(?:and|so|but|thus|hence|therefore|then)\s+)?"
SAID_TO_BE = re.compile(
    rf"{CLAUSE_LEAD}(?P<subject>\S.*?)(?<!\s)\s++(?:is|are)\s++(?:the\s+|an?\s+)?"
    r"(?P<predicate>[a-z].*)",
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
        for question in QUESTION.finditer(prompt)
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


CLAUSES = re.compile(r"[,.;:!?\n]+")
