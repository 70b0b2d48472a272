"""Arithmetic tasks: sums, products, brackets, percentages and short word problems."""

from __future__ import annotations

import random
from fractions import Fraction

from .drafts import NAMES, Draft, Maker, number_draft

ITEMS = ("apples", "marbles", "stickers", "pencils", "cookies", "stamps", "shells", "cards")


def _add(rng: random.Random) -> Draft:
    a, b = rng.randint(1, 20), rng.randint(1, 20)
    return number_draft(f"What is {a} + {b}?", a + b)


def _subtract(rng: random.Random) -> Draft:
    a, b = sorted((rng.randint(1, 20), rng.randint(1, 20)), reverse=True)
    return number_draft(f"What is {a} - {b}?", a - b)


def _times_table(rng: random.Random) -> Draft:
    a, b = rng.randint(2, 9), rng.randint(2, 9)
    return number_draft(f"What is {a} * {b}?", a * b)


def _three_terms(rng: random.Random) -> Draft:
    a, b, c = rng.randint(10, 60), rng.randint(10, 60), rng.randint(1, 20)
    return number_draft(f"What is {a} + {b} - {c}?", a + b - c)


def _multiply_add(rng: random.Random) -> Draft:
    a, b, c = rng.randint(3, 15), rng.randint(3, 12), rng.randint(1, 30)
    return number_draft(f"What is {a} * {b} + {c}?", a * b + c)


def _buy_and_give(rng: random.Random) -> Draft:
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    a, b = rng.randint(5, 30), rng.randint(2, 15)
    c = rng.randint(1, a + b - 1)
    return number_draft(
        f"{name} has {a} {item}. {name} gets {b} more and then gives away {c}. "
        f"How many {item} does {name} have now?",
        a + b - c,
    )


def _brackets(rng: random.Random) -> Draft:
    a, b, c = rng.randint(2, 20), rng.randint(2, 20), rng.randint(2, 9)
    d = rng.randint(1, (a + b) * c - 1)
    return number_draft(f"What is ({a} + {b}) * {c} - {d}?", (a + b) * c - d)


def _change(rng: random.Random) -> Draft:
    name = rng.choice(NAMES)
    price, count = rng.randint(2, 12), rng.randint(2, 6)
    bill = next(note for note in (20, 50, 100) if note > price * count)
    return number_draft(
        f"A notebook costs ${price}. {name} buys {count} notebooks and pays with a ${bill} "
        f"bill. How much change, in dollars, does {name} get?",
        bill - price * count,
    )


def _percent(rng: random.Random) -> Draft:
    percent = rng.choice((10, 20, 25, 50, 75))
    base = 20 * rng.randint(1, 20)
    return number_draft(f"What is {percent}% of {base}?", Fraction(percent * base, 100))


def _share(rng: random.Random) -> Draft:
    children, each = rng.randint(2, 8), rng.randint(3, 12)
    eaten = rng.randint(1, each - 1)
    return number_draft(
        f"{children * each} candies are shared equally among {children} children. Each "
        f"child then eats {eaten} of them. How many candies does each child have left?",
        each - eaten,
    )


MAKERS: dict[int, tuple[Maker, ...]] = {
    1: (_add, _subtract, _times_table),
    2: (_three_terms, _multiply_add, _buy_and_give),
    3: (_brackets, _change, _percent, _share),
}
