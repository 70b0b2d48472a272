"""String tasks: letter case, letters of a word, reversing, counting, acronyms, sorting."""

from __future__ import annotations

import random

from .drafts import Draft, Maker, exact_draft, number_draft

WORDS = (
    "cat", "dog", "sun", "tree", "book", "fish", "lamp", "moon", "star", "frog",
    "apple", "house", "river", "cloud", "table", "green", "happy", "robot", "pizza", "tiger",
    "banana", "orange", "garden", "pencil", "window", "rabbit", "yellow", "silver",
    "computer", "elephant", "mountain", "keyboard", "sandwich", "umbrella", "strawberry",
    "butterfly", "chocolate", "dinosaur", "mississippi", "bookkeeper",
)  # fmt: skip


def _word(rng: random.Random, longest: int = 20, shortest: int = 1) -> str:
    return rng.choice([w for w in WORDS if shortest <= len(w) <= longest])


def _uppercase(rng: random.Random) -> Draft:
    word = _word(rng, 6)
    return exact_draft(f"Write the word '{word}' in uppercase letters.", word.upper(), True)


def _lowercase(rng: random.Random) -> Draft:
    word = _word(rng, 6).upper()
    return exact_draft(f"Write the word '{word}' in lowercase letters.", word.lower(), True)


def _first_letter(rng: random.Random) -> Draft:
    word = _word(rng)
    return exact_draft(f"What is the first letter of the word '{word}'?", word[0])


def _last_letter(rng: random.Random) -> Draft:
    word = _word(rng)
    return exact_draft(f"What is the last letter of the word '{word}'?", word[-1])


def _length(rng: random.Random) -> Draft:
    word = _word(rng, 8)
    return number_draft(f"How many letters are in the word '{word}'?", len(word))


def _reverse(rng: random.Random) -> Draft:
    word = _word(rng, 6, 4)
    return exact_draft(f"Write the word '{word}' backwards.", word[::-1])


def _count_letter(rng: random.Random) -> Draft:
    word = _word(rng, 20, 5)
    letter = rng.choice(sorted(set(word)))
    return number_draft(
        f"How many times does the letter '{letter}' appear in the word '{word}'?",
        word.count(letter),
    )


def _reverse_long(rng: random.Random) -> Draft:
    word = _word(rng, 20, 7)
    return exact_draft(f"Write the word '{word}' backwards.", word[::-1])


def _reverse_sentence(rng: random.Random) -> Draft:
    words = rng.sample(WORDS[:20], rng.randint(3, 4))
    return exact_draft(
        f"Reverse the order of the words in: '{' '.join(words)}'.", " ".join(reversed(words))
    )


def _remove_vowels(rng: random.Random) -> Draft:
    word = _word(rng, 10, 5)
    return exact_draft(
        f"Remove every vowel (a, e, i, o, u) from the word '{word}'.",
        "".join(letter for letter in word if letter not in "aeiou"),
    )


def _acronym(rng: random.Random) -> Draft:
    words = rng.sample(WORDS, rng.randint(3, 5))
    return exact_draft(
        f"Write the first letter of each word of '{' '.join(words)}' in uppercase, "
        "joined without spaces.",
        "".join(word[0] for word in words).upper(),
        True,
    )


def _sort_letters(rng: random.Random) -> Draft:
    word = _word(rng, 6, 4)
    return exact_draft(
        f"Sort the letters of the word '{word}' in alphabetical order.", "".join(sorted(word))
    )


MAKERS: dict[int, tuple[Maker, ...]] = {
    1: (_uppercase, _lowercase, _first_letter, _last_letter, _length),
    2: (_reverse, _count_letter),
    3: (_reverse_long, _reverse_sentence, _remove_vowels, _acronym, _sort_letters),
}
