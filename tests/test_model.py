"""The router model (model.py): an untrained head, the feature normaliser, both input paths."""

from __future__ import annotations

import pytest
import torch
from router_support import (
    PROMPTS,
    prompts_of,
    train_briefly,
)

from fugu_lite.config import ModelConfig
from fugu_lite.feature_cache import (
    compute_features,
)
from fugu_lite.model import RouterModel
from fugu_lite.schemas import RewardRecord
from fugu_lite.training_common import make_loader, make_model


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


def test_a_fitted_normaliser_is_kept_on_another_train_split(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig
) -> None:
    """A head continued on other records (RL from SFT's checkpoint on another file) keeps the
    normaliser its weights were trained with: refitted, the same weights see other inputs."""
    model = make_model(tiny_model_cfg, records[0].worker_ids)
    make_loader(records, model, "train", batch_size=8, shuffle=False)
    fitted = (model.feature_mean.clone(), model.feature_scale.clone())
    train = [r for r in records if r.split == "train"]
    make_loader(train[: len(train) // 3], model, "train", batch_size=8, shuffle=False)
    assert torch.equal(model.feature_mean, fitted[0])
    assert torch.equal(model.feature_scale, fitted[1])
