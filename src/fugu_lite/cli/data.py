"""`fugu-lite data import` and `data stats`: reward records in, and what they hold."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from ..text import console_name, cost_text
from .common import (
    KEY_VALUE,
    ForceOption,
    JsonlOutputOption,
    check_not_replacing,
    check_output,
    command_group,
    console,
    fail,
    parse_pairs,
    print_result,
    read_records_or_fail,
    same_path,
    writing_file,
)

data_app = command_group("Import and inspect reward records.")


# typer prints a docstring's line breaks as they are: one line a paragraph
IMPORT_HELP = (
    "Import a dataset (LLMRouter, ZeroEval, RouterBench, a long table) as RewardRecords.\n\n"
    "The standard split applies, unless a split column is used (--option use_split_column=true "
    "for long, --option split_column=NAME for zeroeval and routerbench).\n\n"
    "Each importer's options (--option key=value; the README's Importers table says what they "
    "do): llmrouter: output_tokens; zeroeval: prices, on_missing, split_column; routerbench: "
    "split_column, on_missing; long: use_split_column, on_missing."
)


@data_app.command("import", help=IMPORT_HELP)
def data_import(
    format: Annotated[str, typer.Argument(help="llmrouter, zeroeval, routerbench or long.")],
    source: Annotated[Path, typer.Argument(help="The dataset file or folder.")],
    output: JsonlOutputOption,
    option: Annotated[
        list[str] | None,
        typer.Option("--option", metavar=KEY_VALUE, help="Importer option key=value (repeatable)."),
    ] = None,
    force: ForceOption = False,
) -> None:
    """Import a dataset (LLMRouter, ZeroEval, RouterBench, a long table) as RewardRecords."""
    from ..datasets import import_dataset
    from ..schemas import write_records

    options = parse_pairs(option, "--option", "on_missing=drop")
    if str(source) == "-" and not source.exists():
        fail("the source - (standard input) is not read: give the dataset's file or folder path")
    check_output(output, "-o", "file", "records.jsonl")  # a link loop, before resolving it
    check_not_source(source, output)
    check_not_replacing(output, force)
    with writing_file(output):
        try:
            records = import_dataset(format, source, **options)
        except (ValueError, OSError) as error:  # reading the source
            fail(str(error))
        if not records:
            fail(
                f"{source}: the {format} import yields no records (the source has no data "
                "rows, or every row was dropped: see the warnings above); nothing was written "
                f"to {output}"
            )
        count = write_records(output, records)
    print_result(f"wrote {count} records to {output}")
    print_record_summary(records)


@data_app.command("stats")
def data_stats(records_path: Annotated[Path, typer.Argument(help="RewardRecord JSONL.")]) -> None:
    """Split sizes and per-worker mean reward of a record file."""
    print_record_summary(read_records_or_fail(records_path))


def print_record_summary(records: list) -> None:
    """One row per worker (full names fit any terminal), one column per split: mean reward;
    mean cost when the records carry costs; the oracle (best worker per prompt) last."""
    if not records:
        console.print("0 records")
        return
    by_split = _records_by_split(records)
    _print_headline(records, by_split)
    costed = [record for record in records if record.costs is not None]
    console.print(_summary_table(records[0].worker_ids, by_split, costed))
    if costed and len(costed) < len(records):
        console.print(
            f"mean cost: over the records that have costs, {len(costed):,} of {len(records):,}",
            soft_wrap=True,
        )


def _records_by_split(records: list) -> dict[str, list]:
    """The records of each split that has any, in the order of SPLITS."""
    from ..schemas import SPLITS

    return {
        split: selected
        for split in SPLITS
        if (selected := [record for record in records if record.split == split])
    }


def _print_headline(records: list, by_split: dict[str, list]) -> None:
    tasks = {record.task for record in records if record.task}
    sizes = " · ".join(f"{split} {len(selected):,}" for split, selected in by_split.items())
    # a line of its own: as the table's title it was folded to the width of a narrow table
    console.print(
        f"{len(records):,} record{'s' * (len(records) != 1)} ({sizes}), {len(tasks)} "
        f"task{'s' * (len(tasks) != 1)}: mean reward per worker",
        soft_wrap=True,
    )


def _summary_table(worker_ids: list[str], by_split: dict[str, list], costed: list) -> Table:
    """Mean reward per worker and split, the mean cost over `costed`, the oracle last."""
    from statistics import fmean

    table = Table()
    table.add_column("worker", overflow="fold")  # never cut: ids may share a long prefix
    for split in by_split:
        table.add_column(split, justify="right")
    if costed:
        table.add_column("mean cost", justify="right")
    for index, worker in enumerate(worker_ids):
        means = [fmean(r.rewards[index] for r in selected) for selected in by_split.values()]
        cost = [cost_text(fmean(r.costs[index] for r in costed))] if costed else []
        table.add_row(console_name(worker), *(f"{mean:.3f}" for mean in means), *cost)
    oracle = [fmean(max(r.rewards) for r in selected) for selected in by_split.values()]
    table.add_row("oracle", *(f"{mean:.3f}" for mean in oracle), *([""] if costed else []))
    return table


def check_not_source(source: Path, output: Path) -> None:
    """The output must not replace the source file, nor land inside a source folder."""
    if same_path(output, source):
        fail(
            f"-o {output} is the source file itself, which the import would overwrite; "
            f"write the records to another file, e.g. -o {output.with_suffix('')}.records.jsonl"
        )
    if source.is_dir() and output.resolve().is_relative_to(source.resolve()):
        fail(
            f"-o {output} lies inside the source folder {source}; write the records outside "
            "it, so the dataset stays as downloaded"
        )
