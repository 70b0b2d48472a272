"""Typed configs for the model and each training stage, loaded from YAML."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from pathlib import Path
from typing import Literal, TypeVar, get_args

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from .backbone_identity import EMBEDDED_BACKBONES, TINY_RANDOM, local_backbone_path
from .text_reading import STDIN_NOT_READ, RecordFileError, means_stdin, read_utf8_text

C = TypeVar("C", bound=BaseModel)


class StrictModel(BaseModel):
    # `inf` (`--set training.cost_weight=inf`, `1e999`) passed every bound and trained on
    # -inf rewards, or wrote `Infinity` into reports that JSON readers refuse.
    model_config = ConfigDict(extra="forbid", protected_namespaces=(), allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_boolean_numbers(cls, value: object, info: ValidationInfo) -> object:
        """pydantic takes a boolean as 1 or 0 for a number, so `epochs: true` (or `yes`, `on`,
        which YAML reads as true) trained one epoch without a word."""
        if not isinstance(value, bool) or info.field_name is None:
            return value
        annotation = cls.model_fields[info.field_name].annotation
        kinds = set(get_args(annotation)) or {annotation}
        if kinds & {int, float} and bool not in kinds:
            raise ValueError(
                "Input should be a number, not true or false (YAML reads true, false, yes, no, "
                "on and off as those): write the number"
            )
        return value


class ModelConfig(StrictModel):
    """The coordinator: which backbone, which hidden state, which head.

    The defaults are the shipped configs/default.yaml, chosen on LLMRouter validation, except
    `quantization`: default.yaml picks int8 for MiniLM (chosen by cross-validation); without
    the key a config gets fp32, which any backbone and runtime can run. And `pooling`:
    default.yaml says `mean`, the default `auto` is mean on MiniLM too (penultimate on
    decoders)."""

    backbone: str = "minilm"
    layer: int = 4
    pooling: Literal["auto", "penultimate", "last", "mean"] = "auto"
    max_tokens: int = Field(default=256, ge=2)
    chat_template: bool = True
    head: Literal["linear", "mlp"] = "mlp"
    head_hidden: int = Field(default=256, ge=1)
    head_dropout: float = Field(default=0.3, ge=0.0, lt=1.0)
    normalize_features: bool = True
    svf_targets: list[str] = Field(
        default_factory=list,
        description="Backbone weight matrices whose singular values get learned offsets (SVF, "
        "see fugu_lite/svf.py): module names of the backbone as loaded, or glob patterns over "
        "them, e.g. 'layers.3.mlp.down_proj' (Llama) or 'encoder.layer.*.output.dense' (BERT). "
        "Empty = frozen backbone with cached features; set = features are not cached.",
    )
    device: str = "cpu"
    runtime: Literal["auto", "torch", "onnx"] = Field(
        default="auto",
        description="What runs the frozen backbone for features and routing: 'onnx' = an ONNX "
        "export of the truncated backbone in ONNX Runtime (exported once, cached, checked "
        "against torch; the features are the same to float tolerance), 'torch' = PyTorch, "
        "'auto' = onnx when onnxruntime is installed, the device is cpu and SVF is off, else "
        "torch (and torch, with a log line, if the export fails). Gradients and SVF always "
        "use torch.",
    )
    quantization: Literal["none", "int8"] = Field(
        default="none",
        description="'int8' = ONNX Runtime dynamic int8 of every matrix product of the cut "
        "backbone (per-channel weights): about 1.4x faster than the fp32 export on a CPU, with "
        "features a few percent off fp32's, so they are cached under their own key and a "
        "router must be trained and routed with the same setting. Needs the onnx runtime; "
        "each prompt runs on its own (int8 scales depend on the whole input batch).",
    )
    feature_batch_size: int = Field(default=16, ge=1)
    cache_dir: str | None = None

    @field_validator("cache_dir")
    @classmethod
    def _expand_home(cls, cache_dir: str | None) -> str | None:
        """`~/cache` is the home folder's: the feature cache read it literally, making a
        folder named `~` in the working directory (where `rm -rf ~` is a trap)."""
        return None if cache_dir is None else str(Path(cache_dir).expanduser())

    @field_validator("device")
    @classmethod
    def _torch_device(cls, device: str) -> str:
        """`device: gpu` passed the config and failed at the first tensor moved, with torch's
        words and no key named (after the backbone was loaded). Only the spelling is checked:
        a config may be written on a machine without the device."""
        if device == "cpu":  # the default: no torch import for it
            return device
        import torch

        try:
            torch.device(device)
        except RuntimeError as error:
            raise ValueError(
                f"not a torch device ({error}): write cpu, cuda, cuda:1 or mps"
            ) from error
        return device

    @model_validator(mode="after")
    def _onnx_runtime_is_possible(self) -> ModelConfig:
        if self.runtime == "onnx" and self.svf_targets:
            raise ValueError(
                "runtime 'onnx' runs a fixed export of the backbone, so it cannot apply SVF "
                "offsets (svf_targets is set): use runtime 'auto' or 'torch'"
            )
        if self.runtime == "onnx" and self.device != "cpu":
            raise ValueError(
                f"runtime 'onnx' runs on the CPU only (device is {self.device!r}): use runtime "
                "'auto' or 'torch'"
            )
        if self.quantization == "int8" and (
            self.runtime == "torch" or self.svf_targets or self.device != "cpu"
        ):
            raise ValueError(
                "quantization 'int8' runs an int8 ONNX Runtime export of the frozen backbone on "
                "the CPU, so it needs runtime 'auto' or 'onnx', no svf_targets and device 'cpu' "
                "(or set quantization: none)"
            )
        return self


class CostAware(StrictModel):
    """reward' = reward - cost_weight * cost / reference_cost (0 = ignore cost)."""

    cost_weight: float = Field(default=0.0, ge=0)
    reference_cost: float | None = Field(
        default=None, gt=0, description="None = mean cost over the train split's cells."
    )


class SFTTrainingConfig(CostAware):
    seed: int = 0
    batch_size: int = Field(default=64, ge=1)
    learning_rate: float = Field(default=1e-3, gt=0)
    weight_decay: float = Field(default=0.01, ge=0)
    epochs: int = Field(default=10, ge=1)
    temperature: float = Field(default=1.0, gt=0)
    tie_handling: Literal["uniform", "skip"] = "uniform"
    max_grad_norm: float = Field(default=1.0, gt=0, allow_inf_nan=True)  # .inf: no clipping
    log_every: int = Field(default=50, ge=1)


class RLTrainingConfig(CostAware):
    seed: int = 0
    batch_size: int = Field(default=64, ge=1)
    learning_rate: float = Field(default=1e-3, gt=0)
    weight_decay: float = Field(default=0.01, ge=0)
    epochs: int = Field(default=8, ge=1)
    estimator: Literal["reinforce", "expected_reward"] = "expected_reward"
    rollouts_per_prompt: int = Field(default=8, ge=1)
    entropy_coefficient: float = Field(default=0.01, ge=0)
    normalize_advantage: bool = False
    gradient_accumulation_steps: int = Field(default=1, ge=1)
    max_grad_norm: float = Field(default=1.0, gt=0, allow_inf_nan=True)  # .inf: no clipping
    log_every: int = Field(default=50, ge=1)


# sep-CMA-ES's initial step size at most: the searched weights act on standardised features,
# where a step of 10 already saturates the softmax; far larger ones (a typo like 3e2, 1e300)
# overflowed the search: cmaes stopped with an AssertionError at values past 1e32, and an MLP
# head's float32 logits turn infinite well before that.
MAX_SIGMA0 = 1e6


class ESTrainingConfig(CostAware):
    """sep-CMA-ES over the trainable parameters (head, and SVF offsets when enabled).

    The defaults were chosen by 5-fold cross-validation over the LLMRouter train +
    validation splits, starting from the default SFT head (bench/README.md, es.py)."""

    seed: int = 0
    population_size: int = Field(default=32, ge=4)
    sigma0: float = Field(
        default=0.03,
        gt=0,
        le=MAX_SIGMA0,
        description="Initial step size on the searched weights (they act on standardised "
        "features).",
    )
    iterations: int = Field(default=600, ge=1)
    batch_size: int = Field(default=1000, ge=1)
    samples: int = Field(
        default=8, ge=0, description="0 = fitness of the argmax choice; N = N sampled choices."
    )
    entropy_coefficient: float = Field(default=0.0, ge=0)
    search: Literal["head", "output_layer"] = Field(
        default="output_layer",
        description="What evolves: 'head' = every head weight; 'output_layer' = only the "
        "head's last linear layer (an MLP head's hidden layer stays as in the start "
        "checkpoint). SVF offsets, when enabled, evolve in both cases.",
    )
    validate_every: int = Field(default=5, ge=1)
    save_every: int = Field(default=5, ge=1)
    log_every: int = Field(default=10, ge=1)


class SFTConfig(StrictModel):
    model: ModelConfig = ModelConfig()
    training: SFTTrainingConfig = SFTTrainingConfig()


class RLConfig(StrictModel):
    model: ModelConfig = ModelConfig()
    training: RLTrainingConfig = RLTrainingConfig()


class ESConfig(StrictModel):
    model: ModelConfig = ModelConfig()
    training: ESTrainingConfig = ESTrainingConfig()


class PipelineConfig(StrictModel):
    """SFT, then RL continuing from the SFT checkpoint, on one shared model config.

    The `es` section is not run by the pipeline: it is what `fugu-lite train es -c FILE`
    reads from the same file (with the shared `model`)."""

    model: ModelConfig = ModelConfig()
    sft: SFTTrainingConfig = SFTTrainingConfig()
    rl: RLTrainingConfig = RLTrainingConfig()
    es: ESTrainingConfig = ESTrainingConfig()

    def sft_config(self) -> SFTConfig:
        return SFTConfig(model=self.model, training=self.sft)

    def rl_config(self) -> RLConfig:
        return RLConfig(model=self.model, training=self.rl)

    def es_config(self) -> ESConfig:
        return ESConfig(model=self.model, training=self.es)


STAGE_SECTIONS = tuple(name for name in PipelineConfig.model_fields if name != "model")


DEFAULT_CONFIG = Path(__file__).parent / "configs" / "default.yaml"


class ConfigError(ValueError):
    """A config file is missing, not YAML, or has a wrong key or value."""


def load_config(path: str | Path | None, config_type: type[C], overrides: dict | None = None) -> C:
    """Load a YAML config; unknown keys and bad values name the key and the fix."""
    data: dict = {}
    source = "overrides of the defaults" if overrides else "defaults"
    if path is not None:
        source = str(path)
        data = _empty_sections_as_defaults(_read_yaml_mapping(Path(path)), config_type)
    for dotted_key, value in (overrides or {}).items():
        _set_dotted(data, dotted_key, value)
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
        and _section_type(config_type, (key,)) is not None
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
    if not any(name in data for name in STAGE_SECTIONS):
        return load_config(path, config_type, overrides)
    unknown = [key for key in data if key not in ("model", *STAGE_SECTIONS)]
    if unknown:
        known = ["model", *STAGE_SECTIONS]
        hints = []
        for key in unknown:
            close = difflib.get_close_matches(str(key), known, n=1)
            hints.append(f"{key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        raise ConfigError(
            f"{path}: a pipeline config has the sections {', '.join(known)}; unknown "
            f"top-level key(s) {', '.join(hints)}. A single-stage file has `model` and "
            "`training` instead; do not mix the two shapes."
        )
    for section in ("model", stage):
        if data.get(section) is not None and not isinstance(data[section], dict):
            raise ConfigError(
                f"{path}: section {section!r} must be a mapping of keys (e.g. `{section}:` "
                f"followed by indented `key: value` lines), got {data[section]!r}; fix it or "
                "delete the section to use the defaults"
            )
    data = {"model": data.get("model") or {}, "training": data.get(stage) or {}}
    for dotted_key, value in (overrides or {}).items():
        _set_dotted(data, dotted_key, value)
    try:
        config = config_type.model_validate(data)
    except ValidationError as error:
        # the file says `sft:` where the stage's config says `training` (--set keys aside)
        file_keys = {"training": stage}
        message = describe_config_error(
            error, config_type, str(path), file_keys, overrides=overrides
        )
        raise ConfigError(message) from error
    check_backbone_folder_base(config, Path(path), overrides or {})
    return config


def check_backbone_folder_base(config: BaseModel, path: Path, overrides: Mapping) -> None:
    """A config's relative `model.backbone` folder is read from the working directory: one
    written relative to the config file (which does not exist from here) went to the hub,
    or "does not exist", with no word of where it is."""
    model = getattr(config, "model", None)
    if not isinstance(model, ModelConfig) or "model.backbone" in overrides:
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
        if section == stage and rest:
            raise ConfigError(
                f"--set {dotted_key}: a single stage's keys are model.* and training.*; "
                f"use training.{rest}"
            )


def _read_yaml_mapping(path: Path) -> dict:
    if means_stdin(path):
        raise ConfigError(f"-c {STDIN_NOT_READ}")
    if not path.exists():
        raise ConfigError(f"config file {path} not found")
    if path.is_dir():
        raise ConfigError(f"{path} is a directory, not a config file; give the YAML file's path")
    data = read_yaml_document(path)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections, got {data!r}")
    return data


def read_yaml_document(path: Path) -> object:
    """A YAML file's one document, duplicate keys refused; text that is not UTF-8 or not YAML
    is a ConfigError naming the file (and the line and column)."""
    try:
        text = read_utf8_text(path)
    except RecordFileError as error:
        raise ConfigError(str(error)) from error
    try:
        return yaml.load(text, Loader=UniqueKeyLoader)
    except yaml.YAMLError as error:
        raise ConfigError(describe_yaml_error(path, error)) from error


def describe_yaml_error(path: Path, error: yaml.YAMLError) -> str:
    """One line naming the file, line and column: PyYAML's own text placed them on lines of
    their own, in "<unicode string>" (the text it was given), not in the file."""
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
    if problem == "mapping values are not allowed here":
        problem += " (a value holding ': ' needs quotes, and a key its own line)"
    return f"{where}: not valid YAML: {problem}"


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


def _set_dotted(data: dict, dotted_key: str, value: object) -> None:
    *parents, leaf = dotted_key.split(".")
    node = data
    for part in parents:
        if node.get(part) is None:
            node[part] = {}
        if not isinstance(node[part], dict):
            raise ConfigError(
                f"--set {dotted_key}: {part!r} is a value here, not a section of keys"
            )
        node = node[part]
    node[leaf] = value


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
        given = next(
            (
                dotted
                for dotted in overrides or {}
                if f"{key}.".startswith(f"{dotted}.") or f"{dotted}.".startswith(f"{key}.")
            ),
            None,
        )
        section, _, rest = key.partition(".")
        if file_keys and section in file_keys and rest and given is None:
            key = f"{file_keys[section]}.{rest}"
        shown = (
            key if given is None else f"--set {key}" if given == key else f"{key} (--set {given})"
        )
        if item["type"] == "extra_forbidden":
            known = _known_keys(config_type, item["loc"][:-1])
            close = difflib.get_close_matches(str(item["loc"][-1]), known, n=1)
            close = close or _nested_matches(config_type, item["loc"][:-1], str(item["loc"][-1]))
            hint = f"did you mean {close[0]!r}? " if close else ""
            homes = _sibling_sections(config_type, item["loc"])
            if homes:
                renamed = file_keys if file_keys and given is None else {}
                shown_homes = [f"{renamed.get(home, home)}:" for home in homes]
                hint = f"it belongs under {' or '.join(shown_homes)}, not here; "
            if key == "training" and "sft" in known:
                hint = "a pipeline config puts stage settings under sft:, rl: or es: "
            where = "" if given is None else f" (given by --set {given})"
            lines.append(f"  unknown key {key!r}: {hint}known keys here: {', '.join(known)}{where}")
        else:
            value = item.get("input")
            # a section's own check (runtime with device) says what is wrong in its message;
            # its input is the whole section, and "Value error," is pydantic's word
            message = str(item["msg"]).removeprefix("Value error, ")
            if item["type"] == "model_type":  # pydantic's "valid dictionary or instance of X"
                message = (
                    f"must be a section of keys (`{key.rpartition('.')[2]}:` followed by "
                    "indented `key: value` lines); fix it or delete it to use the defaults"
                )
            got = "" if isinstance(value, dict) else f" (got {value!r}){_exponent_hint(value)}"
            if item["type"] == "list_type" and not isinstance(value, (dict, list)):
                got += f"; write a list: [{value}], or each item on its own `- ` line"
            lines.append(f"  {shown}: {message}{got}")
    return "\n".join(lines)


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


def _known_keys(config_type: type[BaseModel], location: tuple) -> list[str]:
    model = _section_type(config_type, location)
    return list(model.model_fields) if model is not None else []


def _section_type(config_type: type[BaseModel], location: tuple) -> type[BaseModel] | None:
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


def _nested_matches(config_type: type[BaseModel], location: tuple, key: str) -> list[str]:
    """Dotted paths, relative to `location`, of keys one section down that are (close to)
    `key`: `iterations` at the top of a stage config -> `training.iterations`."""
    section = _section_type(config_type, location)
    if section is None:
        return []
    candidates = []
    for name in section.model_fields:
        inner = _known_keys(section, (name,))
        candidates += [f"{name}.{match}" for match in difflib.get_close_matches(key, inner, n=1)]
    return candidates
