"""The int8 copy of an ONNX export (model.quantization: int8): dynamic quantization of its
MatMuls, written atomically beside the fp32 file, and the leftovers of earlier versions'
killed quantizations."""

from __future__ import annotations

import errno
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path

from rich.markup import escape

from .atomic_files import writer_prefix
from .text import notes_console

QUANTIZED_FILE = "model-int8.onnx"  # model.quantization: int8, beside the fp32 file
# quantize_dynamic's shape-inferred fp32 copy, which versions before the staging folder of
# quantize_export wrote beside the export; a killed run left it there (as large as the export)
LEGACY_INFERRED_FILE = "model-inferred.onnx"
LEGACY_INFERRED_STALE_S = 3600  # no quantizing takes this long: an older copy is no run's
console = notes_console()


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
        try:
            quantize_dynamic(
                str(private_source),
                str(staging / target.name),
                weight_type=QuantType.QInt8,
                op_types_to_quantize=["MatMul"],
                per_channel=True,
                reduce_range=True,
            )
        except Exception as error:
            # onnx's shape inference writes its copy unchecked: on a full disk it is cut
            # short and fails to parse ("Wire format was corrupt"), blamed on ONNX Runtime
            if shutil.disk_usage(staging).free < source.stat().st_size:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(target)) from error
            raise
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


def remove_legacy_inferred_copy(folder: Path) -> None:
    """Delete the shape-inferred copy an earlier fugu-lite's killed int8 quantization left in
    the export folder, once it is too old to belong to one still running."""
    inferred = folder / LEGACY_INFERRED_FILE
    try:
        if time.time() - inferred.stat().st_mtime > LEGACY_INFERRED_STALE_S:
            inferred.unlink()
    except OSError:  # none there, or another user's in a shared cache
        pass
