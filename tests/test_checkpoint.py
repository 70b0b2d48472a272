"""Router checkpoints (checkpoint.py, model.load_router): round trips, refusals, checkpoints that
travel and the backbone weights a checkpoint was trained on."""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import save_tiny_backbone
from router_support import (
    PROMPTS,
    WORKERS_OF_TEST,
    embedded_tiny_package,
    fake_hub_snapshot,
    forbid_backbone_loading,
    prompts_of,
    router_on_folder,
    save_tiny_encoder,
    train_briefly,
)

from fugu_lite.checkpoint import HEAD_FILE, META_FILE, CheckpointError
from fugu_lite.checkpoint_backbone import locate_backbone
from fugu_lite.checkpoint_mismatch import (
    CheckpointMismatch,
    checkpoint_mismatches,
    mismatch_fix,
    model_differs,
    workers_mismatch,
)
from fugu_lite.config import ModelConfig
from fugu_lite.feature_cache import (
    FeatureCache,
    compute_features,
    feature_cache_key,
)
from fugu_lite.features import FeatureExtractor
from fugu_lite.model import RouterModel, load_router
from fugu_lite.schemas import RewardRecord

HUB_REPO = "fugu-test/tiny-model"


@pytest.mark.parametrize("head", ["linear", "mlp"])
def test_checkpoint_round_trip_gives_identical_logits(
    records: list[RewardRecord],
    tiny_model_cfg: ModelConfig,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    head: str,
) -> None:
    cfg = tiny_model_cfg.model_copy(update={"head": head, "head_hidden": 16})
    model = train_briefly(records, cfg)
    features, _ = compute_features(prompts_of(records), cfg)
    with torch.no_grad():
        before = model(features=features)
    assert before.abs().max() > 0.1  # trained, not the zero init
    directory = model.save_checkpoint(tmp_path / "ckpt", metadata={"stage": "test", "n": 3})
    assert {p.name for p in directory.iterdir()} == {HEAD_FILE, META_FILE}
    meta = json.loads((directory / META_FILE).read_text())
    assert meta["worker_ids"] == records[0].worker_ids
    assert meta["metadata"] == {"stage": "test", "n": 3}

    forbid_backbone_loading(monkeypatch)  # the cache dir travels with the checkpoint
    loaded = load_router(directory)
    loaded.eval()
    assert loaded.worker_ids == model.worker_ids
    assert loaded.model_cfg == model.model_cfg
    assert bool(loaded.normalizer_fitted)
    for name, tensor in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name
    with torch.no_grad():
        after = loaded(features=loaded.features_for(prompts_of(records)))
    assert torch.equal(before, after)


def test_checkpoint_and_cache_files_are_readable_by_other_users(
    tiny_model_cfg: ModelConfig, tmp_path: Path
) -> None:
    """safetensors creates 0o600 files: a checkpoint or cache shared with a service user (or
    a colleague) would be unreadable. They get the umask's mode, like every other file."""
    import os

    previous = os.umask(0o022)
    try:
        compute_features(PROMPTS, tiny_model_cfg)
        directory = RouterModel(tiny_model_cfg, ["a", "b"], 32).save_checkpoint(tmp_path / "c")
    finally:
        os.umask(previous)
    shards = list(FeatureCache(tiny_model_cfg).folder.glob("shard-*"))
    assert len(shards) == 2  # the features and their keys
    for path in [directory / HEAD_FILE, directory / META_FILE, *shards]:
        assert path.stat().st_mode & 0o777 == 0o644, path.name


def test_loading_with_the_training_config_and_workers_is_accepted(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig, tmp_path: Path
) -> None:
    model = train_briefly(records, tiny_model_cfg, epochs=1)
    model.save_checkpoint(tmp_path / "ckpt")
    # device, cache dir and feature batch size may differ: they do not change the router
    other_place = tiny_model_cfg.model_copy(
        update={"cache_dir": str(tmp_path / "other-cache"), "feature_batch_size": 3}
    )
    loaded = load_router(tmp_path / "ckpt", other_place, records[0].worker_ids)
    assert loaded.model_cfg.cache_dir == str(tmp_path / "other-cache")
    for name, tensor in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name


def test_loading_takes_the_runtime_settings_of_the_given_config(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig, tmp_path: Path
) -> None:
    trained_cfg = tiny_model_cfg.model_copy(update={"runtime": "auto", "feature_batch_size": 8})
    train_briefly(records, trained_cfg, epochs=1).save_checkpoint(tmp_path / "ckpt")
    wanted = tiny_model_cfg.model_copy(update={"runtime": "torch", "feature_batch_size": 3})
    loaded = load_router(tmp_path / "ckpt", wanted)
    assert loaded.model_cfg.runtime == "torch"
    assert loaded.model_cfg.feature_batch_size == 3


def test_loading_with_other_workers_names_both_lists(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig, tmp_path: Path
) -> None:
    train_briefly(records, tiny_model_cfg, epochs=1).save_checkpoint(tmp_path / "ckpt")
    other = ["cheap-small", "coder", "poet"]
    with pytest.raises(CheckpointError) as error:
        load_router(tmp_path / "ckpt", worker_ids=other)
    message = str(error.value)
    assert str(tmp_path / "ckpt") in message
    assert f"workers: checkpoint {records[0].worker_ids} vs records {other}" in message
    with pytest.raises(CheckpointError, match="workers"):
        load_router(tmp_path / "ckpt", worker_ids=records[0].worker_ids[::-1])


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"layer": 2}, "model.layer: checkpoint -1 vs config 2"),
        ({"pooling": "mean"}, "model.pooling: checkpoint 'auto' vs config 'mean'"),
        ({"max_tokens": 16}, "model.max_tokens: checkpoint 32 vs config 16"),
        ({"head": "mlp"}, "model.head: checkpoint 'linear' vs config 'mlp'"),
        ({"backbone": "minilm"}, "model.backbone: checkpoint 'tiny-random' vs config 'minilm'"),
        ({"normalize_features": False}, "normalize_features: checkpoint True vs config False"),
    ],
)
def test_loading_with_another_model_config_names_what_differs(
    records: list[RewardRecord],
    tiny_model_cfg: ModelConfig,
    tmp_path: Path,
    changes: dict,
    expected: str,
) -> None:
    train_briefly(records, tiny_model_cfg, epochs=1).save_checkpoint(tmp_path / "ckpt")
    with pytest.raises(CheckpointError) as error:
        load_router(tmp_path / "ckpt", tiny_model_cfg.model_copy(update=changes))
    assert expected in str(error.value)


def test_every_difference_is_listed(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig, tmp_path: Path
) -> None:
    train_briefly(records, tiny_model_cfg, epochs=1).save_checkpoint(tmp_path / "ckpt")
    with pytest.raises(CheckpointMismatch) as error:
        load_router(
            tmp_path / "ckpt", tiny_model_cfg.model_copy(update={"layer": 1}), ["x", "y", "z"]
        )
    message = str(error.value)
    assert "workers:" in message and "model.layer:" in message
    # what `train` reads to add that no -c was given (its problems were read by no test here)
    assert [problem.partition(":")[0] for problem in error.value.problems] == [
        "workers",
        "model.layer",
    ]


@pytest.mark.parametrize(
    ("backbone", "auto_means", "other"),
    [("minilm", "mean", "penultimate"), ("tiny-random", "penultimate", "mean")],
)
def test_pooling_auto_loads_with_the_pooling_it_means_and_no_other(
    tmp_path: Path, backbone: str, auto_means: str, other: str
) -> None:
    """A checkpoint trained without -c (pooling auto) was refused with -c
    configs/default.yaml (pooling mean), although auto is mean on MiniLM: the same features."""
    trained = ModelConfig(backbone=backbone, head="linear", cache_dir=str(tmp_path / "cache"))
    RouterModel(trained, ["a", "b"], 8, 0).save_checkpoint(tmp_path / "ckpt")
    for pooling in ("auto", auto_means):
        given = trained.model_copy(update={"pooling": pooling})
        assert load_router(tmp_path / "ckpt", given).model_cfg.pooling == "auto"
    with pytest.raises(CheckpointError) as error:
        load_router(tmp_path / "ckpt", trained.model_copy(update={"pooling": other}))
    expected = f"model.pooling: checkpoint 'auto' vs config '{other}' (auto = {auto_means} on"
    assert expected in str(error.value)

    # and the other way round: a checkpoint of the explicit pooling loads with auto
    explicit = trained.model_copy(update={"pooling": auto_means})
    RouterModel(explicit, ["a", "b"], 8, 0).save_checkpoint(tmp_path / "explicit")
    load_router(tmp_path / "explicit", trained)


def test_pooling_auto_and_what_it_means_share_the_feature_cache(
    tiny_model_cfg: ModelConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert tiny_model_cfg.pooling == "auto"
    first, _ = compute_features(PROMPTS, tiny_model_cfg)
    explicit = tiny_model_cfg.model_copy(update={"pooling": "penultimate"})
    assert feature_cache_key(explicit) == feature_cache_key(tiny_model_cfg)
    monkeypatch.setattr(FeatureExtractor, "encode", None)  # a cache hit never runs the backbone
    again, extractor = compute_features(PROMPTS, explicit)
    assert extractor is None and torch.equal(again, first)
    for other in ("mean", "last"):
        assert feature_cache_key(tiny_model_cfg.model_copy(update={"pooling": other})) != (
            feature_cache_key(tiny_model_cfg)
        )


def test_a_folder_without_checkpoint_files_is_refused(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig, tmp_path: Path
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    for folder in (empty, tmp_path / "absent"):
        with pytest.raises(CheckpointError) as error:
            load_router(folder)
        message = str(error.value)
        assert str(folder) in message
        assert HEAD_FILE in message and META_FILE in message
    half = train_briefly(records, tiny_model_cfg, epochs=1).save_checkpoint(tmp_path / "half")
    (half / HEAD_FILE).unlink()
    with pytest.raises(CheckpointError, match="not a fugu-lite router checkpoint"):
        load_router(half)


def test_tensors_that_do_not_fit_the_metadata_are_refused(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig, tmp_path: Path
) -> None:
    directory = train_briefly(records, tiny_model_cfg, epochs=1).save_checkpoint(tmp_path / "c")
    meta = json.loads((directory / META_FILE).read_text())
    meta["model"]["head"] = "mlp"
    (directory / META_FILE).write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match=f"its {HEAD_FILE} lacks the tensors"):
        load_router(directory)


@pytest.mark.parametrize(
    ("key", "value", "said"),
    [
        ("worker_ids", ["a", "b", "c"], r"worker_ids names 3 workers.*route to 2"),
        ("feature_dim", 64, r"feature_dim is 64.*take 32 features"),
    ],
)
def test_metadata_that_contradicts_its_tensors_is_refused_naming_the_key(
    tiny_model_cfg: ModelConfig, tmp_path: Path, key: str, value: object, said: str
) -> None:
    """A router.json edited by hand (a worker added to worker_ids) read only torch's 'size
    mismatch for head.weight' with no word of which file or key was wrong."""
    directory = RouterModel(tiny_model_cfg, ["a", "b"], 32).save_checkpoint(tmp_path / "c")
    meta = json.loads((directory / META_FILE).read_text())
    meta[key] = value
    (directory / META_FILE).write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match=said) as error:
        load_router(directory)
    assert f"{directory / META_FILE} contradicts {HEAD_FILE}" in str(error.value)
    assert "size mismatch" not in str(error.value)
    # the key is the one difference said: the tensor shapes that follow from it are not listed
    assert "in the tensors" not in str(error.value)


@pytest.mark.parametrize("name", ["head.weight", "feature_mean"])
def test_a_0_d_tensor_in_the_head_file_is_refused_as_a_contradiction(
    tiny_model_cfg: ModelConfig, tmp_path: Path, name: str
) -> None:
    """A tensor of no dimensions (another tool's file, or a hand edit) where the head's
    output layer or the feature mean belongs raised an IndexError ('tuple index out of
    range') from the shape checks."""
    from safetensors.torch import load_file, save_file

    directory = RouterModel(tiny_model_cfg, ["a", "b"], 32).save_checkpoint(tmp_path / "c")
    tensors = load_file(directory / HEAD_FILE)
    save_file({**tensors, name: torch.tensor(0.5)}, directory / HEAD_FILE)
    meta = json.loads((directory / META_FILE).read_text())
    del meta["tensor_file_sha256"]  # as an earlier version wrote it
    (directory / META_FILE).write_text(json.dumps(meta))
    with pytest.raises(CheckpointError) as error:
        load_router(directory)
    assert f"{directory / META_FILE} contradicts {HEAD_FILE}" in str(error.value)
    assert f"{name} is () in the tensors" in str(error.value)


def test_a_huge_feature_dim_in_the_metadata_is_refused_before_the_router_is_built(
    tiny_model_cfg: ModelConfig, tmp_path: Path
) -> None:
    """A router.json whose feature_dim was edited to 10**12 built the router first: a
    MemoryError (or minutes of allocating) before the contradiction with the tensors was
    found."""
    directory = RouterModel(tiny_model_cfg, ["a", "b"], 32).save_checkpoint(tmp_path / "c")
    meta = json.loads((directory / META_FILE).read_text())
    meta["feature_dim"] = 10**12
    (directory / META_FILE).write_text(json.dumps(meta))
    with pytest.raises(CheckpointError) as error:
        load_router(directory)
    assert f"its feature_dim is {10**12}, but the tensors take 32 features" in str(error.value)


SHA256SUM_LINE = "0" * 64 + "  router_head.safetensors"  # what sha256sum prints


@pytest.mark.parametrize(
    ("digest", "shown"),
    [(1234, "1234"), ("abc", '"abc"'), (SHA256SUM_LINE, '"' + SHA256SUM_LINE[:79])],
    ids=["number", "short text", "sha256sum's line"],
)
def test_a_tensor_digest_edited_to_no_sha256_is_said_to_be_damaged(
    tiny_model_cfg: ModelConfig, tmp_path: Path, digest: object, shown: str
) -> None:
    """A router.json whose tensor_file_sha256 was edited to a number was said to name
    another save's tensor file ("its files come from two different saves"); so was one
    holding a digest followed by more (sha256sum's whole line pasted) when only its start
    was checked."""
    directory = RouterModel(tiny_model_cfg, ["a", "b"], 32).save_checkpoint(tmp_path / "c")
    meta = json.loads((directory / META_FILE).read_text())
    meta["tensor_file_sha256"] = digest
    (directory / META_FILE).write_text(json.dumps(meta))
    with pytest.raises(CheckpointError) as error:
        load_router(directory)
    assert str(error.value) == (
        f"{directory / META_FILE} is damaged (its tensor_file_sha256 is {shown}, not a SHA-256 "
        "string of 64 hexadecimal digits); copy the checkpoint folder again, or retrain it"
    )


def test_a_tensor_digest_written_in_capitals_is_the_same_digest(
    tiny_model_cfg: ModelConfig, tmp_path: Path
) -> None:
    """A router.json whose tensor_file_sha256 was written in capitals (as PowerShell's
    Get-FileHash prints it, after another tool rewrote the tensors) passed the check that it
    is a SHA-256, then was refused as naming another save's tensor file ("its files come from
    two different saves"); it is the same digest, and loads."""
    from fugu_lite.checkpoint import tensor_digest

    directory = RouterModel(tiny_model_cfg, ["a", "b"], 32).save_checkpoint(tmp_path / "c")
    meta = json.loads((directory / META_FILE).read_text())
    digest = meta["tensor_file_sha256"]
    meta["tensor_file_sha256"] = digest.upper()
    (directory / META_FILE).write_text(json.dumps(meta))
    assert load_router(directory).worker_ids == ["a", "b"]
    assert tensor_digest(directory) == digest  # what a stage records it started from


def test_a_checkpoint_of_a_newer_version_that_does_not_load_names_that_version(
    tiny_model_cfg: ModelConfig, tmp_path: Path
) -> None:
    """A newer fugu-lite's extra tensor read 'unexpected tensors [...]' and nothing else."""
    from safetensors.torch import load_file, save_file

    directory = RouterModel(tiny_model_cfg, ["a", "b"], 32).save_checkpoint(tmp_path / "c")
    tensors = load_file(directory / HEAD_FILE)
    tensors["head_temperature"] = torch.ones(1)
    save_file(tensors, directory / HEAD_FILE)
    meta = json.loads((directory / META_FILE).read_text())
    meta["package_version"] = "9.0.0"
    meta["tensor_file_sha256"] = hashlib.sha256((directory / HEAD_FILE).read_bytes()).hexdigest()
    (directory / META_FILE).write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match=r"head_temperature") as error:
        load_router(directory)
    assert "written by fugu-lite 9.0.0, newer than this fugu-lite" in str(error.value)
    # the same checkpoint written by this version says nothing of versions
    meta["package_version"] = "0.0.1"
    (directory / META_FILE).write_text(json.dumps(meta))
    with pytest.raises(CheckpointError) as error:
        load_router(directory)
    assert "written by fugu-lite" not in str(error.value)


def test_a_tensor_file_of_other_tensors_says_what_it_holds_and_what_to_do(
    tiny_model_cfg: ModelConfig, tmp_path: Path
) -> None:
    """Tensors renamed, or an extra one from another tool, read 'missing tensors [],
    unexpected tensors [...]' and no fix."""
    from safetensors.torch import load_file, save_file

    directory = RouterModel(tiny_model_cfg, ["a", "b"], 32).save_checkpoint(tmp_path / "c")
    tensors = load_file(directory / HEAD_FILE)
    save_file({**tensors, "head.bias": torch.zeros(2)}, directory / HEAD_FILE)
    meta = json.loads((directory / META_FILE).read_text())
    del meta["tensor_file_sha256"]  # as an earlier version wrote it
    (directory / META_FILE).write_text(json.dumps(meta))
    with pytest.raises(CheckpointError) as error:
        load_router(directory)
    said = str(error.value)
    assert f"its {HEAD_FILE} holds tensors this router does not have, ['head.bias']" in said
    assert "Restore the checkpoint folder" in said and "or retrain it" in said
    assert "missing tensors []" not in said and "lacks" not in said


def test_tensors_another_tool_stored_in_float8_load_and_their_nan_is_refused(
    tiny_model_cfg: ModelConfig, tmp_path: Path
) -> None:
    """The NaN check ran torch.isfinite on each tensor as stored, which float8 lacks: a head
    a quantizing tool wrote in float8 ended load_router in a NotImplementedError."""
    from safetensors.torch import load_file, save_file

    model = RouterModel(tiny_model_cfg, ["a", "b"], 4)
    with torch.no_grad():
        model.output_layer.weight.copy_(torch.tensor([[0.5, -1.0, 2.0, 0.25]] * 2))
    directory = model.save_checkpoint(tmp_path / "c")
    meta = json.loads((directory / META_FILE).read_text())
    del meta["tensor_file_sha256"]  # rewritten by the other tool
    (directory / META_FILE).write_text(json.dumps(meta))
    tensors = load_file(directory / HEAD_FILE)
    stored = {name: tensor.to(torch.float8_e4m3fn) for name, tensor in tensors.items()}
    stored["normalizer_fitted"] = tensors["normalizer_fitted"]
    save_file(stored, directory / HEAD_FILE)
    assert torch.equal(load_router(directory).output_layer.weight, model.output_layer.weight)
    stored["head.weight"][0, 0] = float("nan")
    save_file(stored, directory / HEAD_FILE)
    with pytest.raises(CheckpointError, match=r"holds NaN or infinite weights \(head\.weight\)"):
        load_router(directory)


def test_a_checkpoint_copied_without_its_tensor_file_says_which_file_is_missing(
    tiny_model_cfg: ModelConfig, tmp_path: Path
) -> None:
    """router.json kept and router_head.safetensors left behind (a .gitignore of
    *.safetensors, a copy of the small files only) read only that the folder is not a
    checkpoint and needs both files."""
    directory = RouterModel(tiny_model_cfg, ["a", "b"], 32).save_checkpoint(tmp_path / "c")
    (directory / HEAD_FILE).unlink()
    with pytest.raises(CheckpointError) as error:
        load_router(directory)
    assert f"it holds {META_FILE} without {HEAD_FILE}" in str(error.value)
    assert "copy it from where the checkpoint was trained" in str(error.value)


def test_a_checkpoint_cloned_without_git_lfs_says_to_pull_its_tensors(
    tiny_model_cfg: ModelConfig, tmp_path: Path
) -> None:
    """A checkpoint kept in a repository with Git LFS and cloned without it read 'damaged or
    incomplete (Error while deserializing header: header too large); copy the checkpoint
    folder again', which a fresh clone does not fix."""
    directory = RouterModel(tiny_model_cfg, ["a", "b"], 32).save_checkpoint(tmp_path / "c")
    (directory / HEAD_FILE).write_text(
        "version https://git-lfs.github.com/spec/v1\noid sha256:" + "0" * 64 + "\nsize 900\n"
    )
    with pytest.raises(CheckpointError) as error:
        load_router(directory)
    message = str(error.value)
    assert f"{directory / HEAD_FILE} is a Git LFS pointer" in message
    assert "`git lfs pull`" in message and "damaged" not in message


def test_a_damaged_tensor_file_is_a_checkpoint_error(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig, tmp_path: Path
) -> None:
    directory = train_briefly(records, tiny_model_cfg, epochs=1).save_checkpoint(tmp_path / "c")
    whole = (directory / HEAD_FILE).read_bytes()
    (directory / HEAD_FILE).write_bytes(whole[: len(whole) // 2])  # a copy cut short
    with pytest.raises(CheckpointError, match=f"{HEAD_FILE} is damaged or incomplete"):
        load_router(directory)


def test_a_checkpoint_with_nan_weights_is_refused_naming_them(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig, tmp_path: Path
) -> None:
    """Earlier versions saved a run whose weights blew up: it routed every prompt to the first
    worker, with NaN probabilities."""
    model = train_briefly(records, tiny_model_cfg, epochs=1)
    with torch.no_grad():
        model.output_layer.weight[1, 2] = math.nan
    directory = model.save_checkpoint(tmp_path / "c")
    with pytest.raises(CheckpointError, match=r"holds NaN or infinite weights \(head\.weight\)"):
        load_router(directory)
    with torch.no_grad():
        model.output_layer.weight[1, 2] = -math.inf
    directory = model.save_checkpoint(tmp_path / "c")
    with pytest.raises(CheckpointError, match=r"holds NaN or infinite weights \(head\.weight\)"):
        load_router(directory)


def test_a_save_stopped_between_its_two_files_never_loads_silently(
    records: list[RewardRecord],
    tiny_model_cfg: ModelConfig,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A kill after the new tensors were written but before the new metadata: the old
    metadata (its history, stage, cost weighting) must not load the new tensors."""
    import fugu_lite.model as model_module

    directory = RouterModel(tiny_model_cfg, WORKERS_OF_TEST, 32).save_checkpoint(tmp_path / "c")
    trained = train_briefly(records, tiny_model_cfg, epochs=1)

    def killed(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(model_module, "write_json", killed)
    with pytest.raises(KeyboardInterrupt):
        trained.save_checkpoint(directory, metadata={"stage": "sft"})
    monkeypatch.undo()
    with pytest.raises(CheckpointError) as error:
        load_router(directory)
    assert "is not a fugu-lite router checkpoint" in str(error.value)
    assert "stopped while writing the checkpoint; run it again" in str(error.value)


@pytest.mark.parametrize(
    ("es_state", "command"),
    [(False, "`fugu-lite train sft`, `rl`, `es` or `pipeline`, whichever wrote it"),
     (True, "`fugu-lite train es`")],
)  # fmt: skip
def test_a_half_saved_router_names_the_training_to_run_again(
    tiny_model_cfg: ModelConfig, tmp_path: Path, es_state: bool, command: str
) -> None:
    """A router whose save stopped before router.json was told to 'run it again' without
    the command, where a half-saved reward head names `fugu-lite train reward-head`; an ES
    search's state beside the tensors says it was `train es`."""
    from fugu_lite.es_state import state_path

    directory = RouterModel(tiny_model_cfg, WORKERS_OF_TEST, 32).save_checkpoint(tmp_path / "c")
    (directory / META_FILE).unlink()
    if es_state:
        state_path(directory).parent.mkdir()
        state_path(directory).write_bytes(b"state")
    with pytest.raises(CheckpointError) as error:
        load_router(directory)
    assert str(error.value).endswith(
        f"; it holds {HEAD_FILE} without {META_FILE}: the training that saved it was stopped "
        f"while writing the checkpoint; run it again ({command})"
    )


def test_tensors_from_another_save_than_the_metadata_are_refused(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig, tmp_path: Path
) -> None:
    """Same shapes, other weights: a folder holding one save's metadata and another's tensors
    (a copy or a sync that stopped half-way) would route with the wrong head."""
    first = RouterModel(tiny_model_cfg, WORKERS_OF_TEST, 32).save_checkpoint(tmp_path / "a")
    second = train_briefly(records, tiny_model_cfg, epochs=1).save_checkpoint(tmp_path / "b")
    (first / HEAD_FILE).write_bytes((second / HEAD_FILE).read_bytes())
    with pytest.raises(CheckpointError) as error:
        load_router(first)
    assert f"{first / HEAD_FILE} is not the tensor file {META_FILE} was written with" in str(
        error.value
    )


def test_two_saves_of_one_folder_at_once_never_load_one_saves_metadata_with_the_others_tensors(
    tiny_model_cfg: ModelConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two runs saving to one folder: the first's metadata, written last, named the digest of
    the tensor file read back after the second had replaced it, so its workers (here the
    same two in the other order) loaded with the second's head and routed every prompt to
    the wrong worker."""
    import fugu_lite.model as model_module

    first = RouterModel(tiny_model_cfg, ["a", "b"], 8)
    second = RouterModel(tiny_model_cfg, ["b", "a"], 8)
    with torch.no_grad():  # each prefers worker a
        first.output_layer.weight[0].fill_(1.0)
        second.output_layer.weight[1].fill_(1.0)
    directory = tmp_path / "c"
    locate = model_module.portable_model_config

    def second_saves_meanwhile(*args: object) -> tuple[dict, dict]:
        monkeypatch.setattr(model_module, "portable_model_config", locate)
        second.save_checkpoint(directory)  # between the first's tensors and its metadata
        return locate(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(model_module, "portable_model_config", second_saves_meanwhile)
    first.save_checkpoint(directory)
    with pytest.raises(CheckpointError, match=f"is not the tensor file {META_FILE} was written"):
        load_router(directory)


def test_a_reward_head_with_another_saves_tensors_is_refused(
    tiny_model_cfg: ModelConfig, tmp_path: Path
) -> None:
    from fugu_lite.reward_head import HEAD_FILE as REWARD_HEAD_FILE
    from fugu_lite.reward_head import CostAwareRouter, load_reward_head

    heads = [CostAwareRouter(tiny_model_cfg, WORKERS_OF_TEST, 32, [2], 0.5, 0.05) for _ in "ab"]
    with torch.no_grad():
        heads[1].feature_mean.fill_(1.0)
    first = heads[0].save_checkpoint(tmp_path / "a")
    second = heads[1].save_checkpoint(tmp_path / "b")
    (first / REWARD_HEAD_FILE).write_bytes((second / REWARD_HEAD_FILE).read_bytes())
    with pytest.raises(CheckpointError, match=r"is not the tensor file reward_head\.json was"):
        load_reward_head(first)


def test_a_family_folder_given_as_a_checkpoint_says_what_it_is(tmp_path: Path) -> None:
    (tmp_path / "router_family.json").write_text("{}")
    with pytest.raises(CheckpointError, match="it is a router family: pass one member's folder"):
        load_router(tmp_path)


def test_a_family_folder_given_as_a_checkpoint_names_a_member_it_has(tmp_path: Path) -> None:
    """A family trained with --cost-weights 0.5,1 was told to pass FAMILY/lambda-0/rl, which
    it does not have: the hint names the member of its smallest cost weight."""
    from fugu_lite.router_family import FamilyManifest, FamilyMember, write_family_manifest

    members = [FamilyMember(cost_weight=w, checkpoint=f"lambda-{w:g}/rl") for w in (1.0, 0.5)]
    write_family_manifest(tmp_path, FamilyManifest(worker_ids=["a", "b"], members=members))
    with pytest.raises(CheckpointError) as error:
        load_router(tmp_path)
    assert f"pass one member's folder, e.g. {tmp_path / 'lambda-0.5' / 'rl'} (" in str(error.value)


def test_a_folder_of_family_members_without_a_manifest_says_the_family_run_was_interrupted(
    tmp_path: Path,
) -> None:
    """A family run stopped before router_family.json leaves OUTPUT/lambda-<w>/rl: given as a
    checkpoint, the folder says so. No test read that hint, so it could be given for any
    folder named lambda-... (a user's lambda-notes), or never, unseen."""
    interrupted, other = tmp_path / "family", tmp_path / "notes"
    (interrupted / "lambda-0" / "rl").mkdir(parents=True)
    (other / "lambda-notes").mkdir(parents=True)
    hint = "it holds router family members but no router_family.json"
    with pytest.raises(CheckpointError) as error:
        load_router(interrupted)
    assert hint in str(error.value)
    with pytest.raises(CheckpointError) as error:
        load_router(other)
    assert hint not in str(error.value)


def test_a_folder_beside_a_checkpoint_says_where_the_checkpoint_is(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig, tmp_path: Path
) -> None:
    pipeline = tmp_path / "router"
    for stage in ("sft", "rl"):
        train_briefly(records, tiny_model_cfg, epochs=1).save_checkpoint(pipeline / stage)
    (pipeline / "rl" / "es_state").mkdir()
    expected = {
        pipeline: f"pass {pipeline / 'rl'} (the final router) or {pipeline / 'sft'}",
        pipeline / "rl" / "es_state": f"the checkpoint is the folder holding it: {pipeline / 'rl'}",
        tmp_path / "absent": "that folder does not exist",
    }
    for folder, hint in expected.items():
        with pytest.raises(CheckpointError) as error:
            load_router(folder)
        assert hint in str(error.value)


def test_an_interrupted_es_search_given_as_a_checkpoint_says_to_continue_it(
    tmp_path: Path,
) -> None:
    """A `train es` stopped before its search finished leaves OUTPUT/es_state but no
    checkpoint yet; eval/route on OUTPUT only said it was not a checkpoint."""
    (tmp_path / "es" / "es_state").mkdir(parents=True)
    (tmp_path / "es" / "es_state" / "state.pkl").write_bytes(b"saved search")
    with pytest.raises(CheckpointError) as error:
        load_router(tmp_path / "es")
    said = str(error.value)
    assert "it holds an interrupted `train es` search (es_state) but no checkpoint yet" in said
    assert "run the same `train es` command again to continue it" in said


def test_continuing_from_a_checkpoint_takes_the_configs_head_dropout(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig, tmp_path: Path
) -> None:
    cfg = tiny_model_cfg.model_copy(update={"head": "mlp", "head_hidden": 8, "head_dropout": 0.3})
    train_briefly(records, cfg, epochs=1).save_checkpoint(tmp_path / "ckpt")
    more = load_router(tmp_path / "ckpt", cfg.model_copy(update={"head_dropout": 0.9}))
    assert more.model_cfg.head_dropout == 0.9
    dropouts = [m.p for m in more.modules() if isinstance(m, torch.nn.Dropout)]
    assert dropouts == [0.9]


def test_one_train_prompt_gives_a_finite_normaliser(tiny_model_cfg: ModelConfig) -> None:
    model = RouterModel(tiny_model_cfg, ["a", "b"], feature_dim=4)
    model.fit_normalizer(torch.tensor([[1.0, -2.0, 3.0, 0.5]]))
    assert torch.equal(model.feature_scale, torch.ones(4))
    logits = model(features=torch.tensor([[1.0, -2.0, 3.0, 0.5]]))
    assert torch.isfinite(logits).all()


def test_a_damaged_metadata_file_is_a_checkpoint_error(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig, tmp_path: Path
) -> None:
    directory = train_briefly(records, tiny_model_cfg, epochs=1).save_checkpoint(tmp_path / "c")
    (directory / META_FILE).write_text('{"format": "fugu-lite-router", "worker_')
    with pytest.raises(CheckpointError, match=META_FILE):
        load_router(directory)
    (directory / META_FILE).write_text('{"format": "fugu-lite-router\t"}')
    with pytest.raises(CheckpointError) as raised:
        load_router(directory)
    # json's reason "Invalid control character at" read "... at at line 1"
    assert "(not valid JSON: Invalid control character at line 1)" in str(raised.value)
    (directory / META_FILE).write_text('[{"format": "fugu-lite-router"}]')
    with pytest.raises(CheckpointError) as raised:
        load_router(directory)
    assert f"{directory / META_FILE} is damaged (a JSON list, not an object)" in str(raised.value)


@pytest.mark.parametrize("key", ["worker_ids", "feature_dim", "backbone_parameters", "model"])
def test_metadata_lacking_a_key_that_sizes_the_router_is_a_checkpoint_error(
    tiny_model_cfg: ModelConfig, tmp_path: Path, key: str
) -> None:
    directory = RouterModel(tiny_model_cfg, ["x", "y"], 32).save_checkpoint(tmp_path / "c")
    meta = json.loads((directory / META_FILE).read_text())
    del meta[key]
    (directory / META_FILE).write_text(json.dumps(meta))
    with pytest.raises(CheckpointError) as error:
        load_router(directory)
    assert str(error.value) == (
        f"{directory / META_FILE} lacks [{key!r}]; retrain or restore the checkpoint"
    )


def test_tensor_digest_is_the_tensor_files_sha256_named_or_not(
    tiny_model_cfg: ModelConfig, tmp_path: Path
) -> None:
    """What a training continued from a checkpoint records of it (training_common)."""
    from fugu_lite.checkpoint import TENSOR_DIGEST_KEY, tensor_digest

    directory = RouterModel(tiny_model_cfg, ["x", "y"], 32).save_checkpoint(tmp_path / "c")
    expected = hashlib.sha256((directory / HEAD_FILE).read_bytes()).hexdigest()
    assert tensor_digest(directory) == expected
    meta = json.loads((directory / META_FILE).read_text())
    del meta[TENSOR_DIGEST_KEY]  # written before the digest was recorded
    (directory / META_FILE).write_text(json.dumps(meta))
    assert tensor_digest(directory) == expected


def test_metadata_saved_by_an_editor_with_a_bom_loads_and_in_latin_1_names_its_line(
    tiny_model_cfg: ModelConfig, tmp_path: Path
) -> None:
    """router.json re-saved by an editor: its UTF-8 BOM was called damage ("retrain"), and a
    Latin-1 save a UnicodeDecodeError naming neither the file nor the line."""
    directory = RouterModel(tiny_model_cfg, ["a", "b"], 8).save_checkpoint(tmp_path / "c")
    meta_path = directory / META_FILE
    saved = meta_path.read_text(encoding="utf-8")
    meta_path.write_bytes(b"\xef\xbb\xbf" + saved.encode("utf-8"))
    assert load_router(directory).worker_ids == ["a", "b"]
    edited = saved.replace('"metadata": {}', '"metadata": {"note": "caf\\u00e9"}')
    meta_path.write_bytes(json.dumps(json.loads(edited), ensure_ascii=False).encode("latin-1"))
    with pytest.raises(CheckpointError) as raised:
        load_router(directory)
    assert f"{meta_path}, line 1: not UTF-8 text" in str(raised.value)
    assert "re-save the file as UTF-8" in str(raised.value)


@pytest.mark.parametrize("tag", ["fugu-lite-router-v2", None])
def test_a_router_tagged_as_another_format_is_refused_and_an_untagged_one_loads(
    tiny_model_cfg: ModelConfig, tmp_path: Path, tag: str | None
) -> None:
    """router.json's "format" tag was never read: metadata of another layout (a later
    version's, or another artefact's renamed) was loaded as this version's router."""
    directory = RouterModel(tiny_model_cfg, ["x", "y", "z"], 32).save_checkpoint(tmp_path / "c")
    meta = json.loads((directory / META_FILE).read_text())
    assert meta["format"] == "fugu-lite-router"
    if tag is None:  # the earliest routers wrote no tag: still loaded
        del meta["format"]
    else:
        meta["format"] = tag
    meta["package_version"] = "9.0.0"
    (directory / META_FILE).write_text(json.dumps(meta))
    if tag is None:
        assert load_router(directory).worker_ids == ["x", "y", "z"]
        return
    with pytest.raises(CheckpointError) as error:
        load_router(directory)
    message = " ".join(str(error.value).split())
    said = f"is tagged format '{tag}', not 'fugu-lite-router' (written by fugu-lite 9.0.0"
    assert said in message
    assert "load it with the fugu-lite version that wrote it, or retrain" in message


@pytest.mark.parametrize("renamed", ["router", "reward head"])
def test_a_checkpoints_files_renamed_as_the_other_kinds_say_what_they_are(
    tiny_model_cfg: ModelConfig, tmp_path: Path, renamed: str
) -> None:
    """A router's router.json and router_head.safetensors renamed to a reward head's names
    (or the reverse) were refused as 'tagged format 'fugu-lite-router', not
    'fugu-lite-reward-head' (written by fugu-lite 0.1.0; this is 0.1.0): load it with the
    fugu-lite version that wrote it', though this version wrote it: its files were renamed."""
    from fugu_lite import reward_head

    router = RouterModel(tiny_model_cfg, ["x", "y"], 32)
    head = reward_head.CostAwareRouter(tiny_model_cfg, ["x", "y"], 32, [1], 0.5, 0.05)
    kinds = {
        "router": (router, META_FILE, HEAD_FILE, load_router),
        "reward head": (
            head,
            reward_head.META_FILE,
            reward_head.HEAD_FILE,
            reward_head.load_reward_head,
        ),
    }
    model, meta_file, tensor_file, _ = kinds[renamed]
    as_kind = "reward head" if renamed == "router" else "router"
    _, other_meta, other_tensors, load = kinds[as_kind]
    saved = model.save_checkpoint(tmp_path / "saved")
    folder = tmp_path / "renamed"
    folder.mkdir()
    shutil.copy(saved / meta_file, folder / other_meta)
    shutil.copy(saved / tensor_file, folder / other_tensors)
    with pytest.raises(CheckpointError) as error:
        load(folder)
    message = " ".join(str(error.value).split())
    assert message == (
        f"{folder / other_meta} is a {renamed}'s {meta_file} renamed (its format is "
        f"{model.checkpoint_format!r}), not a {as_kind}'s: give the {renamed}'s files their "
        f"own names again, {meta_file} and {tensor_file}"
    )


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("9" * 5000, "an integer of more than 4300 digits"),
        ("[" * 100_000 + "]" * 100_000, "JSON nested too deeply to be read"),
    ],
)
def test_metadata_json_beyond_what_python_reads_is_a_checkpoint_error(
    tiny_model_cfg: ModelConfig, tmp_path: Path, value: str, said: str
) -> None:
    """A router.json holding valid JSON that Python cannot read (a 5000-digit number, lists
    nested 100000 deep: a damaged or hand-made file) ended load_router in a ValueError that
    said to call sys.set_int_max_str_digits, or a RecursionError, naming no file."""
    directory = RouterModel(tiny_model_cfg, ["a", "b"], 32).save_checkpoint(tmp_path / "c")
    text = (directory / META_FILE).read_text()
    (directory / META_FILE).write_text(text.rstrip().removesuffix("}") + f', "x": {value}}}')
    with pytest.raises(CheckpointError) as error:
        load_router(directory)
    assert str(error.value) == (
        f"{directory / META_FILE} is damaged ({said}); retrain or restore the checkpoint"
    )


@pytest.mark.parametrize(
    ("key", "value", "said"),
    [
        ("worker_ids", "abc", "worker_ids: Input should be a valid list"),
        ("worker_ids", [1, 2], "worker_ids.0: Input should be a valid string"),
        ("worker_ids", [], "worker_ids: List should have at least 1 item"),
        ("worker_ids", ["x", "y", "x"], "worker_ids: it names the worker 'x' more than once"),
        ("feature_dim", "32", "feature_dim: Input should be a valid integer"),
        ("backbone_parameters", None, "backbone_parameters: Input should be a valid integer"),
        ("backbone_parameters", -1, "backbone_parameters: Input should be greater than or equal"),
        (
            "backbone_fingerprint",
            {"weights_sha256": "0" * 64, "weight_files": [1]},
            "backbone_fingerprint.weight_files.0: Input should be a valid string",
        ),
        (
            "backbone_fingerprint",
            {"hub_commit": 5},
            "backbone_fingerprint.hub_commit: Input should be a valid string",
        ),
    ],
)
def test_a_metadata_key_of_the_wrong_type_is_a_checkpoint_error(
    tiny_model_cfg: ModelConfig, tmp_path: Path, key: str, value: object, said: str
) -> None:
    """router.json's worker_ids "abc" loaded a router of the workers a, b and c (routing
    silently to them), a feature_dim "32" stopped with torch's TypeError, worker ids that
    are numbers with pydantic's dump; a worker named twice loaded, and routing's
    probabilities kept one of its two."""
    directory = RouterModel(tiny_model_cfg, ["x", "y", "z"], 32).save_checkpoint(tmp_path / "c")
    meta = json.loads((directory / META_FILE).read_text())
    meta[key] = value
    (directory / META_FILE).write_text(json.dumps(meta))
    with pytest.raises(CheckpointError) as error:
        load_router(directory)
    assert str(error.value).startswith(f"{directory / META_FILE} is damaged ({said}")
    assert str(error.value).endswith("); retrain or restore the checkpoint")


def test_worker_ids_put_in_another_order_are_refused_and_renamed_ones_load(
    tiny_model_cfg: ModelConfig, tmp_path: Path
) -> None:
    """router.json's worker_ids sorted by hand loaded silently: the head's first output, trained
    for worker c, went to worker a, and each prompt was routed by another worker's scores."""
    directory = RouterModel(tiny_model_cfg, ["c", "b", "a"], 32).save_checkpoint(tmp_path / "c")
    meta_path = directory / META_FILE
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps({**meta, "worker_ids": ["a", "b", "c"]}))
    with pytest.raises(CheckpointError) as error:
        load_router(directory)
    assert str(error.value) == (
        f"{meta_path} names the workers in the order ['a', 'b', 'c'], but {HEAD_FILE} was "
        "trained with them in the order ['c', 'b', 'a']: each would get another worker's "
        f'scores. Put worker_ids back in {META_FILE} as ["c", "b", "a"], or restore the '
        "checkpoint folder"
    )
    meta_path.write_text(json.dumps({**meta, "worker_ids": ["z", "b", "a"]}))  # c renamed
    assert load_router(directory).worker_ids == ["z", "b", "a"]


def test_a_newer_versions_model_setting_is_a_checkpoint_error_naming_it(
    tiny_model_cfg: ModelConfig, tmp_path: Path
) -> None:
    directory = RouterModel(tiny_model_cfg, ["a", "b"], 32).save_checkpoint(tmp_path / "c")
    meta = json.loads((directory / META_FILE).read_text())
    meta["package_version"] = "9.0.0"
    meta["model"]["speculative_layers"] = 2
    (directory / META_FILE).write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match=r"(?s)fugu-lite 9\.0\.0.*'speculative_layers'"):
        load_router(directory)


def test_a_loaded_router_is_deterministic_with_head_dropout(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig, tmp_path: Path
) -> None:
    cfg = tiny_model_cfg.model_copy(update={"head": "mlp", "head_hidden": 64, "head_dropout": 0.5})
    train_briefly(records, cfg, epochs=3).save_checkpoint(tmp_path / "ckpt")
    loaded = load_router(tmp_path / "ckpt")
    features = loaded.features_for(prompts_of(records))
    assert torch.equal(loaded.probabilities(features), loaded.probabilities(features))
    assert not loaded.training


def project_with_checkpoint(
    tiny_backbone, records: list[RewardRecord], root: Path, backbone: str
) -> tuple[Path, torch.Tensor]:
    """A project folder holding a local backbone `bb` and a router trained with `backbone`
    (a spelling of bb relative to the project) and a relative cache_dir, run from inside it;
    returns the checkpoint and its logits on PROMPTS."""
    root.mkdir()
    tiny_backbone.model.save_pretrained(root / "bb")
    tiny_backbone.tokenizer.save_pretrained(root / "bb")
    previous = Path.cwd()
    os.chdir(root)
    try:
        cfg = ModelConfig(
            backbone=backbone, layer=-1, head="linear", max_tokens=32, runtime="torch",
            cache_dir="cache",
        )  # fmt: skip
        model = train_briefly(records, cfg, epochs=2)
        with torch.no_grad():
            logits = model(features=model.features_for(PROMPTS))
        directory = model.save_checkpoint(Path("runs") / "rl")
    finally:
        os.chdir(previous)
    return root / directory, logits


@pytest.mark.parametrize("spelling", ["bb", "./bb"])
def test_a_checkpoint_with_relative_paths_loads_from_another_working_directory(
    tiny_backbone,
    records: list[RewardRecord],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    spelling: str,
) -> None:
    checkpoint, logits = project_with_checkpoint(
        tiny_backbone, records, tmp_path / "project", spelling
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    forbid_backbone_loading(monkeypatch)  # the project's feature cache answers
    loaded = load_router(checkpoint)
    assert loaded.model_cfg.backbone == str(tmp_path / "project" / "bb")
    with torch.no_grad():
        assert torch.equal(loaded(features=loaded.features_for(PROMPTS)), logits)
    assert not (elsewhere / "cache").exists()


def test_a_checkpoint_trained_on_a_device_this_machine_lacks_runs_on_the_cpu(
    tiny_model_cfg: ModelConfig,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Trained with model.device cuda, then routed on a laptop: route, eval and serve (which
    take no config) ended in torch's 'AssertionError: Torch not compiled with CUDA enabled'
    traceback. The device, like the cache folder, is the training machine's; the note that
    says so is said once a process, not at each load of the checkpoint."""
    import fugu_lite.checkpoint_backbone

    monkeypatch.setattr(fugu_lite.checkpoint_backbone, "_NOTED_DEVICES", set())  # none said yet
    directory = RouterModel(tiny_model_cfg, ["a", "b"], 8).save_checkpoint(tmp_path / "c")
    metadata = json.loads((directory / META_FILE).read_text())
    metadata["model"]["device"] = "cuda:63"  # no machine here has 64 GPUs
    metadata["model"]["cache_dir"] = "/home/trainer/.cache/fugu-lite"  # nor that user's home
    (directory / META_FILE).write_text(json.dumps(metadata))
    capsys.readouterr()
    loaded = load_router(directory)
    assert (loaded.model_cfg.device, loaded.device_ref.type) == ("cpu", "cpu")
    assert loaded.model_cfg.cache_dir is None  # the default cache
    said = " ".join(capsys.readouterr().err.split())
    assert f"note: {directory} was trained on device 'cuda:63'" in said
    assert "runs on the cpu" in said
    probabilities = loaded.probabilities(torch.zeros(1, 8))
    assert probabilities.tolist() == [[0.5, 0.5]]
    assert load_router(directory).model_cfg.device == "cpu"
    assert "trained on device" not in capsys.readouterr().err


def test_a_moved_project_finds_its_backbone_beside_the_checkpoint(
    tiny_backbone, records: list[RewardRecord], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FUGU_LITE_CACHE_DIR", str(tmp_path / "default-cache"))
    checkpoint, logits = project_with_checkpoint(tiny_backbone, records, tmp_path / "old", "bb")
    (tmp_path / "old").rename(tmp_path / "new")
    moved = tmp_path / "new" / checkpoint.relative_to(tmp_path / "old")
    loaded = load_router(moved)
    assert loaded.model_cfg.backbone == str(tmp_path / "new" / "bb")
    with torch.no_grad():
        torch.testing.assert_close(loaded(features=loaded.features_for(PROMPTS)), logits)


def test_a_backbone_found_nowhere_is_named_and_backbone_points_at_it(
    tiny_backbone, records: list[RewardRecord], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another machine: the checkpoint arrives alone, the backbone lives at another path."""
    monkeypatch.setenv("FUGU_LITE_CACHE_DIR", str(tmp_path / "default-cache"))
    checkpoint, logits = project_with_checkpoint(tiny_backbone, records, tmp_path / "a", "bb")
    copied = tmp_path / "machine-b" / "router"
    shutil.copytree(checkpoint, copied)
    (tmp_path / "a" / "bb").rename(tmp_path / "machine-b-models")
    shutil.rmtree(tmp_path / "a")
    with pytest.raises(CheckpointError) as error:
        load_router(copied)
    message = str(error.value)
    assert f"backbone folder {tmp_path / 'a' / 'bb'}, which is not there" in message
    assert "--backbone PATH" in message
    loaded = load_router(copied, backbone=str(tmp_path / "machine-b-models"))
    with torch.no_grad():
        torch.testing.assert_close(loaded(features=loaded.features_for(PROMPTS)), logits)
    # continuing training: the config says where the backbone is now
    cfg = loaded.model_cfg.model_copy(update={"backbone": str(tmp_path / "machine-b-models")})
    assert load_router(copied, cfg).model_cfg.backbone == str(tmp_path / "machine-b-models")
    with pytest.raises(CheckpointError) as error:
        load_router(copied, backbone="/nowhere/bb")
    assert str(error.value) == (
        "--backbone /nowhere/bb: no such file or folder; give where the backbone the checkpoint "
        f"was trained on ({tmp_path / 'a' / 'bb'}) is now"
    )
    (tmp_path / "loop").symlink_to(tmp_path / "loop")  # `ln -s loop loop`: said to be a link
    with pytest.raises(CheckpointError, match=f"--backbone {tmp_path / 'loop'} is a link that"):
        load_router(copied, backbone=str(tmp_path / "loop"))
    # the checkpoint given as its own backbone: its head was compared as the backbone's weights
    with pytest.raises(CheckpointError) as error:
        load_router(copied, backbone=str(copied))
    assert str(error.value) == (
        f"--backbone {copied} is a fugu-lite checkpoint (router.json), not a backbone: give the "
        "checkpoint with --checkpoint and, with --backbone, where the backbone it was trained "
        f"on ({tmp_path / 'a' / 'bb'}) is now"
    )


def test_a_checkpoint_records_its_backbone_weights_and_loads_on_the_same_ones(
    records: list[RewardRecord], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import hashlib

    monkeypatch.setenv("FUGU_LITE_CACHE_DIR", str(tmp_path / "fugu-cache"))
    save_tiny_backbone(tmp_path / "bb", seed=0)
    checkpoint, logits = router_on_folder(records, str(tmp_path / "bb"), tmp_path)
    fingerprint = json.loads((checkpoint / META_FILE).read_text())["backbone_fingerprint"]
    weights = (tmp_path / "bb" / "model.safetensors").read_bytes()
    assert fingerprint == {
        "weights_sha256": hashlib.sha256(weights).hexdigest(),  # what sha256sum prints
        "weight_files": ["model.safetensors"],
    }
    shutil.copytree(tmp_path / "bb", tmp_path / "copy")  # the same weights elsewhere
    for backbone in (None, str(tmp_path / "copy")):
        loaded = load_router(checkpoint, backbone=backbone)
        with torch.no_grad():
            torch.testing.assert_close(loaded(features=loaded.features_for(PROMPTS)), logits)


def test_a_weights_digest_written_in_capitals_is_the_same_digest(
    records: list[RewardRecord], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A weights_sha256 hand-edited in capitals (as PowerShell's Get-FileHash prints it) was
    compared as is, and the same weights were refused as other ones."""
    monkeypatch.setenv("FUGU_LITE_CACHE_DIR", str(tmp_path / "fugu-cache"))
    save_tiny_backbone(tmp_path / "bb", seed=0)
    checkpoint, logits = router_on_folder(records, str(tmp_path / "bb"), tmp_path)
    metadata = json.loads((checkpoint / META_FILE).read_text())
    fingerprint = metadata["backbone_fingerprint"]
    fingerprint["weights_sha256"] = fingerprint["weights_sha256"].upper()
    (checkpoint / META_FILE).write_text(json.dumps(metadata))
    loaded = load_router(checkpoint)
    with torch.no_grad():
        torch.testing.assert_close(loaded(features=loaded.features_for(PROMPTS)), logits)
    save_tiny_backbone(tmp_path / "bb", seed=1)  # other weights are still refused
    with pytest.raises(CheckpointError, match="trained on the backbone"):
        load_router(checkpoint)


def test_a_backbone_folder_with_other_weights_of_the_same_shape_is_refused(
    records: list[RewardRecord], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FUGU_LITE_CACHE_DIR", str(tmp_path / "fugu-cache"))
    save_tiny_backbone(tmp_path / "bb", seed=0)
    checkpoint, _ = router_on_folder(records, str(tmp_path / "bb"), tmp_path)
    stored = json.loads((checkpoint / META_FILE).read_text())["backbone_fingerprint"]
    save_tiny_backbone(tmp_path / "other", seed=1)  # another fine-tune, same architecture
    with pytest.raises(CheckpointError) as elsewhere:
        load_router(checkpoint, backbone=str(tmp_path / "other"))
    save_tiny_backbone(tmp_path / "bb", seed=1)  # the folder updated in place
    with pytest.raises(CheckpointError) as in_place:
        load_router(checkpoint)
    found = json.loads((checkpoint / META_FILE).read_text())["backbone_fingerprint"]
    assert found == stored  # loading wrote nothing
    for error, folder in ((elsewhere, tmp_path / "other"), (in_place, tmp_path / "bb")):
        message = str(error.value)
        assert f"trained on the backbone {tmp_path / 'bb'} with weights of SHA-256 " in message
        assert f"{stored['weights_sha256']} (model.safetensors), but {folder} now has" in message
        assert "--backbone PATH" in message and "retrain" in message


def test_a_checkpoint_without_a_backbone_fingerprint_loads_with_a_note(
    records: list[RewardRecord],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Written before fingerprints were recorded: loads, says once that it is unchecked."""
    monkeypatch.setenv("FUGU_LITE_CACHE_DIR", str(tmp_path / "fugu-cache"))
    save_tiny_backbone(tmp_path / "bb", seed=0)
    checkpoint, logits = router_on_folder(records, str(tmp_path / "bb"), tmp_path)
    metadata = json.loads((checkpoint / META_FILE).read_text())
    del metadata["backbone_fingerprint"]
    (checkpoint / META_FILE).write_text(json.dumps(metadata))
    capsys.readouterr()
    for _ in range(2):
        loaded = load_router(checkpoint)
    with torch.no_grad():
        torch.testing.assert_close(loaded(features=loaded.features_for(PROMPTS)), logits)
    notes = capsys.readouterr().err
    assert notes.count("did not record its backbone's weights") == 1, notes


@pytest.mark.parametrize("fingerprint", [["sha"], "sha", 1])
def test_a_backbone_fingerprint_that_is_no_object_is_a_damaged_checkpoint(
    tmp_path: Path, fingerprint: object
) -> None:
    """A backbone_fingerprint edited into a list or a text ended the weights' check in a bare
    AttributeError ('list' object has no attribute 'get'); it is refused as damaged."""
    from fugu_lite.checkpoint_backbone import check_backbone_weights

    metadata = {"model": {"backbone": "tiny-random"}, "backbone_fingerprint": fingerprint}
    with pytest.raises(CheckpointError) as error:
        check_backbone_weights(metadata, tmp_path / META_FILE, "tiny-random")
    assert str(error.value) == (
        f"{tmp_path / META_FILE} is damaged (backbone_fingerprint is not an object); retrain or "
        "restore the checkpoint"
    )


def use_hub_cache(monkeypatch: pytest.MonkeyPatch, hub_cache: Path) -> None:
    """The local Hugging Face cache at `hub_cache` (huggingface_hub reads it at import)."""
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HUB_CACHE", str(hub_cache))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub_cache))


def trained_on_a_cached_hub_model(
    records: list[RewardRecord], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[Path, Path, torch.Tensor]:
    """A router trained offline on the fake hub model REPO at commit a (seed 0), cached in
    tmp_path/hf-hub: that cache, the checkpoint and its logits on PROMPTS."""
    hub_cache = tmp_path / "hf-hub"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    use_hub_cache(monkeypatch, hub_cache)
    monkeypatch.setenv("FUGU_LITE_CACHE_DIR", str(tmp_path / "fugu-cache"))
    fake_hub_snapshot(hub_cache, HUB_REPO, "a" * 40, seed=0)
    checkpoint, logits = router_on_folder(records, HUB_REPO, tmp_path)
    return hub_cache, checkpoint, logits


def test_a_checkpoint_on_a_hub_model_updated_since_is_refused_and_the_old_snapshot_loads(
    records: list[RewardRecord], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = HUB_REPO
    hub_cache, checkpoint, logits = trained_on_a_cached_hub_model(records, tmp_path, monkeypatch)
    stored = json.loads((checkpoint / META_FILE).read_text())["backbone_fingerprint"]
    assert stored["hub_commit"] == "a" * 40
    assert load_router(checkpoint).model_cfg.backbone == repo

    fake_hub_snapshot(hub_cache, repo, "b" * 40, seed=1)  # a newer revision downloaded
    with pytest.raises(CheckpointError) as error:
        load_router(checkpoint)
    message = str(error.value)
    old_snapshot = hub_cache / f"models--{repo.replace('/', '--')}" / "snapshots" / ("a" * 40)
    assert f"with snapshot commit {'a' * 40}, but {repo} now has snapshot commit" in message
    assert f"commit {'b' * 40} in the local Hugging Face cache" in message
    assert f"--backbone {old_snapshot}" in message
    loaded = load_router(checkpoint, backbone=str(old_snapshot))
    with torch.no_grad():
        torch.testing.assert_close(loaded(features=loaded.features_for(PROMPTS)), logits)
    # the old snapshot gone from the cache: how to download it again
    shutil.rmtree(old_snapshot)
    with pytest.raises(CheckpointError) as error:
        load_router(checkpoint)
    assert f"`hf download {repo} --revision {'a' * 40}` downloads the trained snapshot" in str(
        error.value
    )


@pytest.mark.parametrize("seed", [0, 1])
def test_a_checkpoint_on_a_hub_model_loaded_with_another_hub_model_compares_their_weights(
    records: list[RewardRecord], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """A hub backbone is compared by its snapshot commit, but that commit is its own repo's:
    another hub id given with --backbone (a copy of the model under another name, or another
    model) was refused by its commit whatever its weights, and told to `hf download` the
    other repo at the trained repo's commit. It is compared by its weights now."""
    hub_cache, checkpoint, logits = trained_on_a_cached_hub_model(records, tmp_path, monkeypatch)
    other = "fugu-test/other-model"
    fake_hub_snapshot(hub_cache, other, "c" * 40, seed=seed)  # seed 0: the trained weights
    if seed == 0:
        loaded = load_router(checkpoint, backbone=other)
        with torch.no_grad():
            torch.testing.assert_close(loaded(features=loaded.features_for(PROMPTS)), logits)
        return
    with pytest.raises(CheckpointError) as error:
        load_router(checkpoint, backbone=other)
    message = str(error.value)
    assert f"trained on the backbone {HUB_REPO} with weights of SHA-256" in message
    assert f"but {other} now has weights of SHA-256" in message
    assert "hf download" not in message and "c" * 40 not in message


def on_a_machine_without_the_hub_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, repo: str, serves: str | None
) -> list[str | None]:
    """Another machine: an empty Hugging Face cache and feature cache, and a fake hub whose
    `main` is commit b (other weights, seed 1) and which serves commit a (seed 0) when asked
    for it (or `serves` whatever is asked). Each download goes through transformers' real
    from_pretrained, offline, from the cache layout a download leaves; the revisions asked for
    are returned (filled as loads happen)."""
    from transformers import AutoModel, AutoTokenizer

    hub_cache = tmp_path / "other-hf-hub"
    use_hub_cache(monkeypatch, hub_cache)
    shutil.rmtree(tmp_path / "cache")  # the checkpoint's feature cache stayed behind
    asked: list[str | None] = []

    def downloading(original: Any) -> Any:
        def from_pretrained(source: str, *args: Any, revision: str | None = None, **kwargs: Any):
            asked.append(revision)
            commit = serves or revision or "b" * 40
            folder = hub_cache / f"models--{repo.replace('/', '--')}"
            if not (folder / "snapshots" / commit).is_dir():
                fake_hub_snapshot(hub_cache, repo, commit, seed=0 if commit == "a" * 40 else 1)
                if revision is not None:  # a download of a commit names no branch
                    (folder / "refs" / "main").unlink()
            return original(source, *args, revision=commit if revision else None, **kwargs)

        return from_pretrained

    monkeypatch.setattr(AutoModel, "from_pretrained", downloading(AutoModel.from_pretrained))
    monkeypatch.setattr(
        AutoTokenizer, "from_pretrained", downloading(AutoTokenizer.from_pretrained)
    )
    return asked


def test_a_checkpoint_on_a_hub_model_not_cached_here_loads_its_trained_snapshot(
    records: list[RewardRecord], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Loaded where the hub model is not in the local Hugging Face cache, a checkpoint's
    backbone was downloaded at the newest `main`, another commit than it was trained on, and
    routed on that one's features without a word."""
    repo = HUB_REPO
    _, checkpoint, logits = trained_on_a_cached_hub_model(records, tmp_path, monkeypatch)
    asked = on_a_machine_without_the_hub_model(tmp_path, monkeypatch, repo, serves=None)
    metadata = json.loads((checkpoint / META_FILE).read_text())
    # the same hub id given as where the backbone is now (--backbone) is pinned as well
    assert locate_backbone(metadata, checkpoint, repo) == f"{repo}@{'a' * 40}"
    for _ in range(2):  # downloaded, then loaded from the local cache
        loaded = load_router(checkpoint)
        with torch.no_grad():
            torch.testing.assert_close(loaded(features=loaded.features_for(PROMPTS)), logits)
    assert asked and set(asked) == {"a" * 40}
    # continued from with its own config (train --checkpoint): the pin is no other backbone
    trained_cfg = loaded.model_cfg.model_copy(update={"backbone": repo})
    assert load_router(checkpoint, trained_cfg).model_cfg.backbone == loaded.model_cfg.backbone


def test_a_hub_that_does_not_serve_a_checkpoints_snapshot_is_refused(
    records: list[RewardRecord], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A download of the checkpoint's commit that left another snapshot (a mirror serving
    its own `main`) would route on other weights: it is refused, saying how to get them."""
    repo = HUB_REPO
    _, checkpoint, _ = trained_on_a_cached_hub_model(records, tmp_path, monkeypatch)
    on_a_machine_without_the_hub_model(tmp_path, monkeypatch, repo, serves="b" * 40)
    loaded = load_router(checkpoint)
    with pytest.raises(RuntimeError) as error:
        loaded.features_for(PROMPTS)
    message = str(error.value)
    assert f"backbone {repo} was loaded at snapshot commit {'a' * 40}" in message
    assert f"`hf download {repo} --revision {'a' * 40}`" in message


def test_an_embedded_backbone_whose_package_weights_changed_is_refused(
    records: list[RewardRecord], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An embedded backbone is a package's file (a real package here, made on the fly): a
    checkpoint trained on it refuses the package once it holds other weights (an upgrade)."""
    monkeypatch.setenv("FUGU_LITE_CACHE_DIR", str(tmp_path / "fugu-cache"))
    package = embedded_tiny_package(tmp_path, monkeypatch, seed=0)
    checkpoint, _ = router_on_folder(records, "tiny-embedded", tmp_path)
    stored = json.loads((checkpoint / META_FILE).read_text())["backbone_fingerprint"]
    assert stored["weight_files"] == ["model.safetensors"]
    assert load_router(checkpoint).model_cfg.backbone == "tiny-embedded"
    save_tiny_backbone(package / "model", seed=1)  # the package upgraded in place
    with pytest.raises(CheckpointError) as error:
        load_router(checkpoint)
    message = str(error.value)
    assert f"tiny-embedded ({package / 'model'}) now has weights of SHA-256" in message
    assert stored["weights_sha256"] in message


def test_a_router_on_a_backbone_of_another_width_says_so(
    tiny_model_cfg: ModelConfig, tmp_path: Path
) -> None:
    """A checkpoint whose backbone weights are not fingerprinted (written before they were,
    or tiny-random's) loaded with --backbone of another width failed routing with torch's
    'The size of tensor a (48) must match the size of tensor b (32)'."""
    save_tiny_encoder(tmp_path / "wide", "bert", hidden_size=48)
    directory = RouterModel(tiny_model_cfg, ["a", "b"], 32).save_checkpoint(tmp_path / "c")
    model = load_router(directory, backbone=str(tmp_path / "wide"))
    with pytest.raises(CheckpointError, match="gives features of width 48, but this router's"):
        model.features_for(PROMPTS)


@pytest.mark.parametrize(
    ("training", "said"),
    [
        ("notes", "metadata: Input should be a valid dictionary"),
        ({"cost_weighting": "lambda 0.5"}, "metadata.cost_weighting: Input should be a valid"),
        ({"cost_weighting": {"cost_weight": "half"}}, "metadata.cost_weighting.cost_weight: "),
        ({"cost_weighting": {"cost_weight": -1}}, "metadata.cost_weighting.cost_weight: Input"),
    ],
)
def test_a_damaged_cost_weighting_in_the_metadata_is_a_checkpoint_error(
    tiny_model_cfg: ModelConfig, tmp_path: Path, training: object, said: str
) -> None:
    """The cost weight a plain checkpoint was trained with (read by `route --cost-weight`
    and `eval`) was read without a check: a hand-edited router.json stopped with
    AttributeError's traceback, or pydantic's or float()'s bare error, or was said to be
    trained with cost weight -1."""
    from fugu_lite.cost_routing import route_checkpoint
    from fugu_lite.router_family import load_family_or_single

    directory = RouterModel(tiny_model_cfg, ["x", "y", "z"], 32).save_checkpoint(tmp_path / "c")
    meta = json.loads((directory / META_FILE).read_text())
    meta["metadata"] = training
    (directory / META_FILE).write_text(json.dumps(meta))
    for read in (
        lambda: load_family_or_single(directory),
        lambda: route_checkpoint(directory, "hi", cost_weight=0.5),
    ):
        with pytest.raises(CheckpointError) as error:
            read()
        assert str(error.value).startswith(f"{directory / META_FILE} is damaged ({said}")
        assert str(error.value).endswith("); retrain or restore the checkpoint")


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"chat_template": False}, "model.chat_template: checkpoint True vs config False"),
        ({"quantization": "int8"}, "model.quantization: checkpoint 'none' vs config 'int8'"),
        ({"head_hidden": 64}, "model.head_hidden: checkpoint 256 vs config 64"),
    ],
)
def test_a_setting_that_changes_the_features_or_the_head_is_a_mismatch(
    changes: dict, expected: str
) -> None:
    """The chat template (other prompts), int8 quantization (other features) and the MLP
    head's width (another head) each make a checkpoint another model than its config's;
    no test of loading a checkpoint changed them."""
    saved = ModelConfig(backbone="tiny-random", head="mlp")
    metadata = {"worker_ids": ["a", "b"], "model": saved.model_dump(mode="json")}
    assert checkpoint_mismatches(metadata, saved, ["a", "b"]) == []
    given = saved.model_copy(update=changes)
    assert checkpoint_mismatches(metadata, given, ["a", "b"]) == [expected]


def test_a_mismatchs_fix_says_what_to_do_about_each_kind_of_difference() -> None:
    """Other workers need other records, another model config the checkpoint's own; the
    workers' difference names what each side lacks, or that only their order differs."""
    reordered = workers_mismatch(["a", "b"], ["b", "a"])
    assert reordered.endswith("(the same workers in another order)")
    other = workers_mismatch(["a", "b"], ["b", "c"])
    assert other.endswith("(the records lack ['a']; the checkpoint does not know ['c'])")
    layer = "model.layer: checkpoint -1 vs config 1"
    assert model_differs([other, layer]) and not model_differs([other])
    assert mismatch_fix([other]).startswith("Use records with the checkpoint's workers")
    assert mismatch_fix([layer]).startswith("Use the model config the checkpoint was trained")
    assert mismatch_fix([other, layer]) == f"{mismatch_fix([other])} {mismatch_fix([layer])}"


def test_workers_given_as_a_tuple_are_compared_and_named_as_a_list() -> None:
    """load_router takes the records' workers as any sequence: ("a", "b") is the
    checkpoint's ["a", "b"], and a difference names both sides alike, as lists."""
    saved = ModelConfig(backbone="tiny-random")
    metadata = {"worker_ids": ["a", "b"], "model": saved.model_dump(mode="json")}
    assert checkpoint_mismatches(metadata, saved, ("a", "b")) == []
    assert checkpoint_mismatches(metadata, saved, ("b", "a")) == [
        "workers: checkpoint ['a', 'b'] vs records ['b', 'a'] (the same workers in another order)"
    ]


def test_an_auto_pooling_that_cannot_be_resolved_is_not_explained(tmp_path: Path) -> None:
    """`auto` on a backbone whose config.json cannot be read stays `auto`: the difference
    explains only an `auto` that was resolved, never as '(auto = auto on this backbone)'."""
    (tmp_path / "backbone").mkdir()  # no config.json: nothing says what `auto` means
    saved = ModelConfig(backbone=str(tmp_path / "backbone"), pooling="auto")
    metadata = {"worker_ids": ["a", "b"], "model": saved.model_dump(mode="json")}
    given = saved.model_copy(update={"pooling": "mean"})
    expected = "model.pooling: checkpoint 'auto' vs config 'mean'"
    assert checkpoint_mismatches(metadata, given, ["a", "b"]) == [expected]


def test_pooling_auto_on_two_backbones_names_the_backbone_of_each() -> None:
    """A checkpoint trained on MiniLM loaded with a config of tiny-random, both with pooling
    auto, was told "model.pooling: checkpoint 'auto' vs config 'auto' (auto = mean, auto =
    penultimate on this backbone)": there are two backbones, and each auto means its own."""
    saved = ModelConfig(backbone="minilm", pooling="auto")
    metadata = {"worker_ids": ["a", "b"], "model": saved.model_dump(mode="json")}
    given = ModelConfig(backbone="tiny-random", pooling="auto")
    assert checkpoint_mismatches(metadata, given, ["a", "b"])[0] == (
        "model.pooling: checkpoint 'auto' vs config 'auto' (auto = mean on minilm, auto = "
        "penultimate on tiny-random)"
    )


def test_svf_targets_differ_only_for_a_checkpoint_with_offsets() -> None:
    """A head-only checkpoint may continue with SVF (zero offsets are the same model); one
    with offsets must keep exactly its targets, and is told when they would be dropped."""
    head_only = ModelConfig(backbone="tiny-random")
    with_svf = head_only.model_copy(update={"svf_targets": ["layers.0.mlp.down_proj"]})

    def mismatches(saved: ModelConfig, given: ModelConfig) -> list[str]:
        metadata = {"worker_ids": ["a", "b"], "model": saved.model_dump(mode="json")}
        return checkpoint_mismatches(metadata, given, ["a", "b"])

    assert mismatches(head_only, with_svf) == []
    assert mismatches(with_svf, head_only) == [
        "model.svf_targets: checkpoint ['layers.0.mlp.down_proj'] vs config [] (its learned "
        "SVF offsets would be dropped)"
    ]
    other = with_svf.model_copy(update={"svf_targets": ["layers.1.mlp.down_proj"]})
    assert mismatches(with_svf, other) == [
        "model.svf_targets: checkpoint ['layers.0.mlp.down_proj'] vs config "
        "['layers.1.mlp.down_proj']"
    ]
