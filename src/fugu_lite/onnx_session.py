"""An ONNX Runtime session over an exported truncated backbone, shared by the extractors of
one process."""

from __future__ import annotations

import threading
import weakref
from pathlib import Path

import numpy as np
import torch


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


def forget_sessions(folder: Path) -> None:
    """Drop the shared sessions over the files of an export folder (deleted to export again)."""
    with _SESSIONS_LOCK:
        for key in [key for key in _SESSIONS if key[0].parent == folder]:
            _SESSIONS.pop(key, None)
