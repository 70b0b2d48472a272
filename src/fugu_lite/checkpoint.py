"""A router checkpoint on disk: its files (router_head.safetensors, router.json) and metadata
keys, reading and checking them (damaged or half-written saves, NaN weights), locating its
backbone and checking its weights, and what differs from the config or workers it is loaded
with. model.RouterModel saves and loads checkpoints through these."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path

import torch
from pydantic import BaseModel, Field, StrictInt, StrictStr, ValidationError
from safetensors import SafetensorError
from safetensors.torch import load

from . import __version__
from .backbone_identity import (
    EMBEDDED_BACKBONES,
    canonical_backbone,
    embedded_path,
    hub_commit,
    hub_snapshot,
    local_backbone_path,
    names_a_path,
    weights_fingerprint,
)
from .config import ModelConfig, describe_config_error
from .features import configured_pooling, console
from .io import describe_validation_error

HEAD_FILE = "router_head.safetensors"
META_FILE = "router.json"
REQUIRED_METADATA = ("worker_ids", "feature_dim", "backbone_parameters", "model")
# Where a local backbone folder was, relative to the checkpoint folder (found there when the
# project moved, or was copied with its checkpoints, and its absolute path is gone).
BACKBONE_RELATIVE_KEY = "backbone_relative_to_checkpoint"
# The metadata's digest of the tensor file it was written with (older checkpoints lack it).
TENSOR_DIGEST_KEY = "tensor_file_sha256"
# What identifies the backbone weights the head was trained on
# (backbone_identity.backbone_fingerprint); null when nothing could be read, absent in
# checkpoints written before it was recorded.
BACKBONE_FINGERPRINT_KEY = "backbone_fingerprint"
# The SHA-256 of the sources of the fugu-lite that wrote the checkpoint (see code_digest).
CODE_DIGEST_KEY = "package_code_sha256"
# The versions of the packages that computed its features (feature_cache.computation_versions).
FEATURE_VERSIONS_KEY = "feature_package_versions"


class CheckpointError(ValueError):
    """A checkpoint is missing, incomplete, or does not fit what it is used with."""


class RouterShape(BaseModel):
    """The metadata keys that size a router (its `model` is a ModelConfig): a damaged value
    built a router of other workers (worker_ids "abc": a, b and c) or failed in torch."""

    worker_ids: list[StrictStr] = Field(min_length=1)
    feature_dim: StrictInt = Field(gt=0)
    backbone_parameters: StrictInt = Field(ge=0)


def portable_model_config(model_cfg: ModelConfig, directory: Path) -> tuple[dict, dict]:
    """The model config as a checkpoint stores it, with a local backbone folder and the
    cache folder as absolute paths (a relative one would depend on the working directory of
    whoever loads it), and where the backbone folder is relative to the checkpoint."""
    model = model_cfg.model_dump()
    model["backbone"] = canonical_backbone(model_cfg.backbone)
    if model_cfg.cache_dir is not None:
        model["cache_dir"] = str(Path(model_cfg.cache_dir).expanduser().absolute())
    local = local_backbone_path(model_cfg.backbone)
    if local is None:
        return model, {}
    return model, {BACKBONE_RELATIVE_KEY: os.path.relpath(local, directory.resolve())}


def locate_backbone(metadata: dict, directory: Path, backbone: str | None = None) -> str:
    """The checkpoint's backbone as it can be loaded here: `backbone` when given (the
    caller says where it is now), else the stored name; a local folder that is not where it
    was is looked for relative to the checkpoint folder, and found nowhere is a
    CheckpointError saying how to point at it."""
    if backbone is not None:
        if names_a_path(backbone) and local_backbone_path(backbone) is None:
            raise CheckpointError(f"--backbone {backbone}: no such file or folder")
        return canonical_backbone(backbone)
    stored = str(metadata["model"]["backbone"])
    if local_backbone_path(stored) is not None:
        return canonical_backbone(stored)
    relative = metadata.get(BACKBONE_RELATIVE_KEY)
    beside = directory / relative if isinstance(relative, str) else None
    if beside is not None and beside.exists():
        return str(beside.resolve())
    if beside is None and not names_a_path(stored):
        return stored  # an embedded name or a hub id
    also = f", nor at {beside} (where it was relative to the checkpoint)" if beside else ""
    raise CheckpointError(
        f"checkpoint {directory} was trained with the backbone folder {stored}, which is not "
        f"there{also}. Give the folder it is in now: `--backbone PATH` (route, eval, serve), "
        "model.backbone in the config (train --checkpoint), or backbone= in Python"
    )


def _cache_dir_here(cache_dir: str | None) -> str | None:
    """A checkpoint's cache folder where it exists, else the default cache: the one it names
    belongs to the machine (and working directory) it was trained on."""
    if cache_dir is None or not Path(cache_dir).expanduser().is_dir():
        return None
    return cache_dir


def loadable_model_config(
    metadata: dict, meta_path: Path, backbone: str | None = None
) -> ModelConfig:
    """The checkpoint's model config with its backbone located (see locate_backbone) and a
    cache folder that is not here replaced by the default one."""
    saved = saved_model_config(metadata, meta_path)
    located = locate_backbone(metadata, meta_path.parent, backbone)
    check_backbone_weights(metadata, meta_path, located)
    return saved.model_copy(
        update={"backbone": located, "cache_dir": _cache_dir_here(saved.cache_dir)}
    )


def check_backbone_weights(metadata: dict, meta_path: Path, backbone: str) -> None:
    """Refuse a backbone whose weights are not the ones the checkpoint was trained on (another
    fine-tune of the same size, a folder updated in place, a newer hub download): its head
    would route silently wrong. A checkpoint written before fingerprints were recorded loads,
    with a note."""
    if BACKBONE_FINGERPRINT_KEY not in metadata:
        _note_unchecked_backbone(metadata, meta_path)
        return
    stored = metadata[BACKBONE_FINGERPRINT_KEY]
    if stored is not None and not isinstance(stored, dict):
        raise CheckpointError(
            f"{meta_path} is damaged ({BACKBONE_FINGERPRINT_KEY} is not an object); retrain or "
            "restore the checkpoint"
        )
    difference = backbone_weights_difference(stored, backbone)
    if difference is not None:
        trained, found = difference
        trained_on = str(metadata["model"]["backbone"])
        raise CheckpointError(
            f"checkpoint {meta_path.parent} was trained on the backbone {_where(trained_on)} "
            f"with {trained}, but {_where(backbone)} now has {found}. Its head routes well "
            "only on the weights it was trained on: point at a backbone with those weights "
            "(`--backbone PATH` for route, eval and serve, model.backbone in the config for "
            "train --checkpoint, backbone= in Python), or retrain the checkpoint on this one"
        )


def backbone_weights_difference(stored: dict | None, backbone: str) -> tuple[str, str] | None:
    """(what the checkpoint was trained on, what `backbone` has now) when `backbone`'s weights
    differ from the checkpoint's fingerprint (see backbone_identity.backbone_fingerprint); None when
    they are the same or cannot be compared (no fingerprint, a hub id not in the local
    cache). A hub id is compared by its snapshot commit, which reads no weights."""
    if not stored:
        return None
    stored_commit = stored.get("hub_commit")
    found_commit = hub_commit(backbone)
    if stored_commit and found_commit:
        if stored_commit == found_commit:
            return None
        old = hub_snapshot(backbone)
        still = old.parent / stored_commit if old is not None else None
        kept = (
            f" (the trained snapshot is still at {still}: `--backbone {still}` loads it)"
            if still is not None and still.is_dir()
            else ""
        )
        return (
            f"snapshot commit {stored_commit}",
            f"snapshot commit {found_commit} in the local Hugging Face cache{kept}",
        )
    stored_digest = stored.get("weights_sha256")
    found = weights_fingerprint(backbone)
    if not stored_digest or found is None or found["weights_sha256"] == stored_digest:
        return None
    return (
        f"weights of SHA-256 {stored_digest} ({', '.join(stored.get('weight_files') or [])})",
        f"weights of SHA-256 {found['weights_sha256']} ({', '.join(found['weight_files'])})",
    )


def _where(backbone: str) -> str:
    """A backbone name with the folder an embedded one is in."""
    if backbone not in EMBEDDED_BACKBONES:
        return backbone
    try:
        return f"{backbone} ({embedded_path(backbone)})"
    except RuntimeError:  # its package is not installed
        return backbone


_NOTED_UNCHECKED: set[str] = set()  # backbones said once per process to be unchecked


def _note_unchecked_backbone(metadata: dict, meta_path: Path) -> None:
    backbone = str(metadata["model"]["backbone"])
    if backbone in _NOTED_UNCHECKED:
        return
    _NOTED_UNCHECKED.add(backbone)
    writer = metadata.get("package_version", "an earlier version")
    console.print(
        f"note: {meta_path.parent} was written by fugu-lite {writer}, which did not record "
        "its backbone's weights, so whether the backbone holds the weights it was trained on "
        "is not checked (retrain it to have that checked)",
        markup=False,
        style="dim",
    )


def read_checkpoint_metadata(directory: str | Path) -> dict:
    directory = Path(directory)
    meta_path = directory / META_FILE
    if not (directory / HEAD_FILE).exists() or not meta_path.exists():
        raise CheckpointError(
            f"{directory} is not a fugu-lite router checkpoint: it needs {HEAD_FILE} and "
            f"{META_FILE} (written by `fugu-lite train ...`){_what_it_is(directory)}"
        )
    metadata = read_metadata_object(meta_path, "retrain or restore the checkpoint")
    missing = [key for key in REQUIRED_METADATA if key not in metadata]
    if missing:
        raise CheckpointError(f"{meta_path} lacks {missing}; retrain or restore the checkpoint")
    check_shape(RouterShape, metadata, meta_path, "retrain or restore the checkpoint")
    saved_model_config(metadata, meta_path)
    return metadata


def check_shape(shape: type[BaseModel], metadata: dict, meta_path: Path, fix: str) -> None:
    """Refuse metadata whose keys that `shape` types (RouterShape, ...) hold other values, as
    a CheckpointError naming the file and each key, ending with `fix`."""
    try:
        shape.model_validate({key: metadata[key] for key in shape.model_fields if key in metadata})
    except ValidationError as error:
        raise CheckpointError(
            f"{meta_path} is damaged ({describe_validation_error(error, None)}); {fix}"
        ) from error


def read_metadata_object(meta_path: Path, fix: str) -> dict:
    """A checkpoint's JSON metadata; not JSON, or JSON that is not an object, is a
    CheckpointError naming the file and ending with `fix`."""
    try:
        metadata = json.loads(meta_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise CheckpointError(
            f"{meta_path} is damaged (not valid JSON: {error.msg} at line {error.lineno}); {fix}"
        ) from error
    if not isinstance(metadata, dict):
        raise CheckpointError(
            f"{meta_path} is damaged (a JSON {type(metadata).__name__}, not an object); {fix}"
        )
    return metadata


def saved_model_config(metadata: dict, meta_path: Path) -> ModelConfig:
    """A checkpoint's model config; one this version cannot read (a newer version's setting,
    a bad value) is a CheckpointError naming the file, the key and the writing version."""
    try:
        return ModelConfig.model_validate(metadata["model"])
    except ValidationError as error:
        details = describe_config_error(error, ModelConfig, str(meta_path)).partition("\n")[2]
        writer = metadata.get("package_version", "an unknown version")
        raise CheckpointError(
            f"{meta_path}: its model config, written by fugu-lite {writer}, does not fit "
            f"fugu-lite {__version__}:\n{details}\nLoad it with the fugu-lite version that "
            "wrote it, or retrain the checkpoint with this one."
        ) from error


def checkpoint_mismatches(
    metadata: dict, model_cfg: ModelConfig, worker_ids: Sequence[str] | None
) -> list[str]:
    """What differs between a checkpoint and the config/workers it is loaded with."""
    problems = []
    if worker_ids is not None and list(worker_ids) != metadata["worker_ids"]:
        problems.append(workers_mismatch(metadata["worker_ids"], worker_ids))
    saved = ModelConfig.model_validate(metadata["model"])  # checked by read_checkpoint_metadata
    # `auto` is compared as what it means on the backbone: the same features.
    saved_pooling, given_pooling = configured_pooling(saved), configured_pooling(model_cfg)
    if saved_pooling != given_pooling:
        problems.append(
            f"model.pooling: checkpoint {saved.pooling!r} vs config {model_cfg.pooling!r}"
            + _meaning(saved, saved_pooling, model_cfg, given_pooling)
        )
    for field in (
        "backbone",
        "layer",
        "max_tokens",
        "chat_template",
        "quantization",
        "head",
        "head_hidden",
        "normalize_features",
    ):
        saved_value, given_value = getattr(saved, field), getattr(model_cfg, field)
        if saved_value != given_value:
            problems.append(f"model.{field}: checkpoint {saved_value!r} vs config {given_value!r}")
    # A head-only checkpoint may continue with SVF (zero offsets = the same model); a
    # checkpoint with offsets must keep exactly its targets.
    if saved.svf_targets and saved.svf_targets != model_cfg.svf_targets:
        dropped = "" if model_cfg.svf_targets else " (its learned SVF offsets would be dropped)"
        problems.append(
            f"model.svf_targets: checkpoint {saved.svf_targets!r} vs config "
            f"{model_cfg.svf_targets!r}{dropped}"
        )
    return problems


def _meaning(saved: ModelConfig, saved_pooling: str, given: ModelConfig, given_pooling: str) -> str:
    """' (auto = penultimate on this backbone)' where an `auto` was resolved, else ''."""
    resolved = [
        f"{cfg.pooling} = {pooling}"
        for cfg, pooling in ((saved, saved_pooling), (given, given_pooling))
        if cfg.pooling != pooling
    ]
    return f" ({', '.join(resolved)} on this backbone)" if resolved else ""


def workers_mismatch(checkpoint_workers: Sequence[str], record_workers: Sequence[str]) -> str:
    """The `workers:` problem of `checkpoint_mismatches` (see `mismatch_fix`), naming the
    workers either side lacks: in a pool of 11 the two lists hid a one-worker difference."""
    missing = [worker for worker in checkpoint_workers if worker not in record_workers]
    extra = [worker for worker in record_workers if worker not in checkpoint_workers]
    details = [f"the records lack {missing}"] if missing else []
    details += [f"the checkpoint does not know {extra}"] if extra else []
    difference = "; ".join(details) or "the same workers in another order"
    return (
        f"workers: checkpoint {list(checkpoint_workers)} vs records {list(record_workers)} "
        f"({difference})"
    )


def mismatch_fix(problems: Sequence[str]) -> str:
    """What to do about `checkpoint_mismatches`: other workers need other records, another
    model config needs the checkpoint's own config (its router.json `model`)."""
    fixes = []
    if any(problem.startswith("workers:") for problem in problems):
        fixes.append(
            "Use records with the checkpoint's workers (the same ids in the same order), or "
            "train a new checkpoint on these records."
        )
    if any(problem.startswith("model.") for problem in problems):
        fixes.append(
            "Use the model config the checkpoint was trained with (the `model` of its "
            "router.json), or train a new checkpoint."
        )
    return " ".join(fixes)


def checkpoint_kinds() -> list[tuple[str, str]]:
    """(tensor file, metadata file) of each kind of checkpoint a folder may hold: a router's
    and a reward head's."""
    from .reward_head import HEAD_FILE as REWARD_HEAD_FILE  # it imports this module
    from .reward_head import META_FILE as REWARD_META_FILE

    return [(HEAD_FILE, META_FILE), (REWARD_HEAD_FILE, REWARD_META_FILE)]


def _what_it_is(directory: Path) -> str:
    """A hint when the folder holds another fugu-lite artefact."""
    # both import this module: import them when asked
    from .reward_head import is_reward_head
    from .router_family import FAMILY_FILE, has_family_members, is_router_family, member_folder

    if is_router_family(directory):
        return (
            "; it is a router family: pass one member's folder, e.g. "
            f"{directory / member_folder(0) / 'rl'} (listed in {FAMILY_FILE})"
        )
    if is_reward_head(directory):
        return "; it is a reward head, which `route`, `serve` and `eval --pareto` read"
    pipeline = directory.parent
    if (
        directory.name == "rl"
        and (pipeline / "sft" / META_FILE).is_file()
        and not (pipeline / "training_report.json").exists()
    ):
        return (
            "; the `train pipeline` run that writes it stopped before its RL stage finished: "
            "run it again (a finished SFT is kept)"
        )
    for tensors, meta in checkpoint_kinds():
        if (directory / tensors).exists() and not (directory / meta).exists():
            return (
                f"; it holds {tensors} without {meta}: the training that saved it was "
                "stopped while writing the checkpoint; run it again"
            )
    if has_family_members(directory):
        return (
            f"; it holds router family members but no {FAMILY_FILE}: the `train pipeline "
            "--cost-weights` run that writes it was interrupted; run it again"
        )
    return _where_the_checkpoint_is(directory)


def _where_the_checkpoint_is(directory: Path) -> str:
    """A hint for a folder that is not a checkpoint but sits beside or above one: a missing
    folder, an ES search stopped before its checkpoint was written, a `train pipeline` output
    folder (its checkpoints are `sft/` and `rl/`), or the ES search state inside a
    checkpoint."""
    from .es_state import state_path  # it imports this module: import it when asked

    if not directory.exists():
        return "; that folder does not exist"
    if state_path(directory).is_file():
        return (
            "; it holds an interrupted `train es` search (es_state) but no checkpoint yet: "
            "run the same `train es` command again to continue it (the checkpoint is written "
            "when the search finishes)"
        )
    stages = [stage for stage in ("rl", "sft") if (directory / stage / META_FILE).is_file()]
    if stages:
        final = {"rl": " (the final router)", "sft": ""}
        named = [f"{directory / stage}{final[stage]}" for stage in stages]
        return "; it is a `train pipeline` output folder: pass " + " or ".join(named)
    if (directory.parent / META_FILE).is_file() and (directory.parent / HEAD_FILE).is_file():
        return f"; the checkpoint is the folder holding it: {directory.parent}"
    return ""


def file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tensor_digest(directory: str | Path) -> str:
    """The SHA-256 of a checkpoint's tensor file, as its router.json names it (load_router
    refuses a file that differs, so a stage that loaded it need not hash it again); hashed
    from the file for a checkpoint whose metadata does not name it."""
    named = read_checkpoint_metadata(directory).get(TENSOR_DIGEST_KEY)
    return named if isinstance(named, str) else file_digest(Path(directory) / HEAD_FILE)


def read_tensors(path: Path, metadata: dict, meta_path: Path) -> dict[str, torch.Tensor]:
    """A checkpoint's safetensors file; a damaged one, or one other than the file its metadata
    was written with, is a CheckpointError saying so."""
    try:
        payload = path.read_bytes()
        tensors = load(payload)
    except (SafetensorError, OSError) as error:
        raise CheckpointError(
            f"{path} is damaged or incomplete ({error}); copy the checkpoint folder again, "
            "or retrain it"
        ) from error
    expected = metadata.get(TENSOR_DIGEST_KEY)
    if expected is not None and hashlib.sha256(payload).hexdigest() != expected:
        raise CheckpointError(
            f"{path} is not the tensor file {meta_path.name} was written with (its SHA-256 "
            "differs): the checkpoint was saved again and that save was stopped half-way, or "
            "its files come from two different saves. Retrain it, or copy the whole "
            "checkpoint folder again"
        )
    blown = [
        name
        for name, tensor in tensors.items()
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all())
    ]
    if blown:
        # Written by a version that saved a diverged run: it would route every prompt to
        # the first worker and send NaN probabilities.
        raise CheckpointError(
            f"{path} holds NaN or infinite weights ({', '.join(blown)}): the training that "
            "wrote it diverged. Train it again with a lower training.learning_rate"
        )
    return tensors
