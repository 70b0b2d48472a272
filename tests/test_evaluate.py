"""Evaluation on small arrays whose right answer is known by construction."""

from __future__ import annotations

import json
import re
import time
import warnings
from itertools import combinations, pairwise
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_rgb
from matplotlib.container import BarContainer
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.text import Annotation, Text
from matplotlib.transforms import Bbox
from rich.console import Console

from fugu_lite.evaluation import (
    DEFAULT_ALPHA,
    DEFAULT_K,
    RewardTable,
    Selection,
    argmax_choices,
    baselines,
    evaluation_markdown,
    evaluation_report,
    fit_ridge,
    knn_baseline,
    knn_predict,
    pareto_report,
    print_evaluation,
    reward_table,
    ridge_baseline,
    router_predictions,
    run_baselines,
    select_on_validation,
    write_evaluation,
    write_pareto,
)
from fugu_lite.evaluation.output import remove_evaluations
from fugu_lite.evaluation.pareto_output import print_pareto
from fugu_lite.evaluation.pareto_plot import plot_pareto
from fugu_lite.evaluation.plots import (
    PER_TASK_PLOT_ROWS,
    per_task_plot_note,
    plain_text,
    plot_per_task,
    plotted_tasks,
    save_png,
)
from fugu_lite.evaluation.report import baseline_notes
from fugu_lite.schemas import RewardRecord, prompt_hash

WORKERS = ["a", "b", "c"]


def make_table(
    rewards: np.ndarray | list,
    costs: np.ndarray | list | None = None,
    tasks: list[str | None] | None = None,
    workers: list[str] | None = None,
) -> RewardTable:
    rewards = np.asarray(rewards, dtype=np.float64)
    n = len(rewards)
    return RewardTable(
        rewards=rewards,
        costs=None if costs is None else np.asarray(costs, dtype=np.float64),
        tasks=tasks if tasks is not None else [None] * n,
        ids=[f"p{i}" for i in range(n)],
        prompt_hashes=[prompt_hash(f"prompt {i}") for i in range(n)],
        worker_ids=workers or WORKERS[: rewards.shape[1]],
    )


def one_hot(columns: np.ndarray, n_workers: int) -> np.ndarray:
    return np.eye(n_workers)[columns]


def record(index: int, rewards: list[float], costs: list[float] | None = None) -> RewardRecord:
    return RewardRecord(
        prompt=f"question {index}",
        split="test",
        worker_ids=WORKERS,
        rewards=rewards,
        costs=costs,
        task="math" if index % 2 else None,
        id=f"q{index}",
    )


# --- tables and choices -------------------------------------------------------


def test_reward_table_stacks_records_in_order() -> None:
    records = [record(0, [1, 0, 0], [1, 2, 3]), record(1, [0, 1, 0], [4, 5, 6])]
    table = reward_table(records)
    assert table.rewards.shape == (2, 3)
    assert table.rewards[1].tolist() == [0, 1, 0]
    assert table.costs is not None and table.costs[1].tolist() == [4, 5, 6]
    assert table.tasks == [None, "math"]
    assert table.ids == ["q0", "q1"]
    assert table.prompt_hashes == [r.prompt_hash for r in records]
    assert table.worker_ids == WORKERS
    assert len(table) == 2


def test_reward_table_drops_costs_unless_every_record_has_them() -> None:
    table = reward_table([record(0, [1, 0, 0], [1, 2, 3]), record(1, [0, 1, 0])])
    assert table.costs is None


def test_a_split_with_costs_on_some_prompts_says_how_many_not_unknown() -> None:
    """With costs on 2 of 3 records the report said "costs unknown on this split"."""
    table = reward_table(
        [record(0, [1, 0, 0], [1, 2, 3]), record(1, [0, 1, 0]), record(2, [0, 0, 1], [1, 2, 3])]
    )
    report = evaluation_report(table, table, "test", None, {}, {})
    assert report["methods"]["oracle"]["mean_cost"] is None
    assert any("costs known on only 2 of 3 prompts" in note for note in report["notes"])
    assert not any("costs unknown" in note for note in report["notes"])
    bare = reward_table([record(0, [1, 0, 0]), record(1, [0, 1, 0])])
    notes = evaluation_report(bare, bare, "test", None, {}, {})["notes"]
    assert "costs unknown on this split: no mean costs" in notes


def test_reward_table_rejects_empty_and_mixed_workers() -> None:
    with pytest.raises(ValueError, match="zero records"):
        reward_table([])
    other = RewardRecord(prompt="x", split="test", worker_ids=["a", "b"], rewards=[1, 0])
    with pytest.raises(ValueError, match="same workers"):
        reward_table([record(0, [1, 0, 0]), other])


@pytest.mark.parametrize("column", ["rewards", "costs"])
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_a_reward_table_refuses_nan_or_infinite_values_naming_the_worker_and_prompt(
    column: str, bad: float
) -> None:
    """A table built from arrays (not records, which refuse them) took NaN: np.argmax counts
    NaN as the largest mean, so a worker with one missing reward became the best single
    worker, and evaluation_report.json was written with NaN in it (not valid JSON)."""
    values = {"rewards": np.array([[1.0, 0.0], [0.0, 1.0]]), "costs": np.ones((2, 2))}
    values[column][1, 0] = bad
    with pytest.raises(ValueError, match=rf"{column}.*worker 'a'.*prompt 'p1'"):
        make_table(values["rewards"], costs=values["costs"], workers=["a", "b"])


def test_a_reward_table_names_its_first_bad_value_and_a_prompt_without_id_by_its_row() -> None:
    """Of several NaN or infinite values the first (row by row) is named, and a prompt
    without an id by its row: 'prompt None' would name no prompt."""
    rewards = np.array([[1.0, 0.0], [np.inf, 1.0], [0.0, np.nan]])
    with pytest.raises(ValueError, match=r"hold 2 NaN .* the first for worker 'a' on row 1;"):
        RewardTable(rewards=rewards, costs=None, tasks=[None] * 3, ids=[None] * 3,
                    prompt_hashes=["h0", "h1", "h2"], worker_ids=["a", "b"])  # fmt: skip


def test_a_reward_table_refuses_costs_of_another_shape_than_its_rewards() -> None:
    """Costs with a column or a prompt too many (arrays, not records, which check them):
    a mean cost then read only the columns picked, the extra worker's costs unseen."""
    rewards = np.array([[1.0, 0.0], [0.0, 1.0]])
    for costs in (np.ones((2, 3)), np.ones((3, 2))):
        with pytest.raises(ValueError, match=rf"costs has shape \({costs.shape[0]}, "):
            make_table(rewards, costs=costs, workers=["a", "b"])


@pytest.mark.parametrize("column", ["tasks", "ids", "prompt_hashes"])
def test_a_reward_table_refuses_a_prompt_column_of_another_length(column: str) -> None:
    """Tasks, ids or prompt hashes one short of the rewards' rows (arrays, not records;
    records give one each): the per-task rows then left prompts out, and predictions.jsonl
    or naming a bad value by its prompt stopped on an IndexError. No test gave such a table."""
    columns = {"tasks": ["t0", "t1"], "ids": ["p0", "p1"], "prompt_hashes": ["h0", "h1"]}
    columns[column] = columns[column][:1]
    with pytest.raises(ValueError, match=rf"^{column} has 1 entries but rewards has 2$"):
        RewardTable(rewards=np.eye(2), costs=None, worker_ids=["a", "b"], **columns)


def test_argmax_ties_go_to_lowest_index() -> None:
    scores = np.array([[0.5, 0.5, 0.1], [0.2, 0.7, 0.7], [0.3, 0.3, 0.3]])
    assert argmax_choices(scores).tolist() == [0, 1, 0]


# --- the report ---------------------------------------------------------------


def test_router_that_picks_the_oracle_closes_the_whole_gap() -> None:
    rng = np.random.default_rng(0)
    train = make_table(rng.random((50, 3)))
    evaluated = make_table(rng.random((40, 3)))
    probabilities = one_hot(evaluated.rewards.argmax(axis=1), 3)
    report = evaluation_report(train, evaluated, "test", probabilities, {}, {})
    methods = report["methods"]
    assert methods["router"]["mean_reward"] == pytest.approx(methods["oracle"]["mean_reward"])
    assert methods["router"]["gap_closed"] == pytest.approx(1.0)
    assert methods["oracle"]["gap_closed"] == pytest.approx(1.0)
    assert methods["best_single"]["gap_closed"] == pytest.approx(0.0)
    assert methods["random"]["mean_reward"] == pytest.approx(evaluated.rewards.mean())
    assert report["split"] == "test"
    assert report["sizes"] == {"train": 50, "validation": None, "evaluated": 40}


def test_best_single_is_chosen_on_train_even_when_another_worker_wins_on_test() -> None:
    train = make_table([[1, 0, 0]] * 8 + [[0, 1, 0]] * 2)  # a is best on train
    evaluated = make_table([[0, 1, 0]] * 9 + [[1, 0, 0]])  # b is best on test
    router = one_hot(np.full(10, 1), 3)  # always b
    report = evaluation_report(train, evaluated, "test", router, {}, {})
    assert report["best_single"]["worker"] == "a"
    assert report["best_single"]["train_mean_reward"] == pytest.approx(0.8)
    assert report["methods"]["best_single"]["mean_reward"] == pytest.approx(0.1)
    assert report["methods"]["router"]["mean_reward"] == pytest.approx(0.9)
    # (0.9 - 0.1) / (1.0 - 0.1)
    assert report["methods"]["router"]["gap_closed"] == pytest.approx(0.8 / 0.9)
    assert report["choices"]["router"]["counts"] == {"a": 0, "b": 10, "c": 0}
    assert report["choices"]["router"]["shares"]["b"] == pytest.approx(1.0)
    assert report["choices"]["best_single"]["counts"] == {"a": 10, "b": 0, "c": 0}
    assert report["router_vs_best_single"] == {
        "same_choice": 0.0,
        "router_better": pytest.approx(0.9),
        "router_worse": pytest.approx(0.1),
    }


def test_best_single_ties_go_to_the_lowest_index() -> None:
    train = make_table([[0, 1, 1], [0, 1, 1]])
    evaluated = make_table([[0, 0, 1]])
    report = evaluation_report(train, evaluated, "test", None, {}, {})
    assert report["best_single"]["worker"] == "b"


def test_per_task_best_uses_train_labels_and_falls_back_to_best_single() -> None:
    train = make_table(
        [[1, 0, 0]] * 6 + [[0, 1, 0]] * 3,
        tasks=["math"] * 6 + ["code"] * 3,
    )  # best single: a; math -> a, code -> b
    evaluated = make_table(
        [[0, 1, 0], [0, 1, 0], [1, 0, 0], [0, 0, 1], [1, 0, 0]],
        tasks=["code", "code", "math", "poetry", None],
    )
    report = evaluation_report(train, evaluated, "test", None, {}, {})
    assert report["per_task_best"]["workers"] == {"code": "b", "math": "a"}
    assert report["per_task_best"]["n_fallback_to_best_single"] == 2
    # code: b, b (1, 1); math: a (1); poetry -> a (0); None -> a (1)
    assert report["methods"]["per_task_best"]["mean_reward"] == pytest.approx(4 / 5)
    assert report["methods"]["best_single"]["mean_reward"] == pytest.approx(2 / 5)
    per_task = {row["task"]: row for row in report["per_task"]}
    assert list(per_task) == ["code", "math", "poetry", None]  # None: the unlabelled prompts
    assert per_task["code"]["n"] == 2
    assert per_task["code"]["per_task_best"] == pytest.approx(1.0)
    assert per_task["code"]["best_single"] == pytest.approx(0.0)
    assert per_task["code"]["oracle"] == pytest.approx(1.0)
    assert per_task["code"]["per_task_best_worker"] == "b"
    assert per_task["poetry"]["per_task_best_worker"] is None


def test_a_task_named_no_task_is_not_the_unlabelled_prompts_row() -> None:
    """A task named "(no task)", the unlabelled prompts' label, was merged with them into
    one per-task row (n counting both), which took that task's best worker on train; they are
    two rows, the unlabelled prompts' last. Both were then shown as `(no task)`, in the
    Markdown and console tables and on the plot: the task so named is now shown quoted, as
    is any task whose name starts with a parenthesis or a quote, which would read the same."""
    from fugu_lite.evaluation.table import task_label

    train = make_table([[1, 0, 0]] * 2 + [[0, 1, 0]] * 3, tasks=["(no task)"] * 2 + ["x"] * 3)
    evaluated = make_table([[1, 0, 0], [0, 1, 0], [0, 0, 1]], tasks=["(no task)", None, None])
    report = evaluation_report(train, evaluated, "test", None, {}, {})
    rows = [(row["task"], row["n"], row["per_task_best_worker"]) for row in report["per_task"]]
    assert rows == [("(no task)", 1, "a"), (None, 2, None)]
    assert [row["per_task_best"] for row in report["per_task"]] == [1.0, 0.5]
    lines = evaluation_markdown(report, []).splitlines()
    assert [line.split(" | ")[:2] for line in lines if "(no task)" in line] == [
        ['| "(no task)"', "1"],
        ["| (no task)", "2"],
    ]
    console = Console(record=True, width=200)
    print_evaluation(report, console)
    named = [row[:2] for row in console_rows(console.export_text()) if "(no task)" in row[0]]
    assert named == [['"(no task)"', "1"], ["(no task)", "2"]]
    ticks = [text.get_text() for text in plot_per_task(report).axes[0].get_yticklabels()]
    assert ticks == ['"(no task)" (n=1)', "(no task) (n=2)"]
    # quoted as JSON: a task named with the quotes is not the one without them
    names = ["(no task)", '"(no task)"', "(x", "x (y)", None]
    assert [task_label(name) for name in names] == [
        '"(no task)"', '"\\"(no task)\\""', '"(x"', "x (y)", "(no task)",
    ]  # fmt: skip


def test_a_blank_task_name_is_shown_quoted_not_as_an_empty_cell() -> None:
    """RewardRecord takes a blank task ("" or spaces, kept as written): its per-task row was
    an empty cell in the Markdown and console tables and a bare "(n=2)" on the plot, read as
    a row without a name, and the tasks "" and "  " could not be told apart."""
    table = make_table(np.eye(3)[[0, 1, 2, 0, 1]], tasks=["", "", "  ", "math", None])
    report = evaluation_report(table, table, "test", None, {}, {})
    assert [row["task"] for row in report["per_task"]] == ["", "  ", "math", None]
    lines = evaluation_markdown(report, []).splitlines()
    cells = [line.split(" | ") for line in lines if line.startswith("| ")]
    rows = [row[:2] for row in cells if row[1].isdigit()]  # the per-task table's: Task, n
    assert rows == [['| ""', "2"], ['| "  "', "1"], ["| math", "1"], ["| (no task)", "1"]]
    console = Console(record=True, width=200)
    print_evaluation(report, console)
    per_task = console.export_text().split("Mean reward per task")[1]
    assert [row[:2] for row in console_rows(per_task)][:4] == [
        ['""', "2"], ['"  "', "1"], ["math", "1"], ["(no task)", "1"],
    ]  # fmt: skip
    ticks = [text.get_text() for text in plot_per_task(report).axes[0].get_yticklabels()]
    assert ticks == ['"" (n=2)', '"  " (n=1)', "math (n=1)", "(no task) (n=1)"]


def test_a_workers_name_in_the_best_worker_column_never_reads_as_the_fallback() -> None:
    """The Markdown per-task table's "Best worker on train" column showed a worker's name as
    written: a worker named "— (best single)", best on train for task y, read as the fallback
    of task z, which no train prompt labels (so the best single worker answers it). It is
    shown as its row is (row_name), quoted; the fallback is not."""
    workers = ["a", "— (best single)", "b (best single)"]
    train = make_table(
        np.eye(3)[[0, 0, 0, 1, 1, 2]], tasks=["x"] * 3 + ["y"] * 2 + ["w"], workers=workers
    )
    evaluated = make_table(np.eye(3)[[0, 1, 2, 1]], tasks=["x", "y", "w", "z"], workers=workers)
    report = evaluation_report(train, evaluated, "test", None, {}, {})
    lines = evaluation_markdown(report, []).splitlines()
    table = lines[lines.index("## Per task") + 2 :]
    rows = [line.strip("| ").split(" | ") for line in table[2 : table.index("")]]
    assert [(row[0], row[-1]) for row in rows] == [
        ("w", '"b (best single)"'), ("x", "a"), ("y", '"— (best single)"'),
        ("z", "— (best single)"),
    ]  # fmt: skip


def test_no_task_labels_means_no_per_task_rows() -> None:
    table = make_table([[1, 0, 0], [0, 1, 0]])
    report = evaluation_report(table, table, "train", None, {}, {})
    assert report["per_task"] == []
    assert report["per_task_best"] is None
    assert "per_task_best" not in report["methods"]


def test_costs_none_versus_present() -> None:
    rewards = [[1, 1, 0], [0, 1, 1], [1, 0, 0]]
    costs = [[3.0, 1.0, 0.5], [1.0, 2.0, 1.0], [4.0, 1.0, 1.0]]
    train = make_table(rewards)
    router = one_hot(np.array([0, 1, 0]), 3)

    without = evaluation_report(train, make_table(rewards), "test", router, {}, {})
    assert without["costs_known"] is False
    assert all(method["mean_cost"] is None for method in without["methods"].values())
    assert any("costs unknown" in note for note in without["notes"])

    with_costs = evaluation_report(train, make_table(rewards, costs), "test", router, {}, {})
    methods = with_costs["methods"]
    assert with_costs["costs_known"] is True
    assert methods["router"]["mean_cost"] == pytest.approx((3.0 + 2.0 + 4.0) / 3)
    assert methods["random"]["mean_cost"] == pytest.approx(np.mean(costs))
    # Among equally good workers the oracle takes the cheapest: b (1.0), c (1.0), a (4.0).
    assert methods["oracle"]["mean_cost"] == pytest.approx((1.0 + 1.0 + 4.0) / 3)
    assert with_costs["choices"]["oracle"]["counts"] == {"a": 1, "b": 1, "c": 1}
    assert methods["oracle"]["detail"].endswith("among equally good workers the cheapest")


def test_the_oracle_takes_the_cheapest_of_equally_good_workers_at_fractions_of_a_cent() -> None:
    """Costs in USD per prompt are fractions of a cent: among a and b, equally good, the
    oracle takes b at 0.001, not the first worker."""
    table = make_table([[1, 1, 0], [0, 1, 1]], costs=[[0.003, 0.001, 0.002], [0.1, 0.004, 0.002]])
    report = evaluation_report(table, table, "test", None, {}, {})
    assert report["choices"]["oracle"]["counts"] == {"a": 0, "b": 1, "c": 1}
    assert report["methods"]["oracle"]["mean_cost"] == pytest.approx(0.0015)


def test_oracle_ties_prefer_the_best_single_worker_without_costs() -> None:
    train = make_table([[0, 0, 1], [0, 1, 1]])  # best single: c
    evaluated = make_table([[1, 1, 1], [1, 1, 0], [0, 1, 0]])
    report = evaluation_report(train, evaluated, "test", None, {}, {})
    # row 1: all tie -> c; row 2: a and b tie, c is not best -> a; row 3: b
    assert report["choices"]["oracle"]["counts"] == {"a": 1, "b": 1, "c": 1}
    assert report["methods"]["oracle"]["mean_reward"] == pytest.approx(1.0)


def test_gap_closed_is_none_when_oracle_equals_best_single() -> None:
    table = make_table([[1, 0, 0], [1, 0, 1]])
    report = evaluation_report(table, table, "test", one_hot(np.array([1, 2]), 3), {}, {})
    assert report["methods"]["router"]["gap_closed"] is None
    assert any("gap closed is undefined" in note for note in report["notes"])


def tied_report() -> dict:
    """A report whose every figure is worked out by hand: best single b (chosen on train),
    per-task best math -> b and code -> a, kNN always c, and a router that ties with b on a
    prompt, beats it on two and loses on one."""
    train = make_table(
        [[0, 1, 0]] * 3 + [[1, 0, 0]], tasks=["math", "math", "math", "code"]
    )  # best single: b (0.75); math -> b, code -> a
    evaluated = make_table(
        [[1, 0, 0], [0, 1, 1], [1, 0, 0], [0, 1, 1], [0, 1, 0]],
        tasks=["math", "math", "code", "poetry", None],
    )
    router = one_hot(np.array([0, 2, 0, 1, 2]), 3)  # better, tie, better, same, worse
    knn = Selection("k", 5, "validation", {"5": 0.7, "10": 0.6}, 3, False, "k=5 chosen")
    return evaluation_report(
        train, evaluated, "test", router, {"knn": one_hot(np.full(5, 2), 3)},
        {"knn": knn.as_dict()},
    )  # fmt: skip


def test_ties_with_the_best_single_worker_count_as_neither_better_nor_worse() -> None:
    """A router choice as good as the best single worker's (another worker, same reward)
    earns neither more nor less; an unseen task falls back to the best single worker, here
    not the first."""
    report = tied_report()
    assert report["router_vs_best_single"] == {
        "same_choice": pytest.approx(1 / 5),
        "router_better": pytest.approx(2 / 5),
        "router_worse": pytest.approx(1 / 5),
    }
    # poetry (unseen on train) and the unlabelled prompt go to b, the best single worker
    assert report["choices"]["per_task_best"]["counts"] == {"a": 1, "b": 4, "c": 0}
    assert report["methods"]["per_task_best"]["mean_reward"] == pytest.approx(4 / 5)


def test_predictions_give_each_prompts_best_reward_as_its_oracle_reward() -> None:
    table = make_table([[0.2, 0.9, 0.1], [1.0, 0.0, 0.5], [0.3, 0.3, 0.4]])
    rows = router_predictions(table, one_hot(np.array([0, 1, 2]), 3))
    assert [row["oracle_reward"] for row in rows] == pytest.approx([0.9, 1.0, 0.4])
    assert [row["reward"] for row in rows] == pytest.approx([0.2, 0.0, 0.4])


def test_report_rejects_misaligned_inputs() -> None:
    train = make_table([[1, 0, 0]])
    evaluated = make_table([[1, 0, 0], [0, 1, 0]])
    with pytest.raises(ValueError, match="shape"):
        evaluation_report(train, evaluated, "test", np.ones((3, 3)), {}, {})
    with pytest.raises(ValueError, match="NaN"):
        evaluation_report(train, evaluated, "test", np.full((2, 3), np.nan), {}, {})
    with pytest.raises(ValueError, match="reserved"):
        evaluation_report(train, evaluated, "test", None, {"oracle": np.ones((2, 3))}, {})
    with pytest.raises(ValueError, match="differ"):
        other = make_table([[1, 0]], workers=["a", "x"])
        evaluation_report(other, evaluated, "test", None, {}, {})


# --- baselines ----------------------------------------------------------------


def cluster_features(
    rng: np.random.Generator, cluster_of: np.ndarray, n_clusters: int, noise: float = 0.05
) -> np.ndarray:
    """Points near one of n_clusters orthogonal directions: cosine neighbours share a cluster."""
    centres = np.eye(n_clusters, 16, dtype=np.float32)
    points = centres[cluster_of] + noise * rng.standard_normal((len(cluster_of), 16))
    return points.astype(np.float32)


def test_knn_with_small_clusters_chooses_a_small_k() -> None:
    rng = np.random.default_rng(1)
    n_clusters, per_cluster = 12, 8
    best_worker = np.arange(n_clusters) % 3

    def split(n_per: int) -> tuple[np.ndarray, np.ndarray]:
        clusters = np.repeat(np.arange(n_clusters), n_per)
        return cluster_features(rng, clusters, n_clusters), one_hot(best_worker[clusters], 3)

    train_x, train_r = split(per_cluster)
    validation_x, validation_r = split(3)
    test_x, test_r = split(3)
    result = knn_baseline(train_x, train_r, test_x, validation_x, validation_r)

    # Only k <= n_train (96) are tried; k = 5 stays inside a cluster, larger k mixes clusters.
    assert list(result.selection.validation_scores) == ["5", "10", "20", "50"]
    assert result.selection.selected_on == "validation"
    assert result.selection.chosen == 5
    assert result.selection.validation_scores["5"] == pytest.approx(1.0)
    assert result.selection.validation_scores["50"] < 0.9
    choices = argmax_choices(result.predictions)
    assert np.array_equal(choices, test_r.argmax(axis=1))


def test_knn_with_noisy_rewards_chooses_a_large_k() -> None:
    rng = np.random.default_rng(2)
    n_train = 200  # per cluster
    # Two clusters; worker a is better in cluster 0 (0.65 vs 0.35), worker b in cluster 1.
    success = np.array([[0.65, 0.35], [0.35, 0.65]])

    def split(n_per: int, expected: bool) -> tuple[np.ndarray, np.ndarray]:
        clusters = np.repeat([0, 1], n_per)
        features = cluster_features(rng, clusters, 2, noise=0.3)
        p = success[clusters]
        rewards = p if expected else (rng.random(p.shape) < p).astype(np.float64)
        return features, rewards

    train_x, train_r = split(n_train, expected=False)
    # Validation and test score with expected rewards, so the ranking of k is not noise.
    validation_x, validation_r = split(100, expected=True)
    test_x, test_r = split(100, expected=True)
    result = knn_baseline(
        train_x, train_r, test_x, validation_x, validation_r, grid=(1, 5, 50, 200)
    )
    scores = result.selection.validation_scores
    assert result.selection.chosen >= 50
    assert scores["1"] < scores["50"]
    choices = argmax_choices(result.predictions)
    assert (choices == test_r.argmax(axis=1)).mean() > 0.95


def test_knn_predict_is_the_mean_of_the_nearest_rewards() -> None:
    train_x = np.array([[1, 0], [0.9, 0.1], [0, 1], [-1, 0]], dtype=np.float32)
    train_r = np.array([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5], [0.2, 0.2]])
    query = np.array([[2, 0]], dtype=np.float32)  # scale does not matter under cosine
    np.testing.assert_allclose(knn_predict(train_x, train_r, query, k=2), [[0.5, 0.5]])
    np.testing.assert_allclose(knn_predict(train_x, train_r, query, k=1), [[1.0, 0.0]])
    # k above the train size uses every train prompt
    np.testing.assert_allclose(knn_predict(train_x, train_r, query, k=99), [train_r.mean(axis=0)])


def test_knn_neighbours_are_the_most_cosine_similar_not_the_largest_dot_product() -> None:
    train_x = np.array([[10, 10], [1, 0.1]], dtype=np.float32)  # a long vector at 45 degrees
    train_r = np.array([[1.0, 0.0], [0.0, 1.0]])
    query = np.array([[1, 0]], dtype=np.float32)
    np.testing.assert_allclose(knn_predict(train_x, train_r, query, k=1), [[0.0, 1.0]])
    # features shorter than 1 are scaled to unit length too: the short one along the query
    short = np.array([[0.05, 0.0], [0.6, 0.6]], dtype=np.float32)
    np.testing.assert_allclose(knn_predict(short, train_r, query / 10, k=1), [[1.0, 0.0]])
    with pytest.raises(ValueError, match="k must be at least 1, got 0"):
        knn_predict(train_x, train_r, query, k=0)


def test_knn_on_few_train_prompts_tries_and_reports_the_k_it_can_use() -> None:
    rng = np.random.default_rng(6)
    features, rewards = rng.standard_normal((5, 4)), rng.random((5, 3))
    result = knn_baseline(features, rewards, features, features, rewards, grid=(2, 5, 10))
    tried = [int(value) for value in result.selection.validation_scores]
    assert tried == [2, 5]  # k = 5 is every train prompt, 10 would repeat it
    # without validation, the default k (100) is capped at the train size it can use
    assert knn_baseline(features, rewards, features).selection.chosen == 5


def test_ridge_recovers_linear_rewards() -> None:
    rng = np.random.default_rng(3)
    weights = rng.standard_normal((8, 3))
    offsets = np.array([0.5, 0.4, 0.6])

    def split(n: int) -> tuple[np.ndarray, np.ndarray]:
        features = (rng.standard_normal((n, 8)) * [1, 2, 3, 4, 1, 2, 3, 4] + 5).astype(np.float32)
        return features, features @ weights + offsets

    train_x, train_r = split(300)
    validation_x, validation_r = split(100)
    test_x, test_r = split(100)
    result = ridge_baseline(train_x, train_r, test_x, validation_x, validation_r)
    assert result.selection.chosen <= 1.0
    assert result.selection.validation_scores["10000"] < result.selection.validation_scores["0.01"]
    np.testing.assert_allclose(result.predictions, test_r, atol=0.05)
    assert np.array_equal(argmax_choices(result.predictions), test_r.argmax(axis=1))


def test_ridge_standardises_with_train_statistics() -> None:
    train_x = np.array([[0.0], [10.0]], dtype=np.float32)
    model = fit_ridge(train_x, np.array([[0.0], [1.0]]), alpha=1e-6)
    np.testing.assert_allclose(model.scaler.mean_, [5.0])
    np.testing.assert_allclose(model.predict(np.array([[5.0]])), [[0.5]], atol=1e-6)
    # scaled too: z = (x - 5) / 5 = -1, 1, so with alpha = 1 the slope is (0.5 + 0.5) / (2 + 1)
    # and x = 10 predicts 0.5 + 1/3 (centred only, z = -5, 5, it would be 0.5 + 25/51)
    model = fit_ridge(train_x, np.array([[0.0], [1.0]]), alpha=1.0)
    np.testing.assert_allclose(model.predict(np.array([[10.0]])), [[0.5 + 1 / 3]], rtol=1e-5)


@pytest.mark.parametrize(("baseline", "grid"), [(knn_baseline, (4,)), (ridge_baseline, (1e9,))])
def test_a_baseline_is_fitted_on_train_and_only_scored_on_validation(baseline, grid) -> None:
    """With k = every train prompt, or an alpha that flattens every coefficient, a baseline
    predicts the train split's mean rewards on every prompt; fitted on the validation split
    (where b is always best) it would predict b."""
    features = np.array([[1, 0], [0, 1], [1, 1], [1, -1]], dtype=np.float32)
    train = np.array([[1.0, 0.0], [1.0, 0.0], [1.0, 1.0], [0.0, 0.0]])  # means 0.75, 0.25
    validation = np.tile([0.0, 1.0], (4, 1))
    result = baseline(features, train, features[:2], features, validation, grid=grid)
    assert result.selection.selected_on == "validation"
    np.testing.assert_allclose(result.predictions, [[0.75, 0.25]] * 2, atol=1e-6)


@pytest.mark.parametrize(
    ("baseline", "grid", "expected"),
    [(knn_baseline, (1, 4), 4), (ridge_baseline, (1e-3, 1e9), 1e9)],
)
def test_a_baselines_grid_is_scored_by_predictors_fitted_on_train(baseline, grid, expected) -> None:
    """On train, a is the better worker where x > 0 and no better than b's 0.4 where x < 0;
    on validation a is best everywhere. Fitted on train, the closest fit (k = 1, alpha
    1e-3) sends the x < 0 prompt to b and scores 0.5, the flattest (every train prompt, or
    alpha 1e9: the train means) sends both to a and scores 1.0. Fitted on validation itself,
    every value would score 1.0 and the tie would go to the closest fit."""
    train_x = np.array([[-1.0], [-1.0], [1.0], [1.0]], dtype=np.float32)
    train = np.array([[0.0, 0.4], [0.0, 0.4], [1.0, 0.4], [1.0, 0.4]])
    validation_x = np.array([[-1.0], [1.0]], dtype=np.float32)
    validation = np.array([[1.0, 0.0], [1.0, 0.0]])
    result = baseline(train_x, train, validation_x, validation_x, validation, grid=grid)
    assert result.selection.chosen == expected
    scores = list(result.selection.validation_scores.values())
    assert scores == pytest.approx([0.5, 1.0])


def test_knn_predicts_each_block_of_queries_from_its_own_neighbours(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """kNN scores the queries in blocks (a test split of many thousands of prompts would
    not fit at once); every block, the last and shorter one too, must use its own rows."""
    monkeypatch.setattr(baselines, "_KNN_BLOCK", 2)
    train_x = np.eye(3, dtype=np.float32)
    train_r = np.array([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]])
    order = [2, 0, 1, 1, 0]
    predicted = knn_predict(train_x, train_r, train_x[order] * 3, k=1)
    np.testing.assert_allclose(predicted, train_r[order])


@pytest.mark.parametrize("baseline", [knn_baseline, ridge_baseline])
def test_baselines_say_what_is_wrong_with_the_validation_split(baseline) -> None:
    rng = np.random.default_rng(5)
    features, rewards = rng.standard_normal((10, 4)), rng.random((10, 3))
    with pytest.raises(ValueError, match="without validation_features"):
        baseline(features, rewards, features, None, rewards)
    with pytest.raises(ValueError, match="5 rows but validation_rewards has 10"):
        baseline(features, rewards, features, features[:5], rewards)
    # Features without rewards are ignored: the default is used.
    selection = baseline(features, rewards, features, features, None).selection
    assert selection.selected_on == "default"


def test_select_on_validation_reports_every_score_and_breaks_ties_early() -> None:
    validation = np.array([[1.0, 0.0], [0.0, 1.0]])
    predictions = {
        1.0: np.array([[0.0, 1.0], [1.0, 0.0]]),  # both wrong
        2.0: np.array([[1.0, 0.0], [0.0, 1.0]]),  # both right
        3.0: np.array([[2.0, 0.0], [0.0, 2.0]]),  # both right, later in the grid
    }
    selection = select_on_validation(predictions.__getitem__, [1.0, 2.0, 3.0], validation, 1.0, "x")
    assert selection.chosen == 2.0
    assert selection.validation_scores == {"1": 0.0, "2": 1.0, "3": 1.0}
    assert selection.n_validation == 2
    assert selection.as_dict()["selected_on"] == "validation"
    assert not selection.at_grid_edge


def test_select_on_validation_flags_a_choice_at_the_edge_of_the_grid() -> None:
    validation = np.array([[1.0, 0.0]])
    right, wrong = np.array([[1.0, 0.0]]), np.array([[0.0, 1.0]])
    selection = select_on_validation(
        lambda value: right if value == 3.0 else wrong, [1.0, 2.0, 3.0], validation, 1.0, "x"
    )
    assert selection.chosen == 3.0
    assert selection.at_grid_edge
    assert "edge of the grid" in selection.note
    # the report's notes read it from the selection as run_baselines hands it on
    assert baseline_notes("test", {"x": selection.as_dict()}) == [f"x: {selection.note}"]


def test_a_grid_where_every_value_ties_is_not_flagged_as_at_its_edge() -> None:
    validation = np.array([[1.0, 0.0]])
    selection = select_on_validation(
        lambda value: np.array([[0.0, 1.0]]), [1.0, 2.0, 3.0], validation, 1.0, "k"
    )
    assert selection.chosen == 1.0
    assert not selection.at_grid_edge
    assert "every grid value scored the same" in selection.note


def test_a_best_value_first_in_the_grid_is_at_its_edge_too() -> None:
    validation = np.array([[1.0, 0.0]])
    right, wrong = np.array([[1.0, 0.0]]), np.array([[0.0, 1.0]])
    selection = select_on_validation(
        lambda value: right if value == 1.0 else wrong, [1.0, 2.0, 3.0], validation, 2.0, "x"
    )
    assert selection.chosen == 1.0
    assert selection.at_grid_edge


def test_an_empty_grid_is_refused_naming_its_parameter() -> None:
    """Without the check an empty grid ended in numpy's 'attempt to get argmax of an empty
    sequence'."""
    features, rewards = np.eye(3, dtype=np.float32), np.eye(3)
    with pytest.raises(ValueError, match="the alpha grid is empty"):
        ridge_baseline(features, rewards, features, features, rewards, grid=())


def test_a_grid_of_one_value_or_a_repeated_value_is_scored_once_per_value() -> None:
    validation = np.array([[1.0, 0.0]])
    right, wrong = np.array([[1.0, 0.0]]), np.array([[0.0, 1.0]])
    single = select_on_validation(lambda value: right, [5.0], validation, 5.0, "k")
    assert not single.at_grid_edge
    assert single.note == "k=5 chosen on validation (1 prompts)"  # no tie among one value
    scored: list[float] = []

    def predict(value: float) -> np.ndarray:
        scored.append(value)
        return right if value == 10.0 else wrong

    repeated = select_on_validation(predict, [5.0, 10.0, 5.0], validation, 5.0, "k")
    assert scored == [5.0, 10.0]
    assert repeated.chosen == 10.0
    assert repeated.at_grid_edge  # the last of the values 5, 10


def test_validation_rewards_of_no_rows_use_the_default() -> None:
    selection = select_on_validation(
        lambda value: np.empty((0, 2)), [1.0, 2.0], np.empty((0, 2)), 7.0, "alpha"
    )
    assert (selection.chosen, selection.selected_on) == (7.0, "default")


def test_select_on_validation_falls_back_to_the_default() -> None:
    def never_called(value: float) -> np.ndarray:
        raise AssertionError("no validation: nothing to predict")

    selection = select_on_validation(never_called, [1.0, 2.0], None, 7.0, "alpha")
    assert selection.chosen == 7.0
    assert selection.selected_on == "default"
    assert selection.validation_scores == {}
    assert "no validation split" in selection.note


def test_run_baselines_without_validation_uses_defaults_and_says_so() -> None:
    rng = np.random.default_rng(4)
    train = make_table(rng.random((300, 3)))
    evaluated = make_table(rng.random((20, 3)))
    train_x = rng.standard_normal((300, 6)).astype(np.float32)
    test_x = rng.standard_normal((20, 6)).astype(np.float32)
    predictions, info = run_baselines(train_x, train, test_x)
    assert set(predictions) == {"knn", "ridge"}
    assert predictions["knn"].shape == (20, 3)
    assert info["knn"]["chosen"] == DEFAULT_K
    assert info["ridge"]["chosen"] == DEFAULT_ALPHA
    assert info["knn"]["selected_on"] == info["ridge"]["selected_on"] == "default"
    report = evaluation_report(train, evaluated, "test", None, predictions, info)
    assert report["methods"]["knn"]["label"] == f"kNN (k={DEFAULT_K})"
    assert "fixed default" in report["methods"]["ridge"]["detail"]
    assert sum("no validation split" in note for note in report["notes"]) == 2
    assert report["sizes"]["validation"] is None  # no prompt chose k or alpha


def test_run_baselines_checks_feature_rows() -> None:
    train = make_table(np.zeros((4, 3)))
    with pytest.raises(ValueError, match="rows"):
        run_baselines(np.zeros((5, 2), np.float32), train, np.zeros((1, 2), np.float32))
    with pytest.raises(ValueError, match="like the train features"):
        run_baselines(np.zeros((4, 2), np.float32), train, np.zeros((1, 3), np.float32))
    with pytest.raises(ValueError, match=r"must be a \[N, D\] array, got shape \(4,\)"):
        run_baselines(np.zeros(4, np.float32), train, np.zeros((1, 2), np.float32))
    features = np.zeros((4, 2), np.float32)
    other_workers = make_table(np.zeros((4, 3)), workers=["a", "b", "d"])
    with pytest.raises(ValueError, match="validation workers"):
        run_baselines(features, train, features, features, other_workers)


def test_choosing_hyperparameters_on_the_evaluated_split_is_flagged() -> None:
    rng = np.random.default_rng(5)
    train = make_table(rng.random((60, 3)))
    validation = make_table(rng.random((20, 3)))
    train_x = rng.standard_normal((60, 4)).astype(np.float32)
    validation_x = rng.standard_normal((20, 4)).astype(np.float32)
    predictions, info = run_baselines(train_x, train, validation_x, validation_x, validation)
    report = evaluation_report(train, validation, "validation", None, predictions, info)
    assert sum("optimistic" in note for note in report["notes"]) == 2
    # evaluated on train or test, k and alpha were chosen on another split than the scores'
    for split in ("train", "test"):
        assert not any("same validation split" in note for note in baseline_notes(split, info))


# --- predictions, files, console ----------------------------------------------


def full_report(costs: bool = True) -> tuple[dict, list[dict], RewardTable]:
    rng = np.random.default_rng(6)
    tasks = ["math", "code", "trivia|qa"]
    train = make_table(rng.random((90, 3)), tasks=[tasks[i % 3] for i in range(90)])
    validation = make_table(rng.random((30, 3)))
    evaluated = make_table(
        rng.random((24, 3)),
        costs=rng.random((24, 3)) if costs else None,
        tasks=[tasks[i % 3] if i % 4 else None for i in range(24)],
    )
    features = {
        name: rng.standard_normal((n, 5)).astype(np.float32)
        for name, n in (("train", 90), ("validation", 30), ("test", 24))
    }
    predictions, info = run_baselines(
        features["train"],
        train,
        features["test"],
        features["validation"],
        validation,
        knn_grid=(5, 10),
        ridge_grid=(0.1, 10.0),
    )
    logits = rng.standard_normal((24, 3))
    probabilities = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    report = evaluation_report(train, evaluated, "test", probabilities, predictions, info)
    return report, router_predictions(evaluated, probabilities), evaluated


def test_router_predictions_rows() -> None:
    table = make_table([[0.2, 0.9, 0.1], [1.0, 0.0, 0.5]], costs=[[1, 2, 3], [4, 5, 6]])
    probabilities = np.array([[0.1, 0.6, 0.3], [0.4, 0.4, 0.2]])  # row 2 ties -> a
    rows = router_predictions(table, probabilities)
    assert rows[0]["chosen_worker"] == "b"
    assert rows[0]["reward"] == pytest.approx(0.9)
    assert rows[0]["cost"] == pytest.approx(2.0)
    assert rows[0]["probabilities"] == {"a": 0.1, "b": 0.6, "c": 0.3}
    assert rows[0]["id"] == "p0"
    assert rows[0]["prompt_hash"] == prompt_hash("prompt 0")
    assert rows[1]["chosen_worker"] == "a"
    assert rows[1]["cost"] == pytest.approx(4.0)  # each prompt's own cost, not the first's
    assert "cost" not in router_predictions(make_table(table.rewards), probabilities)[0]


def test_report_is_strict_json() -> None:
    report, _, _ = full_report()
    assert json.loads(json.dumps(report, allow_nan=False)) == report
    assert list(report["methods"]) == [
        "router",
        "knn",
        "ridge",
        "per_task_best",
        "best_single",
        "random",
        "oracle",
    ]
    assert report["baselines"]["knn"]["chosen"] in (5, 10)
    assert report["sizes"] == {"train": 90, "validation": 30, "evaluated": 24}


@pytest.mark.parametrize("costs", [True, False])
def test_write_evaluation_writes_parseable_files_and_png_plots(tmp_path: Path, costs: bool) -> None:
    report, predictions, evaluated = full_report(costs)
    write_evaluation(report, predictions, tmp_path / "out")
    out = tmp_path / "out"

    assert json.loads((out / "evaluation_report.json").read_text()) == report
    lines = (out / "predictions.jsonl").read_text().splitlines()
    assert len(lines) == evaluated.n_prompts
    assert json.loads(lines[0])["prompt_hash"] == evaluated.prompt_hashes[0]

    markdown = (out / "evaluation_report.md").read_text()
    for heading in (
        "# Evaluation on `test`",
        "## Methods",
        "## Per task",
        "## Which worker answers",
        "## Baseline hyperparameters",
    ):
        assert heading in markdown
    assert "trivia\\|qa" in markdown  # a pipe in a task name does not break the table
    assert "chosen" in markdown

    for name in ("mean_reward.png", "router_choices.png", "per_task_reward.png"):
        path = out / name
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        image = matplotlib.image.imread(path)
        assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100
        assert f"]({name})" in markdown


def stop_while_saving_a_plot(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C while matplotlib writes a PNG, after it wrote part of the image."""

    def interrupted(figure: Figure, target: object, **options: object) -> None:
        partial = b"\x89PNG\r\n\x1a\n" + b"\0" * 100
        if hasattr(target, "write"):
            target.write(partial)
        else:
            Path(str(target)).write_bytes(partial)
        raise KeyboardInterrupt

    monkeypatch.setattr(Figure, "savefig", interrupted)


def test_an_interrupted_rewrite_leaves_no_report_beside_the_old_runs_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A re-run stopped half-way wrote its JSON report beside the last run's predictions,
    plots and Markdown (or a torn PNG): the JSON now comes last, the old files go first."""
    out, pareto_out = tmp_path / "eval", tmp_path / "pareto"
    old, predictions, _ = full_report(costs=True)
    write_evaluation(old, predictions, out)
    table = make_table([[1.0, 0.0, 0.5], [0.0, 1.0, 0.5]], costs=[[1, 2, 3], [1, 2, 3]])
    router = {0.0: np.full((2, 3), 1 / 3)}
    write_pareto(pareto_report(table, table, "test", router, {}, [0.0], 1.0), pareto_out)
    new, new_predictions, _ = full_report(costs=False)

    stop_while_saving_a_plot(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        write_evaluation(new, new_predictions, out)
    with pytest.raises(KeyboardInterrupt):
        write_pareto(pareto_report(table, table, "test", router, {}, [0.5], 1.0), pareto_out)
    for folder, report in ((out, "evaluation_report"), (pareto_out, "pareto_report")):
        assert not (folder / f"{report}.json").exists()
        assert not (folder / f"{report}.md").exists()
        for image in folder.glob("*.png"):
            matplotlib.image.imread(image)  # a whole PNG, never a torn one

    monkeypatch.undo()
    write_evaluation(new, new_predictions, out)  # the same command again: a complete folder
    assert json.loads((out / "evaluation_report.json").read_text()) == new


def test_dollar_signs_in_worker_and_task_names_are_drawn_as_text(tmp_path: Path) -> None:
    """Names with two `$` were parsed as matplotlib math: `$\\bad$` stopped every plot."""
    workers = ["tier $\\bad$", "plan $5 or $10", "c"]
    rng = np.random.default_rng(1)
    table = make_table(
        rng.random((6, 3)), costs=rng.random((6, 3)), tasks=["cost in $ and $$"] * 6,
        workers=workers,
    )  # fmt: skip
    probabilities = np.full((6, 3), 1 / 3)
    report = evaluation_report(table, table, "test", probabilities, {}, {})
    write_evaluation(report, router_predictions(table, probabilities), tmp_path / "eval")
    assert sorted(path.name for path in (tmp_path / "eval").glob("*.png")) == [
        "mean_reward.png", "per_task_reward.png", "router_choices.png",
    ]  # fmt: skip
    pareto = pareto_report(table, table, "test", {0.0: probabilities}, {}, [0.0], 1.0)
    write_pareto(pareto, tmp_path / "pareto")
    assert (tmp_path / "pareto" / "cost_quality.png").read_bytes()[:4] == b"\x89PNG"
    assert plain_text(workers[0]) == "tier \\$\\bad\\$"


def write_both_reports(table: RewardTable, folder: Path) -> None:
    """evaluation_report.md in folder/eval and pareto_report.md in folder/pareto, for a
    router that gives every worker the same probability."""
    probabilities = np.full(table.rewards.shape, 1 / table.n_workers)
    report = evaluation_report(table, table, "test", probabilities, {}, {})
    write_evaluation(report, router_predictions(table, probabilities), folder / "eval")
    pareto = pareto_report(table, table, "test", {0.0: probabilities}, {}, [0.0], 1.0)
    write_pareto(pareto, folder / "pareto")


def test_line_breaks_and_pipes_in_task_and_worker_names_keep_markdown_tables_whole(
    tmp_path: Path,
) -> None:
    """A task or worker name holding a line break ended its table row half-way, so the rest
    of that row fell out of the table in evaluation_report.md and pareto_report.md."""
    workers = ["gpt | large", "two\nlines", "c"]
    tasks = ["reading\ncomprehension", "a|b", None, "x"]
    rng = np.random.default_rng(2)
    table = make_table(rng.random((8, 3)), costs=rng.random((8, 3)), tasks=tasks * 2,
                       workers=workers)  # fmt: skip
    write_both_reports(table, tmp_path)
    for path in (
        tmp_path / "eval" / "evaluation_report.md",
        tmp_path / "pareto" / "pareto_report.md",
    ):
        lines = path.read_text().splitlines()
        for previous, line in pairwise(lines):
            # a table ends only at a blank line: a row is never continued on the next line
            assert not previous.startswith("|") or line == "" or line.startswith("| "), line
            assert not line.startswith("|") or line.endswith(" |"), line
    markdown = (tmp_path / "eval" / "evaluation_report.md").read_text()
    assert "| reading<br>comprehension | 2 |" in markdown
    assert "| a\\|b | 2 |" in markdown
    assert "| gpt \\| large |" in markdown and "| two<br>lines |" in markdown
    assert "| two<br>lines " in (tmp_path / "pareto" / "pareto_report.md").read_text()


def test_predictions_hold_one_prediction_a_line_for_any_line_splitter(tmp_path: Path) -> None:
    """A task or worker name holding U+2028, U+2029 or NEL (text pasted from a web page or a
    PDF) was written as it was in predictions.jsonl: a tool splitting the file into lines as
    Python's str.splitlines() does read half a JSON object and stopped."""
    workers = ["line\u2028separator", "next\x85line", "c"]
    tasks = ["para\u2029graph", None]
    rng = np.random.default_rng(3)
    table = make_table(rng.random((4, 3)), costs=rng.random((4, 3)), tasks=tasks * 2,
                       workers=workers)  # fmt: skip
    probabilities = np.eye(3)[[0, 1, 2, 0]]
    report = evaluation_report(table, table, "test", probabilities, {}, {})
    write_evaluation(report, router_predictions(table, probabilities), tmp_path)
    lines = (tmp_path / "predictions.jsonl").read_text(encoding="utf-8").splitlines()
    predictions = [json.loads(line) for line in lines]
    assert [p["task"] for p in predictions] == tasks * 2
    assert [p["chosen_worker"] for p in predictions] == [workers[i] for i in (0, 1, 2, 0)]
    assert list(predictions[0]["probabilities"]) == workers


def test_worker_ids_with_line_breaks_pipes_or_escapes_keep_the_summary_lines_whole(
    tmp_path: Path,
) -> None:
    """The one-line summary at the top of evaluation_report.md and pareto_report.md (and the
    router-vs-best-single sentence) printed worker ids as they were: a line break in one
    started a new paragraph (or a heading, a table), an ESC reached the reader's terminal."""
    workers = ["two\nlines", "x|y", "esc\x1b[31m"]
    rewards = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]] * 3)  # best single: two\nlines
    table = make_table(rewards, costs=np.ones((6, 3)), workers=workers)
    write_both_reports(table, tmp_path)
    for name in ("eval/evaluation_report.md", "pareto/pareto_report.md"):
        text = (tmp_path / name).read_text()
        assert "\x1b" not in text
        lines = text.splitlines()
        assert lines[1] == "" and lines[3] == "", lines[:4]  # the summary is line 3, whole
        assert "two<br>lines" in lines[2], lines[2]
        assert "| esc\\x1b[31m |" in text  # the tables show it too
    summary = (tmp_path / "eval" / "evaluation_report.md").read_text().splitlines()[2]
    assert "workers: 3 (two<br>lines, x\\|y, esc\\x1b[31m)" in summary
    markdown = (tmp_path / "eval" / "evaluation_report.md").read_text()
    assert "The router picks the best single worker (two<br>lines) on" in markdown


def test_html_ampersands_and_backticks_in_names_show_as_written_in_markdown_reports(
    tmp_path: Path,
) -> None:
    """A task or worker name holding `<...>` was written into evaluation_report.md and
    pareto_report.md as raw HTML: a viewer dropped `vector<int>`'s `<int>` as an unknown tag
    and rendered `<b>big</b>` bold; `&lt;` showed as `<` and backticks started code."""
    workers = ["<b>big</b>", "Q&A-bot", "a`b"]
    tasks = ["vector<int>", "x&lt;y", "`code`", None]
    rng = np.random.default_rng(4)
    table = make_table(rng.random((8, 3)), costs=rng.random((8, 3)), tasks=tasks * 2,
                       workers=workers)  # fmt: skip
    write_both_reports(table, tmp_path)
    markdown = (tmp_path / "eval" / "evaluation_report.md").read_text()
    for text in (markdown, (tmp_path / "pareto" / "pareto_report.md").read_text()):
        assert "<" not in text.replace("<br>", ""), text
        assert "&lt;b&gt;big&lt;/b&gt;" in text and "Q&amp;A-bot" in text and "a\\`b" in text
    assert "| vector&lt;int&gt; | 2 |" in markdown
    assert "| x&amp;lt;y | 2 |" in markdown  # shows `x&lt;y`, not `x<y`
    assert "| \\`code\\` | 2 |" in markdown


def rendered_table_cells(markdown: str) -> list[str]:
    """The text of every table cell of `markdown` as a CommonMark + GFM-tables viewer shows
    it (markdown-it-py, which rich depends on)."""
    from markdown_it import MarkdownIt

    renderer = MarkdownIt("commonmark").enable(["table", "strikethrough"])
    tokens = renderer.parse(markdown)
    return [
        # the text of the cell; emphasis, links and strike-through add tokens with none
        "".join(child.content for child in tokens[index + 1].children or [])
        for index, token in enumerate(tokens)
        if token.type in ("th_open", "td_open")
    ]


def test_markdown_emphasis_links_and_backslashes_in_names_show_as_written(
    tmp_path: Path,
) -> None:
    """Task and worker names went into the Markdown tables with only `|`, `<`, `>`, `&` and
    backticks escaped: `__init__` showed as a bold `init`, `a*b*c` as an italic b, `~~v1~~`
    struck through, `[docs](http://x)` as a link, and `x\\|y` lost its backslash."""
    workers = ["__init__", "[docs](http://x)", "a\\b"]
    tasks = ["a*b*c", "~~v1~~", "x\\|y", None]
    rng = np.random.default_rng(5)
    table = make_table(rng.random((8, 3)), costs=rng.random((8, 3)), tasks=tasks * 2,
                       workers=workers)  # fmt: skip
    write_both_reports(table, tmp_path)
    for name in ("eval/evaluation_report.md", "pareto/pareto_report.md"):
        cells = rendered_table_cells((tmp_path / name).read_text())
        for worker in workers:
            assert worker in cells or f"{worker} (best single)" in cells, (worker, cells)
    cells = rendered_table_cells((tmp_path / "eval" / "evaluation_report.md").read_text())
    for task in tasks[:3]:
        assert task in cells, (task, cells)


def test_the_router_choices_plot_of_30_workers_stays_readable(tmp_path: Path) -> None:
    """One column per worker made a 3480 x 480 px strip for 30 workers: shrunk to a page in
    the Markdown report, its labels and bars could not be read."""
    workers = [f"provider/model-{index}-instruct" for index in range(30)]
    rng = np.random.default_rng(3)
    table = make_table(rng.random((12, 30)), workers=workers)
    probabilities = one_hot(np.zeros(12, dtype=np.int64), 30)  # 29 workers never picked
    report = evaluation_report(table, table, "test", probabilities, {}, {})
    write_evaluation(report, router_predictions(table, probabilities), tmp_path)
    height, width = matplotlib.image.imread(tmp_path / "router_choices.png").shape[:2]
    assert width <= 1200, (width, height)
    assert height >= 30 * 30, (width, height)  # room for one labelled row per worker


def test_the_cost_quality_plot_labels_close_workers_without_overlap(tmp_path: Path) -> None:
    """Each worker's label was printed 3 points up-right of its point: workers of about the
    same cost and reward (a pool of variants of one model) wrote their names over each
    other, and the cost_quality.png labels could not be read."""
    workers = [f"provider/model-{index}-instruct" for index in range(14)] + ["far"]
    close = np.array([0.50 + 0.002 * index for index in range(14)] + [0.9])
    rewards = np.tile(close, (4, 1))
    costs = np.tile(np.array([1.0 + 0.003 * index for index in range(14)] + [3.0]), (4, 1))
    table = make_table(rewards, costs=costs, workers=workers)
    probabilities = np.full((4, 15), 1 / 15)
    report = pareto_report(table, table, "test", {0.0: probabilities}, {}, [0.0], 1.0)
    figure = plot_pareto(report)
    renderer = FigureCanvasAgg(figure).get_renderer()
    figure.draw_without_rendering()
    axes = figure.axes[0]
    labels = {}
    for text in axes.texts:
        assert isinstance(text, Annotation)
        text.update_positions(renderer)
        labels[text.get_text()] = Text.get_window_extent(text, renderer)
    assert sorted(labels) == sorted(workers)
    for (first, one), (second, other) in combinations(labels.items(), 2):
        assert not one.overlaps(other), (first, second, one, other)
    # nor the oracle's star, drawn over far's point (far is right on every prompt)
    star_x, star_y = axes.transData.transform(
        (report["oracle"]["mean_cost"], report["oracle"]["mean_reward"])
    )
    half = 6.0 * figure.dpi / 72.0  # the star's s=120: about 11 points across
    star = Bbox.from_extents(star_x - half, star_y - half, star_x + half, star_y + half)
    assert [name for name, box in labels.items() if box.overlaps(star)] == []
    figure_box = figure.bbox
    for name, box in labels.items():  # nothing cut off at the image's edge
        assert figure_box.x0 <= box.x0 and box.x1 <= figure_box.x1, name
        assert figure_box.y0 <= box.y0 and box.y1 <= figure_box.y1, name
    save_png(figure, tmp_path / "cost_quality.png")
    assert (tmp_path / "cost_quality.png").read_bytes()[:4] == b"\x89PNG"


def test_a_label_with_no_free_spot_goes_where_it_overlaps_least() -> None:
    """When every spot around a point is taken (a crowded plot: here one box covers them
    all), the label goes to the spot that overlaps the fewest other labels and points, not
    to the first one tried, up-right of the point, where it also covers a second label."""
    from fugu_lite.evaluation.pareto_plot import _label_box, _label_candidates, _label_spot

    anchor, size = np.array([500.0, 500.0]), Bbox.from_extents(0, 0, 40, 10)
    everywhere = Bbox.from_extents(0.0, 0.0, 1000.0, 1000.0)
    up_right = Bbox.from_extents(495.0, 495.0, 600.0, 600.0)  # another label
    distance, angle = _label_candidates()[0]
    dx, dy = distance * np.cos(angle), distance * np.sin(angle)
    assert _label_box(anchor[0] + dx, anchor[1] + dy, dx, dy, size).overlaps(up_right)
    others = np.array([everywhere.extents, up_right.extents])
    dx, dy, box = _label_spot(anchor, size, others, everywhere, 1.0)
    assert everywhere.contains(*box.p0) and everywhere.contains(*box.p1)
    assert not box.overlaps(up_right), (dx, dy, box)


def test_a_label_whose_spots_all_overlap_alike_goes_to_the_nearest() -> None:
    """Where every spot overlaps as much (a point under a box covering them all), the label
    goes to the nearest spot, beside its point: each spot's overlap, computed from its own
    corners, is off in its last bits, and that rounding sent this one 75 points away."""
    from fugu_lite.evaluation.pareto_plot import _LABEL_DISTANCES, _label_candidates, _label_spot

    anchor, size = np.array([402.7, 435.0]), Bbox.from_extents(0, 0, 40, 10)
    everywhere = Bbox.from_extents(0.0, 0.0, 1000.0, 1000.0)
    dx, dy, _ = _label_spot(anchor, size, np.array([everywhere.extents]), everywhere, 1.0)
    distance, angle = _label_candidates()[0]
    assert distance == _LABEL_DISTANCES[0]
    assert (dx, dy) == (
        pytest.approx(distance * np.cos(angle)),
        pytest.approx(distance * np.sin(angle)),
    )


def test_a_label_faces_its_point_and_is_led_to_it_only_when_set_apart() -> None:
    """A label right of its point starts at its offset, one left of it ends there, one
    straight above or below is centred on the point (and likewise up and down), as the spot
    reserved for it is; a thin leader line joins it to its point only beyond the nearest
    distance, where the label no longer sits beside its point."""
    from fugu_lite.evaluation.pareto_plot import (
        _LABEL_DISTANCES,
        _annotate,
        _label_box,
        _label_candidates,
        _text_size,
    )

    figure = Figure(figsize=(6.0, 6.0), dpi=100)
    axes = figure.add_subplot()
    axes.set_xlim(0.0, 1.0)
    axes.set_ylim(0.0, 1.0)
    spots = [spot for spot in _label_candidates() if spot[0] in _LABEL_DISTANCES[:2]]
    for distance, angle in spots:
        _annotate(axes, "label", (0.5, 0.5), (distance * np.cos(angle), distance * np.sin(angle)))
    renderer = FigureCanvasAgg(figure).get_renderer()
    figure.draw_without_rendering()
    anchor = axes.transData.transform((0.5, 0.5))
    pixels_per_point = figure.dpi / 72.0
    size = _text_size(figure, renderer, "label")
    for (distance, angle), text in zip(spots, axes.texts, strict=True):
        assert isinstance(text, Annotation)
        text.update_positions(renderer)
        drawn = Text.get_window_extent(text, renderer)
        dx, dy = text.xyann
        x, y = anchor[0] + dx * pixels_per_point, anchor[1] + dy * pixels_per_point
        facing_x = drawn.x0 if dx > 0.5 else drawn.x1 if dx < -0.5 else drawn.x0 + drawn.width / 2
        facing_y = drawn.y0 if dy > 0.5 else drawn.y1 if dy < -0.5 else drawn.y0 + drawn.height / 2
        spot = (distance, round(float(np.degrees(angle)), 1))
        assert (facing_x, facing_y) == (pytest.approx(x, abs=1.0), pytest.approx(y, abs=1.0)), spot
        reserved = _label_box(x, y, dx, dy, size)  # where label_points keeps others out
        assert reserved.padded(0.5).contains(drawn.x0, drawn.y0), spot
        assert reserved.padded(0.5).contains(drawn.x1, drawn.y1), spot
        led = text.arrow_patch is not None
        assert led == (distance > _LABEL_DISTANCES[0]), spot


def test_the_cost_quality_plot_of_150_workers_is_labelled_in_seconds() -> None:
    """Placing each label tried every spot against every other label one pair at a time:
    about 8.6 s of CPU for 100 workers, growing with their square (a pool of 200 took half a
    minute). The spots of a label are now checked together; the placements are the same."""
    count = 150
    rng = np.random.default_rng(5)
    workers = [f"provider/model-{index}-instruct" for index in range(count)]
    rewards, costs = np.tile(rng.random(count), (4, 1)), np.tile(rng.random(count) + 0.1, (4, 1))
    table = make_table(rewards, costs=costs, workers=workers)
    report = pareto_report(
        table, table, "test", {0.0: np.full((4, count), 1 / count)}, {}, [0.0], 1.0
    )
    started = time.process_time()  # CPU time: other processes on the machine do not count
    figure = plot_pareto(report)
    assert time.process_time() - started < 8.0
    assert sorted(text.get_text() for text in figure.axes[0].texts) == sorted(workers)


def test_no_plot_legend_covers_the_bars_or_points() -> None:
    """The legends sat in the plot's lower right corner: over the last task's bars (a good
    router's reach 1.0 there), the last method's bar, the last worker's bar, or an
    expensive, weak worker's point on the cost-quality plot."""
    from fugu_lite.evaluation.plots import plot_mean_reward, plot_per_task, plot_router_choices

    report, _, evaluated = full_report()
    probabilities = np.full((evaluated.n_prompts, 3), 1 / 3)
    pareto = pareto_report(evaluated, evaluated, "test", {0.0: probabilities}, {}, [0.0], 1.0)
    figures = {
        "mean reward": plot_mean_reward(report),
        "per task": plot_per_task(report),
        "router choices": plot_router_choices(report),
        "cost-quality": plot_pareto(pareto),
    }
    for name, figure in figures.items():
        renderer = FigureCanvasAgg(figure).get_renderer()
        figure.draw_without_rendering()
        legends = [*figure.legends, *(axes.get_legend() for axes in figure.axes)]
        shown = [legend for legend in legends if legend is not None]
        assert len(shown) == 1, name
        legend = shown[0].get_window_extent(renderer)
        plot_area = figure.axes[0].get_window_extent(renderer)
        assert not legend.overlaps(plot_area), (name, legend, plot_area)
        assert figure.bbox.contains(legend.x1 - 1, legend.y0 + 1), name  # not cut off


def test_a_report_on_the_train_split_says_its_scores_are_optimistic() -> None:
    """`eval --split train` printed scores of methods fit on those very prompts (kNN with
    each prompt among its own neighbours) without a word, read like a test score."""
    rng = np.random.default_rng(2)
    table = make_table(rng.random((12, 3)), costs=rng.random((12, 3)))
    probabilities = np.full((12, 3), 1 / 3)
    for split, flagged in (("train", True), ("test", False), ("validation", False)):
        report = evaluation_report(table, table, split, probabilities, {}, {})
        pareto = pareto_report(table, table, split, {0.0: probabilities}, {}, [0.0], 1.0)
        for notes in (report["notes"], pareto["notes"]):
            said = [note for note in notes if "optimistic" in note]
            assert bool(said) == flagged, (split, notes)
            if flagged:
                assert "evaluated on train" in said[0] and "test or validation" in said[0]


def test_removing_a_checkpoints_evaluations_keeps_folders_that_are_not_its_reports(
    tmp_path: Path,
) -> None:
    """Training again clears the checkpoint's own reports only: a default eval-SPLIT folder
    (its report naming no checkpoint, or one that is gone: the checkpoint was moved since)
    and one whose report (of eval or eval --pareto) names the checkpoint; a default-named
    folder whose report names another checkpoint, a folder of the user's that holds a file of
    the same name (its report naming a checkpoint that is gone) and a linked folder, which is
    somewhere else whatever its name, keep their files."""
    checkpoint = tmp_path / "sft"
    elsewhere = tmp_path / "elsewhere"
    folders = {
        "eval-test": {},
        "eval-moved": {"checkpoint": str(tmp_path / "moved-from")},
        "mine": {"checkpoint": str(checkpoint)},
        "eval-of-rl": {"checkpoint": str(tmp_path)},
        "notes": {"checkpoint": str(tmp_path / "gone")},
    }
    for folder, report in [*folders.items(), ("../elsewhere", {})]:
        (checkpoint / folder).mkdir(parents=True)
        (checkpoint / folder / "evaluation_report.json").write_text(json.dumps(report))
        (checkpoint / folder / "predictions.jsonl").write_text("")
    (checkpoint / "pareto-linked").symlink_to(elsewhere)
    (checkpoint / "curves").mkdir()  # `eval --pareto -o CHECKPOINT/curves`
    (checkpoint / "curves" / "pareto_report.json").write_text(json.dumps(folders["mine"]))
    assert remove_evaluations(checkpoint) == ["curves", "eval-moved", "eval-test", "mine"]
    left = sorted(path.name for path in checkpoint.iterdir())
    assert left == ["eval-of-rl", "notes", "pareto-linked"]
    for kept in (checkpoint / "eval-of-rl", checkpoint / "notes", elsewhere):
        assert sorted(path.name for path in kept.iterdir()) == [
            "evaluation_report.json",
            "predictions.jsonl",
        ]


def test_write_evaluation_without_router_or_tasks(tmp_path: Path) -> None:
    table = make_table([[1, 0, 0], [0, 1, 0]])
    report = evaluation_report(table, table, "train", None, {}, {})
    write_evaluation(report, [], tmp_path)
    assert (tmp_path / "mean_reward.png").exists()
    assert not (tmp_path / "router_choices.png").exists()
    assert not (tmp_path / "per_task_reward.png").exists()
    assert (tmp_path / "predictions.jsonl").read_text() == ""
    markdown = (tmp_path / "evaluation_report.md").read_text()
    assert "No task labels" in markdown
    assert "train prompts: 2 · validation prompts: none ·" in markdown  # no "None"
    assert "- no router probabilities were given: only references and baselines" in markdown


def test_print_evaluation_shows_the_comparison_per_task_and_choices() -> None:
    report, _, _ = full_report()
    console = Console(record=True, width=200)
    print_evaluation(report, console)
    text = console.export_text()
    assert "Evaluation on test" in text
    assert "Mean reward per task" in text
    for label in ("router", "kNN (k=", "ridge (alpha=", "oracle", "random", "trivia|qa"):
        assert label in text
    choices = text[text.index("Which worker answers") :]
    for worker in WORKERS:
        shares = [report["choices"][name]["shares"][worker] for name in ("router", "knn", "ridge")]
        cells = r"\s*│\s*".join(re.escape(f"{100 * share:.1f}%") for share in shares)
        assert re.search(rf"│ {worker}\s*│\s*{cells}\s*│", choices), choices
    same = report["router_vs_best_single"]["same_choice"]
    assert f"on {100 * same:.1f}% of prompts" in " ".join(text.split())
    # the router's row, and only it, stands out in bold on a terminal
    terminal = Console(record=True, width=200, force_terminal=True, color_system="standard")
    print_evaluation(report, terminal)
    rows = [line for line in terminal.export_text(styles=True).splitlines() if "│" in line]
    bold = [re.sub(r"\x1b\[\d*m", "", line.split("│")[1]) for line in rows if "\x1b[1m" in line]
    assert [cell.strip() for cell in bold] == ["router"], bold


def test_the_markdown_report_puts_each_figure_in_its_column() -> None:
    """Every table of evaluation_report.md on tied_report, cell by cell: a column swapped
    (mean reward and gap closed, train and evaluated sizes, another method's counts) reads
    as a plausible number, so only the hand-worked figures show it."""
    lines = evaluation_markdown(tied_report(), []).splitlines()
    expected = [
        "Evaluated prompts: 5 (test) · train prompts: 4 · validation prompts: 3 · workers: 3 "
        "(a, b, c) · costs known: no",
        "| --- | ---: | ---: | ---: | --- |",  # the numbers aligned right
        "| router | 0.800 | 0.500 | — | argmax of the router's probabilities |",
        "| kNN (k=5) | 0.400 | -0.500 | — | k=5 chosen on validation |",
        "| best single (b) | 0.600 | 0.000 | — | b: highest mean reward on train |",
        "| random | 0.467 | -0.333 | — | expected reward of a uniformly random worker |",
        "| oracle | 1.000 | 1.000 | — | best worker per prompt (upper bound); among equally good "
        "workers the best single |",  # no costs: ties go to b
        "| Task | n | router | kNN | per-task best | best single | oracle | Best worker on train |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",  # n and every reward right
        "| code | 1 | 1.000 | 0.000 | 1.000 | 0.000 | 1.000 | a |",
        "| math | 2 | 1.000 | 0.500 | 0.500 | 0.500 | 1.000 | b |",
        "| (no task) | 1 | 0.000 | 0.000 | 1.000 | 1.000 | 1.000 | — (best single) |",
        "| Worker | router | kNN | per-task best | best single | oracle |",
        "| a | 2 (40.0%) | 0 (0.0%) | 1 (20.0%) | 0 (0.0%) | 2 (40.0%) |",
        "| b | 1 (20.0%) | 0 (0.0%) | 4 (80.0%) | 5 (100.0%) | 3 (60.0%) |",
        "The router picks the best single worker (b) on 20.0% of prompts; its choice earns "
        "more on 40.0% and less on 20.0%.",
        "### kNN (k=5)",
        "k=5 chosen",  # the selection's note: how k was chosen, not only its value
        "| 5 | 0.700 | chosen |",
        "| 10 | 0.600 |  |",
        "- costs unknown on this split: no mean costs",
    ]
    assert [line for line in expected if line not in lines] == []


def test_each_plot_draws_the_figures_of_its_report() -> None:
    """The bars and lines of the three plots of tied_report are its hand-worked figures: a
    plot drawing the oracle's values for every method, or the router's shares as the
    oracle's, still made a PNG every test took."""
    from fugu_lite.evaluation.plots import plot_mean_reward, plot_router_choices

    report = tied_report()

    mean_reward = plot_mean_reward(report)
    heights = [bar.get_height() for bar in mean_reward.axes[0].containers[0]]
    assert heights == pytest.approx([0.8, 0.4, 0.8, 7 / 15])  # router, kNN, per-task, random
    lines = [line.get_ydata()[0] for line in mean_reward.axes[0].lines]
    assert lines == pytest.approx([1.0, 0.6])  # oracle, best single
    choices = [[bar.get_width() for bar in series] for series in
               plot_router_choices(report).axes[0].containers]  # fmt: skip
    assert choices == [pytest.approx([0.4, 0.2, 0.4]), pytest.approx([0.4, 0.6, 0.0])]
    per_task = [[bar.get_width() for bar in series] for series in
                plot_per_task(report).axes[0].containers]  # fmt: skip
    # code, math, poetry, (no task): router, best single, oracle
    assert per_task == [
        pytest.approx([1.0, 1.0, 1.0, 0.0]),
        pytest.approx([0.0, 0.5, 1.0, 1.0]),
        pytest.approx([1.0, 1.0, 1.0, 1.0]),
    ]


def plot_texts(figure: Figure) -> dict[str, object]:
    """What a plot of the report says in words: its title, axis labels, tick labels (the
    rows or bars), bar labels and legend."""
    axes = figure.axes[0]
    ticks = axes.get_yticklabels() if axes.get_ylabel() == "" else axes.get_xticklabels()
    return {
        "title": axes.get_title(),
        "axes": (axes.get_xlabel(), axes.get_ylabel()),
        "ticks": [text.get_text() for text in ticks],
        "bar labels": [text.get_text() for text in axes.texts],
        "legend": [text.get_text() for text in figure.legends[0].get_texts()],
    }


def test_each_plot_names_its_bars_axes_and_legend() -> None:
    """The words of the three plots of tied_report: the legend naming each series, the bars'
    printed values (3 decimals, as the tables), the split and prompt count in the title, the
    best single worker marked among the workers; each per-task bar inside its task's row
    (rows read top down). A plot calling the router's bars the oracle's, marking another
    worker best single or rounding its figures to 2 decimals still drew the right bars."""
    from fugu_lite.evaluation.plots import plot_mean_reward, plot_router_choices

    report = tied_report()
    assert plot_texts(plot_mean_reward(report)) == {
        "title": "Mean reward per method (test, n=5)",
        "axes": ("", "mean reward"),
        "ticks": ["router", "kNN (k=5)", "per-task best (labels)", "random"],
        "bar labels": ["0.800", "0.400", "0.800", "0.467"],
        "legend": ["oracle", "best single (b)"],
    }
    choices = plot_router_choices(report)
    assert plot_texts(choices) == {
        "title": "Which worker answers (test)",
        "axes": ("share of prompts", ""),
        "ticks": ["a", "b (best single)", "c"],
        "bar labels": [],
        "legend": ["router", "oracle"],
    }
    low, high = choices.axes[0].get_xlim()  # every share 0..1 fits, not zoomed to the largest
    assert low == 0.0 and high >= 1.0, (low, high)
    per_task = plot_per_task(report)
    assert plot_texts(per_task) == {
        "title": "Mean reward per task (test)",
        "axes": ("mean reward", ""),
        "ticks": ["code (n=1)", "math (n=2)", "poetry (n=1)", "(no task) (n=1)"],
        "bar labels": [],
        "legend": ["router", "best single (b)", "oracle"],
    }
    for figure in (choices, per_task):
        axes = figure.axes[0]
        assert axes.yaxis_inverted()  # the first worker or task on top
        for row, tick in enumerate(axes.get_yticks()):
            bars = [series[row] for series in axes.containers]  # router first
            for upper, lower in pairwise(bars):  # side by side, none over another
                assert upper.get_y() + upper.get_height() <= lower.get_y() + 1e-9, row
            for bar in bars:  # inside its row's band, not reaching the next row
                assert tick - 0.5 < bar.get_y() < bar.get_y() + bar.get_height() < tick + 0.5


def series_colours(figure: Figure) -> dict[str, tuple[float, float, float]]:
    """Each legend entry of a plot and the colour its bars or line are drawn in; each drawn."""
    colours = {}
    for handle, label in zip(*figure.axes[0].get_legend_handles_labels(), strict=True):
        artists = list(handle) if isinstance(handle, BarContainer) else [handle]
        assert all(artist.get_visible() for artist in artists), label
        first = artists[0]
        colour = first.get_color() if isinstance(first, Line2D) else first.get_facecolor()
        colours[label] = to_rgb(colour)
    return colours


def test_each_method_keeps_its_colour_on_every_plot() -> None:
    """The router, the best single worker and the oracle are told apart by colour on each
    plot and keep it from plot to plot: a plot drawing the oracle in the best single
    worker's red read as the best single worker on the plot beside it."""
    from fugu_lite.evaluation.plots import plot_mean_reward, plot_router_choices

    report = tied_report()
    plots = [plot_mean_reward(report), plot_router_choices(report), plot_per_task(report)]
    colours = [series_colours(figure) for figure in plots]
    assert [list(colour) for colour in colours] == [
        ["oracle", "best single (b)"], ["router", "oracle"],
        ["router", "best single (b)", "oracle"],
    ]  # fmt: skip
    for colour in colours:
        assert len(set(colour.values())) == len(colour), colour
    for name in ("router", "best single (b)", "oracle"):
        assert len({colour[name] for colour in colours if name in colour}) == 1, name
    router_bars = plots[0].axes[0].containers[0]  # the router's bar among the methods'
    assert to_rgb(router_bars[0].get_facecolor()) == colours[1]["router"]


def console_rows(text: str) -> list[list[str]]:
    """The cells of each row of the rich tables in `text`."""
    return [[cell.strip() for cell in line.split("│")[1:-1]] for line in text.splitlines()
            if line.startswith("│")]  # fmt: skip


def test_the_console_tables_put_each_figure_in_its_column() -> None:
    console = Console(record=True, width=200)
    print_evaluation(tied_report(), console)
    text = console.export_text()
    rows = console_rows(text)
    for row in (
        ["router", "0.800", "0.500", "—"],
        ["kNN (k=5)", "0.400", "-0.500", "—"],
        ["random", "0.467", "-0.333", "—"],
        ["code", "1", "1.000", "0.000", "1.000", "0.000", "1.000"],
        ["(no task)", "1", "0.000", "0.000", "1.000", "1.000", "1.000"],
        # which worker each learned method asks: router, kNN, per-task best (no oracle)
        ["a", "40.0%", "0.0%", "20.0%"],
        ["b", "20.0%", "0.0%", "80.0%"],
    ):
        assert row in rows, text
    assert "earns more on 40.0% and less on 20.0%." in " ".join(text.split())
    assert "note: costs unknown on this split: no mean costs" in text


def test_the_console_tables_never_cut_a_worker_id_on_a_narrow_terminal() -> None:
    """`best single (organisation-na…` in eval's table and `organisation-name/very-long-m…`
    in eval --pareto's: cut short, the best single worker could be any of several."""
    worker = "organisation-name/very-long-model-name-70b-instruct-awq-v2"
    rng = np.random.default_rng(0)
    rewards = rng.random((20, 3))
    rewards[:, 0] += 0.5  # the long one is the best single worker
    table = make_table(rewards, costs=rng.random((20, 3)), workers=[worker, "b", "c"])
    probabilities = np.full((20, 3), 1 / 3)
    console = Console(record=True, width=60)
    print_evaluation(evaluation_report(table, table, "test", probabilities, {}, {}), console)
    print_pareto(pareto_report(table, table, "test", {0.0: probabilities}, {}, [0.0], 1.0), console)
    text = console.export_text()
    assert "…" not in text, text
    for title in ("Evaluation on test", "Single workers and oracle"):
        part = text[text.index(title) :]
        first_cells = "".join(line.split("│")[1].strip() for line in part.splitlines()
                              if line.startswith("│"))  # fmt: skip
        assert worker in first_cells, part


def named_reports(
    workers: list[str], task: str, seed: int
) -> tuple[RewardTable, np.ndarray, dict, dict]:
    """6 random prompts of `task` over `workers`, a uniform router's probabilities on them,
    and their evaluation and cost-quality reports."""
    rng = np.random.default_rng(seed)
    table = make_table(rng.random((6, 3)), costs=rng.random((6, 3)), tasks=[task] * 6,
                       workers=workers)  # fmt: skip
    probabilities = np.full((6, 3), 1 / 3)
    report = evaluation_report(table, table, "test", probabilities, {}, {})
    pareto = pareto_report(table, table, "test", {0.0: probabilities}, {}, [0.0], 1.0)
    return table, probabilities, report, pareto


def printed_tables(report: dict, pareto: dict) -> str:
    """What eval and eval --pareto print for the reports on a 200-column console."""
    console = Console(record=True, width=200)
    print_evaluation(report, console)
    print_pareto(pareto, console)
    return console.export_text()


def test_eval_pareto_prints_its_numbers_right_aligned() -> None:
    """The workers' and the AIQ tables of `eval --pareto` left-aligned their numbers: a cost
    of 25,000.00 and one of 0.10 began in the same column, so magnitudes did not line up.
    The per-weight table (members always asking b and always asking a) aligns them too."""
    costs = np.tile([0.1, 25_000.0, 3.0], (6, 1))
    table = make_table(np.tile([0.2, 0.9, 0.5], (6, 1)), costs=costs)
    probabilities = one_hot(np.ones(6, dtype=np.int64), 3)
    members = {0.0: probabilities, 1.0: one_hot(np.zeros(6, dtype=np.int64), 3)}
    console = Console(record=True, width=120)
    print_pareto(pareto_report(table, table, "test", members, {}, [0.0], 1.0), console)
    lines = console.export_text().splitlines()
    per_weight = [next(line for line in lines if line.startswith(f"│ {w} ")) for w in "01"]
    ends = {len(row.split("│")[2].rstrip()) for row in per_weight}  # 25,000.00 and 0.10
    assert len(ends) == 1, per_weight
    workers = [next(line for line in lines if line.startswith(f"│ {w} ")) for w in ("a", "b")]
    ends = {len(row.split("│")[2].rstrip()) for row in workers}  # 0.10 and 25,000.00
    assert len(ends) == 1, workers
    curves = [line for line in lines if line.startswith(("│ router", "│ single workers"))]
    ends = {len(row.split("│")[4].rstrip()) for row in curves}  # 100.0% and 88.8%
    assert len(curves) == 2 and len(ends) == 1, curves


def test_control_characters_in_names_never_reach_the_terminal_or_the_plots(
    tmp_path: Path,
) -> None:
    """An ESC in a worker id or task name went raw to the terminal from eval's tables (and
    restyled it: `\\x1b[31m` turned the rest red), and each plot warned 'Glyph 27 missing'."""
    workers = ["esc\x1b[31mred", "bell\x07", "c"]
    table, probabilities, report, pareto = named_reports(workers, "t\x1b[2J", seed=4)
    text = printed_tables(report, pareto)
    assert "\x1b" not in text and "\x07" not in text
    assert "esc\\x1b[31mred" in text and "bell\\x07" in text and "t\\x1b[2J" in text
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a glyph no font has
        write_evaluation(report, router_predictions(table, probabilities), tmp_path / "eval")
        write_pareto(pareto, tmp_path / "pareto")


def test_a_line_break_in_a_name_does_not_read_as_another_row_of_the_console_tables() -> None:
    """A worker id or task name holding a newline was printed on two lines of its cell: in
    tables without row lines, `mid` and `line` read as two workers (the second with no
    numbers), as they did in data stats and route."""
    _, _, report, pareto = named_reports(["mid\nline", "b", "c"], "two\nrows", seed=5)
    lines = printed_tables(report, pareto).splitlines()
    assert not [line for line in lines if re.search(r"│ (line|rows)\b", line)], lines
    assert any("mid\\nline" in line for line in lines) and any(
        "two\\nrows" in line for line in lines
    )


def test_print_evaluation_never_cuts_a_task_name_on_a_narrow_terminal() -> None:
    report, _, _ = full_report()
    long_names = ["agentverse-logicgrid", "agentverse-mgsm", "commonsense_qa_long_name"]
    for row, name in zip(report["per_task"], long_names, strict=False):
        row["task"] = name
    console = Console(record=True, width=80)
    print_evaluation(report, console)
    text = console.export_text()
    per_task = text[text.index("Mean reward per task") :]
    assert "…" not in per_task
    cells = "".join(line.split("│")[1].strip() for line in per_task.splitlines() if "│" in line)
    for name in long_names[: len(report["per_task"])]:
        assert name in cells, per_task


def test_the_per_task_plot_of_many_tasks_stays_bounded_and_says_what_it_pools(
    tmp_path: Path,
) -> None:
    """One row per task: 1,200 tasks made an 86,580-pixel-tall PNG that took about 80 s to
    draw. The biggest tasks keep their rows; one last row pools the others, and the Markdown
    report says so under the plot."""
    n_tasks = 90
    tasks = [f"task_{index:03d}" for index in range(n_tasks)]
    sizes = [3 if index % 2 else 1 for index in range(n_tasks)]  # 45 tasks of 3 prompts
    labels = [task for task, size in zip(tasks, sizes, strict=True) for _ in range(size)]
    rng = np.random.default_rng(4)
    table = make_table(rng.random((len(labels), 3)), tasks=labels)
    probabilities = np.full((len(labels), 3), 1 / 3)
    report = evaluation_report(table, table, "test", probabilities, {}, {})
    write_evaluation(report, router_predictions(table, probabilities), tmp_path)
    height, width = matplotlib.image.imread(tmp_path / "per_task_reward.png").shape[:2]
    assert height <= 3200, (width, height)
    shown = [text.get_text() for text in plot_per_task(report).axes[0].get_yticklabels()]
    assert len(shown) == 40
    assert all(task in {f"{tasks[i]} (n=3)" for i in range(1, n_tasks, 2)} for task in shown[:39])
    assert shown[-1] == f"(51 other tasks) (n={6 * 3 + 45})"
    markdown = (tmp_path / "evaluation_report.md").read_text()
    assert "shows the 39 tasks with the most prompts; its last row pools the other 51" in markdown
    # the pooled row's mean is the mean over the other tasks' prompts
    others = [i for i, task in enumerate(labels) if f"{task} (n=3)" not in shown]
    oracle_mean = float(table.rewards[others].max(axis=1).mean())
    from fugu_lite.evaluation.plots import plotted_tasks

    assert plotted_tasks(report["per_task"])[-1][1]["oracle"] == pytest.approx(oracle_mean)


def test_a_per_task_plot_with_a_row_for_every_task_says_it_leaves_nothing_out() -> None:
    """40 tasks have a row each: the note under the plot is for 41 and more. The pooled row
    was labelled "N other tasks", as a task of that name is: it is in parentheses now, and a
    task named with them is quoted."""
    rows = [{"task": f"t{index}", "n": 1} for index in range(PER_TASK_PLOT_ROWS + 1)]
    assert [label for label, _ in plotted_tasks(rows[:-1])] == [row["task"] for row in rows[:-1]]
    assert per_task_plot_note({"per_task": rows[:-1]}) is None
    assert "its last row pools the other 2 tasks" in str(per_task_plot_note({"per_task": rows}))
    # task t<i> of i + 1 prompts: the 39 largest, t2..t40, keep the table's order
    sized = [{"task": f"t{index}", "n": index + 1} for index in range(PER_TASK_PLOT_ROWS + 1)]
    kept = [label for label, _ in plotted_tasks(sized)]
    assert kept == [f"t{index}" for index in range(2, PER_TASK_PLOT_ROWS + 1)] + ["(2 other tasks)"]
    # tasks named as the pooled row, with or without its parentheses, read as tasks
    sized[2]["task"], sized[3]["task"] = "2 other tasks", "(2 other tasks)"
    report = {"per_task": [{**row, "oracle": 1.0} for row in sized], "split": "test",
              "methods": {"oracle": {"label": "oracle"}}}  # fmt: skip
    ticks = [text.get_text() for text in plot_per_task(report).axes[0].get_yticklabels()]
    assert ticks[:2] == ["2 other tasks (n=3)", '"(2 other tasks)" (n=4)']
    assert ticks[-1] == "(2 other tasks) (n=3)"  # t0 and t1, of 1 and 2 prompts


def test_a_worker_named_as_the_choices_plots_pooled_row_reads_as_a_worker() -> None:
    """Past 60 workers the router choices plot's last row sums the others' shares; it was
    labelled "N other workers", as a worker of that name is, so both read "3 other workers".
    The pooled row is in parentheses now, and a worker named with them is quoted, as the
    per-task plot does for tasks."""
    from fugu_lite.evaluation.plots import plot_router_choices

    workers = [f"w{index}" for index in range(62)]
    workers[1], workers[2] = "3 other workers", "(3 other workers)"
    workers[3] = "w0 (best single)"  # read as the best single worker w0 unquoted
    table = make_table(np.eye(62), workers=workers)  # each the oracle's on its own prompt
    always_w0 = one_hot(np.zeros(62, dtype=np.int64), 62)
    report = evaluation_report(table, table, "test", always_w0, {}, {})
    ticks = [text.get_text() for text in plot_router_choices(report).axes[0].get_yticklabels()]
    assert ticks[:4] == [
        "w0 (best single)", "3 other workers", '"(3 other workers)"', '"w0 (best single)"',
    ]  # fmt: skip
    assert ticks[-1] == "(3 other workers)"  # w59..w61
    assert len(set(ticks)) == len(ticks)


def test_a_router_choices_plot_with_a_row_for_every_worker_says_it_leaves_nothing_out() -> None:
    """60 workers have a row each, as the note under the plot (none) says; the last row
    sums the other workers' shares from 61 on."""
    from fugu_lite.evaluation.plots import CHOICES_PLOT_ROWS, choices_plot_note, plotted_workers

    def shares_report(n_workers: int) -> dict:
        workers = [f"w{index}" for index in range(n_workers)]
        shares = {"shares": {worker: 1 / n_workers for worker in workers}}
        return {"worker_ids": workers, "choices": {"router": shares, "oracle": shares}}

    fitting = shares_report(CHOICES_PLOT_ROWS)
    assert plotted_workers(fitting)[0] == fitting["worker_ids"]
    assert choices_plot_note(fitting) is None
    names, router, _ = plotted_workers(shares_report(CHOICES_PLOT_ROWS + 1))
    assert names[-1] == "(2 other workers)" and router[-1] == pytest.approx(2 / 61)
    assert "sums the other 2 workers' shares" in str(
        choices_plot_note(shares_report(CHOICES_PLOT_ROWS + 1))
    )


def test_plots_of_50_workers_with_200_character_names_keep_room_for_the_data() -> None:
    """Worker and task names of 200 characters (with `_` and `$`) made labels wider than the
    figure: matplotlib's layout gave up ('axes sizes collapsed to zero') and the labels ran
    off the image. A long name now loses its middle; its start and end stay."""
    from fugu_lite.evaluation.plots import plot_mean_reward, plot_router_choices

    workers = [f"w{index}_" + "x_$" * 66 for index in range(50)]
    rng = np.random.default_rng(6)
    table = make_table(
        rng.random((8, 50)), costs=rng.random((8, 50)), tasks=["t_$" * 66 + "_end"] * 8,
        workers=workers,
    )  # fmt: skip
    probabilities = np.full((8, 50), 1 / 50)
    report = evaluation_report(table, table, "test", probabilities, {}, {})
    pareto = pareto_report(table, table, "test", {0.0: probabilities}, {}, [0.0], 1.0)
    figures = {
        "mean reward": lambda: plot_mean_reward(report),
        "per task": lambda: plot_per_task(report),
        "router choices": lambda: plot_router_choices(report),
        "cost-quality": lambda: plot_pareto(pareto),
    }
    for name, make in figures.items():
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the layout's 'collapsed to zero' is a warning
            figure = make()
            FigureCanvasAgg(figure)
            figure.draw_without_rendering()
        assert figure.axes[0].get_window_extent().width >= 0.15 * figure.bbox.width, name
    task = plot_per_task(report).axes[0].get_yticklabels()[0].get_text()
    assert task.startswith("t_\\$t_") and task.endswith("_end (n=8)") and "…" in task


def test_long_labels_that_differ_only_in_their_middle_stay_apart_on_every_plot() -> None:
    """A label over 48 characters loses its middle, so two worker or task names differing
    only there (one model's variants under a long organisation path) read the same: the
    plots' rows and the cost-quality plot's points could not be told apart. Such labels
    now show where the names differ; labels that do not collide keep their start and end."""
    from fugu_lite.evaluation.plots import distinct_lines, plot_router_choices

    stem, end = "organisation-name/" + "very-long-model-name-" * 2, "-instruct-q4_k_m-gguf-2024"
    workers = [f"{stem}v{index}{end}" for index in (1, 2, 3)] + ["x" * 70]
    tasks = [f"{stem}task-{letter}{end}" for letter in "ab"] * 2
    rewards = np.tile([0.2, 0.4, 0.6, 1.0], (4, 1))  # the best single is the x worker
    costs = np.tile([1.0, 2.0, 3.0, 4.0], (4, 1))
    table = make_table(rewards, costs=costs, tasks=tasks, workers=workers)
    report = evaluation_report(table, table, "test", np.full((4, 4), 1 / 4), {}, {})
    choices = [text.get_text() for text in plot_router_choices(report).axes[0].get_yticklabels()]
    per_task = [text.get_text() for text in plot_per_task(report).axes[0].get_yticklabels()]
    pareto = pareto_report(table, table, "test", {0.0: np.full((4, 4), 1 / 4)}, {}, [0.0], 1.0)
    points = [text.get_text() for text in plot_pareto(pareto).axes[0].texts]
    for labels, names in ((choices, workers), (per_task, ["a", "b"]), (points, workers)):
        assert len(set(labels)) == len(labels) == len(names), labels
        assert all(len(label) <= 48 and "…" in label for label in labels), labels
    for labels in (choices, points):
        for index, label in zip((1, 2, 3), labels, strict=False):
            assert f"v{index}-instruct" in label.replace("…", ""), labels
    assert [label.split("task-")[1][0] for label in per_task] == ["a", "b"]
    # a label that collides with none keeps its start and end
    assert choices[3] == "x" * 23 + "…" + "x" * 10 + " (best single)"
    # names repeating one pattern read the same wherever they are cut: numbered then
    repeating = distinct_lines(["ab" * 40, "ab" * 41, "ab" * 42])
    assert len(set(repeating)) == 3 and all(len(label) <= 52 for label in repeating), repeating
    assert [label[-4:] for label in repeating] == [" [1]", " [2]", " [3]"], repeating


def shown_with_one_gap(label: str, line: str) -> bool:
    """Whether `label` is `line`'s start and end with one part between them left out."""
    start, end = label.split("…")
    return line.startswith(start) and line.endswith(end)


def test_plot_labels_show_where_long_names_differ_in_48_characters_without_numbers() -> None:
    """A name of 48 characters is shown whole. Long names differing just before their end
    show it with their start and end, a "…" only where text is left out (one after the part
    shown made 49 characters, a part run into the end repeated text). Names alike after one
    parting, or one the start of another, are parted where they differ, not numbered."""
    from fugu_lite.evaluation.plots import distinct_lines, plain_labels

    assert plain_text("x" * 48) == "x" * 48
    assert len(plain_text("x" * 49)) == 48 and "…" in plain_text("x" * 49)
    assert plain_text("two\nlines") == "two\nlines"  # a line break stays
    second_line_long = plain_labels(["one line", "two\n" + "y" * 60])[1]
    assert [len(line) for line in second_line_long.splitlines()] == [3, 48]  # each line shortened
    near_the_end = ["p" * 45 + digit + "q" * 24 for digit in "12"]  # the end shows 24
    family, middle, tail = "org/model-family-name-x-", "m" * 25, "-tail-of-the-model-name-q4"
    parted_twice = [f"{family}a{middle}1{tail}", f"{family}a{middle}2{tail}",
                    f"{family}b{middle}1{tail}"]  # fmt: skip
    extended = [f"org/{'long-model-name-' * 3}{'-x' * repeats}" for repeats in (12, 17)]
    for lines in (near_the_end, parted_twice, extended):
        labels = distinct_lines(lines)
        assert len(set(labels)) == len(labels), labels
        assert all(len(label) <= 48 and not label.endswith("]") for label in labels), labels
    labels = distinct_lines(near_the_end)
    assert all(shown_with_one_gap(*pair) for pair in zip(labels, near_the_end, strict=True))


def test_the_router_choices_plot_of_many_workers_stays_bounded() -> None:
    """One row per worker: a pool of 400 workers made a 17,000-pixel-tall plot. The workers
    with the largest shares keep their rows; one last row sums the others' shares, and the
    Markdown report says so under the plot."""
    from fugu_lite.evaluation.output import evaluation_markdown
    from fugu_lite.evaluation.plots import plot_router_choices, plotted_workers

    n_workers = 90
    rng = np.random.default_rng(7)
    workers = [f"w{index}" for index in range(n_workers)]
    table = make_table(rng.random((30, n_workers)), workers=workers)
    probabilities = one_hot(np.arange(30) % 3, n_workers)  # the router picks w0..w2
    report = evaluation_report(table, table, "test", probabilities, {}, {})
    figure = plot_router_choices(report)
    assert figure.get_size_inches()[1] <= 0.35 * 60 + 1.5
    axes = figure.axes[0]
    shown = [text.get_text() for text in axes.get_yticklabels()]
    assert len(shown) == 60 and shown[-1] == "(31 other workers)"
    assert all(report["worker_ids"][index] in shown[index] for index in range(3))
    router_bars = axes.containers[0]
    total = sum(bar.get_width() for bar in router_bars)
    assert total == pytest.approx(1.0)  # every prompt's choice is on the plot
    # 62 workers, each the oracle's on its own prompt, the router always w0: the last row
    # holds w59..w61, the oracle's 3 of 62 prompts and none of the router's
    many = make_table(np.eye(62), workers=[f"w{index}" for index in range(62)])
    always_w0 = one_hot(np.zeros(62, dtype=np.int64), 62)
    names, router, oracle = plotted_workers(
        evaluation_report(many, many, "test", always_w0, {}, {})
    )
    assert (names[-1], router[-1], oracle[-1]) == ("(3 other workers)", 0.0, pytest.approx(3 / 62))
    # w61, the oracle's on 2 of 3 prompts but never the router's, keeps its row: the rows
    # are the largest router and oracle shares together, not the router's alone
    rewards = np.zeros((3, 62))
    rewards[[0, 1, 2], [61, 61, 0]] = 1.0
    oracle_only = make_table(rewards, workers=[f"w{index}" for index in range(62)])
    report_of = evaluation_report(oracle_only, oracle_only, "test", always_w0[:3], {}, {})
    names, router, oracle = plotted_workers(report_of)
    assert (names[-2], router[-2], oracle[-2]) == ("w61", 0.0, pytest.approx(2 / 3))
    markdown = evaluation_markdown(report, ["router_choices.png"])
    said = "shows the 59 workers with the largest shares; its last row sums the other 31"
    assert said in markdown
    # no plot written (a report without a router has none): nothing said about one
    assert "The plot shows" not in evaluation_markdown(report, [])
