"""`fugu-lite train sft|rl|es|pipeline|reward-head`: one stage (or the pipeline) a command."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer

from ..config import MAX_COST_WEIGHT, PipelineConfig, RLConfig, SFTConfig
from ..config_errors import ConfigError
from ..config_loading import load_stage_config
from .common import (
    KEY_VALUE,
    ConfigOption,
    ConfigT,
    OutputOption,
    RecordsOption,
    SetOption,
    check_device_or_fail,
    check_output,
    command_group,
    fail,
    load_or_fail,
    non_empty_text,
    parse_overrides,
    print_result,
    read_records_or_fail,
    same_path,
    stopped_cleanly,
)

if TYPE_CHECKING:
    from ..schemas import RewardRecord

Trained = TypeVar("Trained")  # what a training function returns: a report, or ES's outcome

train_app = command_group(
    "Train the coordinator: sft, rl, es, the SFT -> RL pipeline, or a cost-aware reward head."
)


def load_stage_or_fail(
    path: Path | None, config_type: type[ConfigT], stage: str, overrides: dict
) -> ConfigT:
    try:
        config = load_stage_config(path, config_type, stage, overrides)
    except ConfigError as error:
        fail(str(error))
    check_device_or_fail(config, path, overrides)
    return config


# `train sft` and `train rl`: both may continue from a checkpoint. A str, passed on as given
# (recorded so in the stage's inputs); shown as `<path>`, like the other commands' --checkpoint.
CHECKPOINT_METAVAR = "<path>"
FRESH_HEAD = "give the checkpoint folder, or leave --checkpoint out for a fresh head"
ContinueOption = Annotated[
    str | None,
    typer.Option(
        metavar=CHECKPOINT_METAVAR,
        parser=non_empty_text(FRESH_HEAD),
        help="Continue from this checkpoint; omitted: a fresh head.",
    ),
]


@train_app.command("sft")
def train_sft_command(
    records: RecordsOption,
    output: OutputOption,
    config: ConfigOption = None,
    checkpoint: ContinueOption = None,
    set_: SetOption = None,
) -> None:
    """Supervised stage: KL toward softmax(rewards / temperature)."""
    from ..train_sft import train_sft

    train_continuing_stage("sft", SFTConfig, train_sft, records, output, config, checkpoint, set_)


@train_app.command("rl")
def train_rl_command(
    records: RecordsOption,
    output: OutputOption,
    config: ConfigOption = None,
    checkpoint: ContinueOption = None,
    set_: SetOption = None,
) -> None:
    """Contextual-bandit RL stage, typically continuing from an SFT checkpoint."""
    from ..train_rl import train_rl

    train_continuing_stage("rl", RLConfig, train_rl, records, output, config, checkpoint, set_)


def train_continuing_stage(
    stage: str,
    config_type: type[ConfigT],
    train: Callable[[list[RewardRecord], ConfigT, Path, str | None], dict],
    records: Path,
    output: Path,
    config: Path | None,
    checkpoint: str | None,
    set_: list[str] | None,
) -> None:
    """A stage that may continue from `checkpoint`: its config (with --set), a check that
    it does not write over that checkpoint, then the training."""
    cfg = load_stage_or_fail(config, config_type, stage, parse_overrides(set_))
    check_not_checkpoint(checkpoint, output, stage)
    check_not_another_stage(output, stage)
    run_stage(
        output,
        lambda: checkpoint_written(
            with_no_config_hint(
                config, lambda: train(read_records_or_fail(records), cfg, output, checkpoint)
            )
        ),
    )


def with_no_config_hint(config: Path | None, train: Callable[[], Trained]) -> Trained:
    """`train()`; a checkpoint whose model differs from the default config's, when no -c was
    given, fails saying that that config was compared and to pass the checkpoint's."""
    from ..checkpoint_mismatch import CheckpointMismatch, model_differs

    try:
        return train()
    except CheckpointMismatch as error:
        if config is None and model_differs(error.problems):
            fail(
                f"{error} (no -c was given, so the default config's model was compared: "
                "pass -c with the config file the checkpoint was trained with)"
            )
        raise


@train_app.command("es")
def train_es_command(
    records: RecordsOption,
    output: OutputOption,
    config: ConfigOption = None,
    checkpoint: Annotated[
        str | None,
        typer.Option(
            metavar=CHECKPOINT_METAVAR,
            parser=non_empty_text(FRESH_HEAD),
            help="Start from this checkpoint (typically SFT's); omitted: a fresh head (then set "
            "training.search=head).",
        ),
    ] = None,
    set_: SetOption = None,
    resume: Annotated[
        bool, typer.Option(help="Continue the interrupted run saved in OUTPUT/es_state.")
    ] = True,
) -> None:
    """sep-CMA-ES over the trainable parameters; resumable after an interruption."""
    from ..config import ESConfig
    from ..train_es import es_outcome

    cfg = load_stage_or_fail(config, ESConfig, "es", parse_overrides(set_))
    check_not_checkpoint(checkpoint, output, "es")
    check_not_another_stage(output, "es")
    again = "the same command" if resume else "the command without --no-resume"
    kept = (
        f"the search state is saved every {cfg.training.save_every} generations and at a "
        f"stop, in {output / 'es_state'}; run {again} again to continue from the last one saved"
    )

    def search() -> str:
        outcome = with_no_config_hint(
            config,
            lambda: es_outcome(read_records_or_fail(records), cfg, output, checkpoint, resume),
        )
        if outcome.already_finished:
            return f"ES already finished; checkpoint at {outcome.report['checkpoint']}"
        return checkpoint_written(outcome.report)

    run_stage(output, search, kept)


CostWeightsOption = Annotated[
    str | None,
    typer.Option(
        "--cost-weights",
        help="Comma-separated cost weights, e.g. 0,0.25,0.5,1 (each >= 0, at most "
        f"{MAX_COST_WEIGHT:,.0f}): one router per weight in OUTPUT/lambda-<w>/ and a family "
        "manifest OUTPUT/router_family.json; omitted: one router (OUTPUT/sft, OUTPUT/rl).",
    ),
]


@train_app.command("pipeline")
def train_pipeline_command(
    records: RecordsOption,
    output: OutputOption,
    config: ConfigOption = None,
    set_: SetOption = None,
    cost_weights: CostWeightsOption = None,
) -> None:
    """SFT, then RL continuing from the SFT checkpoint: OUTPUT/sft and OUTPUT/rl.

    A re-run keeps each stage already trained from the same config, records and SFT."""
    overrides = parse_overrides(set_)
    check_no_es_overrides(overrides)
    cfg = load_or_fail(config, PipelineConfig, overrides)
    check_device_or_fail(cfg, config, overrides)
    # one folder may hold a pipeline, then a family (or the other way): neither's checkpoints
    # are in the folder itself
    check_not_another_stage(output, "pipeline", mine=("family",))
    training = pipeline_training(records, cfg, output, cost_weights)
    run_stage(output, lambda: checkpoint_written(training()), PIPELINE_KEPT)


def check_no_es_overrides(overrides: dict) -> None:
    """`train pipeline --set es.iterations=300` was taken without a word, and did nothing:
    the pipeline trains SFT, then RL, never ES."""
    for key in overrides:
        section, _, rest = str(key).partition(".")
        if section.lower() == "es":
            fail(
                f"--set {key}: the pipeline trains SFT, then RL, and reads no es.* setting; "
                f"give it to `fugu-lite train es` (--set training.{rest or 'KEY'}=...), or "
                "leave it out"
            )


def pipeline_training(
    records: Path, cfg: PipelineConfig, output: Path, cost_weights: str | None
) -> Callable[[], dict]:
    """The pipeline's training, or a router family's when --cost-weights is given (its
    weights checked now, before any work)."""
    from ..cost_weighting import parse_cost_weights
    from ..pipeline import train_pipeline
    from ..router_family import train_router_family

    if cost_weights is None:
        return lambda: train_pipeline(read_records_or_fail(records), cfg, output)
    try:
        weights = parse_cost_weights(cost_weights)
    except ValueError as error:
        fail(f"--cost-weights {cost_weights!r}: {error}")
    return lambda: train_router_family(read_records_or_fail(records), cfg, output, weights)


@train_app.command("reward-head")
def train_reward_head_command(
    records: RecordsOption,
    output: OutputOption,
    config: ConfigOption = None,
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            metavar=KEY_VALUE,
            help="Override a config key (repeatable): e.g. training.cluster_counts=[10,20], "
            "model.layer=3.",
        ),
    ] = None,
) -> None:
    """Cost-aware reward head: each worker's reward and cost, for any --cost-weight.

    `route` and `serve` then answer any cost weight; -c with a pipeline file uses its model."""
    from ..reward_head_training import RewardHeadConfig, train_reward_head

    cfg = load_stage_or_fail(config, RewardHeadConfig, "reward_head", parse_overrides(set_))
    check_not_another_stage(output, "reward_head")
    run_stage(
        output,
        lambda: checkpoint_written(train_reward_head(read_records_or_fail(records), cfg, output)),
    )


STARTS_OVER = (
    "the run stopped before its checkpoint was written, and this stage starts over: run the "
    "same command again (the backbone features computed so far are cached)"
)

PIPELINE_KEPT = (
    "a finished SFT stays and is not trained again when you run the same command again; an "
    "unfinished RL starts over, and no RL trained from another SFT is left in the output (the "
    "backbone features computed so far are cached)"
)


def checkpoint_written(report: dict) -> str:
    """The result line of a stage that wrote its checkpoint."""
    return f"checkpoint written to {report['checkpoint']}"


def run_stage(output: Path, stage: Callable[[], str], what_was_kept: str = STARTS_OVER) -> None:
    """Runs `stage`, which returns its result line, failing clearly on its errors."""
    from ..checkpoint import CheckpointError

    check_output(output, "-o", "folder")
    with stopped_cleanly(what_was_kept):  # outside: typer.Exit is a RuntimeError
        try:
            result = stage()
        except typer.Exit:  # a RuntimeError: the stage's own fail() (e.g. bad records) said why
            raise
        except (CheckpointError, ValueError, RuntimeError) as error:
            fail(str(error))
        except OSError as error:
            fail(f"cannot write the output in {output}: {error}; choose another -o folder")
    print_result(result)


def check_not_checkpoint(checkpoint: str | None, output: Path, stage: str) -> None:
    """A stage must not write over the checkpoint it starts from: the SFT an RL continued
    from was replaced, and an ES search saved there no longer matched its start."""
    if checkpoint is not None and same_path(Path(checkpoint), output):
        fail(
            f"-o {output} is the --checkpoint this stage starts from, which training would "
            f"overwrite; give the {stage} checkpoint a folder of its own, e.g. -o "
            f"{folder_beside(output, stage)}"
        )


def folder_beside(output: Path, suffix: str) -> Path:
    """The folder of its own a refused -o is told to use instead: `runs/sft` -> `runs/sft-rl`.
    `-o .` (or `..`) has no name of its own, so it is named as the folder it is: building the
    suggestion from `.` ended the refusal in a ValueError traceback."""
    named = output.resolve() if output.name in ("", "..") else output
    return named.parent / f"{named.name}-{suffix}"


# What a training_report.json's (or a checkpoint's metadata's) "stage" names.
WRITTEN_BY = {
    "sft": "an SFT checkpoint",
    "rl": "an RL checkpoint",
    "es": "an ES checkpoint",
    "pipeline": "a pipeline's output (sft/ and rl/)",
    "family": "a router family",
    "reward_head": "a reward head",
}


def check_not_another_stage(output: Path, stage: str, mine: tuple[str, ...] = ()) -> None:
    """`train rl -o runs/sft` (--checkpoint forgotten, -o mistyped) replaced the SFT there
    without a word: a stage writes only over its own kind of output (a re-run), `stage` or
    one of `mine`."""
    held = held_stage(output)
    if held is None or held in (stage, *mine):
        return
    name = stage.upper() if stage in ("sft", "rl", "es") else stage.replace("_", " ")
    fail(
        f"-o {output} holds {WRITTEN_BY.get(held, f'the output of {held}')}, which this "
        f"{name} would replace; give the {name} a folder of its own, e.g. -o "
        f"{folder_beside(output, stage.replace('_', '-'))}, or delete that "
        "folder first to train there"
    )


def saved_metadata(written: object) -> object:
    """The `metadata` a checkpoint's JSON file keeps (what its stage wrote), or None."""
    return written.get("metadata") if isinstance(written, dict) else None


def held_stage(folder: Path) -> str | None:
    """The stage whose output `folder` holds: its checkpoint's, else its report's, or None."""
    from ..checkpoint import META_FILE, read_checkpoint_metadata
    from ..io import read_json
    from ..reward_head import META_FILE as REWARD_META_FILE
    from ..training_common import STAGE_REPORT

    for meta_file, read in (
        (META_FILE, lambda: read_checkpoint_metadata(folder).get("metadata")),
        (REWARD_META_FILE, lambda: saved_metadata(read_json(folder / REWARD_META_FILE))),
        (STAGE_REPORT, lambda: read_json(folder / STAGE_REPORT)),
    ):
        if not (folder / meta_file).is_file():
            continue
        try:
            written = read()
        except (OSError, ValueError):  # damaged: the stage's own checks say so, or replace it
            continue
        if isinstance(written, dict) and isinstance(written.get("stage"), str):
            return written["stage"]
    return None
