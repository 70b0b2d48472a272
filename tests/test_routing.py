"""Routing (routing.py): the trained policy, opt-outs, loaded routers."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from router_support import (
    forbid_backbone_loading,
    train_briefly,
)

from fugu_lite.config import ModelConfig
from fugu_lite.feature_cache import (
    compute_features,
)
from fugu_lite.model import load_router
from fugu_lite.routing import NoWorkerLeftError, allowed_workers, route_prompt, route_prompts
from fugu_lite.schemas import RewardRecord


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


def test_an_empty_batch_routes_to_no_decisions_without_the_backbone(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """route_prompts(model, []) (a batch filtered down to nothing) failed with torch's
    "stack expects a non-empty TensorList", from deep inside the feature cache."""
    model = train_briefly(records, tiny_model_cfg, epochs=1)
    model.extractor = None
    forbid_backbone_loading(monkeypatch)
    assert route_prompts(model, []) == []
    assert route_prompts(model, [], exclude=["coder"]) == []
    assert model.features_for([]).shape == (0, model.feature_dim)


def test_an_unknown_excluded_worker_is_matched_to_the_worker_it_is_close_to() -> None:
    """`--exclude Coder` or `--exclude mathematicain` listed the workers but left the reader
    to spot which one was meant."""
    workers = ["cheap-small", "coder", "mathematician"]
    with pytest.raises(NoWorkerLeftError) as error:
        allowed_workers(workers, ["mathematicain", "Coder"])
    assert str(error.value) == (
        "cannot exclude unknown worker(s) ['Coder', 'mathematicain'] (did you mean 'coder' "
        "for 'Coder', 'mathematician' for 'mathematicain'?); this router's workers: "
        "cheap-small, coder, mathematician"
    )
    with pytest.raises(NoWorkerLeftError) as error:
        allowed_workers(workers, ["zzz"])
    assert "did you mean" not in str(error.value)


def test_a_prompt_the_backbone_gives_nan_features_for_is_refused_not_routed_to_the_first(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig
) -> None:
    """A backbone whose weights blow up on some tokens (a damaged row of its embeddings)
    gave NaN probabilities for prompts holding them: argmax took the first worker, silently,
    and `route --json` printed NaN, which is not JSON."""
    from fugu_lite.backbones import load_backbone
    from fugu_lite.cost_routing import route_with_reward_head as route_reward
    from fugu_lite.features import FeatureExtractor
    from fugu_lite.reward_head import CostAwareRouter

    backbone = load_backbone("tiny-random")
    damaged = backbone.tokenizer.convert_tokens_to_ids("z")
    backbone.model.get_input_embeddings().weight.data[damaged] = float("inf")
    model = train_briefly(records, tiny_model_cfg, epochs=1)
    # torch: an ONNX export of these weights would be cached as tiny-random's
    torch_cfg = tiny_model_cfg.model_copy(update={"runtime": "torch"})
    model.extractor = FeatureExtractor(backbone, torch_cfg)
    head = CostAwareRouter(tiny_model_cfg, model.worker_ids, 32, [1], 0.5, 0.05)
    head.extractor = model.extractor
    prompts = ["hello", "a fizz", "buzz"]
    assert route_prompt(model, "hello").worker in model.worker_ids
    for route in (lambda: route_prompts(model, prompts), lambda: route_reward(head, prompts, 0)):
        with pytest.raises(ValueError) as refused:
            route()
        assert str(refused.value) == (
            "routing gave NaN or infinite probabilities for 2 of the 3 prompts (the first: "
            "'a fizz'): the backbone tiny-random gives NaN, infinite or overflowing features "
            "for them (its weights are damaged, or overflow on these prompts); check "
            "model.backbone (a local folder: its weight files), or choose another backbone"
        )
