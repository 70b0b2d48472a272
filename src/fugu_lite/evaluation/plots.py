"""PNG plots of an evaluation report, drawn with matplotlib's Agg canvas (no pyplot state)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from io import BytesIO
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.legend import Legend

from ..atomic_files import write_bytes_atomic
from ..text import visible_controls
from .table import BEST_SINGLE_MARK, row_name, task_label

MEAN_REWARD_PLOT = "mean_reward.png"
CHOICES_PLOT = "router_choices.png"
PER_TASK_PLOT = "per_task_reward.png"
PLOTS = (MEAN_REWARD_PLOT, CHOICES_PLOT, PER_TASK_PLOT)
# Tasks with a row of their own on the per-task plot; more share its last row (1,200 tasks
# made an 86,580-pixel-tall PNG that took a minute to draw and could not be read).
PER_TASK_PLOT_ROWS = 40
CHOICES_PLOT_ROWS = 60  # workers with a row of their own on the router choices plot
_DPI = 120
_LABEL_CHARS = 48
# A label shortened where it differs from another: its first and last characters kept, and
# the part from a few characters before the difference.
_AT_HEAD, _AT_TAIL, _AT_CONTEXT = 15, 16, 5


def plain_text(text: str) -> str:
    """`text` as matplotlib shows it verbatim: a worker or task name holding two `$` would
    otherwise be parsed as math (and one like `$\\x$` stops the plot with an error); control
    characters, which no font draws, as escapes (`\\x1b`); line breaks stay. A line longer
    than _LABEL_CHARS loses its middle (a 200-character name left the plot no room)."""
    return plain_labels([text])[0]


def plain_labels(texts: Sequence[str]) -> list[str]:
    """plain_text of each of one plot's labels (its rows, its points), kept apart: two long
    names that differ only in their middle would both lose it and read the same, so such
    lines show where they differ (distinct_lines)."""
    lines_of = [[visible_controls(line) for line in text.splitlines()] for text in texts]
    shown = [list(lines) for lines in lines_of]
    for depth in range(max((len(lines) for lines in lines_of), default=0)):
        holding = [index for index, lines in enumerate(lines_of) if depth < len(lines)]
        kept = distinct_lines([lines_of[index][depth] for index in holding])
        for index, line in zip(holding, kept, strict=True):
            shown[index][depth] = line
    return ["\n".join(lines).replace("$", r"\$") for lines in shown]


def distinct_lines(lines: list[str]) -> list[str]:
    """Each line shortened; lines that differ but would read the same show, between their
    start and end, the part where they first differ (shortened_at); should some still read
    the same (names repeating one pattern), a " [2]", " [3]" ... tells them apart."""
    shown = [shortened(line) for line in lines]
    for _ in lines:  # each pass parts the lines of a colliding label where they first differ
        colliding = _colliding(lines, shown)
        if not colliding:
            return shown
        shown = [
            shortened_at(line, _first_difference(colliding[label])) if label in colliding
            else label
            for line, label in zip(lines, shown, strict=True)
        ]  # fmt: skip
    colliding = _colliding(lines, shown)
    return [
        f"{label} [{colliding[label].index(line) + 1}]" if label in colliding else label
        for line, label in zip(lines, shown, strict=True)
    ]


def _colliding(lines: list[str], shown: list[str]) -> dict[str, list[str]]:
    """Each label in `shown` that two different `lines` read as, with those lines (sorted)."""
    lines_by_label: dict[str, set[str]] = defaultdict(set)
    for line, label in zip(lines, shown, strict=True):
        lines_by_label[label].add(line)
    return {label: sorted(group) for label, group in lines_by_label.items() if len(group) > 1}


def _first_difference(sorted_lines: list[str]) -> int:
    """Where the sorted lines first differ: their first and last differ there first."""
    first, last = sorted_lines[0], sorted_lines[-1]
    pairs = enumerate(zip(first, last, strict=False))
    return next((index for index, (a, b) in pairs if a != b), min(len(first), len(last)))


def shortened(line: str) -> str:
    """`line`, its middle replaced by `…` when longer than _LABEL_CHARS: the start and the
    end (a model's size, a " (best single)" or "(n=3)") stay."""
    if len(line) <= _LABEL_CHARS:
        return line
    head = (_LABEL_CHARS - 1) // 2
    return f"{line[:head]}…{line[len(line) - (_LABEL_CHARS - 1 - head) :]}"


def shortened_at(line: str, at: int) -> str:
    """`line` within _LABEL_CHARS as its start, the part from a few characters before index
    `at` on, and its end, joined by `…` where something is left out."""
    if len(line) <= _LABEL_CHARS:
        return line
    end = len(line) - _AT_TAIL
    width = _LABEL_CHARS - _AT_HEAD - _AT_TAIL - 2
    start = max(_AT_HEAD, min(at - _AT_CONTEXT, end - width))
    return (
        f"{line[:_AT_HEAD]}{'…' if start > _AT_HEAD else ''}{line[start : start + width]}"
        f"{'…' if start + width < end else ''}{line[end:]}"
    )


def legend_beside(figure: Figure, axes: Axes, fontsize: float) -> Legend:
    """The axes' legend right of the plot (the figure's layout makes room): inside it, in a
    corner, it hid the bars there (the last task's, the last method's) or a worker's point."""
    handles, labels = axes.get_legend_handles_labels()
    return figure.legend(handles, labels, loc="outside right upper", fontsize=fontsize)


def write_plots(report: dict, output_dir: Path) -> list[str]:
    """Write every plot the report has data for; returns the file names written."""
    output_dir.mkdir(parents=True, exist_ok=True)
    written = []
    save_png(plot_mean_reward(report), output_dir / MEAN_REWARD_PLOT)
    written.append(MEAN_REWARD_PLOT)
    if "router" in report["choices"]:
        save_png(plot_router_choices(report), output_dir / CHOICES_PLOT)
        written.append(CHOICES_PLOT)
    if report["per_task"]:
        save_png(plot_per_task(report), output_dir / PER_TASK_PLOT)
        written.append(PER_TASK_PLOT)
    return written


def plot_mean_reward(report: dict) -> Figure:
    """Bars for the routers and random; lines for best single and oracle."""
    methods = report["methods"]
    names = [name for name in methods if name not in ("best_single", "oracle")]
    values = [methods[name]["mean_reward"] for name in names]
    figure = Figure(figsize=(max(5.0, 1.3 * len(names) + 2.0), 4.0), layout="constrained")
    axes = figure.add_subplot()
    labels = [plain_text(methods[name]["label"]) for name in names]
    bars = axes.bar(labels, values, color="tab:blue")
    axes.bar_label(bars, fmt="%.3f", fontsize=8)
    axes.axhline(
        methods["oracle"]["mean_reward"], color="tab:green", linestyle="--", label="oracle"
    )
    axes.axhline(
        methods["best_single"]["mean_reward"],
        color="tab:red",
        linestyle=":",
        label=plain_text(methods["best_single"]["label"]),
    )
    axes.set_ylabel("mean reward")
    axes.set_title(f"Mean reward per method ({report['split']}, n={report['sizes']['evaluated']})")
    axes.tick_params(axis="x", labelrotation=20)
    axes.margins(y=0.12)
    legend_beside(figure, axes, fontsize=8)
    return figure


def plot_router_choices(report: dict) -> Figure:
    """Share of prompts sent to each worker by the router, next to the oracle's shares.

    Horizontal bars, one row per worker: the figure grows in height with the pool, so 30
    workers stay readable (columns made it a 29-inch-wide strip)."""
    best = row_name(report["best_single"]["worker"])
    workers, router, oracle = plotted_workers(report)
    names = plain_labels([f"{w}{BEST_SINGLE_MARK}" if w == best else w for w in workers])
    positions = np.arange(len(workers))
    height = 0.4
    figure = Figure(figsize=(8.0, max(3.0, 0.35 * len(workers) + 1.5)), layout="constrained")
    axes = figure.add_subplot()
    axes.barh(positions - height / 2, router, height, label="router", color="tab:blue")
    axes.barh(positions + height / 2, oracle, height, label="oracle", color="tab:green", alpha=0.6)
    axes.set_yticks(positions, names, fontsize=8)
    axes.invert_yaxis()
    axes.set_xlabel("share of prompts")
    axes.set_xlim(0.0, 1.05)
    axes.set_title(f"Which worker answers ({report['split']})")
    legend_beside(figure, axes, fontsize=8)
    return figure


def plot_per_task(report: dict) -> Figure:
    """Per task: router (when present), best single and oracle, as horizontal grouped bars."""
    labelled = plotted_tasks(report["per_task"])
    rows = [row for _, row in labelled]
    series = [
        (name, plain_text(report["methods"][name]["label"]), color)
        for name, color in (
            ("router", "tab:blue"),
            ("best_single", "tab:red"),
            ("oracle", "tab:green"),
        )
        if name in report["methods"]
    ]
    tasks = plain_labels([f"{label} (n={row['n']})" for label, row in labelled])
    positions = np.arange(len(rows))
    height = 0.8 / len(series)
    figure = Figure(figsize=(8.0, max(3.0, 0.2 * len(rows) * len(series) + 1.5)))
    figure.set_layout_engine("constrained")
    axes = figure.add_subplot()
    for index, (name, label, color) in enumerate(series):
        offsets = positions - 0.4 + height * (index + 0.5)
        axes.barh(offsets, [row[name] for row in rows], height, label=label, color=color)
    axes.set_yticks(positions, tasks, fontsize=8)
    axes.invert_yaxis()
    axes.set_xlabel("mean reward")
    axes.set_title(f"Mean reward per task ({report['split']})")
    legend_beside(figure, axes, fontsize=8)
    return figure


def plotted_workers(report: dict) -> tuple[list[str], list[float], list[float]]:
    """The router choices plot's rows (labels, router shares, oracle shares): every worker
    when they fit; else the workers with the largest shares (in the pool's order) and a last
    row, "(N other workers)", with the other workers' shares summed (in parentheses: row_name
    quotes a worker named so)."""
    workers = [row_name(worker) for worker in report["worker_ids"]]
    router = [report["choices"]["router"]["shares"][worker] for worker in report["worker_ids"]]
    oracle = [report["choices"]["oracle"]["shares"][worker] for worker in report["worker_ids"]]
    if len(workers) <= CHOICES_PLOT_ROWS:
        return workers, router, oracle
    by_share = sorted(range(len(workers)), key=lambda index: -(router[index] + oracle[index]))
    kept = sorted(by_share[: CHOICES_PLOT_ROWS - 1])
    others = by_share[CHOICES_PLOT_ROWS - 1 :]
    return (
        [workers[index] for index in kept] + [f"({len(others):,} other workers)"],
        [router[index] for index in kept] + [sum(router[index] for index in others)],
        [oracle[index] for index in kept] + [sum(oracle[index] for index in others)],
    )


def plotted_tasks(rows: list[dict]) -> list[tuple[str, dict]]:
    """The per-task plot's rows and their labels: every task when they fit; else the tasks
    with the most prompts (in the report's order) and a last row, "(N other tasks)", pooling
    the other tasks' prompts (in parentheses: row_name quotes a task named so)."""
    if len(rows) <= PER_TASK_PLOT_ROWS:
        return [(task_label(row["task"]), row) for row in rows]
    by_size = sorted(range(len(rows)), key=lambda index: -rows[index]["n"])
    kept = [rows[index] for index in sorted(by_size[: PER_TASK_PLOT_ROWS - 1])]
    others = [rows[index] for index in by_size[PER_TASK_PLOT_ROWS - 1 :]]
    return [(task_label(row["task"]), row) for row in kept] + [
        (f"({len(others):,} other tasks)", pooled_row(others))
    ]


def pooled_row(rows: list[dict]) -> dict:
    """One row for `rows`: their prompts and each method's mean reward over them."""
    n = sum(row["n"] for row in rows)
    pooled: dict = {"n": n}
    for name in ("router", "best_single", "oracle"):
        if name in rows[0]:
            pooled[name] = sum(row[name] * row["n"] for row in rows) / n
    return pooled


def per_task_plot_note(report: dict) -> str | None:
    """What the per-task plot leaves out, said under it; None when it shows every task."""
    return rows_left_out(
        len(report["per_task"]), PER_TASK_PLOT_ROWS, "tasks with the most prompts",
        "pools the other {} tasks", "task",
    )  # fmt: skip


def choices_plot_note(report: dict) -> str | None:
    """What the router choices plot leaves out, said under it; None when it shows every
    worker."""
    return rows_left_out(
        len(report["worker_ids"]), CHOICES_PLOT_ROWS, "workers with the largest shares",
        "sums the other {} workers' shares", "worker",
    )  # fmt: skip


def rows_left_out(count: int, limit: int, kept: str, last_row: str, noun: str) -> str | None:
    """Which `count` rows a plot of at most `limit` shows (`kept`) and what its last row
    holds (`last_row`, given how many it stands for); None when all fit."""
    if count <= limit:
        return None
    shown = limit - 1
    return (
        f"The plot shows the {shown} {kept}; its last row {last_row.format(f'{count - shown:,}')} "
        f"(the table above has every {noun})."
    )


def save_png(figure: Figure, path: Path) -> None:
    """The figure as a PNG file, written atomically: a reader never sees half an image."""
    FigureCanvasAgg(figure)
    image = BytesIO()
    figure.savefig(image, dpi=_DPI, format="png")
    write_bytes_atomic(path, image.getvalue())
