"""The ONNX Runtime backend of the frozen backbone: same features as torch, cached export,
fallback to torch with a log line, SVF and gradients staying on torch.

Unit tests use the tiny random backbone, with the export cache (FUGU_LITE_CACHE_DIR) in a
temporary folder; the integration test exports the real MiniLM cut at the default layer.
"""

from __future__ import annotations

import gc
import logging
import os
import re
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest
import torch
from conftest import finished_pid, writer_temporary
from pydantic import ValidationError

import fugu_lite.onnx_runtime as onnx_module
from fugu_lite.backbones import LoadedBackbone, load_backbone, tiny_random_backbone
from fugu_lite.config import ModelConfig, PipelineConfig
from fugu_lite.config_loading import DEFAULT_CONFIG, load_config
from fugu_lite.feature_cache import compute_features, feature_cache_key
from fugu_lite.features import FeatureExtractor
from fugu_lite.onnx_export import MODEL_FILE, OnnxRuntimeError, export_backbone, export_folder
from fugu_lite.onnx_quantize import QUANTIZED_FILE, quantize_export
from fugu_lite.onnx_runtime import requested_runtime
from fugu_lite.onnx_session import OnnxBackbone

for _package in ("onnxruntime", "onnx"):
    pytest.importorskip(_package, reason="the onnx runtime needs `pip install onnxruntime onnx`")

PROMPTS = [
    "hi",
    "write a python function that adds two numbers",
    "compute the sum of 1 2 3 and then a much longer tail to make padding matter a lot more",
    "say hello politely to the whole team",
]


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh fugu-lite cache: every test starts without an export."""
    monkeypatch.setenv("FUGU_LITE_CACHE_DIR", str(tmp_path / "fugu-cache"))
    return tmp_path / "fugu-cache"


@pytest.fixture(scope="module")
def module_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fugu-cache")


@pytest.fixture
def shared_cache(module_cache: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """One cache for the tests that only need an export to exist (exported once). Set per
    test, after conftest's session cache, which a module-wide setting would not override."""
    monkeypatch.setenv("FUGU_LITE_CACHE_DIR", str(module_cache))
    return module_cache


@pytest.fixture(scope="module")
def tiny() -> LoadedBackbone:
    return load_backbone("tiny-random")


def extractor_for(backbone: LoadedBackbone, **settings: object) -> FeatureExtractor:
    cfg = ModelConfig.model_validate({"backbone": backbone.name, "max_tokens": 64, **settings})
    return FeatureExtractor(backbone, cfg)


def count_exports(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    calls: list[Path] = []
    real = onnx_module.export_backbone

    def counting(truncated: torch.nn.Module, trace: dict, target: Path) -> None:
        calls.append(target)
        real(truncated, trace, target)

    monkeypatch.setattr(onnx_module, "export_backbone", counting)
    return calls


# --- the same features ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("layer", "pooling"), [(-1, "penultimate"), (3, "mean"), (2, "last"), (0, "mean")]
)
def test_onnx_features_equal_torch_features(
    tiny: LoadedBackbone, shared_cache: Path, layer: int, pooling: str
) -> None:
    onnx = extractor_for(tiny, layer=layer, pooling=pooling)
    reference = extractor_for(tiny, layer=layer, pooling=pooling, runtime="torch")
    assert onnx.runtime.name == "onnx"
    assert reference.runtime.name == "torch"
    batched = onnx.encode(PROMPTS)  # padded batch
    torch.testing.assert_close(batched, reference.encode(PROMPTS), rtol=1e-5, atol=1e-5)
    alone = torch.cat([onnx.encode([prompt]) for prompt in PROMPTS])  # no padding
    torch.testing.assert_close(alone, batched, rtol=1e-5, atol=1e-5)
    # the truncated backbone's own forward (gradients, SVF) is still torch
    tokens = onnx.tokenize(PROMPTS)
    with torch.no_grad():
        direct = onnx(tokens["input_ids"], tokens["attention_mask"])
    torch.testing.assert_close(direct, batched, rtol=1e-5, atol=1e-5)


def test_the_feature_cache_is_shared_by_both_runtimes(tmp_path: Path, shared_cache: Path) -> None:
    cfg = ModelConfig(backbone="tiny-random", max_tokens=64, cache_dir=str(tmp_path / "features"))
    as_torch = cfg.model_copy(update={"runtime": "torch"})
    assert feature_cache_key(cfg) == feature_cache_key(as_torch)
    from_onnx, extractor = compute_features(PROMPTS, cfg)
    assert extractor is not None and extractor.runtime.name == "onnx"
    fresh_torch, _ = compute_features(PROMPTS, as_torch, use_cache=False)
    torch.testing.assert_close(from_onnx, fresh_torch, rtol=1e-5, atol=1e-5)
    from_cache, loaded = compute_features(PROMPTS, as_torch)
    assert loaded is None  # the torch config reads what the onnx runtime wrote
    assert torch.equal(from_cache, from_onnx)


def test_svf_weights_run_torch_even_when_onnx_is_on(
    tiny: LoadedBackbone, shared_cache: Path
) -> None:
    extractor = extractor_for(tiny, layer=2, pooling="mean")
    assert extractor.runtime.name == "onnx"
    name = "layers.1.mlp.down_proj.weight"
    original = dict(tiny.model.named_parameters())[name]
    unchanged = extractor.encode(PROMPTS, weights={name: original})
    torch.testing.assert_close(unchanged, extractor.encode(PROMPTS), rtol=1e-5, atol=1e-5)
    changed = extractor.encode(PROMPTS, weights={name: original * 3.0})
    assert not torch.allclose(changed, unchanged, atol=1e-3)


# --- which runtime --------------------------------------------------------------------------


def test_auto_picks_torch_when_svf_is_on_or_not_on_cpu() -> None:
    svf = ModelConfig(backbone="tiny-random", svf_targets=["layers.0.mlp.down_proj"])
    choice = requested_runtime(svf)
    assert choice.runtime == "torch" and "SVF" in choice.reason
    assert requested_runtime(ModelConfig(device="cuda")).runtime == "torch"
    assert requested_runtime(ModelConfig(runtime="torch")).runtime == "torch"
    assert requested_runtime(ModelConfig()).runtime == "onnx"


def test_an_svf_extractor_runs_torch(tiny: LoadedBackbone, cache: Path) -> None:
    extractor = extractor_for(tiny, svf_targets=["layers.0.mlp.down_proj"])
    assert extractor.runtime.name == "torch"
    extractor.encode(PROMPTS[:2])
    assert not (cache / "onnx").exists()  # nothing was exported


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"svf_targets": ["layers.0.mlp.down_proj"]}, "cannot apply SVF offsets"),
        ({"device": "cuda"}, "runs on the CPU only"),
    ],
)
def test_runtime_onnx_refuses_what_it_cannot_run(settings: dict, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        ModelConfig(runtime="onnx", **settings)


def test_without_onnxruntime_auto_uses_torch_and_onnx_says_how_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(onnx_module, "missing_packages", lambda: ["onnxruntime"])
    choice = requested_runtime(ModelConfig())
    assert choice.runtime == "torch" and "onnxruntime not installed" in choice.reason
    with pytest.raises(OnnxRuntimeError, match="pip install onnxruntime"):
        requested_runtime(ModelConfig(runtime="onnx"))


def test_an_onnxruntime_that_cannot_be_imported_keeps_the_cached_export_and_says_so(
    tiny: LoadedBackbone,
    cache: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An installed onnxruntime whose import fails (a wheel built against numpy 1 under numpy
    2) was found only on opening the session: the good cached export was called unusable,
    deleted and exported again by every run, then the failure blamed on the export. A
    package that raises on import stands in for the broken install (the shared environment's
    own onnxruntime cannot be broken here)."""
    folder = export_folder(tiny.name, tiny.identity, 2)
    plain = extractor_for(tiny, layer=2, runtime="torch")
    export_backbone(plain.truncated, plain.tokenize(PROMPTS[:2]), folder)
    export = (folder / MODEL_FILE).stat()
    broken = tmp_path / "broken" / "onnxruntime"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text('raise ImportError("numpy.core.multiarray failed")\n')
    monkeypatch.syspath_prepend(str(broken.parent))
    for name in [name for name in sys.modules if name.split(".")[0] == "onnxruntime"]:
        monkeypatch.delitem(sys.modules, name)
    exports = count_exports(monkeypatch)
    capsys.readouterr()

    extractor = extractor_for(tiny, layer=2)
    assert extractor.runtime.name == "torch"
    assert "onnxruntime cannot be imported: numpy.core" in extractor.runtime.describe()
    assert "unusable" not in capsys.readouterr().err
    assert exports == [] and (folder / MODEL_FILE).stat().st_ino == export.st_ino
    for setting in ({"runtime": "onnx"}, {"quantization": "int8"}):
        with pytest.raises(OnnxRuntimeError, match=r"cannot be imported .* reinstall it"):
            extractor_for(tiny, layer=2, **setting).encode(PROMPTS[:1])
    assert exports == []


def test_the_runtime_setting_is_validated() -> None:
    with pytest.raises(ValidationError, match="runtime"):
        ModelConfig(runtime="tensorrt")
    assert load_config(DEFAULT_CONFIG, PipelineConfig).model.runtime == "auto"


# --- the export cache -----------------------------------------------------------------------


def test_the_export_is_cached_and_reused(
    tiny: LoadedBackbone, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    exports = count_exports(monkeypatch)
    first = extractor_for(tiny, layer=3)
    assert first.runtime.name == "onnx"
    folder = export_folder(tiny.name, tiny.identity, 3)
    assert exports == [folder]
    assert (folder / MODEL_FILE).is_file() and folder.parent == cache / "onnx"
    expected = first.encode(PROMPTS)
    del first
    gc.collect()  # its session goes: the next extractor loads the file (a new process would)
    again = extractor_for(tiny, layer=3, pooling="auto", max_tokens=32)  # other settings
    torch.testing.assert_close(again.encode(PROMPTS[:1]), expected[:1], rtol=1e-5, atol=1e-5)
    assert exports == [folder]  # not exported again
    other_layer = extractor_for(tiny, layer=2)
    assert other_layer.runtime.name == "onnx"
    assert exports == [folder, export_folder(tiny.name, tiny.identity, 2)]
    assert export_folder(tiny.name, tiny.identity, 2) != folder


def test_an_export_folder_can_be_read_by_the_other_users_of_a_shared_cache(
    tiny: LoadedBackbone, cache: Path
) -> None:
    """The export is staged in a folder from mkdtemp, made 0700: moved into place as it
    was, the export of a cache shared by several users (FUGU_LITE_CACHE_DIR on a team's
    disk) could be opened by its exporter alone."""
    import stat

    folder = export_folder(tiny.name, tiny.identity, 2)
    plain = extractor_for(tiny, layer=2, runtime="torch")
    export_backbone(plain.truncated, plain.tokenize(PROMPTS[:2]), folder)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o755


def test_a_pinned_hub_id_shares_the_unpinned_ids_export_folder(cache: Path) -> None:
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = "sentence-transformers/all-MiniLM-L6-v2"
    identity = f"hub:{repo}@{commit}"  # what backbone_identity gives both spellings
    pinned = export_folder(f"{repo}@{commit}", identity, 4)
    assert pinned == export_folder(repo, identity, 4)  # not exported again under the commit
    assert pinned.name.startswith("sentence_transformers_all_MiniLM_L6_v2-layer4-")
    # a long name keeps its end, which says which model it is: not /home/user/models/...
    long = export_folder("/home/someone/projects/routing/models/finetuned-minilm-v3", "x", 4)
    assert "_models_finetuned_minilm_v3-layer4-" in long.name and "home" not in long.name


@pytest.mark.parametrize(
    "change",
    ["weights", "torch", "transformers", "format", "opset"],
)
def test_the_export_folder_changes_with_each_setting_that_shapes_the_graph(
    cache: Path, monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    """A backbone folder trained again in place, or a torch or transformers upgrade, must not
    find the earlier export under its key: int8's loose check (its features are a few percent
    off anyway) would take the stale copy for the new weights."""
    import importlib.metadata

    import fugu_lite.onnx_export as export_module

    identity = "folder:/models/router-backbone#" + "a" * 16
    before = export_folder("/models/router-backbone", identity, 4)
    if change == "weights":
        identity = "folder:/models/router-backbone#" + "b" * 16
    elif change == "torch":
        monkeypatch.setattr(torch, "__version__", "0.0.1")
    elif change == "transformers":
        real = importlib.metadata.version
        monkeypatch.setattr(
            importlib.metadata,
            "version",
            lambda name: "0.0.1" if name == "transformers" else real(name),
        )
    elif change == "format":
        monkeypatch.setattr(export_module, "EXPORT_FORMAT_VERSION", 0)
    else:
        monkeypatch.setattr(export_module, "OPSET_VERSION", 13)
    assert export_folder("/models/router-backbone", identity, 4) != before


def test_the_session_runs_on_torchs_thread_count(tiny: LoadedBackbone, shared_cache: Path) -> None:
    """`serve --torch-threads` sets torch's count, which ONNX Runtime's pool must follow."""
    previous = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        onnx = extractor_for(tiny, layer=3).runtime.onnx
        assert onnx is not None and onnx.threads == 3
        assert onnx.session.get_session_options().intra_op_num_threads == 3
    finally:
        torch.set_num_threads(previous)


@pytest.mark.parametrize("quantization", ["none", "int8"])
def test_the_extractors_of_one_export_share_its_session(
    tiny: LoadedBackbone, shared_cache: Path, quantization: str
) -> None:
    """A family of routers, or eval's configs, on one backbone: one copy of its weights."""
    first = extractor_for(tiny, layer=3, quantization=quantization)
    second = extractor_for(tiny, layer=3, quantization=quantization, pooling="last")
    assert first.runtime.onnx is not None
    assert second.runtime.onnx is first.runtime.onnx


def test_the_session_runs_its_graph_in_sequence_on_one_pool_that_does_not_spin(
    tiny: LoadedBackbone, shared_cache: Path
) -> None:
    """The session options no feature tells apart: a second pool (inter-op threads) or
    parallel execution would add threads beyond torch's count (ONNX Runtime runs a graph in
    sequence with one inter-op thread whatever the mode), and spinning pool threads steal the
    cores of a shared machine between forwards."""
    import onnxruntime as ort

    previous = torch.get_num_threads()
    torch.set_num_threads(2)  # a pool of two: one of its own for each thread would be two
    try:
        onnx = extractor_for(tiny, layer=3).runtime.onnx
    finally:
        torch.set_num_threads(previous)
    assert onnx is not None and onnx.threads == 2
    options = onnx.session.get_session_options()
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    assert options.inter_op_num_threads == 1
    assert options.execution_mode == ort.ExecutionMode.ORT_SEQUENTIAL
    assert options.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_ALL


def test_concurrent_first_calls_export_once(
    tiny: LoadedBackbone, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    exports = count_exports(monkeypatch)
    extractor = extractor_for(tiny, layer=1)
    barrier = threading.Barrier(4)

    def encode(prompt: str) -> torch.Tensor:
        barrier.wait()
        return extractor.encode([prompt])

    with ThreadPoolExecutor(4) as pool:
        rows = list(pool.map(encode, PROMPTS))
    assert len(exports) == 1
    reference = extractor_for(tiny, layer=1, runtime="torch").encode(PROMPTS)
    torch.testing.assert_close(torch.cat(rows), reference, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("weights", ["other", "nan"])
def test_a_wrong_cached_export_is_replaced(
    tiny: LoadedBackbone, cache: Path, capsys: pytest.CaptureFixture[str], weights: str
) -> None:
    """The check against torch catches an export of other weights under this key, and one
    whose hidden states are NaN (weights gone NaN in a fine-tune): NaN is no difference at
    all to a plain `difference > tolerance`, and every feature would be NaN."""
    folder = export_folder(tiny.name, tiny.identity, 2)
    impostor = extractor_for(tiny_random_backbone(seed=1), layer=2, runtime="torch")
    if weights == "nan":
        with torch.no_grad():
            for parameter in impostor.truncated.parameters():
                parameter.fill_(float("nan"))
    export_backbone(impostor.truncated, impostor.tokenize(PROMPTS[:2]), folder)
    extractor = extractor_for(tiny, layer=2)
    assert extractor.runtime.name == "onnx"
    assert "unusable" in capsys.readouterr().err
    reference = extractor_for(tiny, layer=2, runtime="torch").encode(PROMPTS)
    torch.testing.assert_close(extractor.encode(PROMPTS), reference, rtol=1e-5, atol=1e-5)


class PaddingHeavyBackbone(torch.nn.Module):
    """A stand-in truncated backbone: hidden states 1.0 on real tokens, 1000.0 on padding
    (what a backbone may leave there: no feature reads it)."""

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> SimpleNamespace:
        real = attention_mask.unsqueeze(-1).float().expand(*input_ids.shape, 4)
        return SimpleNamespace(last_hidden_state=real + (1 - real) * 1000.0)


class OffOnARealToken:
    """A stand-in ONNX session (no export needed): torch's hidden states, 0.5 off on the
    first real token."""

    def hidden_states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        states = PaddingHeavyBackbone()(input_ids, attention_mask).last_hidden_state.clone()
        states[0, 0, 0] += 0.5
        return states


def test_the_exports_check_is_relative_to_the_real_tokens_values_not_the_paddings() -> None:
    """An export 50% off on a real token must fail the check: scaled by the largest value
    over padding too (1000 here), the difference read 0.0005, under the check's tolerance."""
    batch = {
        "input_ids": torch.ones(2, 3, dtype=torch.long),
        "attention_mask": torch.tensor([[1, 1, 1], [1, 0, 0]]),
    }
    onnx = cast(OnnxBackbone, OffOnARealToken())
    difference = onnx_module.relative_difference(onnx, PaddingHeavyBackbone(), batch)
    assert difference == pytest.approx(0.5)


@pytest.mark.parametrize("quantization", ["none", "int8"])
def test_a_cached_export_a_little_off_torchs_features_is_replaced(
    tiny: LoadedBackbone, cache: Path, capsys: pytest.CaptureFixture[str], quantization: str
) -> None:
    """Weights 0.1% off (a backbone fine-tuned a little, an export from
    another build) are not a different model to the eye: the fp32 check must still refuse
    them, or routing runs on features the router was not trained on. int8 checks the fp32
    file before quantizing it: its own check is far too loose to see this."""
    folder = export_folder(tiny.name, tiny.identity, 2)
    nearly = extractor_for(tiny_random_backbone(), layer=2, runtime="torch")
    with torch.no_grad():
        for parameter in nearly.truncated.parameters():
            parameter.mul_(1.001)  # features about 0.26% off: 26 times the tolerance
    export_backbone(nearly.truncated, nearly.tokenize(PROMPTS[:2]), folder)
    extractor = extractor_for(tiny, layer=2, quantization=quantization)
    assert extractor.runtime.name == "onnx"
    assert "unusable" in capsys.readouterr().err
    reference = extractor_for(tiny, layer=2, runtime="torch").encode(PROMPTS)
    if quantization == "none":
        torch.testing.assert_close(extractor.encode(PROMPTS), reference, rtol=1e-5, atol=1e-5)
    else:
        assert relative_gap(extractor.encode(PROMPTS), reference) < 0.1


def test_a_damaged_cached_file_is_exported_again(
    tiny: LoadedBackbone, cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = export_folder(tiny.name, tiny.identity, 4)
    folder.mkdir(parents=True)
    (folder / MODEL_FILE).write_bytes(b"not an onnx file")
    extractor = extractor_for(tiny, layer=4)
    assert extractor.runtime.name == "onnx"
    assert "unusable" in capsys.readouterr().err
    assert (folder / MODEL_FILE).stat().st_size > 1000


@pytest.mark.parametrize("quantization", ["none", "int8"])
def test_an_export_folder_without_its_model_file_is_exported_again(
    tiny: LoadedBackbone, cache: Path, capsys: pytest.CaptureFixture[str], quantization: str
) -> None:
    """model.onnx deleted from its folder (by hand, or a cache clear stopped half-way), its
    settings.json (and int8 copy) left: the new export could not be moved into the folder,
    which was said as a cache that cannot be written; auto ran torch on every later run and
    int8 (the shipped default) failed every run."""
    folder = export_folder(tiny.name, tiny.identity, 3)
    first = extractor_for(tiny, layer=3, quantization=quantization)
    assert first.runtime.name == "onnx"
    reference = first.encode(PROMPTS)
    del first
    gc.collect()  # the shared session over the deleted file goes with its extractor
    (folder / MODEL_FILE).unlink()
    capsys.readouterr()
    again = extractor_for(tiny, layer=3, quantization=quantization)
    assert again.runtime.name == "onnx"
    assert again.runtime.reason.startswith("exported to")
    assert "cannot be written" not in capsys.readouterr().err
    assert (folder / MODEL_FILE).is_file()
    assert torch.equal(again.encode(PROMPTS), reference)


def leftover(folder: Path, name: str, pid: int, suffix: str = "") -> Path:
    """Where a writer with this pid stages `name` (as export_backbone/quantize_export do)."""
    return folder / f"{writer_temporary(name, pid)}{suffix}"


def test_loading_an_export_removes_what_killed_exports_left_not_live_ones(
    tiny: LoadedBackbone, cache: Path
) -> None:
    """kill -9 during an export or its int8 copy left a hidden staging folder or *.partial file
    (~76 MB and ~55 MB for MiniLM) in the shared cache, which no run removed."""
    folder = export_folder(tiny.name, tiny.identity, 2)
    plain = extractor_for(tiny, layer=2, runtime="torch")
    export_backbone(plain.truncated, plain.tokenize(PROMPTS[:2]), folder)
    dead = finished_pid()
    dead_export = leftover(folder.parent, folder.name, dead)
    live_export = leftover(folder.parent, folder.name, os.getpid())
    for staging in (dead_export, live_export):
        staging.mkdir()
        (staging / MODEL_FILE).write_bytes(b"half an export")
    dead_int8 = leftover(folder, QUANTIZED_FILE, dead, ".partial")
    live_int8 = leftover(folder, QUANTIZED_FILE, os.getpid(), ".partial")
    unnamed_int8 = folder / f".{QUANTIZED_FILE}.{'0' * 32}.partial"  # earlier versions' name
    for partial in (dead_int8, live_int8, unnamed_int8):
        partial.write_bytes(b"half an int8 copy")
    two_days_ago = time.time() - 2 * 24 * 3600
    os.utime(unnamed_int8, (two_days_ago, two_days_ago))

    assert extractor_for(tiny, layer=2, quantization="int8").runtime.name == "onnx"
    assert not dead_export.exists() and not dead_int8.exists() and not unnamed_int8.exists()
    assert (live_export / MODEL_FILE).exists() and live_int8.exists()  # a run still writing
    assert (folder / QUANTIZED_FILE).exists()


@pytest.mark.parametrize("quantization", ["none", "int8"])
def test_loading_an_export_removes_the_inferred_copy_earlier_versions_left(
    tiny: LoadedBackbone, cache: Path, quantization: str
) -> None:
    """A killed int8 quantization of earlier versions left onnxruntime's shape-inferred copy,
    `model-inferred.onnx` (as large as the export, ~76 MB for MiniLM), beside the export for
    good: no run removed it. An old one goes now; a recent one may be a run still at work."""
    folder = export_folder(tiny.name, tiny.identity, 2)
    plain = extractor_for(tiny, layer=2, runtime="torch")
    export_backbone(plain.truncated, plain.tokenize(PROMPTS[:2]), folder)
    inferred = folder / "model-inferred.onnx"
    inferred.write_bytes(b"an earlier version's shape-inferred copy")
    recent = extractor_for(tiny, layer=2, quantization=quantization)
    assert recent.runtime.name == "onnx" and inferred.exists()

    two_hours_ago = time.time() - 2 * 3600
    os.utime(inferred, (two_hours_ago, two_hours_ago))
    assert extractor_for(tiny, layer=2, quantization=quantization).runtime.name == "onnx"
    assert not inferred.exists()
    assert (folder / MODEL_FILE).exists()


# --- failures -------------------------------------------------------------------------------


def refuse_export(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object) -> None:
        raise RuntimeError("unsupported operator aten::made_up")

    monkeypatch.setattr(onnx_module, "export_backbone", refuse)


def test_an_export_torch_writes_no_file_for_is_refused_and_leaves_nothing_in_the_cache(
    tiny: LoadedBackbone, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain = extractor_for(tiny, layer=2, runtime="torch")
    monkeypatch.setattr(torch.onnx, "export", lambda *args, **kwargs: None)
    target = cache / "onnx" / "export"
    with pytest.raises(OnnxRuntimeError, match="wrote no file"):
        export_backbone(plain.truncated, plain.tokenize(PROMPTS[:2]), target)
    assert list(target.parent.iterdir()) == []  # neither the export nor its staging folder


def attention_implementations(module: torch.nn.Module) -> list[str]:
    return [
        submodule.config._attn_implementation
        for submodule in module.modules()
        if hasattr(getattr(submodule, "config", None), "_attn_implementation")
    ]


def test_the_export_traces_eager_attention_and_leaves_the_torch_backbones_as_it_was(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Eager attention, which ONNX Runtime ran fastest (onnx_export), is traced on a copy:
    the backbone's own torch forward (gradients, SVF) keeps the attention it was loaded with."""
    plain = extractor_for(tiny_random_backbone(), layer=2, runtime="torch")
    before = attention_implementations(plain.truncated)
    assert before and "eager" not in before
    traced: list[list[str]] = []
    real = torch.onnx.export

    def noting_attention(model: torch.nn.Module, *args: object, **kwargs: object) -> None:
        traced.append(attention_implementations(model))
        real(model, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(torch.onnx, "export", noting_attention)
    export_backbone(plain.truncated, plain.tokenize(PROMPTS[:2]), cache / "export")
    assert traced == [["eager"] * len(before)]
    assert attention_implementations(plain.truncated) == before


def test_a_failed_export_falls_back_to_torch_with_a_log_line(
    tiny: LoadedBackbone,
    cache: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    refuse_export(monkeypatch)
    extractor = extractor_for(tiny, layer=5)
    features = extractor.encode(PROMPTS)
    assert extractor.runtime.name == "torch"
    assert "export failed" in extractor.runtime.describe()
    err = " ".join(capsys.readouterr().err.split())
    assert "aten::made_up" in err and "using the torch runtime instead" in err
    assert "unusable" not in err  # nothing was cached: it is not exported a second time
    reference = extractor_for(tiny, layer=5, runtime="torch").encode(PROMPTS)
    assert torch.equal(features, reference)
    assert not (export_folder(tiny.name, tiny.identity, 5) / MODEL_FILE).exists()


def test_runtime_onnx_raises_when_the_export_fails(
    tiny: LoadedBackbone, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    refuse_export(monkeypatch)
    extractor = extractor_for(tiny, layer=5, runtime="onnx")
    with pytest.raises(OnnxRuntimeError, match=r"aten::made_up\. Set model\.runtime to 'torch'"):
        extractor.encode(PROMPTS)


# --- int8 quantization ----------------------------------------------------------------------


def relative_gap(got: torch.Tensor, expected: torch.Tensor) -> float:
    return float((got - expected).abs().max() / expected.abs().max())


def test_int8_features_are_near_fp32_and_do_not_depend_on_the_batch(
    tiny: LoadedBackbone, shared_cache: Path
) -> None:
    int8 = extractor_for(tiny, layer=3, pooling="mean", quantization="int8")
    fp32 = extractor_for(tiny, layer=3, pooling="mean")
    assert int8.runtime.onnx is not None and int8.runtime.onnx.quantized
    assert "int8" in int8.runtime.describe() and "fp32" in fp32.runtime.describe()
    assert (export_folder(tiny.name, tiny.identity, 3) / QUANTIZED_FILE).is_file()
    batched = int8.encode(PROMPTS)
    gap = relative_gap(batched, fp32.encode(PROMPTS))
    assert 1e-6 < gap < 0.1  # really int8, and still the same features to a few percent
    alone = torch.cat([int8.encode([prompt]) for prompt in PROMPTS])
    assert torch.equal(alone, batched)  # each prompt runs on its own, so batch mates don't count


def test_a_cached_int8_copy_of_other_weights_is_replaced(
    tiny: LoadedBackbone, cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Later loads open the int8 copy alone (its fp32 file was checked before quantizing):
    its own, looser check must still refuse a copy that is not of these weights."""
    assert extractor_for(tiny, layer=2).runtime.name == "onnx"  # the right fp32 export
    folder = export_folder(tiny.name, tiny.identity, 2)
    impostor = extractor_for(tiny_random_backbone(), layer=2, runtime="torch")
    with torch.no_grad():
        for parameter in impostor.truncated.parameters():
            parameter.mul_(1.2)  # int8 features about 0.6 off: 2.4 times its tolerance
    elsewhere = cache / "impostor"
    export_backbone(impostor.truncated, impostor.tokenize(PROMPTS[:2]), elsewhere)
    quantize_export(elsewhere / MODEL_FILE, folder / QUANTIZED_FILE)
    capsys.readouterr()
    int8 = extractor_for(tiny, layer=2, quantization="int8")
    assert int8.runtime.onnx is not None and int8.runtime.onnx.quantized
    assert "unusable" in capsys.readouterr().err
    fp32 = extractor_for(tiny, layer=2, runtime="torch")
    assert relative_gap(int8.encode(PROMPTS), fp32.encode(PROMPTS)) < 0.1


def test_int8_features_have_their_own_cache(
    tiny: LoadedBackbone, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fp32_cfg = ModelConfig(backbone=tiny.name, max_tokens=64)
    int8_cfg = fp32_cfg.model_copy(update={"quantization": "int8"})
    assert feature_cache_key(int8_cfg) != feature_cache_key(fp32_cfg)
    fp32_rows, _ = compute_features(PROMPTS, fp32_cfg, FeatureExtractor(tiny, fp32_cfg))
    int8_rows, _ = compute_features(PROMPTS, int8_cfg, FeatureExtractor(tiny, int8_cfg))
    assert not torch.equal(int8_rows, fp32_rows)  # computed afresh, not read from fp32's cache
    monkeypatch.setattr(FeatureExtractor, "encode", None)  # a cache hit never runs the backbone
    again, extractor = compute_features(PROMPTS, int8_cfg)
    assert extractor is None and torch.equal(again, int8_rows)


def test_the_quantized_file_is_made_once(
    tiny: LoadedBackbone, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[Path] = []
    real = onnx_module.quantize_export

    def counting(source: Path, target: Path) -> None:
        made.append(target)
        real(source, target)

    monkeypatch.setattr(onnx_module, "quantize_export", counting)
    expected = extractor_for(tiny, layer=2, quantization="int8").encode(PROMPTS)
    gc.collect()
    again = extractor_for(tiny, layer=2, quantization="int8", max_tokens=32).encode(PROMPTS[:1])
    assert made == [export_folder(tiny.name, tiny.identity, 2) / QUANTIZED_FILE]
    torch.testing.assert_close(again, expected[:1])


def test_quantizing_leaves_the_export_folder_to_other_runs(
    tiny: LoadedBackbone, cache: Path
) -> None:
    """onnxruntime's quantize_dynamic wrote `model-inferred.onnx` beside the export and then
    deleted it: two runs quantizing the same export at once overwrote and deleted each
    other's (and a killed run's copy stayed there for good)."""
    folder = export_folder(tiny.name, tiny.identity, 2)
    plain = extractor_for(tiny, layer=2, runtime="torch")
    export_backbone(plain.truncated, plain.tokenize(PROMPTS[:2]), folder)
    another_runs = folder / "model-inferred.onnx"
    another_runs.write_bytes(b"another run's shape-inferred copy")
    with ThreadPoolExecutor(2) as pool:  # two at once, as two processes would
        targets = [folder / QUANTIZED_FILE, folder / f"second-{QUANTIZED_FILE}"]
        list(pool.map(quantize_export, [folder / MODEL_FILE] * 2, targets))
    assert another_runs.read_bytes() == b"another run's shape-inferred copy"
    assert sorted(path.name for path in folder.iterdir()) == sorted(
        [MODEL_FILE, QUANTIZED_FILE, f"second-{QUANTIZED_FILE}", another_runs.name]
    )
    assert (folder / MODEL_FILE).stat().st_nlink == 1  # no link to it left behind
    session = OnnxBackbone(folder / QUANTIZED_FILE, 1, quantized=True)
    assert session.path.stat().st_size > 1000


def test_quantizing_links_the_export_into_its_staging_folder_instead_of_copying_it(
    tiny: LoadedBackbone, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A copy would take the export's size again (~76 MB for MiniLM) on the cache's disk
    while quantizing, beside the shape-inferred copy the disk must already have room for."""
    import onnxruntime.quantization

    folder = cache / "export"
    plain = extractor_for(tiny, layer=2, runtime="torch")
    export_backbone(plain.truncated, plain.tokenize(PROMPTS[:2]), folder)
    links_while_quantizing: list[int] = []
    real = onnxruntime.quantization.quantize_dynamic

    def noting_links(model_input: str, *args: object, **kwargs: object) -> None:
        links_while_quantizing.append((folder / MODEL_FILE).stat().st_nlink)
        real(model_input, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(onnxruntime.quantization, "quantize_dynamic", noting_links)
    quantize_export(folder / MODEL_FILE, folder / QUANTIZED_FILE)
    assert links_while_quantizing == [2]
    assert (folder / QUANTIZED_FILE).stat().st_size > 1000


def test_quantizing_on_a_file_system_without_hard_links_copies_the_export(
    tiny: LoadedBackbone, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """quantize_export links the export into its staging folder; where the file system has
    no hard links (os.link fails: some network or FUSE mounts) it copies it. The failure is
    stood in for by os.link raising, as such a mount cannot be made here."""
    folder = export_folder(tiny.name, tiny.identity, 2)
    plain = extractor_for(tiny, layer=2, runtime="torch")
    export_backbone(plain.truncated, plain.tokenize(PROMPTS[:2]), folder)
    exported = (folder / MODEL_FILE).read_bytes()

    def no_hard_links(source: object, target: object) -> None:
        raise OSError(1, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_hard_links)
    quantize_export(folder / MODEL_FILE, folder / QUANTIZED_FILE)
    assert sorted(path.name for path in folder.iterdir()) == sorted([MODEL_FILE, QUANTIZED_FILE])
    assert (folder / MODEL_FILE).read_bytes() == exported
    session = OnnxBackbone(folder / QUANTIZED_FILE, 1, quantized=True)
    ids = plain.tokenize(PROMPTS[:1])
    hidden = session.hidden_states(ids["input_ids"], ids["attention_mask"])
    assert hidden.shape[0] == 1 and torch.isfinite(hidden).all()


def test_the_int8_copy_holds_seven_bit_int8_matmul_weights_scaled_per_output_channel(
    tiny: LoadedBackbone, cache: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """quantize_export's choices, which the features' tolerance does not tell apart: signed
    int8 weights, in 7 bits (reduce_range: u8 x s8 products overflow on CPUs without VNNI),
    one scale per output channel, the weights of MatMuls alone (the embeddings stay fp32);
    and static quantization's advice to pre-process the model is not printed."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    folder = cache / "export"
    plain = extractor_for(tiny, layer=2, runtime="torch")
    export_backbone(plain.truncated, plain.tokenize(PROMPTS[:2]), folder)
    with caplog.at_level("WARNING"):
        quantize_export(folder / MODEL_FILE, folder / QUANTIZED_FILE)
        assert "pre-processing" not in caplog.text
        # hushed while quantizing only: the filter is off the root logger again
        logging.warning("Please consider pre-processing before quantization (a later run)")
    assert "a later run" in caplog.text

    fp32 = onnx.load(str(folder / MODEL_FILE))
    fp32_weights = {weight.name: numpy_helper.to_array(weight) for weight in fp32.graph.initializer}
    matmul_weights = {
        name for node in fp32.graph.node if node.op_type == "MatMul" for name in node.input
    } & set(fp32_weights)
    int8 = onnx.load(str(folder / QUANTIZED_FILE))
    stored = {weight.name: numpy_helper.to_array(weight) for weight in int8.graph.initializer}
    quantized = {name.removesuffix("_quantized") for name in stored if name.endswith("_quantized")}
    assert matmul_weights and quantized == matmul_weights
    for name in matmul_weights:
        values = stored[f"{name}_quantized"]
        assert values.dtype == np.int8 and np.abs(values.astype(int)).max() <= 64, name
        assert stored[f"{name}_scale"].shape == (fp32_weights[name].shape[1],), name


def test_int8_on_a_cache_too_full_for_its_quantized_copy_says_to_give_a_cache_with_room(
    tiny: LoadedBackbone,
    cache: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A cache with room for the fp32 export but not for quantizing it: onnx's shape inference
    wrote its copy cut short without an error, which failed to parse, so the good export was
    deleted and made again, and int8 was refused as something ONNX Runtime cannot run
    ('set model.quantization to none and train the router again'). Now the full cache is
    said, and the run quantizes in a temporary folder."""
    import shutil
    import types

    import onnx

    assert extractor_for(tiny, layer=2, runtime="onnx").runtime.name == "onnx"
    (export,) = (cache / "onnx").iterdir()
    exported = (export / MODEL_FILE).read_bytes()
    infer_shapes_path, disk_usage = onnx.shape_inference.infer_shapes_path, shutil.disk_usage

    def cut_short_in_the_cache(source: str, target: str, *args: object) -> None:
        infer_shapes_path(source, target, *args)  # type: ignore[arg-type]
        if cache in Path(target).parents:  # what fitted of it before the disk was full
            Path(target).write_bytes(Path(target).read_bytes()[:1000])

    def no_room_in_the_cache(path: str | Path) -> object:
        full = cache in Path(path).parents
        return types.SimpleNamespace(free=0) if full else disk_usage(path)

    monkeypatch.setattr(onnx.shape_inference, "infer_shapes_path", cut_short_in_the_cache)
    monkeypatch.setattr(shutil, "disk_usage", no_room_in_the_cache)
    capsys.readouterr()
    extractor = extractor_for(tiny, layer=2, quantization="int8")
    assert extractor.runtime.name == "onnx" and extractor.runtime.onnx is not None
    assert extractor.runtime.onnx.quantized
    said = " ".join(capsys.readouterr().err.split())
    assert "model.quantization 'int8' runs an ONNX export of backbone 'tiny-random'" in said
    assert "No space left on device" in said and "FUGU_LITE_CACHE_DIR to a writable" in said
    assert f"{QUANTIZED_FILE}'" in said  # the file that did not fit, not the export
    assert "unusable" not in said and "train" not in said
    assert (export / MODEL_FILE).read_bytes() == exported  # kept, not exported again
    assert not (export / QUANTIZED_FILE).exists()


def test_a_quantization_failing_on_a_cache_with_room_keeps_its_own_error(
    tiny: LoadedBackbone, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only a cache without room for the export is a full disk: ONNX Runtime's own failure
    (an operator its quantizer cannot take) said as 'No space left on device' would send
    the user to free space for nothing."""
    import onnxruntime.quantization

    def unsupported(*args: object, **kwargs: object) -> None:
        raise RuntimeError("cannot quantize operator MadeUp")

    folder = cache / "export"
    plain = extractor_for(tiny, layer=2, runtime="torch")
    export_backbone(plain.truncated, plain.tokenize(PROMPTS[:2]), folder)
    monkeypatch.setattr(onnxruntime.quantization, "quantize_dynamic", unsupported)
    with pytest.raises(RuntimeError, match="cannot quantize operator MadeUp"):
        quantize_export(folder / MODEL_FILE, folder / QUANTIZED_FILE)
    assert not (folder / QUANTIZED_FILE).exists()


def test_an_unusable_export_a_read_only_cache_cannot_remove_is_said_as_the_caches_problem(
    tiny: LoadedBackbone,
    cache: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A damaged export in a read-only (shared) cache: its removal failed without a word, so
    'exporting it again' read the same file, and int8 was refused as something ONNX Runtime
    cannot run ('set model.quantization to none and train the router again'). Now the cache
    is said to be unwritable, and the run exports to a temporary folder meanwhile."""
    import shutil

    assert extractor_for(tiny, layer=2, runtime="onnx").runtime.name == "onnx"
    gc.collect()  # its session over the export, which would serve the damaged file's path
    (export,) = (cache / "onnx").iterdir()
    (export / MODEL_FILE).write_bytes(b"damaged")
    rmtree = shutil.rmtree

    def read_only_cache(path: str | Path, *args: object, **kwargs: object) -> None:
        if cache not in Path(path).parents:
            rmtree(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(shutil, "rmtree", read_only_cache)
    capsys.readouterr()
    extractor = extractor_for(tiny, layer=2, quantization="int8")
    assert extractor.runtime.name == "onnx" and extractor.runtime.onnx is not None
    assert extractor.runtime.onnx.quantized
    said = " ".join(capsys.readouterr().err.split())
    assert f"which cannot be written in {cache / 'onnx'}" in said
    assert f"(the unusable export {export.name} there cannot be removed)" in said
    assert "FUGU_LITE_CACHE_DIR to a writable folder" in said and "train" not in said


@pytest.mark.parametrize(
    "settings",
    [{"runtime": "torch"}, {"svf_targets": ["layers.0.mlp.down_proj"]}, {"device": "cuda"}],
)
def test_int8_refuses_what_it_cannot_run(settings: dict) -> None:
    with pytest.raises(ValidationError, match="quantization 'int8' runs an int8 ONNX Runtime"):
        ModelConfig(quantization="int8", **settings)
    with pytest.raises(ValidationError, match="quantization"):
        ModelConfig(quantization="fp16")


def test_int8_without_onnxruntime_says_how_to_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(onnx_module, "missing_packages", lambda: ["onnxruntime"])
    with pytest.raises(OnnxRuntimeError, match=r"quantization is 'int8'.*pip install onnxruntime"):
        requested_runtime(ModelConfig(quantization="int8"))


def test_int8_never_falls_back_to_torch(
    tiny: LoadedBackbone, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch would give fp32 features under the int8 cache key: the failure is raised."""

    def refuse(source: Path, target: Path) -> None:
        raise RuntimeError("no int8 kernels here")

    monkeypatch.setattr(onnx_module, "quantize_export", refuse)
    extractor = extractor_for(tiny, layer=1, quantization="int8")
    with pytest.raises(OnnxRuntimeError, match=r"no int8 kernels here.*quantization to 'none'"):
        extractor.encode(PROMPTS)


# --- the real default backbone ----------------------------------------------------------------


@pytest.mark.integration
def test_minilm_default_config_in_fp32_runs_onnx_with_the_same_features(cache: Path) -> None:
    cfg = load_config(DEFAULT_CONFIG, PipelineConfig).model.model_copy(
        update={"quantization": "none"}
    )
    backbone = load_backbone(cfg.backbone)
    onnx = FeatureExtractor(backbone, cfg)
    reference = FeatureExtractor(backbone, cfg.model_copy(update={"runtime": "torch"}))
    assert onnx.runtime.name == "onnx"
    assert (export_folder(backbone.name, backbone.identity, onnx.layer) / MODEL_FILE).is_file()
    long_prompt = " ".join(["a routing prompt that runs past the token limit"] * 60)
    prompts = [*PROMPTS, long_prompt]
    assert onnx.tokenize([long_prompt])["input_ids"].shape[1] == cfg.max_tokens
    got, expected = onnx.encode(prompts), reference.encode(prompts)
    scale = float(expected.abs().max())
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5 * scale)
    alone = torch.cat([onnx.encode([prompt]) for prompt in prompts])
    torch.testing.assert_close(alone, expected, rtol=1e-5, atol=1e-5 * scale)


@pytest.mark.integration
def test_minilm_default_int8_features_are_near_fp32(shared_cache: Path) -> None:
    cfg = load_config(DEFAULT_CONFIG, PipelineConfig).model
    assert cfg.quantization == "int8"  # the shipped default
    backbone = load_backbone(cfg.backbone)
    int8 = FeatureExtractor(backbone, cfg.model_copy(update={"quantization": "int8"}))
    fp32 = FeatureExtractor(backbone, cfg.model_copy(update={"quantization": "none"}))
    got, expected = int8.encode(PROMPTS), fp32.encode(PROMPTS)
    assert 1e-4 < relative_gap(got, expected) < 0.15
    assert torch.nn.functional.cosine_similarity(got, expected).min() > 0.98


@pytest.mark.integration
def test_the_readme_gives_the_sizes_of_minilms_exports(shared_cache: Path) -> None:
    """The README said an export is ~90 MB for MiniLM: that is the whole model, but the
    default layer cuts it at 4 of 6 blocks, and the shipped int8 setup keeps an int8 copy
    beside the export, which the README did not count (what `cache list` shows)."""
    cfg = load_config(DEFAULT_CONFIG, PipelineConfig).model
    extractor = FeatureExtractor(load_backbone(cfg.backbone), cfg)
    assert extractor.runtime.name == "onnx" and cfg.quantization == "int8"
    folder = export_folder(extractor.backbone.name, extractor.backbone.identity, extractor.layer)
    readme = " ".join((Path(__file__).parents[1] / "README.md").read_text("utf-8").split())
    export = re.search(r"an export is ~(\d+) MB for MiniLM", readme)
    int8 = re.search(r"its int8 copy beside it[^~]*~(\d+) MB", readme)
    assert export and int8, "README: the MiniLM export's size is not where it was"
    for stated, file in ((export, MODEL_FILE), (int8, QUANTIZED_FILE)):
        measured = (folder / file).stat().st_size / 1e6  # MB as `cache list` says them
        assert int(stated.group(1)) == pytest.approx(measured, rel=0.05), file


@pytest.mark.parametrize(
    ("settings", "setting"),
    [
        ({"quantization": "int8"}, "model.quantization 'int8'"),
        ({"runtime": "onnx"}, "model.runtime 'onnx'"),
        ({"runtime": "auto"}, "model.runtime 'auto'"),
    ],
)
def test_an_export_the_cache_cannot_take_says_to_give_a_writable_cache(
    tiny: LoadedBackbone,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    settings: dict,
    setting: str,
) -> None:
    """A read-only (or full) cache was blamed on ONNX Runtime: int8 (default.yaml's setting
    for MiniLM) said to set model.quantization to 'none' and train the router again. Then
    int8 and runtime 'onnx' refused to route at all on a read-only cache; they now export
    for the run into a temporary folder (removed once loaded), with the same features as
    from a writable cache."""
    monkeypatch.setenv("FUGU_LITE_CACHE_DIR", str(tmp_path / "writable"))
    expected = extractor_for(tiny, layer=2, **settings).encode(PROMPTS)
    capsys.readouterr()
    (tmp_path / "blocked").write_text("")  # root ignores permission bits: a file stands in
    monkeypatch.setenv("FUGU_LITE_CACHE_DIR", str(tmp_path / "blocked"))
    monkeypatch.setenv("TMPDIR", str(tmp_path / "scratch"))
    (tmp_path / "scratch").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again
    extractor = extractor_for(tiny, layer=2, **settings)
    expected_runtime = "torch" if settings.get("runtime") == "auto" else "onnx"
    assert extractor.runtime.name == expected_runtime
    torch.testing.assert_close(extractor.encode(PROMPTS), expected, rtol=0, atol=1e-4)
    said = " ".join(capsys.readouterr().err.split())
    assert f"{setting} runs an ONNX export of backbone 'tiny-random'" in said
    assert "FUGU_LITE_CACHE_DIR to a writable folder" in said and "train" not in said
    assert ("temporary folder for this run" in said) == (expected_runtime == "onnx")
    assert list((tmp_path / "scratch").iterdir()) == []


def test_an_export_the_cache_cannot_take_is_made_once_per_process(
    tiny: LoadedBackbone,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """On a read-only cache, each feature extractor (each member of a router family, each
    config `eval` loads) exported the backbone to a temporary folder again, seconds each,
    and said so each time. The first one's export serves the others of the process."""
    (tmp_path / "blocked").write_text("")  # root ignores permission bits: a file stands in
    monkeypatch.setenv("FUGU_LITE_CACHE_DIR", str(tmp_path / "blocked"))
    exports = count_exports(monkeypatch)
    first = extractor_for(tiny, layer=2, runtime="onnx")
    second = extractor_for(tiny, layer=2, runtime="onnx", pooling="last")
    assert (first.runtime.name, second.runtime.name) == ("onnx", "onnx")
    temporary = [target for target in exports if tmp_path / "blocked" not in target.parents]
    assert len(temporary) == 1, exports  # each tried the cache first (its folder: refused)
    said = " ".join(capsys.readouterr().err.split())
    assert said.count("temporary folder for this run") == 1, said
    reference = extractor_for(tiny, layer=2, runtime="torch", pooling="last")
    torch.testing.assert_close(second.encode(PROMPTS), reference.encode(PROMPTS), atol=1e-4, rtol=0)
    assert extractor_for(tiny, layer=3, runtime="onnx").runtime.name == "onnx"
    temporary = [target for target in exports if tmp_path / "blocked" not in target.parents]
    assert len(temporary) == 2  # another layer: another export
    int8 = extractor_for(tiny, layer=2, quantization="int8")
    assert int8.runtime.onnx is not None and int8.runtime.onnx.quantized  # not fp32's session


def test_an_export_neither_the_cache_nor_a_temporary_folder_can_take_is_refused(
    tiny: LoadedBackbone, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "blocked").write_text("")
    monkeypatch.setenv("FUGU_LITE_CACHE_DIR", str(tmp_path / "blocked"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "blocked"))
    with pytest.raises(OnnxRuntimeError) as raised:
        extractor_for(tiny, layer=2, quantization="int8").runtime  # noqa: B018 (exports)
    said = str(raised.value)
    assert "model.quantization 'int8' runs an ONNX export of backbone 'tiny-random'" in said
    assert "FUGU_LITE_CACHE_DIR to a writable folder" in said
    assert "nor in a temporary folder" in said


def test_an_export_left_without_its_settings_gets_them_on_its_next_load(
    tiny: LoadedBackbone, cache: Path
) -> None:
    """A run killed between moving its export into place and writing its settings left an
    export that `cache list` called unknown for good, so `cache clear` never removed it even
    once stale; the next load uses it and now writes its settings."""
    from fugu_lite.caches import cache_entries

    assert extractor_for(tiny, layer=2, runtime="onnx").runtime.name == "onnx"
    (export,) = (cache / "onnx").iterdir()
    (export / "settings.json").unlink()
    assert extractor_for(tiny, layer=2, runtime="onnx").runtime.name == "onnx"
    (entry,) = [entry for entry in cache_entries(cache) if entry.kind == "onnx"]
    assert (entry.status, entry.what) == ("current", "tiny-random, layer 2")
