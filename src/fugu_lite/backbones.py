"""Loading backbones: embedded (offline), a local folder, or a hub id. What names a backbone
and identifies its weights without loading it (canonical names, identities, fingerprints,
hub snapshots) is backbone_identity.py's."""

from __future__ import annotations

import copy
import difflib
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
from safetensors import SafetensorError
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
    move_folder_into_place,
    remove_dead_writers_files,
    writer_prefix,
)
from .backbone_identity import (
    EMBEDDED_BACKBONES,
    TINY_RANDOM,
    backbone_identity,
    embedded_path,
    folder_weight_files,
    hub_id_and_pin,
    hub_revision,
    hub_snapshot,
    is_decoder_type,
    local_backbone_path,
    names_a_path,
    safe_name,
)
from .file_digests import cache_root, is_lfs_pointer
from .text import notes_console
from .text_reading import broken_link, json_error_reason

console = notes_console()


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


def load_backbone(name: str, device: str = "cpu") -> LoadedBackbone:
    """Load a backbone by embedded name, local folder, or hub id (fp32, eval mode)."""
    if name == TINY_RANDOM:
        loaded = tiny_random_backbone()
    elif name in EMBEDDED_BACKBONES:
        loaded = _load_embedded(name)
    elif (local := local_backbone_path(name)) is not None:
        loaded = _load_local(local)
    elif (broken := broken_link(Path(name).expanduser())) or names_a_path(name):
        # the hub would only say it is no valid repo id, or offline that it is not cached
        looked = Path(name).expanduser().absolute()
        what = (
            f"({looked}) is {broken}: fix the link, or"
            if broken
            else f"does not exist (looked for {looked}):"
        )
        raise RuntimeError(
            f"the backbone folder {name} {what} give the folder the backbone was saved to "
            f"with save_pretrained, an embedded name ({', '.join(EMBEDDED_BACKBONES)}) or a hub id"
        )
    else:
        loaded = _load_hub(name)
    # transformers wraps `to` with functools.wraps(nn.Module.to), which types it unbound.
    loaded.model.to(device).eval()  # type: ignore[arg-type]
    for parameter in loaded.model.parameters():
        parameter.requires_grad_(False)
    return loaded


def _load_embedded(name: str) -> LoadedBackbone:
    """An embedded backbone; a package folder whose files are damaged (a disk error, a file
    edited or cut short) is a RuntimeError saying what is wrong and to reinstall it, not
    transformers' or safetensors' traceback."""
    spec_info = EMBEDDED_BACKBONES[name]
    folder = embedded_path(name)
    identity = backbone_identity(name)
    if spec_info.gguf_file is not None:
        return _load_gguf_cached(name, folder, spec_info.gguf_file, identity)
    try:
        return _load_pretrained(name, str(folder), {}, identity)
    except (OSError, ValueError, SafetensorError) as error:
        reason = _failure_reason(folder, error)
        raise RuntimeError(
            f"could not load the embedded backbone {name} from its package "
            f"{spec_info.package} ({folder}): {reason}. Its files are damaged: reinstall it "
            f"(`{spec_info.install_hint} --force-reinstall`)"
        ) from error


def _load_gguf_cached(name: str, folder: Path, gguf_file: str, identity: str) -> LoadedBackbone:
    """Dequantizing a GGUF takes ~40 s; the fp32 result is cached as safetensors once."""
    cached = cache_root() / "backbones" / safe_name(identity)
    if (cached / "model.safetensors").exists():
        loaded = _cached_copy(name, cached, identity)
        if loaded is not None:
            return loaded
    console.print(f"[dim]Dequantizing {gguf_file} once (about 40 s); cached in {cached}[/dim]")
    loaded = _load_pretrained(name, str(folder), {"gguf_file": gguf_file}, identity)
    _keep_plain_copy(loaded, cached)
    return loaded


def _cached_copy(name: str, cached: Path, identity: str) -> LoadedBackbone | None:
    """The cached dequantized copy; None for a damaged one (torn by a disk error, a file
    deleted from it), which is removed, with a warning, to be made again."""
    try:
        return _load_pretrained(name, str(cached), {}, identity)
    except (OSError, ValueError, SafetensorError) as error:
        console.print(
            f"[yellow]The cached dequantized backbone {escape(str(cached))} is damaged "
            f"({type(error).__name__}: {escape(str(error))}); removing it and dequantizing it "
            "again.[/yellow]"
        )
        shutil.rmtree(cached, ignore_errors=True)
        return None


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
    concurrent run's finished copy wins, one without its weights is replaced."""
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
        move_folder_into_place(staging, target, "model.safetensors")
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
    except (OSError, ValueError, SafetensorError) as error:
        reason = _failure_reason(path, error)
        raise RuntimeError(
            f"could not load the backbone folder {path}: {reason}. A backbone folder holds what "
            "save_pretrained writes there: model.save_pretrained(FOLDER) and "
            "tokenizer.save_pretrained(FOLDER) (config.json, the weights and the tokenizer's "
            "files); or use an embedded backbone "
            f"({', '.join(EMBEDDED_BACKBONES)}) or a hub id"
        ) from error


def folder_lacks(path: Path) -> str:
    """What a backbone folder lacks that transformers needs ('' when nothing is missing)."""
    gguf = gguf_instead(path)
    if gguf:
        return gguf
    if not path.is_dir():
        return "it is a file, not a folder"
    pointers = [file.name for file in folder_weight_files(path) or [] if is_lfs_pointer(file)]
    if pointers:
        what = "is a Git LFS pointer" if len(pointers) == 1 else "are Git LFS pointers"
        return (
            f"its {', '.join(pointers)} {what}, not the weights (it was cloned without "
            "git-lfs): run `git lfs pull` in it, or download the model with `hf download`"
        )
    lacks = []
    if not (path / "config.json").is_file():
        lacks.append("config.json")
    if folder_weight_files(path) is None:
        lacks.append("its weights (model.safetensors or pytorch_model.bin)")
    if not any((path / name).is_file() for name in TOKENIZER_FILES):
        lacks.append(f"its tokenizer ({', '.join(TOKENIZER_FILES[:-1])} or {TOKENIZER_FILES[-1]})")
    return f"it lacks {' and '.join(lacks)}" if lacks else _broken_json(path)


def _broken_json(folder: Path) -> str:
    """What is wrong with the first JSON file of a folder that does not read as JSON (a hand
    edit, a torn copy); '' when none. transformers' JSONDecodeError named no file."""
    for file in sorted(folder.glob("*.json")):
        try:
            json.loads(file.read_text(encoding="utf-8"))
        except json.JSONDecodeError as error:
            reason = f"{json_error_reason(error)} at line {error.lineno}"
        except (OSError, ValueError) as error:  # unreadable, not UTF-8
            reason = str(error)
        else:
            continue
        return (
            f"its {file.name} is not valid JSON ({reason}): restore it from where the backbone "
            "came from, or save the backbone again"
        )
    return ""


def gguf_instead(path: Path) -> str:
    """What to do with a GGUF given as a backbone (a .gguf file, or a folder holding one and
    no config.json): only the embedded smollm2's is read as one; '' for anything else."""
    if path.is_dir() and not (path / "config.json").is_file():
        found = sorted(path.glob("*.gguf"))
        path = found[0] if found else path
    if path.suffix.lower() != ".gguf" or not path.is_file():
        return ""
    embedded = [name for name, spec in EMBEDDED_BACKBONES.items() if spec.gguf_file is not None]
    load = f"{str(path.parent)!r}, gguf_file={path.name!r}"
    return (
        f"it holds the GGUF file {path.name}, which fugu-lite reads as a backbone only embedded "
        f"({', '.join(embedded)}): make a backbone folder of it once with transformers "
        f"(AutoModel.from_pretrained({load}) and AutoTokenizer.from_pretrained({load}), then "
        "save_pretrained(OUT) of both; transformers says which GGUF architectures it reads) and "
        "set model.backbone to OUT"
    )


def _load_hub(name: str) -> LoadedBackbone:
    """A hub id at its cached `refs/main` snapshot (else the newest `main`, downloaded), or,
    pinned to a commit (a checkpoint's, see backbone_identity.pinned_hub_id), at that one."""
    repo, pin = hub_id_and_pin(name)
    if pin is None and "@" in repo:
        raise RuntimeError(_revision_suffix_refused(repo))
    revision = pin or hub_revision(name)
    try:
        loaded = _load_pretrained(name, repo, {"revision": revision} if revision else {})
    except OSError as error:
        raise RuntimeError(
            f"could not load backbone {name!r}{_meant_embedded(name)}: it is not an embedded "
            f"name ({', '.join(EMBEDDED_BACKBONES)}), not a local folder, and the hub could not "
            f"serve it ({_one_line(error)}). {_offline_advice(repo, pin)}; for a checkpoint "
            "whose backbone folder moved, pass the folder with --backbone PATH."
        ) from error
    except (ValueError, SafetensorError) as error:  # a damaged file of the cached snapshot
        snapshot = hub_snapshot(name)
        if snapshot is None:
            raise
        reason = _failure_reason(snapshot, error)
        raise RuntimeError(
            f"could not load backbone {repo} from its snapshot in the local Hugging Face cache, "
            f"{snapshot}: {reason}. Download it again: `hf download {repo} --revision "
            f"{snapshot.name} --force-download`"
        ) from error
    if pin is not None and hub_snapshot(name) is None:
        raise RuntimeError(
            f"backbone {repo} was loaded at snapshot commit {pin}, the one the checkpoint was "
            "trained on, but the hub served other files (the local Hugging Face cache holds no "
            "snapshot of that commit). Its head routes well only on the weights it was trained "
            f"on: download that snapshot (`hf download {repo} --revision {pin}`) and pass its "
            "folder with --backbone PATH (backbone= in Python), or retrain the checkpoint"
        )
    return loaded


def _one_line(error: Exception) -> str:
    """transformers' text of a failed download or load, on one line (it breaks its own in two)
    and without its closing full stop, to be quoted inside a sentence."""
    return " ".join(str(error).split()).rstrip(".")


def _failure_reason(folder: Path, error: Exception) -> str:
    """Why a backbone folder did not load: what it lacks, else the error, said in a sentence
    (a config.json without model_type read "... in its config.json.. A backbone folder ...")."""
    return folder_lacks(folder) or f"{type(error).__name__}: {_one_line(error)}"


def _revision_suffix_refused(name: str) -> str:
    """What to do with `org/name@rev` (`@main`, `@v1.0`): the hub refused it as an invalid
    repo id, and the advice was to `hf download org/name@rev`, which fails the same way."""
    repo, _, revision = name.rpartition("@")
    return (
        f"backbone {name!r} names the revision {revision!r} after the hub id, which fugu-lite "
        f"reads only as a full 40-character commit hash ({repo}@<commit>): give the hub id "
        f"alone ({repo}: the snapshot its refs/main names in the local Hugging Face cache, else "
        f"the newest main), or download that revision (`hf download {repo} --revision "
        f"{revision}`) and give the snapshot folder it prints"
    )


def _offline_advice(repo: str, pin: str | None) -> str:
    from huggingface_hub import is_offline_mode

    if not is_offline_mode():
        return "Offline, use an embedded backbone or a local folder"
    revision = f" --revision {pin}" if pin else ""
    # transformers' own text only says to check the internet connection
    return (
        f"HF_HUB_OFFLINE is set, so {repo} is not downloaded: download it once with "
        f"`HF_HUB_OFFLINE=0 hf download {repo}{revision}` (it then loads offline, from the local "
        "Hugging Face cache), or use an embedded backbone or a local folder"
    )


def _meant_embedded(name: str) -> str:
    """' (did you mean 'minilm'? ...)' for a name spelt like an embedded one (`MiniLM`)."""
    close = difflib.get_close_matches(name.lower(), [*EMBEDDED_BACKBONES, TINY_RANDOM], 1, 0.8)
    return f" (did you mean {close[0]!r}? embedded names are lower case)" if close else ""


# Where the architectures fugu-lite reads keep their transformer blocks.
BLOCK_PATHS = ("layers", "encoder.layer", "transformer.layer", "h", "transformer.h", "model.layers")


def layer_list(model: nn.Module) -> nn.ModuleList:
    """The transformer blocks of a backbone, whatever the architecture calls them."""
    for path in BLOCK_PATHS:
        module: nn.Module | None = model
        for part in path.split("."):
            module = getattr(module, part, None)
        if isinstance(module, nn.ModuleList):
            return module
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    of_type = f" (model type {model_type})" if model_type else ""
    raise ValueError(
        f"cannot find the transformer blocks of {type(model).__name__}{of_type}: fugu-lite "
        f"reads backbones that keep them as {', '.join(BLOCK_PATHS[:-1])} or {BLOCK_PATHS[-1]} "
        "(Llama-, Qwen-, Mistral-, GPT-2-, BERT- and DistilBERT-like ones, among others); use "
        f"such a backbone, e.g. an embedded one ({', '.join(EMBEDDED_BACKBONES)})"
    )


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
