"""Writing and printing an evaluation report: JSON, Markdown, JSONL predictions, plots, console."""

from __future__ import annotations

import contextlib
from pathlib import Path

from rich.console import Console
from rich.table import Table

from ..atomic_files import remove_files, write_text_atomic
from ..io import read_json, write_json, write_jsonl
from ..text import console_name, console_text, cost_text, visible_controls
from .pareto_output import PARETO_FILES, PARETO_JSON
from .plots import (
    CHOICES_PLOT,
    MEAN_REWARD_PLOT,
    PER_TASK_PLOT,
    PLOTS,
    choices_plot_note,
    per_task_plot_note,
    write_plots,
)
from .table import markdown_cell, markdown_table, row_name, task_label

REPORT_JSON = "evaluation_report.json"
REPORT_MARKDOWN = "evaluation_report.md"
PREDICTIONS_JSONL = "predictions.jsonl"
EVALUATION_FILES = (REPORT_JSON, REPORT_MARKDOWN, PREDICTIONS_JSONL, *PLOTS)
# `eval`'s default report folders inside the checkpoint: CHECKPOINT/eval-SPLIT, pareto-SPLIT
DEFAULT_REPORT_PREFIXES = ("eval-", "pareto-")


def write_evaluation(report: dict, predictions: list[dict], output_dir: Path) -> None:
    """Write the per-prompt predictions, the plots and the report (Markdown, then JSON).

    The JSON report marks a complete folder: the previous run's files go first and the JSON
    comes last, so a run stopped half-way (Ctrl-C, kill) never leaves a report beside
    another run's predictions or plots."""
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    remove_files(output_dir, EVALUATION_FILES)
    write_jsonl(output_dir / PREDICTIONS_JSONL, predictions)
    plots = write_plots(report, output_dir)
    write_text_atomic(output_dir / REPORT_MARKDOWN, evaluation_markdown(report, plots))
    write_json(output_dir / REPORT_JSON, report)


# How remove_evaluations names the checkpoint folder itself (`eval -o CHECKPOINT`).
OWN_FOLDER = "the checkpoint folder itself"


def remove_evaluations(checkpoint: Path) -> list[str]:
    """Delete the reports `eval` wrote of a checkpoint inside its folder (the default
    eval-SPLIT and pareto-SPLIT, any subfolder whose report names this checkpoint, and the
    folder itself when `eval -o CHECKPOINT` put its report there): they describe the
    checkpoint about to be replaced. A report naming another checkpoint that exists stays,
    whatever its folder's name. Only the files `eval` writes go, and a subfolder they leave
    empty; anything else is kept. Returns the names of the folders cleared."""
    checkpoint = Path(checkpoint)
    if not checkpoint.is_dir():
        return []
    cleared = []
    if evaluated_checkpoint(checkpoint) == checkpoint.resolve():
        names = [path.name for path in checkpoint.iterdir()]
        remove_files(
            checkpoint, [name for name in (*EVALUATION_FILES, *PARETO_FILES) if name in names]
        )
        cleared.append(OWN_FOLDER)
    # a linked folder is somewhere else, whatever its name
    for folder in sorted(p for p in checkpoint.iterdir() if p.is_dir() and not p.is_symlink()):
        evaluated = evaluated_checkpoint(folder)
        if evaluated is None:
            ours = folder.name.startswith(DEFAULT_REPORT_PREFIXES)
        else:
            ours = evaluated == checkpoint.resolve()
        names = [path.name for path in folder.iterdir()]
        written = [name for name in (*EVALUATION_FILES, *PARETO_FILES) if name in names]
        if not ours or not written:
            continue
        remove_files(folder, written)
        with contextlib.suppress(OSError):  # the user's own files are still there
            folder.rmdir()
        cleared.append(folder.name)
    return cleared


def evaluated_checkpoint(folder: Path) -> Path | None:
    """The folder of the checkpoint a report in `folder` evaluated (its `checkpoint`: an
    absolute path, or a relative one, as earlier versions wrote it, read from here); None
    without a readable report, or when that folder is not found."""
    for name in (REPORT_JSON, PARETO_JSON):
        try:
            named = read_json(folder / name).get("checkpoint")
        except (OSError, ValueError, AttributeError):  # none, damaged, or not an object
            continue
        if isinstance(named, str) and Path(named).is_dir():
            return Path(named).resolve()
    return None


# --- Markdown -----------------------------------------------------------------


def evaluation_markdown(report: dict, plots: list[str]) -> str:
    sizes = report["sizes"]
    lines = [
        f"# Evaluation on `{report['split']}`",
        "",
        f"Evaluated prompts: {sizes['evaluated']} ({report['split']}) · train prompts: "
        f"{sizes['train']} · validation prompts: {sizes['validation'] or 'none'} · "
        f"workers: {len(report['worker_ids'])} "
        f"({', '.join(markdown_cell(worker) for worker in report['worker_ids'])}) · costs known: "
        f"{'yes' if report['costs_known'] else 'no'}",
        "",
        "Gap closed = (method − best single) / (oracle − best single); "
        "the best single worker is chosen on train.",
        "",
        "## Methods",
        "",
        *markdown_table(
            ["Method", "Mean reward", "Gap closed", "Mean cost", "How"],
            [
                [
                    method["label"],
                    _reward(method["mean_reward"]),
                    _reward(method["gap_closed"]),
                    _cost(method["mean_cost"]),
                    method["detail"],
                ]
                for method in report["methods"].values()
            ],
            right_aligned=[1, 2, 3],
        ),
        *_image(MEAN_REWARD_PLOT, "Mean reward per method", plots),
    ]
    lines += _markdown_per_task(report, plots)
    lines += _markdown_choices(report, plots)
    lines += _markdown_hyperparameters(report)
    if report["notes"]:
        lines += ["## Notes", "", *[f"- {note}" for note in report["notes"]], ""]
    return "\n".join(lines).rstrip() + "\n"


def _markdown_per_task(report: dict, plots: list[str]) -> list[str]:
    if not report["per_task"]:
        return ["## Per task", "", "No task labels on this split.", ""]
    columns = _per_task_columns(report)
    has_task_best = "per_task_best" in report["methods"]
    header = ["Task", "n", *[report["methods"][name]["short_label"] for name in columns]]
    if has_task_best:
        header.append("Best worker on train")
    rows = []
    for row in report["per_task"]:
        cells = [task_label(row["task"]), str(row["n"]), *[_reward(row[name]) for name in columns]]
        if has_task_best:
            worker = row["per_task_best_worker"]
            cells.append("— (best single)" if worker is None else row_name(worker))
        rows.append(cells)
    return [
        "## Per task",
        "",
        *markdown_table(header, rows, right_aligned=list(range(1, len(columns) + 2))),
        *_image(PER_TASK_PLOT, "Mean reward per task", plots),
        *_plot_note(per_task_plot_note(report), PER_TASK_PLOT, plots),
    ]


def _plot_note(note: str | None, name: str, plots: list[str]) -> list[str]:
    return [note, ""] if note is not None and name in plots else []


def _markdown_choices(report: dict, plots: list[str]) -> list[str]:
    names = list(report["choices"])
    header = ["Worker", *[report["methods"][name]["short_label"] for name in names]]
    rows = [
        [
            worker,
            *[
                f"{report['choices'][name]['counts'][worker]} "
                f"({100 * report['choices'][name]['shares'][worker]:.1f}%)"
                for name in names
            ],
        ]
        for worker in report["worker_ids"]
    ]
    lines = [
        "## Which worker answers",
        "",
        *markdown_table(header, rows, right_aligned=list(range(1, len(names) + 1))),
    ]
    sentence = _router_vs_best_single(report, markdown_cell(report["best_single"]["worker"]))
    if sentence is not None:
        lines += [sentence, ""]
    return [
        *lines,
        *_image(CHOICES_PLOT, "Router choices", plots),
        *_plot_note(choices_plot_note(report), CHOICES_PLOT, plots),
    ]


def _markdown_hyperparameters(report: dict) -> list[str]:
    lines = ["## Baseline hyperparameters", ""]
    if not report["baselines"]:
        return [*lines, "No baselines.", ""]
    for name, info in report["baselines"].items():
        label = report["methods"].get(name, {}).get("label", name)
        lines += [f"### {label}", ""]
        if not isinstance(info, dict) or "parameter" not in info:
            lines += [f"`{info}`", ""]
            continue
        lines += [info.get("note") or f"{info['parameter']}={info['chosen']}", ""]
        scores = info.get("validation_scores") or {}
        if scores:
            lines += markdown_table(
                [info["parameter"], "Validation mean reward", ""],
                [
                    [value, _reward(score), "chosen" if value == f"{info['chosen']:g}" else ""]
                    for value, score in scores.items()
                ],
                right_aligned=[0, 1],
            )
    return lines


def _image(name: str, title: str, plots: list[str]) -> list[str]:
    return [f"![{title}]({name})", ""] if name in plots else []


# --- console ------------------------------------------------------------------


def print_evaluation(report: dict, console: Console) -> None:
    """The main comparison, the per-task table and the workers each method picks, as rich
    tables."""
    console.print(_methods_table(report))
    if report["per_task"]:
        console.print(_per_task_console_table(report))
    if report["choices"]:
        console.print(_choices_table(report))
    sentence = _router_vs_best_single(report, visible_controls(report["best_single"]["worker"]))
    if sentence is not None:
        console.print(sentence, markup=False)
    for note in report["notes"]:
        console.print(f"[dim]note: {console_text(note)}[/dim]")


def _methods_table(report: dict) -> Table:
    """Each method's mean reward, gap closed and mean cost; the router's row in bold."""
    sizes = report["sizes"]
    main = Table(
        title=f"Evaluation on {report['split']} ({sizes['evaluated']} prompts; "
        f"train {sizes['train']})"
    )
    main.add_column("Method", overflow="fold")  # "best single (WORKER)": never cut
    main.add_column("Mean reward", justify="right")
    main.add_column("Gap closed", justify="right")
    main.add_column("Mean cost", justify="right")
    for name, method in report["methods"].items():
        main.add_row(
            console_name(method["label"]),
            _reward(method["mean_reward"]),
            _reward(method["gap_closed"]),
            _cost(method["mean_cost"]),
            style="bold" if name == "router" else None,
        )
    return main


def _per_task_console_table(report: dict) -> Table:
    """Each method's mean reward per task label of the evaluated split."""
    columns = _per_task_columns(report)
    per_task = Table(title=f"Mean reward per task ({report['split']})")
    # On a narrow terminal fold long task names rather than cut them with an ellipsis
    # (two tasks can share a 10-character prefix).
    per_task.add_column("Task", overflow="fold")
    per_task.add_column("n", justify="right")
    for name in columns:
        per_task.add_column(console_name(report["methods"][name]["short_label"]), justify="right")
    for row in report["per_task"]:
        cells = [_reward(row[name]) for name in columns]
        per_task.add_row(console_name(task_label(row["task"])), str(row["n"]), *cells)
    return per_task


def _choices_table(report: dict) -> Table:
    """Share of the evaluated prompts each learned method sends to each worker (the best
    single worker's column is one 100%, the oracle's depends on its tie-breaking)."""
    names = [name for name in report["choices"] if name not in ("best_single", "oracle")]
    table = Table(title=f"Which worker answers: share of prompts ({report['split']})")
    table.add_column("Worker", overflow="fold")
    for name in names:
        table.add_column(console_name(report["methods"][name]["short_label"]), justify="right")
    for worker in report["worker_ids"]:
        shares = [report["choices"][name]["shares"][worker] for name in names]
        table.add_row(console_name(worker), *(_percent(share) for share in shares))
    return table


# --- formatting shared by both ------------------------------------------------


def _per_task_columns(report: dict) -> list[str]:
    """Methods in the per-task rows, in the order of the main table (random has no choices)."""
    first_row = report["per_task"][0]
    return [name for name in report["methods"] if name in first_row]


def _router_vs_best_single(report: dict, best_single: str) -> str | None:
    """The sentence comparing the router with the best single worker, named `best_single`
    (as the output shows it)."""
    comparison = report["router_vs_best_single"]
    if comparison is None:
        return None
    return (
        f"The router picks the best single worker ({best_single}) on "
        f"{_percent(comparison['same_choice'])} of prompts; its choice earns more on "
        f"{_percent(comparison['router_better'])} and less on "
        f"{_percent(comparison['router_worse'])}."
    )


def _reward(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def _cost(value: float | None) -> str:
    return "—" if value is None else cost_text(value)


def _percent(value: float) -> str:
    return f"{100 * value:.1f}%"
