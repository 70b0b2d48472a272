"""`fugu-lite tasks generate` and `tasks check`: checkable task files."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Column, Table

from ..text import console_name
from ..text_reading import RecordFileError
from .common import (
    ForceOption,
    JsonlOutputOption,
    check_file_to_write,
    command_group,
    console,
    err_console,
    fail,
    print_result,
    writing_file,
)

tasks_app = command_group("Generate and check task files.")


@tasks_app.command("generate")
def tasks_generate(
    output: JsonlOutputOption,
    per_family: Annotated[int, typer.Option(help="Tasks per family, at most 100000.", min=1)] = 10,
    seed: Annotated[int, typer.Option(help="The same seed gives the same tasks.")] = 0,
    family: Annotated[
        list[str] | None,
        typer.Option(
            metavar="<family>",
            help="Only this family (repeat for several): arithmetic, unit_conversion, string, "
            "list, logic, code. Default: all.",
        ),
    ] = None,
    force: ForceOption = False,
) -> None:
    """Checkable tasks (arithmetic, units, strings, lists, logic, code) for offline use."""
    from ..task_families import MAX_PER_FAMILY, check_families, generate_tasks
    from ..tasks import write_tasks

    try:
        check_families(family)
    except ValueError as error:
        fail(str(error))
    if per_family > MAX_PER_FAMILY:
        fail(
            f"--per-family {per_family} is above its limit of {MAX_PER_FAMILY} tasks per "
            "family (that many would take hours and fill the disk); ask for fewer"
        )
    check_file_to_write(output, force, "tasks.jsonl")
    with writing_file(output):
        try:
            tasks = generate_tasks(per_family, seed, family)
            written = write_tasks(output, tasks)
        except ValueError as error:
            fail(str(error))
    print_result(f"wrote {written} tasks to {output}")
    print_task_summary(tasks)


@tasks_app.command("check")
def tasks_check(path: Annotated[Path, typer.Argument(help="Task JSONL file.")]) -> None:
    """Read a task file, report the first problem (file, line, fix) or a summary."""
    from ..tasks import read_tasks, repeated_prompts

    try:
        tasks = read_tasks(path)
    except RecordFileError as error:
        fail(str(error))
    repeats = repeated_prompts(tasks)
    if repeats:
        err_console.print(f"[yellow]warning:[/yellow] {_repeats_text(path, repeats)}")
    print_task_summary(tasks)


def _repeats_text(path: Path, repeats: list) -> str:
    """What tasks repeating a prompt lead to: collect writes a record for each copy, and
    training uses every record (it was said to keep the first only); a copy in another split
    than its first puts one prompt in two splits."""
    repeat, first = repeats[0]
    text = (
        f"{console_name(str(path))}: {len(repeats)} tasks repeat the prompt of an earlier one "
        f"(first: '{console_name(repeat.id)}', the prompt of '{console_name(first.id)}'); "
        "collect asks the workers for each and writes a record for each, all of which "
        "training uses"
    )
    across = [(r, f) for r, f in repeats if r.resolved_split() != f.resolved_split()]
    if across:
        repeat, first = across[0]
        text += (
            f", and {len(across)} of them are in another split than that earlier task "
            f"('{console_name(repeat.id)}' in {repeat.resolved_split()}, "
            f"'{console_name(first.id)}' in {first.resolved_split()}), so two splits share "
            "a prompt: evaluation would score prompts the router was trained on"
        )
    return text + ": remove the repeats or make them differ"


def print_task_summary(tasks: list) -> None:
    from collections import Counter

    counts = Counter((task.task, task.grader, task.resolved_split()) for task in tasks)
    table = Table(
        Column("task", overflow="fold"), "grader", "train", "validation", "test", title="tasks"
    )  # a long family name is folded, never cut: two may share a long prefix
    for family, grader in sorted({(f, g) for f, g, _ in counts}):
        splits = [str(counts[family, grader, split]) for split in ("train", "validation", "test")]
        table.add_row(console_name(family), grader, *splits)
    console.print(table)
