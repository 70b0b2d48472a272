"""The truncated backbone in ONNX Runtime: exported once per backbone and layer, cached on
disk, checked against torch on every load, then used for the frozen-backbone forward
(features and routing). Gradients and SVF stay on torch (`FeatureExtractor.__call__`).

Why: the routing forward is a handful of fp32 GEMMs; ONNX Runtime's CPU kernels and thread
pool run them faster than PyTorch eager on this kind of machine (bench/speed.py measures it),
with the same features to float tolerance, so the feature cache is shared by both runtimes.
With `model.quantization: int8` an int8 copy of the export runs instead (about 1.4x faster
again; its features differ by a few percent, so they have their own cache key).
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import importlib.metadata
import importlib.util
import inspect
import json
import logging
import os
import shutil
import tempfile
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from rich.markup import escape
from torch import nn

from .atomic_files import remove_dead_writers_files, write_text_atomic, writer_prefix
from .config import ModelConfig
from .io import cache_root
from .text import notes_console

EXPORT_FORMAT_VERSION = 1
OPSET_VERSION = 17
MODEL_FILE = "model.onnx"
QUANTIZED_FILE = "model-int8.onnx"  # model.quantization: int8, beside the fp32 file
# quantize_dynamic's shape-inferred fp32 copy, which versions before the staging folder of
# quantize_export wrote beside the export; a killed run left it there (as large as the export)
LEGACY_INFERRED_FILE = "model-inferred.onnx"
LEGACY_INFERRED_STALE_S = 3600  # no quantizing takes this long: an older copy is no run's
SETTINGS_FILE = "settings.json"
# Largest |onnx - torch| on the check batch, relative to the largest |hidden state| (measured:
# about 4e-7 for MiniLM and SmolLM2, fp32 both ways).
TOLERANCE = 1e-4
# int8 hidden states sit a few percent of that range off fp32's (MiniLM layer 4: 5-9%); this
# bound only catches a broken quantized file.
INT8_TOLERANCE = 0.25
REQUIRED_PACKAGES = ("onnxruntime", "onnx")  # onnx: torch's exporter writes the file with it
# The trace batch is padded on purpose: HF skips the attention mask when it is all ones, and a
# trace would bake that in. The check batch has other shapes, so baked-in shapes show too.
TRACE_PROMPTS = ("A short probe.", "A longer probe prompt, so the batch needs some padding here.")
CHECK_PROMPTS = (
    "Check one.",
    "The second check prompt is a little longer than the first one is.",
    "A third check prompt, of middling length.",
)
Tokenize = Callable[[Sequence[str]], dict[str, torch.Tensor]]
console = notes_console()


class OnnxRuntimeError(RuntimeError):
    """model.runtime is 'onnx' but ONNX Runtime cannot run this backbone."""


@dataclass(frozen=True)
class RuntimeChoice:
    """What runs the frozen backbone, and why."""

    runtime: Literal["torch", "onnx"]
    reason: str


def missing_packages() -> list[str]:
    return [name for name in REQUIRED_PACKAGES if importlib.util.find_spec(name) is None]


def requested_runtime(model_cfg: ModelConfig) -> RuntimeChoice:
    """The runtime the config asks for, before any export: 'auto' resolves to onnx when it can."""
    if model_cfg.runtime == "torch":
        return RuntimeChoice("torch", "model.runtime is 'torch'")
    if model_cfg.svf_targets:
        return RuntimeChoice("torch", "SVF is on (its offsets change the backbone's weights)")
    if model_cfg.device != "cpu":
        return RuntimeChoice("torch", f"device {model_cfg.device!r} (ONNX Runtime runs on cpu)")
    missing = missing_packages()
    if missing:
        if model_cfg.quantization == "int8":
            raise OnnxRuntimeError(
                f"model.quantization is 'int8' but {' and '.join(missing)} is not installed: "
                f"`pip install {' '.join(missing)}`, or set model.quantization to 'none'"
            )
        if model_cfg.runtime == "onnx":
            raise OnnxRuntimeError(
                f"model.runtime is 'onnx' but {' and '.join(missing)} is not installed: "
                f"`pip install {' '.join(missing)}`, or set model.runtime to 'torch' or 'auto'"
            )
        return RuntimeChoice("torch", f"{' and '.join(missing)} not installed")
    return RuntimeChoice("onnx", f"model.runtime is {model_cfg.runtime!r}")


def export_folder(backbone_name: str, identity: str, layer: int) -> Path:
    """Where the export of this backbone (keyed by its weights' identity and the versions that
    shape the graph) cut at this layer is cached: beside the dequantized GGUF copies, in the
    fugu-lite cache (FUGU_LITE_CACHE_DIR), since it depends on the backbone only."""
    settings = export_settings(identity, layer)
    key = hashlib.sha1(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]
    readable = "".join(char if char.isalnum() else "_" for char in backbone_name)[-40:]
    return cache_root() / "onnx" / f"{readable}-layer{layer}-{key}"


def export_settings(identity: str, layer: int) -> dict:
    return {
        "backbone": identity,
        "layer": layer,
        "format": EXPORT_FORMAT_VERSION,
        "opset": OPSET_VERSION,
        "torch": torch.__version__,
        "transformers": importlib.metadata.version("transformers"),
    }


class HiddenStates(nn.Module):
    """The truncated backbone's last hidden state as a plain tensor (what gets exported)."""

    def __init__(self, backbone: nn.Module) -> None:
        super().__init__()
        self.backbone = backbone
        accepted = inspect.signature(backbone.forward).parameters
        self.extra = {"use_cache": False} if "use_cache" in accepted else {}

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        output = self.backbone(input_ids=input_ids, attention_mask=attention_mask, **self.extra)
        return output.last_hidden_state


def export_backbone(truncated: nn.Module, trace: dict[str, torch.Tensor], target: Path) -> None:
    """Trace a copy of the truncated backbone to ONNX (dynamic batch and length) and move it
    into `target` only once complete (a concurrent exporter's finished copy wins)."""
    module = copy.deepcopy(truncated)
    # 'eager' attention traces to MatMul/Softmax, which ONNX Runtime ran fastest here (MiniLM,
    # 4 blocks, 256 tokens, 1 thread: 51 ms of CPU vs 55 ms for the SDPA trace).
    for submodule in module.modules():
        config = getattr(submodule, "config", None)
        if config is not None and hasattr(config, "_attn_implementation"):
            config._attn_implementation = "eager"
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=writer_prefix(target.name), dir=target.parent))
    staging.chmod(0o755)  # mkdtemp's 0700 would hide the cache from other users of the folder
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # tracer warnings about Python-level branches
            torch.onnx.export(
                HiddenStates(module).eval(),
                (trace["input_ids"], trace["attention_mask"]),
                str(staging / MODEL_FILE),
                input_names=["input_ids", "attention_mask"],
                output_names=["hidden"],
                dynamic_axes={
                    "input_ids": {0: "batch", 1: "tokens"},
                    "attention_mask": {0: "batch", 1: "tokens"},
                    "hidden": {0: "batch", 1: "tokens"},
                },
                opset_version=OPSET_VERSION,
                dynamo=False,  # the TorchScript exporter: no onnxscript needed, and it is fast
            )
        if not (staging / MODEL_FILE).exists():
            raise OnnxRuntimeError("torch.onnx.export wrote no file")
        try:
            staging.rename(target)
        except OSError:
            if not (target / MODEL_FILE).exists():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def quantize_export(source: Path, target: Path) -> None:
    """Dynamic int8 of every MatMul with a weight (per-channel weights; reduce_range, which
    CPUs without VNNI need against overflow of the u8 x s8 products), written atomically.

    It runs in a private staging folder on a link to `source`: quantize_dynamic writes its
    shape-inferred copy beside its input under a fixed name (`model-inferred.onnx`), which
    two runs quantizing the same export at once would overwrite and delete under each other."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    console.print(f"[dim]Quantizing the ONNX export to int8 once: {escape(str(target))}[/dim]")
    staging = Path(tempfile.mkdtemp(prefix=writer_prefix(target.name), dir=target.parent))
    advice = _WithoutMessage("pre-processing before quantization")  # for static quantization
    logging.getLogger().addFilter(advice)
    try:
        private_source = staging / source.name
        try:
            os.link(source, private_source)
        except OSError:  # a file system without hard links
            shutil.copyfile(source, private_source)
        quantize_dynamic(
            str(private_source),
            str(staging / target.name),
            weight_type=QuantType.QInt8,
            op_types_to_quantize=["MatMul"],
            per_channel=True,
            reduce_range=True,
        )
        (staging / target.name).replace(target)
    finally:
        logging.getLogger().removeFilter(advice)
        shutil.rmtree(staging, ignore_errors=True)


class _WithoutMessage(logging.Filter):
    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def filter(self, record: logging.LogRecord) -> bool:
        return self.text not in record.getMessage()


class OnnxBackbone:
    """An ONNX Runtime session over an exported truncated backbone (thread-safe to run).

    A quantized (int8) session runs each prompt on its own, unpadded: dynamic int8 scales each
    activation by its whole tensor's range, so in a batch a prompt's features would depend on
    its batch mates (and on padding), and cached features would differ from routing-time ones.
    """

    def __init__(self, path: Path, threads: int, quantized: bool = False) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        # Spin-waiting pool threads steal the cores on a shared machine, as OpenMP's do
        # (measured here under load: 83 ms passive vs 137 ms spinning for the same forward).
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self.path = path
        self.threads = threads
        self.quantized = quantized
        self.version = ort.__version__
        # The exporter drops unused inputs (layer 0 = the embeddings never read the mask).
        self.input_names = {node.name for node in self.session.get_inputs()}

    def hidden_states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        if not self.quantized:
            return self._run(input_ids, attention_mask)
        real = attention_mask.bool()
        rows = [
            self._run(ids[mask].unsqueeze(0), attention[mask].unsqueeze(0))[0]
            for ids, attention, mask in zip(input_ids, attention_mask, real, strict=True)
        ]
        hidden = torch.zeros(*input_ids.shape, rows[0].shape[-1])
        for index, row in enumerate(rows):
            hidden[index, real[index]] = row
        return hidden

    def _run(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
        feed = {
            name: np.ascontiguousarray(value.cpu().numpy(), dtype=np.int64)
            for name, value in inputs.items()
            if name in self.input_names
        }
        (hidden,) = self.session.run(["hidden"], feed)
        return torch.from_numpy(hidden)


_SESSIONS: weakref.WeakValueDictionary[tuple[Path, int, bool], OnnxBackbone] = (
    weakref.WeakValueDictionary()
)
_SESSIONS_LOCK = threading.Lock()


def shared_session(path: Path, threads: int, quantized: bool = False) -> OnnxBackbone:
    """One session per export and thread count in a process, while anything uses it: the
    extractors of one backbone (several configs, a family of routers) share its weights."""
    with _SESSIONS_LOCK:
        session = _SESSIONS.get((path, threads, quantized))
        if session is None:
            session = OnnxBackbone(path, threads, quantized)
            _SESSIONS[(path, threads, quantized)] = session
        return session


def relative_difference(
    onnx: OnnxBackbone, truncated: nn.Module, batch: dict[str, torch.Tensor]
) -> float:
    """max |onnx - torch| over the real (unpadded) tokens, relative to the largest |value|."""
    with torch.inference_mode():
        expected = HiddenStates(truncated)(batch["input_ids"], batch["attention_mask"]).float()
    got = onnx.hidden_states(batch["input_ids"], batch["attention_mask"])
    if got.shape != expected.shape:
        raise OnnxRuntimeError(
            f"the export returns shape {tuple(got.shape)}, torch {tuple(expected.shape)}"
        )
    real = batch["attention_mask"].unsqueeze(-1).bool()
    difference = ((got - expected).abs() * real).max().item()
    scale = (expected.abs() * real).max().item()
    return difference / max(scale, 1e-6)


@dataclass
class LoadedRuntime:
    """The resolved runtime of one FeatureExtractor: the session (None = torch) and why."""

    onnx: OnnxBackbone | None
    reason: str
    export_s: float = 0.0

    @property
    def name(self) -> Literal["torch", "onnx"]:
        return "torch" if self.onnx is None else "onnx"

    def describe(self) -> str:
        if self.onnx is None:
            return f"torch ({self.reason})"
        precision = "int8" if self.onnx.quantized else "fp32"
        return (
            f"onnx (onnxruntime {self.onnx.version}, {precision}, {self.onnx.threads} threads; "
            f"{self.reason})"
        )


def load_runtime(
    model_cfg: ModelConfig,
    backbone_name: str,
    identity: str,
    layer: int,
    truncated: nn.Module,
    tokenize: Tokenize,
) -> LoadedRuntime:
    """The runtime for a frozen backbone: ONNX Runtime over the cached export (exported now if
    missing, re-exported once if the cached copy is unusable), checked against torch.

    With runtime 'auto', any failure falls back to torch with a log line; with 'onnx', or
    with int8 quantization (whose features torch cannot give), it raises.
    """
    choice = requested_runtime(model_cfg)
    if choice.runtime == "torch":
        return LoadedRuntime(None, choice.reason)
    folder = export_folder(backbone_name, identity, layer)
    cached = (folder / MODEL_FILE).exists()
    started = time.perf_counter()
    attempt = partial(
        _checked_session,
        folder,
        backbone_name,
        identity,
        layer,
        truncated,
        tokenize,
        model_cfg.quantization,
    )
    try:
        try:
            onnx, how = attempt()
        except Exception as first_error:
            if not cached:
                raise
            console.print(
                f"[yellow]The cached ONNX export in {escape(str(folder))} is unusable "
                f"({escape(str(first_error))}); exporting it again.[/yellow]"
            )
            shutil.rmtree(folder, ignore_errors=True)
            with _SESSIONS_LOCK:
                for key in [key for key in _SESSIONS if key[0].parent == folder]:
                    _SESSIONS.pop(key, None)
            onnx, how = attempt()
    except OSError as error:  # the cache folder, not ONNX Runtime: read-only, a full disk
        return _unwritable_export(model_cfg, backbone_name, folder, error)
    except Exception as error:
        if model_cfg.quantization == "int8":
            raise OnnxRuntimeError(
                f"model.quantization is 'int8' but ONNX Runtime cannot run backbone "
                f"{backbone_name!r} cut at layer {layer} in int8: {error}. Set "
                "model.quantization to 'none' (and train the router again: its features change)."
            ) from error
        if model_cfg.runtime == "onnx":
            raise OnnxRuntimeError(
                f"model.runtime is 'onnx' but ONNX Runtime cannot run backbone {backbone_name!r} "
                f"cut at layer {layer}: {error}. Set model.runtime to 'torch' (or 'auto', "
                "which falls back to torch)."
            ) from error
        console.print(
            f"[yellow]ONNX Runtime cannot run backbone {backbone_name!r} cut at layer {layer} "
            f"({type(error).__name__}: {escape(str(error))}); using the torch runtime instead. Set "
            "model.runtime: torch to skip the attempt.[/yellow]"
        )
        return LoadedRuntime(None, f"ONNX export failed: {type(error).__name__}")
    return LoadedRuntime(onnx, f"{how} {folder}", time.perf_counter() - started)


def _unwritable_export(
    model_cfg: ModelConfig, backbone_name: str, folder: Path, error: OSError
) -> LoadedRuntime:
    """An export that cannot be written: with runtime 'auto' the torch runtime, else (onnx, or
    int8, which torch cannot give) an OnnxRuntimeError; both say to give a writable cache."""
    setting = (
        "model.quantization 'int8'"
        if model_cfg.quantization == "int8"
        else f"model.runtime {model_cfg.runtime!r}"
    )
    message = (
        f"{setting} runs an ONNX export of backbone {backbone_name!r}, which cannot be written "
        f"in {folder.parent} ({error}): set FUGU_LITE_CACHE_DIR to a writable folder with room "
        "for it (~76 MB for MiniLM)"
    )
    if model_cfg.quantization == "int8" or model_cfg.runtime == "onnx":
        raise OnnxRuntimeError(message) from error
    console.print(f"[yellow]{escape(message)}; using the torch runtime meanwhile.[/yellow]")
    return LoadedRuntime(None, f"ONNX export not writable: {type(error).__name__}")


def _checked_session(
    folder: Path,
    backbone_name: str,
    identity: str,
    layer: int,
    truncated: nn.Module,
    tokenize: Tokenize,
    quantization: str = "none",
) -> tuple[OnnxBackbone, str]:
    how = "cached in"
    for parent in (folder.parent, folder):  # what killed exports left (~76 MB for MiniLM)
        remove_dead_writers_files(parent, earlier_versions=True)
    remove_legacy_inferred_copy(folder)
    if not (folder / MODEL_FILE).exists():
        console.print(
            f"[dim]Exporting backbone {backbone_name!r} ({layer} blocks) to ONNX once; "
            f"cached in {escape(str(folder))}[/dim]"
        )
        export_backbone(truncated, tokenize(TRACE_PROMPTS), folder)
        how = "exported to"
    if not (folder / SETTINGS_FILE).exists():  # also a run's killed right after its export
        # backbone_name: what it was exported from, for `fugu-lite cache list`
        settings = {**export_settings(identity, layer), "backbone_name": backbone_name}
        with contextlib.suppress(OSError):  # a read-only cache: the export runs all the same
            write_text_atomic(folder / SETTINGS_FILE, json.dumps(settings, indent=2))
    if quantization != "int8":
        return _compared_session(folder / MODEL_FILE, False, truncated, tokenize, TOLERANCE), how
    if not (folder / QUANTIZED_FILE).exists():
        # The fp32 file is checked once, before it is quantized; later loads open only int8.
        _compared_session(folder / MODEL_FILE, False, truncated, tokenize, TOLERANCE)
        quantize_export(folder / MODEL_FILE, folder / QUANTIZED_FILE)
    int8 = _compared_session(folder / QUANTIZED_FILE, True, truncated, tokenize, INT8_TOLERANCE)
    return int8, how


def remove_legacy_inferred_copy(folder: Path) -> None:
    """Delete the shape-inferred copy an earlier fugu-lite's killed int8 quantization left in
    the export folder, once it is too old to belong to one still running."""
    inferred = folder / LEGACY_INFERRED_FILE
    try:
        if time.time() - inferred.stat().st_mtime > LEGACY_INFERRED_STALE_S:
            inferred.unlink()
    except OSError:  # none there, or another user's in a shared cache
        pass


def _compared_session(
    path: Path, quantized: bool, truncated: nn.Module, tokenize: Tokenize, tolerance: float
) -> OnnxBackbone:
    onnx = shared_session(path, torch.get_num_threads(), quantized)
    difference = relative_difference(onnx, truncated, tokenize(CHECK_PROMPTS))
    if not difference <= tolerance:
        raise OnnxRuntimeError(
            f"the hidden states of {path.name} differ from torch's by {difference:.2g} "
            f"(relative; at most {tolerance:g} allowed)"
        )
    return onnx
