"""`train pipeline`: SFT -> RL chained into one output folder, keeping a finished stage of
the same config, records, code and backbone weights instead of training it again."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from . import __version__, code_digest
from .atomic_files import remove_files
from .backbone_identity import hub_id_and_pin
from .checkpoint import (
    BACKBONE_FINGERPRINT_KEY,
    CODE_DIGEST_KEY,
    FEATURE_VERSIONS_KEY,
    HEAD_FILE,
    META_FILE,
    CheckpointError,
    read_checkpoint_metadata,
    read_tensors,
)
from .checkpoint_backbone import backbone_weights_difference, locate_backbone
from .config import PipelineConfig
from .feature_cache import versions_moved
from .features import pooling_meant
from .io import read_json, write_json
from .schemas import RewardRecord
from .text import notes_console
from .train_rl import train_rl
from .train_sft import train_sft
from .training_common import STAGE_REPORT, remove_stage, stage_inputs

notes = notes_console()  # what training says on the way (as training_common.console)


@dataclass(frozen=True)
class PipelineStages:
    """Where the pipeline's stages go, and which finished ones an earlier run left to keep."""

    sft_dir: Path
    rl_dir: Path
    keep_sft: bool
    keep_rl: bool


def train_pipeline(records: list[RewardRecord], config: PipelineConfig, output_dir: Path) -> dict:
    """SFT into OUTPUT/sft, then RL from that checkpoint into OUTPUT/rl.

    A finished SFT of the same config and records (an earlier run that stopped in RL) is
    kept, not trained again, and so is a finished RL of the same config and records trained
    from that very SFT (the SHA-256 of its tensors). Any other RL is deleted before SFT may
    change, so a run stopped half-way never leaves an RL trained from another SFT."""
    output_dir = Path(output_dir)
    started = time.perf_counter()
    remove_files(output_dir, [STAGE_REPORT])
    stages = _stages_to_keep(records, config, output_dir)
    if not stages.keep_rl:
        remove_stage(stages.rl_dir)
    _sft_stage(records, config, stages)
    _rl_stage(records, config, stages)
    report = _pipeline_report(stages, time.perf_counter() - started)
    write_json(output_dir / STAGE_REPORT, report)
    return report


def _stages_to_keep(
    records: list[RewardRecord], config: PipelineConfig, output_dir: Path
) -> PipelineStages:
    """The RL is kept only with its SFT: its inputs name the SFT's tensors."""
    sft_dir, rl_dir = output_dir / "sft", output_dir / "rl"
    keep_sft = finished_stage(sft_dir, stage_inputs(config.sft_config(), records, None), "SFT")
    keep_rl = keep_sft and finished_stage(
        rl_dir, stage_inputs(config.rl_config(), records, str(sft_dir)), "RL"
    )
    return PipelineStages(sft_dir=sft_dir, rl_dir=rl_dir, keep_sft=keep_sft, keep_rl=keep_rl)


def _sft_stage(records: list[RewardRecord], config: PipelineConfig, stages: PipelineStages) -> None:
    if not stages.keep_sft:
        train_sft(records, config.sft_config(), stages.sft_dir)
        return
    notes.print(
        f"SFT: {stages.sft_dir} already holds the SFT of this config and these records; kept it "
        "(delete that folder to train it again)",
        markup=False,
    )


def _rl_stage(records: list[RewardRecord], config: PipelineConfig, stages: PipelineStages) -> None:
    if not stages.keep_rl:
        train_rl(records, config.rl_config(), stages.rl_dir, str(stages.sft_dir))
        return
    notes.print(
        f"RL: {stages.rl_dir} already holds the RL of this config and these records, trained "
        f"from {stages.sft_dir}; kept it (delete that folder to train it again)",
        markup=False,
    )


def _pipeline_report(stages: PipelineStages, seconds: float) -> dict:
    kept = (("sft", stages.keep_sft), ("rl", stages.keep_rl))
    return {
        "stage": "pipeline",
        "checkpoint": str(stages.rl_dir),
        "stages": {"sft": str(stages.sft_dir), "rl": str(stages.rl_dir)},
        "kept": [name for name, was_kept in kept if was_kept],
        "seconds": seconds,
    }


def finished_stage(folder: Path, inputs: dict, stage: str) -> bool:
    """Whether `folder` holds a complete checkpoint (and its report) that this code (version
    and sources, see code_digest) trained from exactly these inputs (see stage_inputs). A
    stage that only other code of this version trained is said to be trained again."""
    metadata = _complete_checkpoint_metadata(folder)
    if metadata is None:
        return False
    try:
        backbone = locate_backbone(metadata, folder)
    except CheckpointError:  # its backbone folder is nowhere: not the config's
        return False
    if not _trained_from(metadata, backbone, inputs):
        return False
    return _trained_by_this_code(metadata, folder, stage)


def _complete_checkpoint_metadata(folder: Path) -> dict | None:
    """The checkpoint's metadata when its tensors and report read too, else None."""
    try:
        metadata = read_checkpoint_metadata(folder)
        read_tensors(folder / HEAD_FILE, metadata, folder / META_FILE)
        read_json(folder / STAGE_REPORT)
    except (OSError, ValueError):  # no checkpoint, or a damaged one: train it again
        return None
    return metadata


def _trained_from(metadata: dict, backbone: str, inputs: dict) -> bool:
    """Whether this package version trained the checkpoint from these inputs, on the
    backbone's present weights."""
    saved = metadata.get("metadata")
    return (
        metadata.get("package_version") == __version__
        and isinstance(saved, dict)
        # a hub id located pinned (not cached here) is the config's unpinned one
        and comparable_inputs(with_backbone(saved.get("inputs"), hub_id_and_pin(backbone)[0]))
        == comparable_inputs(inputs)
        and _same_backbone_weights(metadata, backbone)
    )


def _trained_by_this_code(metadata: dict, folder: Path, stage: str) -> bool:
    """Whether these sources, under today's feature-computing package versions, trained the
    checkpoint of these inputs; if not, says it is trained again."""
    if metadata.get(CODE_DIGEST_KEY) != code_digest():
        notes.print(
            f"{stage}: {folder} holds the {stage} of this config and these records, but "
            f"fugu-lite {__version__} with other sources trained it (the code changed since, "
            "e.g. in a checkout or an editable install); training it again",
            markup=False,
        )
        return False
    moved = versions_moved(metadata.get(FEATURE_VERSIONS_KEY))
    if moved:
        notes.print(
            f"{stage}: {folder} holds the {stage} of this config and these records, but its "
            f"features were computed under other package versions ({moved}), which may compute "
            "other ones; training it again",
            markup=False,
        )
        return False
    return True


def _same_backbone_weights(metadata: dict, backbone: str) -> bool:
    """Whether the checkpoint's backbone (where it is now) still holds the weights it was
    trained on (a folder updated in place has the same name in the config, but other
    features)."""
    fingerprint = metadata.get(BACKBONE_FINGERPRINT_KEY)
    return not isinstance(fingerprint, dict) or (
        backbone_weights_difference(fingerprint, str(metadata["model"]["backbone"]), backbone)
        is None
    )


def with_backbone(inputs: object, backbone: str) -> object:
    """Saved stage inputs naming the backbone where the checkpoint's backbone is now (see
    locate_backbone): a local folder moved with the project, or spelt relative to another
    working directory, is compared as the folder it is."""
    if not isinstance(inputs, dict) or not isinstance(inputs.get("config"), dict):
        return inputs
    model = inputs["config"].get("model")
    if not isinstance(model, dict):
        return inputs
    return {**inputs, "config": {**inputs["config"], "model": {**model, "backbone": backbone}}}


def comparable_inputs(inputs: object) -> object:
    """Stage inputs with `model.pooling` as what it means on the backbone (see pooling_meant):
    `auto` and its meaning give the same features, hence the same stage; and the checkpoint
    continued from by the SHA-256 of its tensors only, not its path as `-o` spelt it
    (`runs/x`, `./runs/x` and `/abs/runs/x`, or the run folder moved, are one SFT)."""
    if not isinstance(inputs, dict):
        return inputs
    start = inputs.get("continued_from")
    if isinstance(start, dict):
        inputs = {**inputs, "continued_from": {"sha256": start.get("sha256")}}
    if not isinstance(inputs.get("config"), dict):
        return inputs
    model = inputs["config"].get("model")
    if not isinstance(model, dict):
        return inputs
    try:
        pooling = pooling_meant(model)
    except (KeyError, ValueError):  # not a model config this version reads: compared as it is
        return inputs
    return {**inputs, "config": {**inputs["config"], "model": {**model, "pooling": pooling}}}
