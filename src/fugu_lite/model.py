"""RouterModel: backbone features (+ SVF offsets) -> (normalised) -> head -> worker logits,
and its checkpoints' save (RouterModel.save_checkpoint) and load (load_router); the
checkpoint's files, metadata and checks are in fugu_lite.checkpoint, its backbone in
checkpoint_backbone, what differs from the config it is loaded with in checkpoint_mismatch."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import torch
from safetensors.torch import save
from torch import nn

from . import __version__, code_digest
from .atomic_files import remove_files, write_bytes_atomic
from .backbone_identity import (
    backbone_fingerprint,
    canonical_backbone,
    hub_id_and_pin,
    local_backbone_path,
)
from .checkpoint import (
    BACKBONE_FINGERPRINT_KEY,
    CODE_DIGEST_KEY,
    FEATURE_VERSIONS_KEY,
    HEAD_FILE,
    META_FILE,
    ROUTER_FORMAT,
    TENSOR_DIGEST_KEY,
    CheckpointError,
    checkpoint_kinds,
    newer_writer_note,
    payload_digest,
    read_checkpoint_metadata,
    read_tensors,
    tensor_file_metadata,
)
from .checkpoint_backbone import loadable_model_config, portable_model_config
from .checkpoint_mismatch import CheckpointMismatch, checkpoint_mismatches, mismatch_fix
from .config import ModelConfig
from .feature_cache import computation_versions, compute_features
from .features import (
    FeatureExtractor,
    Prompt,
    announce_uncached_features,
    console,
    uncached_features,
)
from .io import write_json
from .svf import SVF


def trainable_parameters(module: nn.Module) -> Iterator[nn.Parameter]:
    """Every parameter that requires grad, in the module's order: what the gradient stages
    optimise (training_common.optimizer_parameters) and trainable_parameter_counts counts."""
    return (parameter for parameter in module.parameters() if parameter.requires_grad)


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
    checkpoint_format = ROUTER_FORMAT
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
        if not prompts:  # an empty batch: no backbone to load, no rows to stack
            return torch.zeros(0, self.feature_dim)
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
        return torch.softmax(self.allowed_logits(features, allowed), dim=-1)

    @torch.inference_mode()
    def allowed_logits(
        self, features: torch.Tensor, allowed: Sequence[str] | None = None
    ) -> torch.Tensor:
        """The logits in eval mode (no dropout); -inf for a worker not in `allowed`."""
        was_training = self.training
        self.eval()
        logits = self(features=features.to(self.device_ref))
        self.train(was_training)
        return self.without_disallowed(logits, allowed)

    def without_disallowed(
        self, logits: torch.Tensor, allowed: Sequence[str] | None
    ) -> torch.Tensor:
        """`logits` with -inf for each worker not in `allowed` (None: every worker)."""
        if allowed is None:
            return logits
        return logits.masked_fill(~self.worker_mask(allowed), float("-inf"))

    def worker_mask(self, allowed: Sequence[str]) -> torch.Tensor:
        return torch.tensor(
            [worker in allowed for worker in self.worker_ids], device=self.device_ref
        )

    def trainable_parameter_counts(self) -> tuple[int, int]:
        trainable = sum(parameter.numel() for parameter in trainable_parameters(self))
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
        with another run's metadata. A checkpoint of the other kind there (a reward head
        under a router, or the reverse) goes too: it was loaded in place of the new one."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        kinds = checkpoint_kinds()
        remove_files(directory, [metadata for _, metadata in kinds])
        remove_files(directory, [tensors for tensors, _ in kinds if tensors != self.tensor_file])
        tensors = {
            name: value.detach().cpu().contiguous() for name, value in self.state_dict().items()
        }
        payload = save(tensors, metadata=tensor_file_metadata(self.worker_ids))
        write_bytes_atomic(directory / self.tensor_file, payload)
        model, location = portable_model_config(self.model_cfg, directory)
        write_json(
            directory / self.metadata_file,
            {
                "format": self.checkpoint_format,
                # of the bytes written, not the file read back: another save of this folder
                # may have replaced it since, and its tensors would pass as these
                TENSOR_DIGEST_KEY: payload_digest(payload),
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


def _load_extractor(model_cfg: ModelConfig) -> FeatureExtractor:
    from .backbones import load_backbone

    return FeatureExtractor(load_backbone(model_cfg.backbone, model_cfg.device), model_cfg)


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
    saved_cfg = _saved_model_config(directory, metadata, model_cfg, backbone)
    metadata = {**metadata, "model": saved_cfg.model_dump()}
    if model_cfg is not None:
        given = canonical_backbone(model_cfg.backbone)
        # the checkpoint's hub id pinned to its trained snapshot (locate_backbone) is this one
        pinned = hub_id_and_pin(saved_cfg.backbone)[0] == given
        model_cfg = model_cfg.model_copy(
            update={"backbone": saved_cfg.backbone if pinned else given}
        )
    _refuse_mismatches(directory, metadata, model_cfg or saved_cfg, worker_ids)
    cfg = _runtime_config(saved_cfg, model_cfg or saved_cfg)
    state = read_tensors(Path(directory) / HEAD_FILE, metadata, Path(directory) / META_FILE)
    newer = newer_writer_note(metadata)
    _refuse_contradictions(directory, _router_shapes(cfg, metadata), state, newer)
    model = RouterModel(
        cfg, metadata["worker_ids"], metadata["feature_dim"], metadata["backbone_parameters"]
    )
    _check_svf_matrices(directory, metadata, model)
    _refuse_contradictions(directory, model, state, newer)
    _load_state(directory, model, state, saved_cfg, newer)
    return model.to(cfg.device).eval()


def _router_shapes(cfg: ModelConfig, metadata: dict) -> RouterModel:
    """The router the metadata sizes, on the meta device (no memory, no backbone): checked
    against the tensors before a router is built, since a hand-edited feature_dim of 10**12
    allocated until a MemoryError. Its SVF offsets are checked once the backbone is loaded."""
    with torch.device("meta"):
        return RouterModel(
            cfg.model_copy(update={"svf_targets": []}),
            metadata["worker_ids"],
            metadata["feature_dim"],
        )


def _saved_model_config(
    directory: str | Path, metadata: dict, model_cfg: ModelConfig | None, backbone: str | None
) -> ModelConfig:
    """The checkpoint's model config, its backbone located (`backbone`, else where it was
    saved, else a given config's local backbone folder)."""
    meta_path = Path(directory) / META_FILE
    try:
        return loadable_model_config(metadata, meta_path, backbone)
    except CheckpointError:
        if model_cfg is None or local_backbone_path(model_cfg.backbone) is None:
            raise
        return loadable_model_config(metadata, meta_path, model_cfg.backbone)


def _refuse_mismatches(
    directory: str | Path,
    metadata: dict,
    requested: ModelConfig,
    worker_ids: Sequence[str] | None,
) -> None:
    problems = checkpoint_mismatches(metadata, requested, worker_ids)
    if problems:
        raise CheckpointMismatch(
            f"checkpoint {directory} does not match: "
            + "; ".join(problems)
            + f". {mismatch_fix(problems)}",
            problems,
        )


def _runtime_config(saved_cfg: ModelConfig, requested: ModelConfig) -> ModelConfig:
    """The checkpoint's model, run with the requested settings of how (not what) it runs."""
    return saved_cfg.model_copy(
        update={
            "device": requested.device,
            "cache_dir": requested.cache_dir,
            "feature_batch_size": requested.feature_batch_size,
            "svf_targets": requested.svf_targets,
            "runtime": requested.runtime,
            "head_dropout": requested.head_dropout,  # a training setting, not the model's
        }
    )


def _refuse_contradictions(
    directory: str | Path, model: RouterModel, state: dict[str, torch.Tensor], newer: str
) -> None:
    contradictions = metadata_contradictions(model, state)
    if contradictions:
        raise CheckpointError(
            f"{Path(directory) / META_FILE} contradicts {HEAD_FILE}: {'; '.join(contradictions)}"
            ". Its metadata was edited, or its files come from two saves: restore the "
            "checkpoint folder (or the router.json written with these tensors), or retrain it"
            f"{newer}"
        )


def _load_state(
    directory: str | Path,
    model: RouterModel,
    state: dict[str, torch.Tensor],
    saved_cfg: ModelConfig,
    newer: str,
) -> None:
    """The tensors into the model; SVF offsets the checkpoint has none of start at zero."""
    try:
        missing, unexpected = model.load_state_dict(state, strict=False)
    except RuntimeError as error:
        raise CheckpointError(
            f"checkpoint {directory} does not fit this model: {error}{newer}"
        ) from error
    new_offsets = [name for name in missing if name.startswith("svf.")]
    if new_offsets and not saved_cfg.svf_targets:
        console.print(
            f"SVF: {directory} has no singular-value offsets; starting them at zero "
            f"(the checkpoint's model unchanged) for {', '.join(model.model_cfg.svf_targets)}",
            markup=False,
        )
        missing = [name for name in missing if name not in new_offsets]
    if missing or unexpected:
        held = [f"lacks the tensors {missing}"] if missing else []
        held += [f"holds tensors this router does not have, {unexpected}"] if unexpected else []
        fix = newer or (
            f": {META_FILE} and the tensors describe other routers (one of them was edited, "
            "or written by another tool). Restore the checkpoint folder (the files its "
            "training saved), or retrain it"
        )
        raise CheckpointError(f"checkpoint {directory}: its {HEAD_FILE} {' and '.join(held)}{fix}")


def metadata_contradictions(model: RouterModel, state: dict[str, torch.Tensor]) -> list[str]:
    """Where a checkpoint's tensors do not have the shapes its metadata (the router built from
    it) gives them: said as worker_ids or feature_dim when those are what differ (every other
    shape follows from them), else tensor by tensor."""
    expected = model.state_dict()
    output = next(
        name for name, value in model.named_parameters() if value is model.output_layer.weight
    )
    problems = []
    routes_to = _first_dimension(state.get(output), len(model.worker_ids))
    if routes_to != len(model.worker_ids):
        problems.append(
            f"its worker_ids names {len(model.worker_ids)} workers, but the tensors route to "
            f"{routes_to}"
        )
    takes = _first_dimension(state.get("feature_mean"), model.feature_dim)
    if takes != model.feature_dim:
        problems.append(
            f"its feature_dim is {model.feature_dim}, but the tensors take {takes} features"
        )
    if problems:
        return problems
    return [
        f"{name} is {tuple(tensor.shape)} in the tensors, {tuple(expected[name].shape)} by "
        "the metadata"
        for name, tensor in state.items()
        if name in expected and tensor.shape != expected[name].shape
    ]


def _first_dimension(tensor: torch.Tensor | None, default: int) -> int:
    """A tensor's first dimension; `default` for one that is absent, or 0-d (then its shape
    is said tensor by tensor: it had no first dimension to index)."""
    return default if tensor is None or tensor.dim() == 0 else tensor.shape[0]


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
