"""The evaluation report: every method's choices on one split, scored against its rewards.

Methods, each a choice of one worker per evaluated prompt:
  router         argmax of the router's probabilities
  <baselines>    argmax of each baseline's predicted rewards (e.g. knn, ridge)
  per_task_best  best worker per task label on train (uses labels the router never sees)
  best_single    the worker with the highest mean reward on train
  random         uniform over workers, scored by its expected value
  oracle         the best worker per prompt; among equally good workers the cheapest when
                 costs are known, else the best single worker when it is one of them
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from .table import RewardTable, argmax_choices, check_aligned, picked

RESERVED_METHODS = ("router", "per_task_best", "best_single", "random", "oracle")
BASELINE_LABELS = {"knn": "kNN", "ridge": "ridge"}
# Below this oracle - best single gap, "gap closed" divides by ~0 and is reported as None.
_MIN_GAP = 1e-12


def best_single_worker(rewards: np.ndarray) -> int:
    """Index of the worker with the highest mean reward; ties go to the lowest index."""
    return int(np.argmax(rewards.mean(axis=0)))


def per_task_best_workers(train: RewardTable) -> dict[str, int]:
    """For each task label seen in train, the worker with the highest mean train reward on it."""
    rows_by_task = _rows_by_task(train.tasks, include_unlabelled=False)
    return {
        task: best_single_worker(train.rewards[rows])
        for task, rows in rows_by_task.items()
        if task is not None
    }


def per_task_choices(
    tasks: list[str | None], best_by_task: dict[str, int], fallback: int
) -> np.ndarray:
    """The per-task best worker for each prompt; unlabelled or unseen tasks use the fallback."""
    return np.array(
        [best_by_task.get(task, fallback) if task is not None else fallback for task in tasks],
        dtype=np.int64,
    )


def oracle_choices(
    rewards: np.ndarray, costs: np.ndarray | None, preferred: int | None = None
) -> np.ndarray:
    """Best worker per prompt. Ties do not change the reward, only the cost and the choice
    distribution: among equally good workers take the cheapest (costs known), else the
    `preferred` worker when it is one of them, else the lowest index.

    With 0/1 rewards most prompts have ties; preferring the best single worker makes the
    oracle's choices show where routing away from it is actually needed.
    """
    is_best = rewards >= rewards.max(axis=1, keepdims=True)
    if costs is not None:
        return argmax_choices(np.where(is_best, -costs, -np.inf))
    choices = argmax_choices(is_best.astype(np.int8))
    if preferred is not None:
        choices = np.where(is_best[:, preferred], preferred, choices)
    return choices


def gap_closed(value: float, best_single: float, oracle: float) -> float | None:
    """(value - best single) / (oracle - best single); None when oracle == best single."""
    gap = oracle - best_single
    if gap <= _MIN_GAP:
        return None
    return float((value - best_single) / gap)


def evaluation_report(
    train: RewardTable,
    evaluated: RewardTable,
    split_name: str,
    router_probabilities: np.ndarray | None,
    baseline_predictions: dict[str, np.ndarray],
    baseline_info: dict,
) -> dict:
    """Compare the router with the baselines and references on the evaluated split.

    `router_probabilities` and each baseline prediction are [N, W] arrays aligned with
    `evaluated` (rows and worker order). `train` supplies the best single worker and the
    per-task best workers. `baseline_info` (e.g. from `run_baselines`) is copied into
    the report. Returns a JSON-serialisable dict.
    """
    _check_inputs(train, evaluated, router_probabilities, baseline_predictions)
    worker_ids = evaluated.worker_ids
    best_single = best_single_worker(train.rewards)
    best_by_task = per_task_best_workers(train)
    choices = _learned_and_reference_choices(
        evaluated, router_probabilities, baseline_predictions, best_single, best_by_task
    )
    oracle = oracle_choices(evaluated.rewards, evaluated.costs, preferred=best_single)
    scale = _GapScale(
        best_single=float(evaluated.rewards[:, best_single].mean()),
        oracle=float(evaluated.rewards.max(axis=1).mean()),
    )
    methods = {
        **_chosen_method_entries(evaluated, choices, worker_ids[best_single], baseline_info, scale),
        "random": _random_entry(evaluated, scale),
        "oracle": _oracle_entry(evaluated, oracle, scale),
    }
    choices["oracle"] = oracle
    return {
        "split": split_name,
        "sizes": _sizes(train, evaluated, baseline_info),
        "worker_ids": list(worker_ids),
        "costs_known": evaluated.costs is not None,
        "best_single": _best_single_summary(train, worker_ids, best_single, scale),
        "methods": methods,
        "per_task_best": _per_task_best_summary(evaluated.tasks, best_by_task, worker_ids),
        "per_task": _per_task_table(evaluated, choices, best_by_task),
        "choices": {
            name: _choice_distribution(choice, worker_ids) for name, choice in choices.items()
        },
        "router_vs_best_single": _router_vs_best_single(evaluated.rewards, choices, best_single),
        "baselines": baseline_info,
        "notes": _notes(split_name, evaluated, router_probabilities, baseline_info, methods),
    }


@dataclass(frozen=True)
class _GapScale:
    """The evaluated mean rewards "gap closed" runs between: 0 at best single, 1 at oracle."""

    best_single: float
    oracle: float


def _learned_and_reference_choices(
    evaluated: RewardTable,
    router_probabilities: np.ndarray | None,
    baseline_predictions: dict[str, np.ndarray],
    best_single: int,
    best_by_task: dict[str, int],
) -> dict[str, np.ndarray]:
    """The worker each method picks per evaluated prompt (all but random and the oracle),
    in the report's order: router, baselines, per-task best, best single."""
    choices: dict[str, np.ndarray] = {}
    if router_probabilities is not None:
        choices["router"] = argmax_choices(router_probabilities)
    for name, predicted in baseline_predictions.items():
        choices[name] = argmax_choices(predicted)
    if best_by_task:
        choices["per_task_best"] = per_task_choices(evaluated.tasks, best_by_task, best_single)
    choices["best_single"] = np.full(evaluated.n_prompts, best_single, dtype=np.int64)
    return choices


def _chosen_method_entries(
    evaluated: RewardTable,
    choices: dict[str, np.ndarray],
    best_single_worker_id: str,
    baseline_info: dict,
    scale: _GapScale,
) -> dict[str, dict]:
    """The report's entry of each method in `choices`: its mean reward and cost."""
    return {
        name: _method_entry(
            label=_label(name, best_single_worker_id, baseline_info.get(name)),
            short_label=_short_label(name),
            detail=_detail(name, best_single_worker_id, baseline_info.get(name)),
            mean_reward=float(picked(evaluated.rewards, choice).mean()),
            mean_cost=_mean_cost(evaluated.costs, choice),
            scale=scale,
        )
        for name, choice in choices.items()
    }


def _random_entry(evaluated: RewardTable, scale: _GapScale) -> dict:
    return _method_entry(
        label="random",
        short_label="random",
        detail="expected reward of a uniformly random worker",
        mean_reward=float(evaluated.rewards.mean()),
        mean_cost=None if evaluated.costs is None else float(evaluated.costs.mean()),
        scale=scale,
    )


def _oracle_entry(evaluated: RewardTable, oracle: np.ndarray, scale: _GapScale) -> dict:
    return _method_entry(
        label="oracle",
        short_label="oracle",
        detail="best worker per prompt (upper bound); among equally good workers the "
        + ("cheapest" if evaluated.costs is not None else "best single"),
        mean_reward=scale.oracle,
        mean_cost=_mean_cost(evaluated.costs, oracle),
        scale=scale,
    )


def _sizes(train: RewardTable, evaluated: RewardTable, baseline_info: dict) -> dict:
    return {
        "train": train.n_prompts,
        "validation": _validation_size(baseline_info),
        "evaluated": evaluated.n_prompts,
    }


def _best_single_summary(
    train: RewardTable, worker_ids: list[str], best_single: int, scale: _GapScale
) -> dict:
    return {
        "worker": worker_ids[best_single],
        "train_mean_reward": float(train.rewards[:, best_single].mean()),
        "evaluated_mean_reward": scale.best_single,
    }


def router_predictions(table: RewardTable, probabilities: np.ndarray) -> list[dict]:
    """One row per prompt: the router's choice, its reward (and cost), and all probabilities."""
    check_aligned("router probabilities", probabilities, table)
    choices = argmax_choices(probabilities)
    rows = []
    for row, choice in enumerate(choices):
        prediction: dict = {
            "id": table.ids[row],
            "prompt_hash": table.prompt_hashes[row],
            "task": table.tasks[row],
            "chosen_worker": table.worker_ids[choice],
            "reward": float(table.rewards[row, choice]),
            "oracle_reward": float(table.rewards[row].max()),
            "probabilities": {
                worker: float(probabilities[row, column])
                for column, worker in enumerate(table.worker_ids)
            },
        }
        if table.costs is not None:
            prediction["cost"] = float(table.costs[row, choice])
        rows.append(prediction)
    return rows


def _method_entry(
    label: str,
    short_label: str,
    detail: str,
    mean_reward: float,
    mean_cost: float | None,
    scale: _GapScale,
) -> dict:
    return {
        "label": label,
        "short_label": short_label,
        "detail": detail,
        "mean_reward": mean_reward,
        "gap_closed": gap_closed(mean_reward, scale.best_single, scale.oracle),
        "mean_cost": mean_cost,
    }


def _validation_size(baseline_info: dict) -> int | None:
    """Validation prompts used to choose baseline hyperparameters; None when none were."""
    sizes = [
        info["n_validation"]
        for info in baseline_info.values()
        if isinstance(info, dict) and info.get("selected_on") == "validation"
    ]
    return max(sizes) if sizes else None


def _mean_cost(costs: np.ndarray | None, choices: np.ndarray) -> float | None:
    return None if costs is None else float(picked(costs, choices).mean())


def _short_label(name: str) -> str:
    names = {"best_single": "best single", "per_task_best": "per-task best", **BASELINE_LABELS}
    return names.get(name, name)


def _label(name: str, best_single_worker_id: str, info: dict | None) -> str:
    if name == "best_single":
        return f"best single ({best_single_worker_id})"
    if name == "per_task_best":
        return "per-task best (labels)"
    if name == "router":
        return "router"
    label = BASELINE_LABELS.get(name, name)
    if info and "parameter" in info and "chosen" in info:
        return f"{label} ({info['parameter']}={info['chosen']:g})"
    return label


def _detail(name: str, best_single_worker_id: str, info: dict | None) -> str:
    if name == "router":
        return "argmax of the router's probabilities"
    if name == "best_single":
        return f"{best_single_worker_id}: highest mean reward on train"
    if name == "per_task_best":
        return "best worker per task label on train; unseen or missing labels use best single"
    if info and info.get("selected_on") == "validation":
        return f"{info['parameter']}={info['chosen']:g} chosen on validation"
    if info and info.get("selected_on") == "default":
        return f"{info['parameter']}={info['chosen']:g} fixed default (no validation split)"
    return "argmax of predicted rewards"


def _rows_by_task(
    tasks: list[str | None], include_unlabelled: bool
) -> dict[str | None, np.ndarray]:
    """The rows of each task; the unlabelled ones under None (a task named as their label,
    "(no task)", is another task), when included."""
    rows: dict[str | None, list[int]] = defaultdict(list)
    for row, task in enumerate(tasks):
        if task is not None or include_unlabelled:
            rows[task].append(row)
    return {task: np.array(indices, dtype=np.int64) for task, indices in rows.items()}


def _per_task_best_summary(
    tasks: list[str | None], best_by_task: dict[str, int], worker_ids: list[str]
) -> dict | None:
    if not best_by_task:
        return None
    n_fallback = sum(1 for task in tasks if task is None or task not in best_by_task)
    return {
        "workers": {task: worker_ids[worker] for task, worker in sorted(best_by_task.items())},
        "n_fallback_to_best_single": n_fallback,
    }


def _per_task_table(
    evaluated: RewardTable, choices: dict[str, np.ndarray], best_by_task: dict[str, int]
) -> list[dict]:
    """One row per task label of the evaluated split, the unlabelled prompts' last (task None,
    labelled "(no task)" where shown); empty when no prompt has a label."""
    if all(task is None for task in evaluated.tasks):
        return []
    rows_by_task = _rows_by_task(evaluated.tasks, include_unlabelled=True)
    labelled = sorted(task for task in rows_by_task if task is not None)
    ordered = [*labelled, None] if None in rows_by_task else labelled
    table = []
    for task in ordered:
        rows = rows_by_task[task]
        task_rewards = evaluated.rewards[rows]
        entry: dict = {"task": task, "n": len(rows)}
        for name, choice in choices.items():
            entry[name] = float(picked(task_rewards, choice[rows]).mean())
        worker = None if task is None else best_by_task.get(task)
        entry["per_task_best_worker"] = None if worker is None else evaluated.worker_ids[worker]
        table.append(entry)
    return table


def _choice_distribution(choices: np.ndarray, worker_ids: list[str]) -> dict:
    counts = np.bincount(choices, minlength=len(worker_ids))
    total = max(1, len(choices))
    return {
        "counts": {worker: int(counts[i]) for i, worker in enumerate(worker_ids)},
        "shares": {worker: float(counts[i] / total) for i, worker in enumerate(worker_ids)},
    }


def _router_vs_best_single(
    rewards: np.ndarray, choices: dict[str, np.ndarray], best_single: int
) -> dict | None:
    if "router" not in choices:
        return None
    router = picked(rewards, choices["router"])
    single = rewards[:, best_single]
    return {
        "same_choice": float((choices["router"] == best_single).mean()),
        "router_better": float((router > single).mean()),
        "router_worse": float((router < single).mean()),
    }


def train_split_notes(split_name: str) -> list[str]:
    """Evaluated on train, every method but random and the oracle learned from the very
    prompts it is scored on: said, or such a report read like a test score."""
    if split_name != "train":
        return []
    return [
        "evaluated on train, the split best single, per-task best and the baselines were "
        "fit on (kNN counts each prompt among its own neighbours), and that a router trained "
        "on these records learned from: the scores are optimistic; compare the methods on "
        "test or validation"
    ]


def _notes(
    split_name: str,
    evaluated: RewardTable,
    router_probabilities: np.ndarray | None,
    baseline_info: dict,
    methods: dict[str, dict],
) -> list[str]:
    notes = train_split_notes(split_name)
    if router_probabilities is None:
        notes.append("no router probabilities were given: only references and baselines")
    if evaluated.costs is None and evaluated.n_with_costs > 0:
        notes.append(
            f"costs known on only {evaluated.n_with_costs} of {evaluated.n_prompts} prompts of "
            "this split: no mean costs (a mean over some prompts would not compare the methods "
            "on the same prompts); give every record its costs to see them"
        )
    elif evaluated.costs is None:
        notes.append("costs unknown on this split: no mean costs")
    if methods["oracle"]["gap_closed"] is None:
        notes.append("oracle equals best single on this split: gap closed is undefined")
    return notes + baseline_notes(split_name, baseline_info)


def baseline_notes(split_name: str, baseline_info: Mapping[str, object]) -> list[str]:
    """How each baseline's hyperparameter was chosen, where it matters to its score (a fixed
    default, the edge of the grid, the evaluated validation split itself, which makes the
    score optimistic): said in `eval` and `eval --pareto`."""
    notes = []
    for name, info in baseline_info.items():
        if not isinstance(info, Mapping):
            continue
        if info.get("selected_on") == "default":
            notes.append(f"{name}: {info.get('note', 'no validation split; fixed default')}")
        if info.get("at_grid_edge"):
            notes.append(f"{name}: {info.get('note', 'chosen value is at the edge of the grid')}")
        if info.get("selected_on") == "validation" and split_name == "validation":
            notes.append(
                f"{name}: its hyperparameter was chosen on this same validation split, "
                "so its score here is optimistic"
            )
    return notes


def check_train_and_evaluated(train: RewardTable, evaluated: RewardTable) -> None:
    """Refuse an empty split, or splits whose workers differ: the best single worker is a
    column of train read on the evaluated split, so another order names another worker."""
    if train.n_prompts == 0 or evaluated.n_prompts == 0:
        raise ValueError("train and evaluated tables must each have at least one prompt")
    if train.worker_ids != evaluated.worker_ids:
        raise ValueError(
            f"train workers {train.worker_ids} differ from evaluated workers "
            f"{evaluated.worker_ids}; both splits need the same workers in the same order"
        )


def _check_inputs(
    train: RewardTable,
    evaluated: RewardTable,
    router_probabilities: np.ndarray | None,
    baseline_predictions: dict[str, np.ndarray],
) -> None:
    check_train_and_evaluated(train, evaluated)
    if router_probabilities is not None:
        check_aligned("router probabilities", router_probabilities, evaluated)
    for name, predicted in baseline_predictions.items():
        if name in RESERVED_METHODS:
            raise ValueError(f"baseline name {name!r} is reserved; use another name")
        check_aligned(f"baseline {name!r} predictions", predicted, evaluated)
