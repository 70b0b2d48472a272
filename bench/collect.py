"""Reward collection: fugu-lite's own overhead per call, and how busy it keeps a local pool.

Run from the project root: `.venv/bin/python bench/collect.py`. Two parts, in one run:

1. Overhead, against the in-process OpenAI-compatible stub (real HTTP on 127.0.0.1, no
   latency): `WorkerPool.chat` (openai SDK, semaphore, retry loop, usage, cost, CallResult)
   against a raw `httpx` POST of the same request (JSON parsed, content read), the two
   interleaved in blocks. The overhead is the difference of the medians. Also the full
   collector's throughput on the stub (call + fsynced log line + grade + record).
2. Utilisation, against the embedded pool: three llama.cpp servers (SmolLM2-135M variants)
   answering generated tasks through `collect`. A server is busy while one of our requests
   is in flight (from the call log's start and end times); its utilisation is busy time over
   the span in which it had work (its first call's start to its last call's end). The
   variants write answers of different lengths, so they finish at different times; the
   fraction of the whole collection's wall time is printed too.

The last line is one JSON object with `overhead_ms_p50_vs_httpx` and `pool_utilisation`
(the lowest of the three servers' utilisations). When the local pool does not answer every
task (a server that will not stay up), part 1's figures are still printed and the line
says `failed`, with `pool_utilisation` null; the exit is 1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from itertools import pairwise
from pathlib import Path

import httpx
from bench_args import positive_int
from rich import box
from rich.console import Console
from rich.table import Table

from fugu_lite.cli.common import interrupts_stop_the_run
from fugu_lite.collect.journal import default_log_path
from fugu_lite.collect.run import collect
from fugu_lite.collect.summary import CollectSummary, end_of_run_lines
from fugu_lite.task_families import generate_tasks
from fugu_lite.tasks import Task
from fugu_lite.testing.stub_worker import StubWorker
from fugu_lite.workers.config import PoolConfig, embedded_pool_config
from fugu_lite.workers.pool import WorkerPool

os.environ.setdefault("HF_HUB_OFFLINE", "1")
console = Console(width=None if sys.stdout.isatty() else 140)  # full tables in logs
# the two sides of the overhead's timings, as the table names them
POOL = "fugu-lite WorkerPool.chat"
HTTPX = "raw httpx POST"
MESSAGES = [{"role": "user", "content": "What is 17 + 25? Answer with just the number."}]


# -- part 1: overhead on the stub ----------------------------------------------------------------


async def time_pool(pool: WorkerPool, n: int) -> list[float]:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        result = await pool.chat("stub", MESSAGES)
        times.append(time.perf_counter() - start)
        assert result.ok, result.error
    return times


async def time_httpx(client: httpx.AsyncClient, url: str, n: int) -> list[float]:
    body = {"model": "stub-model", "messages": MESSAGES}
    times = []
    for _ in range(n):
        start = time.perf_counter()
        response = await client.post(url, json=body, headers={"Authorization": "Bearer x"})
        response.raise_for_status()
        content = response.json()["choices"][0]["message"]["content"]
        times.append(time.perf_counter() - start)
        assert content
    return times


async def measure_overhead(stub: StubWorker, calls: int, block: int) -> dict[str, list[float]]:
    config = PoolConfig.model_validate(
        {"workers": [{"id": "stub", "model": "stub-model", "base_url": stub.base_url}]}
    )
    url = f"{stub.base_url}/chat/completions"
    timings: dict[str, list[float]] = {POOL: [], HTTPX: []}
    async with WorkerPool(config) as pool, httpx.AsyncClient(trust_env=False) as client:
        await time_pool(pool, 100)  # warm-up: connections, SDK and JSON code paths
        await time_httpx(client, url, 100)
        for index, size in enumerate(block_sizes(calls, block)):
            # Alternate which side goes first so drifts in machine load hit both alike.
            order = ["pool", "httpx"] if index % 2 == 0 else ["httpx", "pool"]
            for side in order:
                if side == "pool":
                    timings[POOL] += await time_pool(pool, size)
                else:
                    timings[HTTPX] += await time_httpx(client, url, size)
    return timings


def block_sizes(calls: int, block: int) -> list[int]:
    """Blocks of `block` calls that add up to `calls`, the last one shorter when `block` does
    not divide `calls`: `--calls 120 --block 50` timed 100 calls a side, under a title saying
    120, and `--calls 10` none at all."""
    return [block] * (calls // block) + ([calls % block] if calls % block else [])


def stub_throughput(stub: StubWorker, n_tasks: int, folder: Path) -> float:
    tasks = [
        Task(id=f"t{i}", prompt=f"What is {i} + 1?", answer=str(i + 1), grader="number",
             task="arithmetic")
        for i in range(n_tasks)
    ]  # fmt: skip
    config = PoolConfig.model_validate(
        {"workers": [{"id": "stub", "model": "stub-model", "base_url": stub.base_url,
                      "max_concurrency": 4}]}
    )  # fmt: skip
    start = time.perf_counter()
    summary = asyncio.run(collect(config, tasks, folder / "stub.jsonl", show_progress=False))
    elapsed = time.perf_counter() - start
    assert summary.complete
    return n_tasks / elapsed


# -- part 2: utilisation of a local pool ---------------------------------------------------------


def union_length(intervals: list[tuple[float, float]]) -> float:
    if not intervals:
        return 0.0
    ordered = sorted(intervals)
    total = 0.0
    current_start, current_end = ordered[0]
    for start, end in ordered[1:]:
        if start > current_end:
            total += current_end - current_start
            current_start, current_end = start, end
        else:
            current_end = max(current_end, end)
    return total + current_end - current_start


class LocalPoolFailure(RuntimeError):
    """The local pool left tasks unanswered, so part 2 has no utilisation to measure."""

    def __init__(self, summary: CollectSummary) -> None:
        self.workers = {
            worker.worker_id: worker.down or worker.call_error or "answered no call"
            for worker in summary.workers
            if worker.pending
        }
        super().__init__(
            f"the embedded pool answered {summary.records_total} of {summary.tasks} tasks "
            f"(failing: {', '.join(self.workers)}; why is said above)"
        )


def local_pool_run(n_per_family: int, folder: Path) -> tuple[dict[str, dict], float, int]:
    config = embedded_pool_config()
    tasks = [task for task in generate_tasks(n_per_family, seed=11) if task.grader != "code"]
    output = folder / "local.jsonl"
    start = time.perf_counter()
    summary = asyncio.run(collect(config, tasks, output, console=console))
    total_s = time.perf_counter() - start
    if not summary.complete:
        for line in end_of_run_lines(summary, config):
            console.print(line)
        raise LocalPoolFailure(summary)
    calls = [
        json.loads(line)
        for line in default_log_path(output).read_text().splitlines()
        if '"event":"call"' in line
    ]
    wall_start = min(call["started_at"] for call in calls)
    wall_end = max(call["finished_at"] for call in calls)
    per_worker: dict[str, dict] = {}
    for worker_id in config.worker_ids:
        intervals = [
            (call["started_at"], call["finished_at"])
            for call in calls
            if call["worker_id"] == worker_id
        ]
        busy = union_length(intervals)
        own_span = max(end for _, end in intervals) - min(start for start, _ in intervals)
        gaps = sorted(later[0] - earlier[1] for earlier, later in pairwise(sorted(intervals)))
        per_worker[worker_id] = {
            "calls": len(intervals),
            "busy_s": busy,
            "span_s": own_span,
            "utilisation": busy / own_span,
            "utilisation_of_wall": busy / (wall_end - wall_start),
            "gap_ms_p50": 1000 * statistics.median(gaps) if gaps else 0.0,
            "mean_call_s": busy / len(intervals),
        }
    return per_worker, total_s, len(tasks)


# -- report --------------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=positive_int, default=2000, help="Timed calls per side.")
    parser.add_argument("--block", type=positive_int, default=50)
    parser.add_argument("--stub-tasks", type=positive_int, default=400)
    parser.add_argument(
        "--tasks-per-family",
        type=positive_int,
        default=6,
        help="Generated tasks per family for the local pool (code excluded).",
    )
    args = parser.parse_args()

    # SIGTERM (`timeout`, a cancelled job) as a Ctrl-C, so that the folder is removed and the
    # collection winds down: by default it ends the script at once, leaving the folder.
    with (
        interrupts_stop_the_run(),
        tempfile.TemporaryDirectory(prefix="fugu-bench-collect-") as temporary,
    ):
        folder = Path(temporary)
        with StubWorker() as stub:
            timings = asyncio.run(measure_overhead(stub, args.calls, args.block))
            stub_cells_per_s = stub_throughput(stub, args.stub_tasks, folder)
        medians = {name: statistics.median(values) for name, values in timings.items()}
        overhead_ms = 1000 * (medians[POOL] - medians[HTTPX])
        print_overhead(timings, medians, args.calls)
        console.print(
            f"fugu-lite overhead, median: [bold]{overhead_ms:.3f} ms[/bold] per call "
            f"(target <= 2 ms) · full collector on the stub: {stub_cells_per_s:.0f} cells/s "
            f"({args.stub_tasks} tasks, 1 worker, concurrency 4, fsync per log line)"
        )
        part_1 = {
            "overhead_ms_p50_vs_httpx": round(overhead_ms, 3),
            "pool_p50_ms": round(1000 * medians[POOL], 3),
            "httpx_p50_ms": round(1000 * medians[HTTPX], 3),
            "stub_collect_cells_per_s": round(stub_cells_per_s, 1),
        }
        try:
            per_worker, total_s, n_tasks = local_pool_run(args.tasks_per_family, folder)
        except LocalPoolFailure as failure:
            console.print(f"[red]part 2 not measured:[/red] {failure}")
            line = {**part_1, "pool_utilisation": None, "failed": {"local_pool": failure.workers}}
            print(json.dumps(line))
            sys.exit(1)

    print_pool(per_worker, n_tasks)
    utilisation = min(stats["utilisation"] for stats in per_worker.values())
    cells = sum(stats["calls"] for stats in per_worker.values())
    console.print(
        f"pool utilisation (lowest server): [bold]{utilisation:.1%}[/bold] (target >= 90%) · "
        f"{cells / total_s:.2f} cells/s including server start-up ({total_s:.1f} s)"
    )
    part_2 = {
        "pool_utilisation": round(utilisation, 4),
        "pool_utilisation_of_wall_mean": round(
            statistics.mean(s["utilisation_of_wall"] for s in per_worker.values()), 4
        ),
        "local_cells_per_s": round(cells / total_s, 3),
        "local_tasks": n_tasks,
    }
    print(json.dumps({**part_1, **part_2}))


def print_overhead(timings: dict[str, list[float]], medians: dict[str, float], calls: int) -> None:
    table = Table(title=f"Per-call latency on the in-process stub ({calls} calls each)")
    for column in ("client", "p50 ms", "p90 ms", "p99 ms", "calls/s"):
        table.add_column(column, justify="left" if column == "client" else "right")
    for name, values in timings.items():
        table.add_row(
            name,
            f"{1000 * medians[name]:.3f}",
            f"{1000 * percentile(values, 0.9):.3f}",
            f"{1000 * percentile(values, 0.99):.3f}",
            f"{len(values) / sum(values):.0f}",
        )
    console.print(table)


def print_pool(per_worker: dict[str, dict], n_tasks: int) -> None:
    table = Table(
        title=f"Embedded local pool: {n_tasks} tasks x 3 llama.cpp workers",
        box=box.SIMPLE_HEAD,
        collapse_padding=True,
    )
    for column in ("worker", "calls", "call s", "busy s", "span s", "util.", "of wall",
                   "gap ms"):  # fmt: skip
        table.add_column(column, justify="left" if column == "worker" else "right", no_wrap=True)
    for worker_id, stats in per_worker.items():
        table.add_row(
            worker_id,
            str(stats["calls"]),
            f"{stats['mean_call_s']:.2f}",
            f"{stats['busy_s']:.1f}",
            f"{stats['span_s']:.1f}",
            f"{stats['utilisation']:.1%}",
            f"{stats['utilisation_of_wall']:.1%}",
            f"{stats['gap_ms_p50']:.2f}",
        )
    console.print(table)


if __name__ == "__main__":
    main()
