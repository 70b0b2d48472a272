"""Reference routers on the router's own features: kNN and ridge regression.

Each baseline predicts every worker's reward for a prompt; the choice is the argmax.
Hyperparameters are chosen on the validation split only and the final predictor is
fitted on the train split only, like the router.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from scipy.linalg import LinAlgWarning
from sklearn.linear_model import Ridge
from sklearn.preprocessing import StandardScaler

from ..threads import fit_threads
from .table import RewardTable, argmax_choices, picked

KNN_GRID: tuple[int, ...] = (5, 10, 20, 50, 100, 200, 300, 500, 1000)
RIDGE_GRID: tuple[float, ...] = (0.01, 0.1, 1.0, 10.0, 100.0, 1e3, 3e3, 1e4, 3e4, 1e5, 1e6)
# Used only when there is no validation split; k=100 is the reference setting in DESIGN.md.
DEFAULT_K = 100
DEFAULT_ALPHA = 1.0

# Rows of queries per similarity block, so [queries, train] never needs to fit in memory at once.
_KNN_BLOCK = 1024


@dataclass(frozen=True)
class Selection:
    """One hyperparameter chosen for one baseline, and how it was chosen."""

    parameter: str
    chosen: float
    selected_on: Literal["validation", "default"]
    validation_scores: dict[str, float] = field(default_factory=dict)
    n_validation: int = 0
    at_grid_edge: bool = False
    note: str = ""

    def as_dict(self) -> dict:
        return {
            "parameter": self.parameter,
            "chosen": self.chosen,
            "selected_on": self.selected_on,
            "validation_scores": dict(self.validation_scores),
            "n_validation": self.n_validation,
            "at_grid_edge": self.at_grid_edge,
            "note": self.note,
        }


def mean_choice_reward(predicted: np.ndarray, rewards: np.ndarray) -> float:
    """Mean true reward of the argmax of predicted rewards."""
    return float(picked(rewards, argmax_choices(predicted)).mean())


def select_on_validation(
    predict_validation: Callable[[float], np.ndarray],
    grid: Sequence[float],
    validation_rewards: np.ndarray | None,
    default: float,
    parameter: str,
) -> Selection:
    """Pick the grid value whose predictions give the highest mean reward on validation.

    `predict_validation(value)` returns predicted rewards [N_val, W] for the validation
    prompts from a predictor fitted on train with that value. Ties go to the earliest grid
    value. Without validation rewards (None or zero rows) the default is used and the
    Selection says so.
    """
    if validation_rewards is None or len(validation_rewards) == 0:
        return Selection(
            parameter=parameter,
            chosen=default,
            selected_on="default",
            note=f"no validation split: {parameter}={_format_value(default)} is a fixed default",
        )
    if not grid:
        raise ValueError(f"the {parameter} grid is empty")
    values = list(dict.fromkeys(grid))  # drop repeated grid values, keep the order
    scores = [mean_choice_reward(predict_validation(value), validation_rewards) for value in values]
    return _best_of_grid(parameter, values, scores, len(validation_rewards))


def _best_of_grid(
    parameter: str, values: list[float], scores: list[float], n_validation: int
) -> Selection:
    """The Selection of the first best-scoring grid value, saying when it sits at the grid's
    edge or when every value scored the same."""
    best_index = int(np.argmax(scores))
    chosen = values[best_index]
    # A best value at either end of the grid suggests the grid should be wider.
    tied = len(set(scores)) == 1  # then no value is better: the edge means nothing
    at_edge = len(values) > 1 and not tied and best_index in (0, len(values) - 1)
    note = f"{parameter}={_format_value(chosen)} chosen on validation ({n_validation} prompts)"
    if at_edge:
        note += "; it is at the edge of the grid, a wider grid might do better"
    elif tied and len(values) > 1:
        note += "; every grid value scored the same there, so this is the first of them"
    return Selection(
        parameter=parameter,
        chosen=chosen,
        selected_on="validation",
        validation_scores={_format_value(v): s for v, s in zip(values, scores, strict=True)},
        n_validation=n_validation,
        at_grid_edge=at_edge,
        note=note,
    )


def _format_value(value: float) -> str:
    return f"{value:g}"


# --- kNN ----------------------------------------------------------------------


def l2_normalise(features: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(features, axis=1, keepdims=True)
    return features / np.maximum(norms, 1e-12)


def knn_predict(
    train_features: np.ndarray,
    train_rewards: np.ndarray,
    query_features: np.ndarray,
    k: int,
) -> np.ndarray:
    """Predicted rewards [N_query, W]: mean reward of the k most cosine-similar train prompts."""
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    k = min(k, len(train_features))
    train_unit = l2_normalise(np.asarray(train_features, dtype=np.float32))
    query_unit = l2_normalise(np.asarray(query_features, dtype=np.float32))
    predictions = np.empty((len(query_unit), train_rewards.shape[1]), dtype=np.float64)
    for start in range(0, len(query_unit), _KNN_BLOCK):
        similarity = query_unit[start : start + _KNN_BLOCK] @ train_unit.T
        # The k largest similarities, in no particular order (the mean does not care).
        neighbours = np.argpartition(-similarity, k - 1, axis=1)[:, :k]
        predictions[start : start + _KNN_BLOCK] = train_rewards[neighbours].mean(axis=1)
    return predictions


def knn_grid_for(n_train: int, grid: Sequence[int]) -> list[int]:
    """Grid values that fit the train size; k above n_train would repeat k = n_train."""
    usable = [k for k in grid if k <= n_train]
    return usable or [n_train]


# --- ridge --------------------------------------------------------------------


@dataclass(frozen=True)
class RidgeModel:
    scaler: StandardScaler
    ridge: Ridge

    def predict(self, features: np.ndarray) -> np.ndarray:
        predicted = self.ridge.predict(self.scaler.transform(features))
        # A single reward column may come back as [N]; callers always get [N, W].
        return np.asarray(predicted, dtype=np.float64).reshape(len(features), -1)


def fit_ridge(train_features: np.ndarray, train_rewards: np.ndarray, alpha: float) -> RidgeModel:
    """Multi-output ridge on features standardised with train statistics."""
    scaler = StandardScaler().fit(train_features)
    with warnings.catch_warnings():
        # Small alphas on correlated features are ill-conditioned; validation rejects them.
        warnings.simplefilter("ignore", LinAlgWarning)
        ridge = Ridge(alpha=alpha).fit(scaler.transform(train_features), train_rewards)
    return RidgeModel(scaler=scaler, ridge=ridge)


# --- both, as the report expects them -----------------------------------------


@dataclass(frozen=True)
class BaselineResult:
    predictions: np.ndarray
    selection: Selection


def knn_baseline(
    train_features: np.ndarray,
    train_rewards: np.ndarray,
    evaluated_features: np.ndarray,
    validation_features: np.ndarray | None = None,
    validation_rewards: np.ndarray | None = None,
    grid: Sequence[int] = KNN_GRID,
    default_k: int = DEFAULT_K,
) -> BaselineResult:
    n_train = len(train_features)
    query = _validation_query(validation_features, validation_rewards)
    selection = select_on_validation(
        lambda k: knn_predict(train_features, train_rewards, query, int(k)),
        knn_grid_for(n_train, grid),
        validation_rewards,
        default=min(default_k, n_train),
        parameter="k",
    )
    k = int(selection.chosen)
    predictions = knn_predict(train_features, train_rewards, evaluated_features, k)
    return BaselineResult(predictions=predictions, selection=selection)


def ridge_baseline(
    train_features: np.ndarray,
    train_rewards: np.ndarray,
    evaluated_features: np.ndarray,
    validation_features: np.ndarray | None = None,
    validation_rewards: np.ndarray | None = None,
    grid: Sequence[float] = RIDGE_GRID,
    default_alpha: float = DEFAULT_ALPHA,
) -> BaselineResult:
    query = _validation_query(validation_features, validation_rewards)
    selection = select_on_validation(
        lambda alpha: fit_ridge(train_features, train_rewards, alpha).predict(query),
        grid,
        validation_rewards,
        default=default_alpha,
        parameter="alpha",
    )
    model = fit_ridge(train_features, train_rewards, selection.chosen)
    return BaselineResult(predictions=model.predict(evaluated_features), selection=selection)


def _validation_query(features: np.ndarray | None, rewards: np.ndarray | None) -> np.ndarray:
    """The validation features the grid is scored on; without validation rewards nothing is
    scored (the default is used), so no features are needed."""
    if rewards is None or len(rewards) == 0:
        return np.empty((0, 0))
    if features is None:
        raise ValueError(
            "validation_rewards were given without validation_features: pass both, or neither"
        )
    if len(features) != len(rewards):
        raise ValueError(
            f"validation_features has {len(features)} rows but validation_rewards has "
            f"{len(rewards)}: they must describe the same prompts, in the same order"
        )
    return features


def run_baselines(
    train_features: np.ndarray,
    train: RewardTable,
    evaluated_features: np.ndarray,
    validation_features: np.ndarray | None = None,
    validation: RewardTable | None = None,
    knn_grid: Sequence[int] = KNN_GRID,
    ridge_grid: Sequence[float] = RIDGE_GRID,
) -> tuple[dict[str, np.ndarray], dict[str, dict]]:
    """kNN and ridge predictions on the evaluated prompts, plus how their settings were chosen.

    Returns `(baseline_predictions, baseline_info)` in the form `evaluation_report` takes.
    """
    _check_features("train", train_features, train)
    if validation is not None:
        _check_validation(train_features, train, validation_features, validation)
    validation_rewards = validation.rewards if validation is not None else None
    _check_feature_width(train_features, evaluated_features, "evaluated")
    with fit_threads():
        knn = knn_baseline(
            train_features,
            train.rewards,
            evaluated_features,
            validation_features,
            validation_rewards,
            grid=knn_grid,
        )
        ridge = ridge_baseline(
            train_features,
            train.rewards,
            evaluated_features,
            validation_features,
            validation_rewards,
            grid=ridge_grid,
        )
    predictions = {"knn": knn.predictions, "ridge": ridge.predictions}
    info = {"knn": knn.selection.as_dict(), "ridge": ridge.selection.as_dict()}
    return predictions, info


def _check_validation(
    train_features: np.ndarray,
    train: RewardTable,
    validation_features: np.ndarray | None,
    validation: RewardTable,
) -> None:
    """Refuse validation rows without their features, of another width or other workers."""
    if validation_features is None:
        raise ValueError("validation rows were given without validation features")
    _check_features("validation", validation_features, validation)
    _check_feature_width(train_features, validation_features, "validation")
    if validation.worker_ids != train.worker_ids:
        raise ValueError(
            f"validation workers {validation.worker_ids} differ from train workers "
            f"{train.worker_ids}"
        )


def _check_features(name: str, features: np.ndarray, table: RewardTable) -> None:
    if features.ndim != 2:
        raise ValueError(f"{name} features must be a [N, D] array, got shape {features.shape}")
    if len(features) != table.n_prompts:
        raise ValueError(
            f"{name} features have {len(features)} rows but the {name} table has "
            f"{table.n_prompts} prompts; compute features for exactly those records, in order"
        )


def _check_feature_width(train: np.ndarray, other: np.ndarray, name: str) -> None:
    if other.ndim != 2 or other.shape[1] != train.shape[1]:
        raise ValueError(
            f"{name} features have shape {other.shape}, expected [N, {train.shape[1]}] "
            "like the train features"
        )
