"""Small Python function tasks for the code grader; a task's `answer` holds a reference solution."""

from __future__ import annotations

import random

from .drafts import CODE_HINT, Draft, Maker


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
    # k + 2, even and no multiple for an even k above 2: "n % 2 == 0" passed the others
    cases = [k, 3 * k, k + 1, 1, 0, k + 2]
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
    # each letter in some word twice or more ("tattoo" for 'o': a function returning 0 passed
    # them; "cheese" for 'e': one returning whether it appears did)
    words = ("banana", "", "strawberry", "mississippi", "tennis", "tattoo", "cheese")
    return _code(
        "count_char(s)",
        f"returns how many times the character '{letter}' appears in the string s",
        [f"assert count_char({w!r}) == {w.count(letter)}" for w in words],
        f"def count_char(s):\n    return s.count({letter!r})\n",
    )


def _code_sum_above(rng: random.Random) -> Draft:
    t = rng.randint(0, 10)
    # the last list starts above t and repeats a number: a set comprehension summing each
    # number once, or a loop from index 1, passed the others
    lists: tuple[list[int], ...] = (
        [1, 5, 12, 20], [], [t, t + 1, t - 1], [-5, 30], [t + 4, -20, t + 4],
    )  # fmt: skip
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
    cases = [k, 2 * k, 1, k + 1, 0, k + 2]  # k + 2: see _code_multiple
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
        # a * b, divisible by both: "below n" is not "up to n" (for 3 and 7 no other n told)
        [f"assert sum_multiples({n}) == {expected(n)}" for n in sorted({1, 10, 20, 100, a * b})],
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
    # the last list ends on a chunk of one item for every k (the first does not for k = 4)
    lists: tuple[list[int], ...] = (list(range(1, 8)), [], [5] * k, list(range(1, k + 2)))
    return _code(
        "chunks(xs)",
        f"splits the list xs into consecutive lists of {k} items (the last one may be "
        "shorter) and returns the list of those lists",
        [f"assert chunks({xs}) == {[xs[i : i + k] for i in range(0, len(xs), k)]}" for xs in lists],
        f"def chunks(xs):\n    return [xs[i:i + {k}] for i in range(0, len(xs), {k})]\n",
    )


MAKERS: dict[int, tuple[Maker, ...]] = {
    1: (_code_add, _code_times, _code_multiple, _code_greet),
    2: (_code_count_char, _code_sum_above, _code_repeat, _code_fizz),
    3: (_code_sum_multiples, _code_sequence, _code_digit_powers, _code_chunks),
}
