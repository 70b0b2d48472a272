"""The on-disk feature cache: one folder per settings key (feature_cache_key), features
appended as shards keyed by prompt (prompt_key), damaged shards set aside, a probe of the
package versions that computed them, the backbone's shape; and `compute_features`, the
frozen backbone's features read through the cache (the extractor is features.py's)."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from pydantic import BaseModel, ValidationError
from rich.markup import escape
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file

from .atomic_files import remove_dead_writers_files, write_tensors_atomic, write_text_atomic
from .backbone_identity import awaits_download, backbone_identity, canonical_backbone
from .backbones import load_backbone
from .config import ModelConfig
from .features import (
    FeatureExtractor,
    Prompt,
    configured_pooling,
    console,
    encode_in_batches,
    feature_progress,
    prompt_text,
)
from .file_digests import cache_root
from .schemas import ChatMessage, prompt_hash

# In every feature cache key: bump it when the features change (a test of their values,
# GOLDEN_FEATURE_SUMS in tests/test_feature_cache.py, fails until it is).
FEATURE_FORMAT_VERSION = 1
# Features of a few prompts kept in each cache folder with the versions that computed them: a
# run under other versions (a transformers upgrade) computes them again, once, and sets the
# cache aside if they moved. FEATURE_FORMAT_VERSION only covers fugu-lite's own code.
PROBE_FILE = "probe.safetensors"
PROBE_TOLERANCE = 1e-3  # relative to the largest |value|: onnx vs torch differ by ~1e-6
PROBE_PROMPTS: list[Prompt] = [
    "What is 17 * 23?",
    [
        ChatMessage(role="system", content="Answer in one word."),
        ChatMessage(role="user", content="Which colour is the sky on a clear day?"),
    ],
    "A long prompt that goes on and on, " * 40,  # truncated at any usual max_tokens
]
VERSIONED_PACKAGES = ("torch", "transformers", "tokenizers", "onnxruntime")


def computation_versions() -> dict[str, str]:
    """The versions of the packages that compute features (the backbone's forward, its
    tokenizer and chat template, ONNX Runtime's kernels)."""
    versions = {}
    for name in VERSIONED_PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "absent"
    return versions


def versions_moved(saved: object) -> str:
    """What differs between versions saved by computation_versions and today's (`transformers
    4.45.0 -> 4.57.1`); '' when none do."""
    before = saved if isinstance(saved, dict) else {}
    return ", ".join(
        f"{name} {before.get(name, '?')} -> {version}"
        for name, version in computation_versions().items()
        if before.get(name) != version
    )


def prompt_key(prompt: Prompt) -> str:
    """The key of a prompt's features: a text's hash, a conversation's that of its messages'
    JSON. A text that is that very JSON (a prompt quoting a chat log) shared the
    conversation's key, so one of the two got the other's features; its key now ends in
    `-text`, which no hash does (every other key is as it was, so caches stay valid)."""
    if isinstance(prompt, str):
        key = prompt_hash(prompt)
        return f"{key}-text" if _is_conversation_json(prompt) else key
    return prompt_hash(_conversation_json(prompt))


def _conversation_json(messages: list[ChatMessage]) -> str:
    return json.dumps([m.model_dump(exclude_none=True) for m in messages], sort_keys=True)


def _is_conversation_json(text: str) -> bool:
    if not text.startswith("[{"):  # what every conversation's JSON starts with
        return False
    try:
        messages = [ChatMessage.model_validate(item) for item in json.loads(text)]
    except (ValueError, TypeError, RecursionError):  # a ValidationError is a ValueError
        return False
    return _conversation_json(messages) == text


def feature_cache_key(model_cfg: ModelConfig, identity: str | None = None) -> str:
    """The cache folder's name for these settings; `identity`: of the backbone weights that
    compute the features (a loaded backbone's), by default those its files hold now."""
    settings = {
        "backbone": identity or backbone_identity(model_cfg.backbone),
        "layer": model_cfg.layer,
        "pooling": configured_pooling(model_cfg),  # auto and what it means share a cache
        "max_tokens": model_cfg.max_tokens,
        "chat_template": model_cfg.chat_template,
        "version": FEATURE_FORMAT_VERSION,
    }
    if model_cfg.quantization != "none":  # absent for fp32, so older caches stay valid
        settings["quantization"] = model_cfg.quantization
    return hashlib.sha1(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:20]


class BackboneShape(BaseModel):
    hidden_size: int
    parameters: int


def backbone_shape(model_cfg: ModelConfig) -> tuple[BackboneShape, FeatureExtractor | None]:
    """The backbone's width and size, from the feature cache if it has seen this backbone,
    else from loading it (and then the loaded extractor is returned for reuse)."""
    cache = FeatureCache(model_cfg)
    known = _read_shape(cache.shape_path) if cache.pinned else None
    if known is not None:
        return known, None
    backbone = load_backbone(model_cfg.backbone, model_cfg.device)
    shape = BackboneShape(
        hidden_size=backbone.hidden_size,
        parameters=sum(parameter.numel() for parameter in backbone.model.parameters()),
    )
    cache = FeatureCache(model_cfg, backbone.identity)  # a hub id just downloaded: its snapshot's
    cache.write(lambda: write_text_atomic(cache.shape_path, shape.model_dump_json()))
    return shape, FeatureExtractor(backbone, model_cfg)


def _read_shape(path: Path) -> BackboneShape | None:
    """The cached backbone shape; None when absent or damaged (then it is measured again)."""
    try:
        return BackboneShape.model_validate_json(path.read_bytes())
    except (OSError, ValidationError):
        return None


_UNWRITABLE_FOLDERS: set[Path] = set()  # feature cache folders a write failed in, said once
# feature cache folders of moved features that could not be set aside (read-only): never read
# again by this process, and said once
_IGNORED_FOLDERS: set[Path] = set()


class FeatureCache:
    """Features of a frozen backbone, one folder per settings key, appended as shards.

    A hub id not downloaded yet has no key naming its weights (see awaits_download): its
    cache reads and writes nothing; once loaded, a new FeatureCache is its snapshot's.
    `identity`: of a loaded backbone, whose features these are (see feature_cache_key)."""

    def __init__(self, model_cfg: ModelConfig, identity: str | None = None) -> None:
        root = Path(model_cfg.cache_dir) if model_cfg.cache_dir else cache_root()
        self.folder = root / "features" / feature_cache_key(model_cfg, identity)
        self.model_cfg = model_cfg
        self.pinned = identity is not None or not awaits_download(model_cfg.backbone)
        self._rows: dict[str, torch.Tensor] | None = None

    @property
    def shape_path(self) -> Path:
        return self.folder / "backbone.json"

    def _read_probe(self) -> tuple[torch.Tensor, dict[str, str]] | None:
        """The probe features and the versions they were computed under; None when absent
        (a cache of an earlier fugu-lite: recorded the next time its backbone runs) or
        damaged (recorded again)."""
        if not self.pinned:
            return None
        try:
            with safe_open(self.folder / PROBE_FILE, framework="pt") as probe:
                versions = json.loads((probe.metadata() or {})["versions"])
                return probe.get_tensor("features"), versions
        except (SafetensorError, OSError, KeyError, TypeError, ValueError):
            return None

    def computed_under_other_versions(self) -> bool:
        if self.folder in _IGNORED_FOLDERS:  # found so, and said, earlier in this process
            return False
        probe = self._read_probe()
        return probe is not None and probe[1] != computation_versions()

    def record_probe(self, extractor: FeatureExtractor) -> None:
        """Keep the probe features, once: the versions that computed this cache's features."""
        if self._read_probe() is None:
            self._write_probe(extractor.encode(PROBE_PROMPTS))

    def _write_probe(self, features: torch.Tensor) -> None:
        metadata = {"versions": json.dumps(computation_versions(), sort_keys=True)}
        tensors = {"features": features.contiguous()}
        self.write(lambda: write_tensors_atomic(self.folder / PROBE_FILE, tensors, metadata))

    def check_versions(self, extractor: FeatureExtractor) -> None:
        """After an upgrade (see computed_under_other_versions): the probe computed now equal
        to the kept one keeps the cache, under the new versions; else the folder is set aside
        (`fugu-lite cache clear` removes it) and its features are computed again."""
        probe = self._read_probe()
        if probe is None:
            return
        kept, versions = probe
        now = extractor.encode(PROBE_PROMPTS)
        scale = max(kept.abs().max().item(), 1e-6)
        difference = (now - kept).abs().max().item() / scale if now.shape == kept.shape else 1.0
        if difference <= PROBE_TOLERANCE:
            self._write_probe(kept)
            return
        moved = versions_moved(versions)
        aside = self.folder.with_name(f"{self.folder.name}.stale-{time.time_ns()}")
        try:
            self.folder.rename(aside)
            where = f"set aside as {escape(str(aside))}"
        except FileNotFoundError:  # a run that found it moved too, at the same time
            where = "set aside by another run"
        except OSError:  # read-only: never read again by this process
            _UNWRITABLE_FOLDERS.add(self.folder)
            _IGNORED_FOLDERS.add(self.folder)
            where = "ignored"
        self._rows = {}
        console.print(
            f"[yellow]Feature cache {escape(str(self.folder))}: its features were computed "
            f"under {escape(moved)} and differ from this installation's by {difference:.2g} "
            f"(relative): {where}, computed again. A router trained on the old features "
            "routes on other ones now: train it again.[/yellow]"
        )

    def rows(self) -> dict[str, torch.Tensor]:
        if self._rows is None:
            self._rows = {}
            readable = self.pinned and self.folder not in _IGNORED_FOLDERS
            shards = self.folder.glob("shard-*.safetensors") if readable else []
            width = self._feature_width()
            for shard in sorted(shards):
                self._rows.update(_read_shard(shard, width))
        return self._rows

    def _feature_width(self) -> int | None:
        """The features' width, from what the cache knows of it (the probe features, else the
        backbone's shape file); None when it knows neither (shards are then checked as
        matrices only)."""
        probe = self._read_probe()
        if probe is not None and probe[0].ndim == 2:
            return int(probe[0].shape[1])
        shape = _read_shape(self.shape_path) if self.pinned else None
        return shape.hidden_size if shape is not None else None

    def add(self, keys: list[str], features: torch.Tensor) -> None:
        self.write(lambda: self._write_shard(keys, features))
        self.rows().update(zip(keys, features, strict=True))

    def _write_shard(self, keys: list[str], features: torch.Tensor) -> None:
        name = f"shard-{time.time_ns()}"
        write_text_atomic(self.folder / f"{name}.json", json.dumps(keys))
        # The shard counts only once both files are complete: the tensors appear last.
        write_tensors_atomic(
            self.folder / f"{name}.safetensors", {"features": features.contiguous()}
        )

    def write(self, action: Callable[[], None]) -> None:
        """Run a write into the cache folder. A folder that cannot be written (read-only,
        another user's) is said once per process; the run goes on with its features uncached."""
        if self.folder in _UNWRITABLE_FOLDERS or not self.pinned:
            return
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            remove_dead_writers_files(self.folder, earlier_versions=True)
            # What the folder holds, for `fugu-lite cache list`: a local backbone folder by its
            # absolute path, which names it from any working directory.
            named = self.model_cfg.model_copy(
                update={"backbone": canonical_backbone(self.model_cfg.backbone)}
            )
            write_text_atomic(self.folder / "settings.json", named.model_dump_json(indent=2))
            action()
        except OSError as error:
            _UNWRITABLE_FOLDERS.add(self.folder)
            console.print(
                f"[yellow]Feature cache {escape(str(self.folder))} cannot be written "
                f"({escape(str(error))}); going on without caching these features. Set "
                "model.cache_dir (or FUGU_LITE_CACHE_DIR) to a writable folder.[/yellow]"
            )


def _read_shard(shard: Path, width: int | None) -> dict[str, torch.Tensor]:
    """One shard's rows by prompt key. A damaged shard (a torn or emptied file, keys that do
    not match the rows, rows that are not float vectors of the backbone's `width`) is set
    aside with a warning: its prompts are computed again."""
    keys_path = shard.with_suffix(".json")
    try:
        features = load_file(shard)["features"]
        _check_rows(features, width)
        keys = json.loads(keys_path.read_text(encoding="utf-8"))
        return dict(zip(keys, features, strict=True))
    except (SafetensorError, OSError, KeyError, TypeError, ValueError) as error:
        console.print(
            f"[yellow]Feature cache: {escape(str(shard))} is damaged ({escape(str(error))}); "
            "ignoring it (renamed *.damaged): its prompts' features are computed again."
            "[/yellow]"
        )
        for path in (shard, keys_path):
            with contextlib.suppress(OSError):  # a read-only cache: ignored every time
                path.rename(path.with_name(path.name + ".damaged"))
        return {}


def _check_rows(features: torch.Tensor, width: int | None) -> None:
    if features.ndim != 2 or not features.is_floating_point():
        raise ValueError(
            f"its features are a {features.dtype} tensor of shape {tuple(features.shape)}, "
            "not a matrix of floats (one row per prompt)"
        )
    if width is not None and features.shape[1] != width:
        raise ValueError(f"its rows have {features.shape[1]} values, the backbone's {width}")


def compute_features(
    prompts: Sequence[Prompt],
    model_cfg: ModelConfig,
    extractor: FeatureExtractor | None = None,
    use_cache: bool = True,
    description: str = "features",
) -> tuple[torch.Tensor, FeatureExtractor | None]:
    """Features of the frozen backbone for every prompt, from the cache where present,
    else from the backbone. (A router with SVF gets its features from `uncached_features`.)

    Returns the features and the extractor (loaded only when something was missing).
    New features are cached every few hundred prompts, so an interrupted extraction
    resumes where it stopped.
    """
    cache = _cache_of(model_cfg, extractor) if use_cache else None
    if cache is not None and cache.computed_under_other_versions():
        extractor = extractor or _loaded_extractor(model_cfg)
        cache.check_versions(extractor)
    keys = [prompt_key(prompt) for prompt in prompts]
    known = dict(cache.rows()) if cache else {}
    first_index = {key: index for index, key in reversed(list(enumerate(keys)))}
    missing = [key for key in first_index if key not in known]
    if missing:
        extractor = extractor or _loaded_extractor(model_cfg)
        if cache is not None:
            loaded_cache = _cache_of(model_cfg, extractor)
            if loaded_cache.folder != cache.folder:
                # a hub id downloaded now, or a backbone whose files changed while it loaded:
                # the features are the loaded weights', so are read from and written to theirs
                cache = loaded_cache
                known = dict(cache.rows())
                missing = [key for key in first_index if key not in known]
            cache.record_probe(extractor)
        missing_prompts = {key: prompts[first_index[key]] for key in missing}
        known.update(_extracted(missing_prompts, extractor, cache, model_cfg, description))
    return torch.stack([known[key] for key in keys]).float(), extractor


def _cache_of(model_cfg: ModelConfig, extractor: FeatureExtractor | None) -> FeatureCache:
    """The cache of the weights an extractor has loaded: a backbone changed on disk since it
    was loaded (a server's, a folder saved again in place) keyed its features by the new
    files, and a later run on those read the old weights' features as theirs."""
    return FeatureCache(model_cfg, extractor.backbone.identity if extractor else None)


def _loaded_extractor(model_cfg: ModelConfig) -> FeatureExtractor:
    return FeatureExtractor(load_backbone(model_cfg.backbone, model_cfg.device), model_cfg)


def _extracted(
    prompts: dict[str, Prompt],
    extractor: FeatureExtractor,
    cache: FeatureCache | None,
    model_cfg: ModelConfig,
    description: str,
) -> dict[str, torch.Tensor]:
    """The backbone's features of these prompts (by key), cached every CACHE_CHUNK prompts
    so that an interrupted extraction resumes where it stopped."""
    # Sorting by length keeps padding, and so wasted compute, small.
    missing = sorted(prompts, key=lambda key: len(prompt_text(prompts[key])))
    extracted: dict[str, torch.Tensor] = {}
    with feature_progress(shown=len(missing) > model_cfg.feature_batch_size) as progress:
        task = progress.add_task(f"Backbone {description}", total=len(missing))
        for start in range(0, len(missing), CACHE_CHUNK):
            chunk = missing[start : start + CACHE_CHUNK]
            rows = encode_in_batches(
                [prompts[key] for key in chunk],
                extractor,
                model_cfg.feature_batch_size,
                lambda done: progress.advance(task, done),
            )
            if cache:
                cache.add(chunk, rows)
            extracted.update(zip(chunk, rows, strict=True))
    return extracted


CACHE_CHUNK = 256
