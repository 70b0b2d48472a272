"""The bench scripts as a user runs them: a wrong option or data folder is one clear line
before any work starts, not a traceback minutes in."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import openai
import pytest
from rich.console import Console

from fugu_lite.config import ModelConfig
from fugu_lite.datasets import DATA_DIR_ENV
from fugu_lite.datasets import data_dir as data_dir_module
from fugu_lite.datasets.llmrouter import LLMROUTER_FILES
from fugu_lite.testing.stub_worker import StubWorker
from fugu_lite.threads import THREAD_VARIABLES

BENCH = Path(__file__).resolve().parent.parent / "bench"


def bench_script(name: str, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """bench/<name>.py as a module (named bench_<name>: `quality` or `es` alone could be
    another package's), with bench/ importable as it is when the script runs."""
    monkeypatch.syspath_prepend(str(BENCH))
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def run_main(
    name: str, arguments: list[str], monkeypatch: pytest.MonkeyPatch
) -> pytest.ExceptionInfo[SystemExit]:
    module = bench_script(name, monkeypatch)
    monkeypatch.setattr(sys, "argv", [f"{name}.py", *arguments])
    with pytest.raises(SystemExit) as exited:
        module.main()
    return exited


@pytest.mark.parametrize("name", ["quality", "es", "cost", "threads"])
def test_a_bench_script_names_a_missing_data_folder_in_one_line(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """`--data-dir` pointing at a folder without llmrouter/ ended in a DataNotFoundError
    traceback; it is a usage error naming the folder."""
    for variable in (*THREAD_VARIABLES, DATA_DIR_ENV):
        monkeypatch.delenv(variable, raising=False)  # threads.py refuses a thread variable
    exited = run_main(name, ["--data-dir", str(tmp_path)], monkeypatch)
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert f"--data-dir points to {tmp_path}, which has no llmrouter/ folder" in error
    assert "Traceback" not in error


def test_collect_times_as_many_calls_as_calls_says(monkeypatch: pytest.MonkeyPatch) -> None:
    """`--calls 7 --block 5` timed 5 calls a side under a title saying 7 (and `--calls 3`
    none, ending in a StatisticsError); every call asked for is timed."""
    collect = bench_script("collect", monkeypatch)
    with StubWorker() as stub:
        timings = asyncio.run(collect.measure_overhead(stub, 7, 5))
    assert {side: len(values) for side, values in timings.items()} == {
        collect.POOL: 7,
        collect.HTTPX: 7,
    }


@pytest.mark.parametrize("option", ["--calls", "--block", "--stub-tasks", "--tasks-per-family"])
def test_collect_refuses_a_count_below_one_before_it_starts(
    option: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """`--block 0` was a ZeroDivisionError, `--tasks-per-family 0` a ValueError after the
    stub part's runs; a count below 1 is a usage error naming the option."""
    exited = run_main("collect", [option, "0"], monkeypatch)
    assert exited.value.code == 2
    assert f"argument {option}: must be at least 1, got 0" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("backbones", "said"),
    [
        ("minilm,minlm", "backbone(s) ['minlm'] are not embedded (minilm, smollm2)"),
        (",", "names no backbone: ','"),
    ],
)
def test_quality_refuses_backbones_it_cannot_run_before_any_training(
    backbones: str,
    said: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    """A misspelt backbone failed only when its turn came, after the others had trained (their
    figures lost), and an empty list ended in a StopIteration; both are usage errors before
    the data is read."""
    exited = run_main(
        "quality", ["--backbones", backbones, "--data-dir", str(tmp_path)], monkeypatch
    )
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert f"argument --backbones: {said}" in error
    assert "llmrouter/" not in error  # refused before the data folder is looked at


def test_threads_refuses_zero_repeats_before_it_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """`--repeats 0` read the data and built every workload, then failed on a KeyError with
    no median to compare; it is a usage error before the data is read."""
    for variable in THREAD_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    exited = run_main("threads", ["--repeats", "0", "--data-dir", str(tmp_path)], monkeypatch)
    assert exited.value.code == 2
    assert "argument --repeats: must be at least 1, got 0" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("option", "value", "said"),
    [
        ("--pairs", "0", "must be at least 1, got 0"),
        ("--pairs", "1", "must be at least 2 (a pair of each order"),
        ("--clients", "0", "must be at least 1, got 0"),
        ("--rounds", "0", "must be at least 1, got 0"),
        ("--seconds", "0", "must be above 0, got 0"),
        ("--single-seconds", "-1", "must be above 0, got -1"),
        ("--unbatched-seconds", "-5", "must be at least 0, got -5"),
        ("--stub-latency-ms", "nan", "expected a finite number, got 'nan'"),
    ],
)
def test_serve_refuses_counts_and_lengths_it_cannot_run(
    option: str,
    value: str,
    said: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    """`--rounds 0` or `--single-seconds 0` trained a router and started llama.cpp and the
    servers, to fail minutes later on a division by zero (`--pairs 1` on an empty median:
    no direct-first pair); they are usage errors at once."""
    serve = bench_script("serve", monkeypatch)
    monkeypatch.setattr(sys, "argv", ["serve.py", option, value])
    with pytest.raises(SystemExit) as exited:
        serve.parse_arguments()
    assert exited.value.code == 2
    assert f"argument {option}: {said}" in capsys.readouterr().err
    monkeypatch.setattr(sys, "argv", ["serve.py", "--unbatched-seconds", "0"])  # 0 skips it
    assert serve.parse_arguments().unbatched_seconds == 0


def touch_files(root: Path, names: Sequence[str]) -> None:
    for name in names:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).touch()


def test_speed_refuses_a_data_folder_given_by_hand_without_the_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """`--data-dir` with a typo measured quality on synthetic prompts without a word but the
    report's source line; a folder given by hand must hold llmrouter/ (or --synthetic says
    synthetic prompts are meant). Without --data-dir a missing default still means synthetic."""
    speed = bench_script("speed", monkeypatch)
    with pytest.raises(SystemExit) as exited:
        speed.parse_arguments(["--data-dir", str(tmp_path)])
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert f"--data-dir points to {tmp_path}, which has no llmrouter/ folder inside" in error
    assert "--synthetic" in error
    missing = tmp_path / "shared" / "dta"  # a typo: named as missing, not as lacking llmrouter/
    with pytest.raises(SystemExit):
        speed.parse_arguments(["--data-dir", str(missing)])
    error = capsys.readouterr().err
    assert f"--data-dir points to {missing}, which does not exist; give the folder" in error
    assert speed.parse_arguments(["--data-dir", str(tmp_path), "--synthetic"]).synthetic
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)  # and no data anywhere fugu-lite looks
    monkeypatch.setattr(data_dir_module, "default_search_paths", lambda: [tmp_path])
    monkeypatch.setenv("FUGU_LITE_CACHE_DIR", str(tmp_path / "cache"))
    assert speed.parse_arguments([]).data_dir == str(speed.DEFAULT_DATA_DIR)
    touch_files(tmp_path / "llmrouter", LLMROUTER_FILES)
    assert speed.parse_arguments(["--data-dir", str(tmp_path)]).data_dir == str(tmp_path)


@pytest.mark.parametrize("option", ["--reps", "--threads", "--quality-prompts", "--train-rows"])
def test_speed_refuses_a_count_below_one(
    option: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """`--reps 0` (an empty median) or `--threads 0` (torch refuses it) failed inside each
    backbone's child process after the parent had started it; they are usage errors."""
    speed = bench_script("speed", monkeypatch)
    with pytest.raises(SystemExit) as exited:
        speed.parse_arguments([option, "0"])
    assert exited.value.code == 2
    assert f"argument {option}: must be at least 1, got 0" in capsys.readouterr().err


def test_serve_names_the_load_runs_by_their_clients(monkeypatch: pytest.MonkeyPatch) -> None:
    """With `--clients 8` the (b) table still named its rows "32 clients" beside a clients
    column of 8; a row is named by the clients it ran with."""
    serve = bench_script("serve", monkeypatch)
    printed = io.StringIO()
    monkeypatch.setattr(serve, "console", Console(file=printed, width=140))
    run = {"seconds": 3.0, "requests": 10, "errors": 0, "requests_per_s": 3.3, "p50_ms": 1.0,
           "p95_ms": 2.0, "p99_ms": 3.0, "mean_routing_batch": 1.0}  # fmt: skip
    serve.print_load_table({**run, "clients": 1}, {**run, "clients": 8}, {**run, "clients": 8})
    table = printed.getvalue()
    assert "8 clients " in table
    assert "8 clients, batching off" in table
    assert "32 clients" not in table


def test_speed_quality_finds_no_difference_between_two_exact_paths(
    tiny_backbone, tiny_model_cfg, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fp32 routing path on torch cuts the same hidden state the plain forward returns: on
    synthetic prompts their features, choices and rewards must come out the same."""
    speed = bench_script("speed", monkeypatch)
    cfg = tiny_model_cfg.model_copy(update={"layer": 3, "runtime": "torch"})
    options = argparse.Namespace(data_dir=str(tmp_path), synthetic=True, synthetic_prompts=12)
    plain = speed.plain_hf_model(tiny_backbone)
    quality = speed.measure_quality(tiny_backbone, plain, cfg, options)
    assert quality["source"] == "12 synthetic prompts, synthetic 0/1 rewards"
    assert quality["prompts"] == 12
    assert quality["head"] == "random linear"
    assert quality["max_abs_feature"] > 0
    assert quality["max_abs_feature_diff"] <= 1e-5 * quality["max_abs_feature"]
    assert quality["agreement"] == quality["random_head_agreement"] == 1.0
    assert quality["reward_routing"] == quality["reward_plain"]
    assert quality["quality_delta"] == 0
    assert 1 <= quality["head_distinct_choices"] <= speed.N_WORKERS
    assert quality["reward_routing"] <= quality["oracle"]
    assert quality["best_single"] <= quality["oracle"]
    assert "quality_delta_se" not in quality


def tiny_backbone_run(
    speed: ModuleType, tiny_model_cfg: ModelConfig, monkeypatch: pytest.MonkeyPatch
) -> dict:
    """A child's figures: run_backbone on the tiny backbone (layer 3 on torch), a few reps."""
    cfg = tiny_model_cfg.model_copy(update={"layer": 3, "runtime": "torch"})
    monkeypatch.setattr(speed, "settings_for", lambda name: (cfg, "test choice"))
    options = argparse.Namespace(
        threads=1, reps=3, warmup=1, throughput_prompts=5, data_dir="", synthetic=True,
        synthetic_prompts=6, train_rows=100,
    )  # fmt: skip
    return speed.run_backbone("tiny-random", options)


def test_speed_reports_what_one_backbone_run_measured(
    tiny_model_cfg, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A child's figures (run_backbone on the tiny backbone, a few reps) hold everything the
    report and its JSON line read: each section timed in order, each table printed."""
    speed = bench_script("speed", monkeypatch)
    result = tiny_backbone_run(speed, tiny_model_cfg, monkeypatch)
    assert list(result["sections_s"]) == [
        "load backbone",
        "routing runtime (export or load)",
        "make prompts",
        "routing warm-up, load plain model",
        "latency",
        "feature throughput",
        "quality",
        "training throughput",
    ]
    assert result["blocks_run"] == 3 < result["n_layers"]
    assert result["runtime"] == "torch"
    assert [figures["reps"] for figures in result["latency"].values()] == [3, 3]
    assert result["throughput"]["prompts"] == 5
    assert result["quality"]["prompts"] == 6
    assert result["training"]["rows"] == 100
    assert result["routing_only_peak_rss_mb"] <= result["peak_rss_mb"]
    printed = io.StringIO()
    wall = {"children": {"tiny-random": 1.0}, "total": 1.0, "load_before": "0", "load_after": "0"}
    speed.print_report(
        Console(file=printed, width=140), {"tiny-random": result}, "tiny-random", wall
    )
    report = printed.getvalue()
    assert "tiny-random (default)" in report
    assert "Target for the default backbone (tiny-random): " in report
    assert "Only 3 timed reps per latency figure: a smoke run." in report
    assert speed.summary(result)["runtime"] == "torch"


@pytest.mark.parametrize(
    ("speedup", "delta", "missed"),
    [(1.9996, 0.001, "speedup"), (2.5, 0.00504, "quality"), (2.5, -0.00504, "quality")],
)
def test_speed_target_table_agrees_with_the_headline_at_the_rounding_edge(
    speedup: float, delta: float, missed: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Target table judged the rounded figures (a 1.9996x speedup shows as 2.000, a
    0.00504 delta as 0.0050) and said MET while the line below it and the JSON line's
    target_met said MISSED; both now judge the measured figures."""
    speed = bench_script("speed", monkeypatch)
    latency = {"speedup_p50": speedup, "routing_p50_ms": 1.0, "plain_p50_ms": speedup,
               "torch_routing_speedup_p50": 1.5, "work_ratio": 2.0, "reps": 30}  # fmt: skip
    result = {"latency": {"256": latency}, "quality": {"quality_delta": delta},
              "peak_rss_mb": 100.0, "runtime": "onnx"}  # fmt: skip
    printed = io.StringIO()
    console = Console(file=printed, width=140)
    console.print(speed.target_table({"minilm": result}, "minilm"))
    speed.print_headline(console, {"minilm": result}, "minilm")
    report = printed.getvalue()
    assert f"MISSED ({missed})" in report
    assert " MET " not in report
    assert "Target for the default backbone (minilm): MISSED" in report
    assert speed.summary(result)["target_met"] is False


def test_speed_refuses_a_negative_warmup(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """`--warmup -3` was taken as no warm-up at all (the first, cold reps timed) though the
    options say it may be 0, not below; it is a usage error, and 0 still skips the warm-up."""
    speed = bench_script("speed", monkeypatch)
    with pytest.raises(SystemExit) as exited:
        speed.parse_arguments(["--warmup", "-3"])
    assert exited.value.code == 2
    assert "argument --warmup: must be at least 0, got -3" in capsys.readouterr().err
    assert speed.parse_arguments(["--warmup", "0", "--synthetic"]).warmup == 0


def test_speed_names_the_llmrouter_files_a_data_folder_lacks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """An llmrouter/ folder without its files (a copy cut short) passed the check, and each
    backbone's child failed with a traceback minutes in, when quality read the data; the
    missing files are now a usage error before any child starts."""
    speed = bench_script("speed", monkeypatch)
    root = tmp_path / "llmrouter"
    touch_files(root, LLMROUTER_FILES[:2])
    with pytest.raises(SystemExit) as exited:
        speed.parse_arguments(["--data-dir", str(tmp_path)])
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert f"{root} lacks {LLMROUTER_FILES[2]}" in error
    assert LLMROUTER_FILES[-1] in error
    assert LLMROUTER_FILES[0] not in error
    assert speed.parse_arguments(["--data-dir", str(tmp_path), "--synthetic"]).synthetic
    touch_files(root, LLMROUTER_FILES[2:])
    assert speed.parse_arguments(["--data-dir", str(tmp_path)]).data_dir == str(tmp_path)


def test_speed_finds_the_data_folder_as_fugu_lite_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """speed.py read only --data-dir or ../shared/data: with the data named by
    $FUGU_LITE_DATA_DIR (which every other fugu-lite command reads) quality was measured on
    synthetic prompts without a word but the report's source line. It now finds the folder as
    resolve_data_dir does (--data-dir first), and a variable naming a folder without
    llmrouter/ is a usage error, as a --data-dir is."""
    speed = bench_script("speed", monkeypatch)
    named, given = tmp_path / "named", tmp_path / "given"
    touch_files(named / "llmrouter", LLMROUTER_FILES)
    touch_files(given / "llmrouter", LLMROUTER_FILES)
    monkeypatch.setenv(DATA_DIR_ENV, str(named))
    assert speed.parse_arguments([]).data_dir == str(named.resolve())
    assert speed.parse_arguments(["--data-dir", str(given)]).data_dir == str(given)
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "typo"))
    with pytest.raises(SystemExit) as exited:
        speed.parse_arguments([])
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert f"{DATA_DIR_ENV} points to {tmp_path / 'typo'}, which does not exist" in error
    assert "--synthetic" in error
    assert speed.parse_arguments(["--synthetic"]).synthetic


def test_speed_says_why_a_child_failed_with_the_tail_of_its_stderr(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture
) -> None:
    """A child's stderr goes on to the terminal as it comes (its progress bars), and its last
    lines are kept to say why it failed."""
    speed = bench_script("speed", monkeypatch)
    script = (
        "import sys; print('progress 1/2'); "
        "sys.stderr.write('loading\\n' * 50 + 'Traceback\\nRuntimeError: out of memory\\n'); "
        "sys.exit(3)"
    )
    exit_code, tail = speed.run_child([sys.executable, "-c", script], env=None)
    assert exit_code == 3
    assert tail.splitlines()[-2:] == ["Traceback", "RuntimeError: out of memory"]
    assert len(tail.splitlines()) == speed.STDERR_TAIL_LINES
    passed_on = capfd.readouterr().err
    assert "progress 1/2" in passed_on
    assert "RuntimeError: out of memory" in passed_on


def test_speed_says_a_child_that_exited_0_without_figures_wrote_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A child that exited 0 but left no figures (none written, or a torn file) was said to
    have 'failed (exit 0)', its error the last line it wrote to stderr (a progress line of a
    run that went well); it is now said to have written no figures."""
    speed = bench_script("speed", monkeypatch)
    failure = speed.ChildFailure(0, "loading\nmeasured 12/12\n")
    assert failure.described("minilm") == (
        "the minilm benchmark failed (exit 0, but it wrote no figures)"
    )
    assert failure.error() == "it exited 0 but wrote no figures"
    assert speed.ChildFailure(3, "RuntimeError: out of memory\n").error() == (
        "RuntimeError: out of memory"
    )


@pytest.mark.parametrize("failing", ["smollm2", "minilm"])
def test_speed_keeps_what_was_measured_when_one_backbones_child_fails(
    failing: str,
    tiny_model_cfg,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture,
) -> None:
    """One child failing (a backbone out of memory, minutes into the run) ended the script
    with a traceback: the other backbone's figures, measured already, were lost, and no JSON
    line came. The failure is now named with its stderr's last lines, every figure measured
    is printed, and the JSON line holds them and `failed`; the exit is not 0."""
    speed = bench_script("speed", monkeypatch)
    measured = tmp_path / "measured.json"
    measured.write_text(json.dumps(tiny_backbone_run(speed, tiny_model_cfg, monkeypatch)))

    def child_command(name: str, out: Path, options: argparse.Namespace) -> list[str]:
        if name == failing:
            fail = "import sys; sys.stderr.write('RuntimeError: out of memory\\n'); sys.exit(3)"
            return [sys.executable, "-c", fail]
        copy = f"import shutil; shutil.copy({str(measured)!r}, {str(out)!r})"
        return [sys.executable, "-c", copy]

    monkeypatch.setattr(speed, "child_command", child_command)
    default = speed.load_config(speed.DEFAULT_CONFIG, speed.PipelineConfig).model.backbone
    measured_name = "minilm" if failing == "smollm2" else "smollm2"
    with pytest.raises(SystemExit) as exited:
        speed.main(["--synthetic"])
    assert exited.value.code == 1
    out, err = capfd.readouterr()
    line = json.loads(out.strip().splitlines()[-1])
    assert list(line["per_backbone"]) == [measured_name]
    assert line["failed"] == {failing: {"exit_code": 3, "error": "RuntimeError: out of memory"}}
    assert line["backbone"] == default
    assert ("speedup" in line) == (failing != default)
    if failing == default:
        assert line["target_met"] is False
        assert f"Target for the default backbone ({default}): not measured" in out
    assert "Routing decision latency" in out and measured_name in out
    said = out + err
    assert f"the {failing} benchmark failed (exit 3)" in said
    assert "RuntimeError: out of memory" in said
    assert "Traceback" not in err


def test_collect_keeps_part_1_when_the_local_pool_fails(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """A llama.cpp server that would not stay up (it crashed on every request) ended the
    script in an AssertionError holding the whole summary's repr: part 1's overhead,
    measured already, was lost and no JSON line came. Part 1's figures are now kept, the
    failing workers named, and the line says `failed`; the exit is 1."""
    collect = bench_script("collect", monkeypatch)
    with StubWorker(mode="401") as refusing:
        pool = collect.PoolConfig.model_validate(
            {"workers": [{"id": "local-a", "model": "m", "base_url": refusing.base_url}]}
        )
        monkeypatch.setattr(collect, "embedded_pool_config", lambda: pool)
        arguments = ["--calls", "2", "--block", "1", "--stub-tasks", "2", "--tasks-per-family", "1"]
        monkeypatch.setattr(sys, "argv", ["collect.py", *arguments])
        with pytest.raises(SystemExit) as exited:
            collect.main()
    assert exited.value.code == 1
    out = capsys.readouterr().out
    line = json.loads(out.strip().splitlines()[-1])
    assert line["overhead_ms_p50_vs_httpx"] == pytest.approx(
        line["pool_p50_ms"] - line["httpx_p50_ms"], abs=0.002
    )
    assert line["pool_utilisation"] is None
    assert list(line["failed"]["local_pool"]) == ["local-a"]
    assert "part 2 not measured: the embedded pool answered 0 of" in out


def process_ended(pid: int) -> bool:
    """Gone, or a zombie its new parent has not reaped yet."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="busy_cores loads a second CPU")
def test_threads_busy_loops_end_when_the_bench_is_terminated() -> None:
    """SIGTERM (`timeout`, a cancelled job) ends the bench without busy_cores' `finally`: its
    busy-loop processes were left spinning on their cores for good. They end with it."""
    script = (
        f"import os, sys, time; sys.path[:0] = [{str(BENCH)!r}]; import threads\n"
        "with threads.busy_cores(True):\n"
        "    pid = os.getpid()\n"
        "    print(open(f'/proc/{pid}/task/{pid}/children').read(), flush=True)\n"
        "    time.sleep(120)\n"
    )
    # the with-block closes the stdout pipe (a ResourceWarning when it was left to gc)
    with subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True
    ) as bench:
        try:
            assert bench.stdout is not None
            loaders = [int(pid) for pid in bench.stdout.readline().split()]
            assert loaders
            bench.terminate()
            bench.wait(timeout=10)
            deadline = time.monotonic() + 10
            while not all(process_ended(pid) for pid in loaders) and time.monotonic() < deadline:
                time.sleep(0.1)
            left = [pid for pid in loaders if not process_ended(pid)]
            for pid in left:
                os.kill(pid, signal.SIGKILL)
            assert not left, "the busy loops outlived the bench"
        finally:
            bench.kill()


@pytest.mark.parametrize("failing", ["training", "llama"])
def test_serve_cleans_up_when_training_or_the_llama_worker_fails(
    failing: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The router was trained into a temporary folder, and the stub workers started, before
    the `try` whose `finally` removed and stopped them: a Ctrl-C during the training, or a
    llama.cpp worker that would not start, left the folder (and the stubs) behind."""
    serve = bench_script("serve", monkeypatch)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    running: list[StubWorker] = []

    class RecordedStub(StubWorker):
        def start(self) -> StubWorker:
            running.append(self)
            return super().start()

        def stop(self) -> None:
            running.remove(self)
            super().stop()

    def train_router(output: Path) -> Path:
        touch_files(output, ["model.safetensors"])
        if failing == "training":
            raise KeyboardInterrupt
        return output

    def start_llama() -> None:
        raise RuntimeError("local worker smollm2: its llama.cpp server exited (code 1)")

    monkeypatch.setattr(serve, "StubWorker", RecordedStub)
    monkeypatch.setattr(serve, "train_router", train_router)
    monkeypatch.setattr(serve, "start_llama", start_llama)
    monkeypatch.setattr(sys, "argv", ["serve.py"])
    with pytest.raises(KeyboardInterrupt if failing == "training" else RuntimeError):
        serve.run_measurements(serve.parse_arguments())
    assert list(tmp_path.iterdir()) == []
    assert running == []


def test_serve_stops_its_servers_and_removes_its_folder_on_sigterm(tmp_path: Path) -> None:
    """SIGTERM (`timeout`, a cancelled job) ended the script at once, without its cleanup:
    the `fugu-lite serve` children it had started kept running, and its temporary folder
    (the trained router) stayed. It is now taken as a Ctrl-C, so both are undone."""
    script = (
        f"import sys, time; sys.path[:0] = [{str(BENCH)!r}]; import serve\n"
        "def train_router(output):\n"
        "    output.mkdir()\n"
        "    print(output.parent, flush=True)\n"
        "    time.sleep(120)\n"
        "serve.train_router = train_router\n"
        "sys.argv = ['serve.py']\n"
        "serve.main()\n"
    )
    assert_sigterm_removes_its_folder(script, tmp_path, "fugu-bench-serve-")


def test_serve_says_the_llama_worker_died_instead_of_connection_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """llama.cpp crashing on a request (SIGSEGV, on a machine its build does not suit) ended
    the script in a traceback saying only `openai.APIConnectionError: Connection error.`;
    the worker's death is now said with how it ended and its log's last lines, exit 1."""
    serve = bench_script("serve", monkeypatch)
    ends = "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"
    crashed = subprocess.Popen([sys.executable, "-c", ends])
    crashed.wait()
    log = tmp_path / "llama.log"
    log.write_text("INFO:     Uvicorn running on http://127.0.0.1:4321\n")
    llama = serve.LocalServer(
        serve.WorkerConfig(id="smollm2", model="m", local={"gguf": "embedded:smollm2"})
    )
    llama.process, llama.log_path, llama.port = crashed, log, 4321

    def measure_overhead(llama_url: str, fugu_url: str, pairs: int) -> dict:
        raise openai.APIConnectionError(request=httpx.Request("POST", llama_url))

    @contextlib.contextmanager
    def fugu_server(checkpoint: Path, pool: Path, *extra: str) -> Iterator[tuple[str, int]]:
        yield "http://127.0.0.1:1", os.getpid()

    monkeypatch.setattr(serve, "train_router", lambda output: output)
    monkeypatch.setattr(serve, "start_llama", lambda: llama)
    monkeypatch.setattr(serve, "fugu_server", fugu_server)
    monkeypatch.setattr(serve, "measure_overhead", measure_overhead)
    monkeypatch.setattr(serve, "console", Console(file=io.StringIO(), width=300))
    monkeypatch.setattr(sys, "argv", ["serve.py"])
    with pytest.raises(SystemExit) as exited:
        serve.main()
    assert exited.value.code == 1
    said = serve.console.file.getvalue()
    assert "the llama.cpp worker (smollm2) exited with signal SIGTERM during (a)" in said
    assert "Uvicorn running on http://127.0.0.1:4321" in said


def test_serve_keeps_its_last_line_when_the_single_client_got_no_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A single-client run with no answer (every request refused, or `--single-seconds 0.01`
    over 4 rounds: each slice over before its first request) ended the script, after every
    run, in a ZeroDivisionError for the speedup, and its p50s were NaN, which is no JSON. The
    speedup is now null and not met, the p50s null, shown as '-'."""
    serve = bench_script("serve", monkeypatch)
    printed = io.StringIO()
    monkeypatch.setattr(serve, "console", Console(file=printed, width=200))
    single = serve.LoadRun(1, errors=["HTTP 503: no worker"], seconds=0.01)
    loaded = serve.LoadRun(32, latencies=[0.1, 0.2], seconds=1.0)
    overhead = {"added_latency_p50_ms": 9.0, "routing_p50_ms": 5.0, "ttft_added_p50_ms": 8.0}
    measured = serve.Measured(
        overhead, {"added_latency_p50_ms": 7.0}, single.summary(), loaded.summary(), None, 700.0
    )
    serve.print_load_table(measured.single, measured.loaded, None)
    line = json.loads(json.dumps(serve.result_line(measured, 50.0), allow_nan=False))
    assert line["concurrency_speedup"] is None
    assert line["targets_met"]["concurrency_speedup"] is False
    assert line["single_client"]["p50_ms"] is None and line["errors"] == 1
    assert "concurrency speedup not measured: the single client got no answer" in (
        printed.getvalue()
    )


def assert_sigterm_removes_its_folder(script: str, tmp_path: Path, prefix: str) -> None:
    """Run `script`, which prints its temporary folder (under tmp_path, named `prefix`...)
    and waits; SIGTERM it; the folder must be gone."""
    with subprocess.Popen(  # the with-block closes the stdout pipe
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    ) as bench:
        try:
            assert bench.stdout is not None
            folder = Path(bench.stdout.readline().strip())
            assert folder.parent == tmp_path and folder.name.startswith(prefix)
            bench.terminate()
            bench.wait(timeout=30)
            assert not folder.exists()
        finally:
            bench.kill()


def test_collect_removes_its_folder_on_sigterm(tmp_path: Path) -> None:
    """SIGTERM (`timeout`, a cancelled job) ended the script at once, without removing its
    temporary folder (the collections' records and call logs); it is taken as a Ctrl-C."""
    script = (
        f"import sys, time; sys.path[:0] = [{str(BENCH)!r}]; import collect\n"
        "def stub_throughput(stub, n_tasks, folder):\n"
        "    print(folder, flush=True)\n"
        "    time.sleep(120)\n"
        "collect.stub_throughput = stub_throughput\n"
        "sys.argv = ['collect.py', '--calls', '1', '--block', '1']\n"
        "collect.main()\n"
    )
    assert_sigterm_removes_its_folder(script, tmp_path, "fugu-bench-collect-")


def test_threads_removes_a_workloads_folder_on_sigterm(tmp_path: Path) -> None:
    """SIGTERM (`timeout`, a cancelled job) ended the script at once, leaving the running
    workload's temporary folder (the reward head's files); it is taken as a Ctrl-C."""
    script = (
        f"import sys, tempfile, time; sys.path[:0] = [{str(BENCH)!r}]; import threads\n"
        "def fit():\n"
        "    with tempfile.TemporaryDirectory(prefix='fugu-threads-') as folder:\n"
        "        print(folder, flush=True)\n"
        "        time.sleep(120)\n"
        "    return {}\n"
        "threads.run_repeats({'reward_head': fit}, 1)\n"
    )
    assert_sigterm_removes_its_folder(script, tmp_path, "fugu-threads-")


def test_serve_reaches_its_own_servers_past_a_proxy_in_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With HTTP_PROXY set (and no NO_PROXY for 127.0.0.1) every request of the bench went to
    the proxy, which cannot reach this machine's loopback: it waited 180 s for /health, then
    said fugu-lite serve did not answer, and each timed call was a 'Connection error.'. The
    servers it started are reached directly."""
    serve = bench_script("serve", monkeypatch)
    for variable in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "all_proxy"):
        monkeypatch.setenv(variable, "http://127.0.0.1:9")
    for variable in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(variable, raising=False)
    with StubWorker(reply="ok") as stub:
        run = serve.LoadRun(1)
        asyncio.run(serve.drive(stub.base_url.removesuffix("/v1"), run, 0.2, 0))
        assert run.errors == [] and run.latencies
        with serve.local_client(stub.base_url) as client:
            _, completion = serve.timed_call(client, "m", "hi", {})
        assert completion.choices[0].message.content == "ok"


def test_serve_closes_the_clients_it_times_with(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its clients skip the proxy with an HTTP client of their own (this stop), which the
    openai SDK's finaliser does not close: their sockets to the servers leaked (a
    ResourceWarning each under -W error::ResourceWarning and a gc.collect)."""
    serve = bench_script("serve", monkeypatch)
    made: list[Any] = []

    def local_client(base_url: str) -> Any:
        made.append(serve.openai.OpenAI(base_url=base_url, api_key="none"))
        return made[-1]

    monkeypatch.setattr(serve, "local_client", local_client)
    monkeypatch.setattr(serve, "run_pairs", lambda direct, via, count: [])
    monkeypatch.setattr(serve, "pair_figures", lambda measured, first_index: {})
    serve.measure_overhead("http://127.0.0.1:9/v1", "http://127.0.0.1:9", 2)
    assert len(made) == 2 and all(client.is_closed() for client in made)
    rows = {key: [1.0] for key in ("direct", "via", "added", "ttft_direct", "ttft_via")}
    rows |= {"ttft_added": [0.0], "routing": [0.001]}
    monkeypatch.setattr(serve, "stub_rounds", lambda direct, via, rounds: rows)
    assert serve.stub_overhead_rounds("http://127.0.0.1:9/v1", "http://127.0.0.1:9", 1)
    assert len(made) == 4 and all(client.is_closed() for client in made)
