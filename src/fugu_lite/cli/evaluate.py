"""`fugu-lite eval`: a router's report against the baselines, or its cost-quality curves."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .common import (
    BackboneOption,
    CheckpointOption,
    RecordsOption,
    check_output,
    fail,
    non_empty_path,
    read_records_or_fail,
    same_path,
    stopped_cleanly,
)


def eval_command(
    checkpoint: CheckpointOption,
    records: RecordsOption,
    split: Annotated[
        str,
        typer.Option(
            help="Split to evaluate: train, validation or test (also val, valid, dev, "
            "training, testing)."
        ),
    ] = "test",
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            parser=non_empty_path("give the report folder, or leave -o out for the default"),
            metavar="<path>",
            help=(
                "Report folder; default CHECKPOINT/eval-SPLIT "
                "(with --pareto: CHECKPOINT/pareto-SPLIT)."
            ),
        ),
    ] = None,
    pareto: Annotated[
        bool,
        typer.Option(
            "--pareto",
            help="Cost-quality curves instead: a router family's (or one checkpoint's) points "
            "beside kNN, ridge, single workers and oracle; AIQ and cost at 95% of best single.",
        ),
    ] = False,
    backbone: BackboneOption = None,
) -> None:
    """Evaluate a router against best single, oracle, random, kNN, ridge and per-task best."""
    from ..evaluate_checkpoint import run_evaluation, run_pareto_evaluation
    from ..evaluation.output import REPORT_JSON
    from ..evaluation.pareto_output import PARETO_JSON

    # `--split dev` reports into eval-validation, as the records name it
    split = _canonical_split_or_fail(split)
    _refuse_what_cannot_be_evaluated(checkpoint, pareto)
    evaluate = run_pareto_evaluation if pareto else run_evaluation
    report_dir = output or checkpoint / f"{'pareto' if pareto else 'eval'}-{split}"
    check_output(report_dir, "--output", "folder")
    _refuse_writing_over_the_records(records, report_dir, pareto)
    report_file = PARETO_JSON if pareto else REPORT_JSON
    kept = (
        f"the report in {report_dir} is not complete until it holds {report_file}; run the "
        "same command again"
    )
    with stopped_cleanly(kept):
        loaded = read_records_or_fail(records)
        try:
            evaluate(checkpoint, loaded, split, report_dir, backbone=backbone)
        except (ValueError, RuntimeError) as error:  # a checkpoint or its backbone
            fail(str(error))
        except OSError as error:
            fail(f"cannot write the report in {report_dir}: {error}; choose another --output")


def _refuse_writing_over_the_records(records: Path, report_dir: Path, pareto: bool) -> None:
    """The records file given as one the report replaces (`-r out/predictions.jsonl -o
    out`) was read, then written over with the report's own file: the records were lost."""
    from ..evaluation.output import EVALUATION_FILES
    from ..evaluation.pareto_output import PARETO_FILES

    for name in PARETO_FILES if pareto else EVALUATION_FILES:
        if same_path(records, report_dir / name):
            fail(
                f"--records {records} is the report's {name} in {report_dir}, which eval "
                "writes over: give another --output, or move or rename the records file"
            )


def _canonical_split_or_fail(split: str) -> str:
    from ..schemas import SPLIT_VALUES_TEXT, canonical_split

    split_name = canonical_split(split)
    if split_name is None:
        fail(f"--split {split!r}: unknown split; use one of {SPLIT_VALUES_TEXT}")
    return split_name


def _refuse_what_cannot_be_evaluated(checkpoint: Path, pareto: bool) -> None:
    """A file, or (without --pareto) a reward head or router family, each with its fix."""
    from ..reward_head import is_reward_head
    from ..router_family import is_router_family

    if checkpoint.is_file():  # said as the default report folder's problem: "--output ..."
        fail(
            f"--checkpoint {checkpoint} is a file, not a checkpoint folder (one holding "
            "router.json, written by `fugu-lite train ...`)"
        )
    if not pareto and is_reward_head(checkpoint):
        fail(
            f"{checkpoint} is a reward head (any cost weight): evaluate it with --pareto, "
            "which draws its cost-quality curve"
        )
    if not pareto and is_router_family(checkpoint):
        fail(
            f"{checkpoint} is a router family: evaluate it with --pareto, or evaluate one "
            "member checkpoint (listed in its router_family.json)"
        )
