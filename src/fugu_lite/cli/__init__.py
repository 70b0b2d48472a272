"""`fugu-lite ...`: import data, train, evaluate, route, collect, serve.

The command tree is put together here; each command lives in the module of its name:
data.py (`data import`, `data stats`), train.py (`train sft|rl|es|pipeline|reward-head`),
evaluate.py (`eval`), route.py (`route`), collect.py, demo.py, serve.py, tasks.py
(`tasks generate|check`) and cache.py (`cache list|clear`). common.py holds what they share:
the consoles, the shared options, fail(), stopped_cleanly() and the output checks.
"""

from __future__ import annotations

import inspect
import logging
from typing import Annotated

import typer

from .. import __version__
from ..text import console_text
from .cache import cache_app
from .collect import collect_command
from .common import command_group, err_console, interruption_reported
from .data import data_app
from .demo import demo_command
from .evaluate import eval_command
from .route import route_command
from .serve import serve_command
from .tasks import tasks_app
from .train import train_app

__all__ = ["app", "interruption_reported"]

app = command_group("fugu-lite: a learned router in front of a pool of LLMs.")
app.add_typer(data_app, name="data")
app.add_typer(train_app, name="train")
app.add_typer(tasks_app, name="tasks")
app.add_typer(cache_app, name="cache")
app.command("eval")(eval_command)
app.command("route")(route_command)
app.command("collect")(collect_command)
app.command("demo")(demo_command)
app.command("serve")(serve_command)


class WarningLines(logging.Handler):
    """fugu-lite's logged warnings (an importer's dropped rows, a temporary folder taken by
    another user) said as the commands' own: `warning: ...` on stderr, one message a line.
    Without it Python printed them bare, unlike every other warning."""

    fugu_lite_console = True  # replaced by serve's handler, and the other way round

    def emit(self, record: logging.LogRecord) -> None:
        err_console.print(
            f"[yellow]{record.levelname.lower()}:[/yellow] {console_text(record.getMessage())}"
        )


def print_version(wanted: bool) -> None:
    """`fugu-lite --version`: the version a checkpoint's refusal names ("written by fugu-lite
    X; this is Y"), which the command line had no way to show."""
    if wanted:
        print(f"fugu-lite {__version__}")
        raise typer.Exit()


@app.callback()
def print_logged_warnings(
    context: typer.Context,
    version: Annotated[
        bool,
        typer.Option(
            "--version", is_eager=True, callback=print_version, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    # `serve` prints fugu-lite's log lines its own way, formatted as uvicorn's
    if context.invoked_subcommand == "serve":
        return
    package = logging.getLogger("fugu_lite")
    package.handlers = [h for h in package.handlers if not getattr(h, "fugu_lite_console", False)]
    package.addHandler(WarningLines(logging.WARNING))


def whole_summaries(group: typer.Typer) -> None:
    """Plain help cut a command's summary in its group's list at the terminal's width
    ("Evaluate a router against best single, oracle, random, kNN,..."); one given as
    `short_help` is wrapped whole instead."""
    for command in group.registered_commands:
        if command.short_help is None and command.callback and command.callback.__doc__:
            command.short_help = inspect.cleandoc(command.callback.__doc__).split("\n\n")[0]
    for subgroup in group.registered_groups:
        if subgroup.typer_instance is not None:
            subgroup.short_help = subgroup.typer_instance.info.help
            whole_summaries(subgroup.typer_instance)


whole_summaries(app)
