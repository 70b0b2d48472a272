"""Evolution stage: sep-CMA-ES over the router's trainable parameters: the head's weights
(`search: head`) or only its output layer (`search: output_layer`), followed by the SVF
offsets when `model.svf_targets` is set.

Each generation draws one train mini-batch, scores the whole population on it (fitness =
mean reward of the policy's choice + entropy bonus), and tells CMA the negated fitness.
On cached features the population is one batched forward; with SVF each candidate has its
own backbone weights, so each one runs the backbone on the batch (much slower).

The CMA mean is validated every `validate_every` generations and the best one on
validation becomes the checkpoint. The search state is saved atomically every
`save_every` generations in OUTPUT/es_state/, so a killed run continues where it stopped;
every generation derives its random numbers from (seed, generation), so a resumed run is
the run that was interrupted.

This module runs the search and writes its outputs; scoring the population (logits,
fitness, policy metrics) lives in `es_population.py`, the on-disk search state and the
resume checks in `es_state.py`.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from cmaes import SepCMA
from rich.progress import Progress, TaskID

from .checkpoint import read_checkpoint_metadata
from .config import ESConfig, ESTrainingConfig
from .cost_weighting import cost_weighting_summary
from .es_population import (
    SplitData,
    logits_metrics,
    policy_logits,
    population_fitness,
    population_logits,
    restrict_search,
    set_parameter_vector,
    split_data,
)
from .es_state import (
    START_OVER,
    ESResumeError,
    SearchState,
    fresh_state,
    raise_iterations,
    resumed_state,
    run_fingerprint,
    state_path,
)
from .io import read_json
from .model import RouterModel
from .progress import LineProgress
from .schemas import RewardRecord, records_in_split
from .threads import torch_fit_threads
from .training_common import (
    STAGE_REPORT,
    TrainingDiverged,
    console,
    require_finite,
    save_stage,
    stage_progress,
    start_stage,
)

# --- the search -------------------------------------------------------------------------------


def generation_seed(seed: int, generation: int) -> int:
    return int(np.random.SeedSequence([seed, generation]).generate_state(1)[0])


def run_generation(
    model: RouterModel,
    optimizer: SepCMA,
    train: SplitData,
    training: ESTrainingConfig,
    generation: int,
    scored: Callable[[int], None] | None = None,
) -> dict[str, float]:
    """Ask a population, score it on a fresh train mini-batch, tell CMA (which minimises);
    `scored`: see population_logits."""
    seed = generation_seed(training.seed, generation)
    optimizer.reseed_rng(seed)
    generator = torch.Generator(device=train.rewards.device).manual_seed(seed)
    solutions = [optimizer.ask() for _ in range(optimizer.population_size)]
    candidates = torch.from_numpy(np.stack(solutions)).to(model.device_ref, torch.float32)
    if training.batch_size < len(train):
        index = torch.randperm(len(train), generator=generator, device=train.rewards.device)
        batch = train.subset(index[: training.batch_size])
    else:
        batch = train
    scores = population_fitness(
        population_logits(model, candidates, batch.inputs, scored),
        batch.rewards,
        training.samples,
        training.entropy_coefficient,
        generator,
    )
    fitness = scores["fitness"].tolist()
    kept = [index for index, value in enumerate(fitness) if math.isfinite(value)]
    if not kept:
        raise TrainingDiverged(
            f"ES diverged at generation {generation}: the logits of every candidate became NaN "
            "or infinite (its parameters times the features overflow float32), so it stopped "
            f"and wrote no checkpoint; {lower_sigma0(training)}"
        )
    optimizer.tell([(x, cma_value(value)) for x, value in zip(solutions, fitness, strict=True)])
    metrics = {
        "fitness_best": max(fitness[index] for index in kept),
        "fitness_mean": sum(fitness[index] for index in kept) / len(kept),
        "reward_mean": float(scores["reward"].mean()),
        "entropy_mean": float(scores["entropy"][kept].mean()),
    }
    if len(kept) < len(fitness):
        metrics["candidates_not_finite"] = len(fitness) - len(kept)
    return metrics


def lower_sigma0(training: ESTrainingConfig) -> str:
    """What to do when the search diverged: parameters that large come of too large steps."""
    return f"lower training.sigma0 (now {training.sigma0:g}) and run it again"


def cma_value(fitness: float) -> float:
    """What CMA is told of a candidate (it minimises): its negated fitness, or +inf, the
    worst, when the fitness is NaN (logits that overflowed): NaN compares false with every
    value, so CMA's sort could rank it best and move the mean toward it."""
    return -fitness if math.isfinite(fitness) else math.inf


def evolve(
    model: RouterModel,
    train: SplitData,
    validation: SplitData | None,
    config: ESConfig,
    output_dir: str | Path,
    resume: bool = True,
    checkpoint: str | Path | None = None,
) -> tuple[SearchState, list[float]]:
    """Run (or continue) the search; leaves the best parameters in `model`, which started
    from `checkpoint` (None: a fresh head).

    Returns the final state and the seconds of the generations run in this call.
    """
    output_dir = Path(output_dir)
    state, _ = start_search(model, train, validation, config, output_dir, resume, checkpoint)
    return state, continue_search(model, state, train, validation, config.training, output_dir)


def start_search(
    model: RouterModel,
    train: SplitData,
    validation: SplitData | None,
    config: ESConfig,
    output_dir: Path,
    resume: bool,
    checkpoint: str | Path | None,
) -> tuple[SearchState, dict | None]:
    """The state to search from (see starting_state), and the report of the finished run
    it is, when that run has written its outputs (else None)."""
    fingerprint = run_fingerprint(config, model, [train, validation], checkpoint)
    return starting_state(model, config.training, fingerprint, validation, output_dir, resume)


def continue_search(
    model: RouterModel,
    state: SearchState,
    train: SplitData,
    validation: SplitData | None,
    training: ESTrainingConfig,
    output_dir: Path,
) -> list[float]:
    """The generations from the state's on (see evolve); returns their seconds."""
    announce_search(model, state, training, len(train), validation is not None)
    if validation is not None:
        validate_pending(model, state, validation, training)
    seconds = run_generations(model, state, train, validation, training, output_dir)
    if validation is None:
        state.best_parameters, state.best_generation = state.optimizer.mean.copy(), state.generation
    set_parameter_vector(model, state.best_parameters)
    return seconds


def starting_state(
    model: RouterModel,
    training: ESTrainingConfig,
    fingerprint: dict,
    validation: SplitData | None,
    output_dir: Path,
    resume: bool,
) -> tuple[SearchState, dict | None]:
    """The saved state of this run to continue (saying so, or that it has finished: then
    with its report), or a fresh one (resume=False deletes the saved one first); a state
    past `iterations` is an ESResumeError."""
    if not resume:
        state_path(output_dir).unlink(missing_ok=True)
    state = resumed_state(output_dir, fingerprint) if resume else None
    if state is None:
        return fresh_state(model, training, fingerprint, validation), None
    done = state.generation
    if done > training.iterations:
        raise ESResumeError(
            f"{state_path(output_dir)} is already at generation {done}, past "
            f"iterations={training.iterations}; set training.iterations to {done} to end it "
            f"there, or higher to continue it (--set training.iterations=N), or {START_OVER}"
        )
    finished = finished_report(output_dir, state) if done == training.iterations else None
    if finished is not None:
        console.print(
            f"ES: the run saved in {state_path(output_dir)} has already finished its {done} "
            f"generations; {raise_iterations(done)}, or {START_OVER}",
            markup=False,
        )
    elif done == training.iterations:  # stopped at that generation, before its outputs
        console.print(
            f"ES: the run saved in {state_path(output_dir)} stopped at generation {done}, the "
            f"last of iterations={done}: writing its outputs; {raise_iterations(done)}",
            markup=False,
        )
    else:
        state.resumed_from.append(state.generation)
        console.print(
            f"ES: resuming from generation {state.generation} of {training.iterations} "
            f"({state_path(output_dir)})",
            markup=False,
        )
    return state, finished


def announce_search(
    model: RouterModel,
    state: SearchState,
    training: ESTrainingConfig,
    n_train: int,
    has_validation: bool,
) -> None:
    """The lines before the first generation: no validation split, and what is searched."""
    if not has_validation:
        console.print("[yellow]ES: no validation split; keeping the final mean[/yellow]")
    svf = f" (SVF offsets {model.svf.offset_count():,})" if model.svf is not None else ""
    console.print(
        f"ES device={model.device_ref}; search={training.search}; "
        f"parameters={state.optimizer.dim:,}{svf}; "
        f"population={training.population_size}; batch={min(training.batch_size, n_train)}"
    )


def run_generations(
    model: RouterModel,
    state: SearchState,
    train: SplitData,
    validation: SplitData | None,
    training: ESTrainingConfig,
    output_dir: Path,
) -> list[float]:
    """The generations after the state's up to `iterations`, under the progress bar; on
    Ctrl-C the last finished one is saved (see save_on_interrupt). Returns their seconds."""
    seconds: list[float] = []
    with torch_fit_threads(model.svf is not None), stage_progress("ES generations") as progress:
        task = progress.add_task(
            "es", total=training.iterations, completed=state.generation, status=""
        )
        saved = state.generation  # on disk, or 0: nothing to continue from
        scored = candidates_scored(progress, task, state, training.population_size)
        try:
            for generation in range(state.generation + 1, training.iterations + 1):
                if run_and_record(
                    model, state, train, validation, training, generation, seconds, scored
                ):
                    state.save(output_dir)
                    saved = generation
                if generation % training.log_every == 0:
                    console.print(f"ES gen {generation} {_status(state.history[-1])}")
                progress.update(task, completed=generation, status=bar_status(state))
        except KeyboardInterrupt:
            save_on_interrupt(state, output_dir, saved)
            raise
    return seconds


def bar_status(state: SearchState, doing: str = "") -> str:
    """The progress bar's status: what is being done (if anything), and the best validation
    reward so far (short: 80 columns)."""
    best = state.best_validation_reward
    parts = [doing, f"best validation {best:.4f}" if best is not None else ""]
    return " · ".join(part for part in parts if part)


def candidates_scored(
    progress: Progress | LineProgress, task: TaskID, state: SearchState, population: int
) -> Callable[[int], None]:
    """With SVF each candidate runs the backbone on the batch (minutes a generation on a real
    backbone): the bar's status counts the candidates scored."""

    def scored(done: int) -> None:
        progress.update(task, status=bar_status(state, f"candidate {done}/{population}"))

    return scored


def run_and_record(
    model: RouterModel,
    state: SearchState,
    train: SplitData,
    validation: SplitData | None,
    training: ESTrainingConfig,
    generation: int,
    seconds: list[float],
    scored: Callable[[int], None] | None = None,
) -> bool:
    """Run one generation, validate the mean when it is due (keeping the best), and add the
    generation to the state's history and its seconds to `seconds`; returns whether the
    state is due to be saved."""
    started = time.perf_counter()
    entry: dict = {
        "generation": generation,
        "train": run_generation(model, state.optimizer, train, training, generation, scored),
    }
    seconds.append(time.perf_counter() - started)
    entry["seconds"] = seconds[-1]
    # recorded before its validation: a Ctrl-C while validating saves the generation, which
    # the resumed run validates first (validate_pending), rather than losing it
    state.history.append(entry)
    state.generation = generation
    if validation is not None and validation_due(generation, training):
        entry["validation"] = None  # pending: the resumed run may be given more iterations
        entry["validation"] = validate_mean(model, state, validation, generation, training)
    return generation % training.save_every == 0 or generation == training.iterations


def validation_due(generation: int, training: ESTrainingConfig) -> bool:
    return generation % training.validate_every == 0 or generation == training.iterations


def validate_pending(
    model: RouterModel, state: SearchState, validation: SplitData, training: ESTrainingConfig
) -> None:
    """Validate the state's last generation when a run stopped while validating it (saved
    with its validation None): as the stopped run would have, before going on; or when it
    was not due then but is the last one now (a run given fewer iterations)."""
    entry = state.history[-1] if state.history else None
    if entry is None or entry.get("validation") is not None:
        return
    if "validation" in entry or validation_due(state.generation, training):
        entry["validation"] = validate_mean(model, state, validation, state.generation, training)


def validate_mean(
    model: RouterModel,
    state: SearchState,
    validation: SplitData,
    generation: int,
    training: ESTrainingConfig,
) -> dict[str, float]:
    """The policy metrics of the CMA mean on validation; a better reward than the best so
    far makes it the best (a tie keeps the earlier one). A mean whose logits overflow stops
    the search as a generation whose every candidate's do."""
    set_parameter_vector(model, state.optimizer.mean)
    logits = policy_logits(model, validation)
    where = f"generation {generation} (its mean, on validation)"
    require_finite("ES", where, lower_sigma0(training), logits=logits)
    metrics = logits_metrics(logits, validation.rewards)
    best = state.best_validation_reward  # set by fresh_state when there is a validation split
    if best is None or metrics["reward"] > best:
        state.best_validation_reward = metrics["reward"]
        state.best_generation = generation
        state.best_parameters = state.optimizer.mean.copy()
    return metrics


def save_on_interrupt(state: SearchState, output_dir: Path, saved: int) -> None:
    """Ctrl-C (or SIGTERM under the CLI): save the last finished generation when it is not
    on disk yet. CMA counts a generation before it updates, so an optimizer stopped half-way
    through its update is ahead of the state: then the state saved last is kept (and with
    none, the next run starts over); either way it says where the next run starts."""
    if state.generation > saved and state.optimizer.generation == state.generation:
        state.save(output_dir)
        console.print(
            f"ES: stopped; saved generation {state.generation} (the last one finished) in "
            f"{state_path(output_dir)}",
            markup=False,
        )
    elif saved == 0:
        console.print("ES: stopped before any generation was saved; the same command starts over")
    else:
        console.print(
            f"ES: stopped; generation {saved} is the last one saved, the one a resumed run "
            f"continues from ({state_path(output_dir)})",
            markup=False,
        )


class ESOutcome(NamedTuple):
    """train_es's report, and whether the run had already finished (then nothing was written:
    the report is the one already in the output dir)."""

    report: dict
    already_finished: bool


def train_es(
    records: list[RewardRecord],
    config: ESConfig,
    output_dir: str | Path,
    checkpoint: str | None = None,
    resume: bool = True,
) -> dict:
    """sep-CMA-ES from a checkpoint (typically SFT's) or from zero; keeps the best mean on
    validation; writes the checkpoint and training_report.json, and continues an
    interrupted run in the same output dir unless resume=False."""
    return es_outcome(records, config, output_dir, checkpoint, resume).report


def es_outcome(
    records: list[RewardRecord],
    config: ESConfig,
    output_dir: str | Path,
    checkpoint: str | None = None,
    resume: bool = True,
) -> ESOutcome:
    """train_es, saying whether the run had already finished."""
    records, model, warnings = start_stage(records, config.model, config.training, checkpoint)
    restrict_search(model, config.training.search)
    if (
        checkpoint is None
        and config.training.search == "output_layer"
        and model.output_layer is not model.head
    ):
        console.print(
            "[yellow]ES: search=output_layer from zero leaves the MLP head's hidden layer at "
            "its random start; pass --checkpoint (e.g. SFT's) or set training.search: head"
            "[/yellow]"
        )
    train = split_data(records, model, "train")
    validation = (
        split_data(records, model, "validation")
        if records_in_split(records, "validation")
        else None
    )
    output = Path(output_dir)
    state, finished = start_search(model, train, validation, config, output, resume, checkpoint)
    if finished is not None:
        kept = kept_generation(finished["best_generation"], finished["best_validation_reward"])
        console.print(
            f"ES: kept {kept}, the checkpoint and report already in {output}", markup=False
        )
        return ESOutcome(finished, already_finished=True)
    seconds = continue_search(model, state, train, validation, config.training, output)
    cost_weighting = cost_weighting_summary(records, config.training)
    report = write_outputs(
        model, state, seconds, config, output, checkpoint, cost_weighting, warnings
    )
    return ESOutcome(report, already_finished=False)


def finished_report(output: Path, state: SearchState) -> dict | None:
    """The training_report.json of the finished run whose state this is, beside its
    checkpoint; None when the run was stopped before writing them (then they are written)."""
    try:
        read_checkpoint_metadata(output)
        report = read_json(output / STAGE_REPORT)
    except (OSError, ValueError):
        return None
    # Its history, not its generation count: an earlier run's report of as many generations
    # (a --no-resume run stopped before writing its own) is not this search's.
    written = json.loads(json.dumps(state.history))  # as the report holds it, read back
    if not isinstance(report, dict) or report.get("history") != written:
        return None
    return report


def write_outputs(
    model: RouterModel,
    state: SearchState,
    seconds: list[float],
    config: ESConfig,
    output: Path,
    start_checkpoint: str | None,
    cost_weighting: dict,
    warnings: list[str],
) -> dict:
    summary = search_summary(state)
    announce_kept(state)
    metadata = {
        "stage": "es",
        **summary,
        "history": state.history,
        "cost_weighting": cost_weighting,
    }
    report = {
        "stage": "es",
        "checkpoint": str(output),
        "worker_ids": model.worker_ids,
        "start_checkpoint": start_checkpoint,
        **summary,
        "seconds_this_run": sum(seconds),
        "trainable_parameters": state.optimizer.dim,
        "svf_matrices": model.svf.names if model.svf is not None else [],
        "config": config.model_dump(),
        "cost_weighting": cost_weighting,
        "warnings": warnings,
        "history": state.history,
    }
    save_stage(model, output, metadata, report)
    return report


def search_summary(state: SearchState) -> dict:
    """What the checkpoint's metadata and the report both say of the search."""
    all_seconds = [entry["seconds"] for entry in state.history]
    return {
        "best_generation": state.best_generation,
        "best_validation_reward": state.best_validation_reward,
        "initial_validation_reward": (
            state.initial_validation["reward"] if state.initial_validation else None
        ),
        "generations": state.generation,
        "resumed_from": state.resumed_from,
        "seconds_per_generation": sum(all_seconds) / max(1, len(all_seconds)),
    }


def announce_kept(state: SearchState) -> None:
    """Which generation's parameters the checkpoint holds, and why."""
    if state.best_generation:
        kept = kept_generation(state.best_generation, state.best_validation_reward)
        console.print(f"ES: kept {kept}")
    else:
        console.print("ES: no generation beat the starting point on validation; kept it")


def kept_generation(best_generation: int, best_validation_reward: float | None) -> str:
    """'generation 6 (validation reward 0.8689)': the parameters the checkpoint holds (as
    search_summary gives them: a run without validation keeps its last generation)."""
    if not best_generation:
        return "the starting point (no generation beat it on validation)"
    if best_validation_reward is None:
        return f"generation {best_generation}, the last one"
    return f"generation {best_generation} (validation reward {best_validation_reward:.4f})"


def _status(entry: dict) -> str:
    status = (
        f"fitness best {entry['train']['fitness_best']:.4f} "
        f"mean {entry['train']['fitness_mean']:.4f}"
    )
    not_finite = entry["train"].get("candidates_not_finite")
    if not_finite:
        status += f" ({not_finite} candidates with NaN or infinite logits ranked last)"
    if "validation" in entry:
        status += f" · validation reward {entry['validation']['reward']:.4f}"
    return status
