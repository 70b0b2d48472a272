"""Backbone features: the hidden state of one token (or the mean) at one layer (the extractor,
its pooling, and features computed without the cache). The on-disk cache, and
`compute_features` that reads through it, are in feature_cache.py."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import cast

import torch
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from torch import nn
from torch.func import functional_call
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from .backbone_identity import ENCODER_TYPES, backbone_is_decoder, maybe_encoder
from .backbones import LoadedBackbone, layer_list
from .config import ModelConfig
from .onnx_runtime import LoadedRuntime, load_runtime
from .progress import LineProgress
from .schemas import ChatMessage, message_text
from .text import notes_console

Prompt = str | list[ChatMessage]
console = notes_console()


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
        self.layer = normalized_layer(model_cfg.layer, backbone.n_layers, backbone.name)
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
    if not isinstance(positions, int):
        return
    # RoBERTa-like embeddings number positions from their padding id + 1 (514 = 512 tokens)
    embedding = getattr(getattr(backbone.model, "embeddings", None), "position_embeddings", None)
    padding = getattr(embedding, "padding_idx", None)
    skipped = padding + 1 if isinstance(padding, int) else 0
    usable = positions - skipped
    if max_tokens > usable:
        start = f", less the {skipped} before its first position" if skipped else ""
        raise ValueError(
            f"model.max_tokens {max_tokens} is more than backbone {backbone.name} takes: it has "
            f"positions for {usable} tokens (max_position_embeddings {positions} in its "
            f"config.json{start}); set model.max_tokens to at most {usable}"
        )


def normalized_layer(layer: int, n_layers: int, backbone: str) -> int:
    """Index into hidden_states: 0 = embeddings, n_layers = last block; negatives count back."""
    index = layer if layer >= 0 else n_layers + 1 + layer
    if not 0 <= index <= n_layers:
        raise ValueError(
            f"model.layer {layer} does not exist on backbone {backbone}: it has {n_layers} "
            f"blocks; use 0..{n_layers} (0: its embeddings) or -1..-{n_layers + 1}"
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
    for name in ("encoder", "transformer"):  # BERT-like; DistilBERT
        if name in model._modules and "layer" in model.get_submodule(name)._modules:
            import copy

            container = copy.copy(model.get_submodule(name))
            container._modules = dict(container._modules)
            container._modules["layer"] = blocks
            model._modules[name] = container
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
    if model_cfg.chat_template and getattr(backbone.tokenizer, "chat_template", None):
        return templated_text(messages, backbone)
    return "\n".join(m["content"] for m in messages)


class ChatTemplateRefusal(ValueError):
    """The backbone's chat template refuses a conversation: the caller's input, not a fault
    (serve answers it with a 400)."""


def templated_text(messages: list[dict[str, str]], backbone: LoadedBackbone) -> str:
    """The messages through the backbone's chat template; a template that refuses them
    (Gemma's takes no system message, Mistral's wants user and assistant to alternate) is a
    ChatTemplateRefusal saying so, where jinja's TemplateError was a traceback."""
    from jinja2 import TemplateError

    try:
        # tokenize=False returns the text; the stubs give the union of every return type.
        return cast(str, backbone.tokenizer.apply_chat_template(messages, tokenize=False))
    except TemplateError as error:
        roles = ", ".join(m["role"] for m in messages)
        raise ChatTemplateRefusal(
            f"the chat template of backbone {backbone.name} refuses this conversation (roles "
            f"{roles}): {error}. Give it a conversation its template takes, or set "
            "model.chat_template: false to read the messages as plain text (and train the "
            "router again)"
        ) from error


def uncached_features(
    prompts: Sequence[Prompt],
    extractor: FeatureExtractor,
    weights: dict[str, torch.Tensor] | None,
    batch_size: int,
    description: str = "features",
) -> torch.Tensor:
    """Features computed now, without gradients, with `weights` substituted (SVF): nothing
    is read from or written to the feature cache, since the weights change as they train."""
    order = sorted(range(len(prompts)), key=lambda index: len(prompt_text(prompts[index])))
    if not order:
        return torch.zeros(0, extractor.dim)
    with torch.no_grad(), feature_progress(shown=len(order) > batch_size) as progress:
        task = progress.add_task(f"Backbone {description} (uncached)", total=len(order))
        rows = encode_in_batches(
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


def encode_in_batches(
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


def prompt_text(prompt: Prompt) -> str:
    return prompt if isinstance(prompt, str) else " ".join(message_text(m) for m in prompt)


def feature_progress(shown: bool) -> Progress | LineProgress:
    """A bar only for more than one batch: a single prompt (`route`, a served request)
    would otherwise print a bar for every decision. Lines where bars are not redrawn."""
    if shown and not console.is_interactive:
        return LineProgress(console)
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=console,
        disable=not shown,
    )
