"""The standard split, import_dataset's options and what every importer shares (encodings,
line ends, spreadsheets' empty rows, capital suffixes): small generated files."""

from __future__ import annotations

import bz2
import gc
import gzip
import hashlib
import json
import logging
import lzma
import tracemalloc
import warnings
import zipfile
from decimal import Decimal
from pathlib import Path

import pandas as pd
import pytest
from datasets_support import (
    ROUTERBENCH_MODELS,
    long_rows,
    record,
    routerbench_table,
    write_jsonl,
    write_long_csv,
    zeroeval_row,
)

from fugu_lite.datasets import (
    IMPORTERS,
    SplitError,
    apply_given_split,
    apply_standard_split,
    import_dataset,
    import_long,
    import_routerbench,
    import_zeroeval,
    standard_split,
)
from fugu_lite.number_text import to_float
from fugu_lite.schemas import read_records, write_records
from fugu_lite.text_reading import UTF16_HINT, RecordFileError, open_for_reading, utf16_hint

# --- the standard split --------------------------------------------------------------------


def test_standard_split_follows_the_documented_hashes() -> None:
    # beyond ASCII too: the prompt's UTF-8 bytes are hashed (DESIGN.md), which only the real
    # data's reference numbers checked (a prompt encoded as Latin-1 passed every unit test)
    texts = [f"prompt number {index}" for index in range(300)]
    texts += [f"¿Cuánto es {index} × 2? 🙂 数学" for index in range(100)]
    for text in texts:
        test_bucket = int(hashlib.sha1(text.encode("utf-8")).hexdigest(), 16) % 10
        salted = ("validation:" + text).encode("utf-8")
        validation_bucket = int(hashlib.sha1(salted).hexdigest(), 16) % 10
        expected = "test" if test_bucket < 2 else "validation" if validation_bucket < 2 else "train"
        assert standard_split(text) == expected
    counts = {s: 0 for s in ("train", "validation", "test")}
    for index in range(2000):
        counts[standard_split(f"p{index}")] += 1
    assert 300 < counts["test"] < 500
    assert 200 < counts["validation"] < 450


def test_apply_standard_split_drops_duplicates_keeping_the_first() -> None:
    records = [record("x", [1, 0]), record("y", [0, 1]), record("x", [0, 0])]
    result = apply_standard_split(records)
    assert [r.prompt for r in result] == ["x", "y"]
    assert result[0].rewards == [1, 0]
    assert [r.split for r in result] == [standard_split("x"), standard_split("y")]


def test_dropped_duplicates_are_a_visible_warning(caplog) -> None:
    """The warning said neither which record of a prompt is kept nor that the dropped ones
    held other rewards (conflicting data a user would want to look at)."""
    repeated = [record("same", [1, 0]), record("same", [0, 1]), record("same", [1, 0])]
    repeated.append(record("same", [0, 0]))
    with caplog.at_level(logging.WARNING):
        assert apply_standard_split(repeated)[0].rewards == [1, 0]
    assert "dropped 3 records whose prompt already appeared" in caplog.text
    assert "the first record of a prompt is kept (2 of the dropped had other rewards" in (
        caplog.text
    )
    assert "prompt 'same'" in caplog.text


def test_repeated_ids_are_named_with_the_prompts_of_the_first(caplog) -> None:
    """The warning names the first repeated id and two of its own prompts, not another's."""
    ids = ["i1", "i1", "i2", "i2", "i2"]
    records = [
        record(prompt, [1, 0]).model_copy(update={"id": record_id})
        for prompt, record_id in zip("abcde", ids, strict=True)
    ]
    with caplog.at_level(logging.WARNING):
        assert len(apply_standard_split(records)) == 5
    assert "record ids repeat: 2 of them are each given to more than one prompt" in caplog.text
    assert "(first: id 'i1', on the prompts 'a' and 'b')" in caplog.text


def test_apply_given_split_keeps_valid_values_and_dedupes() -> None:
    records = [record("x", [1, 0]), record("y", [0, 1]), record("x", [0, 0])]
    result = apply_given_split(records, ["test", "validation", "train"], ["r1", "r2", "r3"])
    assert [(r.prompt, r.split) for r in result] == [("x", "test"), ("y", "validation")]


def test_apply_given_split_names_row_and_allowed_values() -> None:
    records = [record("x", [1, 0]), record("y", [0, 1])]
    with pytest.raises(SplitError, match=r"data\.csv, line 3: unknown split 'holdout'.*train"):
        apply_given_split(records, ["train", "holdout"], ["data.csv, line 2", "data.csv, line 3"])
    with pytest.raises(ValueError, match="one split"):
        apply_given_split(records, ["train"], ["r1"])
    with pytest.raises(ValueError, match="2 splits and 1 row names; give one split and one row"):
        apply_given_split(records, ["train", "test"], ["r1"])


def test_an_unused_split_column_is_a_warning(tmp_path: Path, caplog) -> None:
    """A file's own split column was ignored without a word, unless its option was given:
    the user's held-out test prompts then went to train by the standard split."""
    rows = [{**row, "split": "test"} for row in long_rows()]
    long = write_jsonl(tmp_path / "long.jsonl", rows)
    zeroeval = write_jsonl(tmp_path / "scores_compact.jsonl", [zeroeval_row("q", Split="test")])
    routerbench = tmp_path / "rb.csv"
    routerbench_table(Split=["test"] * 3).to_csv(routerbench, index=False)  # in any case
    for importer, path, option in (
        (import_long, long, "use_split_column=true"),
        (import_zeroeval, zeroeval, "split_column=Split"),
        (import_routerbench, routerbench, "split_column=Split"),
    ):
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            importer(path)
        assert f"{path} has a split column, which is not used" in caplog.text
        assert f"pass --option {option} to keep the file's split" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):  # a split on some rows only is a split column too
        import_long(write_jsonl(tmp_path / "some.jsonl", [rows[0], *long_rows()[1:]]))
    assert "has a split column, which is not used" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        import_long(long, use_split_column=True)
        import_long(write_jsonl(tmp_path / "plain.jsonl", long_rows()))
    assert "split column" not in caplog.text


def test_a_split_column_without_a_value_is_no_split_to_keep(tmp_path: Path, caplog) -> None:
    """A split column empty on every row (a JSON row's "split": "", a spreadsheet's column
    left blank) was warned of as a split not used, and the option it advised failed on 'no
    split value': there is no split to keep, so no word of one."""
    long = write_jsonl(tmp_path / "long.jsonl", [{**row, "split": ""} for row in long_rows()])
    zeroeval = write_jsonl(tmp_path / "scores_compact.jsonl", [zeroeval_row("q", split=" ")])
    routerbench = tmp_path / "rb.csv"
    routerbench_table(split=[""] * 3).to_csv(routerbench, index=False)
    with caplog.at_level(logging.WARNING):
        assert import_long(long) and import_zeroeval(zeroeval)
        assert import_routerbench(routerbench)
    assert "split column" not in caplog.text


@pytest.mark.parametrize("format", ["routerbench", "zeroeval", "records"])
def test_rewards_outside_zero_to_one_are_warned_of_in_every_format(
    tmp_path: Path, format: str, caplog
) -> None:
    """Only the long format said that a 0-100 score column lies off the graders' scale: a
    RouterBench or ZeroEval file, or a records file, was read and trained on without a word."""
    ordinary = tmp_path / "ordinary"
    ordinary.mkdir()
    if format == "routerbench":
        path = tmp_path / "rb.csv"
        table = routerbench_table()
        table[ROUTERBENCH_MODELS[1]] = [1.0, 85.0, 0.5]
        table.to_csv(path, index=False)
        routerbench_table().to_csv(ordinary / "rb.csv", index=False)
        read, where = import_routerbench, f"{path}, row 2 (sample_id=gsm.1)"
    elif format == "zeroeval":
        rows = [zeroeval_row("q1"), zeroeval_row("q2", scores={"m1": 85, "m2": 1})]
        path = write_jsonl(tmp_path / "scores_compact.jsonl", rows)
        write_jsonl(ordinary / "scores_compact.jsonl", rows[:1])
        read, where = import_zeroeval, f"{path}, line 2"
    else:
        path = tmp_path / "records.jsonl"
        write_records(path, [record("x", [1, 0]), record("y", [0, -1])])
        write_records(ordinary / "records.jsonl", [record("x", [1, 0]), record("y", [0, 0.5])])
        read, where = read_records, f"{path}, line 2"
    with caplog.at_level(logging.WARNING):
        read(path)
    assert f"{path}: rewards are read as written, and some lie outside 0-1 ({where}: " in (
        caplog.text
    )
    assert "write them as fractions (0.85)" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        read(ordinary / path.name)
    assert "outside 0-1" not in caplog.text


def test_file_suffixes_in_capitals_are_read(tmp_path: Path) -> None:
    """Files saved on Windows as LONG.CSV or RB.PKL were refused as not .csv / .pkl."""
    path = write_long_csv(tmp_path / "LONG.CSV", long_rows())
    assert import_long(path) == import_long(write_long_csv(tmp_path / "long.csv", long_rows()))
    assert len(import_long(write_jsonl(tmp_path / "LONG.JSONL", long_rows()))) == 2
    routerbench_table().to_pickle(tmp_path / "RB.PKL")
    assert len(import_routerbench(tmp_path / "RB.PKL")) == 3


@pytest.mark.parametrize("name", ["long.csv", "long.jsonl", "rb.csv"])
def test_a_utf16_file_is_called_utf16(tmp_path: Path, name: str) -> None:
    """A file saved as Excel's "Unicode Text" or by Windows PowerShell's `>` (UTF-16 with a
    byte-order mark) was "not UTF-8 text (invalid start byte)", which names no encoding."""
    format = "routerbench" if name.startswith("rb") else "long"
    table = routerbench_table() if format == "routerbench" else pd.DataFrame(long_rows())
    path = tmp_path / name
    text = (
        table.to_csv(index=False)
        if name.endswith(".csv")
        else table.to_json(orient="records", lines=True)
    )
    path.write_bytes(text.encode("utf-16"))
    with pytest.raises(RecordFileError) as raised:
        import_dataset(format, path)
    assert str(raised.value) == (
        f"{path}, line 1: not UTF-8 text (invalid start byte): it looks UTF-16 encoded (Excel's "
        "'Unicode Text', Windows PowerShell's `>`); re-save the file as UTF-8"
    )
    path.write_bytes(("\u00e9" + text).encode("cp1252"))  # not UTF-8, nor UTF-16
    with pytest.raises(
        RecordFileError, match=r"not UTF-8 text \(invalid continuation byte\); re-save"
    ):
        import_dataset(format, path)
    path.write_bytes(("\u00e9" + text).encode("utf-16-le"))  # no byte-order mark: its NULs tell
    with pytest.raises(
        RecordFileError, match=r"not UTF-8 text \(invalid continuation byte\): it looks UTF-16"
    ):
        import_dataset(format, path)


@pytest.mark.parametrize("name", ["long.jsonl", "records.jsonl", "long.csv", "rb.csv"])
def test_files_saved_with_a_bom_and_joined_with_cat_are_read_or_named(
    tmp_path: Path, name: str
) -> None:
    """Files saved with a UTF-8 byte-order mark (Notepad, Excel's CSV UTF-8) and joined with
    `cat` hold a BOM at the start of each later file: JSON Lines failed there as "not valid
    JSON (Unexpected UTF-8 BOM); fix or delete that line", advice to delete a good row, and a
    CSV's second header was not known as one ("reward must be a finite number, got
    'reward'")."""
    bom = "\ufeff"
    path = tmp_path / name
    if name.endswith(".jsonl"):
        rows = (
            [record(f"q{i}", [1.0, 0.0]).model_dump(exclude_none=True) for i in range(4)]
            if name.startswith("records")
            else long_rows()
        )
        parts = [rows[:2], rows[2:]]
        path.write_text(
            "".join(bom + "".join(json.dumps(r) + "\n" for r in part) for part in parts)
        )
        read = read_records if name.startswith("records") else import_long
        assert read(path) == read(write_jsonl(tmp_path / "one.jsonl", rows))
        return
    table = routerbench_table() if name.startswith("rb") else pd.DataFrame(long_rows())
    parts = [table[:2].to_csv(index=False), table[2:].to_csv(index=False)]
    path.write_text("".join(bom + part for part in parts), encoding="utf-8")
    with pytest.raises(RecordFileError, match="repeats the header line"):
        import_dataset("routerbench" if name.startswith("rb") else "long", path)


@pytest.mark.parametrize(
    ("name", "advice"),
    [
        (
            "rows.xlsx",
            "save the sheet as CSV (UTF-8) from the spreadsheet, or run "
            "pandas.read_excel('rows.xlsx', dtype=str).to_csv('rows.csv', index=False)",
        ),
        (
            "rows.ODS",
            "save the sheet as CSV (UTF-8) from the spreadsheet, or run "
            "pandas.read_excel('rows.ODS', dtype=str).to_csv('rows.csv', index=False)",
        ),
        (
            "rows.tsv",
            "write it with commas: pandas.read_csv('rows.tsv', sep='\\t', dtype=str, "
            "keep_default_na=False).to_csv('rows.csv', index=False)",
        ),
        (
            "rows.parquet",
            "write it as CSV: pandas.read_parquet('rows.parquet').to_csv('rows.csv', index=False)",
        ),
    ],
)
@pytest.mark.parametrize("format", ["long", "routerbench"])
def test_a_spreadsheet_or_other_table_says_how_to_make_the_csv(
    tmp_path: Path, format: str, name: str, advice: str
) -> None:
    """An .xlsx, .ods, .tsv or .parquet table was refused as "expected a .csv (or ...) file in
    the long format" (or "a .pkl or .csv RouterBench table"), not saying how to get one."""
    path = tmp_path / name
    path.write_bytes(b"x")
    with pytest.raises(RecordFileError) as raised:
        import_dataset(format, path)
    assert str(raised.value).endswith(f"; {advice}")
    (tmp_path / "rows.txt").write_bytes(b"x")  # not a table's name: no advice
    with pytest.raises(RecordFileError, match=r"(long format|\.zip\))$"):
        import_dataset(format, tmp_path / "rows.txt")


@pytest.mark.parametrize(
    ("compress", "kind", "command"),
    [
        (gzip.compress, "gzip", "gunzip -c"),
        (bz2.compress, "bzip2", "bunzip2 -c"),
        (lzma.compress, "xz", "unxz -c"),
    ],
)
@pytest.mark.parametrize(
    ("name", "plain"),
    [
        ("records.jsonl.gz", "records.jsonl"),  # named for its compression: no reader takes it
        ("scores_compact.jsonl", "scores_compact.decompressed.jsonl"),  # a misnamed archive
        ("long.csv", "long.decompressed.csv"),
        ("rb.csv", "rb.decompressed.csv"),
    ],
)
def test_a_compressed_file_where_text_is_read_is_called_compressed(
    tmp_path: Path, compress, kind: str, command: str, name: str, plain: str
) -> None:
    """A compressed JSON Lines or CSV file (records.jsonl.gz from a colleague, a download
    kept compressed) was refused as "not UTF-8 text (invalid start byte): it looks UTF-16
    encoded (Excel's 'Unicode Text' ...); re-save the file as UTF-8", since the archive's
    header holds a NUL byte: advice about another encoding, for a file to decompress."""
    path = tmp_path / name
    if name.startswith("records"):
        write_records(tmp_path / "records.jsonl", [record("q", [1.0, 0.0])])
        path.write_bytes(compress((tmp_path / "records.jsonl").read_bytes()))
        read = read_records
    elif name.startswith("scores"):
        path.write_bytes(compress(json.dumps(zeroeval_row("q", {"a": 1})).encode() + b"\n"))
        read = import_zeroeval
    elif name.startswith("long"):
        path.write_bytes(compress(pd.DataFrame(long_rows()).to_csv(index=False).encode()))
        read = import_long
    else:
        path.write_bytes(compress(routerbench_table().to_csv(index=False).encode()))
        read = import_routerbench
    with pytest.raises(RecordFileError) as raised:
        read(path)
    assert str(raised.value) == (
        f"{path}: the file is {kind}-compressed, not text; decompress it first "
        f"(`{command} {name} > {plain}`) and give the decompressed file"
    )


def test_a_zipped_records_file_or_one_named_in_capitals_is_called_compressed(
    tmp_path: Path,
) -> None:
    """A zip archive, a zstd frame, bzip2 of nothing and a name in capitals (RECORDS.JSONL.GZ,
    as Windows tools write) are said to be compressed, with the command and the name to
    decompress them to."""
    plain = tmp_path / "records.jsonl"
    write_records(plain, [record("q", [1.0, 0.0])])
    zipped = tmp_path / "records.jsonl.zip"
    with zipfile.ZipFile(zipped, "w") as archive:
        archive.write(plain, plain.name)
    capitals = tmp_path / "RECORDS.JSONL.GZ"
    capitals.write_bytes(gzip.compress(plain.read_bytes()))
    zstd = tmp_path / "records.jsonl.zst"  # zstd's frame magic; no zstd module needed
    zstd.write_bytes(b"(\xb5/\xfd" + plain.read_bytes())
    empty = tmp_path / "records.jsonl.bz2"  # bzip2 of nothing: its stream end follows BZh9
    empty.write_bytes(bz2.compress(b""))
    for path, kind, command in (
        (zipped, "zip", "unzip -p"),
        (capitals, "gzip", "gunzip -c"),
        (zstd, "zstd", "zstd -dc"),
        (empty, "bzip2", "bunzip2 -c"),
    ):
        with pytest.raises(RecordFileError) as raised:
            read_records(path)
        assert str(raised.value) == (
            f"{path}: the file is {kind}-compressed, not text; decompress it first "
            f"(`{command} {path.name} > {path.stem}`) and give the decompressed file"
        )


def test_bzip2_of_any_level_is_called_compressed(tmp_path: Path) -> None:
    """bzip2 writes its level after "BZh" (`bzip2 -1` to `-9`, 9 by default): a file
    compressed at any level is said to be bzip2-compressed."""
    plain = tmp_path / "records.jsonl"
    write_records(plain, [record("q", [1.0, 0.0])])
    for level in range(1, 10):
        path = tmp_path / f"records{level}.jsonl.bz2"
        path.write_bytes(bz2.compress(plain.read_bytes(), compresslevel=level))
        with pytest.raises(RecordFileError, match=r"the file is bzip2-compressed, not text"):
            read_records(path)


def test_a_compressed_file_refused_is_closed(tmp_path: Path) -> None:
    """The file opened to look at its start is closed when it is refused as compressed, not
    left open until it is collected as garbage (a ResourceWarning "unclosed file")."""
    path = tmp_path / "records.jsonl"
    path.write_bytes(gzip.compress(b"{}\n"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        with pytest.raises(RecordFileError, match="gzip-compressed"):
            open_for_reading(path)
        gc.collect()
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []


def test_utf16_opening_with_text_beyond_ascii_is_called_utf16() -> None:
    """UTF-16 whose first characters are none of ASCII (a file opening with Chinese text)
    holds no NUL byte there: a big-endian byte-order mark tells it, or a NUL (a line end's)
    within its first 200 bytes; the same text in another encoding gets no hint."""
    chinese = "数学" * 30  # 60 characters, 120 bytes of UTF-16 without a NUL
    assert utf16_hint(("\ufeff" + chinese * 2).encode("utf-16-be")) == UTF16_HINT
    assert utf16_hint((chinese + "\nWhat is 2+2?\n").encode("utf-16-le")) == UTF16_HINT
    assert utf16_hint((chinese + "\nWhat is 2+2?\n").encode("gb18030")) == ""


@pytest.mark.parametrize("name", ["long.csv", "rb.csv", "long.jsonl", "ze.jsonl"])
def test_a_file_whose_lines_end_in_cr_alone_is_read_or_refused_saying_so(
    tmp_path: Path, name: str
) -> None:
    """Classic Mac OS line ends (CR alone): a CSV reads as its LF copy; JSON Lines read as one
    line, refused as "not valid JSON (Extra data at column 46) ... fix that line"."""
    format = {"long": "long", "rb": "routerbench", "ze": "zeroeval"}[name.split(".")[0]]
    if format == "zeroeval":
        rows = [zeroeval_row("What is 2+2?"), zeroeval_row("What is 3+3?")]
        text = "".join(json.dumps(row) + "\n" for row in rows)
    elif format == "routerbench":
        text = routerbench_table().to_csv(index=False)
    else:
        table = pd.DataFrame(long_rows())
        text = (
            table.to_csv(index=False)
            if name.endswith(".csv")
            else table.to_json(orient="records", lines=True)
        )
    lf, cr = tmp_path / "lf" / name, tmp_path / "cr" / name
    for path, line_end in ((lf, "\n"), (cr, "\r")):
        path.parent.mkdir()
        path.write_bytes(text.replace("\n", line_end).encode("utf-8"))
    if name.endswith(".csv"):
        assert import_dataset(format, cr) == import_dataset(format, lf)
        return
    with pytest.raises(RecordFileError) as raised:
        import_dataset(format, cr)
    assert str(raised.value) == (
        f"{cr}, line 1: the lines end in a carriage return alone (CR, the line end of classic "
        "Mac OS), so the whole file reads as one line; JSON Lines ends each line in LF (or "
        f"CRLF): re-save the file with LF line ends, e.g. tr '\\r' '\\n' < {name} > "
        f"{name.replace('.jsonl', '.lf.jsonl')}"
    )
    assert import_dataset(format, lf)


@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16-be"])
@pytest.mark.parametrize("name", ["long.csv", "long.jsonl", "long.json", "rb.csv", "ze.jsonl"])
def test_a_utf16_file_without_a_byte_order_mark_is_called_utf16(
    tmp_path: Path, name: str, encoding: str
) -> None:
    """UTF-16 without a byte-order mark decodes as UTF-8 without an error (each ASCII
    character beside a NUL): it was refused as "not valid JSON ... fix that line" or as a
    header missing its columns, listing names such as 'p\\x00r\\x00o\\x00...'."""
    format = {"long": "long", "rb": "routerbench", "ze": "zeroeval"}[name.split(".")[0]]
    if format == "zeroeval":
        text = json.dumps(zeroeval_row("What is 2+2?")) + "\n"
    else:
        table = routerbench_table() if format == "routerbench" else pd.DataFrame(long_rows())
        text = (
            table.to_csv(index=False)
            if name.endswith(".csv")
            else table.to_json(orient="records", lines=name.endswith(".jsonl"))
        )
    path = tmp_path / name
    path.write_bytes(text.encode(encoding))
    with pytest.raises(RecordFileError) as raised:
        import_dataset(format, path)
    assert str(raised.value) == (
        f"{path}, line 1: not UTF-8 text (it holds NUL bytes): it looks UTF-16 encoded (Excel's "
        "'Unicode Text', Windows PowerShell's `>`); re-save the file as UTF-8"
    )
    path.write_text(text, encoding="utf-8")  # the same text as UTF-8 is read
    assert import_dataset(format, path)


# --- the registry --------------------------------------------------------------------------


def test_import_dataset_rejects_unknown_formats_and_options(tmp_path: Path) -> None:
    assert set(IMPORTERS) == {"llmrouter", "zeroeval", "routerbench", "long"}
    with pytest.raises(ValueError, match="known formats: llmrouter, zeroeval, routerbench, long"):
        import_dataset("csv", tmp_path)
    with pytest.raises(ValueError, match=r"no option\(s\) \['split'\]; its options: use_split"):
        import_dataset("long", tmp_path / "x.csv", split="test")
    path = write_jsonl(tmp_path / "long.jsonl", long_rows())
    assert import_dataset("long", path) == import_long(path)


def test_unknown_options_are_named_sorted(tmp_path: Path) -> None:
    """The unknown options are listed sorted, whatever order a set of them gives (five: a
    lucky unsorted order is one in 120)."""
    with pytest.raises(ValueError) as raised:
        import_dataset("long", tmp_path / "x.csv", **dict.fromkeys("ecadb", "1"))
    assert str(raised.value) == (
        "the long importer has no option(s) ['a', 'b', 'c', 'd', 'e']; its options: "
        "use_split_column, on_missing"
    )


@pytest.mark.parametrize(
    ("format", "option", "value", "expected"),
    [
        # the YAML parser's problem alone, not its multi-line report of where in the string
        ("zeroeval", "prices", "{a: [1", "prices: '{a: [1' is not valid YAML (expected ',' or "
         "']', but got '<stream end>'); expected a mapping {a string: [a number, a number]} or "
         "null"),
        # the option's own problem, not put under "record" as a record's is
        ("llmrouter", "output_tokens", "abc", "output_tokens='abc' is not valid: expected a "
         "number (Input should be a valid number, unable to parse string as a number)"),
    ],
)  # fmt: skip
def test_an_option_value_refused_is_said_in_one_line(
    tmp_path: Path, format: str, option: str, value: str, expected: str
) -> None:
    with pytest.raises(ValueError) as raised:
        import_dataset(format, tmp_path, **{option: value})
    assert str(raised.value) == f"the {format} importer's option {expected}"


@pytest.mark.parametrize(
    ("format", "option", "value", "expected"),
    [
        ("llmrouter", "output_tokens", "abc", r"output_tokens='abc' is not valid: "
         r"expected a number"),
        ("llmrouter", "output_tokens", "-500", r"output_tokens='-500' is not valid: .*greater "
         r"than or equal to 0"),
        # an infinite answer length made every cost infinite, blamed on the first data row
        ("llmrouter", "output_tokens", ".inf", r"output_tokens='.inf' is not valid: .*finite"),
        ("llmrouter", "output_tokens", "1e400", r"output_tokens='1e400' is not valid: .*finite"),
        ("zeroeval", "prices", "{a: 1, b: 2}", r"prices='\{a: 1, b: 2\}' is not valid: "
         r"expected a mapping \{a string: \[a number, a number\]\} or null"),
        ("zeroeval", "prices", "{a: [1", r"prices: '\{a: \[1' is not valid YAML"),
        ("zeroeval", "on_missing", "dro", r"on_missing='dro' is not valid: expected one of "
         r"error, drop"),
        ("long", "use_split_column", "maybe", r"use_split_column='maybe' is not valid: expected "
         r"true or false"),
    ],
)  # fmt: skip
def test_import_dataset_checks_option_values(
    tmp_path: Path, format: str, option: str, value: str, expected: str
) -> None:
    with pytest.raises(ValueError, match=rf"the {format} importer's option {expected}"):
        import_dataset(format, tmp_path, **{option: value})


def test_import_dataset_converts_command_line_strings(tmp_path: Path) -> None:
    rows = [{**row, "split": "test"} for row in long_rows()]
    path = write_jsonl(tmp_path / "long.jsonl", rows)
    assert {r.split for r in import_dataset("long", path, use_split_column="true")} == {"test"}
    zeroeval = write_jsonl(tmp_path / "scores_compact.jsonl", [zeroeval_row("q")])
    priced = import_dataset("zeroeval", zeroeval, prices="{m1: [1, 2], m2: [3, 4]}")
    assert priced == import_zeroeval(zeroeval, prices={"m1": (1, 2), "m2": (3, 4)})
    routerbench = tmp_path / "rb.csv"
    routerbench_table().to_csv(routerbench, index=False)
    with pytest.raises(RecordFileError, match=r"missing column\(s\) \['false'\]"):
        import_dataset("routerbench", routerbench, split_column="false")


@pytest.mark.parametrize("format", ["zeroeval", "routerbench"])
@pytest.mark.parametrize("name", ["", " "])
def test_a_blank_split_column_name_is_refused_as_naming_no_column(
    tmp_path: Path, format: str, name: str
) -> None:
    """`--option split_column=$SPLIT` with the variable unset: RouterBench failed with
    "KeyError: ''", ZeroEval said every row had no split value."""
    path = write_jsonl(tmp_path / "scores_compact.jsonl", [zeroeval_row("q", split="test")])
    if format == "routerbench":
        path = tmp_path / "rb.csv"
        routerbench_table().to_csv(path, index=False)
    with pytest.raises(ValueError, match=rf"^split_column={name!r} names no column; give the"):
        import_dataset(format, path, split_column=name)


@pytest.mark.parametrize("format", ["long", "routerbench"])
def test_a_csv_saved_with_crlf_line_ends_gives_the_records_of_its_lf_copy(
    tmp_path: Path, format: str
) -> None:
    """A CSV saved with CRLF line ends (Excel, a Windows editor, git's autocrlf) kept `\\r\\n`
    inside its quoted multi-line prompts: other prompts than its LF copy, so other ids, another
    standard split and other features for the same data."""
    lf = {
        "long": 'prompt,worker,reward\n"Solve:\nx + 1 = 3",a,1\n"Solve:\nx + 1 = 3",b,0\n',
        "routerbench": (
            'prompt,eval_name,a,a|total_cost,b,b|total_cost\n"Solve:\nx + 1 = 3",t,1,0.1,0,0.2\n'
        ),
    }[format]
    paths = [tmp_path / "lf.csv", tmp_path / "crlf.csv"]
    paths[0].write_bytes(lf.encode())
    paths[1].write_bytes(lf.replace("\n", "\r\n").encode())
    lf_records, crlf_records = (import_dataset(format, path) for path in paths)
    assert lf_records[0].prompt == "Solve:\nx + 1 = 3"
    assert crlf_records == lf_records


def test_writing_records_does_not_hold_the_file_in_memory(tmp_path: Path) -> None:
    """data import wrote its records by building the whole file's text three times over (the
    lines, joined, encoded) before writing: about 3x the output's size on top of the records."""
    records = [
        record(f"prompt {index:05d} " + "words " * 40, [index % 2, 1 - index % 2])
        for index in range(2000)
    ]
    path = tmp_path / "records.jsonl"
    tracemalloc.start()
    try:
        assert write_records(path, records) == len(records)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert read_records(path) == records
    assert peak < 0.2 * path.stat().st_size


@pytest.mark.parametrize(
    ("format", "header", "rows"),
    [
        ("long", "prompt,worker,reward,task", ["q,a,1,t", "q,b,0,t", "r,a,0,t", "r,b,1,t"]),
        ("routerbench", "prompt,eval_name,a,a|total_cost", ["q,t,1,0.1", "r,t,0,0.2"]),
        (
            "routerbench",  # the raw table, a row per sample and model
            "sample_id,prompt,eval_name,model_name,performance,cost",
            ["s1,q,t,a,1,0.1", "s1,q,t,b,0,0.2", "s2,r,t,a,0,0.1", "s2,r,t,b,1,0.2"],
        ),
    ],
)
def test_a_spreadsheets_empty_rows_are_skipped_like_blank_lines(
    tmp_path: Path, format: str, header: str, rows: list[str]
) -> None:
    """A spreadsheet exports the empty rows below (or between) its data as ",,,", which failed
    the import with "no value for ['prompt', 'worker', 'reward']" (or "prompt must be a
    non-empty string") on a row the user never wrote."""
    empty = "," * header.count(",")
    plain, exported = tmp_path / "plain.csv", tmp_path / "exported.csv"
    plain.write_text("\n".join([header, *rows]) + "\n")
    exported.write_text("\n".join([header, rows[0], empty, *rows[1:], empty, " , ,", empty]) + "\n")
    assert import_dataset(format, exported) == import_dataset(format, plain)


def test_an_integer_beyond_a_floats_range_is_no_finite_number(tmp_path: Path) -> None:
    """A JSON reward, cost or score of 10**400 (an integer, which json reads exactly) failed
    with "OverflowError: int too large to convert to float", naming no file, row or value."""
    huge = 10**400
    for field in ("reward", "cost"):
        rows = [
            {**row, field: huge} if index == 1 else row for index, row in enumerate(long_rows())
        ]
        with pytest.raises(RecordFileError, match=rf"line 2: {field} must be a finite number"):
            import_long(write_jsonl(tmp_path / "long.jsonl", rows))
    path = write_jsonl(tmp_path / "scores.jsonl", [zeroeval_row("q", scores={"m1": huge, "m2": 1})])
    with pytest.raises(RecordFileError, match=r"line 1: the score of m1 must be a finite number"):
        import_zeroeval(path)


def test_a_value_float_refuses_with_a_value_error_is_no_number() -> None:
    """A pickled table's cell may hold bytes (b"n/a") or a Decimal's signalling NaN, which
    float() refuses with a ValueError, not a TypeError: no number, as a text that is none."""
    assert to_float(b"n/a") is None
    assert to_float(Decimal("sNaN")) is None
    assert to_float(b"0.5") == 0.5


@pytest.mark.parametrize(
    ("format", "name", "compress"),
    [("long", "rows.csv.gz", gzip.compress), ("routerbench", "rb.csv.xz", lzma.compress)],
)
def test_a_compressed_csv_cut_short_says_to_fetch_it_again(
    tmp_path: Path, format: str, name: str, compress
) -> None:
    """A download or copy interrupted half-way ends before its compressed data does: it was
    asked "is it really .gz-compressed?", which it is."""
    table = tmp_path / "table.csv"
    if format == "long":
        write_long_csv(table, long_rows() * 200)
    else:
        routerbench_table().to_csv(table, index=False)
    packed = compress(table.read_bytes())
    path = tmp_path / name
    path.write_bytes(packed[: len(packed) // 2])
    with pytest.raises(RecordFileError) as raised:
        import_dataset(format, path)
    assert str(raised.value).endswith(
        "the file ends before its data does, so it was cut short (an interrupted download or "
        "copy?): fetch or copy it again"
    )


def test_the_standard_split_dedupe_and_ids_take_a_prompt_exactly_as_written(
    tmp_path: Path,
) -> None:
    """The split hashes the prompt's exact text, and only exact duplicates are dropped: a
    prompt with a space or line break around it is another prompt (DESIGN.md), with its own
    id. Every test prompt had no space around it, so hashing, deduping or naming a stripped
    prompt passed them all."""
    texts = [f" prompt {index}\n" for index in range(40)]
    for text in texts:
        bucket = int(hashlib.sha1(text.encode("utf-8")).hexdigest(), 16) % 10
        salted = int(hashlib.sha1(("validation:" + text).encode("utf-8")).hexdigest(), 16) % 10
        expected = "test" if bucket < 2 else "validation" if salted < 2 else "train"
        assert standard_split(text) == expected
    spellings = ["x", "x ", " x", "x\n"]
    kept = apply_standard_split([record(text, [1, 0]) for text in spellings])
    assert [r.prompt for r in kept] == spellings
    rows = [{"prompt": text, "worker": "a", "reward": 1} for text in spellings]
    imported = import_long(write_jsonl(tmp_path / "spaced.jsonl", rows))
    assert len({r.id for r in imported}) == len(spellings)


def test_a_dropped_duplicate_does_not_count_as_a_repeated_id(caplog) -> None:
    """The ids are checked after the duplicate prompts are dropped: a prompt given twice with
    its id (one sample exported twice) is one record, not "an id given to more than one
    prompt"; no test gave a duplicate an id, so checking the ids before dedupe passed."""
    records = [
        record("x", [1, 0]).model_copy(update={"id": "s1"}),
        record("x", [1, 0]).model_copy(update={"id": "s1"}),
    ]
    for split in (
        lambda: apply_standard_split(records),
        lambda: apply_given_split(records, ["train", "train"], ["r1", "r2"]),
    ):
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            assert [r.id for r in split()] == ["s1"]
        assert "dropped 1 records" in caplog.text
        assert "record ids repeat" not in caplog.text
