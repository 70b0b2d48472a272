"""The bench scripts as a user runs them: a wrong option or data folder is one clear line
before any work starts, not a traceback minutes in."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from fugu_lite.datasets import DATA_DIR_ENV
from fugu_lite.threads import THREAD_VARIABLES

BENCH = Path(__file__).resolve().parent.parent / "bench"


def bench_script(name: str, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """bench/<name>.py as a module (named bench_<name>: `quality` or `es` alone could be
    another package's), with bench/ importable as it is when the script runs."""
    monkeypatch.syspath_prepend(str(BENCH))
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
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
