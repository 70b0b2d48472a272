"""The truncated backbone in ONNX Runtime: exported once per backbone and layer, cached on
disk, checked against torch on every load, then used for the frozen-backbone forward
(features and routing). Gradients and SVF stay on torch (`FeatureExtractor.__call__`).
This module chooses the runtime and checks the session against torch; the export is
onnx_export's, its int8 copy onnx_quantize's and the session onnx_session's.

Why: the routing forward is a handful of fp32 GEMMs; ONNX Runtime's CPU kernels and thread
pool run them faster than PyTorch eager on this kind of machine (bench/speed.py measures it),
with the same features to float tolerance, so the feature cache is shared by both runtimes.
With `model.quantization: int8` an int8 copy of the export runs instead (about 1.4x faster
again; its features differ by a few percent, so they have their own cache key).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Literal

import torch
from rich.markup import escape
from torch import nn

from .atomic_files import remove_dead_writers_files, write_text_atomic
from .config import ModelConfig
from .onnx_export import (
    MODEL_FILE,
    SETTINGS_FILE,
    TRACE_PROMPTS,
    HiddenStates,
    OnnxRuntimeError,
    export_backbone,
    export_folder,
    export_settings,
)
from .onnx_quantize import QUANTIZED_FILE, quantize_export, remove_legacy_inferred_copy
from .onnx_session import OnnxBackbone, forget_sessions, shared_session
from .text import notes_console

# Largest |onnx - torch| on the check batch, relative to the largest |hidden state| (measured:
# about 4e-7 for MiniLM and SmolLM2, fp32 both ways).
TOLERANCE = 1e-4
# int8 hidden states sit a few percent of that range off fp32's (MiniLM layer 4: 5-9%); this
# bound only catches a broken quantized file.
INT8_TOLERANCE = 0.25
REQUIRED_PACKAGES = ("onnxruntime", "onnx")  # onnx: torch's exporter writes the file with it
CHECK_PROMPTS = (
    "Check one.",
    "The second check prompt is a little longer than the first one is.",
    "A third check prompt, of middling length.",
)
Tokenize = Callable[[Sequence[str]], dict[str, torch.Tensor]]
CheckAt = Callable[[Path], tuple[OnnxBackbone, str]]  # _checked_session on an export folder
console = notes_console()
# The sessions over exports made in a temporary folder (the cache not writable), by the cache
# folder and quantization they stand in for: held for the whole process, so that each
# extractor of that backbone (a router family, eval's configs) does not export it again.
_THIS_RUNS_EXPORTS: dict[tuple[Path, str], OnnxBackbone] = {}


@dataclass(frozen=True)
class RuntimeChoice:
    """What runs the frozen backbone, and why."""

    runtime: Literal["torch", "onnx"]
    reason: str


def missing_packages() -> list[str]:
    return [name for name in REQUIRED_PACKAGES if importlib.util.find_spec(name) is None]


def onnxruntime_import_error() -> str:
    """Why an installed onnxruntime cannot be imported (a build for another numpy, a shared
    library missing); '' when it can. Found only on opening a session, it was taken for an
    unusable cached export: deleted and exported again on every run, then blamed."""
    try:
        import onnxruntime  # noqa: F401
    except ImportError as error:
        return str(error)
    return ""


def requested_runtime(model_cfg: ModelConfig) -> RuntimeChoice:
    """The runtime the config asks for, before any export: 'auto' resolves to onnx when it can."""
    if model_cfg.runtime == "torch":
        return RuntimeChoice("torch", "model.runtime is 'torch'")
    if model_cfg.svf_targets:
        return RuntimeChoice("torch", "SVF is on (its offsets change the backbone's weights)")
    if model_cfg.device != "cpu":
        return RuntimeChoice("torch", f"device {model_cfg.device!r} (ONNX Runtime runs on cpu)")
    missing_names = missing_packages()
    if missing_names:
        missing = " and ".join(missing_names)
        install = f"`pip install {' '.join(missing_names)}`"
        return _without_onnx(
            model_cfg, f"{missing} is not installed", install, f"{missing} not installed"
        )
    broken = onnxruntime_import_error()
    if broken:
        problem = f"onnxruntime cannot be imported ({broken})"
        reinstall = "reinstall it (`pip install --force-reinstall onnxruntime`)"
        return _without_onnx(
            model_cfg, problem, reinstall, f"onnxruntime cannot be imported: {broken}"
        )
    return RuntimeChoice("onnx", f"model.runtime is {model_cfg.runtime!r}")


def _without_onnx(model_cfg: ModelConfig, problem: str, fix: str, reason: str) -> RuntimeChoice:
    """ONNX Runtime is not to be had: torch for runtime 'auto' (`reason`); for 'onnx', and for
    int8 (which torch cannot give), an OnnxRuntimeError saying the problem and its fix."""
    if model_cfg.quantization == "int8":
        raise OnnxRuntimeError(
            f"model.quantization is 'int8' but {problem}: {fix}, or set model.quantization to "
            "'none'"
        )
    if model_cfg.runtime == "onnx":
        raise OnnxRuntimeError(
            f"model.runtime is 'onnx' but {problem}: {fix}, or set model.runtime to 'torch' or "
            "'auto'"
        )
    return RuntimeChoice("torch", reason)


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
    check_at: CheckAt = partial(
        _checked_session,
        backbone_name=backbone_name,
        identity=identity,
        layer=layer,
        truncated=truncated,
        tokenize=tokenize,
        quantization=model_cfg.quantization,
    )
    try:
        onnx, how = _session_exported_again_if_unusable(partial(check_at, folder), folder, cached)
    except OSError as error:  # the cache folder, not ONNX Runtime: read-only, a full disk
        return _unwritable_export(model_cfg, backbone_name, layer, folder, error, check_at)
    except Exception as error:
        return _failed_export(model_cfg, backbone_name, layer, error)
    return LoadedRuntime(onnx, f"{how} {folder}", time.perf_counter() - started)


def _session_exported_again_if_unusable(
    attempt: Callable[[], tuple[OnnxBackbone, str]], folder: Path, cached: bool
) -> tuple[OnnxBackbone, str]:
    """The checked session; a cached export that fails is removed and exported once more."""
    try:
        return attempt()
    except OSError:  # the cache's (full, read-only), not the export's: exporting again fails too
        raise
    except Exception as first_error:
        if not cached:
            raise
        console.print(
            f"[yellow]The cached ONNX export in {escape(str(folder))} is unusable "
            f"({escape(str(first_error))}); exporting it again.[/yellow]"
        )
        remove_unusable_export(folder)
        forget_sessions(folder)
        return attempt()


def remove_unusable_export(folder: Path) -> None:
    """Delete a cached export found unusable; one that cannot be deleted (a read-only cache)
    is an OSError, the cache's: left there, it was read again as the new export, and its
    failure blamed on ONNX Runtime (int8: 'set model.quantization to none and retrain')."""
    shutil.rmtree(folder, ignore_errors=True)
    if folder.exists():
        raise OSError(f"the unusable export {folder.name} there cannot be removed")


def _failed_export(
    model_cfg: ModelConfig, backbone_name: str, layer: int, error: Exception
) -> LoadedRuntime:
    """ONNX Runtime cannot run the backbone: with runtime 'auto' the torch runtime (said in a
    log line), else (onnx, or int8, which torch cannot give) an OnnxRuntimeError."""
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
        f"[yellow]ONNX Runtime cannot run backbone {escape(repr(backbone_name))} cut at layer "
        f"{layer} ({type(error).__name__}: {escape(str(error))}); using the torch runtime "
        "instead. Set model.runtime: torch to skip the attempt.[/yellow]"
    )
    return LoadedRuntime(None, f"ONNX export failed: {type(error).__name__}")


def _unwritable_export(
    model_cfg: ModelConfig,
    backbone_name: str,
    layer: int,
    folder: Path,
    error: OSError,
    check_at: CheckAt,
) -> LoadedRuntime:
    """An export that cannot be written in the cache: with runtime 'auto' the torch runtime,
    else (onnx, or int8, which torch cannot give) an export made for this run in a temporary
    folder, and an OnnxRuntimeError only when that cannot be written either; each says to
    give a writable cache."""
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
    if model_cfg.quantization != "int8" and model_cfg.runtime != "onnx":
        console.print(f"[yellow]{escape(message)}; using the torch runtime meanwhile.[/yellow]")
        return LoadedRuntime(None, f"ONNX export not writable: {type(error).__name__}")
    reason = "exported to a temporary folder: the cache is not writable"
    exported = _THIS_RUNS_EXPORTS.get((folder, model_cfg.quantization))
    if exported is not None:  # said, and exported, by this process's first extractor
        return LoadedRuntime(exported, reason)
    console.print(
        f"[yellow]{escape(message)}; exporting it to a temporary folder for this run "
        "meanwhile.[/yellow]"
    )
    started = time.perf_counter()
    try:
        onnx = _exported_for_this_run(check_at, folder.name)
    except OSError as temporary_error:
        raise OnnxRuntimeError(f"{message} (nor in a temporary folder: {temporary_error})") from (
            error
        )
    except Exception as failure:
        return _failed_export(model_cfg, backbone_name, layer, failure)
    _THIS_RUNS_EXPORTS[(folder, model_cfg.quantization)] = onnx
    return LoadedRuntime(onnx, reason, time.perf_counter() - started)


def _exported_for_this_run(check_at: CheckAt, name: str) -> OnnxBackbone:
    """The checked session over an export made in a temporary folder, removed once the
    session is open (ONNX Runtime holds the model in memory)."""
    scratch = Path(tempfile.mkdtemp(prefix="fugu-lite-onnx-"))
    try:
        onnx, _ = check_at(scratch / name)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return onnx


def _checked_session(
    folder: Path,
    *,
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
            f"[dim]Exporting backbone {escape(repr(backbone_name))} ({layer} blocks) to ONNX "
            f"once; cached in {escape(str(folder))}[/dim]"
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
