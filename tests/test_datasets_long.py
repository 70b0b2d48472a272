"""The long-format importer (a row per prompt and worker; CSV, JSON Lines, JSON): small
generated files."""

from __future__ import annotations

import csv
import gzip
import json
import logging
import math
from pathlib import Path

import pandas as pd
import pytest
from conftest import peak_memory_of
from datasets_support import (
    long_rows,
    write_jsonl,
    write_long_csv,
    zeroeval_row,
)

from fugu_lite.datasets import (
    SplitError,
    import_dataset,
    import_long,
    import_zeroeval,
    standard_split,
)
from fugu_lite.datasets.common import stable_id
from fugu_lite.schemas import read_records, write_records
from fugu_lite.text_reading import RecordFileError


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_long_format_groups_rows_by_prompt(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"long{suffix}"
    write_long_csv(path, long_rows()) if suffix == ".csv" else write_jsonl(path, long_rows())
    records = import_long(path)
    assert [r.prompt for r in records] == ["p1", "p2"]
    assert records[0].worker_ids == ["w1", "w2"]
    assert records[0].rewards == [0.0, 1.0]
    assert records[0].costs == [0.1, 0.2]
    assert [r.task for r in records] == ["t", "u"]
    # the id made from the prompt stays what earlier imports gave it (predictions.jsonl and
    # earlier records are joined on it): sha1's first 16 hex digits
    assert [r.id for r in records] == ["long:b78f576611ec06f9", "long:c5fd961c9f737a95"]


@pytest.mark.parametrize("name", ["long.csv.gz", "long.CSV.bz2", "long.csv.xz", "long.ndjson"])
def test_long_format_reads_a_compressed_csv_and_ndjson(tmp_path: Path, name: str) -> None:
    """pandas' to_csv("rows.csv.gz") and JSON Lines named .ndjson were refused as "expected a
    .csv, .jsonl or .json file"; they hold the same rows as the plain .csv."""
    plain = import_long(write_long_csv(tmp_path / "plain.csv", long_rows()))
    path = tmp_path / name
    if name.endswith(".ndjson"):
        write_jsonl(path, long_rows())
    else:
        pd.DataFrame(long_rows()).to_csv(path, index=False)  # compressed as its name says
    assert path.read_bytes()[:7] != b"prompt,"  # really compressed (or JSON)
    assert import_long(path) == plain


@pytest.mark.parametrize("name", ["rewards.2024.csv", "rewards.v2.jsonl", "runs.2024.csv.gz"])
def test_a_file_name_with_a_dot_before_its_suffix_is_read_by_its_last_suffix(
    tmp_path: Path, name: str
) -> None:
    """A name holding a date or a version (rewards.2024.csv) is read by its suffix, as the
    folder listing of readable files takes it."""
    path = tmp_path / name
    if ".csv" in name:
        text = pd.DataFrame(long_rows()).to_csv(index=False)
        opener = gzip.open if name.endswith(".gz") else open
        with opener(path, "wt", encoding="utf-8") as stream:
            stream.write(text)
    else:
        write_jsonl(path, long_rows())
    assert import_long(path) == import_long(write_jsonl(tmp_path / "long.jsonl", long_rows()))


def test_long_format_names_a_bad_archive_and_a_compressed_json(tmp_path: Path) -> None:
    fake = tmp_path / "long.csv.gz"
    fake.write_text("prompt,worker,reward\np1,w1,1\n", encoding="utf-8")  # not gzip
    with pytest.raises(RecordFileError) as raised:
        import_long(fake)
    assert str(raised.value).startswith(f"{fake}: cannot be read (BadGzipFile: ")
    assert str(raised.value).endswith("is it really .gz-compressed?")
    packed = tmp_path / "long.jsonl.gz"
    packed.write_bytes(gzip.compress(b'{"prompt": "p1", "worker": "w1", "reward": 1}\n'))
    with pytest.raises(RecordFileError, match=r"decompress it first \(`gunzip -k long.jsonl.gz`\)"):
        import_long(packed)
    with pytest.raises(RecordFileError, match=r"expected a \.csv \(or a compressed \.csv\.gz, "):
        import_long(tmp_path / "long.tsv")


@pytest.mark.parametrize("use_split_column", [False, True])
def test_ids_given_to_several_prompts_are_reported_at_import(
    tmp_path: Path, caplog, use_split_column: bool
) -> None:
    """Two prompts sharing one id from the user's id column were imported without a word;
    only `data stats` or training said so later, once the records were written."""
    rows = [{**row, "id": "q1", "split": "train"} for row in long_rows()]
    path = write_jsonl(tmp_path / "long.jsonl", rows)
    with caplog.at_level(logging.WARNING):
        records = import_long(path, use_split_column=use_split_column)
    assert [(r.prompt, r.id) for r in records] == [("p1", "q1"), ("p2", "q1")]  # nothing lost
    assert "record ids repeat: 1 of them are each given to more than one prompt" in caplog.text
    assert "(first: id 'q1', on the prompts 'p1' and 'p2')" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        import_long(write_jsonl(path, [{**row, "id": row["prompt"]} for row in long_rows()]))
    assert "record ids repeat" not in caplog.text


def test_long_format_without_costs(tmp_path: Path) -> None:
    rows = [{k: v for k, v in row.items() if k != "cost"} for row in long_rows()]
    records = import_long(write_jsonl(tmp_path / "long.jsonl", rows))
    assert all(r.costs is None for r in records)


def test_long_format_missing_cell_names_prompt_and_worker(tmp_path: Path) -> None:
    path = write_long_csv(tmp_path / "long.csv", long_rows()[:3])
    with pytest.raises(RecordFileError, match=r"prompt 'p2' has no row for worker\(s\) \['w2'\]"):
        import_long(path)


def test_long_format_can_drop_prompts_missing_a_worker(tmp_path: Path, caplog) -> None:
    """A worker that failed on some prompts left no way to import the rest but editing the
    file, while zeroeval and routerbench take on_missing=drop."""
    rows = [*long_rows(), {"prompt": "p3", "worker": "w2", "reward": 1, "cost": 0.1}]
    path = write_long_csv(tmp_path / "long.csv", rows[:3] + rows[4:])
    with pytest.raises(RecordFileError, match=r"line 4: prompt 'p2' has no row for .*on_missing"):
        import_long(path)
    with caplog.at_level(logging.WARNING):
        records = import_dataset("long", path, on_missing="drop")
    assert [record.prompt for record in records] == ["p1"]
    assert "dropped 2 of 3 prompts without a row and a reward for every worker" in caplog.text
    assert "{'w2': 1, 'w1': 1}" in caplog.text
    lonely = write_long_csv(tmp_path / "lonely.csv", [rows[0], rows[2]])
    with pytest.raises(RecordFileError, match="every one of its 2 prompts misses a row"):
        import_long(lonely, on_missing="drop")
    caplog.clear()
    three = write_long_csv(  # p2 misses two workers: one prompt dropped, not two
        tmp_path / "three.csv",
        [*({"prompt": "p1", "worker": w, "reward": 1} for w in ("w1", "w2", "w3")), rows[2]],
    )
    with caplog.at_level(logging.WARNING):
        assert [record.prompt for record in import_long(three, on_missing="drop")] == ["p1"]
    assert "dropped 1 of 2 prompts without a row" in caplog.text
    assert "{'w2': 1, 'w3': 1}" in caplog.text


@pytest.mark.parametrize(
    ("name", "text"), [("long.csv", "prompt,worker,reward\n"), ("long.jsonl", "\n\n")]
)
def test_a_long_file_without_rows_is_refused(tmp_path: Path, name: str, text: str) -> None:
    """A header alone, or JSON Lines of blank lines, is no data: it must not import as no
    records without a word (data import then said only that the import yields no records)."""
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(RecordFileError) as raised:
        import_long(path, on_missing="drop")
    assert str(raised.value) == f"{path}: holds no rows"


def test_workers_that_differ_only_in_case_are_named_in_the_missing_worker_error(
    tmp_path: Path, caplog
) -> None:
    """`GPT-4` on some rows and `gpt-4` on others (two sources, two spellings) are two
    workers: the error said only that a prompt has no row for 'gpt-4', and on_missing=drop
    dropped those prompts, without a word of the other spelling."""
    path = tmp_path / "long.csv"
    rows = "q1,GPT-4,1\nq1,llama,0\nq2,gpt-4,1\nq2,llama,0\nq3,GPT-4,1\nq3,gpt-4,1\nq3,llama,1\n"
    path.write_text(f"prompt,worker,reward\n{rows}", encoding="utf-8")
    hint = (
        "; the workers 'GPT-4' and 'gpt-4' differ only in case: a worker is read as written, "
        "so spell each one the same way on every row"
    )
    with pytest.raises(RecordFileError) as raised:
        import_long(path)
    assert str(raised.value) == (
        f"{path}, line 2: prompt 'q1' has no row for worker(s) ['gpt-4']; every prompt needs one "
        "row per worker (add the rows, drop the prompt, or pass --option on_missing=drop)" + hint
    )
    with caplog.at_level(logging.WARNING):
        assert [record.prompt for record in import_long(path, on_missing="drop")] == ["q3"]
    assert caplog.text.rstrip().endswith(hint)
    q1_and_q2 = "".join(rows.splitlines(keepends=True)[:4])
    path.write_text(f"prompt,worker,reward\n{q1_and_q2}", encoding="utf-8")
    with pytest.raises(RecordFileError) as raised:  # every prompt dropped, for want of a case
        import_long(path, on_missing="drop")
    assert str(raised.value).endswith("add the missing rows and rewards" + hint)
    path.write_text("prompt,worker,reward\nq1,a,1\nq1,b,0\nq2,a,1\n", encoding="utf-8")
    with pytest.raises(RecordFileError, match=r"on_missing=drop\)$"):  # no case to speak of
        import_long(path)


def test_long_format_drops_prompts_with_a_blank_reward_on_request(tmp_path: Path, caplog) -> None:
    """A blank reward (an empty cell, null, NaN, NA) failed even with on_missing=drop, which
    zeroeval and routerbench apply to a missing score as well as to a missing row."""
    path = tmp_path / "long.csv"
    path.write_text(
        "prompt,worker,reward\np1,w1,1\np1,w2,0\np2,w1,\np2,w2,1\np3,w1,NA\np3,w2,0\n",
        encoding="utf-8",
    )
    with pytest.raises(
        RecordFileError,
        match=r"line 4: no value for \['reward'\]; fill in the cell or delete the row \(or pass",
    ):
        import_long(path)
    with caplog.at_level(logging.WARNING):
        assert [record.prompt for record in import_long(path, on_missing="drop")] == ["p1"]
    assert "dropped 2 of 3 prompts" in caplog.text and "{'w1': 2}" in caplog.text
    path.write_text("prompt,worker,reward\np1,w1,1\np1,w2,oops\n", encoding="utf-8")
    with pytest.raises(RecordFileError, match="reward must be a finite number, got 'oops'"):
        import_long(path, on_missing="drop")  # a bad value is no missing one


def test_long_format_given_rows_of_another_shape_names_their_keys(tmp_path: Path) -> None:
    """`data import long` on a ZeroEval file (or rows with a `text` key) said only "line 1: no
    value for ['prompt', 'worker', 'reward']", with no word of what the rows do hold."""
    path = write_jsonl(tmp_path / "scores.jsonl", [zeroeval_row("What is 2+2?")])
    for policy in ("error", "drop"):  # drop lets a missing reward by, not a missing worker
        with pytest.raises(RecordFileError) as raised:
            import_long(path, on_missing=policy)  # type: ignore[arg-type]
        assert str(raised.value) == (
            f"{path}, line 1: no value for ['prompt', 'worker', 'reward']; the row's keys are "
            "task, id, question, gold, scores, out_chars, the long format's prompt, worker, "
            "reward, cost, task, split, id: rename the keys, or import the file with its own "
            "format (zeroeval, routerbench)"
        )
    empty = write_jsonl(tmp_path / "empty.jsonl", [{}])  # an object without keys says so
    with pytest.raises(RecordFileError, match=r"line 1: .*; the row's keys are none, the long"):
        import_long(empty)
    # a CSV row short of cells has every column, its missing cells empty: no keys to name
    path = tmp_path / "long.csv"
    path.write_text("prompt,worker,reward,cost\np1,w1\n", encoding="utf-8")
    with pytest.raises(RecordFileError) as raised:
        import_long(path)
    assert (
        str(raised.value)
        == f"{path}, line 2: no value for ['reward']; fill in the cell or delete the row (or "
        "pass --option on_missing=drop)"
    )


@pytest.mark.parametrize(
    ("row", "missing"),
    [
        ({"prompt": "q", "worker": "a", "rewards": 1}, "['reward']"),
        ({"prompt": "q", "worker_ids": "a", "reward": 1}, "['worker']"),
    ],
)
def test_a_row_with_one_of_a_records_keys_is_told_to_rename_its_keys(
    tmp_path: Path, row: dict, missing: str
) -> None:
    """A row is a RewardRecord (told to skip the import) only with both worker_ids and
    rewards: a long row with one of them, a key misnamed ('rewards' for reward), has its
    keys named to rename (in a mutation round, either key alone was told 'this is a
    RewardRecord ... give it as it is to train' with every importer test passing)."""
    path = write_jsonl(tmp_path / "rows.jsonl", [row])
    with pytest.raises(RecordFileError) as raised:
        import_long(path)
    assert str(raised.value).startswith(f"{path}, line 1: no value for {missing}")
    assert "RewardRecord" not in str(raised.value)
    assert "rename the keys" in str(raised.value)


def test_long_format_cost_written_as_na_is_no_cost(tmp_path: Path) -> None:
    """A missing cost written as "NA" (R's write.csv) or "NaN" failed as "cost must be a
    finite number, got 'NA'", while an empty cell (pandas' to_csv) meant no cost."""
    path = tmp_path / "long.csv"
    path.write_text("prompt,worker,reward,cost\np1,w1,1,NA\np1,w2,0,NaN\np2,w1,1,\np2,w2,0, \n")
    assert [record.costs for record in import_long(path)] == [None, None]
    path.write_text("prompt,worker,reward,cost\np1,w1,1,0.5\np1,w2,0,NA\n")
    with pytest.raises(RecordFileError, match=r"line 3: prompt 'p1' has a cost for some workers"):
        import_long(path)


def test_long_format_task_and_id_written_as_na_are_none(tmp_path: Path, caplog) -> None:
    """A missing id or task written as "NA" (R's write.csv) or NaN was the text "NA" (or
    "nan"): one id of every such prompt, and a task named NA."""
    path = tmp_path / "long.jsonl"
    rows = [{**row, "id": "NA" if row["prompt"] == "p1" else math.nan, "task": "NA"}
            for row in long_rows()]  # fmt: skip
    with caplog.at_level(logging.WARNING):
        records = import_long(write_jsonl(path, rows))
    assert [(r.id, r.task) for r in records] == [
        (stable_id("long", "p1"), None), (stable_id("long", "p2"), None),
    ]  # fmt: skip
    assert "record ids repeat" not in caplog.text


def test_long_format_duplicate_cell_names_prompt_and_worker(tmp_path: Path) -> None:
    rows = [*long_rows(), {"prompt": "p1", "worker": "w1", "reward": 1, "cost": 0.1, "task": "t"}]
    path = write_long_csv(tmp_path / "long.csv", rows)
    duplicate = r"long\.csv, line 6: duplicate cell for prompt 'p1' and worker 'w1'"
    with pytest.raises(RecordFileError, match=duplicate + r" \(first at .*line 3"):
        import_long(path)


def test_a_duplicate_cell_with_another_reward_says_which_rewards_and_what_to_do(
    tmp_path: Path,
) -> None:
    """Two rows of one prompt and worker (several attempts of a model, files joined) were
    refused alike whether they agreed or not, saying neither the rewards nor that attempts
    are averaged into one row first."""
    path = tmp_path / "long.csv"
    path.write_text("prompt,worker,reward\nq,a,1\nq,b,0\nq,a,0.5\n", encoding="utf-8")
    with pytest.raises(RecordFileError) as raised:
        import_long(path)
    assert str(raised.value) == (
        f"{path}, line 4: duplicate cell for prompt 'q' and worker 'a' (first at {path}, line "
        "2); keep one row per prompt and worker: its rewards differ (1 there, 0.5 here), so keep "
        "the right one, or average a worker's attempts at a prompt into one row"
    )
    # the same reward twice, or twice none (read as NaN with on_missing=drop): a repeat
    for rewards, policy in (("1", "error"), ("", "drop")):
        path.write_text(
            f"prompt,worker,reward\nq,a,{rewards}\nq,b,0\nq,a,{rewards}\n", encoding="utf-8"
        )
        with pytest.raises(RecordFileError) as raised:
            import_long(path, on_missing=policy)  # type: ignore[arg-type]
        assert str(raised.value).endswith(
            "keep one row per prompt and worker: it repeats that row's reward, so delete it"
        )


def test_long_format_bad_rewards_name_the_row(tmp_path: Path) -> None:
    path = tmp_path / "long.csv"
    path.write_text("prompt,worker,reward\np1,w1,1\np1,w2,NaN\n", encoding="utf-8")
    with pytest.raises(RecordFileError, match=r"long\.csv, line 3: no value for \['reward'\]"):
        import_long(path)
    path.write_text("prompt,worker,reward\np1,w1,good\n", encoding="utf-8")
    with pytest.raises(
        RecordFileError, match=r"line 2: reward must be a finite number, got 'good'$"
    ):
        import_long(path)
    # a spreadsheet's decimal comma: said how to write the number
    path.write_text('prompt,worker,reward\np1,w1,"0,5"\n', encoding="utf-8")
    with pytest.raises(RecordFileError) as raised:
        import_long(path)
    assert str(raised.value).endswith(
        "line 2: reward must be a finite number, got '0,5' (write numbers with a decimal point "
        "and no thousands separator: 0.5, 1000)"
    )
    path.write_text("prompt,worker,reward\np1,w1,\n", encoding="utf-8")
    with pytest.raises(RecordFileError, match=r"line 2: no value for \['reward'\]"):
        import_long(path)
    path.write_text("prompt,worker,score\np1,w1,1\n", encoding="utf-8")
    with pytest.raises(RecordFileError, match=r"missing column\(s\) \['reward'\]"):
        import_long(path)


def _cost_cell_refusal(path: Path, cell: str) -> str:
    """The error importing a long CSV at `path` whose one row has `cell` as its cost."""
    path.write_text(f"prompt,worker,reward,cost\np1,w1,1,{cell}\n", encoding="utf-8")
    with pytest.raises(RecordFileError) as raised:
        import_long(path)
    return str(raised.value)


@pytest.mark.parametrize(
    ("cell", "number"),
    [
        ("$0.002", "0.002"),
        ("0.01 USD", "0.01"),
        ("€ 1.5", "1.5"),
        ("120 tokens", "120"),
        ("US$1.5", "1.5"),
        ("USD 1.5", "1.5"),
        ("USD1.5", "1.5"),  # a currency code: three capitals right before the number
        ("EUR2", "2"),
        ("JPY100", "100"),
        ("CHF-1", "-1"),
        ("12kg", "12"),
        ("5m", "5"),  # milli, metres or minutes: no million to write out
        ("4oz", "4"),  # ounces: no GPT-4o
        ("0.5euro", "0.5"),  # an "o" last in a unit: no GPT-4o's either
        ("20 milli-cents", "20"),  # a hyphen in a unit spaced from the number: no name
        ("2e-3 USD", "2e-3"),  # the number with its exponent, not 2
    ],
)
def test_a_cost_written_with_a_currency_sign_or_unit_says_to_write_the_number_alone(
    tmp_path: Path, cell: str, number: str
) -> None:
    """A spreadsheet's currency format ($0.002) or a unit after the number (0.01 USD) was
    refused as "cost must be a finite number, got '$0.002'", not saying what to change."""
    path = tmp_path / "long.csv"
    assert _cost_cell_refusal(path, cell) == (
        f"{path}, line 2: cost must be a finite number, got {cell!r} (write the number alone, "
        f"without a currency sign or unit: {number})"
    )
    path.write_text("prompt,worker,reward,cost\np1,w1,1,cheap\n", encoding="utf-8")
    with pytest.raises(RecordFileError, match=r"got 'cheap'$"):  # no number: no hint
        import_long(path)
    # a percentage with words after it may be 0.85: not "write the number alone: 85"
    path.write_text("prompt,worker,reward,cost\np1,w1,1,85% off\n", encoding="utf-8")
    with pytest.raises(RecordFileError, match=r"got '85% off'$"):
        import_long(path)


@pytest.mark.parametrize(
    ("cell", "full"),
    [
        ("5k", "5000"),
        ("7B", "7000000000"),
        ("$1.5K", "1500"),
        ("2 M", "2000000"),
        ("3bn", "3000000000"),
        ("4k ", "4000"),
        ("5 thousand", "5000"),  # a magnitude word, in any case
        ("2.5 Million", "2500000"),
        ("1 billion", "1000000000"),
        ("5 trillion", "5000000000000"),
        ("5 thousand tokens", "5000"),  # a magnitude word or suffix, then a unit
        ("5k tokens", "5000"),
        ("$2 Million USD", "2000000"),
        ("3 million-token", "3000000"),  # a hyphenated unit: the word before the hyphen
        ("5k-token", "5000"),  # a suffix hyphened to a unit: no name's hyphen ("3.5-turbo")
        ("2M-token", "2000000"),
    ],
)
def test_a_cost_with_a_multiplier_suffix_is_told_to_be_written_in_full(
    tmp_path: Path, cell: str, full: str
) -> None:
    """A cost with a thousands or billions suffix ("5k", "7B") or word ("5 thousand") was
    told to "write the number alone, without a currency sign or unit: 5", a cost 1000 (or
    10^9) times too small; so were "5 trillion" and a multiplier with a unit after it ("5
    thousand tokens", "3 million-token"); "5k-token" was read as a name ("3.5-turbo") and got
    no hint at all."""
    path = tmp_path / "long.csv"
    assert _cost_cell_refusal(path, cell) == (
        f"{path}, line 2: cost must be a finite number, got {cell!r} (write the number alone "
        f"and in full, without a currency sign, unit or multiplier: {full})"
    )


@pytest.mark.parametrize(
    "name",
    [
        *("m1", "gpt4", "gpt-4", "gpt-4o", "claude-3-haiku", "ChatGLM3", "3.5-turbo", "4o-mini"),
        # in capitals: three letters that are no currency code; GPT-4o's "o" (omni) alone
        *("GPT4", "GPT-4", "GLM4", "MPT7B", "GPT3.5", "4o", "4O mini"),
    ],
)
def test_a_name_with_a_digit_in_a_number_cell_is_not_told_to_be_written_as_that_digit(
    tmp_path: Path, name: str
) -> None:
    """A worker's name in a cost or reward cell (columns shifted by one, or a header read as a
    row: RouterBench's model 'm1') was refused with the advice to "write the number alone,
    without a currency sign or unit: 1", as if 'm' were a currency sign; a letter right before
    the digits makes them part of a name, and so does a hyphen in the word right after them
    ("3.5-turbo", "4o-mini": not a unit to drop)."""
    path = tmp_path / "long.csv"
    path.write_text(f"prompt,worker,reward,cost\np1,w1,1,{name}\n", encoding="utf-8")
    with pytest.raises(RecordFileError) as raised:
        import_long(path)
    assert str(raised.value) == f"{path}, line 2: cost must be a finite number, got {name!r}"
    path.write_text(f"prompt,worker,reward\np1,w1,{name}\n", encoding="utf-8")
    with pytest.raises(RecordFileError) as raised:
        import_long(path)
    assert str(raised.value) == f"{path}, line 2: reward must be a finite number, got {name!r}"


def test_long_format_reads_column_names_in_any_case_and_spacing(tmp_path: Path, caplog) -> None:
    """A header written ` Cost` or `TASK` (spaces after commas, a spreadsheet's capitals) is
    the cost and task column, not a column to skip: their values were dropped silently."""
    path = tmp_path / "long.csv"
    path.write_text(
        "Prompt, Worker, Reward, Cost, TASK, notes\np1,w1,1,0.1,t,x\np1,w2,0,0.2,t,y\n",
        encoding="utf-8",
    )
    with caplog.at_level(logging.WARNING):
        (result,) = import_long(path)
    assert (result.rewards, result.costs, result.task) == ([1.0, 0.0], [0.1, 0.2], "t")
    assert "column(s) [' notes'] are not read" in caplog.text
    caplog.clear()
    path.write_text("prompt,worker,reward,\np1,w1,1,\np1,w2,0,\n", encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        import_long(path)
    assert "not read" not in caplog.text  # a header's trailing comma names no column
    rows = [{key.upper(): value for key, value in row.items()} for row in long_rows()]
    assert import_long(write_jsonl(tmp_path / "long.jsonl", rows))[0].costs == [0.1, 0.2]
    path.write_text("prompt,worker,reward,cost,Cost\np1,w1,1,0.1,0.2\n", encoding="utf-8")
    with pytest.raises(RecordFileError, match=r"\['cost'\] are named more than once"):
        import_long(path)
    path.write_text("prompt;worker;reward\np1;w1;1\n", encoding="utf-8")
    with pytest.raises(RecordFileError, match=r"the header is one column: .* separated by commas"):
        import_long(path)


@pytest.mark.parametrize("suffix", [".csv", ".csv.gz"])
def test_a_header_of_quoted_names_between_semicolons_says_to_save_with_commas(
    tmp_path: Path, suffix: str
) -> None:
    """R's write.csv2 quotes each name, '"prompt";"worker";"reward"', which failed as "',' expected
    after '\"'" with the advice to check the quoting, not a word of the separator."""
    texts = {1: '"prompt";"worker";"reward"\n"p1";"w1";1\n', 3: '\nsep=;\n"prompt";"worker"\n'}
    for line, text in texts.items():
        path = tmp_path / f"long{suffix}"
        path.write_bytes(gzip.compress(text.encode()) if suffix == ".csv.gz" else text.encode())
        with pytest.raises(RecordFileError) as raised:
            import_long(path)
        message = str(raised.value)
        assert f"long{suffix}, line {line}: not readable as CSV" in message  # the header's line
        assert message.endswith(
            "the header is one column: the long format's CSV is separated by commas (save it "
            "again as CSV with commas)"
        )
    path = tmp_path / "other.csv"  # another fault: the advice on quoting
    path.write_text('prompt,worker,reward\n"p1"x,w1,1\n', encoding="utf-8")
    with pytest.raises(RecordFileError, match=r"line 2: not readable as CSV .*check the quoting"):
        import_long(path)


def test_long_format_row_longer_than_the_header_is_an_error(tmp_path: Path) -> None:
    """An unquoted comma in the last column shifted the row and its rest was dropped."""
    path = tmp_path / "long.csv"
    path.write_text(
        "prompt,worker,reward,task\np1,w1,1,maths, algebra\np1,w2,0,maths\n", encoding="utf-8"
    )
    with pytest.raises(
        RecordFileError,
        match=r"long\.csv, line 2: 5 fields but the header has 4 \(\[' algebra'\] are left",
    ):
        import_long(path)
    path.write_text("prompt,worker,reward,task\np1,w1,1,t,,\np1,w2,0,t, , \t\n", encoding="utf-8")
    assert import_long(path)[0].task == "t"  # empty or blank trailing cells, as spreadsheets write


def test_long_format_reads_true_and_false_rewards(tmp_path: Path) -> None:
    path = tmp_path / "long.csv"
    path.write_text("prompt,worker,reward\np1,w1,True\np1,w2, FALSE\n", encoding="utf-8")
    assert import_long(path)[0].rewards == [1.0, 0.0]


def test_long_format_reads_a_json_list_of_rows(tmp_path: Path) -> None:
    """A .json file holding one list of rows (what json.dump of a list writes) was refused
    as bad JSON on line 1, or as "expected a JSON object, got list"."""
    path = tmp_path / "long.json"
    # with a BOM, as some editors save; a line break and spaces before the list too
    for text in (
        json.dumps(long_rows(), indent=2),
        json.dumps(long_rows()),
        "\n  [\n" + json.dumps(long_rows(), indent=2)[1:],
    ):
        path.write_text(text, encoding="utf-8-sig")
        assert import_long(path) == import_long(write_jsonl(tmp_path / "long.jsonl", long_rows()))
    path.write_text(json.dumps([*long_rows(), "p3"]), encoding="utf-8")
    with pytest.raises(RecordFileError, match=r"long\.json, item 5: expected an object"):
        import_long(path)
    path.write_text(json.dumps(long_rows())[:-1], encoding="utf-8")
    with pytest.raises(RecordFileError, match=r"long\.json: not valid JSON at line 1"):
        import_long(path)


def test_long_format_strips_spaces_around_worker_task_and_id(tmp_path: Path) -> None:
    """A CSV written with a space after each comma made the workers ' w1' and ' w2', ids no
    pool names, and the task ' t'."""
    path = tmp_path / "long.csv"
    path.write_text(
        "prompt, worker, reward, task, id\np1, w1, 1, t, q1\np1, w2 , 0, t ,q1\n",
        encoding="utf-8",
    )
    (result,) = import_long(path)
    assert (result.worker_ids, result.task, result.id) == (["w1", "w2"], "t", "q1")
    assert result.prompt == "p1"


def test_long_format_holds_each_prompt_once_in_memory(tmp_path: Path) -> None:
    """A long file of 10 workers needed about 7x its size in memory while importing (each
    prompt held once per worker, in a pydantic object per row): a 2 GB file, 14 GB."""
    path = tmp_path / "long.csv"
    with path.open("w", encoding="utf-8", newline="") as stream:
        writer = csv.writer(stream)
        writer.writerow(["prompt", "worker", "reward", "cost", "task"])
        for index in range(1000):
            prompt = f"prompt {index:05d} " + "words " * 40
            writer.writerows([prompt, f"w{k}", (index + k) % 2, 0.001 * k, "t"] for k in range(10))
    records, peak = peak_memory_of(lambda: import_long(path))
    assert len(records) == 1000 and records[0].worker_ids == [f"w{k}" for k in range(10)]
    assert peak < 3.5 * path.stat().st_size


def test_long_format_reads_a_prompt_longer_than_128_kib(tmp_path: Path) -> None:
    """A valid CSV holding a 200 KB prompt was refused as "not readable as CSV (field larger
    than field limit (131072)); check the quoting there", though its quoting was right."""
    prompt = "long document. " * 14_000
    rows = [
        {"prompt": prompt, "worker": "w1", "reward": 1},
        {"prompt": prompt, "worker": "w2", "reward": 0},
    ]
    (result,) = import_long(write_long_csv(tmp_path / "long.csv", rows))
    assert result.prompt == prompt
    assert csv.field_size_limit() == 131072  # the csv module's limit is left as it was


def test_long_format_malformed_jsonl_line(tmp_path: Path) -> None:
    path = tmp_path / "long.jsonl"
    path.write_text(json.dumps(long_rows()[0]) + '\n{"prompt": "p1",\n', encoding="utf-8")
    with pytest.raises(RecordFileError, match=r"long\.jsonl, line 2: not valid JSON"):
        import_long(path)
    path.write_text('{"prompt": "p1",\n' + json.dumps(long_rows()[0]) + "\n", encoding="utf-8")
    with pytest.raises(RecordFileError, match=r"long\.jsonl, line 1: not valid JSON \("):
        import_long(path)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("TRAIN", "train"), ("Training", "train"), (" Test ", "test"), ("testing", "test"),
        ("val", "validation"), ("valid", "validation"), ("Dev", "validation"),
        ("VALIDATION", "validation"),
    ],
)  # fmt: skip
def test_a_split_column_takes_the_usual_names_of_splits_in_any_case(
    tmp_path: Path, given: str, expected: str
) -> None:
    """`dev`, `val` and `Test` (what benchmarks and spreadsheets call their splits) were refused
    as unknown splits, so users had to edit the whole column."""
    path = tmp_path / "long.csv"
    path.write_text(f"prompt,worker,reward,split\nq,a,1,{given}\nq,b,0,{given}\n")
    assert [r.split for r in import_long(path, use_split_column=True)] == [expected]


def test_long_format_split_column(tmp_path: Path) -> None:
    rows = [{**row, "split": "test" if row["prompt"] == "p1" else "train"} for row in long_rows()]
    path = write_jsonl(tmp_path / "long.jsonl", rows)
    assert [r.split for r in import_long(path, use_split_column=True)] == ["test", "train"]
    assert [r.split for r in import_long(path)] == [standard_split("p1"), standard_split("p2")]
    rows[2]["split"] = "holdout"
    write_jsonl(path, rows)
    with pytest.raises(SplitError, match=r"line 3: unknown split 'holdout'; allowed values: train"):
        import_long(path, use_split_column=True)
    without = write_jsonl(tmp_path / "without.jsonl", long_rows())
    with pytest.raises(SplitError, match="line 1: no split value") as raised:
        import_long(without, use_split_column=True)
    assert "import without --option split_column=... / use_split_column=true" in str(raised.value)
    rows[2]["split"] = "test"
    write_jsonl(path, rows)
    with pytest.raises(RecordFileError, match="prompt 'p2' has different split values"):
        import_long(path, use_split_column=True)


@pytest.mark.parametrize("column", ["task", "id"])
def test_a_prompts_rows_with_different_tasks_or_ids_are_refused(
    tmp_path: Path, column: str
) -> None:
    """A prompt's rows must agree on its task and id: one record has one of each, and taking
    the first row's would file the prompt under a task (or an id) that its other rows deny."""
    rows = [{**row, "id": row["prompt"]} for row in long_rows()]
    rows[3][column] = "other"  # p2's second row
    path = write_jsonl(tmp_path / "long.jsonl", rows)
    with pytest.raises(RecordFileError) as raised:
        import_long(path)
    expected = ["other", "u"] if column == "task" else ["other", "p2"]
    assert str(raised.value) == (
        f"{path}, line 3: prompt 'p2' has different {column} values across its rows: "
        f"{expected}; give one {column} per prompt"
    )


def test_long_format_csv_that_repeats_its_header_names_the_line(tmp_path: Path) -> None:
    """Two CSV files joined with `cat` hold the second header as a row, which was refused as
    "reward must be a finite number, got 'reward'"."""
    first, second = long_rows()[:2], long_rows()[2:]
    text = pd.DataFrame(first).to_csv(index=False) + pd.DataFrame(second).to_csv(index=False)
    path = tmp_path / "long.csv"
    path.write_text(text.replace("prompt,", " Prompt ,", 2), encoding="utf-8")
    with pytest.raises(RecordFileError) as raised:
        import_long(path)
    assert str(raised.value) == (
        f"{path}, line 4: repeats the header line (files joined with `cat`?); delete that line, "
        "or join the files keeping one header (e.g. pandas.concat, or `tail -n +2` for all "
        "files after the first)"
    )
    lines = text.splitlines(keepends=True)
    path.write_text("".join(lines[:3] + lines[4:]), encoding="utf-8")
    assert import_long(path) == import_long(write_long_csv(tmp_path / "one.csv", long_rows()))


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"prompt,worker,reward\np1,w1,1\nh\xe9,w1,1\n", r"long\.csv, line 3: not UTF-8 text"),
        (b'prompt,worker,reward\np1,w1,1\n"open,w1,1\np2,w1,1\n',
         r"long\.csv, line 3: not readable as CSV \(unexpected end of data\); check the quoting"),
    ],
)  # fmt: skip
def test_long_format_unreadable_csv_names_file_and_line(
    tmp_path: Path, content: bytes, expected: str
) -> None:
    path = tmp_path / "long.csv"
    path.write_bytes(content)
    with pytest.raises(RecordFileError, match=expected):
        import_long(path)


@pytest.mark.parametrize("without", [2, 3])  # p2's first worker by name (w1), or its last
def test_long_format_partial_costs_are_an_error(tmp_path: Path, without: int) -> None:
    rows = long_rows()
    del rows[without]["cost"]
    path = write_jsonl(tmp_path / "long.jsonl", rows)
    with pytest.raises(RecordFileError, match=r"prompt 'p2' has a cost for some workers"):
        import_long(path)


def test_a_cost_of_zero_is_a_cost(tmp_path: Path) -> None:
    """A free worker (a local model) costs 0: its prompts keep their costs, and a 0 is not
    taken for no cost."""
    rows = [{**row, "cost": 0} if row["worker"] == "w1" else row for row in long_rows()]
    records = import_long(write_jsonl(tmp_path / "long.jsonl", rows))
    assert [record.costs for record in records] == [[0.0, 0.2], [0.0, 0.3]]


def test_long_format_chat_prompts(tmp_path: Path) -> None:
    messages = [{"role": "user", "content": "hi"}]
    rows = [
        {"prompt": messages, "worker": "w1", "reward": 1},
        {"prompt": messages, "worker": "w2", "reward": 0},
    ]
    (result,) = import_long(write_jsonl(tmp_path / "long.jsonl", rows))
    assert result.prompt_text == "user: hi"


def _prompt_refusal(path: Path, prompt: object) -> str:
    """The error importing a JSON Lines file at `path` whose one row has `prompt`."""
    write_jsonl(path, [{"prompt": prompt, "worker": "w1", "reward": 1}])
    with pytest.raises(RecordFileError) as raised:
        import_long(path)
    return str(raised.value)


def test_a_prompt_given_as_one_message_object_says_to_give_a_list(tmp_path: Path) -> None:
    """A prompt written as one message object ({"role": "user", "content": "hi"}) was refused
    as "prompt must be a non-empty string, got {...}", as if chat prompts were not read."""
    path = tmp_path / "long.jsonl"
    assert _prompt_refusal(path, {"role": "user", "content": "hi"}) == (
        f"{path}, line 1: prompt is one message object (role 'user'), not a list of messages; "
        "a chat prompt is a list, even of one message: put it in [ ]"
    )


def test_a_prompt_object_without_a_role_is_refused_saying_what_a_prompt_is(
    tmp_path: Path,
) -> None:
    """Only an object with a role is told to be put in a list: another ({"text": "hi"}) is
    refused as no text, saying what a prompt may be (not as a message object of no role, a
    KeyError); it was refused with only "prompt must be a non-empty string, got {...}"."""
    path = tmp_path / "long.jsonl"
    assert _prompt_refusal(path, {"text": "hi"}) == (
        f"{path}, line 1: prompt must be a non-empty string, got {{'text': 'hi'}}; a prompt is "
        'a text, or a list of chat messages ({"role": ..., "content": ...}): write the '
        "object's text as the prompt"
    )


def test_a_csv_prompt_cell_holding_chat_messages_is_read_as_them(tmp_path: Path) -> None:
    """A CSV has no lists, so chat prompts reach it as text: JSON (json.dumps) or Python's
    repr (pandas' to_csv of a column of message lists). They were read as the text, brackets
    and quotes included, so the router learnt from prompts unlike the messages clients send,
    and records other than the same rows' JSON Lines gave."""
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": 'Say "hi",\nthen stop.'},
    ]
    rows = [
        {"prompt": messages, "worker": "w1", "reward": 1},
        {"prompt": messages, "worker": "w2", "reward": 0},
        {"prompt": "['not', 'messages']", "worker": "w1", "reward": 0},
        {"prompt": "['not', 'messages']", "worker": "w2", "reward": 1},
        # objects without a role: a prompt of data (JSON rows to sort), text as written
        {"prompt": '[{"name": "b"}, {"name": "a"}]', "worker": "w1", "reward": 1},
        {"prompt": '[{"name": "b"}, {"name": "a"}]', "worker": "w2", "reward": 1},
    ]
    expected = import_long(write_jsonl(tmp_path / "long.jsonl", rows))
    assert [record.prompt for record in expected][1:] == [
        "['not', 'messages']",
        '[{"name": "b"}, {"name": "a"}]',
    ]
    for name, as_text in [("json.csv", json.dumps), ("repr.csv", repr)]:
        table = pd.DataFrame(rows)
        table["prompt"] = [p if isinstance(p, str) else as_text(p) for p in table["prompt"]]
        table.to_csv(tmp_path / name, index=False)
        assert import_long(tmp_path / name) == expected
        write_records(tmp_path / f"{name}.records.jsonl", import_long(tmp_path / name))
        assert read_records(tmp_path / f"{name}.records.jsonl") == expected
    bad = tmp_path / "bad.csv"
    bad.write_text(
        'prompt,worker,reward\n"[{""role"": ""wizard"", ""content"": ""hi""}]",w1,1\n',
        encoding="utf-8",
    )
    with pytest.raises(RecordFileError, match=r"bad\.csv, line 2: not a valid record: .*role"):
        import_long(bad)


def test_excels_separator_line_before_the_header_is_skipped(tmp_path: Path) -> None:
    """Excel's CSV may start with "sep=," (a line telling Excel the separator), which was
    taken for the header: "missing column(s) ['prompt', 'worker', 'reward'] in the header
    ['sep=', '']", with no word of the line to delete."""
    path = tmp_path / "long.csv"
    path.write_text("\ufeffsep=,\r\nprompt,worker,reward\r\nq,a,1\r\nq,b,0\r\n", encoding="utf-8")
    assert [(r.prompt, r.worker_ids, r.rewards) for r in import_long(path)] == [
        ("q", ["a", "b"], [1.0, 0.0])
    ]
    path.write_text("sep=,\nprompt,worker,reward\nq,a,1\nq,b,x\n")
    with pytest.raises(RecordFileError, match=r"long\.csv, line 4: reward must be"):
        import_long(path)  # lines are still counted in the file
    path.write_text("SEP=;\nprompt;worker;reward\nq;a;1\n")  # in any case: the header follows
    with pytest.raises(
        RecordFileError,
        match=r"in the header \['prompt;worker;reward'\]; the header is one column: .* commas",
    ):
        import_long(path)


def test_a_json_list_with_a_single_backslash_says_to_double_it(tmp_path: Path) -> None:
    """A .json list of rows holding a Windows path typed by hand ("C:\\data") was refused as
    "not valid JSON at line 1, column 16: Invalid \\escape", without saying what to write."""
    path = tmp_path / "rows.json"
    path.write_text('[{"prompt": "C:\\data", "worker": "a", "reward": 1}]', encoding="utf-8")
    with pytest.raises(RecordFileError) as raised:
        import_long(path)
    assert str(raised.value) == (
        f"{path}: not valid JSON at line 1, column 16: Invalid \\escape; JSON writes a "
        'backslash twice, as in "C:\\\\Users" or "\\\\d+": double each backslash'
    )


def test_a_folder_given_to_the_long_importer_names_the_files_it_could_read(
    tmp_path: Path,
) -> None:
    """A folder was refused as "expected a .csv (...), .jsonl, .ndjson or .json file", as if
    it were a file of another kind."""
    folder = tmp_path / "rewards"
    folder.mkdir()
    # a compressed JSON Lines file is refused by the long format, so it is not named; a name
    # is read by its last suffix (e.2024.csv is a CSV, f.csv.txt is not)
    for name in (
        "b.jsonl",
        "a.csv",
        "notes.txt",
        "c.jsonl.gz",
        "d.csv.gz",
        "e.2024.csv",
        "f.csv.txt",
    ):
        (folder / name).write_text("", encoding="utf-8")
    with pytest.raises(RecordFileError) as raised:
        import_long(folder)
    assert str(raised.value) == (
        f"{folder}: is a folder; the long format reads one file: give its path, e.g. "
        f"{folder / 'a.csv'} (the folder holds a.csv, b.jsonl, d.csv.gz, e.2024.csv)"
    )


def test_a_row_with_one_list_valued_cell_is_a_bad_row_not_a_table_by_columns(
    tmp_path: Path,
) -> None:
    """A table by columns maps both worker and reward to all their values; one row whose
    worker alone is a list (two workers typed into one cell) is that row's error, not a file
    written by columns."""
    rows = [{"prompt": "p", "worker": ["a", "b"], "reward": 1}]
    path = write_jsonl(tmp_path / "long.jsonl", rows)
    with pytest.raises(RecordFileError) as raised:
        import_long(path)
    assert str(raised.value) == (
        f"{path}, line 1: worker must be a non-empty string, got ['a', 'b']"
    )


def test_a_json_file_that_is_no_json_gets_the_json_files_error(tmp_path: Path) -> None:
    """A .json holds one JSON value over any lines: one that is no JSON is told where and
    why (a comma before its closing brace), not read again as JSON Lines and called
    pretty-printed JSON Lines at its line 1."""
    path = tmp_path / "long.json"
    path.write_text('{\n  "prompt": "p",\n  "worker": "a",\n  "reward": 1,\n}\n', encoding="utf-8")
    with pytest.raises(RecordFileError) as raised:
        import_long(path)
    message = str(raised.value)
    assert message.startswith(f"{path}: not valid JSON at line 5, column 1"), message
    assert "a comma after the last item of an object or list" in message, message


def test_long_format_reads_percentages_as_fractions(tmp_path: Path) -> None:
    """A reward column in a spreadsheet's percentage format (`85%`) was refused as not a
    number; it is the fraction it shows."""
    path = tmp_path / "long.csv"
    path.write_text("prompt,worker,reward\nq,a,85% \nq,b, 2.5 %\nr,a,0.5\nr,b,0\n")
    assert [r.rewards for r in import_long(path)] == [[0.85, 0.025], [0.5, 0.0]]
    path.write_text("prompt,worker,reward\nq,a,85%\nq,b,x%\n")
    with pytest.raises(RecordFileError, match=r"line 3: reward must be a finite number, got 'x%'"):
        import_long(path)


def test_a_typographic_minus_sign_is_read_as_a_minus(tmp_path: Path) -> None:
    """A table copied from a web page or a document writes "−" (U+2212) for minus:
    "−0.5" was refused, advising to "write the number alone, without a currency sign or
    unit: 0.5", which drops the sign. It is -0.5, as the number grader reads it."""
    path = tmp_path / "long.csv"
    path.write_text("prompt,worker,reward\nq,a,\u22120.5\nq,b,1\n", encoding="utf-8")
    assert [r.rewards for r in import_long(path)] == [[-0.5, 1.0]]
    path.write_text("prompt,worker,reward\nq,a,\u221225%\nq,b,50%\n", encoding="utf-8")
    assert [r.rewards for r in import_long(path)] == [[-0.25, 0.5]]
    path.write_text("prompt,worker,reward,cost\nq,a,1,\u22120.01\nq,b,0,0\n", encoding="utf-8")
    with pytest.raises(RecordFileError, match=r"line 2: cost must be at least 0.0, got -0.01$"):
        import_long(path)


def test_a_negative_number_with_a_decimal_comma_says_to_write_a_decimal_point(
    tmp_path: Path,
) -> None:
    path = tmp_path / "long.csv"
    path.write_text('prompt,worker,reward\nq,a,"-0,5"\nq,b,1\n', encoding="utf-8")
    with pytest.raises(RecordFileError) as raised:
        import_long(path)
    assert str(raised.value) == (
        f"{path}, line 2: reward must be a finite number, got '-0,5' (write numbers with a "
        "decimal point and no thousands separator: 0.5, 1000)"
    )


def test_a_percentage_with_a_decimal_comma_says_to_write_a_decimal_point(tmp_path: Path) -> None:
    """A spreadsheet in a decimal-comma locale writes "85,5%": it was refused as "reward must
    be a finite number, got '85,5%'" alone, where a plain "0,5" is told how to write it."""
    path = tmp_path / "long.csv"
    path.write_text('prompt,worker,reward\nq,a,"85,5%"\nq,b,0%\n', encoding="utf-8")
    with pytest.raises(RecordFileError) as raised:
        import_long(path)
    assert str(raised.value) == (
        f"{path}, line 2: reward must be a finite number, got '85,5%' (write numbers with a "
        "decimal point and no thousands separator: 0.5, 1000)"
    )


def test_long_format_refuses_percentages_beside_plain_numbers_above_one(tmp_path: Path) -> None:
    """`85%` on one row and `85` on another were read as 0.85 and 85: two scales silently."""
    path = tmp_path / "long.csv"
    path.write_text("prompt,worker,reward\nq,a,85%\nq,b,0\nr,a,85\nr,b,0\ns,a,50%\ns,b,0\n")
    with pytest.raises(RecordFileError) as raised:
        import_long(path)
    assert str(raised.value).startswith(
        f"{path}: rewards are written both as percentages ({path}, line 2) and as plain numbers "
        f"outside 0-1 ({path}, line 4: 85), so they are on two scales"
    )


def test_a_percentage_above_100_is_warned_of_as_a_plain_reward_above_1_is(
    tmp_path: Path, caplog
) -> None:
    """A reward of "120%" was read as 1.2 without a word, where a plain 1.2 is warned of:
    the graders score 0-1, so it is a typo or another measure (a relative gain)."""
    path = tmp_path / "long.csv"
    path.write_text("prompt,worker,reward\nq,a,50%\nq,b,120%\nr,a,-5%\nr,b,0%\n")
    with caplog.at_level(logging.WARNING):
        assert [r.rewards for r in import_long(path)] == [[0.5, 1.2], [-0.05, 0.0]]
    assert f"some lie outside 0-1 ({path}, line 3: 1.2)" in caplog.text, caplog.text
    assert "a percentage is read as a fraction (120% as 1.2)" in caplog.text, caplog.text
    caplog.clear()
    path.write_text("prompt,worker,reward\nq,a,100%\nq,b,0%\n")
    with caplog.at_level(logging.WARNING):
        assert [r.rewards for r in import_long(path)] == [[1.0, 0.0]]
    assert "outside 0-1" not in caplog.text


def test_long_format_warns_of_rewards_outside_zero_to_one(tmp_path: Path, caplog) -> None:
    """A 0-100 column was read as is without a word, training on near one-hot targets."""
    path = tmp_path / "long.csv"
    path.write_text("prompt,worker,reward\nq,a,85\nq,b,40\n")
    with caplog.at_level(logging.WARNING):
        assert [r.rewards for r in import_long(path)] == [[85.0, 40.0]]
    assert "some lie outside 0-1 (" in caplog.text and "line 2: 85)" in caplog.text
    caplog.clear()
    path.write_text("prompt,worker,reward\nq,a,1\nq,b,-1\n")  # a penalty, below the scale
    with caplog.at_level(logging.WARNING):
        assert [r.rewards for r in import_long(path)] == [[1.0, -1.0]]
    assert "some lie outside 0-1 (" in caplog.text and "line 3: -1)" in caplog.text
    caplog.clear()
    path.write_text("prompt,worker,reward\nq,a,1\nq,b,0.4\n")
    with caplog.at_level(logging.WARNING):
        import_long(path)
    assert "outside 0-1" not in caplog.text


@pytest.mark.parametrize("reward", ["NaN", "NA", "null", "n/a"])
def test_a_long_reward_written_as_nan_or_na_points_to_on_missing(
    tmp_path: Path, reward: str
) -> None:
    """A reward cell of NaN or NA (pandas' na_rep, a spreadsheet's #N/A export) failed with
    'reward must be a finite number', never naming the option that drops such prompts, unlike
    an empty cell."""
    path = tmp_path / "long.csv"
    path.write_text(f"prompt,worker,reward\nq,a,1\nq,b,{reward}\nr,a,1\nr,b,0\n")
    with pytest.raises(RecordFileError, match=r"line 3: no value for \['reward'\]") as raised:
        import_long(path)
    assert str(raised.value).endswith(
        f"(the reward is {reward!r}); fill in the cell or delete the row (or pass --option "
        "on_missing=drop)"
    )
    assert [r.prompt for r in import_long(path, on_missing="drop")] == ["r"]


@pytest.mark.parametrize("suffix", [".json", ".jsonl"])
@pytest.mark.parametrize("indent", [None, 2])
def test_a_table_written_by_columns_says_to_write_it_by_rows(
    tmp_path: Path, indent: int | None, suffix: str
) -> None:
    """pandas' DataFrame.to_json writes {column: {index: value}} by default: the import said
    "prompt must be a non-empty string, got {'0': 'q', ...}", or for an indented file "line
    1: not valid JSON; fix or delete that line", advice that would damage a valid file. A
    .jsonl written by to_json(orient='records') without lines=True (one list) was refused as
    "line 1: expected a JSON object, got list"."""
    table = pd.DataFrame({"prompt": ["q", "q"], "worker": ["a", "b"], "reward": [1, 0]})
    path = tmp_path / f"long{suffix}"
    table.to_json(path, indent=indent)
    with pytest.raises(RecordFileError, match="holds the table by columns") as raised:
        import_long(path)
    assert "to_json(path, orient='records')" in str(raised.value)
    table.to_json(path, orient="records", indent=indent)
    assert [r.rewards for r in import_long(path)] == [[1.0, 0.0]]


@pytest.mark.parametrize("orient", ["split", "table", "index", "values"])
def test_a_table_written_in_another_pandas_layout_says_to_write_it_by_rows(
    tmp_path: Path, orient: str
) -> None:
    """to_json(orient='split' / 'table' / 'index') was refused as a row without prompt,
    worker and reward whose "keys are columns, index, data ...: rename the keys", advice that
    fits no such file; orient='values' as "expected an object ..., got list"."""
    table = pd.DataFrame({"prompt": ["q", "q"], "worker": ["a", "b"], "reward": [1, 0]})
    path = tmp_path / "long.json"
    table.to_json(path, orient=orient)
    with pytest.raises(RecordFileError) as raised:
        import_long(path)
    layout = (
        "expected an object with prompt, worker and reward, got list (pandas' "
        "orient='values' writes rows without their column names)"
        if orient == "values"
        else f"holds the whole table in pandas' orient='{orient}' layout, as "
        f"DataFrame.to_json(orient='{orient}') writes"
    )
    where = f"{path}, item 1" if orient == "values" else f"{path}, line 1"
    assert str(raised.value) == (
        f"{where}: {layout}; the long format takes one object per row: write it with "
        "to_json(path, orient='records') for a .json, or to_json(path, orient='records', "
        "lines=True) for a .jsonl"
    )


@pytest.mark.parametrize("indent", [None, 2])
def test_rows_wrapped_in_an_object_under_a_key_say_to_write_the_list_alone(
    tmp_path: Path, indent: int | None
) -> None:
    """An export holding its rows in a list under a key ({"data": [...]}) was refused as a
    row without prompt, worker and reward whose "keys are version, data ...: rename the
    keys", advice that fits no such file."""
    path = tmp_path / "long.json"
    path.write_text(json.dumps({"version": 1, "data": long_rows()}, indent=indent))
    with pytest.raises(RecordFileError) as raised:
        import_long(path)
    where = f"{path}, line 1" if indent is None else str(path)
    assert str(raised.value) == (
        f"{where}: holds the rows in a list under its key 'data' (an export wrapping them), not "
        "a row; the long format reads the rows themselves: write that list alone to a .json "
        "file, or one row object a line to a .jsonl file"
    )
    path.write_text(json.dumps(long_rows(), indent=indent))
    assert len(import_long(path)) == 2


def test_a_json_file_holding_one_indented_row_object_is_read(tmp_path: Path) -> None:
    path = tmp_path / "long.json"
    path.write_text(json.dumps({"prompt": "q", "worker": "a", "reward": 1}, indent=2))
    assert [r.rewards for r in import_long(path)] == [[1.0]]


def test_a_prompt_differing_only_in_spaces_is_named_in_the_missing_worker_error(
    tmp_path: Path,
) -> None:
    """A trailing space in one cell made two prompts, and the error said "prompt 'q' has no
    row for worker(s) ['b']" although the file has a row q,b: the shortened prompt hid why."""
    path = tmp_path / "long.csv"
    path.write_text('prompt,worker,reward\nq,a,1\n"q ",b,0\n')
    with pytest.raises(RecordFileError, match=r"line 2: prompt 'q' has no row for") as raised:
        import_long(path)
    assert "line 3 has the prompt 'q ', which differs from 'q' only in spaces" in str(raised.value)


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        (",a,1\n,b,0\n", "line 2: no value for ['prompt']; fill in the cell or delete the row"),
        ("q,,1\nq,b,0\n", "line 2: no value for ['worker']; fill in the cell or delete the row"),
        ('" ",a,1\n" ",b,0\n', "line 2: prompt is empty (' '); fill it in or delete the row"),
    ],
)
def test_long_format_empty_prompt_or_worker_says_what_to_do(
    tmp_path: Path, rows: str, expected: str
) -> None:
    """A spreadsheet row with an empty prompt or worker cell was refused as "no value for
    ['prompt']" (or "prompt must be a non-empty string, got ' '"), saying nothing of what to
    do about it."""
    path = tmp_path / "long.csv"
    path.write_text("prompt,worker,reward\n" + rows, encoding="utf-8")
    with pytest.raises(RecordFileError) as raised:
        import_long(path)
    assert str(raised.value) == f"{path}, {expected}"


def test_long_format_csv_starting_with_blank_lines_is_read(tmp_path: Path) -> None:
    """A CSV whose header follows blank lines (a script that printed an empty line first,
    a spreadsheet's empty top row) was refused as "missing column(s) [...] in the header
    []", as an empty file was; pandas.read_csv reads it."""
    path = tmp_path / "long.csv"
    path.write_text("\n,,\nprompt,worker,reward\nq,a,1\nq,b,0\n", encoding="utf-8")
    [record] = import_long(path)
    assert (record.prompt, record.worker_ids, record.rewards) == ("q", ["a", "b"], [1.0, 0.0])
    path.write_text("prompt,worker,reward\nq,a,1\nq,b,oops\n", encoding="utf-8")
    with pytest.raises(RecordFileError, match=r"long\.csv, line 3: reward must be"):
        import_long(path)  # the line numbers are the file's own
    path.write_text("\n\nprompt,worker,reward\nq,a,1\nq,b,oops\n", encoding="utf-8")
    with pytest.raises(RecordFileError, match=r"long\.csv, line 5: reward must be"):
        import_long(path)
    path.write_text("\n\n", encoding="utf-8")
    with pytest.raises(RecordFileError) as raised:
        import_long(path)
    assert str(raised.value) == (
        f"{path}: the file is empty; a long-format CSV needs a header line (prompt, worker, "
        "reward) and a row per prompt and worker"
    )


def test_a_number_with_an_underscore_is_refused_naming_its_row_and_field(tmp_path: Path) -> None:
    """Python's float() reads `1_0` as 10: a reward typed `1_0` (1.0 meant) was imported as
    a reward of ten, and a cost `0_5` as 5; both are refused, naming the line and field."""
    path = tmp_path / "long.csv"
    path.write_text("prompt,worker,reward\np1,w1,1\np1,w2,1_0\n", encoding="utf-8")
    with pytest.raises(RecordFileError) as raised:
        import_long(path)
    assert str(raised.value).endswith(
        "long.csv, line 3: reward must be a finite number, got '1_0' (write the number "
        "without underscores: 10, or 1.0 if a decimal point was meant)"
    )
    path.write_text("prompt,worker,reward,cost\np1,w1,1,1_000.5\n", encoding="utf-8")
    with pytest.raises(RecordFileError) as raised:
        import_long(path)
    assert str(raised.value).endswith(
        "line 2: cost must be a finite number, got '1_000.5' (write the number without "
        "underscores: 1000.5)"
    )
    path.write_text("prompt,worker,reward\np1,w1,8_5%\n", encoding="utf-8")
    with pytest.raises(RecordFileError, match=r"line 2: reward must be a finite number"):
        import_long(path)
    # an exponent's underscore stands for no decimal point, a word is no number, and spaces
    # around the cell are no part of the hint's number
    for cell, hint in [
        ("1e_5", " (write the number without underscores: 1e5)"),
        ("n_a", ""),
        (
            " 1_0",
            " (write the number without underscores: 10, or 1.0 if a decimal point was meant)",
        ),
    ]:
        path.write_text(f'prompt,worker,reward\np1,w1,"{cell}"\n', encoding="utf-8")
        with pytest.raises(RecordFileError) as raised:
            import_long(path)
        assert str(raised.value).endswith(f"got {cell!r}{hint}")


def test_a_whole_number_id_stored_as_a_float_is_the_integers_id(tmp_path: Path) -> None:
    """pandas stores an integer id column with a gap as floats, and to_json writes them as 1.0:
    the id became "1.0", not the "1" the same file without the gap gives. A whole float is now
    the integer's id; a fraction and an id written as text stay as written."""
    rows = long_rows()
    for row, row_id in zip(rows, [1.0, 1.0, 2.5, 2.5], strict=True):
        row["id"] = row_id
    floats = import_long(write_jsonl(tmp_path / "floats.jsonl", rows))
    assert [r.id for r in floats] == ["1", "2.5"]
    for row, row_id in zip(rows, [1, 1, "2.0", "2.0"], strict=True):
        row["id"] = row_id
    integers = import_long(write_jsonl(tmp_path / "integers.jsonl", rows))
    assert [r.id for r in integers] == ["1", "2.0"]


def test_a_worker_written_as_a_number_is_the_worker_its_csv_cell_names(tmp_path: Path) -> None:
    """pandas' to_json writes an integer worker column as numbers ("worker": 1), which was
    refused as "worker must be a non-empty string, got 1" while the same rows as CSV name the
    workers "1" and "2"; a number is now its text (1.0 too). NaN is still no worker."""
    rows = long_rows()
    for row in rows:
        row["worker"] = int(str(row["worker"]).removeprefix("w"))
    as_csv = import_long(write_long_csv(tmp_path / "rows.csv", rows))
    rows[0]["worker"] = 2.0
    as_json = import_long(write_jsonl(tmp_path / "rows.jsonl", rows))
    assert as_json == as_csv
    assert as_json[0].worker_ids == ["1", "2"]
    rows[0]["worker"] = math.nan
    with pytest.raises(RecordFileError, match=r"line 1: worker is empty \(nan\)"):
        import_long(write_jsonl(tmp_path / "rows.jsonl", rows))
    rows[0]["worker"] = True  # a boolean is no number here: no worker is named true
    with pytest.raises(
        RecordFileError, match=r"line 1: worker must be a non-empty string, got True"
    ):
        import_long(write_jsonl(tmp_path / "rows.jsonl", rows))


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
@pytest.mark.parametrize("worker", ["g\x1b[31m", "g\x00", "g\x7f", "g\tx"])
def test_a_worker_name_holding_a_control_character_is_refused_naming_its_line(
    tmp_path: Path, suffix: str, worker: str
) -> None:
    """A worker named with a terminal's colour code, a NUL, DEL or an inner tab was imported
    as a worker of that name, which no pool's worker id can match, while the RouterBench
    importer refuses such a model name. Spaces and tabs around a name are still stripped."""
    rows = [
        {"prompt": "q", "worker": "b", "reward": 0},
        {"prompt": "q", "worker": worker, "reward": 1},
    ]
    path = tmp_path / f"long{suffix}"
    write_long_csv(path, rows) if suffix == ".csv" else write_jsonl(path, rows)
    with pytest.raises(RecordFileError) as raised:
        import_long(path)
    line = 3 if suffix == ".csv" else 2
    assert str(raised.value) == (
        f"{path}, line {line}: worker {worker!r} holds the control character "
        f"U+{ord(worker[1]):04X}, which no worker's name can hold: rename the worker in the file"
    )
    rows[1]["worker"] = "\tg\n"
    write_long_csv(path, rows) if suffix == ".csv" else write_jsonl(path, rows)
    assert import_long(path)[0].worker_ids == ["b", "g"]


def test_a_json_list_with_a_comma_after_its_last_row_says_to_delete_it(tmp_path: Path) -> None:
    """A hand-edited .json list ending "{...},\n]" was refused as "not valid JSON at line 4,
    column 1: Expecting value", which did not say that the comma was the matter."""
    rows = ",\n".join(json.dumps(row) for row in long_rows())
    path = tmp_path / "long.json"
    path.write_text(f"[\n{rows},\n]\n", encoding="utf-8")
    with pytest.raises(RecordFileError) as raised:
        import_long(path)
    assert str(raised.value).endswith(
        "long.json: not valid JSON at line 6, column 1: Expecting value; a comma after the last "
        "item of an object or list (before its } or ]), which JSON does not take; delete that "
        "comma"
    )


def test_a_json_files_integer_of_more_digits_than_python_reads_is_named(tmp_path: Path) -> None:
    """A .json list or a .jsonl line holding a 5000-digit number failed with Python's "Exceeds
    the limit (4300 digits) for integer string conversion", naming no file nor line."""
    path = tmp_path / "long.json"
    path.write_text(json.dumps(long_rows()).replace('"p1"', "1" * 5000, 1), encoding="utf-8")
    with pytest.raises(RecordFileError, match=r"long\.json: an integer of more than 4300 digits"):
        import_long(path)
    lines = tmp_path / "long.jsonl"
    write_jsonl(lines, [{**row, "reward": 1} for row in long_rows()])
    lines.write_text(lines.read_text().replace('"reward": 1', '"reward": ' + "1" * 5000, 1))
    with pytest.raises(RecordFileError, match=r"long\.jsonl, line 1: an integer of more than"):
        import_long(lines)


def test_excels_na_marker_is_a_missing_value(tmp_path: Path) -> None:
    """Excel writes #N/A (a lookup that found nothing) into a CSV where a value is missing,
    which pandas reads as missing: a reward so was refused as "must be a finite number, got
    '#N/A'" even with on_missing=drop, and a cost so was no cost only when written NA."""
    path = tmp_path / "long.csv"
    path.write_text(
        "prompt,worker,reward,cost\nq1,a,1,#N/A\nq1,b,#N/A,#N/A\nq2,a,1,#n/a\nq2,b,0,#N/A\n",
        encoding="utf-8",
    )
    (record,) = import_long(path, on_missing="drop")
    assert (record.prompt, record.rewards, record.costs) == ("q2", [1.0, 0.0], None)
    with pytest.raises(RecordFileError, match=r"line 3: no value for \['reward'\] \(the reward"):
        import_long(path)


@pytest.mark.parametrize(
    "error",
    ["#DIV/0!", "#VALUE!", "#REF!", "#NUM!", "#NAME?", "#NULL!", "#SPILL!", "#CALC!", "#div/0!"],
)
def test_a_spreadsheets_formula_error_is_named_not_read_as_a_number(
    tmp_path: Path, error: str
) -> None:
    """A CSV saved from a sheet whose formula failed holds '#DIV/0!': it was refused with the
    advice to "write the number alone, without a currency sign or unit: 0", a reward of 0."""
    path = tmp_path / "long.csv"
    path.write_text(f"prompt,worker,reward\nq1,a,{error}\nq1,b,0\n", encoding="utf-8")
    with pytest.raises(RecordFileError) as raised:
        import_long(path)
    assert str(raised.value) == (
        f"{path}, line 2: reward must be a finite number, got {error!r} (a spreadsheet's formula "
        "error: fix the formula in the sheet and save the CSV again, or empty the cell where the "
        "value is missing)"
    )


def test_a_worker_misspelt_on_a_few_rows_is_named_with_the_worker_it_is_close_to(
    tmp_path: Path,
) -> None:
    """'gpt4' on one row for 'gpt-4' made a worker that every other prompt misses: the error
    named the first prompt without it and advised adding its rows to every prompt."""
    lines = "".join(f"q{index},gpt-4,1\nq{index},llama,0\n" for index in range(6))
    path = tmp_path / "long.csv"
    path.write_text("prompt,worker,reward\n" + lines.replace("q4,gpt-4", "q4,gpt4"))
    with pytest.raises(RecordFileError) as raised:
        import_long(path)
    assert str(raised.value).endswith(
        f"; the worker 'gpt4' has rows for 1 of the 6 prompts only (the first at {path}, line "
        "10): a misspelling of 'gpt-4'?"
    )
    path.write_text("prompt,worker,reward\n" + lines + "q0,mistral,1\n")  # a worker to add
    with pytest.raises(RecordFileError, match=r"'mistral' has rows for 1 of the 6 .*check its"):
        import_long(path)
    path.write_text("prompt,worker,reward\n" + "".join(lines.splitlines(True)[:-1]))
    with pytest.raises(RecordFileError, match=r"no row for worker\(s\) \['llama'\].*drop\)$"):
        import_long(path)  # one prompt short of a worker most prompts have: no hint


@pytest.mark.parametrize(
    ("rare", "guess"),
    [("gpt-4-turbo", ": a misspelling of 'gpt-4'?"), ("gpt-4-vision", ": check its name")],
)
def test_a_rare_worker_is_guessed_as_a_misspelling_only_when_its_name_is_close(
    tmp_path: Path, rare: str, guess: str
) -> None:
    """The two names lie either side of how close a name must be to be guessed as a
    misspelling: 'gpt-4-turbo' is 0.625 alike to 'gpt-4' (difflib's ratio), 'gpt-4-vision'
    0.588; a guess for every name, or for none but the nearest, misleads."""
    lines = "".join(f"q{index},gpt-4,1\nq{index},llama,0\n" for index in range(6))
    path = tmp_path / "long.csv"
    path.write_text("prompt,worker,reward\n" + lines.replace("q4,gpt-4", f"q4,{rare}"))
    with pytest.raises(RecordFileError) as raised:
        import_long(path)
    assert str(raised.value).endswith(
        f"; the worker {rare!r} has rows for 1 of the 6 prompts only (the first at {path}, "
        f"line 10){guess}"
    )


@pytest.mark.parametrize("cut", [0.5, 0.75])
def test_a_json_file_cut_short_says_so(tmp_path: Path, cut: float) -> None:
    """A .json list whose download or copy was interrupted was refused as "not valid JSON at
    line 1, column 2341: Expecting ':' delimiter" (or an unterminated string), not a word of
    the file being cut short."""
    text = json.dumps(long_rows() * 20)
    path = tmp_path / "long.json"
    path.write_text(text[: int(len(text) * cut)], encoding="utf-8")
    with pytest.raises(RecordFileError) as raised:
        import_long(path)
    assert str(raised.value).endswith(
        "; the file ends before its JSON does: it was cut short (an interrupted download or "
        "copy?) or lacks its closing brackets; fetch or copy it again"
    )
    path.write_text(text.replace("}, {", "} {", 1), encoding="utf-8")  # a fault inside
    with pytest.raises(RecordFileError) as raised:
        import_long(path)
    assert "cut short" not in str(raised.value)


@pytest.mark.parametrize(
    ("first", "expected"),
    [
        (
            "Hi",
            "prompt is a list of 2 texts, not of chat messages; a prompt is text, or a list of "
            'messages such as {"role": "user", "content": "..."}: join the texts into one, or '
            "give each its role",
        ),
        (
            {"role": "system", "content": "Be terse."},
            "prompt mixes texts and chat messages (texts at position 1, a message at position "
            "0); a prompt is one text, or a list of messages only: write each text as a "
            'message, {"role": "user", "content": "..."} (or the role it has)',
        ),
    ],
)
def test_a_prompt_list_holding_texts_says_how_to_write_it(
    tmp_path: Path, first: object, expected: str
) -> None:
    """A conversation's turns as a list of texts (["Hi", "What is 2+2?"]), or texts beside
    message objects, were refused as "not a valid record: prompt.messages.0: Input should be
    a valid dictionary or instance of ChatMessage", which said neither what a prompt is, nor
    which items are texts, nor what to do."""
    rows = [{**row, "prompt": [first, str(row["prompt"])]} for row in long_rows()]
    with pytest.raises(RecordFileError) as raised:
        import_long(write_jsonl(tmp_path / "long.jsonl", rows))
    assert str(raised.value).endswith(f"line 1: {expected}")


def test_a_table_of_rewards_with_a_grader_column_is_not_called_a_task(tmp_path: Path) -> None:
    """A rewards table with a 'grader' column and its worker column misnamed ('model') was
    told it is a task file, to be answered by collect, where its keys are to be renamed."""
    path = write_jsonl(
        tmp_path / "long.jsonl", [{"prompt": "q1", "model": "a", "reward": 1, "grader": "number"}]
    )
    with pytest.raises(RecordFileError) as raised:
        import_long(path)
    assert "this is a task" not in str(raised.value)
    assert "the row's keys are prompt, model, reward, grader" in str(raised.value)
    # nor a ZeroEval row with its scores beside a grader
    rows = [zeroeval_row("q1", grader="number"), zeroeval_row("q2", grader="number")]
    assert len(import_zeroeval(write_jsonl(tmp_path / "scores.jsonl", rows))) == 2


@pytest.mark.parametrize("reward", ["Infinity", "inf", "-inf", "1e400"])
def test_an_infinite_reward_is_no_finite_number_named_at_its_row(
    tmp_path: Path, reward: str
) -> None:
    """float() reads "Infinity" and "1e400" as infinity: refused at the row as no finite
    number, not passed on to fail later as a record's "rewards must be finite" at the
    prompt's first row."""
    rows = [
        {"prompt": "p", "worker": "a", "reward": "1"},
        {"prompt": "p", "worker": "b", "reward": reward},
    ]
    with pytest.raises(RecordFileError, match=r"line 3: reward must be a finite number, got "):
        import_long(write_long_csv(tmp_path / "inf.csv", rows))


def test_a_chat_prompt_whose_keys_come_in_another_order_on_a_row_is_one_prompt(
    tmp_path: Path,
) -> None:
    """One prompt's messages written with their keys in another order on one row (rows from
    two tools) are the same messages: grouped by their text as written, the prompt split in
    two, each half missing a worker; every test wrote its messages the same way each time."""
    rows = [
        {"prompt": [{"role": "user", "content": "hi"}], "worker": "w1", "reward": 1},
        {"prompt": [{"content": "hi", "role": "user"}], "worker": "w2", "reward": 0},
    ]
    (result,) = import_long(write_jsonl(tmp_path / "long.jsonl", rows))
    assert (result.prompt_text, result.rewards) == ("user: hi", [1.0, 0.0])


def test_a_repeated_header_with_a_spreadsheets_empty_cells_at_its_end_is_named(
    tmp_path: Path,
) -> None:
    """A spreadsheet saves a row's empty cells at its end as trailing commas: the second
    header of files joined with `cat` ("prompt,worker,reward,,") is the header still, not a
    row whose reward is "reward"; every repeated header of the tests had no trailing comma."""
    path = tmp_path / "long.csv"
    path.write_text("prompt,worker,reward\np1,w1,1\nprompt,worker,reward,,\np2,w1,1\n")
    with pytest.raises(RecordFileError, match=r"long\.csv, line 3: repeats the header line"):
        import_long(path)


@pytest.mark.parametrize("other", ["q  r", "q\nr", " q r"])
def test_a_prompt_differing_inside_only_in_spaces_is_named_in_the_missing_worker_error(
    tmp_path: Path, other: str
) -> None:
    """A double space or a line break inside one cell's prompt (not only around it) makes
    another prompt too, which the shortened prompt of the error shows alike: it is named;
    every test's prompts differed only at their ends, so comparing stripped ones passed."""
    rows = [
        {"prompt": "q r", "worker": "a", "reward": 1},
        {"prompt": other, "worker": "b", "reward": 0},
    ]
    with pytest.raises(RecordFileError) as raised:
        import_long(write_jsonl(tmp_path / "long.jsonl", rows))
    assert f"line 2 has the prompt {other!r}, which differs from 'q r' only in spaces" in str(
        raised.value
    )


def test_a_prompt_differing_only_in_spaces_is_shown_in_the_hint_up_to_80_characters(
    tmp_path: Path,
) -> None:
    """The spacing hint quotes a prompt of up to 80 characters and not a longer one (a long
    prompt would fill the error): the prompt missing a worker here has 80, the other 81."""
    missing_a_worker = "q " + "r" * 78
    other = "q  " + "r" * 78
    rows = [
        {"prompt": other, "worker": "a", "reward": 1},
        {"prompt": other, "worker": "b", "reward": 0},
        {"prompt": missing_a_worker, "worker": "a", "reward": 1},
    ]
    path = write_jsonl(tmp_path / "long.jsonl", rows)
    with pytest.raises(RecordFileError) as raised:
        import_long(path)
    assert (len(missing_a_worker), len(other)) == (80, 81)
    assert (
        f"; {path}, line 1 has the prompt, which differs from {missing_a_worker!r} only in "
        "spaces or line breaks"
    ) in str(raised.value)


def test_workers_alike_once_case_folded_are_named_as_differing_only_in_case(
    tmp_path: Path,
) -> None:
    """Case is compared folded, as Unicode does it: 'Maß' and 'MASS' are one name in two cases
    (lowercased, 'maß' and 'mass' differ)."""
    path = tmp_path / "long.csv"
    path.write_text("prompt,worker,reward\nq1,Maß,1\nq1,llama,0\nq2,MASS,1\nq2,llama,0\n")
    with pytest.raises(RecordFileError) as raised:
        import_long(path)
    assert str(raised.value).endswith(
        "; the workers 'MASS' and 'Maß' differ only in case: a worker is read as written, so "
        "spell each one the same way on every row"
    )
