"""SVF: learned singular-value offsets of backbone matrices (tiny random backbone).

Identity at zero offsets, the sum of singular values kept, checkpoints, clear errors for bad
targets, and the gradient and ES stages training the offsets on uncached features."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import generated_records
from rich.progress import TaskID
from safetensors.torch import load_file
from typer.testing import CliRunner

import fugu_lite.train_es as train_es_module
from fugu_lite.backbones import load_backbone
from fugu_lite.checkpoint import HEAD_FILE, CheckpointError
from fugu_lite.cli import app
from fugu_lite.config import (
    ESConfig,
    ESTrainingConfig,
    ModelConfig,
    RLConfig,
    RLTrainingConfig,
    SFTConfig,
    SFTTrainingConfig,
)
from fugu_lite.config_errors import ConfigError
from fugu_lite.es_population import (
    SplitData,
    policy_metrics,
    population_logits,
    set_parameter_vector,
    split_data,
)
from fugu_lite.features import FeatureExtractor
from fugu_lite.model import RouterModel, load_router
from fugu_lite.progress import LineProgress
from fugu_lite.schemas import RewardRecord, write_records
from fugu_lite.svf import SVFTargetError, resolve_targets, weight_matrix_names
from fugu_lite.train_es import evolve, train_es
from fugu_lite.train_rl import train_rl
from fugu_lite.train_sft import train_sft
from fugu_lite.training_common import console, evaluate_loader, make_loader, make_model

PROMPTS = [
    "hi",
    "write a python function that adds two numbers",
    "compute the sum of 1 2 3 and then a much longer tail to make padding matter",
    "say hello politely",
]
TARGETS = ["layers.*.mlp.down_proj", "layers.2.self_attn.q_proj.weight"]
MATRICES = [f"layers.{index}.mlp.down_proj" for index in range(6)] + ["layers.2.self_attn.q_proj"]
NOT_CACHED = "features depend on the offsets, so they are not cached"


@pytest.fixture
def svf_cfg(tiny_model_cfg: ModelConfig) -> ModelConfig:
    return tiny_model_cfg.model_copy(update={"svf_targets": TARGETS})


@pytest.fixture
def small_records() -> list[RewardRecord]:
    return generated_records(n_per_topic=16)


def randomize_offsets(model: RouterModel, scale: float = 0.3, seed: int = 0) -> None:
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.svf.parameters():
            parameter.copy_(scale * torch.randn(parameter.shape, generator=generator))


def offsets_of(model: RouterModel) -> dict[str, torch.Tensor]:
    return {name: model.svf.matrix(name).offsets.detach().clone() for name in model.svf.names}


def plain_reference(cfg: ModelConfig) -> torch.Tensor:
    """Features of an independently loaded, untouched backbone."""
    return FeatureExtractor(load_backbone(cfg.backbone), cfg).encode(PROMPTS)


# --- the parametrisation --------------------------------------------------------------------


def test_zero_offsets_reproduce_the_backbone_exactly(svf_cfg: ModelConfig) -> None:
    model = RouterModel(svf_cfg, ["a", "b", "c"], feature_dim=32)
    assert model.svf.names == MATRICES
    backbone_modules = dict(model.backbone_extractor().backbone.model.named_modules())
    for name, weight in model.svf.weights().items():
        assert torch.equal(weight, backbone_modules[name.removesuffix(".weight")].weight)

    reference = plain_reference(svf_cfg)
    torch.testing.assert_close(model.features_for(PROMPTS), reference, rtol=0, atol=1e-6)
    tokens = model.backbone_extractor().tokenize(PROMPTS)
    with torch.no_grad():
        torch.nn.init.normal_(model.head.weight)
        logits = model(**tokens)
        head_only = model.head(model.normalize(reference))
    torch.testing.assert_close(logits, head_only, rtol=0, atol=1e-5)


def test_nonzero_offsets_change_features_and_keep_the_sum_of_singular_values(
    svf_cfg: ModelConfig,
) -> None:
    model = RouterModel(svf_cfg, ["a", "b"], feature_dim=32)
    backbone = model.backbone_extractor().backbone.model
    originals = {name: p.detach().clone() for name, p in backbone.named_parameters()}
    randomize_offsets(model)

    for name, shifted in model.svf.weights().items():
        matrix = model.svf.matrix(name.removesuffix(".weight"))
        original = originals[name].double()
        s = torch.linalg.svdvals(original)
        d = matrix.offsets.detach().double()
        expected = s * (1 + d) * s.sum() / (s * (1 + d)).sum()
        assert (expected > 0).all()  # so they are the singular values of W'
        got = torch.linalg.svdvals(shifted.detach().double())
        torch.testing.assert_close(got, expected.sort(descending=True).values, rtol=1e-4, atol=1e-5)
        assert float(got.sum()) == pytest.approx(float(s.sum()), rel=1e-5)
        assert not torch.allclose(got, s, rtol=1e-3, atol=1e-4)

    changed = model.features_for(PROMPTS)
    assert (changed - plain_reference(svf_cfg)).abs().max() > 1e-2
    # the backbone itself is untouched: the offsets act only through the router's forward
    for name, parameter in backbone.named_parameters():
        assert torch.equal(parameter, originals[name]), name


def test_gradients_reach_every_offset(svf_cfg: ModelConfig) -> None:
    model = RouterModel(svf_cfg, ["a", "b", "c"], feature_dim=32)
    torch.nn.init.normal_(model.head.weight)
    tokens = model.backbone_extractor().tokenize(PROMPTS)
    model(**tokens).logsumexp(dim=-1).sum().backward()
    for name in model.svf.names:
        gradient = model.svf.matrix(name).offsets.grad
        assert gradient is not None and gradient.abs().sum() > 0, name
    trainable, total = model.trainable_parameter_counts()
    n_offsets = 6 * 32 + 32
    assert trainable == 3 * 32 + n_offsets
    assert model.svf.offset_count() == n_offsets
    assert total == trainable  # backbone_parameters=0 in this hand-built model


# --- naming targets -------------------------------------------------------------------------


def test_targets_are_exact_names_or_globs_and_are_deduplicated() -> None:
    backbone = load_backbone("tiny-random").model

    def resolve(*targets: str) -> list[str]:
        return resolve_targets(targets, backbone, backbone, "tiny-random", -1)

    assert resolve("layers.1.mlp.down_proj") == ["layers.1.mlp.down_proj"]
    assert resolve("layers.1.mlp.down_proj.weight") == ["layers.1.mlp.down_proj"]
    assert resolve("layers.0.self_attn.[qk]_proj") == [
        "layers.0.self_attn.q_proj",
        "layers.0.self_attn.k_proj",
    ]
    assert resolve("layers.4.*", "layers.4.mlp.up_proj") == [
        f"layers.4.{part}"
        for part in (
            "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
            "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj",
        )
    ]  # fmt: skip
    with pytest.raises(SVFTargetError):
        resolve("down_proj")  # a plain name must be the whole name


def test_an_unknown_target_is_a_config_error_naming_real_matrices(
    tiny_model_cfg: ModelConfig,
) -> None:
    cfg = tiny_model_cfg.model_copy(update={"svf_targets": ["layers.3.mlp.down_prj"]})
    with pytest.raises(ConfigError) as error:
        RouterModel(cfg, ["a", "b"], feature_dim=32)
    message = str(error.value)
    assert "model.svf_targets: 'layers.3.mlp.down_prj' matches no weight matrix" in message
    assert "did you mean 'layers.3.mlp.down_proj'" in message
    names = weight_matrix_names(load_backbone("tiny-random").model)
    # the first 8 names of more, said to be a part
    assert f"named like {', '.join(names[:8])}, ... ({len(names)} in all)" in message
    assert "layers.*.mlp.down_proj" in message  # how to write a pattern


@pytest.mark.parametrize(
    ("target", "hint"),
    [
        # a part of the name left out: the three closest names
        ("layers.3.attn.q_proj",
         "did you mean 'layers.3.self_attn.q_proj', 'layers.5.self_attn.q_proj', "
         "'layers.4.self_attn.q_proj'? "),
        # another architecture's name (BERT's) is like none: no guess
        ("encoder.layer.3.output.dense", ""),
    ],
    ids=["part-left-out", "another-architecture"],
)  # fmt: skip
def test_an_unknown_target_suggests_up_to_three_close_names_and_no_far_one(
    target: str, hint: str
) -> None:
    """The hint's closeness cutoff (0.5) and count (3) were unchecked: the one typo tested
    was close enough to any cutoff, and its first suggestion the only one read."""
    backbone = load_backbone("tiny-random").model
    with pytest.raises(SVFTargetError) as error:
        resolve_targets([target], backbone, backbone, "tiny-random", -1)
    message = str(error.value)
    assert f"that the features use. {hint}Its matrices are named like" in message


def test_a_target_after_the_feature_layer_is_refused(tiny_model_cfg: ModelConfig) -> None:
    cfg = tiny_model_cfg.model_copy(update={"layer": 2, "svf_targets": ["layers.4.mlp.up_proj"]})
    with pytest.raises(SVFTargetError, match=r"after the feature layer \(model\.layer=2\)"):
        RouterModel(cfg, ["a", "b"], feature_dim=32)
    # four matrices are all named, with no ', ...' as if there were more
    every_later = cfg.model_copy(update={"svf_targets": ["layers.[2-5].mlp.up_proj"]})
    with pytest.raises(SVFTargetError) as error:
        RouterModel(every_later, ["a", "b"], feature_dim=32)
    later = ", ".join(f"layers.{block}.mlp.up_proj" for block in range(2, 6))
    assert f"names {later}, in blocks after the feature layer" in str(error.value)
    earlier = cfg.model_copy(update={"svf_targets": ["layers.*.mlp.up_proj"]})
    model = RouterModel(earlier, ["a", "b"], feature_dim=32)
    assert model.svf.names == ["layers.0.mlp.up_proj", "layers.1.mlp.up_proj"]


def test_the_cli_reports_a_bad_target_and_writes_nothing(
    small_records: list[RewardRecord], tiny_model_cfg: ModelConfig, tmp_path: Path
) -> None:
    records_path = tmp_path / "records.jsonl"
    write_records(records_path, small_records)
    config_path = tmp_path / "sft.yaml"
    config_path.write_text(
        "model:\n  backbone: tiny-random\n  head: linear\n"
        "  svf_targets: ['layers.9.self_attn.[qk]_proj']\n"
        f"  cache_dir: {tiny_model_cfg.cache_dir}\n"
    )
    arguments = ["train", "sft", "-r", str(records_path), "-o", str(tmp_path / "out")]
    result = CliRunner().invoke(app, [*arguments, "-c", str(config_path)])
    assert result.exit_code == 2, result.output
    output = " ".join(result.output.split())
    assert "'layers.9.self_attn.[qk]_proj' matches no weight matrix" in output
    assert not (tmp_path / "out").exists()


# --- checkpoints ----------------------------------------------------------------------------


def test_a_checkpoint_round_trips_the_offsets(svf_cfg: ModelConfig, tmp_path: Path) -> None:
    model = RouterModel(svf_cfg, ["a", "b", "c"], feature_dim=32)
    randomize_offsets(model, seed=3)
    torch.nn.init.normal_(model.head.weight)
    model.fit_normalizer(model.features_for(PROMPTS * 2))
    model.save_checkpoint(tmp_path)

    meta = json.loads((tmp_path / "router.json").read_text())
    assert meta["model"]["svf_targets"] == TARGETS
    assert meta["svf_matrices"] == {name: [32, 64] for name in MATRICES[:6]} | {
        "layers.2.self_attn.q_proj": [32, 32]
    }
    # Only the offsets are stored: a matrix's decomposition is the backbone's, recomputed at
    # load (stored too, it added every U and V to the file and was loaded over the backbone's).
    stored = [name for name in load_file(tmp_path / HEAD_FILE) if name.startswith("svf.")]
    assert len(stored) == len(MATRICES) and all(name.endswith(".offsets") for name in stored)
    # the tensor names are the file format: SVF checkpoints already written are read by them
    assert "svf.matrices.layers__2__self_attn__q_proj.offsets" in stored
    loaded = load_router(tmp_path)
    assert loaded.svf.names == model.svf.names
    for name, offsets in offsets_of(model).items():
        assert torch.equal(loaded.svf.matrix(name).offsets, offsets)
    features = model.features_for(PROMPTS)
    torch.testing.assert_close(loaded.features_for(PROMPTS), features, rtol=0, atol=0)
    torch.testing.assert_close(loaded.probabilities(features), model.probabilities(features))


def test_loading_checks_the_targets_and_says_what_differs(
    svf_cfg: ModelConfig, tmp_path: Path
) -> None:
    model = RouterModel(svf_cfg, ["a", "b"], feature_dim=32)
    randomize_offsets(model)
    model.save_checkpoint(tmp_path / "svf")
    other = svf_cfg.model_copy(update={"svf_targets": ["layers.0.mlp.down_proj"]})
    with pytest.raises(CheckpointError) as error:
        load_router(tmp_path / "svf", other)
    assert f"model.svf_targets: checkpoint {TARGETS!r} vs config ['layers.0.mlp.down_proj']" in (
        str(error.value)
    )
    without = svf_cfg.model_copy(update={"svf_targets": []})
    with pytest.raises(CheckpointError, match="its learned SVF offsets would be dropped"):
        load_router(tmp_path / "svf", without)


def test_a_head_only_checkpoint_continues_with_zero_offsets(
    svf_cfg: ModelConfig, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    head_only_cfg = svf_cfg.model_copy(update={"svf_targets": []})
    head_only = RouterModel(head_only_cfg, ["a", "b"], feature_dim=32)
    torch.nn.init.normal_(head_only.head.weight)
    head_only.save_checkpoint(tmp_path)
    continued = load_router(tmp_path, svf_cfg, ["a", "b"])
    assert "starting them at zero" in capsys.readouterr().err
    assert all(not offsets.any() for offsets in offsets_of(continued).values())
    assert torch.equal(continued.head.weight, head_only.head.weight)
    torch.testing.assert_close(
        continued.features_for(PROMPTS), head_only.features_for(PROMPTS), rtol=0, atol=1e-6
    )


# --- training the offsets -------------------------------------------------------------------


def test_without_svf_the_loader_serves_cached_features_and_with_svf_token_ids(
    small_records: list[RewardRecord],
    tiny_model_cfg: ModelConfig,
    svf_cfg: ModelConfig,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cached = make_model(tiny_model_cfg, small_records[0].worker_ids)
    assert cached.svf is None
    cached_batch = next(iter(make_loader(small_records, cached, "train", 8, shuffle=False)))
    assert set(cached_batch) == {"features", "rewards"}
    assert list(Path(tiny_model_cfg.cache_dir).rglob("shard-*.safetensors"))
    assert NOT_CACHED not in capsys.readouterr().err

    svf_model = make_model(svf_cfg, small_records[0].worker_ids)
    batch = next(iter(make_loader(small_records, svf_model, "train", 8, shuffle=False)))
    assert set(batch) == {"input_ids", "attention_mask", "rewards"}
    assert batch["input_ids"].shape[0] == 8
    assert NOT_CACHED in " ".join(capsys.readouterr().err.split())
    # at zero offsets the backbone pass gives the cached path's normaliser and logits
    torch.testing.assert_close(svf_model.feature_mean, cached.feature_mean, rtol=0, atol=1e-5)
    torch.testing.assert_close(svf_model.feature_scale, cached.feature_scale, rtol=1e-4, atol=0)
    torch.nn.init.normal_(svf_model.head.weight)
    with torch.no_grad():
        cached.head.weight.copy_(svf_model.head.weight)
        torch.testing.assert_close(
            svf_model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]),
            cached(features=cached_batch["features"]),
            rtol=1e-4,
            atol=1e-4,
        )


def test_sft_and_rl_train_the_offsets_on_uncached_features(
    small_records: list[RewardRecord],
    svf_cfg: ModelConfig,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    training = SFTTrainingConfig(epochs=3, batch_size=16, learning_rate=0.02, temperature=0.1)
    report = train_sft(small_records, SFTConfig(model=svf_cfg, training=training), tmp_path / "s")
    assert NOT_CACHED in " ".join(capsys.readouterr().err.split())
    assert not list(Path(svf_cfg.cache_dir).rglob("shard-*.safetensors"))
    assert report["svf_matrices"] == MATRICES

    sft = load_router(tmp_path / "s", svf_cfg, small_records[0].worker_ids)
    offsets = offsets_of(sft)
    assert all(values.abs().max() > 1e-4 for values in offsets.values())
    loader = make_loader(small_records, sft, "validation", batch_size=16, shuffle=False)
    assert evaluate_loader(sft, loader)["reward"] == pytest.approx(
        report["best_validation_reward"], abs=1e-5
    )

    rl_training = RLTrainingConfig(epochs=2, batch_size=16, learning_rate=0.02)
    rl_config = RLConfig(model=svf_cfg, training=rl_training)
    train_rl(small_records, rl_config, tmp_path / "r", str(tmp_path / "s"))
    rl = load_router(tmp_path / "r")
    for name, before in offsets.items():
        assert not torch.allclose(rl.svf.matrix(name).offsets, before), name


def test_es_population_logits_with_svf_are_each_candidates_own(svf_cfg: ModelConfig) -> None:
    model = RouterModel(svf_cfg, ["a", "b", "c"], feature_dim=32)
    inputs = dict(model.backbone_extractor().tokenize(PROMPTS))
    start = torch.cat([parameter.detach().flatten() for parameter in model.parameters()])
    candidates = 0.2 * torch.randn(3, start.numel(), generator=torch.Generator().manual_seed(0))
    logits = population_logits(model, candidates, inputs)
    after = torch.cat([parameter.detach().flatten() for parameter in model.parameters()])
    assert torch.equal(after, start)  # the model is left as it was
    for candidate, batched in zip(candidates, logits, strict=True):
        set_parameter_vector(model, candidate.double().numpy())
        with torch.no_grad():
            torch.testing.assert_close(batched, model.eval()(**inputs), rtol=1e-5, atol=1e-5)
    assert not torch.allclose(logits[0], logits[1])


def test_a_short_es_run_with_svf_trains_head_and_offsets(
    small_records: list[RewardRecord],
    svf_cfg: ModelConfig,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    training = ESTrainingConfig(
        population_size=8, sigma0=0.3, iterations=8, batch_size=24, validate_every=2
    )
    report = train_es(small_records, ESConfig(model=svf_cfg, training=training), tmp_path)
    assert NOT_CACHED in " ".join(capsys.readouterr().err.split())
    assert not list(Path(svf_cfg.cache_dir).rglob("shard-*.safetensors"))
    assert report["svf_matrices"] == MATRICES
    assert report["trainable_parameters"] == 3 * 32 + 7 * 32
    assert report["best_generation"] > 0
    assert report["best_validation_reward"] > report["initial_validation_reward"]

    loaded = load_router(tmp_path)
    assert all(values.abs().max() > 1e-3 for values in offsets_of(loaded).values())
    validation = split_data(small_records, loaded, "validation")
    assert policy_metrics(loaded, validation)["reward"] == pytest.approx(
        report["best_validation_reward"], abs=1e-6
    )


def test_an_es_generation_with_svf_counts_its_candidates_on_the_bar(
    svf_cfg: ModelConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With SVF every candidate runs the backbone on the batch: a generation of the default
    32 candidates on 1000 prompts took minutes on a real backbone, the bar standing still at
    'ES generations: 0/600' all that time; its status now counts the candidates scored."""
    statuses: list[str | None] = []

    class Recording(LineProgress):
        def update(self, bar: TaskID, **changes: Any) -> None:
            statuses.append(changes.get("status"))
            super().update(bar, **changes)

    monkeypatch.setattr(train_es_module, "stage_progress", lambda label: Recording(console, label))
    model = RouterModel(svf_cfg, ["a", "b", "c"], feature_dim=32)
    data = SplitData(dict(model.backbone_extractor().tokenize(PROMPTS)), torch.eye(3)[[0, 1, 2, 0]])
    training = ESTrainingConfig(population_size=4, sigma0=0.3, iterations=2, validate_every=1)
    state, _ = evolve(model, data, data, ESConfig(model=svf_cfg, training=training), tmp_path)
    assert state.initial_validation is not None
    bests = [state.initial_validation["reward"]]
    for entry in state.history:
        bests.append(max(bests[-1], entry["validation"]["reward"]))
    expected: list[str | None] = []
    for generation in (1, 2):
        best = f"best validation {bests[generation - 1]:.4f}"
        expected += [f"candidate {done}/4 · {best}" for done in range(1, 5)]
        expected.append(f"best validation {bests[generation]:.4f}")
    assert statuses == expected
