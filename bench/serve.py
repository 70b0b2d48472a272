"""`fugu-lite serve` overhead, throughput under load, and memory.

Run from the project root (offline):

    HF_HUB_OFFLINE=1 .venv/bin/python bench/serve.py

It trains a router on the default backbone (MiniLM, the shipped default config) over
generated records whose workers are one real llama.cpp worker (the shipped SmolLM2-135M
GGUF) and two in-process stub workers, then starts `fugu-lite serve` as a child process
(real uvicorn on 127.0.0.1) and measures:

(a) overhead: the same requests sent directly to the llama.cpp worker and through fugu-lite
    (allow-list = that worker, so the router still runs), interleaved so both see the same
    machine noise: p50 added latency (non-streaming) and added time to first token
    (streaming), beside the routing decision time fugu-lite reports for those requests.
    Target: added <= routing p50 + 5 ms.
(b) throughput: 32 concurrent clients for 60 s against the stub workers (fixed latency,
    to isolate fugu-lite) vs one client for 15 s: errors, p50/p95/p99 latency, requests/s,
    and the mean routing batch size. Target: no errors, >= 4x the single-client rate. Also
    32 clients for 20 s against a second server with batching off (--max-batch-size 1), to
    show what micro-batching contributes. The three runs are interleaved in slices (4
    rounds) so that they share the machine's background load.
(c) the server's peak RSS (VmHWM) with the default backbone loaded, after all of the above.

The very last line is one JSON object: added_latency_p50_ms, routing_p50_ms,
ttft_added_p50_ms, concurrency_speedup, errors, peak_rss_mb (and the details).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import openai
import yaml
from bench_args import non_negative_float, positive_float, positive_int
from rich.console import Console
from rich.table import Table

from fugu_lite.cli.common import interrupts_stop_the_run
from fugu_lite.config import PipelineConfig, SFTConfig
from fugu_lite.config_loading import DEFAULT_CONFIG, load_config
from fugu_lite.datasets import standard_split
from fugu_lite.schemas import RewardRecord
from fugu_lite.server.thread import local_openai_client
from fugu_lite.testing.stub_worker import StubWorker
from fugu_lite.text import console_text
from fugu_lite.train_sft import train_sft
from fugu_lite.workers.config import LocalServerConfig, WorkerConfig
from fugu_lite.workers.local_server import (
    LocalServer,
    free_port,
    how_it_ended,
    start_local_servers,
)

console = Console(stderr=True, width=120)
LLAMA = "smollm2"
STUBS = ["stub-fast", "stub-careful"]
WORKER_IDS = [LLAMA, *STUBS]
MODEL = "fugu-lite"
TEMP_PREFIX = "fugu-bench-serve-"  # the trained router and the pool file
TOPICS = {
    "arithmetic": (
        ["What is {a} + {b}?", "Compute {a} times {b}.", "Subtract {b} from {a}."],
        [1.0, 0.3, 0.5],
    ),
    "code": (
        [
            "Write a Python function that returns {a} squared.",
            "Fix this code: print({a} +)",
            "Explain the loop `for i in range({a})`.",
        ],
        [0.2, 1.0, 0.6],
    ),
    "writing": (
        [
            "Write a haiku about the number {a}.",
            "Summarise the story of {b} in a line.",
            "Give a title for an essay on {a} birds.",
        ],
        [0.4, 0.5, 1.0],
    ),
}
PROMPTS = [
    "What is 17 + 25?",
    "Write a Python function that returns 9 squared.",
    "Write a haiku about the number 4.",
    "Compute 12 times 3.",
]


def generated_records(n_per_topic: int, seed: int = 0) -> list[RewardRecord]:
    rng = random.Random(seed)
    records = []
    for topic, (templates, rewards) in TOPICS.items():
        for index in range(n_per_topic):
            prompt = rng.choice(templates).format(a=rng.randint(2, 999), b=rng.randint(2, 999))
            prompt = f"{prompt} (#{index})"
            noisy = [min(1.0, max(0.0, r + rng.uniform(-0.1, 0.1))) for r in rewards]
            records.append(
                RewardRecord(
                    prompt=prompt,
                    split=standard_split(prompt),
                    worker_ids=WORKER_IDS,
                    rewards=noisy,
                    task=topic,
                    id=f"{topic}-{index}",
                )
            )
    return records


def train_router(output: Path) -> Path:
    config = load_config(DEFAULT_CONFIG, PipelineConfig)
    console.print(f"training a router head on {config.model.backbone} (the default backbone)")
    report = train_sft(
        generated_records(120), SFTConfig(model=config.model, training=config.sft), output
    )
    return Path(report["checkpoint"])


# --- processes ---------------------------------------------------------------------------------


def start_llama() -> LocalServer:
    """The llama.cpp worker, answering; stopped again when it fails to start."""
    worker = WorkerConfig(
        id=LLAMA,
        model=LLAMA,
        local=LocalServerConfig(gguf="embedded:smollm2", n_ctx=512, n_threads=1),
    )
    return asyncio.run(start_local_servers([worker]))[LLAMA]


def write_pool(path: Path, llama_url: str, stubs: dict[str, StubWorker]) -> Path:
    workers: list[dict[str, Any]] = [
        {"id": LLAMA, "model": LLAMA, "base_url": llama_url, "max_concurrency": 1, "timeout_s": 60}
    ]
    workers += [
        {
            "id": worker,
            "model": worker,
            "base_url": stub.base_url,
            "max_concurrency": 64,
            "timeout_s": 30,
            "input_price_per_mtok": 0.1,
            "output_price_per_mtok": 0.2,
        }
        for worker, stub in stubs.items()
    ]
    path.write_text(yaml.safe_dump({"workers": workers}), encoding="utf-8")
    return path


@contextmanager
def fugu_server(checkpoint: Path, pool: Path, *extra: str) -> Iterator[tuple[str, int]]:
    """`fugu-lite serve` as a child process; yields (url, pid)."""
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "fugu_lite",
        "serve",
        "--checkpoint",
        str(checkpoint),
        "--pool",
        str(pool),
        "--port",
        str(port),
        "--log-level",
        "warning",
        *extra,
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    process = subprocess.Popen(command, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"fugu-lite serve exited with {process.returncode}")
            try:
                if httpx.get(f"{url}/health", timeout=1, trust_env=False).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("fugu-lite serve did not answer /health within 180 s")
            time.sleep(0.2)
        yield url, process.pid
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc (not Linux?)")


# --- (a) overhead over a direct call ----------------------------------------------------------


def unique(base: str, index: int, side: str, kind: int) -> str:
    """A prompt of its own for every call, all of one shape, the marker first: llama.cpp
    reuses the longest prefix it evaluated last, so with a shared start whoever went second
    would skip part of the prompt; with the marker first both sides evaluate it all."""
    return f"[{index:03d}{'d' if side == 'direct' else 'v'}{kind}] {base}"


def local_client(base_url: str) -> openai.OpenAI:
    """A client for a server this script started on 127.0.0.1, past the proxy, no retries."""
    return local_openai_client(base_url, api_key="none", max_retries=0)


def timed_call(client: openai.OpenAI, model: str, prompt: str, extra: dict) -> tuple[float, Any]:
    started = time.perf_counter()
    completion = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": prompt}],
        temperature=0.0,
        max_tokens=8,
        extra_body=extra or None,
    )
    return time.perf_counter() - started, completion


def timed_stream(client: openai.OpenAI, model: str, prompt: str, extra: dict) -> tuple[float, Any]:
    """Seconds to the first chunk carrying content; the first chunk (for its routing info)."""
    started = time.perf_counter()
    stream = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": prompt}],
        temperature=0.0,
        max_tokens=8,
        stream=True,
        extra_body=extra or None,
    )
    first, ttft = None, None
    for chunk in stream:
        first = first or chunk
        if ttft is None and chunk.choices and chunk.choices[0].delta.content:
            ttft = time.perf_counter() - started
    if ttft is None:
        raise RuntimeError(f"the stream for {prompt!r} carried no content")
    return ttft, first


def timed_side(
    client: openai.OpenAI, side: str, routed: dict, index: int, kind: int
) -> dict[str, float]:
    """One timed call of a pair (kind 0: non-streaming, 1: streaming), with fugu-lite's own
    routing figures when it went through fugu-lite."""
    model, extra = (LLAMA, {}) if side == "direct" else (MODEL, routed)
    prompt = unique(PROMPTS[index % len(PROMPTS)], index, side, kind)
    if kind == 0:
        seconds, completion = timed_call(client, model, prompt, extra)
        if side == "direct":
            return {"direct": seconds}
        routing = completion.model_extra["fugu"]
        return {
            "via": seconds,
            "routing": routing["routing_ms"] / 1000,
            "upstream": routing["attempts"][0]["latency_ms"] / 1000,
        }
    seconds, first = timed_stream(client, model, prompt, extra)
    if side == "direct":
        return {"ttft_direct": seconds}
    return {"ttft_via": seconds, "routing_stream": first.model_extra["fugu"]["routing_ms"] / 1000}


class LlamaWorkerDied(RuntimeError):
    """The llama.cpp worker's process exited while (a) was running."""


def measure_llama_overhead(llama: LocalServer, fugu_url: str, pairs: int) -> dict[str, Any]:
    """(a) against the llama.cpp worker; its process dying is said as that, with its log's
    last lines, not as the openai SDK's "Connection error." of the next call."""
    try:
        return measure_overhead(llama.base_url, fugu_url, pairs)
    except openai.APIError as error:
        if not llama.crashed:
            raise
        code = None if llama.process is None else llama.process.returncode
        raise LlamaWorkerDied(
            f"the llama.cpp worker ({LLAMA}) exited with {how_it_ended(code)} during (a), "
            f"so its call failed ({error}); check that llama-cpp-python answers a chat "
            f"request on this machine. The last lines of its log:\n{llama.log_tail()}"
        ) from error


def measure_overhead(llama_url: str, fugu_url: str, pairs: int) -> dict[str, Any]:
    """Pairs of the same request (same text but for the marker) sent directly and through
    fugu-lite back to back, alternating which goes first, all non-streaming pairs and then
    all streaming ones; the added latency of a pair is via - direct, and its median is the
    p50 added latency."""
    with local_client(llama_url) as direct, local_client(f"{fugu_url}/v1") as via:
        warmup = 3
        measured = run_pairs(direct, via, pairs + warmup)
    return {"pairs": pairs, **pair_figures(measured[warmup:], first_index=warmup)}


def run_pairs(direct: openai.OpenAI, via: openai.OpenAI, count: int) -> list[dict[str, float]]:
    """Each pair's timings (timed_side's figures of both sides, both kinds)."""
    routed = {"workers": [LLAMA], "include_routing": True}
    measured: list[dict[str, float]] = [{} for _ in range(count)]
    # One block per kind: llama-cpp-python answers any call that follows a streaming call
    # 25-30 ms slower (measured 2026-12-03), so mixing the kinds would make whichever call
    # of a pair came after a stream pay for it. In a block, both calls follow the same kind.
    for kind in (0, 1):  # 0: non-streaming, 1: streaming
        for index, figures in enumerate(measured):
            first_direct = index % 2 == 0  # neither side always goes first
            for side in ("direct", "via") if first_direct else ("via", "direct"):
                figures.update(
                    timed_side(direct if side == "direct" else via, side, routed, index, kind)
                )
    return measured


def pair_figures(measured: list[dict[str, float]], first_index: int) -> dict[str, float]:
    """The p50s of the pairs' timings and differences, and each order's; pair i (counted
    from first_index) went direct first when i is even."""
    keys = ("direct", "via", "added", "ttft_direct", "ttft_via", "ttft_added", "routing",
            "unexplained")  # fmt: skip
    rows: dict[str, list[float]] = {key: [] for key in keys}
    # Each order's pairs apart, to show any penalty the first (or second) call of a pair pays.
    by_order: dict[str, dict[str, list[float]]] = {
        key: {"direct_first": [], "via_first": []} for key in ("added", "ttft_added")
    }
    for index, figures in enumerate(measured, start=first_index):
        for key in ("direct", "via", "ttft_direct", "ttft_via"):
            rows[key].append(figures[key])
        rows["added"].append(figures["via"] - figures["direct"])
        rows["ttft_added"].append(figures["ttft_via"] - figures["ttft_direct"])
        order = "direct_first" if index % 2 == 0 else "via_first"
        for key in ("added", "ttft_added"):
            by_order[key][order].append(rows[key][-1])
        rows["routing"] += [figures["routing"], figures["routing_stream"]]
        rows["unexplained"].append(figures["via"] - figures["routing"] - figures["upstream"])
    p50 = {key: statistics.median(values) * 1000 for key, values in rows.items()}
    return {
        **latency_figures(p50),
        "difference_of_p50s_ms": p50["via"] - p50["direct"],
        "ttft_difference_of_p50s_ms": p50["ttft_via"] - p50["ttft_direct"],
        "via_minus_routing_minus_upstream_p50_ms": p50["unexplained"],
        **order_figures(by_order),
    }


def order_figures(by_order: dict[str, dict[str, list[float]]]) -> dict[str, float]:
    """Each order's p50 added latency, and their mean: the order-balanced estimate, which the
    first-call penalty cannot move (the pooled p50 of two clusters can land anywhere between)."""
    figures = {}
    for key, orders in by_order.items():
        medians = {order: statistics.median(values) * 1000 for order, values in orders.items()}
        for order, median in medians.items():
            figures[f"{key}_{order}_p50_ms"] = median
        figures[f"{key}_order_balanced_ms"] = sum(medians.values()) / len(medians)
    return figures


def measure_stub_overhead(stub: StubWorker, fugu_url: str, rounds: int) -> dict[str, Any]:
    """The same comparison against a stub worker that answers at once: no generation time,
    so the difference is fugu-lite's alone, without llama.cpp's run-to-run noise."""
    latency, stub.latency_s = stub.latency_s, 0.0
    try:
        return stub_overhead_rounds(stub.base_url, fugu_url, rounds)
    finally:
        stub.latency_s = latency


def stub_overhead_rounds(stub_url: str, fugu_url: str, rounds: int) -> dict[str, Any]:
    with local_client(stub_url) as direct, local_client(f"{fugu_url}/v1") as via:
        rows = stub_rounds(direct, via, rounds)
    p50 = {key: statistics.median(values) * 1000 for key, values in rows.items()}
    return latency_figures(p50)


def latency_figures(p50: dict[str, float]) -> dict[str, float]:
    """The p50s, in ms, that (a) reports against both the llama.cpp worker and the stub."""
    return {
        "direct_p50_ms": p50["direct"],
        "via_p50_ms": p50["via"],
        "added_latency_p50_ms": p50["added"],
        "ttft_direct_p50_ms": p50["ttft_direct"],
        "ttft_via_p50_ms": p50["ttft_via"],
        "ttft_added_p50_ms": p50["ttft_added"],
        "routing_p50_ms": p50["routing"],
    }


def stub_rounds(direct: openai.OpenAI, via: openai.OpenAI, rounds: int) -> dict[str, list[float]]:
    """Each round's timings, in seconds, after 5 rounds of warm-up."""
    routed = {"workers": [STUBS[0]], "include_routing": True}
    keys = ("direct", "via", "added", "ttft_direct", "ttft_via", "ttft_added", "routing")
    rows: dict[str, list[float]] = {key: [] for key in keys}
    for index in range(rounds + 5):
        prompt = unique(PROMPTS[index % len(PROMPTS)], index, "via", 0)
        direct_s, _ = timed_call(direct, STUBS[0], prompt, {})
        via_s, completion = timed_call(via, MODEL, prompt, routed)
        stream_direct_s, _ = timed_stream(direct, STUBS[0], prompt, {})
        stream_via_s, _ = timed_stream(via, MODEL, prompt, routed)
        if index >= 5:
            rows["direct"].append(direct_s)
            rows["via"].append(via_s)
            rows["added"].append(via_s - direct_s)
            rows["ttft_direct"].append(stream_direct_s)
            rows["ttft_via"].append(stream_via_s)
            rows["ttft_added"].append(stream_via_s - stream_direct_s)
            rows["routing"].append(completion.model_extra["fugu"]["routing_ms"] / 1000)
    return rows


# --- (b) throughput against the stubs --------------------------------------------------------


@dataclass
class LoadRun:
    """Requests of one kind of run, accumulated over the interleaved slices."""

    clients: int
    latencies: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0
    batch_sum: float = 0.0
    batch_count: float = 0.0

    def summary(self) -> dict[str, Any]:
        return {
            "clients": self.clients,
            "seconds": self.seconds,
            "requests": len(self.latencies),
            "errors": len(self.errors),
            "first_errors": self.errors[:3],
            "requests_per_s": len(self.latencies) / self.seconds if self.seconds else 0.0,
            **percentiles(self.latencies),
            "mean_routing_batch": self.batch_sum / self.batch_count if self.batch_count else 0.0,
        }


async def drive(fugu_url: str, run: LoadRun, seconds: float, seed: int) -> None:
    """`run.clients` clients, each sending its next request when the last one is answered."""
    deadline = time.perf_counter() + seconds
    rng = random.Random(seed)
    limits = httpx.Limits(max_connections=run.clients + 4, max_keepalive_connections=run.clients)
    async with httpx.AsyncClient(
        base_url=fugu_url, timeout=60, limits=limits, trust_env=False
    ) as http:
        before = batch_totals((await http.get("/metrics")).text)

        async def client_loop() -> None:
            while time.perf_counter() < deadline:
                prompt = rng.choice(PROMPTS) + f" ({rng.randint(0, 10**9)})"
                body = {
                    "model": MODEL,
                    "messages": [{"role": "user", "content": prompt}],
                    "workers": STUBS,
                }
                started = time.perf_counter()
                try:
                    response = await http.post("/v1/chat/completions", json=body)
                    if response.status_code != 200:
                        run.errors.append(f"HTTP {response.status_code}: {response.text[:200]}")
                        continue
                except httpx.HTTPError as error:
                    run.errors.append(f"{type(error).__name__}: {error}")
                    continue
                run.latencies.append(time.perf_counter() - started)

        started = time.perf_counter()
        await asyncio.gather(*(client_loop() for _ in range(run.clients)))
        run.seconds += time.perf_counter() - started
        after = batch_totals((await http.get("/metrics")).text)
    run.batch_sum += after[0] - before[0]
    run.batch_count += after[1] - before[1]


def measure_throughput(
    url: str, unbatched_url: str | None, args: argparse.Namespace
) -> tuple[LoadRun, LoadRun, LoadRun | None]:
    """Single client, 32 clients, and 32 clients against the batching-off server, in
    interleaved slices (round after round) so all three see the same background load."""
    single, loaded = LoadRun(1), LoadRun(args.clients)
    unbatched = LoadRun(args.clients) if unbatched_url else None
    for round_index in range(args.rounds):
        asyncio.run(drive(url, single, args.single_seconds / args.rounds, round_index))
        asyncio.run(drive(url, loaded, args.seconds / args.rounds, round_index))
        if unbatched is not None and unbatched_url is not None:
            asyncio.run(drive(unbatched_url, unbatched, args.unbatched_seconds / args.rounds, 0))
        console.print(
            f"  round {round_index + 1}/{args.rounds}: {len(single.latencies)} single, "
            f"{len(loaded.latencies)} concurrent requests so far"
        )
    return single, loaded, unbatched


def percentiles(latencies: list[float]) -> dict[str, float | None]:
    """None for a run that got no answer: NaN is no JSON, and the last line must be."""
    if not latencies:
        return {"p50_ms": None, "p95_ms": None, "p99_ms": None}
    ordered = sorted(latencies)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000

    return {"p50_ms": at(0.50), "p95_ms": at(0.95), "p99_ms": at(0.99)}


def batch_totals(metrics: str) -> tuple[float, float]:
    """(sum, count) of the server's routing batch-size histogram."""
    values = {}
    for line in metrics.splitlines():
        for name in ("fugu_routing_batch_size_sum", "fugu_routing_batch_size_count"):
            if line.startswith(name + " "):
                values[name] = float(line.split()[1])
    return (
        values.get("fugu_routing_batch_size_sum", 0.0),
        values.get("fugu_routing_batch_size_count", 0.0),
    )


# --- report -----------------------------------------------------------------------------------


def print_tables(
    overhead: dict, stub_overhead: dict, single: dict, loaded: dict, unbatched: dict | None
) -> None:
    print_overhead_table(overhead, stub_overhead)
    print_order_split(overhead)
    print_load_table(single, loaded, unbatched)


def print_overhead_table(overhead: dict, stub_overhead: dict) -> None:
    """(a): each worker's direct and via figures, non-streaming and time to first token."""
    table = Table(title="(a) overhead over a direct call to the same worker (p50, ms)")
    for column in ("", "direct", "via fugu-lite", "added (p50 of pairs)", "routing p50", "target"):
        table.add_column(column, justify="right")
    for name, figures in (("llama.cpp", overhead), ("stub, instant", stub_overhead)):
        target = figures["routing_p50_ms"] + 5
        table.add_row(
            f"{name}: non-streaming",
            f"{figures['direct_p50_ms']:.1f}",
            f"{figures['via_p50_ms']:.1f}",
            f"{figures['added_latency_p50_ms']:.1f}",
            f"{figures['routing_p50_ms']:.1f}",
            f"<= {target:.1f}",
        )
        table.add_row(
            f"{name}: time to first token",
            f"{figures['ttft_direct_p50_ms']:.1f}",
            f"{figures['ttft_via_p50_ms']:.1f}",
            f"{figures['ttft_added_p50_ms']:.1f}",
            f"{figures['routing_p50_ms']:.1f}",
            f"<= {target:.1f}",
        )
    console.print(table)


def print_order_split(overhead: dict) -> None:
    """(a) on llama.cpp, each order's p50 added latency (for information)."""
    for key, label in (("added", "non-streaming"), ("ttft_added", "time to first token")):
        console.print(
            f"llama.cpp, {label}, added p50 by which side went first: direct "
            f"{overhead[f'{key}_direct_first_p50_ms']:.1f}, via "
            f"{overhead[f'{key}_via_first_p50_ms']:.1f} -> order-balanced "
            f"{overhead[f'{key}_order_balanced_ms']:.1f} ms (information; the target uses the "
            "p50 of all pairs)"
        )


def print_load_table(single: dict, loaded: dict, unbatched: dict | None) -> None:
    """(b): the load runs."""
    table = Table(title="(b) routed requests against the stub workers")
    for column in (
        "run",
        "clients",
        "s",
        "requests",
        "errors",
        "req/s",
        "p50 ms",
        "p95 ms",
        "p99 ms",
        "mean batch",
    ):
        table.add_column(column, justify="right")
    runs = [("single client", single), (f"{loaded['clients']} clients", loaded)]
    if unbatched is not None:
        runs.append((f"{unbatched['clients']} clients, batching off", unbatched))
    for name, run in runs:
        table.add_row(
            name,
            str(run["clients"]),
            f"{run['seconds']:.0f}",
            str(run["requests"]),
            str(run["errors"]),
            f"{run['requests_per_s']:.1f}",
            *(one_decimal(run[key]) for key in ("p50_ms", "p95_ms", "p99_ms")),
            f"{run['mean_routing_batch']:.1f}",
        )
    console.print(table)


def one_decimal(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def main() -> None:
    args = parse_arguments()
    # SIGTERM (`timeout`, a cancelled job) as a Ctrl-C, so that the servers are stopped and
    # the folder removed: by default it ends the script at once, orphaning them.
    with interrupts_stop_the_run():
        try:
            measured = run_measurements(args)
        except LlamaWorkerDied as error:
            console.print(f"[red]error:[/red] {console_text(str(error))}", highlight=False)
            sys.exit(1)
    print_tables(
        measured.overhead,
        measured.stub_overhead,
        measured.single,
        measured.loaded,
        measured.unbatched,
    )
    print(json.dumps(result_line(measured, args.stub_latency_ms)))


def pair_count(text: str) -> int:
    """An argparse type for --pairs: at least 2, since (a) reports each order's p50 (direct
    first, via first) and the pairs alternate orders; --pairs 1 had no direct-first pair and
    failed on an empty median after every pair had run."""
    pairs = positive_int(text)
    if pairs < 2:
        raise argparse.ArgumentTypeError(
            f"must be at least 2 (a pair of each order, direct first and via first), got {pairs}"
        )
    return pairs


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=pair_count, default=60, help="Direct/via pairs in (a).")
    parser.add_argument("--clients", type=positive_int, default=32)
    parser.add_argument(
        "--seconds", type=positive_float, default=60.0, help="Length of the 32-client run."
    )
    parser.add_argument("--single-seconds", type=positive_float, default=15.0)
    parser.add_argument(
        "--rounds", type=positive_int, default=4, help="Slices the load runs are interleaved in."
    )
    parser.add_argument(
        "--unbatched-seconds",
        type=non_negative_float,
        default=20.0,
        help="Length of the batching-off run (0 skips it).",
    )
    parser.add_argument(
        "--stub-latency-ms",
        type=non_negative_float,
        default=50.0,
        help="Each stub answer's fixed latency.",
    )
    return parser.parse_args()


@dataclass
class Measured:
    """What the run measured: (a)'s overheads, (b)'s load runs, the server's peak memory."""

    overhead: dict[str, Any]
    stub_overhead: dict[str, Any]
    single: dict
    loaded: dict
    unbatched: dict | None
    rss_mb: float


def run_measurements(args: argparse.Namespace) -> Measured:
    """Train the router, start the workers and the servers, measure (a) and (b), and stop
    everything this started, whatever happens (training and starting them included)."""
    with contextlib.ExitStack() as started:
        root = Path(
            started.enter_context(
                tempfile.TemporaryDirectory(prefix=TEMP_PREFIX, ignore_cleanup_errors=True)
            )
        )
        checkpoint = train_router(root / "router")
        stubs = {
            worker: started.enter_context(
                StubWorker(
                    reply=f"answer from {worker}",
                    latency_s=args.stub_latency_ms / 1000,
                    model=worker,
                )
            )
            for worker in STUBS
        }
        console.print("starting the llama.cpp worker (SmolLM2-135M, 1 thread)")
        llama = start_llama()
        started.callback(llama.stop)
        pool = write_pool(root / "pool.yaml", llama.base_url, stubs)
        url, pid = started.enter_context(fugu_server(checkpoint, pool))
        unbatched_url = None
        if args.unbatched_seconds > 0:
            unbatched_url, _ = started.enter_context(
                fugu_server(checkpoint, pool, "--max-batch-size", "1")
            )
        console.print(f"(a) {args.pairs} direct/via pairs (non-streaming and streaming)")
        overhead = measure_llama_overhead(llama, url, args.pairs)
        stub_overhead = measure_stub_overhead(stubs[STUBS[0]], url, 100)
        console.print(
            f"(b) in {args.rounds} rounds: 1 client for {args.single_seconds:g} s, "
            f"{args.clients} clients for {args.seconds:g} s, {args.clients} clients with "
            f"batching off for {args.unbatched_seconds:g} s (stub latency "
            f"{args.stub_latency_ms:g} ms)"
        )
        runs = measure_throughput(url, unbatched_url, args)
        single, loaded = runs[0].summary(), runs[1].summary()
        unbatched = runs[2].summary() if runs[2] is not None else None
        rss = peak_rss_mb(pid)
    return Measured(overhead, stub_overhead, single, loaded, unbatched, rss)


def result_line(measured: Measured, stub_latency_ms: float) -> dict:
    """The last line's figures and targets; the speedup and peak memory are printed too."""
    overhead, single, loaded, unbatched = (
        measured.overhead,
        measured.single,
        measured.loaded,
        measured.unbatched,
    )
    # None when the single client got no answer (every request failed, or a slice too short)
    speedup = (
        loaded["requests_per_s"] / single["requests_per_s"] if single["requests_per_s"] else None
    )
    errors = single["errors"] + loaded["errors"] + (unbatched["errors"] if unbatched else 0)
    target = overhead["routing_p50_ms"] + 5
    said = "not measured: the single client got no answer" if speedup is None else f"{speedup:.1f}x"
    console.print(f"concurrency speedup {said}; server peak RSS {measured.rss_mb:.0f} MB")
    return {
        "added_latency_p50_ms": round(overhead["added_latency_p50_ms"], 2),
        "routing_p50_ms": round(overhead["routing_p50_ms"], 2),
        "ttft_added_p50_ms": round(overhead["ttft_added_p50_ms"], 2),
        "concurrency_speedup": None if speedup is None else round(speedup, 2),
        "errors": errors,
        "peak_rss_mb": round(measured.rss_mb, 1),
        "targets_met": {
            "added_latency": overhead["added_latency_p50_ms"] <= target,
            "ttft_added": overhead["ttft_added_p50_ms"] <= target,
            "concurrency_speedup": speedup is not None and speedup >= 4,
            "no_errors": errors == 0,
        },
        "overhead": {
            key: round(value, 2) if isinstance(value, float) else value
            for key, value in overhead.items()
        },
        "overhead_stub_worker": {
            key: round(value, 2) for key, value in measured.stub_overhead.items()
        },
        "single_client": single,
        "concurrent": loaded,
        "concurrent_unbatched": unbatched,
        "stub_latency_ms": stub_latency_ms,
        "cpu_count": os.cpu_count(),
    }


if __name__ == "__main__":
    main()
