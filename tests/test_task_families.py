"""The task-family generator: deterministic, varied, and every task self-gradable."""

from __future__ import annotations

import ast
import asyncio
import hashlib
import inspect
import math
import os
import random
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from types import ModuleType

import pytest
from cli_support import flat, invoke

from fugu_lite.datasets import standard_split
from fugu_lite.sandbox import SandboxLimits
from fugu_lite.scoring import grade
from fugu_lite.task_families import (
    FAMILIES,
    REPEATS_BEFORE_GIVING_UP,
    generate_tasks,
)
from fugu_lite.task_families.drafts import (
    CHOICE_HINT,
    CODE_HINT,
    EXACT_HINT,
    NUMBER_HINT,
    choice_draft,
    question_key,
)
from fugu_lite.task_families.lists import list_regex
from fugu_lite.tasks import Task


def test_generator_is_deterministic_and_varied() -> None:
    first = generate_tasks(n_per_family=12, seed=3)
    assert first == generate_tasks(n_per_family=12, seed=3)
    other = generate_tasks(n_per_family=12, seed=4)
    assert {t.prompt for t in first} != {t.prompt for t in other}
    assert not {t.id for t in first} & {t.id for t in other}  # two seeds' sets can be merged
    assert Counter(task.task for task in first) == {family: 12 for family in FAMILIES}
    assert len({task.id for task in first}) == len({task.prompt for task in first}) == len(first)
    for task in first:
        assert task.split == standard_split(task.prompt_text())


def test_generator_mixes_difficulties_mostly_easy() -> None:
    tasks = generate_tasks(n_per_family=60, seed=0)
    levels = Counter(task.difficulty for task in tasks)
    assert levels[1] > levels[2] > levels[3] > 0
    graders = Counter(task.grader for task in tasks)
    assert set(graders) == {"number", "choice", "exact", "regex", "code"}
    assert Counter(task.split for task in tasks)["test"] > 0.1 * len(tasks)


def test_generator_scales_to_many_tasks_per_family() -> None:
    tasks = generate_tasks(n_per_family=150, seed=1)
    assert len({task.prompt for task in tasks}) == 6 * 150


def test_generator_refuses_impossible_requests() -> None:
    with pytest.raises(ValueError, match=">= 0"):
        generate_tasks(-1)
    assert generate_tasks(0) == []
    with pytest.raises(ValueError, match=r"made (\d+) before its prompts kept repeating") as info:
        generate_tasks(3000, families=["unit_conversion"])
    assert str(info.value).endswith("; ask for fewer per family")  # what to do
    found = re.search(r"made (\d+)", str(info.value))
    assert found is not None
    made = int(found.group(1))
    assert 0 < made < 3000
    assert len(generate_tasks(made // 2, families=["unit_conversion"])) == made // 2
    # it gives up after many repeats in a row, not after as many repeats in all: the last
    # new prompts come after ever longer runs of repeats (in all, it gave up at 684)
    assert made > 800
    assert len(generate_tasks(800, families=["unit_conversion"])) == 800


def scripted_units(monkeypatch: pytest.MonkeyPatch, prompts: Callable[[int], str]) -> list[str]:
    """The unit family's makers replaced by one giving `prompts(n)` on its n-th draw (from
    0); the list of prompts drawn so far is returned, growing as the generator draws."""
    drawn: list[str] = []

    def draw(rng: random.Random) -> dict[str, object]:
        drawn.append(prompts(len(drawn)))
        return {"prompt": drawn[-1], "answer": "1", "grader": "number"}

    monkeypatch.setitem(FAMILIES, "unit_conversion", {level: (draw,) for level in (1, 2, 3)})
    return drawn


def test_a_family_is_given_up_after_exactly_its_bound_of_repeats_in_a_row(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A rare unit conversion comes about once in 2,400 draws: a run of that many repeats
    must not end the family, and one of REPEATS_BEFORE_GIVING_UP + 1 must, at once (the
    made > 800 of the unit family's own test let a bound of 1,000 through)."""

    def prompts(n: int) -> str:  # 300 new, 2,400 repeats, one new more, then repeats
        return f"new {n}?" if n < 300 or n == 2700 else "new 0?"

    drawn = scripted_units(monkeypatch, prompts)
    assert len(generate_tasks(301, families=["unit_conversion"])) == 301
    assert len(drawn) == 2701
    drawn.clear()
    with pytest.raises(ValueError, match="could not make 302 different unit_conversion tasks"):
        generate_tasks(302, families=["unit_conversion"])
    assert len(drawn) == 2701 + REPEATS_BEFORE_GIVING_UP + 1
    monkeypatch.undo()
    # the real unit family likewise: the bound of repeats, not of draws per task, ends it
    drawn = []
    monkeypatch.setitem(
        FAMILIES,
        "unit_conversion",
        {
            level: tuple(
                (lambda rng, maker=maker: drawn.append(maker(rng)) or drawn[-1]) for maker in makers
            )
            for level, makers in FAMILIES["unit_conversion"].items()
        },
    )
    with pytest.raises(ValueError, match="could not make 3000 different"):
        generate_tasks(3000, families=["unit_conversion"])
    prompts_drawn = [str(draft["prompt"]) for draft in drawn]
    last_new = max(prompts_drawn.index(prompt) for prompt in set(prompts_drawn))
    assert len(drawn) - 1 - last_new == REPEATS_BEFORE_GIVING_UP + 1


def test_generated_ids_name_family_seed_and_place() -> None:
    """Ids are how collect resumes and records name their task: one version's ids must be
    the next one's for the same seed."""
    tasks = generate_tasks(n_per_family=2, seed=5, families=["arithmetic", "code"])
    assert [task.id for task in tasks] == [
        "arithmetic-s5-0000", "arithmetic-s5-0001", "code-s5-0000", "code-s5-0001",
    ]  # fmt: skip


def test_chosen_families_give_the_same_tasks_as_in_the_full_set() -> None:
    chosen = generate_tasks(5, seed=2, families=["code", "arithmetic"])
    assert Counter(task.task for task in chosen) == {"arithmetic": 5, "code": 5}
    full = generate_tasks(5, seed=2)
    assert chosen == [task for task in full if task.task in ("arithmetic", "code")]


def test_an_unknown_family_is_refused_with_the_known_ones() -> None:
    with pytest.raises(
        ValueError, match="unknown task family 'lists'; did you mean 'list'"
    ) as info:
        generate_tasks(2, families=["code", "lists"])
    assert ", ".join(FAMILIES) in str(info.value)
    with pytest.raises(ValueError, match="no task family"):
        generate_tasks(2, families=[])


def reference_output(task: Task) -> str:
    """A realistic reply holding the task's reference answer."""
    answer = task.answer or ""
    if task.grader == "number":
        return f"Let me work it out step by step.\nSo the answer is {answer}."
    if task.grader == "choice":
        return f"Thinking about the options... The correct option is ({answer})."
    if task.grader == "regex":
        values = [int(v) for v in re.findall(r"-?\d+", task.prompt_text().split("]")[0])]
        descending = "largest to smallest" in task.prompt_text()
        return f"The sorted list is {sorted(values, reverse=descending)}."
    if task.grader == "code":
        return f"Here is the function:\n```python\n{answer}```\nIt handles every case."
    return answer


def wrong_output(task: Task) -> str:
    answer = task.answer or ""
    if task.grader == "number":
        return f"The answer is {float(answer) + 1:g}."
    if task.grader == "choice":
        return "Answer: " + ("B" if answer != "B" else "A")
    if task.grader == "regex":  # echoing the unsorted input is wrong
        return task.prompt_text().split("[")[1].split("]")[0]
    if task.grader == "code":
        return "```python\ndef unrelated():\n    return None\n```"
    if task.case_sensitive:
        return answer.swapcase()
    return answer + "x"


async def grade_all(tasks: list[Task], make_output) -> list[float | None]:
    limits = SandboxLimits(timeout_s=10)
    grades = await asyncio.gather(*(grade(t, make_output(t), sandbox=limits) for t in tasks))
    for task, result in zip(tasks, grades, strict=True):
        assert result.error is None, (task.id, result.error)
    return [result.score for result in grades]


@pytest.mark.parametrize(
    ("output", "score"),
    [
        ("The sorted list is [-3, 5, 12].", 1.0),
        ("Sorted: -3 5 12. Done.", 1.0),
        ("[-3, 5, 12], three numbers", 1.0),
        ("[-3, 5, 12, 12]", 0.0),  # an element too many, after or before
        ("[-7, -3, 5, 12]", 0.0),
        ("-3 5 12 40", 0.0),
        ("-3 5 12 -40", 0.0),  # also a negative one after
        ("[-3, 5, 12, -40]", 0.0),
        ("[-3, 5, 12.5]", 0.0),
    ],
)
def test_a_sorted_list_task_wants_exactly_the_list(output: str, score: float) -> None:
    prompt = "Sort the list [12, -3, 5] from smallest to largest."
    task = Task(id="s1", prompt=prompt, answer=list_regex([-3, 5, 12]), grader="regex", task="sort")
    assert asyncio.run(grade(task, output)).score == score


@pytest.mark.parametrize(
    ("output", "score"),
    [("[3, 5, 12]", 1.0), ("3; 5; 12", 1.0), ("[-3, 5, 12]", 0.0), ("-3 5 12", 0.0)],
)
def test_a_sorted_list_task_reads_a_semicolon_and_refuses_a_sign_the_list_lacks(
    output: str, score: float
) -> None:
    """A minus before the first number is another number: "[-3, 5, 12]" does not sort
    [12, 3, 5]; a semicolon separates as a comma does."""
    prompt = "Sort the list [12, 3, 5] from smallest to largest."
    task = Task(id="s2", prompt=prompt, answer=list_regex([3, 5, 12]), grader="regex", task="sort")
    assert asyncio.run(grade(task, output)).score == score


def test_every_generated_task_grades_its_reference_1_and_a_wrong_answer_0() -> None:
    tasks = generate_tasks(n_per_family=15, seed=11)
    right = asyncio.run(grade_all(tasks, reference_output))
    assert [t.id for t, s in zip(tasks, right, strict=True) if s != 1.0] == []
    wrong = asyncio.run(grade_all(tasks, wrong_output))
    assert [t.id for t, s in zip(tasks, wrong, strict=True) if s != 0.0] == []


def listed(task: Task) -> list[int]:
    return [int(value) for value in re.findall(r"-?\d+", task.prompt_text().split("]")[0])]


@pytest.mark.parametrize("seed", range(6))
def test_a_generated_list_task_answers_the_list_its_prompt_shows(seed: int) -> None:
    """The answer key is computed again from the list shown: an average task once showed
    two numbers, [48, 0], with the answer 16 (their sum divided by 3)."""
    answers = {
        "average": lambda values: sum(values) / len(values),
        "second largest": lambda values: sorted(values)[-2],  # before "largest"
        "largest number in": max,
        "smallest number in": min,
        "sum of the numbers": sum,
        "How many numbers": len,
        "How many even": lambda values: sum(value % 2 == 0 for value in values),
    }
    tasks = [t for t in generate_tasks(n_per_family=60, seed=seed) if t.grader == "number"]
    checked = 0
    for task in tasks:
        for words, answer in answers.items():
            if words in task.prompt_text() and task.task == "list":
                values = listed(task)
                assert float(task.answer or "") == pytest.approx(answer(values)), task.prompt
                checked += 1
                break
    assert checked > 20


def drafts_of(family: str, draws: int = 300) -> list[dict[str, object]]:
    """`draws` drafts of each maker of `family`, each from a generator of its own seed."""
    makers = [maker for level in FAMILIES[family].values() for maker in level]
    return [maker(random.Random(draw)) for maker in makers for draw in range(draws)]


def test_a_sort_task_never_shows_its_list_in_order() -> None:
    """A list shown already sorted (or in reverse) asks nothing: echoing it would score 1.
    Every maker of the list family draws 300 tasks."""
    sorts = [draft for draft in drafts_of("list") if draft["grader"] == "regex"]
    assert len(sorts) >= 600
    for draft in sorts:
        values = [int(value) for value in re.findall(r"-?\d+", str(draft["prompt"]))]
        assert values not in (sorted(values), sorted(values, reverse=True)), draft["prompt"]


def test_a_reversing_task_never_asks_for_what_it_shows() -> None:
    """A word or words that read the same reversed ("cat dog cat", a word drawn twice)
    would be answered by echoing the question's quoted text."""
    reversals = [
        draft
        for draft in drafts_of("string")
        if re.search(r"backwards|Reverse the order", str(draft["prompt"]))
    ]
    assert len(reversals) >= 900
    for draft in reversals:
        shown = re.findall(r"'([^']*)'", str(draft["prompt"]))[-1]
        assert draft["answer"] != shown, draft["prompt"]


def test_a_letter_case_task_never_asks_for_what_it_shows() -> None:
    """Asked to write a word in lowercase, a word shown in lowercase would be answered by
    echoing it (and so would one in uppercase asked in uppercase)."""
    case_tasks = [
        draft for draft in drafts_of("string") if re.search(r"case letters\.", str(draft["prompt"]))
    ]
    assert len(case_tasks) >= 600
    for draft in case_tasks:
        shown = re.findall(r"'([^']*)'", str(draft["prompt"]))[-1]
        assert draft["answer"] != shown, draft["prompt"]


def string_words_by_level(asked: str) -> dict[int, set[str]]:
    """The quoted words of the string family's drafts whose prompt holds `asked`, by level."""
    return {
        level: {
            re.findall(r"'([^']*)'", str(draft["prompt"]))[-1]
            for maker in makers
            for draft in (maker(random.Random(draw)) for draw in range(300))
            if asked in str(draft["prompt"])
        }
        for level, makers in FAMILIES["string"].items()
    }


def test_a_harder_reversal_is_of_a_longer_word() -> None:
    """Reversing a word is a level 2 task and a level 3 one: the harder one must reverse a
    longer word than any the easier one asks, not the same words again."""
    words = string_words_by_level("backwards")
    assert words[2] and words[3]
    assert max(map(len, words[2])) < min(map(len, words[3]))


def test_an_acronym_task_joins_the_letters_of_several_words() -> None:
    """An acronym of one word is the first letter of that word, a level 1 task asked in a
    level 3 maker."""
    words = string_words_by_level("first letter of each word")[3]
    assert len(words) > 100
    assert min(len(shown.split()) for shown in words) >= 2


def test_a_second_largest_question_shows_no_number_twice() -> None:
    """ "What is the second largest number in the list [9, 4, 9, 2]?" is 9 (the second of
    the sorted entries) or 4 (the second of the different numbers); the list test's own
    sorted(values)[-2] agrees with the first, so a maker drawing repeats passed it."""
    asked = [d for d in drafts_of("list") if "second largest" in str(d["prompt"])]
    assert len(asked) >= 300
    for draft in asked:
        values = re.findall(r"-?\d+", str(draft["prompt"]).split("]")[0])
        assert len(set(values)) == len(values), draft["prompt"]


def test_an_arithmetic_answer_is_never_negative_nor_a_story_left_with_nothing() -> None:
    """The arithmetic family is for small workers: "What is 3 - 17?", "(4 + 2) * 3 - 25",
    a story giving away more than was had, paying $20 for $20 of notebooks, or each child
    eating every candy had keys the solver agrees with, so no other test saw them."""
    answers = {str(d["prompt"]): Fraction(str(d["answer"])) for d in drafts_of("arithmetic")}
    assert [prompt for prompt, answer in answers.items() if answer < 0] == []
    stories = {p: a for p, a in answers.items() if not p.startswith("What is")}
    assert len(stories) > 300
    assert [prompt for prompt, answer in stories.items() if answer <= 0] == []


def test_a_unit_conversion_never_converts_nothing() -> None:
    """ "Convert 0 centimeters to meters." or "0 kilometers per hour" asks for 0 in any unit:
    a worker knowing no conversion answers it. A temperature of 0 is a real one (0 degrees
    Celsius is 32 degrees Fahrenheit). Every maker of the unit family draws 300 tasks."""
    drafts = [d for d in drafts_of("unit_conversion") if "degrees" not in str(d["prompt"])]
    assert len(drafts) > 1000
    for draft in drafts:
        quantities = [int(n) for n in re.findall(r"-?\d+", str(draft["prompt"]))]
        assert min(quantities, default=1) > 0 < Fraction(str(draft["answer"])), draft["prompt"]


def test_a_choice_question_lists_each_option_once() -> None:
    """ "Which number is larger? (A) 42 (B) 42", an even number beside the same odd one
    twice, or a weekday question offering its answer twice has no one right letter, yet the
    solver finds the key among the options and passed them all."""
    for draft in drafts_of("logic"):
        options = re.findall(r"^\([A-E]\) (.*)$", str(draft["prompt"]), re.MULTILINE)
        assert len(options) >= 2 and len(set(options)) == len(options), draft["prompt"]


def key_text(draft: dict[str, object]) -> str:
    """The text of a choice draft's right option."""
    found = re.search(rf"^\({draft['answer']}\) (.*)$", str(draft["prompt"]), re.MULTILINE)
    assert found is not None, draft["prompt"]
    return found[1]


def test_a_question_a_worker_must_work_out_is_answered_both_ways() -> None:
    """ "Is 31 greater than 12?" drawn with its larger number first (sorted draws) always
    had the key Yes, and a conditional drawn without its "the street is not wet" form always
    Cannot tell: a worker giving that one answer scored 1 on every such question, and the
    key solver agreed with each key."""
    drafts = drafts_of("logic")
    for starts, answers in (("Is ", {"Yes", "No"}), ("If ", {"No", "Cannot tell"})):
        keys = Counter(key_text(d) for d in drafts if str(d["prompt"]).startswith(starts))
        assert set(keys) == answers, starts
        assert min(keys.values()) > 0.3 * keys.total(), (starts, keys)


def test_a_largest_or_smallest_number_is_not_always_at_one_end_of_its_list() -> None:
    """A list drawn in order ("What is the smallest number in the list [2, 5, 8]?") is
    answered by its first number; the list test solves the key again from the list shown,
    so it agreed. Each maker asking for one draws 300 tasks."""
    makers = [maker for level in FAMILIES["list"].values() for maker in level]
    asking = 0
    for maker in makers:
        drafts = [maker(random.Random(draw)) for draw in range(300)]
        if not re.search(r"the (?:largest|smallest) number", str(drafts[0]["prompt"])):
            continue
        asking += 1
        shown = [re.findall(r"-?\d+", str(draft["prompt"])) for draft in drafts]
        for end in (0, -1):
            at_the_end = [d for d, s in zip(drafts, shown, strict=True) if d["answer"] == s[end]]
            assert len(at_the_end) < 0.6 * len(drafts), (maker.__name__, end)
    assert asking == 3  # the largest and smallest of small numbers, the largest with negatives


@pytest.mark.parametrize("seed", range(4))
def test_a_cannot_tell_answer_is_never_asked_as_must(seed: int) -> None:
    """ "All wugs are feps. Some feps are daxes. Must some wugs be daxes?" had the key
    "Cannot tell", yet "No" (they need not be) answers a "must" question as well: a
    premise that settles nothing is asked as "Are some wugs daxes?" / "Did it happen?"."""
    undecided = [
        task
        for task in generate_tasks(n_per_family=80, seed=seed, families=["logic"])
        if re.search(rf"\({task.answer}\) Cannot tell\n", task.prompt_text())
    ]
    assert len(undecided) > 3
    for task in undecided:
        question = task.prompt_text().split("\n")[0]
        assert not re.search(r"\b(?:Must|Need|Has to|Necessarily)\b", question), question


def count_draws(monkeypatch: pytest.MonkeyPatch, family: str) -> Callable[[], int]:
    """Counts the drafts `family`'s makers draw (how many so far, when called); past 100,000
    it raises, so a generator that would draw for half an hour fails the test at once."""
    draws = 0

    def counted(maker: Callable[[random.Random], dict]) -> Callable[[random.Random], dict]:
        def draw(rng: random.Random) -> dict:
            nonlocal draws
            draws += 1
            if draws > 100_000:
                raise RuntimeError(f"still drawing {family} tasks after 100,000 draws")
            return maker(rng)

        return draw

    makers = {level: tuple(map(counted, FAMILIES[family][level])) for level in (1, 2, 3)}
    monkeypatch.setitem(FAMILIES, family, makers)
    return lambda: draws


def test_a_huge_count_per_family_is_refused_soon_after_the_prompts_run_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The code family has a few hundred different prompts; `--per-family 1000000` drew
    50 million more tasks (200 + 50 a task asked for), half an hour, before it gave up."""
    draws = count_draws(monkeypatch, "code")
    with pytest.raises(ValueError, match=r"could not make 1000000 different code tasks: it made"):
        generate_tasks(1_000_000, families=["code"])
    assert draws() < 50_000


@pytest.mark.parametrize("value", ["arithmetic,code", "arithmetic, code", "arithmetic code"])
def test_several_families_in_one_value_are_refused_with_the_repeated_option(
    value: str, tmp_path: Path
) -> None:
    """`--family arithmetic,code` was answered "did you mean 'arithmetic'?", as if the
    user had meant one family and mistyped it."""
    result = invoke("tasks", "generate", "-o", tmp_path / "t.jsonl", "--family", value)
    assert result.exit_code != 0 and not (tmp_path / "t.jsonl").exists()
    message = flat(result.output)
    assert "did you mean" not in message
    assert "--family arithmetic --family code" in message


def asked(task: Task) -> tuple[str, frozenset[str]]:
    """A choice task's question and its options, in whatever order they are lettered."""
    question, *options = task.prompt_text().split("\n")[:-1]
    return question, frozenset(re.sub(r"^\([A-E]\) ", "", option) for option in options)


def test_no_question_is_asked_twice_with_its_options_reordered() -> None:
    """ "If it rains, the street gets wet. ... (A) No (B) Yes (C) Cannot tell" came back
    as "(A) Cannot tell (B) No (C) Yes": one question twice in a set, at times in two
    splits (a test question trained on)."""
    for seed in range(5):
        tasks = [t for t in generate_tasks(100, seed, families=["logic"]) if t.grader == "choice"]
        assert len(tasks) == 100
        assert len({asked(task) for task in tasks}) == len(tasks)


def test_a_question_with_four_options_lettered_otherwise_is_the_same_question() -> None:
    """A weekday question has four options (A-D): the D line read as part of the question
    would make one question lettered otherwise two."""
    drafts = [
        choice_draft(random.Random(seed), "What day?", "Monday", ["Tuesday", "Friday", "Sunday"])
        for seed in range(20)
    ]
    assert len({str(draft["prompt"]) for draft in drafts}) > 1
    assert len({question_key(draft) for draft in drafts}) == 1


def test_a_question_with_five_options_lettered_otherwise_is_the_same_question() -> None:
    """A choice question may have an option for each of CHOICE_LETTERS (A-E): its E line is
    an option too, not a line of the question."""
    wrong = ["Tuesday", "Friday", "Sunday", "Monday"]
    drafts = [
        choice_draft(random.Random(seed), "What day?", "Saturday", wrong) for seed in range(20)
    ]
    assert {str(draft["prompt"]).count("\n(E) ") for draft in drafts} == {1}
    assert len({str(draft["prompt"]) for draft in drafts}) > 1
    assert len({question_key(draft) for draft in drafts}) == 1


def test_only_a_choice_questions_lines_are_read_in_any_order() -> None:
    """Lines lettered "(A) " in a question graded otherwise are part of what it asks (which
    line comes second), so the same lines in another order ask another question."""
    prompt = "Write the second line.\n(A) red\n(B) blue"
    reordered = "Write the second line.\n(B) blue\n(A) red"
    drafts = [{"prompt": text, "answer": "x", "grader": "exact"} for text in (prompt, reordered)]
    assert question_key(drafts[0]) == prompt
    assert question_key(drafts[0]) != question_key(drafts[1])


def test_a_question_whose_first_line_reads_as_an_option_is_another_question() -> None:
    """The key keeps a choice question's text (up to its hint) before its sorted options:
    options first, a two-line question starting with another question's option would have
    the same key as that question."""
    one = choice_draft(random.Random(0), "Which?", "X", ["Y"])
    other = choice_draft(random.Random(0), "Y\nWhich?", "X", [])
    assert question_key(one) != question_key(other)


@pytest.mark.parametrize("seed", range(3))
def test_a_count_over_a_list_with_repeats_says_how_repeats_count(seed: int) -> None:
    """ "How many numbers are in the list [26, 17, 40, 2, 40, 8, 5]?" has two answers, 7
    entries or 6 different numbers; the key said 7 without saying so. A count over a list
    without a repeat (an even count whose odd numbers repeat too) says nothing of it."""
    counted = {"How many numbers": lambda v: True, "How many even": lambda v: v % 2 == 0}
    ambiguous = 0
    for task in generate_tasks(n_per_family=100, seed=seed, families=["list"]):
        for words, counts in counted.items():
            values = [value for value in listed(task) if counts(value)]
            if not task.prompt_text().startswith(words):
                continue
            repeats = len(set(values)) < len(values)
            ambiguous += repeats
            # and only then: a list without a repeat was asked as before it
            assert ("each time it appears" in task.prompt_text()) == repeats, task.prompt
    assert ambiguous > 0


def test_one_family_named_as_text_is_that_family() -> None:
    """`generate_tasks(families="code")` (a str is a Sequence[str] to the type checker) was
    read letter by letter: "unknown task family 'c'"."""
    assert generate_tasks(2, families="code") == generate_tasks(2, families=["code"])


def written_as_an_instruct_model_would(task: Task) -> list[str]:
    """The reference answer in the ways a chat model writes one: in a sentence, in bold,
    with a trailing period, with the unit asked for, with the option's text."""
    answer, prompt = task.answer or "", task.prompt_text()
    if task.grader == "number":
        unit = re.search(r"(?:How many|to(?: degrees)?) (\w+)", prompt)
        unit_text = unit.group(1) if unit else ""
        return [f"The answer is {answer}.", f"**{answer}**", f"{answer}.", f"{answer} {unit_text}"]
    if task.grader == "exact":
        return [f"The answer is {answer}.", f"**{answer}**", f"{answer}.", f"Answer: `{answer}`"]
    if task.grader == "choice":
        option = re.search(rf"\({answer}\) ([^\n]+)", prompt)
        assert option is not None, prompt
        return [f"The answer is ({answer}).", f"**{answer}**", f"({answer}) {option.group(1)}"]
    values = sorted(listed(task), reverse="largest to smallest" in prompt)
    return [f"The sorted list is {values}.", f"**{values}**", ", ".join(map(str, values)) + "."]


def answered_wrong(task: Task) -> list[str]:
    """Off by one, a letter off, another option, two numbers of the list swapped."""
    answer, prompt = task.answer or "", task.prompt_text()
    if task.grader == "number":
        return [f"The answer is {float(answer) + 1:g}.", f"**{float(answer) - 1:g}**"]
    if task.grader == "exact":
        return [f"The answer is {answer}x.", f"**{answer[:-1] or 'x'}**"]
    if task.grader == "choice":
        return [f"The answer is ({'B' if answer != 'B' else 'A'})."]
    values = sorted(listed(task), reverse="largest to smallest" in prompt)
    values[0], values[1] = values[1], values[0]
    return [f"The sorted list is {values}."]


@pytest.mark.parametrize("seed", range(3))
def test_every_family_grades_its_answer_as_a_model_writes_it_1_and_a_near_miss_0(
    seed: int,
) -> None:
    tasks = [t for t in generate_tasks(n_per_family=40, seed=seed) if t.grader != "code"]
    assert {task.task for task in tasks} == set(FAMILIES) - {"code"}
    for make, expected in ((written_as_an_instruct_model_would, 1.0), (answered_wrong, 0.0)):
        replies = [(task, reply) for task in tasks for reply in make(task)]
        grades = asyncio.run(grade_replies(replies))
        misgraded = [pair for pair, score in zip(replies, grades, strict=True) if score != expected]
        assert [(task.prompt, reply) for task, reply in misgraded] == []


async def grade_replies(replies: list[tuple[Task, str]]) -> list[float | None]:
    return [(await grade(task, reply)).score for task, reply in replies]


def test_a_count_one_family_cannot_reach_is_refused_before_the_others_are_made(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`tasks generate --per-family 1000000` (all families) made a million arithmetic,
    unit, string, list and logic tasks each, minutes and gigabytes, before the code family
    (some 240 prompts) refused the count; now the families are drawn in turn, so the one
    that runs out refuses it early. The tasks are the same as one family at a time."""
    draws = count_draws(monkeypatch, "arithmetic")
    with pytest.raises(ValueError, match=r"could not make 1000000 different code tasks"):
        generate_tasks(1_000_000)
    assert draws() < 20_000
    monkeypatch.undo()
    together = generate_tasks(30, seed=4)
    assert together == [t for family in FAMILIES for t in generate_tasks(30, 4, [family])]


def test_a_prompt_counts_one_in_the_singular_and_many_in_the_plural() -> None:
    """ "How many minutes are 9 hours and 1 minutes?", "What day of the week will it be in 1
    days?" and "All glims are feps. No feps are razzies. Can a glims be a razzies?" (the
    nonsense words are plurals) were generated: now "1 minute", "1 day", "Can any glims be
    razzies?", with the same answers. Every maker draws 300 prompts."""
    makers = [maker for levels in FAMILIES.values() for level in levels.values() for maker in level]
    prompts = [str(maker(random.Random(draw))["prompt"]) for maker in makers for draw in range(300)]
    one_of_many = re.compile(r"(?<![\d.-])\b1 [a-z]+s\b|\b(?:a|an|one) [a-z]+s\b")
    assert [prompt for prompt in prompts if one_of_many.search(prompt)] == []
    for said in (r"and 1 minute\?", r"in 1 day\?", r"Can any \w+ be \w+\?"):
        assert any(re.search(said, prompt) for prompt in prompts), said


def test_generated_tasks_are_the_same_under_any_hash_seed() -> None:
    """Ids, prompts and splits must not depend on the process: a set iterated in a maker
    (letters of a word, family names) would reorder them under another PYTHONHASHSEED."""
    script = (
        "import hashlib, sys\n"
        "from fugu_lite.task_families import generate_tasks\n"
        "text = ''.join(t.model_dump_json() for t in generate_tasks(20, seed=7))\n"
        "print(hashlib.sha256(text.encode()).hexdigest())\n"
    )
    digests = {
        subprocess.run(
            [sys.executable, "-c", script],
            env={**os.environ, "PYTHONHASHSEED": hash_seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for hash_seed in ("1", "2")
    }
    here = "".join(t.model_dump_json() for t in generate_tasks(20, seed=7))
    assert digests == {hashlib.sha256(here.encode()).hexdigest() + "\n"}


# --- every answer key recomputed from its question, by a solver of the test's own ------------

UNIT_SIZES: dict[str, Fraction] = {
    "millimeter": Fraction(1), "centimeter": Fraction(10), "meter": Fraction(1000),
    "kilometer": Fraction(1_000_000),
    "inch": Fraction(1), "feet": Fraction(12), "yard": Fraction(36),
    "gram": Fraction(1), "kilogram": Fraction(1000),
    "milliliter": Fraction(1), "liter": Fraction(1000),
    "item": Fraction(1), "dozen": Fraction(12),
    "second": Fraction(1), "minute": Fraction(60), "hour": Fraction(3600),
    "day": Fraction(86_400), "week": Fraction(604_800),
}  # fmt: skip
"""Each unit in the smallest of its kind: a unit's factor is not taken from the generator."""


def unit_size(name: str) -> Fraction:
    singular = {"inches": "inch", "feet": "feet"}.get(name, name.removesuffix("s"))
    return UNIT_SIZES[singular]


def arithmetic_key(question: str) -> Fraction:
    numbers = [Fraction(n) for n in re.findall(r"\d+", question)]
    if match := re.fullmatch(r"What is (\d+)% of (\d+)\?", question):
        return Fraction(int(match[1]) * int(match[2]), 100)
    if match := re.fullmatch(r"What is ([\d ()+*-]+)\?", question):
        return Fraction(eval(match[1], {"__builtins__": {}}))  # digits and + - * ( ) only
    if "gets" in question and "gives away" in question:
        has, more, given = numbers
        return has + more - given
    if "notebook" in question:
        price, count, bill = numbers
        return bill - price * count
    if "candies" in question:
        candies, children, eaten = numbers
        return candies / children - eaten
    raise AssertionError(f"no solver for {question!r}")


def unit_key(question: str) -> Fraction:
    if match := re.fullmatch(r"How many minutes are (\d+) hours and (\d+) minutes?\?", question):
        return Fraction(60 * int(match[1]) + int(match[2]))
    if match := re.fullmatch(r"Convert (\d+) kilometers per hour to meters per second\.", question):
        return Fraction(int(match[1]) * 1000, 3600)
    if match := re.fullmatch(r"Convert (-?\d+) degrees Celsius to degrees Fahrenheit\.", question):
        return Fraction(int(match[1]) * 9, 5) + 32
    if match := re.fullmatch(r"Convert (-?\d+) degrees Fahrenheit to degrees Celsius\.", question):
        return Fraction((int(match[1]) - 32) * 5, 9)
    if match := re.fullmatch(r"How many (\w+) are in (one|\d+) (\w+)\?", question):
        target, value, source = match[1], match[2], match[3]
    elif match := re.fullmatch(r"Convert (\d+) (\w+) to (\w+)\.", question):
        value, source, target = match[1], match[2], match[3]
    else:
        raise AssertionError(f"no solver for {question!r}")
    count = 1 if value == "one" else int(value)
    return count * unit_size(source) / unit_size(target)


def string_key(question: str) -> str:
    quoted = re.findall(r"'([^']*)'", question)
    word = quoted[-1] if quoted else ""
    solvers: dict[str, Callable[[], str]] = {
        "in uppercase letters": word.upper,
        "in lowercase letters": word.lower,
        "What is the first letter": lambda: word[:1],
        "What is the last letter": lambda: word[-1:],
        "How many letters": lambda: str(len(word)),
        "backwards": lambda: "".join(reversed(list(word))),
        "How many times does the letter": lambda: str(word.count(quoted[0])),
        "Reverse the order of the words": lambda: " ".join(word.split()[::-1]),
        "Remove every vowel": lambda: re.sub("[aeiou]", "", word),
        "first letter of each word": lambda: "".join(w[0] for w in word.split()).upper(),
        "alphabetical order": lambda: "".join(sorted(word)),
    }
    for words, solve in solvers.items():
        if words in question:
            return solve()
    raise AssertionError(f"no solver for {question!r}")


SUPERLATIVES = {
    "tallest": "taller", "oldest": "older", "fastest": "faster", "heaviest": "heavier",
    "shortest": "-taller", "youngest": "-older", "slowest": "-faster", "lightest": "-heavier",
}  # fmt: skip


def ordering_key(question: str) -> str:
    """The person a "Who is the (second) ...est?" question asks for, from the facts given."""
    facts = re.findall(r"(\w+) is (\w+) than (\w+)\.", question)
    people = {person for more, _, less in facts for person in (more, less)}
    order = sorted(people, key=lambda person: -len(_below(person, facts)))
    asked = re.search(r"Who is the (second )?(\w+)\?", question)
    assert asked is not None and facts, question
    comparative = SUPERLATIVES[asked[2]]
    assert {word for _, word, _ in facts} == {comparative.lstrip("-")}, question
    ranked = order if not comparative.startswith("-") else order[::-1]
    return ranked[1 if asked[1] else 0]


def _below(person: str, facts: list[tuple[str, str, str]]) -> set[str]:
    direct = {less for more, _, less in facts if more == person}
    return direct.union(*(_below(less, facts) for less in direct))


def logic_key(question: str, options: list[str]) -> str:
    days = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
    if question == "Which number is larger?":
        return str(max(map(int, options)))
    if question == "Which number is the smallest?":
        return str(min(map(int, options)))
    if question == "Which of these numbers is even?":
        (even,) = [option for option in options if int(option) % 2 == 0]
        return even
    if match := re.fullmatch(r"Is (\d+) greater than (\d+)\?", question):
        return "Yes" if int(match[1]) > int(match[2]) else "No"
    if match := re.fullmatch(r"Today is (\w+)\. What day .* in (\d+) days?\?", question):
        return days[(days.index(match[1]) + int(match[2])) % 7]
    if "Who is the" in question:
        return ordering_key(question)
    if match := re.fullmatch(
        r"All (\w+) are (\w+)\. (All|Some|No) (\w+) are (\w+)\. (.*)", question
    ):
        x, y, quantity, y_again, z, asked = match.groups()
        # a word in two roles changes the answer: "All wugs are feps. Some feps are wugs.
        # Are some wugs wugs?" is Yes, not Cannot tell
        assert y == y_again and len({x, y, z}) == 3, question
        answers = {
            ("All", f"Are all {x} {z}?"): "Yes",
            ("Some", f"Are some {x} {z}?"): "Cannot tell",
            ("No", f"Can any {x} be {z}?"): "No",
        }
        return answers[(quantity, asked)]
    if match := re.fullmatch(
        r"If (.*), (.*)\. We know that (.*)\. Did it happen that (.*)\?", question
    ):
        cause, effect, known, asked = match.groups()
        assert asked == cause, question
        return "Cannot tell" if known == effect else "No"
    raise AssertionError(f"no solver for {question!r}")


def number_in(text: str, before: str) -> int:
    found = re.search(rf"{before} (-?\d+)", text)
    assert found is not None, (before, text)
    return int(found[1])


def code_solution(description: str) -> Callable[..., object]:
    """The function the description asks for, written from the description alone."""
    if "returns x plus" in description:
        return lambda x: x + number_in(description, "plus")
    if "multiplied by" in description:
        return lambda x: x * number_in(description, "multiplied by")
    if "is_multiple" in description:
        return lambda n: n % number_in(description, "divisible by") == 0
    if "greet" in description:
        found = re.search(r"the string '([^']*)' followed by the name and '([^']*)'", description)
        assert found is not None, description
        return lambda name: found[1] + name + found[2]
    if "count_char" in description:
        letter = re.findall(r"character '(.)'", description)[0]
        return lambda s: s.count(letter)
    if "sum_above" in description:
        return lambda xs: sum(x for x in xs if x > number_in(description, "greater than"))
    if "repeat(s)" in description:
        times = number_in(description, "repeated")
        joined = re.search(r"joined by '([^']*)'", description)
        return lambda s: (joined[1] if joined else "").join([s] * times)
    if "label(n)" in description:
        word = re.findall(r"returns '(\w+)'", description)[0]
        return lambda n: word if n % number_in(description, "divisible by") == 0 else str(n)
    if "sum_multiples" in description:
        found = re.search(r"divisible by (\d+) or (\d+)", description)
        assert found is not None and found[1] != found[2], description  # not "by 4 or 4"
        a, b = int(found[1]), int(found[2])
        return lambda n: sum(i for i in range(1, n) if i % a == 0 or i % b == 0)
    if "seq(n)" in description:
        found = re.search(r"starts (\d+), (\d+)", description)
        assert found is not None and "counting from 0" in description, description

        def seq(n: int) -> int:
            terms = [int(found[1]), int(found[2])]
            while len(terms) <= n:
                terms.append(terms[-1] + terms[-2])
            return terms[n]

        return seq
    if "digit_power_sum" in description:
        power = number_in(description, "power")
        return lambda n: sum(int(digit) ** power for digit in str(n))
    if "chunks" in description:
        size = number_in(description, "lists of")
        return lambda xs: [xs[i : i + size] for i in range(0, len(xs), size)]
    raise AssertionError(f"no solver for {description!r}")


def check_key_from_the_question(task: Task) -> None:
    question = task.prompt_text().split("\n")[0]
    for hint in (NUMBER_HINT, EXACT_HINT, CODE_HINT):
        question = question.removesuffix(f" {hint}")
    if task.task == "arithmetic":
        assert Fraction(task.answer or "") == arithmetic_key(question), task.prompt
    elif task.task == "unit_conversion":
        assert Fraction(task.answer or "") == unit_key(question), task.prompt
    elif task.task == "string":
        assert task.answer == string_key(question), task.prompt
        # "Write the word 'cat' in uppercase letters." is not answered by "cat"
        assert task.case_sensitive == ("uppercase" in question or "lowercase" in question)
    elif task.task == "logic":
        options = dict(re.findall(r"^\(([A-E])\) (.*)$", task.prompt_text(), re.MULTILINE))
        assert options[task.answer or ""] == logic_key(question, [*options.values()]), task.prompt
    elif task.task == "code":
        found = re.search(r"Write a Python function `(\w+)\(", question)
        assert found is not None, question
        reference: dict[str, object] = {}
        exec(task.answer or "", reference)  # the generator's own reference solution
        # an example the description gives ("e.g. greet('Ana') returns 'Hi, Ana!'") too
        examples = re.findall(r"e\.g\. (\w+\(.*?\)) returns ('[^']*')", question)
        checks = [
            *(task.tests or "").splitlines(),
            *(f"{call} == {value}" for call, value in examples),
        ]
        for namespace in ({found[1]: code_solution(question)}, reference):
            for line in checks:
                assert eval(line.removeprefix("assert "), namespace), (task.prompt, line)


@pytest.mark.parametrize("seed", range(8))
def test_every_answer_key_is_what_its_question_asks(seed: int) -> None:
    """The keys of arithmetic, unit, string, logic and code tasks were checked only against
    themselves (the reference reply graded 1), so a key of `a + b + c` for "What is a + b -
    c?", 100 minutes an hour, the youngest for the oldest, every choice key "A", a code
    task's asserts for another number than its prompt's or a reference solution summing
    `x >= t` for "greater than t" passed every test; each key is now solved again from the
    question's own words."""
    tasks = [t for t in generate_tasks(n_per_family=120, seed=seed) if t.task != "list"]
    for task in tasks:
        check_key_from_the_question(task)
    assert Counter(task.task for task in tasks) == {f: 120 for f in FAMILIES if f != "list"}
    # the right option's letter varies: a key always "A" would reward a worker that says "A"
    assert len({task.answer for task in tasks if task.grader == "choice"}) >= 3


def near_misses(description: str) -> list[Callable[..., object]]:
    """Functions a worker might write for the description that are wrong at an edge (a sign,
    0, a boundary, the last item), each of which the task's asserts must fail."""
    if "returns x plus" in description:
        return [lambda x: abs(x) + number_in(description, "plus")]
    if "multiplied by" in description:
        return [lambda x: abs(x) * number_in(description, "multiplied by")]
    if "is_multiple" in description:
        k = number_in(description, "divisible by")
        return [
            lambda n: n > 0 and n % k == 0,
            *([lambda n: n % 2 == 0] if k != 2 else []),  # "even" for an even k
        ]
    if "greet" in description:
        right = code_solution(description)
        return [lambda name: right(name.split()[0])]  # the first word of the name only
    if "sum_above" in description:
        t = number_in(description, "greater than")
        return [
            *([lambda xs: sum(x for x in xs if x >= t)] if t != 0 else []),  # 0 adds nothing
            lambda xs: sum({x for x in xs if x > t}),  # a set: a repeated number once
            lambda xs: sum(xs[i] for i in range(1, len(xs)) if xs[i] > t),  # from index 1
        ]
    if "repeat(s)" in description:
        right = code_solution(description)
        return [lambda s: right(s)[len(s) :].lstrip(" -")]  # one copy short
    if "label(n)" in description:
        right = code_solution(description)
        word = re.findall(r"returns '(\w+)'", description)[0]
        return [
            lambda n: right(n) if n > 0 else str(n),  # 0 is divisible by every k
            lambda n: word if n % 2 == 0 else str(n),  # "even" for an even k (k is 3 to 7)
        ]
    if "sum_multiples" in description:
        right = code_solution(description)
        return [lambda n: right(n + 1)]  # up to n, not below it
    if "seq(n)" in description:
        right = code_solution(description)
        starts = re.findall(r"starts (\d+), (\d+)", description)[0]
        first_term_wrong = [lambda n: right(max(n, 1))] if starts[0] != starts[1] else []
        return [lambda n: right(n + 1), *first_term_wrong]  # counting from 1
    if "digit_power_sum" in description:
        power = number_in(description, "power")
        return [
            lambda n: sum(int(digit) for digit in str(n)) ** power,
            # the digits counted by log10, which 0 has none of (ValueError)
            lambda n: sum((n // 10**i % 10) ** power for i in range(int(math.log10(n)) + 1)),
        ]
    if "chunks" in description:
        size = number_in(description, "lists of")
        return [
            lambda xs: [xs[i : i + size] for i in range(0, len(xs) - size + 1, size)],
            lambda xs: [xs[i : i + size] for i in range(0, max(len(xs), 1), size)],  # [] -> [[]]
            # stops one short: a last chunk of one item is lost
            lambda xs: [xs[i : i + size] for i in range(0, len(xs) - 1, size)],
        ]
    if "count_char" in description:
        letter = re.findall(r"character '(\w)'", description)[0]
        return [lambda s: int(letter in s)]  # whether it appears, not how many times
    return []


def passes(tests: str, name: str, function: Callable[..., object]) -> bool:
    try:
        return all(
            eval(line.removeprefix("assert "), {name: function}) for line in tests.splitlines()
        )
    except Exception:  # a near miss may raise on an edge case: it fails that test
        return False


def check_tests_refuse_wrong_functions(question: str, tests: str) -> None:
    """The asserts of a code task fail a function returning a constant, one returning its
    input (`add_k` for k = 0 asks for that), and each near miss of the question."""
    found = re.search(r"Write a Python function `(\w+)\(", question)
    assert found is not None, question
    first_expected = eval(tests.splitlines()[0].split(" == ", 1)[1])
    constant, its_input = (lambda *_: first_expected), (lambda first, *_: first)
    for wrong in [constant, its_input, *near_misses(question)]:
        assert not passes(tests, found[1], wrong), (question, tests)


@pytest.mark.parametrize("seed", range(4))
def test_a_code_tasks_tests_refuse_a_constant_and_a_near_miss(seed: int) -> None:
    """A code task whose asserts kept one case, or lost the case at an edge (0, a boundary,
    a negative, the shorter last chunk), would credit a function returning a constant or
    one wrong at that edge."""
    for task in generate_tasks(n_per_family=60, seed=seed, families=["code"]):
        check_tests_refuse_wrong_functions(task.prompt_text().split("\n")[0], task.tests or "")


def test_every_code_maker_drawn_many_times_refuses_a_constant_and_a_near_miss() -> None:
    """Tasks from generate_tasks hold few of a level-3 maker's draws, and of a rare draw
    none: a sequence made to start 0, 0 (every term 0, so `return 0` passes), an `add_k`
    for k = 0 or `times_k` for k = 1 (`return x` passes) would go unseen. Each code maker
    is drawn 400 times."""
    makers = [maker for level in FAMILIES["code"].values() for maker in level]
    for maker in makers:
        for draw in range(400):
            draft = maker(random.Random(draw))
            check_tests_refuse_wrong_functions(str(draft["prompt"]), str(draft["tests"]))


def test_every_code_maker_varies_its_task_over_draws() -> None:
    """A code maker drawing the same number or word each time (one k, one greeting, one
    letter, one chunk size) would ask one task again and again, which no test of a task's
    own key can see; each maker's prompts and tests vary over draws, repeat tasks ask for
    copies both joined by a separator and with nothing between, and greet tasks end the
    greeting with "!" and with "."."""
    prompts: list[str] = []
    for maker in (maker for level in FAMILIES["code"].values() for maker in level):
        drafts = [maker(random.Random(draw)) for draw in range(200)]
        asked = {str(draft["prompt"]) for draft in drafts}
        assert len(asked) >= 3, maker.__name__
        assert len({str(draft["tests"]) for draft in drafts}) >= 3, maker.__name__
        prompts += asked
    assert any("repeated" in prompt and "joined by" in prompt for prompt in prompts)
    assert any("with nothing between the copies" in prompt for prompt in prompts)
    for mark in ("!", "."):
        assert any(f"followed by the name and '{mark}'" in prompt for prompt in prompts), mark


def test_a_sum_above_threshold_is_each_whole_number_from_0_to_10() -> None:
    """sum_above's threshold ("greater than t") is drawn from 0 to 10: a maker drawing from
    another range passed every test, yet changed every sum_above task a seed gives (its
    prompt, its asserts), and its fixed lists are set about that range ([1, 5, 12, 20] keeps
    numbers above each threshold; t = 0 is the draw where summing `x >= t` is right too)."""
    (maker,) = [m for m in FAMILIES["code"][2] if m.__name__ == "_code_sum_above"]
    drafts = [maker(random.Random(draw)) for draw in range(200)]
    thresholds = {number_in(str(draft["prompt"]), "greater than") for draft in drafts}
    assert thresholds == set(range(0, 11))


def reference_nodes(maker: Callable[[random.Random], dict]) -> list[ast.AST]:
    """The syntax nodes of the reference solution of a maker's first draw."""
    return list(ast.walk(ast.parse(str(maker(random.Random(0))["answer"]))))


def test_a_harder_code_task_asks_for_more_code() -> None:
    """Difficulty 1 is easy, 2 medium, 3 hard: a maker moved to another level (greet made
    hard, the Fibonacci-like sequence medium) made the field `difficulty` say nothing. The
    reference solution of each hard task is longer than any medium or easy one's, and the
    medium ones are longer on average than the easy ones; an easy one is an operator or two
    on the argument, calling no function (a medium one calls str, sum, join, count...)."""
    levels = FAMILIES["code"]
    sizes = {level: [len(reference_nodes(m)) for m in makers] for level, makers in levels.items()}
    assert min(sizes[3]) > max(sizes[1] + sizes[2]), sizes
    assert sum(sizes[2]) / len(sizes[2]) > sum(sizes[1]) / len(sizes[1]), sizes
    for level, makers in levels.items():
        for maker in makers:
            calls = [node for node in reference_nodes(maker) if isinstance(node, ast.Call)]
            assert bool(calls) == (level > 1), (level, maker.__name__)


def makers_defined_in(module: ModuleType) -> set[Callable[..., object]]:
    """The functions of a family's module that draw a task from a generator alone: its
    makers (a helper such as lists' _numbers(rng, count, low, high) takes more)."""
    return {
        function
        for function in vars(module).values()
        if inspect.isfunction(function)
        and function.__module__ == module.__name__
        and list(inspect.signature(function).parameters) == ["rng"]
    }


def test_every_maker_is_drawn() -> None:
    """A maker written in a family's module but left out of its MAKERS (or dropped from
    them: units' hours-to-seconds, lists' average) is a kind of task never asked, which no
    test of the tasks that are made can see."""
    for family, levels in FAMILIES.items():
        registered = {maker for level in levels.values() for maker in level}
        (module,) = {sys.modules[maker.__module__] for maker in registered}
        assert makers_defined_in(module) == registered, family
    registered = {maker for level in FAMILIES["code"].values() for maker in level}
    asked = {
        re.findall(r"`(\w+)\(", task.prompt_text())[0]
        for task in generate_tasks(n_per_family=150, seed=0, families=["code"])
    }
    named = {
        re.findall(r"`(\w+)\(", str(maker(random.Random(0))["prompt"]))[0] for maker in registered
    }
    assert asked == named


@pytest.mark.parametrize("seed", range(2))
def test_every_prompt_ends_with_the_hint_its_grader_reads(seed: int) -> None:
    """The hint says what form of answer the grader reads ("Answer with just the number.",
    "Reply with the Python code only."); a maker dropping it left the worker to guess, and the
    solvers, which take the hint off when it is there, passed."""
    hints = {
        "number": NUMBER_HINT, "exact": EXACT_HINT, "regex": EXACT_HINT,
        "choice": CHOICE_HINT, "code": CODE_HINT,
    }  # fmt: skip
    tasks = generate_tasks(n_per_family=60, seed=seed)
    assert {task.grader for task in tasks} == set(hints)
    assert [t.prompt for t in tasks if not t.prompt_text().endswith(hints[t.grader])] == []
