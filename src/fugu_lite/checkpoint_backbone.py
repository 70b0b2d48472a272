"""A checkpoint's backbone: the model config as a checkpoint stores it (a local backbone
folder as an absolute path and relative to the checkpoint), locating that backbone where
the checkpoint is loaded, and refusing one whose weights are not those it was trained on.
The checkpoint's files and metadata are checkpoint's."""

from __future__ import annotations

import os
from pathlib import Path

from .backbone_identity import (
    EMBEDDED_BACKBONES,
    awaits_download,
    canonical_backbone,
    embedded_path,
    hub_commit,
    hub_id_and_pin,
    hub_snapshot,
    local_backbone_path,
    names_a_path,
    pinned_hub_id,
    weights_fingerprint,
)
from .checkpoint import (
    BACKBONE_FINGERPRINT_KEY,
    BACKBONE_RELATIVE_KEY,
    META_FILE,
    CheckpointError,
    saved_model_config,
)
from .config import ModelConfig, unusable_device
from .features import console
from .text_reading import broken_link


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
    CheckpointError saying how to point at it. A hub id not in the local Hugging Face cache
    is pinned to the snapshot commit the checkpoint was trained on (see _pinned_download)."""
    stored = str(metadata["model"]["backbone"])
    if backbone is not None:
        broken = broken_link(Path(backbone).expanduser())
        if broken:
            raise CheckpointError(f"--backbone {backbone} is {broken}: fix the link")
        if names_a_path(backbone) and local_backbone_path(backbone) is None:
            raise CheckpointError(
                f"--backbone {backbone}: no such file or folder; give where the backbone the "
                f"checkpoint was trained on ({stored}) is now"
            )
        if (Path(backbone).expanduser() / META_FILE).is_file():
            # its head's safetensors were read as weights: 'now has weights of SHA-256 ...'
            raise CheckpointError(
                f"--backbone {backbone} is a fugu-lite checkpoint ({META_FILE}), not a backbone: "
                f"give the checkpoint with --checkpoint and, with --backbone, where the backbone "
                f"it was trained on ({stored}) is now"
            )
        given = canonical_backbone(backbone)
        return _pinned_download(given, metadata) if given == stored else given
    if local_backbone_path(stored) is not None:
        return canonical_backbone(stored)
    relative = metadata.get(BACKBONE_RELATIVE_KEY)
    beside = directory / relative if isinstance(relative, str) else None
    if beside is not None and beside.exists():
        return str(beside.resolve())
    if beside is None and not names_a_path(stored):
        return _pinned_download(stored, metadata)  # an embedded name or a hub id
    also = f", nor at {beside} (where it was relative to the checkpoint)" if beside else ""
    raise CheckpointError(
        f"checkpoint {directory} was trained with the backbone folder {stored}, which is not "
        f"there{also}. Give the folder it is in now: `--backbone PATH` (route, eval, serve), "
        "model.backbone in the config (train --checkpoint), or backbone= in Python"
    )


def _pinned_download(backbone: str, metadata: dict) -> str:
    """A hub id that loading would download pinned to the snapshot commit the checkpoint
    records (see backbone_identity.pinned_hub_id): downloaded unpinned, it was the newest
    `main`, whose other weights the head then routed on without a word. Any other name as
    given; a cached one is compared with the checkpoint's commit (check_backbone_weights)."""
    fingerprint = metadata.get(BACKBONE_FINGERPRINT_KEY)
    commit = fingerprint.get("hub_commit") if isinstance(fingerprint, dict) else None
    if not isinstance(commit, str) or not awaits_download(backbone):
        return backbone
    return pinned_hub_id(backbone, commit) or backbone


def _cache_dir_here(cache_dir: str | None) -> str | None:
    """A checkpoint's cache folder where it exists, else the default cache: the one it names
    belongs to the machine (and working directory) it was trained on."""
    if cache_dir is None or not Path(cache_dir).expanduser().is_dir():
        return None
    return cache_dir


_NOTED_DEVICES: set[str] = set()  # checkpoint devices said once per process to be missing


def _device_here(device: str, meta_path: Path) -> str:
    """A checkpoint's device where torch can use it, else the cpu (with a note): the one it
    names belongs to the machine it was trained on. A checkpoint trained on cuda ended route,
    eval and serve elsewhere in torch's 'Torch not compiled with CUDA enabled'."""
    reason = unusable_device(device)
    if reason is None:
        return device
    if device not in _NOTED_DEVICES:
        _NOTED_DEVICES.add(device)
        console.print(
            f"note: {meta_path.parent} was trained on device {device!r}, which torch "
            f"cannot use here ({reason}); it runs on the cpu",
            markup=False,
            style="dim",
        )
    return "cpu"


def loadable_model_config(
    metadata: dict, meta_path: Path, backbone: str | None = None
) -> ModelConfig:
    """The checkpoint's model config with its backbone located (see locate_backbone), and a
    cache folder and a device that are not here replaced by the default cache and the cpu."""
    saved = saved_model_config(metadata, meta_path)
    located = locate_backbone(metadata, meta_path.parent, backbone)
    check_backbone_weights(metadata, meta_path, located)
    return saved.model_copy(
        update={
            "backbone": located,
            "cache_dir": _cache_dir_here(saved.cache_dir),
            "device": _device_here(saved.device, meta_path),
        }
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
    trained_on = str(metadata["model"]["backbone"])
    difference = backbone_weights_difference(stored, trained_on, backbone)
    if difference is not None:
        trained, found = difference
        raise CheckpointError(
            f"checkpoint {meta_path.parent} was trained on the backbone {_where(trained_on)} "
            f"with {trained}, but {_where(backbone)} now has {found}. Its head routes well "
            "only on the weights it was trained on: point at a backbone with those weights "
            "(`--backbone PATH` for route, eval and serve, model.backbone in the config for "
            "train --checkpoint, backbone= in Python), or retrain the checkpoint on this one"
        )


def backbone_weights_difference(
    stored: dict | None, trained_on: str, backbone: str
) -> tuple[str, str] | None:
    """(what the checkpoint was trained on, what `backbone` has now) when `backbone`'s weights
    differ from the checkpoint's fingerprint (see backbone_identity.backbone_fingerprint) of
    the backbone it was `trained_on`; None when they are the same or cannot be compared (no
    fingerprint, a hub id not in the local cache). The hub id it was trained on is compared by
    its snapshot commit, which reads no weights; another hub id's commits are its own repo's,
    so its weights are compared."""
    if not stored:
        return None
    stored_commit = stored.get("hub_commit")
    found_commit = hub_commit(backbone)
    if stored_commit and found_commit and _same_hub_repo(trained_on, backbone):
        if stored_commit == found_commit:
            return None
        old = hub_snapshot(backbone)
        still = old.parent / stored_commit if old is not None else None
        kept = (
            f" (the trained snapshot is still at {still}: `--backbone {still}` loads it)"
            if still is not None and still.is_dir()
            else f" (`hf download {backbone} --revision {stored_commit}` downloads the trained "
            "snapshot: `--backbone` the folder it prints loads it)"
        )
        return (
            f"snapshot commit {stored_commit}",
            f"snapshot commit {found_commit} in the local Hugging Face cache{kept}",
        )
    stored_digest = stored.get("weights_sha256")
    found = weights_fingerprint(backbone)
    # in capitals where a tool printed it so (PowerShell's Get-FileHash): the same digest
    if not stored_digest or found is None or found["weights_sha256"] == stored_digest.lower():
        return None
    return (
        f"weights of SHA-256 {stored_digest} ({', '.join(stored.get('weight_files') or [])})",
        f"weights of SHA-256 {found['weights_sha256']} ({', '.join(found['weight_files'])})",
    )


def _same_hub_repo(first: str, second: str) -> bool:
    """Whether two hub ids name one repo, either pinned to a commit or not."""
    return hub_id_and_pin(first)[0] == hub_id_and_pin(second)[0]


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
