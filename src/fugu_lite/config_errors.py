"""Describing a bad config: the YAML error's file, line and column; each invalid key, dotted,
with the known keys, close matches and the section it belongs in."""

from __future__ import annotations

import datetime
import difflib
import re
from collections.abc import Iterator, Mapping
from pathlib import Path

import yaml
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from .config import STAGE_SECTIONS, PipelineConfig
from .io import check_message
from .text_reading import nul_text_message


class ConfigError(ValueError):
    """A config file is missing, not YAML, or has a wrong key or value."""


def describe_yaml_error(path: Path, error: yaml.YAMLError, text: str) -> str:
    """One line naming the file, line and column: PyYAML's own text placed them on lines of
    their own, in "<unicode string>" (the text it was given), not in the file."""
    if isinstance(error, yaml.reader.ReaderError):
        return _refused_character(path, error, text)
    problem_mark = getattr(error, "problem_mark", None)
    problem = getattr(error, "problem", None)
    if problem_mark is None or problem is None:
        return f"{path}: not valid YAML: {' '.join(str(error).split())}"
    where = f"{path}, line {problem_mark.line + 1}, column {problem_mark.column + 1}"
    context, context_mark = getattr(error, "context", None), getattr(error, "context_mark", None)
    if context and context_mark is not None:
        problem += f" ({context} at line {context_mark.line + 1}, column {context_mark.column + 1})"
    elif context:
        problem += f" ({context})"
    if "'\\t'" in problem:
        problem += "; YAML indents with spaces, not tabs"
    if problem == "expected '<document start>', but found '{'":
        # `-c runs/tasks.jsonl`: YAML reads the first line as the document, then stops
        problem += (
            " (a JSON object per line: is this a JSON Lines file of tasks or records, given "
            "where a YAML config goes?)"
        )
    if problem == "mapping values are not allowed here":
        problem += " (a value holding ': ' needs quotes, and a key its own line)"
    # the TOML line that made the error comes before it (README.md's code blocks hold some)
    toml = toml_hint(text.splitlines()[: problem_mark.line + 1])
    return f"{where}: not valid YAML: {problem}{toml}"


_TOML_KEY = re.compile(r"\s*([A-Za-z_][\w.-]*)\s*=\s*(.*?)\s*")  # `epochs = 5`
_TOML_SECTION = re.compile(r"\[\s*([\w.-]+)\s*\]\s*")  # `[sft]`


def toml_hint(lines: list[str]) -> str:
    """The first TOML (or INI) line of `lines`, said with the YAML to write for it: YAML read
    `[sft]` as a list and `epochs = 5` as text, and said "expected '<document start>', but
    found '<scalar>'" or "the top level must be a mapping of sections", with no word that
    the file is no YAML."""
    for number, line in enumerate(lines, start=1):
        key, section = _TOML_KEY.fullmatch(line), _TOML_SECTION.fullmatch(line)
        meant = f"{key[1]}: {key[2]}" if key else f"{section[1]}:" if section else None
        if meant is not None:
            return (
                f" (line {number}, `{line.strip()}`, is TOML or INI, not YAML: write `{meant}`, "
                "with each section's keys indented under its `section:` line)"
            )
    return ""


def _refused_character(path: Path, error: yaml.reader.ReaderError, text: str) -> str:
    """A character YAML refuses anywhere (a NUL, a terminal's colour code ESC, a form feed) was
    said at a "position" of "<unicode string>", not at a line of the file."""
    before = text[: error.position]
    column = error.position - before.rfind("\n")  # rfind: -1 on the first line
    where = f"{path}, line {before.count(chr(10)) + 1}, column {column}"
    if error.character == 0:  # UTF-16 without a byte-order mark decodes as UTF-8
        return nul_text_message(where)
    return (
        f"{where}: not valid YAML: the control character U+{error.character:04X} is not "
        "allowed in YAML text; delete it"
    )


def describe_config_error(
    error: ValidationError,
    config_type: type[BaseModel],
    source: str,
    file_keys: dict[str, str] | None = None,
    overrides: Mapping[str, object] | None = None,
) -> str:
    """One line per problem, naming the dotted key; `file_keys` renames a key's section as
    the file names it (`training` -> `sft`), and a key set by --set (`overrides`) says so, or
    `-c FILE --set training.epochs=-1` sent the user to look for it in FILE."""
    lines = [f"{source}: invalid {config_type.__name__}:"]
    for item in error.errors():
        key = ".".join(str(part) for part in item["loc"])
        given = override_of(key, overrides)
        key = _key_as_the_file_names_it(key, file_keys, given)
        if item["type"] == "extra_forbidden":
            lines.append(_unknown_key_line(item, config_type, key, given, file_keys))
        elif item["type"] == "invalid_key":
            known = _known_keys(config_type, item["loc"][:-1])
            lines.append(non_text_key_line(item, key, known))
        else:
            lines.append(_invalid_value_line(item, key, given))
    return "\n".join(lines)


def start_of(value: object, size: int = 80) -> str:
    """`value` as Python shows it, cut after `size` characters: a text or JSON records file
    given as -c was echoed whole (170 KB of error for a CSV of 5000 rows). Shown piece by
    piece, so lists of aliases of aliases (YAML's "billion laughs", 9**9 items from a few
    lines) are not expanded: repr() of the whole value hung the error it was refused with."""
    shown = ""
    for piece in _repr_pieces(value, set()):
        shown += piece
        if len(shown) > size:
            return f"{shown[:size]}..."
    return shown


def _repr_pieces(value: object, open_ids: set[int]) -> Iterator[str]:
    """repr(value), a list's or mapping's items one at a time (what YAML reads is built of
    lists and dicts); one that holds itself (`&a [*a]`) is [...] or {...}, as repr says."""
    if type(value) is dict:
        opening, closing = "{", "}"
        items = ((f"{key!r}: ", item) for key, item in value.items())
    elif type(value) is list:
        opening, closing = "[", "]"
        items = (("", item) for item in value)
    else:
        yield repr(value)
        return
    if id(value) in open_ids:
        yield f"{opening}...{closing}"
        return
    open_ids.add(id(value))
    yield opening
    for number, (key, item) in enumerate(items):
        yield f"{', ' if number else ''}{key}"
        yield from _repr_pieces(item, open_ids)
    open_ids.discard(id(value))
    yield closing


def override_of(key: str, overrides: Mapping[str, object] | None) -> str | None:
    """The --set key that gave `key` (it, a section holding it, or a key inside it), if any."""
    return next(
        (
            dotted
            for dotted in overrides or {}
            if f"{key}.".startswith(f"{dotted}.") or f"{dotted}.".startswith(f"{key}.")
        ),
        None,
    )


def _key_as_the_file_names_it(key: str, file_keys: dict[str, str] | None, given: str | None) -> str:
    section, _, rest = key.partition(".")
    if file_keys and section in file_keys and rest and given is None:
        return f"{file_keys[section]}.{rest}"
    return key


def _unknown_key_line(
    item: ErrorDetails,
    config_type: type[BaseModel],
    key: str,
    given: str | None,
    file_keys: dict[str, str] | None,
) -> str:
    known = _known_keys(config_type, item["loc"][:-1])
    hint = _unknown_config_key_hint(item, config_type, key, given, file_keys, known)
    where = "" if given is None else f" (given by --set {given})"
    return f"  unknown key {key!r}: {hint}known keys here: {', '.join(known)}{where}"


def _unknown_config_key_hint(
    item: ErrorDetails,
    config_type: type[BaseModel],
    key: str,
    given: str | None,
    file_keys: dict[str, str] | None,
    known: list[str],
) -> str:
    """Where an unknown key belongs, or what it was meant to be; a later case, more telling,
    replaces an earlier one's hint."""
    location = item["loc"]
    hint = _close_key_hint(config_type, location, known)
    hint = _sibling_section_hint(config_type, location, given, file_keys) or hint
    hint = _other_stage_hint(config_type, location, given, file_keys) or hint
    hint = _pool_key_hint(location) or hint
    if given is None:  # a --set key is not indented
        hint = _nested_section_hint(config_type, location, key, file_keys) or hint
    if not hint and given is None:  # a --set key holds no anchor
        hint = _anchor_section_hint(item, config_type, key, known)
    if key == "training" and "sft" in known:
        hint = _pipeline_training_hint(given)
    return hint


def non_text_key_line(item: ErrorDetails, key: str, known: list[str]) -> str:
    """A key YAML reads as no text (`yes:` a boolean, `1:` a number, `~:` null) was "1: Keys
    should be strings (got True)": pydantic writes True as 1 in a key's path, and a null key
    was said to have no value. `known` are the keys of the key's section (a training config's
    or a pool's)."""
    section = key.rpartition(".")[0]  # as the file names it
    where = f"{section}: " if section else ""
    written = item.get("input")
    hint = quoting_hint(written, None) or (
        "; YAML reads ~ or null as no value, and nothing before ':' is no key: write the key"
    )
    return f"  {where}the key {written!r} is not text{hint}; known keys here: {', '.join(known)}"


def _pipeline_training_hint(given: str | None) -> str:
    """A stage file's `training` in a pipeline config: its hint ran into "known keys here"
    with no separator, and `--set training.epochs=5` was told of sections, not of --set."""
    if given is None or "." not in given:
        return "a pipeline config puts stage settings under sft:, rl: or es:; "
    rest = given.partition(".")[2]
    return f"a pipeline config's stage settings are sft.*, rl.* and es.*: e.g. --set sft.{rest}; "


def _close_key_hint(config_type: type[BaseModel], location: tuple, known: list[str]) -> str:
    """The key meant, here (`known`) or one section down."""
    close = close_keys(str(location[-1]), known)
    close = close or nested_matches(config_type, location[:-1], str(location[-1]))
    return f"did you mean {close[0]!r}? " if close else ""


def _sibling_section_hint(
    config_type: type[BaseModel],
    location: tuple,
    given: str | None,
    file_keys: dict[str, str] | None,
) -> str:
    """The other sections that have the key, as the file names them."""
    homes = _sibling_sections(config_type, location)
    if not homes:
        return ""
    renamed = file_keys if file_keys and given is None else {}
    shown_homes = [f"{renamed.get(home, home)}:" for home in homes]
    return f"it belongs under {' or '.join(shown_homes)}, not here; "


def _other_stage_hint(
    config_type: type[BaseModel],
    location: tuple,
    given: str | None,
    file_keys: dict[str, str] | None,
) -> str:
    """The stages whose settings have the key: their sections (under a pipeline file's stage
    section) or their commands."""
    stages = _other_stages(config_type, location)
    if not stages:
        return ""
    if file_keys and given is None:
        sections = " or ".join(f"{stage}:" for stage in stages)
        return f"it belongs under {sections}, not here; "
    commands = " or ".join(f"`fugu-lite train {stage}`" for stage in stages)
    hint = f"a setting of {commands}, not of this stage; "
    if given is None:
        hint += "is this file another stage's config? "
    return hint


def _pool_key_hint(location: tuple) -> str:
    if len(location) == 1 and _is_pool_key(str(location[0])):
        return "a worker pool's key: is this a pool config (for --pool of collect, serve, demo)? "
    return ""


def _nested_section_hint(
    config_type: type[BaseModel], location: tuple, key: str, file_keys: dict[str, str] | None
) -> str:
    """A top-level section indented under another (`model:` under `sft:`, a model per
    stage): it was "unknown" with the stage's keys listed, and no word of where it goes."""
    if len(location) != 2:
        return ""
    name, parent = str(location[1]), key.rpartition(".")[0]
    top_level = set(config_type.model_fields) | (set(STAGE_SECTIONS) if file_keys else set())
    if name in top_level:
        shared = " (one model: serves every stage)" if name == "model" else ""
        return (
            f"{name!r} is a top-level section, not a key of {parent}:; unindent it to the "
            f"top level{shared}; "
        )
    if name in STAGE_SECTIONS and "training" in config_type.model_fields:
        return (
            f"{name!r} is a pipeline file's top-level section: in this stage file its keys go "
            f"directly under training: (or write {name}: in place of training:); "
        )
    return ""


def _anchor_section_hint(
    item: ErrorDetails, config_type: type[BaseModel], key: str, known: list[str]
) -> str:
    """An unknown top-level key may only hold a YAML anchor: where anchors go."""
    if len(item["loc"]) != 1:
        return ""
    holders = [
        name for name in known if name != "model" and section_type(config_type, (name,)) is not None
    ]
    if key not in STAGE_SECTIONS and holders:
        return f"{anchor_hint(key, holders[0], item.get('input'))}; "
    return ""


def _invalid_value_line(item: ErrorDetails, key: str, given: str | None) -> str:
    shown = key if given is None else f"--set {key}" if given == key else f"{key} (--set {given})"
    value = item.get("input")
    # a section's own check (runtime with device) says what is wrong in its message;
    # its input is the whole section
    message = check_message(item)
    if item["type"] == "model_type":  # pydantic's "valid dictionary or instance of X"
        message = (
            f"must be a section of keys (`{key.rpartition('.')[2]}:` followed by "
            "indented `key: value` lines); fix it or delete it to use the defaults"
        )
    got = "" if isinstance(value, dict) else f" (got {start_of(value)}){_exponent_hint(value)}"
    if item["type"] == "string_type":
        got += quoting_hint(value, key if given == key else None)
    if value is None and item["type"] != "model_type":
        got += _no_value_hint(key, given)
    elif item["type"] == "list_type" and not isinstance(value, (dict, list)):
        got += f"; write a list: [{value}], or each item on its own `- ` line"
    return f"  {shown}: {message}{got}"


def _no_value_hint(key: str, given: str | None) -> str:
    """YAML reads `epochs:` with nothing after it (or null, ~) as no value: refused as "(got
    None)", Python's word, with no word of what to write (a list's: "write a list: [None]")."""
    if given == key:
        return (
            f"; --set {key}= gives no value (nothing after '=', or null or ~): write one, or "
            "leave out this --set for the default"
        )
    leaf = key.rpartition(".")[2]
    if leaf.isdigit():
        return "; the list item is empty (`- ` alone, null or ~): write it, or delete its line"
    return (
        f"; `{leaf}:` has no value (nothing after it, null or ~): write one, or delete the key "
        "for its default"
    )


def _exponent_hint(given: object) -> str:
    """YAML reads `1e3` (no dot) as text, which an integer key refuses as "a string"."""
    if not isinstance(given, str) or "e" not in given.lower():
        return ""
    try:
        number = float(given)
    except ValueError:
        return ""
    if not number.is_integer():
        return ""
    return f"; YAML reads {given} as text: write {int(number)}"


def quoting_hint(given: object, set_key: str | None) -> str:
    """YAML reads an unquoted `no`, `on`, `1.5` or `2024-01-01` as a boolean, a number or a
    date, which a text key (a backbone name, a device, an SVF target) refused as "not a valid
    string (got False)" with no word of why or of what to write. `set_key`: the key's own
    --set, whose value is read as YAML too."""
    if isinstance(given, bool):
        words = "yes, on or true" if given else "no, off or false"
        problem = f"YAML reads an unquoted {words} as the boolean {str(given).lower()}"
        example, for_example = words.partition(",")[0], "e.g. "
    elif isinstance(given, (int, float, datetime.date)):
        kind = "a date" if isinstance(given, datetime.date) else "a number"
        problem = f"YAML reads {given} as {kind}"
        example, for_example = str(given), ""
    else:
        return ""
    quoted = f"'{example}'"
    if set_key is not None:  # the shell takes off one pair of quotes
        quoted = f'--set "{set_key}={quoted}"'
    return f"; {problem}: write the text in quotes ({for_example}{quoted})"


def anchor_hint(key: object, section: str, value: object) -> str:
    """A top-level key that only holds a YAML anchor (`base: &b {...}`, then `sft: *b`) is read
    as a section of the config: it was refused as unknown with no word of where anchors go. A
    value that is no mapping (`lr: &lr 0.001`, then `learning_rate: *lr` in each stage) is
    shared the same way, but it is no section to put the anchor on, nor to merge."""
    if not isinstance(value, dict):
        return (
            f"if it only holds a YAML anchor (`{key}: &{key} ...`), put the anchor on the first "
            f"key inside a known section that uses the value (an indented `key: &{key} ...` "
            f"under `{section}:`) and reuse it with `*{key}`"
        )
    return (
        f"if it only holds a YAML anchor (`{key}: &{key} ...`), put the anchor on a known "
        f"section or a key inside one (`{section}: &{key} ...`) and reuse it with `*{key}` or "
        f"merge it with `<<: *{key}`"
    )


def close_keys(key: str, known: list[str]) -> list[str]:
    """The known key closest to `key` (at most one), case aside: difflib found none for
    `SFT:` (no letter in common with `sft`), so the error listed the keys with no hint."""
    by_lower = {name.lower(): name for name in known}
    matches = difflib.get_close_matches(key.lower(), list(by_lower), n=1)
    return [by_lower[match] for match in matches]


def _known_keys(config_type: type[BaseModel], location: tuple) -> list[str]:
    model = section_type(config_type, location)
    return list(model.model_fields) if model is not None else []


def section_type(config_type: type[BaseModel], location: tuple) -> type[BaseModel] | None:
    model: type[BaseModel] = config_type
    for part in location:
        annotation = model.model_fields[str(part)].annotation
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return None
        model = annotation
    return model


def _sibling_sections(config_type: type[BaseModel], location: tuple) -> list[str]:
    """The other top-level sections that have a section's unknown key as their own:
    `epochs` under `model:` belongs under `sft:` or `rl:` (a stage file: `training:`)."""
    if len(location) != 2:
        return []
    section, key = str(location[0]), str(location[1])
    return [
        name
        for name in config_type.model_fields
        if name != section and key in _known_keys(config_type, (name,))
    ]


def _other_stages(config_type: type[BaseModel], location: tuple) -> list[str]:
    """The pipeline stages whose settings have a one-stage config's unknown `training` key:
    an ES config given to `train sft` said "unknown key 'training.population_size'" with the
    SFT keys, as if the key were mistyped."""
    if len(location) != 2 or location[0] != "training":
        return []
    if "training" not in config_type.model_fields:
        return []
    own = section_type(config_type, ("training",))
    return [
        stage
        for stage in STAGE_SECTIONS
        if section_type(PipelineConfig, (stage,)) is not own
        and str(location[1]) in _known_keys(PipelineConfig, (stage,))
    ]


def _is_pool_key(key: str) -> bool:
    """`train -c pool.yaml` said "unknown key 'workers'" as if mistyped, not the wrong file."""
    from .workers.config import PoolConfig  # it reads its files with config_loading

    return key in PoolConfig.model_fields


def nested_matches(config_type: type[BaseModel], location: tuple, key: str) -> list[str]:
    """Dotted paths, relative to `location`, of keys one section down that are (close to)
    `key`: `iterations` at the top of a stage config -> `training.iterations`."""
    section = section_type(config_type, location)
    if section is None:
        return []
    candidates = []
    for name in section.model_fields:
        inner = _known_keys(section, (name,))
        candidates += [f"{name}.{match}" for match in close_keys(key, inner)]
    return candidates
