"""Shared fixtures: small generated records and the tiny random backbone."""

from __future__ import annotations

import os
import random
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from fugu_lite.config import ModelConfig
from fugu_lite.datasets import standard_split
from fugu_lite.schemas import RewardRecord

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
WORKERS = ["cheap-small", "coder", "mathematician"]
TOPICS = {
    "code": ("write a python function that", [0.2, 1.0, 0.1]),
    "math": ("compute the sum of the numbers", [0.3, 0.1, 1.0]),
    "chat": ("say hello politely to", [1.0, 0.9, 0.8]),
}


def require_shared_data() -> Path:
    """The real data: required in CI, skipped with a reason elsewhere when absent."""
    if SHARED_DATA.exists():
        return SHARED_DATA
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI needs the shared data at {SHARED_DATA}")
    pytest.skip(f"real data not found at {SHARED_DATA} (put ../shared/data beside the project)")


def writer_temporary(name: str, pid: int) -> str:
    """How a writer with this pid on this host names its temporary copy of `name`
    (io.writer_prefix; spelt out here because runs of other versions must read it too)."""
    host = re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname())[:32]
    return f".{name}.w-{host}-{pid}.k1ll3d"


def finished_pid() -> int:
    """The pid of a process that has ended (and been waited for)."""
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, check=True
    )
    return int(done.stdout)


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
