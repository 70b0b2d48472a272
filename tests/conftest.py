"""Shared fixtures: small generated records, the tiny random backbone, and reward collection
against stub workers."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pytest

from fugu_lite.collect.journal import default_log_path
from fugu_lite.collect.run import collect
from fugu_lite.config import ModelConfig
from fugu_lite.datasets import DATA_DIR_ENV, standard_split
from fugu_lite.sandbox import SandboxLimits
from fugu_lite.schemas import RewardRecord
from fugu_lite.scoring import Grade, grade
from fugu_lite.tasks import Task
from fugu_lite.testing.stub_worker import Reply, StubWorker, echo_reply
from fugu_lite.workers.config import PoolConfig

if TYPE_CHECKING:
    from collections.abc import Callable

    from cli_support import Run
    from fastapi.responses import Response
    from server_support import Running, Stubs

    from fugu_lite.router_family import RouterFamily

# Never the network, even when the shell says HF_HUB_OFFLINE=0: a hub id that is not here
# (tests name some on purpose) was looked up online, a minute of retries without a network.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
WORKERS = ["cheap-small", "coder", "mathematician"]
TOPICS = {
    "code": ("write a python function that", [0.2, 1.0, 0.1]),
    "math": ("compute the sum of the numbers", [0.3, 0.1, 1.0]),
    "chat": ("say hello politely to", [1.0, 0.9, 0.8]),
}


Result = TypeVar("Result")


def peak_memory_of(call: Callable[[], Result]) -> tuple[Result, int]:
    """call()'s result and the peak of the Python memory allocated meanwhile (tracemalloc's)."""
    tracemalloc.start()
    try:
        return call(), tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def require_shared_data(dataset: str) -> Path:
    """The real data, a folder holding `dataset`/: the one $FUGU_LITE_DATA_DIR names, as for
    `fugu-lite demo`, else ../shared/data beside the project; required in CI, skipped with a
    reason elsewhere when absent."""
    named = os.environ.get(DATA_DIR_ENV)
    folder = Path(named).expanduser() if named else SHARED_DATA
    if (folder / dataset).is_dir():
        return folder
    where = f"{DATA_DIR_ENV}={folder}" if named else f"{folder} (../shared/data beside the project)"
    reason = (
        f"real data not found: no {dataset}/ in {where}; set {DATA_DIR_ENV} to a folder holding it"
    )
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI needs the shared data: {reason}")
    pytest.skip(reason)


def writer_temporary(name: str, pid: int) -> str:
    """How a writer with this pid on this host names its temporary copy of `name`
    (atomic_files.writer_prefix; spelt out here because runs of other versions must read it too)."""
    host = re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname())[:32]
    return f".{name}.w-{host}-{pid}.k1ll3d00"  # then mkstemp's 8 random characters


def finished_pid() -> int:
    """The pid of a process that has ended (and been waited for)."""
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, check=True
    )
    return int(done.stdout)


def write_over_in_place_keeping_size_and_time(path: Path, content: bytes) -> None:
    """Write `content` (of the file's size) over the file in place, its modification time
    set back (`cp -p`, `rsync --inplace -t`): see set_time_back."""
    before = path.stat()
    with path.open("r+b") as handle:
        handle.write(content)
    set_time_back(path, before)


def set_time_back(path: Path, before: os.stat_result) -> None:
    """Give a file written over in place its modification time of `before` again: the same
    inode, size and mtime, only its ctime moved (waited for past the clock's tick)."""
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    while path.stat().st_ctime_ns == before.st_ctime_ns:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = path.stat()
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (
        before.st_ino,
        before.st_size,
        before.st_mtime_ns,
    )


def save_tiny_backbone(folder: Path, seed: int = 0) -> None:
    """A tiny random backbone (tiny_random_backbone(seed)) saved as a local model folder."""
    from fugu_lite.backbones import tiny_random_backbone

    backbone = tiny_random_backbone(seed)
    backbone.model.save_pretrained(folder)
    backbone.tokenizer.save_pretrained(folder)


def generated_records(n_per_topic: int = 40, seed: int = 0) -> list[RewardRecord]:
    """Prompts of three kinds; on each kind a different worker is best (a little noise)."""
    rng = random.Random(seed)
    records = []
    for topic, (stem, rewards) in TOPICS.items():
        for index in range(n_per_topic):
            prompt = f"{stem} {rng.randint(0, 10**6)} item {index}"
            noisy = [min(1.0, max(0.0, r + rng.uniform(-0.05, 0.05))) for r in rewards]
            records.append(
                RewardRecord(
                    prompt=prompt,
                    split=standard_split(prompt),
                    worker_ids=WORKERS,
                    rewards=noisy,
                    costs=[0.1, 1.0, 2.0],
                    task=topic,
                    id=f"{topic}-{index}",
                )
            )
    return records


def cost_record(
    split: str, rewards: list[float], costs: list[float] | None, id: str
) -> RewardRecord:
    """A record of two workers, a and b, with the given rewards and costs."""
    return RewardRecord(
        prompt=f"prompt {id}", split=split, worker_ids=["a", "b"], rewards=rewards,
        costs=costs, id=id,
    )  # fmt: skip


@pytest.fixture
def records() -> list[RewardRecord]:
    return generated_records()


@pytest.fixture
def tiny_model_cfg(tmp_path: Path) -> ModelConfig:
    return ModelConfig(
        backbone="tiny-random",
        layer=-1,
        head="linear",
        max_tokens=32,
        cache_dir=str(tmp_path / "cache"),
    )


@pytest.fixture(scope="module")
def tiny_backbone():
    from fugu_lite.backbones import load_backbone

    return load_backbone("tiny-random")


USER_CACHE = os.environ.get("FUGU_LITE_CACHE_DIR")
SESSION_CACHE: list[Path] = []  # made by the first unit test, removed when pytest ends


@pytest.fixture(scope="session")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """The `fugu-lite` command tests' records, imported and trained on once (cli_support.py)."""
    from cli_support import trained_run

    return trained_run(tmp_path_factory.mktemp("cli"))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A unit test's feature caches, ONNX exports and file digests go to a folder of this
    session, never to the user's ~/.cache/fugu-lite (or $FUGU_LITE_CACHE_DIR): they left
    files there on every run, and could read what an earlier run or version left. Integration
    tests keep the real cache, which holds the downloaded backbones and their exports. Set
    before the test's fixtures, module-wide ones included, are made."""
    if item.get_closest_marker("integration") is None:
        if not SESSION_CACHE:
            SESSION_CACHE.append(Path(tempfile.mkdtemp(prefix="fugu-lite-test-cache-")))
        os.environ["FUGU_LITE_CACHE_DIR"] = str(SESSION_CACHE[0])
    elif USER_CACHE is None:
        os.environ.pop("FUGU_LITE_CACHE_DIR", None)
    else:
        os.environ["FUGU_LITE_CACHE_DIR"] = USER_CACHE


def pytest_unconfigure(config: pytest.Config) -> None:
    for folder in SESSION_CACHE:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(autouse=True)
def _package_logger_as_it_was() -> Iterator[None]:
    """`serve` (the command, or show_package_logs) gives the fugu_lite logger a handler and a
    level for the rest of its process: in a test, for every later test of the session (INFO
    notes reaching caplog, lines written to a test's finished stderr)."""
    package = logging.getLogger("fugu_lite")
    handlers, level = list(package.handlers), package.level
    yield
    package.handlers, package.level = handlers, level


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread():
    """One intra-op thread unless OMP_NUM_THREADS says otherwise: the tests run tiny tensors,
    and on a busy 2-core machine OpenMP's spin-waiting makes them ~10x slower."""
    import torch

    if "OMP_NUM_THREADS" in os.environ:
        yield
        return
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


# -- `fugu-lite serve` against stub workers (test_server*.py; server_support.py) ------------


@pytest.fixture(scope="session")
def stubs() -> Iterator[Stubs]:
    """One stub worker per WORKERS id, each test starting from their default settings."""
    from server_support import running_stubs

    yield from running_stubs()


@pytest.fixture(autouse=True)
def _fresh_stubs(request: pytest.FixtureRequest) -> None:
    if "stubs" in request.fixturenames:
        request.getfixturevalue("stubs").reset()


@pytest.fixture(scope="session")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The serve tests' router, trained once (a test module may define its own)."""
    from server_support import trained_checkpoint

    return trained_checkpoint(tmp_path_factory.mktemp("router"))


@pytest.fixture(scope="session")
def family(checkpoint: Path) -> RouterFamily:
    from fugu_lite.router_family import load_family_or_single

    return load_family_or_single(checkpoint)


@pytest.fixture
def serve(
    family: RouterFamily, checkpoint: Path, tmp_path: Path
) -> Iterator[Callable[..., Running]]:
    """serve(pool_config, **settings) -> a running fugu-lite server, stopped after the test."""
    from server_support import server_starter

    yield from server_starter(family, checkpoint, tmp_path)


# -- reward collection against stub workers ----------------------------------------------


class AnsweringTogether(StubWorker):
    """A stub that holds each answer until it has had `together` calls in flight at once (at
    most 3 s each), then answers as a plain one: a plain stub's latency raced the client's
    later sends, which a loaded machine can delay past the first answers (the calls were
    never seen at once)."""

    def __init__(self, reply: str | Reply = echo_reply, *, together: int, **options: Any) -> None:
        super().__init__(reply, **options)
        self.together = together

    async def _respond(self, mode: str, body: dict[str, Any], auth: str | None) -> Response:
        deadline = time.monotonic() + 3.0
        while self.max_in_flight < self.together and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        return await super()._respond(mode, body, auth)


def number_tasks(n: int = 6) -> list[Task]:
    return [
        Task(id=f"add-{i}", prompt=f"What is {i} + {i + 1}?", answer=str(2 * i + 1),
             grader="number", task="arithmetic")
        for i in range(n)
    ]  # fmt: skip


def solver(tasks: list[Task]):
    answers = {task.prompt: task.answer for task in tasks}
    return lambda messages: f"The answer is {answers[messages[-1]['content']]}."


def stub_pool(*stubs: tuple[str, StubWorker], **overrides) -> PoolConfig:
    workers = [
        {"id": worker_id, "model": "stub-model", "base_url": stub.base_url,
         "input_price_per_mtok": 1.0, "output_price_per_mtok": 2.0, "max_concurrency": 2,
         "retry_backoff_s": 0.01, "max_retries": 1, "timeout_s": 5.0, **overrides}
        for worker_id, stub in stubs
    ]  # fmt: skip
    return PoolConfig.model_validate({"workers": workers})


def run_collect(config: PoolConfig, tasks: list[Task], output: Path, **options):
    return asyncio.run(collect(config, tasks, output, show_progress=False, **options))


def collect_with_file_limit(
    config: PoolConfig, tasks: list[Task], output: Path, limit: int
) -> subprocess.CompletedProcess:
    """`fugu-lite collect` in a child process in which no file may grow past `limit` bytes:
    a write past it fails (EFBIG), as on a full disk (ENOSPC). Its task and pool files are
    written beside `output`."""
    import resource
    import signal

    import yaml

    from fugu_lite.tasks import write_tasks

    tasks_path, pool_path = output.with_name("tasks.jsonl"), output.with_name("pool.yaml")
    write_tasks(tasks_path, tasks)
    pool_path.write_text(yaml.safe_dump(config.model_dump(mode="json")))
    command = [sys.executable, "-m", "fugu_lite", "collect", "--pool", str(pool_path),
               "--tasks", str(tasks_path), "-o", str(output), "--no-progress"]  # fmt: skip

    def small_files() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run(
        command, capture_output=True, text=True, timeout=120, preexec_fn=small_files,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "COLUMNS": "200"},
    )  # fmt: skip


def log_lines(output: Path) -> list[dict]:
    path = default_log_path(output)
    return [json.loads(line) for line in path.read_text().splitlines()]


def record_ids(output: Path) -> list[str]:
    return [json.loads(line)["id"] for line in output.read_text().splitlines()]


# -- graders -------------------------------------------------------------------------------

# What the graders' tests (test_scoring*.py) share: running a grader on a task's output with
# a fast sandbox, and the tasks and prompts more than one of them grade

# CPU seconds the graders' linear-time tests allow: their inputs take about 2 s when the work
# is linear, and from 14 s to minutes with the quadratic bugs they guard against; 3 s left too
# little room on a shared 2-core CI machine (3.6 s seen with the whole suite running)
LINEAR_CPU_S = 6.0
FAST = SandboxLimits(timeout_s=1.5, memory_mb=256)


def graded(task: Task, output: str, judge=None, sandbox: SandboxLimits | None = FAST) -> Grade:
    return asyncio.run(grade(task, output, judge, sandbox=sandbox))


def number_task(answer: str, prompt: str = "How many?") -> Task:
    return Task(id="n", prompt=prompt, answer=answer, grader="number", task="math")


WHO_IS_TALLER = "Ann is 150 cm tall and Bob is 160 cm tall. Who is taller?"
