"""The SFT and RL losses on hand-made tensors, and the stages end to end on generated records."""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import shutil
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from conftest import generated_records, save_tiny_backbone
from torch.utils.data import DataLoader

import fugu_lite
import fugu_lite.backbones as backbones_module
import fugu_lite.feature_cache as feature_cache_module
import fugu_lite.pipeline as pipeline_module
from fugu_lite import sources_digest
from fugu_lite.checkpoint import CheckpointError
from fugu_lite.config import (
    ESConfig,
    ESTrainingConfig,
    ModelConfig,
    PipelineConfig,
    RLConfig,
    RLTrainingConfig,
    SFTConfig,
    SFTTrainingConfig,
)
from fugu_lite.cost_weighting import training_records
from fugu_lite.evaluate_checkpoint import run_evaluation, run_pareto_evaluation
from fugu_lite.model import RouterModel, load_router
from fugu_lite.pipeline import train_pipeline
from fugu_lite.schemas import RewardRecord
from fugu_lite.train_es import train_es
from fugu_lite.train_rl import (
    RLRun,
    contextual_bandit_loss,
    optimizer_step,
    train_batch,
    train_rl,
)
from fugu_lite.train_rl import prepare_run as prepare_rl_run
from fugu_lite.train_rl import run_epoch as rl_run_epoch
from fugu_lite.train_sft import (
    BestEpoch,
    keep_best_epoch,
    prepare_run,
    sft_loss,
    soft_targets,
    tie_mask,
    train_sft,
    train_step,
)
from fugu_lite.train_sft import run_epoch as sft_run_epoch
from fugu_lite.training_common import (
    TrainingDiverged,
    epoch_line,
    evaluate_loader,
    make_loader,
    make_model,
    move_batch,
    nothing_to_learn,
    optimizer_parameters,
    records_digest,
    require_finite_features,
    save_stage,
    stage_inputs,
)

REWARDS = torch.tensor([[0.0, 1.0, 0.2], [0.9, 0.1, 0.3], [0.2, 0.4, 1.0], [0.5, 0.5, 0.5]])
BEST = [1, 0, 2]  # best worker of the first three rows; the last row is a tie

SFT_TRAINING = SFTTrainingConfig(epochs=8, batch_size=16, learning_rate=0.05)
RL_TRAINING = RLTrainingConfig(epochs=8, batch_size=16, learning_rate=0.05)


def kl(target: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """KL(target || softmax(logits)) per row, written out."""
    log_p = torch.log_softmax(logits, dim=-1)
    return (target * (torch.log(target) - log_p)).sum(dim=-1)


# --- sft_loss -------------------------------------------------------------------------------


def test_soft_targets_are_a_tempered_softmax_of_the_rewards() -> None:
    targets = soft_targets(REWARDS, 0.5)
    for row, rewards in zip(targets, REWARDS, strict=True):
        weights = [math.exp(r / 0.5) for r in rewards.tolist()]
        assert row.tolist() == pytest.approx([w / sum(weights) for w in weights], rel=1e-5)
    cold = soft_targets(REWARDS[:3], 0.01)
    assert cold.argmax(dim=-1).tolist() == BEST
    assert cold.max(dim=-1).values.min() > 0.99
    assert tie_mask(REWARDS).tolist() == [False, False, False, True]


def test_a_row_whose_workers_differ_by_a_little_is_not_a_tie() -> None:
    """Only rows where every worker earned the same reward are ties (skipped by `skip`): the
    hand-made rows differed by 0.8 or more, so a tie test that took rows within 0.2 of each
    other as ties (dropping real, if small, routing signal) passed every test."""
    rewards = torch.tensor([[0.5, 0.51, 0.5], [0.0, 0.0, 0.001], [0.3, 0.3, 0.3]])
    assert tie_mask(rewards).tolist() == [False, False, True]
    # Cost-weighted rewards of two right answers differ by the cost term alone, which a small
    # cost weight makes tiny (0.01 x a cost difference of 1e-4 of the reference cost): that
    # is the cheaper worker's signal, not a tie (a tolerance of 1e-4 passed the rows above).
    both_right = torch.tensor([[1.0 - 0.01 * 0.5000, 1.0 - 0.01 * 0.5001]])
    assert tie_mask(both_right).tolist() == [False]


def test_sft_loss_is_the_mean_kl_to_the_soft_targets() -> None:
    torch.manual_seed(0)
    logits = torch.randn(4, 3)
    loss, metrics = sft_loss(logits, REWARDS, temperature=0.2)
    expected = kl(soft_targets(REWARDS, 0.2), logits).mean()
    assert float(loss) == pytest.approx(float(expected), rel=1e-5)
    assert metrics["loss"] == pytest.approx(float(expected), rel=1e-5)
    assert metrics["tie_fraction"] == 0.25


def test_sft_loss_is_zero_when_the_policy_is_the_target() -> None:
    shift = torch.tensor([[3.0], [-1.0], [0.5], [7.0]])  # logits are defined up to a constant
    loss, _ = sft_loss(REWARDS / 0.3 + shift, REWARDS, temperature=0.3)
    assert abs(float(loss)) < 1e-6
    other, _ = sft_loss(torch.zeros(4, 3), REWARDS, temperature=0.3)
    assert float(other) > 0.1


def test_sft_loss_gradient_pulls_the_policy_to_the_target() -> None:
    logits = torch.zeros(4, 3, requires_grad=True)
    loss, _ = sft_loss(logits, REWARDS, temperature=0.1)
    loss.backward()
    expected = (torch.softmax(logits.detach(), -1) - soft_targets(REWARDS, 0.1)) / 4
    torch.testing.assert_close(logits.grad, expected)
    for row, best in enumerate(BEST):
        assert logits.grad[row].argmin() == best  # a descent step raises the best worker


def test_skip_drops_tie_rows_and_uniform_keeps_them() -> None:
    torch.manual_seed(1)
    logits = torch.randn(4, 3)
    skipped, metrics = sft_loss(logits, REWARDS, 0.1, tie_handling="skip")
    without_ties, _ = sft_loss(logits[:3], REWARDS[:3], 0.1, tie_handling="uniform")
    assert float(skipped) == pytest.approx(float(without_ties), rel=1e-6)
    assert metrics["tie_fraction"] == 0.25

    kept, _ = sft_loss(logits, REWARDS, 0.1, tie_handling="uniform")
    tie_row = kl(torch.full((1, 3), 1 / 3), logits[3:]).sum()
    assert float(kept) == pytest.approx((3 * float(without_ties) + float(tie_row)) / 4, rel=1e-5)
    assert float(kept) != pytest.approx(float(skipped))


def test_skip_with_only_ties_gives_zero_loss_and_no_gradient() -> None:
    logits = torch.randn(2, 3, requires_grad=True)
    ties = torch.tensor([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]])
    loss, metrics = sft_loss(logits, ties, 0.1, tie_handling="skip")
    loss.backward()
    assert loss.item() == 0.0
    assert torch.count_nonzero(logits.grad) == 0
    assert metrics["tie_fraction"] == 1.0


def test_unknown_tie_handling_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown tie_handling 'drop'; use uniform or skip"):
        sft_loss(torch.zeros(4, 3), REWARDS, 0.1, tie_handling="drop")


# --- the seed's contextual_bandit_loss ------------------------------------------------------


def test_expected_reward_loss_is_minus_the_expected_reward_minus_entropy_bonus() -> None:
    torch.manual_seed(2)
    logits = torch.randn(4, 3)
    probabilities = torch.softmax(logits, -1)
    expected = float((probabilities * REWARDS).sum(-1).mean())
    entropy = float(-(probabilities * probabilities.log()).sum(-1).mean())
    loss, metrics = contextual_bandit_loss(
        logits, REWARDS, estimator="expected_reward", entropy_coefficient=0.05
    )
    assert float(loss) == pytest.approx(-expected - 0.05 * entropy, rel=1e-5)
    assert metrics["sampled_reward"] == pytest.approx(expected, rel=1e-5)
    assert metrics["entropy"] == pytest.approx(entropy, rel=1e-5)
    assert metrics["zero_spread_fraction"] == 0.25


def test_expected_reward_gradient_raises_the_best_worker() -> None:
    logits = torch.zeros(3, 3, requires_grad=True)
    loss, _ = contextual_bandit_loss(
        logits, REWARDS[:3], estimator="expected_reward", entropy_coefficient=0.0
    )
    loss.backward()
    before = torch.softmax(logits.detach(), -1)
    after = torch.softmax(logits.detach() - 1.0 * logits.grad, -1)
    for row, best in enumerate(BEST):
        assert logits.grad[row].argmin() == best
        assert after[row, best] > before[row, best]


@pytest.mark.parametrize("estimator", ["reinforce", "expected_reward"])
def test_rls_zero_spread_fraction_counts_only_rows_whose_workers_all_tie(estimator: str) -> None:
    """zero_spread_fraction is the share of prompts RL learns nothing from: those where every
    worker earned the same. The tested rows differed by 0.8 or more, so a tolerance taking
    rows within 0.01 of each other (a cost weight's small but real signal) passed every test."""
    rewards = torch.tensor([[0.5, 0.501, 0.5], [0.995, 0.994999, 0.995], [0.3, 0.3, 0.3]])
    _, metrics = contextual_bandit_loss(torch.zeros(3, 3), rewards, estimator=estimator)
    assert metrics["zero_spread_fraction"] == pytest.approx(1 / 3)


def test_reinforce_moves_probability_to_the_best_worker() -> None:
    torch.manual_seed(0)
    logits = torch.zeros(3, 3, requires_grad=True)
    optimizer = torch.optim.Adam([logits], lr=0.1)
    for _ in range(30):
        loss, metrics = contextual_bandit_loss(
            logits, REWARDS[:3], estimator="reinforce", rollouts_per_prompt=8
        )
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    probabilities = torch.softmax(logits.detach(), -1)
    assert probabilities.argmax(-1).tolist() == BEST
    assert probabilities[range(3), BEST].min() > 0.6
    assert 0.0 <= metrics["sampled_reward"] <= 1.0


def test_reinforces_sampled_reward_is_the_mean_reward_of_its_rollouts() -> None:
    """sampled_reward (the RL step's line and history) is the mean reward of the workers the
    rollouts chose: a policy all but certain of worker 0 earns worker 0's mean reward. Only
    expected_reward's was read, so reporting the best rollout's reward passed every test."""
    torch.manual_seed(0)
    logits = torch.tensor([[30.0, 0.0, 0.0], [30.0, 0.0, 0.0]])
    rewards = torch.tensor([[0.2, 1.0, 0.0], [0.6, 0.0, 1.0]])
    _, metrics = contextual_bandit_loss(logits, rewards, rollouts_per_prompt=8)
    assert metrics["sampled_reward"] == pytest.approx(0.4)


def test_reinforces_sampled_reward_is_what_its_rollouts_earned_not_the_expected_reward() -> None:
    """A uniform policy over a worker earning 1 and one earning 0 expects 0.5, but its one
    rollout earns 1 or 0. The test above reads a near-certain policy, whose rollouts earn its
    expected reward, so reporting the expected reward as sampled_reward passed every test."""
    rewards = torch.tensor([[0.0, 1.0]])
    earned = set()
    for seed in range(8):
        torch.manual_seed(seed)
        _, metrics = contextual_bandit_loss(torch.zeros(1, 2), rewards, rollouts_per_prompt=1)
        earned.add(metrics["sampled_reward"])
    assert earned == {0.0, 1.0}


def test_reinforce_is_reproducible_with_a_seed() -> None:
    def sampled(seed: int) -> tuple[float, torch.Tensor]:
        torch.manual_seed(seed)
        logits = torch.zeros(4, 3, requires_grad=True)
        loss, metrics = contextual_bandit_loss(logits, REWARDS, rollouts_per_prompt=4)
        loss.backward()
        return metrics["sampled_reward"], logits.grad

    first, again, other = sampled(3), sampled(3), sampled(4)
    assert first[0] == again[0]
    assert torch.equal(first[1], again[1])
    assert not torch.equal(first[1], other[1])


def test_reinforce_gradient_is_unbiased() -> None:
    """Averaged over many rollouts, REINFORCE's gradient is the expected-reward gradient."""
    torch.manual_seed(0)
    start = torch.tensor([[0.5, -0.2, 0.1], [0.0, 1.0, -1.0], [0.3, 0.3, -0.6]])
    gradients = {}
    for estimator in ("expected_reward", "reinforce"):
        logits = start.clone().requires_grad_(True)
        loss, _ = contextual_bandit_loss(
            logits,
            REWARDS[:3],
            estimator=estimator,
            rollouts_per_prompt=40000,
            entropy_coefficient=0.0,
        )
        loss.backward()
        gradients[estimator] = logits.grad
    torch.testing.assert_close(
        gradients["reinforce"], gradients["expected_reward"], atol=4e-3, rtol=0
    )


def test_normalised_advantages_stay_finite_on_ties() -> None:
    logits = torch.zeros(2, 3, requires_grad=True)
    ties = torch.tensor([[0.5, 0.5, 0.5], [1.0, 1.0, 1.0]])
    loss, metrics = contextual_bandit_loss(logits, ties, normalize_advantage=True)
    loss.backward()
    assert math.isfinite(loss.item())
    assert torch.isfinite(logits.grad).all()
    assert metrics["zero_spread_fraction"] == 1.0


def test_reinforce_learns_nothing_from_a_prompt_whose_workers_tie() -> None:
    """The advantage is the sampled reward minus the expected one: when every worker earns
    the same, each rollout's advantage is 0, whatever worker it sampled."""
    torch.manual_seed(0)
    logits = torch.tensor([[0.5, -0.2, 0.1], [0.0, 1.0, -1.0]], requires_grad=True)
    ties = torch.tensor([[0.7, 0.7, 0.7], [1.0, 1.0, 1.0]])
    loss, _ = contextual_bandit_loss(logits, ties, entropy_coefficient=0.0)
    loss.backward()
    torch.testing.assert_close(logits.grad, torch.zeros(2, 3), atol=1e-6, rtol=0)


def test_normalised_advantages_of_one_rollout_of_one_prompt_stay_finite() -> None:
    """A last batch of one prompt with rollouts_per_prompt=1 has one advantage: it has no
    standard deviation to divide by, so it is left as it is."""
    logits = torch.zeros(1, 3, requires_grad=True)
    loss, _ = contextual_bandit_loss(
        logits, REWARDS[:1], rollouts_per_prompt=1, normalize_advantage=True
    )
    loss.backward()
    assert math.isfinite(loss.item())
    assert torch.isfinite(logits.grad).all()


def test_normalised_advantages_are_standardised_over_the_batchs_rollouts() -> None:
    """normalize_advantage divides the rollouts' advantages (sampled minus expected reward) by
    their spread after centring them; no test read its loss, so a setting that did nothing
    passed every one."""
    logits = torch.tensor([[0.5, -0.2, 0.1], [0.0, 1.0, -1.0], [0.3, 0.3, -0.6]])
    torch.manual_seed(7)
    actions = torch.distributions.Categorical(logits=logits).sample((4,))
    sampled = REWARDS[:3].gather(1, actions.T).T
    advantage = sampled - (torch.softmax(logits, -1) * REWARDS[:3]).sum(-1)
    advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-6)
    log_prob = torch.log_softmax(logits, -1).gather(1, actions.T).T
    torch.manual_seed(7)
    loss, _ = contextual_bandit_loss(
        logits, REWARDS[:3], rollouts_per_prompt=4, entropy_coefficient=0.0,
        normalize_advantage=True,
    )  # fmt: skip
    assert float(loss) == pytest.approx(float(-(log_prob * advantage).mean()), rel=1e-5)


def test_an_rl_optimizer_step_leaves_no_gradient_for_the_next() -> None:
    model = RouterModel(ModelConfig(head="linear", normalize_features=False), ["a", "b"], 3)
    optimizer = torch.optim.AdamW(optimizer_parameters(model), lr=0.1)
    run = RLRun(model, RL_TRAINING, DataLoader([]), None, optimizer, fix="")
    loss, _ = contextual_bandit_loss(model(features=torch.randn(2, 3)), REWARDS[:2, :2])
    loss.backward()
    optimizer_step(run, "epoch 1, step 1", {})
    assert run.global_step == 1
    assert all(parameter.grad is None for parameter in optimizer_parameters(model))


def test_rl_whose_logits_overflow_stops_naming_them_and_what_to_change() -> None:
    """Weights that are finite but huge (a learning rate far too high) give infinite logits:
    the step stops naming them and the setting, not with torch's dump of a NaN tensor."""
    model = RouterModel(ModelConfig(head="linear", normalize_features=False), ["a", "b"], 3)
    with torch.no_grad():
        model.output_layer.weight.fill_(3e38)
    optimizer = torch.optim.AdamW(optimizer_parameters(model), lr=0.1)
    fix = "lower training.learning_rate (now 0.1) and run it again"
    run = RLRun(model, RL_TRAINING, DataLoader([]), None, optimizer, fix=fix)
    batch = {"features": torch.ones(2, 3), "rewards": REWARDS[:2, :2]}
    with pytest.raises(TrainingDiverged) as raised:
        train_batch(run, batch, epoch=1, step=0)
    message = str(raised.value)
    assert message.startswith("RL diverged at epoch 1, step 1: its logits became NaN or infinite")
    assert message.endswith(fix)


def test_an_accumulated_rl_batch_adds_its_share_of_the_gradient() -> None:
    """With gradient_accumulation_steps=2 a batch adds half its loss's gradient, so the
    step's gradient is the mean over its batches, not their sum."""
    model = RouterModel(ModelConfig(head="linear", normalize_features=False), ["a", "b"], 3)
    training = RL_TRAINING.model_copy(
        update={"estimator": "expected_reward", "gradient_accumulation_steps": 2}
    )
    optimizer = torch.optim.AdamW(optimizer_parameters(model), lr=0.1)
    batch = {"features": torch.randn(2, 3), "rewards": REWARDS[:2, :2]}
    run = RLRun(model, training, DataLoader([batch, batch]), None, optimizer, fix="")
    train_batch(run, batch, epoch=1, step=0)  # the first of two: no step yet
    accumulated = model.output_layer.weight.grad.clone()
    model.zero_grad()
    loss, _ = contextual_bandit_loss(
        model(features=batch["features"]),
        batch["rewards"],
        estimator="expected_reward",
        entropy_coefficient=training.entropy_coefficient,
    )
    loss.backward()
    torch.testing.assert_close(accumulated, model.output_layer.weight.grad / 2)
    assert run.global_step == 0


def test_the_rl_stage_passes_its_entropy_coefficient_to_the_loss(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig
) -> None:
    """A step's loss takes training.entropy_coefficient times the policy's entropy off (the
    stage's tests ran the loss's own default, so a stage that never passed it passed them)."""
    losses = {}
    for coefficient in (0.0, 2.0):
        model = make_model(tiny_model_cfg, records[0].worker_ids)
        training = RL_TRAINING.model_copy(
            update={"estimator": "expected_reward", "entropy_coefficient": coefficient}
        )
        run = prepare_rl_run(records, model, training)
        batch = {"features": torch.zeros(4, model.feature_dim), "rewards": REWARDS}
        losses[coefficient] = train_batch(run, batch, epoch=1, step=0)["loss"]
    # the untrained head is uniform over the three workers: its entropy is log 3
    assert losses[0.0] - losses[2.0] == pytest.approx(2.0 * math.log(3), rel=1e-5)


@pytest.mark.parametrize("normalize_advantage", [False, True])
def test_the_rl_stage_passes_its_estimator_rollouts_and_normalisation_to_the_loss(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig, normalize_advantage: bool
) -> None:
    """A step's loss is contextual_bandit_loss under training's estimator, rollouts_per_prompt
    and normalize_advantage: the stage's tests ran the default expected_reward, so a stage
    that never passed any of the three (always the exact gradient) passed every one."""
    model = make_model(tiny_model_cfg, records[0].worker_ids)
    torch.manual_seed(0)
    with torch.no_grad():
        model.output_layer.weight.normal_()
    training = RL_TRAINING.model_copy(
        update={
            "estimator": "reinforce",
            "rollouts_per_prompt": 3,
            "normalize_advantage": normalize_advantage,
        }
    )
    run = prepare_rl_run(records, model, training)
    batch = {"features": torch.randn(4, model.feature_dim), "rewards": REWARDS}
    with torch.no_grad():
        logits = model(features=batch["features"])
    torch.manual_seed(1)
    _, expected = contextual_bandit_loss(
        logits, REWARDS, "reinforce", 3, training.entropy_coefficient, normalize_advantage
    )
    torch.manual_seed(1)
    assert train_batch(run, batch, epoch=1, step=0) == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("estimator", ["reinforce", "expected_reward"])
def test_the_seed_rl_module_still_builds_a_loop_of_its_own(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig, estimator: str
) -> None:
    """The seed's train_rl.py offered RewardRecord, RLConfig, make_model and make_loader to a
    script writing its own loop; make_model went when start_stage took over building the
    model, so `from fugu_lite.train_rl import make_model` failed."""
    from fugu_lite import train_rl as seed

    assert seed.RewardRecord is RewardRecord and seed.RLConfig is RLConfig
    model = seed.make_model(tiny_model_cfg, records[0].worker_ids)
    loader = seed.make_loader(records, model, "train", batch_size=8, shuffle=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05)
    before = model.head.weight.detach().clone()
    inputs, rewards = move_batch(next(iter(loader)), model.device_ref)
    loss, _ = seed.contextual_bandit_loss(model(**inputs), rewards, estimator=estimator)
    loss.backward()
    optimizer.step()
    assert not torch.equal(model.head.weight, before)


def test_normalize_advantage_without_reinforce_is_said_to_change_nothing(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig, tmp_path: Path
) -> None:
    """normalize_advantage: true with the default estimator (expected_reward, which samples
    no advantages) trained exactly as false did, without a word."""
    reports = {}
    for estimator, normalize in (("expected_reward", True), ("reinforce", True)):
        training = RL_TRAINING.model_copy(
            update={"epochs": 1, "estimator": estimator, "normalize_advantage": normalize}
        )
        config = RLConfig(model=tiny_model_cfg, training=training)
        reports[estimator] = train_rl(records, config, tmp_path / estimator)
    (warning,) = reports["expected_reward"]["warnings"]
    assert warning.startswith("training.normalize_advantage applies to the reinforce estimator")
    assert reports["reinforce"]["warnings"] == []


def test_bad_estimator_or_rollouts_are_refused() -> None:
    with pytest.raises(ValueError, match="Unknown estimator: ppo"):
        contextual_bandit_loss(torch.zeros(4, 3), REWARDS, estimator="ppo")
    with pytest.raises(ValueError, match="rollouts_per_prompt must be at least 1"):
        contextual_bandit_loss(torch.zeros(4, 3), REWARDS, rollouts_per_prompt=0)


# --- the stages on generated records --------------------------------------------------------


def untrained_validation(records: list[RewardRecord], cfg: ModelConfig) -> dict[str, float]:
    """Validation metrics of the zero-initialised (uniform) router."""
    model = make_model(cfg, records[0].worker_ids)
    make_loader(records, model, "train", batch_size=16, shuffle=False)
    return evaluate_loader(model, make_loader(records, model, "validation", 16, shuffle=False))


def mean_validation(records: list[RewardRecord]) -> tuple[float, float]:
    """(random-worker mean reward, oracle mean reward) on the validation split."""
    rows = [r.rewards for r in records if r.split == "validation"]
    return (
        sum(sum(r) / len(r) for r in rows) / len(rows),
        sum(max(r) for r in rows) / len(rows),
    )


def check_report_file(directory: Path, report: dict) -> None:
    written = json.loads((directory / "training_report.json").read_text())
    assert written["history"] == json.loads(json.dumps(report["history"]))
    assert written["stage"] == report["stage"]


def test_evaluate_loader_gives_the_per_prompt_means_of_known_logits(
    tiny_model_cfg: ModelConfig,
) -> None:
    """Three prompts in batches of 2, the head's logits the features themselves: each metric
    is its mean over the prompts (not over the batches, nor a batch's mean of means)."""
    cfg = tiny_model_cfg.model_copy(update={"normalize_features": False})
    model = RouterModel(cfg, ["a", "b"], feature_dim=2)
    with torch.no_grad():
        model.output_layer.weight.copy_(torch.eye(2))
    features = torch.tensor([[0.0, math.log(3.0)], [math.log(4.0), 0.0], [0.0, 0.0]])
    rewards = torch.tensor([[1.0, 0.0], [1.0, 0.5], [0.0, 1.0]])
    loader = [
        {"features": features[:2], "rewards": rewards[:2]},
        {"features": features[2:], "rewards": rewards[2:]},
    ]
    probabilities = [[0.25, 0.75], [0.8, 0.2], [0.5, 0.5]]
    entropies = [-sum(p * math.log(p) for p in row) for row in probabilities]
    metrics = evaluate_loader(model, loader)  # type: ignore[arg-type]
    assert metrics == pytest.approx(
        {
            "reward": (0.0 + 1.0 + 0.0) / 3,  # argmax: b, a, a (a tie goes to the first)
            "expected_reward": (0.25 + (0.8 + 0.1) + 0.5) / 3,
            "oracle_reward": (1.0 + 1.0 + 1.0) / 3,
            "entropy": sum(entropies) / 3,
        }
    )
    assert model.training  # put back in the mode it was in


def test_validation_figures_are_taken_without_dropout(tiny_model_cfg: ModelConfig) -> None:
    """evaluate_loader scores the head as it routes (eval mode): in training mode its dropout
    made each epoch's validation reward, which chooses SFT's kept epoch, a random draw."""
    cfg = tiny_model_cfg.model_copy(
        update={"head": "mlp", "head_hidden": 64, "head_dropout": 0.5, "normalize_features": False}
    )
    model = RouterModel(cfg, ["a", "b", "c"], feature_dim=8)
    torch.manual_seed(0)
    with torch.no_grad():
        model.output_layer.weight.normal_()
    features, rewards = torch.randn(32, 8), torch.rand(32, 3)
    loader = [{"features": features, "rewards": rewards}]
    probabilities = model.probabilities(features)
    expected = float((probabilities * rewards).sum(-1).mean())
    model.train()
    for _ in range(2):
        metrics = evaluate_loader(model, loader)  # type: ignore[arg-type]
        assert metrics["expected_reward"] == pytest.approx(expected, rel=1e-5)
    assert model.training
    model.eval()  # a model scored as it routes stays so (not switched to training)
    evaluate_loader(model, loader)  # type: ignore[arg-type]
    assert not model.training


def test_train_sft_beats_the_uniform_router_and_reports_each_epoch(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig, tmp_path: Path
) -> None:
    baseline = untrained_validation(records, tiny_model_cfg)
    random_reward, oracle = mean_validation(records)
    assert baseline["expected_reward"] == pytest.approx(random_reward, rel=1e-5)

    report = train_sft(records, SFTConfig(model=tiny_model_cfg, training=SFT_TRAINING), tmp_path)
    check_report_file(tmp_path, report)
    assert report["stage"] == "sft"
    assert report["worker_ids"] == records[0].worker_ids
    assert [epoch["epoch"] for epoch in report["history"]] == list(range(1, 9))
    for epoch in report["history"]:
        assert {"loss", "tie_fraction", "reward", "expected_reward"} <= set(epoch["train"])
        assert {"reward", "expected_reward", "oracle_reward", "entropy"} <= set(epoch["validation"])
        assert epoch["validation"]["oracle_reward"] == pytest.approx(oracle, rel=1e-5)
    final = report["history"][-1]
    assert final["train"]["loss"] < report["history"][0]["train"]["loss"]
    assert final["validation"]["expected_reward"] > baseline["expected_reward"] + 0.05
    assert report["best_validation_reward"] > baseline["reward"] + 0.1
    assert report["best_validation_reward"] <= oracle + 1e-6
    best = report["history"][report["best_epoch"] - 1]["validation"]["reward"]
    assert best == report["best_validation_reward"]
    assert best == max(epoch["validation"]["reward"] for epoch in report["history"])

    # the checkpoint holds the best epoch, not the last one
    loaded = load_router(tmp_path, tiny_model_cfg, records[0].worker_ids)
    loader = make_loader(records, loaded, "validation", batch_size=16, shuffle=False)
    reloaded = evaluate_loader(loaded, loader)
    assert reloaded["reward"] == pytest.approx(report["best_validation_reward"], abs=1e-6)
    meta = json.loads((tmp_path / "router.json").read_text())
    assert meta["metadata"]["stage"] == "sft"
    assert meta["metadata"]["best_epoch"] == report["best_epoch"]


def test_the_best_epoch_is_the_first_with_the_highest_validation_reward_and_is_kept(
    tiny_model_cfg: ModelConfig,
) -> None:
    """A later epoch that only ties the best validation reward does not replace it, and the
    kept epoch's weights are those loaded back at the end, whatever the model holds then."""
    model = RouterModel(tiny_model_cfg, ["a", "b"], feature_dim=2)
    best = BestEpoch()

    def weights(value: float) -> torch.Tensor:
        with torch.no_grad():
            model.output_layer.weight.fill_(value)
        return model.output_layer.weight.detach().clone()

    first = weights(1.0)
    best.offer(1, 0.5, model)
    weights(2.0)
    best.offer(2, 0.5, model)  # a tie
    weights(3.0)
    best.offer(3, 0.4, model)
    assert (best.epoch, best.reward) == (1, 0.5)
    weights(4.0)
    keep_best_epoch(SimpleNamespace(model=model, best=best))  # type: ignore[arg-type]
    assert torch.equal(model.output_layer.weight, first)


def test_the_first_validated_epoch_is_kept_whatever_its_reward(
    tiny_model_cfg: ModelConfig,
) -> None:
    """Cost-weighted rewards go below zero (below -1 for a cost weight of 2 and costs over the
    reference), and a validation split every worker fails scores 0: an epoch is kept
    however low its reward (a best starting at 0 kept none of them,
    which the report would give as a run without validation)."""
    model = RouterModel(tiny_model_cfg, ["a", "b"], feature_dim=2)
    best = BestEpoch()
    best.offer(1, -2.5, model)
    assert (best.epoch, best.reward) == (1, -2.5) and best.state is not None
    best.offer(2, 0.0, model)
    assert (best.epoch, best.reward) == (2, 0.0)


def test_sft_loads_back_a_best_epoch_before_the_last_and_says_which_it_kept(
    records: list[RewardRecord],
    tiny_model_cfg: ModelConfig,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Every other end-to-end run's last epoch was its best, so SFT left with its last
    epoch's weights (keep_best_epoch never called) passed them all. Validation records whose
    rewards are reversed (the train split's best worker their worst) make training lower
    the validation reward: the checkpoint holds the kept epoch, not the last."""
    reversed_validation = [
        r.model_copy(update={"rewards": r.rewards[::-1]}) if r.split == "validation" else r
        for r in records
    ]
    training = SFT_TRAINING.model_copy(update={"epochs": 4})
    config = SFTConfig(model=tiny_model_cfg, training=training)
    report = train_sft(reversed_validation, config, tmp_path)
    kept, history = report["best_epoch"], report["history"]
    assert kept < training.epochs  # else the test shows nothing
    loaded = load_router(tmp_path, tiny_model_cfg, records[0].worker_ids)
    loader = make_loader(reversed_validation, loaded, "validation", batch_size=16, shuffle=False)
    reloaded = evaluate_loader(loaded, loader)["expected_reward"]
    assert reloaded == pytest.approx(history[kept - 1]["validation"]["expected_reward"], abs=1e-6)
    assert reloaded != pytest.approx(history[-1]["validation"]["expected_reward"], abs=1e-6)
    said = f"SFT: kept epoch {kept} (validation reward {report['best_validation_reward']:.4f})"
    assert said in capsys.readouterr().err


def test_sfts_learning_rate_anneals_once_over_every_step_of_every_epoch(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig
) -> None:
    model = make_model(tiny_model_cfg, records[0].worker_ids)
    training = SFT_TRAINING.model_copy(update={"epochs": 3})
    run = prepare_run(records, model, training)
    steps = training.epochs * len(run.train_loader)
    rates = [run.scheduler.get_last_lr()[0]]
    for _ in range(steps):
        run.optimizer.step()
        run.scheduler.step()
        rates.append(run.scheduler.get_last_lr()[0])
    assert rates[0] == training.learning_rate
    assert all(later <= earlier for earlier, later in itertools.pairwise(rates))
    assert rates[steps // 2] == pytest.approx(training.learning_rate / 2)
    assert rates[-1] == pytest.approx(0.0, abs=1e-12)


def test_an_sft_steps_gradient_is_its_own_batchs_alone(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig
) -> None:
    """Each SFT step's gradient is its batch's loss gradient at the weights of that step, not
    the sum of every step's so far (no test read a second step's gradient)."""
    model = make_model(tiny_model_cfg, records[0].worker_ids)
    training = SFT_TRAINING.model_copy(update={"max_grad_norm": math.inf})
    run = prepare_run(records, model, training)
    first, second = itertools.islice(run.train_loader, 2)
    train_step(run, first, epoch=1)
    fresh = RouterModel(tiny_model_cfg, model.worker_ids, model.feature_dim)
    fresh.load_state_dict(model.state_dict())
    logits = fresh(features=second["features"])
    loss, _ = sft_loss(logits, second["rewards"], training.temperature, training.tie_handling)
    loss.backward()
    train_step(run, second, epoch=1)
    torch.testing.assert_close(model.output_layer.weight.grad, fresh.output_layer.weight.grad)


def test_sfts_steps_anneal_the_learning_rate(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig
) -> None:
    """Each SFT step advances the cosine schedule, so the last step of the last epoch ends
    at a learning rate of 0 (the schedule's test stepped it by hand: SFT steps that never
    did trained at the full rate throughout)."""
    model = make_model(tiny_model_cfg, records[0].worker_ids)
    run = prepare_run(records, model, SFT_TRAINING.model_copy(update={"epochs": 1}))
    rates = []
    for batch in run.train_loader:
        train_step(run, batch, epoch=1)
        rates.append(run.optimizer.param_groups[0]["lr"])
    assert rates[0] < SFT_TRAINING.learning_rate
    assert rates[-1] == pytest.approx(0.0, abs=1e-12)


def test_sfts_max_grad_norm_clips_the_step(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig
) -> None:
    """A step's gradient is clipped to max_grad_norm: a tiny one all but stops the step."""
    moved = {}
    for max_grad_norm in (1.0, 1e-10):
        torch.manual_seed(0)
        model = make_model(tiny_model_cfg, records[0].worker_ids)
        training = SFT_TRAINING.model_copy(update={"max_grad_norm": max_grad_norm})
        run = prepare_run(records, model, training)
        train_step(run, next(iter(run.train_loader)), epoch=1)
        moved[max_grad_norm] = float(model.output_layer.weight.detach().abs().sum())
    assert moved[1.0] > 0
    assert moved[1e-10] < moved[1.0] / 10


def test_rls_max_grad_norm_clips_the_step(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig
) -> None:
    """An RL step's gradient is clipped to max_grad_norm: a tiny one all but stops the step
    (no test read it, so an RL that never clipped passed every one)."""
    moved = {}
    for max_grad_norm in (1.0, 1e-10):
        torch.manual_seed(0)
        model = make_model(tiny_model_cfg, records[0].worker_ids)
        training = RL_TRAINING.model_copy(
            update={"estimator": "expected_reward", "max_grad_norm": max_grad_norm}
        )
        run = prepare_rl_run(records, model, training)
        train_batch(run, next(iter(run.train_loader)), epoch=1, step=len(run.train_loader) - 1)
        assert run.global_step == 1
        moved[max_grad_norm] = float(model.output_layer.weight.detach().abs().sum())
    assert moved[1.0] > 0
    assert moved[1e-10] < moved[1.0] / 10


def tied_records_and_mlp_head(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig
) -> tuple[list[RewardRecord], RouterModel]:
    """The records with every worker's reward tied at 0.5 (no gradient from the loss), and a
    fresh model with a hidden layer whose weights weight decay alone then moves."""
    tied = [r.model_copy(update={"rewards": [0.5] * len(r.rewards)}) for r in records]
    cfg = tiny_model_cfg.model_copy(update={"head": "mlp", "head_hidden": 8})
    return tied, make_model(cfg, records[0].worker_ids)


def test_sfts_weight_decay_shrinks_the_weights(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig
) -> None:
    """On prompts whose workers all tie (skipped) the loss gives no gradient, so a step is
    AdamW's weight decay alone: every weight times 1 - learning_rate * weight_decay."""
    tied, model = tied_records_and_mlp_head(records, tiny_model_cfg)
    training = SFT_TRAINING.model_copy(update={"tie_handling": "skip", "weight_decay": 0.5})
    run = prepare_run(tied, model, training)
    hidden = model.head[0].weight.detach().clone()
    train_step(run, next(iter(run.train_loader)), epoch=1)
    shrunk = hidden * (1 - training.learning_rate * training.weight_decay)
    torch.testing.assert_close(model.head[0].weight.detach(), shrunk)


def test_an_sft_step_takes_the_learning_rate_before_the_schedule_anneals_it(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig
) -> None:
    """The schedule anneals after each step: a run of one step takes it at the full learning
    rate (then 0). The schedule test stepped it by hand, so a train_step annealing before
    its step (the first at a lower rate, the last at 0, doing nothing) passed every test;
    the step is read on weight decay alone, as in test_sfts_weight_decay_shrinks_the_weights."""
    tied, model = tied_records_and_mlp_head(records, tiny_model_cfg)
    training = SFT_TRAINING.model_copy(
        update={"tie_handling": "skip", "weight_decay": 0.5, "epochs": 1, "batch_size": 1000}
    )
    run = prepare_run(tied, model, training)
    assert len(run.train_loader) == 1
    hidden = model.head[0].weight.detach().clone()
    train_step(run, next(iter(run.train_loader)), epoch=1)
    shrunk = hidden * (1 - training.learning_rate * training.weight_decay)
    torch.testing.assert_close(model.head[0].weight.detach(), shrunk)
    assert run.scheduler.get_last_lr()[0] == pytest.approx(0.0, abs=1e-12)


def test_rls_weight_decay_shrinks_the_weights(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig
) -> None:
    """On prompts whose workers all tie the expected reward gives no gradient (nor does the
    entropy at the untrained head's uniform policy), so an RL step is AdamW's weight decay
    alone: every weight times 1 - learning_rate * weight_decay (no test read RL's)."""
    tied, model = tied_records_and_mlp_head(records, tiny_model_cfg)
    training = RL_TRAINING.model_copy(update={"estimator": "expected_reward", "weight_decay": 0.5})
    run = prepare_rl_run(tied, model, training)
    hidden = model.head[0].weight.detach().clone()
    train_batch(run, next(iter(run.train_loader)), epoch=1, step=len(run.train_loader) - 1)
    assert run.global_step == 1
    shrunk = hidden * (1 - training.learning_rate * training.weight_decay)
    torch.testing.assert_close(model.head[0].weight.detach(), shrunk)


@pytest.mark.parametrize("stage", ["sft", "rl"])
def test_a_stage_continued_from_a_checkpoint_takes_its_steps_with_the_heads_dropout(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig, tmp_path: Path, stage: str
) -> None:
    """load_router gives a checkpoint in eval mode, so each epoch puts the model back in
    training mode for its steps (the pipeline's RL continues SFT's checkpoint, whose MLP head
    has dropout 0.3 by default); no test continued a stage from a loaded checkpoint, so an
    epoch that left it in eval mode (every step without dropout) passed every test."""
    cfg = tiny_model_cfg.model_copy(update={"head": "mlp", "head_hidden": 8, "head_dropout": 0.5})
    make_model(cfg, records[0].worker_ids).save_checkpoint(tmp_path / "start")
    model = load_router(tmp_path / "start", cfg, records[0].worker_ids)
    assert not model.training
    steps_in_training_mode: list[bool] = []
    model.head.register_forward_pre_hook(
        lambda module, _: steps_in_training_mode.append(module.training)
    )
    if stage == "sft":
        sft_run = prepare_run(records, model, SFT_TRAINING)
        sft_run_epoch(sft_run, 1)
        steps = len(sft_run.train_loader)
    else:
        rl_run = prepare_rl_run(records, model, RL_TRAINING)
        rl_run_epoch(rl_run, 1)
        steps = len(rl_run.train_loader)
    # the steps' forward passes, then evaluate_loader's (without dropout)
    assert steps_in_training_mode[:steps] == [True] * steps
    assert not any(steps_in_training_mode[steps:])


def test_a_second_training_run_reads_only_the_feature_cache(
    records: list[RewardRecord],
    tiny_model_cfg: ModelConfig,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = SFTConfig(model=tiny_model_cfg, training=SFT_TRAINING.model_copy(update={"epochs": 3}))
    first = train_sft(records, config, tmp_path / "first")

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the second run loaded the backbone")

    monkeypatch.setattr(feature_cache_module, "load_backbone", refuse)
    monkeypatch.setattr(backbones_module, "load_backbone", refuse)
    second = train_sft(records, config, tmp_path / "second")
    assert second["history"] == first["history"]
    rl = train_rl(records, RLConfig(model=tiny_model_cfg), tmp_path / "rl", str(tmp_path / "first"))
    assert rl["history"]


def test_train_sft_without_a_validation_split_keeps_the_last_epoch(
    records: list[RewardRecord],
    tiny_model_cfg: ModelConfig,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    no_validation = [
        r.model_copy(update={"split": "train"}) if r.split == "validation" else r for r in records
    ]
    training = SFT_TRAINING.model_copy(update={"epochs": 3})
    report = train_sft(no_validation, SFTConfig(model=tiny_model_cfg, training=training), tmp_path)
    assert report["best_epoch"] == 3
    assert report["best_validation_reward"] is None
    assert all("validation" not in epoch for epoch in report["history"])
    assert all("reward" in epoch["train"] for epoch in report["history"])
    # said before training, where the user watches (no test read it: a silent run passed)
    assert "SFT: no validation split; keeping the last epoch" in capsys.readouterr().err


def other_workers(record: RewardRecord) -> RewardRecord:
    return record.model_copy(update={"worker_ids": [f"other-{w}" for w in record.worker_ids]})


def workers_reordered(record: RewardRecord) -> RewardRecord:
    """The same workers in another order, each keeping its reward: the model's output
    columns would be read as other workers'."""
    update = {"worker_ids": record.worker_ids[::-1], "rewards": record.rewards[::-1]}
    return record.model_copy(update=update)


@pytest.mark.parametrize("break_record", [other_workers, workers_reordered])
@pytest.mark.parametrize("stage", ["sft", "rl"])
def test_a_broken_validation_split_is_an_error_not_a_missing_one(
    records: list[RewardRecord],
    tiny_model_cfg: ModelConfig,
    tmp_path: Path,
    stage: str,
    break_record: Callable[[RewardRecord], RewardRecord],
) -> None:
    # Validation rows over other workers must not be skipped silently as "no validation",
    # nor those listing the model's workers in another order be validated as if in its.
    broken = [break_record(r) if r.split == "validation" else r for r in records]
    with pytest.raises(ValueError, match="validation split"):
        if stage == "sft":
            train_sft(broken, SFTConfig(model=tiny_model_cfg, training=SFT_TRAINING), tmp_path)
        else:
            train_rl(broken, RLConfig(model=tiny_model_cfg), tmp_path)


def test_train_rl_from_scratch_beats_the_uniform_router(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig, tmp_path: Path
) -> None:
    baseline = untrained_validation(records, tiny_model_cfg)
    report = train_rl(records, RLConfig(model=tiny_model_cfg, training=RL_TRAINING), tmp_path)
    check_report_file(tmp_path, report)
    assert report["stage"] == "rl"
    n_train = sum(r.split == "train" for r in records)
    assert report["global_step"] == RL_TRAINING.epochs * math.ceil(n_train / 16)
    assert len(report["history"]) == RL_TRAINING.epochs
    for epoch in report["history"]:
        assert {"loss", "sampled_reward", "entropy", "zero_spread_fraction"} <= set(epoch["train"])
        assert {"reward", "expected_reward", "entropy"} <= set(epoch["validation"])
    first, final = report["history"][0], report["history"][-1]
    assert final["train"]["sampled_reward"] > first["train"]["sampled_reward"]
    # the validation figures are the validation split's, of the last epoch's (kept) weights
    loaded = load_router(tmp_path, tiny_model_cfg, records[0].worker_ids)
    validation = make_loader(records, loaded, "validation", batch_size=16, shuffle=False)
    assert final["validation"] == pytest.approx(evaluate_loader(loaded, validation), abs=1e-6)
    assert final["validation"]["expected_reward"] > baseline["expected_reward"] + 0.1
    assert final["validation"]["reward"] > baseline["reward"] + 0.1
    assert final["validation"]["entropy"] < baseline["entropy"]


@pytest.mark.parametrize(
    ("train", "config", "stage_training"),
    [(train_rl, RLConfig, RL_TRAINING), (train_sft, SFTConfig, SFT_TRAINING)],
    ids=["rl", "sft"],
)
def test_training_is_reproducible_and_the_seed_matters(
    train: Callable[..., dict],
    config: Callable[..., RLConfig | SFTConfig],
    stage_training: Any,
    records: list[RewardRecord],
    tiny_model_cfg: ModelConfig,
    tmp_path: Path,
) -> None:
    """The seed orders SFT's train batches and RL's sampling (RL's check passed on its
    sampling alone, so an SFT that never shuffled, every seed training alike, passed every
    test)."""
    training = stage_training.model_copy(update={"epochs": 2})
    runs = [
        train(records, config(model=tiny_model_cfg, training=t), tmp_path / name)
        for name, t in (
            ("a", training),
            ("b", training),
            ("c", training.model_copy(update={"seed": 1})),
        )
    ]
    assert runs[0]["history"] == runs[1]["history"]
    assert runs[0]["history"] != runs[2]["history"]


def test_the_seed_chooses_an_mlp_heads_starting_weights(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig, tmp_path: Path
) -> None:
    """The tests' linear head starts at zero, whatever the seed: a stage seeding torch only
    after building its model (so the default MLP head's random start was whatever the
    process had drawn before, not the seed's) passed the SFT and seed tests. Two runs in one
    process must train alike, the second starting after the first drew its numbers."""
    mlp = tiny_model_cfg.model_copy(update={"head": "mlp"})
    config = SFTConfig(model=mlp, training=SFT_TRAINING.model_copy(update={"epochs": 1}))
    runs = [train_sft(records, config, tmp_path / name) for name in ("a", "b")]
    assert runs[0]["history"] == runs[1]["history"]


def test_gradient_accumulation_counts_optimizer_steps(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig, tmp_path: Path
) -> None:
    training = RL_TRAINING.model_copy(update={"epochs": 2, "gradient_accumulation_steps": 4})
    report = train_rl(records, RLConfig(model=tiny_model_cfg, training=training), tmp_path)
    batches = math.ceil(sum(r.split == "train" for r in records) / 16)
    assert report["global_step"] == 2 * math.ceil(batches / 4)
    saved = json.loads((tmp_path / "router.json").read_text())["metadata"]
    assert saved["global_step"] == report["global_step"]  # the checkpoint's own count
    # and its own history (no test read RL's: a checkpoint holding none passed them all)
    assert saved["history"] == json.loads(json.dumps(report["history"]))


def test_rl_whose_weights_blow_up_on_its_last_step_stops_and_writes_no_checkpoint(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig, tmp_path: Path
) -> None:
    # One step and no validation split: nothing after the step read the NaN weights, which
    # went into the checkpoint (and every route then chose the first worker).
    no_validation = [r.model_copy(update={"split": "train"}) for r in records]
    training = RL_TRAINING.model_copy(
        update={"epochs": 1, "batch_size": len(records), "learning_rate": math.inf}
    )
    with pytest.raises(TrainingDiverged, match=r"RL diverged at epoch 1, step 1: its weights"):
        train_rl(no_validation, RLConfig(model=tiny_model_cfg, training=training), tmp_path)
    assert not (tmp_path / "router.json").exists()
    assert not (tmp_path / "training_report.json").exists()


def test_sft_whose_loss_turns_nan_stops_with_what_to_change_and_keeps_the_earlier_checkpoint(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig, tmp_path: Path
) -> None:
    training = SFT_TRAINING.model_copy(update={"epochs": 2})
    train_sft(records, SFTConfig(model=tiny_model_cfg, training=training), tmp_path)
    files = ("router.json", "router_head.safetensors", "training_report.json")
    before = {name: (tmp_path / name).read_bytes() for name in files}
    # rewards / 1e-40 overflow float32: the soft targets are NaN (torch stopped on its own
    # validation of a distribution, dumping the whole NaN tensor as the error)
    cold = training.model_copy(update={"temperature": 1e-40})
    with pytest.raises(TrainingDiverged) as raised:
        train_sft(records, SFTConfig(model=tiny_model_cfg, training=cold), tmp_path)
    message = str(raised.value)
    assert message.startswith("SFT diverged at epoch 1, step 1: its loss became NaN or infinite")
    assert "training.temperature (now 1e-40)" in message
    assert "\n" not in message and "tensor(" not in message
    assert {name: (tmp_path / name).read_bytes() for name in before} == before
    load_router(tmp_path, tiny_model_cfg, records[0].worker_ids)


@pytest.mark.parametrize("stage", ["sft", "es"])
def test_a_backbone_giving_nan_features_is_named_not_the_learning_rate(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig, tmp_path: Path, stage: str
) -> None:
    """A damaged backbone: SFT stopped at its first step with 'diverged: lower
    training.learning_rate', which could never help."""
    from safetensors.torch import load_file, save_file

    folder = tmp_path / "bb"
    save_tiny_backbone(folder)
    weights = load_file(folder / "model.safetensors")
    name = next(key for key in weights if "embed_tokens" in key)
    weights[name][3:] = math.nan
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    cfg = tiny_model_cfg.model_copy(update={"backbone": str(folder), "runtime": "torch"})
    with pytest.raises(ValueError) as raised:
        if stage == "sft":
            train_sft(records, SFTConfig(model=cfg, training=SFT_TRAINING), tmp_path / "out")
        else:
            es = ESConfig(model=cfg, training=ESTrainingConfig(iterations=2))
            train_es(records, es, tmp_path / "out")
    message = str(raised.value)
    assert message.startswith(f"the backbone {folder} gives NaN or infinite features for ")
    assert "train prompts (the first: " in message and "learning_rate" not in message
    assert not (tmp_path / "out" / "router.json").exists()


def test_an_epochs_line_gives_the_validation_reward_under_validation() -> None:
    """The per-epoch line is where a user watches the validation reward (what the best
    epoch is picked by); the CLI tests read only its shape, so the train split's reward
    printed under 'validation' passed them."""
    report = {
        "epoch": 2,
        "train": {"loss": 0.25, "reward": 0.9},
        "validation": {"reward": 0.3, "entropy": 0.5},
    }
    line = epoch_line("SFT", report, 8, ("loss", "reward"))
    assert line == "SFT epoch 2/8: train loss 0.2500 · reward 0.9000 | validation reward 0.3000"
    del report["validation"]
    assert epoch_line("SFT", report, 8, ("loss",)) == "SFT epoch 2/8: train loss 0.2500"


def test_one_nan_or_infinite_value_in_a_prompts_features_is_refused_naming_it() -> None:
    """A backbone that overflows in one hidden unit gives a row that is finite but for one
    value: training on it diverges as surely as on a row of NaNs."""
    train = [
        RewardRecord(prompt=f"prompt {index}", split="train", worker_ids=["a", "b"],
                     rewards=[1.0, 0.0], id=str(index))
        for index in range(3)
    ]  # fmt: skip
    features = torch.zeros(3, 4)
    require_finite_features(features, train, "bb", "train")
    for bad in (math.nan, math.inf):
        features[1, 2] = bad
        expected = r"for 1 of the 3 train prompts \(the first: 'prompt 1'"
        with pytest.raises(ValueError, match=expected):
            require_finite_features(features, train, "bb", "train")


@pytest.mark.parametrize("pareto", [False, True])
def test_eval_on_a_backbone_giving_nan_features_names_the_backbone(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig, tmp_path: Path, pareto: bool
) -> None:
    """A backbone whose weights for one token are damaged (NaN): training on prompts without
    it went well, but `eval` on test prompts holding it stopped in scikit-learn ('Input X
    contains NaN. Ridge does not accept missing values ...'), naming neither the backbone
    nor what to do; training names it."""
    from safetensors.torch import load_file, save_file

    from fugu_lite.backbones import byte_tokenizer

    folder = tmp_path / "bb"
    save_tiny_backbone(folder)
    weights = load_file(folder / "model.safetensors")
    name = next(key for key in weights if "embed_tokens" in key)
    [tilde] = byte_tokenizer()("~")["input_ids"]
    weights[name][tilde] = math.nan
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    assert not any("~" in record.prompt_text for record in records)
    records = [
        record.model_copy(update={"prompt": f"{record.prompt_text} ~"})
        if record.split == "test"
        else record
        for record in records
    ]
    cfg = tiny_model_cfg.model_copy(update={"backbone": str(folder), "runtime": "torch"})
    training = SFT_TRAINING.model_copy(update={"epochs": 1})
    train_sft(records, SFTConfig(model=cfg, training=training), tmp_path / "sft")
    evaluate = run_pareto_evaluation if pareto else run_evaluation
    with pytest.raises(ValueError) as raised:
        evaluate(tmp_path / "sft", records, "test", tmp_path / "out")
    message = str(raised.value)
    assert message.startswith(f"the backbone {folder} gives NaN or infinite features for ")
    assert "test prompts (the first: " in message and "Ridge" not in message
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("pareto", [False, True])
def test_eval_computes_each_splits_features_once(
    records: list[RewardRecord],
    tiny_model_cfg: ModelConfig,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    pareto: bool,
) -> None:
    """`eval --split train` (and `--split validation`) computed the evaluated split's
    features a second time for the baselines: twice the backbone passes with SVF or no
    feature cache, and a second progress bar. Each split's features are computed once."""
    from fugu_lite.model import RouterModel

    cfg = tiny_model_cfg.model_copy(update={"runtime": "torch"})
    training = SFT_TRAINING.model_copy(update={"epochs": 1})
    train_sft(records, SFTConfig(model=cfg, training=training), tmp_path / "sft")
    asked: list[tuple[str, ...]] = []
    features_for = RouterModel.features_for

    def counted(model: RouterModel, prompts: list, use_cache: bool = True) -> torch.Tensor:
        asked.append(tuple(map(str, prompts)))
        return features_for(model, prompts, use_cache)

    monkeypatch.setattr(RouterModel, "features_for", counted)
    evaluate = run_pareto_evaluation if pareto else run_evaluation
    for split in ("train", "validation", "test"):
        asked.clear()
        evaluate(tmp_path / "sft", records, split, tmp_path / f"out-{split}")
        expected = {"train", split, "validation"}
        assert len(asked) == len(set(asked)) == len(expected), (split, len(asked))


@pytest.mark.parametrize("stage", ["sft", "rl"])
def test_max_grad_norm_inf_writes_valid_json(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig, tmp_path: Path, stage: str
) -> None:
    """`max_grad_norm: .inf` (the documented way to turn clipping off) went into
    training_report.json and router.json as `Infinity`, which jq and JSON.parse refuse; it is
    written "inf", which reads back as inf."""
    training: SFTTrainingConfig | RLTrainingConfig
    if stage == "sft":
        training = SFT_TRAINING.model_copy(update={"epochs": 1, "max_grad_norm": math.inf})
        report = train_sft(records, SFTConfig(model=tiny_model_cfg, training=training), tmp_path)
    else:
        training = RL_TRAINING.model_copy(update={"epochs": 1, "max_grad_norm": math.inf})
        report = train_rl(records, RLConfig(model=tiny_model_cfg, training=training), tmp_path)
    for name in ("training_report.json", "router.json"):
        refuse = lambda constant: pytest.fail(f"{constant} in a JSON file")  # noqa: E731
        json.loads((tmp_path / name).read_text(), parse_constant=refuse)
    assert report["config"]["training"]["max_grad_norm"] == "inf"
    saved = json.loads((tmp_path / "router.json").read_text())["metadata"]["inputs"]
    assert type(training).model_validate(saved["config"]["training"]).max_grad_norm == math.inf


@pytest.mark.parametrize("stage", ["sft", "rl"])
def test_an_epochs_train_metrics_count_every_prompt_once(
    tiny_model_cfg: ModelConfig, tmp_path: Path, stage: str
) -> None:
    """An epoch's train metrics were the plain mean of its steps', so a last short batch
    counted as much as a full one: 3 train prompts in batches of 2, one of them tied, were
    reported with a tie fraction of 0.5 or 0.25 (by where the shuffle put it), not 1/3."""
    train = [
        RewardRecord(prompt=f"prompt {index}", split="train", worker_ids=["a", "b"],
                     rewards=rewards, id=str(index))
        for index, rewards in enumerate([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]])
    ]  # fmt: skip
    if stage == "sft":
        training = SFT_TRAINING.model_copy(update={"epochs": 3, "batch_size": 2})
        report = train_sft(train, SFTConfig(model=tiny_model_cfg, training=training), tmp_path)
        key = "tie_fraction"
    else:
        training = RL_TRAINING.model_copy(update={"epochs": 3, "batch_size": 2})
        report = train_rl(train, RLConfig(model=tiny_model_cfg, training=training), tmp_path)
        key = "zero_spread_fraction"
    assert [epoch["train"][key] for epoch in report["history"]] == pytest.approx([1 / 3] * 3)


def test_a_checkpoint_with_nan_weights_is_never_saved(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig, tmp_path: Path
) -> None:
    model = make_model(tiny_model_cfg, records[0].worker_ids)
    with torch.no_grad():
        model.output_layer.weight[0, 0] = math.nan
    with pytest.raises(TrainingDiverged, match=r"ES diverged .*head\.weight"):
        save_stage(model, tmp_path / "es", {"stage": "es"}, {"stage": "es"})
    assert not (tmp_path / "es").exists()


def test_the_sft_stage_passes_its_tie_handling_to_the_loss(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig, tmp_path: Path
) -> None:
    """Every third train row made an all-way tie: `skip` and `uniform` train differently."""
    tied = [
        record.model_copy(update={"rewards": [0.5] * len(record.rewards)})
        if record.split == "train" and index % 3 == 0
        else record
        for index, record in enumerate(records)
    ]
    first_losses = {}
    for handling in ("uniform", "skip"):
        training = SFT_TRAINING.model_copy(update={"epochs": 1, "tie_handling": handling})
        config = SFTConfig(model=tiny_model_cfg, training=training)
        report = train_sft(tied, config, tmp_path / handling)
        first_losses[handling] = report["history"][0]["train"]["loss"]
        assert report["history"][0]["train"]["tie_fraction"] > 0.2
    assert first_losses["uniform"] != pytest.approx(first_losses["skip"], rel=1e-3)


def test_pipeline_runs_sft_then_rl_from_the_sft_checkpoint(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig, tmp_path: Path
) -> None:
    baseline = untrained_validation(records, tiny_model_cfg)
    config = PipelineConfig(
        model=tiny_model_cfg,
        sft=SFT_TRAINING.model_copy(update={"epochs": 5}),
        rl=RL_TRAINING.model_copy(update={"epochs": 3, "learning_rate": 0.01}),
    )
    report = train_pipeline(records, config, tmp_path)
    written = json.loads((tmp_path / "training_report.json").read_text())
    assert written["stage"] == "pipeline"
    assert written["stages"] == {"sft": str(tmp_path / "sft"), "rl": str(tmp_path / "rl")}
    assert report["checkpoint"] == str(tmp_path / "rl")
    assert written["seconds"] > 0

    sft_report = json.loads((tmp_path / "sft" / "training_report.json").read_text())
    rl_report = json.loads((tmp_path / "rl" / "training_report.json").read_text())
    assert len(sft_report["history"]) == 5 and len(rl_report["history"]) == 3
    # RL continued from SFT: its first epoch is already far above the uniform router
    assert rl_report["history"][0]["validation"]["reward"] > baseline["reward"] + 0.1
    assert rl_report["history"][-1]["validation"]["reward"] > baseline["reward"] + 0.1
    sft_model = load_router(tmp_path / "sft")
    rl_model = load_router(tmp_path / "rl")
    assert torch.equal(sft_model.feature_mean, rl_model.feature_mean)  # one normaliser
    assert not torch.equal(sft_model.head.weight, rl_model.head.weight)  # RL trained it

    # With a vanishing RL step, RL's head is SFT's: it started there, not from zero.
    still = config.model_copy(
        update={"rl": config.rl.model_copy(update={"epochs": 1, "learning_rate": 1e-9})}
    )
    train_pipeline(records, still, tmp_path / "still")
    sft_head = load_router(tmp_path / "still" / "sft").head.weight
    rl_head = load_router(tmp_path / "still" / "rl").head.weight
    assert sft_head.abs().max() > 0.1
    torch.testing.assert_close(rl_head, sft_head, atol=1e-4, rtol=0)


def test_continuing_from_a_checkpoint_with_another_config_is_refused(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig, tmp_path: Path
) -> None:
    training = SFT_TRAINING.model_copy(update={"epochs": 1})
    train_sft(records, SFTConfig(model=tiny_model_cfg, training=training), tmp_path / "sft")
    other = tiny_model_cfg.model_copy(update={"layer": 1})
    with pytest.raises(CheckpointError, match=r"model\.layer: checkpoint -1 vs config 1"):
        train_rl(records, RLConfig(model=other), tmp_path / "rl", str(tmp_path / "sft"))


def test_sft_loss_matches_torch_kl_div_on_random_batches() -> None:
    torch.manual_seed(5)
    logits, rewards = torch.randn(16, 5), torch.rand(16, 5)
    loss, _ = sft_loss(logits, rewards, temperature=0.7)
    reference = F.kl_div(
        torch.log_softmax(logits, -1), torch.softmax(rewards / 0.7, -1), reduction="batchmean"
    )
    assert float(loss) == pytest.approx(float(reference), rel=1e-5)


def test_sft_and_rl_print_a_line_every_log_every_steps(
    records: list[RewardRecord],
    tiny_model_cfg: ModelConfig,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """SFT's log_every was accepted and documented but never used: no step lines."""
    model = make_model(tiny_model_cfg, records[0].worker_ids)
    steps = len(make_loader(records, model, "train", 16, shuffle=False))
    sft = SFT_TRAINING.model_copy(update={"epochs": 2, "log_every": 1})
    train_sft(records, SFTConfig(model=tiny_model_cfg, training=sft), tmp_path / "sft")
    output = capsys.readouterr().err
    assert [line.split(":")[0] for line in output.splitlines() if "step" in line] == [
        f"SFT step {step}" for step in range(1, 2 * steps + 1)
    ]
    rl = RL_TRAINING.model_copy(update={"epochs": 1, "log_every": 2})
    train_rl(records, RLConfig(model=tiny_model_cfg, training=rl), tmp_path / "rl")
    output = capsys.readouterr().err
    assert [line.split(":")[0] for line in output.splitlines() if "step" in line] == [
        f"RL step {step}" for step in range(2, steps + 1, 2)
    ]


def test_training_warns_when_the_train_split_cannot_teach_a_choice(
    records: list[RewardRecord],
    tiny_model_cfg: ModelConfig,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert nothing_to_learn([r for r in records if r.split == "train"]) is None
    tied = [r.model_copy(update={"rewards": [0.5, 0.5, 0.5]}) for r in records]
    single = [
        r.model_copy(update={"worker_ids": ["only"], "rewards": [1.0], "costs": None})
        for r in records
    ]
    assert "all workers the same reward" in nothing_to_learn(tied)
    assert "one worker (only)" in nothing_to_learn(single)

    # A tie only on the raw rewards is not one after the cost weight: costs differ.
    weighted = SFT_TRAINING.model_copy(update={"epochs": 1, "cost_weight": 1.0})
    report = train_sft(
        tied, SFTConfig(model=tiny_model_cfg, training=weighted), tmp_path / "weighted"
    )
    assert "warning" not in capsys.readouterr().err
    assert report["warnings"] == []
    training = SFT_TRAINING.model_copy(update={"epochs": 1})
    train_sft(tied, SFTConfig(model=tiny_model_cfg, training=training), tmp_path / "tied")
    assert "nothing to learn" in " ".join(capsys.readouterr().err.split())

    # ... and the report says so too, read long after stderr scrolled away (an ES run on
    # such records kept its start "because no generation beat it", with no why)
    rl = RLConfig(model=tiny_model_cfg, training=RL_TRAINING.model_copy(update={"epochs": 1}))
    es = ESConfig(model=tiny_model_cfg, training=ESTrainingConfig(iterations=2))
    for stage, run in (
        ("tied", None),
        ("rl", lambda: train_rl(single, rl, tmp_path / "rl")),
        ("es", lambda: train_es(tied, es, tmp_path / "es")),
    ):
        if run is not None:
            run()
        written = json.loads((tmp_path / stage / "training_report.json").read_text())
        train = [r for r in (single if stage == "rl" else tied) if r.split == "train"]
        expected = nothing_to_learn(train)
        assert written["warnings"] == [expected]


def test_the_tie_warning_speaks_of_a_cost_weight_only_when_one_was_applied(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig, tmp_path: Path
) -> None:
    """The warning on a train split whose workers all tie said the rewards tied '(after the
    cost weight)' to every stage, also to one trained without a cost weight and to the reward
    head (which reads the rewards as given), where no cost weight was applied."""
    tied = [r.model_copy(update={"rewards": [0.5] * 3, "costs": [1.0] * 3}) for r in records]
    train = [r for r in tied if r.split == "train"]
    plain = nothing_to_learn(train)
    assert plain is not None and "cost weight" not in plain
    reports = {}
    for cost_weight in (0.0, 1.0):
        training = SFT_TRAINING.model_copy(update={"epochs": 1, "cost_weight": cost_weight})
        config = SFTConfig(model=tiny_model_cfg, training=training)
        reports[cost_weight] = train_sft(tied, config, tmp_path / str(cost_weight))
    assert reports[0.0]["warnings"] == [plain]
    (weighted,) = reports[1.0]["warnings"]
    assert "the same reward (after the cost weight): there is nothing to learn" in weighted


def test_a_train_split_of_one_prompt_warns_that_the_router_learns_no_choice(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig, tmp_path: Path
) -> None:
    """One train prompt: the normaliser fitted on it centres its features to zero, so SFT
    trained a linear head that stayed all zeros (its loss the same every epoch) and said
    nothing, and the router routed every prompt alike."""
    train = [r for r in records if r.split == "train"]
    one = [train[0], *(r for r in records if r.split != "train")]
    config = SFTConfig(model=tiny_model_cfg, training=SFT_TRAINING.model_copy(update={"epochs": 2}))
    report = train_sft(one, config, tmp_path / "sft")
    losses = {epoch["train"]["loss"] for epoch in report["history"]}
    assert len(losses) == 1  # nothing was learnt, which the warning says
    assert report["warnings"] == [nothing_to_learn([train[0]])]
    assert "one prompt" in report["warnings"][0] and "add train records" in report["warnings"][0]
    assert nothing_to_learn(train[:2]) is None
    # continued from a checkpoint, the head keeps the normaliser of its own train split
    rl = RLConfig(model=tiny_model_cfg, training=RL_TRAINING.model_copy(update={"epochs": 1}))
    assert train_rl(one, rl, tmp_path / "rl", str(tmp_path / "sft"))["warnings"] == []


def test_a_train_split_where_only_some_prompts_tie_still_teaches_a_choice() -> None:
    """The tie warning is for a train split where every prompt ties: one prompt that every
    worker solves, beside prompts that tell the workers apart, leaves a choice to learn."""
    train = [
        RewardRecord(prompt=f"prompt {index}", split="train", worker_ids=["a", "b"],
                     rewards=rewards, id=str(index))
        for index, rewards in enumerate([[1.0, 1.0], [1.0, 0.0], [0.0, 1.0]])
    ]  # fmt: skip
    assert nothing_to_learn(train) is None
    assert nothing_to_learn(train[:1] * 2) is not None


def pipeline_config(tiny_model_cfg: ModelConfig) -> PipelineConfig:
    return PipelineConfig(
        model=tiny_model_cfg,
        sft=SFT_TRAINING.model_copy(update={"epochs": 2}),
        rl=RL_TRAINING.model_copy(update={"epochs": 1}),
    )


def test_a_pipeline_rerun_stopped_in_rl_leaves_no_rl_of_the_earlier_sft(
    records: list[RewardRecord],
    tiny_model_cfg: ModelConfig,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Re-running the pipeline into a finished one with other records and stopping it in RL
    left the new SFT beside the old RL, which `route`/`eval --checkpoint OUT/rl` loaded."""
    config = pipeline_config(tiny_model_cfg)
    train_pipeline(records, config, tmp_path)
    other = generated_records(seed=1)

    def stopped(*args: object, **kwargs: object) -> dict:
        raise KeyboardInterrupt

    monkeypatch.setattr(pipeline_module, "train_rl", stopped)
    with pytest.raises(KeyboardInterrupt):
        train_pipeline(other, config, tmp_path)
    with pytest.raises(CheckpointError, match="stopped before its RL stage finished"):
        load_router(tmp_path / "rl")
    assert not (tmp_path / "rl" / "training_report.json").exists()
    assert not (tmp_path / "training_report.json").exists()  # no finished pipeline here
    sft_inputs = json.loads((tmp_path / "sft" / "router.json").read_text())["metadata"]["inputs"]
    assert sft_inputs["records_sha1"] == records_digest(training_records(other))


def test_a_stages_inputs_ignore_where_features_are_cached_and_how_often_it_logs(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig, tmp_path: Path
) -> None:
    """A pipeline rerun with another cache folder, feature batch size or log_every trains the
    same models: its finished stages are kept. A setting that changes the model is not."""
    config = SFTConfig(model=tiny_model_cfg, training=SFT_TRAINING)
    same = SFTConfig(
        model=tiny_model_cfg.model_copy(
            update={"cache_dir": str(tmp_path / "elsewhere"), "feature_batch_size": 3}
        ),
        training=SFT_TRAINING.model_copy(update={"log_every": 7}),
    )
    other = SFTConfig(
        model=tiny_model_cfg, training=SFT_TRAINING.model_copy(update={"learning_rate": 0.01})
    )
    assert stage_inputs(same, records, None) == stage_inputs(config, records, None)
    assert stage_inputs(other, records, None) != stage_inputs(config, records, None)


def test_a_pipeline_rerun_after_editing_only_test_records_keeps_both_stages(
    records: list[RewardRecord],
    tiny_model_cfg: ModelConfig,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Training reads the train and validation splits only, but the stages' digest covered
    every record: editing or adding a test record retrained SFT and RL. An edit to a
    validation record (which chooses the SFT epoch) still retrains both."""
    config = pipeline_config(tiny_model_cfg)
    train_pipeline(records, config, tmp_path)
    trained: list[str] = []
    monkeypatch.setattr(
        pipeline_module, "train_sft", lambda *args: trained.append("sft") or train_sft(*args)
    )
    monkeypatch.setattr(
        pipeline_module, "train_rl", lambda *args: trained.append("rl") or train_rl(*args)
    )
    test_index = next(i for i, r in enumerate(records) if r.split == "test")
    edited_test = list(records)
    edited_test[test_index] = records[test_index].model_copy(update={"rewards": [0.0, 0.0, 1.0]})
    edited_test.append(records[test_index].model_copy(update={"prompt": "another test prompt"}))
    report = train_pipeline(edited_test, config, tmp_path)
    assert trained == [] and report["kept"] == ["sft", "rl"]
    validation_index = next(i for i, r in enumerate(records) if r.split == "validation")
    edited_validation = list(edited_test)
    edited_validation[validation_index] = records[validation_index].model_copy(
        update={"rewards": [0.0, 0.0, 1.0]}
    )
    report = train_pipeline(edited_validation, config, tmp_path)
    assert trained == ["sft", "rl"] and report["kept"] == []


def test_a_pipeline_rerun_keeps_the_finished_sft_of_the_same_config_and_records(
    records: list[RewardRecord],
    tiny_model_cfg: ModelConfig,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = pipeline_config(tiny_model_cfg)
    train_pipeline(records, config, tmp_path)
    sft_head = (tmp_path / "sft" / "router_head.safetensors").read_bytes()
    trained = []
    monkeypatch.setattr(
        pipeline_module, "train_sft", lambda *args: trained.append(args) or train_sft(*args)
    )
    capsys.readouterr()
    train_pipeline(records, config, tmp_path)  # e.g. after a stop in RL
    assert trained == [] and "already holds the SFT" in " ".join(capsys.readouterr().err.split())
    assert (tmp_path / "sft" / "router_head.safetensors").read_bytes() == sft_head
    rl = json.loads((tmp_path / "rl" / "router.json").read_text())["metadata"]["inputs"]
    assert rl["continued_from"]["sha256"] == hashlib.sha256(sft_head).hexdigest()
    assert (tmp_path / "training_report.json").exists()

    # another SFT setting, or other records: SFT is trained again
    more = config.model_copy(update={"sft": config.sft.model_copy(update={"epochs": 3})})
    train_pipeline(records, more, tmp_path)
    train_pipeline(generated_records(seed=1), more, tmp_path)
    assert len(trained) == 2


def test_a_cost_weighted_pipeline_rerun_keeps_its_finished_sft(
    records: list[RewardRecord],
    tiny_model_cfg: ModelConfig,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A stage's inputs digest the records as read, which the pipeline digests again to keep a
    finished stage: train_sft digesting its cost-weighted rewards instead (the records
    start_stage returns) passed every test, none of which reran a pipeline with a cost
    weight, whose SFT was then trained again on every run."""
    base = pipeline_config(tiny_model_cfg)
    config = base.model_copy(update={"sft": base.sft.model_copy(update={"cost_weight": 0.5})})
    train_pipeline(records, config, tmp_path)
    trained = []
    monkeypatch.setattr(
        pipeline_module, "train_sft", lambda *args: trained.append(args) or train_sft(*args)
    )
    train_pipeline(records, config, tmp_path)
    assert trained == []


def test_a_pipeline_rerun_keeps_the_finished_rl_of_the_same_config_records_and_sft(
    records: list[RewardRecord],
    tiny_model_cfg: ModelConfig,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A re-run of a finished pipeline trained RL again although OUT/rl already held the RL
    of the same config, records and SFT."""
    config = pipeline_config(tiny_model_cfg)
    train_pipeline(records, config, tmp_path)
    rl_head = (tmp_path / "rl" / "router_head.safetensors").read_bytes()
    trained: list[str] = []

    def counted(stage: str, train: Callable[..., dict]) -> Callable[..., dict]:
        return lambda *args: trained.append(stage) or train(*args)

    monkeypatch.setattr(pipeline_module, "train_sft", counted("sft", train_sft))
    monkeypatch.setattr(pipeline_module, "train_rl", counted("rl", train_rl))
    capsys.readouterr()
    train_pipeline(records, config, tmp_path)
    assert trained == []
    assert "already holds the RL" in " ".join(capsys.readouterr().err.split())
    assert (tmp_path / "rl" / "router_head.safetensors").read_bytes() == rl_head
    assert (tmp_path / "training_report.json").exists()

    # how often a step's line is printed changes no result: both kept
    chatty = config.model_copy(
        update={
            "sft": config.sft.model_copy(update={"log_every": 1}),
            "rl": config.rl.model_copy(update={"log_every": 1}),
        }
    )
    assert train_pipeline(records, chatty, tmp_path)["kept"] == ["sft", "rl"]
    assert trained == []

    # another RL setting: RL only; other records, or another SFT: both, RL from the new SFT
    slower = config.model_copy(update={"rl": config.rl.model_copy(update={"epochs": 2})})
    train_pipeline(records, slower, tmp_path)
    assert trained == ["rl"]
    train_pipeline(generated_records(seed=1), slower, tmp_path)
    more = slower.model_copy(update={"sft": config.sft.model_copy(update={"epochs": 3})})
    train_pipeline(generated_records(seed=1), more, tmp_path)
    assert trained == ["rl", "sft", "rl", "sft", "rl"]
    sft_head = (tmp_path / "sft" / "router_head.safetensors").read_bytes()
    rl = json.loads((tmp_path / "rl" / "router.json").read_text())["metadata"]["inputs"]
    assert rl["continued_from"]["sha256"] == hashlib.sha256(sft_head).hexdigest()

    # another package version trains both again
    monkeypatch.setattr(pipeline_module, "__version__", "0.0.0+other")
    train_pipeline(generated_records(seed=1), more, tmp_path)
    assert trained[5:] == ["sft", "rl"]


def record_stage_runs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the pipeline stages trained from now on, in order ("sft", "rl")."""
    trained: list[str] = []
    monkeypatch.setattr(
        pipeline_module, "train_sft", lambda *args: trained.append("sft") or train_sft(*args)
    )
    monkeypatch.setattr(
        pipeline_module, "train_rl", lambda *args: trained.append("rl") or train_rl(*args)
    )
    return trained


def test_a_pipeline_rerun_trains_again_the_stages_other_code_of_this_version_trained(
    records: list[RewardRecord],
    tiny_model_cfg: ModelConfig,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A checkout (or an editable install) changed since the run keeps its version string:
    the re-run kept the SFT and RL that the older code trained."""
    config = pipeline_config(tiny_model_cfg)
    train_pipeline(records, config, tmp_path)
    meta = tmp_path / "sft" / "router.json"
    saved = json.loads(meta.read_text())
    assert saved["package_code_sha256"] == sources_digest(Path(fugu_lite.__file__).parent)
    meta.write_text(json.dumps({**saved, "package_code_sha256": "0" * 64}))  # older code's
    trained = record_stage_runs(monkeypatch)
    capsys.readouterr()
    train_pipeline(records, config, tmp_path)
    assert trained == ["sft", "rl"]
    captured = capsys.readouterr()
    said = " ".join(captured.err.split())
    assert "with other sources trained it" in said and "training it again" in said
    assert "with other sources" not in captured.out  # stdout holds only the result
    train_pipeline(records, config, tmp_path)  # the code unchanged since: both kept
    assert trained == ["sft", "rl"]


def test_a_pipeline_rerun_keeps_the_rl_whatever_the_spelling_or_place_of_the_output(
    records: list[RewardRecord],
    tiny_model_cfg: ModelConfig,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The kept RL named its SFT by its path as `-o` spelt it: `-o run` one time and
    `-o /abs/run` (or the run folder moved) the next trained RL again from the same SFT."""
    monkeypatch.chdir(tmp_path)
    config = pipeline_config(tiny_model_cfg)
    train_pipeline(records, config, Path("run"))
    trained = record_stage_runs(monkeypatch)
    report = train_pipeline(records, config, tmp_path / "run")
    assert trained == [] and report["kept"] == ["sft", "rl"]
    (tmp_path / "run").rename(tmp_path / "moved")
    assert train_pipeline(records, config, tmp_path / "moved")["kept"] == ["sft", "rl"]
    assert trained == []


def test_a_pipeline_rerun_trains_again_a_finished_stage_whose_tensors_are_damaged(
    records: list[RewardRecord],
    tiny_model_cfg: ModelConfig,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A finished SFT whose tensor file was emptied (a disk filled while copying the run) was
    kept, and so was the RL it names, though neither `eval` nor RL can load that SFT."""
    config = pipeline_config(tiny_model_cfg)
    train_pipeline(records, config, tmp_path)
    head = tmp_path / "sft" / "router_head.safetensors"
    head.write_bytes(b"")
    trained = record_stage_runs(monkeypatch)
    assert train_pipeline(records, config, tmp_path)["kept"] == []
    assert trained == ["sft", "rl"]
    load_router(tmp_path / "sft")


def test_a_pipeline_rerun_trains_again_a_stage_killed_before_its_report(
    records: list[RewardRecord],
    tiny_model_cfg: ModelConfig,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A stage is written checkpoint first, then its training_report.json: one killed in
    between is trained again, not kept without a report (no test removed only the report)."""
    config = pipeline_config(tiny_model_cfg)
    train_pipeline(records, config, tmp_path)
    (tmp_path / "rl" / "training_report.json").unlink()
    trained = record_stage_runs(monkeypatch)
    assert train_pipeline(records, config, tmp_path)["kept"] == ["sft"]
    assert trained == ["rl"]
    assert (tmp_path / "rl" / "training_report.json").is_file()


@pytest.mark.parametrize(
    "saved", [("router_head.safetensors",), ("router_head.safetensors", "router.json")]
)
def test_a_pipeline_rerun_trains_again_an_sft_stopped_while_saving(
    records: list[RewardRecord],
    tiny_model_cfg: ModelConfig,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    saved: tuple[str, ...],
) -> None:
    """A pipeline whose SFT stage was stopped while saving (its tensors written, its metadata
    or its report not yet; RL not started) is trained again from SFT on, never kept as a
    finished SFT nor refused: the rerun leaves a checkpoint that loads."""
    config = pipeline_config(tiny_model_cfg)
    train_pipeline(records, config, tmp_path)
    sft = tmp_path / "sft"
    for name in ("router.json", "training_report.json", "router_head.safetensors"):
        if name not in saved:
            (sft / name).unlink()
    shutil.rmtree(tmp_path / "rl")
    (tmp_path / "training_report.json").unlink()
    trained = record_stage_runs(monkeypatch)
    assert train_pipeline(records, config, tmp_path)["kept"] == []
    assert trained == ["sft", "rl"]
    assert (sft / "training_report.json").is_file()
    load_router(sft)
    load_router(tmp_path / "rl")


def test_a_pipeline_rerun_names_a_local_backbone_by_its_folder_not_its_spelling(
    records: list[RewardRecord], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`backbone: bb` then `./bb` (or its absolute path) trained both stages again on the
    same features; `bb` from another working directory, another folder with other weights,
    kept the stages trained on the first one. A project moved with its backbone folder and
    runs still keeps them."""
    monkeypatch.setenv("FUGU_LITE_CACHE_DIR", str(tmp_path / "fugu-cache"))
    save_tiny_backbone(tmp_path / "project" / "bb", seed=0)
    save_tiny_backbone(tmp_path / "elsewhere" / "bb", seed=1)

    def config(backbone: str) -> PipelineConfig:
        cache = str(tmp_path / "cache")
        model = ModelConfig(backbone=backbone, layer=-1, max_tokens=32, cache_dir=cache)
        return pipeline_config(model)

    monkeypatch.chdir(tmp_path / "project")
    train_pipeline(records, config("bb"), Path("run"))
    trained: list[str] = []
    monkeypatch.setattr(
        pipeline_module, "train_sft", lambda *args: trained.append("sft") or train_sft(*args)
    )
    for spelt in ("./bb", str(tmp_path / "project" / "bb")):
        assert train_pipeline(records, config(spelt), Path("run"))["kept"] == ["sft", "rl"]
    assert trained == []
    monkeypatch.chdir(tmp_path)
    (tmp_path / "project").rename(tmp_path / "moved")
    monkeypatch.chdir(tmp_path / "moved")
    assert train_pipeline(records, config("bb"), Path("run"))["kept"] == ["sft", "rl"]
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert train_pipeline(records, config("bb"), tmp_path / "moved" / "run")["kept"] == []
    rl = load_router(tmp_path / "moved" / "run" / "rl")
    assert rl.model_cfg.backbone == str(tmp_path / "elsewhere" / "bb")


def test_a_pipeline_rerun_where_its_hub_model_is_not_cached_keeps_its_stages(
    records: list[RewardRecord], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint's hub id not in the local Hugging Face cache is located pinned to its
    trained commit (org/name@<commit>); a rerun of the pipeline there (its folder copied to
    another machine) compared that with the config's `org/name` and trained both stages
    again."""
    from huggingface_hub import constants
    from router_support import fake_hub_snapshot

    monkeypatch.setenv("FUGU_LITE_CACHE_DIR", str(tmp_path / "fugu-cache"))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    repo = "fugu-test/tiny-model"
    fake_hub_snapshot(tmp_path / "hub", repo, "a" * 40, seed=0)
    model = ModelConfig(backbone=repo, layer=-1, max_tokens=32, cache_dir=str(tmp_path / "c"))
    train_pipeline(records, pipeline_config(model), tmp_path / "run")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    rerun = train_pipeline(records, pipeline_config(model), tmp_path / "run")
    assert rerun["kept"] == ["sft", "rl"]


def test_a_pipeline_rerun_trains_again_the_stages_trained_under_other_package_versions(
    records: list[RewardRecord],
    tiny_model_cfg: ModelConfig,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """After a transformers upgrade whose features differ, the re-run kept the SFT and RL
    trained on the old features (nothing read the feature cache, whose check would see it)."""
    config = pipeline_config(tiny_model_cfg)
    train_pipeline(records, config, tmp_path)
    meta = tmp_path / "sft" / "router.json"
    saved = json.loads(meta.read_text())
    versions = {**saved["feature_package_versions"], "transformers": "4.0.0"}
    meta.write_text(json.dumps({**saved, "feature_package_versions": versions}))
    trained = record_stage_runs(monkeypatch)
    capsys.readouterr()
    train_pipeline(records, config, tmp_path)
    assert trained == ["sft", "rl"]
    said = " ".join(capsys.readouterr().err.split())
    assert "other package versions (transformers 4.0.0 ->" in said, said
    train_pipeline(records, config, tmp_path)  # the same versions since: both kept
    assert trained == ["sft", "rl"]


def test_the_code_digest_changes_with_any_python_file_of_the_package(tmp_path: Path) -> None:
    package = tmp_path / "fugu_lite"
    (package / "evaluation").mkdir(parents=True)
    (package / "model.py").write_text("X = 1\n")
    (package / "evaluation" / "report.py").write_text("Y = 2\n")
    (package / "notes.txt").write_text("not code")
    first = sources_digest(package)
    (package / "notes.txt").write_text("other notes")
    assert sources_digest(package) == first
    (package / "evaluation" / "report.py").write_text("Y = 3\n")
    assert sources_digest(package) != first
    (package / "evaluation" / "report.py").write_text("Y = 2\n")
    (package / "evaluation" / "report.py").rename(package / "report.py")
    assert sources_digest(package) != first


def test_a_pipeline_rerun_stopped_while_retraining_sft_leaves_no_rl(
    records: list[RewardRecord],
    tiny_model_cfg: ModelConfig,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The finished RL is kept only when its SFT is: one whose SFT is trained again goes
    before that SFT changes, so a stop in SFT leaves no RL of the earlier SFT."""
    config = pipeline_config(tiny_model_cfg)
    train_pipeline(records, config, tmp_path)

    def stopped(*args: object, **kwargs: object) -> dict:
        raise KeyboardInterrupt

    monkeypatch.setattr(pipeline_module, "train_sft", stopped)
    more = config.model_copy(update={"sft": config.sft.model_copy(update={"epochs": 3})})
    with pytest.raises(KeyboardInterrupt):
        train_pipeline(records, more, tmp_path)
    with pytest.raises(CheckpointError, match="not a fugu-lite router checkpoint"):
        load_router(tmp_path / "rl")


def test_a_pipeline_rerun_takes_pooling_auto_as_what_it_means(
    records: list[RewardRecord],
    tiny_model_cfg: ModelConfig,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Spelling `pooling: auto` as what it means on the backbone (penultimate on this small
    Llama) trained SFT (and RL) again on the same features; another pooling still does."""
    config = pipeline_config(tiny_model_cfg)
    assert config.model.pooling == "auto"
    train_pipeline(records, config, tmp_path)
    trained: list[str] = []
    monkeypatch.setattr(
        pipeline_module, "train_sft", lambda *args: trained.append("sft") or train_sft(*args)
    )
    spelt = config.model_copy(
        update={"model": tiny_model_cfg.model_copy(update={"pooling": "penultimate"})}
    )
    train_pipeline(records, spelt, tmp_path)
    train_pipeline(records, config, tmp_path)
    assert trained == []
    other = config.model_copy(
        update={"model": tiny_model_cfg.model_copy(update={"pooling": "mean"})}
    )
    train_pipeline(records, other, tmp_path)
    assert trained == ["sft"]


def evaluated(checkpoint: Path, records: list[RewardRecord]) -> Path:
    """`fugu-lite eval`'s default report folder (CHECKPOINT/eval-test), written, plus a file
    of the user's own in it."""
    run_evaluation(checkpoint, records, "test", checkpoint / "eval-test")
    (checkpoint / "eval-test" / "my-notes.txt").write_text("mine")
    return checkpoint / "eval-test"


def test_a_pipeline_rerun_removes_the_eval_reports_of_the_stages_it_trains_again(
    records: list[RewardRecord],
    tiny_model_cfg: ModelConfig,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`eval` writes into CHECKPOINT/eval-SPLIT by default; a re-run that trained the stage
    again left that report of a model that no longer exists."""
    config = pipeline_config(tiny_model_cfg)
    train_pipeline(records, config, tmp_path)
    sft_eval, rl_eval = evaluated(tmp_path / "sft", records), evaluated(tmp_path / "rl", records)
    pareto = tmp_path / "rl" / "pareto-test"
    pareto.mkdir()
    (pareto / "pareto_report.json").write_text("{}")  # as `eval --pareto` leaves it
    elsewhere = tmp_path / "my-eval"
    run_evaluation(tmp_path / "rl", records, "test", elsewhere)

    train_pipeline(records, config, tmp_path)  # both kept: so are their reports
    assert (sft_eval / "evaluation_report.json").exists()
    assert (rl_eval / "evaluation_report.json").exists()
    capsys.readouterr()

    slower = config.model_copy(update={"rl": config.rl.model_copy(update={"epochs": 2})})
    train_pipeline(records, slower, tmp_path)
    said = " ".join(capsys.readouterr().err.split())
    assert "removed the evaluation reports of the earlier checkpoint" in said
    assert "eval-test" in said and "pareto-test" in said
    assert sorted(path.name for path in rl_eval.iterdir()) == ["my-notes.txt"]
    assert not pareto.exists()
    assert (sft_eval / "evaluation_report.json").exists()  # SFT kept
    assert (elsewhere / "evaluation_report.json").exists()  # the user's own folder

    train_pipeline(generated_records(seed=1), slower, tmp_path)
    assert sorted(path.name for path in sft_eval.iterdir()) == ["my-notes.txt"]


def test_training_a_stage_into_its_folder_again_removes_its_eval_reports(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig, tmp_path: Path
) -> None:
    """`train sft|rl -o DIR` over an earlier checkpoint left DIR/eval-test of the old one."""
    training = SFT_TRAINING.model_copy(update={"epochs": 1})
    sft = SFTConfig(model=tiny_model_cfg, training=training)
    train_sft(records, sft, tmp_path / "sft")
    report = evaluated(tmp_path / "sft", records)
    train_sft(records, sft.model_copy(update={"training": SFT_TRAINING}), tmp_path / "sft")
    assert sorted(path.name for path in report.iterdir()) == ["my-notes.txt"]

    rl = RLConfig(model=tiny_model_cfg, training=RL_TRAINING.model_copy(update={"epochs": 1}))
    train_rl(records, rl, tmp_path / "rl", str(tmp_path / "sft"))
    report = evaluated(tmp_path / "rl", records)
    (report / "my-notes.txt").unlink()
    named = tmp_path / "rl" / "mine"  # `eval -o CHECKPOINT/mine`: a report of this checkpoint
    run_evaluation(tmp_path / "rl", records, "validation", named)
    other = tmp_path / "rl" / "eval-of-sft"  # a report of another checkpoint put here
    run_evaluation(tmp_path / "sft", records, "test", other)
    train_rl(records, rl, tmp_path / "rl", str(tmp_path / "sft"))
    assert not report.exists() and not named.exists()  # emptied: the folder goes too
    assert (other / "evaluation_report.json").exists()
    assert (tmp_path / "rl" / "router.json").exists()


def test_a_report_written_from_another_folder_still_goes_with_its_checkpoint(
    records: list[RewardRecord],
    tiny_model_cfg: ModelConfig,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`cd runs; eval --checkpoint sft -o sft/mine` wrote `"checkpoint": "sft"`, a name read
    from wherever the report was read next: training the checkpoint again from another folder
    found no `sft` there, and the old model's report stayed beside the new one."""
    sft = SFTConfig(model=tiny_model_cfg, training=SFT_TRAINING.model_copy(update={"epochs": 1}))
    checkpoint = tmp_path / "runs" / "sft"
    train_sft(records, sft, checkpoint)
    monkeypatch.chdir(tmp_path / "runs")
    run_evaluation(Path("sft"), records, "test", Path("sft") / "mine")
    report = json.loads((checkpoint / "mine" / "evaluation_report.json").read_text())
    assert Path(report["checkpoint"]) == checkpoint  # readable from anywhere
    monkeypatch.chdir(tmp_path)
    train_sft(records, sft, checkpoint)
    assert not (checkpoint / "mine").exists()


def test_training_again_removes_an_eval_report_written_into_the_checkpoint_folder(
    records: list[RewardRecord],
    tiny_model_cfg: ModelConfig,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`eval -o CHECKPOINT` writes the report beside router.json; training into that folder
    again removed the reports in its subfolders only, so evaluation_report.json (and its
    plots and predictions) of the old model stayed beside the new checkpoint."""
    sft = SFTConfig(model=tiny_model_cfg, training=SFT_TRAINING.model_copy(update={"epochs": 1}))
    checkpoint = tmp_path / "sft"
    train_sft(records, sft, checkpoint)
    run_evaluation(checkpoint, records, "test", checkpoint)
    other = tmp_path / "other"
    train_sft(records, sft, other)
    run_evaluation(checkpoint, records, "test", other)  # a report of another checkpoint
    capsys.readouterr()

    train_sft(records, sft.model_copy(update={"training": SFT_TRAINING}), checkpoint)
    said = " ".join(capsys.readouterr().err.split())
    assert f"removed the evaluation reports of the earlier checkpoint in {checkpoint}" in said
    left = sorted(path.name for path in checkpoint.iterdir())
    assert left == ["router.json", "router_head.safetensors", "training_report.json"]
    train_sft(records, sft.model_copy(update={"training": SFT_TRAINING}), other)
    assert (other / "evaluation_report.json").exists()  # it names the first checkpoint


def test_eval_on_validation_says_when_the_router_was_kept_for_its_validation_reward(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig, tmp_path: Path
) -> None:
    """On the validation split the report marked kNN's and ridge's scores optimistic (their
    k and alpha chosen there) but not the router's, though SFT keeps its best epoch there and
    ES its best generation: the router looked fairly compared."""

    def router_notes(checkpoint: Path, split: str) -> list[str]:
        report = run_evaluation(checkpoint, records, split, tmp_path / f"{checkpoint.name}-{split}")
        return [note for note in report["notes"] if note.startswith("router:")]

    sft = SFTConfig(model=tiny_model_cfg, training=SFT_TRAINING.model_copy(update={"epochs": 2}))
    train_sft(records, sft, tmp_path / "sft")
    [note] = router_notes(tmp_path / "sft", "validation")
    assert "its SFT epoch was kept for its reward on the validation split" in note
    assert "optimistic" in note
    assert router_notes(tmp_path / "sft", "test") == []
    rl = RLConfig(model=tiny_model_cfg, training=RL_TRAINING.model_copy(update={"epochs": 1}))
    train_rl(records, rl, tmp_path / "rl", str(tmp_path / "sft"))
    assert router_notes(tmp_path / "rl", "validation") == []  # RL keeps its last epoch
    es = ESConfig(
        model=tiny_model_cfg,
        training=ESTrainingConfig(population_size=4, iterations=2, samples=0, search="head"),
    )
    train_es(records, es, tmp_path / "es")
    [note] = router_notes(tmp_path / "es", "validation")
    assert "its ES generation was kept for its reward on the validation split" in note
    without_validation = [r for r in records if r.split != "validation"]
    train_sft(without_validation, sft, tmp_path / "sft-last")
    assert router_notes(tmp_path / "sft-last", "validation") == []  # it kept its last epoch


def test_eval_pareto_on_validation_says_when_the_router_was_kept_for_its_validation_reward(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig, tmp_path: Path
) -> None:
    """Plain eval notes that an SFT router kept its epoch for its validation reward, so its
    score on validation is optimistic; eval --pareto drew that router's point there without
    the note."""
    sft = SFTConfig(model=tiny_model_cfg, training=SFT_TRAINING.model_copy(update={"epochs": 2}))
    train_sft(records, sft, tmp_path / "sft")
    notes = {
        split: run_pareto_evaluation(tmp_path / "sft", records, split, tmp_path / split)["notes"]
        for split in ("validation", "test")
    }
    [note] = [note for note in notes["validation"] if note.startswith("router:")]
    assert "its SFT epoch was kept for its reward on the validation split" in note
    assert not [note for note in notes["test"] if note.startswith("router:")]
    assert note in (tmp_path / "validation" / "pareto_report.md").read_text()


def test_rl_reads_and_hashes_its_starting_checkpoint_once(
    records: list[RewardRecord],
    tiny_model_cfg: ModelConfig,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """RL read the SFT's tensor file twice at its start: once to load it (checked against the
    SHA-256 its router.json names), once more to hash it for metadata.inputs."""
    training = SFT_TRAINING.model_copy(update={"epochs": 1})
    train_sft(records, SFTConfig(model=tiny_model_cfg, training=training), tmp_path / "sft")
    head = tmp_path / "sft" / "router_head.safetensors"
    reads: list[Path] = []
    read_bytes = Path.read_bytes

    def counted(path: Path) -> bytes:
        if path == head:
            reads.append(path)
        return read_bytes(path)

    monkeypatch.setattr(Path, "read_bytes", counted)
    rl = RLConfig(model=tiny_model_cfg, training=RL_TRAINING.model_copy(update={"epochs": 1}))
    train_rl(records, rl, tmp_path / "rl", str(tmp_path / "sft"))
    assert len(reads) == 1
    inputs = json.loads((tmp_path / "rl" / "router.json").read_text())["metadata"]["inputs"]
    assert inputs["continued_from"]["sha256"] == hashlib.sha256(read_bytes(head)).hexdigest()


def test_a_pipeline_rerun_trains_sft_again_when_the_backbone_folder_was_updated(
    records: list[RewardRecord], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same config and records, but the backbone folder now holds other weights: the kept
    SFT (trained on the old weights) made RL refuse to continue from it."""
    monkeypatch.setenv("FUGU_LITE_CACHE_DIR", str(tmp_path / "fugu-cache"))
    save_tiny_backbone(tmp_path / "bb", seed=0)
    cfg = ModelConfig(
        backbone=str(tmp_path / "bb"), layer=-1, head="linear", max_tokens=32,
        runtime="torch", cache_dir=str(tmp_path / "cache"),
    )  # fmt: skip
    config = pipeline_config(cfg)
    train_pipeline(records, config, tmp_path / "run")
    save_tiny_backbone(tmp_path / "bb", seed=1)
    trained = []
    monkeypatch.setattr(
        pipeline_module, "train_sft", lambda *args: trained.append(args) or train_sft(*args)
    )
    train_pipeline(records, config, tmp_path / "run")
    assert len(trained) == 1
    assert load_router(tmp_path / "run" / "rl").model_cfg.backbone == str(tmp_path / "bb")
