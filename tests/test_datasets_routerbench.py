"""The RouterBench importer (wide and raw tables, pickles and CSVs): small generated tables."""

from __future__ import annotations

import gzip
import logging
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from datasets_support import (
    ROUTERBENCH_MODELS,
    routerbench_table,
)

from fugu_lite.datasets import (
    SplitError,
    import_dataset,
    import_routerbench,
    standard_split,
)
from fugu_lite.datasets.common import stable_id
from fugu_lite.datasets.routerbench_columns import named_cells
from fugu_lite.text_reading import RecordFileError


@pytest.mark.parametrize("suffix", [".pkl", ".csv"])
def test_routerbench_reads_pickle_and_csv(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"routerbench{suffix}"
    table = routerbench_table()
    table.to_pickle(path) if suffix == ".pkl" else table.to_csv(path, index=False)
    records = import_routerbench(path)
    assert [r.id for r in records] == ["mmlu.0", "gsm.1", "mtbench.2"]
    first = records[0]
    assert first.prompt == "['What is 2+2?']"  # kept exactly as stored
    assert first.worker_ids == sorted(ROUTERBENCH_MODELS)
    assert first.task == "mmlu-math"
    assert first.costs == pytest.approx([0.01, 0.02])
    assert [r.rewards for r in records] == [[1.0, 1.0], [0.0, 1.0], [0.5, 0.75]]
    assert all(r.split == standard_split(r.prompt_text) for r in records)


def raw_routerbench_table(wide: pd.DataFrame) -> pd.DataFrame:
    """The wide table in RouterBench's raw, long form (routerbench_raw.pkl): a row per sample
    and model, with model_name, performance, cost and model_response."""
    rows = [
        {
            "sample_id": row["sample_id"],
            "model_name": model,
            "eval_name": row["eval_name"],
            "prompt": row["prompt"],
            "model_response": row[f"{model}|model_response"],
            "performance": row[model],
            "cost": row[f"{model}|total_cost"],
        }
        for _, row in wide.iterrows()
        for model in reversed(ROUTERBENCH_MODELS)
    ]
    return pd.DataFrame(rows)


@pytest.mark.parametrize("suffix", [".pkl", ".csv"])
def test_routerbench_reads_the_raw_table_of_a_row_per_sample_and_model(
    tmp_path: Path, suffix: str, caplog
) -> None:
    """routerbench_raw.pkl (the 5-shot data, a row per sample and model) was refused as "no
    model columns; each model needs a score column `<model>` and a `<model>|total_cost`"."""
    wide = routerbench_table()
    wide.to_pickle(tmp_path / "wide.pkl")
    path = tmp_path / f"routerbench_raw{suffix}"
    raw = raw_routerbench_table(wide)
    raw.to_pickle(path) if suffix == ".pkl" else raw.to_csv(path, index=False)
    with caplog.at_level(logging.WARNING):
        assert import_routerbench(path) == import_routerbench(tmp_path / "wide.pkl")
    assert caplog.text == ""
    raw.drop(index=[1]).to_pickle(tmp_path / "gap.pkl")  # the first sample's second model
    with pytest.raises(RecordFileError, match=r"the rows of sample_id=mmlu.0: score or total_cost"):
        import_routerbench(tmp_path / "gap.pkl")
    assert len(import_routerbench(tmp_path / "gap.pkl", on_missing="drop")) == 2
    pd.concat([raw, raw[:1]]).to_pickle(tmp_path / "twice.pkl")
    with pytest.raises(RecordFileError) as raised:
        import_routerbench(tmp_path / "twice.pkl")
    assert str(raised.value) == (
        f"{tmp_path / 'twice.pkl'}: sample_id 'mmlu.0' has more than one row for model "
        f"{ROUTERBENCH_MODELS[-1]!r}; keep one row per sample and model"
    )


@pytest.mark.parametrize("suffix", [".pkl", ".csv"])
def test_a_raw_samples_bad_value_is_named_by_its_sample_not_a_row_of_another(
    tmp_path: Path, suffix: str
) -> None:
    """A raw table's score that is no number, or its prompt missing, was named at the row of
    the pivoted table ("row 2 (sample_id=gsm.1)"), which in the file is a row of another
    sample (here mmlu.0's second model); it is named by its sample's rows now."""
    raw = raw_routerbench_table(routerbench_table())
    raw["performance"] = raw["performance"].astype(object)
    raw.loc[3, "performance"] = "n/a?"  # gsm.1's second model, the file's row 4
    path = tmp_path / f"routerbench_raw{suffix}"
    raw.to_pickle(path) if suffix == ".pkl" else raw.to_csv(path, index=False)
    with pytest.raises(RecordFileError) as raised:
        import_routerbench(path)
    assert str(raised.value) == (
        f"{path}, the rows of sample_id=gsm.1: the score of {ROUTERBENCH_MODELS[0]} must be a "
        "finite number, got 'n/a?'"
    )


@pytest.mark.parametrize("index", [False, True])
def test_raw_tables_joined_with_cat_name_the_repeated_header(tmp_path: Path, index: bool) -> None:
    """Two raw CSVs joined with `cat` hold the second header as a row, which was pivoted into
    a model 'model_name' that every sample missed: "score or total_cost of ['model_name'] is
    missing or NaN; fix the row, delete it, or pass --option on_missing=drop"."""
    raw = raw_routerbench_table(routerbench_table())
    path = tmp_path / "routerbench_raw.csv"
    path.write_text(raw[:2].to_csv(index=index) + raw[2:].to_csv(index=index), encoding="utf-8")
    with pytest.raises(RecordFileError) as raised:
        import_routerbench(path, on_missing="drop")
    assert str(raised.value).startswith(
        f"{path}, row 3: repeats the header line (files joined with `cat`?); delete that line"
    )


@pytest.mark.parametrize("raw", [False, True])
@pytest.mark.parametrize("on_missing", ["error", "drop"])
def test_a_pickle_holding_its_header_as_a_row_names_that_row(
    tmp_path: Path, raw: bool, on_missing: str
) -> None:
    """A pickled table with its column names as a row (a CSV read with header=None) was
    refused as a score that is no number ("the score of m1 must be a finite number, got 'm1'
    (write the number alone, without a currency sign or unit: 1)"), a raw one as a model
    'model_name' that every sample missed, never as a header among the data."""
    table = raw_routerbench_table(routerbench_table()) if raw else routerbench_table()
    header = pd.DataFrame([list(table.columns)], columns=table.columns)
    copied = pd.concat([table[:1], header, table[1:]], ignore_index=True)
    path = tmp_path / "routerbench.pkl"
    copied.to_pickle(path)
    with pytest.raises(RecordFileError) as raised:
        import_routerbench(path, on_missing=on_missing)
    assert str(raised.value) == (
        f"{path}, row 2: holds the column names, not data (a header read as a row: a CSV read "
        "with header=None, or tables joined with their headers); drop that row and save the "
        "table again"
    )


@pytest.mark.parametrize(
    ("renamed", "missing"),
    [
        ({"sample_id": "id"}, ["sample_id"]),
        ({"cost": "price"}, ["cost"]),
        ({"model_name": "Model_Name", "performance": "Performance"}, ["model_name", "performance"]),
    ],
)
def test_a_raw_table_without_one_of_its_columns_says_which(
    tmp_path: Path, renamed: dict[str, str], missing: list[str]
) -> None:
    """A raw table (a row per sample and model) without one of its columns as named was not
    read as one, and was refused as having "no model columns; each model needs a score
    column `<model>` and a `<model>|total_cost` column", not a word of the raw table's."""
    path = tmp_path / "routerbench_raw.csv"
    raw_routerbench_table(routerbench_table()).rename(columns=renamed).to_csv(path, index=False)
    with pytest.raises(RecordFileError) as raised:
        import_routerbench(path)
    assert str(raised.value).endswith(
        "; with a model_name column it is the raw table (a row per sample and model), whose "
        "columns are sample_id, model_name, performance, cost, named so (in that case): it has "
        f"no {missing}"
    )


def test_a_raw_tables_model_named_with_spaces_around_it_is_that_model(tmp_path: Path) -> None:
    """A raw table naming one model ' m2' on some rows and 'm2 ' on others (sources joined)
    was refused as "the model columns [' m2', 'm2 '] name one model", columns it does not
    have; each is that model (a sample_id so is that sample), and two rows of one sample so
    named are a repeat."""
    wide = routerbench_table()
    wide.to_pickle(tmp_path / "wide.pkl")
    raw = raw_routerbench_table(wide)
    model = ROUTERBENCH_MODELS[0]
    raw["model_name"] = [
        f" {name}" if position < 2 else f"{name} "
        for position, name in enumerate(raw["model_name"])
    ]
    raw.to_pickle(tmp_path / "raw.pkl")
    assert import_routerbench(tmp_path / "raw.pkl") == import_routerbench(tmp_path / "wide.pkl")
    raw.assign(sample_id=[f"{i} " if p % 2 else i for p, i in enumerate(raw["sample_id"])]).to_csv(
        tmp_path / "raw.csv", index=False
    )  # a sample's second row with a space after its id: another sample, each missing a model
    assert import_routerbench(tmp_path / "raw.csv") == import_routerbench(tmp_path / "wide.pkl")
    pd.concat([raw, raw[raw["model_name"] == f" {model}"].assign(model_name=model)]).to_pickle(
        tmp_path / "twice.pkl"
    )
    with pytest.raises(RecordFileError, match=rf"more than one row for model {model!r}"):
        import_routerbench(tmp_path / "twice.pkl")


def raw_table_with_empty_cells(path: Path, column: str, rows: list[int], empty: object) -> Path:
    """The raw table, `column` set to `empty` on `rows`, saved as `path` (.pkl or .csv)."""
    raw = raw_routerbench_table(routerbench_table())
    raw[column] = raw[column].astype(object)
    raw.loc[rows, column] = empty
    raw.to_pickle(path) if path.suffix == ".pkl" else raw.to_csv(path, index=False)
    return path


RAW_WITHOUT_KEY = {
    # both rows of the second sample
    "sample_id": (
        [2, 3],
        "row 3: no sample_id; the raw table (a row per sample and model) joins a sample's "
        "models by its sample_id, so every row needs one: fill it in, or delete the sample's "
        "rows",
    ),
    "model_name": (
        [3],
        "row 4 (sample_id=gsm.1): no model_name; the raw table has a row per sample and "
        "model, and the row's score and cost belong to its model: fill it in, or delete the "
        "row",
    ),
}


@pytest.mark.parametrize("suffix", [".pkl", ".csv"])
@pytest.mark.parametrize("empty", [None, math.nan, "", "  "])
@pytest.mark.parametrize("column", list(RAW_WITHOUT_KEY))
def test_a_raw_routerbench_row_without_a_sample_id_or_model_name_is_named(
    tmp_path: Path, suffix: str, empty: object, column: str
) -> None:
    """The raw table joins a sample's models by sample_id: a pickle's rows without one were
    left out without a word (pandas' groupby skips NaN keys), and a CSV's empty ones were
    refused as "sample_id '' has more than one row for model ...". A row without a
    model_name was left out by the pivot without a word: with on_missing=drop its sample
    was dropped as missing that model's score, the row's score lost."""
    rows, expected = RAW_WITHOUT_KEY[column]
    path = raw_table_with_empty_cells(tmp_path / f"routerbench_raw{suffix}", column, rows, empty)
    with pytest.raises(RecordFileError) as raised:
        import_routerbench(path, on_missing="drop")
    assert str(raised.value) == f"{path}, {expected}"


@pytest.mark.parametrize("bom", ["", "\ufeff"])
@pytest.mark.parametrize("index", [False, True])
def test_routerbench_csv_that_repeats_its_header_names_the_row(
    tmp_path: Path, index: bool, bom: str
) -> None:
    """Two CSV files joined with `cat` hold the second header as a row, which was refused as
    "the score of ... must be a finite number, got '...'" (as in the long format); files
    saved with a BOM (Excel's "CSV UTF-8") hold the second's before its first name, here the
    prompt's."""
    table = routerbench_table()
    table = table[["prompt", *(column for column in table.columns if column != "prompt")]]
    text = bom + table[:1].to_csv(index=index) + bom + table[1:].to_csv(index=index)
    path = tmp_path / "rb.csv"
    path.write_text(text.replace("prompt,", " Prompt ,", 2), encoding="utf-8")
    with pytest.raises(RecordFileError) as raised:
        import_routerbench(path)
    assert str(raised.value) == (
        f"{path}, row 2: repeats the header line (files joined with "
        "`cat`?); delete that line, or join the files keeping one header (e.g. pandas.concat, "
        "or `tail -n +2` for all files after the first)"
    )


@pytest.mark.parametrize("index", [["sample_id"], ["sample_id", "eval_name"], ["Sample_ID"]])
def test_routerbench_reads_fixed_columns_a_pickle_holds_as_its_index(
    tmp_path: Path, index: list[str]
) -> None:
    """A table saved after set_index("sample_id") holds its ids in the index, not a column:
    its ids were silently replaced by ones made from the prompts, and with eval_name in the
    index too it was refused as "missing column(s) ['eval_name']"."""
    path = tmp_path / "routerbench.pkl"
    plain = routerbench_table()
    plain.to_pickle(path)
    expected = import_routerbench(path)
    plain.rename(columns={"sample_id": index[0]}).set_index(index).to_pickle(path)
    assert import_routerbench(path) == expected
    plain.set_index(pd.Index(["r1", "r2", "r3"], name="row")).to_pickle(path)
    assert import_routerbench(path) == expected  # an index of no fixed column is not read
    # the split column given is read from the index too
    plain.assign(fold=["test", "train", "validation"]).set_index("fold").to_pickle(path)
    assert [r.split for r in import_routerbench(path, split_column="fold")] == [
        "test",
        "train",
        "validation",
    ]


@pytest.mark.parametrize(
    "name", ["rb.pkl.gz", "rb.PKL.bz2", "rb.pkl.xz", "rb.csv.gz", "rb.csv.zip"]
)
def test_routerbench_reads_a_compressed_table_as_pandas_does(tmp_path: Path, name: str) -> None:
    """`routerbench_0shot.pkl.gz` (pandas reads and writes compressed pickles and CSVs, the
    compression taken from the name) was refused as "expected a .pkl or .csv"."""
    table = routerbench_table(prompt=["a\r\nb", "Tom has 3 apples.", "Write a poem."])
    compressed, from_csv = tmp_path / name, ".csv" in name
    plain = tmp_path / ("plain.csv" if from_csv else "plain.pkl")
    for path in (plain, compressed):
        table.to_csv(path, index=False) if from_csv else table.to_pickle(path)
    assert compressed.read_bytes()[:2] != plain.read_bytes()[:2]  # compressed indeed
    records = import_routerbench(compressed)
    assert records == import_routerbench(plain)
    assert records[0].prompt == ("a\nb" if from_csv else "a\r\nb")  # a CSV's line breaks


def test_routerbench_csv_of_boolean_scores_is_read_as_the_pickle(tmp_path: Path) -> None:
    """DataFrame.to_csv writes a boolean score column as True/False: every row of such a CSV
    was refused as missing a score, while the same table pickled was read."""
    models = sorted(ROUTERBENCH_MODELS)
    table = routerbench_table(**{models[0]: [True, False, True], models[1]: [False, True, True]})
    table.to_pickle(tmp_path / "rb.pkl")
    table.to_csv(tmp_path / "rb.csv", index=False)
    from_csv = import_routerbench(tmp_path / "rb.csv")
    assert from_csv == import_routerbench(tmp_path / "rb.pkl")
    assert [record.rewards[:2] for record in from_csv] == [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]


@pytest.mark.parametrize("name", ["rb.csv", "rb.csv.gz"])
def test_excels_separator_line_before_a_routerbench_header_is_skipped(
    tmp_path: Path, name: str
) -> None:
    """Excel's "sep=," line before the header was read as the header: "missing column(s)
    ['prompt', 'eval_name']; found ['sep=', 'Unnamed: 1']"."""
    table = (
        "sample_id,prompt,eval_name,m1,m1|total_cost,m2,m2|total_cost\r\ns1,q,mmlu,1,0.1,0,0.2\r\n"
    )
    opener = gzip.open if name.endswith(".gz") else open
    with opener(tmp_path / name, "wt", encoding="utf-8", newline="") as stream:
        stream.write("sep=,\r\n" + table)
    (tmp_path / "plain.csv").write_text(table, encoding="utf-8", newline="")
    records = import_routerbench(tmp_path / name)
    assert records == import_routerbench(tmp_path / "plain.csv")
    assert [(r.prompt, r.rewards, r.costs) for r in records] == [("q", [1.0, 0.0], [0.1, 0.2])]


def test_routerbench_nan_score_names_the_row(tmp_path: Path, caplog) -> None:
    path = tmp_path / "rb.pkl"
    routerbench_table(**{ROUTERBENCH_MODELS[1]: [1.0, math.nan, 0.0]}).to_pickle(path)
    with pytest.raises(
        RecordFileError, match=r"rb\.pkl, row 2 \(sample_id=gsm\.1\): score or"
    ) as raised:
        import_routerbench(path)
    assert str(raised.value).endswith(
        "pass --option on_missing=drop"
    )  # as the command line takes it
    with caplog.at_level(logging.WARNING):
        assert len(import_routerbench(path, on_missing="drop")) == 2
    assert "dropped 1 rows" in caplog.text


def test_routerbench_without_sample_id_and_with_split_column(tmp_path: Path) -> None:
    path = tmp_path / "rb.csv"
    table = routerbench_table(fold=["train", "test", "validation"]).drop(columns="sample_id")
    table.to_csv(path, index=False)
    records = import_routerbench(path, split_column="fold")
    assert [r.split for r in records] == ["train", "test", "validation"]
    assert all(r.id is not None and r.id.startswith("routerbench:") for r in records)
    routerbench_table(fold=["train", "TEST", "Dev"]).to_csv(path, index=False)
    records = import_routerbench(path, split_column="fold")
    assert [r.split for r in records] == ["train", "test", "validation"]
    routerbench_table(fold=["train", "holdout", "test"]).to_csv(path, index=False)
    with pytest.raises(SplitError, match=r"row 2 \(sample_id=gsm\.1\): unknown split 'holdout'"):
        import_routerbench(path, split_column="fold")
    with pytest.raises(RecordFileError, match=r"missing column\(s\) \['nope'\]"):
        import_routerbench(path, split_column="nope")


@pytest.mark.parametrize("header", [" fold", "Fold ", "FOLD"])
def test_routerbench_split_column_is_read_without_case_or_spaces(
    tmp_path: Path, header: str
) -> None:
    """A split column written ` fold` (a CSV with a space after each comma) was refused as
    missing for split_column=fold, while ` prompt` and ` eval_name` were found; it is read
    by their rule, from a pickle's index too, and given with spaces or in capitals too."""
    table = routerbench_table(fold=["train", "test", "validation"])
    expected = ["train", "test", "validation"]
    spaced = _to_csv(table.rename(columns={"fold": header}), tmp_path / "rb.csv")
    for given in ("fold", " Fold"):
        assert [r.split for r in import_routerbench(spaced, split_column=given)] == expected
    table.rename(columns={"fold": header}).set_index(header).to_pickle(tmp_path / "rb.pkl")
    records = import_routerbench(tmp_path / "rb.pkl", split_column="fold")
    assert [r.split for r in records] == expected
    doubled = _to_csv(table.assign(**{header: table["fold"]}), tmp_path / "doubled.csv")
    with pytest.raises(RecordFileError, match=r"\['fold'\] are named more than once"):
        import_routerbench(doubled, split_column="fold")


def test_an_unused_split_column_written_with_spaces_is_named_without_them(
    tmp_path: Path, caplog
) -> None:
    """A CSV with a space after each comma has the split column ' split': the warning that it
    is not used said to pass `--option split_column= split`, which a shell gives as an empty
    split_column (refused) and a stray argument; the column is named as split_column reads
    it, without the space, and that option keeps the file's split."""
    folds = ["test", "train", "validation"]
    path = _to_csv(routerbench_table(**{" split": folds}), tmp_path / "rb.csv")
    with caplog.at_level(logging.WARNING):
        import_routerbench(path)
    assert "pass --option split_column=split to keep the file's split" in caplog.text
    assert [r.split for r in import_routerbench(path, split_column="split")] == folds


@pytest.mark.parametrize("suffix", [".pkl", ".csv"])
def test_routerbench_rows_without_a_sample_id_get_an_id_of_their_prompt(
    tmp_path: Path, suffix: str
) -> None:
    """An empty sample_id cell (NaN in a pickle) became the id "" (or "nan") of every such
    record, so their predictions could not be told apart by id."""
    path = tmp_path / f"rb{suffix}"
    table = routerbench_table(sample_id=["mmlu.0", None, None])
    table.to_pickle(path) if suffix == ".pkl" else table.to_csv(path, index=False)
    ids = {record.prompt: record.id for record in import_routerbench(path)}
    assert ids["['What is 2+2?']"] == "mmlu.0"
    assert ids["Tom has 3 apples."] == stable_id("routerbench", "Tom has 3 apples.")
    assert ids["Write a poem."] == stable_id("routerbench", "Write a poem.")


def test_routerbench_reads_its_fixed_columns_in_any_case(tmp_path: Path) -> None:
    """A header ' Sample_ID' (a spreadsheet's) was not the sample_id column: the ids were
    replaced by prompt-made ones without a word; ' Prompt' failed as a missing column."""
    table = routerbench_table()
    expected = import_routerbench(_to_csv(table, tmp_path / "plain.csv"))
    renamed = table.rename(columns={"sample_id": " Sample_ID", "prompt": "Prompt "})
    records = import_routerbench(_to_csv(renamed, tmp_path / "rb.csv"))
    assert records == expected and records[0].id == "mmlu.0"
    assert records[0].worker_ids == sorted(ROUTERBENCH_MODELS)  # model names keep their case
    doubled = table.assign(PROMPT=table["prompt"])
    with pytest.raises(RecordFileError, match=r"\['prompt'\] are named more than once"):
        import_routerbench(_to_csv(doubled, tmp_path / "doubled.csv"))


@pytest.mark.parametrize("suffix", [".csv", ".pkl"])
def test_routerbench_spaces_around_names_are_not_part_of_them(tmp_path: Path, suffix: str) -> None:
    """A CSV written with a space after each comma (`prompt, eval_name, gpt-4, ...`) named
    the workers ' gpt-4', the task ' mmlu' and the id ' s1', which no pool's worker or
    task matches (and a table shows without the space); the long importer already strips
    its workers, tasks and ids."""
    plain = tmp_path / "plain.csv"
    plain.write_text(
        "sample_id,prompt,eval_name,gpt-4,gpt-4|total_cost,llama,llama|total_cost\n"
        "s1,q1,mmlu,1,0.1,0,0.01\ns2,q2,gsm8k,0,0.1,1,0.01\n",
        encoding="utf-8",
    )
    expected = import_routerbench(plain)
    spaced = pd.read_csv(plain, dtype=str)
    spaced.columns = [
        *(" sample_id", " prompt", " eval_name"),
        *(" gpt-4 ", " gpt-4 |total_cost", " llama", " llama|total_cost"),
    ]
    spaced["eval_name"] = spaced.pop(" eval_name").radd(" ")
    spaced[" sample_id"] = spaced[" sample_id"] + " "
    path = tmp_path / f"spaced{suffix}"
    spaced.to_pickle(path) if suffix == ".pkl" else spaced.to_csv(path, index=False)
    records = import_routerbench(path)
    assert records == expected
    assert (records[0].worker_ids, records[0].task, records[0].id) == (
        ["gpt-4", "llama"],
        "mmlu",
        "s1",
    )
    twice = spaced.assign(**{"gpt-4": spaced[" gpt-4 "], "gpt-4|total_cost": "0.1"})
    twice.to_pickle(tmp_path / "twice.pkl")
    with pytest.raises(RecordFileError) as raised:
        import_routerbench(tmp_path / "twice.pkl")
    assert str(raised.value) == (
        f"{tmp_path / 'twice.pkl'}: the model columns [' gpt-4 ', 'gpt-4'] name one model "
        "'gpt-4' (spaces around a name are not part of it); keep one of them"
    )


def _to_csv(table: pd.DataFrame, path: Path) -> Path:
    table.to_csv(path, index=False)
    return path


def test_routerbench_bad_tables(tmp_path: Path) -> None:
    path = tmp_path / "rb.csv"
    pd.DataFrame({"prompt": ["p"], "eval_name": ["e"], "m": [1.0]}).to_csv(path, index=False)
    with pytest.raises(RecordFileError, match="no model columns"):
        import_routerbench(path)
    routerbench_table().drop(columns="eval_name").to_csv(path, index=False)
    with pytest.raises(RecordFileError, match=r"missing column\(s\) \['eval_name'\]"):
        import_routerbench(path)
    routerbench_table().drop(columns=ROUTERBENCH_MODELS[0]).to_csv(path, index=False)
    with pytest.raises(RecordFileError) as raised:
        import_routerbench(path)
    assert str(raised.value) == (
        f"{path}: cost columns without a score column for {[ROUTERBENCH_MODELS[0]]}"
    )
    (tmp_path / "rb.parquet").write_bytes(b"")
    with pytest.raises(RecordFileError, match=r"expected a \.pkl or \.csv"):
        import_routerbench(tmp_path / "rb.parquet")


def test_a_cost_column_spelt_otherwise_is_named(tmp_path: Path, caplog) -> None:
    """A cost column in another case or with a space after its | (`m2|Total_Cost`) is not
    read as its model's cost: the model was left out with the advice to add the cost column
    the table has, and a table of such columns only was said to have no model columns."""
    path = tmp_path / "rb.csv"
    path.write_text(
        "prompt,eval_name,m1,m1|total_cost,m2,m2|Total_Cost\np,t,1,0.1,0,0.2\n", encoding="utf-8"
    )
    with caplog.at_level(logging.WARNING):
        assert [r.worker_ids for r in import_routerbench(path)] == [["m1"]]
    assert (
        "column(s) ['m2'] hold numbers but have no cost column ['m2|total_cost'], so they are "
        "not imported as models; add the cost column(s) to import them; the column(s) "
        "['m2|Total_Cost'] are cost columns spelt otherwise: name each `<model>|total_cost`, in "
        "that case and without spaces after the |"
    ) in caplog.text
    path.write_text("prompt,eval_name,m1,m1| total cost\np,t,1,0.1\n", encoding="utf-8")
    with pytest.raises(RecordFileError) as raised:
        import_routerbench(path)
    assert str(raised.value).endswith(
        "no model columns; each model needs a score column `<model>` and a `<model>|total_cost` "
        "column; the column(s) ['m1| total cost'] are cost columns spelt otherwise: name each "
        "`<model>|total_cost`, in that case and without spaces after the |"
    )


def test_routerbench_csv_with_pandas_index_column_is_read_without_a_warning(
    tmp_path: Path, caplog
) -> None:
    """DataFrame.to_csv writes the index as a first column with an empty header by default:
    the import warned that column "Unnamed: 0" holds numbers but has no cost column, and to
    add an "Unnamed: 0|total_cost" column to import it as a model."""
    routerbench_table().to_csv(tmp_path / "indexed.csv")
    routerbench_table().to_csv(tmp_path / "plain.csv", index=False)
    with caplog.at_level(logging.WARNING):
        records = import_routerbench(tmp_path / "indexed.csv")
    assert records == import_routerbench(tmp_path / "plain.csv")
    assert "Unnamed" not in caplog.text


def test_routerbench_csv_saved_again_with_its_index_is_read_without_a_warning(
    tmp_path: Path, caplog
) -> None:
    """A CSV read back and saved again with the index (to_csv's default) holds two index
    columns, which pandas names "Unnamed: 0" and "Unnamed: 0.1": the second was warned of as
    a model score without a cost column, and a repeated header in such a file was refused as
    a score that is no number ("got 'gpt-4-1106-preview'"), not as the header it repeats."""
    routerbench_table().to_csv(tmp_path / "once.csv")
    pd.read_csv(tmp_path / "once.csv").to_csv(tmp_path / "twice.csv")
    routerbench_table().to_csv(tmp_path / "plain.csv", index=False)
    with caplog.at_level(logging.WARNING):
        records = import_routerbench(tmp_path / "twice.csv")
    assert records == import_routerbench(tmp_path / "plain.csv")
    assert "Unnamed" not in caplog.text
    header, *rows = (tmp_path / "twice.csv").read_text(encoding="utf-8").splitlines()
    joined = tmp_path / "joined.csv"
    joined.write_text("\n".join([header, rows[0], header, *rows[1:]]) + "\n", encoding="utf-8")
    with pytest.raises(RecordFileError, match=r"row 2: repeats the header line"):
        import_routerbench(joined)


@pytest.mark.parametrize("name", ["Unnamed: 0 backup", "old Unnamed: 0"])
def test_a_column_named_with_more_than_pandas_unnamed_name_is_a_column(
    tmp_path: Path, caplog, name: str
) -> None:
    """Only pandas' own name for an empty header cell ("Unnamed: 0", "Unnamed: 0.1") is left
    out: a numeric column whose name merely holds it is warned of as a score without a cost
    column, and its cells are compared with its name for a repeated header."""
    table = routerbench_table()
    table[name] = [1, 2, 3]
    table.to_csv(tmp_path / "rb.csv", index=False)
    with caplog.at_level(logging.WARNING):
        import_routerbench(tmp_path / "rb.csv")
    assert f"column(s) [{name!r}] hold numbers but have no cost column" in caplog.text
    assert named_cells({"Unnamed: 0": 0, "Unnamed: 0.1": 1, name: 2, "prompt": "p"}) == (
        [2, "p"],
        [name, "prompt"],
    )


def test_routerbench_csv_keeps_text_as_written(tmp_path: Path) -> None:
    path = tmp_path / "rb.csv"
    path.write_text(
        "sample_id,prompt,eval_name,m1,m1|total_cost\n"
        "007,42,t,1,0.1\n008,NA,t,0,0.1\n009,null,t,NaN,0.1\n",
        encoding="utf-8",
    )
    with pytest.raises(RecordFileError, match=r"row 3 \(sample_id=009\): score or total_cost"):
        import_routerbench(path)
    records = import_routerbench(path, on_missing="drop")
    assert [(r.id, r.prompt) for r in records] == [("007", "42"), ("008", "NA")]
    assert [r.rewards for r in records] == [[1.0], [0.0]]


def test_routerbench_score_that_is_no_number_is_not_dropped_as_missing(tmp_path: Path) -> None:
    """A score written "0,5" (a decimal comma) or "85%" counted as missing: on_missing=drop
    dropped its row without a word of the value, while the long importer refuses such a
    reward whatever on_missing says."""
    path = tmp_path / "rb.csv"
    path.write_text(
        'prompt,eval_name,m1,m1|total_cost\np,t,1,0.1\nr,t,"0,5",0.1\nq,t,,0.1\n',
        encoding="utf-8",
    )
    for policy in ("error", "drop"):
        with pytest.raises(RecordFileError) as raised:
            import_routerbench(path, on_missing=policy)  # type: ignore[arg-type]
        assert str(raised.value) == (
            f"{path}, row 2: the score of m1 must be a finite number, got '0,5' (write "
            "numbers with a decimal point and no thousands separator: 0.5, 1000)"
        )
    path.write_text(path.read_text().replace('"0,5"', "0.5"), encoding="utf-8")
    assert [r.prompt for r in import_routerbench(path, on_missing="drop")] == ["p", "r"]


def test_a_routerbench_csv_given_to_the_long_importer_names_routerbench(tmp_path: Path) -> None:
    """`data import long rb.csv` said only "missing column(s) ['worker', 'reward']", with no
    word of the importer that reads the table."""
    path = tmp_path / "rb.csv"
    routerbench_table().to_csv(path, index=False)
    with pytest.raises(RecordFileError) as raised:
        import_dataset("long", path)
    assert str(raised.value).endswith(
        "its `<model>|total_cost` columns make it a RouterBench table (a row per prompt, a "
        "column per model): import it with `fugu-lite data import routerbench`"
    )
    assert "missing column(s) ['worker', 'reward']" in str(raised.value)
    # a header written with a space after each comma and one before the line's end
    path.write_text("prompt, eval_name, m1, m1|total_cost \nq, e, 1, 0.1\n", encoding="utf-8")
    with pytest.raises(RecordFileError, match=r"make it a RouterBench table"):
        import_dataset("long", path)


def test_routerbench_split_column_named_like_a_number(tmp_path: Path) -> None:
    path = tmp_path / "rb.csv"
    routerbench_table(**{"2024": ["train", "test", "test"]}).to_csv(path, index=False)
    records = import_dataset("routerbench", path, split_column="2024")
    assert [r.split for r in records] == ["train", "test", "test"]


def test_routerbench_with_no_records_left_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "rb.csv"
    path.write_text("prompt,eval_name,m1,m1|total_cost\n", encoding="utf-8")
    with pytest.raises(RecordFileError, match=r"rb\.csv: has a header but no data rows"):
        import_routerbench(path)
    path.write_text("prompt,eval_name,m1,m1|total_cost\np,t,,0.1\nq,t,1,NA\n", encoding="utf-8")
    with pytest.raises(RecordFileError, match=r"every one of its 2 rows misses a score or cost"):
        import_routerbench(path, on_missing="drop")
    # a spreadsheet's empty rows alone: the import gave no records and no word of why
    path.write_text("prompt,eval_name,m1,m1|total_cost\n,,,\n , ,,\n", encoding="utf-8")
    with pytest.raises(RecordFileError, match=r"rb\.csv: has a header but only empty rows"):
        import_routerbench(path)


RB_HEADER = b"prompt,eval_name,m,m|total_cost\n"


@pytest.mark.parametrize(
    ("name", "content", "expected"),
    [
        ("rb.csv", b"", r"rb\.csv: the file is empty"),
        ("rb.csv", RB_HEADER + b'"open,t,1,0.1\n', r"rb\.csv: not a readable CSV"),
        ("rb.csv", RB_HEADER + b"h\xe9,t,1,0.1\n", r"rb\.csv, line 2: not UTF-8 text"),
        ("rb.pkl", b"garbage, not a pickle", r"rb\.pkl: not a readable pandas pickle"),
        ("rb.pkl", b"", r"rb\.pkl: not a readable pandas pickle"),
        # compressed: gzip's own "Not a gzipped file" named no file
        ("rb.pkl.gz", b"not gzip", r"rb\.pkl\.gz: cannot be read .*; is it really \.gz-compressed"),
        ("rb.csv.zip", b"not zip", r"rb\.csv\.zip: cannot be read .*\.zip-compressed"),
        ("rb.csv.gz", gzip.compress(RB_HEADER + b"h\xe9,t,1,0\n"), r"rb\.csv\.gz: not UTF-8"),
        ("rb.json.gz", b"", r"rb\.json\.gz: expected a \.pkl or \.csv .*compressed: \.gz"),
    ],
)  # fmt: skip
def test_routerbench_unreadable_files_name_the_file(
    tmp_path: Path, name: str, content: bytes, expected: str
) -> None:
    (tmp_path / name).write_bytes(content)
    with pytest.raises(RecordFileError, match=expected):
        import_routerbench(tmp_path / name)


def test_a_routerbench_row_with_a_field_more_than_the_header_is_named(tmp_path: Path) -> None:
    # pandas read the first column as the index: every column shifted one to the left
    path = tmp_path / "rb.csv"
    path.write_bytes(RB_HEADER + b"What is 1,000 + 1?,math,1,0.1\n")
    with pytest.raises(
        RecordFileError, match=r"rb\.csv, row 1: 5 fields but the header has 4 .*quoting"
    ):
        import_routerbench(path)  # was the prompt '000 + 1?'
    # a trailing comma a line, one followed by a space too
    path.write_bytes(RB_HEADER + b"p,math,1,0.1,\nq,math,0,0.2, \n")
    records = import_routerbench(path)
    assert [(r.prompt, r.task, r.rewards, r.costs) for r in records] == [
        ("p", "math", [1.0], [0.1]),
        ("q", "math", [0.0], [0.2]),
    ]  # the last cost was missing from every row
    # semicolons and a decimal comma: the header is one column, which says why
    path.write_bytes(b"prompt;eval_name;m;m|total_cost\np;math;1;0,1\n")
    with pytest.raises(RecordFileError, match=r"the header is one column: a RouterBench CSV is"):
        import_routerbench(path)


def test_routerbench_workers_are_sorted_whatever_the_column_order(tmp_path: Path) -> None:
    """A record's workers are the models sorted by name, each with its own score and cost,
    however the table orders its columns (a pool and the records of another import of the
    table then name the workers alike)."""
    path = tmp_path / "rb.csv"
    path.write_text(
        "prompt,eval_name,m3,m3|total_cost,m1,m1|total_cost,m2,m2|total_cost\n"
        "q,e,0.3,3,0.1,1,0.2,2\n",
        encoding="utf-8",
    )
    (record,) = import_routerbench(path)
    assert (record.worker_ids, record.rewards, record.costs) == (
        ["m1", "m2", "m3"],
        [0.1, 0.2, 0.3],
        [1.0, 2.0, 3.0],
    )


def test_routerbench_warns_about_a_score_column_without_costs(tmp_path: Path, caplog) -> None:
    path = tmp_path / "rb.csv"
    # a column left empty (a spreadsheet's "notes") holds no numbers, nor does one of text
    # with a number among it: neither is told of as a model; nor is a column whose name holds
    # the cost suffix before its end (no model's cost)
    table = routerbench_table(
        **{
            "claude-v2": [1.0, "NA", 1.0],  # a missing score written NA: still numbers
            "notes": ["", " ", "NA"],
            "comment": ["2", "see row 1", ""],
            f"{ROUTERBENCH_MODELS[0]}|total_cost_per_1k": [1.0, 2.0, 3.0],
        }
    )
    table.to_csv(path, index=False)
    with caplog.at_level(logging.WARNING):
        records = import_routerbench(path)
    assert records[0].worker_ids == sorted(ROUTERBENCH_MODELS)
    assert "column(s) ['claude-v2'] hold numbers but have no cost column" in caplog.text
    assert "claude-v2|total_cost" in caplog.text
    assert "sample_id" not in caplog.text.split("hold numbers")[0]


@pytest.mark.parametrize("empty", [math.nan, pd.NA, None])
def test_a_pickled_tables_empty_split_cell_is_called_empty(tmp_path: Path, empty: object) -> None:
    """An empty split cell of a pickled RouterBench table (NaN, pd.NA) was refused as "unknown
    split nan", as if nan were a name the user had written."""
    path = tmp_path / "rb.pkl"
    table = routerbench_table(fold=["train", "test", "validation"])
    table["fold"] = table["fold"].astype(object)
    table.loc[1, "fold"] = empty
    table.to_pickle(path)
    with pytest.raises(SplitError, match=r"row 2 .*: no split value \(the split column is absent"):
        import_routerbench(path, split_column="fold")


@pytest.mark.parametrize("separator", [";", "\t"])
def test_routerbench_csv_of_another_separator_says_to_use_commas(
    tmp_path: Path, separator: str
) -> None:
    """A CSV saved with semicolons (a spreadsheet in a decimal-comma locale) or tabs is read
    as one column: the error listed that column as found, without a word of the separator."""
    path = tmp_path / "rb.csv"
    routerbench_table().to_csv(path, index=False, sep=separator)
    with pytest.raises(RecordFileError) as error:
        import_routerbench(path)
    assert "missing column(s) ['prompt', 'eval_name']" in str(error.value)
    assert "the header is one column" in str(error.value)
    assert "separated by commas" in str(error.value)


@pytest.mark.parametrize("name", ["rb.pkl", "rb.pkl.gz"])
@pytest.mark.parametrize("module", ["pandas.core.indexes.numeric_v9", "numpy._core_v9.multiarray"])
def test_routerbench_pickle_of_another_pandas_version_says_how_to_convert_it(
    tmp_path: Path, module: str, name: str
) -> None:
    """A pickle names the classes of the pandas and numpy that wrote it (numpy 2's
    `numpy._core` is unknown to numpy 1): the error said to re-export the table with
    to_pickle, which needs the table read first, without a word of versions. The CSV it says
    to write is named without .pkl and a compression suffix (not rb.pkl.gz.csv)."""
    path = tmp_path / name
    # a protocol-2 pickle of one object whose class lives in `module` (GLOBAL, then NEWOBJ)
    pickled = b"\x80\x02c" + module.encode() + b"\nTable\nq\x00)\x81q\x01."
    path.write_bytes(gzip.compress(pickled) if name.endswith(".gz") else pickled)
    with pytest.raises(RecordFileError) as error:
        import_routerbench(path)
    message = str(error.value)
    assert f"{name}: not a readable pandas pickle (ModuleNotFoundError: No module named" in message
    assert f"this is pandas {pd.__version__}, numpy {np.__version__}" in message
    assert f"pandas.read_pickle('{name}').to_csv('rb.csv', index=False)" in message


def test_routerbench_empty_prompt_says_what_to_do(tmp_path: Path) -> None:
    """A row with an empty prompt cell was refused as "prompt must be a non-empty string,
    got ''", saying nothing of what to do about it."""
    path = tmp_path / "rb.csv"
    routerbench_table(prompt=["q", " ", "r"]).to_csv(path, index=False)
    with pytest.raises(RecordFileError) as raised:
        import_routerbench(path)
    assert str(raised.value) == (
        f"{path}, row 2 (sample_id=gsm.1): prompt is empty (' '); fill it in or delete the row"
    )


def test_routerbench_score_written_as_a_percentage_says_to_write_a_fraction(
    tmp_path: Path,
) -> None:
    """A score in a spreadsheet's percentage format ("85%") was refused as "must be a finite
    number, got '85%'", without a word of how to write it (the long importer reads it)."""
    path = tmp_path / "rb.csv"
    path.write_text(
        "prompt,eval_name,m1,m1|total_cost\np,t,1,0.1\nr,t,85 %,0.1\n", encoding="utf-8"
    )
    with pytest.raises(RecordFileError) as raised:
        import_routerbench(path)
    assert str(raised.value) == (
        f"{path}, row 2: the score of m1 must be a finite number, got '85 %' (write the "
        "percentage as a fraction: 0.85)"
    )
    path.write_text("prompt,eval_name,m1,m1|total_cost\np,t,1,0.1\nr,t,-25%,0.1\n")
    with pytest.raises(
        RecordFileError, match=r"got '-25%' \(write the percentage as a fraction: -0.25\)"
    ):
        import_routerbench(path)


@pytest.mark.parametrize("column", ["prompt", "eval_name", "fold"])
def test_a_raw_routerbench_samples_rows_must_agree_on_its_prompt_task_and_split(
    tmp_path: Path, column: str
) -> None:
    """The raw table joins a sample's model rows by sample_id: rows of one sample_id with
    different prompts (ids reused across evals, e.g. 0, 1, 2 in each) were joined into one
    record with the first row's prompt, the other prompt's scores mixed in without a word."""
    raw = raw_routerbench_table(routerbench_table())
    raw["fold"] = "train"
    raw.loc[1, column] = "other"  # the first sample's second model row
    path = tmp_path / "routerbench_raw.pkl"
    raw.to_pickle(path)
    with pytest.raises(RecordFileError) as raised:
        import_routerbench(path, split_column="fold")
    message = str(raised.value)
    assert message.startswith(
        f"{path}: sample_id 'mmlu.0' has different {column} values on its rows 1 and 2"
    )
    assert "give each sample its own sample_id" in message
    raw.loc[1, column] = raw.loc[0, column]
    raw.to_pickle(path)
    assert len(import_routerbench(path, split_column="fold")) == 3


def test_a_raw_samples_rows_that_disagree_are_named_past_its_empty_cell(tmp_path: Path) -> None:
    """An empty cell disagrees with nothing, so the rows named as disagreeing are two with a
    value: a sample's first row with no prompt was named against its second ("rows 1 and 2
    (nan, 'q1')") though the prompts that differ are on rows 2 and 3."""
    raw = pd.DataFrame(
        {
            "sample_id": ["s1"] * 3,
            "prompt": [math.nan, "q1", "q2"],
            "eval_name": ["mmlu"] * 3,
            "model_name": ["m1", "m2", "m3"],
            "performance": [1.0, 0.0, 1.0],
            "cost": [0.1, 0.2, 0.3],
        }
    )
    path = tmp_path / "routerbench_raw.pkl"
    raw.to_pickle(path)
    with pytest.raises(RecordFileError) as raised:
        import_routerbench(path)
    assert str(raised.value).startswith(
        f"{path}: sample_id 's1' has different prompt values on its rows 2 and 3 ('q1', 'q2')"
    )


@pytest.mark.parametrize("suffix", [".pkl", ".csv"])
def test_a_raw_samples_rows_agree_on_an_empty_cell_a_spaced_task_and_a_splits_case(
    tmp_path: Path, suffix: str
) -> None:
    """A sample's rows with its prompt on one row only (the others empty) were refused as
    disagreeing in a CSV (its empty cell is "", a pickle's NaN, which disagrees with nothing),
    so a raw pickle saved as CSV no longer imported (a cell of spaces is empty too); and rows
    whose eval_name differs only in spaces around it, or whose split only in case, were
    refused though both are read so."""
    raw = raw_routerbench_table(routerbench_table())
    raw["fold"] = ["train", "Train", "test", "TEST ", "validation", "val"]
    raw.loc[0, "prompt"] = math.nan  # the first sample's prompt on its second row only
    raw.loc[2, "prompt"] = "  "  # a cell of spaces is empty too
    raw.loc[3, "eval_name"] = f" {raw.loc[3, 'eval_name']} "
    path = tmp_path / f"routerbench_raw{suffix}"
    raw.to_pickle(path) if suffix == ".pkl" else raw.to_csv(path, index=False)
    records = import_routerbench(path, split_column="fold")
    assert [(r.prompt, r.task, r.split) for r in records] == [
        ("['What is 2+2?']", "mmlu-math", "train"),
        ("Tom has 3 apples.", "gsm8k", "test"),
        ("Write a poem.", "mt-bench", "validation"),
    ]


@pytest.mark.parametrize("dtype", ["object", "string"])
def test_routerbench_pickled_prompt_of_none_says_what_to_do(tmp_path: Path, dtype: str) -> None:
    """A pickled table's empty prompt cell is None (an object column) or pd.NA (a "string"
    one): it was refused as "prompt must be a non-empty string, got None", as if the cell
    held a value of another type, where an empty NaN cell said to fill it in."""
    table = routerbench_table()
    table["prompt"] = table["prompt"].astype(dtype)
    table.loc[1, "prompt"] = None
    path = tmp_path / "rb.pkl"
    table.to_pickle(path)
    with pytest.raises(RecordFileError) as raised:
        import_routerbench(path)
    assert str(raised.value).startswith(f"{path}, row 2 (sample_id=gsm.1): prompt is empty (")
    assert str(raised.value).endswith("); fill it in or delete the row")


def test_a_whole_number_sample_id_stored_as_a_float_is_the_integers_id(tmp_path: Path) -> None:
    """A sample_id column of integers with a gap is a float column in pandas: its ids were
    "1.0" and "2.0"; they are now "1" and "2", and the gap gets an id from its prompt."""
    table = routerbench_table(sample_id=[1.0, math.nan, 2.0])
    table.to_pickle(tmp_path / "rb.pkl")
    records = import_routerbench(tmp_path / "rb.pkl")
    ids = {r.prompt: r.id for r in records}
    assert ids["['What is 2+2?']"] == "1"
    assert ids["Write a poem."] == "2"
    assert ids["Tom has 3 apples."] == stable_id("routerbench", "Tom has 3 apples.")


@pytest.mark.parametrize("name", ["rb.pkl", "rb.pkl.gz"])
def test_a_pickle_cut_short_says_to_fetch_it_again(tmp_path: Path, name: str) -> None:
    """A pickle whose download was interrupted ("pickle data was truncated", or its .gz's
    EOFError) was told to "re-export the table with DataFrame.to_pickle"."""
    table = routerbench_table(
        prompt=[f"a longer prompt, number {index}" * 20 for index in range(3)]
    )
    path = tmp_path / name
    table.to_pickle(path)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(RecordFileError) as raised:
        import_routerbench(path)
    assert "not a readable pandas pickle" in str(raised.value)
    assert str(raised.value).endswith(
        "it was cut short (an interrupted download or copy?): fetch or copy it again"
    )


@pytest.mark.parametrize("column", ["prompt", "eval_name", "sample_id", "model"])
def test_a_pickled_lone_surrogate_is_named_at_its_row_or_column(
    tmp_path: Path, column: str
) -> None:
    """A pickle's text may hold half a surrogate pair ("\\ud83d", an emoji cut in two), which
    no UTF-8 file can: the import failed with a UnicodeEncodeError (hashing the prompt), or
    `data import` when writing the records with a PydanticSerializationError, naming no row."""
    table = routerbench_table()
    if column == "model":
        model = ROUTERBENCH_MODELS[1]
        table = table.rename(
            columns={model: "m\ud83d", f"{model}|total_cost": "m\ud83d|total_cost"}
        )
    else:
        table.loc[1, column] = table.loc[1, column] + "\ud83d"
    path = tmp_path / "rb.pkl"
    table.to_pickle(path)
    with pytest.raises(RecordFileError) as raised:
        import_routerbench(path)
    what = "the model column 'm\\ud83d'" if column == "model" else "row 2 (sample_id="
    assert what in str(raised.value)
    assert column == "model" or f"): {column} holds" in str(raised.value)
    assert "holds a lone UTF-16 surrogate (\\ud83d), which is not Unicode text" in str(raised.value)


def test_routerbench_reads_a_pickle_whose_index_repeats_a_column(tmp_path: Path) -> None:
    """A table saved after set_index("sample_id", drop=False) holds its ids both in a column
    and in the index: the column is read, the index left alone (moving it to the columns
    failed with pandas' "cannot insert sample_id, already exists"); every test's index was
    dropped from the columns, so reading it regardless passed them all."""
    path = tmp_path / "routerbench.pkl"
    plain = routerbench_table()
    plain.to_pickle(path)
    expected = import_routerbench(path)
    plain.set_index("sample_id", drop=False).to_pickle(path)
    assert import_routerbench(path) == expected


@pytest.mark.parametrize("name", ["rb.csv", "rb.csv.gz"])
def test_a_nul_byte_in_any_column_name_of_a_routerbench_csv_is_named(
    tmp_path: Path, name: str
) -> None:
    """A header holding a NUL byte in a later column's name (not only the first) is told as
    text that is not UTF-8, compressed or not."""
    text = b"sample_id,prompt,eval_name,m1\x00,m1|total_cost\ns1,q,e,1,0.1\n"
    path = tmp_path / name
    path.write_bytes(gzip.compress(text) if name.endswith(".gz") else text)
    with pytest.raises(RecordFileError) as raised:
        import_routerbench(path)
    assert str(raised.value).startswith(f"{path}, line 1: not UTF-8 text (it holds NUL bytes)")


@pytest.mark.parametrize("suffix", [".pkl", ".csv", ".csv.gz"])
@pytest.mark.parametrize("name", ["m\x00", "m\x1b[31m", "m\x7f", "m\tx"])
@pytest.mark.parametrize("raw", [False, True])
def test_a_model_name_holding_a_control_character_is_refused_naming_its_column(
    tmp_path: Path, suffix: str, name: str, raw: bool
) -> None:
    """A model named with a NUL or a terminal's colour code (`m\x00`, `m\x1b[31m`) in a
    pickle's column, or in a raw table's model_name cell of a pickle or a CSV, was imported
    as a worker of that name, which no pool's worker id can match, where a CSV header's NUL
    is refused."""
    model = ROUTERBENCH_MODELS[1]
    wide = routerbench_table().rename(
        columns={model: name, f"{model}|total_cost": f"{name}|total_cost"}
    )
    table = raw_routerbench_table(routerbench_table()) if raw else wide
    if raw:
        table["model_name"] = table["model_name"].replace(model, name)
    path = tmp_path / f"rb{suffix}"
    if suffix == ".pkl":
        table.to_pickle(path)
    else:
        table.to_csv(path, index=False)
    with pytest.raises(RecordFileError) as raised:
        import_routerbench(path)
    message = str(raised.value)
    if suffix != ".pkl" and not raw and name == "m\x00":  # a CSV header's NUL: UTF-16 text
        assert message.startswith(f"{path}, line 1: not UTF-8 text (it holds NUL bytes)")
        return
    where = f"{path}, row 1 (sample_id=mmlu.0): model_name" if raw else f"{path}: the model column"
    assert message == (
        f"{where} {name!r} holds the control character U+{ord(name[1]):04X}, which no worker's "
        "name can hold: rename the model in the table"
    )


@pytest.mark.parametrize("suffix", [".pkl", ".csv"])
@pytest.mark.parametrize("raw", [False, True])
def test_a_model_name_with_a_tab_or_line_break_around_it_is_that_model(
    tmp_path: Path, suffix: str, raw: bool
) -> None:
    """A tab or a line break around a model's name is stripped as a space is, in a model
    column and in a raw table's model_name: not refused as a control character."""
    model = ROUTERBENCH_MODELS[1]
    routerbench_table().to_pickle(tmp_path / "plain.pkl")
    spaced = f"\t{model}\n"
    if raw:
        table = raw_routerbench_table(routerbench_table())
        table["model_name"] = table["model_name"].replace(model, spaced)
    else:
        table = routerbench_table().rename(columns={model: spaced})
        table = table.rename(columns={f"{model}|total_cost": f"{spaced}|total_cost"})
    path = tmp_path / f"rb{suffix}"
    table.to_pickle(path) if suffix == ".pkl" else table.to_csv(path, index=False)
    assert import_routerbench(path) == import_routerbench(tmp_path / "plain.pkl")


def test_a_pickle_naming_a_class_its_module_lacks_says_how_to_convert_it(tmp_path: Path) -> None:
    """A class that pandas' module no longer has (AttributeError, not ImportError) is another
    version's too; the CSV to write is named without .PKL.GZ in any case."""
    path = tmp_path / "RB.PKL.GZ"
    path.write_bytes(gzip.compress(b"\x80\x02cpandas.core.frame\nTableV9\nq\x00)\x81q\x01."))
    with pytest.raises(RecordFileError) as raised:
        import_routerbench(path)
    message = str(raised.value)
    assert "not a readable pandas pickle (AttributeError: " in message
    assert "pandas.read_pickle('RB.PKL.GZ').to_csv('RB.csv', index=False)" in message


def test_a_raw_tables_repeated_row_named_is_the_first_repeat(tmp_path: Path) -> None:
    """The sample and model named are those of the first row that repeats an earlier one
    (here gsm.1's, repeated before mmlu.0's), not of the first row that has a repeat."""
    raw = raw_routerbench_table(routerbench_table())
    path = tmp_path / "routerbench_raw.pkl"
    pd.concat([raw, raw.iloc[[2, 0]]], ignore_index=True).to_pickle(path)
    with pytest.raises(RecordFileError) as raised:
        import_routerbench(path)
    assert str(raised.value) == (
        f"{path}: sample_id 'gsm.1' has more than one row for model "
        f"{ROUTERBENCH_MODELS[-1]!r}; keep one row per sample and model"
    )


def refusal_of_raw_pickle(path: Path, raw: pd.DataFrame) -> str:
    """The error that importing `raw`, pickled as `path`, raises."""
    raw.to_pickle(path)
    with pytest.raises(RecordFileError) as raised:
        import_routerbench(path)
    return str(raised.value)


def test_a_raw_pickles_rows_are_numbered_from_1_whatever_its_index(tmp_path: Path) -> None:
    """A raw pickle whose index does not start at 0 (rows filtered out before saving) has its
    rows named by their place in the table, 1 the first."""
    raw = raw_routerbench_table(routerbench_table())
    raw.index = raw.index + 10
    raw["model_name"] = raw["model_name"].astype(object)
    raw.loc[13, "model_name"] = None
    path = tmp_path / "routerbench_raw.pkl"
    assert refusal_of_raw_pickle(path, raw).startswith(
        f"{path}, row 4 (sample_id=gsm.1): no model_name;"
    )


def test_a_raw_pickles_row_of_empty_texts_is_no_spreadsheet_row_to_skip(tmp_path: Path) -> None:
    """Only a CSV's empty rows (",,,", a spreadsheet's) are skipped: a pickle's row of empty
    texts is named as a row without a sample_id, as a wide pickle's is not skipped either."""
    raw = raw_routerbench_table(routerbench_table()).astype(object)
    raw.loc[len(raw)] = [""] * len(raw.columns)
    path = tmp_path / "routerbench_raw.pkl"
    assert refusal_of_raw_pickle(path, raw).startswith(f"{path}, row 7: no sample_id;")


def test_a_raw_pickles_prompt_given_as_a_list_is_refused_as_no_text(tmp_path: Path) -> None:
    """A pickled raw table's prompt that is a Python list (not the stored text "['...']") is
    compared across the sample's rows as its text, and refused as no string, saying how to
    import it: the refusal said only "prompt must be a non-empty string, got [...]"."""
    raw = raw_routerbench_table(routerbench_table()).astype(object)
    for position in (0, 1):
        raw.at[position, "prompt"] = ["What is 2+2?"]
    path = tmp_path / "routerbench_raw.pkl"
    assert refusal_of_raw_pickle(path, raw) == (
        f"{path}, the rows of sample_id=mmlu.0: prompt must be a non-empty string, got "
        "['What is 2+2?']; routerbench takes a prompt as one text: join the chat turns into one "
        "string, or write the table in the long format (a row per prompt and model: prompt, "
        "worker, reward, cost), whose prompt may be a list of chat messages "
        '({"role": ..., "content": ...})'
    )
    wide = routerbench_table().astype(object)
    wide.at[0, "prompt"] = ("What is 2+2?",)  # a wide pickle's, a tuple: the same advice
    path = tmp_path / "routerbench.pkl"
    wide.to_pickle(path)
    with pytest.raises(RecordFileError, match=r"got \('What is 2\+2\?',\); routerbench takes"):
        import_routerbench(path)


def test_a_pickles_prompt_given_as_a_numpy_array_is_refused_saying_how_to_import_it(
    tmp_path: Path,
) -> None:
    """A pickled table's prompt cell holding a numpy array of chat turns (as a list column
    read back through numpy does) gets the list's advice: it said only "prompt must be a
    non-empty string, got array([...])", not what to do."""
    wide = routerbench_table().astype(object)
    turns = np.array(["What is 2+2?", "Show your work."], dtype=object)
    wide["prompt"] = [turns, *wide["prompt"][1:]]
    path = tmp_path / "routerbench.pkl"
    wide.to_pickle(path)
    with pytest.raises(RecordFileError) as raised:
        import_routerbench(path)
    assert str(raised.value) == (
        f"{path}, row 1 (sample_id=mmlu.0): prompt must be a non-empty string, got "
        "array(['What is 2+2?', 'Show your work.'], dtype=object); routerbench takes a prompt "
        "as one text: join the chat turns into one string, or write the table in the long "
        "format (a row per prompt and model: prompt, worker, reward, cost), whose prompt may be "
        'a list of chat messages ({"role": ..., "content": ...})'
    )


def test_a_raw_pickles_prompt_given_as_a_numpy_array_is_refused_saying_how_to_import_it(
    tmp_path: Path,
) -> None:
    """A raw pickle's numpy array prompt is compared across its sample's rows as its text, as
    a list is: the comparison failed on "TypeError: unhashable type: 'numpy.ndarray'",
    naming neither the file nor the row."""
    raw = raw_routerbench_table(routerbench_table()).astype(object)
    turns = np.array(["What is 2+2?", "Show your work."], dtype=object)
    raw["prompt"] = [turns, turns.copy(), *raw["prompt"][2:]]
    path = tmp_path / "routerbench_raw.pkl"
    assert refusal_of_raw_pickle(path, raw).startswith(
        f"{path}, the rows of sample_id=mmlu.0: prompt must be a non-empty string, got "
        "array(['What is 2+2?', 'Show your work.'], dtype=object); routerbench takes a prompt "
        "as one text: join the chat turns into one string"
    )
    raw.at[1, "prompt"] = np.array(["What is 3+3?"], dtype=object)
    assert "sample_id 'mmlu.0' has different prompt values on its rows 1 and 2" in (
        refusal_of_raw_pickle(path, raw)
    )


def test_cost_columns_without_a_score_column_are_named_sorted(tmp_path: Path) -> None:
    """The models of cost columns without a score column are listed sorted, whatever order a
    set of the columns gives (five such models: a lucky unsorted order is one in 120)."""
    path = tmp_path / "rb.csv"
    orphans = ["e", "c", "a", "d", "b"]
    costs = {f"{model}|total_cost": [0.1, 0.1, 0.1] for model in orphans}
    routerbench_table(**costs).to_csv(path, index=False)
    with pytest.raises(RecordFileError) as raised:
        import_routerbench(path)
    assert str(raised.value) == (
        f"{path}: cost columns without a score column for ['a', 'b', 'c', 'd', 'e']"
    )


def test_a_split_column_of_numbers_is_no_model_score_to_warn_of(tmp_path: Path, caplog) -> None:
    """The split column given (a fold of numbers, 1 and 2) is refused for its values, without
    the warning that it holds numbers to import as a model's scores with a cost column."""
    path = tmp_path / "rb.csv"
    routerbench_table(fold=["1", "2", "1"]).to_csv(path, index=False)
    with caplog.at_level(logging.WARNING), pytest.raises(SplitError, match="unknown split '1'"):
        import_routerbench(path, split_column="fold")
    assert "hold numbers but have no cost column" not in caplog.text


def test_a_table_named_with_dots_is_read_by_its_last_suffix(tmp_path: Path) -> None:
    """A name with a dot before its suffix (`routerbench_0shot.v2.pkl`, `rb.2024.csv.gz`) is
    a .pkl or .csv table as its last suffix (before a compression's) says."""
    table = routerbench_table()
    pickled, compressed = tmp_path / "routerbench_0shot.v2.pkl", tmp_path / "rb.2024.csv.gz"
    table.to_pickle(pickled)
    table.to_csv(compressed, index=False)
    assert [r.id for r in import_routerbench(pickled)] == ["mmlu.0", "gsm.1", "mtbench.2"]
    assert import_routerbench(compressed) == import_routerbench(pickled)


def test_a_folder_given_as_the_table_says_to_give_the_table_inside_it(tmp_path: Path) -> None:
    folder = tmp_path / "routerbench.pkl"
    folder.mkdir()
    with pytest.raises(RecordFileError) as raised:
        import_routerbench(folder)
    assert str(raised.value) == f"{folder} is a directory; give the .pkl or .csv table inside it"


def test_a_nul_byte_in_a_pickled_column_name_is_no_text_encoding_to_refuse(
    tmp_path: Path,
) -> None:
    """Only a CSV's header is a line of text that a NUL byte shows to be UTF-16: a pickle's
    column name holding one (an unused notes column here) is read as it is."""
    path = tmp_path / "rb.pkl"
    routerbench_table(**{"notes\x00": ["a", "b", "c"]}).to_pickle(path)
    records = import_routerbench(path)
    assert [(r.id, r.worker_ids) for r in records] == [
        (sample_id, sorted(ROUTERBENCH_MODELS)) for sample_id in ("mmlu.0", "gsm.1", "mtbench.2")
    ]


def test_a_raw_pickles_models_named_by_numbers_are_workers_named_by_their_text(
    tmp_path: Path,
) -> None:
    """model_name cells holding numbers (4, 70) give each model a score and a cost, as a
    wide table's columns named so do: the workers are '4' and '70'."""
    raw = raw_routerbench_table(routerbench_table())
    raw["model_name"] = raw["model_name"].map(dict(zip(ROUTERBENCH_MODELS, (4, 70), strict=True)))
    path = tmp_path / "routerbench_raw.pkl"
    raw.to_pickle(path)
    first = import_routerbench(path)[0]
    assert (first.worker_ids, first.rewards, first.costs) == (["4", "70"], [1.0, 1.0], [0.01, 0.02])


def test_a_raw_pickles_prompt_given_as_a_dict_is_refused_as_no_text(tmp_path: Path) -> None:
    """A pickled raw table's prompt that is a dict (one chat message) is compared across the
    sample's rows as its text, as a list is (a dict cannot be hashed), and refused as no
    string at the sample's rows."""
    raw = raw_routerbench_table(routerbench_table()).astype(object)
    for position in (0, 1):
        raw.at[position, "prompt"] = {"role": "user", "content": "What is 2+2?"}
    path = tmp_path / "routerbench_raw.pkl"
    assert refusal_of_raw_pickle(path, raw) == (
        f"{path}, the rows of sample_id=mmlu.0: prompt must be a non-empty string, got "
        "{'role': 'user', 'content': 'What is 2+2?'}"
    )


def test_of_raw_samples_whose_rows_disagree_the_first_in_the_table_is_named(
    tmp_path: Path,
) -> None:
    """Of two samples whose rows disagree, the one named is the first in the table (z1), not
    the first in sorted order (a1)."""
    raw = pd.DataFrame(
        {
            "sample_id": ["z1", "z1", "a1", "a1"],
            "prompt": ["q1", "q2", "q3", "q4"],
            "eval_name": ["mmlu"] * 4,
            "model_name": ["m1", "m2"] * 2,
            "performance": [1.0, 0.0, 1.0, 0.0],
            "cost": [0.1, 0.2, 0.1, 0.2],
        }
    )
    path = tmp_path / "routerbench_raw.pkl"
    assert refusal_of_raw_pickle(path, raw).startswith(
        f"{path}: sample_id 'z1' has different prompt values on its rows 1 and 2 ('q1', 'q2')"
    )
