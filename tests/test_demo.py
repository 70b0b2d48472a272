"""The README's main job, end to end: real llama.cpp workers, collection, training,
evaluation, and the served router asked through the openai SDK (integration)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from cli_support import CONFIG, SIGTERM_AFTER_TWO_CALLS, flat, ignore_ctrl_c
from rich.console import Console
from server_support import Stubs, pool_for
from typer.testing import CliRunner, Result

from fugu_lite import demo
from fugu_lite.cli import app
from fugu_lite.demo import DEMO_QUESTIONS
from fugu_lite.schemas import read_records
from fugu_lite.tasks import read_tasks
from fugu_lite.testing.stub_worker import StubWorker
from fugu_lite.workers.config import embedded_pool_config


def short_answer_pool(path: Path) -> Path:
    """The embedded pool with small token budgets, so the test takes tens of seconds."""
    workers = []
    for worker in embedded_pool_config().workers:
        data = worker.model_dump(mode="json", exclude_none=True)
        data["params"] = {**data["params"], "max_tokens": 16}
        workers.append(data)
    path.write_text(yaml.safe_dump({"workers": workers}))
    return path


@pytest.mark.integration
def test_demo_runs_the_whole_local_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # `fugu-lite demo` prints its results and returns nothing: keep what the real run_demo
    # returned (called unchanged) to check the served answers and the report exactly.
    returned: list[dict] = []
    run_demo = demo.run_demo

    def recording_run_demo(*args: object, **kwargs: object) -> dict:
        returned.append(run_demo(*args, **kwargs))
        return returned[-1]

    monkeypatch.setattr(demo, "run_demo", recording_run_demo)
    output = tmp_path / "demo"
    result = CliRunner().invoke(
        app,
        ["demo", "--no-llmrouter", "--tasks-per-family", "4", "-o", str(output),
         "--pool", str(short_answer_pool(tmp_path / "pool.yaml"))],
        env={"COLUMNS": "200"},
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    [results] = returned
    worker_ids = embedded_pool_config().worker_ids

    records = read_records(output / "local" / "rewards.jsonl")
    assert len(records) == 6 * 4  # every generated task, answered by every worker
    assert all(record.worker_ids == worker_ids for record in records)
    assert all(record.costs is not None for record in records)

    report = json.loads((output / "local" / "evaluation" / "evaluation_report.json").read_text())
    assert report["split"] == "test"
    assert report["sizes"] == results["local"]["sizes"]
    test_records = [record for record in records if record.split == "test"]
    assert report["sizes"]["evaluated"] == len(test_records) > 0
    methods = report["methods"]
    assert {"router", "knn", "ridge", "best_single", "oracle"} <= set(methods)
    assert 0.0 <= methods["router"]["mean_reward"] <= methods["oracle"]["mean_reward"] <= 1.0

    router = json.loads((Path(report["checkpoint"]) / "router.json").read_text())
    served = results["served"]
    assert [answer["question"] for answer in served] == list(DEMO_QUESTIONS)
    for answer in served:
        assert answer["worker"] in router["worker_ids"], answer
        assert answer["answer"].strip(), answer
    serving = result.output.split("3/3 serve")[1]  # what the serving step printed
    assert "who answered" in serving
    assert all(answer["worker"] in serving for answer in served)
    assert "demo finished" in serving


def test_the_answers_table_prints_a_models_brackets_as_text() -> None:
    """A small model's answer like `ok [/INST]` was read as rich markup: MarkupError at the
    very end of the demo."""
    console = Console(record=True, width=200)
    answer = {"question": "q [b]", "worker": "w", "answer": "ok [/INST] [bold]x[/bold]"}
    console.print(demo.answers_table([answer], "http://127.0.0.1:8000"))
    assert "ok [/INST] [bold]x[/bold]" in console.export_text()


def test_the_answers_table_shows_an_answer_beside_its_question() -> None:
    """A small model's answer often starts with blank lines ("\\n\\n42"): the table shows
    its text on the question's own row line, not below blank lines."""
    console = Console(record=True, width=200)
    answer = {"question": "What is 17 + 25?", "worker": "w", "answer": "\n\n  42\n"}
    console.print(demo.answers_table([answer], "http://127.0.0.1:8000"))
    rows = [line for line in console.export_text().splitlines() if "What is 17 + 25?" in line]
    assert len(rows) == 1 and " w " in rows[0] and " 42 " in rows[0], console.export_text()


def test_a_named_data_dir_is_named_whole_in_the_error(tmp_path: Path) -> None:
    """A `[red]` in the --data-dir path was eaten as rich markup, and the line folded."""
    from fugu_lite.config import PipelineConfig
    from fugu_lite.datasets import DataNotFoundError

    missing = tmp_path / "[red]data" / ("a_long_folder_name_" * 4)
    with pytest.raises(DataNotFoundError) as error:
        demo.run_llmrouter(missing, tmp_path / "out", PipelineConfig())
    assert str(missing) in str(error.value)


def test_the_llmrouter_stage_imports_trains_and_evaluates_on_the_test_split(
    tmp_path: Path,
) -> None:
    """The demo's first step ran in no test (each one passes --no-llmrouter or stops before
    it): here on a small generated llmrouter/ folder and the tiny config."""
    from datasets_support import make_llmrouter

    from fugu_lite.config import PipelineConfig

    train = [
        {"question": f"question {index} on {'sums' if index % 2 else 'poems'}",
         "scores": {"small": float(index % 2), "big": float(1 - index % 2)}}
        for index in range(30)
    ]  # fmt: skip
    data = make_llmrouter(tmp_path / "data", train)
    config = PipelineConfig.model_validate(
        yaml.safe_load(CONFIG.format(cache_dir=tmp_path / "cache"))
    )
    output = tmp_path / "llmrouter"
    report = demo.run_llmrouter(data, output, config)
    assert report is not None and report["split"] == "test"
    records = read_records(output / "records.jsonl")
    assert report["sizes"]["evaluated"] == sum(record.split == "test" for record in records) > 0
    assert report["sizes"]["train"] == sum(record.split == "train" for record in records)
    written = json.loads((output / "evaluation" / "evaluation_report.json").read_text())
    assert written["split"] == "test"
    assert Path(written["checkpoint"]) == (output / "router" / "rl").absolute()


def test_without_llmrouter_data_found_the_demo_skips_that_stage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """No folder named, none found and no download (offline): the LLMRouter stage is skipped
    with a note and the demo goes on to the local loop."""
    import httpx

    import fugu_lite.datasets.data_dir as data_dir_module
    from fugu_lite.config import PipelineConfig

    tried: list[Path] = []

    def offline(target: Path, timeout: float = 60.0) -> Path:  # GitHub cannot be reached here
        tried.append(target)
        raise httpx.ConnectError("no network")

    monkeypatch.delenv("FUGU_LITE_DATA_DIR", raising=False)
    monkeypatch.setenv("FUGU_LITE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(data_dir_module, "default_search_paths", list)  # not this machine's
    monkeypatch.setattr(data_dir_module, "download_llmrouter", offline)
    assert demo.run_llmrouter(None, tmp_path / "llmrouter", PipelineConfig()) is None
    said = " ".join(capsys.readouterr().out.split())
    assert "skipping the LLMRouter stage" in said and "points to" not in said, said
    assert tried  # no folder named: the download was tried, not a --data-dir refused
    assert not (tmp_path / "llmrouter").exists()


@pytest.mark.parametrize("named_by", ["--data-dir", "FUGU_LITE_DATA_DIR"])
def test_a_data_folder_without_llmrouter_stops_the_demo_before_the_local_loop(
    tmp_path: Path, named_by: str
) -> None:
    """A --data-dir (or $FUGU_LITE_DATA_DIR) with a typo skipped the LLMRouter stage with a
    note that scrolled away, and the demo went on for minutes without the stage asked for."""
    typo = tmp_path / "shared-dta"
    typo.mkdir()
    unreachable = {"id": "w", "model": "m", "base_url": "http://127.0.0.1:9/v1", "max_retries": 0}
    pool = tmp_path / "pool.yaml"
    pool.write_text(yaml.safe_dump({"workers": [unreachable]}))
    options = ["--data-dir", str(typo)] if named_by == "--data-dir" else []
    result = CliRunner().invoke(
        app,
        ["demo", *options, "--no-serve", "-o", str(tmp_path / "demo"), "--pool", str(pool)],
        env={"FUGU_LITE_DATA_DIR": str(typo) if named_by != "--data-dir" else ""},
    )
    assert result.exit_code == 2, result.output
    message = " ".join(result.stderr.split())
    assert f"error: {named_by} points to {typo}, which has no llmrouter/ folder inside" in message
    assert "--no-llmrouter" in message
    assert not (tmp_path / "demo" / "local").exists(), result.output


def test_a_data_dir_that_does_not_exist_stops_the_demo_before_the_pool_is_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`demo --data-dir shared/dta` (a typo) was refused only when the LLMRouter stage began,
    after the pool check (which starts llama.cpp's servers: minutes), not with the other
    options; with --no-llmrouter the folder is not read, so not checked."""
    monkeypatch.delenv("FUGU_TEST_UNSET_KEY", raising=False)
    # a worker the pool check refuses: which check came first is the error said
    keyless = {"id": "w", "model": "m", "base_url": "http://127.0.0.1:9/v1",
               "api_key_env": "FUGU_TEST_UNSET_KEY"}  # fmt: skip
    typo = tmp_path / "shared" / "dta"
    result, stages = demo_with_the_llmrouter_stage_watched(
        tmp_path, monkeypatch, keyless, "--data-dir", str(typo)
    )
    assert result.exit_code == 2, result.output
    assert flat(result.stderr).startswith(
        f"error: --data-dir points to {typo}, which does not exist; name the folder that "
        "holds llmrouter/"
    ), result.stderr
    assert stages == []
    assert not (tmp_path / "demo").exists(), result.output
    result, stages = demo_with_the_llmrouter_stage_watched(
        tmp_path, monkeypatch, keyless, "--data-dir", str(typo), "--no-llmrouter"
    )
    assert "FUGU_TEST_UNSET_KEY, which is not set" in flat(result.stderr), result.stderr


def test_sigterm_stops_the_demo_saying_what_was_kept(tmp_path: Path) -> None:
    """`timeout 600 fugu-lite demo` (or a cancelled CI job) killed the demo without a word:
    no `interrupted:` line saying that the answers collected so far are kept."""
    with StubWorker(mode="hang") as stub:
        pool = tmp_path / "pool.yaml"
        worker = {"id": "slow", "model": "stub-model", "base_url": stub.base_url,
                  "timeout_s": 60.0, "max_retries": 0}  # fmt: skip
        pool.write_text(yaml.safe_dump({"workers": [worker]}))
        output = tmp_path / "demo"
        process = subprocess.Popen(
            [sys.executable, "-m", "fugu_lite", "demo", "--no-llmrouter", "--no-serve",
             "--pool", str(pool), "-o", str(output), "--tasks-per-family", "2"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "COLUMNS": "200"},
        )  # fmt: skip
        deadline = time.monotonic() + 120
        while not stub.bodies and time.monotonic() < deadline:  # collecting now
            time.sleep(0.2)
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stdout + stderr
    assert "interrupted: run the same command again" in " ".join(stderr.split()), stderr
    assert "Traceback" not in stderr


@pytest.mark.parametrize("ctrl_c", ["handled", "ignored"])
def test_sigterm_while_the_demo_collects_stops_it_without_a_traceback(
    tmp_path: Path, ctrl_c: str
) -> None:
    """The demo raised SIGTERM as KeyboardInterrupt wherever it was, inside one of its
    collection's asyncio tasks too: Python printed that task's traceback ("Task exception was
    never retrieved") after the `interrupted:` line. It now stops as on Ctrl-C, as collect does,
    also when started with Ctrl-C ignored (`fugu-lite demo &` in a script), where asyncio.run
    does not cancel its run on one."""
    with StubWorker() as stub:
        pool = tmp_path / "pool.yaml"
        workers = [{"id": name, "model": "stub-model", "base_url": stub.base_url}
                   for name in ("a", "b")]  # fmt: skip
        pool.write_text(yaml.safe_dump({"workers": workers}))
        args = ["demo", "--no-llmrouter", "--no-serve", "--pool", str(pool),
                "-o", str(tmp_path / "demo"), "--tasks-per-family", "4"]  # fmt: skip
        stopped = subprocess.run(
            [sys.executable, "-c", SIGTERM_AFTER_TWO_CALLS, *args],
            capture_output=True, text=True, timeout=120,
            env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "COLUMNS": "200"},
            preexec_fn=ignore_ctrl_c if ctrl_c == "ignored" else None,
        )  # fmt: skip
    said = stopped.stdout + stopped.stderr
    assert stopped.returncode == 130, said
    assert "interrupted: run the same command again" in " ".join(stopped.stderr.split()), said
    assert "Traceback" not in said, said


def local_loop_on_pool(
    tmp_path: Path, *workers: dict, per_family: int = 2, **options: str
) -> Result:
    """`demo --no-llmrouter --no-serve` on a pool of these workers, `per_family` tasks per
    family, into tmp_path/demo; `options` as `config="x.yaml"` -> `--config x.yaml`."""
    pool = tmp_path / "pool.yaml"
    pool.write_text(yaml.safe_dump({"workers": list(workers)}))
    more = [word for name, value in options.items() for word in (f"--{name}", value)]
    return CliRunner().invoke(
        app,
        ["demo", "--no-llmrouter", "--no-serve", "--tasks-per-family", str(per_family),
         "-o", str(tmp_path / "demo"), "--pool", str(pool), *more],
        env={"COLUMNS": "400"},
    )  # fmt: skip


def test_the_demos_failed_collection_says_why(tmp_path: Path) -> None:
    """The demo's collection of a pool whose worker refused every call (a wrong model name:
    404) stopped with "see the table", whose errors column gave a count and no reason: the
    lines saying why were printed by `fugu-lite collect` only."""
    with StubWorker(mode="404") as stub:
        worker = {"id": "w", "model": "m", "base_url": stub.base_url, "max_retries": 0}
        result = local_loop_on_pool(tmp_path, worker)
    assert result.exit_code == 2, result.output
    # three 404s in a row take the worker down for the run, and the line says why
    assert "worker w is down" in result.stderr and "HTTP 404" in result.stderr
    assert "the lines after it" in result.stderr


def test_a_pool_worker_without_its_api_key_stops_the_demo_before_any_stage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`demo --pool` with a remote worker whose API key variable was not exported ran the
    LLMRouter stage (minutes) and generated the tasks before the pool refused to start."""
    monkeypatch.delenv("FUGU_TEST_UNSET_KEY", raising=False)
    worker = {"id": "w", "model": "m", "base_url": "http://127.0.0.1:9/v1",
              "api_key_env": "FUGU_TEST_UNSET_KEY"}  # fmt: skip
    result = local_loop_on_pool(tmp_path, worker)
    assert result.exit_code == 2, result.output
    message = " ".join(result.stderr.split())
    assert "the environment variable FUGU_TEST_UNSET_KEY, which is not set" in message
    assert "2/3 local pool" not in result.output
    assert not (tmp_path / "demo").exists(), result.output


def test_a_demo_with_fewer_tasks_than_an_earlier_one_trains_on_its_own_tasks_only(
    tmp_path: Path,
) -> None:
    """`demo --tasks-per-family 2` into the -o of an earlier `--tasks-per-family 3` collected
    its 12 tasks (all answered already) and then trained and evaluated on all 18 records of
    rewards.jsonl, its collection table saying 12."""
    config = tmp_path / "tiny.yaml"
    config.write_text(CONFIG.format(cache_dir=tmp_path / "cache"))
    with StubWorker() as stub:
        workers = [{"id": name, "model": "m", "base_url": stub.base_url} for name in "ab"]
        first = local_loop_on_pool(tmp_path, *workers, per_family=3, config=str(config))
        assert first.exit_code == 0, first.output
        result = local_loop_on_pool(tmp_path, *workers, per_family=2, config=str(config))
        assert result.exit_code == 0, result.output
    assert "did not generate" not in flat(first.stderr)  # its records are all its own
    rewards = tmp_path / "demo" / "local" / "rewards.jsonl"
    assert f"note: 6 records of {rewards} answer tasks this run did not generate" in flat(
        result.stderr
    )
    assert "the router trains and is evaluated on this run's 12 only" in flat(result.stderr)
    # --no-llmrouter and --no-serve: only the local loop ran
    assert "1/3 LLMRouter" not in result.output and "3/3 serve" not in result.output
    local = tmp_path / "demo" / "local"
    tasks = {task.id for task in read_tasks(local / "tasks.jsonl")}
    records = read_records(local / "rewards.jsonl")
    assert len(tasks) == 12 and len(records) == 18
    ours = [record for record in records if record.id in tasks]
    sizes = json.loads((local / "evaluation" / "evaluation_report.json").read_text())["sizes"]
    assert sizes["train"] == sum(record.split == "train" for record in ours)
    assert sizes["evaluated"] == sum(record.split == "test" for record in ours)
    assert sizes["train"] < sum(record.split == "train" for record in records)


def demo_with_the_llmrouter_stage_watched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, worker: dict, *options: str
) -> tuple[Result, list[str]]:
    """`demo --no-serve` on a pool of `worker`, into tmp_path/demo, with the LLMRouter stage
    replaced by a note that it was reached (its own run takes minutes)."""
    stages: list[str] = []
    monkeypatch.setattr(demo, "run_llmrouter", lambda *args: stages.append("llmrouter"))
    pool = tmp_path / "pool.yaml"
    pool.write_text(yaml.safe_dump({"workers": [worker]}))
    result = CliRunner().invoke(
        app,
        ["demo", "--no-serve", "-o", str(tmp_path / "demo"), "--pool", str(pool), *options],
        env={"COLUMNS": "200"},
    )
    return result, stages


def test_more_tasks_per_family_than_a_family_can_make_stops_the_demo_before_any_stage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`demo --tasks-per-family 300` (the code family has ~240 distinct prompts) ran the whole
    LLMRouter stage (minutes) before task generation refused the count."""
    unreachable = {"id": "w", "model": "m", "base_url": "http://127.0.0.1:9/v1", "max_retries": 0}
    result, stages = demo_with_the_llmrouter_stage_watched(
        tmp_path, monkeypatch, unreachable, "--tasks-per-family", "300"
    )
    assert result.exit_code == 2, result.output
    assert "could not make 300 different code tasks" in flat(result.stderr)
    assert "ask for fewer per family" in flat(result.stderr)
    assert stages == []
    assert not (tmp_path / "demo").exists(), result.output


def test_the_demo_command_and_its_settings_share_their_defaults() -> None:
    """`demo`'s defaults (--tasks-per-family, -o runs/demo, --llmrouter, --serve) were
    written twice, in the options and in DemoSettings: run_demo called from Python would have
    run otherwise than the CLI with a change to one of them."""
    import inspect

    from fugu_lite.cli.demo import demo_command

    options = inspect.signature(demo_command).parameters
    settings = demo.DemoSettings()
    shared = options.keys() & demo.DemoSettings.model_fields.keys()
    assert {"output", "tasks_per_family", "llmrouter", "serve"} <= shared
    for name in shared:
        assert options[name].default == getattr(settings, name), name
    assert settings.tasks_per_family >= 2


def test_one_task_per_family_is_refused_before_any_stage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The local loop splits each family's tasks into train and test: `--tasks-per-family 1`
    is refused at once, saying the least it takes, before the LLMRouter stage."""
    unreachable = {"id": "w", "model": "m", "base_url": "http://127.0.0.1:9/v1", "max_retries": 0}
    result, stages = demo_with_the_llmrouter_stage_watched(
        tmp_path, monkeypatch, unreachable, "--tasks-per-family", "1"
    )
    assert result.exit_code == 2, result.output
    assert "--tasks-per-family 1: Input should be greater than or equal to 2" in flat(result.stderr)
    assert stages == []
    assert not (tmp_path / "demo").exists(), result.output


def test_a_device_torch_cannot_use_here_stops_the_demo_before_any_stage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`demo -c` with `model.device: cuda` on a machine without CUDA imported the LLMRouter
    data, then ended in torch's AssertionError traceback 'Torch not compiled with CUDA
    enabled' at its first feature, where `train` refuses that config before any work."""
    config = tmp_path / "gpu.yaml"
    config.write_text("model:\n  device: 'cuda:63'\n", encoding="utf-8")  # no machine has 64
    unreachable = {"id": "w", "model": "m", "base_url": "http://127.0.0.1:9/v1", "max_retries": 0}
    result, stages = demo_with_the_llmrouter_stage_watched(
        tmp_path, monkeypatch, unreachable, "-c", str(config)
    )
    assert result.exit_code == 2, result.output
    assert flat(result.stderr).startswith(
        f"error: model.device in {config} is 'cuda:63', which torch cannot use on this machine"
    ), result.stderr
    assert stages == []
    assert not (tmp_path / "demo").exists(), result.output


def test_a_local_worker_without_its_gguf_stops_the_demo_before_any_stage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`demo --pool` with a local worker whose GGUF file is not there (a typo) ran the
    LLMRouter stage (minutes) before the pool failed to start."""
    worker = {"id": "w", "model": "m", "local": {"gguf": "models/tiny.gguf"}}
    result, stages = demo_with_the_llmrouter_stage_watched(tmp_path, monkeypatch, worker)
    assert result.exit_code == 2, result.output
    assert f"GGUF file {tmp_path / 'models' / 'tiny.gguf'} not found" in flat(result.stderr)
    assert stages == []
    assert not (tmp_path / "demo").exists(), result.output


def test_the_demos_serving_step_is_asked_without_the_environments_proxy(
    checkpoint: Path, stubs: Stubs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With HTTP_PROXY set (behind a company proxy), the demo's openai client sent its
    questions for the server it had just started on 127.0.0.1 to the proxy, which cannot
    reach this machine: the demo's last step failed with a connection error."""
    from fugu_lite.workers.local_server import free_port

    for name in ("NO_PROXY", "no_proxy", "http_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{free_port()}")
    answers = demo.serve_and_ask(checkpoint, pool_for(stubs))
    assert [answer["question"] for answer in answers] == list(DEMO_QUESTIONS)
    assert all(answer["answer"] == f"answer from {answer['worker']}" for answer in answers)


def test_the_demos_serving_step_closes_its_client(
    checkpoint: Path, stubs: Stubs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The serving step's openai client has an HTTP client of its own (to skip a proxy),
    which the SDK's finaliser does not close: left open, its sockets to the demo's server
    leaked, and Python warned of them (ResourceWarning) whenever they were collected."""
    import openai

    made: list[openai.DefaultHttpxClient] = []

    class RecordedClient(openai.DefaultHttpxClient):
        def __init__(self, **options: object) -> None:
            super().__init__(**options)  # type: ignore[arg-type]
            made.append(self)

    monkeypatch.setattr(openai, "DefaultHttpxClient", RecordedClient)
    answers = demo.serve_and_ask(checkpoint, pool_for(stubs))
    assert len(answers) == len(DEMO_QUESTIONS)
    assert len(made) == 1
    assert made[0].is_closed


def test_the_demos_serving_step_takes_an_answer_without_text(
    checkpoint: Path, stubs: Stubs
) -> None:
    """A worker's reply may hold no text (`content: null`: a reasoning model that spent its
    tokens thinking); the demo's last step lists it as an empty answer."""
    for stub in stubs.workers.values():
        stub.mode, stub.reply = "reasoning", ""
    answers = demo.serve_and_ask(checkpoint, pool_for(stubs))
    assert [answer["question"] for answer in answers] == list(DEMO_QUESTIONS)
    assert [answer["answer"] for answer in answers] == [""] * len(DEMO_QUESTIONS)
