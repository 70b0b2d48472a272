"""The sep-CMA-ES stage: batched population scoring, search quality on a problem with a known
best head, reports and checkpoints, and resuming after a kill -9."""

from __future__ import annotations

import itertools
import json
import math
import os
import pickle
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import cmaes
import numpy as np
import pytest
import torch
from cmaes import SepCMA
from conftest import generated_records, save_tiny_backbone
from typer.testing import CliRunner

import fugu_lite
import fugu_lite.train_es as train_es_module
from fugu_lite.cli import app
from fugu_lite.config import ESConfig, ESTrainingConfig, ModelConfig
from fugu_lite.config_errors import ConfigError
from fugu_lite.config_loading import load_config, load_stage_config
from fugu_lite.es_population import (
    SplitData,
    logits_metrics,
    parameter_vector,
    policy_metrics,
    population_fitness,
    population_logits,
    restrict_search,
    searches_output_weights_only,
    set_parameter_vector,
    split_data,
)
from fugu_lite.es_state import (
    ESResumeError,
    SearchState,
    fresh_state,
    read_es_state,
    state_path,
)
from fugu_lite.evaluation.output import REPORT_JSON
from fugu_lite.model import RouterModel, load_router
from fugu_lite.schemas import RewardRecord, write_records
from fugu_lite.train_es import (
    evolve,
    run_and_record,
    run_generation,
    search_summary,
    train_es,
    validate_mean,
)
from fugu_lite.training_common import TrainingDiverged, make_model

REWARDS = torch.tensor([[0.0, 1.0, 0.2], [0.9, 0.1, 0.3]])
TINY_TRAINING = {
    "population_size": 8,
    "sigma0": 0.5,
    "samples": 0,
    "iterations": 12,
    "batch_size": 32,
    "validate_every": 3,
    "save_every": 4,
    "log_every": 100,
}
ITERATIONS = 500
CONFIG = """\
model:
  backbone: tiny-random
  layer: -1
  max_tokens: 32
  head: linear
  cache_dir: {cache_dir}
training:
  population_size: 8
  sigma0: 0.5
  iterations: {iterations}
  batch_size: 32
  validate_every: 5
  save_every: 5
  log_every: 100
"""


def tiny_config(cfg: ModelConfig, **training: object) -> ESConfig:
    model = cfg.model_copy(update={"layer": -1, "head": "linear"})
    return ESConfig(model=model, training=ESTrainingConfig(**{**TINY_TRAINING, **training}))


def without_seconds(history: list[dict]) -> list[dict]:
    return [{key: value for key, value in entry.items() if key != "seconds"} for entry in history]


# --- scoring a population -------------------------------------------------------------------


@pytest.mark.parametrize("head", ["linear", "mlp"])
def test_population_logits_are_each_candidates_own_logits(head: str) -> None:
    torch.manual_seed(0)
    model_cfg = ModelConfig(head=head, head_hidden=6, head_dropout=0.3)
    model = RouterModel(model_cfg, ["a", "b", "c"], feature_dim=5)
    model.fit_normalizer(torch.randn(50, 5) * 3 + 1)
    features = torch.randn(7, 5)
    n_parameters = sum(parameter.numel() for parameter in model.parameters())
    candidates = torch.randn(4, n_parameters)
    logits = population_logits(model, candidates, {"features": features})
    assert logits.shape == (4, 7, 3)
    for candidate, batched in zip(candidates, logits, strict=True):
        set_parameter_vector(model, candidate.double().numpy())
        torch.testing.assert_close(batched, model.eval()(features=features))


def test_output_layer_search_scores_each_candidate_on_the_fixed_hidden_layer() -> None:
    torch.manual_seed(0)
    model_cfg = ModelConfig(head="mlp", head_hidden=6, head_dropout=0.3)
    model = RouterModel(model_cfg, ["a", "b", "c"], feature_dim=5)
    model.fit_normalizer(torch.randn(50, 5) * 3 + 1)
    hidden_before = model.head[0].weight.detach().clone()
    restrict_search(model, "output_layer")
    assert searches_output_weights_only(model)
    features = torch.randn(7, 5)
    candidates = torch.randn(4, 3 * 6)  # the output layer only: 3 workers x 6 hidden units
    logits = population_logits(model, candidates, {"features": features})
    for candidate, batched in zip(candidates, logits, strict=True):
        set_parameter_vector(model, candidate.double().numpy())
        torch.testing.assert_close(batched, model.eval()(features=features))
    torch.testing.assert_close(model.head[0].weight, hidden_before)


def test_restrict_search_head_keeps_every_head_weight_searched() -> None:
    model = RouterModel(ModelConfig(head="mlp", head_hidden=6), ["a", "b", "c"], feature_dim=5)
    restrict_search(model, "head")
    assert not searches_output_weights_only(model)
    linear = RouterModel(ModelConfig(head="linear"), ["a", "b", "c"], feature_dim=5)
    restrict_search(linear, "output_layer")  # a linear head is its own output layer
    assert searches_output_weights_only(linear)


def test_output_layer_of_a_head_without_one_says_so() -> None:
    model = RouterModel(ModelConfig(head="linear"), ["a", "b"], feature_dim=5)
    model.head = torch.nn.Identity()  # e.g. a subclass's own head
    with pytest.raises(TypeError, match="has no linear output layer"):
        restrict_search(model, "output_layer")


def test_a_splits_data_is_every_record_of_the_split_in_the_records_order(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig
) -> None:
    """A mutation round's split_data shuffling its split passed every test, a validation's
    means being alike in any order: a generation draws its prompts by their index in this
    batch, so the records' order (with the seed) is what chooses them."""
    model = make_model(tiny_model_cfg, records[0].worker_ids)
    train = [record for record in records if record.split == "train"]
    assert len(train) > 32
    data = split_data(records, model, "train")
    torch.testing.assert_close(data.rewards, torch.tensor([record.rewards for record in train]))
    features = model.features_for([record.prompt for record in train])
    torch.testing.assert_close(data.inputs["features"], features)


def test_a_head_whose_output_layer_has_a_bias_is_scored_with_it() -> None:
    """Only a bias-free output layer is one matmul of the fixed hidden layer: a mutation
    round's check without `bias is None` passed every test, build_head giving no output
    layer a bias, but then scored a head with a bias (here frozen, the weight alone
    searched) without it."""
    torch.manual_seed(0)
    model = RouterModel(ModelConfig(head="linear"), ["a", "b", "c"], feature_dim=5)
    model.head = torch.nn.Linear(5, 3)  # e.g. a subclass's own head
    torch.nn.init.normal_(model.head.bias)
    model.head.bias.requires_grad_(False)
    assert not searches_output_weights_only(model)
    features = torch.randn(7, 5)
    candidates = torch.randn(2, 3 * 5)
    logits = population_logits(model, candidates, {"features": features})
    for candidate, batched in zip(candidates, logits, strict=True):
        set_parameter_vector(model, candidate.double().numpy())
        torch.testing.assert_close(batched, model.eval()(features=features))


def test_fitness_scores_the_argmax_choice_plus_the_entropy_bonus() -> None:
    logits = torch.tensor([[[0.0, 5.0, 0.0], [5.0, 0.0, 0.0]], [[0.0, 0.0, 5.0], [0.0, 0.0, 0.0]]])
    scores = population_fitness(logits, REWARDS, samples=0, entropy_coefficient=0.5)
    assert scores["reward"].tolist() == pytest.approx([(1.0 + 0.9) / 2, (0.2 + 0.9) / 2])
    probabilities = torch.softmax(logits, -1)
    entropy = -(probabilities * probabilities.log()).sum(-1).mean(-1)
    torch.testing.assert_close(scores["entropy"], entropy)
    torch.testing.assert_close(scores["fitness"], scores["reward"] + 0.5 * entropy)


def test_sampled_fitness_averages_to_the_expected_reward() -> None:
    logits = torch.tensor([[[0.0, 1.0, -1.0], [2.0, 0.0, 0.5]], [[0.0, 0.0, 0.0], [0.0, 3.0, 0.0]]])
    generator = torch.Generator().manual_seed(0)
    scores = population_fitness(logits, REWARDS, samples=20000, entropy_coefficient=0.0,
                                generator=generator)  # fmt: skip
    expected = (torch.softmax(logits, -1) * REWARDS).sum(-1).mean(-1)
    torch.testing.assert_close(scores["reward"], expected, atol=0.01, rtol=0)


def test_sampled_fitness_draws_the_same_numbers_for_every_candidate() -> None:
    """Common random numbers: every candidate's choices are drawn with the same uniforms, so
    candidates of one policy score the same and a better policy never loses on luck. Only
    the mean over 20,000 draws was read, so drawing each candidate's own numbers (the
    ranking then partly the draw's) passed every test."""
    policy = [[0.0, 1.0, -1.0], [2.0, 0.0, 0.5]]
    logits = torch.tensor([policy] * 6)
    generator = torch.Generator().manual_seed(0)
    scores = population_fitness(logits, REWARDS, samples=3, entropy_coefficient=0.0,
                                generator=generator)  # fmt: skip
    assert len(set(scores["reward"].tolist())) == 1


def test_sampled_fitness_draws_each_prompts_choice_apart() -> None:
    """One uniform per sample for the whole batch (torch.rand(samples, 1) for (samples,
    batch)) kept every mean and passed every test, but chose alike on every prompt: a
    policy even between a worker earning 0 and one earning 1 then scored 0 or 1 on its one
    sample, where 400 prompts drawn apart score about a half."""
    logits = torch.zeros(1, 400, 2)
    rewards = torch.tensor([0.0, 1.0]).expand(400, 2)
    for seed in range(3):
        generator = torch.Generator().manual_seed(seed)
        reward = float(population_fitness(logits, rewards, 1, 0.0, generator)["reward"][0])
        assert 0.4 < reward < 0.6, (seed, reward)


def test_a_draw_above_the_rounded_total_probability_chooses_the_last_worker() -> None:
    """In float32 a policy's cumulative probabilities may end short of 1 (these logits: at
    0.99999988, as do about a quarter of random 3-worker rows), while torch.rand draws up
    to 0.99999994: such a draw is below no cumulative value, so without the clamp it chose
    worker 3 of 0..2 and the generation failed with gather's index out of bounds (a default
    run draws 4.8 million numbers, each 0.99999994 once in 16.8 million). Seed 63's million
    draws hold one above this total (checked below)."""
    samples, batch = 1000, 1000
    logits = torch.tensor([-4.0, 0.0, 0.0]).expand(1, batch, 3)
    total = float(torch.log_softmax(logits[0, 0], -1).exp().cumsum(-1)[-1])
    draws = torch.rand(samples, batch, generator=torch.Generator().manual_seed(63))
    assert total < 1 and bool((draws > total).any())  # the case this test is about
    rewards = torch.tensor([0.0, 0.0, 1.0]).expand(batch, 3)
    scores = population_fitness(logits, rewards, samples, 0.0, torch.Generator().manual_seed(63))
    assert float(scores["reward"][0]) == pytest.approx(1 / (2 + math.exp(-4)), abs=0.002)


# --- the search on a problem whose best head is known ---------------------------------------


def clustered_split(n: int, centers: torch.Tensor, generator: torch.Generator) -> SplitData:
    """Features around one of K centers; on cluster k worker k earns 1, the others ~0.2."""
    cluster = torch.randint(0, len(centers), (n,), generator=generator)
    features = centers[cluster] + torch.randn(n, centers.shape[1], generator=generator)
    rewards = 0.2 + 0.1 * torch.rand(n, len(centers), generator=generator)
    rewards[torch.arange(n), cluster] = 1.0
    return SplitData({"features": features}, rewards)


def tiny_search(population: int = 4) -> tuple[RouterModel, SepCMA]:
    """A linear head on 3 plain features for two workers, and a sep-CMA-ES from its zeros."""
    cfg = ModelConfig(backbone="tiny-random", head="linear", normalize_features=False)
    model = RouterModel(cfg, ["a", "b"], feature_dim=3)
    start = parameter_vector(model)
    return model, SepCMA(mean=start.copy(), sigma=0.5, seed=0, population_size=population)


def test_a_generation_scores_the_population_on_batch_size_train_prompts() -> None:
    """Each generation scores the candidates on batch_size train prompts drawn afresh (the
    whole split when it has no more): both workers of prompt i earn 2**i here, so the mean
    reward says which prompts were scored."""
    values = [2.0**index for index in range(6)]
    features = torch.randn(6, 3, generator=torch.Generator().manual_seed(0))
    train = SplitData({"features": features}, torch.tensor([[value, value] for value in values]))
    for batch_size, sums in ((2, {a + b for a, b in itertools.combinations(values, 2)}),
                             (32, {sum(values)})):  # fmt: skip
        model, optimizer = tiny_search()
        training = ESTrainingConfig(**{**TINY_TRAINING, "batch_size": batch_size})
        metrics = run_generation(model, optimizer, train, training, generation=1)
        assert metrics["reward_mean"] * min(batch_size, len(values)) in sums


def test_the_opening_line_gives_the_batch_a_generation_scores(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A train split smaller than batch_size is scored whole: the line before the first
    generation says that batch (6), not the setting (32)."""
    model, _ = tiny_search()
    generator = torch.Generator().manual_seed(0)
    train = SplitData({"features": torch.randn(6, 3, generator=generator)},
                      torch.rand(6, 2, generator=generator))  # fmt: skip
    training = ESTrainingConfig(**{**TINY_TRAINING, "iterations": 1})
    evolve(model, train, None, ESConfig(model=model.model_cfg, training=training), tmp_path)
    assert "population=8; batch=6" in " ".join(capsys.readouterr().err.split())


def test_a_generations_line_gives_the_best_and_the_mean_fitness_of_its_candidates() -> None:
    """Without an entropy bonus a candidate's fitness is its reward, so the generation's
    mean fitness is its candidates' mean reward, below the best of them (the candidates of
    this population choose different workers on prompts each worker wins half of)."""
    generator = torch.Generator().manual_seed(0)
    features = torch.randn(16, 3, generator=generator)
    train = SplitData({"features": features}, (features[:, :2] > 0).float())
    model, optimizer = tiny_search(population=8)
    metrics = run_generation(model, optimizer, train, ESTrainingConfig(**TINY_TRAINING), 1)
    assert metrics["fitness_mean"] == pytest.approx(metrics["reward_mean"])
    assert metrics["fitness_best"] > metrics["fitness_mean"]


def test_a_generations_fitness_adds_its_configs_entropy_bonus() -> None:
    """training.entropy_coefficient reached population_fitness through run_generation alone:
    the search scoring every population with a bonus of 0 (the config's value dropped)
    passed every ES test, which ran without a bonus or called population_fitness itself."""
    features = torch.randn(16, 3, generator=torch.Generator().manual_seed(0))
    train = SplitData({"features": features}, (features[:, :2] > 0).float())
    model, optimizer = tiny_search(population=8)
    training = ESTrainingConfig(**{**TINY_TRAINING, "entropy_coefficient": 0.5})
    metrics = run_generation(model, optimizer, train, training, 1)
    assert metrics["entropy_mean"] > 0.1
    expected = metrics["reward_mean"] + 0.5 * metrics["entropy_mean"]
    assert metrics["fitness_mean"] == pytest.approx(expected)


def test_a_generation_with_samples_scores_sampled_choices_not_the_argmax() -> None:
    """Every candidate prefers worker b, the right one, by a logit of about 1: its argmax
    always earns 1, its sampled choices about sigmoid(1) = 0.73. training.samples reached
    population_fitness through run_generation alone, and scoring every generation on the
    argmax (samples dropped) passed every ES test."""
    model, _ = tiny_search()
    start = np.zeros(6)
    start[3] = 1.0  # worker b's weight on the first feature, the only one set
    features = torch.tensor([[1.0, 0.0, 0.0]] * 4)
    train = SplitData({"features": features}, torch.tensor([[0.0, 1.0]] * 4))
    rewards = {}
    for samples in (0, 256):
        optimizer = SepCMA(mean=start.copy(), sigma=0.05, seed=0, population_size=8)
        training = ESTrainingConfig(**{**TINY_TRAINING, "samples": samples})
        rewards[samples] = run_generation(model, optimizer, train, training, 1)["reward_mean"]
    assert rewards[0] == 1.0
    assert rewards[256] == pytest.approx(1 / (1 + math.exp(-1)), abs=0.05)


class TellRecordingSepCMA(SepCMA):
    """A sep-CMA-ES that keeps the values each tell gave it (the search itself unchanged)."""

    told: list[list[float]]

    def tell(self, solutions: list[tuple[np.ndarray, float]]) -> None:
        self.told = [*getattr(self, "told", []), [value for _, value in solutions]]
        super().tell(solutions)


def overflowing_search(first_weight: float) -> tuple[RouterModel, TellRecordingSepCMA, SplitData]:
    """tiny_search's head from weight first_weight on worker a's first feature, whose value
    on the first prompt (3e38) overflows float32 past a weight of 1.13, and worker b best."""
    model, _ = tiny_search()
    start = np.zeros(6)
    start[0] = first_weight
    optimizer = TellRecordingSepCMA(mean=start, sigma=0.1, seed=0, population_size=8)
    features = torch.tensor([[3e38, 0.0, 0.0], [0.0, 1.0, 0.0]])
    return model, optimizer, SplitData({"features": features}, torch.tensor([[0.0, 1.0]] * 2))


def test_a_candidate_whose_logits_overflow_ranks_below_every_finite_one() -> None:
    """An infinite logit makes the entropy, so the fitness, NaN; told to CMA as -NaN, which
    compares false with every value, it was sorted first: the mean moved toward the
    candidates that overflowed (here also the ones choosing the worse worker), and the
    generation's fitness figures were NaN (invalid JSON in the report)."""
    model, optimizer, train = overflowing_search(first_weight=1.2)
    metrics = run_generation(model, optimizer, train, ESTrainingConfig(**TINY_TRAINING), 1)
    told = optimizer.told[-1]
    overflowed = [value for value in told if not math.isfinite(value)]
    assert 0 < len(overflowed) < len(told)
    assert not any(math.isnan(value) for value in told)
    assert min(overflowed) > max(value for value in told if math.isfinite(value))
    assert metrics["candidates_not_finite"] == len(overflowed)
    assert all(math.isfinite(value) for value in metrics.values())
    json.dumps(metrics, allow_nan=False)


def test_a_generations_line_counts_its_candidates_whose_logits_overflowed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The 'ES gen N' line says how many candidates overflowed and were ranked last: their
    NaN fitness is left out of the line's best and mean, which alone would hide them."""
    model, optimizer, train = overflowing_search(first_weight=1.2)
    set_parameter_vector(model, optimizer.mean)
    training = ESTrainingConfig(**{**TINY_TRAINING, "sigma0": 0.1, "iterations": 1, "log_every": 1})
    state, _ = evolve(
        model, train, None, ESConfig(model=model.model_cfg, training=training), tmp_path
    )
    overflowed = state.history[-1]["train"]["candidates_not_finite"]
    assert 0 < overflowed < 8
    line = next(
        line for line in capsys.readouterr().err.splitlines() if line.startswith("ES gen 1 ")
    )
    assert f"({overflowed} candidates with NaN or infinite logits ranked last)" in line


def test_a_generation_whose_every_candidate_overflows_stops_naming_sigma0() -> None:
    model, optimizer, train = overflowing_search(first_weight=5.0)
    with pytest.raises(TrainingDiverged, match=r"generation 1: the logits of every candidate"):
        run_generation(model, optimizer, train, ESTrainingConfig(**TINY_TRAINING), 1)


def test_a_mean_whose_logits_overflow_on_validation_stops_naming_sigma0() -> None:
    """A CMA mean that overflows float32 on a validation prompt (none of the train batch's)
    stopped the search with torch's own 'Expected parameter probs ... found invalid values'
    and a dump of the tensor, naming no setting; it stops as a generation whose every
    candidate overflowed does, before the mean is kept as the best."""
    model, optimizer, validation = overflowing_search(first_weight=0.0)
    training = ESTrainingConfig(**TINY_TRAINING)
    state = fresh_state(model, training, {}, validation)
    optimizer.mean[0] = 5.0
    state.optimizer = optimizer
    with pytest.raises(TrainingDiverged, match=r"generation 3 \(its mean, on validation\).*sigma0"):
        validate_mean(model, state, validation, 3, training)
    assert state.best_generation == 0


def test_each_generation_draws_its_own_train_batch() -> None:
    """A generation's batch_size prompts are drawn with that generation's seed, so the
    generations score different prompts (each of prompt i's workers earns 2**i, so the mean
    reward names the pair scored); one generation was read, so scoring every generation on
    the split's first batch_size prompts (ES then never learns from the others) passed
    every test."""
    values = [2.0**index for index in range(6)]
    features = torch.randn(6, 3, generator=torch.Generator().manual_seed(0))
    train = SplitData({"features": features}, torch.tensor([[value, value] for value in values]))
    model, optimizer = tiny_search()
    training = ESTrainingConfig(**{**TINY_TRAINING, "batch_size": 2})
    pairs = {
        run_generation(model, optimizer, train, training, generation)["reward_mean"] * 2
        for generation in range(1, 7)
    }
    assert len(pairs) > 1


def test_a_fresh_search_draws_population_size_candidates_sigma0_around_the_start() -> None:
    """Every test ran with sigma0 0.5: a search given no step (or its own) and CMA's default
    population of 4 + 3 ln(dim) passed them all."""
    model, _ = tiny_search()
    training = ESTrainingConfig(**{**TINY_TRAINING, "sigma0": 0.2, "population_size": 5})
    optimizer = fresh_state(model, training, {}, None).optimizer
    assert optimizer.population_size == 5
    spread = np.stack([optimizer.ask() for _ in range(2000)]) - parameter_vector(model)
    assert float(spread.std()) == pytest.approx(0.2, rel=0.05)


def test_the_seed_chooses_each_generations_draws() -> None:
    """Every test ran with seed 0: a search that ignored training.seed passed them all."""
    generator = torch.Generator().manual_seed(0)
    train = SplitData(
        {"features": torch.randn(6, 3, generator=generator)}, torch.rand(6, 2, generator=generator)
    )

    def first_mean(seed: int) -> list[float]:
        model, optimizer = tiny_search()
        training = ESTrainingConfig(**{**TINY_TRAINING, "seed": seed, "batch_size": 3})
        run_generation(model, optimizer, train, training, generation=1)
        return optimizer.mean.tolist()

    assert first_mean(1) == first_mean(1)
    assert first_mean(1) != first_mean(0)


def test_a_validated_mean_that_only_ties_the_best_does_not_replace_it() -> None:
    model, optimizer = tiny_search()
    features = torch.randn(4, 3, generator=torch.Generator().manual_seed(0))
    validation = SplitData({"features": features}, torch.tensor([[1.0, 0.0], [0.0, 1.0]] * 2))
    training = ESTrainingConfig(**TINY_TRAINING)
    state = fresh_state(model, training, {}, validation)
    state.optimizer = optimizer  # its mean is the start: the same validation reward
    validate_mean(model, state, validation, 3, training)
    assert (state.best_generation, state.best_validation_reward) == (0, 0.5)


def test_the_last_generation_is_validated_between_validate_every_ones() -> None:
    """iterations 4, validate_every 3: generations 3 and 4 are validated (the last one could
    otherwise be kept unvalidated, or its better mean never kept)."""
    model, optimizer = tiny_search()
    features = torch.randn(4, 3, generator=torch.Generator().manual_seed(0))
    split = SplitData({"features": features}, torch.tensor([[1.0, 0.0], [0.0, 1.0]] * 2))
    training = ESTrainingConfig(**{**TINY_TRAINING, "iterations": 4, "validate_every": 3})
    state = fresh_state(model, training, {}, split)
    state.optimizer = optimizer
    for generation in range(1, 5):
        run_and_record(model, state, split, split, training, generation, [])
    assert [entry["generation"] for entry in state.history if "validation" in entry] == [3, 4]


def test_the_report_gives_the_mean_seconds_of_a_generation() -> None:
    state = SimpleNamespace(
        history=[{"seconds": seconds} for seconds in (1.0, 2.0, 6.0)],
        best_generation=3, best_validation_reward=None, initial_validation=None,
        generation=3, resumed_from=[],
    )  # fmt: skip
    assert search_summary(state)["seconds_per_generation"] == pytest.approx(3.0)  # type: ignore[arg-type]


def test_a_search_of_one_parameter_is_refused_before_cmaes_asserts() -> None:
    model = RouterModel(ModelConfig(backbone="tiny-random", head="linear"), ["a"], feature_dim=1)
    with pytest.raises(ValueError, match="sep-CMA-ES needs at least 2 trainable parameters"):
        fresh_state(model, ESTrainingConfig(**TINY_TRAINING), {}, None)


def test_policy_metrics_of_the_zero_head_on_known_rewards() -> None:
    """The zero head picks worker 0 everywhere with probabilities 1/2: the oracle is the mean
    of each prompt's best reward (0.75), not the best reward of the split (1)."""
    model = RouterModel(ModelConfig(head="linear", normalize_features=False), ["a", "b"], 3)
    data = SplitData({"features": torch.randn(2, 3)}, torch.tensor([[1.0, 0.0], [0.0, 0.5]]))
    assert policy_metrics(model, data) == pytest.approx(
        {"reward": 0.5, "expected_reward": 0.375, "oracle_reward": 0.75, "entropy": math.log(2)}
    )


def test_the_expected_reward_weighs_each_reward_by_the_policys_probability() -> None:
    """The zero head's even probabilities make the expected reward the rewards' mean, so
    expected_reward taken as that mean (its probabilities dropped) passed every test; a
    policy of 1/4 and 3/4 expects 3/4 of worker b's reward."""
    logits = torch.tensor([[0.0, math.log(3.0)], [math.log(3.0), 0.0]])
    rewards = torch.tensor([[0.0, 1.0], [0.0, 0.5]])
    metrics = logits_metrics(logits, rewards)
    assert metrics["expected_reward"] == pytest.approx((0.75 * 1.0 + 0.25 * 0.5) / 2)
    assert metrics["reward"] == pytest.approx(0.5)


def test_policy_metrics_read_the_policy_without_the_heads_dropout() -> None:
    """A search from zero starts from a fresh MLP head, in training mode: its validation
    (the reward every later mean must beat) is the policy's own, without dropout, as the
    validations of the means are."""
    generator = torch.Generator().manual_seed(0)
    config = ModelConfig(head="mlp", head_hidden=16, head_dropout=0.5, normalize_features=False)
    model = RouterModel(config, ["a", "b", "c"], 4)
    torch.nn.init.normal_(model.output_layer.weight, generator=generator)  # it starts at 0
    data = SplitData(
        {"features": torch.randn(64, 4, generator=generator)},
        torch.rand(64, 3, generator=generator),
    )
    without_dropout = policy_metrics(model.eval(), data)
    assert policy_metrics(model.train(), data) == pytest.approx(without_dropout)


def test_sep_cma_es_reaches_the_oracle_on_clustered_features(tmp_path: Path) -> None:
    generator = torch.Generator().manual_seed(0)
    centers = 3.0 * torch.randn(4, 8, generator=generator)
    train, validation = (clustered_split(n, centers, generator) for n in (400, 200))
    config = ESConfig(
        model=ModelConfig(head="linear", normalize_features=False),
        training=ESTrainingConfig(
            population_size=16, sigma0=0.5, iterations=40, batch_size=200, validate_every=5
        ),
    )
    model = RouterModel(config.model, ["w0", "w1", "w2", "w3"], feature_dim=8)
    start = policy_metrics(model, validation)
    state, seconds = evolve(model, train, validation, config, tmp_path)

    oracle = start["oracle_reward"]
    assert start["reward"] < 0.6 * oracle  # the zero head picks worker 0 everywhere
    final = policy_metrics(model, validation)
    assert final["reward"] >= 0.97 * oracle
    assert final["reward"] == pytest.approx(state.best_validation_reward)
    fitness = [entry["train"]["fitness_mean"] for entry in state.history]
    assert sum(fitness[-5:]) / 5 > sum(fitness[:5]) / 5 + 0.2
    assert len(seconds) == 40


def test_without_a_validation_split_the_final_mean_is_kept(tmp_path: Path) -> None:
    generator = torch.Generator().manual_seed(1)
    train = clustered_split(100, 3.0 * torch.randn(3, 4, generator=generator), generator)
    config = ESConfig(
        model=ModelConfig(head="linear", normalize_features=False),
        training=ESTrainingConfig(population_size=8, iterations=5, save_every=2),
    )
    model = RouterModel(config.model, ["a", "b", "c"], feature_dim=4)
    state, _ = evolve(model, train, None, config, tmp_path)
    assert state.best_generation == 5
    assert state.best_validation_reward is None
    assert all("validation" not in entry for entry in state.history)
    torch.testing.assert_close(
        model.head.weight.detach().flatten().double(), torch.from_numpy(state.optimizer.mean)
    )


def interrupted_evolve_case(
    tmp_path: Path, iterations: int = 12
) -> tuple[SplitData, SplitData, ESConfig]:
    generator = torch.Generator().manual_seed(2)
    centers = 3.0 * torch.randn(3, 4, generator=generator)
    train, validation = (clustered_split(n, centers, generator) for n in (60, 30))
    config = ESConfig(
        model=ModelConfig(head="linear", normalize_features=False),
        training=ESTrainingConfig(
            population_size=8, sigma0=0.5, iterations=iterations, batch_size=20, save_every=5,
            validate_every=3, samples=2,
        ),
    )  # fmt: skip
    return train, validation, config


def evolve_afresh(
    train: SplitData, validation: SplitData, config: ESConfig, output: Path
) -> tuple[SearchState, list[float]]:
    """evolve() of the interrupted case's model (see interrupted_evolve_case), from its start."""
    return evolve(
        RouterModel(config.model, ["a", "b", "c"], feature_dim=4),
        train, validation, config, output,
    )  # fmt: skip


def interrupted_evolve(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    at_generation: int,
    where: str,
    iterations: int = 12,
) -> Path:
    """Ctrl-C in generation `at_generation` (while scoring the population, or half-way
    through CMA's update), or in the `at_generation`th validation; returns the run's output
    folder."""
    train, validation, config = interrupted_evolve_case(tmp_path, iterations)
    calls = {"n": 0}
    if where == "validation":
        real_validation = train_es_module.policy_logits

        def validating(*args: object) -> torch.Tensor:
            calls["n"] += 1
            if calls["n"] == at_generation:
                raise KeyboardInterrupt
            return real_validation(*args)  # type: ignore[arg-type]

        monkeypatch.setattr(train_es_module, "policy_logits", validating)
    elif where == "scoring":
        real_logits = train_es_module.population_logits

        def scoring(*args: object) -> torch.Tensor:
            calls["n"] += 1
            if calls["n"] == at_generation:
                raise KeyboardInterrupt
            return real_logits(*args)  # type: ignore[arg-type]

        monkeypatch.setattr(train_es_module, "population_logits", scoring)
    else:
        real_tell = cmaes.SepCMA.tell

        def torn_tell(self: cmaes.SepCMA, solutions: list) -> None:
            calls["n"] += 1
            if calls["n"] == at_generation:
                self._g += 1  # CMA counts the generation first, then updates
                raise KeyboardInterrupt
            real_tell(self, solutions)

        monkeypatch.setattr(cmaes.SepCMA, "tell", torn_tell)
    output = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        evolve_afresh(train, validation, config, output)
    monkeypatch.undo()
    return output


def continued_after_interrupt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, at_generation: int, where: str
) -> int:
    """An interrupted run (see interrupted_evolve) run again ends where an uninterrupted one
    ends; returns the generation the interrupted run had saved."""
    output = interrupted_evolve(tmp_path, monkeypatch, at_generation, where)
    saved = read_es_state(output)
    assert saved is not None
    train, validation, config = interrupted_evolve_case(tmp_path)
    uninterrupted, _ = evolve_afresh(train, validation, config, tmp_path / "uninterrupted")
    model = RouterModel(config.model, ["a", "b", "c"], feature_dim=4)
    continued, seconds = evolve(model, train, validation, config, output)
    assert len(seconds) == 12 - saved["generation"]
    assert without_seconds(continued.history) == without_seconds(uninterrupted.history)
    assert (continued.best_parameters == uninterrupted.best_parameters).all()
    assert (continued.optimizer.mean == uninterrupted.optimizer.mean).all()
    return saved["generation"]


def test_ctrl_c_saves_the_last_finished_generation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C (or SIGTERM) kept only the state of the last `save_every` multiple: with SVF,
    minutes of generations were run again; the continuation is still the same run."""
    assert continued_after_interrupt(tmp_path, monkeypatch, 9, "scoring") == 8
    assert "ES: stopped; saved generation 8 (the last one finished)" in capsys.readouterr().err


@pytest.mark.parametrize(("validation", "generation"), [(3, 9), (4, 12)])  # the last one too
def test_ctrl_c_while_validating_saves_the_generation_and_validates_it_on_resume(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    validation: int,
    generation: int,
) -> None:
    """A generation's search step is done before its mean is validated (every 3rd), but a
    Ctrl-C while validating (minutes with SVF) lost it: the run continued from the last save."""
    assert continued_after_interrupt(tmp_path, monkeypatch, validation, "validation") == generation
    said = f"ES: stopped; saved generation {generation} (the last one finished)"
    assert said in capsys.readouterr().err


def test_a_last_generation_stopped_while_validating_is_validated_when_continued_further(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run of 11 generations stopped while validating its last one (11, not a multiple of
    validate_every), continued with iterations=14, skipped that validation: 11 was no longer
    the last generation, so the best mean of the stopped run was never weighed."""
    output = interrupted_evolve(tmp_path, monkeypatch, 4, "validation", iterations=11)
    assert read_es_state(output)["generation"] == 11
    train, validation, config = interrupted_evolve_case(tmp_path, iterations=14)
    config_11 = interrupted_evolve_case(tmp_path, iterations=11)[2]
    finished = tmp_path / "finished"
    for run_config in (config_11, config):  # the 11 generations finished, then continued
        uninterrupted, _ = evolve_afresh(train, validation, run_config, finished)
    continued, _ = evolve_afresh(train, validation, config, output)
    assert "validation" in continued.history[10]
    assert without_seconds(continued.history) == without_seconds(uninterrupted.history)
    assert continued.best_generation == uninterrupted.best_generation
    assert (continued.best_parameters == uninterrupted.best_parameters).all()


def test_ctrl_c_inside_the_cma_update_keeps_the_last_saved_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Half-way through CMA's update the optimizer is neither generation: not saved."""
    assert continued_after_interrupt(tmp_path, monkeypatch, 9, "update") == 5


@pytest.mark.parametrize(("at_generation", "where"), [(1, "scoring"), (3, "update")])
def test_ctrl_c_before_anything_was_saved_says_the_run_starts_over(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    at_generation: int,
    where: str,
) -> None:
    """Stopped before a state could be saved, the run said nothing, and the command's
    'continue from the last one saved' promised a continuation the next run did not make."""
    output = interrupted_evolve(tmp_path, monkeypatch, at_generation, where)
    assert read_es_state(output) is None
    assert "ES: stopped before any generation was saved; the same command starts over" in (
        capsys.readouterr().err
    )


def test_ctrl_c_after_a_save_says_which_generation_the_run_continues_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Stopped where the state on disk already held the last finished generation (or in
    CMA's update, which no state can hold), the search said nothing of where the same
    command would continue."""
    for at_generation, where in ((6, "scoring"), (9, "update")):
        output = interrupted_evolve(tmp_path / where, monkeypatch, at_generation, where)
        assert read_es_state(output)["generation"] == 5
        said = " ".join(capsys.readouterr().err.split())
        assert (
            "ES: stopped; generation 5 is the last one saved, the one a resumed run continues "
            f"from ({state_path(output)})"
        ) in said


def test_ctrl_c_in_a_resumed_runs_first_update_says_it_continues_from_the_saved_generation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A resumed run stopped in CMA's update of its first generation has saved nothing
    itself, but the state it resumed from is on disk: the same command continues from it,
    it does not start over."""
    output = interrupted_evolve(tmp_path, monkeypatch, 6, "scoring")
    assert read_es_state(output)["generation"] == 5
    capsys.readouterr()
    assert interrupted_evolve(tmp_path, monkeypatch, 1, "update") == output  # resumes it
    assert read_es_state(output)["generation"] == 5
    said = " ".join(capsys.readouterr().err.split())
    assert "resuming from generation 5 of 12" in said
    assert "ES: stopped; generation 5 is the last one saved" in said
    assert "starts over" not in said


def test_a_run_finished_early_validates_its_last_generation_as_a_run_of_that_length_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run of 12 generations stopped after generation 8 (not a multiple of validate_every,
    so not validated), then finished with iterations=8: generation 8 is now the last one,
    which a run of 8 validates; its mean must be weighed before the checkpoint is kept. The
    run said it 'has already finished its 8 generations' and to start over, though it had
    stopped there and was only now writing its outputs."""
    output = interrupted_evolve(tmp_path, monkeypatch, 9, "scoring")
    assert read_es_state(output)["generation"] == 8
    train, validation, config = interrupted_evolve_case(tmp_path, iterations=8)
    capsys.readouterr()
    finished, seconds = evolve_afresh(train, validation, config, output)
    said = " ".join(capsys.readouterr().err.split())
    assert (
        f"ES: the run saved in {state_path(output)} stopped at generation 8, the last of "
        "iterations=8: writing its outputs; raise training.iterations past 8 to continue it"
    ) in said
    assert "already finished" not in said and "--no-resume" not in said
    uninterrupted, _ = evolve_afresh(train, validation, config, tmp_path / "eight")
    assert seconds == [] and "validation" in finished.history[-1]
    assert without_seconds(finished.history) == without_seconds(uninterrupted.history)
    assert finished.best_generation == uninterrupted.best_generation
    assert (finished.best_parameters == uninterrupted.best_parameters).all()


# --- train_es on records: report, checkpoint, resume ----------------------------------------


def test_es_prints_a_generations_line_every_log_every_generations(
    records: list[RewardRecord],
    tiny_model_cfg: ModelConfig,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """SFT's and RL's step lines were checked, ES's not: printing the generations after each
    log_every-th (generation % log_every == 1) passed every test (none read 'ES gen N')."""
    train_es(records, tiny_config(tiny_model_cfg, iterations=6, log_every=3), tmp_path)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("ES gen ")]
    assert [line.split()[2] for line in lines] == ["3", "6"]


def test_train_es_writes_a_report_and_a_checkpoint_load_router_reads(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig, tmp_path: Path
) -> None:
    config = tiny_config(tiny_model_cfg)
    report = train_es(records, config, tmp_path / "es")

    written = json.loads((tmp_path / "es" / "training_report.json").read_text())
    assert written == json.loads(json.dumps(report))
    assert report["stage"] == "es"
    assert report["checkpoint"] == str(tmp_path / "es")
    assert report["worker_ids"] == records[0].worker_ids
    assert report["resumed_from"] == []
    assert [entry["generation"] for entry in report["history"]] == list(range(1, 13))
    for entry in report["history"]:
        assert {"fitness_best", "fitness_mean", "reward_mean", "entropy_mean"} <= set(
            entry["train"]
        )
        assert entry["train"]["fitness_best"] >= entry["train"]["fitness_mean"]
        assert entry["seconds"] > 0
        assert ("validation" in entry) == (entry["generation"] % 3 == 0)
    rewards = [report["initial_validation_reward"]] + [
        entry["validation"]["reward"] for entry in report["history"] if "validation" in entry
    ]
    assert report["best_validation_reward"] == max(rewards)
    assert report["best_validation_reward"] > report["initial_validation_reward"]

    loaded = load_router(tmp_path / "es", config.model, records[0].worker_ids)
    validation = [record for record in records if record.split == "validation"]
    features = loaded.features_for([record.prompt for record in validation])
    data = SplitData({"features": features}, torch.tensor([r.rewards for r in validation]))
    assert policy_metrics(loaded, data)["reward"] == pytest.approx(report["best_validation_reward"])
    meta = json.loads((tmp_path / "es" / "router.json").read_text())
    assert meta["metadata"]["stage"] == "es"
    assert meta["metadata"]["best_generation"] == report["best_generation"]
    assert report["cost_weighting"] == {"cost_weight": 0.0, "reference_cost": None}
    assert meta["metadata"]["cost_weighting"] == report["cost_weighting"]
    assert report["svf_matrices"] == []


def test_an_output_layer_run_keeps_the_start_checkpoints_hidden_layer(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig, tmp_path: Path
) -> None:
    model_cfg = tiny_model_cfg.model_copy(update={"layer": -1, "head": "mlp", "head_hidden": 8})
    start = make_model(model_cfg, records[0].worker_ids)
    start.save_checkpoint(tmp_path / "start")
    training = {**TINY_TRAINING, "iterations": 30}
    config = ESConfig(model=model_cfg, training=ESTrainingConfig(**training, search="output_layer"))
    report = train_es(records, config, tmp_path / "es", str(tmp_path / "start"))

    assert report["trainable_parameters"] == start.head[-1].weight.numel() == 8 * 3
    evolved = load_router(tmp_path / "es", model_cfg, records[0].worker_ids)
    torch.testing.assert_close(evolved.head[0].weight, start.head[0].weight)
    torch.testing.assert_close(evolved.head[0].bias, start.head[0].bias)
    assert report["best_generation"] > 0  # a random start is easy to beat
    assert report["best_validation_reward"] > report["initial_validation_reward"]
    assert not torch.equal(evolved.head[-1].weight, start.head[-1].weight)


def test_output_layer_search_from_zero_with_an_mlp_head_warns(
    records: list[RewardRecord],
    tiny_model_cfg: ModelConfig,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    model_cfg = tiny_model_cfg.model_copy(update={"layer": -1, "head": "mlp", "head_hidden": 8})
    training = {**TINY_TRAINING, "iterations": 2, "search": "output_layer"}
    train_es(records, ESConfig(model=model_cfg, training=ESTrainingConfig(**training)), tmp_path)
    assert "search=output_layer from zero" in " ".join(capsys.readouterr().err.split())


def test_a_cost_weighted_run_records_its_cost_weighting(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig, tmp_path: Path
) -> None:
    report = train_es(records, tiny_config(tiny_model_cfg, iterations=2, cost_weight=0.5), tmp_path)
    train_costs = [cost for r in records if r.split == "train" for cost in r.costs or []]
    expected = {"cost_weight": 0.5, "reference_cost": sum(train_costs) / len(train_costs)}
    assert report["cost_weighting"] == pytest.approx(expected)
    meta = json.loads((tmp_path / "router.json").read_text())
    assert meta["metadata"]["cost_weighting"] == report["cost_weighting"]


def test_resuming_checks_the_config_and_may_extend_the_iterations(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig, tmp_path: Path
) -> None:
    config = tiny_config(tiny_model_cfg, iterations=6)
    first = train_es(records, config, tmp_path)
    assert read_es_state(tmp_path)["generation"] == 6

    other = tiny_config(
        tiny_model_cfg, iterations=6, sigma0=0.1, samples=4, population_size=6, seed=3,
        batch_size=16, validate_every=2, entropy_coefficient=0.1,
    )  # fmt: skip
    with pytest.raises(ESResumeError) as error:
        train_es(records, other, tmp_path)
    message = str(error.value)
    # said in the keys' order, as every run of the same command says them
    changed = ["batch_size", "entropy_coefficient", "population_size", "samples", "seed",
               "sigma0", "validate_every"]  # fmt: skip
    said = [message.index(f"training.{key}: saved") for key in changed]
    assert said == sorted(said), message
    assert "training.sigma0: saved 0.5 vs now 0.1" in message
    assert "training.samples: saved 0 vs now 4" in message
    # a state searched with another population or seed is another search, not continued
    assert "training.population_size: saved 8 vs now 6" in message
    assert "training.seed: saved 0 vs now 3" in message
    # what to type at `fugu-lite train es`: it said "--no-resume (resume=False)"
    assert message.endswith("; start over there with --no-resume, or give another -o folder")
    assert "resume=False" not in message
    first_train = next(index for index, record in enumerate(records) if record.split == "train")
    changed = list(records)
    changed[first_train] = records[first_train].model_copy(update={"rewards": [0.5, 0.5, 0.5]})
    with pytest.raises(ESResumeError, match="the train/validation records") as error:
        train_es(changed, config, tmp_path)
    assert "saved from" not in str(error.value)  # the same counts: nothing to say of them
    # Another train prompt: without a --checkpoint, the start model differs only by the
    # feature normaliser fitted on the train records, which the message must say.
    changed[first_train] = records[first_train].model_copy(update={"prompt": "another prompt"})
    with pytest.raises(ESResumeError, match="normaliser fitted on the train records"):
        train_es(changed, config, tmp_path)

    longer = train_es(records, tiny_config(tiny_model_cfg, iterations=10), tmp_path)
    assert longer["resumed_from"] == [6]
    assert [entry["generation"] for entry in longer["history"]] == list(range(1, 11))
    assert without_seconds(longer["history"][:6]) == without_seconds(first["history"])

    fresh = train_es(records, other, tmp_path, resume=False)
    assert fresh["resumed_from"] == []
    assert fresh["config"]["training"]["sigma0"] == 0.1


def test_a_resume_may_change_how_the_run_logs_saves_and_reads_its_features(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig, tmp_path: Path
) -> None:
    """log_every, save_every, the feature cache and its batch size change how the run logs,
    saves or computes its features, not the search: each was refused as another config if
    RESUMABLE_KEYS lost it (no resume changed any of them)."""
    train_es(records, tiny_config(tiny_model_cfg, iterations=4), tmp_path / "es")
    elsewhere = tiny_model_cfg.model_copy(
        update={"cache_dir": str(tmp_path / "other-cache"), "feature_batch_size": 7}
    )
    config = tiny_config(elsewhere, iterations=6, log_every=5, save_every=3)
    assert train_es(records, config, tmp_path / "es")["resumed_from"] == [4]


def test_a_resume_on_records_of_other_workers_is_refused_naming_both_worker_lists(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig, tmp_path: Path
) -> None:
    """A search saved for three workers, run again on records with a fourth, was refused
    with 'the feature normaliser fitted on the train records is another' (the prompts were
    the same) and 'the records or their features differ', never naming the workers."""
    train_es(records, tiny_config(tiny_model_cfg, iterations=4), tmp_path)
    more = [
        record.model_copy(update={"worker_ids": [*record.worker_ids, "extra"],
                                  "rewards": [*record.rewards, 0.5],
                                  "costs": [*(record.costs or []), 1.0]})
        for record in records
    ]  # fmt: skip
    with pytest.raises(ESResumeError) as error:
        train_es(more, tiny_config(tiny_model_cfg, iterations=6), tmp_path)
    message = " ".join(str(error.value).split())
    assert f"workers: saved {records[0].worker_ids} vs now {more[0].worker_ids}" in message
    assert "normaliser" not in message and "features differ" not in message
    # as many other workers (the same start model, other rewards): named as well
    others = [
        record.model_copy(update={"worker_ids": ["p", "q", "r"], "rewards": record.rewards[::-1]})
        for record in records
    ]
    with pytest.raises(ESResumeError) as error:
        train_es(others, tiny_config(tiny_model_cfg, iterations=6), tmp_path)
    message = " ".join(str(error.value).split())
    assert f"workers: saved {records[0].worker_ids} vs now ['p', 'q', 'r']" in message
    assert "features differ" not in message
    # the same workers renamed (the same rewards): the same search, continued
    renamed = [record.model_copy(update={"worker_ids": ["x", "y", "z"]}) for record in records]
    report = train_es(renamed, tiny_config(tiny_model_cfg, iterations=6), tmp_path)
    assert report["resumed_from"] == [4] and report["worker_ids"] == ["x", "y", "z"]
    # the state the continuation saved is its own: other workers are told the new names
    with pytest.raises(ESResumeError) as error:
        train_es(others, tiny_config(tiny_model_cfg, iterations=8), tmp_path)
    message = " ".join(str(error.value).split())
    assert "workers: saved ['x', 'y', 'z'] vs now ['p', 'q', 'r']" in message


def test_a_resume_from_another_checkpoint_is_refused_naming_both_and_what_to_do(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig, tmp_path: Path
) -> None:
    """A resume whose --checkpoint differs from the saved search's start was refused with
    'the starting model differs (the --checkpoint, or ...)': neither folder was named."""
    config = tiny_config(tiny_model_cfg, iterations=4)

    def save_start(name: str, weight: float) -> str:
        model = make_model(config.model, records[0].worker_ids)
        torch.nn.init.constant_(model.output_layer.weight, weight)
        model.save_checkpoint(tmp_path / name)
        return str((tmp_path / name).resolve())

    starts = {"sft-a": save_start("sft-a", 0.1), "sft-b": save_start("sft-b", 0.2)}
    output = tmp_path / "es"
    train_es(records, config, output, str(tmp_path / "sft-a"))
    longer = tiny_config(tiny_model_cfg, iterations=6)

    with pytest.raises(ESResumeError) as error:
        train_es(records, longer, output, str(tmp_path / "sft-b"))
    message = " ".join(str(error.value).split())
    assert (
        f"the saved search started from --checkpoint {starts['sft-a']}, this run from "
        f"--checkpoint {starts['sft-b']}" in message
    )
    assert f"run it with --checkpoint {starts['sft-a']}" in message and "--no-resume" in message
    with pytest.raises(ESResumeError, match=r"started from --checkpoint .*, this run from a fresh"):
        train_es(records, longer, output)

    # the same folder spelt another way is that folder: the search continues
    spelt = str(tmp_path / "sft-b" / ".." / "sft-a")
    assert train_es(records, longer, output, spelt)["resumed_from"] == [4]

    save_start("sft-a", 0.3)  # the same folder, trained again
    with pytest.raises(ESResumeError) as error:
        train_es(records, longer, output, str(tmp_path / "sft-a"))
    assert f"the checkpoint {starts['sft-a']} changed since" in " ".join(str(error.value).split())

    # from a fresh head, resumed with a --checkpoint: it said 'run it with --checkpoint None'
    train_es(records, config, tmp_path / "fresh")
    with pytest.raises(ESResumeError) as error:
        train_es(records, longer, tmp_path / "fresh", str(tmp_path / "sft-b"))
    assert (
        "the saved search started from a fresh head (no --checkpoint), this run from "
        f"--checkpoint {starts['sft-b']}: to continue the saved search, run it with no "
        "--checkpoint;"
    ) in " ".join(str(error.value).split())


@pytest.mark.parametrize(("changed", "other"), [("fugu-lite", "cmaes"), ("cmaes", "fugu-lite")])
def test_a_state_saved_by_another_version_is_refused_naming_both_versions(
    records: list[RewardRecord],
    tiny_model_cfg: ModelConfig,
    tmp_path: Path,
    changed: str,
    other: str,
) -> None:
    """A state from another fugu-lite (or cmaes) version was continued as if the same code
    had saved it, mixing two versions' searches in one run."""
    config = tiny_config(tiny_model_cfg, iterations=4)
    train_es(records, config, tmp_path)
    saved = read_es_state(tmp_path)
    assert saved is not None
    now = {"fugu-lite": fugu_lite.__version__, "cmaes": cmaes.__version__}
    saved["fingerprint"]["versions"] = {**now, changed: "0.0.1-older"}
    saved["fingerprint"]["code"] = "0" * 64  # another version ran other sources too
    state_path(tmp_path).write_bytes(pickle.dumps(saved))
    longer = tiny_config(tiny_model_cfg, iterations=6)
    with pytest.raises(ESResumeError) as error:
        train_es(records, longer, tmp_path)
    message = str(error.value)
    assert f"{changed} version: saved 0.0.1-older vs now {now[changed]}" in message
    assert f"{other} version" not in message
    # the version says it all: 'restore that code to continue it' would be wrong advice
    assert "other sources" not in message
    assert "--no-resume" in message
    assert train_es(records, longer, tmp_path, resume=False)["resumed_from"] == []


@pytest.mark.parametrize("saved_code", ["0" * 64, None])
def test_a_state_saved_by_other_sources_of_this_version_is_refused(
    records: list[RewardRecord],
    tiny_model_cfg: ModelConfig,
    tmp_path: Path,
    saved_code: str | None,
) -> None:
    """A checkout or an editable install changes the code under one version string: its
    saved search was continued as if this code had run it (and a finished run's checkpoint
    kept), where `train pipeline` trains such a stage again."""
    config = tiny_config(tiny_model_cfg, iterations=4)
    train_es(records, config, tmp_path)
    saved = read_es_state(tmp_path)
    assert saved is not None
    if saved_code is None:  # a state saved before the sources were recorded
        saved["fingerprint"].pop("code", None)
    else:
        saved["fingerprint"]["code"] = saved_code
    state_path(tmp_path).write_bytes(pickle.dumps(saved))
    for iterations in (4, 6):  # the finished run kept, or continued
        with pytest.raises(ESResumeError) as error:
            train_es(records, tiny_config(tiny_model_cfg, iterations=iterations), tmp_path)
        message = " ".join(str(error.value).split())
        expected = (
            "with other sources saved it (the code changed since"
            if saved_code
            else "a fugu-lite that did not record its sources saved it"
        )
        assert expected in message and "--no-resume" in message, message
        assert "version" not in message, message
    longer = tiny_config(tiny_model_cfg, iterations=6)
    assert train_es(records, longer, tmp_path, resume=False)["resumed_from"] == []
    assert train_es(records, tiny_config(tiny_model_cfg, iterations=8), tmp_path)[
        "resumed_from"
    ] == [6]
    resumed = read_es_state(tmp_path)
    assert resumed is not None and resumed["fingerprint"]["code"] == fugu_lite.code_digest()


def test_resuming_takes_pooling_auto_as_what_it_means_and_refuses_other_pooling(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig, tmp_path: Path
) -> None:
    """tiny-random is a decoder: `auto` means `penultimate`, the same features. Another
    pooling (another model setting) is all the refusal names: it also said the normaliser
    fitted on the train records and the records or their features differed, sending the
    user to look for a change in the records file that was never made."""
    assert tiny_config(tiny_model_cfg).model.pooling == "auto"
    train_es(records, tiny_config(tiny_model_cfg, iterations=4), tmp_path)
    spelt = tiny_model_cfg.model_copy(update={"pooling": "penultimate"})
    resumed = train_es(records, tiny_config(spelt, iterations=6), tmp_path)
    assert resumed["resumed_from"] == [4]
    other = tiny_model_cfg.model_copy(update={"pooling": "mean"})
    with pytest.raises(ESResumeError) as error:
        train_es(records, tiny_config(other, iterations=8), tmp_path)
    message = " ".join(str(error.value).split())
    assert (
        "belongs to a different ES run: model.pooling: saved 'penultimate' vs now 'mean'; "
        "start over there with --no-resume"
    ) in message


def test_a_resume_with_another_model_setting_still_names_other_record_counts_or_start(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig, tmp_path: Path
) -> None:
    """Another model setting alone leaves the start model and the features unnamed (they
    follow from it), but not other record counts nor another --checkpoint: the refusal
    without them passed every test (only a setting changed alone was resumed)."""
    train_es(records, tiny_config(tiny_model_cfg, iterations=4), tmp_path / "es")
    other = tiny_config(tiny_model_cfg.model_copy(update={"pooling": "mean"}), iterations=6)
    train = [record for record in records if record.split == "train"]
    fewer = [record for record in records if record.split != "train"] + train[3:]
    validation = sum(record.split == "validation" for record in records)
    with pytest.raises(ESResumeError) as error:
        train_es(fewer, other, tmp_path / "es")
    message = " ".join(str(error.value).split())
    assert "model.pooling: saved 'penultimate' vs now 'mean'" in message
    assert (
        f"the train/validation records or their features differ (saved from {len(train)} "
        f"train and {validation} validation records, now {len(train) - 3} train and "
        f"{validation} validation)"
    ) in message

    make_model(other.model, records[0].worker_ids).save_checkpoint(tmp_path / "sft")
    with pytest.raises(ESResumeError) as error:
        train_es(records, other, tmp_path / "es", str(tmp_path / "sft"))
    message = " ".join(str(error.value).split())
    assert "model.pooling: saved 'penultimate' vs now 'mean'" in message
    assert (
        "the saved search started from a fresh head (no --checkpoint), this run from "
        f"--checkpoint {(tmp_path / 'sft').resolve()}"
    ) in message


def test_resuming_takes_every_spelling_of_a_backbone_folder_as_that_folder(
    records: list[RewardRecord],
    tiny_model_cfg: ModelConfig,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`bb` then `/abs/bb` (as `train pipeline` takes them) was refused as another config,
    telling the user to start the search over; `bb` from another folder is another backbone."""
    save_tiny_backbone(tmp_path / "bb")
    monkeypatch.chdir(tmp_path)
    relative = tiny_model_cfg.model_copy(update={"backbone": "bb"})
    train_es(records, tiny_config(relative, iterations=4), tmp_path / "es")
    absolute = tiny_model_cfg.model_copy(update={"backbone": str(tmp_path / "bb")})
    resumed = train_es(records, tiny_config(absolute, iterations=6), tmp_path / "es")
    assert resumed["resumed_from"] == [4]
    save_tiny_backbone(tmp_path / "elsewhere" / "bb", seed=1)
    monkeypatch.chdir(tmp_path / "elsewhere")
    other = r"model\.backbone: saved '/.*/bb' vs now '/.*/elsewhere/bb'"
    with pytest.raises(ESResumeError, match=other):
        train_es(records, tiny_config(relative, iterations=8), tmp_path / "es")


def test_a_run_killed_right_after_its_checkpoint_leaves_no_earlier_report(
    records: list[RewardRecord],
    tiny_model_cfg: ModelConfig,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A kill between the new checkpoint and its training_report.json left the previous
    run's report (its history, best generation) beside the new checkpoint."""
    train_es(records, tiny_config(tiny_model_cfg, iterations=4), tmp_path)
    assert (tmp_path / "training_report.json").exists()
    save_checkpoint = RouterModel.save_checkpoint

    def killed_after_saving(self: RouterModel, *args: object, **kwargs: object) -> None:
        save_checkpoint(self, *args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(RouterModel, "save_checkpoint", killed_after_saving)
    with pytest.raises(KeyboardInterrupt):
        train_es(records, tiny_config(tiny_model_cfg, iterations=8), tmp_path)
    assert json.loads((tmp_path / "router.json").read_text())["metadata"]["generations"] == 8
    assert not (tmp_path / "training_report.json").exists()

    monkeypatch.undo()  # the same command again continues and writes the report
    report = train_es(records, tiny_config(tiny_model_cfg, iterations=8), tmp_path)
    assert report["generations"] == 8
    assert json.loads((tmp_path / "training_report.json").read_text())["generations"] == 8


@pytest.mark.parametrize("damage", ["cut short", "emptied"])
def test_a_damaged_search_state_is_refused_clearly_and_no_resume_starts_over(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig, tmp_path: Path, damage: str
) -> None:
    """A state file cut short or emptied (a copy stopped half-way, a full disk elsewhere)
    raised UnpicklingError with a traceback, or EOFError, which the CLI printed as 'Aborted.'."""
    config = tiny_config(tiny_model_cfg, iterations=4)
    train_es(records, config, tmp_path)
    saved = state_path(tmp_path).read_bytes()
    state_path(tmp_path).write_bytes(saved[: len(saved) // 2] if damage == "cut short" else b"")
    with pytest.raises(ESResumeError, match=r"state\.pkl is damaged .*--no-resume"):
        train_es(records, config, tmp_path)
    assert train_es(records, config, tmp_path, resume=False)["resumed_from"] == []


def test_a_state_file_holding_another_pickle_is_refused_by_name(tmp_path: Path) -> None:
    """A readable pickle of something else (another tool's state.pkl copied in) is not a
    search state: refused by name, not an AttributeError from reading it as a mapping."""
    state_path(tmp_path).parent.mkdir(parents=True)
    state_path(tmp_path).write_bytes(pickle.dumps([1, 2, 3]))
    with pytest.raises(ESResumeError, match=r"state\.pkl is not an ES search state; .*--no-resume"):
        read_es_state(tmp_path)


def test_train_es_no_resume_starts_over_where_the_saved_state_cannot_be_continued(
    records: list[RewardRecord], tmp_path: Path
) -> None:
    """`train es` continues the state in OUTPUT/es_state, refusing a damaged one; with
    --no-resume it starts over (no test ran the flag through the command)."""
    records_path = tmp_path / "records.jsonl"
    write_records(records_path, records)
    config_path = tmp_path / "es.yaml"
    config_path.write_text(CONFIG.format(cache_dir=tmp_path / "cache", iterations=4))
    output = tmp_path / "run"
    state_path(output).parent.mkdir(parents=True)
    state_path(output).write_bytes(b"")
    arguments = ["train", "es", "-r", str(records_path), "-o", str(output), "-c", str(config_path)]
    refused = CliRunner().invoke(app, arguments)
    assert refused.exit_code == 2, refused.output
    assert "state.pkl is damaged" in " ".join(refused.output.split())
    started_over = CliRunner().invoke(app, [*arguments, "--no-resume"])
    assert started_over.exit_code == 0, started_over.output
    assert read_es_state(output)["generation"] == 4


def test_no_resume_stopped_before_its_first_save_leaves_no_earlier_state(
    records: list[RewardRecord],
    tiny_model_cfg: ModelConfig,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """--no-resume starts over: stopped before it saved a generation, it says the same
    command starts over, so the earlier run's state must be gone, not resumed next time."""
    config = tiny_config(tiny_model_cfg, iterations=4)
    train_es(records, config, tmp_path)

    def stopped(*args: object, **kwargs: object) -> dict:
        raise KeyboardInterrupt

    monkeypatch.setattr(train_es_module, "run_generation", stopped)
    with pytest.raises(KeyboardInterrupt):
        train_es(records, config, tmp_path, resume=False)
    assert not state_path(tmp_path).exists()


def without_five_parts_and_with_five_strangers(saved: dict) -> None:
    for key in ("resumed_from", "history", "generation", "best_parameters", "best_generation"):
        saved.pop(key)
    saved.update(zeta=1, alpha=2, mid=3, beta=4, omega=5)


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        (lambda saved: saved.pop("history"), "(no history)"),
        (
            without_five_parts_and_with_five_strangers,  # named in order, the same every run
            "(no best_generation; no best_parameters; no generation; no history; "
            "no resumed_from; an unknown alpha; an unknown beta; an unknown mid; "
            "an unknown omega; an unknown zeta)",
        ),
        (lambda saved: saved["fingerprint"].pop("data"), "(no fingerprint.data)"),
        (lambda saved: saved.update(extra=1), "(an unknown extra)"),
        (lambda saved: saved.update(optimizer=None), "an optimizer that is not a sep-CMA-ES"),
        (lambda saved: saved.update(fingerprint=[]), "a fingerprint that is not a mapping"),
        (
            lambda saved: saved["fingerprint"].update(config="lr: 0.1"),
            "a fingerprint.config that is not a mapping",
        ),
        (
            lambda saved: saved["fingerprint"]["config"].pop("model"),
            "a fingerprint.config without a model mapping naming its backbone",
        ),
        (
            lambda saved: saved["fingerprint"].update(versions="0.1.0"),
            "a fingerprint.versions that is not a mapping",
        ),
    ],
    ids=[
        "no-history",
        "parts-in-order",
        "no-data-digest",
        "unknown-key",
        "no-optimizer",
        "list-fingerprint",
        "text-config",
        "config-without-model",
        "text-versions",
    ],
)
def test_an_incomplete_search_state_is_refused_naming_what_it_lacks(
    records: list[RewardRecord],
    tiny_model_cfg: ModelConfig,
    tmp_path: Path,
    edit: Callable[[dict], object],
    said: str,
) -> None:
    """A state that unpickles but lacks a part (edited by hand, or written by other code)
    failed with a KeyError or TypeError traceback instead of saying what to do."""
    config = tiny_config(tiny_model_cfg, iterations=4)
    train_es(records, config, tmp_path)
    saved = read_es_state(tmp_path)
    assert saved is not None
    edit(saved)
    state_path(tmp_path).write_bytes(pickle.dumps(saved))
    with pytest.raises(ESResumeError) as error:
        train_es(records, config, tmp_path)
    message = " ".join(str(error.value).split())
    assert "state.pkl is not a complete ES search state" in message
    assert said in message and "--no-resume" in message
    assert train_es(records, config, tmp_path, resume=False)["resumed_from"] == []


def test_a_state_saved_before_its_versions_sources_workers_and_counts_were_recorded_is_refused(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig, tmp_path: Path
) -> None:
    """Earlier fugu-lite versions saved a fingerprint without versions, code digest, start
    checkpoint, workers or record counts. No test read such a state: reading any of them
    as always there (saved_versions[package], saved['worker_ids'], the counts' None check,
    the start checkpoint's) passed every test, and resuming such a state on other records
    then failed with a KeyError or TypeError traceback instead of being refused."""
    config = tiny_config(tiny_model_cfg, iterations=2)
    train_es(records, config, tmp_path)
    saved = read_es_state(tmp_path)
    assert saved is not None
    for key in ("versions", "code", "start_checkpoint", "worker_ids", "records"):
        saved["fingerprint"].pop(key)
    state_path(tmp_path).write_bytes(pickle.dumps(saved))
    fewer = [record for record in records if record.split != "train"] + [
        record for record in records if record.split == "train"
    ][3:]
    with pytest.raises(ESResumeError) as error:
        train_es(fewer, config, tmp_path)
    message = " ".join(str(error.value).split())
    assert (
        f"fugu-lite version: saved unknown (an earlier fugu-lite) vs now {fugu_lite.__version__}"
        in message
    )
    assert (
        "the starting model differs (the --checkpoint, or the feature normaliser fitted on the "
        "train records); the train/validation records or their features differ; start over"
    ) in message


def test_a_run_past_the_iterations_asked_for_is_refused_not_misreported(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig, tmp_path: Path
) -> None:
    train_es(records, tiny_config(tiny_model_cfg, iterations=5), tmp_path)
    with pytest.raises(ESResumeError) as error:
        train_es(records, tiny_config(tiny_model_cfg, iterations=4), tmp_path)
    message = " ".join(str(error.value).split())
    assert "already at generation 5, past iterations=4" in message
    # raising it to 5 ends the run where it is; only past 5 continues it
    assert "set training.iterations to 5 to end it there, or higher to continue it" in message


def test_rerunning_a_finished_run_says_so_and_keeps_its_checkpoint_and_evaluations(
    records: list[RewardRecord],
    tiny_model_cfg: ModelConfig,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The same command after a finished run said 'resuming from generation 6 of 6', wrote
    the checkpoint again (deleting its eval reports) and reported resumed_from [6]."""
    config = tiny_config(tiny_model_cfg, iterations=6)
    first = train_es(records, config, tmp_path)
    evaluation = tmp_path / "eval-test"
    evaluation.mkdir()
    (evaluation / REPORT_JSON).write_text("{}")
    router_written = (tmp_path / "router.json").stat().st_mtime_ns
    capsys.readouterr()

    again = train_es(records, config, tmp_path)
    assert again == json.loads(json.dumps(first))
    assert again["resumed_from"] == []
    text = " ".join(capsys.readouterr().err.split())
    assert "has already finished its 6 generations" in text
    assert "raise training.iterations past 6 to continue it (--set training.iterations=N)" in text
    assert "--no-resume" in text
    assert "resuming" not in text
    assert (tmp_path / "router.json").stat().st_mtime_ns == router_written
    assert (evaluation / REPORT_JSON).exists()
    assert read_es_state(tmp_path)["resumed_from"] == []


@pytest.mark.parametrize(
    ("records_of", "kept"),
    [
        (  # every worker as good: no generation beats the start
            lambda records: [r.model_copy(update={"rewards": [0.5, 0.5, 0.5]}) for r in records],
            "the starting point (no generation beat it on validation)",
        ),
        (
            lambda records: [r.model_copy(update={"split": "train"}) for r in records],
            "generation 2, the last one",
        ),
    ],
    ids=["start-kept", "no-validation"],
)
def test_rerunning_a_finished_run_names_what_its_checkpoint_holds(
    records: list[RewardRecord],
    tiny_model_cfg: ModelConfig,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    records_of: Callable[[list[RewardRecord]], list[RewardRecord]],
    kept: str,
) -> None:
    config = tiny_config(tiny_model_cfg, iterations=2)
    train_es(records_of(records), config, tmp_path)
    capsys.readouterr()
    train_es(records_of(records), config, tmp_path)
    said = " ".join(capsys.readouterr().err.split())
    assert f"ES: kept {kept}, the checkpoint and report already in {tmp_path}" in said


def test_without_a_validation_split_es_keeps_the_last_generation(
    records: list[RewardRecord],
    tiny_model_cfg: ModelConfig,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    train_only = [record for record in records if record.split != "validation"]
    report = train_es(train_only, tiny_config(tiny_model_cfg, iterations=6), tmp_path)
    assert report["best_generation"] == 6 and report["best_validation_reward"] is None
    assert "kept generation 6, the last one" in " ".join(capsys.readouterr().err.split())
    load_router(tmp_path)


HELD_AFTER_ITS_FIRST_SAVE = """
import sys, time
from fugu_lite.es_state import SearchState
save = SearchState.save

def save_then_hold(self, output_dir):
    save(self, output_dir)
    time.sleep(600)  # until the test kills it

SearchState.save = save_then_hold
from fugu_lite.__main__ import main
sys.argv = ["fugu-lite", *sys.argv[1:]]
main()
"""


def test_a_killed_run_continues_from_its_last_saved_generation(
    records: list[RewardRecord], tmp_path: Path
) -> None:
    """kill -9 a `fugu-lite train es` process once it has saved a state; the rerun continues
    from that generation and ends where an uninterrupted run ends. The killed run is held
    after its first save (polled for, its 495 generations left ended in ~5 s: a test process
    held up that long found the run over)."""
    records_path = tmp_path / "records.jsonl"
    write_records(records_path, records)
    config_path = tmp_path / "es.yaml"
    config_path.write_text(CONFIG.format(cache_dir=tmp_path / "cache", iterations=ITERATIONS))
    output = tmp_path / "run"
    arguments = ["train", "es", "-r", str(records_path), "-o", str(output), "-c", str(config_path)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}

    with subprocess.Popen(  # its exit waits for the child and closes the stderr pipe
        [sys.executable, "-c", HELD_AFTER_ITS_FIRST_SAVE, *arguments],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    ) as child:
        try:
            deadline = time.monotonic() + 180
            while not state_path(output).exists():
                assert child.poll() is None, child.stderr.read().decode() if child.stderr else ""
                assert time.monotonic() < deadline, "no ES state was saved within 180 s"
                time.sleep(0.002)
        finally:
            child.kill()  # SIGKILL; after a failed check too, so the exit's wait ends
    saved = read_es_state(output)
    assert saved is not None
    assert not (output / "training_report.json").exists(), "the run ended before the kill"
    assert saved["generation"] % 5 == 0 and 0 < saved["generation"] < ITERATIONS
    assert len(saved["history"]) == saved["generation"]

    resumed = CliRunner().invoke(app, arguments)
    assert resumed.exit_code == 0, resumed.output
    text = " ".join(resumed.output.split())
    assert f"resuming from generation {saved['generation']} of {ITERATIONS}" in text
    assert f"checkpoint written to {output}" in text
    report = json.loads((output / "training_report.json").read_text())
    assert report["stage"] == "es"
    assert report["resumed_from"] == [saved["generation"]]
    kept = f"kept generation {report['best_generation']} (validation reward "
    assert f"{kept}{report['best_validation_reward']:.4f})" in text
    assert [entry["generation"] for entry in report["history"]] == list(range(1, ITERATIONS + 1))
    load_router(output)

    # the interrupted run is the uninterrupted one
    config = load_stage_config(config_path, ESConfig, "es")
    uninterrupted = train_es(records, config, tmp_path / "uninterrupted")
    assert without_seconds(report["history"]) == without_seconds(uninterrupted["history"])
    assert report["best_generation"] == uninterrupted["best_generation"]


# --- configs --------------------------------------------------------------------------------


def test_a_wrong_key_in_the_yaml_is_a_clear_config_error(tmp_path: Path) -> None:
    path = tmp_path / "es.yaml"
    path.write_text("training:\n  sigma: 0.1\n  iterations: 5\n")
    with pytest.raises(ConfigError, match=r"unknown key 'training\.sigma': did you mean 'sigma0'"):
        load_stage_config(path, ESConfig, "es")
    pipeline_style = tmp_path / "pipeline.yaml"
    pipeline_style.write_text("model:\n  head: linear\nes:\n  populaton_size: 8\n")
    with pytest.raises(ConfigError, match="did you mean 'population_size'"):
        load_stage_config(pipeline_style, ESConfig, "es")

    records_path = tmp_path / "records.jsonl"
    write_records(records_path, generated_records(n_per_topic=3))
    result = CliRunner().invoke(
        app, ["train", "es", "-r", str(records_path), "-o", str(tmp_path / "out"), "-c", str(path)]
    )
    assert result.exit_code == 2, result.output
    assert "did you mean 'sigma0'" in " ".join(result.output.split())
    assert not (tmp_path / "out").exists()


def test_an_absurd_sigma0_is_a_config_error_not_an_assertion_in_cmaes(tmp_path: Path) -> None:
    """sigma0=1e300 (or any step past cmaes's 1e32) stopped the first generation with
    cmaes's bare 'AssertionError: Abs of all param values must be less than 1e+32'."""
    path = tmp_path / "es.yaml"
    path.write_text(CONFIG.format(cache_dir=tmp_path / "cache", iterations=2))
    records_path = tmp_path / "records.jsonl"
    write_records(records_path, generated_records(n_per_topic=3))
    for sigma0 in ("1e300", "1e40"):
        output = tmp_path / f"out-{sigma0}"
        command = ["train", "es", "-r", str(records_path), "-o", str(output), "-c", str(path)]
        result = CliRunner().invoke(app, [*command, "--set", f"training.sigma0={sigma0}"])
        assert result.exit_code == 2, result.output
        said = " ".join(result.output.split())
        assert "--set training.sigma0: Input should be less than or equal to 1000000" in said
        assert not output.exists()
    assert load_stage_config(path, ESConfig, "es", {"training.sigma0": 1e6}).training.sigma0 == 1e6


def test_an_absurd_population_is_a_config_error_not_a_machine_out_of_memory() -> None:
    """population_size: 32000000000 (a typo's extra zeros) passed the config, and cmaes
    allocated its weights until the machine ran out of memory, before the first generation."""
    with pytest.raises(ConfigError) as error:
        load_config(None, ESConfig, {"training.population_size": 32_000_000_000})
    said = " ".join(str(error.value).split())
    assert "--set training.population_size: Input should be less than or equal to 10000" in said
    population = {"training.population_size": 10_000}
    assert load_config(None, ESConfig, population).training.population_size == 10_000


def test_train_es_reads_a_pipeline_config_without_an_es_section(
    records: list[RewardRecord], tmp_path: Path
) -> None:
    """Like `fugu-lite train es -c configs/default.yaml`: model, sft and rl sections only."""
    records_path = tmp_path / "records.jsonl"
    write_records(records_path, records)
    config_path = tmp_path / "pipeline.yaml"
    config_path.write_text(
        "model:\n  backbone: tiny-random\n  layer: -1\n  max_tokens: 32\n  head: linear\n"
        f"  cache_dir: {tmp_path / 'cache'}\nsft:\n  epochs: 2\nrl:\n  epochs: 1\n"
    )
    output = tmp_path / "out"
    arguments = ["train", "es", "-r", str(records_path), "-o", str(output), "-c", str(config_path)]
    settings = ["--set", "training.iterations=3", "--set", "training.population_size=4"]
    result = CliRunner().invoke(app, [*arguments, *settings])
    assert result.exit_code == 0, result.output
    report = json.loads((output / "training_report.json").read_text())
    assert report["generations"] == 3
    assert report["config"]["model"]["backbone"] == "tiny-random"
    assert report["config"]["training"]["population_size"] == 4
    assert report["config"]["training"]["sigma0"] == ESTrainingConfig().sigma0


def test_a_resume_on_another_records_file_names_the_record_counts(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig, tmp_path: Path
) -> None:
    """A search run again with another records file (fewer prompts) was refused with 'the
    train/validation records or their features differ', which did not show that the
    records were another file's; the message now gives both runs' counts."""
    train_es(records, tiny_config(tiny_model_cfg, iterations=2), tmp_path)
    fewer = [record for record in records if record.split != "train"] + [
        record for record in records if record.split == "train"
    ][3:]
    counts = {split: sum(r.split == split for r in records) for split in ("train", "validation")}
    with pytest.raises(ESResumeError) as error:
        train_es(fewer, tiny_config(tiny_model_cfg, iterations=4), tmp_path)
    message = " ".join(str(error.value).split())
    assert (
        "the train/validation records or their features differ (saved from "
        f"{counts['train']} train and {counts['validation']} validation records, now "
        f"{counts['train'] - 3} train and {counts['validation']} validation)"
    ) in message


def test_a_search_stopped_before_its_outputs_never_keeps_an_earlier_runs_checkpoint(
    records: list[RewardRecord],
    tiny_model_cfg: ModelConfig,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A --no-resume run stopped after its last generation's save, before its checkpoint,
    left the earlier run's report of as many generations: the same command then said 'kept
    the checkpoint and report already in' and kept the earlier run's checkpoint (another
    sigma0 here) as this search's result; a longer run stopped there is covered too."""
    train_es(records, tiny_config(tiny_model_cfg, iterations=4), tmp_path)
    other = tiny_config(tiny_model_cfg, iterations=4, sigma0=0.1)

    def stopped(*args: object, **kwargs: object) -> dict:
        raise KeyboardInterrupt

    for config, resume in ((other, False), (tiny_config(tiny_model_cfg, iterations=6), False)):
        monkeypatch.setattr(train_es_module, "cost_weighting_summary", stopped)
        with pytest.raises(KeyboardInterrupt):
            train_es(records, config, tmp_path, resume=resume)
        monkeypatch.undo()
        capsys.readouterr()
        report = train_es(records, config, tmp_path)
        assert "kept the checkpoint and report already in" not in capsys.readouterr().err
        assert report["config"]["training"] == config.training.model_dump()
        assert json.loads((tmp_path / "training_report.json").read_text()) == json.loads(
            json.dumps(report)
        )
        metadata = json.loads((tmp_path / "router.json").read_text())["metadata"]
        assert metadata["history"] == report["history"]
