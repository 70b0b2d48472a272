"""`fugu-lite ...`: import data, train, evaluate, route."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
import yaml
from rich.console import Console
from rich.table import Table

from .config import (
    DEFAULT_CONFIG,
    ConfigError,
    PipelineConfig,
    RLConfig,
    SFTConfig,
    load_config,
    load_stage_config,
)
from .io import RecordFileError

app = typer.Typer(
    no_args_is_help=True, help="fugu-lite: a learned router in front of a pool of LLMs."
)
data_app = typer.Typer(no_args_is_help=True, help="Import and inspect reward records.")
train_app = typer.Typer(no_args_is_help=True, help="Train the coordinator: sft, rl, or both.")
app.add_typer(data_app, name="data")
app.add_typer(train_app, name="train")
console = Console()

ConfigOption = Annotated[
    Path | None, typer.Option("--config", "-c", help="YAML config; omitted keys keep defaults.")
]
RecordsOption = Annotated[Path, typer.Option("--records", "-r", help="RewardRecord JSONL file.")]
OutputOption = Annotated[Path, typer.Option("--output", "-o", help="Output folder.")]
SetOption = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override a config key, e.g. --set training.epochs=5 (repeatable)."),
]


def fail(message: str) -> None:
    console.print(f"[bold red]error:[/bold red] {message}")
    raise typer.Exit(code=2)


def parse_overrides(pairs: list[str] | None) -> dict:
    overrides = {}
    for pair in pairs or []:
        if "=" not in pair:
            fail(f"--set {pair!r} needs the form key=value, e.g. training.epochs=5")
        key, value = pair.split("=", 1)
        overrides[key.strip()] = yaml.safe_load(value)
    return overrides


@data_app.command("import")
def data_import(
    format: Annotated[str, typer.Argument(help="llmrouter, zeroeval, routerbench or long.")],
    source: Annotated[Path, typer.Argument(help="The dataset file or folder.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Where to write the JSONL.")],
    option: Annotated[
        list[str] | None,
        typer.Option("--option", help="Importer option key=value (repeatable)."),
    ] = None,
) -> None:
    """Import a public routing dataset into RewardRecords, with the standard split."""
    from .datasets import import_dataset
    from .schemas import write_records

    try:
        records = import_dataset(format, source, **parse_overrides(option))
    except (ValueError, OSError) as error:
        fail(str(error))
    count = write_records(output, records)
    console.print(f"wrote {count} records to {output}")
    print_record_summary(records)


@data_app.command("stats")
def data_stats(records_path: Annotated[Path, typer.Argument(help="RewardRecord JSONL.")]) -> None:
    """Split sizes and per-worker mean reward of a record file."""
    print_record_summary(read_records_or_fail(records_path))


def read_records_or_fail(path: Path) -> list:
    from .schemas import read_records

    try:
        return read_records(path)
    except RecordFileError as error:
        fail(str(error))
    raise AssertionError("unreachable")


def print_record_summary(records: list) -> None:
    from .schemas import SPLITS

    table = Table(title="records")
    table.add_column("split")
    table.add_column("prompts", justify="right")
    worker_ids = records[0].worker_ids
    for worker in worker_ids:
        table.add_column(worker[:18], justify="right")
    for split in SPLITS:
        selected = [record for record in records if record.split == split]
        if not selected:
            continue
        means = [
            sum(r.rewards[i] for r in selected) / len(selected) for i in range(len(worker_ids))
        ]
        table.add_row(split, str(len(selected)), *(f"{mean:.3f}" for mean in means))
    console.print(table)


def load_or_fail(path: Path | None, config_type: type, overrides: dict):
    try:
        return load_config(path, config_type, overrides)
    except ConfigError as error:
        fail(str(error))


def load_stage_or_fail(path: Path | None, config_type: type, stage: str, overrides: dict):
    try:
        return load_stage_config(path, config_type, stage, overrides)
    except ConfigError as error:
        fail(str(error))


@train_app.command("sft")
def train_sft_command(
    records: RecordsOption,
    output: OutputOption,
    config: ConfigOption = None,
    checkpoint: Annotated[str | None, typer.Option(help="Continue from this checkpoint.")] = None,
    set_: SetOption = None,
) -> None:
    """Supervised stage: KL toward softmax(rewards / tau)."""
    from .train_sft import train_sft

    cfg = load_stage_or_fail(config, SFTConfig, "sft", parse_overrides(set_))
    run_stage(lambda: train_sft(read_records_or_fail(records), cfg, output, checkpoint))


@train_app.command("rl")
def train_rl_command(
    records: RecordsOption,
    output: OutputOption,
    config: ConfigOption = None,
    checkpoint: Annotated[str | None, typer.Option(help="Continue from this checkpoint.")] = None,
    set_: SetOption = None,
) -> None:
    """Contextual-bandit RL stage (the seed's train_rl)."""
    from .train_rl import train_rl

    cfg = load_stage_or_fail(config, RLConfig, "rl", parse_overrides(set_))
    run_stage(lambda: train_rl(read_records_or_fail(records), cfg, output, checkpoint))


@train_app.command("es")
def train_es_command(
    records: RecordsOption,
    output: OutputOption,
    config: ConfigOption = None,
    checkpoint: Annotated[
        str | None, typer.Option(help="Start from this checkpoint (typically SFT's).")
    ] = None,
    set_: SetOption = None,
    resume: Annotated[
        bool, typer.Option(help="Continue the interrupted run saved in OUTPUT/es_state.")
    ] = True,
) -> None:
    """sep-CMA-ES over the trainable parameters; resumable after an interruption."""
    from .config import ESConfig
    from .train_es import train_es

    cfg = load_stage_or_fail(config, ESConfig, "es", parse_overrides(set_))
    run_stage(lambda: train_es(read_records_or_fail(records), cfg, output, checkpoint, resume))


@train_app.command("pipeline")
def train_pipeline_command(
    records: RecordsOption,
    output: OutputOption,
    config: ConfigOption = None,
    set_: SetOption = None,
    cost_weights: Annotated[
        str | None,
        typer.Option(
            "--cost-weights",
            help="Comma-separated cost weights, e.g. 0,0.25,0.5,1: one router per weight in "
            "OUTPUT/lambda-<w>/ and a family manifest OUTPUT/router_family.json.",
        ),
    ] = None,
) -> None:
    """SFT, then RL continuing from the SFT checkpoint: OUTPUT/sft and OUTPUT/rl."""
    from .costs import parse_cost_weights, train_router_family
    from .pipeline import train_pipeline

    cfg = load_or_fail(config, PipelineConfig, parse_overrides(set_))
    if cost_weights is not None:
        try:
            weights = parse_cost_weights(cost_weights)
        except ValueError as error:
            fail(str(error))
        run_stage(lambda: train_router_family(read_records_or_fail(records), cfg, output, weights))
        return
    run_stage(lambda: train_pipeline(read_records_or_fail(records), cfg, output))


def run_stage(stage) -> None:
    from .model import CheckpointError

    try:
        report = stage()
    except (CheckpointError, ValueError, RuntimeError) as error:
        fail(str(error))
    console.print(f"checkpoint written to {report['checkpoint']}")


@app.command("eval")
def eval_command(
    checkpoint: Annotated[Path, typer.Option(help="Router checkpoint folder.")],
    records: RecordsOption,
    split: Annotated[
        str, typer.Option(help="Split to evaluate: train, validation or test.")
    ] = "test",
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Report folder.")] = None,
    pareto: Annotated[
        bool,
        typer.Option(
            "--pareto",
            help="Cost-quality curves instead: a router family's (or one checkpoint's) points "
            "beside kNN, ridge, single workers and oracle; AIQ and cost at 95% of best single.",
        ),
    ] = False,
) -> None:
    """Evaluate a router against best single, oracle, random, kNN, ridge and per-task best."""
    from .costs import is_router_family
    from .pipeline import run_evaluation, run_pareto_evaluation

    if pareto:
        try:
            run_pareto_evaluation(
                checkpoint,
                read_records_or_fail(records),
                split,
                output or checkpoint / f"pareto-{split}",
            )
        except ValueError as error:
            fail(str(error))
        return
    if is_router_family(checkpoint):
        fail(
            f"{checkpoint} is a router family: evaluate it with --pareto, or evaluate one "
            "member checkpoint (listed in its router_family.json)"
        )
    try:
        run_evaluation(
            checkpoint, read_records_or_fail(records), split, output or checkpoint / f"eval-{split}"
        )
    except ValueError as error:
        fail(str(error))


@app.command("route")
def route_command(
    checkpoint: Annotated[Path, typer.Option(help="Router checkpoint folder.")],
    prompt: Annotated[str, typer.Argument(help="The prompt to route ('-' reads stdin).")],
    exclude: Annotated[
        list[str] | None, typer.Option("--exclude", help="Worker to opt out of (repeatable).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    cost_weight: Annotated[
        float | None,
        typer.Option(
            "--cost-weight",
            help="Trade quality for cost (needs a router family checkpoint): the head trained "
            "for the nearest cost weight answers.",
        ),
    ] = None,
) -> None:
    """Print the worker the router picks for one prompt, and the probabilities."""
    from .costs import CostRoutingDecision, route_checkpoint
    from .model import CheckpointError
    from .routing import NoWorkerLeftError

    text = sys.stdin.read() if prompt == "-" else prompt
    try:
        decision = route_checkpoint(checkpoint, text, exclude or [], cost_weight)
    except (CheckpointError, NoWorkerLeftError) as error:
        fail(str(error))
    if as_json:
        print(json.dumps(decision.model_dump()))
        return
    if isinstance(decision, CostRoutingDecision):
        requested = decision.requested_cost_weight
        console.print(
            f"cost weight: {'default' if requested is None else f'{requested:g}'} -> head "
            f"trained for {decision.cost_weight:g}"
        )
    console.print(f"chosen worker: [bold]{decision.worker}[/bold]")
    table = Table("worker", "probability")
    for worker, probability in sorted(decision.probabilities.items(), key=lambda kv: -kv[1]):
        table.add_row(worker, f"{probability:.4f}")
    console.print(table)


@app.command("demo")
def demo_command(
    data_dir: Annotated[Path | None, typer.Option(help="Folder holding llmrouter/.")] = None,
    output: Annotated[Path, typer.Option("--output", "-o")] = Path("runs/demo"),
    config: ConfigOption = None,
) -> None:
    """The main job: import LLMRouter, train SFT -> RL, evaluate on test, print the table."""
    from .pipeline import run_demo

    cfg = load_or_fail(config or DEFAULT_CONFIG, PipelineConfig, {})
    try:
        run_demo(data_dir, output, cfg)
    except (ValueError, RuntimeError, OSError) as error:
        fail(str(error))


if __name__ == "__main__":
    app()
