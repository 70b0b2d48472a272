"""The README against the code: its config tables against the pydantic models (every key
listed, none invented, each documented default the code's), its importer table against the
importers' options, its command lines against the CLI, its JSON/YAML examples against the
schemas."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from pydantic import BaseModel
from typer.core import TyperGroup

from fugu_lite.cli import app
from fugu_lite.config import ESTrainingConfig, ModelConfig, RLTrainingConfig, SFTTrainingConfig
from fugu_lite.cost_routing import CostRoutingDecision
from fugu_lite.datasets import IMPORTERS, import_dataset
from fugu_lite.reward_head_training import RewardHeadTraining
from fugu_lite.routing import RoutingDecision
from fugu_lite.schemas import read_records
from fugu_lite.server.chat_request import FUGU_KEYS
from fugu_lite.tasks import read_tasks
from fugu_lite.workers.config import LocalServerConfig, PoolConfig, WorkerConfig

README = Path(__file__).resolve().parents[1] / "README.md"
ABSENT = "—"


def readme_table(first_column: str) -> list[list[str]]:
    """The body rows of the README table whose header starts with `| first_column |` (indented
    too, as in a list item)."""
    lines = [line.lstrip() for line in README.read_text(encoding="utf-8").splitlines()]
    starts = [i for i, line in enumerate(lines) if line.startswith(f"| {first_column} |")]
    assert len(starts) == 1, f"README: expected one table headed {first_column!r}"
    rows = []
    for line in lines[starts[0] + 2 :]:
        if not line.startswith("|"):
            break
        cells = re.split(r"(?<!\\)\|", line.strip().strip("|"))
        rows.append([cell.strip() for cell in cells])
    return rows


def documented_key(cell: str) -> str:
    match = re.fullmatch(r"`([a-z_0-9]+)`", cell)
    assert match, f"README: a key cell should be one `key`, got {cell!r}"
    return match.group(1)


def documented_default(cell: str) -> Any:
    """`4` -> 4, `null` -> None, `[30, 50, 80]` -> a list; 'required' stays a marker."""
    if cell == "required":
        return cell
    match = re.fullmatch(r"`(.*)`", cell)
    assert match, f"README: a default cell should be one `value` or 'required', got {cell!r}"
    return yaml.safe_load(match.group(1))


def code_default(model: type[BaseModel], key: str) -> Any:
    field = model.model_fields[key]
    if field.is_required():
        return "required"
    value = field.get_default(call_default_factory=True)
    return None if value is None else _plain(value)


def _plain(value: Any) -> Any:
    return value.model_dump() if isinstance(value, BaseModel) else value


@pytest.mark.parametrize(
    ("first_column", "model"),
    [
        ("model key", ModelConfig),
        ("reward-head key", RewardHeadTraining),
        ("pool key", PoolConfig),
        ("worker key", WorkerConfig),
        ("local key", LocalServerConfig),
    ],
)
def test_a_config_table_lists_every_key_with_the_code_default(
    first_column: str, model: type[BaseModel]
) -> None:
    documented = {
        documented_key(row[0]): documented_default(row[1]) for row in readme_table(first_column)
    }
    assert set(documented) == set(model.model_fields)
    assert documented == {key: code_default(model, key) for key in documented}


def test_the_training_table_lists_each_stages_keys_with_the_code_defaults() -> None:
    stages: dict[str, type[BaseModel]] = {
        "sft": SFTTrainingConfig,
        "rl": RLTrainingConfig,
        "es": ESTrainingConfig,
    }
    rows = readme_table("training key")
    for column, (stage, model) in enumerate(stages.items(), start=1):
        documented = {
            documented_key(row[0]): documented_default(row[column])
            for row in rows
            if row[column] != ABSENT
        }
        assert set(documented) == set(model.model_fields), stage
        assert documented == {key: code_default(model, key) for key in documented}, stage


def test_every_importer_option_is_in_its_readme_row() -> None:
    rows = {documented_key(row[0]): " ".join(row[1:]) for row in readme_table("format")}
    assert set(rows) == set(IMPORTERS)
    for format, importer in IMPORTERS.items():
        options = [
            name
            for name, parameter in inspect.signature(importer).parameters.items()
            if parameter.kind is inspect.Parameter.KEYWORD_ONLY
        ]
        assert options, format
        for name in options:
            assert f"{name}=" in rows[format], f"README: the {format} row lacks --option {name}="


def readme_blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", README.read_text("utf-8"), re.M | re.S)


def readme_commands() -> list[list[str]]:
    """Every `fugu-lite ...` line of the README's bash blocks (continuations joined), as
    words after `fugu-lite`."""
    commands = []
    for block in readme_blocks("bash"):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words and words[0] == "fugu-lite":
                commands.append(words[1:])
    return commands


def test_every_readme_command_and_option_exists() -> None:
    """A renamed or misspelt option in the README examples fails here, not for a user."""
    root = typer.main.get_command(app)
    commands = readme_commands()
    assert len(commands) > 10
    for words in commands:
        command, path = root, ["fugu-lite"]
        while isinstance(command, TyperGroup) and words and not words[0].startswith("-"):
            path.append(words[0])
            command = command.commands.get(words.pop(0))
            assert command is not None, f"README: no command {' '.join(path)}"
        known = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}
        for word in words:
            if word.startswith("-") and word != "-":
                assert word in known, f"README: {' '.join(path)} has no option {word}"


# Options of other programs that the README names (pip's, unshare's in the sandbox notes,
# llama_cpp.server's that a local worker's extra_args may not repeat).
OTHER_PROGRAMS_OPTIONS = {
    "--no-deps",
    "--user",
    "--net",
    "--model",
    "--n_ctx",
    "--config_file",
    "--api_key",
    "--hf_model_repo_id",
    "--root_path",
    "--hf_tokenizer_config_path",
}


def every_cli_option(command: Any) -> set[str]:
    options = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}
    for subcommand in getattr(command, "commands", {}).values():
        options |= every_cli_option(subcommand)
    return options


def test_every_option_the_readme_names_in_its_text_exists() -> None:
    """The command blocks are checked above; an option named in the text (`--no-serve`,
    `--cost-weight`, `--log-level`, ...) could be renamed in the code and stay in the README."""
    named = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9_-]*", README.read_text("utf-8")))
    known = every_cli_option(typer.main.get_command(app)) | {"--help"}  # click adds --help
    unknown = named - OTHER_PROGRAMS_OPTIONS - known
    assert not unknown, f"README names options no fugu-lite command has: {sorted(unknown)}"


def leaf_commands(command: Any, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    subcommands = getattr(command, "commands", None)
    if not subcommands:
        return {path: command}
    found: dict[tuple[str, ...], Any] = {}
    for name, subcommand in subcommands.items():
        found |= leaf_commands(subcommand, (*path, name))
    return found


def test_every_option_of_every_command_is_in_the_readme() -> None:
    """`serve --host` (where the endpoint listens: this machine only by default) and
    `collect --no-progress` were in no line of the README; an option counts as documented
    when one of its names (`-r` for `--records`, `--no-resume` for `--resume`) is there."""
    text = README.read_text("utf-8")
    missing = [
        f"fugu-lite {' '.join(path)} {param.opts[0]}"
        for path, command in leaf_commands(typer.main.get_command(app)).items()
        for param in command.params
        if param.param_type_name == "option"
        and not any(
            re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text)
            for name in (*param.opts, *param.secondary_opts)
        )
    ]
    assert not missing, f"README: options no line of it names: {missing}"


BENCH_README = README.parent / "bench" / "README.md"


def test_every_fugu_lite_name_the_docs_give_exists() -> None:
    """`fugu_lite.router_family.load_router_family`, `fugu_lite.server.thread.ServerThread`, ... and
    the source files named (`train_sft.py`, `bench/cost.py`) are what a reader imports or
    opens; a rename in the code would leave them pointing at nothing."""
    text = README.read_text("utf-8") + BENCH_README.read_text("utf-8")
    dotted = set(re.findall(r"\bfugu_lite(?:\.\w+)+", text))
    assert len(dotted) > 5
    for name in dotted:
        parts = name.split(".")
        for split in range(len(parts), 0, -1):  # the longest importable module, then attributes
            try:
                target: Any = importlib.import_module(".".join(parts[:split]))
            except ModuleNotFoundError:
                continue
            for attribute in parts[split:]:
                assert hasattr(target, attribute), f"docs: {name} does not exist"
                target = getattr(target, attribute)
            break
    package = README.parent / "src" / "fugu_lite"
    files = set(re.findall(r"`((?:[\w/]+/)?\w+\.py)`", text))
    assert files
    for file in files:
        assert (README.parent / file).is_file() or (package / file).is_file(), f"docs: {file}?"


def test_the_request_key_table_lists_fugu_lites_own_keys() -> None:
    documented = [documented_key(row[0]) for row in readme_table("key")]
    assert documented == list(FUGU_KEYS)


def test_the_readme_examples_of_records_tasks_and_pools_are_valid(tmp_path: Path) -> None:
    """Each JSON example, saved as a file, reads as that file: a record wrapped over two
    lines looked right in the README and was refused as "not valid JSON" once copied."""
    records = [block for block in readme_blocks("json") if '"worker_ids"' in block]
    tasks = [block for block in readme_blocks("json") if '"grader"' in block]
    assert records and tasks
    for number, block in enumerate(records + tasks):
        path = tmp_path / f"example-{number}.jsonl"
        path.write_text(block, encoding="utf-8")
        read = read_records if block in records else read_tasks
        assert len(read(path)) == len(block.splitlines())
    pools = [block for block in readme_blocks("yaml") if block.startswith("workers:")]
    assert pools
    for block in pools:
        PoolConfig.model_validate(yaml.safe_load(block))


def test_make_clean_keeps_what_the_readme_commands_write_in_runs(tmp_path: Path) -> None:
    """`make clean` deleted all of runs/, where the README's commands write collected rewards
    (paid API calls) and trained checkpoints, not only what `make demo` wrote there."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(README.parent / "Makefile", project / "Makefile")
    collected = project / "runs" / "rewards.jsonl"
    demo = project / "runs" / "demo" / "local" / "rewards.jsonl"
    for path in (collected, demo):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}\n", encoding="utf-8")
    subprocess.run(["make", "-s", "clean"], cwd=project, check=True, capture_output=True)
    assert collected.exists()
    assert not demo.parent.parent.exists()


def test_make_test_checks_all_that_make_lint_checks(tmp_path: Path) -> None:
    """`make test` ("as CI runs it") left out `ruff format --check`, so code that `make lint`
    refuses passed it."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    shutil.copy(README.parent / "Makefile", tmp_path / "Makefile")
    (tmp_path / "pyproject.toml").touch()
    fake_python(tmp_path / ".venv" / "bin" / "python", "3.11.7")
    (tmp_path / ".venv" / ".installed").touch()  # set up already: only the target's own lines

    def commands(target: str) -> list[str]:
        dry_run = ["make", "-s", "-n", target]
        return subprocess.run(dry_run, cwd=tmp_path, check=True, capture_output=True,
                              text=True).stdout.splitlines()  # fmt: skip

    assert set(commands("lint")) <= set(commands("test"))


def fake_python(path: Path, version: str) -> Path:
    """A stand-in interpreter of this version (a machine's python3 is not ours to choose):
    `--version` prints it, and a `-c` version check prints and exits as that Python's would."""
    meets = tuple(int(part) for part in version.split(".")[:2]) >= (3, 11)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "#!/bin/sh\n"
        f'case "$1" in --version) echo "Python {version}";; '
        f"-c) echo {meets}; exit {0 if meets else 1};; *) exit 1;; esac\n"
    )
    path.chmod(0o755)
    return path


def make_project(tmp_path: Path) -> Path:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    shutil.copy(README.parent / "Makefile", tmp_path / "Makefile")
    (tmp_path / "pyproject.toml").touch()
    return tmp_path


@pytest.mark.parametrize("python", ["3.10.13", "missing"])
def test_make_refuses_a_python_older_than_3_11_saying_how_to_name_another(
    tmp_path: Path, python: str
) -> None:
    """With python3 a 3.10 (Ubuntu 22.04's), `make demo` made a 3.10 .venv and failed minutes
    later in pip (no torch 2.13.0 wheel, or 'requires a different Python'); with no python3,
    make's 'python3: No such file or directory'. Neither said what to do."""
    project = make_project(tmp_path)
    interpreter = (
        str(fake_python(tmp_path / "bin" / "python3", python))
        if python != "missing"
        else str(tmp_path / "nowhere" / "python3")
    )
    result = subprocess.run(["make", "-s", "demo", f"PYTHON={interpreter}"], cwd=project,
                            capture_output=True, text=True)  # fmt: skip
    assert result.returncode != 0
    said = "Python 3.10.13" if python != "missing" else "not found"
    assert f"fugu-lite needs Python 3.11 or newer, and PYTHON={interpreter} is {said}" in (
        result.stderr
    )
    assert "make demo PYTHON=python3.11" in result.stderr
    assert not (project / ".venv").exists()


@pytest.mark.parametrize(("venv_python", "made_again"), [("3.10.13", True), ("3.11.7", False)])
def test_a_venv_of_an_older_python_is_made_again_from_scratch(
    tmp_path: Path, venv_python: str, made_again: bool
) -> None:
    """A .venv made by an older python3 (before PYTHON named 3.11), or whose Python is gone,
    stayed: `python3.11 -m venv .venv` over it keeps its old interpreter, so the install
    failed again the same way, and once stamped every target ran its broken tools."""
    project = make_project(tmp_path)
    fake_python(project / ".venv" / "bin" / "python", venv_python)
    (project / ".venv" / ".installed").touch()
    dry_run = subprocess.run(["make", "-s", "-n", "install"], cwd=project, check=True,
                             capture_output=True, text=True).stdout  # fmt: skip
    assert ("-m venv --clear .venv" in dry_run) == made_again, dry_run
    assert ("pip install" in dry_run) == made_again


def test_make_demo_passes_the_demos_options_on(tmp_path: Path) -> None:
    """The README says `--no-llmrouter`, `--no-serve`, `--tasks-per-family N` and `--pool`
    change `make demo`, but make had no way to pass them (`make demo --no-serve` is an
    option of make's own, refused)."""
    project = make_project(tmp_path)
    fake_python(project / ".venv" / "bin" / "python", "3.11.7")
    (project / ".venv" / ".installed").touch()
    options = "--no-serve --tasks-per-family 4"
    dry_run = subprocess.run(["make", "-s", "-n", "demo", f"ARGS={options}"], cwd=project,
                             check=True, capture_output=True, text=True).stdout  # fmt: skip
    assert dry_run.splitlines() == [f".venv/bin/fugu-lite demo --output runs/demo {options}"]
    readme = " ".join(README.read_text("utf-8").split())
    assert f"make demo ARGS='{options}'" in readme


def test_the_cost_aware_examples_train_on_the_pipeline_examples_features() -> None:
    """The README's reward head ("~30 s on cached features") and router family examples had
    no -c after the pipeline example's `-c configs/default.yaml`: they ran the code defaults
    (fp32 where the shipped config is int8), whose features are cached apart, so the cached
    features were computed again first, and the curves compared other features."""

    def config_of(words: list[str]) -> str | None:
        for flag in ("-c", "--config"):
            if flag in words:
                return words[words.index(flag) + 1]
        return None

    commands = readme_commands()
    pipelines = [
        w for w in commands if w[:2] == ["train", "pipeline"] and "--cost-weights" not in w
    ]
    pipeline = pipelines[0]  # the one whose features the cost-aware examples reuse
    cost_aware = [
        words
        for words in commands
        if words[:2] == ["train", "reward-head"]
        or (words[:2] == ["train", "pipeline"] and "--cost-weights" in words)
    ]
    assert len(cost_aware) >= 2
    for words in cost_aware:
        assert config_of(words) == config_of(pipeline), f"README: fugu-lite {' '.join(words)}"


def test_the_collect_examples_read_the_tasks_the_generate_example_writes() -> None:
    """`tasks generate -o runs/tasks.jsonl`, then `collect --tasks tasks.jsonl` with the
    embedded pool: run as the README gives them, collect failed on a task file that was not
    there. (With a pool of your own, the tasks may be yours too.)"""

    def value_of(words: list[str], *flags: str) -> str:
        (flag,) = [word for word in words if word in flags]
        return words[words.index(flag) + 1]

    commands = readme_commands()
    written = {value_of(w, "-o", "--output") for w in commands if w[:2] == ["tasks", "generate"]}
    embedded_pool = [w for w in commands if w[:1] == ["collect"] and "--pool" not in w]
    read = [value_of(words, "-t", "--tasks") for words in embedded_pool]
    assert read and set(read) <= written, f"README: collect reads {read}, generate writes {written}"


def test_the_readmes_module_map_names_every_module() -> None:
    """`demo.py`, `progress.py`, `threads.py` and `testing/` were in no line of "Where things
    live": a new module or package must be placed there too (a package's own modules may be
    described by its docstring)."""
    text = README.read_text("utf-8")
    start = text.index("- Where things live")
    section = text[start : text.index("\n- ", start + 1)]
    package = README.parent / "src" / "fugu_lite"
    names = [path.name for path in package.glob("*.py") if path.name != "__init__.py"]
    names += [f"{path.name}/" for path in package.iterdir() if (path / "__init__.py").is_file()]
    missing = [name for name in sorted(names) if f"`{name}" not in section]
    assert not missing, f"README, Where things live: no line names {missing}"


def test_each_packages_modules_are_placed_in_the_readme_or_its_docstring() -> None:
    """The module map leaves a package's own modules to its docstring ("the package docstring
    says what lives where"), but workers/preflight.py was left out of its package's map and
    datasets/ said nothing of its ten modules: each module of a package is named by the
    package's docstring, or by the README's map when the docstring is no map."""
    text = README.read_text("utf-8")
    start = text.index("- Where things live")
    section = text[start : text.index("\n- ", start + 1)]
    package = README.parent / "src" / "fugu_lite"
    missing = []
    for init in sorted(package.glob("*/__init__.py")):
        docstring = ast.get_docstring(ast.parse(init.read_text("utf-8"))) or ""
        for module in sorted(init.parent.glob("*.py")):
            if module.name == "__init__.py":
                continue
            in_docstring = re.search(rf"\b{module.stem}\b", docstring) is not None
            in_readme = f"`{init.parent.name}/{module.name}`" in section
            # a docstring that maps the package ("What lives where:") maps all of it
            if not in_docstring and ("What lives where" in docstring or not in_readme):
                missing.append(f"{init.parent.name}/{module.name}")
    assert not missing, f"modules named by neither the README's map nor their package: {missing}"


def test_the_readmes_own_data_example_imports(tmp_path: Path) -> None:
    """The CSV of "Your own data and workers", saved as a file, imports as the long format
    with a record per prompt and its workers in the order of the table."""
    [block] = readme_blocks("csv")
    path = tmp_path / "my-rewards.csv"
    path.write_text(block, encoding="utf-8")
    records = import_dataset("long", path)
    rows = block.splitlines()[1:]
    assert len(records) == len({row.split(",")[0] for row in rows})
    assert all(record.worker_ids == ["gpt-4o-mini", "my-llama"] for record in records)
    assert all(record.costs is not None for record in records)


def test_no_readme_prose_line_is_over_100_characters() -> None:
    """Prose lines had grown to 213 characters, past the 100 of the project's style (code
    blocks keep theirs: a JSON Lines example is one line; so do table rows)."""
    fence = False
    long_lines = []
    for number, line in enumerate(README.read_text("utf-8").splitlines(), 1):
        fence = fence != line.startswith("```")
        if not fence and not line.lstrip().startswith("|") and len(line) > 100:
            long_lines.append(number)
    assert not long_lines, f"README: lines over 100 characters: {long_lines}"


def test_the_readme_names_every_field_of_route_json() -> None:
    """`route --json` printed fields (cost weights, a reward head's predictions) that no line
    of the README named; a field added to the decision must be described there too."""
    text = " ".join(README.read_text("utf-8").split())
    start = text.index("`route --json` prints")
    paragraph = text[start : text.index(". ", text.index("`predicted_costs`", start))]
    fields = [*RoutingDecision.model_fields, *CostRoutingDecision.model_fields]
    missing = [field for field in dict.fromkeys(fields) if f"`{field}`" not in paragraph]
    assert not missing, f"README: route --json fields not described: {missing}"


def test_every_bench_option_is_in_the_bench_readme() -> None:
    """collect.py's `--calls`, serve.py's `--clients`, the `--output` of quality, es and cost
    ... were in no line of bench/README.md: only each script's source said they existed."""
    text = BENCH_README.read_text("utf-8")
    missing = []
    for script in sorted((README.parent / "bench").glob("*.py")):
        source = script.read_text("utf-8")
        calls = re.findall(r"add_argument\(\s*(\"--[\w-]+\")(.*?)\)\n", source, re.S)
        for name, rest in calls:
            option = name.strip('"')
            hidden = "SUPPRESS" in rest
            if not hidden and not re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", text):
                missing.append(f"{script.name} {option}")
    assert not missing, f"bench/README.md: options no line of it names: {missing}"


def test_integration_data_is_required_exactly_where_the_readme_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README said the real data was "required in CI" without saying how a run knows it
    is one: conftest fails only with CI=true, and skips otherwise."""
    from conftest import require_shared_data

    development = " ".join(README.read_text("utf-8").split("## Development")[1].split())
    assert "required when `CI=true`" in development
    monkeypatch.setenv("FUGU_LITE_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI needs the shared data"):
        require_shared_data("llmrouter")
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="real data not found"):
        require_shared_data("llmrouter")


def test_the_readme_names_every_field_of_the_decision_log() -> None:
    """The Decision log paragraph left out `time`, `request_id`, `model` and `stream`, and
    named the latencies only loosely, so a reader of the JSONL could not map its keys."""
    from fugu_lite.server.log import DecisionLogEntry

    text = " ".join(README.read_text("utf-8").split())
    start = text.index("**Decision log**")
    paragraph = text[start : text.index("**Concurrency**", start)]
    missing = [field for field in DecisionLogEntry.model_fields if f"`{field}`" not in paragraph]
    assert not missing, f"README: decision log fields not described: {missing}"


def test_the_readme_names_every_key_of_the_fugu_routing_field() -> None:
    """`include_routing`'s row named `cost weight` for the key `cost_weight` and none of an
    attempt's keys; each key of the `fugu` field must be there as written."""
    from types import SimpleNamespace

    from fugu_lite.server.responses import routing_field

    route = SimpleNamespace(ranking=["a"], probabilities={"a": 1.0}, cost_weight=None)
    attempt = SimpleNamespace(worker="a", outcome="ok", latency_s=0.1)
    field = routing_field(SimpleNamespace(route=route, routing_s=0.01), [attempt], None)  # type: ignore[arg-type]
    [row] = [
        line for line in README.read_text("utf-8").splitlines() if "| `include_routing` |" in line
    ]
    keys = [*field, *field["attempts"][0]]
    missing = [key for key in keys if f"`{key}`" not in row]
    assert not missing, f"README: keys of the fugu field not described: {missing}"
