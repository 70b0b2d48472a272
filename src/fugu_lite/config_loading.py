"""Loading a config: reading the YAML file (one document, no repeated keys), a pipeline file's
stage sections, and the --set overrides (dotted keys) on top."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from .backbone_identity import EMBEDDED_BACKBONES, TINY_RANDOM, local_backbone_path
from .config import STAGE_SECTIONS, ModelConfig, PipelineConfig
from .config_errors import (
    ConfigError,
    anchor_hint,
    close_keys,
    describe_config_error,
    describe_yaml_error,
    nested_matches,
    override_of,
    section_type,
    start_of,
    toml_hint,
)
from .text_reading import STDIN_NOT_READ, RecordFileError, means_stdin, read_utf8_text

C = TypeVar("C", bound=BaseModel)

DEFAULT_CONFIG = Path(__file__).parent / "configs" / "default.yaml"


def load_config(path: str | Path | None, config_type: type[C], overrides: dict | None = None) -> C:
    """Load a YAML config; unknown keys and bad values name the key and the fix."""
    data = {} if path is None else _read_yaml_mapping(Path(path))
    return _config_from(data, path, config_type, overrides)


def _config_from(
    data: dict, path: str | Path | None, config_type: type[C], overrides: dict | None
) -> C:
    """The config that `data`, read from `path` (None: no file), and the overrides make."""
    source = "overrides of the defaults" if overrides else "defaults"
    if path is not None:
        source = str(path)
    data = _empty_sections_as_defaults(data, config_type)
    _apply_overrides(data, overrides or {}, source)
    try:
        config = config_type.model_validate(data)
    except ValidationError as error:
        raise ConfigError(
            describe_config_error(error, config_type, source, overrides=overrides)
        ) from error
    if path is not None:
        check_backbone_folder_base(config, Path(path), overrides or {})
    return config


def _empty_sections_as_defaults(data: dict, config_type: type[BaseModel]) -> dict:
    """A section whose keys are all commented out (`sft:` alone) reads as None, which was
    refused as "not a valid dictionary"; it is the section's defaults, as a one-stage
    command reading the same file already took it."""
    return {
        key: {}
        if value is None
        and key in config_type.model_fields
        and section_type(config_type, (key,)) is not None
        else value
        for key, value in data.items()
    }


def load_stage_config(
    path: str | Path | None, config_type: type[C], stage: str, overrides: dict | None = None
) -> C:
    """Load one stage's config from a stage file (`model`, `training`) or from a pipeline
    file (`model`, `sft`, `rl`, `es`): its `model` and its `stage` section, which may be
    absent (then the stage's defaults). Overrides use the stage file's keys
    (`training.epochs=3`)."""
    _check_stage_overrides(overrides or {}, stage)
    if path is None:
        return load_config(None, config_type, overrides)
    data = _read_yaml_mapping(Path(path))
    # `SFT:` is a pipeline file's section mistyped, not a stage file's unknown key
    if not any(str(name).lower() in STAGE_SECTIONS for name in data):
        # the file is read once: a second read of `-c <(...)` (a pipe) found it empty
        return _config_from(data, path, config_type, overrides)
    _check_pipeline_keys(data, path, stage)
    _check_sections_are_mappings(data, path, stage)
    stage_data = _as_stage_file(data, stage)
    _apply_overrides(stage_data, overrides or {}, str(path))
    config = _validate_stage(stage_data, config_type, stage, str(path), overrides)
    _check_other_stage_sections(data, path, stage)
    check_backbone_folder_base(config, Path(path), overrides or {})
    return config


def _check_pipeline_keys(data: dict, path: str | Path, stage: str) -> None:
    """A pipeline file's top-level keys are `model` and the stage sections only."""
    known = ["model", *STAGE_SECTIONS]
    unknown = [key for key in data if key not in known]
    if unknown:
        hints = [_unknown_section_hint(key, data[key], stage, known) for key in unknown]
        raise ConfigError(
            f"{path}: a pipeline config has the sections {', '.join(known)}; unknown "
            f"top-level key(s) {', '.join(hints)}. A single-stage file has `model` and "
            "`training` instead; do not mix the two shapes."
        )


def _unknown_section_hint(key: object, value: object, stage: str, known: list[str]) -> str:
    """`key` quoted, with the section it was meant to be or where an anchor goes, if any."""
    if not close_keys(str(key), known) and close_keys(str(key), ["training"]):
        # a stage file's section: difflib's nearest key one section down was 'sft.tie_handling'
        return f"{key!r} ({_training_section_hint(stage)})"
    close = close_keys(str(key), known) or _keys_one_section_down(str(key), stage)
    # train reward-head reads a pipeline file too, which has no reward_head: section
    section = stage if stage in STAGE_SECTIONS else STAGE_SECTIONS[0]
    hint = f"did you mean {close[0]!r}?" if close else anchor_hint(key, section, value)
    return f"{key!r}" + (f" ({hint})" if hint else "")


def _training_section_hint(stage: str) -> str:
    if stage in STAGE_SECTIONS:
        return (
            f"a single-stage file's section: in a pipeline file, {stage}'s keys go under {stage}:"
        )
    return (
        f"a single-stage file's section: a pipeline file gives {stage.replace('_', '-')} only its "
        "model:, so put model: and training: in a file of their own"
    )


def _keys_one_section_down(key: str, stage: str) -> list[str]:
    """The dotted paths close to a top-level `key` one section down (`epochs` ->
    `sft.epochs`), the stage's own section first."""
    matches = nested_matches(PipelineConfig, (), key)
    return sorted(matches, key=lambda match: match.partition(".")[0] != stage)


def _check_sections_are_mappings(data: dict, path: str | Path, stage: str) -> None:
    for section in ("model", stage):
        if data.get(section) is not None and not isinstance(data[section], dict):
            raise ConfigError(
                f"{path}: section {section!r} must be a mapping of keys (e.g. `{section}:` "
                f"followed by indented `key: value` lines), got {start_of(data[section])}; fix it "
                "or delete the section to use the defaults"
            )


def _as_stage_file(data: dict, stage: str) -> dict:
    """A pipeline file's `model` and `stage` sections as a stage file's `model` and
    `training` (a missing or empty section: its defaults)."""
    return {"model": data.get("model") or {}, "training": data.get(stage) or {}}


def _apply_overrides(data: dict, overrides: Mapping[str, object], source: str) -> None:
    for dotted_key, value in overrides.items():
        _set_dotted(data, dotted_key, value, source)


def _check_other_stage_sections(data: dict, path: str | Path, stage: str) -> None:
    """The pipeline file's other stage sections, read as their own commands read them: a key
    of this stage put under another (`population_size` under `sft:` for `train es`) was left
    out without a word, and the stage trained on its default."""
    others = {name: data[name] for name in STAGE_SECTIONS if name != stage and name in data}
    try:
        PipelineConfig.model_validate(_empty_sections_as_defaults(others, PipelineConfig))
    except ValidationError as error:
        read = "model:" + (f" and {stage}:" if stage in STAGE_SECTIONS else "")
        raise ConfigError(
            f"{describe_config_error(error, PipelineConfig, str(path))}\n"
            f"  (`fugu-lite train {stage.replace('_', '-')}` reads only {read} of this pipeline "
            "file, but its other sections are wrong, and a setting meant for this stage may be "
            "among them: fix them or delete them)"
        ) from error


def _validate_stage(
    data: dict, config_type: type[C], stage: str, source: str, overrides: dict | None
) -> C:
    try:
        return config_type.model_validate(data)
    except ValidationError as error:
        # the file says `sft:` where the stage's config says `training` (--set keys aside)
        file_keys = {"training": stage}
        message = describe_config_error(error, config_type, source, file_keys, overrides=overrides)
        raise ConfigError(message) from error


def check_backbone_folder_base(config: BaseModel, path: Path, overrides: Mapping) -> None:
    """A config's relative `model.backbone` folder is read from the working directory: one
    written relative to the config file (which does not exist from here) went to the hub,
    or "does not exist", with no word of where it is. A backbone given by --set (its key or
    `--set model={backbone: bb}`) is typed from the working directory: the file is not blamed."""
    model = getattr(config, "model", None)
    if not isinstance(model, ModelConfig) or override_of("model.backbone", overrides):
        return
    name = model.backbone
    if name == TINY_RANDOM or name in EMBEDDED_BACKBONES or Path(name).expanduser().is_absolute():
        return
    if local_backbone_path(name) is not None:
        return
    beside = path.parent / name
    if path.parent.resolve() != Path.cwd().resolve() and local_backbone_path(str(beside)):
        raise ConfigError(
            f"{path}: model.backbone {name!r} is read from the working directory "
            f"({Path.cwd()}), where it does not exist; the folder is next to the config file: "
            f"write its path from the working directory ({beside}) or an absolute path"
        )


def _check_stage_overrides(overrides: dict, stage: str) -> None:
    """A one-stage command's --set keys live under model. and training., even when its -c
    file is a pipeline file (`sft.epochs=5` there is `training.epochs=5` here)."""
    for dotted_key in overrides:
        section, _, rest = str(dotted_key).partition(".")
        section = section.lower()  # `SFT.epochs` was told of YAML anchors and known keys only
        if section == stage and rest:
            raise ConfigError(
                f"--set {dotted_key}: a single stage's keys are model.* and training.*; "
                f"use training.{rest}"
            )
        if section in STAGE_SECTIONS and rest:  # another stage's: `train sft --set rl.epochs=3`
            raise ConfigError(
                f"--set {dotted_key}: {section}.* are the settings of "
                f"{_commands_reading(section)}, which `fugu-lite train "
                f"{stage.replace('_', '-')}` does not read; its keys are model.* and training.*"
            )


def _commands_reading(section: str) -> str:
    """The commands that read a pipeline file's stage section (the pipeline runs no ES)."""
    commands = [f"`fugu-lite train {section}`"]
    if section != "es":
        commands.append("`fugu-lite train pipeline`")
    return " or ".join(commands)


def _read_yaml_mapping(path: Path) -> dict:
    if means_stdin(path):
        raise ConfigError(f"-c {STDIN_NOT_READ}")
    try:
        path.stat()
    except (FileNotFoundError, NotADirectoryError):
        raise ConfigError(_config_not_found(path)) from None
    except OSError:  # a link leading back to itself (not "not found"): reading it says so
        pass
    if path.is_dir():
        raise ConfigError(f"{path} is a directory, not a config file; give the YAML file's path")
    text = _config_text(path)
    data = _yaml_document(path, text)
    if data is None:
        return {}
    if not isinstance(data, dict):
        lines = text.splitlines()  # up to the first that is neither blank nor a comment
        first = next(
            (n for n, line in enumerate(lines) if line.strip() and line.lstrip()[0] != "#"), 0
        )
        raise ConfigError(
            f"{path}: the top level must be a mapping of sections, got {start_of(data)}"
            f"{toml_hint(lines[: first + 1])}"
        )
    return data


def _shipped_config_hint(path: Path) -> str:
    """`-c src/fugu_lite/configs/default.yaml`, as --help and the README write it, is a path
    of a source checkout: run elsewhere (an installed package) it was "not found", with no
    word of where the installed one is."""
    shipped = DEFAULT_CONFIG.parent / path.name
    if path.parent.name != DEFAULT_CONFIG.parent.name or not shipped.is_file():
        return ""
    return f"; the {path.name} shipped with fugu-lite is {shipped}"


def _config_not_found(path: Path) -> str:
    """Where a -c file was looked for and what to give instead: `-c configs/mine.yaml` said
    only "not found", not from which folder a relative path was read, nor how to fix it."""
    where = "" if path.is_absolute() else f" (looked for {path.absolute()})"
    fix = _shipped_config_hint(path) or (
        f"; write one (README 'Configs', or copy {DEFAULT_CONFIG}) or leave -c out for the defaults"
    )
    return f"config file {path} not found{where}{fix}"


def read_yaml_document(path: Path) -> object:
    """A YAML file's one document, duplicate keys refused; text that is not UTF-8 or not YAML
    is a ConfigError naming the file (and the line and column)."""
    return _yaml_document(path, _config_text(path))


def _config_text(path: Path) -> str:
    try:
        return read_utf8_text(path)
    except RecordFileError as error:
        raise ConfigError(str(error)) from error


def _yaml_document(path: Path, text: str) -> object:
    try:
        return yaml.load(text, Loader=UniqueKeyLoader)
    except yaml.YAMLError as error:
        raise ConfigError(describe_yaml_error(path, error, text)) from error
    except RecursionError:  # PyYAML reads nested brackets or indents by recursion
        raise ConfigError(
            f"{path}: not valid YAML: nested too deeply to read (brackets or indented blocks "
            "inside one another, hundreds of levels down; a config nests a few): is this the "
            "file you meant?"
        ) from None


class UniqueKeyLoader(yaml.SafeLoader):
    """yaml.safe_load's loader, refusing a key given twice in one mapping: plain YAML keeps
    the last, so a second `sft:` section silently replaced the first with all its keys."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        first_line: dict[object, int] = {}
        for key_node, _ in node.value:
            # `<<: *base` merges keys that the mapping's own may override: no repeat
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag.endswith(":merge"):
                continue
            key = self.construct_object(key_node, deep=deep)
            line = key_node.start_mark.line + 1
            if key in first_line:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"the key {key!r} is given twice in one mapping (first on line "
                    f"{first_line[key]}, again on line {line}), and only the last would count; "
                    "keep one, with every setting you mean under it",
                    key_node.start_mark,
                )
            first_line[key] = line
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        """YAML 1.1 reads `010` as octal (8, where `09` stays 9) and `1:30` as base 60 (90):
        `epochs: 010` trained 8 epochs without a word. Both are refused, saying what YAML
        read and what to write; `0x1F`, `0b11` and `1_000` still read as they look."""
        value: int = super().construct_yaml_int(node)
        text = str(self.construct_scalar(node))
        sign, digits = text[: len(text) - len(text.lstrip("+-"))], text.lstrip("+-")
        digits = digits.replace("_", "")
        if ":" in digits:
            read_as = f"a base-60 number ({value}, as in minutes:seconds)"
            mean = f"write {value} if you mean that"
        elif len(digits) > 1 and digits[0] == "0" and digits[1] not in "xb":
            read_as = f"an octal number ({value})"
            mean = f"write {sign}{digits.lstrip('0') or '0'} without the leading zero"
        else:
            return value
        raise yaml.constructor.ConstructorError(
            None,
            None,
            f"YAML 1.1 reads {text} as {read_as}: {mean}, or quote it ('{text}') if it is text",
            node.start_mark,
        )


UniqueKeyLoader.add_constructor("tag:yaml.org,2002:int", UniqueKeyLoader.construct_yaml_int)


def _set_dotted(data: dict, dotted_key: str, value: object, source: str) -> None:
    """Sets one --set key, copying each section on its way: a YAML alias (`rl: *sft`) is
    the very same dict as its anchor, so `--set sft.epochs=5` also set rl's epochs.

    A value on the way is named with its `source` (the file): `sft: 5` in the file made
    `--set sft.epochs=2` fail as if the --set alone were wrong."""
    *parents, leaf = dotted_key.split(".")
    if "" in (*parents, leaf):  # `sft..epochs` was "unknown key 'sft.'", `sft.` a key ''
        raise ConfigError(
            f"--set {dotted_key}: the key has an empty part (two dots in a row, or a dot at "
            "an end); write section.key, e.g. --set training.epochs=5"
        )
    node = data
    for depth, part in enumerate(parents):
        if node.get(part) is None:
            node[part] = {}
        if not isinstance(node[part], dict):
            prefix = ".".join(parents[: depth + 1])
            raise ConfigError(
                f"{source}: --set {dotted_key}: {part!r} is a value here, not a section of "
                f"keys ({prefix} is {node[part]!r}; --set {prefix}=VALUE sets it)"
            )
        node[part] = dict(node[part])
        node = node[part]
    node[leaf] = value
