"""Typed configs for the model and each training stage.

Reading them from YAML (with --set overrides) is fugu_lite.config_loading; describing what is
wrong in one is fugu_lite.config_errors."""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Annotated, Literal, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    ValidationInfo,
    field_validator,
    model_validator,
)


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
        folder named `~` in the working directory (where `rm -rf ~` is a trap). An empty
        `cache_dir: ''` was the working directory, with cache files put in it unasked."""
        if cache_dir is None:
            return None
        if not cache_dir.strip():
            raise ValueError(
                "empty: write a folder, or null (or delete the key) for the default cache "
                "(~/.cache/fugu-lite, or $FUGU_LITE_CACHE_DIR)"
            )
        if re.match(r"\$\{?\w", cache_dir):
            raise ValueError(_unexpanded_variable(cache_dir))
        return str(Path(cache_dir).expanduser())

    @field_validator("backbone")
    @classmethod
    def _named_backbone(cls, backbone: str) -> str:
        """`backbone: ''` was read as the working directory, and failed as a folder without
        config.json or weights, naming a folder the user never wrote."""
        if not backbone.strip():
            raise ValueError(
                "empty: write an embedded name (minilm, smollm2), a local folder or a hub id"
            )
        return backbone

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
            parsed = torch.device(device)
        except RuntimeError as error:
            raise ValueError(
                f"not a torch device ({error}): write cpu, cuda, cuda:1 or mps"
            ) from error
        if parsed.type == "meta":
            # torch makes tensors there (shapes without values), so unusable_device lets it
            # pass and the stage failed at its first value read, with torch's words
            raise ValueError(
                "'meta' is torch's device for shapes without values, on which no model runs: "
                "write cpu, cuda, cuda:1 or mps"
            )
        # torch's `cpu:0` is the cpu: kept as written, runtime 'onnx' and int8 refused it as
        # "not the CPU", and 'auto' ran torch instead of ONNX Runtime.
        return "cpu" if parsed.type == "cpu" else device

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


def _unexpanded_variable(cache_dir: str) -> str:
    """`cache_dir: $HOME/cache` cached features in a folder named `$HOME` in the working
    directory (where `rm -rf $HOME` to clear it is a trap), as `~/cache` once did in `~`."""
    expanded = os.path.expandvars(cache_dir)
    example = f", e.g. {expanded!r}" if expanded != cache_dir else ""
    return (
        "starts with an environment variable, which a config does not expand (the cache would "
        f"be a folder named {cache_dir.split('/')[0]!r} in the working directory): write the "
        f"path itself{example}, or delete the key and set $FUGU_LITE_CACHE_DIR"
    )


# `fugu-lite demo`'s defaults, read by its options (cli/demo.py) and by demo.DemoSettings:
# here, as the CLI imports demo.py (torch) only once the demo runs.
DEMO_TASKS_PER_FAMILY = 12
DEMO_OUTPUT = Path("runs/demo")
DEMO_RUNS_LLMROUTER = True
DEMO_SERVES = True


# numpy's global seed (training_common.seed_everything) takes 0 to 2**32 - 1: `seed: -1`
# passed the config, and the run stopped in numpy ("Seed must be between 0 and 2**32 - 1"),
# naming no key.
MAX_SEED = 2**32 - 1


def _finite_or_text(value: float) -> float | str:
    """A JSON number cannot be infinite (`Infinity` is refused by jq and JSON.parse): `.inf`
    is "inf" in JSON dumps, which reads back as inf."""
    return value if math.isfinite(value) else str(value)


# The one number allowed to be infinite: `.inf` turns gradient clipping off.
GradientNorm = Annotated[
    float,
    Field(gt=0, allow_inf_nan=True),
    PlainSerializer(_finite_or_text, when_used="json"),
]


# The largest cost weight training takes and a reward head answers: larger ones overflow
# float32 rewards and utilities (1e39 made every weighted reward -inf, and a head's
# probabilities NaN); at this one a reward point already weighs a millionth of the reference
# cost.
MAX_COST_WEIGHT = 1e6


class CostAware(StrictModel):
    """reward' = reward - cost_weight * cost / reference_cost (0 = ignore cost)."""

    cost_weight: float = Field(default=0.0, ge=0, le=MAX_COST_WEIGHT)
    reference_cost: float | None = Field(
        default=None, gt=0, description="None = mean cost over the train split's cells."
    )


class SFTTrainingConfig(CostAware):
    seed: int = Field(default=0, ge=0, le=MAX_SEED)
    batch_size: int = Field(default=64, ge=1)
    learning_rate: float = Field(default=1e-3, gt=0)
    weight_decay: float = Field(default=0.01, ge=0)
    epochs: int = Field(default=10, ge=1)
    temperature: float = Field(default=1.0, gt=0)
    tie_handling: Literal["uniform", "skip"] = "uniform"
    max_grad_norm: GradientNorm = 1.0  # .inf: no clipping
    log_every: int = Field(default=50, ge=1)


# REINFORCE's sampled choices per prompt at most: each step holds rollouts x batch_size choices
# and their log-probabilities over the workers (10,000 x 64 prompts x 8 workers: ~30 MB), and
# a few dozen already average the noise away. A typo's extra zeros (80000000) made torch
# allocate them until the machine ran out of memory, at the first step.
MAX_ROLLOUTS = 10_000


class RLTrainingConfig(CostAware):
    seed: int = Field(default=0, ge=0, le=MAX_SEED)
    batch_size: int = Field(default=64, ge=1)
    learning_rate: float = Field(default=1e-3, gt=0)
    weight_decay: float = Field(default=0.01, ge=0)
    epochs: int = Field(default=8, ge=1)
    estimator: Literal["reinforce", "expected_reward"] = "expected_reward"
    rollouts_per_prompt: int = Field(default=8, ge=1, le=MAX_ROLLOUTS)
    entropy_coefficient: float = Field(default=0.01, ge=0)
    normalize_advantage: bool = False
    gradient_accumulation_steps: int = Field(default=1, ge=1)
    max_grad_norm: GradientNorm = 1.0  # .inf: no clipping
    log_every: int = Field(default=50, ge=1)


# sep-CMA-ES's initial step size at most: the searched weights act on standardised features,
# where a step of 10 already saturates the softmax; far larger ones (a typo like 3e2, 1e300)
# overflowed the search: cmaes stopped with an AssertionError at values past 1e32, and an MLP
# head's float32 logits turn infinite well before that.
MAX_SIGMA0 = 1e6
# sep-CMA-ES's population at most: each generation holds every candidate's parameters and its
# logits on the batch (10,000 x 1,000 prompts x 8 workers: 320 MB), and the usual population
# is 4 + 3 ln(parameters), a few dozen. A typo's extra zeros (32000000000) made cmaes allocate
# its weights until the machine ran out of memory, before the first generation.
MAX_POPULATION = 10_000
# Sampled choices per prompt in the fitness at most: each generation holds every candidate's
# choices on the batch for each sample (1,000 x 32 candidates x 1,000 prompts: ~1 GB), and at
# a few dozen the sampled mean is already the expected reward to within noise. A typo's extra
# zeros (80000000) made torch allocate them until the machine ran out of memory.
MAX_SAMPLES = 1_000


class ESTrainingConfig(CostAware):
    """sep-CMA-ES over the trainable parameters (head, and SVF offsets when enabled).

    The defaults were chosen by 5-fold cross-validation over the LLMRouter train +
    validation splits, starting from the default SFT head (bench/README.md, es.py)."""

    seed: int = Field(default=0, ge=0, le=MAX_SEED)
    population_size: int = Field(default=32, ge=4, le=MAX_POPULATION)
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
        default=8,
        ge=0,
        le=MAX_SAMPLES,
        description="0 = fitness of the argmax choice; N = N sampled choices.",
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


def unusable_device(device: str) -> str | None:
    """Why torch cannot use `device` on this machine (a cpu-only build asserts 'Torch not
    compiled with CUDA enabled'); None when it can. ModelConfig checks only the spelling: a
    config may be written for another machine."""
    if device == "cpu":
        return None
    import torch

    try:
        torch.empty(0, device=device)
    except Exception as error:  # by device: AssertionError, ModuleNotFoundError (hpu), ...
        return _first_sentence(str(error)) or type(error).__name__
    return None


def _first_sentence(text: str) -> str:
    """The first sentence of torch's message: for a backend this build lacks (mps off a Mac,
    xla) it goes on for 7,000 characters, listing every backend it has."""
    line = text.strip().split("\n", 1)[0]
    sentence, found, _ = line.partition(". ")
    return f"{sentence}." if found else line
