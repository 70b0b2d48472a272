"""The task format and its reader's errors."""

from __future__ import annotations

import asyncio
import json
import math
import re
from fractions import Fraction
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from fugu_lite.cli import app
from fugu_lite.datasets import standard_split
from fugu_lite.schemas import RewardRecord
from fugu_lite.scoring import grade
from fugu_lite.task_families import generate_tasks
from fugu_lite.tasks import (
    Task,
    TaskFileError,
    format_number,
    parse_number,
    read_tasks,
    repeated_prompts,
    write_tasks,
)

GOOD = {"id": "q1", "prompt": "What is 2 + 3?", "answer": "5", "grader": "number", "task": "math"}
CODE_TESTS = "assert add(1, 2) == 3\n"


def write_lines(path: Path, rows: list[dict | str]) -> Path:
    lines = [row if isinstance(row, str) else json.dumps(row) for row in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def read_error(tmp_path: Path, rows: list[dict | str]) -> str:
    path = write_lines(tmp_path / "tasks.jsonl", rows)
    with pytest.raises(TaskFileError) as caught:
        read_tasks(path)
    return str(caught.value)


def test_read_tasks_round_trip(tmp_path: Path) -> None:
    tasks = [
        Task.model_validate(GOOD),
        Task(
            id="q2",
            messages=[
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Hi"},
            ],
            grader="judge",
            task="chat",
            rubric="Is it polite?",
        ),
        Task(id="q3", prompt="Write add(a, b).", tests=CODE_TESTS, grader="code", task="code"),
    ]
    path = tmp_path / "tasks.jsonl"
    assert write_tasks(path, tasks) == 3
    assert read_tasks(path) == tasks


def test_blank_lines_are_skipped(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "t.jsonl", [GOOD, "", "   ", {**GOOD, "id": "q2"}])
    assert [task.id for task in read_tasks(path)] == ["q1", "q2"]


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        ({**GOOD, "messages": [{"role": "user", "content": "x"}]}, "exactly one of 'prompt'"),
        ({k: v for k, v in GOOD.items() if k != "prompt"}, "none was given"),
        ({**GOOD, "prompt": "   "}, "'prompt' is empty"),
        ({**GOOD, "prompt": None, "messages": []}, "empty list"),
        # blank messages sent the workers no question, as a blank prompt would (refused)
        (
            {
                **GOOD,
                "prompt": None,
                "messages": [{"role": "system", "content": ""}, {"role": "user", "content": " \n"}],
            },
            "every message's 'content' is empty",
        ),
        (
            {**GOOD, "prompt": None, "messages": [{"role": "user", "content": None}]},
            "every message's 'content' is empty",
        ),
        # content parts: collect sends their text alone, blank or none
        (
            {
                **GOOD,
                "prompt": None,
                "messages": [{"role": "user", "content": [{"type": "text", "text": " "}]}],
            },
            "every message's 'content' is empty",
        ),
        (
            {**GOOD, "prompt": None, "messages": [{"role": "user", "content": []}]},
            "every message's 'content' is empty",
        ),
        ({k: v for k, v in GOOD.items() if k != "answer"}, "needs an 'answer'"),
        ({**GOOD, "grader": "exact", "answer": " \t"}, "needs an 'answer'"),
        ({**GOOD, "answer": "five"}, "is not a number"),
        ({**GOOD, "answer": "1e400"}, "is not a number"),  # too big for a float
        ({**GOOD, "answer": "1/0"}, "is not a number"),  # not a ZeroDivisionError
        ({**GOOD, "answer": "2,5"}, "a comma only separates thousands"),  # not 25
        ({**GOOD, "answer": "1.234,5"}, "a comma only separates thousands"),  # not 1.2345
        ({**GOOD, "answer": "12345,678"}, "a comma only separates thousands"),  # not 12345678
        ({**GOOD, "answer": "1234,567"}, "a comma only separates thousands"),  # 4 digits first
        ({**GOOD, "grader": "choice", "answer": "F"}, "not an option letter"),
        ({**GOOD, "grader": "regex", "answer": "(unclosed"}, "not a valid regular expression"),
        ({**GOOD, "grader": "regex", "answer": r"\d*"}, "matches the empty string"),
        ({**GOOD, "grader": "regex", "answer": "yes|"}, "every reply would score 1"),
        ({**GOOD, "grader": "regex", "answer": "[^]x]*"}, "matches the empty string"),
        # an escaped anchor, or one inside a character class, is a character, not an anchor
        ({**GOOD, "grader": "regex", "answer": r"\$?\d*"}, "matches the empty string"),
        ({**GOOD, "grader": "regex", "answer": "[]^]*"}, "matches the empty string"),
        ({**GOOD, "grader": "regex", "answer": "[^]^]*"}, "matches the empty string"),
        ({**GOOD, "grader": "regex", "answer": r"[\]^]*"}, "matches the empty string"),
        ({**GOOD, "grader": "code", "answer": None}, "needs 'tests'"),
        ({**GOOD, "grader": "code", "tests": " \n"}, "needs 'tests'"),
        ({**GOOD, "grader": "code", "tests": "assert f(1) ==\n"}, "not valid Python (line 1"),
        ({**GOOD, "grader": "code", "tests": "x = 1\nassert f(x) ==\n"}, "Python (line 2: "),
        ({**GOOD, "grader": "code", "tests": "x = 1\n"}, "holds no test"),
        (  # a pytest fixture: the sandbox calls test functions with no argument
            {**GOOD, "grader": "code", "tests": "def test_f(tmp_path):\n    assert f(1)\n"},
            "test function test_f takes tmp_path, but the code grader calls each test "
            "function with no argument",
        ),
        (  # it was never run: its asserts, failing or not, did not count
            {
                **GOOD,
                "grader": "code",
                "tests": "assert f(1)\nasync def test_f():\n    assert f(2)\n",
            },
            "test function test_f is async (async def), and the code grader runs no event loop",
        ),
        ({**GOOD, "grader": "nubmer"}, "unknown grader 'nubmer'; did you mean 'number'?"),
        ({**GOOD, "grader": "llm"}, "known graders: number, choice, exact, regex, code, judge"),
        ({**GOOD, "anwser": "5"}, "unknown field 'anwser' (did you mean 'answer'?): known fields"),
        ({k: v for k, v in GOOD.items() if k != "task"}, "missing field 'task'"),
        (
            {**GOOD, "split": "holdout"},
            "unknown split 'holdout'; allowed values: train, validation, test (in any case; "
            "also training, val, valid, dev, testing)",
        ),
        ({**GOOD, "id": ""}, "id"),
        ({**GOOD, "difficulty": 7}, "difficulty"),
    ],
)
def test_bad_task_lines_name_file_line_and_fix(tmp_path: Path, row: dict, expected: str) -> None:
    message = read_error(tmp_path, [{**GOOD, "id": "ok"}, row])
    assert "tasks.jsonl, line 2:" in message
    assert expected in message


def test_test_functions_with_defaults_or_star_arguments_are_accepted() -> None:
    tests = "def test_f(x=2, *args, y=3, **kw):\n    assert f(x) == y\n"
    assert Task.model_validate({**GOOD, "grader": "code", "tests": tests}).tests == tests
    for tests, needed in [
        ("def test_g(a, b=1, *, c=2):\n    pass\n", "test_g takes a, but"),
        ("def test_h(a, /, *, b):\n    pass\n", "test_h takes a, b, but"),
    ]:
        with pytest.raises(ValueError, match=needed):
            Task.model_validate({**GOOD, "grader": "code", "tests": tests})


@pytest.mark.parametrize("answer", ["(b)", "B)", "b.", "B:", " B "])
def test_a_choice_answer_written_as_an_option_label_is_its_letter(answer: str) -> None:
    task = Task.model_validate({**GOOD, "grader": "choice", "answer": answer})
    assert asyncio.run(grade(task, "The answer is B.")).score == 1.0


def test_a_helper_taking_arguments_beside_the_tests_is_accepted() -> None:
    """Only a test_* function is called with no argument; a helper the tests call is not."""
    tests = "def check(g, x, expected):\n    assert g(x) == expected\n\ncheck(f, 1, 2)\n"
    tests += "def test_f():\n    check(f, 2, 3)\n"
    assert Task.model_validate({**GOOD, "grader": "code", "tests": tests}).tests == tests


def test_an_async_helper_beside_the_tests_is_accepted() -> None:
    """Only an async *test* function is refused (never run); an async helper is not one."""
    tests = "async def fetch():\n    return 1\n\nassert f(1) == 2\n"
    assert Task.model_validate({**GOOD, "grader": "code", "tests": tests}).tests == tests


def test_tests_that_are_a_loop_of_asserts_are_accepted_and_a_helper_alone_is_not() -> None:
    # the sandbox counts the loop as one test; a function defining asserts is no test itself
    loop = "for x, y in [(1, 2), (2, 3)]:\n    assert f(x) == y\n"
    assert Task.model_validate({**GOOD, "grader": "code", "tests": loop}).tests == loop
    with pytest.raises(ValueError, match="holds no test"):
        helper = "def check(g):\n    assert g(1) == 2\n"
        Task.model_validate({**GOOD, "grader": "code", "tests": helper})


def test_several_unknown_fields_are_named_in_one_sentence(tmp_path: Path) -> None:
    """A line with four unknown fields (another kind of file given to `tasks check`) listed
    every known field four times, once per unknown field."""
    message = read_error(tmp_path, [{**GOOD, "question": "q", "gold": "1", "anwser": "5"}])
    assert message.endswith(
        "line 1: unknown fields 'question', 'gold', 'anwser' (did you mean 'answer'?): known "
        "fields: id, prompt, messages, answer, tests, grader, task, split, rubric, "
        "case_sensitive, difficulty"
    )
    assert message.count("known fields:") == 1


@pytest.mark.parametrize(
    ("given", "split"),
    [("dev", "validation"), ("Val", "validation"), (" TEST ", "test"), ("training", "train")],
)
def test_a_task_split_may_be_written_as_the_importers_read_it(
    tmp_path: Path, given: str, split: str
) -> None:
    """A task file's `"split": "dev"` was refused as an unknown split, while `data import`
    reads dev, val, valid, training and testing (in any case) from a split column."""
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps({**GOOD, "split": given}) + "\n", encoding="utf-8")
    [task] = read_tasks(path)
    assert task.split == split and task.resolved_split() == split


@pytest.mark.parametrize(
    "pattern",
    [
        r"\d+",
        r"^(?!.*\bwrong\b)",
        r"(?=.*foo)(?=.*bar)",
        r"\bno\b|^$",
        r"[$^]?x",
        "yes",
        # each kind of assertion alone (the patterns above that match the empty string hold
        # two kinds, so the check passed with any one of them not read as an assertion)
        r"^(?:yes)?",
        r"(?:yes)?$",
        r"\A(?:yes)?",
        r"(?:yes)?\Z",
        r"(?:\byes\b)?",
        r"(?:\Byes)?",
        r"(?!.*wrong)",
        r"(?=\d*)",
        r"(?:(?<=yes))?",
        r"(?<!not )",
    ],
)
def test_a_pattern_matching_the_empty_string_only_through_a_check_is_kept(pattern: str) -> None:
    task = Task(id="r", prompt="Say it.", answer=pattern, grader="regex", task="t")
    assert task.answer == pattern


def test_an_empty_reply_scores_0_even_for_a_pattern_that_matches_it() -> None:
    task = Task(id="r", prompt="Say it.", answer=r"^(?!.*wrong)", grader="regex", task="t")
    assert asyncio.run(grade(task, "It is right.")).score == 1.0
    assert asyncio.run(grade(task, "It is wrong.")).score == 0.0
    result = asyncio.run(grade(task, " \n "))
    assert (result.score, result.detail) == (0.0, "empty output")


def test_a_file_saved_with_a_bom_and_crlf_line_endings_reads_as_written(tmp_path: Path) -> None:
    """Windows editors write a UTF-8 BOM and CRLF: the file means the same tasks."""
    path = tmp_path / "tasks.jsonl"
    lines = [json.dumps(GOOD), json.dumps({**GOOD, "id": "q2"})]
    path.write_bytes(b"\xef\xbb\xbf" + "\r\n".join(lines).encode() + b"\r\n")
    assert [task.id for task in read_tasks(path)] == ["q1", "q2"]
    checked = CliRunner().invoke(app, ["tasks", "check", str(path)])
    assert checked.exit_code == 0, checked.output
    # a BOM at the start of a later line begins a file joined with `cat`: read as that line
    third = json.dumps({**GOOD, "id": "q3"}).encode()
    path.write_bytes("\r\n".join(lines).encode() + b"\r\n\xef\xbb\xbf" + third)
    assert [task.id for task in read_tasks(path)] == ["q1", "q2", "q3"]
    # elsewhere in a line it is still a character that JSON cannot hold there
    path.write_bytes("\r\n".join(lines).encode() + b"\r\n \xef\xbb\xbf" + third)
    with pytest.raises(TaskFileError, match="line 3: not valid JSON"):
        read_tasks(path)


def test_a_numeric_answer_or_id_written_as_a_json_number_is_read_as_its_text(
    tmp_path: Path,
) -> None:
    rows: list[dict | str] = [
        {**GOOD, "id": 1, "answer": 5},
        {**GOOD, "id": 2, "answer": 0.25, "prompt": "What is 1/4?"},
        {**GOOD, "id": 3, "answer": -12, "grader": "exact", "prompt": "Say -12."},
    ]
    tasks = read_tasks(write_lines(tmp_path / "tasks.jsonl", rows))
    assert [(task.id, task.answer) for task in tasks] == [("1", "5"), ("2", "0.25"), ("3", "-12")]
    assert asyncio.run(grade(tasks[1], "It is 0.25.")).score == 1.0
    assert asyncio.run(grade(tasks[1], "It is 0.5.")).score == 0.0
    # a whole float is the integer only as an id: an answer keeps what it was written as
    written = {**GOOD, "id": 4.0, "answer": 7.0, "grader": "exact", "prompt": "Say 7.0."}
    [task] = read_tasks(write_lines(tmp_path / "whole.jsonl", [written]))
    assert (task.id, task.answer) == ("4", "7.0")


@pytest.mark.parametrize("answer", [True, ["5"], {"value": 5}])
def test_an_answer_that_is_not_text_or_a_number_is_refused_saying_how_to_write_it(
    tmp_path: Path, answer: object
) -> None:
    message = read_error(tmp_path, [GOOD, {**GOOD, "id": "q2", "answer": answer}])
    assert f"tasks.jsonl, line 2: 'answer' must be text, got {answer!r}; write it in quotes" in (
        message
    )


@pytest.mark.parametrize(
    ("answer", "value"), [("1,200", 1200.0), ("-1,234.5", -1234.5), ("$1,000,000", 1e6)]
)
def test_a_number_answer_with_thousands_commas_is_read_whole(answer: str, value: float) -> None:
    task = Task.model_validate({**GOOD, "answer": answer})
    assert asyncio.run(grade(task, f"It is {value}.")).score == 1.0


@pytest.mark.parametrize(
    ("answer", "value"),
    [
        ("\u22127", -7.0),
        ("12.", 12.0),
        ("3/4.", 0.75),
        ("$5", 5.0),
        ("50%", 50.0),
        ("3/4", 0.75),
        (" 1,200 ", 1200.0),
    ],
)
def test_a_number_answer_as_a_person_writes_it_is_read(answer: str, value: float) -> None:
    """A reference copied with its typographic minus (U+2212), a closing period (after a
    fraction too), a dollar sign or a percent sign is the number it shows, not refused as
    "not a number"."""
    assert parse_number(answer) == value
    assert Task.model_validate({**GOOD, "answer": answer}).answer == answer


def test_bad_json_and_non_objects(tmp_path: Path) -> None:
    assert "line 2: not valid JSON" in read_error(tmp_path, [GOOD, "{'id': 'q2'"])
    # a list of tasks on line 1 (a .json): "expected a JSON object, got list" did not say
    assert "line 1: the file holds a JSON list, not JSON Lines" in read_error(tmp_path, [[GOOD]])
    assert "line 2: expected a JSON object ({...}), got an array" in read_error(
        tmp_path, [GOOD, [GOOD]]
    )


@pytest.mark.parametrize("line", [1, 2])
def test_a_single_backslash_in_a_string_is_named_with_how_to_write_it(
    tmp_path: Path, line: int
) -> None:
    """A Windows path or a regex typed by hand ("C:\\Users", "\\d+") holds a backslash that
    JSON does not take alone: line 1 was told "the file does not start as JSON Lines ... check
    that it is the file meant", a later line "a Python dict (single quotes, True, None)"."""
    windows = json.dumps({**GOOD, "id": "w", "prompt": "Open C:/Users/me/new.txt"}).replace(
        "/", "\\"
    )
    rows: list[dict | str] = [GOOD, windows] if line == 2 else [windows]
    message = read_error(tmp_path, rows)
    assert message.startswith(f"{tmp_path / 'tasks.jsonl'}, line {line}: a backslash ")
    column = windows.index("\\") + 1
    assert (
        f"('\\U' at column {column})" in message and "\\\\" in message and "json.dumps" in message
    )
    assert "Python dict" not in message and "file meant" not in message
    write_lines(tmp_path / "tasks.jsonl", [windows.replace("\\", "\\\\")])  # as advised
    assert read_tasks(tmp_path / "tasks.jsonl")[0].prompt == "Open C:\\Users\\me\\new.txt"


@pytest.mark.parametrize("line", [1, 2])
def test_a_line_break_typed_inside_a_prompt_is_named_with_how_to_write_it(
    tmp_path: Path, line: int
) -> None:
    """A prompt pasted over two lines (a raw line break inside the JSON string) was told, on
    line 1, that the file "looks pretty-printed ... e.g. jq -c", which cannot read it either,
    and on a later line "not valid JSON (Invalid control character at at column 30)"."""
    prompt = "Line one\nline two"
    broken = json.dumps({**GOOD, "id": "b", "prompt": prompt}).replace("\\n", "\n")
    rows: list[dict | str] = [GOOD, broken] if line == 2 else [broken]
    message = read_error(tmp_path, rows)
    column = broken.index("\n") + 1
    assert message == (
        f"{tmp_path / 'tasks.jsonl'}, line {line}: a line break inside a string (column "
        f"{column}): JSON Lines holds each object on one line, so a line break in a text is "
        "written \\n; write each row with json.dumps(row)"
    )


def test_a_tab_typed_inside_a_prompt_is_named_with_how_to_write_it(tmp_path: Path) -> None:
    """A raw tab in a string (pasted from a spreadsheet's cells) read "not valid JSON (Invalid
    control character at at column 25); fix or delete that line", naming neither the tab
    nor its escape."""
    tabbed = json.dumps({**GOOD, "id": "t", "prompt": "a\tb"}).replace("\\t", "\t")
    message = read_error(tmp_path, [GOOD, tabbed])
    assert message == (
        f"{tmp_path / 'tasks.jsonl'}, line 2: a control character ('\\t') inside a string "
        f"(column {tabbed.index(chr(9)) + 1}): JSON writes it escaped (a tab as \\t); write "
        "each row with json.dumps(row)"
    )


@pytest.mark.parametrize(
    ("last", "problem"),
    [
        ('{"id": "q2", "prompt": "cut', "Invalid control character at column 28"),
        ('{"id": "q2", "prompt": "cut', "Unterminated string starting at column 24"),
    ],
)
def test_a_line_cut_short_says_at_once(tmp_path: Path, last: str, problem: str) -> None:
    """JSON's own messages end in "at" ("Unterminated string starting at"), and the reader
    added " at column N": "starting at at column 24"."""
    path = tmp_path / "tasks.jsonl"
    end = "\n" if "control" in problem else ""  # with its newline, or the file ends in it
    path.write_text(json.dumps(GOOD) + "\n" + last + end, encoding="utf-8")
    with pytest.raises(TaskFileError) as raised:
        read_tasks(path)
    assert (
        str(raised.value) == f"{path}, line 2: not valid JSON ({problem}); fix or delete that line"
    )


def test_a_nan_answer_or_id_is_no_value_not_the_text_nan(tmp_path: Path) -> None:
    """json.dumps writes a missing float (pandas' NaN) as NaN: a judge task's "answer": NaN
    became the reference answer "nan" given to the judge, an "id": NaN the id "nan"."""
    judge = {**GOOD, "grader": "judge", "answer": math.nan}
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps(judge) + "\n", encoding="utf-8")
    assert read_tasks(path)[0].answer is None
    nan_id = read_error(tmp_path, [json.dumps({**GOOD, "id": math.nan})])
    assert nan_id.endswith("line 1: 'id' has no value (null or NaN); give it one")


def test_chat_messages_given_as_the_prompt_say_they_go_in_messages(tmp_path: Path) -> None:
    """A record and a long-format row hold chat messages in 'prompt'; a task written so was
    told "'prompt' must be text, got [{'role': ...}]; write it in quotes"."""
    messages = [{"role": "user", "content": "What is 2 + 3?"}]
    assert read_error(tmp_path, [{**GOOD, "prompt": messages}]).endswith(
        "line 1: 'prompt' holds chat messages, which a task gives as 'messages' (a record holds "
        "them in 'prompt'); rename the key to 'messages'"
    )
    path = write_lines(tmp_path / "tasks.jsonl", [{**GOOD, "prompt": None, "messages": messages}])
    assert read_tasks(path)[0].chat_messages() == messages  # as advised
    texts = read_error(tmp_path, [{**GOOD, "prompt": ["What is", "2 + 3?"]}])  # no messages
    assert "holds chat messages" not in texts and "'prompt' must be text" in texts
    empty = read_error(tmp_path, [{**GOOD, "prompt": []}])
    assert "holds chat messages" not in empty and "'prompt' must be text" in empty


def test_messages_that_are_not_a_list_say_how_to_write_them(tmp_path: Path) -> None:
    """ "messages": {"role": "user", ...} (one message) or "messages": "text" read
    "messages: Input should be a valid list (got ...)", saying neither the [ ] nor 'prompt'."""
    message = {"role": "user", "content": "What is 2 + 3?"}
    one = read_error(tmp_path, [{**GOOD, "prompt": None, "messages": message}])
    assert one.endswith(
        "line 1: 'messages' is one message object (role 'user'), not a list of messages; "
        "messages are a list, even of one message: put it in [ ]"
    )
    text = read_error(tmp_path, [{**GOOD, "prompt": None, "messages": "What is 2 + 3?"}])
    assert text.endswith(
        "line 1: 'messages' is text, not a list of chat messages; give a text prompt as 'prompt'"
    )


def test_a_task_table_is_refused_saying_how_to_convert_it(tmp_path: Path) -> None:
    """A CSV of tasks was told "a CSV or other table is imported with `fugu-lite data import`
    first", which makes reward records, not tasks."""
    path = tmp_path / "tasks.csv"
    path.write_text("id,prompt,answer,grader,task\nq1,What is 2 + 3?,5,number,math\n")
    with pytest.raises(TaskFileError) as raised:
        read_tasks(path)
    assert str(raised.value) == (
        f"{path}: a task file is JSON Lines (one task object a line), not a .csv table; convert "
        "the table, e.g. with pandas: pandas.read_csv('tasks.csv').to_json('tasks.jsonl', "
        "orient='records', lines=True) (README 'Tasks and graders')"
    )
    assert "data import" not in str(raised.value)
    pd.read_csv(path).to_json(tmp_path / "tasks.jsonl", orient="records", lines=True)
    assert read_tasks(tmp_path / "tasks.jsonl") == [Task.model_validate(GOOD)]
    write_lines(path, [GOOD])  # JSON Lines under a .csv name is still read
    assert read_tasks(path) == [Task.model_validate(GOOD)]
    shouted = tmp_path / "TASKS.CSV"  # a suffix in capitals (Windows) is the same table
    shouted.write_text("id,prompt,answer,grader,task\nq1,What is 2 + 3?,5,number,math\n")
    with pytest.raises(TaskFileError, match=r"not a \.CSV table; .*pandas\.read_csv\('TASKS"):
        read_tasks(shouted)


def test_duplicate_ids_name_both_lines(tmp_path: Path) -> None:
    message = read_error(tmp_path, [GOOD, {**GOOD, "id": "q9"}, {**GOOD, "prompt": "Other?"}])
    assert "line 3: id 'q1' was already used on line 1" in message


@pytest.mark.parametrize("field", ["answer", "id"])
def test_an_infinite_answer_or_id_says_it_is_not_a_finite_number(
    tmp_path: Path, field: str
) -> None:
    """JSON's Infinity as an answer was told "grader 'number' needs an 'answer' ... add one"
    (and as an id "'id' has no value"), though the line has one."""
    for value, written in ((math.inf, "Infinity"), (-math.inf, "-Infinity")):
        message = read_error(tmp_path, [json.dumps({**GOOD, field: value})])
        assert message.endswith(
            f"line 1: '{field}' is {written}, not a finite number; write a finite number or "
            "text in quotes"
        )


def test_an_id_written_as_a_whole_float_is_the_same_id_as_the_integer(tmp_path: Path) -> None:
    """pandas writes an integer id column holding an empty cell as floats: the ids 1.0 and 1
    (the same JSON number) passed as two tasks, "1.0" and "1"."""
    message = read_error(tmp_path, [{**GOOD, "id": 1}, {**GOOD, "id": 1.0, "prompt": "Other?"}])
    assert message.endswith("line 2: id '1' was already used on line 1; give every task its own id")
    rows = [{**GOOD, "id": 2.0}, {**GOOD, "id": 2.5}, {**GOOD, "id": 1e30}]
    path = write_lines(tmp_path / "tasks.jsonl", rows)
    assert [task.id for task in read_tasks(path)] == ["2", "2.5", "1e+30"]


def test_an_accented_id_in_two_unicode_forms_is_one_id(tmp_path: Path) -> None:
    """ "café" typed as one character and pasted as e and a combining accent looks the same
    in every table, but passed as two ids."""
    composed, decomposed = "caf\u00e9", "cafe\u0301"
    rows = [{**GOOD, "id": composed}, {**GOOD, "id": decomposed, "prompt": "Other?"}]
    message = read_error(tmp_path, rows)
    assert f"line 2: id {decomposed!r} was already used on line 1 (written with other" in message
    assert message.endswith("give every task its own id")
    path = write_lines(tmp_path / "tasks.jsonl", rows[:1])
    assert read_tasks(path)[0].id == composed  # kept as written
    message = read_error(tmp_path, rows[::-1])  # the decomposed one first
    assert f"line 2: id {composed!r} was already used on line 1 (written with other" in message


def test_an_id_or_task_name_with_spaces_around_it_is_read_without_them(tmp_path: Path) -> None:
    """ "q1 " beside "q1" (a cell typed with a trailing space, a CSV written with a space after
    each comma) passed as two ids, both shown as q1, and "math " was a task family of its own
    beside "math" in tables and records (the long importer strips its task cells)."""
    spaced = {**GOOD, "id": "q1 ", "prompt": "Other?"}
    assert "line 2: id 'q1' was already used on line 1" in read_error(tmp_path, [GOOD, spaced])
    path = write_lines(tmp_path / "tasks.jsonl", [{**spaced, "id": " q2\t", "task": " math "}])
    assert [(task.id, task.task) for task in read_tasks(path)] == [("q2", "math")]
    assert "'id' is blank" in read_error(tmp_path, [{**GOOD, "id": "  "}])
    assert "'task' is blank" in read_error(tmp_path, [{**GOOD, "task": " "}])


def test_empty_and_missing_files(tmp_path: Path) -> None:
    assert "holds no tasks" in read_error(tmp_path, [""])
    with pytest.raises(TaskFileError, match="file not found"):
        read_tasks(tmp_path / "absent.jsonl")


def test_prompt_text_and_split_agree_with_reward_records() -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}]
    task = Task(id="m", messages=messages, answer="4", grader="number", task="math")
    record = RewardRecord(
        prompt=task.record_prompt(), split=task.resolved_split(), worker_ids=["a"], rewards=[1.0]
    )
    assert task.prompt_text() == record.prompt_text == "system: Be brief.\nuser: 2+2?"
    assert task.resolved_split() == standard_split(record.prompt_text)
    assert task.chat_messages() == messages
    plain = Task.model_validate(GOOD)
    assert plain.chat_messages() == [{"role": "user", "content": "What is 2 + 3?"}]
    assert plain.model_copy(update={"split": "test"}).resolved_split() == "test"


def test_a_per_family_count_above_its_limit_is_refused_before_any_work(tmp_path: Path) -> None:
    """A typo like --per-family 100000000 for a family that does not run out of prompts
    (arithmetic makes thousands a second) ran for hours, growing to fill memory and disk;
    above its limit the count is refused at once, naming the option and the limit."""
    path = tmp_path / "tasks.jsonl"
    args = ["tasks", "generate", "-o", str(path), "--family", "arithmetic", "--per-family"]
    refused = CliRunner().invoke(app, [*args, "100000000"])
    assert refused.exit_code == 2
    said = " ".join(refused.output.split())
    assert "--per-family 100000000 is above its limit of 100000 tasks per family" in said
    assert not path.exists()
    assert CliRunner().invoke(app, [*args, "3"]).exit_code == 0
    assert len(read_tasks(path)) == 3


def test_a_per_family_count_at_its_limit_is_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The limit is "at most": a count equal to it is made, one more is refused."""
    monkeypatch.setattr("fugu_lite.task_families.MAX_PER_FAMILY", 3)
    path = tmp_path / "tasks.jsonl"
    args = ["tasks", "generate", "-o", str(path), "--family", "list", "--force", "--per-family"]
    assert CliRunner().invoke(app, [*args, "3"]).exit_code == 0
    assert len(read_tasks(path)) == 3
    assert CliRunner().invoke(app, [*args, "4"]).exit_code == 2


def test_the_per_family_help_names_its_limit() -> None:
    """`tasks generate --help` showed `--per-family [x>=1]`, no upper limit, though a count
    above MAX_PER_FAMILY is refused; the help names the limit the refusal uses."""
    from fugu_lite.task_families import MAX_PER_FAMILY

    shown = CliRunner().invoke(app, ["tasks", "generate", "--help"], terminal_width=200)
    assert shown.exit_code == 0
    assert f"Tasks per family, at most {MAX_PER_FAMILY}." in " ".join(shown.output.split())


def test_cli_generates_and_checks_task_files(tmp_path: Path) -> None:
    runner = CliRunner()
    path = tmp_path / "tasks.jsonl"
    made = runner.invoke(app, ["tasks", "generate", "-o", str(path), "--per-family", "4"])
    assert made.exit_code == 0, made.output
    assert "wrote 24 tasks" in made.output
    assert read_tasks(path) == generate_tasks(4, seed=0)
    checked = runner.invoke(app, ["tasks", "check", str(path)])
    assert checked.exit_code == 0 and "arithmetic" in checked.output
    assert checked.output in made.output  # generate shows the summary check shows
    seeded = tmp_path / "seeded.jsonl"
    made = runner.invoke(
        app, ["tasks", "generate", "-o", str(seeded), "--per-family", "4", "--seed", "3"]
    )
    assert made.exit_code == 0, made.output
    assert read_tasks(seeded) == generate_tasks(4, seed=3) != generate_tasks(4, seed=0)
    code_only = tmp_path / "code.jsonl"
    made = runner.invoke(
        app, ["tasks", "generate", "-o", str(code_only), "--per-family", "3", "--family", "code"]
    )
    assert made.exit_code == 0, made.output
    assert read_tasks(code_only) == generate_tasks(3, families=["code"])
    unknown = runner.invoke(
        app, ["tasks", "generate", "-o", str(tmp_path / "x.jsonl"), "--family", "maths"]
    )
    assert unknown.exit_code == 2
    assert "unknown task family 'maths'" in " ".join(unknown.output.split())
    assert not (tmp_path / "x.jsonl").exists()
    bad = write_lines(tmp_path / "bad.jsonl", [{**GOOD, "grader": "nubmer"}])
    checked = runner.invoke(app, ["tasks", "check", str(bad)])
    assert checked.exit_code == 2
    assert "line 1: unknown grader 'nubmer'; did you mean 'number'?" in " ".join(
        checked.output.split()
    )


@pytest.mark.parametrize(
    ("prompt", "answer", "refused"),
    [
        ("Which is larger?\n(A) 97\n(B) 67\nAnswer with the letter.", "C", True),
        ("Pick one: A) red B) blue", "E", True),
        ("Which is larger?\n(A) 97\n(B) 67\nAnswer with the letter.", "b", False),
        ("Pick one: A) red B) blue C) green", "C", False),
        ("Answer with a letter from A to D.", "D", False),  # options not listed: not judged
        ("Note A: pick the larger of 97 and 67. Answer A or B.", "B", False),  # one "option"
        ("Which is larger?\n(A) 97\n(C) 67", "B", False),  # not run from A: not judged
    ],
)
def test_a_choice_answer_not_among_the_listed_options_is_refused(
    tmp_path: Path, prompt: str, answer: str, refused: bool
) -> None:
    """A choice task whose answer letter is not one of the options its prompt lists (C for a
    question with options A and B) was accepted by `tasks check` and collect: no reply could
    score 1, and the right one scored 0."""
    path = tmp_path / "tasks.jsonl"
    row = {"id": "q", "prompt": prompt, "answer": answer, "grader": "choice", "task": "t"}
    path.write_text(json.dumps(row) + "\n")
    if not refused:
        assert [task.answer for task in read_tasks(path)] == [answer]
        return
    with pytest.raises(TaskFileError) as raised:
        read_tasks(path)
    message = str(raised.value)
    assert f"{path}, line 1: answer {answer!r} is not one of the options" in message
    assert "right option" in message


def test_messages_with_a_question_and_a_blank_system_message_are_read(tmp_path: Path) -> None:
    messages = [{"role": "system", "content": ""}, {"role": "user", "content": "2 + 3?"}]
    path = write_lines(tmp_path / "t.jsonl", [{**GOOD, "prompt": None, "messages": messages}])
    assert read_tasks(path)[0].prompt_text() == "system: \nuser: 2 + 3?"


@pytest.mark.parametrize("grader", ["missing", None, 3])
def test_a_task_without_a_grader_name_is_told_the_graders(tmp_path: Path, grader: object) -> None:
    """A missing or null grader said only "add it" / "write it in quotes", leaving the user
    to find the grader names in the README; now the message lists them."""
    row = {k: v for k, v in GOOD.items() if k != "grader"}
    if grader != "missing":
        row["grader"] = grader
    message = read_error(tmp_path, [GOOD, {**row, "id": "q2"}])
    said = "missing field 'grader'" if grader == "missing" else f"got {grader!r}"
    assert "tasks.jsonl, line 2: " in message and said in message
    assert "known graders: number, choice, exact, regex, code, judge" in message


@pytest.mark.parametrize("difficulty", [7, 4, 0, "hard", 1.5])
def test_a_bad_difficulty_is_told_the_levels(tmp_path: Path, difficulty: object) -> None:
    """ "difficulty": "hard" was told "Input should be a valid integer, unable to parse
    string as an integer", and 7 "less than or equal to 3", neither naming the levels."""
    message = read_error(tmp_path, [GOOD, {**GOOD, "id": "q2", "difficulty": difficulty}])
    assert (
        f"tasks.jsonl, line 2: 'difficulty' must be 1 (easy), 2 (medium) or 3 (hard), got "
        f"{difficulty!r}; or leave it out" in message
    )


def test_tasks_check_counts_each_familys_tasks_under_their_splits(tmp_path: Path) -> None:
    rows = [
        {**GOOD, "id": f"q{i}", "prompt": f"What is {i} + 3?", "split": split}
        for i, split in enumerate(["train", "validation", "validation", "test", "test", "test"])
    ]
    result = CliRunner().invoke(
        app, ["tasks", "check", str(write_lines(tmp_path / "t.jsonl", rows))], terminal_width=200
    )
    assert result.exit_code == 0
    assert re.search(r"task +┃ grader +┃ train +┃ validation +┃ test", result.output)
    assert re.search(r"math +│ number +│ 1 +│ 2 +│ 3 ", result.output), result.output


def test_tasks_check_warns_of_a_prompt_asked_twice(tmp_path: Path) -> None:
    """Two tasks with one prompt passed `tasks check` in silence: collect pays the workers
    for both, and training uses both records."""
    rows = [GOOD, {**GOOD, "id": "q2", "prompt": "What is 4 + 4?", "answer": "8"}]
    rows += [{**GOOD, "id": "q3"}, {**GOOD, "id": "q4"}]
    result = CliRunner().invoke(
        app, ["tasks", "check", str(write_lines(tmp_path / "t.jsonl", rows))]
    )
    assert result.exit_code == 0
    warning = " ".join(result.output.split())
    assert "warning:" in warning and "2 tasks repeat the prompt of an earlier one" in warning
    assert "first: 'q3', the prompt of 'q1'" in warning
    unique = write_lines(tmp_path / "u.jsonl", rows[:2])
    assert "warning" not in CliRunner().invoke(app, ["tasks", "check", str(unique)]).output


def test_tasks_given_as_messages_repeat_a_prompt_only_when_their_messages_do() -> None:
    """Tasks of chat messages have no 'prompt': their text is the messages'."""
    row = {k: v for k, v in GOOD.items() if k != "prompt"}
    tasks = [
        Task.model_validate(row | {"id": f"m{i}", "messages": [{"role": "user", "content": text}]})
        for i, text in enumerate(["What is 2 + 3?", "What is 4 + 4?", "What is 2 + 3?"])
    ]
    assert [(repeat.id, first.id) for repeat, first in repeated_prompts(tasks)] == [("m2", "m0")]


def test_tasks_check_names_a_repeated_prompt_in_another_split(tmp_path: Path) -> None:
    """The repeat warning said that training keeps the first record of a prompt only, which
    it does not (every record is a training example), and said nothing of a repeat given
    another split: one prompt in train and test, scored by evaluation after being learnt."""
    rows = [
        {**GOOD, "split": "train"},
        {**GOOD, "id": "q2", "split": "train"},
        {**GOOD, "id": "q3", "split": "test"},
        {**GOOD, "id": "q4", "split": "train"},
    ]
    path = write_lines(tmp_path / "t.jsonl", rows)
    warning = " ".join(CliRunner().invoke(app, ["tasks", "check", str(path)]).output.split())
    assert "keeps the first record" not in warning
    assert "writes a record for each, all of which training uses" in warning
    assert "3 tasks repeat" in warning and "and 1 of them are in another split" in warning
    assert "another split than that earlier task ('q3' in test, 'q1' in train)" in warning
    assert "so two splits share a prompt" in warning
    same_split = write_lines(tmp_path / "s.jsonl", rows[:2])
    output = CliRunner().invoke(app, ["tasks", "check", str(same_split)]).output
    assert "1 tasks repeat" in " ".join(output.split()) and "another split" not in output
    # a split written out that is the standard split of the prompt is no other split
    standard = {**GOOD, "id": "q2", "split": standard_split(GOOD["prompt"])}
    same_split = write_lines(tmp_path / "d.jsonl", [GOOD, standard])
    output = CliRunner().invoke(app, ["tasks", "check", str(same_split)]).output
    assert "1 tasks repeat" in " ".join(output.split()) and "another split" not in output
    # an id is shown as written, not read as console markup
    marked = write_lines(tmp_path / "m.jsonl", [GOOD, {**GOOD, "id": "[bold]q2"}])
    output = CliRunner().invoke(app, ["tasks", "check", str(marked)]).output
    assert "(first: '[bold]q2'" in " ".join(output.split())


@pytest.mark.parametrize("blank", ["  ", ""])
@pytest.mark.parametrize(
    ("field", "expected"),
    [("id", "'id' is blank; give every task an id of its own"), ("task", "'task' is blank")],
)
def test_a_blank_id_or_task_name_is_refused(
    tmp_path: Path, field: str, expected: str, blank: str
) -> None:
    """ "id": "  " and "task": " " were read: records no one can tell apart by id, and a
    family shown as an empty cell in every table. An empty one ("") is told so too, not as
    "String should have at least 1 character"."""
    message = read_error(tmp_path, [GOOD, {**GOOD, "id": "q2", field: blank}])
    assert f"tasks.jsonl, line 2: {expected}" in message


@pytest.mark.parametrize(
    "value", [Fraction(1, 10**7), -2.5e-7, 0.000123456, Fraction(3, 4), 8.5, 12.0, -31, 1 / 3]
)
def test_a_formatted_answer_reads_back_as_its_value(value: float | Fraction) -> None:
    """format_number wrote 1e-7 as "0" (six decimals, then zeros stripped): a reference
    answer that the number grader would have matched against 0."""
    text = format_number(value)
    assert parse_number(text) == pytest.approx(float(value), rel=1e-6, abs=0)


def test_a_comma_after_a_tasks_last_field_is_named_not_called_a_python_dict(
    tmp_path: Path,
) -> None:
    """A hand-written line with a comma after its last field ({..., "task": "math",}), which
    Python reads, was told it is "a Python dict (single quotes, True, None), not JSON"."""
    line = json.dumps(GOOD).removesuffix("}") + ",}"
    message = read_error(tmp_path, [GOOD | {"id": "q0"}, line])
    assert message.endswith(
        "tasks.jsonl, line 2: a comma after the last item of an object or list (before its } "
        "or ]), which JSON does not take; delete that comma"
    )
    assert "Python dict" in read_error(tmp_path, [str(GOOD)])  # still said of a Python dict


def test_an_integer_of_more_digits_than_python_reads_names_its_line(tmp_path: Path) -> None:
    """A task's "answer" written as a 5000-digit JSON number failed with Python's "Exceeds the
    limit (4300 digits) for integer string conversion ... use sys.set_int_max_str_digits()",
    naming no file nor line."""
    line = json.dumps(GOOD).replace('"5"', "1" * 5000)
    message = read_error(tmp_path, [GOOD | {"id": "q0"}, line])
    assert message.endswith(
        "tasks.jsonl, line 2: an integer of more than 4300 digits, more than Python reads; write "
        "it as a string (in quotes)"
    )


def test_a_task_tables_empty_case_sensitive_cell_is_the_default(tmp_path: Path) -> None:
    """A table of tasks converted as the error for a task table says (pandas' read_csv, then
    to_json) writes an empty case_sensitive cell as null, which was refused as
    "case_sensitive: Input should be a valid boolean (got None)"."""
    table = tmp_path / "tasks.csv"
    table.write_text(
        "id,prompt,answer,grader,task,case_sensitive\n"
        "q1,What is 2 + 3?,5,number,math,\nq2,Write ABC in lowercase.,abc,exact,strings,true\n"
    )
    pd.read_csv(table).to_json(tmp_path / "tasks.jsonl", orient="records", lines=True)
    first, second = read_tasks(tmp_path / "tasks.jsonl")
    assert (first.case_sensitive, second.case_sensitive) == (False, True)
    line = json.dumps(GOOD | {"case_sensitive": math.nan})  # json.dumps writes NaN
    assert not read_tasks(write_lines(tmp_path / "nan.jsonl", [line]))[0].case_sensitive


def test_a_messages_text_under_another_key_says_it_goes_in_content(tmp_path: Path) -> None:
    """{"role": "user", "text": "..."} (or ShareGPT's "value") was refused as "every
    message's 'content' is empty" without a word of the text it holds elsewhere."""
    message = {"role": "user", "text": "What is 2 + 3?"}
    row = {k: v for k, v in GOOD.items() if k != "prompt"} | {"messages": [message]}
    assert read_error(tmp_path, [row]).endswith(
        "every message's 'content' is empty; write the question the workers should answer in "
        "a user message (a message's text goes in 'content'; 'text' is not read)"
    )
    blank = {"role": "user", "content": "", "text": " "}  # nothing to move to 'content'
    row["messages"] = [blank]
    assert read_error(tmp_path, [row]).endswith("in a user message")


def test_messages_given_as_texts_say_what_a_message_is(tmp_path: Path) -> None:
    """ "messages": ["What is 2 + 3?"] was refused as "messages.0: Input should be a valid
    dictionary or instance of ChatMessage", pydantic's words for what a message is."""
    row = {k: v for k, v in GOOD.items() if k != "prompt"} | {"messages": ["What is 2 + 3?"]}
    assert read_error(tmp_path, [row]).endswith(
        'line 1: messages.0 is a text, not a message object: a message is {"role": "user", '
        '"content": "..."}; a question alone can be given as \'prompt\''
    )
