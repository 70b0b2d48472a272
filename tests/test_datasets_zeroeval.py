"""The ZeroEval importer (scores_compact.jsonl): small generated files, plus the real
../shared/data."""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import math
from pathlib import Path

import pytest
from conftest import require_shared_data
from datasets_support import (
    routerbench_table,
    split_figures,
    write_jsonl,
    zeroeval_row,
)

from fugu_lite.datasets import (
    SplitError,
    import_dataset,
    import_zeroeval,
)
from fugu_lite.schemas import RewardRecord
from fugu_lite.text_reading import RecordFileError


@pytest.mark.parametrize("where", [".", "zeroeval"])
def test_a_folder_holding_the_scores_compressed_says_to_decompress_them(
    tmp_path: Path, where: str
) -> None:
    """A folder holding scores_compact.jsonl.gz was told "no scores_compact.jsonl here", as
    if the download were missing."""
    folder = tmp_path / where
    folder.mkdir(exist_ok=True)
    with gzip.open(folder / "scores_compact.jsonl.gz", "wt", encoding="utf-8") as stream:
        stream.write(json.dumps(zeroeval_row("q1")) + "\n")
    with pytest.raises(RecordFileError) as raised:
        import_zeroeval(tmp_path)
    assert str(raised.value) == (
        f"{tmp_path}: no scores_compact.jsonl here, nor in {tmp_path / 'zeroeval'}, but "
        f"{folder / 'scores_compact.jsonl.gz'} is there compressed: decompress it "
        "(`gunzip -k scores_compact.jsonl.gz`) and import again"
    )


def test_a_model_named_with_spaces_around_it_is_that_model(tmp_path: Path) -> None:
    """A row scoring "m1 " beside rows scoring "m1" made two workers, and the other rows were
    refused as having "no score or out_chars for ['m1 ']", though they score m1; the long and
    RouterBench importers read a worker's name without its spaces."""
    spaced = zeroeval_row("q2", scores={"m2": 1, " m1 ": 0.5}, out_chars={"m1 ": 40, "m2": 4})
    path = write_jsonl(tmp_path / "scores_compact.jsonl", [zeroeval_row("q1"), spaced])
    records = import_zeroeval(path)
    assert [(r.worker_ids, r.rewards, r.costs) for r in records] == [
        (["m1", "m2"], [0.0, 1.0], [10.0, 100.0]),
        (["m1", "m2"], [0.5, 1.0], [10.0, 1.0]),
    ]
    twice = zeroeval_row("q3", scores={"m1": 0, "m1 ": 1, "m2": 1})
    write_jsonl(path, [zeroeval_row("q1"), twice])
    with pytest.raises(RecordFileError) as raised:
        import_zeroeval(path)
    assert str(raised.value) == (
        f"{path}, line 2: scores names the model 'm1' twice ('m1', 'm1 '); keep one of them"
    )


def test_zeroeval_reads_scores_and_token_costs(tmp_path: Path, caplog) -> None:
    path = write_jsonl(
        tmp_path / "zeroeval" / "scores_compact.jsonl",
        [zeroeval_row("a"), zeroeval_row("b", task="crux"), zeroeval_row("", task="math-l5")],
    )
    with caplog.at_level(logging.WARNING):
        records = import_zeroeval(path)
    assert [r.prompt for r in records] == ["a", "b"]  # the empty question is dropped, and said
    assert f"{path}: dropped 1 rows with an empty question" in caplog.text
    assert records[0].worker_ids == ["m1", "m2"]
    assert records[0].rewards == [0.0, 1.0]
    assert records[0].costs == [10.0, 100.0]  # out_chars / 4: tokens, not USD
    assert (records[1].task, records[1].id) == ("crux", "crux:crux-b")
    assert import_dataset("zeroeval", tmp_path) == records  # the data folder works too


def test_zeroeval_prices_give_usd(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "z.jsonl", [zeroeval_row("abcd")])
    prices = {"m1": (1.0, 2.0), "m2": (3.0, 4.0)}
    (result,) = import_zeroeval(path, prices=prices)
    assert result.costs == pytest.approx([(1 * 1.0 + 10 * 2.0) / 1e6, (1 * 3.0 + 100 * 4.0) / 1e6])
    with pytest.raises(ValueError, match=r"prices has no .* \['m2'\]"):
        import_zeroeval(path, prices={"m1": (1.0, 2.0)})


def test_zeroeval_negative_or_nan_prices_are_refused(tmp_path: Path) -> None:
    """A negative input price was taken: the output price hid it, and the costs came out
    wrong but positive, with no word."""
    path = write_jsonl(tmp_path / "scores_compact.jsonl", [zeroeval_row("What is 2+2?")])
    negative, nan = {"m1": (-1.0, 2.0), "m2": (1.0, 2.0)}, {"m1": (1.0, 2.0), "m2": (1.0, math.nan)}
    infinite = {"m1": (math.inf, 2.0), "m2": (1.0, 2.0)}  # at least 0, but no price
    for prices in (negative, nan, infinite):
        with pytest.raises(ValueError, match="prices must be finite numbers of at least 0"):
            import_zeroeval(path, prices=prices)
    with pytest.raises(ValueError, match=r"option prices=.* is not valid: .*greater than or equal"):
        import_dataset("zeroeval", path, prices="{m1: [-1, 2], m2: [1, 2]}")
    # every problem at its place: only the first was said, and not where
    with pytest.raises(ValueError) as raised:
        import_dataset("zeroeval", path, prices="{m1: [1, x], m2: [2]}")
    assert str(raised.value).endswith(
        "(m1.1: Input should be a valid number, unable to parse string as a number; "
        "m2.1: Field required)"
    )


def test_zeroeval_missing_score_errors_or_drops(tmp_path: Path, caplog) -> None:
    rows = [zeroeval_row("a"), zeroeval_row("b", scores={"m1": 1}), zeroeval_row("c")]
    path = write_jsonl(tmp_path / "z.jsonl", rows)
    with pytest.raises(
        RecordFileError, match=r"z\.jsonl, line 2: no score or out_chars for"
    ) as raised:
        import_zeroeval(path)
    assert str(raised.value).endswith(
        "pass --option on_missing=drop"
    )  # as the command line takes it
    with caplog.at_level(logging.WARNING):
        records = import_zeroeval(path, on_missing="drop")
    assert [r.prompt for r in records] == ["a", "c"]
    assert "dropped 1 rows missing" in caplog.text
    with pytest.raises(ValueError, match="on_missing='skip' is not known"):
        import_zeroeval(path, on_missing="skip")  # type: ignore[arg-type]


def test_a_model_scored_only_after_the_first_row_is_a_worker(tmp_path: Path) -> None:
    """The workers are every model some row scores: a model first scored on a later row (a
    model added to the runs halfway) is a worker the earlier rows miss, not one left out."""
    added = {"scores": {"m1": 0, "m2": 1, "m3": 1}, "out_chars": {"m1": 4, "m2": 8, "m3": 12}}
    rows = [zeroeval_row("a"), zeroeval_row("b", **added)]
    path = write_jsonl(tmp_path / "z.jsonl", rows)
    with pytest.raises(
        RecordFileError, match=r"z\.jsonl, line 1: no score or out_chars for \['m3'\]"
    ):
        import_zeroeval(path)
    records = import_zeroeval(path, on_missing="drop")
    assert [(r.prompt, r.worker_ids, r.rewards) for r in records] == [
        ("b", ["m1", "m2", "m3"], [0.0, 1.0, 1.0])
    ]


def test_zeroeval_null_or_nan_score_counts_as_missing(tmp_path: Path, caplog) -> None:
    """A score given as null (or NaN) failed as "must be a finite number" even with
    on_missing=drop, which dropped only rows whose key was absent."""
    rows = [
        zeroeval_row("a"),
        zeroeval_row("b", scores={"m1": None, "m2": 1}),
        zeroeval_row("c", out_chars={"m1": math.nan, "m2": 3}),
        zeroeval_row("d"),
    ]
    path = write_jsonl(tmp_path / "z.jsonl", rows)
    with pytest.raises(RecordFileError, match=r"line 2: no score or out_chars for \['m1'\]"):
        import_zeroeval(path)
    with caplog.at_level(logging.WARNING):
        assert [r.prompt for r in import_zeroeval(path, on_missing="drop")] == ["a", "d"]
    assert "dropped 2 rows missing" in caplog.text


def test_zeroeval_score_written_as_nan_text_counts_as_missing(tmp_path: Path, caplog) -> None:
    """A score or out_chars given as the string "NaN" (or "NA", "") failed as "must be a
    finite number, got 'NaN'" without a word of on_missing, and on_missing=drop failed too."""
    rows = [
        zeroeval_row("a"),
        zeroeval_row("b", scores={"m1": "NaN", "m2": 1}),
        zeroeval_row("c", out_chars={"m1": 40, "m2": "NA"}),
        zeroeval_row("d", scores={"m1": "0", "m2": " 1 "}),  # numbers as text stay numbers
    ]
    path = write_jsonl(tmp_path / "z.jsonl", rows)
    with pytest.raises(
        RecordFileError, match=r"line 2: no score or out_chars for \['m1'\]"
    ) as raised:
        import_zeroeval(path)
    assert str(raised.value).endswith("pass --option on_missing=drop")
    with caplog.at_level(logging.WARNING):
        records = import_zeroeval(path, on_missing="drop")
    assert [(r.prompt, r.rewards) for r in records] == [("a", [0.0, 1.0]), ("d", [0.0, 1.0])]
    assert "dropped 2 rows missing" in caplog.text


def test_zeroeval_malformed_line_and_bad_score(tmp_path: Path) -> None:
    path = tmp_path / "z.jsonl"
    path.write_text(json.dumps(zeroeval_row("a")) + "\n{not json\n")
    with pytest.raises(RecordFileError, match=r"z\.jsonl, line 2: not valid JSON"):
        import_zeroeval(path)
    write_jsonl(path, [zeroeval_row("a", scores={"m1": "yes", "m2": 1})])
    with pytest.raises(RecordFileError, match=r"line 1: the score of m1 must be a finite"):
        import_zeroeval(path)


@pytest.mark.parametrize(
    ("name", "importer"),
    [("rb.csv", "`data import long`"), ("rb.pkl", "`data import routerbench`"),
     ("Sheet.XLSX", "saved as CSV")],
)  # fmt: skip
def test_zeroeval_given_a_table_names_the_importer_to_use(
    tmp_path: Path, name: str, importer: str
) -> None:
    """`data import zeroeval table.csv` said "not valid JSON ...: a CSV or other table is
    imported with `fugu-lite data import` first" to a user running data import."""
    path = tmp_path / name
    routerbench_table().to_csv(path, index=False)
    with pytest.raises(RecordFileError) as raised:
        import_dataset("zeroeval", path)
    message = str(raised.value)
    assert message.startswith(f"{path}: the zeroeval importer reads ZeroEval's scores_compact")
    assert importer in message and "first" not in message


def test_zeroeval_with_only_empty_questions_is_an_error(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "scores_compact.jsonl", [zeroeval_row(""), zeroeval_row(" ")])
    with pytest.raises(RecordFileError, match=r"no row is left to import: 2 row\(s\) have an"):
        import_zeroeval(path)


def test_zeroeval_without_any_models_score_says_so(tmp_path: Path) -> None:
    """Rows whose scores objects are all empty (the scores written elsewhere, or not yet)
    were refused as "not a valid record: worker_ids: List should have at least 1 item after
    validation, not 0", naming a field of the records, not of the file."""
    rows = [zeroeval_row("a", scores={}), zeroeval_row("b", scores={})]
    path = write_jsonl(tmp_path / "scores_compact.jsonl", rows)
    with pytest.raises(RecordFileError) as raised:
        import_zeroeval(path)
    assert str(raised.value) == (
        f"{path}: no row scores a model (every row's scores is {{}}); each row needs "
        "scores {model: score} and out_chars {model: characters} for every model"
    )


def test_zeroeval_split_column(tmp_path: Path) -> None:
    rows = [zeroeval_row("a", fold="test"), zeroeval_row("b", fold="train")]
    path = write_jsonl(tmp_path / "z.jsonl", rows)
    assert [r.split for r in import_zeroeval(path, split_column="fold")] == ["test", "train"]
    write_jsonl(path, [zeroeval_row("a", fold="holdout")])
    with pytest.raises(SplitError, match=r"line 1: unknown split 'holdout'"):
        import_zeroeval(path, split_column="fold")
    # A column name the rows do not have: it said "unknown split None"
    with pytest.raises(SplitError, match=r"line 1: no split value \(the split column is absent"):
        import_zeroeval(path, split_column="folds")


@pytest.fixture(scope="module")
def zeroeval_records() -> list[RewardRecord]:
    return import_zeroeval(require_shared_data("zeroeval") / "zeroeval")


@pytest.mark.integration
def test_real_zeroeval_numbers(zeroeval_records: list[RewardRecord]) -> None:
    assert len(zeroeval_records) == 2119  # 2840 rows minus 721 math-l5 rows with no question
    assert len(zeroeval_records[0].worker_ids) == 28
    assert {r.task for r in zeroeval_records} == {"gsm", "crux"}
    count, best, best_mean, oracle, random = split_figures(zeroeval_records, "test")
    # The same figures straight from the file, without the importer: rows with a question,
    # test = the first sha1 bucket rule of DESIGN.md.
    path = require_shared_data("zeroeval") / "zeroeval" / "scores_compact.jsonl"
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    test = [
        row for row in rows
        if row["question"].strip()
        and int(hashlib.sha1(row["question"].encode("utf-8")).hexdigest(), 16) % 10 < 2
    ]  # fmt: skip
    means = {model: sum(row["scores"][model] for row in test) / len(test) for model in
             test[0]["scores"]}  # fmt: skip
    expected_best = max(means, key=lambda model: means[model])
    assert (count, best) == (len(test), expected_best)
    assert best_mean == pytest.approx(means[expected_best])
    assert oracle == pytest.approx(sum(max(row["scores"].values()) for row in test) / len(test))
    assert random == pytest.approx(sum(means.values()) / len(means))


def test_a_whole_number_id_stored_as_a_float_is_the_integers_id(tmp_path: Path) -> None:
    """An id 1.0 (pandas' to_json of an integer column with a gap) was refused as "id must be
    a string or an integer"; it is the id 1. A fraction is still refused."""
    path = write_jsonl(tmp_path / "scores.jsonl", [zeroeval_row("q1", id=1.0)])
    assert [r.id for r in import_zeroeval(path)] == ["gsm:1"]
    write_jsonl(path, [zeroeval_row("q1", id=1.5)])
    with pytest.raises(RecordFileError, match=r"id must be a string or an integer, got 1\.5"):
        import_zeroeval(path)
    # JSON's true is no id either (Python takes a bool for an int: the record id was gsm:True)
    write_jsonl(path, [zeroeval_row("q1", id=True)])
    with pytest.raises(RecordFileError, match=r"id must be a string or an integer, got True"):
        import_zeroeval(path)


@pytest.mark.parametrize("blank", ["", "  "])
def test_a_blank_id_is_refused_naming_its_line(tmp_path: Path, blank: str) -> None:
    """Every row with an id "" was given the record id "gsm:", one id for many prompts (a
    warning of repeated ids at best), where a row without an id is refused."""
    rows = [zeroeval_row("q1"), zeroeval_row("q2", id=blank), zeroeval_row("q3", id=blank)]
    path = write_jsonl(tmp_path / "scores.jsonl", rows)
    with pytest.raises(RecordFileError) as raised:
        import_zeroeval(path)
    assert str(raised.value) == (
        f"{path}, line 2: id is blank ({blank!r}); give every row an id of its own (a record's "
        "id is its task and this id, e.g. gsm:1)"
    )


def test_a_model_with_a_blank_name_is_refused_naming_its_line(tmp_path: Path) -> None:
    """A model named "" or " " in scores became the worker "", which no pool can name."""
    row = zeroeval_row("q2", scores={"m1": 0, " ": 1}, out_chars={"m1": 40, " ": 400})
    path = write_jsonl(tmp_path / "scores.jsonl", [zeroeval_row("q1"), row])
    with pytest.raises(RecordFileError) as raised:
        import_zeroeval(path)
    assert str(raised.value) == (
        f"{path}, line 2: scores names a model ' ', a blank name; name the model, or delete its "
        "entry"
    )


@pytest.mark.parametrize("model", ["m\x1b[31m", "m\x00", "m\x7f", "m\tx"])
def test_a_model_name_holding_a_control_character_is_refused_naming_its_line(
    tmp_path: Path, model: str
) -> None:
    """A model named with a terminal's colour code, a NUL, DEL or an inner tab became a worker
    of that name, which no pool's worker id can match, as the long and RouterBench importers
    refuse. Spaces and tabs around a name are still stripped."""
    row = zeroeval_row("q2", scores={"m1": 0, model: 1}, out_chars={"m1": 40, model: 400})
    path = write_jsonl(tmp_path / "scores.jsonl", [zeroeval_row("q1"), row])
    with pytest.raises(RecordFileError) as raised:
        import_zeroeval(path)
    assert str(raised.value) == (
        f"{path}, line 2: the model in scores {model!r} holds the control character "
        f"U+{ord(model[1]):04X}, which no worker's name can hold: rename the model in the file"
    )
    tabbed = zeroeval_row("q2", scores={"m1": 0, "\tm2\n": 1}, out_chars={"m1": 40, "\tm2": 4})
    write_jsonl(path, [zeroeval_row("q1"), tabbed])
    assert [record.worker_ids for record in import_zeroeval(path)] == [["m1", "m2"]] * 2


def test_a_task_or_id_with_spaces_around_it_is_read_without_them(tmp_path: Path) -> None:
    """A row's task "gsm " and id "1 " made the record id "gsm :1 " (the task itself was read
    as "gsm"), where the long and RouterBench importers read ids and tasks without spaces."""
    path = write_jsonl(tmp_path / "scores.jsonl", [zeroeval_row("q1", task="gsm ", id="1 ")])
    (record,) = import_zeroeval(path)
    assert (record.task, record.id) == ("gsm", "gsm:1")


def test_zeroeval_takes_a_price_of_0_for_a_free_model(tmp_path: Path) -> None:
    """A model run locally costs nothing: 0 is a price ("at least 0"), only a negative one is
    refused; every test price was above 0, so refusing 0 passed them all."""
    path = write_jsonl(tmp_path / "z.jsonl", [zeroeval_row("abcd")])
    (result,) = import_zeroeval(path, prices={"m1": (0.0, 0.0), "m2": (3.0, 4.0)})
    assert result.costs == pytest.approx([0.0, (1 * 3.0 + 100 * 4.0) / 1e6])


def test_a_negative_out_chars_is_refused_naming_the_model(tmp_path: Path) -> None:
    """An answer of -400 characters is no length: with prices its negative output cost was
    hidden by the input cost (a cost lower than the model's, without a word); no test gave
    one, so taking it passed them all."""
    row = zeroeval_row("abcd", out_chars={"m1": 40, "m2": -400})
    path = write_jsonl(tmp_path / "z.jsonl", [row])
    with pytest.raises(RecordFileError, match=r"line 1: out_chars of m2 must be at least 0"):
        import_zeroeval(path, prices={"m1": (1.0, 2.0), "m2": (5000.0, 1.0)})
