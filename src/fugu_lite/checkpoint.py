"""A router checkpoint on disk: its files (router_head.safetensors, router.json) and metadata
keys, reading and checking them (damaged or half-written saves, NaN weights), and what a
folder that is not one holds instead. Locating its backbone and checking its weights are
checkpoint_backbone's; what differs from the config or workers it is loaded with is
checkpoint_mismatch's. model.RouterModel saves and loads checkpoints through these."""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path

import torch
from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, Field, StrictInt, StrictStr, ValidationError, field_validator
from safetensors import SafetensorError
from safetensors.torch import load

from . import __version__
from .config import ModelConfig
from .config_errors import describe_config_error
from .file_digests import is_lfs_pointer
from .io import describe_validation_error
from .text_reading import RecordFileError, broken_link, json_error_reason, read_utf8_text

HEAD_FILE = "router_head.safetensors"
META_FILE = "router.json"
ROUTER_FORMAT = "fugu-lite-router"  # the metadata's "format" tag
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
# The tensor file's own record of the order of its head's outputs (a JSON list of the worker
# ids), in its safetensors header: the metadata's worker_ids put back in another order loaded,
# and each worker got another's scores. Absent in files written before it was recorded.
WORKER_ORDER_KEY = "worker_ids"


class CheckpointError(ValueError):
    """A checkpoint is missing, incomplete, or does not fit what it is used with."""


class BackboneFingerprint(BaseModel):
    """A checkpoint's BACKBONE_FINGERPRINT_KEY (see backbone_identity.backbone_fingerprint):
    a hand-edited value of another type (a weight file's name as a number) ended the load in
    a TypeError from the comparison with the backbone."""

    weights_sha256: StrictStr | None = None
    weight_files: list[StrictStr] = []
    hub_commit: StrictStr | None = None


class RouterShape(BaseModel):
    """The metadata keys that size a router (its `model` is a ModelConfig): a damaged value
    built a router of other workers (worker_ids "abc": a, b and c) or failed in torch; and
    its backbone's fingerprint, which is compared with the backbone."""

    worker_ids: list[StrictStr] = Field(min_length=1)
    feature_dim: StrictInt = Field(gt=0)
    backbone_parameters: StrictInt = Field(ge=0)
    backbone_fingerprint: BackboneFingerprint | None = None

    @field_validator("worker_ids")
    @classmethod
    def _each_worker_once(cls, worker_ids: list[str]) -> list[str]:
        """A worker named twice: routing's probabilities, keyed by worker, kept one of them."""
        repeated = next((worker for worker in worker_ids if worker_ids.count(worker) > 1), None)
        if repeated is not None:
            raise ValueError(f"it names the worker {repeated!r} more than once")
        return worker_ids


def read_checkpoint_metadata(directory: str | Path) -> dict:
    directory = Path(directory)
    meta_path = directory / META_FILE
    if not (directory / HEAD_FILE).exists() or not meta_path.exists():
        raise CheckpointError(_not_a_router(directory))
    metadata = read_metadata_object(meta_path, "retrain or restore the checkpoint")
    # the earliest routers' metadata had no format tag
    check_format(metadata, meta_path, ROUTER_FORMAT, untagged_ok=True)
    check_required_keys(metadata, meta_path, "retrain or restore the checkpoint")
    check_shape(RouterShape, metadata, meta_path, "retrain or restore the checkpoint")
    saved_model_config(metadata, meta_path)
    return metadata


def check_format(metadata: dict, meta_path: Path, expected: str, untagged_ok: bool) -> None:
    """Refuse checkpoint metadata tagged as another format (a later fugu-lite's layout, or
    another artefact's metadata renamed), naming both and the version that wrote it."""
    written_as = metadata.get("format", expected if untagged_ok else None)
    kinds = checkpoint_formats()
    if isinstance(written_as, str) and written_as != expected and written_as in kinds:
        # this version's other kind, renamed: no other version would read it either
        kind, meta_file, tensor_file = kinds[written_as]
        raise CheckpointError(
            f"{meta_path} is a {kind}'s {meta_file} renamed (its format is {written_as!r}), "
            f"not a {kinds[expected][0]}'s: give the {kind}'s files their own names again, "
            f"{meta_file} and {tensor_file}"
        )
    if written_as != expected:
        writer = metadata.get("package_version", "an unknown version")
        raise CheckpointError(
            f"{meta_path} is tagged format {written_as!r}, not {expected!r} (written by "
            f"fugu-lite {writer}; this is {__version__}): load it with the fugu-lite version "
            "that wrote it, or retrain the checkpoint with this one"
        )


def check_required_keys(metadata: dict, meta_path: Path, fix: str) -> None:
    """Refuse metadata without a key every checkpoint has (REQUIRED_METADATA), naming the
    keys it lacks and ending with `fix`."""
    missing = [key for key in REQUIRED_METADATA if key not in metadata]
    if missing:
        raise CheckpointError(f"{meta_path} lacks {missing}; {fix}")


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
    """A checkpoint's JSON metadata; not UTF-8, not JSON, or JSON that is not an object, is
    a CheckpointError naming the file and ending with `fix`."""
    try:
        # the UTF-8 BOM some editors write: JSON refused it as damage
        metadata = json.loads(read_utf8_text(meta_path).removeprefix("\ufeff"))
    except RecordFileError as error:  # not UTF-8 (edited in another encoding), unreadable
        raise CheckpointError(f"{error} (or {fix})") from error
    except json.JSONDecodeError as error:
        raise CheckpointError(
            f"{meta_path} is damaged (not valid JSON: {json_error_reason(error)} at line "
            f"{error.lineno}); {fix}"
        ) from error
    except RecursionError as error:  # valid JSON, but deeper than json reads
        raise CheckpointError(
            f"{meta_path} is damaged (JSON nested too deeply to be read); {fix}"
        ) from error
    except ValueError as error:  # valid JSON, but an integer longer than Python reads
        raise CheckpointError(
            f"{meta_path} is damaged (an integer of more than {sys.get_int_max_str_digits()} "
            f"digits); {fix}"
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


def checkpoint_formats() -> dict[str, tuple[str, str, str]]:
    """Each kind of checkpoint a folder may hold, a router and a reward head, by its
    metadata's format tag: (what it is, metadata file, tensor file)."""
    from .reward_head import HEAD_FILE as REWARD_HEAD_FILE  # it imports this module
    from .reward_head import HEAD_FORMAT as REWARD_HEAD_FORMAT
    from .reward_head import META_FILE as REWARD_META_FILE

    return {
        ROUTER_FORMAT: ("router", META_FILE, HEAD_FILE),
        REWARD_HEAD_FORMAT: ("reward head", REWARD_META_FILE, REWARD_HEAD_FILE),
    }


def checkpoint_kinds() -> list[tuple[str, str]]:
    """(tensor file, metadata file) of each kind of checkpoint a folder may hold."""
    return [(tensors, meta) for _, meta, tensors in checkpoint_formats().values()]


def _not_a_router(directory: Path) -> str:
    """Why the folder is no router checkpoint. A reward head's tensor file without its
    metadata is said to be one: is_reward_head reads the metadata, so the folder was loaded
    as a router and told it needed router_head.safetensors and router.json."""
    from .reward_head import HEAD_FILE as REWARD_HEAD_FILE  # it imports this module
    from .reward_head import META_FILE as REWARD_META_FILE

    files = (HEAD_FILE, META_FILE, REWARD_HEAD_FILE, REWARD_META_FILE)
    if [name for name in files if (directory / name).exists()] == [REWARD_HEAD_FILE]:
        return (
            f"{directory} looks like a reward head whose {REWARD_META_FILE} is missing"
            + half_saved_hint(directory)
        )
    return (
        f"{directory} is not a fugu-lite router checkpoint: it needs {HEAD_FILE} and "
        f"{META_FILE} (written by `fugu-lite train ...`){_what_it_is(directory)}"
    )


def _what_it_is(directory: Path) -> str:
    """A hint when the folder holds another fugu-lite artefact."""
    # both import this module: import them when asked
    from .reward_head import is_reward_head
    from .router_family import FAMILY_FILE, has_family_members, is_router_family

    if is_router_family(directory):
        return (
            f"; it is a router family: pass one member's folder{_example_member(directory)} "
            f"(listed in {FAMILY_FILE})"
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
    half = half_saved_hint(directory)
    if half:
        return half
    if has_family_members(directory):
        return (
            f"; it holds router family members but no {FAMILY_FILE}: the `train pipeline "
            "--cost-weights` run that writes it was interrupted; run it again"
        )
    return _where_the_checkpoint_is(directory)


def _example_member(directory: Path) -> str:
    """', e.g. FAMILY/lambda-0.5/rl': the folder of the family's smallest cost weight as its
    manifest lists it (a family trained without 0 has no lambda-0), or '' when the manifest
    cannot be read."""
    from .router_family import read_family_manifest

    try:
        members = read_family_manifest(directory).members
    except CheckpointError:  # damaged: the hint names the manifest all the same
        return ""
    first = min(members, key=lambda member: member.cost_weight)
    return f", e.g. {directory / first.checkpoint}"


def half_saved_kind(directory: Path) -> tuple[str, str] | None:
    """(tensor file, metadata file) of the first kind of checkpoint the folder holds one of
    the two files of without the other, or None: the kind `half_saved_hint` tells of."""
    for tensors, meta in checkpoint_kinds():
        if (directory / tensors).exists() != (directory / meta).exists():
            return tensors, meta
    return None


def half_saved_hint(directory: Path) -> str:
    """A hint when the folder holds one of a checkpoint's two files without the other, or
    ''."""
    kind = half_saved_kind(directory)
    if kind is None:
        return ""
    tensors, meta = kind
    if (directory / tensors).exists():
        command = _training_of(tensors, directory)
        return (
            f"; it holds {tensors} without {meta}: the training that saved it was "
            f"stopped while writing the checkpoint; run it again ({command})"
        )
    return (
        f"; it holds {meta} without {tensors}, which it was saved with: copy it from "
        "where the checkpoint was trained (a .gitignore of *.safetensors, or a copy of "
        "the small files only, leaves it behind), or retrain"
    )


def _training_of(tensors: str, directory: Path) -> str:
    """The command that writes the checkpoint whose tensor file is `tensors`: a router's
    stage is named only in the metadata and training_report.json a stopped save lacks, so
    it is `train es` when an ES search's state is beside it, else any router stage."""
    from .es_state import state_path  # both import this module: import them when asked
    from .reward_head import TRAIN_REWARD_HEAD

    if tensors != HEAD_FILE:
        return TRAIN_REWARD_HEAD
    if state_path(directory).is_file():
        return "`fugu-lite train es`"
    return "`fugu-lite train sft`, `rl`, `es` or `pipeline`, whichever wrote it"


def _where_the_checkpoint_is(directory: Path) -> str:
    """A hint for a folder that is not a checkpoint but sits beside or above one: a missing
    folder, an ES search stopped before its checkpoint was written, a `train pipeline` output
    folder (its checkpoints are `sft/` and `rl/`), or the ES search state inside a
    checkpoint."""
    from .es_state import state_path  # it imports this module: import it when asked

    if not directory.exists():
        broken = broken_link(directory)
        return f"; it is {broken}" if broken else "; that folder does not exist"
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


def newer_writer_note(metadata: dict) -> str:
    """'. It was written by fugu-lite X, newer than this fugu-lite ...' for a checkpoint of a
    later version (whose tensors or keys this one may not know), else ''."""
    writer = metadata.get("package_version")
    try:
        newer = Version(str(writer)) > Version(__version__)
    except InvalidVersion:
        return ""
    if not newer:
        return ""
    return (
        f". It was written by fugu-lite {writer}, newer than this fugu-lite {__version__}: "
        f"load it with fugu-lite {writer} or later (`pip install -U fugu-lite`)"
    )


def payload_digest(payload: bytes) -> str:
    """The SHA-256 a checkpoint's metadata names for its tensor file's bytes: the one a save
    records and a load checks."""
    return hashlib.sha256(payload).hexdigest()


def file_digest(path: Path) -> str:
    return payload_digest(path.read_bytes())


def tensor_digest(directory: str | Path) -> str:
    """The SHA-256 of a checkpoint's tensor file, as its router.json names it (load_router
    refuses a file that differs, so a stage that loaded it need not hash it again); hashed
    from the file for a checkpoint whose metadata does not name it."""
    named = read_checkpoint_metadata(directory).get(TENSOR_DIGEST_KEY)
    return named.lower() if isinstance(named, str) else file_digest(Path(directory) / HEAD_FILE)


def read_tensors(path: Path, metadata: dict, meta_path: Path) -> dict[str, torch.Tensor]:
    """A checkpoint's safetensors file; a damaged one, or one other than the file its metadata
    was written with, is a CheckpointError saying so."""
    if is_lfs_pointer(path):
        raise CheckpointError(
            f"{path} is a Git LFS pointer, not the tensors (the repository holding the "
            "checkpoint was cloned without git-lfs): run `git lfs pull` there"
        )
    try:
        payload = path.read_bytes()
        tensors = load(payload)
    except (SafetensorError, OSError) as error:
        raise CheckpointError(
            f"{path} is damaged or incomplete ({error}); copy the checkpoint folder again, "
            "or retrain it"
        ) from error
    expected = metadata.get(TENSOR_DIGEST_KEY)
    if expected is not None and not is_sha256(expected):
        # compared as is, a hand-edited one was said to come from another save
        raise CheckpointError(
            f"{meta_path} is damaged (its {TENSOR_DIGEST_KEY} is {json.dumps(expected)[:80]}, "
            "not a SHA-256 string of 64 hexadecimal digits); copy the checkpoint folder again, "
            "or retrain it"
        )
    # hexadecimal in capitals (PowerShell's Get-FileHash) is the same digest
    if expected is not None and payload_digest(payload) != expected.lower():
        raise CheckpointError(
            f"{path} is not the tensor file {meta_path.name} was written with (its SHA-256 "
            "differs): the checkpoint was saved again and that save was stopped half-way, or "
            "its files come from two different saves. Retrain it, or copy the whole "
            "checkpoint folder again"
        )
    check_worker_order(payload, metadata, path, meta_path)
    blown = [
        name
        for name, tensor in tensors.items()
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor.float()).all())
    ]
    if blown:
        # Written by a version that saved a diverged run: it would route every prompt to
        # the first worker and send NaN probabilities.
        raise CheckpointError(
            f"{path} holds NaN or infinite weights ({', '.join(blown)}): the training that "
            "wrote it diverged. Train it again with a lower training.learning_rate"
        )
    return tensors


def is_sha256(value: object) -> bool:
    return isinstance(value, str) and re.fullmatch(r"[0-9a-fA-F]{64}", value) is not None


def tensor_file_metadata(worker_ids: list[str]) -> dict[str, str]:
    """The safetensors header metadata a checkpoint's tensor file is written with."""
    return {"format": "pt", WORKER_ORDER_KEY: json.dumps(worker_ids)}


def check_worker_order(payload: bytes, metadata: dict, path: Path, meta_path: Path) -> None:
    """Refuse metadata naming the tensor file's workers in another order (router.json edited,
    its worker_ids sorted): the head's outputs would each go to another worker. Workers
    renamed, or a file that does not record them, are not this check's."""
    size = int.from_bytes(payload[:8], "little")  # read by safetensors' load already
    header = json.loads(payload[8 : 8 + size]).get("__metadata__") or {}
    try:
        saved = json.loads(header.get(WORKER_ORDER_KEY, "null"))
    except json.JSONDecodeError:
        return
    given = metadata.get("worker_ids")
    if not isinstance(saved, list) or not isinstance(given, list) or saved == given:
        return
    if sorted(map(str, saved)) == sorted(map(str, given)):
        raise CheckpointError(
            f"{meta_path} names the workers in the order {given}, but {path.name} was trained "
            f"with them in the order {saved}: each would get another worker's scores. Put "
            f"worker_ids back in {meta_path.name} as {json.dumps(saved)}, or restore the "
            "checkpoint folder"
        )
