"""The on-disk feature cache (feature_cache.py): reads, keys, damaged shards, the versions probe."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
import torch
from conftest import save_tiny_backbone
from router_support import (
    PROMPTS,
    embedded_tiny_package,
    fake_hub_snapshot,
    forbid_backbone_loading,
    prompts_of,
)
from safetensors import safe_open
from safetensors.torch import load_file, save_file

import fugu_lite.backbones as backbones_module
import fugu_lite.feature_cache as feature_cache_module
from fugu_lite.config import ModelConfig
from fugu_lite.feature_cache import (
    FeatureCache,
    backbone_shape,
    compute_features,
    feature_cache_key,
    prompt_key,
)
from fugu_lite.features import FeatureExtractor
from fugu_lite.schemas import ChatMessage, RewardRecord
from fugu_lite.training_common import make_loader, make_model


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


def test_an_interrupted_extraction_keeps_the_chunks_it_finished(
    tiny_backbone, tiny_model_cfg: ModelConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """New features are cached every CACHE_CHUNK prompts: a run stopped part-way computes
    only the prompts of its unfinished chunk again."""
    monkeypatch.setattr(feature_cache_module, "CACHE_CHUNK", 2)
    cfg = tiny_model_cfg.model_copy(update={"feature_batch_size": 1})

    class StoppedExtractor(CountingExtractor):
        def encode(self, prompts):
            if len(self.seen) == len(feature_cache_module.PROBE_PROMPTS) + 3:
                raise RuntimeError("stopped")
            return super().encode(prompts)

    with pytest.raises(RuntimeError, match="stopped"):
        compute_features(PROMPTS, cfg, StoppedExtractor(tiny_backbone, cfg))
    shortest = sorted(PROMPTS, key=len)
    assert set(FeatureCache(cfg).rows()) == {prompt_key(p) for p in shortest[:2]}
    extractor = CountingExtractor(tiny_backbone, cfg)
    features, _ = compute_features(PROMPTS, cfg, extractor)
    assert sorted(extractor.seen) == sorted(shortest[2:])
    torch.testing.assert_close(features, extractor.encode(PROMPTS), rtol=1e-4, atol=1e-5)


def test_a_progress_bar_only_for_more_than_one_batch(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    compute_features(PROMPTS[:1], tiny_model_cfg)  # one prompt, as `route` and `serve` do
    assert "Backbone features" not in capsys.readouterr().err
    prompts = prompts_of(records)[: tiny_model_cfg.feature_batch_size + 1]
    compute_features(prompts, tiny_model_cfg)
    assert "Backbone features" in capsys.readouterr().err


def test_cache_key_follows_the_feature_settings_only() -> None:
    base = ModelConfig(backbone="tiny-random")
    key = feature_cache_key(base)
    for changes in (
        {"layer": 1},
        {"pooling": "mean"},
        {"max_tokens": 64},
        {"chat_template": False},
        {"backbone": "some/other-model"},
        {"quantization": "int8"},  # int8 features differ from fp32 ones
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
        {"pooling": "penultimate"},  # what auto means on this decoder: the same features
    ):
        assert feature_cache_key(base.model_copy(update=changes)) == key, changes


def test_an_fp32_cache_key_is_the_one_earlier_versions_gave() -> None:
    """The key of fp32 features is the one fugu-lite gave before int8 existed (c0814f0^'s
    feature_cache_key, worked out by its recipe for this config): a key holding the
    quantization 'none' too would have had every user's cache computed again, silently.
    It changes only with FEATURE_FORMAT_VERSION, which computes every feature again anyway."""
    fp32 = ModelConfig(backbone="org/name", layer=4, pooling="mean", max_tokens=256)
    assert feature_cache_key(fp32, f"hub:org/name@{'a' * 40}") == "a2c1abb3dc1f3d8996ba"


def test_a_prompt_quoting_a_conversation_as_json_gets_its_own_features(
    tiny_model_cfg: ModelConfig,
) -> None:
    """A conversation is keyed by its messages' JSON: a text prompt that was that very JSON
    (a question about a chat log) shared its key, so whichever of the two came first gave
    both their features, cached or not."""
    conversation = [ChatMessage(role="user", content="Red?")]
    quoted = '[{"content": "Red?", "role": "user"}]'
    features, extractor = compute_features([conversation, quoted], tiny_model_cfg)
    assert extractor is not None
    each = torch.cat([extractor.encode([conversation]), extractor.encode([quoted])])
    assert not torch.allclose(each[0], each[1])
    torch.testing.assert_close(features, each, rtol=1e-4, atol=1e-5)
    again, _ = compute_features([quoted], tiny_model_cfg)  # from the cache
    torch.testing.assert_close(again[0], each[1], rtol=1e-4, atol=1e-5)


def test_a_new_feature_format_version_computes_the_features_again(
    tiny_model_cfg: ModelConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FEATURE_FORMAT_VERSION is bumped when fugu-lite computes other features: what the
    earlier version cached must not be read as the new features."""
    compute_features(PROMPTS, tiny_model_cfg)
    version = feature_cache_module.FEATURE_FORMAT_VERSION
    monkeypatch.setattr(feature_cache_module, "FEATURE_FORMAT_VERSION", version + 1)
    _, extractor = compute_features(PROMPTS, tiny_model_cfg)
    assert extractor is not None  # the backbone ran again


def test_conversations_that_differ_only_in_their_roles_get_their_own_features(
    tiny_model_cfg: ModelConfig,
) -> None:
    """Through a chat template a message's role is part of what the backbone reads."""
    extractor = FeatureExtractor(golden_backbone(), tiny_model_cfg)
    asked = [ChatMessage(role="user", content="Red?")]
    told = [ChatMessage(role="system", content="Red?")]
    cached, _ = compute_features([asked, told], tiny_model_cfg, extractor)
    fresh, _ = compute_features([asked, told], tiny_model_cfg, extractor, use_cache=False)
    assert not torch.allclose(fresh[0], fresh[1])
    torch.testing.assert_close(cached, fresh)
    again, _ = compute_features([told, asked], tiny_model_cfg, extractor)  # from the cache
    torch.testing.assert_close(again, fresh.flip(0))


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


def test_features_of_a_loaded_backbone_saved_again_since_are_cached_as_the_loaded_ones(
    tmp_path: Path,
) -> None:
    """A server keeps the backbone it loaded; a folder saved again in place meanwhile (other
    weights) keyed the features the loaded weights went on computing by the new files, and
    a later run on those files read them as its own."""
    folder = tmp_path / "backbone"
    save_tiny_backbone(folder, seed=0)
    cfg = ModelConfig(
        backbone=str(folder), layer=-1, max_tokens=32, runtime="torch", cache_dir=str(tmp_path)
    )
    _, server = compute_features(PROMPTS[:1], cfg)
    assert server is not None
    save_tiny_backbone(folder, seed=1)
    served, _ = compute_features(PROMPTS[1:], cfg, server)
    again, _ = compute_features(PROMPTS[1:], cfg, server)  # the server's own stay cached
    torch.testing.assert_close(again, served)

    later_run, extractor = compute_features(PROMPTS[1:], cfg)
    assert extractor is not None  # the new files had to run
    torch.testing.assert_close(later_run, compute_features(PROMPTS[1:], cfg, use_cache=False)[0])
    assert not torch.allclose(later_run, served)


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


@pytest.mark.parametrize("stopped_in", ["write_text_atomic", "write_tensors_atomic"])
def test_a_run_stopped_while_writing_a_shard_leaves_none_that_reads_as_damaged(
    tiny_model_cfg: ModelConfig,
    stopped_in: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A shard's keys are written before its tensors, and only the tensors make it count: a
    run stopped between the two leaves a shard the next run never reads (a shard of tensors
    without keys was set aside as damaged, with a warning)."""
    write = getattr(feature_cache_module, stopped_in)

    def stopped(path: Path, *args: object) -> None:
        if Path(path).name.startswith("shard-"):
            raise KeyboardInterrupt
        write(path, *args)

    monkeypatch.setattr(feature_cache_module, stopped_in, stopped)
    with pytest.raises(KeyboardInterrupt):
        compute_features(PROMPTS, tiny_model_cfg)
    monkeypatch.undo()
    capsys.readouterr()
    features, extractor = compute_features(PROMPTS, tiny_model_cfg)
    assert extractor is not None and "damaged" not in capsys.readouterr().err
    fresh, _ = compute_features(PROMPTS, tiny_model_cfg, use_cache=False)
    torch.testing.assert_close(features, fresh)


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


@pytest.mark.parametrize("damage", ["narrower rows", "integer rows", "one value per row"])
def test_a_cache_shard_of_the_wrong_shape_or_dtype_is_set_aside_and_computed_again(
    tiny_model_cfg: ModelConfig, damage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    half = len(PROMPTS) // 2
    first, _ = compute_features(PROMPTS[:half], tiny_model_cfg)
    compute_features(PROMPTS, tiny_model_cfg)
    shards = sorted(FeatureCache(tiny_model_cfg).folder.glob("shard-*.safetensors"))
    shard = shards[-1]  # the second half's: the first half's rows stay good
    rows = load_file(shard)["features"]
    wrong = {
        "narrower rows": rows[:, :16],
        "integer rows": rows.round().to(torch.int64),
        "one value per row": rows[:, 0],
    }[damage]
    save_file({"features": wrong.contiguous()}, shard)
    again, extractor = compute_features(PROMPTS, tiny_model_cfg)
    assert extractor is not None
    assert again.shape == (len(PROMPTS), 32) and again.dtype == torch.float32
    torch.testing.assert_close(again[:half], first)
    err = capsys.readouterr().err
    assert "is damaged" in err and str(shard.name) in err.replace("\n", "")
    assert shard.with_name(shard.name + ".damaged").exists()


def test_a_narrower_shard_of_a_cache_without_its_probe_is_set_aside(
    tiny_model_cfg: ModelConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    """A cache of an earlier fugu-lite has no probe: the backbone's shape file gives the
    features' width."""
    expected, _ = compute_features(PROMPTS, tiny_model_cfg)
    backbone_shape(tiny_model_cfg)
    folder = FeatureCache(tiny_model_cfg).folder
    (folder / feature_cache_module.PROBE_FILE).unlink()
    (shard,) = folder.glob("shard-*.safetensors")
    save_file({"features": load_file(shard)["features"][:, :16].contiguous()}, shard)
    again, extractor = compute_features(PROMPTS, tiny_model_cfg)
    assert extractor is not None
    torch.testing.assert_close(again, expected)
    assert "is damaged" in capsys.readouterr().err


def test_a_feature_cache_write_removes_what_killed_writers_of_earlier_versions_left(
    tiny_model_cfg: ModelConfig,
) -> None:
    """Earlier versions named a shard's temporary file without its writer: a killed run's
    stayed in the cache for good. One a day old goes; a newer one may be a live run's."""
    folder = FeatureCache(tiny_model_cfg).folder
    folder.mkdir(parents=True)
    old = folder / ".shard-1.safetensors.abcd1234.tmp"
    recent = folder / ".shard-2.safetensors.abcd1234.tmp"
    for leftover in (old, recent):
        leftover.write_bytes(b"half a shard")
    two_days_ago = time.time() - 2 * 24 * 3600
    os.utime(old, (two_days_ago, two_days_ago))
    compute_features(PROMPTS, tiny_model_cfg)
    assert not old.exists()
    assert recent.exists()


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


def test_a_hub_model_downloaded_again_computes_only_the_prompts_its_cache_lacks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Hugging Face cache cleared and the same revision downloaded again: the features
    its cache holds are read, and only the other prompts go through the backbone (all of
    them did, and were cached a second time)."""
    from huggingface_hub import constants

    hub_cache = tmp_path / "hf-hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(hub_cache))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub_cache))  # read at import
    load_hub = backbones_module._load_hub

    def downloading(name: str) -> object:  # what loading a hub id does online
        fake_hub_snapshot(hub_cache, name, "a" * 40, 0)
        return load_hub(name)

    monkeypatch.setattr(backbones_module, "_load_hub", downloading)
    cfg = ModelConfig(
        backbone="fugu-test/tiny-model",
        layer=-1,
        max_tokens=32,
        runtime="torch",
        cache_dir=str(tmp_path / "c"),
    )
    compute_features(PROMPTS[:2], cfg)
    shutil.rmtree(hub_cache)
    features, _ = compute_features(PROMPTS, cfg)
    (folder,) = (tmp_path / "c" / "features").iterdir()
    cached = [key for keys in folder.glob("shard-*.json") for key in json.loads(keys.read_text())]
    assert sorted(cached) == sorted(prompt_key(prompt) for prompt in PROMPTS)  # each once
    fresh, _ = compute_features(PROMPTS, cfg, use_cache=False)
    torch.testing.assert_close(features, fresh)


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


def made_by_an_older_installation(
    folder: Path, factor: float, package: str = "transformers"
) -> None:
    """The cache folder as an older installation left it: made under transformers (or
    `package`) 4.0.0, whose features (kept ones and probe alike) were `factor` times today's."""
    from safetensors.torch import load_file, save_file

    versions = {**feature_cache_module.computation_versions(), package: "4.0.0"}
    for path in folder.glob("*.safetensors"):
        tensors = {name: value * factor for name, value in load_file(path).items()}
        metadata = {"versions": json.dumps(versions)} if path.name == "probe.safetensors" else None
        save_file(tensors, path, metadata=metadata)


@pytest.mark.parametrize("factor", [1.5, 1.01, 1.0], ids=["moved", "moved 1%", "same"])
def test_a_cache_made_under_other_package_versions_is_checked_once_and_kept_only_if_equal(
    tiny_model_cfg: ModelConfig,
    factor: float,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A transformers (or tokenizers, torch, onnxruntime) upgrade that computes other
    features reused the cache of the old ones: training saw the old features, routing the
    new. Here the cache is as an older installation left it: made under transformers
    4.0.0, whose features (kept ones and probe alike) were `factor` times today's (1%:
    ten times the probe's tolerance)."""
    features_moved = factor != 1.0
    expected, _ = compute_features(PROMPTS, tiny_model_cfg)
    cache = FeatureCache(tiny_model_cfg)
    made_by_an_older_installation(cache.folder, factor)
    assert FeatureCache(tiny_model_cfg).computed_under_other_versions()

    again, _ = compute_features(PROMPTS, tiny_model_cfg)
    torch.testing.assert_close(again, expected)
    said = " ".join(capsys.readouterr().err.split())
    assert ("transformers 4.0.0 ->" in said) == features_moved, said
    assert ("train it again" in said) == features_moved
    assert len(list(cache.folder.parent.glob("*.stale-*"))) == int(features_moved)
    forbid_backbone_loading(monkeypatch)  # checked once: the versions are today's now
    torch.testing.assert_close(compute_features(PROMPTS, tiny_model_cfg)[0], expected)


@pytest.mark.parametrize("package", ["torch", "tokenizers", "onnxruntime"])
def test_a_cache_made_under_another_version_of_any_package_computing_features_is_checked(
    tiny_model_cfg: ModelConfig, package: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not only transformers: torch runs the forward, tokenizers the tokenizer, ONNX Runtime
    its own kernels."""
    expected, _ = compute_features(PROMPTS, tiny_model_cfg)
    made_by_an_older_installation(FeatureCache(tiny_model_cfg).folder, 1.5, package)
    again, _ = compute_features(PROMPTS, tiny_model_cfg)
    torch.testing.assert_close(again, expected)
    assert f"{package} 4.0.0 ->" in " ".join(capsys.readouterr().err.split())


def test_a_probe_of_other_prompts_under_other_versions_sets_the_cache_aside(
    tiny_model_cfg: ModelConfig, capsys: pytest.CaptureFixture[str]
) -> None:
    """A probe that cannot be compared with today's (here of two prompts, not three) cannot
    vouch for the cache made under other versions: it is set aside, not kept."""
    expected, _ = compute_features(PROMPTS, tiny_model_cfg)
    folder = FeatureCache(tiny_model_cfg).folder
    made_by_an_older_installation(folder, factor=1.5)
    probe = folder / feature_cache_module.PROBE_FILE
    with safe_open(probe, framework="pt") as kept:
        metadata = kept.metadata()
    save_file({"features": load_file(probe)["features"][:2]}, probe, metadata=metadata)

    again, _ = compute_features(PROMPTS, tiny_model_cfg)
    torch.testing.assert_close(again, expected)
    assert len(list(folder.parent.glob("*.stale-*"))) == 1
    assert "train it again" in " ".join(capsys.readouterr().err.split())


def test_a_moved_cache_that_cannot_be_set_aside_is_said_once_and_never_read(
    tiny_model_cfg: ModelConfig, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A cache of features that moved with an upgrade, on a read-only disk, cannot be set
    aside: each compute_features of the process (each training stage, each router of a
    family) computed the probe again and repeated the warning. It is said once per process
    and cache folder, and its old features are never read."""
    expected, _ = compute_features(PROMPTS, tiny_model_cfg)
    folder = FeatureCache(tiny_model_cfg).folder
    made_by_an_older_installation(folder, factor=1.5)
    rename = Path.rename

    def read_only(path: Path, target: Path) -> Path:
        # root writes anywhere: the read-only disk's refusal is made here
        if path == folder:
            raise OSError(30, "Read-only file system", str(path))
        return rename(path, target)

    monkeypatch.setattr(Path, "rename", read_only)
    for _ in range(3):
        features, _ = compute_features(PROMPTS, tiny_model_cfg)
        torch.testing.assert_close(features, expected)
    said = " ".join(capsys.readouterr().err.split())
    assert said.count("ignored, computed again") == 1, said


def test_two_runs_setting_aside_the_same_moved_cache_both_go_on_caching(
    tiny_model_cfg: ModelConfig, tiny_backbone, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two runs started after an upgrade both find the cache's features moved; the one that
    set the folder aside second found it gone, took the cache for read-only and cached
    nothing for the rest of its run (saying its old features were 'ignored')."""
    expected, _ = compute_features(PROMPTS, tiny_model_cfg)
    folder = FeatureCache(tiny_model_cfg).folder
    made_by_an_older_installation(folder, factor=1.5)
    first, second = FeatureCache(tiny_model_cfg), FeatureCache(tiny_model_cfg)
    extractor = FeatureExtractor(tiny_backbone, tiny_model_cfg)

    class OtherRunMeanwhile:
        """While this run computes its probe (an ONNX export can take a minute), the other
        run sets the folder aside."""

        def encode(self, prompts: list) -> torch.Tensor:
            first.check_versions(extractor)
            return extractor.encode(prompts)

    second.check_versions(OtherRunMeanwhile())  # type: ignore[arg-type]
    said = " ".join(capsys.readouterr().err.split())
    assert "ignored" not in said and said.count("set aside") == 2
    features, _ = compute_features(PROMPTS, tiny_model_cfg, extractor)
    torch.testing.assert_close(features, expected)
    again, loaded = compute_features(PROMPTS, tiny_model_cfg)
    assert loaded is None  # cached by the run
    torch.testing.assert_close(again, expected)


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


@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_cache_folder_variable_is_the_default_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    """FUGU_LITE_CACHE_DIR= (an env file's empty line, a compose file's unset ${VAR:-}) was
    Path(''), the working directory: features/ and onnx/ were put in the user's project."""
    (tmp_path / "home").mkdir()
    (tmp_path / "work").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path / "work")
    monkeypatch.setenv("FUGU_LITE_CACHE_DIR", value)
    compute_features(PROMPTS, ModelConfig(backbone="tiny-random", layer=-1, runtime="onnx"))
    assert (tmp_path / "home" / ".cache" / "fugu-lite" / "features").is_dir()
    assert list((tmp_path / "work").iterdir()) == []


def test_a_backbone_folder_named_with_brackets_gets_its_features(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A backbone folder named 'bb[/v3]' (a version in brackets) failed every first feature
    computation on ONNX with rich's MarkupError: the 'Exporting backbone ...' line read its
    path as markup, and so did the line saying the export failed."""
    folder = tmp_path / "bb[/v3]"
    save_tiny_backbone(folder)
    model_cfg = ModelConfig(backbone=str(folder), layer=-1, runtime="onnx", max_tokens=32)
    features, _ = compute_features(PROMPTS, model_cfg)
    assert features.shape[0] == len(PROMPTS)
    assert f"Exporting backbone '{folder}'" in " ".join(capsys.readouterr().err.split())
