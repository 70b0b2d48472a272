"""The fits on cached features run with one BLAS/OpenMP/torch thread (fugu_lite.threads), and
leave the pools as they were."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.cluster import KMeans
from sklearn.linear_model import LogisticRegression, Ridge
from threadpoolctl import threadpool_info, threadpool_limits

from fugu_lite import threads, train_rl, train_sft
from fugu_lite.config import ModelConfig, RLConfig, RLTrainingConfig, SFTConfig, SFTTrainingConfig
from fugu_lite.evaluation import baselines, curves, reward_table, run_baselines
from fugu_lite.reward_head_training import fit_cluster_mixture, fit_cost_model
from fugu_lite.schemas import RewardRecord


def pool_threads() -> dict[str, int]:
    """Threads of each BLAS and OpenMP pool loaded, by library file."""
    return {pool["filepath"]: pool["num_threads"] for pool in threadpool_info()}


@pytest.fixture
def two_thread_pools(monkeypatch: pytest.MonkeyPatch):
    """Every pool at 2 threads, as on a 2-core machine, and no thread variable set."""
    for name in threads.THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    with threadpool_limits(limits=2):
        yield


def seen_in_fit(cls: type, seen: list[dict[str, int]]) -> type:
    """`cls`, fitting as usual, that notes the pools' threads while it fits."""

    def fit(self, *args, **kwargs):
        seen.append(pool_threads())
        return cls.fit(self, *args, **kwargs)

    return type(cls.__name__, (cls,), {"fit": fit})


def test_fit_threads_runs_its_block_in_one_thread_and_restores_the_pools(
    two_thread_pools: None,
) -> None:
    before = pool_threads()
    assert before and set(before.values()) == {2}
    with threads.fit_threads():
        assert set(pool_threads().values()) == {1}
    assert pool_threads() == before


def test_a_thread_variable_set_by_the_user_leaves_the_pools_as_set(
    two_thread_pools: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "2")
    with threads.fit_threads():
        assert set(pool_threads().values()) == {2}


def test_a_thread_variable_set_by_the_user_leaves_torchs_threads_as_set(
    two_thread_pools: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with threads.torch_fit_threads(runs_backbone=False):
            unset = torch.get_num_threads()
        monkeypatch.setenv("OMP_NUM_THREADS", "2")
        with threads.torch_fit_threads(runs_backbone=False):
            set_by_user = torch.get_num_threads()
    finally:
        torch.set_num_threads(previous)
    assert (unset, set_by_user) == (1, 2)


def test_a_thread_variable_holding_no_count_is_said_beside_one_that_sizes_the_pools(
    two_thread_pools: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "two")
    with threads.fit_threads():
        assert set(pool_threads().values()) == {2}
    assert "OPENBLAS_NUM_THREADS='two' is not a number of threads" in capsys.readouterr().err


def test_the_reward_head_and_baseline_fits_run_in_one_thread(
    two_thread_pools: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[dict[str, int]] = []
    monkeypatch.setattr("fugu_lite.reward_head_training.KMeans", seen_in_fit(KMeans, seen))
    monkeypatch.setattr(
        "fugu_lite.reward_head_training.LogisticRegression", seen_in_fit(LogisticRegression, seen)
    )
    monkeypatch.setattr("fugu_lite.reward_head_training.Ridge", seen_in_fit(Ridge, seen))
    monkeypatch.setattr(baselines, "Ridge", seen_in_fit(Ridge, seen))
    rng = np.random.default_rng(0)
    features = rng.standard_normal((80, 6))
    rewards, costs = rng.random((80, 2)), rng.random((80, 2))
    fit_cluster_mixture(features, features, rewards, 3, seed=0, assignment_c=1.0, restarts=1)
    fit_cost_model(features, costs, reference=1.0, alpha=1.0)
    records = [
        RewardRecord(
            prompt=f"p{i}",
            split=split,
            worker_ids=["a", "b"],
            rewards=list(rewards[i]),
            costs=list(costs[i]),
        )
        for i, split in enumerate(["train"] * 60 + ["validation"] * 20)
    ]
    train, validation = reward_table(records[:60]), reward_table(records[60:])
    _, info = run_baselines(features[:60], train, features[60:], features[60:], validation)
    curves.baseline_cost_predictions(features[:60], train, features[60:], info)
    assert len(seen) == 3 + len(baselines.RIDGE_GRID) + 2  # and every one in 1 thread:
    assert [set(pools.values()) for pools in seen] == [{1}] * len(seen)
    assert set(pool_threads().values()) == {2}


def noting_torch_threads(function: Callable, seen: list[int]) -> Callable:
    """`function`, run as usual, that notes torch's intra-op threads at each call."""

    def noted(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return function(*args, **kwargs)

    return noted


def test_sft_and_rl_train_a_head_on_cached_features_in_one_torch_thread(
    records: list[RewardRecord],
    tiny_model_cfg: ModelConfig,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in threads.THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    seen: list[int] = []
    monkeypatch.setattr(train_sft, "sft_loss", noting_torch_threads(train_sft.sft_loss, seen))
    monkeypatch.setattr(
        train_rl,
        "contextual_bandit_loss",
        noting_torch_threads(train_rl.contextual_bandit_loss, seen),
    )
    training = {"epochs": 1, "batch_size": 64}
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        sft = SFTConfig(model=tiny_model_cfg, training=SFTTrainingConfig(**training))
        train_sft.train_sft(records, sft, tmp_path / "sft")
        rl = RLConfig(model=tiny_model_cfg, training=RLTrainingConfig(**training))
        train_rl.train_rl(records, rl, tmp_path / "rl", checkpoint=str(tmp_path / "sft"))
        after = torch.get_num_threads()
        with threads.torch_fit_threads(runs_backbone=True):  # SVF: the backbone runs
            with_backbone = torch.get_num_threads()
    finally:
        torch.set_num_threads(previous)
    assert len(seen) >= 2 and set(seen) == {1}
    assert after == with_backbone == 2


# the bound said with a value that is no thread count: libgomp's long, OpenBLAS's C int
SAID_BOUND = {"OMP_NUM_THREADS": "below 2**63", "OPENBLAS_NUM_THREADS": "below 2**31"}


@pytest.mark.parametrize(
    ("name", "value", "sized"),
    [
        *[
            ("OMP_NUM_THREADS", value, sized)
            for value, sized in [
                *[("abc", False), ("", False), ("0", False), ("-2", False), ("2.5", False)],
                ("\u00b2", False),  # a superscript two: str.isdigit takes it, int() does not
                ("\uff14", False),  # a fullwidth four: int() reads it, libgomp does not
                ("2,x", False),  # one count per nesting level: each must be one
                ("2,0", False),  # libgomp refuses a nesting level of none (OpenBLAS reads 2)
                ("[b]", False),  # said as given, not read as rich markup
                *[("1", True), (" 2", True), ("4,2", True)],
                ("+2", True),  # libgomp's strtoul and OpenBLAS's atoi take the sign
                # libgomp reads a count as a long: 2**63 - 1 is its largest ("Invalid value")
                ("9223372036854775807", True),
                *[("9223372036854775808", False), ("99999999999999999999999", False)],
                ("2,9223372036854775808", False),
            ]
        ],
        # OpenBLAS reads its count with atoi into a C int, which wraps past 2**31 - 1: 2**31
        # to a negative count (a thread per core), 2**32 + 1 to 1 thread
        ("OPENBLAS_NUM_THREADS", "2147483647", True),
        *[
            ("OPENBLAS_NUM_THREADS", "2147483648", False),
            ("OPENBLAS_NUM_THREADS", "4294967297", False),
        ],
        # atoi stops at a comma: OpenBLAS runs the first count's threads (checked with
        # threadpoolctl: `1,x` and `1,2147483648` gave 1 thread, `0,1` a thread per core)
        *[
            ("OPENBLAS_NUM_THREADS", value, sized)
            for value, sized in [
                *[("2,x", True), ("2,2147483648", True), ("2,0", True), (" 2 ,", True)],
                *[("0,2", False), (",2", False), ("2147483648,2", False), ("x,2", False)],
            ]
        ],
    ],
)
def test_only_a_thread_count_in_a_thread_variable_sizes_the_pools_and_any_other_is_said(
    two_thread_pools: None,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    name: str,
    value: str,
    sized: bool,
) -> None:
    # The libraries ignore a value that is no thread count (libgomp: a bare "Invalid value"),
    # so the pools stay at a thread per core: it sized nothing, and the fits' limit must hold.
    monkeypatch.setenv(name, value)
    with threads.fit_threads():
        assert set(pool_threads().values()) == ({2} if sized else {1})
    err = capsys.readouterr().err
    said = f"{name}={value!r}" in err and SAID_BOUND[name] in err and "unset it" in err
    assert said is not sized
    with threads.fit_threads():  # said once
        pass
    assert name not in capsys.readouterr().err
