"""RouterModel: backbone features (+ SVF offsets) -> (normalised) -> head -> worker logits."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from safetensors import SafetensorError
from safetensors.torch import load
from torch import nn

from . import __version__, code_digest
from .atomic_files import remove_files, write_tensors_atomic
from .backbones import (
    EMBEDDED_BACKBONES,
    backbone_fingerprint,
    canonical_backbone,
    embedded_path,
    hub_commit,
    hub_snapshot,
    local_backbone_path,
    names_a_path,
    weights_fingerprint,
)
from .config import ModelConfig, describe_config_error
from .features import (
    FeatureExtractor,
    Prompt,
    announce_uncached_features,
    computation_versions,
    compute_features,
    configured_pooling,
    console,
    uncached_features,
)
from .io import write_json
from .svf import SVF

HEAD_FILE = "router_head.safetensors"
META_FILE = "router.json"
REQUIRED_METADATA = ("worker_ids", "feature_dim", "backbone_parameters", "model")
# Where a local backbone folder was, relative to the checkpoint folder (found there when the
# project moved, or was copied with its checkpoints, and its absolute path is gone).
BACKBONE_RELATIVE_KEY = "backbone_relative_to_checkpoint"
# The metadata's digest of the tensor file it was written with (older checkpoints lack it).
TENSOR_DIGEST_KEY = "tensor_file_sha256"
# What identifies the backbone weights the head was trained on (backbones.backbone_fingerprint);
# null when nothing could be read, absent in checkpoints written before it was recorded.
BACKBONE_FINGERPRINT_KEY = "backbone_fingerprint"
# The SHA-256 of the sources of the fugu-lite that wrote the checkpoint (see code_digest).
CODE_DIGEST_KEY = "package_code_sha256"
# The versions of the packages that computed its features (features.computation_versions).
FEATURE_VERSIONS_KEY = "feature_package_versions"


class CheckpointError(ValueError):
    """A checkpoint is missing, incomplete, or does not fit what it is used with."""


def build_head(model_cfg: ModelConfig, feature_dim: int, n_workers: int) -> nn.Module:
    if model_cfg.head == "linear":
        return nn.Linear(feature_dim, n_workers, bias=False)
    return nn.Sequential(
        nn.Linear(feature_dim, model_cfg.head_hidden),
        nn.GELU(),
        nn.Dropout(model_cfg.head_dropout),
        nn.Linear(model_cfg.head_hidden, n_workers, bias=False),
    )


class RouterModel(nn.Module):
    """The coordinator. `model(features=...)` runs the head on (cached) backbone features;
    `model(input_ids=..., attention_mask=...)` runs the backbone first (with the SVF
    offsets, when `model_cfg.svf_targets` names matrices: then the backbone is loaded at
    construction and its parameters are the head's followed by the offsets)."""

    # Where a checkpoint's tensors and metadata go, and its format tag (subclasses differ).
    tensor_file = HEAD_FILE
    metadata_file = META_FILE
    checkpoint_format = "fugu-lite-router"
    feature_mean: torch.Tensor  # buffers, registered in __init__
    feature_scale: torch.Tensor
    normalizer_fitted: torch.Tensor

    def __init__(
        self,
        model_cfg: ModelConfig,
        worker_ids: Sequence[str],
        feature_dim: int,
        backbone_parameters: int = 0,
        extractor: FeatureExtractor | None = None,
    ) -> None:
        super().__init__()
        self.model_cfg = model_cfg
        self.worker_ids = list(worker_ids)
        self.feature_dim = feature_dim
        self.backbone_parameters = backbone_parameters
        self.head = build_head(model_cfg, feature_dim, len(self.worker_ids))
        nn.init.zeros_(self.output_layer.weight)  # uniform policy until trained
        self.register_buffer("feature_mean", torch.zeros(feature_dim))
        self.register_buffer("feature_scale", torch.ones(feature_dim))
        self.register_buffer("normalizer_fitted", torch.tensor(False))
        self.extractor = extractor
        self.svf: SVF | None = None
        if model_cfg.svf_targets:
            backbone = self.backbone_extractor()
            self.svf = SVF.for_backbone(
                model_cfg.svf_targets,
                backbone.truncated,
                backbone.backbone.model,
                model_cfg.backbone,
                model_cfg.layer,
            )
        self._announced_uncached = False

    @property
    def device_ref(self) -> torch.device:
        return self.feature_mean.device

    def forward(
        self,
        features: torch.Tensor | None = None,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return self.head(self.normalize(self.resolve_features(features, input_ids, attention_mask)))

    def resolve_features(
        self,
        features: torch.Tensor | None,
        input_ids: torch.Tensor | None,
        attention_mask: torch.Tensor | None,
    ) -> torch.Tensor:
        """The given features, or the backbone's features of the given tokens."""
        if features is not None:
            return features
        if input_ids is None or attention_mask is None:
            raise ValueError(
                f"{type(self).__name__} needs features, or input_ids and attention_mask"
            )
        return self.backbone_features(input_ids, attention_mask)

    def backbone_features(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> torch.Tensor:
        """Features straight from the backbone, with gradients into the SVF offsets."""
        weights = self.svf.weights() if self.svf is not None else None
        return self.backbone_extractor()(input_ids, attention_mask, weights)

    @property
    def output_layer(self) -> nn.Linear:
        """The head's last linear layer: the whole head when it is linear."""
        return self._split_head()[1]

    def output_layer_inputs(self, features: torch.Tensor) -> torch.Tensor:
        """What the output layer sees: the normalised features through the layers before it."""
        before, _ = self._split_head()
        return before(self.normalize(features))

    def _split_head(self) -> tuple[nn.Module, nn.Linear]:
        """(the layers before the output layer, the output layer) of a build_head head."""
        if isinstance(self.head, nn.Linear):
            return nn.Identity(), self.head
        if isinstance(self.head, nn.Sequential):
            output = self.head[-1]
            if isinstance(output, nn.Linear):
                return self.head[:-1], output
        raise TypeError(
            f"{type(self).__name__}'s head ({type(self.head).__name__}) has no linear output "
            "layer: only build_head's linear and MLP heads have one"
        )

    def normalize(self, features: torch.Tensor) -> torch.Tensor:
        if not self.model_cfg.normalize_features:
            return features
        return (features - self.feature_mean) / self.feature_scale

    def fit_normalizer(self, train_features: torch.Tensor) -> None:
        """Per-dimension standardisation from the training features (hidden states of
        small LMs have a few huge-magnitude dimensions that would dominate the head)."""
        self.feature_mean.copy_(train_features.mean(dim=0))
        if len(train_features) > 1:
            self.feature_scale.copy_(train_features.std(dim=0).clamp(min=1e-4))
        else:  # one prompt has no spread (its std is NaN): centre it, keep the scale
            self.feature_scale.fill_(1.0)
        self.normalizer_fitted.fill_(True)

    def backbone_extractor(self) -> FeatureExtractor:
        if self.extractor is None:
            self.extractor = _load_extractor(self.model_cfg)
        return self.extractor

    def features_for(self, prompts: Sequence[Prompt], use_cache: bool = True) -> torch.Tensor:
        """Features of these prompts (no gradients): from the feature cache for a frozen
        backbone, computed afresh (never cached) when SVF is on."""
        if self.svf is not None:
            self.announce_uncached_features()
            with torch.no_grad():
                weights = self.svf.weights()
            return uncached_features(
                prompts, self.backbone_extractor(), weights, self.model_cfg.feature_batch_size
            )
        features, extractor = compute_features(
            prompts, self.model_cfg, self.extractor, use_cache=use_cache
        )
        self.extractor = extractor or self.extractor
        if features.shape[-1] != self.feature_dim:
            # a checkpoint without a backbone fingerprint, loaded on another backbone
            raise CheckpointError(
                f"backbone {self.model_cfg.backbone} gives features of width "
                f"{features.shape[-1]}, but this router's head takes {self.feature_dim}: it was "
                "trained on another backbone. Point --backbone (model.backbone in a config, "
                "backbone= in Python) at the backbone it was trained on, or retrain it"
            )
        return features

    def announce_uncached_features(self) -> None:
        """Say once per model that SVF features are not cached (they move with the offsets)."""
        if self.svf is not None and not self._announced_uncached:
            announce_uncached_features(len(self.svf.names), self.svf.offset_count())
            self._announced_uncached = True

    @torch.inference_mode()
    def probabilities(
        self, features: torch.Tensor, allowed: Sequence[str] | None = None
    ) -> torch.Tensor:
        """The routing distribution, always in eval mode (no dropout)."""
        was_training = self.training
        self.eval()
        logits = self(features=features.to(self.device_ref))
        self.train(was_training)
        if allowed is not None:
            logits = logits.masked_fill(~self.worker_mask(allowed), float("-inf"))
        return torch.softmax(logits, dim=-1)

    def worker_mask(self, allowed: Sequence[str]) -> torch.Tensor:
        return torch.tensor(
            [worker in allowed for worker in self.worker_ids], device=self.device_ref
        )

    def trainable_parameters(self) -> Iterator[nn.Parameter]:
        return (parameter for parameter in self.parameters() if parameter.requires_grad)

    def trainable_parameter_counts(self) -> tuple[int, int]:
        trainable = sum(parameter.numel() for parameter in self.trainable_parameters())
        head_total = sum(parameter.numel() for parameter in self.head.parameters())
        svf_total = self.svf.offset_count() if self.svf is not None else 0
        return trainable, head_total + svf_total + self.backbone_parameters

    def checkpoint_fields(self) -> dict:
        """What this kind of router adds to the checkpoint's metadata."""
        return {"svf_matrices": self.svf.shapes() if self.svf is not None else {}}

    def save_checkpoint(self, directory: str | Path, metadata: dict | None = None) -> Path:
        """The tensors, then the metadata that makes the folder a checkpoint. An older
        checkpoint's metadata goes first and the new one comes back last, naming the digest
        of the tensors it belongs with: a save stopped in between leaves no checkpoint (and
        files copied from two saves a digest that does not match), never new tensors read
        with another run's metadata."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        remove_files(directory, [self.metadata_file])
        tensors = {
            name: value.detach().cpu().contiguous() for name, value in self.state_dict().items()
        }
        write_tensors_atomic(directory / self.tensor_file, tensors, metadata={"format": "pt"})
        model, location = portable_model_config(self.model_cfg, directory)
        write_json(
            directory / self.metadata_file,
            {
                "format": self.checkpoint_format,
                TENSOR_DIGEST_KEY: file_digest(directory / self.tensor_file),
                "package_version": __version__,
                CODE_DIGEST_KEY: code_digest(),
                FEATURE_VERSIONS_KEY: computation_versions(),
                "worker_ids": self.worker_ids,
                "feature_dim": self.feature_dim,
                "backbone_parameters": self.backbone_parameters,
                "model": model,
                BACKBONE_FINGERPRINT_KEY: backbone_fingerprint(model["backbone"]),
                **location,
                **self.checkpoint_fields(),
                "metadata": metadata or {},
            },
        )
        return directory


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
    differ from the checkpoint's fingerprint (see backbones.backbone_fingerprint); None when
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


def _load_extractor(model_cfg: ModelConfig) -> FeatureExtractor:
    from .backbones import load_backbone

    return FeatureExtractor(load_backbone(model_cfg.backbone, model_cfg.device), model_cfg)


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
    try:
        RouterShape.model_validate({key: metadata[key] for key in RouterShape.model_fields})
    except ValidationError as error:
        details = describe_config_error(error, RouterShape, str(meta_path)).partition("\n")[2]
        raise CheckpointError(
            f"{meta_path} is damaged (edited by hand?):\n{details}\nRetrain or restore the "
            "checkpoint"
        ) from error
    saved_model_config(metadata, meta_path)
    return metadata


class RouterShape(BaseModel):
    """The router.json fields a RouterModel is built from, with the types save_checkpoint
    writes: a worker_ids string was split into one worker per character, and a feature_dim
    string failed with a traceback."""

    model_config = ConfigDict(strict=True)

    worker_ids: list[str] = Field(min_length=1)
    feature_dim: int = Field(ge=1)
    backbone_parameters: int = Field(ge=0)


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
    """The `workers:` problem of `checkpoint_mismatches` (see `mismatch_fix`)."""
    return f"workers: checkpoint {list(checkpoint_workers)} vs records {list(record_workers)}"


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


def load_router(
    directory: str | Path,
    model_cfg: ModelConfig | None = None,
    worker_ids: Sequence[str] | None = None,
    backbone: str | None = None,
) -> RouterModel:
    """Load a checkpoint; with a config or workers given, refuse one that does not match.

    `backbone` says where the checkpoint's backbone is now (see locate_backbone); a given
    config's local backbone folder does too, when the checkpoint's is found nowhere."""
    metadata = read_checkpoint_metadata(directory)
    meta_path = Path(directory) / META_FILE
    try:
        saved_cfg = loadable_model_config(metadata, meta_path, backbone)
    except CheckpointError:
        if model_cfg is None or local_backbone_path(model_cfg.backbone) is None:
            raise
        saved_cfg = loadable_model_config(metadata, meta_path, model_cfg.backbone)
    metadata = {**metadata, "model": saved_cfg.model_dump()}
    if model_cfg is not None:
        model_cfg = model_cfg.model_copy(
            update={"backbone": canonical_backbone(model_cfg.backbone)}
        )
    problems = checkpoint_mismatches(metadata, model_cfg or saved_cfg, worker_ids)
    if problems:
        raise CheckpointError(
            f"checkpoint {directory} does not match: "
            + "; ".join(problems)
            + f". {mismatch_fix(problems)}"
        )
    requested = model_cfg or saved_cfg
    cfg = saved_cfg.model_copy(
        update={
            "device": requested.device,
            "cache_dir": requested.cache_dir,
            "feature_batch_size": requested.feature_batch_size,
            "svf_targets": requested.svf_targets,
            "runtime": requested.runtime,
            "head_dropout": requested.head_dropout,  # a training setting, not the model's
        }
    )
    model = RouterModel(
        cfg, metadata["worker_ids"], metadata["feature_dim"], metadata["backbone_parameters"]
    )
    _check_svf_matrices(directory, metadata, model)
    state = read_tensors(Path(directory) / HEAD_FILE, metadata, Path(directory) / META_FILE)
    try:
        missing, unexpected = model.load_state_dict(state, strict=False)
    except RuntimeError as error:
        raise CheckpointError(f"checkpoint {directory} does not fit this model: {error}") from error
    new_offsets = [name for name in missing if name.startswith("svf.")]
    if new_offsets and not saved_cfg.svf_targets:
        console.print(
            f"SVF: {directory} has no singular-value offsets; starting them at zero "
            f"(the checkpoint's model unchanged) for {', '.join(cfg.svf_targets)}",
            markup=False,
        )
        missing = [name for name in missing if name not in new_offsets]
    if missing or unexpected:
        raise CheckpointError(
            f"checkpoint {directory}: missing tensors {missing}, unexpected tensors {unexpected}"
        )
    return model.to(cfg.device).eval()


def _what_it_is(directory: Path) -> str:
    """A hint when the folder holds another fugu-lite artefact."""
    # both import this module: import them when asked
    from .costs import FAMILY_FILE, has_family_members, is_router_family, member_folder
    from .reward_head import HEAD_FILE as REWARD_HEAD_FILE
    from .reward_head import META_FILE as REWARD_META_FILE
    from .reward_head import is_reward_head

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
    for tensors, meta in ((HEAD_FILE, META_FILE), (REWARD_HEAD_FILE, REWARD_META_FILE)):
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
    folder, a `train pipeline` output folder (its checkpoints are `sft/` and `rl/`), or the
    ES search state inside a checkpoint."""
    if not directory.exists():
        return "; that folder does not exist"
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


def _check_svf_matrices(directory: str | Path, metadata: dict, model: RouterModel) -> None:
    """The matrices the checkpoint's offsets belong to must be the ones its targets select now
    (they could differ if a local backbone folder changed architecture)."""
    saved = metadata.get("svf_matrices") or {}
    if not saved:
        return
    now = model.svf.shapes() if model.svf is not None else {}
    if saved != now:
        raise CheckpointError(
            f"checkpoint {directory}: its SVF offsets belong to the matrices {saved}, but the "
            f"targets {model.model_cfg.svf_targets} select {now} in this backbone; use the "
            "backbone the checkpoint was trained with"
        )
