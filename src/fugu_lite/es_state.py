"""The on-disk state of an ES run (OUTPUT/es_state/state.pkl): what it holds, the
fingerprint of the run that saved it, and whether a new run may continue it (the config,
start model, data and versions must match). `train_es.py` saves and resumes with these."""

from __future__ import annotations

import hashlib
import pickle
from dataclasses import dataclass, fields
from pathlib import Path

import cmaes
import numpy as np
import torch
from cmaes import SepCMA

from . import __version__, code_digest
from .atomic_files import write_bytes_atomic
from .backbone_identity import canonical_backbone
from .config import ESConfig, ESTrainingConfig
from .es_population import SplitData, parameter_vector, policy_metrics
from .features import pooling_meant
from .model import RouterModel

STATE_DIR = "es_state"
STATE_FILE = "state.pkl"
STATE_FORMAT = 1
# what to type: the messages reach users of `fugu-lite train es`
START_OVER = "start over there with --no-resume, or give another -o folder"
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


def raise_iterations(generation: int) -> str:
    """What to type to continue a run whose state is at `generation`."""
    return (
        f"raise training.iterations past {generation} to continue it (--set training.iterations=N)"
    )


class ESResumeError(ValueError):
    """The saved ES state belongs to another run (other config, start model or data)."""


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
    model: RouterModel,
    splits: list[SplitData | None],
    checkpoint: str | Path | None = None,
) -> dict:
    """What must not change between an interrupted run and its continuation (the start
    checkpoint's folder and the workers are there to name them when the start model or the
    data differ)."""
    dumped = config.model_dump(mode="json")
    # `bb`, `./bb` and `/abs/bb` are one backbone folder (as `train pipeline` compares them)
    dumped["model"]["backbone"] = canonical_backbone(config.model.backbone)
    return {
        "versions": {"fugu-lite": __version__, "cmaes": cmaes.__version__},
        "code": code_digest(),
        "config": dumped,
        "start_model": _tensor_digest(list(model.state_dict().values())),
        "start_checkpoint": None if checkpoint is None else str(Path(checkpoint).resolve()),
        "worker_ids": list(model.worker_ids),
        "records": {
            split: 0 if data is None else len(data)
            for split, data in zip(("train", "validation"), splits, strict=True)
        },
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
    changed = [
        key
        for key in sorted(set(saved_config) | set(current_config))
        if key not in RESUMABLE_KEYS and saved_config.get(key) != current_config.get(key)
    ]
    problems += [
        f"{key}: saved {saved_config.get(key)!r} vs now {current_config.get(key)!r}"
        for key in changed
    ]
    start_differs = saved["start_model"] != current["start_model"]
    data_differs = saved["data"] != current["data"]
    # Other workers change the head's shape and the rewards: that is the difference to name.
    # The same workers renamed (same rewards, same start) search the same way: continued.
    workers = saved.get("worker_ids", current["worker_ids"])  # unrecorded in older states
    if (start_differs or data_differs) and workers != current["worker_ids"]:
        problems.append(f"workers: saved {workers} vs now {current['worker_ids']}")
        return problems
    # Another model setting (backbone, layer, head, SVF targets...) makes another start model
    # and other features by itself: naming them again would blame the normaliser or records.
    model_changed = any(key.startswith("model.") for key in changed)
    if start_differs and not (
        model_changed and saved.get("start_checkpoint") == current["start_checkpoint"]
    ):
        problems.append(_start_model_difference(saved, current))
    if data_differs and not (model_changed and not _count_difference(saved, current)):
        problems.append(
            "the train/validation records or their features differ"
            + _count_difference(saved, current)
        )
    return problems


def _count_difference(saved: dict, current: dict) -> str:
    """' (saved from 19 train and 7 validation records, now 17 train and 7 validation)' when
    the counts differ (another records file), else '' (and for states that did not record
    them)."""
    before, now = saved.get("records"), current["records"]
    if before is None or before == now:
        return ""
    return (
        f" (saved from {before['train']} train and {before['validation']} validation records, "
        f"now {now['train']} train and {now['validation']} validation)"
    )


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
    _check_complete(saved, path)
    problems = fingerprint_mismatches(saved["fingerprint"], fingerprint)
    if problems:
        raise ESResumeError(
            f"{path} belongs to a different ES run: " + "; ".join(problems) + f"; {START_OVER}"
        )
    saved.pop("format")
    saved["fingerprint"] = fingerprint  # the resumable keys may have changed
    return SearchState(**saved)


# what `fingerprint_mismatches` reads from a saved fingerprint (others are optional there)
FINGERPRINT_KEYS = ("config", "start_model", "data")


def _check_complete(saved: dict, path: Path) -> None:
    """A state of this format that lacks a part or holds a stranger (edited by hand, or
    pickled by other code) is refused by name, rather than failing with a KeyError."""
    problems = _state_problems(saved)
    if problems:
        raise ESResumeError(
            f"{path} is not a complete ES search state ({'; '.join(problems)}); {START_OVER}"
        )


def _state_problems(saved: dict) -> list[str]:
    expected = {field.name for field in fields(SearchState)} | {"format"}
    problems = [f"no {key}" for key in sorted(expected - set(saved))]
    problems += [f"an unknown {key}" for key in sorted(set(saved) - expected)]
    fingerprint = saved.get("fingerprint", {})
    if not isinstance(fingerprint, dict):
        problems.append("a fingerprint that is not a mapping")
    else:
        problems += [f"no fingerprint.{key}" for key in FINGERPRINT_KEYS if key not in fingerprint]
        problems += _config_problems(fingerprint.get("config", {}))
        if not isinstance(fingerprint.get("versions", {}), dict):  # optional in older states
            problems.append("a fingerprint.versions that is not a mapping")
    if "optimizer" in saved and not isinstance(saved["optimizer"], SepCMA):
        problems.append("an optimizer that is not a sep-CMA-ES search")
    return problems


def _config_problems(config: object) -> list[str]:
    """What fingerprint_mismatches cannot compare in a saved fingerprint's config: it
    flattens the mapping and reads the backbone of its model mapping."""
    if not isinstance(config, dict):
        return ["a fingerprint.config that is not a mapping"]
    model = config.get("model")
    if not isinstance(model, dict) or not isinstance(model.get("backbone"), str):
        return ["a fingerprint.config without a model mapping naming its backbone"]
    return []
