"""Importers and the standard split: small generated files, plus the real ../shared/data."""

from __future__ import annotations

import csv
import gzip
import hashlib
import json
import logging
import math
import tracemalloc
from pathlib import Path

import httpx
import pandas as pd
import pytest
from conftest import require_shared_data

import fugu_lite.datasets.data_dir as data_dir_module
from fugu_lite.datasets import (
    DATA_DIR_ENV,
    IMPORTERS,
    DataNotFoundError,
    SplitError,
    apply_given_split,
    apply_standard_split,
    import_dataset,
    import_llmrouter,
    import_long,
    import_routerbench,
    import_zeroeval,
    resolve_data_dir,
    standard_split,
)
from fugu_lite.datasets.common import stable_id
from fugu_lite.io import RecordFileError
from fugu_lite.schemas import RewardRecord, read_records, write_records

# --- helpers -------------------------------------------------------------------------------


def record(prompt: str, rewards: list[float], split: str = "train") -> RewardRecord:
    return RewardRecord(prompt=prompt, split=split, worker_ids=["a", "b"], rewards=rewards)


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def write_json(path: Path, payload: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload), encoding="utf-8")
    return path


def split_figures(records: list[RewardRecord], split: str) -> tuple[int, str, float, float, float]:
    """(count, best single worker, its mean, oracle mean, random mean) on one split."""
    rows = [r for r in records if r.split == split]
    workers = rows[0].worker_ids
    means = [sum(r.rewards[i] for r in rows) / len(rows) for i in range(len(workers))]
    best = max(range(len(workers)), key=lambda i: means[i])
    oracle = sum(max(r.rewards) for r in rows) / len(rows)
    random = sum(sum(r.rewards) / len(workers) for r in rows) / len(rows)
    return len(rows), workers[best], means[best], oracle, random


# --- the standard split --------------------------------------------------------------------


def test_standard_split_follows_the_documented_hashes() -> None:
    for index in range(300):
        text = f"prompt number {index}"
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
    with caplog.at_level(logging.WARNING):
        assert apply_standard_split(repeated)[0].rewards == [1, 0]
    assert "dropped 2 records whose prompt already appeared" in caplog.text
    assert "the first record of a prompt is kept (1 of the dropped had other rewards" in (
        caplog.text
    )
    assert "prompt 'same'" in caplog.text


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


# --- LLMRouter -----------------------------------------------------------------------------

LLMROUTER_PRICES = {
    "big": {"input_price": 0.9, "output_price": 1.2},
    "small": {"input_price": 0.1, "output_price": 0.2},
    "unused": {"input_price": 5.0, "output_price": 5.0},
}


def make_llmrouter(root: Path, train: list[dict] | None = None) -> Path:
    """A tiny llmrouter/ folder under `root`; returns the data folder `root`."""
    base = root / "llmrouter" / "data"
    train = train or [
        {"question": "q1", "scores": {"small": 1.0, "big": 0.0}, "cluster_id": 3},
        {"question": "q2 longer", "scores": {"small": 0.0, "big": 1.0}, "cluster_id": 1},
    ]
    write_json(base / "dcrouter_preprocessed/train.json", train)
    write_json(
        base / "dcrouter_preprocessed/test.json",
        [
            {"question": "q3", "scores": {"big": 0.5, "small": 0.25}},
            {"question": "q1", "scores": {"big": 1.0, "small": 1.0}},
        ],
    )
    queries = base / "example_data/query_data"
    write_jsonl(
        queries / "default_query_train.jsonl",
        [{"task_name": "math", "query": "q1"}, {"task_name": "qa", "query": "q2 longer"}],
    )
    write_jsonl(
        queries / "default_query_test.jsonl",
        [{"task_name": "other", "query": "q1"}, {"task_name": "code", "query": "q3"}],
    )
    write_json(base / "example_data/llm_candidates/default_llm.json", LLMROUTER_PRICES)
    return root


def test_llmrouter_reads_scores_tasks_and_costs(tmp_path: Path) -> None:
    records = import_llmrouter(make_llmrouter(tmp_path), output_tokens=100)
    assert [r.prompt for r in records] == ["q1", "q2 longer", "q3"]  # test's q1 dropped
    first = records[0]
    assert first.worker_ids == ["big", "small"]
    assert first.rewards == [0.0, 1.0]  # the train row wins over the test duplicate
    assert first.task == "math"  # first label in the query files wins
    assert [r.task for r in records[1:]] == ["qa", "code"]
    assert first.id is not None and first.id.startswith("llmrouter:")
    input_tokens = len("q1") / 4
    assert first.costs == pytest.approx(
        [(input_tokens * 0.9 + 100 * 1.2) / 1e6, (input_tokens * 0.1 + 100 * 0.2) / 1e6]
    )
    assert all(r.split == standard_split(r.prompt_text) for r in records)


def test_llmrouter_accepts_the_folder_itself_and_its_parent(tmp_path: Path) -> None:
    make_llmrouter(tmp_path)
    from_parent = import_dataset("llmrouter", tmp_path)
    from_folder = import_dataset("llmrouter", tmp_path / "llmrouter")
    assert from_parent == from_folder


def test_llmrouter_missing_folder_is_clear(tmp_path: Path) -> None:
    with pytest.raises(RecordFileError, match="no LLMRouter data here"):
        import_llmrouter(tmp_path)


def test_llmrouter_inconsistent_models_name_the_item(tmp_path: Path) -> None:
    train = [
        {"question": "q1", "scores": {"small": 1.0, "big": 0.0}},
        {"question": "q2", "scores": {"small": 1.0}},
    ]
    make_llmrouter(tmp_path, train=train)
    with pytest.raises(RecordFileError, match=r"train\.json, item 2: scores has models"):
        import_llmrouter(tmp_path)


def test_llmrouter_bad_score_names_the_item(tmp_path: Path) -> None:
    make_llmrouter(tmp_path, train=[{"question": "q1", "scores": {"small": "n/a", "big": 1}}])
    with pytest.raises(RecordFileError, match=r"item 1: the score of small must be a finite"):
        import_llmrouter(tmp_path)


def test_llmrouter_missing_price_names_the_model(tmp_path: Path) -> None:
    make_llmrouter(tmp_path)
    prices = tmp_path / "llmrouter/data/example_data/llm_candidates/default_llm.json"
    write_json(prices, {"big": LLMROUTER_PRICES["big"]})
    with pytest.raises(RecordFileError, match=r"default_llm\.json: no input_price.*'small'"):
        import_llmrouter(tmp_path)


def test_llmrouter_malformed_json_names_file_and_line(tmp_path: Path) -> None:
    make_llmrouter(tmp_path)
    (tmp_path / "llmrouter/data/dcrouter_preprocessed/test.json").write_text("[{oops")
    with pytest.raises(RecordFileError, match=r"test\.json: not valid JSON at line 1"):
        import_llmrouter(tmp_path)


def test_llmrouter_malformed_query_line_names_the_line(tmp_path: Path) -> None:
    make_llmrouter(tmp_path)
    queries = tmp_path / "llmrouter/data/example_data/query_data/default_query_test.jsonl"
    queries.write_text('{"task_name": "a", "query": "q3"}\n{"task_name": \n')
    with pytest.raises(RecordFileError, match=r"default_query_test\.jsonl, line 2: not valid"):
        import_llmrouter(tmp_path)


# --- finding the data ----------------------------------------------------------------------


def test_resolve_data_dir_prefers_the_explicit_folder(tmp_path: Path, monkeypatch) -> None:
    make_llmrouter(tmp_path / "mine")
    make_llmrouter(tmp_path / "from_env")
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "from_env"))
    assert resolve_data_dir(tmp_path / "mine") == (tmp_path / "mine").resolve()
    assert resolve_data_dir(None) == (tmp_path / "from_env").resolve()
    with pytest.raises(DataNotFoundError, match="--data-dir points to"):
        resolve_data_dir(tmp_path / "nothing")


def test_resolve_data_dir_finds_shared_data_next_to_cwd(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    make_llmrouter(tmp_path / "shared" / "data")
    (tmp_path / "project").mkdir()
    monkeypatch.chdir(tmp_path / "project")
    assert resolve_data_dir(None) == (tmp_path / "shared" / "data").resolve()


def test_resolve_data_dir_offline_error_says_what_to_do(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    with pytest.raises(DataNotFoundError, match=f"--data-dir or set {DATA_DIR_ENV}"):
        resolve_data_dir(None, search_paths=[], cache_dir=tmp_path / "cache", download=False)

    def no_network(target: Path, timeout: float = 60.0) -> Path:
        raise httpx.ConnectError("no network")

    monkeypatch.setattr(data_dir_module, "download_llmrouter", no_network)
    with pytest.raises(DataNotFoundError, match=r"--data-dir.*downloading it .* failed"):
        resolve_data_dir(None, search_paths=[], cache_dir=tmp_path / "cache")


def test_the_llmrouter_download_lives_in_the_cache_dir_that_fugu_lite_cache_dir_names(
    tmp_path: Path, monkeypatch
) -> None:
    """$FUGU_LITE_CACHE_DIR moved every cache (features, exports, digests) but the LLMRouter
    download, which `demo` still looked for and wrote in ~/.cache/fugu-lite/data: with a home
    that is read-only or too small, the reason to set it, the download failed."""
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    monkeypatch.setenv("FUGU_LITE_CACHE_DIR", str(tmp_path / "cache"))
    make_llmrouter(tmp_path / "cache" / "data")
    (tmp_path / "cache" / "data" / "llmrouter" / "LICENSE").write_text("MIT\n")
    found = resolve_data_dir(None, search_paths=[], download=False)
    assert found == tmp_path / "cache" / "data"
    assert import_llmrouter(found)


def test_download_llmrouter_writes_the_pinned_files(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    requested: list[str] = []

    def fake_github(request: httpx.Request) -> httpx.Response:
        requested.append(request.url.path)
        return httpx.Response(200, content=b"{}")

    target = data_dir_module.download_llmrouter(
        tmp_path / "llmrouter", transport=httpx.MockTransport(fake_github)
    )
    commit = data_dir_module.LLMROUTER_COMMIT
    assert requested[0] == f"/ulab-uiuc/LLMRouter/{commit}/data/dcrouter_preprocessed/train.json"
    assert len(requested) == len(data_dir_module.LLMROUTER_DOWNLOADS)
    assert (target / "LICENSE").read_text() == "{}"
    assert commit in (target / "SOURCE.txt").read_text()
    assert resolve_data_dir(None, search_paths=[], cache_dir=tmp_path, download=False) == tmp_path


# --- ZeroEval ------------------------------------------------------------------------------


def zeroeval_row(question: str, task: str = "gsm", **overrides: object) -> dict:
    row = {
        "task": task,
        "id": f"{task}-{question}",
        "question": question,
        "gold": "1",
        "scores": {"m2": 1, "m1": 0},
        "out_chars": {"m1": 40, "m2": 400},
    }
    row.update(overrides)
    return row


def test_zeroeval_reads_scores_and_token_costs(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "zeroeval" / "scores_compact.jsonl",
        [zeroeval_row("a"), zeroeval_row("b", task="crux"), zeroeval_row("", task="math-l5")],
    )
    records = import_zeroeval(path)
    assert [r.prompt for r in records] == ["a", "b"]  # the empty question is dropped
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
    for prices in (negative, nan):
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


# --- RouterBench ---------------------------------------------------------------------------

ROUTERBENCH_MODELS = ("gpt-4-1106-preview", "meta/llama-2-70b-chat")


def routerbench_table(**changes: list) -> pd.DataFrame:
    columns: dict[str, list] = {
        "sample_id": ["mmlu.0", "gsm.1", "mtbench.2"],
        "prompt": ["['What is 2+2?']", "Tom has 3 apples.", "Write a poem."],
        "eval_name": ["mmlu-math", "gsm8k", "mt-bench"],
    }
    for index, model in enumerate(ROUTERBENCH_MODELS):
        columns[model] = [1.0, float(index), 0.5 + 0.25 * index]
        columns[f"{model}|total_cost"] = [0.01 * (index + 1)] * 3
        columns[f"{model}|model_response"] = ["4", "3", "roses"]
    columns["oracle_model_to_route_to"] = ["x", "y", "z"]
    columns.update(changes)
    return pd.DataFrame(columns)


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
    with pytest.raises(RecordFileError, match=r"row 1 \(sample_id=mmlu.0\): score or total_cost"):
        import_routerbench(tmp_path / "gap.pkl")
    assert len(import_routerbench(tmp_path / "gap.pkl", on_missing="drop")) == 2
    pd.concat([raw, raw[:1]]).to_pickle(tmp_path / "twice.pkl")
    with pytest.raises(RecordFileError) as raised:
        import_routerbench(tmp_path / "twice.pkl")
    assert str(raised.value) == (
        f"{tmp_path / 'twice.pkl'}: sample_id 'mmlu.0' has more than one row for model "
        f"{ROUTERBENCH_MODELS[-1]!r}; keep one row per sample and model"
    )


@pytest.mark.parametrize("index", [False, True])
def test_routerbench_csv_that_repeats_its_header_names_the_row(tmp_path: Path, index: bool) -> None:
    """Two CSV files joined with `cat` hold the second header as a row, which was refused as
    "the score of ... must be a finite number, got '...'" (as in the long format)."""
    table = routerbench_table()
    text = table[:1].to_csv(index=index) + table[1:].to_csv(index=index)
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
    (tmp_path / "rb.parquet").write_bytes(b"")
    with pytest.raises(RecordFileError, match=r"expected a \.pkl or \.csv"):
        import_routerbench(tmp_path / "rb.parquet")


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


def test_routerbench_warns_about_a_score_column_without_costs(tmp_path: Path, caplog) -> None:
    path = tmp_path / "rb.csv"
    routerbench_table(**{"claude-v2": [1.0, 0.0, 1.0]}).to_csv(path, index=False)
    with caplog.at_level(logging.WARNING):
        records = import_routerbench(path)
    assert records[0].worker_ids == sorted(ROUTERBENCH_MODELS)
    assert "['claude-v2'] hold numbers but have no cost column" in caplog.text
    assert "claude-v2|total_cost" in caplog.text
    assert "sample_id" not in caplog.text.split("hold numbers")[0]


# --- the long format -----------------------------------------------------------------------


def long_rows() -> list[dict]:
    return [
        {"prompt": "p1", "worker": "w2", "reward": 1, "cost": 0.2, "task": "t"},
        {"prompt": "p1", "worker": "w1", "reward": 0, "cost": 0.1, "task": "t"},
        {"prompt": "p2", "worker": "w1", "reward": 0.5, "cost": 0.1, "task": "u"},
        {"prompt": "p2", "worker": "w2", "reward": 0.25, "cost": 0.3, "task": "u"},
    ]


def write_long_csv(path: Path, rows: list[dict]) -> Path:
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


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
    assert records[0].id is not None and records[0].id.startswith("long:")


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


def test_long_format_drops_prompts_with_a_blank_reward_on_request(tmp_path: Path, caplog) -> None:
    """A blank reward (an empty cell, null, NaN, NA) failed even with on_missing=drop, which
    zeroeval and routerbench apply to a missing score as well as to a missing row."""
    path = tmp_path / "long.csv"
    path.write_text(
        "prompt,worker,reward\np1,w1,1\np1,w2,0\np2,w1,\np2,w2,1\np3,w1,NA\np3,w2,0\n",
        encoding="utf-8",
    )
    with pytest.raises(RecordFileError, match=r"line 4: no value for \['reward'\] \(or pass"):
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
    with pytest.raises(RecordFileError) as raised:
        import_long(path)
    assert str(raised.value) == (
        f"{path}, line 1: no value for ['prompt', 'worker', 'reward']; the row's keys are task, "
        "id, question, gold, scores, out_chars, the long format's prompt, worker, reward, cost, "
        "task, split, id: rename the keys, or import the file with its own format (zeroeval, "
        "routerbench)"
    )
    # a CSV row short of cells has every column, its missing cells empty: no keys to name
    path = tmp_path / "long.csv"
    path.write_text("prompt,worker,reward,cost\np1,w1\n", encoding="utf-8")
    with pytest.raises(RecordFileError) as raised:
        import_long(path)
    assert (
        str(raised.value)
        == f"{path}, line 2: no value for ['reward'] (or pass --option on_missing=drop)"
    )


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
    rows = [{key.upper(): value for key, value in row.items()} for row in long_rows()]
    assert import_long(write_jsonl(tmp_path / "long.jsonl", rows))[0].costs == [0.1, 0.2]
    path.write_text("prompt,worker,reward,cost,Cost\np1,w1,1,0.1,0.2\n", encoding="utf-8")
    with pytest.raises(RecordFileError, match=r"\['cost'\] are named more than once"):
        import_long(path)
    path.write_text("prompt;worker;reward\np1;w1;1\n", encoding="utf-8")
    with pytest.raises(RecordFileError, match=r"the header is one column: .* separated by commas"):
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
    path.write_text("prompt,worker,reward,task\np1,w1,1,t,,\np1,w2,0,t\n", encoding="utf-8")
    assert import_long(path)[0].task == "t"  # empty trailing cells, as spreadsheets write


def test_long_format_reads_true_and_false_rewards(tmp_path: Path) -> None:
    path = tmp_path / "long.csv"
    path.write_text("prompt,worker,reward\np1,w1,True\np1,w2, FALSE\n", encoding="utf-8")
    assert import_long(path)[0].rewards == [1.0, 0.0]


def test_long_format_reads_a_json_list_of_rows(tmp_path: Path) -> None:
    """A .json file holding one list of rows (what json.dump of a list writes) was refused
    as bad JSON on line 1, or as "expected a JSON object, got list"."""
    path = tmp_path / "long.json"
    for text in (json.dumps(long_rows(), indent=2), json.dumps(long_rows())):
        path.write_text(text, encoding="utf-8-sig")  # with a BOM, as some editors save
        assert import_long(path) == import_long(write_jsonl(tmp_path / "long.jsonl", long_rows()))
    path.write_text(json.dumps([*long_rows(), "p3"]), encoding="utf-8")
    with pytest.raises(RecordFileError, match=r"long\.json, item 5: expected an object"):
        import_long(path)
    path.write_text(json.dumps(long_rows())[:-1], encoding="utf-8")
    with pytest.raises(RecordFileError, match=r"long\.json: not valid JSON at line 1"):
        import_long(path)


def test_an_unused_split_column_is_a_warning(tmp_path: Path, caplog) -> None:
    """A file's own split column was ignored without a word, unless its option was given:
    the user's held-out test prompts then went to train by the standard split."""
    rows = [{**row, "split": "test"} for row in long_rows()]
    long = write_jsonl(tmp_path / "long.jsonl", rows)
    zeroeval = write_jsonl(tmp_path / "scores_compact.jsonl", [zeroeval_row("q", Split="test")])
    routerbench = tmp_path / "rb.csv"
    routerbench_table(split=["test"] * 3).to_csv(routerbench, index=False)
    for importer, path, option in (
        (import_long, long, "use_split_column=true"),
        (import_zeroeval, zeroeval, "split_column=Split"),
        (import_routerbench, routerbench, "split_column=split"),
    ):
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            importer(path)
        assert f"{path} has a split column, which is not used" in caplog.text
        assert f"pass --option {option} to keep the file's split" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        import_long(long, use_split_column=True)
        import_long(write_jsonl(tmp_path / "plain.jsonl", long_rows()))
    assert "split column" not in caplog.text


def test_file_suffixes_in_capitals_are_read(tmp_path: Path) -> None:
    """Files saved on Windows as LONG.CSV or RB.PKL were refused as not .csv / .pkl."""
    path = write_long_csv(tmp_path / "LONG.CSV", long_rows())
    assert import_long(path) == import_long(write_long_csv(tmp_path / "long.csv", long_rows()))
    assert len(import_long(write_jsonl(tmp_path / "LONG.JSONL", long_rows()))) == 2
    routerbench_table().to_pickle(tmp_path / "RB.PKL")
    assert len(import_routerbench(tmp_path / "RB.PKL")) == 3


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
    tracemalloc.start()
    try:
        records = import_long(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
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


def test_long_format_partial_costs_are_an_error(tmp_path: Path) -> None:
    rows = long_rows()
    del rows[3]["cost"]
    path = write_jsonl(tmp_path / "long.jsonl", rows)
    with pytest.raises(RecordFileError, match=r"prompt 'p2' has a cost for some workers"):
        import_long(path)


def test_long_format_chat_prompts(tmp_path: Path) -> None:
    messages = [{"role": "user", "content": "hi"}]
    rows = [
        {"prompt": messages, "worker": "w1", "reward": 1},
        {"prompt": messages, "worker": "w2", "reward": 0},
    ]
    (result,) = import_long(write_jsonl(tmp_path / "long.jsonl", rows))
    assert result.prompt_text == "user: hi"


# --- the registry --------------------------------------------------------------------------


def test_import_dataset_rejects_unknown_formats_and_options(tmp_path: Path) -> None:
    assert set(IMPORTERS) == {"llmrouter", "zeroeval", "routerbench", "long"}
    with pytest.raises(ValueError, match="known formats: llmrouter, zeroeval, routerbench, long"):
        import_dataset("csv", tmp_path)
    with pytest.raises(ValueError, match=r"no option\(s\) \['split'\]; its options: use_split"):
        import_dataset("long", tmp_path / "x.csv", split="test")
    path = write_jsonl(tmp_path / "long.jsonl", long_rows())
    assert import_dataset("long", path) == import_long(path)


@pytest.mark.parametrize(
    ("format", "option", "value", "expected"),
    [
        ("llmrouter", "output_tokens", "abc", r"output_tokens='abc' is not valid: "
         r"expected a number"),
        ("llmrouter", "output_tokens", "-500", r"output_tokens='-500' is not valid: .*greater "
         r"than or equal to 0"),
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


# --- the real data in ../shared/data -------------------------------------------------------


@pytest.fixture(scope="module")
def llmrouter_records() -> list[RewardRecord]:
    return import_llmrouter(require_shared_data() / "llmrouter")


@pytest.fixture(scope="module")
def zeroeval_records() -> list[RewardRecord]:
    return import_zeroeval(require_shared_data() / "zeroeval")


@pytest.mark.integration
def test_real_llmrouter_reference_numbers(llmrouter_records: list[RewardRecord]) -> None:
    count, best, best_mean, oracle, random = split_figures(llmrouter_records, "test")
    assert count == 1226
    assert best == "llama-3.1-nemotron-51b-instruct"
    assert (round(best_mean, 3), round(oracle, 3), round(random, 3)) == (0.626, 0.800, 0.437)
    assert [split_figures(llmrouter_records, s)[0] for s in ("train", "validation")] == [3828, 935]


@pytest.mark.integration
def test_real_llmrouter_records_are_complete(llmrouter_records: list[RewardRecord]) -> None:
    assert len(llmrouter_records) == 5989
    assert len({r.prompt_text for r in llmrouter_records}) == 5989
    assert len({r.id for r in llmrouter_records}) == 5989
    assert all(r.task is not None for r in llmrouter_records)
    assert len({r.task for r in llmrouter_records}) == 14
    assert all(r.costs is not None and min(r.costs) > 0 for r in llmrouter_records)


@pytest.mark.integration
def test_real_zeroeval_numbers(zeroeval_records: list[RewardRecord]) -> None:
    assert len(zeroeval_records) == 2119  # 2840 rows minus 721 math-l5 rows with no question
    assert len(zeroeval_records[0].worker_ids) == 28
    assert {r.task for r in zeroeval_records} == {"gsm", "crux"}
    count, best, best_mean, oracle, random = split_figures(zeroeval_records, "test")
    # The same figures straight from the file, without the importer: rows with a question,
    # test = the first sha1 bucket rule of DESIGN.md.
    path = require_shared_data() / "zeroeval" / "scores_compact.jsonl"
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


def test_long_format_reads_percentages_as_fractions(tmp_path: Path) -> None:
    """A reward column in a spreadsheet's percentage format (`85%`) was refused as not a
    number; it is the fraction it shows."""
    path = tmp_path / "long.csv"
    path.write_text("prompt,worker,reward\nq,a,85%\nq,b, 2.5 %\nr,a,0.5\nr,b,0\n")
    assert [r.rewards for r in import_long(path)] == [[0.85, 0.025], [0.5, 0.0]]
    path.write_text("prompt,worker,reward\nq,a,85%\nq,b,x%\n")
    with pytest.raises(RecordFileError, match=r"line 3: reward must be a finite number, got 'x%'"):
        import_long(path)


def test_long_format_refuses_percentages_beside_plain_numbers_above_one(tmp_path: Path) -> None:
    """`85%` on one row and `85` on another were read as 0.85 and 85: two scales silently."""
    path = tmp_path / "long.csv"
    path.write_text("prompt,worker,reward\nq,a,85%\nq,b,0\nr,a,85\nr,b,0\n")
    with pytest.raises(RecordFileError, match=r"percentages \(.*line 2\) and as plain numbers "):
        import_long(path)


def test_long_format_warns_of_rewards_outside_zero_to_one(tmp_path: Path, caplog) -> None:
    """A 0-100 column was read as is without a word, training on near one-hot targets."""
    path = tmp_path / "long.csv"
    path.write_text("prompt,worker,reward\nq,a,85\nq,b,40\n")
    with caplog.at_level(logging.WARNING):
        assert [r.rewards for r in import_long(path)] == [[85.0, 40.0]]
    assert "some lie outside 0-1 (" in caplog.text and "line 2: 85)" in caplog.text
    caplog.clear()
    path.write_text("prompt,worker,reward\nq,a,1\nq,b,0.4\n")
    with caplog.at_level(logging.WARNING):
        import_long(path)
    assert "outside 0-1" not in caplog.text


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
        f"(the reward is {reward!r}) (or pass --option on_missing=drop)"
    )
    assert [r.prompt for r in import_long(path, on_missing="drop")] == ["r"]


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
