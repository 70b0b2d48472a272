"""Cost-quality curves (`eval --pareto`) on hand-made tables: hulls, AIQ, the cost to reach a
share of the best single worker's quality, and the report's degenerate cases."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import cost_record
from rich.console import Console

from fugu_lite.evaluation import (
    aiq,
    baseline_cost_predictions,
    cost_to_reach,
    curve_entry_in,
    fit_ridge,
    non_decreasing_hull,
    pareto_report,
)
from fugu_lite.evaluation.curves import cost_weighted_choices, router_curve
from fugu_lite.evaluation.hull import hull_reward_at, reward_floor
from fugu_lite.evaluation.pareto_output import pareto_markdown, print_pareto, write_pareto
from fugu_lite.evaluation.pareto_plot import plot_pareto
from fugu_lite.evaluation.table import RewardTable, reward_table
from fugu_lite.schemas import records_in_split


def test_non_decreasing_hull_keeps_the_upper_front() -> None:
    points = [(4.0, 0.7), (1.0, 0.5), (3.0, 0.85), (2.0, 0.8), (2.0, 0.6), (1.5, 0.55)]
    # (4, .7) earns less than a cheaper point; (2, .6) is beaten at equal cost; (1.5, .55) lies
    # below the segment (1, .5) -> (2, .8)
    assert non_decreasing_hull(points) == [(1.0, 0.5), (2.0, 0.8), (3.0, 0.85)]
    assert non_decreasing_hull([(0.0, 0.0), (1.0, 0.2), (2.0, 1.0)]) == [(0.0, 0.0), (2.0, 1.0)]
    assert non_decreasing_hull([(1.0, 0.3)]) == [(1.0, 0.3)]


def test_a_hull_keeps_no_point_that_does_not_raise_the_reward() -> None:
    """Cost and reward strictly increase along a hull: a dearer point at the same reward, a
    cheaper reward at the same cost and a point on a segment are no operating points."""
    assert non_decreasing_hull([(1.0, 0.5), (2.0, 0.5)]) == [(1.0, 0.5)]
    assert non_decreasing_hull([(1.0, 0.3), (1.0, 0.5)]) == [(1.0, 0.5)]
    assert non_decreasing_hull([(0.0, 0.0), (1.0, 0.5), (2.0, 1.0)]) == [(0.0, 0.0), (2.0, 1.0)]


def test_aiq_on_hand_computed_curves() -> None:
    hull = [(1.0, 0.5), (2.0, 0.8), (3.0, 0.85)]
    # over [1, 4]: 0.65 + 0.825 + 0.85 (flat beyond 3) = 2.325, divided by 3
    assert aiq(hull, 1.0, 4.0) == pytest.approx(0.775)
    # a curve starting at cost 2 earns 0 on [1, 2]: (0.6 + 0.9) / 2 * 2 / 3
    assert aiq([(2.0, 0.6), (4.0, 0.9)], 1.0, 4.0) == pytest.approx(0.5)
    # one point: flat from its cost on
    assert aiq([(1.0, 0.7)], 1.0, 3.0) == pytest.approx(0.7)
    assert aiq([(1.0, 0.7)], 1.0, 1.0) == pytest.approx(0.7)
    assert hull_reward_at(hull, 0.5) == 0.0
    assert hull_reward_at(hull, 1.5) == pytest.approx(0.65)
    assert hull_reward_at(hull, 10.0) == pytest.approx(0.85)


def test_cost_to_reach_interpolates_on_the_hull() -> None:
    hull = [(1.0, 0.5), (3.0, 0.9)]
    assert cost_to_reach(hull, 0.7) == pytest.approx(2.0)
    assert cost_to_reach(hull, 0.4) == pytest.approx(1.0)  # already at the cheapest point
    assert cost_to_reach(hull, 0.9) == pytest.approx(3.0)
    assert cost_to_reach(hull, 0.95) is None
    assert cost_to_reach(hull, 0.5) == pytest.approx(1.0)  # exactly the cheapest point's
    assert cost_to_reach([(1.0, 0.5)], 0.5) == pytest.approx(1.0)


def test_a_hull_of_no_points_is_refused() -> None:
    """An empty hull has no cheapest point: aiq and cost_to_reach would fail on it later."""
    with pytest.raises(ValueError, match="a hull needs at least one point"):
        non_decreasing_hull([])


def test_a_hull_of_numpy_points_is_json_of_plain_floats() -> None:
    """Costs and rewards read from float32 arrays: the report's JSON takes the hull as is."""
    points = [(np.float32(1.5), np.float32(0.25)), (np.float32(2.5), np.float32(0.75))]
    hull = non_decreasing_hull(points)
    assert all(type(value) is float for vertex in hull for value in vertex), hull
    assert json.loads(json.dumps(hull)) == [[1.5, 0.25], [2.5, 0.75]]


def test_aiq_over_a_range_ending_inside_the_hull_stops_at_its_end() -> None:
    """Vertices past cost_max add nothing, and the knots are integrated in cost order (the
    set of these knots iterates as 0.25, 1.75, 1.25, 0.75)."""
    hull = [(0.25, 0.5), (0.75, 0.8), (1.25, 0.9), (2.25, 1.0)]
    # over [0.25, 1.75]: 0.5 * (0.65 + 0.85 + 0.925) = 1.2125, divided by 1.5
    assert aiq(hull, 0.25, 1.75) == pytest.approx(1.2125 / 1.5)


def test_the_aiq_floor_is_0_unless_a_reward_is_below_0() -> None:
    assert reward_floor(np.array([0.2, 0.9])) == 0.0  # not the lowest reward, 0.2
    assert reward_floor(np.array([-0.5, 0.9])) == -0.5


def test_pareto_report_on_a_known_case() -> None:
    """Two prompts, two workers: b is right on prompt 0 only, a on both at half b's cost."""
    train = reward_table(
        [
            cost_record("train", [0.0, 1.0], [1.0, 2.0], "t1"),
            cost_record("train", [0.4, 1.0], [1.0, 2.0], "t2"),
        ]
    )  # best single on train: b
    evaluated = reward_table(
        [
            cost_record("test", [0.0, 1.0], [1.0, 2.0], "e1"),
            cost_record("test", [1.0, 1.0], [1.0, 2.0], "e2"),
        ]
    )
    perfect = np.array([[0.0, 1.0], [1.0, 0.0]])  # b on e1, a on e2: reward 1 at cost 1.5
    report = pareto_report(train, evaluated, "test", {0.0: perfect}, {}, [0.0], reference_cost=1.5)
    assert report["best_single"] == {
        "worker": "b", "chosen_on": "train", "mean_cost": 2.0, "mean_reward": 1.0,
    }  # fmt: skip
    assert report["oracle"]["mean_cost"] == pytest.approx(1.5)
    assert report["target_reward"] == pytest.approx(0.95)
    router = report["curves"]["router"]
    assert router["hull"] == [[1.5, 1.0]]
    assert router["cost_fraction_at_target"] == pytest.approx(0.75)
    workers = report["curves"]["workers"]
    assert workers["hull"] == [[1.0, 0.5], [2.0, 1.0]]
    assert workers["cost_at_target"] == pytest.approx(1.9)
    assert workers["cost_fraction_at_target"] == pytest.approx(0.95)
    assert report["cost_range"] == [1.0, 2.0]
    assert workers["aiq"] == pytest.approx(0.75)
    assert router["aiq"] == pytest.approx(0.5)  # 0 on [1, 1.5], 1 on [1.5, 2]


def test_a_curve_traced_outside_a_report_is_figured_on_the_reports_range_and_target() -> None:
    """bench/cost.py figures its router family's curve beside a reward head's report; it
    repeated the report's AIQ and cost-share arithmetic, and now asks curve_entry_in. On
    the known case's report (costs 1 to 2, target 0.95, best single b at cost 2) a curve
    asking b at cost weight 0 and a at 1 is the single workers' hull, worked out by hand."""
    train = reward_table([cost_record("train", [0.0, 1.0], [1.0, 2.0], "t1")])
    evaluated = reward_table(
        [
            cost_record("test", [0.0, 1.0], [1.0, 2.0], "e1"),
            cost_record("test", [1.0, 1.0], [1.0, 2.0], "e2"),
        ]
    )
    perfect = np.array([[0.0, 1.0], [1.0, 0.0]])
    report = pareto_report(train, evaluated, "test", {0.0: perfect}, {}, [0.0], reference_cost=1.5)
    always_b, always_a = np.array([[0.0, 1.0], [0.0, 1.0]]), np.array([[1.0, 0.0], [1.0, 0.0]])
    points = router_curve(evaluated, {0.0: always_b, 1.0: always_a})
    entry = curve_entry_in(report, "family", points)
    assert entry["hull"] == [[1.0, 0.5], [2.0, 1.0]]
    assert entry["aiq"] == pytest.approx(0.75)  # the mean of 0.5 -> 1 over [1, 2]
    assert entry["cost_at_target"] == pytest.approx(1.9)  # 0.95 on the hull
    assert entry["cost_fraction_at_target"] == pytest.approx(0.95)  # 1.9 / b's 2
    assert entry["label"] == "family"


def test_the_oracles_point_pays_the_cheapest_of_equally_good_workers() -> None:
    """On a prompt both workers get right the oracle pays the cheaper one, here the second:
    every other test's tie had the cheaper worker first, so an oracle paying the first of
    equally good workers drew its star at a cost it never needs."""
    train = reward_table([cost_record("train", [1.0, 1.0], [3.0, 1.0], "t1")])
    evaluated = reward_table(
        [
            cost_record("test", [1.0, 1.0], [3.0, 1.0], "e1"),  # a tie: b at 1, not a at 3
            cost_record("test", [1.0, 0.0], [3.0, 1.0], "e2"),  # only a is right: 3
        ]
    )
    always_a = {0.0: np.array([[1.0, 0.0], [1.0, 0.0]])}
    report = pareto_report(train, evaluated, "test", always_a, {}, [0.0], reference_cost=2.0)
    # (1 + 3) / 2 at reward 1; the first of the tied workers would cost (3 + 3) / 2 = 3
    assert report["oracle"]["mean_cost"] == pytest.approx(2.0)
    assert report["oracle"]["mean_reward"] == pytest.approx(1.0)
    assert report["n_prompts"] == 2  # the evaluated split's, not train's 1


def a_best_on_train_b_on_test_report() -> dict:
    """The cost-quality report of two workers, a (cost 3) best on train and b (cost 1) on
    test, and a router that always asks a at cost weight 0 and always b at 1. Train's prices
    are twice test's: a best single worker's cost taken from train read 6 for a's 3."""
    train = reward_table(
        [
            cost_record("train", [1.0, 0.0], [6.0, 2.0], "t1"),
            cost_record("train", [0.8, 0.2], [6.0, 2.0], "t2"),
        ]
    )
    evaluated = reward_table(
        [
            cost_record("test", [0.5, 1.0], [3.0, 1.0], "e1"),
            cost_record("test", [0.5, 1.0], [3.0, 1.0], "e2"),
        ]
    )
    always_b, always_a = np.array([[0.0, 1.0], [0.0, 1.0]]), np.array([[1.0, 0.0], [1.0, 0.0]])
    probabilities = {1.0: always_b, 0.0: always_a}
    report = pareto_report(train, evaluated, "test", probabilities, {}, [0.0], reference_cost=2.0)
    return report


def test_the_best_single_worker_is_chosen_on_train_and_measured_on_the_evaluated_split() -> None:
    """a is best on train, b on test: the report names a, with a's test reward and cost. The
    dearer worker comes first and the router's cost weights out of order: the cost range
    still spans every point, and the weights are listed ascending."""
    report = a_best_on_train_b_on_test_report()
    assert report["best_single"] == {
        "worker": "a", "chosen_on": "train", "mean_cost": 3.0, "mean_reward": 0.5,
    }  # fmt: skip
    assert report["cost_range"] == [1.0, 3.0]
    assert report["router_cost_weights"] == [0.0, 1.0]
    assert report["curves"]["router"]["label"] == "router (2 cost weights)"


def test_a_single_workers_point_is_its_mean_cost_and_reward_over_the_prompts() -> None:
    """Each worker's cost varies from prompt to prompt: its point is at its mean cost (a at
    2.0, b at 3.0), not its dearest prompt's or its first's."""
    table = reward_table(
        [
            cost_record("test", [1.0, 0.0], [1.0, 4.0], "e1"),
            cost_record("test", [0.0, 1.0], [3.0, 2.0], "e2"),
        ]
    )
    router = {0.0: np.array([[1.0, 0.0], [1.0, 0.0]])}
    report = pareto_report(table, table, "test", router, {}, [0.0], reference_cost=1.0)
    points = [(p["label"], p["mean_cost"], p["mean_reward"]) for p in
              report["curves"]["workers"]["points"]]  # fmt: skip
    assert points == [("a", 2.0, 0.5), ("b", 3.0, 0.5)]


def test_the_baselines_cost_weights_and_points_are_listed_ascending() -> None:
    """Cost weights given out of order: the baselines' weights and each baseline's points
    are listed ascending, as the router's are (they came in the order given)."""
    train, evaluated = known_case_tables(1.0, 0.0)
    perfect = {0.0: np.array([[0.0, 1.0], [1.0, 0.0]])}
    predictions = {"knn": (evaluated.rewards, evaluated.costs)}
    report = pareto_report(train, evaluated, "test", perfect, predictions, [1.0, 0.0], 1.5)
    assert report["baseline_cost_weights"] == [0.0, 1.0]
    assert [point["cost_weight"] for point in report["curves"]["knn"]["points"]] == [0.0, 1.0]
    # the router's members given by cost weight in another order are listed ascending too
    members = {1.0: perfect[0.0], 0.0: perfect[0.0]}
    report = pareto_report(train, evaluated, "test", members, predictions, [1.0, 0.0], 1.5)
    assert [point["cost_weight"] for point in report["curves"]["router"]["points"]] == [0.0, 1.0]


def test_the_cost_quality_markdown_puts_each_figure_in_its_column() -> None:
    """pareto_report.md of the train-and-test case, cell by cell: the router at cost weight
    0 always asks a (cost 3, reward 0.5), at 1 always b (cost 1, reward 1), so each weight's
    row, the summary's cost at the target (0.95 x a's 0.5, reached at cost 1: a third of
    a's cost) and the references show a column swapped or a point of another weight."""
    report = a_best_on_train_b_on_test_report()
    markdown = pareto_markdown(report)
    said = (
        "2 prompts · reference cost 2.00 (lambda = 1 charges one reward point per reference "
        "cost) · best single worker a (chosen on train): mean reward 0.5000 at mean cost 3.00 "
        "· target 0.95 x its reward = 0.4750."  # to 4 decimals, as every reward here
    )
    assert said in markdown
    lines = markdown.splitlines()
    expected = [
        "| router (2 cost weights) | 1.0000 | 1.00 | 33.3% |",
        "| single workers | 1.0000 | 1.00 | 33.3% |",
        "| --- | ---: | ---: | ---: |",  # the summary's figures aligned right
        "| lambda | router cost | router reward |",
        "| --- | ---: | ---: |",
        "| 0 | 3.00 | 0.5000 |",
        "| 1 | 1.00 | 1.0000 |",
        "| a (best single) | 3.00 | 0.5000 |",
        "| b | 1.00 | 1.0000 |",
        "| oracle | 1.00 | 1.0000 |",
        "- cost range: [1.00, 3.00]",  # b's cost to a's
        "![Cost-quality curves](cost_quality.png)",  # the plot written beside it
    ]
    assert [line for line in expected if line not in lines] == []


def test_workers_named_as_the_oracles_or_the_best_single_workers_row_are_quoted() -> None:
    """The single workers and the oracle share one table: a worker named "oracle" read as a
    second oracle row, and one named "a (best single)" beside the best single worker a read
    as a second a, in pareto_report.md and on the console. Such names are quoted now."""
    workers = ["a", "a (best single)", "oracle"]
    table = RewardTable(
        rewards=np.array([[1.0, 0.5, 0.2]] * 2), costs=np.array([[3.0, 1.0, 2.0]] * 2),
        tasks=[None, None], ids=["e1", "e2"], prompt_hashes=["h1", "h2"], worker_ids=workers,
    )  # fmt: skip
    always_a = {0.0: np.array([[1.0, 0.0, 0.0]] * 2)}
    report = pareto_report(table, table, "test", always_a, {}, [0.0], reference_cost=2.0)
    lines = pareto_markdown(report).splitlines()
    expected = [
        "| a (best single) | 3.00 | 1.0000 |",
        '| "a (best single)" | 1.00 | 0.5000 |',
        '| "oracle" | 2.00 | 0.2000 |',
        "| oracle | 3.00 | 1.0000 |",
    ]
    assert [line for line in expected if line not in lines] == []
    console = Console(record=True, width=200)
    print_pareto(report, console)
    names = [line.split("│")[1].strip() for line in console.export_text().splitlines()
             if line.startswith("│") and ("oracle" in line or "best single)" in line)]  # fmt: skip
    assert names == ["a (best single)", '"a (best single)"', '"oracle"', "oracle"]


def test_a_report_for_another_quality_fraction_names_that_fraction_everywhere() -> None:
    """pareto_report takes the share of the best single worker's reward its target is; every
    test gave the default 0.95, so the console's summary title and the plot's target line
    could say 0.95 whatever the report's target was."""
    train, evaluated = known_case_tables(1.0, 0.0)  # best single b, reward 1 on test
    perfect = {0.0: np.array([[0.0, 1.0], [1.0, 0.0]])}
    report = pareto_report(train, evaluated, "test", perfect, {}, [0.0], 1.5, quality_fraction=0.8)
    assert report["target_reward"] == pytest.approx(0.8)
    assert "target 0.8 x its reward = 0.8000." in pareto_markdown(report)
    console = Console(record=True, width=200)
    print_pareto(report, console)
    assert "AIQ and cost to reach 0.8 x best single's reward (0.8000)" in console.export_text()
    legend = [text.get_text() for text in plot_pareto(report).legends[0].get_texts()]
    assert legend[-1] == "0.8 x best single (b)"


def test_cost_weights_alike_to_6_digits_are_told_apart_in_the_per_weight_tables() -> None:
    """The per-weight table wrote lambda with :g, so members at 0.1234567 (always a) and
    0.1234568 (always b), which a hand-edited router_family.json can list, were two rows
    both named 0.123457, in pareto_report.md and on the console."""
    train, evaluated = known_case_tables(1.0, 0.0)
    always_a, always_b = np.array([[1.0, 0.0]] * 2), np.array([[0.0, 1.0]] * 2)
    probabilities = {0.1234567: always_b, 0.1234568: always_a}
    report = pareto_report(train, evaluated, "test", probabilities, {}, [0.0], 1.5)
    lines = pareto_markdown(report).splitlines()
    assert "| 0.1234567 | 2.00 | 1.0000 |" in lines
    assert "| 0.1234568 | 1.00 | 0.5000 |" in lines
    console = Console(record=True, width=200)
    print_pareto(report, console)
    text = console.export_text()
    rows = [line.split("│")[1].strip() for line in text.splitlines()
            if line.startswith("│ 0.1234")]  # fmt: skip
    assert rows == ["0.1234567", "0.1234568"]
    assert "Cost and reward per cost weight (test)" in text  # its split


def test_a_cost_weight_one_curve_lacks_is_a_dash_in_the_per_weight_table() -> None:
    """pareto_report takes the router's and the baselines' weights apart (eval --pareto gives
    both the family's): the per-weight table taking its rows from the router's points only,
    or a curve's missing point written as '-', passed every test, each of which gave both
    the same weights. The router at 0 and 1, kNN (perfect predictions) at 0.5 only."""
    train, evaluated = known_case_tables(1.0, 0.0)
    always_a, always_b = np.array([[1.0, 0.0]] * 2), np.array([[0.0, 1.0]] * 2)
    predictions = {"knn": (evaluated.rewards, evaluated.costs)}
    report = pareto_report(train, evaluated, "test", {0.0: always_b, 1.0: always_a},
                           predictions, [0.5], 1.5)  # fmt: skip
    lines = pareto_markdown(report).splitlines()
    rows = [line for line in lines if line.startswith(("| 0 ", "| 0.5 ", "| 1 "))]
    assert rows == [
        "| 0 | 2.00 | 1.0000 | — | — |",
        "| 0.5 | — | — | 1.50 | 1.0000 |",
        "| 1 | 1.00 | 0.5000 | — | — |",
    ]


def plotted_lines(report: dict) -> list[list[list[float]]]:
    """The (x, y) data of each line of report's cost-quality plot, in drawing order."""
    axes = plot_pareto(report).axes[0]
    return [[list(map(float, line.get_xdata())), list(map(float, line.get_ydata()))]
            for line in axes.lines]  # fmt: skip


def test_the_cost_quality_plot_draws_each_hull_the_oracle_and_the_target() -> None:
    """On the known case: each curve's hull and its flat extension from its dearest vertex to
    the range's top, the target line at 0.95 x b's reward and the oracle's star at its own
    cost; on the train-and-test case the router's points (dearest first) are not its hull."""
    train, evaluated = known_case_tables(1.0, 0.0)
    perfect = {0.0: np.array([[0.0, 1.0], [1.0, 0.0]])}
    report = pareto_report(train, evaluated, "test", perfect, {}, [0.0], reference_cost=1.5)
    assert plotted_lines(report) == [
        [[1.5], [1.0]],  # router: one point
        [[1.5, 2.0], [1.0, 1.0]],
        [[1.0, 2.0], [0.5, 1.0]],  # single workers
        [[2.0, 2.0], [1.0, 1.0]],
        [[0.0, 1.0], [pytest.approx(0.95)] * 2],  # the target, across the axes
    ]
    # each curve's points, then the oracle's star, at (cost, reward)
    figure = plot_pareto(report)
    axes = figure.axes[0]
    assert (axes.get_xlabel(), axes.get_ylabel()) == ("mean cost per prompt", "mean reward")
    # the legend names each curve with its AIQ (3 decimals, as drawn on no other plot), the
    # oracle and the target's worker; the flat extensions are dotted, the target dashed
    assert axes.get_title() == "Cost vs quality (test, n=2)"
    assert [text.get_text() for text in figure.legends[0].get_texts()] == [
        "router (1 cost weight), AIQ 0.500",
        "single workers, AIQ 0.750",
        "oracle (cheapest correct)",
        "0.95 x best single (b)",
    ]
    assert [line.get_linestyle() for line in axes.lines] == ["-", ":", "-", ":", "--"]
    assert [text.get_text() for text in axes.texts] == ["a", "b"]  # each worker's point
    points = [collection.get_offsets().tolist() for collection in axes.collections]
    assert points == [[[1.5, 1.0]], [[1.0, 0.5], [2.0, 1.0]], [[1.5, 1.0]]]
    always_b, always_a = np.array([[0.0, 1.0]]), np.array([[1.0, 0.0]])
    train = reward_table([cost_record("train", [1.0, 0.0], [3.0, 1.0], "t1")])  # a is best
    evaluated = reward_table([cost_record("test", [0.5, 1.0], [3.0, 1.0], "e1")])
    report = pareto_report(
        train, evaluated, "test", {1.0: always_b, 0.0: always_a}, {}, [0.0], reference_cost=2.0
    )
    assert plotted_lines(report)[0] == [[1.0], [1.0]]


def test_a_router_short_of_the_target_reads_not_reached() -> None:
    """On the known case a router always asking a (reward 0.5) never reaches 0.95 x b's
    1.0: its summary row says so, in place of a cost and a share."""
    train, evaluated = known_case_tables(1.0, 0.0)
    always_a = {0.0: np.array([[1.0, 0.0], [1.0, 0.0]])}
    report = pareto_report(train, evaluated, "test", always_a, {}, [0.0], reference_cost=1.5)
    assert report["curves"]["router"]["cost_at_target"] is None
    assert "| router (1 cost weight) | 0.5000 | — | not reached |" in pareto_markdown(report)


def test_the_aiq_floor_is_the_evaluated_splits_lowest_reward() -> None:
    """A reward below 0 on the evaluated split sets the floor, whatever the train split
    holds; one on train only does not."""
    train, evaluated = known_case_tables(1.0, 0.0)
    shifted_train, shifted_evaluated = known_case_tables(1.0, -0.5)
    perfect = {0.0: np.array([[0.0, 1.0], [1.0, 0.0]])}
    for train_table, evaluated_table, floor in (
        (train, shifted_evaluated, -0.5),
        (shifted_train, evaluated, 0.0),
    ):
        report = pareto_report(train_table, evaluated_table, "test", perfect, {}, [0.0], 1.5)
        assert report["aiq_floor"] == floor


def test_a_reference_cost_of_0_is_refused() -> None:
    train, evaluated = known_case_tables(1.0, 0.0)
    perfect = {0.0: np.array([[0.0, 1.0], [1.0, 0.0]])}
    with pytest.raises(ValueError, match="reference_cost must be > 0, got 0"):
        pareto_report(train, evaluated, "test", perfect, {}, [0.0], reference_cost=0.0)


def test_baselines_given_no_cost_weights_are_refused_naming_the_argument() -> None:
    """pareto_report (public API; eval --pareto always gives the family's weights) given
    baseline predictions but no weights to trace them at stopped on 'a hull needs at least
    one point', naming neither the baseline nor the argument; without baselines no weight
    is needed."""
    train, evaluated = known_case_tables(1.0, 0.0)
    perfect = {0.0: np.array([[0.0, 1.0], [1.0, 0.0]])}
    predictions = {"knn": (evaluated.rewards, evaluated.costs)}
    with pytest.raises(ValueError, match=r"baseline_cost_weights is empty.*\['knn'\]"):
        pareto_report(train, evaluated, "test", perfect, predictions, [], 1.5)
    report = pareto_report(train, evaluated, "test", perfect, {}, [], 1.5)
    assert list(report["curves"]) == ["router", "workers"]


def test_aiq_below_a_curve_is_the_floor_it_is_given() -> None:
    # [1, 2] at the floor -1, then (0.6 + 0.9) / 2 * 2 on [2, 4]: (-1 + 1.5) / 3
    assert aiq([(2.0, 0.6), (4.0, 0.9)], 1.0, 4.0, floor=-1.0) == pytest.approx(0.5 / 3)
    assert aiq([(3.0, 0.6)], 1.0, 2.0, floor=-1.0) == -1.0  # the whole range below it
    assert aiq([(2.0, 0.6)], 1.0, 2.0, floor=-1.0) == -1.0  # all but its top, cost 2
    assert hull_reward_at([(1.0, 0.5)], 0.5, floor=-1.0) == -1.0


def test_a_reversed_cost_range_and_a_report_without_a_router_are_refused() -> None:
    """aiq over [2, 1] (refused only below cost_min - 1, say) gave a number for a range that
    holds no cost, and pareto_report given no router probabilities (its check dropped) said
    only 'a hull needs at least one point': each passed every test."""
    with pytest.raises(ValueError, match=r"cost range \[2.0, 1.9\] is empty"):
        aiq([(1.0, 0.5)], 2.0, 1.9)
    train, evaluated = known_case_tables(1.0, 0.0)
    with pytest.raises(ValueError, match="give the probabilities of at least one router"):
        pareto_report(train, evaluated, "test", {}, {}, [0.0], 1.5)


def known_case_tables(scale: float, shift: float) -> tuple[RewardTable, RewardTable]:
    """test_pareto_report_on_a_known_case's records with rewards mapped to r * scale + shift."""

    def rewards(values: list[float]) -> list[float]:
        return [value * scale + shift for value in values]

    train = reward_table(
        [
            cost_record("train", rewards([0.0, 1.0]), [1.0, 2.0], "t1"),
            cost_record("train", rewards([0.4, 1.0]), [1.0, 2.0], "t2"),
        ]
    )
    evaluated = reward_table(
        [
            cost_record("test", rewards([0.0, 1.0]), [1.0, 2.0], "e1"),
            cost_record("test", rewards([1.0, 1.0]), [1.0, 2.0], "e2"),
        ]
    )
    return train, evaluated


def test_aiq_of_rewards_scored_minus_1_to_1_ranks_curves_as_the_same_rewards_in_0_to_1() -> None:
    """Some datasets score -1..1. Below its cheapest point a curve used to earn 0, which is
    mid-scale there: a curve that cannot run cheaply gained from it. The floor is now the
    lowest reward, so AIQ moves with the rewards (2 r - 1 gives 2 AIQ - 1)."""
    perfect = {0.0: np.array([[0.0, 1.0], [1.0, 0.0]])}
    unit = pareto_report(*known_case_tables(1.0, 0.0), "test", perfect, {}, [0.0], 1.5)
    signed = pareto_report(*known_case_tables(2.0, -1.0), "test", perfect, {}, [0.0], 1.5)
    assert (unit["aiq_floor"], signed["aiq_floor"]) == (0.0, -1.0)
    for name in ("router", "workers"):
        assert signed["curves"][name]["aiq"] == pytest.approx(2 * unit["curves"][name]["aiq"] - 1)
    assert signed["curves"]["router"]["aiq"] == pytest.approx(0.0)  # -1 on [1, 1.5], 1 after


@pytest.mark.parametrize(
    ("train_rewards", "test_rewards", "costs"),
    [
        ([-1.0, -0.5], [-0.8, -0.2], [1.0, 2.0]),  # every reward negative
        ([0.0, 0.0], [0.0, 0.0], [1.0, 2.0]),  # every reward 0: the best single has 0
        ([-1.0, 0.0], [-1.0, 0.0], [0.0, 0.0]),  # free workers as well
    ],
)
def test_a_best_single_worker_at_or_below_0_has_no_target_and_a_note(
    tmp_path: Path, train_rewards: list[float], test_rewards: list[float], costs: list[float]
) -> None:
    """95% of a reward <= 0 is no quality target (95% of -0.5 is above -0.5): the target and
    the costs read off it are null with a note, not a figure that means nothing."""
    train = reward_table([cost_record("train", train_rewards, costs, "t1")])
    evaluated = reward_table([cost_record("test", test_rewards, costs, "e1")])
    probabilities = {0.0: np.array([[0.2, 0.8]]), 1.0: np.array([[0.8, 0.2]])}
    report = pareto_report(train, evaluated, "test", probabilities, {}, [0.0], 1.0)
    assert report["target_reward"] is None
    for curve in report["curves"].values():
        assert curve["cost_at_target"] is None and curve["cost_fraction_at_target"] is None
    assert "no quality target" in report["notes"][0]
    # a free best worker is then no second reason: there is no cost share to be undefined
    assert not any("costs nothing" in note for note in report["notes"])
    write_pareto(report, tmp_path)
    json.loads((tmp_path / "pareto_report.json").read_text(), parse_constant=pytest.fail)
    markdown = (tmp_path / "pareto_report.md").read_text()
    assert "x its reward = undefined (see the notes)" in markdown
    assert "no quality target" in markdown
    # no curve has a cost share: none reads as a curve that falls short of a target
    assert "| — (no target) |" in markdown and "not reached" not in markdown
    console = Console(record=True, width=200)
    print_pareto(report, console)
    assert "note: the best single worker's mean reward is" in console.export_text()


@pytest.mark.parametrize(
    ("rewards", "costs", "note"),
    [
        ([[1.0, 1.0], [1.0, 1.0]], [[1.0, 2.0], [1.0, 2.0]], None),  # every reward equal
        ([[1.0, 0.0], [0.0, 1.0]], [[0.0, 0.0], [0.0, 0.0]], "every point costs 0"),
        ([[0.5, -1.0], [1.0, 0.0]], [[0.0, 3.0], [0.0, 1.0]], "costs nothing"),
    ],
)
def test_degenerate_cost_quality_tables_give_a_report_without_nan(
    tmp_path: Path, rewards: list[list[float]], costs: list[list[float]], note: str | None
) -> None:
    records = [
        cost_record(split, row, cost, f"{split}{index}")
        for split in ("train", "test")
        for index, (row, cost) in enumerate(zip(rewards, costs, strict=True))
    ]
    train, evaluated = (reward_table(records_in_split(records, name)) for name in ("train", "test"))
    probabilities = {0.0: np.array([[0.9, 0.1], [0.1, 0.9]])}
    predictions = {"knn": (evaluated.rewards, evaluated.costs)}
    report = pareto_report(train, evaluated, "test", probabilities, predictions, [0.0, 1.0], 1.0)
    write_pareto(report, tmp_path)
    json.loads((tmp_path / "pareto_report.json").read_text(), parse_constant=pytest.fail)
    assert report["target_reward"] is not None
    assert all(np.isfinite(curve["aiq"]) for curve in report["curves"].values())
    if note is None:
        assert report["notes"] == []
    else:
        assert any(note in line for line in report["notes"])


def test_a_free_best_single_worker_gives_no_cost_share_instead_of_crashing(
    tmp_path: Path,
) -> None:
    """A local worker (price 0) that is also the best single one: its mean cost is 0, so a
    share of it is undefined (it divided by zero)."""
    train = reward_table([cost_record("train", [1.0, 0.5], [0.0, 2.0], "t1")])
    evaluated = reward_table([cost_record("test", [1.0, 0.0], [0.0, 2.0], "e1")])
    probabilities = np.array([[0.9, 0.1]])
    report = pareto_report(train, evaluated, "test", {0.0: probabilities}, {}, [0.0], 1.0)
    router = report["curves"]["router"]
    assert router["cost_at_target"] == 0.0 and router["cost_fraction_at_target"] is None
    write_pareto(report, tmp_path)
    markdown = (tmp_path / "pareto_report.md").read_text()
    assert "— (best single costs 0)" in markdown and "not reached" not in markdown


@pytest.mark.parametrize(
    ("router", "baseline", "message"),
    [
        ([[0.1, 0.9], [0.9, 0.1]], None, r"router probabilities \(cost weight 0\) have shape"),
        ([[0.1, 0.9, 0.0]], None, r"router probabilities \(cost weight 0\) have shape"),
        ([[np.nan, 0.1, 0.2], [0.9, 0.1, 0.0]], None, "router probabilities .* NaN"),
        (None, ([[0.5, 0.5, 0.5]], "rewards"), r"baseline 'knn' predicted rewards have shape"),
        (None, ([[0.0, np.inf, 0.0], [1.0, 0.0, 0.0]], "costs"), "'knn' predicted costs .*NaN"),
    ],
)
def test_a_pareto_report_refuses_predictions_that_do_not_match_the_evaluated_table(
    router: list | None, baseline: tuple[list, str] | None, message: str
) -> None:
    """evaluation_report refuses misaligned or NaN probabilities; pareto_report took them and
    drew wrong points without a word: 2 probability columns for 3 workers, one row for two
    prompts (broadcast to both), or a NaN (argmax's pick) each gave a point of the curve."""
    good = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    table = RewardTable(good, np.array([[1.0, 2.0, 3.0]] * 2), [None, None], ["e0", "e1"],
                        ["h0", "h1"], ["a", "b", "c"])  # fmt: skip
    probabilities = {0.0: good if router is None else np.array(router)}
    predictions = {"knn": (good, np.ones_like(good))}
    if baseline is not None:
        values, which = baseline
        predictions["knn"] = (
            np.array(values) if which == "rewards" else good,
            np.array(values) if which == "costs" else np.ones_like(good),
        )
    with pytest.raises(ValueError, match=message):
        pareto_report(table, table, "test", probabilities, predictions, [0.0], 1.0)


def test_a_pareto_report_refuses_splits_whose_workers_differ() -> None:
    """The best single worker is a column of train read on the evaluated split: with the
    evaluated split's workers in another order the report named b, the worse on train, as
    the best single worker (reward 0 at cost 1), where eval refuses such splits."""
    train = reward_table([cost_record("train", [1.0, 0.0], [3.0, 1.0], "t1")])  # a is best
    evaluated = RewardTable(np.array([[0.0, 1.0]]), np.array([[1.0, 3.0]]), [None], ["e1"],
                            ["h1"], ["b", "a"])  # fmt: skip
    differ = r"train workers \['a', 'b'\] differ from evaluated workers \['b', 'a'\]"
    with pytest.raises(ValueError, match=differ):
        pareto_report(train, evaluated, "test", {0.0: np.array([[1.0, 0.0]])}, {}, [0.0], 1.0)


def test_cost_weighted_choices_trade_predicted_reward_for_cost() -> None:
    rewards = np.array([[0.9, 1.0]])
    costs = np.array([[0.1, 1.0]])
    assert cost_weighted_choices(rewards, costs, 0.0, 0.5).tolist() == [1]
    assert cost_weighted_choices(rewards, costs, 0.1, 0.5).tolist() == [0]


def test_baseline_cost_predictions_use_the_chosen_k_and_alpha_on_rewards_and_costs() -> None:
    """kNN and ridge predict each worker's reward and cost with the k and alpha chosen on
    validation: a cost curve read off predicted rewards, or a k other than the chosen one,
    gave kNN and ridge another curve with nothing in the report to show it."""
    train_x = np.array([[1, 0], [0, 1], [-1, 0], [0, -1]], dtype=np.float32)
    rewards = [[1.0, 0.0], [0.0, 1.0], [0.5, 0.5], [0.2, 0.8]]
    costs = [[3.0, 1.0], [2.0, 2.0], [1.0, 4.0], [5.0, 0.5]]
    train = reward_table(
        [cost_record("train", rewards[i], costs[i], f"t{i}") for i in range(len(rewards))]
    )
    evaluated_x = np.array([[1, 0.1], [0.1, 1]], dtype=np.float32)
    info = {"knn": {"chosen": 1}, "ridge": {"chosen": 10.0}}
    predicted = baseline_cost_predictions(train_x, train, evaluated_x, info)
    knn_rewards, knn_costs = predicted["knn"]
    # k = 1: each prompt's one most similar train prompt, the first and the second
    assert knn_rewards.tolist() == [[1, 0], [0, 1]]
    assert knn_costs.tolist() == [[3, 1], [2, 2]]
    ridge_rewards, ridge_costs = predicted["ridge"]
    assert ridge_rewards == pytest.approx(
        fit_ridge(train_x, train.rewards, 10.0).predict(evaluated_x)
    )
    assert ridge_costs == pytest.approx(fit_ridge(train_x, train.costs, 10.0).predict(evaluated_x))
    assert ridge_costs != pytest.approx(fit_ridge(train_x, train.costs, 1.0).predict(evaluated_x))


def test_a_pareto_report_on_validation_says_the_baselines_were_tuned_there() -> None:
    """`eval --split validation` notes that kNN and ridge had their k and alpha chosen on
    that very split, so their scores there are optimistic; `eval --pareto` drew their curves
    and AIQ on it without a word."""
    rows = [([0.0, 1.0], [1.0, 2.0]), ([1.0, 0.0], [1.0, 2.0])]
    train, validation = (
        reward_table([cost_record(split, r, c, f"{split}{i}") for i, (r, c) in enumerate(rows)])
        for split in ("train", "validation")
    )
    info = {
        "knn": {"parameter": "k", "chosen": 5, "selected_on": "validation"},
        "ridge": {"parameter": "alpha", "chosen": 1.0, "selected_on": "default"},
    }
    predictions = {"knn": (validation.rewards, validation.costs)}
    probabilities = {0.0: np.array([[0.1, 0.9], [0.9, 0.1]])}
    notes = {
        split: pareto_report(
            train, validation, split, probabilities, predictions, [0.0], 1.5, info
        )["notes"]
        for split in ("validation", "test")
    }
    tuned = "knn: its hyperparameter was chosen on this same validation split"
    assert any(note.startswith(tuned) for note in notes["validation"])
    ridge_tuned = "ridge: its hyperparameter was chosen"
    assert not any(note.startswith(ridge_tuned) for note in notes["validation"])  # a default
    assert not any(note.startswith(tuned) for note in notes["test"])


def test_a_pareto_report_says_when_a_baseline_used_a_default_or_the_grids_edge() -> None:
    """`eval` notes a kNN k or ridge alpha that is a fixed default (no validation split) or
    at the edge of its grid; the cost-quality report labelled those curves "kNN (k=100)"
    as if k had been tuned."""
    train, evaluated = known_case_tables(1.0, 0.0)
    info = {
        "knn": {"parameter": "k", "chosen": 100, "selected_on": "default",
                "note": "no validation split: k=100 is a fixed default"},
        "ridge": {"parameter": "alpha", "chosen": 0.01, "selected_on": "validation",
                  "at_grid_edge": True, "note": "alpha=0.01 chosen on validation; at the edge"},
    }  # fmt: skip
    predictions = {name: (evaluated.rewards, evaluated.costs) for name in info}
    probabilities = {0.0: np.array([[0.0, 1.0], [1.0, 0.0]])}
    report = pareto_report(train, evaluated, "test", probabilities, predictions, [0.0], 1.5, info)
    assert "knn: no validation split: k=100 is a fixed default" in report["notes"]
    assert "ridge: alpha=0.01 chosen on validation; at the edge" in report["notes"]
    labels = [report["curves"][name]["label"] for name in ("knn", "ridge")]
    assert labels == ["kNN (k=100)", "ridge (alpha=0.01)"]
