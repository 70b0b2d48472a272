"""The LLMRouter importer and the data folder it is found in or downloaded to: small
generated files, plus the real ../shared/data."""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path

import conftest
import httpx
import pytest
from conftest import require_shared_data
from datasets_support import (
    LLMROUTER_PRICES,
    make_llmrouter,
    split_figures,
    write_json,
    write_jsonl,
)

import fugu_lite.datasets.data_dir as data_dir_module
from fugu_lite.datasets import (
    DATA_DIR_ENV,
    DataNotFoundError,
    import_dataset,
    import_llmrouter,
    resolve_data_dir,
    standard_split,
)
from fugu_lite.schemas import RewardRecord
from fugu_lite.text_reading import RecordFileError

# --- LLMRouter -----------------------------------------------------------------------------


@pytest.mark.parametrize("output_tokens", [math.inf, math.nan, -1.0])
def test_an_answer_length_that_is_not_a_finite_count_is_refused(
    tmp_path: Path, output_tokens: float
) -> None:
    """output_tokens=inf made every cost infinite, refused as the first data row's fault
    ("item 1: ... costs must be finite numbers ... replace the missing scores")."""
    with pytest.raises(ValueError, match=r"^output_tokens must be a finite number of at least 0"):
        import_llmrouter(make_llmrouter(tmp_path), output_tokens=output_tokens)


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


def test_llmrouter_scores_outside_zero_to_one_are_warned_of(tmp_path: Path, caplog) -> None:
    """As the other formats' are: a 0-100 score was read and trained on without a word."""
    train = [
        {"question": "q1", "scores": {"small": 1.0, "big": 0.0}},
        {"question": "q2", "scores": {"small": 100, "big": 0.0}},
    ]
    root = make_llmrouter(tmp_path, train)
    with caplog.at_level(logging.WARNING):
        import_llmrouter(root)
    where = f"{root / 'llmrouter' / 'data/dcrouter_preprocessed/train.json'}, item 2: 100"
    assert f"some lie outside 0-1 ({where})" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        import_llmrouter(make_llmrouter(tmp_path / "ordinary"))
    assert "outside 0-1" not in caplog.text


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


def test_an_llmrouter_item_scoring_no_model_is_refused_naming_the_item(tmp_path: Path) -> None:
    make_llmrouter(tmp_path, train=[{"question": "q1", "scores": {}}])
    with pytest.raises(RecordFileError) as raised:
        import_llmrouter(tmp_path)
    assert str(raised.value).endswith(
        "train.json, item 1: scores must be a non-empty {model: score} object"
    )


def test_llmrouter_questions_without_a_task_are_counted_in_a_warning(
    tmp_path: Path, caplog
) -> None:
    """A question the query files do not hold is imported without a task: said, with how
    many, as per-task reports leave them out."""
    train = [
        {"question": "q1", "scores": {"small": 1.0, "big": 0.0}},
        {"question": "not in the query files", "scores": {"small": 0.0, "big": 1.0}},
    ]
    with caplog.at_level(logging.WARNING):
        records = import_llmrouter(make_llmrouter(tmp_path, train=train))
    assert [r.task for r in records] == ["math", None, "code"]
    assert "1 LLMRouter questions have no task in the query files" in caplog.text


def test_llmrouter_bad_score_names_the_item(tmp_path: Path) -> None:
    make_llmrouter(tmp_path, train=[{"question": "q1", "scores": {"small": "n/a", "big": 1}}])
    with pytest.raises(RecordFileError, match=r"item 1: the score of small must be a finite"):
        import_llmrouter(tmp_path)


@pytest.mark.parametrize("model", ["s\x1b[31m", "s\x00", "s\x7f", "s\tx"])
def test_an_llmrouter_model_name_holding_a_control_character_is_refused_naming_the_item(
    tmp_path: Path, model: str
) -> None:
    """A model named with a terminal's colour code, a NUL, DEL or an inner tab in the scores
    and the prices became a worker of that name, which no pool's worker id can match, as the
    other importers refuse."""
    rows = [{"question": "q1", "scores": {"big": 0.0, model: 1.0}}]
    make_llmrouter(tmp_path, train=rows)
    write_json(tmp_path / "llmrouter/data/dcrouter_preprocessed/test.json", rows)
    prices = tmp_path / "llmrouter/data/example_data/llm_candidates/default_llm.json"
    write_json(prices, {**LLMROUTER_PRICES, model: LLMROUTER_PRICES["small"]})
    with pytest.raises(RecordFileError) as raised:
        import_llmrouter(tmp_path)
    train_file = tmp_path / "llmrouter/data/dcrouter_preprocessed/train.json"
    assert str(raised.value) == (
        f"{train_file}, item 1: the model in scores {model!r} holds the control character "
        f"U+{ord(model[1]):04X}, which no worker's name can hold: rename the model in the file"
    )


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
    (tmp_path / "other" / "zeroeval").mkdir(parents=True)  # a data folder, not LLMRouter's
    with pytest.raises(DataNotFoundError, match="other, which has no llmrouter/ folder inside"):
        resolve_data_dir(tmp_path / "other")
    monkeypatch.chdir(tmp_path)  # a relative folder is returned absolute: it outlives a chdir
    assert resolve_data_dir("mine") == (tmp_path / "mine").resolve()
    monkeypatch.setenv("HOME", str(tmp_path))  # a `~` no shell expanded: quoted, a service's env
    assert resolve_data_dir("~/mine") == (tmp_path / "mine").resolve()
    monkeypatch.setenv(DATA_DIR_ENV, "~/from_env")
    assert resolve_data_dir(None) == (tmp_path / "from_env").resolve()
    monkeypatch.setenv(DATA_DIR_ENV, "")  # `FUGU_LITE_DATA_DIR=` in an env file: unset
    assert resolve_data_dir(None, search_paths=[tmp_path / "mine"]) == (tmp_path / "mine").resolve()


def test_a_named_data_folder_that_does_not_exist_is_said_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A typo in --data-dir (or $FUGU_LITE_DATA_DIR) was described as a folder "which has no
    llmrouter/ folder inside", sending the user to look inside a folder that is not there."""
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    missing = tmp_path / "shared" / "dta"
    with pytest.raises(DataNotFoundError) as raised:
        resolve_data_dir(missing)
    assert str(raised.value) == f"--data-dir points to {missing}, which does not exist"
    monkeypatch.setenv(DATA_DIR_ENV, str(missing))
    with pytest.raises(DataNotFoundError) as raised:
        resolve_data_dir(None)
    assert str(raised.value) == f"{DATA_DIR_ENV} points to {missing}, which does not exist"
    missing.parent.mkdir()
    missing.write_text("")  # a file: it exists, but is no folder
    with pytest.raises(DataNotFoundError) as raised:
        resolve_data_dir(None)
    assert str(raised.value) == f"{DATA_DIR_ENV} points to {missing}, which is not a folder"
    missing.unlink()
    missing.mkdir()  # a folder now, but without the dataset
    with pytest.raises(DataNotFoundError) as raised:
        resolve_data_dir(None)
    assert str(raised.value) == (
        f"{DATA_DIR_ENV} points to {missing}, which has no llmrouter/ folder inside"
    )


def test_the_search_takes_the_first_folder_holding_the_dataset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A data folder is one holding the dataset asked for: a shared/data of LLMRouter alone
    was taken for ZeroEval's, which the next folder searched held."""
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    make_llmrouter(tmp_path / "first")
    (tmp_path / "second" / "zeroeval").mkdir(parents=True)
    searched = [tmp_path / "first", tmp_path / "second"]
    found = resolve_data_dir(None, dataset="zeroeval", search_paths=searched, download=False)
    assert found == (tmp_path / "second").resolve()


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

    def read_only_cache(target: Path, timeout: float = 60.0) -> Path:
        raise PermissionError(13, "Permission denied", str(target))

    monkeypatch.setattr(data_dir_module, "download_llmrouter", read_only_cache)
    with pytest.raises(DataNotFoundError, match=r"downloading it .* failed: .*Permission denied"):
        resolve_data_dir(None, search_paths=[], cache_dir=tmp_path / "cache")


def test_a_download_that_is_no_utf8_text_says_the_download_failed(
    tmp_path: Path, monkeypatch
) -> None:
    """An answer whose bytes are not UTF-8 (a proxy's Latin-1 page, a mangled file) stopped
    resolve_data_dir with a UnicodeDecodeError traceback; it is a failed download, told as the
    other failures are, and no such file is saved."""
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    download = data_dir_module.download_llmrouter

    def latin1_github(target: Path, timeout: float = 60.0) -> Path:
        answer = httpx.MockTransport(lambda request: httpx.Response(200, content=b"caf\xe9"))
        return download(target, timeout, transport=answer)

    monkeypatch.setattr(data_dir_module, "download_llmrouter", latin1_github)
    with pytest.raises(DataNotFoundError, match=r"--data-dir.*downloading it .* failed: .*0xe9"):
        resolve_data_dir(None, search_paths=[], cache_dir=tmp_path / "cache")
    assert not list((tmp_path / "cache").rglob("*.json"))


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
    # a download cut short goes on with the files it lacks: those there are not fetched again
    (target / "LICENSE").unlink()
    requested.clear()
    data_dir_module.download_llmrouter(target, transport=httpx.MockTransport(fake_github))
    assert requested == [f"/ulab-uiuc/LLMRouter/{commit}/LICENSE"]


def test_download_llmrouter_follows_redirects_and_writes_no_error_page(tmp_path: Path) -> None:
    """A file GitHub serves through a redirect is fetched from where it points, and a file it
    answers with an error (a 404 page) fails the download instead of being saved as data."""
    commit = data_dir_module.LLMROUTER_COMMIT
    moved = f"/ulab-uiuc/LLMRouter/{commit}/LICENSE"

    def redirecting_github(request: httpx.Request) -> httpx.Response:
        if request.url.path == moved:
            return httpx.Response(301, headers={"Location": "https://example.org/LICENSE"})
        return httpx.Response(200, content=b"{}")

    target = data_dir_module.download_llmrouter(
        tmp_path / "llmrouter", transport=httpx.MockTransport(redirecting_github)
    )
    assert (target / "LICENSE").read_text() == "{}"

    def missing_license(request: httpx.Request) -> httpx.Response:
        found = request.url.path != moved
        return httpx.Response(200 if found else 404, content=b"{}" if found else b"Not Found")

    with pytest.raises(httpx.HTTPStatusError):
        data_dir_module.download_llmrouter(
            tmp_path / "other", transport=httpx.MockTransport(missing_license)
        )
    assert not (tmp_path / "other" / "LICENSE").exists()


def test_a_downloaded_file_is_read_as_utf8_whatever_charset_its_answer_declares(
    tmp_path: Path,
) -> None:
    """The pinned files are UTF-8 JSON: an answer declaring another charset (a proxy's
    Latin-1 header) does not turn "café" into "cafÃ©" in the saved file."""
    body = '{"prompt": "café"}'

    def latin1_header(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200,
            content=body.encode("utf-8"),
            headers={"Content-Type": "text/plain; charset=iso-8859-1"},
        )

    target = data_dir_module.download_llmrouter(
        tmp_path / "llmrouter", transport=httpx.MockTransport(latin1_header)
    )
    assert (target / "LICENSE").read_text(encoding="utf-8") == body


def test_a_downloaded_file_is_saved_byte_for_byte(tmp_path: Path) -> None:
    """The download is checked to be UTF-8 but saved as GitHub sent it: a BOM, CRLF line ends
    and text beyond the BMP are kept, into a folder whose name is no UTF-8 (os.fsdecode's
    surrogates) too."""
    body = '\ufeff{"prompt": "café 😀"}\r\n'.encode()
    answer = httpx.MockTransport(lambda request: httpx.Response(200, content=body))
    folder = tmp_path / os.fsdecode(b"caf\xe9") / "llmrouter"
    target = data_dir_module.download_llmrouter(folder, transport=answer)
    assert [(target / name).read_bytes() for name in data_dir_module.LLMROUTER_DOWNLOADS] == [
        body
    ] * len(data_dir_module.LLMROUTER_DOWNLOADS)


def test_the_download_waits_as_long_as_the_timeout_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """resolve_data_dir's timeout is the one each download request is made with."""
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    timeouts: list[object] = []

    def fake_github(request: httpx.Request) -> httpx.Response:
        timeouts.append(request.extensions["timeout"]["read"])
        return httpx.Response(200, content=b"{}")

    real_download = data_dir_module.download_llmrouter
    monkeypatch.setattr(
        data_dir_module,
        "download_llmrouter",
        lambda target, timeout=60.0: real_download(
            target, timeout, transport=httpx.MockTransport(fake_github)
        ),
    )
    cache = tmp_path / "cache"
    assert resolve_data_dir(None, search_paths=[], cache_dir=cache, timeout=7.5) == cache
    assert timeouts and set(timeouts) == {7.5}


def test_another_dataset_is_neither_taken_from_nor_downloaded_to_the_llmrouter_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only LLMRouter is downloaded: a zeroeval/ not found elsewhere is not found, whether the
    cache holds LLMRouter's download (the cache was returned, with no zeroeval/ in it) or not
    (LLMRouter was downloaded for it); every test looked for llmrouter/ alone."""
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    downloads: list[Path] = []

    def download(target: Path, timeout: float = 60.0) -> Path:
        downloads.append(target)
        return target

    monkeypatch.setattr(data_dir_module, "download_llmrouter", download)
    full = make_llmrouter(tmp_path / "full")
    (full / "llmrouter" / "LICENSE").write_text("MIT\n")
    for cache in (full, tmp_path / "empty"):
        with pytest.raises(DataNotFoundError, match=r"^no zeroeval/ data folder found; pass"):
            resolve_data_dir(None, dataset="zeroeval", search_paths=[], cache_dir=cache)
    assert downloads == []


@pytest.mark.parametrize("named", [True, False], ids=["env", "beside"])
def test_the_real_data_is_found_where_the_data_dir_variable_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, named: bool
) -> None:
    """The integration tests read ../shared/data beside the project only: with the data kept
    elsewhere and $FUGU_LITE_DATA_DIR naming it, as for `fugu-lite demo`, `make test`
    skipped them (in CI: failed) saying to put it beside the project."""
    make_llmrouter(tmp_path / "data")
    if named:
        monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "data"))
        assert conftest.require_shared_data("llmrouter") == tmp_path / "data"
    else:
        monkeypatch.delenv(DATA_DIR_ENV, raising=False)
        monkeypatch.setattr(conftest, "SHARED_DATA", tmp_path / "nowhere")
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception) as skipped:
        conftest.require_shared_data("zeroeval")
    where = f"{DATA_DIR_ENV}={tmp_path / 'data'}" if named else str(tmp_path / "nowhere")
    assert f"no zeroeval/ in {where}" in str(skipped.value)
    assert f"set {DATA_DIR_ENV} to a folder holding it" in str(skipped.value)


# --- the real data in ../shared/data -------------------------------------------------------


@pytest.fixture(scope="module")
def llmrouter_records() -> list[RewardRecord]:
    return import_llmrouter(require_shared_data("llmrouter") / "llmrouter")


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


def test_a_question_with_spaces_around_it_or_beyond_ascii_keeps_its_task_and_length(
    tmp_path: Path,
) -> None:
    """A question is looked up in the query files as written (the public files hold 342 with
    a space or line break around them, written so in both) and its input tokens are its
    characters / 4: every test question was plain ASCII without spaces around it, so a lookup
    of the stripped text (no task for those) or a length in UTF-8 bytes passed them all."""
    question = " \u00bfCu\u00e1nto es 2\u00b72?\n"
    root = make_llmrouter(
        tmp_path, train=[{"question": question, "scores": {"small": 1.0, "big": 0.0}}]
    )
    queries = root / "llmrouter/data/example_data/query_data/default_query_train.jsonl"
    write_jsonl(queries, [{"task_name": "math", "query": question}])
    first = import_llmrouter(root, output_tokens=0)[0]
    assert (first.prompt, first.task) == (question, "math")
    input_tokens = len(question) / 4
    assert first.costs == pytest.approx([input_tokens * 0.9 / 1e6, input_tokens * 0.1 / 1e6])
    # it and its text without the spaces are two prompts (DESIGN.md), each with its own id
    scores = {"small": 1.0, "big": 0.0}
    spellings = [{"question": text, "scores": scores} for text in (question, question.strip())]
    make_llmrouter(tmp_path, train=spellings)
    records = [r for r in import_llmrouter(root) if r.prompt.strip() == question.strip()]
    assert len(records) == len({r.id for r in records}) == 2


def test_a_download_cut_short_is_completed_not_taken_for_the_data(
    tmp_path: Path, monkeypatch
) -> None:
    """A download stopped half-way leaves some of LLMRouter's files in the cache: the cache
    is the data only with every file there, else the download goes on (the files there are
    kept); every test's cache held all the files or none, so taking the folder for the data
    (an import then missing a file) passed them all."""
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    cache = tmp_path / "cache"
    write_json(cache / "llmrouter/data/dcrouter_preprocessed/train.json", [])
    with pytest.raises(DataNotFoundError, match=f"--data-dir or set {DATA_DIR_ENV}"):
        resolve_data_dir(None, search_paths=[], cache_dir=cache, download=False)
    downloads: list[Path] = []

    def download(target: Path, timeout: float = 60.0) -> Path:
        downloads.append(target)
        return target

    monkeypatch.setattr(data_dir_module, "download_llmrouter", download)
    assert resolve_data_dir(None, search_paths=[], cache_dir=cache) == cache
    assert downloads == [cache / "llmrouter"]


@pytest.mark.parametrize("price", ["input_price", "output_price"])
def test_a_negative_llmrouter_price_is_refused_naming_the_model(tmp_path: Path, price: str) -> None:
    """A negative price would lower a worker's cost below what it is: refused for either
    price; only the input price's bound was tested, so an output price of -0.2 passed."""
    root = make_llmrouter(tmp_path)
    prices = {**LLMROUTER_PRICES, "small": {"input_price": 0.1, "output_price": 0.2, price: -0.2}}
    write_json(root / "llmrouter/data/example_data/llm_candidates/default_llm.json", prices)
    with pytest.raises(RecordFileError, match=rf"model 'small': {price} must be at least 0"):
        import_llmrouter(root)
