"""Small logic tasks, multiple choice: comparisons, orderings, syllogisms, weekdays and
conditionals."""

from __future__ import annotations

import random

from .drafts import NAMES, Draft, Maker, choice_draft

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
    return choice_draft(rng, "Which number is larger?", str(max(a, b)), [str(min(a, b))])


def _smaller(rng: random.Random) -> Draft:
    a, b, c = rng.sample(range(1, 100), 3)
    ordered = sorted((a, b, c))
    return choice_draft(
        rng, "Which number is the smallest?", str(ordered[0]), [str(v) for v in ordered[1:]]
    )


def _greater_yes_no(rng: random.Random) -> Draft:
    a, b = rng.sample(range(1, 50), 2)
    return choice_draft(
        rng, f"Is {a} greater than {b}?", "Yes" if a > b else "No", ["No" if a > b else "Yes"]
    )


def _even_one(rng: random.Random) -> Draft:
    even = 2 * rng.randint(1, 40)
    odds = [2 * k + 1 for k in rng.sample(range(40), 2)]
    return choice_draft(rng, "Which of these numbers is even?", str(even), [str(v) for v in odds])


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
    return choice_draft(
        rng, f"{' '.join(facts)} Who is the {wanted}?", answer, [p for p in people if p != answer]
    )


def _syllogism_valid(rng: random.Random) -> Draft:
    x, y, z = rng.sample(NONSENSE, 3)
    return choice_draft(
        rng, f"All {x} are {y}. All {y} are {z}. Are all {x} {z}?", "Yes", ["No", "Cannot tell"]
    )


def _days_later(rng: random.Random) -> Draft:
    start, later = rng.randrange(7), rng.randint(1, 6)
    answer = DAYS[(start + later) % 7]
    wrong = rng.sample([day for day in DAYS if day != answer], 3)
    return choice_draft(
        rng,
        f"Today is {DAYS[start]}. What day of the week will it be in {later} "
        f"day{'s' * (later != 1)}?",
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
    return choice_draft(
        rng, f"{' '.join(facts)} Who is the {label}?", answer, [p for p in people if p != answer]
    )


# a premise that settles nothing is asked as "Are ...?", never "Must ...?": "No" (it need
# not be) would answer a "must" as well as "Cannot tell"
def _syllogism_invalid(rng: random.Random) -> Draft:
    x, y, z = rng.sample(NONSENSE, 3)
    return choice_draft(
        rng,
        f"All {x} are {y}. Some {y} are {z}. Are some {x} {z}?",
        "Cannot tell",
        ["Yes", "No"],
    )


def _syllogism_none(rng: random.Random) -> Draft:
    x, y, z = rng.sample(NONSENSE, 3)
    return choice_draft(
        rng, f"All {x} are {y}. No {y} are {z}. Can any {x} be {z}?", "No", ["Yes", "Cannot tell"]
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
        return choice_draft(
            rng,
            f"If {cause}, {effect}. We know that {negated}. Did it happen that {cause}?",
            "No",
            ["Yes", "Cannot tell"],
        )
    return choice_draft(
        rng,
        f"If {cause}, {effect}. We know that {effect}. Did it happen that {cause}?",
        "Cannot tell",
        ["Yes", "No"],
    )


MAKERS: dict[int, tuple[Maker, ...]] = {
    1: (_larger, _smaller, _greater_yes_no, _even_one),
    2: (_order_three, _syllogism_valid, _days_later),
    3: (_order_four, _syllogism_invalid, _syllogism_none, _conditional),
}
