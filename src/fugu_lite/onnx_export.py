"""The ONNX export of a truncated backbone: where it is cached (keyed by the backbone's
weights' identity and the versions that shape the graph) and tracing it there atomically.
The int8 copy is onnx_quantize's, the session onnx_session's, and choosing and checking
the runtime onnx_runtime's."""

from __future__ import annotations

import copy
import hashlib
import importlib.metadata
import inspect
import json
import shutil
import tempfile
import warnings
from pathlib import Path

import torch
from torch import nn

from .atomic_files import move_folder_into_place, writer_prefix
from .backbone_identity import hub_id_and_pin
from .file_digests import cache_root

EXPORT_FORMAT_VERSION = 1
OPSET_VERSION = 17
MODEL_FILE = "model.onnx"
SETTINGS_FILE = "settings.json"
# Two prompts of different lengths, so the trace batch is padded and its attention mask is not
# all ones: a shortcut for an all-ones mask would be baked into the trace. transformers takes
# none under a trace with the eager attention exported here (a trace on all ones followed a
# padded mask, transformers 5.25), so this guards other versions. The check batch (onnx_runtime's
# CHECK_PROMPTS: three, of other lengths) has other shapes, so baked-in shapes show too.
TRACE_PROMPTS = ("A short probe.", "A longer probe prompt, so the batch needs some padding here.")


class OnnxRuntimeError(RuntimeError):
    """model.runtime is 'onnx' but ONNX Runtime cannot run this backbone."""


def export_folder(backbone_name: str, identity: str, layer: int) -> Path:
    """Where the export of this backbone (keyed by its weights' identity and the versions that
    shape the graph) cut at this layer is cached: beside the dequantized GGUF copies, in the
    fugu-lite cache (FUGU_LITE_CACHE_DIR), since it depends on the backbone only. A hub id
    pinned to a commit (a checkpoint's, see checkpoint_backbone) is named without its pin: its
    identity names the commit already, and by its last 40 characters the folder was named by
    the commit alone, apart from the same export of the unpinned id."""
    settings = export_settings(identity, layer)
    key = hashlib.sha1(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]
    repo, _ = hub_id_and_pin(backbone_name)
    readable = "".join(char if char.isalnum() else "_" for char in repo)[-40:]
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
    into `target` only once complete (a concurrent exporter's finished copy wins; a folder
    without its model file is replaced)."""
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
        move_folder_into_place(staging, target, MODEL_FILE)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
