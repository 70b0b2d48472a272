"""`fugu-lite collect`: workers answer tasks, graders score them, rewards are appended."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ..config_errors import ConfigError
from ..text import console_name, one_or_many
from ..text_reading import RecordFileError
from .common import (
    PoolOption,
    check_output,
    console,
    err_console,
    fail,
    interrupts_stop_the_run,
    non_empty_path,
    print_result,
    report_interruption,
    same_path,
)

if TYPE_CHECKING:
    from ..collect.summary import CollectSummary
    from ..workers.config import PoolConfig


def collect_command(
    tasks: Annotated[
        Path,
        typer.Option(
            "--tasks",
            "-t",
            parser=non_empty_path("give the task JSONL file"),
            metavar="<path>",
            help="Task JSONL file.",
        ),
    ],
    output: Annotated[
        Path,
        typer.Option(
            "--output",
            "-o",
            parser=non_empty_path("give the RewardRecord JSONL file to add to"),
            metavar="<path>",
            help="RewardRecord JSONL to add to.",
        ),
    ],
    pool: PoolOption = None,
    log: Annotated[
        Path | None,
        typer.Option(
            parser=non_empty_path("give the call log file, or leave --log out for the default"),
            metavar="<path>",
            help="Call log JSONL; default <output stem>.calls.jsonl.",
        ),
    ] = None,
    judge: Annotated[
        str | None,
        typer.Option(
            help="Pool worker that judges tasks with the judge grader; omitted: a task file "
            "with such tasks is refused (nothing could grade their answers)."
        ),
    ] = None,
    progress: Annotated[bool, typer.Option(help="Show progress bars.")] = True,
) -> None:
    """Every worker answers every task, graders score the answers, rewards are appended.

    Resumable: rerun the same command after an interruption and it continues."""
    check_output(output, "-o", "file")
    if log is not None:
        check_output(log, "--log", "file", "calls.jsonl")
    check_collect_files(tasks, output, log, pool)
    # SIGTERM stops it like Ctrl-C: cleanly, local servers shut down, nothing half-written.
    with interrupts_stop_the_run():
        summary, pool_config = run_collection(tasks, output, pool, log, judge, progress)
    report_collection(summary, pool_config)


def run_collection(
    tasks: Path, output: Path, pool: Path | None, log: Path | None, judge: str | None,
    progress: bool,
) -> tuple[CollectSummary, PoolConfig]:  # fmt: skip
    """Read the pool and the tasks, and collect; an interruption or a bad input ends the
    command with one line."""
    from ..collect.errors import CollectError
    from ..collect.run import collect
    from ..collect.sigterm import run_until_stopped
    from ..tasks import read_tasks
    from ..workers.api_keys import PoolStartError
    from ..workers.config import load_pool_config
    from ..workers.local_server import LocalServerError

    try:
        pool_config = load_pool_config(pool)
        task_list = read_tasks(tasks)
        # a judge not in the pool is an error of its own (check_judge), never asked either
        if judge in pool_config.worker_ids and not any(t.grader == "judge" for t in task_list):
            warn_judge_unused(judge, tasks)
        summary = run_until_stopped(
            collect(pool_config, task_list, output, log, judge_worker=judge, show_progress=progress)
        )
    except KeyboardInterrupt:
        report_interruption(
            "everything finished so far is saved; run the same command again to continue"
        )
        raise typer.Exit(code=130) from None
    except (ConfigError, RecordFileError, CollectError, LocalServerError, PoolStartError) as error:
        fail(str(error))
    return summary, pool_config


def warn_judge_unused(judge: str, tasks: Path) -> None:
    err_console.print(
        f"[yellow]warning:[/yellow] --judge {console_name(judge)}: no task of "
        f"{console_name(str(tasks))} uses the judge grader, so the judge is never asked (the "
        'other graders check answers themselves); give tasks "grader": "judge" to have answers '
        "judged"
    )


def report_collection(summary: CollectSummary, pool_config: PoolConfig) -> None:
    """The table, where the records are, the lines under it; exit 1 while tasks wait."""
    from ..collect.summary import end_of_run_lines, summary_table

    console.print(summary_table(summary))
    print_result(f"{records_line(summary)} · call log: {summary.log}")
    for line in end_of_run_lines(summary, pool_config):
        err_console.print(line)
    if not summary.complete:
        missing = summary.tasks - summary.records_total
        err_console.print(
            f"[yellow]warning: {missing} of {summary.tasks} "
            f"{one_or_many(summary.tasks, 'task', 'tasks')} still "
            f"{one_or_many(missing, 'waits', 'wait')} for an answer or a grade; run the same "
            f"command again to retry {one_or_many(missing, 'it', 'them')}[/yellow]"
        )
        raise typer.Exit(code=1)


def records_line(summary: CollectSummary) -> str:
    """Where the records are; with none of the tasks', that none was written and why (the
    path alone read as a file of records that was not there)."""
    if summary.records_total:
        return f"records: {summary.output}"
    return (
        f"records: none written to {summary.output} (a task's record is written once every "
        "worker's answer to it is graded; see why not below)"
    )


def check_collect_files(tasks: Path, output: Path, log: Path | None, pool: Path | None) -> None:
    """The task file, the records and the call log must be three files: the call log
    written into the records file made it unreadable, and a task file (or the pool file)
    given as -o or --log was refused with advice to delete its lines."""
    from ..collect.journal import default_log_path

    same = same_path
    call_log = log if log is not None else default_log_path(output)
    if log is None and call_log.is_dir():
        fail(
            f"the call log of -o {output} is {call_log} by default, and that is a directory; "
            "give --log a file (e.g. --log "
            f"{output.with_name(output.stem + '.log.jsonl')}) or move the directory away"
        )
    if same(output, tasks):
        fail(
            f"-o {output} is the task file (--tasks) itself; give the records a file of "
            f"their own, e.g. -o {output.with_name(output.stem + '.rewards.jsonl')}"
        )
    if same(call_log, output):
        fail(
            f"--log {call_log} is the records file (-o) itself, so the call log would be "
            "mixed into the records; leave --log out (the default is "
            f"{default_log_path(output)}) or give another file"
        )
    if same(call_log, tasks):
        fail(f"the call log {call_log} is the task file (--tasks) itself; give --log another file")
    if pool is not None and same(output, pool):
        fail(
            f"-o {output} is the pool file (--pool) itself; give the records a file of their "
            f"own, e.g. -o {output.with_name(output.stem + '.rewards.jsonl')}"
        )
    if pool is not None and same(call_log, pool):
        fail(f"the call log {call_log} is the pool file (--pool) itself; give --log another file")
