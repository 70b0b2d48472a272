"""What the router tests share (test_features, test_feature_cache, test_checkpoint, ...): prompts,
a router trained in memory, a guard against loading the backbone, backbones made on the fly."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import save_tiny_backbone

import fugu_lite.backbones as backbones_module
import fugu_lite.feature_cache as feature_cache_module
from fugu_lite.config import ModelConfig
from fugu_lite.model import RouterModel
from fugu_lite.schemas import RewardRecord
from fugu_lite.train_sft import sft_loss
from fugu_lite.training_common import (
    make_loader,
    make_model,
    optimizer_parameters,
    seed_everything,
)

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
    optimizer = torch.optim.Adam(optimizer_parameters(model), lr=0.05)
    for _ in range(epochs):
        for batch in loader:
            loss, _ = sft_loss(model(features=batch["features"]), batch["rewards"], 0.1)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return model.eval()


def prompts_of(records: list[RewardRecord]) -> list:
    return [record.prompt for record in records]


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
