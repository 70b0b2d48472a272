"""The generator of the built-in task families: checkable tasks of six families
(arithmetic, unit conversions, string and list manipulation, small logic, small Python
functions) for offline use and the demo, mostly easy so that small workers sometimes succeed
and sometimes fail.

Each family maps a difficulty (1 easy, 2 medium, 3 hard) to draft makers: a maker draws one
task's prompt, answer and grader from a random generator; `generate_tasks` gives the drafts
their ids, family, difficulty and split. The task format itself lives in `tasks`.

This module holds the registry (`FAMILIES`), `generate_tasks` and `check_families`; each
family's makers live in a module of their own (`arithmetic`, `units`, `strings`, `lists`,
`logic`, `python_code`), and what they share (hints, drafts) in `drafts`.
"""

from __future__ import annotations

import difflib
import random
import re
from collections.abc import Iterator, Sequence

from ..datasets.split import standard_split
from ..tasks import Task
from . import arithmetic, lists, logic, python_code, strings, units
from .drafts import Maker, question_key

DIFFICULTY_WEIGHTS = (0.5, 0.3, 0.2)
"""Share of easy / medium / hard tasks: the default workers are 135M-parameter models."""

REPEATS_BEFORE_GIVING_UP = 10_000
"""Prompts drawn again in a row after which a family is taken to have run out of new ones
(a rare unit conversion comes about once in 2,400 draws); without it a huge count per family
went on drawing 50 a task asked for (half an hour for a million)."""

MAX_PER_FAMILY = 100_000
"""`tasks generate --per-family` at most: the families that do not run out of prompts make
thousands a second, so a typo's extra zeros ran for hours and filled the disk."""

FAMILIES: dict[str, dict[int, tuple[Maker, ...]]] = {
    "arithmetic": arithmetic.MAKERS,
    "unit_conversion": units.MAKERS,
    "string": strings.MAKERS,
    "list": lists.MAKERS,
    "logic": logic.MAKERS,
    "code": python_code.MAKERS,
}


def generate_tasks(
    n_per_family: int = 10, seed: int = 0, families: Sequence[str] | None = None
) -> list[Task]:
    """`n_per_family` tasks of each family (of `families`, default all), the same for the
    same seed, no question twice (nor with its options reordered). A family's tasks do not
    depend on which others are asked for."""
    if n_per_family < 0:
        raise ValueError(f"n_per_family must be >= 0, got {n_per_family}")
    chosen = [family for family in FAMILIES if family in check_families(families)]
    seen: set[str] = set()
    drawing = {family: family_tasks(family, n_per_family, seed, seen) for family in chosen}
    made: dict[str, list[Task]] = {family: [] for family in chosen}
    # the families take turns, so one that runs out of prompts refuses a count it cannot
    # reach before the others have made that many
    while drawing:
        for family, tasks in list(drawing.items()):
            task = next(tasks, None)
            if task is None:
                del drawing[family]
            else:
                made[family].append(task)
    return [task for family in chosen for task in made[family]]


def family_tasks(family: str, n_per_family: int, seed: int, seen: set[str]) -> Iterator[Task]:
    """One family's tasks in turn, each asking a question not in `seen` (which it adds to);
    raises ValueError when the family's prompts run out before `n_per_family`."""
    makers = FAMILIES[family]
    rng = random.Random(f"fugu-lite-tasks:{seed}:{family}")
    made = 0
    attempts = 0
    repeats_in_a_row = 0
    while made < n_per_family:
        attempts += 1
        if attempts > 200 + 50 * n_per_family or repeats_in_a_row > REPEATS_BEFORE_GIVING_UP:
            raise ValueError(
                f"could not make {n_per_family} different {family} tasks: it made {made} "
                "before its prompts kept repeating; ask for fewer per family"
            )
        difficulty = rng.choices((1, 2, 3), weights=DIFFICULTY_WEIGHTS)[0]
        draft = rng.choice(makers[difficulty])(rng)
        question = question_key(draft)
        if question in seen:
            repeats_in_a_row += 1
            continue
        repeats_in_a_row = 0
        seen.add(question)
        yield Task.model_validate(
            {
                "id": f"{family}-s{seed}-{made:04d}",
                "task": family,
                "difficulty": difficulty,
                "split": standard_split(str(draft["prompt"])),
                **draft,
            }
        )
        made += 1


def check_families(families: Sequence[str] | None) -> set[str]:
    """The families asked for (all when None); an unknown name raises ValueError naming it,
    the nearest family and all of them."""
    if families is None:
        return set(FAMILIES)
    if isinstance(families, str):  # one family: a str is a Sequence[str] of its letters
        families = [families]
    known = ", ".join(FAMILIES)
    if not families:
        raise ValueError(f"no task family asked for; choose among {known}")
    for family in families:
        names = [name for name in re.split(r"[\s,;]+", family) if name]
        if family not in FAMILIES and len(names) > 1:
            repeated = " ".join(f"--family {name}" for name in names)
            raise ValueError(
                f"task family {family!r} names several families in one; give each on its "
                f"own, repeating the option ({repeated}); known families: {known}"
            )
        if family not in FAMILIES:
            close = difflib.get_close_matches(family, FAMILIES, n=1, cutoff=0.5)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise ValueError(f"unknown task family {family!r}; {hint}known families: {known}")
    return set(families)
