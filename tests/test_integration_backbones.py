"""The embedded backbones offline, and one small pipeline run on the real LLMRouter data.

The smollm2 backbone is dequantised once (~40 s) and cached under FUGU_LITE_CACHE_DIR
(default ~/.cache/fugu-lite); feature caches of these tests live under tmp_path.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from pathlib import Path

import pytest
import torch
from conftest import require_shared_data

from fugu_lite.backbone_identity import backbone_identity, embedded_path
from fugu_lite.backbones import layer_list, load_backbone
from fugu_lite.config import ModelConfig, PipelineConfig, RLTrainingConfig, SFTTrainingConfig
from fugu_lite.datasets import import_dataset
from fugu_lite.evaluate_checkpoint import run_evaluation
from fugu_lite.features import FeatureExtractor
from fugu_lite.pipeline import train_pipeline
from fugu_lite.schemas import ChatMessage, RewardRecord

pytestmark = pytest.mark.integration

PROMPTS = [
    "What is the capital of Australia?",
    "Write a Python function that returns the n-th Fibonacci number using memoization.",
    "Solve for x: 3x + 7 = 22. Show your steps.",
    [
        ChatMessage(role="system", content="You are a careful assistant."),
        ChatMessage(role="user", content="Which planet has the most moons?"),
    ],
    "Question: A train leaves the station at 3 pm travelling at 60 km/h; a second train "
    "leaves the same station at 4 pm travelling at 90 km/h on the same track. At what time "
    "does the second train catch up with the first, and how far from the station are they? "
    "Answer with the time and the distance, and explain the reasoning in two sentences.",
]


@pytest.fixture(scope="module", params=["smollm2", "minilm"])
def backbone(request: pytest.FixtureRequest):
    return load_backbone(request.param)


def test_embedded_backbones_load_offline(backbone) -> None:
    assert backbone.n_layers == backbone.model.config.num_hidden_layers > 0
    assert backbone.is_decoder == (backbone.name == "smollm2")
    assert not any(p.requires_grad for p in backbone.model.parameters())
    assert not backbone.model.training
    if backbone.name == "smollm2":
        assert backbone.tokenizer.chat_template  # prompts are rendered as a conversation


@pytest.mark.parametrize("name", ["smollm2", "minilm"])
def test_the_installed_embedded_weights_keep_their_size_keyed_caches(name: str) -> None:
    """Their feature caches (SmolLM2's take ~45 min), dequantized copy and ONNX exports were
    keyed by the weight files' sizes: the weights these packages ship keep that key."""
    folder = embedded_path(name)
    files = sorted(p for p in folder.iterdir() if p.suffix in {".gguf", ".safetensors"})
    sizes = ",".join(f"{p.name}:{p.stat().st_size}" for p in files)
    assert backbone_identity(name) == f"{name}:{sizes}"


@pytest.mark.parametrize("where", ["middle", "last"])
def test_the_fast_routing_path_equals_plain_hidden_states(backbone, where: str) -> None:
    layer = backbone.n_layers // 2 if where == "middle" else -1
    cfg = ModelConfig(backbone=backbone.name, layer=layer, max_tokens=64)
    extractor = FeatureExtractor(backbone, cfg)
    if where == "middle":
        assert len(layer_list(extractor.truncated)) == layer  # later blocks never run
    fast = extractor.encode(PROMPTS)
    plain = extractor.plain_features(PROMPTS).float()
    assert fast.shape == (len(PROMPTS), backbone.hidden_size)
    assert torch.isfinite(fast).all()
    scale = plain.abs().max()
    torch.testing.assert_close(fast, plain, rtol=1e-4, atol=1e-4 * float(scale))
    # different prompts, different features
    assert torch.cdist(fast, fast).fill_diagonal_(float("inf")).min() > 1e-3


def test_truncating_leaves_the_shared_backbone_whole(backbone) -> None:
    full_cfg = ModelConfig(backbone=backbone.name, layer=-1, max_tokens=64)
    before = FeatureExtractor(backbone, full_cfg).encode(PROMPTS[:2])
    FeatureExtractor(backbone, full_cfg.model_copy(update={"layer": 2})).encode(PROMPTS[:2])
    assert backbone.n_layers == backbone.model.config.num_hidden_layers
    after = FeatureExtractor(backbone, full_cfg).encode(PROMPTS[:2])
    assert torch.equal(before, after)


# --- a small pipeline on real data ----------------------------------------------------------


def stratified(records: list[RewardRecord], split: str, n: int, seed: int) -> list[RewardRecord]:
    """n records of one split, taken round-robin over the tasks (each task shuffled)."""
    rng = random.Random(seed)
    by_task: dict[str | None, list[RewardRecord]] = defaultdict(list)
    for record in records:
        if record.split == split:
            by_task[record.task].append(record)
    for group in by_task.values():
        rng.shuffle(group)
    chosen: list[RewardRecord] = []
    while len(chosen) < n and any(by_task.values()):
        for task in sorted(by_task, key=str):
            if by_task[task] and len(chosen) < n:
                chosen.append(by_task[task].pop())
    return chosen


def test_minilm_pipeline_beats_random_on_llmrouter(tmp_path: Path) -> None:
    records = import_dataset("llmrouter", require_shared_data("llmrouter"))
    subset = [
        *stratified(records, "train", 300, seed=0),
        *stratified(records, "validation", 100, seed=1),
        *stratified(records, "test", 100, seed=2),
    ]
    assert len(subset) == 500
    assert len({r.task for r in subset if r.split == "test"}) >= 10

    config = PipelineConfig(
        model=ModelConfig(backbone="minilm", max_tokens=128, cache_dir=str(tmp_path / "cache")),
        sft=SFTTrainingConfig(epochs=20, batch_size=32, learning_rate=3e-3, temperature=0.1),
        rl=RLTrainingConfig(epochs=3, batch_size=32, learning_rate=1e-3),
    )
    training = train_pipeline(subset, config, tmp_path / "router")
    report = run_evaluation(Path(training["checkpoint"]), subset, "test", tmp_path / "eval")

    assert report["sizes"]["evaluated"] == 100
    methods = report["methods"]
    router, random_reward = methods["router"]["mean_reward"], methods["random"]["mean_reward"]
    assert random_reward < router <= methods["oracle"]["mean_reward"]
    written = json.loads((tmp_path / "eval" / "evaluation_report.json").read_text())
    assert written["methods"]["router"]["mean_reward"] == pytest.approx(router)
    sft_history = json.loads((tmp_path / "router" / "sft" / "training_report.json").read_text())
    assert len(sft_history["history"]) == 20


def test_smollm2_loads_with_a_cache_that_cannot_take_its_dequantized_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A read-only or full cache failed the load after the ~40 s of dequantizing."""
    (tmp_path / "blocked").write_text("")  # root ignores permission bits: a file stands in
    monkeypatch.setenv("FUGU_LITE_CACHE_DIR", str(tmp_path / "blocked"))
    loaded = load_backbone("smollm2")
    assert loaded.n_layers > 0
    assert "Could not cache the dequantized backbone" in " ".join(capsys.readouterr().err.split())


def test_smollm2_with_a_torn_dequantized_copy_dequantizes_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A copy torn by a disk error failed every later load with safetensors' 'incomplete
    metadata' and no word of the cache folder."""
    monkeypatch.setenv("FUGU_LITE_CACHE_DIR", str(tmp_path))
    first = load_backbone("smollm2")
    (copy,) = (tmp_path / "backbones").iterdir()
    weights = copy / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    capsys.readouterr()
    again = load_backbone("smollm2")
    assert "is damaged" in " ".join(capsys.readouterr().err.split())
    for name, tensor in first.model.state_dict().items():
        assert torch.equal(again.model.state_dict()[name], tensor), name
    assert load_backbone("smollm2").n_layers == first.n_layers  # the new copy serves
    assert "is damaged" not in capsys.readouterr().err
