"""`fugu-lite demo`: the main job, end to end."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..config import (
    DEMO_OUTPUT,
    DEMO_RUNS_LLMROUTER,
    DEMO_SERVES,
    DEMO_TASKS_PER_FAMILY,
    PipelineConfig,
)
from ..config_errors import ConfigError
from ..config_loading import DEFAULT_CONFIG
from .common import (
    PoolOption,
    check_device_or_fail,
    check_output,
    fail,
    load_or_fail,
    non_empty_path,
    stopped_cleanly,
)

DataDirOption = Annotated[
    Path | None,
    typer.Option(
        parser=non_empty_path("give the folder holding llmrouter/, or leave --data-dir out"),
        metavar="<path>",
        help="Folder holding llmrouter/. Default: $FUGU_LITE_DATA_DIR, else ../shared/data, "
        "else a download into the cache (online; offline the LLMRouter stage is skipped).",
    ),
]
DemoOutputOption = Annotated[
    Path,
    typer.Option(
        "--output",
        "-o",
        parser=non_empty_path("give the folder for the demo's outputs, or leave -o out"),
        metavar="<path>",
        help="Folder for all demo outputs.",
    ),
]
PipelineConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config",
        "-c",
        parser=non_empty_path("give the pipeline YAML file, or leave -c out for the default"),
        metavar="<path>",
        help="Pipeline YAML; default: src/fugu_lite/configs/default.yaml (the shipped int8 setup).",
    ),
]
TasksPerFamilyOption = Annotated[
    int, typer.Option(min=2, help="Generated tasks per family for the local pool.")
]
LLMRouterOption = Annotated[
    bool, typer.Option(help="Also train and evaluate on the LLMRouter data, when found.")
]
ServeOption = Annotated[
    bool, typer.Option(help="End by serving the router and asking it a few questions.")
]

DEMO_KEPT = (
    "run the same command again (or `make demo`): the answers collected so far are kept "
    "and collection continues; the other stages start over, on cached features"
)


def demo_command(
    data_dir: DataDirOption = None,
    output: DemoOutputOption = DEMO_OUTPUT,
    config: PipelineConfigOption = None,
    pool: PoolOption = None,
    tasks_per_family: TasksPerFamilyOption = DEMO_TASKS_PER_FAMILY,
    llmrouter: LLMRouterOption = DEMO_RUNS_LLMROUTER,
    serve: ServeOption = DEMO_SERVES,
) -> None:
    """The main job: LLMRouter train + eval, the local loop, then serving.

    The local loop: the embedded llama.cpp pool answers tasks, then SFT -> RL and eval.

    Last, the router is served and asked a few questions through the openai SDK."""
    from ..demo import DemoSettings, run_demo

    cfg = load_or_fail(config or DEFAULT_CONFIG, PipelineConfig, {})
    check_device_or_fail(cfg, config or DEFAULT_CONFIG, {})
    check_output(output, "-o", "folder")
    if llmrouter:
        check_data_dir_holds_llmrouter(data_dir)
    check_pool_starts(pool)
    settings = DemoSettings(
        data_dir=data_dir,
        output=output,
        pool=pool,
        tasks_per_family=tasks_per_family,
        llmrouter=llmrouter,
        serve=serve,
    )
    # SIGTERM too (`timeout`, a cancelled CI job): it ended the demo without a word
    with stopped_cleanly(DEMO_KEPT):
        try:
            run_demo(settings, cfg)
        except (ValueError, RuntimeError, OSError) as error:
            fail(str(error))


def check_data_dir_holds_llmrouter(data_dir: Path | None) -> None:
    """Checked now, not when the LLMRouter stage starts: after the pool check (minutes)."""
    from ..datasets import DataNotFoundError
    from ..demo import named_data_dir

    try:
        named_data_dir(data_dir)
    except DataNotFoundError as error:
        fail(str(error))


def check_pool_starts(pool: Path | None) -> None:
    """Checked now, not after the LLMRouter stage: API keys, GGUF files, llama.cpp's server."""
    from ..workers.config import load_pool_config
    from ..workers.preflight import preflight

    try:
        preflight(load_pool_config(pool))
    except (ConfigError, RuntimeError) as error:  # PoolStartError, LocalServerError
        fail(str(error))
