"""`fugu-lite ...`: import data, train, evaluate, route."""

from __future__ import annotations

import inspect
import json
import logging
import os
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

import typer
import yaml
from pydantic import BaseModel
from rich.table import Column, Table

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
from .text import console_name, console_text, notes_console, results_console

if TYPE_CHECKING:
    from .schemas import RewardRecord

ConfigT = TypeVar("ConfigT", bound=BaseModel)


def command_group(help: str) -> typer.Typer:
    # plain (click) help: rich's option tables cut the names that do not fit their column, so
    # at 80 columns (or piped) `serve --help` listed `--max-body-byt…` and `--breaker-cool…`
    return typer.Typer(no_args_is_help=True, help=help, rich_markup_mode=None)


app = command_group("fugu-lite: a learned router in front of a pool of LLMs.")
data_app = command_group("Import and inspect reward records.")
train_app = command_group(
    "Train the coordinator: sft, rl, es, the SFT -> RL pipeline, or a cost-aware reward head."
)
app.add_typer(data_app, name="data")
app.add_typer(train_app, name="train")
tasks_app = command_group("Generate and check task files.")
app.add_typer(tasks_app, name="tasks")
cache_app = command_group(
    "See and clear fugu-lite's caches (features, ONNX exports, dequantized backbones, "
    "weight-file digests)."
)
app.add_typer(cache_app, name="cache")
console = results_console()
# errors, warnings and interruptions: never mixed into what a command prints (`route --json`)
err_console = notes_console()

ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config",
        "-c",
        help="YAML config; omitted keys keep the code defaults (config.py: fp32). For the "
        "shipped int8 setup pass src/fugu_lite/configs/default.yaml.",
    ),
]
RecordsOption = Annotated[Path, typer.Option("--records", "-r", help="RewardRecord JSONL file.")]
OutputOption = Annotated[Path, typer.Option("--output", "-o", help="Output folder.")]
PoolOption = Annotated[
    Path | None, typer.Option("--pool", "-p", help="Pool YAML; omitted = embedded local pool.")
]
BackboneOption = Annotated[
    str | None,
    typer.Option(
        "--backbone",
        help="Where the checkpoint's backbone folder is now, when it moved (another machine, "
        "another path); it must hold the weights the checkpoint was trained on (checked). "
        "Default: where the checkpoint says.",
    ),
]
ForceOption = Annotated[
    bool, typer.Option("--force", help="Replace the -o file if it exists (refused otherwise).")
]
SetOption = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        help="Override a config key (repeatable): e.g. training.epochs=5 (sft, rl), "
        "training.iterations=300 (es), sft.epochs=5 (pipeline).",
    ),
]


class WarningLines(logging.Handler):
    """fugu-lite's logged warnings (an importer's dropped rows, a temporary folder taken by
    another user) said as the commands' own: `warning: ...` on stderr, one message a line.
    Without it Python printed them bare, unlike every other warning."""

    fugu_lite_console = True  # replaced by serve's handler, and the other way round

    def emit(self, record: logging.LogRecord) -> None:
        err_console.print(
            f"[yellow]{record.levelname.lower()}:[/yellow] {console_text(record.getMessage())}"
        )


@app.callback()
def print_logged_warnings(context: typer.Context) -> None:
    # `serve` prints fugu-lite's log lines its own way, formatted as uvicorn's
    if context.invoked_subcommand == "serve":
        return
    package = logging.getLogger("fugu_lite")
    package.handlers = [h for h in package.handlers if not getattr(h, "fugu_lite_console", False)]
    package.addHandler(WarningLines(logging.WARNING))


def print_result(line: str) -> None:
    """A command's result line (`checkpoint written to PATH`) as it is: never folded at the
    terminal's width (80 columns when piped) nor read as rich markup (`runs/[x]`)."""
    console.print(line, markup=False, soft_wrap=True)


def fail(message: str) -> NoReturn:
    # messages quote user input: a glob like `[qk]_proj` that rich would eat, a worker id
    # holding an ESC that would restyle the terminal
    err_console.print(f"[bold red]error:[/bold red] {console_text(message)}")
    raise typer.Exit(code=2)


_interruptions_reported: list[str] = []


def report_interruption(what_was_kept: str) -> None:
    """The one line a stopped command prints: what was kept and how to go on."""
    err_console.print(f"[yellow]interrupted:[/yellow] {console_text(what_was_kept)}")
    _interruptions_reported.append(what_was_kept)


def interruption_reported() -> bool:
    """Whether a command said what its interruption kept (the entry point says it otherwise)."""
    return bool(_interruptions_reported)


@contextmanager
def stopped_cleanly(what_was_kept: str) -> Iterator[None]:
    """Ctrl-C or SIGTERM: say what was kept and how to go on, and exit 130 without a
    traceback. SIGTERM is raised as KeyboardInterrupt meanwhile, so that the atomic writers
    remove their temporary files as they do on Ctrl-C."""
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        yield
    except KeyboardInterrupt:
        report_interruption(what_was_kept)
        raise typer.Exit(code=130) from None
    finally:
        signal.signal(signal.SIGTERM, previous)


def written_whole(output: Path) -> str:
    return (
        f"{output} holds its old content or the complete new one, never a half-written "
        "file; run the same command again"
    )


def parse_pairs(pairs: list[str] | None, flag: str, example: str) -> dict[str, str]:
    """key=value strings as given, e.g. `--option on_missing=drop` -> {"on_missing": "drop"}."""
    parsed = {}
    for pair in pairs or []:
        if "=" not in pair:
            fail(f"{flag} {pair!r} needs the form key=value, e.g. {flag} {example}")
        key, value = pair.split("=", 1)
        if not key.strip():
            fail(f"{flag} {pair!r} has no key before '='; e.g. {flag} {example}")
        parsed[key.strip()] = value
    return parsed


def parse_overrides(pairs: list[str] | None) -> dict:
    """--set key=value pairs, each value read as YAML (5 -> int, [a, b] -> list)."""
    overrides = {}
    for key, value in parse_pairs(pairs, "--set", "training.epochs=5").items():
        try:
            overrides[key] = yaml.safe_load(value)
        except yaml.YAMLError as error:
            problem = getattr(error, "problem", None) or error
            fail(
                f"--set {key}={value}: the value {value!r} is not valid YAML ({problem}); give "
                "a number, a word, or a list like [a, b] (quote text holding YAML syntax)"
            )
    return overrides


def check_output(path: Path, flag: str, kind: str, example: str = "records.jsonl") -> None:
    """Fail now, before any long work, when `path` cannot become the output `kind` ("file"
    or "folder"); `example` names such a file in the advice for a folder given instead."""
    if str(path) == "-":  # it made a file (or folder) named "-" in the working directory
        written = "a file, whole or not at all" if kind == "file" else "a folder"
        fail(f"{flag} -: the output is {written}, not stdout; give a {kind} path")
    path = path.absolute()
    if kind == "file" and path.is_dir():
        fail(f"{flag} {path} is a directory; give a file path, e.g. {path / example}")
    if kind == "folder" and path.exists() and not path.is_dir():
        fail(f"{flag} {path} is a file, not a folder; give a folder path (created if needed)")
    existing = path if kind == "folder" else path.parent
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        fail(f"{flag} {path}: {existing} is a file, so nothing can be created inside it")
    if not os.access(existing, os.W_OK | os.X_OK):
        fail(f"{flag} {path}: no permission to write in {existing}; choose another path")


def check_not_replacing(output: Path, force: bool) -> None:
    """An existing output file is replaced only with --force: `data import -o` over the
    records `collect` had gathered (paid calls) destroyed them without a word."""
    if force or not output.is_file() or output.stat().st_size == 0:
        return
    fail(
        f"-o {output} already exists and would be replaced; pass --force to replace it, or "
        "give another -o path"
    )


def check_not_source(source: Path, output: Path) -> None:
    """The output must not replace the source file, nor land inside a source folder."""
    source_path, output_path = source.resolve(), output.resolve()
    if output_path == source_path or (
        output_path.exists() and source_path.exists() and output_path.samefile(source_path)
    ):
        fail(
            f"-o {output} is the source file itself, which the import would overwrite; "
            f"write the records to another file, e.g. -o {output.with_suffix('')}.records.jsonl"
        )
    if source_path.is_dir() and output_path.is_relative_to(source_path):
        fail(
            f"-o {output} lies inside the source folder {source}; write the records outside "
            "it, so the dataset stays as downloaded"
        )


def same_path(first: Path, second: Path) -> bool:
    """Whether two paths name one file or folder (`run`, `./run`, a link to it)."""
    if first.resolve() == second.resolve():
        return True
    return first.exists() and second.exists() and first.samefile(second)


def check_not_checkpoint(checkpoint: str | None, output: Path, stage: str) -> None:
    """A stage must not write over the checkpoint it starts from: the SFT an RL continued
    from was replaced, and an ES search saved there no longer matched its start."""
    if checkpoint is not None and same_path(Path(checkpoint), output):
        fail(
            f"-o {output} is the --checkpoint this stage starts from, which training would "
            f"overwrite; give the {stage} checkpoint a folder of its own, e.g. -o "
            f"{output.with_name(output.name + '-' + stage)}"
        )


@data_app.command("import")
def data_import(
    format: Annotated[str, typer.Argument(help="llmrouter, zeroeval, routerbench or long.")],
    source: Annotated[Path, typer.Argument(help="The dataset file or folder.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Where to write the JSONL.")],
    option: Annotated[
        list[str] | None,
        typer.Option("--option", help="Importer option key=value (repeatable)."),
    ] = None,
    force: ForceOption = False,
) -> None:
    """Import a dataset (LLMRouter, ZeroEval, RouterBench, a long table) as RewardRecords.

    The standard split applies, unless a split column is used (--option)."""
    from .datasets import import_dataset
    from .schemas import write_records

    options = parse_pairs(option, "--option", "on_missing=drop")
    if str(source) == "-" and not source.exists():
        fail("the source - (standard input) is not read: give the dataset's file or folder path")
    check_not_source(source, output)
    check_output(output, "-o", "file")
    check_not_replacing(output, force)
    with stopped_cleanly(written_whole(output)):
        try:
            records = import_dataset(format, source, **options)
        except (ValueError, OSError) as error:
            fail(str(error))
        if not records:
            fail(
                f"{source}: the {format} import yields no records (the source has no data "
                "rows, or every row was dropped: see the warnings above); nothing was written "
                f"to {output}"
            )
        try:
            count = write_records(output, records)
        except OSError as error:
            fail(f"cannot write {output}: {error.strerror or error}; choose another -o path")
    print_result(f"wrote {count} records to {output}")
    print_record_summary(records)


@data_app.command("stats")
def data_stats(records_path: Annotated[Path, typer.Argument(help="RewardRecord JSONL.")]) -> None:
    """Split sizes and per-worker mean reward of a record file."""
    print_record_summary(read_records_or_fail(records_path))


def read_records_or_fail(path: Path) -> list[RewardRecord]:
    from .schemas import read_records, repeated_ids

    try:
        records = read_records(path)
    except RecordFileError as error:
        fail(str(error))
    repeated = repeated_ids(records)
    if repeated:
        err_console.print(
            f"[yellow]warning:[/yellow] {console_name(str(path))}: {len(repeated)} record ids "
            f"occur more than once (first: {console_name(repeated[0])}); predictions.jsonl "
            "will not tell those records apart by id (its prompt_hash still does): give each "
            "record its own id"
        )
    return records


def print_record_summary(records: list) -> None:
    """One row per worker (full names fit any terminal), one column per split: mean reward;
    mean cost when the records carry costs; the oracle (best worker per prompt) last."""
    from statistics import fmean

    from .schemas import SPLITS

    if not records:
        console.print("0 records")
        return
    by_split = {
        split: selected
        for split in SPLITS
        if (selected := [record for record in records if record.split == split])
    }
    tasks = {record.task for record in records if record.task}
    sizes = " · ".join(f"{split} {len(selected):,}" for split, selected in by_split.items())
    # a line of its own: as the table's title it was folded to the width of a narrow table
    console.print(
        f"{len(records):,} record{'s' * (len(records) != 1)} ({sizes}), {len(tasks)} "
        f"task{'s' * (len(tasks) != 1)}: mean reward per worker",
        soft_wrap=True,
    )
    table = Table()
    table.add_column("worker", overflow="fold")  # never cut: ids may share a long prefix
    for split in by_split:
        table.add_column(split, justify="right")
    costed = [record for record in records if record.costs is not None]
    if costed:
        table.add_column("mean cost", justify="right")
    for index, worker in enumerate(records[0].worker_ids):
        means = [fmean(r.rewards[index] for r in selected) for selected in by_split.values()]
        cost = [f"{fmean(r.costs[index] for r in costed):.3g}"] if costed else []
        table.add_row(console_name(worker), *(f"{mean:.3f}" for mean in means), *cost)
    oracle = [fmean(max(r.rewards) for r in selected) for selected in by_split.values()]
    table.add_row("oracle", *(f"{mean:.3f}" for mean in oracle), *([""] if costed else []))
    console.print(table)
    if costed and len(costed) < len(records):
        console.print(
            f"mean cost: over the records that have costs, {len(costed):,} of {len(records):,}",
            soft_wrap=True,
        )


def load_or_fail(path: Path | None, config_type: type[ConfigT], overrides: dict) -> ConfigT:
    try:
        return load_config(path, config_type, overrides)
    except ConfigError as error:
        fail(str(error))


def load_stage_or_fail(
    path: Path | None, config_type: type[ConfigT], stage: str, overrides: dict
) -> ConfigT:
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
    check_not_checkpoint(checkpoint, output, "sft")
    run_stage(output, lambda: train_sft(read_records_or_fail(records), cfg, output, checkpoint))


@train_app.command("rl")
def train_rl_command(
    records: RecordsOption,
    output: OutputOption,
    config: ConfigOption = None,
    checkpoint: Annotated[str | None, typer.Option(help="Continue from this checkpoint.")] = None,
    set_: SetOption = None,
) -> None:
    """Contextual-bandit RL stage, typically continuing from an SFT checkpoint."""
    from .train_rl import train_rl

    cfg = load_stage_or_fail(config, RLConfig, "rl", parse_overrides(set_))
    check_not_checkpoint(checkpoint, output, "rl")
    run_stage(output, lambda: train_rl(read_records_or_fail(records), cfg, output, checkpoint))


@train_app.command("es")
def train_es_command(
    records: RecordsOption,
    output: OutputOption,
    config: ConfigOption = None,
    checkpoint: Annotated[
        str | None,
        typer.Option(
            help="Start from this checkpoint (typically SFT's); omitted: a fresh head (then set "
            "training.search=head)."
        ),
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
    check_not_checkpoint(checkpoint, output, "es")
    again = "the same command" if resume else "the command without --no-resume"
    kept = (
        f"the search state is saved every {cfg.training.save_every} generations in "
        f"{output / 'es_state'}; run {again} again to continue from the last one saved"
    )
    run_stage(
        output,
        lambda: train_es(read_records_or_fail(records), cfg, output, checkpoint, resume),
        kept,
    )


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
    """SFT, then RL continuing from the SFT checkpoint: OUTPUT/sft and OUTPUT/rl.

    A re-run keeps each stage already trained from the same config, records and SFT."""
    from .costs import parse_cost_weights, train_router_family
    from .pipeline import train_pipeline

    cfg = load_or_fail(config, PipelineConfig, parse_overrides(set_))
    if cost_weights is not None:
        try:
            weights = parse_cost_weights(cost_weights)
        except ValueError as error:
            fail(str(error))
        run_stage(
            output,
            lambda: train_router_family(read_records_or_fail(records), cfg, output, weights),
            PIPELINE_KEPT,
        )
        return
    run_stage(
        output, lambda: train_pipeline(read_records_or_fail(records), cfg, output), PIPELINE_KEPT
    )


@train_app.command("reward-head")
def train_reward_head_command(
    records: RecordsOption,
    output: OutputOption,
    config: ConfigOption = None,
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="Override a config key (repeatable): e.g. training.cluster_counts=[10,20], "
            "model.layer=3.",
        ),
    ] = None,
) -> None:
    """Cost-aware reward head: each worker's reward and cost, for any --cost-weight.

    `route` and `serve` then answer any cost weight; -c with a pipeline file uses its model."""
    from .reward_head import RewardHeadConfig, train_reward_head

    cfg = load_stage_or_fail(config, RewardHeadConfig, "reward_head", parse_overrides(set_))
    run_stage(output, lambda: train_reward_head(read_records_or_fail(records), cfg, output))


STARTS_OVER = (
    "the run stopped before its checkpoint was written, and this stage starts over: run the "
    "same command again (the backbone features computed so far are cached)"
)

PIPELINE_KEPT = (
    "a finished SFT stays and is not trained again when you run the same command again; an "
    "unfinished RL starts over, and no RL trained from another SFT is left in the output (the "
    "backbone features computed so far are cached)"
)


def run_stage(output: Path, stage: Callable[[], dict], what_was_kept: str = STARTS_OVER) -> None:
    from .model import CheckpointError

    check_output(output, "-o", "folder")
    with stopped_cleanly(what_was_kept):  # outside: typer.Exit is a RuntimeError
        try:
            report = stage()
        except typer.Exit:  # a RuntimeError: the stage's own fail() (e.g. bad records) said why
            raise
        except (CheckpointError, ValueError, RuntimeError) as error:
            fail(str(error))
        except OSError as error:
            fail(f"cannot write the output in {output}: {error}; choose another -o folder")
    print_result(f"checkpoint written to {report['checkpoint']}")


@app.command("eval")
def eval_command(
    checkpoint: Annotated[
        Path, typer.Option(help="Router checkpoint, router family or reward-head folder.")
    ],
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
            help="Report folder; default CHECKPOINT/eval-SPLIT (CHECKPOINT/pareto-SPLIT).",
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
    from .costs import is_router_family
    from .evaluation.output import REPORT_JSON
    from .evaluation.pareto import PARETO_JSON
    from .pipeline import run_evaluation, run_pareto_evaluation
    from .reward_head import is_reward_head
    from .schemas import SPLIT_VALUES_TEXT, canonical_split

    split_name = canonical_split(split)
    if split_name is None:
        fail(f"--split {split!r}: unknown split; use one of {SPLIT_VALUES_TEXT}")
    split = split_name  # `--split dev` reports into eval-validation, as the records name it
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
    evaluate = run_pareto_evaluation if pareto else run_evaluation
    report_dir = output or checkpoint / f"{'pareto' if pareto else 'eval'}-{split}"
    check_output(report_dir, "--output", "folder")
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


@app.command("route")
def route_command(
    checkpoint: Annotated[
        Path, typer.Option(help="Router checkpoint, router family or reward-head folder.")
    ],
    prompt: Annotated[
        str,
        typer.Argument(
            help="The prompt to route ('-' reads stdin, less its last line break); one that "
            "starts with '-' goes after '--': route --checkpoint DIR -- '-5 + 3?'."
        ),
    ],
    exclude: Annotated[
        list[str] | None, typer.Option("--exclude", help="Worker to opt out of (repeatable).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    cost_weight: Annotated[
        float | None,
        typer.Option(
            "--cost-weight",
            help="Trade quality for cost (needs a router family or a reward head): a family's "
            "head trained for the nearest cost weight answers; a reward head answers any. "
            "Omitted: the smallest cost weight (0 for a reward head).",
        ),
    ] = None,
    backbone: BackboneOption = None,
) -> None:
    """Print the worker the router picks for one prompt, and the probabilities."""
    from .costs import CostRoutingDecision, route_checkpoint

    if prompt == "-" and sys.stdin.isatty():  # nothing piped: it would wait without a word
        err_console.print("type the prompt to route, then Ctrl-D on a line of its own")
    # `echo PROMPT |` (and a file's last line) ends in a line break the prompt does not hold:
    # routed with it, its probabilities differed from `route PROMPT`'s
    text = strip_line_end(sys.stdin.read()) if prompt == "-" else prompt
    if not text.strip():
        fail("the prompt is empty; give the text to route, or '-' and pipe it on stdin")
    try:
        decision = route_checkpoint(checkpoint, text, exclude or [], cost_weight, backbone)
    except (ValueError, RuntimeError, OSError) as error:  # a checkpoint or its backbone
        fail(str(error))
    if as_json:
        print(json.dumps(decision.model_dump()))
        return
    if isinstance(decision, CostRoutingDecision) and decision.predicted_rewards is not None:
        console.print(f"cost weight: {decision.cost_weight:g} (reward head: answered exactly)")
    elif isinstance(decision, CostRoutingDecision):
        requested = decision.requested_cost_weight
        console.print(
            f"cost weight: {'default' if requested is None else f'{requested:g}'} -> head "
            f"trained for {decision.cost_weight:g}"
        )
    console.print(f"chosen worker: [bold]{console_name(decision.worker)}[/bold]")
    rewards: dict[str, float] | None = None
    costs: dict[str, float] = {}
    if isinstance(decision, CostRoutingDecision):
        rewards, costs = decision.predicted_rewards, decision.predicted_costs or {}
    table = Table(Column("worker", overflow="fold"), "probability")  # ids never cut
    if rewards:
        table.add_column("predicted reward")
        table.add_column("predicted cost")
    for worker, probability in sorted(decision.probabilities.items(), key=lambda kv: -kv[1]):
        cells = ["excluded" if worker in decision.excluded else f"{probability:.4f}"]
        if rewards:
            cost = costs.get(worker)
            cells += [f"{rewards[worker]:.4f}", "—" if cost is None else f"{cost:.4g}"]
        table.add_row(console_name(worker), *cells)
    console.print(table)


def strip_line_end(text: str) -> str:
    """`text` without the one line break that ends it, if any (`\n` or `\r\n`)."""
    return text.removesuffix("\n").removesuffix("\r") if text.endswith("\n") else text


@app.command("collect")
def collect_command(
    tasks: Annotated[Path, typer.Option("--tasks", "-t", help="Task JSONL file.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="RewardRecord JSONL to add to.")],
    pool: PoolOption = None,
    log: Annotated[
        Path | None, typer.Option(help="Call log JSONL; default <output stem>.calls.jsonl.")
    ] = None,
    judge: Annotated[
        str | None, typer.Option(help="Pool worker that judges tasks with the judge grader.")
    ] = None,
    progress: Annotated[bool, typer.Option(help="Show progress bars.")] = True,
) -> None:
    """Every worker answers every task, graders score the answers, rewards are appended.

    Resumable: rerun the same command after an interruption and it continues."""
    import asyncio
    import signal

    from .collect import CollectError, collect, end_of_run_lines, summary_table
    from .local_server import LocalServerError
    from .pool import load_pool_config
    from .tasks import read_tasks
    from .workers import PoolStartError

    check_output(output, "-o", "file")
    if log is not None:
        check_output(log, "--log", "file", "calls.jsonl")
    check_collect_files(tasks, output, log, pool)
    # SIGTERM stops it like Ctrl-C: cleanly, local servers shut down, nothing half-written.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        pool_config = load_pool_config(pool)
        task_list = read_tasks(tasks)
        summary = asyncio.run(
            collect(pool_config, task_list, output, log, judge_worker=judge, show_progress=progress)
        )
    except KeyboardInterrupt:
        report_interruption(
            "everything finished so far is saved; run the same command again to continue"
        )
        raise typer.Exit(code=130) from None
    except (ConfigError, RecordFileError, CollectError, LocalServerError, PoolStartError) as error:
        fail(str(error))
    console.print(summary_table(summary))
    print_result(f"records: {summary.output} · call log: {summary.log}")
    for line in end_of_run_lines(summary, pool_config):
        err_console.print(line)
    if not summary.complete:
        missing = summary.tasks - summary.records_total
        err_console.print(
            f"[yellow]warning: {missing} of {summary.tasks} tasks still wait for an answer or a "
            "grade; run the same command again to retry them[/yellow]"
        )
        raise typer.Exit(code=1)


def check_collect_files(tasks: Path, output: Path, log: Path | None, pool: Path | None) -> None:
    """The task file, the records and the call log must be three files: the call log
    written into the records file made it unreadable, and a task file (or the pool file)
    given as -o or --log was refused with advice to delete its lines."""
    from .collect import default_log_path

    same = same_path
    call_log = log if log is not None else default_log_path(output)
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


@app.command("demo")
def demo_command(
    data_dir: Annotated[
        Path | None,
        typer.Option(
            help="Folder holding llmrouter/. Default: $FUGU_LITE_DATA_DIR, else ../shared/data, "
            "else a download into the cache (online; offline the LLMRouter stage is skipped)."
        ),
    ] = None,
    output: Annotated[
        Path, typer.Option("--output", "-o", help="Folder for all demo outputs.")
    ] = Path("runs/demo"),
    config: Annotated[
        Path | None,
        typer.Option("--config", "-c", help="Pipeline YAML; default: configs/default.yaml."),
    ] = None,
    pool: PoolOption = None,
    tasks_per_family: Annotated[
        int, typer.Option(min=2, help="Generated tasks per family for the local pool.")
    ] = 12,
    llmrouter: Annotated[
        bool, typer.Option(help="Also train and evaluate on the LLMRouter data, when found.")
    ] = True,
    serve: Annotated[
        bool, typer.Option(help="End by serving the router and asking it a few questions.")
    ] = True,
) -> None:
    """The main job: LLMRouter train + eval, the local loop, then serving.

    The local loop: the embedded llama.cpp pool answers tasks, then SFT -> RL and eval.

    Last, the router is served and asked a few questions through the openai SDK."""
    from .demo import DemoSettings, run_demo
    from .pool import load_pool_config

    cfg = load_or_fail(config or DEFAULT_CONFIG, PipelineConfig, {})
    check_output(output, "-o", "folder")
    if pool is not None:  # checked now, not after the LLMRouter stage
        try:
            load_pool_config(pool)
        except ConfigError as error:
            fail(str(error))
    settings = DemoSettings(
        data_dir=data_dir,
        output=output,
        pool=pool,
        tasks_per_family=tasks_per_family,
        llmrouter=llmrouter,
        serve=serve,
    )
    kept = (
        "run the same command again (or `make demo`): the answers collected so far are kept "
        "and collection continues; the other stages start over, on cached features"
    )
    # SIGTERM too (`timeout`, a cancelled CI job): it ended the demo without a word
    with stopped_cleanly(kept):
        try:
            run_demo(settings, cfg)
        except (ValueError, RuntimeError, OSError) as error:
            fail(str(error))


LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")
LOG_LEVEL_HELP = (
    "What serve logs, each level adding to the one before: critical (almost nothing); error "
    "(a pool or local worker that will not start, unexpected request errors); warning "
    "(failed worker calls, crashed local workers); info, the default (start-up, notes such "
    "as a conversation too long for a worker, and one access line per request, on stdout); "
    "debug (a little more); trace (every HTTP connection and ASGI message)."
)


def check_port_free(host: str, port: int) -> None:
    """Fail now, before the router and the pool load, when the address cannot be bound."""
    import socket

    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
    except OSError as error:
        fail(
            f"cannot listen on {host}:{port} ({error.strerror or error}); the port is in use "
            "or the host is not an address of this machine: choose another --port or --host"
        )


def settings_problem(item: Any) -> str:
    """One problem of a pydantic ValidationError: a validator's own message as it is."""
    if item["type"] == "value_error":
        return str(item["msg"]).removeprefix("Value error, ")
    return f"{'.'.join(str(part) for part in item['loc'])}: {item['msg']}"


@app.command("serve")
def serve_command(
    checkpoint: Annotated[
        Path, typer.Option(help="Router checkpoint, router family or reward-head folder.")
    ],
    backbone: BackboneOption = None,
    pool: PoolOption = None,
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.", min=1, max=65535)] = 8000,
    model_name: Annotated[
        str, typer.Option(help="The model name clients send and get back.")
    ] = "fugu-lite",
    api_keys_env: Annotated[
        str | None,
        typer.Option(help="Env var holding the endpoint's API key(s), comma-separated."),
    ] = None,
    api_keys_file: Annotated[
        Path | None, typer.Option(help="File with the endpoint's API keys, one a line.")
    ] = None,
    log_requests: Annotated[
        Path | None, typer.Option(help="Append routing decisions and outcomes to this JSONL.")
    ] = None,
    log_content: Annotated[
        bool, typer.Option(help="Also log the messages (off: only their hash).")
    ] = False,
    max_body_bytes: Annotated[
        int, typer.Option(help="Largest request body accepted.", min=1024)
    ] = 1_000_000,
    max_tokens_limit: Annotated[
        int, typer.Option(help="Largest max_tokens a request may ask for.", min=1)
    ] = 32_768,
    batch_window_ms: Annotated[
        float, typer.Option(help="Micro-batching window for routing concurrent requests.", min=0)
    ] = 2.0,
    max_batch_size: Annotated[int, typer.Option(help="Most prompts per routing pass.", min=1)] = 32,
    breaker_failures: Annotated[
        int, typer.Option(help="Consecutive failures that open a worker's circuit breaker.", min=1)
    ] = 3,
    breaker_cooldown_s: Annotated[
        float, typer.Option(help="Seconds a worker is skipped once its circuit opens.", min=0)
    ] = 30.0,
    torch_threads: Annotated[
        int,
        typer.Option(help="Threads for the routing forward pass (0 = torch's default).", min=0),
    ] = 1,
    cors_origin: Annotated[
        list[str] | None,
        typer.Option(
            help="A browser origin allowed to call the endpoint (CORS), e.g. "
            "http://localhost:3000, or * for any; repeat for more. None by default."
        ),
    ] = None,
    log_level: Annotated[str, typer.Option(help=LOG_LEVEL_HELP)] = "info",
) -> None:
    """Serve the router as an OpenAI-compatible endpoint: POST /v1/chat/completions."""
    from pydantic import ValidationError

    from .model import CheckpointError
    from .server import ServeSettings, serve
    from .server_auth import ApiKeyError, load_api_keys

    log_level = log_level.lower()  # `INFO`, as Python's logging names it, is uvicorn's `info`
    if log_level not in LOG_LEVELS:
        fail(f"--log-level {log_level!r} is not a log level; use one of {', '.join(LOG_LEVELS)}")
    if not model_name.strip():
        fail("--model-name is empty; give the name clients send, e.g. fugu-lite")
    if log_requests is not None:
        check_output(log_requests, "--log-requests", "file", "requests.jsonl")
        for flag, read in (("--pool", pool), ("--api-keys-file", api_keys_file)):
            if read is not None and same_path(log_requests, read):
                fail(
                    f"--log-requests {log_requests} is the {flag} file itself, which the "
                    "decision log would be appended to; give the log a file of its own, e.g. "
                    "--log-requests requests.jsonl"
                )
    check_port_free(host, port)
    try:
        settings = ServeSettings(
            checkpoint=checkpoint, backbone=backbone, pool=pool, host=host, port=port,
            model_name=model_name,
            api_keys=load_api_keys(api_keys_env, api_keys_file), log_requests=log_requests,
            log_content=log_content, max_body_bytes=max_body_bytes,
            max_tokens_limit=max_tokens_limit, batch_window_ms=batch_window_ms,
            max_batch_size=max_batch_size, breaker_failures=breaker_failures,
            breaker_cooldown_s=breaker_cooldown_s, torch_threads=torch_threads or None,
            cors_origins=cors_origin or [],
        )  # fmt: skip
        serve(settings, log_level=log_level)
    except ValidationError as error:  # the settings' own messages, without pydantic's frame
        fail("; ".join(settings_problem(item) for item in error.errors()))
    except (ApiKeyError, ConfigError, CheckpointError, ValueError) as error:
        fail(str(error))
    except (RuntimeError, OSError) as error:  # a pool that failed to start, a busy port
        fail(str(error))


@tasks_app.command("generate")
def tasks_generate(
    output: Annotated[Path, typer.Option("--output", "-o", help="Where to write the JSONL.")],
    per_family: Annotated[int, typer.Option(help="Tasks per family.", min=1)] = 10,
    seed: Annotated[int, typer.Option(help="The same seed gives the same tasks.")] = 0,
    force: ForceOption = False,
) -> None:
    """Checkable tasks (arithmetic, units, strings, lists, logic, code) for offline use."""
    from .tasks import generate_tasks, write_tasks

    check_output(output, "-o", "file", "tasks.jsonl")
    check_not_replacing(output, force)
    with stopped_cleanly(written_whole(output)):
        try:
            tasks = generate_tasks(per_family, seed)
            written = write_tasks(output, tasks)
        except ValueError as error:
            fail(str(error))
        except OSError as error:
            fail(f"cannot write {output}: {error.strerror or error}; choose another -o path")
    print_result(f"wrote {written} tasks to {output}")
    print_task_summary(tasks)


@tasks_app.command("check")
def tasks_check(path: Annotated[Path, typer.Argument(help="Task JSONL file.")]) -> None:
    """Read a task file, report the first problem (file, line, fix) or a summary."""
    from .tasks import read_tasks

    try:
        tasks = read_tasks(path)
    except RecordFileError as error:
        fail(str(error))
    print_task_summary(tasks)


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


CacheDirOption = Annotated[
    Path | None,
    typer.Option(
        "--cache-dir",
        help="The cache folder: default $FUGU_LITE_CACHE_DIR, else ~/.cache/fugu-lite (a "
        "config's model.cache_dir holds only that config's features).",
    ),
]


def cache_folder_or_fail(cache_dir: Path | None) -> Path:
    from .backbones import cache_root

    root = cache_dir or cache_root()
    if root.exists() and not root.is_dir():
        fail(f"--cache-dir {root} is a file, not a folder; give the cache folder")
    return root


@cache_app.command("list")
def cache_list(cache_dir: CacheDirOption = None) -> None:
    """Every cached item, its size and whether this installation still reads it."""
    from .caches import cache_entries, print_entries

    root = cache_folder_or_fail(cache_dir)
    print_entries(cache_entries(root), root, console)


@cache_app.command("clear")
def cache_clear(
    cache_dir: CacheDirOption = None,
    everything: Annotated[
        bool,
        typer.Option(
            "--all",
            help="Remove every feature cache, export, copy and digest, not only the stale ones "
            "(each is made again when next needed: SmolLM2's features over LLMRouter take ~45 "
            "min).",
        ),
    ] = False,
) -> None:
    """Remove the cached items this installation never reads again (`cache list`: stale)."""
    from .caches import CACHE_KINDS, cache_entries, foreign_names, megabytes, remove_entries

    root = cache_folder_or_fail(cache_dir)
    foreign = foreign_names(root)
    if foreign:
        shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
        fail(
            f"{root} holds more than fugu-lite's caches ({shown}), so it may be another folder "
            f"whose {'/, '.join(CACHE_KINDS)}/ are not caches; nothing was removed. Give the "
            "cache folder itself with --cache-dir (it holds only those folders and data/)"
        )
    entries = [e for e in cache_entries(root) if everything or e.status == "stale"]
    # the entry point's "stopped before any output was written" was wrong here
    gone_so_far = (
        "the cached items removed so far are gone and the others are still there; run the "
        "same command again to remove the rest"
    )
    with stopped_cleanly(gone_so_far):
        freed = remove_entries(entries)
    kept = [entry for entry in entries if entry.path.exists()]
    for entry in kept:
        err_console.print(f"[yellow]warning:[/yellow] {console_text(str(entry.path))} could not "
                          "be removed (another user's?); remove it by hand")  # fmt: skip
    removed = len(entries) - len(kept)
    print_result(
        f"removed {removed} cached item{'s' * (removed != 1)} ({megabytes(freed)}) from {root}"
    )


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

if __name__ == "__main__":
    app()
