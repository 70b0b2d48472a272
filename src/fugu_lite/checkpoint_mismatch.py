"""What differs between a checkpoint and the config or workers it is loaded with, and what
to do about it."""

from __future__ import annotations

from collections.abc import Sequence

from .checkpoint import CheckpointError
from .config import ModelConfig
from .features import configured_pooling


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
    """' (auto = penultimate on this backbone)' where an `auto` was resolved, else ''; each
    names its own backbone when the two differ (' (auto = mean on minilm, auto = penultimate
    on tiny-random)')."""
    pairs = [(saved, saved_pooling), (given, given_pooling)]
    resolved = [(cfg, pooling) for cfg, pooling in pairs if cfg.pooling != pooling]
    if not resolved:
        return ""
    if saved.backbone == given.backbone:
        meanings = ", ".join(f"{cfg.pooling} = {pooling}" for cfg, pooling in resolved)
        return f" ({meanings} on this backbone)"
    each = ", ".join(f"{cfg.pooling} = {pooling} on {cfg.backbone}" for cfg, pooling in resolved)
    return f" ({each})"


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


class CheckpointMismatch(CheckpointError):
    """A checkpoint that does not match the model config or the records' workers; `problems`
    are checkpoint_mismatches', so a caller can say where its config came from."""

    def __init__(self, message: str, problems: Sequence[str]) -> None:
        super().__init__(message)
        self.problems = list(problems)


def model_differs(problems: Sequence[str]) -> bool:
    """Whether `checkpoint_mismatches` found a `model.` setting that differs."""
    return any(problem.startswith("model.") for problem in problems)


def mismatch_fix(problems: Sequence[str]) -> str:
    """What to do about `checkpoint_mismatches`: other workers need other records, another
    model config needs the checkpoint's own config (its router.json `model`)."""
    fixes = []
    if any(problem.startswith("workers:") for problem in problems):
        fixes.append(
            "Use records with the checkpoint's workers (the same ids in the same order), or "
            "train a new checkpoint on these records."
        )
    if model_differs(problems):
        fixes.append(
            "Use the model config the checkpoint was trained with (the `model` of its "
            "router.json), or train a new checkpoint."
        )
    return " ".join(fixes)
