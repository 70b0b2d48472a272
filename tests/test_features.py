"""The feature extractor (features.py): the truncated forward pass, pooling, layers, max_tokens."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import save_tiny_backbone
from router_support import (
    PROMPTS,
    save_tiny_encoder,
)

from fugu_lite.backbones import load_backbone
from fugu_lite.config import ModelConfig
from fugu_lite.feature_cache import (
    compute_features,
    prompt_key,
)
from fugu_lite.features import FeatureExtractor, normalized_layer, pool, resolved_pooling
from fugu_lite.schemas import ChatMessage


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


def test_penultimate_pooling_of_a_one_token_prompt_takes_that_token() -> None:
    """A prompt of one token has no penultimate one: its own token, not a padding position
    (which would make its features depend on the longest prompt batched with it)."""
    hidden = torch.arange(2 * 4 * 1, dtype=torch.float32).reshape(2, 4, 1)
    mask = torch.tensor([[1, 0, 0, 0], [1, 1, 1, 1]])
    assert pool(hidden, mask, "penultimate").flatten().tolist() == [0.0, 6.0]


def test_layer_index_and_auto_pooling() -> None:
    assert normalized_layer(-1, 30, "b") == 30
    assert normalized_layer(-31, 30, "b") == 0
    assert normalized_layer(15, 30, "b") == 15
    for bad in (31, -32):
        with pytest.raises(ValueError, match=f"model.layer {bad} does not exist.*30 blocks"):
            normalized_layer(bad, 30, "b")
    assert resolved_pooling(ModelConfig(pooling="auto"), is_decoder=True) == "penultimate"
    assert resolved_pooling(ModelConfig(pooling="auto"), is_decoder=False) == "mean"
    assert resolved_pooling(ModelConfig(pooling="last"), is_decoder=False) == "last"


def test_a_layer_beyond_the_backbone_is_refused(tiny_backbone) -> None:
    """'layer 7 does not exist: this backbone has 6 blocks' named neither the setting to
    change nor the backbone (a config's, or a checkpoint's given with --backbone)."""
    with pytest.raises(ValueError) as raised:
        FeatureExtractor(tiny_backbone, ModelConfig(backbone="tiny-random", layer=7))
    assert str(raised.value) == (
        "model.layer 7 does not exist on backbone tiny-random: it has 6 blocks; use 0..6 "
        "(0: its embeddings) or -1..-7"
    )


def test_one_user_message_is_featurised_like_the_plain_string(tiny_model_cfg: ModelConfig) -> None:
    as_chat = [ChatMessage(role="user", content=PROMPTS[1])]
    assert prompt_key(as_chat) != prompt_key(PROMPTS[1])
    features, _ = compute_features([PROMPTS[1], as_chat], tiny_model_cfg)
    torch.testing.assert_close(features[0], features[1])


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


def test_a_roberta_backbones_positions_count_after_its_padding_id(tmp_path: Path) -> None:
    """RoBERTa numbers positions from its padding id + 1: with 40 positions (514 on the hub
    models) only 38 (512) tokens fit, yet max_tokens 40 (as the refusal advised) passed and
    the first long prompt failed with 'index 40 is out of bounds for dimension 1'."""
    save_tiny_encoder(tmp_path / "roberta", "roberta", max_position_embeddings=40)
    backbone = load_backbone(str(tmp_path / "roberta"))
    cfg = ModelConfig(backbone=str(tmp_path / "roberta"), layer=-1, max_tokens=40, runtime="torch")
    with pytest.raises(ValueError, match=r"positions for 38 tokens .*at most 38"):
        FeatureExtractor(backbone, cfg)
    fits = cfg.model_copy(update={"max_tokens": 38})
    assert FeatureExtractor(backbone, fits).encode(["word " * 100]).shape == (1, 32)


@pytest.mark.parametrize("runtime", ["torch", "onnx"])
def test_a_distilbert_backbone_is_cut_at_its_layer(tmp_path: Path, runtime: str) -> None:
    """DistilBERT, whose pooling `auto` fugu-lite knows (mean, an encoder), failed to load with
    'cannot find the transformer blocks of DistilBertModel': its blocks are transformer.layer."""
    save_tiny_encoder(tmp_path / "distilbert", "distilbert", num_hidden_layers=3)
    backbone = load_backbone(str(tmp_path / "distilbert"))
    assert backbone.n_layers == 3 and not backbone.is_decoder
    cfg = ModelConfig(backbone=str(tmp_path / "distilbert"), layer=1, runtime=runtime)
    extractor = FeatureExtractor(backbone, cfg)
    assert extractor.runtime.name == runtime
    fast = extractor.encode(PROMPTS)
    torch.testing.assert_close(fast, extractor.plain_features(PROMPTS), rtol=1e-4, atol=1e-5)
    assert backbone.n_layers == 3  # the shared backbone keeps its blocks


def test_a_chat_template_that_refuses_a_conversation_says_so_and_how_to_route_it() -> None:
    """A backbone whose chat template refuses a role (Gemma's takes no system message,
    Mistral's wants user and assistant to alternate) raised jinja's TemplateError, which no
    command catches: `route` printed a traceback."""
    backbone = load_backbone("tiny-random")
    backbone.tokenizer.chat_template = (
        "{% for m in messages %}{% if m['role'] == 'system' %}"
        "{{ raise_exception('System role not supported') }}{% endif %}"
        "{{ m['content'] }}{% endfor %}"
    )
    extractor = FeatureExtractor(backbone, ModelConfig(backbone="tiny-random", max_tokens=32))
    conversation = [
        ChatMessage(role="system", content="be brief"),
        ChatMessage(role="user", content="hi"),
    ]
    with pytest.raises(ValueError) as refused:
        extractor.encode([conversation])
    assert str(refused.value) == (
        "the chat template of backbone tiny-random refuses this conversation (roles system, "
        "user): System role not supported. Give it a conversation its template takes, or set "
        "model.chat_template: false to read the messages as plain text (and train the router "
        "again)"
    )
    assert extractor.encode([[conversation[1]]]).shape == (1, backbone.hidden_size)
