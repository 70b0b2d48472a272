"""Backbone features: the hidden state of one token (or the mean) at one layer, cached on disk."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import cast

import torch
from pydantic import BaseModel, ValidationError
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file
from torch import nn
from torch.func import functional_call
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from .atomic_files import remove_dead_writers_files, write_tensors_atomic, write_text_atomic
from .backbones import (
    ENCODER_TYPES,
    LoadedBackbone,
    awaits_download,
    backbone_identity,
    backbone_is_decoder,
    cache_root,
    canonical_backbone,
    layer_list,
    load_backbone,
    maybe_encoder,
)
from .config import ModelConfig
from .onnx_runtime import LoadedRuntime, load_runtime
from .progress import LineProgress
from .schemas import ChatMessage, message_text, prompt_hash
from .text import notes_console

# In every feature cache key: bump it when the features change (a test of their values,
# GOLDEN_FEATURE_SUMS in tests/test_model_features.py, fails until it is).
FEATURE_FORMAT_VERSION = 1
Prompt = str | list[ChatMessage]
console = notes_console()
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


def resolved_pooling(model_cfg: ModelConfig, is_decoder: bool) -> str:
    if model_cfg.pooling != "auto":
        return model_cfg.pooling
    return "penultimate" if is_decoder else "mean"


def configured_pooling(model_cfg: ModelConfig) -> str:
    """The pooling a config means on its backbone, found without loading it: `auto` resolved
    (mean on MiniLM), so `auto` and what it means compare equal; `auto` when the backbone's
    config.json cannot be read."""
    is_decoder = backbone_is_decoder(model_cfg.backbone) if model_cfg.pooling == "auto" else None
    return model_cfg.pooling if is_decoder is None else resolved_pooling(model_cfg, is_decoder)


def pooling_meant(model: dict) -> str:
    """configured_pooling of a dumped model config (a saved run's or checkpoint's), so a
    saved `auto` and what it means on the backbone (mean on MiniLM) compare equal."""
    return configured_pooling(
        ModelConfig(backbone=model["backbone"], pooling=model.get("pooling", "auto"))
    )


class FeatureExtractor:
    """Runs only the blocks up to the chosen layer and pools one vector per prompt.

    Cutting the backbone after the chosen layer (and never computing LM logits) is what
    makes routing cheaper than a plain forward; `plain_features` is the reference path.
    `encode` runs the cut backbone in ONNX Runtime when `model_cfg.runtime` resolves to onnx
    (see onnx_runtime.py; resolved, and exported if needed, on first use); with SVF weights,
    and for gradients (`__call__`), it always runs torch.
    """

    def __init__(self, backbone: LoadedBackbone, model_cfg: ModelConfig) -> None:
        self.backbone = backbone
        self.model_cfg = model_cfg
        self.layer = normalized_layer(model_cfg.layer, backbone.n_layers)
        check_max_tokens(model_cfg.max_tokens, backbone)
        self.pooling = resolved_pooling(model_cfg, backbone.is_decoder)
        if model_cfg.pooling == "auto" and backbone.is_decoder:
            warn_auto_pooling_on_an_encoder(backbone)
        self.truncated = truncated_backbone(backbone.model, self.layer)
        backbone.tokenizer.truncation_side = "left"
        backbone.tokenizer.padding_side = "right"
        if backbone.tokenizer.pad_token is None:
            backbone.tokenizer.pad_token = pad_stand_in(backbone.tokenizer)
        self._runtime: LoadedRuntime | None = None
        self._runtime_lock = threading.Lock()

    @property
    def dim(self) -> int:
        return self.backbone.hidden_size

    @property
    def runtime(self) -> LoadedRuntime:
        """What runs `encode` without SVF weights (torch or ONNX Runtime), resolved once."""
        if self._runtime is None:
            with self._runtime_lock:
                if self._runtime is None:
                    self._runtime = load_runtime(
                        self.model_cfg,
                        self.backbone.name,
                        self.backbone.identity,
                        self.layer,
                        self.truncated,
                        self.tokenize,
                    )
        return self._runtime

    def tokenize(self, prompts: Sequence[Prompt]) -> dict[str, torch.Tensor]:
        # An empty conversation (`"content": ""`) would be no tokens at all on a backbone
        # that adds none of its own (a decoder without its chat template): the forward pass
        # fails on that alone, and pools padding beside other prompts. A space is one token.
        texts = [render_prompt(prompt, self.backbone, self.model_cfg) or " " for prompt in prompts]
        return self.backbone.tokenizer(
            texts,
            padding=True,
            truncation=True,
            max_length=self.model_cfg.max_tokens,
            return_tensors="pt",
            add_special_tokens=not self._uses_chat_template(),
        )

    def _uses_chat_template(self) -> bool:
        return self.model_cfg.chat_template and bool(
            getattr(self.backbone.tokenizer, "chat_template", None)
        )

    def __call__(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        weights: dict[str, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """Pooled features; `weights` ({"<module>.weight": tensor}, e.g. SVF's) stand in for
        those backbone weights during this call only (gradients flow into them)."""
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
        if weights:
            output = functional_call(self.truncated, weights, (), inputs, strict=False)
        else:
            output = self.truncated(**inputs)
        return pool(output.last_hidden_state, attention_mask, self.pooling)

    @torch.inference_mode()
    def encode(
        self, prompts: Sequence[Prompt], weights: dict[str, torch.Tensor] | None = None
    ) -> torch.Tensor:
        tokens = self.tokenize(prompts)
        onnx = None if weights else self.runtime.onnx
        if onnx is not None:
            hidden = onnx.hidden_states(tokens["input_ids"], tokens["attention_mask"])
            return pool(hidden, tokens["attention_mask"], self.pooling).float()
        device = next(self.truncated.parameters()).device
        inputs = {key: value.to(device) for key, value in tokens.items()}
        return self(inputs["input_ids"], inputs["attention_mask"], weights).float().cpu()

    @torch.inference_mode()
    def plain_features(self, prompts: Sequence[Prompt]) -> torch.Tensor:
        """The same features from an ordinary full forward with all hidden states."""
        inputs = self.tokenize(prompts)
        output = self.backbone.model(**inputs, output_hidden_states=True)
        return pool(output.hidden_states[self.layer], inputs["attention_mask"], self.pooling)


_WARNED_AUTO_POOLING: set[str] = set()  # backbones said once per process


def warn_auto_pooling_on_an_encoder(backbone: LoadedBackbone) -> None:
    """pooling `auto` is mean on the encoder types fugu-lite knows and penultimate on every
    other backbone; say so (once) for a model type that is likely an encoder, since which one
    `auto` means there is kept (routers trained with it route on those features)."""
    if not maybe_encoder(backbone.model_type) or backbone.name in _WARNED_AUTO_POOLING:
        return
    _WARNED_AUTO_POOLING.add(backbone.name)
    console.print(
        f"[yellow]model.pooling 'auto' means penultimate (as on a decoder) on backbone "
        f"{escape(backbone.name)}, of model type {escape(backbone.model_type)}: only "
        f"{', '.join(sorted(ENCODER_TYPES))} count as encoders, where it means mean. If it is "
        "an encoder, set model.pooling: mean (and train the router again).[/yellow]"
    )


def pad_stand_in(tokenizer: PreTrainedTokenizerBase) -> str:
    """A token to pad with for a tokenizer without a pad token: its end-of-sequence token, else
    another special one, else its first token. Padding is masked out of the features (and
    right of every real token), so which token pads changes nothing."""
    for token in (tokenizer.eos_token, tokenizer.unk_token, tokenizer.bos_token):
        if token is not None:
            return str(token)
    return str(tokenizer.convert_ids_to_tokens(0))


def check_max_tokens(max_tokens: int, backbone: LoadedBackbone) -> None:
    """Refuse more tokens than the backbone has positions for: a BERT-like one failed only on
    the first prompt that long (maybe hours into its features) with an error about tensor
    sizes ('The expanded size of the tensor (1024) must match the existing size (512)')."""
    positions = getattr(backbone.model.config, "max_position_embeddings", None)
    if isinstance(positions, int) and max_tokens > positions:
        raise ValueError(
            f"model.max_tokens {max_tokens} is more than backbone {backbone.name} takes: it has "
            f"positions for {positions} tokens (max_position_embeddings in its config.json); "
            f"set model.max_tokens to at most {positions}"
        )


def normalized_layer(layer: int, n_layers: int) -> int:
    """Index into hidden_states: 0 = embeddings, n_layers = last block; negatives count back."""
    index = layer if layer >= 0 else n_layers + 1 + layer
    if not 0 <= index <= n_layers:
        raise ValueError(
            f"layer {layer} does not exist: this backbone has {n_layers} blocks; use 0..{n_layers} "
            f"or -1..-{n_layers + 1}"
        )
    return index


def truncated_backbone(model: nn.Module, layer: int) -> nn.Module:
    """A shallow copy of the backbone that stops after `layer` blocks (weights are shared)."""
    blocks = layer_list(model)
    if layer == len(blocks):
        return model
    import copy

    truncated = cast(PreTrainedModel, copy.copy(model))  # a transformers backbone
    truncated._modules = dict(model._modules)
    truncated.config = copy.copy(truncated.config)
    truncated.config.num_hidden_layers = layer
    _replace_blocks(truncated, nn.ModuleList(list(blocks)[:layer]))
    # hidden_states[layer] for an inner layer is taken before the final norm.
    for norm_name in ("norm", "ln_f", "final_layernorm"):
        if norm_name in truncated._modules:
            truncated._modules[norm_name] = nn.Identity()
    return truncated


def _replace_blocks(model: nn.Module, blocks: nn.ModuleList) -> None:
    if "layers" in model._modules:
        model._modules["layers"] = blocks
        return
    if "encoder" in model._modules:
        import copy

        encoder = copy.copy(model.get_submodule("encoder"))
        encoder._modules = dict(encoder._modules)
        encoder._modules["layer"] = blocks
        model._modules["encoder"] = encoder
        return
    if "h" in model._modules:
        model._modules["h"] = blocks
        return
    raise ValueError(f"cannot truncate the blocks of {type(model).__name__}")


def pool(hidden: torch.Tensor, attention_mask: torch.Tensor, pooling: str) -> torch.Tensor:
    lengths = attention_mask.sum(dim=1).long()
    rows = torch.arange(hidden.shape[0], device=hidden.device)
    if pooling == "mean":
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)
    if pooling == "last":
        return hidden[rows, lengths - 1]
    if pooling == "penultimate":
        return hidden[rows, (lengths - 2).clamp(min=0)]
    raise ValueError(f"unknown pooling {pooling!r}; use penultimate, last, mean or auto")


def render_prompt(prompt: Prompt, backbone: LoadedBackbone, model_cfg: ModelConfig) -> str:
    """The conversation as the backbone sees it (its chat template when it has one)."""
    messages = (
        [{"role": "user", "content": prompt}]
        if isinstance(prompt, str)
        else [{"role": m.role, "content": message_text(m)} for m in prompt]
    )
    tokenizer = backbone.tokenizer
    if model_cfg.chat_template and getattr(tokenizer, "chat_template", None):
        # tokenize=False returns the text; the stubs give the union of every return type.
        return cast(str, tokenizer.apply_chat_template(messages, tokenize=False))
    return "\n".join(m["content"] for m in messages)


def prompt_key(prompt: Prompt) -> str:
    if isinstance(prompt, str):
        return prompt_hash(prompt)
    return prompt_hash(
        json.dumps([m.model_dump(exclude_none=True) for m in prompt], sort_keys=True)
    )


def feature_cache_key(model_cfg: ModelConfig) -> str:
    settings = {
        "backbone": backbone_identity(model_cfg.backbone),
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
    cache = FeatureCache(model_cfg)  # a hub id just downloaded: the cache of its snapshot
    cache.write(lambda: write_text_atomic(cache.shape_path, shape.model_dump_json()))
    return shape, FeatureExtractor(backbone, model_cfg)


def _read_shape(path: Path) -> BackboneShape | None:
    """The cached backbone shape; None when absent or damaged (then it is measured again)."""
    try:
        return BackboneShape.model_validate_json(path.read_bytes())
    except (OSError, ValidationError):
        return None


_UNWRITABLE_FOLDERS: set[Path] = set()  # feature cache folders a write failed in, said once


class FeatureCache:
    """Features of a frozen backbone, one folder per settings key, appended as shards.

    A hub id not downloaded yet has no key naming its weights (see awaits_download): its
    cache reads and writes nothing; once loaded, a new FeatureCache is its snapshot's."""

    def __init__(self, model_cfg: ModelConfig) -> None:
        root = Path(model_cfg.cache_dir) if model_cfg.cache_dir else cache_root()
        self.folder = root / "features" / feature_cache_key(model_cfg)
        self.model_cfg = model_cfg
        self.pinned = not awaits_download(model_cfg.backbone)
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
        except OSError:  # read-only: never read again by this process
            _UNWRITABLE_FOLDERS.add(self.folder)
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
            shards = self.folder.glob("shard-*.safetensors") if self.pinned else []
            for shard in sorted(shards):
                self._rows.update(_read_shard(shard))
        return self._rows

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


def _read_shard(shard: Path) -> dict[str, torch.Tensor]:
    """One shard's rows by prompt key. A damaged shard (a torn or emptied file, keys that do
    not match the rows) is set aside with a warning: its prompts are computed again."""
    keys_path = shard.with_suffix(".json")
    try:
        features = load_file(shard)["features"]
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
    cache = FeatureCache(model_cfg) if use_cache else None
    if cache is not None and cache.computed_under_other_versions():
        extractor = extractor or FeatureExtractor(
            load_backbone(model_cfg.backbone, model_cfg.device), model_cfg
        )
        cache.check_versions(extractor)
    keys = [prompt_key(prompt) for prompt in prompts]
    known = dict(cache.rows()) if cache else {}
    first_index = {key: index for index, key in reversed(list(enumerate(keys)))}
    missing = [key for key in first_index if key not in known]
    if missing:
        extractor = extractor or FeatureExtractor(
            load_backbone(model_cfg.backbone, model_cfg.device), model_cfg
        )
        if cache is not None and not cache.pinned:
            cache = FeatureCache(model_cfg)  # the hub id downloaded: its snapshot's cache
            known.update(cache.rows())
            missing = [key for key in missing if key not in known]
        if cache is not None:
            cache.record_probe(extractor)
        # Sorting by length keeps padding, and so wasted compute, small.
        missing.sort(key=lambda key: len(_text_of(prompts[first_index[key]])))
        with _progress(shown=len(missing) > model_cfg.feature_batch_size) as progress:
            task = progress.add_task(f"Backbone {description}", total=len(missing))
            for start in range(0, len(missing), CACHE_CHUNK):
                chunk = missing[start : start + CACHE_CHUNK]
                rows = _encode_in_batches(
                    [prompts[first_index[key]] for key in chunk],
                    extractor,
                    model_cfg.feature_batch_size,
                    lambda done: progress.advance(task, done),
                )
                if cache:
                    cache.add(chunk, rows)
                known.update(zip(chunk, rows, strict=True))
    return torch.stack([known[key] for key in keys]).float(), extractor


CACHE_CHUNK = 256


def uncached_features(
    prompts: Sequence[Prompt],
    extractor: FeatureExtractor,
    weights: dict[str, torch.Tensor] | None,
    batch_size: int,
    description: str = "features",
) -> torch.Tensor:
    """Features computed now, without gradients, with `weights` substituted (SVF): nothing
    is read from or written to the feature cache, since the weights change as they train."""
    order = sorted(range(len(prompts)), key=lambda index: len(_text_of(prompts[index])))
    if not order:
        return torch.zeros(0, extractor.dim)
    with torch.no_grad(), _progress(shown=len(order) > batch_size) as progress:
        task = progress.add_task(f"Backbone {description} (uncached)", total=len(order))
        rows = _encode_in_batches(
            [prompts[index] for index in order],
            extractor,
            batch_size,
            lambda done: progress.advance(task, done),
            weights,
        )
    features = torch.empty_like(rows)
    features[torch.tensor(order)] = rows
    return features


def announce_uncached_features(matrices: int, offsets: int) -> None:
    console.print(
        f"[yellow]SVF on ({matrices} backbone matrices, {offsets:,} singular-value offsets): "
        "features depend on the offsets, so they are not cached; every training step and "
        "every routing call runs the backbone.[/yellow]"
    )


def _encode_in_batches(
    prompts: list[Prompt],
    extractor: FeatureExtractor,
    batch_size: int,
    on_batch: Callable[[int], None],
    weights: dict[str, torch.Tensor] | None = None,
) -> torch.Tensor:
    outputs = []
    for start in range(0, len(prompts), batch_size):
        batch = prompts[start : start + batch_size]
        outputs.append(extractor.encode(batch, weights) if weights else extractor.encode(batch))
        on_batch(len(batch))
    return torch.cat(outputs)


def _text_of(prompt: Prompt) -> str:
    return prompt if isinstance(prompt, str) else " ".join(message_text(m) for m in prompt)


def _progress(shown: bool) -> Progress | LineProgress:
    """A bar only for more than one batch: a single prompt (`route`, a served request)
    would otherwise print a bar for every decision. Lines where bars are not redrawn."""
    if shown and not console.is_terminal:
        return LineProgress(console)
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=console,
        disable=not shown,
    )
