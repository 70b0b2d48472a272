"""What every `fugu-lite` command uses: the consoles, the shared options, failing with one
`error:` line, stopping cleanly on Ctrl-C, and the checks of output paths, --set overrides and
record files made before any long work."""

from __future__ import annotations

import os
import shlex
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

import typer
import yaml
from pydantic import BaseModel
from typer._click.core import Context
from typer._click.exceptions import MissingParameter
from typer.core import TyperGroup

from ..config import ModelConfig, unusable_device
from ..config_errors import ConfigError
from ..config_loading import UniqueKeyLoader, load_config
from ..text import console_name, console_text, notes_console, results_console, visible_controls
from ..text_reading import COMPRESSION_SUFFIXES, RecordFileError, broken_link, leads_back_to_itself

if TYPE_CHECKING:
    from ..schemas import RewardRecord

ConfigT = TypeVar("ConfigT", bound=BaseModel)


class OneLineValueErrors(TyperGroup):
    """A group whose commands' refused option values (out of range, not a number, empty) are
    one `error:` line naming the option and the value given, as every other refusal is: Click
    printed them after its usage lines as "Error: Invalid value for '--per-family': ...".
    A missing option or an unknown one keeps Click's usage lines, which show what to give."""

    def invoke(self, ctx: Context) -> Any:
        given = [*ctx._protected_args, *ctx.args]  # the command line left to the subcommand
        try:
            return super().invoke(ctx)
        except typer.BadParameter as error:
            if isinstance(error, MissingParameter):
                raise
            fail(refused_value(error, given))


def refused_value(error: typer.BadParameter, given: list[str]) -> str:
    """A refused value said as the commands say theirs: `--per-family 0: Input should be ...`
    (the last value given to the option, as Click takes it; an argument by its name)."""
    param, problem = error.param, error.message
    if param is None or not param.opts[0].startswith("-"):  # an argument
        return f"{param.get_error_hint().strip(chr(39)).upper() if param else 'A VALUE'}: {problem}"
    flag, value = param.opts[0], None
    for index, part in enumerate(given):
        if part == "--":
            break
        for opt in (*param.opts, *param.secondary_opts):
            if part == opt and index + 1 < len(given):
                flag, value = opt, given[index + 1]
            elif opt.startswith("--") and part.startswith(f"{opt}="):
                flag, value = opt, part.removeprefix(f"{opt}=")
    shown = "" if value is None else f" {shlex.quote(visible_controls(value))}"
    return f"{flag}{shown}: {problem}"


def command_group(help: str) -> typer.Typer:
    # plain (click) help: rich's option tables cut the names that do not fit their column, so
    # at 80 columns (or piped) `serve --help` listed `--max-body-byt…` and `--breaker-cool…`
    return typer.Typer(
        no_args_is_help=True, help=help, rich_markup_mode=None, cls=OneLineValueErrors
    )


console = results_console()
# errors, warnings and interruptions: never mixed into what a command prints (`route --json`)
err_console = notes_console()

# what one value of a repeatable option is: typer showed its type, `<list[str]>`, which read
# as "give a list"
KEY_VALUE = "<key=value>"


def non_empty_path(give: str) -> Callable[[str], Path]:
    """A path option's parser refusing an empty path: `-o "$OUT"` with OUT unset is `-o ''`,
    which a Path reads as `.`, so a stage's checkpoint files were written among the working
    directory's own, and `-c ''` or `-r ''` was refused as ". is a directory", a name the user
    never wrote. `give` says what to give instead."""

    def parse(text: str | Path) -> Path:  # a Path: the option's default (demo's -o)
        if isinstance(text, str) and not text.strip():
            raise typer.BadParameter(f"is empty (an unset shell variable?); {give}")
        return Path(text)

    return parse


def non_empty_text(give: str) -> Callable[[str], str]:
    """non_empty_path's check for an option read as text (a backbone folder or hub id, a
    checkpoint recorded as given): `--backbone ''` was read as the working directory."""

    def parse(text: str) -> str:
        if not text.strip():
            raise typer.BadParameter(f"is empty (an unset shell variable?); {give}")
        return text

    return parse


ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config",
        "-c",
        parser=non_empty_path("give the YAML config file, or leave -c out for the defaults"),
        metavar="<path>",
        help="YAML config; omitted keys keep the code defaults (config.py: fp32). For the "
        "shipped int8 setup pass src/fugu_lite/configs/default.yaml.",
    ),
]
RecordsOption = Annotated[
    Path,
    typer.Option(
        "--records",
        "-r",
        help="RewardRecord JSONL file.",
        parser=non_empty_path("give the RewardRecord JSONL file"),
        metavar="<path>",
    ),
]
OutputOption = Annotated[
    Path,
    typer.Option(
        "--output",
        "-o",
        help="Output folder.",
        parser=non_empty_path("give the output folder, or . for the working directory"),
        metavar="<path>",
    ),
]
PoolOption = Annotated[
    Path | None,
    typer.Option(
        "--pool",
        "-p",
        parser=non_empty_path("give the pool YAML file, or leave --pool out for the local pool"),
        metavar="<path>",
        help="Pool YAML; omitted = embedded local pool.",
    ),
]
BackboneOption = Annotated[
    str | None,
    typer.Option(
        "--backbone",
        parser=non_empty_text("give the backbone folder, or leave --backbone out"),
        metavar="<str>",
        help="Where the checkpoint's backbone folder is now, when it moved (another machine, "
        "another path); it must hold the weights the checkpoint was trained on (checked). "
        "Default: where the checkpoint says.",
    ),
]
ForceOption = Annotated[
    bool, typer.Option("--force", help="Replace the -o file if it exists (refused otherwise).")
]
CheckpointOption = Annotated[
    Path,
    typer.Option(
        parser=non_empty_path("give the checkpoint folder"),
        metavar="<path>",
        help="Router checkpoint, router family or reward-head folder.",
    ),
]
JsonlOutputOption = Annotated[
    Path,
    typer.Option(
        "--output",
        "-o",
        parser=non_empty_path("give the JSONL file to write"),
        metavar="<path>",
        help="Where to write the JSONL.",
    ),
]
SetOption = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        metavar=KEY_VALUE,
        help="Override a config key (repeatable): e.g. training.epochs=5 (sft, rl), "
        "training.iterations=300 (es), sft.epochs=5 (pipeline).",
    ),
]


def print_result(line: str) -> None:
    """A command's result line (`checkpoint written to PATH`) as it is: never folded at the
    terminal's width (80 columns when piped) nor read as rich markup (`runs/[x]`)."""
    console.print(line, markup=False, soft_wrap=True)


def fail(message: str) -> NoReturn:
    # messages quote user input: a glob like `[qk]_proj` that rich would eat, a worker id
    # holding an ESC that would restyle the terminal
    err_console.print(f"[bold red]error:[/bold red] {console_text(message)}")
    raise typer.Exit(code=2)


_interruptions_reported: list[str] = []


def report_interruption(what_was_kept: str) -> None:
    """The one line a stopped command prints: what was kept and how to go on."""
    err_console.print(f"[yellow]interrupted:[/yellow] {console_text(what_was_kept)}")
    _interruptions_reported.append(what_was_kept)


def interruption_reported() -> bool:
    """Whether a command said what its interruption kept (the entry point says it otherwise)."""
    return bool(_interruptions_reported)


def as_ctrl_c(signum: int, frame: FrameType | None) -> None:
    """SIGTERM taken as a Ctrl-C: asyncio.run stops a run on one as it should (cancelling
    it, then raising KeyboardInterrupt), and outside it a Ctrl-C is a KeyboardInterrupt.
    Raised as KeyboardInterrupt itself (default_int_handler), it broke out of whichever of
    the run's tasks was running, whose traceback Python then printed. Where Ctrl-C is
    ignored (a job a script started in the background), it is still raised so, and a
    collection's asyncio run, which asyncio.run then does not cancel, cancels itself on
    SIGTERM first (collect.sigterm.run_until_stopped)."""
    if callable(signal.getsignal(signal.SIGINT)):
        signal.raise_signal(signal.SIGINT)
    else:
        raise KeyboardInterrupt


@contextmanager
def interrupts_stop_the_run() -> Iterator[None]:
    """Meanwhile, SIGTERM is taken as a Ctrl-C (as_ctrl_c) and a Ctrl-C is Python's own
    (default_int_handler): asyncio.run cancels its run on a Ctrl-C only when that is SIGINT's
    handler, and the console entry point's (noting a Ctrl-C during its imports) is another,
    so under `fugu-lite` a Ctrl-C or SIGTERM broke out of one of the run's tasks, whose
    traceback Python printed. Both handlers are put back after. Outside the main thread
    (a command invoked from an app's worker thread) they are left as they are: Python sets
    them only there, and signals come to it alone."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous_term = signal.signal(signal.SIGTERM, as_ctrl_c)
    previous_int = signal.getsignal(signal.SIGINT)
    if callable(previous_int):  # an ignored Ctrl-C stays ignored
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous_term)
        if callable(previous_int):
            signal.signal(signal.SIGINT, previous_int)


@contextmanager
def stopped_cleanly(what_was_kept: str) -> Iterator[None]:
    """Ctrl-C or SIGTERM: say what was kept and how to go on, and exit 130 without a
    traceback. SIGTERM is taken as a Ctrl-C meanwhile (interrupts_stop_the_run), so that the
    atomic writers remove their temporary files, and an asyncio run winds down, as on Ctrl-C."""
    with interrupts_stop_the_run():
        try:
            yield
        except KeyboardInterrupt:
            report_interruption(what_was_kept)
            raise typer.Exit(code=130) from None


def parse_pairs(pairs: list[str] | None, flag: str, example: str) -> dict[str, str]:
    """key=value strings as given, e.g. `--option on_missing=drop` -> {"on_missing": "drop"}."""
    parsed = {}
    for pair in pairs or []:
        if "=" not in pair:
            fail(f"{flag} {pair!r} needs the form key=value, e.g. {flag} {example}")
        key, value = pair.split("=", 1)
        if not key.strip():
            fail(f"{flag} {pair!r} has no key before '='; e.g. {flag} {example}")
        parsed[key.strip()] = value
    return parsed


def parse_overrides(pairs: list[str] | None) -> dict:
    """--set key=value pairs, each value read as YAML (5 -> int, [a, b] -> list)."""
    overrides = {}
    for key, value in parse_pairs(pairs, "--set", "training.epochs=5").items():
        try:
            overrides[key] = yaml.load(value, Loader=UniqueKeyLoader)  # as a -c file reads it
        except yaml.YAMLError as error:
            problem = getattr(error, "problem", None) or error
            fail(
                f"--set {key}={value}: the value {value!r} is not valid YAML ({problem}); give "
                "a number, a word, or a list like [a, b] (quote text holding YAML syntax)"
            )
    return overrides


def check_output(path: Path, flag: str, kind: str, example: str = "records.jsonl") -> None:
    """Fail now, before any long work, when `path` cannot become the output `kind` ("file"
    or "folder"); `example` names such a file in the advice for a folder given instead."""
    if str(path) == "-":  # it made a file (or folder) named "-" in the working directory
        written = "a file, whole or not at all" if kind == "file" else "a folder"
        fail(f"{flag} -: the output is {written}, not stdout; give a {kind} path")
    if kind == "file" and path.suffix.lower() in COMPRESSION_SUFFIXES:
        # it wrote plain text under the name: gunzip and zcat failed on it
        fail(
            f"{flag} {path}: the output is plain JSON Lines, not compressed (fugu-lite reads "
            f"no compressed record or task file); give a name without {path.suffix}, e.g. "
            f"{flag} {path.with_suffix('')}, and compress a copy afterwards if needed"
        )
    path = path.absolute()
    loop = link_loop(path)
    if loop is not None:  # else said to point at a disk not mounted, or failed after the work
        fail(
            f"{flag} {path}: {loop} is a link that leads back to itself ({loop} -> "
            f"{loop.readlink()}), so it names nothing; remove the link or point it elsewhere, "
            "or give another path"
        )
    if kind == "file" and path.is_dir():
        fail(f"{flag} {path} is a directory; give a file path, e.g. {path / example}")
    if kind == "folder" and path.exists() and not path.is_dir():
        fail(f"{flag} {path} is a file, not a folder; give a folder path (created if needed)")
    existing = path if kind == "folder" else path.parent
    while not existing.exists():
        if existing.is_symlink():  # else found only when the output is written, after the work
            fail(
                f"{flag} {path}: {existing} is {broken_link(existing)}; create it, or give "
                "another path"
            )
        existing = existing.parent
    if not existing.is_dir():
        fail(f"{flag} {path}: {existing} is a file, so nothing can be created inside it")
    if not os.access(existing, os.W_OK | os.X_OK):
        fail(f"{flag} {path}: no permission to write in {existing}; choose another path")


def link_loop(path: Path) -> Path | None:
    """The link among `path` and the folders above it that leads back to itself (`ln -s
    loop loop`, or links pointing at each other), if any."""
    return next(
        (
            link
            for link in (path, *path.parents)
            if link.is_symlink() and leads_back_to_itself(link)
        ),
        None,
    )


def check_not_replacing(output: Path, force: bool) -> None:
    """An existing output file is replaced only with --force: `data import -o` over the
    records `collect` had gathered (paid calls) destroyed them without a word."""
    if force or not output.is_file() or output.stat().st_size == 0:
        return
    fail(
        f"-o {output} already exists and would be replaced; pass --force to replace it, or "
        "give another -o path"
    )


def check_file_to_write(output: Path, force: bool, example: str) -> None:
    """`-o` must be a file that can be written, and an existing one is replaced only with
    --force; `example` names such a file in the advice for a folder given instead."""
    check_output(output, "-o", "file", example)
    check_not_replacing(output, force)


@contextmanager
def writing_file(output: Path) -> Iterator[None]:
    """Writing the `-o` file whole: Ctrl-C says the old content stays, and a failed write is
    one `error:` line naming the file."""
    kept = (
        f"{output} holds its old content or the complete new one, never a half-written "
        "file; run the same command again"
        if output.exists()
        else f"{output} is the complete new file or not there at all, never a half-written "
        "one; run the same command again"
    )
    with stopped_cleanly(kept):
        try:
            yield
        except OSError as error:
            fail(f"cannot write {output}: {error.strerror or error}; choose another -o path")


def same_path(first: Path, second: Path) -> bool:
    """Whether two paths name one file or folder (`run`, `./run`, a link to it, or `R.jsonl`
    and `r.jsonl` not yet written in a folder that ignores case, as macOS's and Windows'
    do by default)."""
    try:
        first_resolved, second_resolved = first.resolve(), second.resolve()
    except RuntimeError:  # a link loop (Python < 3.13) names no file: only its own spelling
        return first.absolute() == second.absolute()
    if first_resolved == second_resolved:
        return True
    if first.exists() or second.exists():
        return first.exists() and second.exists() and first.samefile(second)
    return str(first_resolved).casefold() == str(second_resolved).casefold() and ignores_case(
        first_resolved.parent
    )


def ignores_case(folder: Path) -> bool:
    """Whether names in `folder` (or, where it is not there yet, its nearest existing
    ancestor) that differ only in case are one file, as the file system answers it: a name
    found there and that name in the other case are one file. A folder of a case-sensitive
    system (Linux's) says no, so `R.jsonl` and `r.jsonl` stay two files there."""
    while not folder.is_dir() and folder != folder.parent:
        folder = folder.parent
    try:
        with os.scandir(folder) as entries:
            name = next((e.name for e in entries if _swaps_case(e.name)), None)
    except OSError:
        name = None
    if name is not None:
        return _one_file(folder / name, folder / name.swapcase())
    # an empty folder: its own name in its parent (or an ancestor's), on the same file system
    # as a rule
    named = next((path for path in (folder, *folder.parents) if _swaps_case(path.name)), None)
    return named is not None and _one_file(named, named.with_name(named.name.swapcase()))


def _swaps_case(name: str) -> bool:
    """Whether the name has letters whose other case names it back (not "ß", whose upper
    case is "SS")."""
    return name.swapcase() != name and name.swapcase().swapcase() == name


def _one_file(name: Path, other_case: Path) -> bool:
    try:
        return name.samefile(other_case)
    except OSError:  # not there in the other case: the folder tells case apart
        return False


def read_records_or_fail(path: Path) -> list[RewardRecord]:
    from ..schemas import read_records, repeated_ids

    try:
        records = read_records(path)
    except RecordFileError as error:
        fail(str(error))
    repeated = repeated_ids(records)
    if repeated:
        err_console.print(
            f"[yellow]warning:[/yellow] {console_name(str(path))}: {len(repeated)} record ids "
            f"occur more than once (first: {console_name(repeated[0])}); predictions.jsonl "
            "will not tell those records apart by id (its prompt_hash still does): give each "
            "record its own id"
        )
    return records


def check_device_or_fail(config: BaseModel, path: Path | None, overrides: dict) -> None:
    """A training config's model.device that torch cannot use here (`cuda` on a machine
    without CUDA) ended the run in torch's AssertionError 'Torch not compiled with CUDA
    enabled', after the records were read (`demo`: after the LLMRouter import, as a
    traceback)."""
    model = getattr(config, "model", None)
    if not isinstance(model, ModelConfig) or (reason := unusable_device(model.device)) is None:
        return
    given = (
        "--set model.device"
        if "model.device" in overrides
        # `--set "model={device: cuda}"`: it was said to be in the -c file, or in None
        else "model.device (given by --set model)"
        if "model" in overrides
        else f"model.device in {path}"
    )
    fail(
        f"{given} is {model.device!r}, which torch cannot use on this machine ({reason}): "
        "set it to cpu (`device: cpu` under `model:`, or --set model.device=cpu)"
    )


def load_or_fail(path: Path | None, config_type: type[ConfigT], overrides: dict) -> ConfigT:
    try:
        return load_config(path, config_type, overrides)
    except ConfigError as error:
        fail(str(error))
