"""The generator of the built-in task families: checkable tasks of six families
(arithmetic, unit conversions, string and list manipulation, small logic, small Python
functions) for offline use and the demo, mostly easy so that small workers sometimes succeed
and sometimes fail.

Each family maps a difficulty (1 easy, 2 medium, 3 hard) to draft makers: a maker draws one
task's prompt, answer and grader from a random generator; `generate_tasks` gives the drafts
their ids, family, difficulty and split. The task format itself lives in `tasks`.
"""

from __future__ import annotations

import difflib
import random
import re
from collections.abc import Callable, Sequence
from fractions import Fraction

from .datasets.split import standard_split
from .tasks import CHOICE_LETTERS, Task, format_number

NUMBER_HINT = "Answer with just the number."
CHOICE_HINT = "Answer with the letter of the correct option."
EXACT_HINT = "Reply with only the result."
CODE_HINT = "Reply with the Python code only."

DIFFICULTY_WEIGHTS = (0.5, 0.3, 0.2)
"""Share of easy / medium / hard tasks: the default workers are 135M-parameter models."""

NAMES = ("Ana", "Ben", "Cleo", "Dev", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jun", "Kai", "Lea")
ITEMS = ("apples", "marbles", "stickers", "pencils", "cookies", "stamps", "shells", "cards")
WORDS = (
    "cat", "dog", "sun", "tree", "book", "fish", "lamp", "moon", "star", "frog",
    "apple", "house", "river", "cloud", "table", "green", "happy", "robot", "pizza", "tiger",
    "banana", "orange", "garden", "pencil", "window", "rabbit", "yellow", "silver",
    "computer", "elephant", "mountain", "keyboard", "sandwich", "umbrella", "strawberry",
    "butterfly", "chocolate", "dinosaur", "mississippi", "bookkeeper",
)  # fmt: skip
Draft = dict[str, object]
"""A generated task's fields before it gets its id and family."""


def generate_tasks(
    n_per_family: int = 10, seed: int = 0, families: Sequence[str] | None = None
) -> list[Task]:
    """`n_per_family` tasks of each family (of `families`, default all), the same for the
    same seed, unique prompts. A family's tasks do not depend on which others are asked for."""
    if n_per_family < 0:
        raise ValueError(f"n_per_family must be >= 0, got {n_per_family}")
    chosen = check_families(families)
    tasks: list[Task] = []
    seen: set[str] = set()
    for family, makers in FAMILIES.items():
        if family not in chosen:
            continue
        rng = random.Random(f"fugu-lite-tasks:{seed}:{family}")
        made = 0
        attempts = 0
        while made < n_per_family:
            attempts += 1
            if attempts > 200 + 50 * n_per_family:
                raise ValueError(
                    f"could not make {n_per_family} different {family} tasks: it made {made} "
                    "before its prompts kept repeating; ask for fewer per family"
                )
            difficulty = rng.choices((1, 2, 3), weights=DIFFICULTY_WEIGHTS)[0]
            draft = rng.choice(makers[difficulty])(rng)
            if draft["prompt"] in seen:
                continue
            seen.add(str(draft["prompt"]))
            tasks.append(
                Task.model_validate(
                    {
                        "id": f"{family}-s{seed}-{made:04d}",
                        "task": family,
                        "difficulty": difficulty,
                        "split": standard_split(str(draft["prompt"])),
                        **draft,
                    }
                )
            )
            made += 1
    return tasks


def check_families(families: Sequence[str] | None) -> set[str]:
    """The families asked for (all when None); an unknown name raises ValueError naming it,
    the nearest family and all of them."""
    if families is None:
        return set(FAMILIES)
    known = ", ".join(FAMILIES)
    if not families:
        raise ValueError(f"no task family asked for; choose among {known}")
    for family in families:
        if family not in FAMILIES:
            close = difflib.get_close_matches(family, FAMILIES, n=1, cutoff=0.5)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise ValueError(f"unknown task family {family!r}; {hint}known families: {known}")
    return set(families)


def _number(prompt: str, value: float | Fraction | int) -> Draft:
    return {"prompt": f"{prompt} {NUMBER_HINT}", "answer": format_number(value), "grader": "number"}


def _exact(prompt: str, answer: str, case_sensitive: bool = False) -> Draft:
    return {
        "prompt": f"{prompt} {EXACT_HINT}",
        "answer": answer,
        "grader": "exact",
        "case_sensitive": case_sensitive,
    }


def _choice(rng: random.Random, question: str, correct: str, wrong: list[str]) -> Draft:
    options = [correct, *wrong]
    rng.shuffle(options)
    lines = "\n".join(f"({CHOICE_LETTERS[i]}) {option}" for i, option in enumerate(options))
    letter = CHOICE_LETTERS[options.index(correct)]
    return {"prompt": f"{question}\n{lines}\n{CHOICE_HINT}", "answer": letter, "grader": "choice"}


def _list_regex(values: list[int]) -> str:
    """Matches the list in this order, with commas or spaces, optional brackets, and no
    other element: "[0, 5, 12]" or "5 12 40" is not the list [5, 12]. (The grader
    collapses whitespace, so one space stands for any run of it.)"""
    separator = r"(?:\s*[,;]\s*|\s+)"
    body = separator.join(re.escape(str(value)) for value in values)
    starts = r"(?:\[\s*|(?<![\d.,;-])(?<![\d,;] ))"  # a bracket, or no number before
    ends = r"(?:\s*\]|(?!\s?[,;]?\s?-?\d|\.\d))"  # a bracket, or no number after
    return rf"{starts}{body}{ends}"


def _show(values: list[int]) -> str:
    return "[" + ", ".join(str(value) for value in values) + "]"


# arithmetic


def _add(rng: random.Random) -> Draft:
    a, b = rng.randint(1, 20), rng.randint(1, 20)
    return _number(f"What is {a} + {b}?", a + b)


def _subtract(rng: random.Random) -> Draft:
    a, b = sorted((rng.randint(1, 20), rng.randint(1, 20)), reverse=True)
    return _number(f"What is {a} - {b}?", a - b)


def _times_table(rng: random.Random) -> Draft:
    a, b = rng.randint(2, 9), rng.randint(2, 9)
    return _number(f"What is {a} * {b}?", a * b)


def _three_terms(rng: random.Random) -> Draft:
    a, b, c = rng.randint(10, 60), rng.randint(10, 60), rng.randint(1, 20)
    return _number(f"What is {a} + {b} - {c}?", a + b - c)


def _multiply_add(rng: random.Random) -> Draft:
    a, b, c = rng.randint(3, 15), rng.randint(3, 12), rng.randint(1, 30)
    return _number(f"What is {a} * {b} + {c}?", a * b + c)


def _buy_and_give(rng: random.Random) -> Draft:
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    a, b = rng.randint(5, 30), rng.randint(2, 15)
    c = rng.randint(1, a + b - 1)
    return _number(
        f"{name} has {a} {item}. {name} gets {b} more and then gives away {c}. "
        f"How many {item} does {name} have now?",
        a + b - c,
    )


def _brackets(rng: random.Random) -> Draft:
    a, b, c = rng.randint(2, 20), rng.randint(2, 20), rng.randint(2, 9)
    d = rng.randint(1, (a + b) * c - 1)
    return _number(f"What is ({a} + {b}) * {c} - {d}?", (a + b) * c - d)


def _change(rng: random.Random) -> Draft:
    name = rng.choice(NAMES)
    price, count = rng.randint(2, 12), rng.randint(2, 6)
    bill = next(note for note in (20, 50, 100) if note > price * count)
    return _number(
        f"A notebook costs ${price}. {name} buys {count} notebooks and pays with a ${bill} "
        f"bill. How much change, in dollars, does {name} get?",
        bill - price * count,
    )


def _percent(rng: random.Random) -> Draft:
    percent = rng.choice((10, 20, 25, 50, 75))
    base = 20 * rng.randint(1, 20)
    return _number(f"What is {percent}% of {base}?", Fraction(percent * base, 100))


def _share(rng: random.Random) -> Draft:
    children, each = rng.randint(2, 8), rng.randint(3, 12)
    eaten = rng.randint(1, each - 1)
    return _number(
        f"{children * each} candies are shared equally among {children} children. Each "
        f"child then eats {eaten} of them. How many candies does each child have left?",
        each - eaten,
    )


# unit conversions

EASY_UNITS = (
    ("meters", "centimeters", 100), ("kilometers", "meters", 1000), ("kilograms", "grams", 1000),
    ("hours", "minutes", 60), ("minutes", "seconds", 60), ("days", "hours", 24),
    ("liters", "milliliters", 1000), ("weeks", "days", 7), ("dozens", "items", 12),
)  # fmt: skip
MEDIUM_UNITS = (
    ("centimeters", "meters", 100), ("grams", "kilograms", 1000), ("minutes", "hours", 60),
    ("seconds", "minutes", 60), ("inches", "feet", 12), ("millimeters", "centimeters", 10),
)  # fmt: skip


def _scale_up(rng: random.Random) -> Draft:
    source, target, factor = rng.choice(EASY_UNITS)
    value = rng.choice((1, 1, 1, 2, 2, 3, 4, 5, 10))  # one unit is a fact small models know
    if value == 1:
        return _number(f"How many {target} are in one {source[:-1]}?", factor)
    return _number(f"How many {target} are in {value} {source}?", value * factor)


def _scale_down(rng: random.Random) -> Draft:
    source, target, factor = rng.choice(MEDIUM_UNITS)
    value = factor * rng.randint(1, 20) // rng.choice((1, 2, 4))
    return _number(f"Convert {value} {source} to {target}.", Fraction(value, factor))


def _feet(rng: random.Random) -> Draft:
    source, target, factor = rng.choice((("feet", "inches", 12), ("yards", "feet", 3)))
    value = rng.randint(2, 15)
    return _number(f"Convert {value} {source} to {target}.", value * factor)


def _hours_and_minutes(rng: random.Random) -> Draft:
    hours, minutes = rng.randint(2, 9), rng.randint(1, 59)
    return _number(
        f"How many minutes are {hours} hours and {minutes} minutes?", 60 * hours + minutes
    )


def _speed(rng: random.Random) -> Draft:
    k = rng.randint(1, 8)
    return _number(f"Convert {18 * k} kilometers per hour to meters per second.", 5 * k)


def _celsius(rng: random.Random) -> Draft:
    celsius = 5 * rng.randint(-8, 20)
    return _number(
        f"Convert {celsius} degrees Celsius to degrees Fahrenheit.", celsius * 9 // 5 + 32
    )


def _fahrenheit(rng: random.Random) -> Draft:
    k = rng.randint(-4, 20)
    return _number(f"Convert {32 + 9 * k} degrees Fahrenheit to degrees Celsius.", 5 * k)


def _hours_to_seconds(rng: random.Random) -> Draft:
    hours = rng.randint(2, 12)
    return _number(f"How many seconds are in {hours} hours?", 3600 * hours)


# string manipulation


def _word(rng: random.Random, longest: int = 20, shortest: int = 1) -> str:
    return rng.choice([w for w in WORDS if shortest <= len(w) <= longest])


def _uppercase(rng: random.Random) -> Draft:
    word = _word(rng, 6)
    return _exact(f"Write the word '{word}' in uppercase letters.", word.upper(), True)


def _lowercase(rng: random.Random) -> Draft:
    word = _word(rng, 6).upper()
    return _exact(f"Write the word '{word}' in lowercase letters.", word.lower(), True)


def _first_letter(rng: random.Random) -> Draft:
    word = _word(rng)
    return _exact(f"What is the first letter of the word '{word}'?", word[0])


def _last_letter(rng: random.Random) -> Draft:
    word = _word(rng)
    return _exact(f"What is the last letter of the word '{word}'?", word[-1])


def _length(rng: random.Random) -> Draft:
    word = _word(rng, 8)
    return _number(f"How many letters are in the word '{word}'?", len(word))


def _reverse(rng: random.Random) -> Draft:
    word = _word(rng, 6, 4)
    return _exact(f"Write the word '{word}' backwards.", word[::-1])


def _count_letter(rng: random.Random) -> Draft:
    word = _word(rng, 20, 5)
    letter = rng.choice(sorted(set(word)))
    return _number(
        f"How many times does the letter '{letter}' appear in the word '{word}'?",
        word.count(letter),
    )


def _reverse_long(rng: random.Random) -> Draft:
    word = _word(rng, 20, 7)
    return _exact(f"Write the word '{word}' backwards.", word[::-1])


def _reverse_sentence(rng: random.Random) -> Draft:
    words = rng.sample(WORDS[:20], rng.randint(3, 4))
    return _exact(
        f"Reverse the order of the words in: '{' '.join(words)}'.", " ".join(reversed(words))
    )


def _remove_vowels(rng: random.Random) -> Draft:
    word = _word(rng, 10, 5)
    return _exact(
        f"Remove every vowel (a, e, i, o, u) from the word '{word}'.",
        "".join(letter for letter in word if letter not in "aeiou"),
    )


def _acronym(rng: random.Random) -> Draft:
    words = rng.sample(WORDS, rng.randint(3, 5))
    return _exact(
        f"Write the first letter of each word of '{' '.join(words)}' in uppercase, "
        "joined without spaces.",
        "".join(word[0] for word in words).upper(),
        True,
    )


def _sort_letters(rng: random.Random) -> Draft:
    word = _word(rng, 6, 4)
    return _exact(
        f"Sort the letters of the word '{word}' in alphabetical order.", "".join(sorted(word))
    )


# list manipulation


def _numbers(rng: random.Random, count: int, low: int, high: int) -> list[int]:
    return [rng.randint(low, high) for _ in range(count)]


def _list_max(rng: random.Random) -> Draft:
    values = _numbers(rng, rng.randint(3, 4), 1, 9)
    return _number(f"What is the largest number in the list {_show(values)}?", max(values))


def _list_min(rng: random.Random) -> Draft:
    values = _numbers(rng, rng.randint(3, 4), 1, 9)
    return _number(f"What is the smallest number in the list {_show(values)}?", min(values))


def _list_sum_small(rng: random.Random) -> Draft:
    values = _numbers(rng, 3, 1, 9)
    return _number(f"What is the sum of the numbers in {_show(values)}?", sum(values))


def _list_length(rng: random.Random) -> Draft:
    values = _numbers(rng, rng.randint(2, 7), 1, 50)
    return _number(f"How many numbers are in the list {_show(values)}?", len(values))


def _unsorted(rng: random.Random, count: int, low: int, high: int) -> list[int]:
    values = rng.sample(range(low, high + 1), count)
    while values == sorted(values) or values == sorted(values, reverse=True):
        rng.shuffle(values)
    return values


def _sort_ascending(rng: random.Random) -> Draft:
    values = _unsorted(rng, rng.randint(4, 5), 1, 40)
    return {
        "prompt": f"Sort the list {_show(values)} from smallest to largest. {EXACT_HINT}",
        "answer": _list_regex(sorted(values)),
        "grader": "regex",
    }


def _list_sum(rng: random.Random) -> Draft:
    values = _numbers(rng, rng.randint(4, 5), 10, 99)
    return _number(f"What is the sum of the numbers in {_show(values)}?", sum(values))


def _max_with_negatives(rng: random.Random) -> Draft:
    values = _numbers(rng, 5, -30, 30)
    return _number(f"What is the largest number in the list {_show(values)}?", max(values))


def _sort_descending(rng: random.Random) -> Draft:
    values = _unsorted(rng, rng.randint(6, 7), -20, 60)
    return {
        "prompt": f"Sort the list {_show(values)} from largest to smallest. {EXACT_HINT}",
        "answer": _list_regex(sorted(values, reverse=True)),
        "grader": "regex",
    }


def _second_largest(rng: random.Random) -> Draft:
    values = rng.sample(range(1, 100), 6)
    return _number(
        f"What is the second largest number in the list {_show(values)}?", sorted(values)[-2]
    )


def _count_even(rng: random.Random) -> Draft:
    values = _numbers(rng, 7, 1, 50)
    return _number(
        f"How many even numbers are in the list {_show(values)}?",
        sum(value % 2 == 0 for value in values),
    )


def _average(rng: random.Random) -> Draft:
    count, mean = rng.randint(3, 5), rng.randint(5, 30)
    values = _numbers(rng, count - 1, 1, 2 * mean)
    while not 1 <= count * mean - sum(values) <= 99:  # the last value, which sets the mean
        values = _numbers(rng, count - 1, 1, 2 * mean)
    values.append(count * mean - sum(values))
    rng.shuffle(values)
    return _number(
        f"What is the average of the numbers {_show(values)}?", Fraction(sum(values), count)
    )


# small logic (multiple choice)

COMPARATIVES = (
    ("taller", "tallest", "shortest"),
    ("older", "oldest", "youngest"),
    ("faster", "fastest", "slowest"),
    ("heavier", "heaviest", "lightest"),
)
NONSENSE = ("bloops", "razzies", "lazzies", "wugs", "daxes", "feps", "tovs", "glims", "zorbs")
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


def _larger(rng: random.Random) -> Draft:
    a, b = rng.sample(range(1, 100), 2)
    return _choice(rng, "Which number is larger?", str(max(a, b)), [str(min(a, b))])


def _smaller(rng: random.Random) -> Draft:
    a, b, c = rng.sample(range(1, 100), 3)
    ordered = sorted((a, b, c))
    return _choice(
        rng, "Which number is the smallest?", str(ordered[0]), [str(v) for v in ordered[1:]]
    )


def _greater_yes_no(rng: random.Random) -> Draft:
    a, b = rng.sample(range(1, 50), 2)
    return _choice(
        rng, f"Is {a} greater than {b}?", "Yes" if a > b else "No", ["No" if a > b else "Yes"]
    )


def _even_one(rng: random.Random) -> Draft:
    even = 2 * rng.randint(1, 40)
    odds = [2 * k + 1 for k in rng.sample(range(40), 2)]
    return _choice(rng, "Which of these numbers is even?", str(even), [str(v) for v in odds])


def _order_three(rng: random.Random) -> Draft:
    comparative, most, least = rng.choice(COMPARATIVES)
    people = rng.sample(NAMES, 3)  # people[0] is the most, people[2] the least
    facts = [
        f"{people[0]} is {comparative} than {people[1]}.",
        f"{people[1]} is {comparative} than {people[2]}.",
    ]
    rng.shuffle(facts)
    wanted = rng.choice((most, least))
    answer = people[0] if wanted == most else people[2]
    return _choice(
        rng, f"{' '.join(facts)} Who is the {wanted}?", answer, [p for p in people if p != answer]
    )


def _syllogism_valid(rng: random.Random) -> Draft:
    x, y, z = rng.sample(NONSENSE, 3)
    return _choice(
        rng, f"All {x} are {y}. All {y} are {z}. Are all {x} {z}?", "Yes", ["No", "Cannot tell"]
    )


def _days_later(rng: random.Random) -> Draft:
    start, later = rng.randrange(7), rng.randint(1, 6)
    answer = DAYS[(start + later) % 7]
    wrong = rng.sample([day for day in DAYS if day != answer], 3)
    return _choice(
        rng,
        f"Today is {DAYS[start]}. What day of the week will it be in {later} days?",
        answer,
        wrong,
    )


def _order_four(rng: random.Random) -> Draft:
    comparative, most, least = rng.choice(COMPARATIVES)
    people = rng.sample(NAMES, 4)
    facts = [f"{people[i]} is {comparative} than {people[i + 1]}." for i in range(3)]
    rng.shuffle(facts)
    position, label = rng.choice(((1, f"second {most}"), (2, f"second {least}")))
    answer = people[position]
    return _choice(
        rng, f"{' '.join(facts)} Who is the {label}?", answer, [p for p in people if p != answer]
    )


def _syllogism_invalid(rng: random.Random) -> Draft:
    x, y, z = rng.sample(NONSENSE, 3)
    return _choice(
        rng,
        f"All {x} are {y}. Some {y} are {z}. Must some {x} be {z}?",
        "Cannot tell",
        ["Yes", "No"],
    )


def _syllogism_none(rng: random.Random) -> Draft:
    x, y, z = rng.sample(NONSENSE, 3)
    return _choice(
        rng, f"All {x} are {y}. No {y} are {z}. Can a {x} be a {z}?", "No", ["Yes", "Cannot tell"]
    )


def _conditional(rng: random.Random) -> Draft:
    cause, effect, negated = rng.choice(
        (
            ("it rains", "the street gets wet", "the street is not wet"),
            ("the alarm rings", "Ben wakes up", "Ben did not wake up"),
            ("the oven is on", "the kitchen is warm", "the kitchen is not warm"),
        )
    )
    if rng.random() < 0.5:
        return _choice(
            rng,
            f"If {cause}, {effect}. We know that {negated}. Did it happen that {cause}?",
            "No",
            ["Yes", "Cannot tell"],
        )
    return _choice(
        rng,
        f"If {cause}, {effect}. We know that {effect}. Must it be that {cause}?",
        "Cannot tell",
        ["Yes", "No"],
    )


# small Python functions (code grader); `answer` holds a reference solution


def _code(signature: str, description: str, tests: list[str], solution: str) -> Draft:
    return {
        "prompt": f"Write a Python function `{signature}` that {description}. {CODE_HINT}",
        "tests": "\n".join(tests) + "\n",
        "answer": solution,
        "grader": "code",
    }


def _code_add(rng: random.Random) -> Draft:
    k = rng.randint(2, 99)
    return _code(
        "add_k(x)",
        f"returns x plus {k}",
        [f"assert add_k({x}) == {x + k}" for x in (0, 5, -3)],
        f"def add_k(x):\n    return x + {k}\n",
    )


def _code_times(rng: random.Random) -> Draft:
    k = rng.randint(2, 12)
    return _code(
        "times_k(x)",
        f"returns x multiplied by {k}",
        [f"assert times_k({x}) == {x * k}" for x in (1, 7, 0, -2)],
        f"def times_k(x):\n    return x * {k}\n",
    )


def _code_multiple(rng: random.Random) -> Draft:
    k = rng.randint(2, 9)
    cases = [k, 3 * k, k + 1, 1, 0]
    return _code(
        "is_multiple(n)",
        f"returns True when n is divisible by {k} and False otherwise",
        [f"assert is_multiple({n}) == {n % k == 0}" for n in cases],
        f"def is_multiple(n):\n    return n % {k} == 0\n",
    )


def _code_greet(rng: random.Random) -> Draft:
    word = rng.choice(("Hello", "Hi", "Welcome", "Good morning", "Greetings"))
    mark = rng.choice(("!", "."))
    return _code(
        "greet(name)",
        f"returns the string '{word}, ' followed by the name and '{mark}', e.g. "
        f"greet('Ana') returns '{word}, Ana{mark}'",
        [f"assert greet({name!r}) == {f'{word}, {name}{mark}'!r}" for name in ("Bo", "Li Wei")],
        f"def greet(name):\n    return {word + ', '!r} + name + {mark!r}\n",
    )


def _code_count_char(rng: random.Random) -> Draft:
    letter = rng.choice("aeiorstn")
    words = ("banana", "", "strawberry", "mississippi", "tennis")
    return _code(
        "count_char(s)",
        f"returns how many times the character '{letter}' appears in the string s",
        [f"assert count_char({w!r}) == {w.count(letter)}" for w in words],
        f"def count_char(s):\n    return s.count({letter!r})\n",
    )


def _code_sum_above(rng: random.Random) -> Draft:
    t = rng.randint(0, 10)
    lists: tuple[list[int], ...] = ([1, 5, 12, 20], [], [t, t + 1, t - 1], [-5, 30])
    return _code(
        "sum_above(xs)",
        f"returns the sum of the numbers in the list xs that are greater than {t}",
        [f"assert sum_above({xs}) == {sum(x for x in xs if x > t)}" for xs in lists],
        f"def sum_above(xs):\n    return sum(x for x in xs if x > {t})\n",
    )


def _code_repeat(rng: random.Random) -> Draft:
    k = rng.randint(2, 6)
    separator = rng.choice(("", "-", " "))
    joined = f"joined by '{separator}'" if separator else "with nothing between the copies"
    return _code(
        "repeat(s)",
        f"returns the string s repeated {k} times, {joined}",
        [f"assert repeat({s!r}) == {separator.join([s] * k)!r}" for s in ("ab", "x", "hi")],
        f"def repeat(s):\n    return {separator!r}.join([s] * {k})\n",
    )


def _code_fizz(rng: random.Random) -> Draft:
    k = rng.randint(3, 7)
    word = rng.choice(("Fizz", "Buzz", "Bang"))
    cases = [k, 2 * k, 1, k + 1, 0]
    return _code(
        "label(n)",
        f"returns '{word}' when n is divisible by {k} and otherwise str(n)",
        [f"assert label({n}) == {word if n % k == 0 else str(n)!r}" for n in cases],
        f"def label(n):\n    return {word!r} if n % {k} == 0 else str(n)\n",
    )


def _code_sum_multiples(rng: random.Random) -> Draft:
    a, b = rng.sample(range(2, 8), 2)

    def expected(n: int) -> int:
        return sum(i for i in range(1, n) if i % a == 0 or i % b == 0)

    return _code(
        "sum_multiples(n)",
        f"returns the sum of all positive integers below n that are divisible by {a} or {b}",
        [f"assert sum_multiples({n}) == {expected(n)}" for n in (1, 10, 20, 100)],
        f"def sum_multiples(n):\n    return sum(i for i in range(1, n) if i % {a} == 0 "
        f"or i % {b} == 0)\n",
    )


def _code_sequence(rng: random.Random) -> Draft:
    first, second = rng.randint(0, 5), rng.randint(1, 5)
    sequence = [first, second]
    while len(sequence) < 12:
        sequence.append(sequence[-1] + sequence[-2])
    return _code(
        "seq(n)",
        f"returns the n-th term (counting from 0) of the sequence that starts {first}, "
        f"{second} and where every later term is the sum of the two before it",
        [f"assert seq({n}) == {sequence[n]}" for n in (0, 1, 2, 5, 11)],
        f"def seq(n):\n    a, b = {first}, {second}\n    for _ in range(n):\n"
        "        a, b = b, a + b\n    return a\n",
    )


def _code_digit_powers(rng: random.Random) -> Draft:
    power = rng.randint(2, 4)
    return _code(
        "digit_power_sum(n)",
        f"returns the sum of the digits of the non-negative integer n, each raised to the "
        f"power {power}",
        [
            f"assert digit_power_sum({n}) == {sum(int(d) ** power for d in str(n))}"
            for n in (0, 7, 123, 9045)
        ],
        f"def digit_power_sum(n):\n    return sum(int(d) ** {power} for d in str(n))\n",
    )


def _code_chunks(rng: random.Random) -> Draft:
    k = rng.randint(2, 4)
    lists: tuple[list[int], ...] = (list(range(1, 8)), [], [5] * k)
    return _code(
        "chunks(xs)",
        f"splits the list xs into consecutive lists of {k} items (the last one may be "
        "shorter) and returns the list of those lists",
        [f"assert chunks({xs}) == {[xs[i : i + k] for i in range(0, len(xs), k)]}" for xs in lists],
        f"def chunks(xs):\n    return [xs[i:i + {k}] for i in range(0, len(xs), {k})]\n",
    )


Maker = Callable[[random.Random], Draft]
FAMILIES: dict[str, dict[int, tuple[Maker, ...]]] = {
    "arithmetic": {
        1: (_add, _subtract, _times_table),
        2: (_three_terms, _multiply_add, _buy_and_give),
        3: (_brackets, _change, _percent, _share),
    },
    "unit_conversion": {
        1: (_scale_up,),
        2: (_scale_down, _feet),
        3: (_hours_and_minutes, _speed, _celsius, _fahrenheit, _hours_to_seconds),
    },
    "string": {
        1: (_uppercase, _lowercase, _first_letter, _last_letter, _length),
        2: (_reverse, _count_letter),
        3: (_reverse_long, _reverse_sentence, _remove_vowels, _acronym, _sort_letters),
    },
    "list": {
        1: (_list_max, _list_min, _list_sum_small, _list_length),
        2: (_sort_ascending, _list_sum, _max_with_negatives),
        3: (_sort_descending, _second_largest, _count_even, _average),
    },
    "logic": {
        1: (_larger, _smaller, _greater_yes_no, _even_one),
        2: (_order_three, _syllogism_valid, _days_later),
        3: (_order_four, _syllogism_invalid, _syllogism_none, _conditional),
    },
    "code": {
        1: (_code_add, _code_times, _code_multiple, _code_greet),
        2: (_code_count_char, _code_sum_above, _code_repeat, _code_fizz),
        3: (_code_sum_multiples, _code_sequence, _code_digit_powers, _code_chunks),
    },
}
