"""What the `fugu-lite` command tests share: invoking the app through typer's CliRunner,
reading its output, and the `run` fixture's import -> train pipeline (conftest.py)."""

from __future__ import annotations

import csv
import signal
from dataclasses import dataclass
from pathlib import Path

from conftest import generated_records
from typer.testing import CliRunner

from fugu_lite.cli import app
from fugu_lite.schemas import RewardRecord

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
CONFIG = """\
model:
  backbone: tiny-random
  layer: -1
  head: linear
  max_tokens: 32
  cache_dir: {cache_dir}
sft:
  epochs: 8
  batch_size: 16
  learning_rate: 0.05
  temperature: 0.1
rl:
  epochs: 3
  batch_size: 16
  learning_rate: 0.01
  estimator: reinforce
"""

# `python -c SIGTERM_AFTER_TWO_CALLS ARGS...`: `fugu-lite ARGS` (collect, or the demo while it
# collects) getting SIGTERM (as `timeout` or a cancelled CI job sends it) at a known point: from
# within one of the workers' calls, right after its second call line (the signal then lands in
# that call's asyncio task, beside the other calls in flight)
_SIGNAL_AFTER_TWO_CALLS = """
import os, signal, sys
from fugu_lite.collect import state

calls = []
append_line = state.append_line

def append_then_signal(path, row):
    append_line(path, row)
    calls.extend([row] if getattr(row, "event", None) == "call" else [])
    if len(calls) == 2 and row is calls[-1]:
        os.kill(os.getpid(), signal.Signals[os.environ.get("STOP_SIGNAL", "SIGTERM")])

state.append_line = append_then_signal
"""
SIGTERM_AFTER_TWO_CALLS = (
    _SIGNAL_AFTER_TWO_CALLS
    + """
from fugu_lite.cli import app
app(sys.argv[1:], prog_name="fugu-lite")
"""
)
# The same through the `fugu-lite` console script's own entry point (fugu_lite.__main__.main,
# with its SIGINT handler), the signal named by $STOP_SIGNAL (SIGTERM, or SIGINT for a Ctrl-C)
SIGNAL_AFTER_TWO_CALLS_AS_CONSOLE_SCRIPT = (
    _SIGNAL_AFTER_TWO_CALLS
    + """
from fugu_lite.__main__ import main
sys.argv[0] = "fugu-lite"
main()
"""
)


def ignore_ctrl_c() -> None:
    """A subprocess's preexec_fn: it starts with Ctrl-C (SIGINT) ignored, as a script's shell
    starts a command run in the background (`fugu-lite collect ... &`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def ctrl_c_at_its_default() -> None:
    """A subprocess's preexec_fn: it starts with Ctrl-C (SIGINT) at its default action, as a
    command typed at a terminal, whatever this test run got: one a script started in the
    background (`pytest ... &`) has Ctrl-C ignored, which its children keep, and a child
    sent SIGINT there went on running."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


runner = CliRunner()


def invoke(*args: str | Path, input: str | None = None):
    return runner.invoke(app, [str(arg) for arg in args], input=input)


def flat(text: str) -> str:
    """The output with rich's line wrapping undone."""
    return " ".join(text.split())


def ok(result) -> str:
    assert result.exit_code == 0, f"exit {result.exit_code}:\n{result.output}\n{result.exception!r}"
    return result.output


def write_long_csv(path: Path, records: list[RewardRecord]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as stream:
        writer = csv.writer(stream)
        writer.writerow(["prompt", "worker", "reward", "cost", "task", "id"])
        for record in records:
            for worker, reward, cost in zip(
                record.worker_ids, record.rewards, record.costs or [], strict=True
            ):
                writer.writerow([record.prompt, worker, repr(reward), cost, record.task, record.id])
    return path


@dataclass
class Run:
    root: Path
    records: list[RewardRecord]
    records_path: Path
    config_path: Path
    run_dir: Path
    import_output: str
    train_output: str

    @property
    def checkpoint(self) -> Path:
        return self.run_dir / "rl"

    def split(self, name: str) -> list[RewardRecord]:
        return [record for record in self.records if record.split == name]


def trained_run(root: Path) -> Run:
    """Import the generated records from a long CSV and train the pipeline once."""
    records = generated_records()
    csv_path = write_long_csv(root / "long.csv", records)
    records_path = root / "records.jsonl"
    import_output = ok(invoke("data", "import", "long", csv_path, "--output", records_path))
    config_path = root / "config.yaml"
    config_path.write_text(CONFIG.format(cache_dir=root / "cache"), encoding="utf-8")
    run_dir = root / "run"
    train_output = ok(
        invoke(
            "train", "pipeline", "--records", records_path, "--output", run_dir,
            "--config", config_path,
        )
    )  # fmt: skip
    return Run(root, records, records_path, config_path, run_dir, import_output, train_output)
