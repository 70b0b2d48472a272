"""The README's main job, end to end on embedded defaults (no keys, no internet).

1. LLMRouter (when the data is found): import, train SFT -> RL, evaluate on test.
2. The local loop: start the pool (by default the embedded llama.cpp workers), generate
   checkable tasks, collect rewards, train SFT -> RL on them, evaluate on their test split.
3. Serve the coordinator just trained in front of the local pool and send a few requests
   through the official `openai` SDK, printing which worker answered each.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel
from rich.markup import escape
from rich.table import Table

from .config import (
    DEMO_OUTPUT,
    DEMO_RUNS_LLMROUTER,
    DEMO_SERVES,
    DEMO_TASKS_PER_FAMILY,
    PipelineConfig,
)
from .datasets import DATA_DIR_ENV, DataNotFoundError, import_dataset, resolve_data_dir
from .evaluate_checkpoint import run_evaluation
from .pipeline import train_pipeline
from .schemas import RewardRecord, read_records, write_records
from .task_families import generate_tasks
from .tasks import Task, write_tasks
from .text import console_text, notes_console, results_console
from .workers.config import PoolConfig, load_pool_config

if TYPE_CHECKING:
    from openai import OpenAI

console = results_console()

DEMO_QUESTIONS = (
    "What is 17 + 25? Answer with the number.",
    "Reverse the word 'router'.",
    "Write a Python function is_even(n) that returns True when n is even.",
    "Which is heavier, a kilogram of feathers or a kilogram of iron? A) feathers B) iron "
    "C) they weigh the same",
)


class DemoSettings(BaseModel):
    data_dir: Path | None = None
    output: Path = DEMO_OUTPUT
    pool: Path | None = None  # None = the embedded local pool
    tasks_per_family: int = DEMO_TASKS_PER_FAMILY
    task_seed: int = 0
    llmrouter: bool = DEMO_RUNS_LLMROUTER
    serve: bool = DEMO_SERVES


def run_demo(settings: DemoSettings, config: PipelineConfig) -> dict:
    """Every stage in turn; returns the evaluation reports and what the server answered."""
    started = time.perf_counter()
    results: dict = {}
    # generated first: a count the families cannot reach fails now, not after the LLMRouter stage
    tasks = generate_tasks(settings.tasks_per_family, settings.task_seed)
    if settings.llmrouter:
        llmrouter_dir = settings.output / "llmrouter"
        results["llmrouter"] = run_llmrouter(settings.data_dir, llmrouter_dir, config)
    pool_config = load_pool_config(settings.pool)
    local = run_local_loop(pool_config, tasks, settings, config)
    results["local"] = local["evaluation"]
    if settings.serve:
        results["served"] = serve_and_ask(Path(local["checkpoint"]), pool_config)
    console.print(f"demo finished in {time.perf_counter() - started:.0f} s")
    return results


def run_llmrouter(data_dir: Path | None, output_dir: Path, config: PipelineConfig) -> dict | None:
    """Import LLMRouter, train SFT -> RL, evaluate on test; skipped when the data is absent."""
    console.rule("1/3 LLMRouter: import, train SFT -> RL, evaluate")
    root = named_data_dir(data_dir)
    if root is None:
        try:
            root = resolve_data_dir()
        except DataNotFoundError as error:
            message = console_text(str(error))
            console.print(f"[yellow]skipping the LLMRouter stage:[/yellow] {message}")
            return None
    records = import_dataset("llmrouter", root)
    write_records(output_dir / "records.jsonl", records)
    console.print(f"imported {len(records)} LLMRouter records from {root}")
    training = train_pipeline(records, config, output_dir / "router")
    return run_evaluation(Path(training["checkpoint"]), records, "test", output_dir / "evaluation")


def named_data_dir(data_dir: Path | None) -> Path | None:
    """The folder the user named (--data-dir, else $FUGU_LITE_DATA_DIR), which must hold
    llmrouter/: a typo stops the demo, not skips the stage they asked for. None when none is
    named (the stage searches, downloads or is skipped)."""
    if data_dir is None and not os.environ.get(DATA_DIR_ENV):
        return None
    try:
        return resolve_data_dir(str(data_dir) if data_dir else None)
    except DataNotFoundError as error:
        raise DataNotFoundError(
            f"{error}; name the folder that holds llmrouter/ (e.g. ../shared/data), or "
            "pass --no-llmrouter"
        ) from error


def run_local_loop(
    pool_config: PoolConfig, tasks: list[Task], settings: DemoSettings, config: PipelineConfig
) -> dict:
    """Collect the local pool's rewards on `tasks`, train and evaluate on them."""
    from .collect.errors import CollectError
    from .collect.run import collect
    from .collect.sigterm import run_until_stopped
    from .collect.summary import end_of_run_lines, summary_table

    output_dir = settings.output / "local"
    console.rule("2/3 local pool: generate tasks, collect rewards, train, evaluate")
    write_tasks(output_dir / "tasks.jsonl", tasks)
    rewards_path = output_dir / "rewards.jsonl"
    summary = run_until_stopped(collect(pool_config, tasks, rewards_path))
    console.print(summary_table(summary))
    for line in end_of_run_lines(summary, pool_config):
        notes_console().print(line)
    if not summary.complete:
        raise CollectError(
            f"only {summary.records_total} of {summary.tasks} tasks were answered and graded by "
            "every worker (see the table and the lines after it); run the same command again "
            "(or `make demo`) to retry the rest"
        )
    records = records_of_tasks(read_records(rewards_path), tasks, rewards_path)
    training = train_pipeline(records, config, output_dir / "router")
    evaluation = run_evaluation(
        Path(training["checkpoint"]), records, "test", output_dir / "evaluation"
    )
    return {"checkpoint": training["checkpoint"], "evaluation": evaluation}


def records_of_tasks(
    records: list[RewardRecord], tasks: list[Task], rewards_path: Path
) -> list[RewardRecord]:
    """The records of this run's tasks: an -o that an earlier demo with more tasks per family
    filled holds others too, which its router would otherwise train and be evaluated on."""
    task_ids = {task.id for task in tasks}
    ours = [record for record in records if record.id in task_ids]
    if len(ours) < len(records):
        notes_console().print(
            f"note: {len(records) - len(ours)} records of {console_text(str(rewards_path))} "
            "answer tasks this run did not generate (an earlier --tasks-per-family); the "
            f"router trains and is evaluated on this run's {len(ours)} only"
        )
    return ours


def serve_and_ask(checkpoint: Path, pool_config: PoolConfig) -> list[dict]:
    """Start `fugu-lite serve` in-process on the local pool; ask through the openai SDK."""
    from .server.app import ServeSettings, create_app
    from .server.thread import ServerThread, local_openai_client

    console.rule("3/3 serve: the coordinator in front of the local pool, asked via openai")
    app = create_app(ServeSettings(checkpoint=checkpoint, port=0), pool_config=pool_config)
    with ServerThread(app) as running, local_openai_client(running.base_url) as client:
        answers = [_ask(client, question) for question in DEMO_QUESTIONS]
    console.print(answers_table(answers, running.base_url))
    return answers


def _ask(client: OpenAI, question: str) -> dict:
    """One demo question through the SDK: who answered (the server's header) and what."""
    from .server.responses import WORKER_HEADER

    raw = client.chat.completions.with_raw_response.create(
        model="fugu-lite",
        messages=[{"role": "user", "content": question}],
        max_tokens=64,
    )
    completion = raw.parse()
    return {
        "question": question,
        "worker": raw.headers.get(WORKER_HEADER, "?"),
        "answer": completion.choices[0].message.content or "",
    }


def answers_table(answers: list[dict], base_url: str) -> Table:
    table = Table(title=f"fugu-lite at {base_url}: who answered", show_lines=True)
    table.add_column("question", max_width=40)
    table.add_column("worker")
    table.add_column("answer", max_width=60)
    for answer in answers:
        cells = (answer["question"], answer["worker"], answer["answer"].strip()[:300])
        table.add_row(*(escape(cell) for cell in cells))  # a model's text is not markup
    return table
