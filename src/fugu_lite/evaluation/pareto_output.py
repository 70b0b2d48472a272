"""Writing and printing a cost-quality report: pareto_report.json/.md, the plot, console."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Column, Table

from ..atomic_files import remove_files, write_text_atomic
from ..io import write_json
from ..text import console_name, console_text, cost_text, exact_number
from .pareto import CURVE_LABELS
from .pareto_plot import plot_pareto
from .plots import save_png
from .table import markdown_cell, markdown_table, worker_row_name

PARETO_JSON = "pareto_report.json"
PARETO_MARKDOWN = "pareto_report.md"
PARETO_PLOT = "cost_quality.png"
PARETO_FILES = (PARETO_JSON, PARETO_MARKDOWN, PARETO_PLOT)


def write_pareto(report: dict, output_dir: Path) -> list[str]:
    """Write the cost-quality plot, pareto_report.md, then pareto_report.json; returns names.

    Like write_evaluation: the previous run's files go first and the JSON comes last, so a
    run stopped half-way never leaves a report beside another run's plot."""
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    names = list(PARETO_FILES)
    remove_files(output_dir, names)
    save_png(plot_pareto(report), output_dir / PARETO_PLOT)
    write_text_atomic(output_dir / PARETO_MARKDOWN, pareto_markdown(report))
    write_json(output_dir / PARETO_JSON, report)
    return names


def summary_rows(report: dict) -> list[list[str]]:
    """Curve, AIQ, cost at target, fraction of the best single worker's cost."""
    return [
        [
            curve["label"],
            f"{curve['aiq']:.4f}",
            _cost(curve["cost_at_target"]),
            _share(curve, report),
        ]
        for curve in report["curves"].values()
    ]


def cost_weight_rows(report: dict) -> tuple[list[str], list[list[str]]]:
    """Per cost weight: (mean cost, mean reward) of the router, kNN and ridge."""
    names = [name for name in report["curves"] if name != "workers"]
    weights = sorted({p["cost_weight"] for name in names for p in report["curves"][name]["points"]})
    header = ["lambda", *[f"{CURVE_LABELS.get(name, name)} {kind}" for name in names
                          for kind in ("cost", "reward")]]  # fmt: skip
    rows = []
    for weight in weights:
        # every digit: :g showed 0.1234567 and 0.1234568 (a hand-edited family) as one row name
        cells = [exact_number(weight)]
        for name in names:
            point = next(
                (p for p in report["curves"][name]["points"] if p["cost_weight"] == weight), None
            )
            cells += ["—", "—"] if point is None else [
                _cost(point["mean_cost"]), f"{point['mean_reward']:.4f}"
            ]  # fmt: skip
        rows.append(cells)
    return header, rows


ORACLE_ROW = "oracle"


def reference_rows(report: dict) -> list[list[str]]:
    """Each single worker and the oracle: mean cost, mean reward (a worker named as the
    oracle's row, or as the best single worker's, is quoted: worker_row_name)."""
    best = report["best_single"]["worker"]
    rows = [
        [
            worker_row_name(point["label"], best, other_rows=(ORACLE_ROW,)),
            _cost(point["mean_cost"]),
            f"{point['mean_reward']:.4f}",
        ]
        for point in report["curves"]["workers"]["points"]
    ]
    oracle = report["oracle"]
    rows.append([ORACLE_ROW, _cost(oracle["mean_cost"]), f"{oracle['mean_reward']:.4f}"])
    return rows


def pareto_markdown(report: dict) -> str:
    best = report["best_single"]
    header, rows = cost_weight_rows(report)
    lines = [
        f"# Cost-quality evaluation on `{report['split']}`",
        "",
        f"{report['n_prompts']} prompts · reference cost {_cost(report['reference_cost'])} "
        f"(lambda = 1 charges one reward point per reference cost) · best single worker "
        f"{markdown_cell(best['worker'])} (chosen on {best['chosen_on']}): mean reward "
        f"{best['mean_reward']:.4f} at mean cost {_cost(best['mean_cost'])} · target "
        f"{report['quality_fraction']:g} x its reward = {_target(report)}.",
        "",
        "## Summary",
        "",
        *_numbers_table(
            ["Curve", "AIQ", "Cost at target", "Share of best single's cost"],
            summary_rows(report),
        ),
        f"![Cost-quality curves]({PARETO_PLOT})",
        "",
        "## Per cost weight",
        "",
        *_numbers_table(header, rows),
        "## Single workers and oracle",
        "",
        *_numbers_table(["Worker", "Mean cost", "Mean reward"], reference_rows(report)),
        *(
            ["## Notes", "", *[f"- {note}" for note in report["notes"]], ""]
            if report["notes"]
            else []
        ),
        "## Definitions",
        "",
        *[f"- **{name}**: {text}" for name, text in report["definitions"].items()],
        f"- cost range: [{_cost(report['cost_range'][0])}, {_cost(report['cost_range'][1])}]",
    ]
    return "\n".join(lines).rstrip() + "\n"


def _numbers_table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A Markdown table of a name column and right-aligned number columns."""
    return markdown_table(header, rows, right_aligned=list(range(1, len(header))))


def print_pareto(report: dict, console: Console) -> None:
    header, rows = cost_weight_rows(report)
    per_weight = Table(title=f"Cost and reward per cost weight ({report['split']})")
    for index, column in enumerate(header):
        per_weight.add_column(console_name(column), justify="left" if index == 0 else "right")
    for row in rows:
        per_weight.add_row(*row)
    console.print(per_weight)
    # numbers right-aligned, as in the table above: left-aligned, a cost of 25,000.00 and
    # one of 0.10 began in the same column
    references = Table(
        Column("worker", overflow="fold"),  # a worker cut short with "…" could be anyone
        Column("mean cost", justify="right"),
        Column("mean reward", justify="right"),
        title="Single workers and oracle",
    )
    for row in reference_rows(report):
        references.add_row(*(console_name(cell) for cell in row))
    console.print(references)
    summary = Table(
        "curve",
        Column("AIQ", justify="right"),
        Column("cost at target", justify="right"),
        Column("share of best single's cost", justify="right"),
        title=f"AIQ and cost to reach {report['quality_fraction']:g} x best single's reward "
        f"({_target(report)})",
    )
    for row in summary_rows(report):
        summary.add_row(*(console_name(cell) for cell in row))
    console.print(summary)
    for note in report["notes"]:
        console.print(f"[yellow]note:[/] {console_text(note)}")


def _cost(value: float | None) -> str:
    return "—" if value is None else cost_text(value)


def _target(report: dict) -> str:
    target = report["target_reward"]
    return "undefined (see the notes)" if target is None else f"{target:.4f}"


def _share(curve: dict, report: dict) -> str:
    if report["target_reward"] is None:
        return "— (no target)"
    if curve["cost_at_target"] is None:
        return "not reached"
    if curve["cost_fraction_at_target"] is None:
        return f"— (best single costs {_cost(report['best_single']['mean_cost'])})"
    return f"{100 * curve['cost_fraction_at_target']:.1f}%"
