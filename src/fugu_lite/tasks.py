"""Tasks with checkable answers: the JSONL format, its validation, reader and writer.

One task a line:

    {"id": "q1", "prompt": "What is 2 + 3?", "answer": "5", "grader": "number",
     "task": "arithmetic"}

`prompt` (text) or `messages` (chat messages), never both. `answer` is required by the
number / choice / exact / regex graders, `tests` (Python unit tests) by the code grader;
the judge grader takes an optional `rubric` and uses `answer` as a reference when given.
`split` is optional: without it the standard split of the prompt text applies.

The generator of the built-in task families (`generate_tasks`) lives in `task_families`.
"""

from __future__ import annotations

import ast
import difflib
import math
import re
import unicodedata
from collections.abc import Iterable
from fractions import Fraction
from pathlib import Path

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails

from .datasets.split import standard_split
from .io import check_message, iter_jsonl, write_jsonl
from .schemas import (
    SPLIT_VALUES_TEXT,
    ChatMessage,
    Split,
    SplitField,
    id_as_read,
    message_text,
    number_as_text,
    text_elsewhere_hint,
    whole_number,
)
from .text_reading import RecordFileError

GRADERS: tuple[str, ...] = ("number", "choice", "exact", "regex", "code", "judge")
ANSWER_GRADERS: tuple[str, ...] = ("number", "choice", "exact", "regex")
CHOICE_LETTERS = "ABCDE"


TABLE_SUFFIXES: dict[str, str] = {
    ".csv": "csv",
    ".tsv": "table",
    ".xlsx": "excel",
    ".parquet": "parquet",
}
"""Tables a user may hold tasks in, and the pandas reader of each."""


class TaskFileError(RecordFileError):
    """A task file could not be read; the message names the file, the line and the fix."""


class Task(BaseModel):
    """One prompt and what a grader needs to score an answer to it."""

    model_config = ConfigDict(extra="forbid")

    id: str
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    answer: str | None = None
    tests: str | None = None
    grader: str
    task: str
    split: SplitField | None = None
    rubric: str | None = None
    case_sensitive: bool = False
    """exact / regex graders: compare case-sensitively (default: ignore case)."""
    difficulty: int | None = Field(default=None, ge=1, le=3)
    """1 easy, 2 medium, 3 hard (set by the generator; informative only)."""

    @field_validator("id", "answer", mode="before")
    @classmethod
    def _number_as_text(cls, value: object, info: ValidationInfo) -> object:
        """A hand-written file's `"answer": 42` or `"id": 7` means "42" and "7", and `"id":
        7.0` (pandas writes an integer column with an empty cell as floats) is the id 7 too.
        JSON's Infinity is no number a task can hold (not the missing value NaN is)."""
        if isinstance(value, float) and math.isinf(value):
            written = "Infinity" if value > 0 else "-Infinity"
            raise ValueError(
                f"'{info.field_name}' is {written}, not a finite number; write a finite number "
                "or text in quotes"
            )
        if info.field_name == "id" and isinstance(value, float) and whole_number(value):
            value = int(value)
        return number_as_text(value)

    @field_validator("case_sensitive", mode="before")
    @classmethod
    def _no_value_is_the_default(cls, value: object) -> object:
        """null or NaN (pandas' to_json of a table's empty cell, as the conversion that a
        task table's error gives writes it) is the default, not "Input should be a valid
        boolean (got None)"."""
        return False if value is None or (isinstance(value, float) and math.isnan(value)) else value

    @field_validator("id", "task", mode="after")
    @classmethod
    def _without_surrounding_spaces(cls, value: str) -> str:
        return id_as_read(value)

    @model_validator(mode="after")
    def _check(self) -> Task:
        for problem in task_problems(self):
            raise ValueError(problem)
        return self

    def chat_messages(self) -> list[dict[str, str]]:
        """OpenAI-shaped messages: the prompt as one user message, or the messages."""
        if self.messages is None:
            return [{"role": "user", "content": self.prompt or ""}]
        return [{"role": m.role, "content": message_text(m)} for m in self.messages]

    def prompt_text(self) -> str:
        """The prompt as one string, the same text RewardRecord.prompt_text gives."""
        if self.messages is None:
            return self.prompt or ""
        return "\n".join(f"{m.role}: {message_text(m)}" for m in self.messages)

    def record_prompt(self) -> str | list[ChatMessage]:
        """What goes into RewardRecord.prompt."""
        return self.messages if self.messages is not None else self.prompt or ""

    def resolved_split(self) -> Split:
        """The task's own split, or the standard split of its prompt text."""
        return self.split or standard_split(self.prompt_text())


def id_read_now(saved: str) -> str:
    """The id a task file's number is read as now, from the id an earlier fugu-lite read it
    as (and wrote into its records and call log): a whole float's text such as "1.0" (before
    whole float ids were read as their integer's text) is "1", and 1e30 read as its integer
    ("1000000000000000019884624838656") is "1e+30". Any other id is the same now."""
    try:
        number = float(saved)
    except ValueError:
        return saved
    if not math.isfinite(number):
        return saved
    if saved != str(number) and not (number.is_integer() and saved == str(int(number))):
        return saved  # text no number was read as ("007", "1_000", "1e3")
    return str(int(number)) if whole_number(number) else str(number)


def task_problems(task: Task) -> list[str]:
    """Everything that keeps this task from being graded, each with how to fix it."""
    return [*_name_problems(task), *_prompt_problems(task), *_grader_problems(task)]


def _name_problems(task: Task) -> list[str]:
    """A blank id or task name."""
    problems: list[str] = []
    if not task.id.strip():
        problems.append("'id' is blank; give every task an id of its own, e.g. 'q1'")
    if not task.task.strip():
        problems.append(
            "'task' is blank; name the task's family (shown in tables and records), "
            "e.g. 'arithmetic'"
        )
    return problems


def _prompt_problems(task: Task) -> list[str]:
    """Not exactly one of prompt and messages, or nothing to answer in it."""
    if (task.prompt is None) == (task.messages is None):
        return [
            "give exactly one of 'prompt' (text) or 'messages' (chat messages), "
            + ("not both" if task.prompt is not None else "none was given")
        ]
    if task.prompt is not None and not task.prompt.strip():
        return ["'prompt' is empty; write the question the workers should answer"]
    if task.messages is not None and not task.messages:
        return ["'messages' is an empty list; give at least one user message"]
    # the text collect sends (a list of content parts: its text parts joined) is blank
    if task.messages is not None and not any(
        message_text(message).strip() for message in task.messages
    ):
        return [
            "every message's 'content' is empty; write the question the workers should answer "
            "in a user message" + text_elsewhere_hint(task.messages)
        ]
    return []


def _grader_problems(task: Task) -> list[str]:
    """An unknown grader, or what the grader needs (an answer, tests) missing or unusable."""
    if task.grader not in GRADERS:
        close = difflib.get_close_matches(task.grader, GRADERS, n=1, cutoff=0.5)
        hint = f"did you mean {close[0]!r}? " if close else ""
        return [f"unknown grader {task.grader!r}; {hint}known graders: {', '.join(GRADERS)}"]
    if task.grader in ANSWER_GRADERS:
        return _answer_problems(task)
    if task.grader == "code":
        return _tests_problems(task.tests)
    return []


def _answer_problems(task: Task) -> list[str]:
    answer = task.answer
    if answer is None or not answer.strip():
        return [f"grader {task.grader!r} needs an 'answer' (the reference answer); add one"]
    if task.grader == "number" and parse_number(answer) is None:
        return [
            f"answer {answer!r} is not a number; the number grader needs a number such as "
            "'42', '-3.5', '1,200' or '3/4'"
            + (
                " (a comma only separates thousands: write a decimal with a point)"
                if "," in answer
                else ""
            )
        ]
    if task.grader == "choice":
        letter = choice_letter(answer)
        if letter is None:
            return [
                f"answer {answer!r} is not an option letter; the choice grader needs one of A-E"
            ]
        listed = listed_options(task.prompt_text())
        if listed and letter not in listed:
            return [
                f"answer {answer!r} is not one of the options the prompt lists "
                f"({', '.join(listed)}), so no reply could score 1; give the letter of the "
                "right option, or add the missing option to the prompt"
            ]
    if task.grader == "regex":
        try:
            pattern = re.compile(answer)
        except re.error as error:
            return [f"answer {answer!r} is not a valid regular expression: {error}"]
        if pattern.search("") is not None and not _has_assertion(answer):
            return [
                f"answer {answer!r} matches the empty string, so every reply would score 1 "
                "(it matches at any place of any text); make it require some text, e.g. "
                "'\\d+' rather than '\\d*', 'yes' rather than 'yes|'"
            ]
    return []


_LOOKAROUNDS = ("(?=", "(?!", "(?<=", "(?<!")


def _has_assertion(pattern: str) -> bool:
    """Whether a pattern holds an anchor (^ $ \\A \\Z), a word boundary (\\b \\B) or a
    lookaround outside its character classes. Without one, a pattern that matches the empty
    string matches it everywhere; with one, it may depend on the text ("^(?!.*no)" is a
    real check). Read conservatively: a comment holding "^" counts as an anchor."""
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if char == "\\":
            if pattern[index + 1 : index + 2] in ("b", "B", "A", "Z"):
                return True
            index += 2
        elif char == "[":
            index = _class_end(pattern, index)
        elif char in "^$" or pattern.startswith(_LOOKAROUNDS, index):
            return True
        else:
            index += 1
    return False


def _class_end(pattern: str, start: int) -> int:
    """The index after the character class opening at `start` ("[^]x]" holds "]" and "x")."""
    index = start + 1
    if pattern[index : index + 1] == "^":
        index += 1
    if pattern[index : index + 1] == "]":
        index += 1
    while index < len(pattern) and pattern[index] != "]":
        index += 2 if pattern[index] == "\\" else 1
    return index + 1


def _tests_problems(tests: str | None) -> list[str]:
    if tests is None or not tests.strip():
        return [
            "grader 'code' needs 'tests': Python code with assert statements or test_* functions"
        ]
    try:
        tree = ast.parse(tests)
    except SyntaxError as error:
        return [f"'tests' is not valid Python (line {error.lineno}: {error.msg}); fix the code"]
    asynchronous = [
        f"test function {node.name} is async (async def), and the code grader runs no event "
        "loop (the sandbox refuses the sockets one needs): make it a plain def"
        for node in tree.body
        if isinstance(node, ast.AsyncFunctionDef) and node.name.startswith("test")
    ]
    if asynchronous:
        return asynchronous
    if count_tests(tree) == 0:
        return ["'tests' holds no test: add top-level assert statements or test_* functions"]
    return [
        f"test function {node.name} takes {', '.join(needed)}, but the code grader calls each "
        "test function with no argument (no pytest fixtures); give the parameters defaults or "
        "build the values inside the function"
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test")
        for needed in [_required_parameters(node.args)]
        if needed
    ]


def _required_parameters(arguments: ast.arguments) -> list[str]:
    """The parameters a call with no argument leaves without a value."""
    positional = [*arguments.posonlyargs, *arguments.args]
    without_default = positional[: len(positional) - len(arguments.defaults)]
    keyword_only = [
        argument
        for argument, default in zip(arguments.kwonlyargs, arguments.kw_defaults, strict=True)
        if default is None
    ]
    return [argument.arg for argument in [*without_default, *keyword_only]]


def count_tests(tree: ast.Module) -> int:
    """Each top-level assert, top-level statement holding one (`for a, b in CASES: assert
    ...`) and top-level test_* function is one test (as the sandbox's harness counts)."""
    return sum(
        _holds_assert(node) or (isinstance(node, ast.FunctionDef) and node.name.startswith("test"))
        for node in tree.body
    )


def _holds_assert(node: ast.AST) -> bool:
    """An assert, or a statement holding one outside the functions and classes it defines."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
        return False
    return isinstance(node, ast.Assert) or any(map(_holds_assert, ast.iter_child_nodes(node)))


_THOUSANDS = re.compile(r"[-+]?\d{1,3}(?:,\d{3})+(?:\.\d*)?")


def parse_number(text: str) -> float | None:
    """A number written as '42', '-3.5', '1,200', '$5', '50%', '3/4'; None otherwise. A
    comma must separate thousands: '2,5' or '1.234,5' (a decimal comma) is None, not 25."""
    cleaned = text.strip().replace("\u2212", "-").replace("$", "")
    cleaned = cleaned.rstrip("%").strip().rstrip(".")
    if "," in cleaned:
        if not _THOUSANDS.fullmatch(cleaned):
            return None
        cleaned = cleaned.replace(",", "")
    try:
        return float(Fraction(cleaned))
    except (ValueError, ZeroDivisionError, OverflowError):
        return None


def choice_letter(text: str) -> str | None:
    """'B', '(b)', 'B)' or 'b.' -> 'B'; None if it is not a single option letter."""
    match = re.fullmatch(r"\s*\(?\s*([A-Ea-e])\s*[).:]?\s*", text)
    return match.group(1).upper() if match else None


OPTION_LINE = re.compile(
    r"(?:^|\s)\(?(?P<letter>[A-E])[).:]\s+(?P<text>[^\n]+?)(?=\s+\(?[A-E][).:]\s|\n|$)"
)
"""One option of a choice prompt: "(A) 97", "B) Bob", "C. blue" (on a line of its own or
after another: "A) 1 B) 2")."""


def listed_options(prompt: str) -> str:
    """The option letters a choice prompt lists ("AB" for "(A) 97\n(B) 67"), read only when
    they run from A without a gap; "" when the prompt lists none that way (its options are
    then written in some other form, which is not judged)."""
    letters = "".join(sorted({match["letter"] for match in OPTION_LINE.finditer(prompt)}))
    return letters if len(letters) >= 2 and CHOICE_LETTERS.startswith(letters) else ""


def format_number(value: float | Fraction | int) -> str:
    """12.0 -> '12', 2.50 -> '2.5', 1/3 -> '0.333333'; below 0.001 six significant digits,
    1e-7 -> '1e-07' (six decimals would round it to '0')."""
    if isinstance(value, Fraction) and value.denominator != 1:
        value = float(value)
    if float(value) == int(value):
        return str(int(value))
    if abs(float(value)) < 0.001:
        return f"{float(value):.6g}"
    return f"{float(value):.6f}".rstrip("0").rstrip(".")


# --- reading and writing -------------------------------------------------------------------


def read_tasks(path: str | Path) -> list[Task]:
    """Read a task JSONL file; a bad line raises TaskFileError naming file, line and fix."""
    path = Path(path)
    tasks: list[Task] = []
    first_of_id: dict[str, tuple[int, str]] = {}
    for line_number, row in _task_rows(path):
        where = f"{path}, line {line_number}"
        task = _validated_task(row, where)
        _check_new_id(task, where, first_of_id)
        first_of_id[_id_key(task.id)] = (line_number, task.id)
        tasks.append(task)
    if not tasks:
        raise TaskFileError(
            f"{path}: holds no tasks; write one JSON object a line "
            "(or create some with `fugu-lite tasks generate`)"
        )
    return tasks


def _task_rows(path: Path) -> list[tuple[int, dict]]:
    """(line number, object) of each line; a table gets the advice to convert it."""
    try:
        return list(iter_jsonl(path))
    except RecordFileError as error:
        if path.suffix.lower() in TABLE_SUFFIXES:
            # iter_jsonl's advice, "a CSV ... is imported with `fugu-lite data import`", makes
            # reward records, not tasks
            raise TaskFileError(
                f"{path}: a task file is JSON Lines (one task object a line), not a "
                f"{path.suffix} table; convert the table, e.g. with pandas: "
                f"pandas.read_{TABLE_SUFFIXES[path.suffix.lower()]}('{path.name}').to_json("
                f"'{path.stem}.jsonl', orient='records', lines=True) (README 'Tasks and graders')"
            ) from error
        raise TaskFileError(str(error)) from error


def _validated_task(row: dict, where: str) -> Task:
    try:
        return Task.model_validate(row)
    except ValidationError as error:
        if "rewards" in row and "worker_ids" in row:
            raise TaskFileError(
                f"{where}: this is a RewardRecord (it has 'rewards'), not a task: a record "
                "file is what collect writes; give a task file (`fugu-lite tasks generate` "
                "writes one; README 'Tasks and graders')"
            ) from error
        raise TaskFileError(f"{where}: {_describe_task_error(error)}") from error


def _id_key(task_id: str) -> str:
    """An accented id typed on one system and pasted from another (é as one character, or e
    and a combining accent) looks the same everywhere: the two are one id."""
    return unicodedata.normalize("NFC", task_id)


def _check_new_id(task: Task, where: str, first_of_id: dict[str, tuple[int, str]]) -> None:
    if _id_key(task.id) not in first_of_id:
        return
    line, first = first_of_id[_id_key(task.id)]
    spelt = (
        ""
        if first == task.id
        else " (written with other Unicode characters there: the same text, e.g. an accent "
        "typed as one character or as a letter and a combining accent)"
    )
    raise TaskFileError(
        f"{where}: id {task.id!r} was already used on line {line}{spelt}; give every task its "
        "own id"
    )


def repeated_prompts(tasks: Iterable[Task]) -> list[tuple[Task, Task]]:
    """Each task whose prompt an earlier task already asks, with that earlier task."""
    first_of: dict[str, Task] = {}
    repeats: list[tuple[Task, Task]] = []
    for task in tasks:
        first = first_of.setdefault(task.prompt_text(), task)
        if first is not task:
            repeats.append((task, first))
    return repeats


def write_tasks(path: str | Path, tasks: Iterable[Task]) -> int:
    """Write tasks as JSONL (atomically); returns how many were written."""
    return write_jsonl(path, list(tasks))


def _describe_task_error(error: ValidationError) -> str:
    fields = list(Task.model_fields)
    parts: list[str] = []
    unknown: list[str] = []
    for item in error.errors():
        location = ".".join(str(part) for part in item["loc"])
        if item["type"] == "extra_forbidden":
            unknown.append(_unknown_field(item, location, fields))
        else:
            parts.append(_field_problem(item, location))
    if unknown:  # one list of the known fields, not one per unknown field
        parts.append(
            f"unknown field{'s' * (len(unknown) > 1)} {', '.join(unknown)}: known fields: "
            f"{', '.join(fields)}"
        )
    return "; ".join(parts)


def _unknown_field(item: ErrorDetails, location: str, fields: list[str]) -> str:
    """The unknown field, with the known one it may misspell."""
    close = difflib.get_close_matches(str(item["loc"][-1]), fields, n=1)
    return f"{location!r}" + (f" (did you mean {close[0]!r}?)" if close else "")


def _field_problem(item: ErrorDetails, location: str) -> str:
    """One validation error of a known field, with how to fix it."""
    if location == "grader":  # missing, null or not text: name the graders to choose
        problem = (
            "missing field 'grader'"
            if item["type"] == "missing"
            else f"'grader' must be a grader's name, got {item.get('input')!r}"
        )
        return f"{problem}; known graders: {', '.join(GRADERS)}"
    if location == "difficulty":
        return (
            f"'difficulty' must be 1 (easy), 2 (medium) or 3 (hard), got "
            f"{item.get('input')!r}; or leave it out"
        )
    if item["type"] == "missing":
        return f"missing field {location!r}; add it"
    if item["type"] == "value_error":
        return check_message(item)
    if location == "split":
        return (
            f"unknown split {item.get('input')!r}; allowed values: {SPLIT_VALUES_TEXT} "
            "(or leave 'split' out to get the standard split)"
        )
    if location == "prompt" and _holds_chat_messages(item.get("input")):
        return (
            "'prompt' holds chat messages, which a task gives as 'messages' (a record holds "
            "them in 'prompt'); rename the key to 'messages'"
        )
    if location == "messages" and isinstance(item.get("input"), dict | str):
        return _messages_not_a_list(item.get("input"))
    if re.fullmatch(r"messages\.\d+", location) and isinstance(item.get("input"), str):
        # ["What is 2+2?"]: "Input should be a valid dictionary or instance of ChatMessage"
        return (
            f"{location} is a text, not a message object: a message is "
            '{"role": "user", "content": "..."}; a question alone can be given as \'prompt\''
        )
    if item["type"] == "string_type" and item.get("input") is None:
        return f"{location!r} has no value (null or NaN); give it one"
    if item["type"] == "string_type":
        return f"{location!r} must be text, got {item.get('input')!r}; write it in quotes"
    return f"{location}: {item['msg']} (got {item.get('input')!r})"


def _holds_chat_messages(value: object) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(item, dict) and "role" in item for item in value)
    )


def _messages_not_a_list(value: object) -> str:
    """How to write 'messages' given as one message object or as text."""
    if isinstance(value, dict):
        return (
            f"'messages' is one message object (role {value.get('role')!r}), not a list of "
            "messages; messages are a list, even of one message: put it in [ ]"
        )
    return "'messages' is text, not a list of chat messages; give a text prompt as 'prompt'"
