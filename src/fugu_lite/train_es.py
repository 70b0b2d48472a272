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
"""

from __future__ import annotations

import hashlib
import pickle
import time
from dataclasses import dataclass
from pathlib import Path

import cmaes
import numpy as np
import torch
from cmaes import SepCMA
from torch import nn
from torch.func import functional_call

from . import __version__, code_digest
from .atomic_files import write_bytes_atomic
from .backbone_identity import canonical_backbone
from .checkpoint import read_checkpoint_metadata
from .config import ESConfig, ESTrainingConfig
from .costs import cost_weighting_summary
from .features import pooling_meant
from .io import read_json
from .model import RouterModel
from .schemas import RewardRecord, records_in_split
from .threads import torch_fit_threads
from .training_common import (
    STAGE_REPORT,
    console,
    make_loader,
    move_batch,
    optimizer_parameters,
    save_stage,
    stage_progress,
    start_stage,
)

STATE_DIR = "es_state"
STATE_FILE = "state.pkl"
STATE_FORMAT = 1
# what to type: the messages reach users of `fugu-lite train es`
START_OVER = "start over there with --no-resume, or give another -o folder"
RAISE_ITERATIONS = "raise training.iterations to continue it (--set training.iterations=N)"
# Keys that may change between an interrupted run and its continuation: they change how
# long the run goes, how it logs, or where it runs, not the search itself.
RESUMABLE_KEYS = frozenset(
    {
        "training.iterations",
        "training.log_every",
        "training.save_every",
        "model.device",
        "model.cache_dir",
        "model.feature_batch_size",
    }
)


class ESResumeError(ValueError):
    """The saved ES state belongs to another run (other config, start model or data)."""


@dataclass(frozen=True)
class SplitData:
    """Every prompt of one split as one batch: the model's inputs and the reward matrix."""

    inputs: dict[str, torch.Tensor]
    rewards: torch.Tensor

    def __len__(self) -> int:
        return int(self.rewards.shape[0])

    def subset(self, index: torch.Tensor) -> SplitData:
        return SplitData(
            {key: value[index] for key, value in self.inputs.items()}, self.rewards[index]
        )


def split_data(records: list[RewardRecord], model: RouterModel, split: str) -> SplitData:
    """One split's cached features (tokenized prompts with SVF) and rewards (ValueError on an
    empty split, like make_loader)."""
    loader = make_loader(records, model, split, batch_size=len(records), shuffle=False)
    inputs, rewards = move_batch(next(iter(loader)), model.device_ref)
    return SplitData(inputs, rewards)


# --- the policy of many parameter vectors at once --------------------------------------------


def trainable_names(model: nn.Module) -> list[str]:
    """Names of `optimizer_parameters(model)`, in the same order."""
    return [name for name, parameter in model.named_parameters() if parameter.requires_grad]


def parameter_vector(model: nn.Module) -> np.ndarray:
    vector = torch.nn.utils.parameters_to_vector(optimizer_parameters(model))
    return vector.detach().cpu().double().numpy().copy()


def set_parameter_vector(model: nn.Module, vector: np.ndarray) -> None:
    parameters = list(optimizer_parameters(model))
    values = torch.as_tensor(vector, dtype=parameters[0].dtype, device=parameters[0].device)
    torch.nn.utils.vector_to_parameters(values, parameters)


@torch.no_grad()
def population_logits(
    model: RouterModel, candidates: torch.Tensor, inputs: dict[str, torch.Tensor]
) -> torch.Tensor:
    """Logits [P, B, W] of P flat parameter vectors [P, D] on one batch, in eval mode.

    A bias-free linear head is one matmul; any other head is vmapped functional calls; with
    SVF every candidate runs the backbone in turn.
    """
    model.eval()
    if model.svf is not None:
        return _population_logits_in_turn(model, candidates, inputs)
    if searches_output_weights_only(model) and set(inputs) == {"features"}:
        # Everything before the output layer is fixed: run it once, then one einsum.
        hidden = model.output_layer_inputs(inputs["features"])
        weights = candidates.view(len(candidates), *model.output_layer.weight.shape)
        return torch.einsum("bd,pwd->pbw", hidden, weights)
    names = trainable_names(model)
    shapes = [parameter.shape for parameter in optimizer_parameters(model)]
    pieces = torch.split(candidates, [shape.numel() for shape in shapes], dim=1)
    stacked = {
        name: piece.reshape(len(candidates), *shape)
        for name, piece, shape in zip(names, pieces, shapes, strict=True)
    }
    return torch.func.vmap(lambda params: functional_call(model, params, (), inputs))(stacked)


def searches_output_weights_only(model: RouterModel) -> bool:
    """True when the search vector is exactly the bias-free output layer's weight."""
    searched = list(optimizer_parameters(model))
    output = model.output_layer
    return len(searched) == 1 and searched[0] is output.weight and output.bias is None


def restrict_search(model: RouterModel, search: str) -> None:
    """search='output_layer': freeze the head's layers before its output layer, so only the
    output layer's weights (and the SVF offsets, when enabled) evolve."""
    if search == "head":
        return
    searched = {id(parameter) for parameter in model.output_layer.parameters()}
    for parameter in model.head.parameters():
        if id(parameter) not in searched:
            parameter.requires_grad_(False)


def _population_logits_in_turn(
    model: RouterModel, candidates: torch.Tensor, inputs: dict[str, torch.Tensor]
) -> torch.Tensor:
    parameters = list(optimizer_parameters(model))
    start = torch.nn.utils.parameters_to_vector(parameters).detach().clone()
    try:
        logits = []
        for candidate in candidates:
            torch.nn.utils.vector_to_parameters(candidate.clone(), parameters)
            logits.append(batched_logits(model, inputs))
        return torch.stack(logits)
    finally:
        torch.nn.utils.vector_to_parameters(start, parameters)


def batched_logits(model: RouterModel, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """`model(**inputs)`; tokenized prompts go through the backbone `feature_batch_size` at a
    time, each chunk cut to its longest prompt (padding is on the right)."""
    if "input_ids" not in inputs:
        return model(**inputs)
    size = model.model_cfg.feature_batch_size
    chunks = []
    for start in range(0, len(inputs["input_ids"]), size):
        mask = inputs["attention_mask"][start : start + size]
        width = max(1, int(mask.sum(dim=1).max()))
        ids = inputs["input_ids"][start : start + size, :width]
        chunks.append(model(input_ids=ids, attention_mask=mask[:, :width]))
    return torch.cat(chunks)


def population_fitness(
    logits: torch.Tensor,
    rewards: torch.Tensor,
    samples: int,
    entropy_coefficient: float,
    generator: torch.Generator | None = None,
) -> dict[str, torch.Tensor]:
    """Per candidate [P]: mean reward of its choices, mean entropy, and the fitness.

    samples=0 scores the argmax choice; N > 0 scores N sampled choices per prompt, drawn
    with the same uniform numbers for every candidate (common random numbers make the
    ranking depend on the policies, not on the luck of the draw).
    """
    log_probabilities = torch.log_softmax(logits, dim=-1)
    probabilities = log_probabilities.exp()
    entropy = -(probabilities * log_probabilities).sum(dim=-1).mean(dim=-1)
    n_candidates, batch, n_workers = logits.shape
    if samples == 0:
        choices = logits.argmax(dim=-1).unsqueeze(1)  # [P, 1, B]
    else:
        uniforms = torch.rand(samples, batch, generator=generator, device=logits.device)
        cumulative = probabilities.cumsum(dim=-1).unsqueeze(1)  # [P, 1, B, W]
        below = cumulative < uniforms[None, :, :, None]
        choices = below.sum(dim=-1).clamp(max=n_workers - 1)  # [P, N, B]
    expanded = rewards.expand(n_candidates, choices.shape[1], batch, n_workers)
    reward = expanded.gather(3, choices.unsqueeze(-1)).squeeze(-1).mean(dim=(1, 2))
    return {
        "fitness": reward + entropy_coefficient * entropy,
        "reward": reward,
        "entropy": entropy,
    }


@torch.no_grad()
def policy_metrics(model: RouterModel, data: SplitData) -> dict[str, float]:
    """The metrics of evaluate_loader: argmax reward, expected reward, oracle, entropy."""
    model.eval()
    logits = batched_logits(model, data.inputs)
    probabilities = torch.softmax(logits, dim=-1)
    choice = logits.argmax(dim=-1, keepdim=True)
    entropy = torch.distributions.Categorical(probs=probabilities).entropy()
    return {
        "reward": float(data.rewards.gather(1, choice).mean()),
        "expected_reward": float((probabilities * data.rewards).sum(dim=-1).mean()),
        "oracle_reward": float(data.rewards.max(dim=-1).values.mean()),
        "entropy": float(entropy.mean()),
    }


# --- resumable state --------------------------------------------------------------------------


def state_path(output_dir: str | Path) -> Path:
    return Path(output_dir) / STATE_DIR / STATE_FILE


def read_es_state(output_dir: str | Path) -> dict | None:
    """The saved search state of an ES run (our own pickle), or None if there is none; a
    damaged one (emptied, cut short, copied half-way) is an ESResumeError saying so."""
    path = state_path(output_dir)
    if not path.exists():
        return None
    try:
        saved = pickle.loads(path.read_bytes())
    except Exception as error:  # a damaged pickle raises almost anything
        raise ESResumeError(
            f"{path} is damaged ({type(error).__name__}: {error}), so the run cannot continue "
            f"from it; {START_OVER}"
        ) from error
    if not isinstance(saved, dict):
        raise ESResumeError(f"{path} is not an ES search state; {START_OVER}")
    return saved


def run_fingerprint(
    config: ESConfig,
    model: nn.Module,
    splits: list[SplitData | None],
    checkpoint: str | Path | None = None,
) -> dict:
    """What must not change between an interrupted run and its continuation (the start
    checkpoint's folder is there to name it when the start model differs)."""
    dumped = config.model_dump(mode="json")
    # `bb`, `./bb` and `/abs/bb` are one backbone folder (as `train pipeline` compares them)
    dumped["model"]["backbone"] = canonical_backbone(config.model.backbone)
    return {
        "versions": {"fugu-lite": __version__, "cmaes": cmaes.__version__},
        "code": code_digest(),
        "config": dumped,
        "start_model": _tensor_digest(list(model.state_dict().values())),
        "start_checkpoint": None if checkpoint is None else str(Path(checkpoint).resolve()),
        "data": _tensor_digest(
            [
                tensor
                for data in splits
                if data is not None
                for tensor in [*data.inputs.values(), data.rewards]
            ]
        ),
    }


def _tensor_digest(tensors: list[torch.Tensor]) -> str:
    digest = hashlib.sha1()
    for tensor in tensors:
        digest.update(str(tuple(tensor.shape)).encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def fingerprint_mismatches(saved: dict, current: dict) -> list[str]:
    problems = []
    # Another version may score, search or pickle differently: its state is another run's.
    saved_versions = saved.get("versions", {})
    for package, now in current["versions"].items():
        before = saved_versions.get(package, "unknown (an earlier fugu-lite)")
        if before != now:
            problems.append(f"{package} version: saved {before} vs now {now}")
    if not problems and saved.get("code") != current["code"]:
        # As `train pipeline` trains again a stage that other sources trained: the search's
        # scoring or pickled state may have changed under one version string.
        problems.append(
            f"fugu-lite {__version__} with other sources saved it (the code changed since, e.g. "
            "in a checkout or an editable install; restore that code to continue it)"
            if "code" in saved
            else "a fugu-lite that did not record its sources saved it"
        )
    saved_config, current_config = _flatten(saved["config"]), _flatten(current["config"])
    for flat, config in ((saved_config, saved["config"]), (current_config, current["config"])):
        flat["model.pooling"] = pooling_meant(config["model"])
    for key in sorted(set(saved_config) | set(current_config)):
        if key in RESUMABLE_KEYS:
            continue
        before, now = saved_config.get(key), current_config.get(key)
        if before != now:
            problems.append(f"{key}: saved {before!r} vs now {now!r}")
    if saved["start_model"] != current["start_model"]:
        problems.append(_start_model_difference(saved, current))
    if saved["data"] != current["data"]:
        problems.append("the train/validation records or their features differ")
    return problems


def _start_model_difference(saved: dict, current: dict) -> str:
    """Why the start models differ, naming the two --checkpoint folders when they do."""
    if "start_checkpoint" not in saved:  # a state saved before the folder was recorded
        return (
            "the starting model differs (the --checkpoint, or the feature normaliser "
            "fitted on the train records)"
        )
    before, now = saved["start_checkpoint"], current["start_checkpoint"]
    if before != now:
        return (
            f"the saved search started from {_start_name(before)}, this run from "
            f"{_start_name(now)}: to continue the saved search, run it with "
            f"{_checkpoint_option(before)}; to start over from {_start_name(now)}, add "
            "--no-resume (or give another -o)"
        )
    if now is None:
        return (
            "the starting model differs: the feature normaliser fitted on the train records "
            "(no --checkpoint) is another"
        )
    return (
        f"the starting model differs: the checkpoint {now} changed since the saved search "
        "started from it (it was trained again or replaced)"
    )


def _start_name(checkpoint: str | None) -> str:
    return "a fresh head (no --checkpoint)" if checkpoint is None else f"--checkpoint {checkpoint}"


def _checkpoint_option(checkpoint: str | None) -> str:
    return "no --checkpoint" if checkpoint is None else f"--checkpoint {checkpoint}"


def _flatten(mapping: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in mapping.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{dotted}."))
        else:
            flat[dotted] = value
    return flat


@dataclass
class SearchState:
    """Everything a continuation needs; pickled whole into OUTPUT/es_state/state.pkl."""

    fingerprint: dict
    optimizer: SepCMA
    generation: int
    best_parameters: np.ndarray
    best_generation: int
    best_validation_reward: float | None
    initial_validation: dict[str, float] | None
    history: list[dict]
    resumed_from: list[int]

    def save(self, output_dir: Path) -> None:
        payload = {"format": STATE_FORMAT, **self.__dict__}
        write_bytes_atomic(state_path(output_dir), pickle.dumps(payload))


def fresh_state(
    model: RouterModel,
    training: ESTrainingConfig,
    fingerprint: dict,
    validation: SplitData | None,
) -> SearchState:
    start = parameter_vector(model)
    if start.size < 2:
        raise ValueError("sep-CMA-ES needs at least 2 trainable parameters")
    initial = policy_metrics(model, validation) if validation is not None else None
    return SearchState(
        fingerprint=fingerprint,
        optimizer=SepCMA(
            mean=start.copy(),
            sigma=training.sigma0,
            seed=training.seed,
            population_size=training.population_size,
        ),
        generation=0,
        best_parameters=start,
        best_generation=0,
        best_validation_reward=initial["reward"] if initial else None,
        initial_validation=initial,
        history=[],
        resumed_from=[],
    )


def resumed_state(output_dir: Path, fingerprint: dict) -> SearchState | None:
    saved = read_es_state(output_dir)
    if saved is None:
        return None
    path = state_path(output_dir)
    if saved.get("format") != STATE_FORMAT:
        raise ESResumeError(
            f"{path} has state format {saved.get('format')}, this version writes "
            f"{STATE_FORMAT}; {START_OVER}"
        )
    problems = fingerprint_mismatches(saved["fingerprint"], fingerprint)
    if problems:
        raise ESResumeError(
            f"{path} belongs to a different ES run: " + "; ".join(problems) + f"; {START_OVER}"
        )
    saved.pop("format")
    saved["fingerprint"] = fingerprint  # the resumable keys may have changed
    return SearchState(**saved)


# --- the search -------------------------------------------------------------------------------


def generation_seed(seed: int, generation: int) -> int:
    return int(np.random.SeedSequence([seed, generation]).generate_state(1)[0])


def run_generation(
    model: RouterModel,
    optimizer: SepCMA,
    train: SplitData,
    training: ESTrainingConfig,
    generation: int,
) -> dict[str, float]:
    """Ask a population, score it on a fresh train mini-batch, tell CMA (which minimises)."""
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
        population_logits(model, candidates, batch.inputs),
        batch.rewards,
        training.samples,
        training.entropy_coefficient,
        generator,
    )
    fitness = scores["fitness"].tolist()
    optimizer.tell([(x, -value) for x, value in zip(solutions, fitness, strict=True)])
    return {
        "fitness_best": max(fitness),
        "fitness_mean": sum(fitness) / len(fitness),
        "reward_mean": float(scores["reward"].mean()),
        "entropy_mean": float(scores["entropy"].mean()),
    }


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
    training = config.training
    output_dir = Path(output_dir)
    fingerprint = run_fingerprint(config, model, [train, validation], checkpoint)
    if not resume:
        state_path(output_dir).unlink(missing_ok=True)
    state = resumed_state(output_dir, fingerprint) if resume else None
    if state is not None and state.generation > training.iterations:
        raise ESResumeError(
            f"{state_path(output_dir)} is already at generation {state.generation}, past "
            f"iterations={training.iterations}; {RAISE_ITERATIONS}, or {START_OVER}"
        )
    if state is not None and state.generation == training.iterations:
        console.print(
            f"ES: the run saved in {state_path(output_dir)} has already finished its "
            f"{training.iterations} generations; {RAISE_ITERATIONS}, or {START_OVER}",
            markup=False,
        )
    elif state is not None:
        state.resumed_from.append(state.generation)
        console.print(
            f"ES: resuming from generation {state.generation} of {training.iterations} "
            f"({state_path(output_dir)})",
            markup=False,
        )
    else:
        state = fresh_state(model, training, fingerprint, validation)
    if validation is None:
        console.print("[yellow]ES: no validation split; keeping the final mean[/yellow]")
    svf = f" (SVF offsets {model.svf.offset_count():,})" if model.svf is not None else ""
    console.print(
        f"ES device={model.device_ref}; search={training.search}; "
        f"parameters={state.optimizer.dim:,}{svf}; "
        f"population={training.population_size}; batch={min(training.batch_size, len(train))}"
    )
    seconds: list[float] = []
    with torch_fit_threads(model.svf is not None), stage_progress("ES generations") as progress:
        task = progress.add_task(
            "es", total=training.iterations, completed=state.generation, status=""
        )
        for generation in range(state.generation + 1, training.iterations + 1):
            started = time.perf_counter()
            entry: dict = {
                "generation": generation,
                "train": run_generation(model, state.optimizer, train, training, generation),
            }
            seconds.append(time.perf_counter() - started)
            entry["seconds"] = seconds[-1]
            last = generation == training.iterations
            if validation is not None and (generation % training.validate_every == 0 or last):
                set_parameter_vector(model, state.optimizer.mean)
                entry["validation"] = policy_metrics(model, validation)
                if entry["validation"]["reward"] > state.best_validation_reward:
                    state.best_validation_reward = entry["validation"]["reward"]
                    state.best_generation = generation
                    state.best_parameters = state.optimizer.mean.copy()
            state.history.append(entry)
            state.generation = generation
            if generation % training.save_every == 0 or last:
                state.save(output_dir)
            if generation % training.log_every == 0:
                console.print(f"ES gen {generation} {_status(entry)}")
            best = state.best_validation_reward
            status = f"best validation {best:.4f}" if best is not None else ""
            progress.update(task, completed=generation, status=status)  # short: 80 columns
    if validation is None:
        state.best_parameters, state.best_generation = state.optimizer.mean.copy(), state.generation
    set_parameter_vector(model, state.best_parameters)
    return state, seconds


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
    state, seconds = evolve(model, train, validation, config, output_dir, resume, checkpoint)
    if not seconds:
        report = finished_report(Path(output_dir), state)
        if report is not None:
            console.print(
                f"ES: kept the checkpoint and report already in {output_dir}", markup=False
            )
            return report
    cost_weighting = cost_weighting_summary(records, config.training)
    return write_outputs(
        model, state, seconds, config, Path(output_dir), checkpoint, cost_weighting, warnings
    )


def finished_report(output: Path, state: SearchState) -> dict | None:
    """The training_report.json of the finished run whose state this is, beside its
    checkpoint; None when the run was stopped before writing them (then they are written)."""
    try:
        read_checkpoint_metadata(output)
        report = read_json(output / STAGE_REPORT)
    except (OSError, ValueError):
        return None
    if not isinstance(report, dict) or report.get("generations") != state.generation:
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
    all_seconds = [entry["seconds"] for entry in state.history]
    summary = {
        "best_generation": state.best_generation,
        "best_validation_reward": state.best_validation_reward,
        "initial_validation_reward": (
            state.initial_validation["reward"] if state.initial_validation else None
        ),
        "generations": state.generation,
        "resumed_from": state.resumed_from,
        "seconds_per_generation": sum(all_seconds) / max(1, len(all_seconds)),
    }
    if state.best_generation and state.best_validation_reward is None:
        console.print(f"ES: kept generation {state.best_generation}, the last one")
    elif state.best_generation:
        console.print(
            f"ES: kept generation {state.best_generation} "
            f"(validation reward {state.best_validation_reward:.4f})"
        )
    else:
        console.print("ES: no generation beat the starting point on validation; kept it")
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


def _status(entry: dict) -> str:
    status = (
        f"fitness best {entry['train']['fitness_best']:.4f} "
        f"mean {entry['train']['fitness_mean']:.4f}"
    )
    if "validation" in entry:
        status += f" · validation reward {entry['validation']['reward']:.4f}"
    return status
