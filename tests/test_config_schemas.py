"""Bad input gives a clear error naming the file, the line and the key: records and configs."""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import typer
import yaml
from conftest import finished_pid, peak_memory_of, writer_temporary
from pydantic import ValidationError

from fugu_lite.atomic_files import remove_dead_writers_files, write_bytes_atomic, write_text_atomic
from fugu_lite.cli.common import parse_overrides
from fugu_lite.config import (
    MAX_SEED,
    ESConfig,
    ESTrainingConfig,
    ModelConfig,
    PipelineConfig,
    RLConfig,
    SFTConfig,
    unusable_device,
)
from fugu_lite.config_errors import ConfigError, describe_config_error, start_of
from fugu_lite.config_loading import DEFAULT_CONFIG, load_config, load_stage_config
from fugu_lite.io import append_jsonl, read_json, write_json, write_jsonl
from fugu_lite.reward_head_training import RewardHeadConfig
from fugu_lite.schemas import (
    ChatMessage,
    RewardRecord,
    check_same_workers,
    read_records,
    records_in_split,
    repeated_ids,
    write_records,
)
from fugu_lite.tasks import Task
from fugu_lite.text_reading import RecordFileError, broken_link
from fugu_lite.training_common import make_loader, make_model, seed_everything
from fugu_lite.workers.config import load_pool_config

WORKERS = ["a", "b", "c"]


def good_row(index: int, **changes: object) -> dict:
    row = {"prompt": f"prompt {index}", "split": "train", "worker_ids": WORKERS}
    row["rewards"] = [0.1 * index, 0.5, 1.0]
    row.update(changes)
    return row


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def write_rows(path: Path, rows: list[dict]) -> Path:
    return write_lines(path, [json.dumps(row) for row in rows])


def write_yaml(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


# --- records: reading and writing ----------------------------------------------------------


def test_records_round_trip_through_jsonl(tmp_path: Path, records: list[RewardRecord]) -> None:
    chat = RewardRecord(
        prompt=[
            ChatMessage(role="system", content="be brief"),
            ChatMessage(role="user", content="hi"),
        ],
        split="validation",
        worker_ids=records[0].worker_ids,
        rewards=[0.0, 0.5, 1.0],
    )
    path = tmp_path / "records.jsonl"
    written = [*records, chat]
    assert write_records(path, written) == len(written)
    assert read_records(path) == written
    # what a record lacks is left out, not written as null (as the README's records show)
    assert set(json.loads(path.read_text(encoding="utf-8").splitlines()[-1])) == {
        "prompt",
        "split",
        "worker_ids",
        "rewards",
    }


def test_blank_lines_are_skipped(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "r.jsonl", [json.dumps(good_row(1)), "", "  ", json.dumps(good_row(2))]
    )
    assert [r.prompt for r in read_records(path)] == ["prompt 1", "prompt 2"]


def test_a_line_that_is_not_json_names_file_and_line(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "broken.jsonl",
        [json.dumps(good_row(1)), json.dumps(good_row(2)), '{"prompt": "unterminated'],
    )
    with pytest.raises(RecordFileError) as error:
        read_records(path)
    message = str(error.value)
    assert str(path) in message
    assert "line 3" in message
    assert "not valid JSON" in message


def test_a_files_only_line_cut_short_is_said_to_be_cut_short(tmp_path: Path) -> None:
    """A records file whose one line a crash cut short (no newline after it) was told "the
    file does not start as JSON Lines ... check that it is the file meant (a CSV or other
    table ...)"."""
    path = tmp_path / "records.jsonl"
    path.write_text(json.dumps(good_row(1))[:30], encoding="utf-8")
    with pytest.raises(RecordFileError) as error:
        read_records(path)
    assert str(error.value) == (
        f"{path}, line 1: not valid JSON (Expecting ':' delimiter at column 31); the "
        "file's only line ends before its JSON does: it was cut short (a run killed while "
        "writing it, a copy cut short); write it again"
    )
    path.write_text("prompt,worker,reward", encoding="utf-8")  # a CSV's header: no JSON cut
    with pytest.raises(RecordFileError, match="check that it is the file meant"):
        read_records(path)


def test_a_line_cut_short_before_more_rows_is_neither_the_only_line_nor_a_line_break(
    tmp_path: Path,
) -> None:
    """A line cut short (a write killed half-way) with rows after it is no file's only line
    cut short, and a text it cuts is no line break typed inside a string: it is a line to fix
    or delete."""
    whole, other = json.dumps(good_row(1)), json.dumps(good_row(2))
    path = write_lines(tmp_path / "records.jsonl", [whole[:30], other])
    with pytest.raises(RecordFileError) as error:
        read_records(path)
    message = str(error.value)
    assert "check that it is the file meant" in message and "only line" not in message
    # where it ends, as for a file's only line: json counts it as column 1 past the newline
    assert "(Expecting ':' delimiter at column 31)" in message
    path = write_lines(tmp_path / "records.jsonl", [whole, whole[:30], other])
    with pytest.raises(RecordFileError) as error:
        read_records(path)
    assert str(error.value) == (
        f"{path}, line 2: not valid JSON (Expecting ':' delimiter at column 31); fix or delete "
        "that line"
    )
    cut_in_a_text = whole[: whole.index("prompt 1") + 3]
    path = write_lines(tmp_path / "records.jsonl", [whole, cut_in_a_text, other])
    with pytest.raises(RecordFileError) as error:
        read_records(path)
    assert str(error.value) == (
        f"{path}, line 2: not valid JSON (Invalid control character at column "
        f"{len(cut_in_a_text) + 1}); fix or delete that line"
    )


def test_a_file_cut_short_inside_a_text_holding_a_quote_is_said_to_be_cut_short(
    tmp_path: Path,
) -> None:
    """A line or a .json cut short inside a text holding an escaped quote (an answer saying
    "hi") was taken for a fault inside, not for the file ending: the records file's only line
    was told to check that it is the file meant (a CSV ...), the .json not to fetch it again."""
    row = {**good_row(1), "prompt": 'Say "hi" to me'}
    records = tmp_path / "records.jsonl"
    line = json.dumps(row)
    records.write_text(line[: line.index("hi") + 2], encoding="utf-8")
    with pytest.raises(RecordFileError, match="only line ends before its JSON does"):
        read_records(records)
    scores = tmp_path / "scores.json"
    text = json.dumps([row, row])
    scores.write_text(text[: text.index("hi") + 2], encoding="utf-8")
    with pytest.raises(RecordFileError, match="the file ends before its JSON does"):
        read_json(scores)


@pytest.mark.parametrize(
    ("line", "kind"),
    [("[1, 2, 3]", "an array"), ('"hello"', "a string"), ("42", "a number"), ("null", "null")],
)
def test_a_json_line_that_is_not_an_object_says_how_to_write_it(
    tmp_path: Path, line: str, kind: str
) -> None:
    """A line holding a JSON value that is no object was refused as "expected a JSON object,
    got list" (or "got NoneType" for null), which named Python's type and not what to write."""
    path = write_lines(tmp_path / "list.jsonl", [json.dumps(good_row(1)), line])
    with pytest.raises(RecordFileError) as error:
        read_records(path)
    assert str(error.value) == (
        f"{path}, line 2: expected a JSON object ({{...}}), got {kind}: each line of a JSON "
        "Lines file holds one JSON object; write each row as an object on a line of its own "
        "(json.dumps(row) for each row), or delete that line"
    )


@pytest.mark.parametrize("indent", [None, 2])
def test_a_json_list_of_records_is_called_a_list(tmp_path: Path, indent: int | None) -> None:
    """Records saved as one JSON list were refused as "line 1: expected a JSON object, got
    list", or (indented) as "not valid JSON ... check that it is the file meant ... or fix
    that line", neither of which says what to change."""
    path = tmp_path / "records.json"
    text = json.dumps([good_row(1), good_row(2)], indent=indent)
    for written in (text, "  " + text):  # a list indented inside its file too
        path.write_text(written, encoding="utf-8")
        with pytest.raises(RecordFileError) as error:
            read_records(path)
        assert str(error.value) == (
            f"{path}, line 1: the file holds a JSON list, not JSON Lines (one JSON object a "
            "line, no enclosing [ ]); write each object on a line of its own, e.g. jq -c '.[]' "
            "records.json > records.lines.jsonl"
        )


def test_a_json_list_on_each_line_is_not_called_one_json_list(tmp_path: Path) -> None:
    """A table's rows written as json.dumps(row) (a list a line) were called 'the file holds
    a JSON list ... e.g. jq -c '.[]' ...', which splits each row into its cells."""
    path = write_lines(tmp_path / "records.jsonl", ['["prompt", "w1"]', '["What is 2+2?", 1.0]'])
    with pytest.raises(RecordFileError) as error:
        read_records(path)
    assert str(error.value) == (
        f"{path}, line 1: each line holds a JSON list ([...]), not a JSON object: write each "
        'row as an object naming its fields ({"field": value, ...}), e.g. '
        "json.dumps(dict(zip(header, row)))"
    )
    two_lists = [json.dumps([good_row(1)]), json.dumps([good_row(2)])]  # two .json files cat'ed
    with pytest.raises(RecordFileError, match="the file holds a JSON list, not JSON Lines"):
        read_records(write_lines(path, two_lists))
    one_list = ['["What is 2+2?", "Name a prime."]']  # a .json of prompts: one list, no rows
    with pytest.raises(RecordFileError, match="the file holds a JSON list, not JSON Lines"):
        read_records(write_lines(path, one_list))


@pytest.mark.parametrize("opening", ["{", '{"prompt": "p",'])
def test_pretty_printed_records_are_called_pretty_printed(tmp_path: Path, opening: str) -> None:
    """Records written over several lines (`jq . records.jsonl > x.jsonl` to read them,
    json.dump with indent) were refused as "line 1: not valid JSON (Expecting property name
    ...) ... check that it is the file meant (a CSV or other table ...)", which did not say
    what to change."""
    pretty = json.dumps(good_row(1), indent=2)
    path = tmp_path / "records.jsonl"
    path.write_text(pretty.replace("{\n  ", opening + "\n  ", 1) + "\n", encoding="utf-8")
    with pytest.raises(RecordFileError) as error:
        read_records(path)
    assert str(error.value) == (
        f"{path}, line 1: the JSON object goes on past the end of the line: the file looks "
        "pretty-printed (an object over several lines), not JSON Lines (one JSON object a "
        "line); write each object on one line, e.g. jq -c . records.jsonl > "
        "records.lines.jsonl"
    )
    path.write_text('{"prompt": "p", "split": "train", "worker_ids": ["a"] "rewards": [1]}\n')
    with pytest.raises(RecordFileError, match="line 1: not valid JSON"):
        read_records(path)  # an error inside the line is still said as one


def test_python_dicts_and_trailing_commas_are_named_as_such(tmp_path: Path) -> None:
    """Lines written with str(row) (single quotes, True, None) or the items of a JSON list
    with its brackets removed (a comma after each object) read "not valid JSON (Expecting
    property name enclosed in double quotes ...)" or "(Extra data ...)" and, on line 1,
    "check that it is the file meant (a CSV or other table ...)"."""
    path = tmp_path / "records.jsonl"
    row = good_row(1, task=None)
    for position, lines in enumerate([[str(row)], [json.dumps(good_row(0)), str(row)]], 1):
        write_lines(path, lines)
        with pytest.raises(RecordFileError) as error:
            read_records(path)
        assert str(error.value) == (
            f"{path}, line {position}: a Python dict (single quotes, True, None), not JSON: "
            "write each row with json.dumps(row), not str(row) or print(row)"
        )
    write_lines(path, [json.dumps(good_row(0)) + ",", json.dumps(row) + " , "])
    with pytest.raises(RecordFileError) as error:
        read_records(path)
    assert str(error.value) == (
        f"{path}, line 1: a comma after the JSON object: JSON Lines has nothing between its "
        "objects (a JSON list's items with the [ ] removed keep theirs); delete the comma at "
        "the end of each line"
    )
    write_lines(path, ["{'prompt': 'p'"])  # neither: still said as no JSON
    with pytest.raises(RecordFileError, match="line 1: not valid JSON"):
        read_records(path)


@pytest.mark.parametrize("space", ["\u00a0", "\x0c", "\u3000"])
def test_a_space_json_does_not_take_around_a_row_is_named(tmp_path: Path, space: str) -> None:
    """A row ending in a no-break space (pasted from a web page) or a form feed was called
    'a Python dict (single quotes, True, None), not JSON': Python reads those as spaces, and
    the row had no single quote, True or None to find."""
    row = json.dumps(good_row(2))
    path = write_lines(tmp_path / "records.jsonl", [json.dumps(good_row(1)), row + space])
    with pytest.raises(RecordFileError) as error:
        read_records(path)
    assert str(error.value) == (
        f"{path}, line 2: {space!r} at column {len(row) + 1} is no space to JSON, which takes "
        "only spaces, tabs and line ends around its values (a no-break space pasted from a web "
        "page or a document is another character); delete it"
    )


def test_messages_given_beside_or_instead_of_the_prompt_say_where_they_go(tmp_path: Path) -> None:
    """A task's `messages` field copied into a record (with or without a `prompt` too) read
    "messages: Extra inputs are not permitted" (and "prompt: Field required"), which did not
    say that a record's messages go in `prompt`."""
    messages = [{"role": "user", "content": "hi"}]
    row = good_row(1)
    for record in ({**row, "messages": messages}, {**row, "prompt": None, "messages": messages}):
        path = write_rows(tmp_path / "records.jsonl", [{k: v for k, v in record.items() if v}])
        with pytest.raises(RecordFileError) as error:
            read_records(path)
        assert str(error.value) == (
            f"{path}, line 1: a record has no 'messages' field: its prompt is 'prompt', as "
            "text or as the list of messages; give the messages as 'prompt' (alone)"
        )
    # a task of messages (it has a grader, no rewards) is a task file, not a record to fix
    task = {"id": "q1", "messages": messages, "answer": "4", "grader": "number", "task": "math"}
    path = write_rows(tmp_path / "tasks.jsonl", [task])
    with pytest.raises(RecordFileError) as error:
        read_records(path)
    assert f"{path}, line 1: this is a task (it has 'grader'), not a RewardRecord" in str(
        error.value
    )


@pytest.mark.parametrize("prompt", ["", " \n\t"])
def test_a_record_with_a_blank_prompt_is_refused(tmp_path: Path, prompt: str) -> None:
    """An empty prompt (a join that found no text) was read and trained on, every such record
    giving the router the same features, where an empty list of messages, a blank task prompt
    and an importer's empty prompt cell are refused: an empty prompt cannot be routed."""
    path = write_rows(tmp_path / "records.jsonl", [good_row(0), good_row(1, prompt=prompt)])
    with pytest.raises(RecordFileError) as error:
        read_records(path)
    message = str(error.value)
    assert f"{path}, line 2: " in message and "prompt is blank" in message, message
    assert "fill in its prompt or drop the record" in message, message


def test_a_record_whose_messages_hold_no_text_is_refused(tmp_path: Path) -> None:
    """Messages whose every content is empty or missing (the text under 'text', as another
    tool writes it) were read and trained on as "user: ", every such record giving the
    router the same features, where a blank text prompt is refused."""
    prompts = [
        [{"role": "user", "text": "What is 2+2?"}],
        [{"role": "system", "content": " "}, {"role": "user", "content": [{"type": "image_url"}]}],
    ]
    for prompt in prompts:
        path = write_rows(tmp_path / "records.jsonl", [good_row(0), good_row(1, prompt=prompt)])
        with pytest.raises(RecordFileError) as error:
            read_records(path)
        message = str(error.value)
        assert f"{path}, line 2: " in message and "prompt's messages hold no text" in message
        assert "give a message its 'content' or drop the record" in message, message
        assert ("'text' is not read" in message) == ("text" in prompt[0]), message


def test_a_prompt_mixing_texts_and_messages_names_where_and_how_to_fix_it(tmp_path: Path) -> None:
    """A prompt list holding texts beside message objects was refused as "prompt.messages.0:
    Input should be a valid dictionary or instance of ChatMessage", pydantic's words, which
    said neither that the list mixes the two nor which items are texts."""
    message = {"role": "user", "content": "What is 2+2?"}
    for prompt, texts, first_message in [
        (["You are terse.", message], "0", "1"),
        ([message, "Answer in one word.", message, "Thanks"], "1, 3", "0"),
    ]:
        path = write_rows(tmp_path / "records.jsonl", [good_row(0), good_row(1, prompt=prompt)])
        with pytest.raises(RecordFileError) as error:
            read_records(path)
        assert str(error.value) == (
            f"{path}, line 2: not a valid RewardRecord: record: prompt mixes texts and chat "
            f"messages (texts at position {texts}, a message at position {first_message}); a "
            "prompt is one text, or a list of messages only: write each text as a message, "
            '{"role": "user", "content": "..."} (or the role it has)'
        )


def test_rewards_length_must_match_worker_ids(tmp_path: Path) -> None:
    path = write_rows(tmp_path / "r.jsonl", [good_row(1), good_row(2, rewards=[0.0, 1.0])])
    with pytest.raises(RecordFileError) as error:
        read_records(path)
    message = str(error.value)
    # the whole row's problem, said as our check says it (not "record: Value error, ...")
    assert (
        f"{path}, line 2: not a valid RewardRecord: record: rewards has 2 values but "
        "worker_ids has 3; give exactly one reward per worker, in the order of worker_ids"
    ) in message


def test_costs_length_must_match_worker_ids() -> None:
    with pytest.raises(ValidationError, match="costs has 1 values but worker_ids has 3"):
        RewardRecord(prompt="p", split="train", worker_ids=WORKERS, rewards=[0, 1, 0], costs=[1])


@pytest.mark.parametrize("bad", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_rewards_in_a_file_name_line_and_position(tmp_path: Path, bad: str) -> None:
    line = json.dumps(good_row(2)).replace("0.5", bad)
    assert bad in line
    path = write_lines(tmp_path / "nan.jsonl", [json.dumps(good_row(1)), line])
    with pytest.raises(RecordFileError) as error:
        read_records(path)
    message = str(error.value)
    assert "line 2" in message
    assert "rewards must be finite" in message
    assert "positions [1]" in message


def test_null_rewards_or_costs_in_a_file_are_said_to_be_missing(tmp_path: Path) -> None:
    """null, JSON's missing value (what pandas writes for NaN), read "rewards.1: Input should
    be a valid number", where NaN itself said which positions miss a value and what to do."""
    rows = [good_row(1, rewards=[None, 0.5, None]), good_row(2, costs=[0.1, None, 0.2])]
    for line, row in enumerate(rows, start=1):
        path = write_rows(tmp_path / f"null{line}.jsonl", [good_row(0), row])
        with pytest.raises(RecordFileError) as error:
            read_records(path)
        message = str(error.value)
        assert "line 2" in message and "valid number" not in message, message
        if line == 1:
            assert f"rewards has no value (null) for {WORKERS[0]}, {WORKERS[2]}" in message
            assert "drop the record or replace the missing scores" in message, message
        else:
            assert f"costs has no value (null) for {WORKERS[1]}" in message, message
            assert "give every worker its cost, or leave costs out of the record" in message


def test_a_bad_prompt_is_told_against_the_form_it_takes(tmp_path: Path) -> None:
    """A message with a role of another API (`model`, ShareGPT's `from`) read "prompt.str:
    Input should be a valid string; prompt.list[ChatMessage].0.role: ...": the first half
    told a list of messages to be a string."""
    prompts = {
        "model": [{"role": "model", "content": "hi"}],
        "sharegpt": [{"from": "human", "value": "hi"}],
        "number": 5,
        "text part": [{"role": "user", "content": [{"type": "text", "text": 5}]}],
    }
    expected = {
        "model": "prompt.messages.0.role: Input should be 'system', 'user', 'assistant'",
        "sharegpt": "prompt.messages.0.role: Field required",
        "number": "prompt: Input should be a string or a list of chat messages",
        "text part": "content[0] is a text part whose 'text' is not a string; give the part's "
        'text as a string: {"type": "text", "text": "..."}',
    }
    for name, prompt in prompts.items():
        path = write_rows(tmp_path / f"{name}.jsonl", [good_row(0, prompt=prompt)])
        with pytest.raises(RecordFileError) as error:
            read_records(path)
        message = str(error.value)
        assert expected[name] in message and "prompt.str" not in message, message
    path = write_rows(tmp_path / "good.jsonl", [good_row(0), good_row(1, prompt=prompts["model"])])
    path.write_text(path.read_text().replace('"model"', '"user"'), encoding="utf-8")
    assert [type(record.prompt) for record in read_records(path)] == [str, list]


def test_a_numeric_id_or_task_in_a_records_file_is_read_as_its_text(tmp_path: Path) -> None:
    """`"id": 17` (a counter, pandas' index) refused the whole file with "id: Input should
    be a valid string", where a task file's numeric id is read as its text."""
    path = write_rows(tmp_path / "ids.jsonl", [good_row(0, id=17, task=3), good_row(1, id="18")])
    assert [(record.id, record.task) for record in read_records(path)] == [
        ("17", "3"),
        ("18", None),
    ]
    path = write_rows(tmp_path / "bool.jsonl", [good_row(0, id=True)])
    with pytest.raises(RecordFileError, match=r"line 1: .*id: Input should be a valid string"):
        read_records(path)  # a bool is no id


def test_a_whole_float_id_in_a_records_file_is_the_integers_id(tmp_path: Path) -> None:
    """pandas writes an integer id column with a gap as floats (`"id": 1.0`): a records file
    written with to_json gave the ids "1.0" and "3.0", where a task file and `data import`
    read the same ids as "1" and "3". A float past 2**53 is no integer a writer wrote: 1e30
    stays "1e+30", not its 31 digits, as a task's id."""
    rows = [good_row(0, id=1.0), good_row(1, id=None), good_row(2, id=3.0), good_row(3, id=2.5)]
    path = write_rows(tmp_path / "r.jsonl", [*rows, good_row(4, id=1e30)])
    assert [record.id for record in read_records(path)] == ["1", None, "3", "2.5", "1e+30"]


def test_boolean_rewards_and_costs_in_a_records_file_are_one_and_zero(tmp_path: Path) -> None:
    """A pass/fail column written as JSON booleans is read as an importer reads a boolean
    cell (true is 1, false 0), by the record's own rule, not by pydantic's lax mode alone."""
    row = good_row(0, rewards=[True, False, True], costs=[False, True, 0.5])
    path = write_rows(tmp_path / "r.jsonl", [row])
    [record] = read_records(path)
    assert (record.rewards, record.costs) == ([1.0, 0.0, 1.0], [0.0, 1.0, 0.5])
    assert all(type(value) is float for value in [*record.rewards, *(record.costs or [])])
    strict = RewardRecord.model_validate(row, strict=True)
    assert (strict.rewards, strict.costs) == (record.rewards, record.costs)


def test_rewards_and_costs_written_as_text_are_read_as_the_importers_read_them(
    tmp_path: Path,
) -> None:
    """pydantic's lax mode read a records file's "0.5" but refused "True" (where true, and an
    importer's "True" cell, is 1) and read "1_0" as a reward of 10 (an importer refuses it):
    text is read by the importers' rule, and text that is no number is refused naming its
    line, its worker and how to write it."""
    row = good_row(0, rewards=["0.5", "True", " false "], costs=["0.002", "FALSE", 1])
    path = write_rows(tmp_path / "r.jsonl", [row])
    [record] = read_records(path)
    assert (record.rewards, record.costs) == ([0.5, 1.0, 0.0], [0.002, 0.0, 1.0])
    refused = {
        "1_0": "'1_0' (write the number without underscores: 10, or 1.0 if a decimal point",
        "0,5": "'0,5' (write numbers with a decimal point",
        "yes": "'yes'; write each value",
    }
    for text, said in refused.items():
        rows = [good_row(0), good_row(1, rewards=[0.5, 1.0, text])]
        path = write_rows(tmp_path / "bad.jsonl", rows)
        with pytest.raises(RecordFileError) as raised:
            read_records(path)
        message = str(raised.value)
        assert message.startswith(f"{path}, line 2: "), message
        assert f"rewards holds a text that is no finite number for c: {said}" in message, message


@pytest.mark.parametrize("blank", ["", " \t"])
def test_a_record_with_a_blank_id_is_refused_naming_its_line(tmp_path: Path, blank: str) -> None:
    """An id "" (or spaces) was read: many such records shared one id that names no record,
    where a task's blank id is refused. No id at all (absent or null) is still none."""
    rows = [good_row(0, id="q0"), good_row(1, id=blank), good_row(2, id=None)]
    path = write_rows(tmp_path / "r.jsonl", rows)
    with pytest.raises(RecordFileError) as raised:
        read_records(path)
    message = str(raised.value)
    assert message.startswith(f"{path}, line 2: ") and f"id is blank ({blank!r})" in message
    assert "give the record an id of its own, or leave 'id' out" in message, message
    path = write_rows(tmp_path / "r.jsonl", [rows[0], good_row(1), rows[2]])
    assert [record.id for record in read_records(path)] == ["q0", None, None]


def test_a_records_id_with_spaces_around_it_is_that_id(tmp_path: Path) -> None:
    """A record's id " q1" was another id than "q1", though its task and a task file's id are
    read without the spaces: the two records' repeated id went unwarned of, and a join by id
    (a task file's "q1") missed the first."""
    rows = [good_row(0, id=" q1"), good_row(1, id="q1\t"), good_row(2, id="q2")]
    path = write_rows(tmp_path / "r.jsonl", rows)
    records = read_records(path)
    assert [record.id for record in records] == ["q1", "q1", "q2"]
    assert repeated_ids(records) == ["q1"]


def test_a_record_with_a_blank_worker_id_is_refused_naming_its_line(tmp_path: Path) -> None:
    """A worker "" (or spaces) was read and trained on, though no pool can name such a worker
    (a pool refuses an empty id), so the router could never serve the worker it chose."""
    path = write_rows(tmp_path / "r.jsonl", [good_row(0, worker_ids=["a", " ", "c"])])
    with pytest.raises(RecordFileError) as raised:
        read_records(path)
    message = str(raised.value)
    assert (
        message.startswith(f"{path}, line 1: ")
        and "worker_ids has a blank id at position(s) [1]" in message
    )
    assert "give each worker its id" in message, message


def test_a_records_task_with_spaces_around_it_is_its_family(tmp_path: Path) -> None:
    """A record's task " math " (written when task names were read as written) is the family
    math, as a task file's is: not a family of its own beside math in tables."""
    path = write_rows(tmp_path / "r.jsonl", [good_row(0, task=" math\t"), good_row(1, task="math")])
    assert [record.task for record in read_records(path)] == ["math", "math"]


def test_a_record_without_workers_is_refused_naming_its_line(tmp_path: Path) -> None:
    path = write_rows(tmp_path / "r.jsonl", [good_row(0, worker_ids=[], rewards=[])])
    with pytest.raises(
        RecordFileError, match=r"r\.jsonl, line 1: .*worker_ids: List should have at least 1 item"
    ):
        read_records(path)


def test_nan_reward_refused_when_building_a_record() -> None:
    with pytest.raises(ValidationError, match=r"rewards must be finite.*positions \[0, 2\]"):
        RewardRecord(prompt="p", split="train", worker_ids=WORKERS, rewards=[math.nan, 1, math.inf])


def test_nan_or_negative_costs_are_refused() -> None:
    with pytest.raises(ValidationError, match="costs must be finite"):
        RewardRecord(
            prompt="p", split="train", worker_ids=WORKERS, rewards=[0, 1, 0], costs=[1, math.nan, 1]
        )
    with pytest.raises(ValidationError, match="costs must not be negative"):
        RewardRecord(
            prompt="p", split="train", worker_ids=WORKERS, rewards=[0, 1, 0], costs=[1, -1, 1]
        )


def test_unknown_split_names_line_and_field(tmp_path: Path) -> None:
    path = write_rows(
        tmp_path / "r.jsonl", [good_row(1), good_row(2), good_row(3, split="holdout")]
    )
    with pytest.raises(RecordFileError) as error:
        read_records(path)
    message = str(error.value)
    assert "line 3" in message
    assert "split:" in message
    for split in ("train", "validation", "test"):
        assert split in message


@pytest.mark.parametrize(
    ("row", "format"),
    [
        ({"prompt": "p", "worker": "a", "reward": 1, "cost": 0.1}, "long"),
        ({"task": "gsm", "id": 1, "question": "q", "scores": {"m": 1}, "out_chars": {"m": 9}},
         "zeroeval"),
    ],
)  # fmt: skip
def test_a_dataset_not_yet_imported_given_as_records_says_to_import_it(
    tmp_path: Path, row: dict, format: str
) -> None:
    """A long or ZeroEval file given to `data stats` or `train` was refused as "not a valid
    RewardRecord: split: Field required; worker_ids: Field required; ...", which does not
    say that the file only needs importing."""
    path = write_rows(tmp_path / "data.jsonl", [row])
    with pytest.raises(RecordFileError) as error:
        read_records(path)
    keys = ", ".join(map(repr, row))
    assert str(error.value) == (
        f"{path}, line 1: this is a {format} dataset's row (it has {keys}), not a RewardRecord: "
        f"`fugu-lite data import {format} FILE -o records.jsonl` makes the records to use here"
    )


def test_misspelled_record_field_is_named(tmp_path: Path) -> None:
    row = good_row(1)
    row["reward"] = row.pop("rewards")
    path = write_rows(tmp_path / "r.jsonl", [row])
    with pytest.raises(RecordFileError) as error:
        read_records(path)
    message = str(error.value)
    assert "line 1" in message
    assert "reward:" in message  # the extra key
    assert "rewards:" in message  # the missing one


def test_duplicate_worker_ids_are_refused() -> None:
    with pytest.raises(ValidationError, match="worker_ids has duplicates"):
        RewardRecord(prompt="p", split="train", worker_ids=["a", "a"], rewards=[0, 1])


def test_empty_message_list_is_refused() -> None:
    with pytest.raises(ValidationError, match="empty list of messages"):
        RewardRecord(prompt=[], split="train", worker_ids=WORKERS, rewards=[0, 1, 0])


def test_records_with_different_worker_lists_name_the_record(tmp_path: Path) -> None:
    rows = [good_row(1), good_row(2), good_row(3, worker_ids=["a", "b", "z"], id="odd-one")]
    path = write_rows(tmp_path / "r.jsonl", rows)
    with pytest.raises(RecordFileError) as error:
        read_records(path)
    message = str(error.value)
    assert str(path) in message
    assert "line 3" in message
    assert "odd-one" in message
    assert "['a', 'b', 'z']" in message
    assert "['a', 'b', 'c']" in message


def test_a_worker_mismatch_names_the_file_line_not_the_record_number(tmp_path: Path) -> None:
    first = json.dumps(good_row(1))
    swapped = json.dumps(good_row(2, worker_ids=["b", "a", "c"]))
    path = write_lines(tmp_path / "r.jsonl", [first, "", swapped])
    with pytest.raises(RecordFileError, match=r"r\.jsonl, line 3 \(id=None\) has workers"):
        read_records(path)


def test_a_link_to_a_file_that_is_there_is_no_broken_link(tmp_path: Path) -> None:
    """broken_link says what a link leading nowhere is; a link to a file that is there (a
    backbone folder linked from another disk) is none, and `--backbone LINK` is read."""
    (tmp_path / "weights").mkdir()
    (tmp_path / "linked").symlink_to(tmp_path / "weights")
    (tmp_path / "dangling").symlink_to(tmp_path / "gone")
    assert broken_link(tmp_path / "linked") == ""
    assert broken_link(tmp_path / "weights") == ""
    assert broken_link(tmp_path / "dangling").startswith(f"a link to {tmp_path / 'gone'}, which")


def test_a_records_file_named_dash_is_read_where_it_is_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`-r -` means standard input (not read) only where no file has that name: a file named
    `-` (made by `cmd > -`) is read."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(RecordFileError, match="standard input"):
        read_records(Path("-"))
    write_rows(tmp_path / "-", [good_row(0)])
    assert [record.prompt for record in read_records(Path("-"))] == ["prompt 0"]


def test_a_lone_surrogate_escape_names_the_file_and_line(tmp_path: Path) -> None:
    """A prompt holding "\\ud83d" (half an emoji) was read, then failed when it was hashed
    or written: "'utf-8' codec can't encode character", no file or line named."""
    pair = json.dumps(good_row(1, prompt="smile \U0001f600"))  # escaped as a whole pair: fine
    lone = json.dumps(good_row(2)).replace("prompt 2", "smile \\ud83d")
    path = write_lines(tmp_path / "r.jsonl", [pair, lone])
    with pytest.raises(
        RecordFileError, match=r"r\.jsonl, line 2: holds a lone UTF-16 surrogate escape \(\\ud83d\)"
    ):
        read_records(path)
    assert read_records(write_lines(path, [pair]))[0].prompt == "smile \U0001f600"
    # in capitals, as .NET's and Java's JSON writers escape it
    write_lines(path, [pair, lone.replace("\\ud83d", "\\uD83D")])
    with pytest.raises(RecordFileError, match=r"line 2: holds a lone UTF-16 surrogate escape"):
        read_records(path)
    (tmp_path / "p.json").write_text('{"a": ["\\udc00"]}', encoding="utf-8")
    with pytest.raises(RecordFileError, match=r"p\.json: holds a lone UTF-16 surrogate"):
        read_json(tmp_path / "p.json")


def test_lone_surrogate_escapes_side_by_side_are_named_together(tmp_path: Path) -> None:
    """A pair written in the wrong order (low half first, "\\ude00\\ud83d") is two lone
    halves side by side: both are named, not only the first."""
    row = json.dumps(good_row(1)).replace("prompt 1", "smile \\ude00\\ud83d")
    path = write_lines(tmp_path / "r.jsonl", [row])
    with pytest.raises(RecordFileError) as raised:
        read_records(path)
    assert "holds a lone UTF-16 surrogate escape (\\ude00\\ud83d), which" in str(raised.value)


def test_a_missing_file_named_dash_in_a_folder_is_not_standard_input(tmp_path: Path) -> None:
    """Only `-` alone means standard input: a path ending in `-` (runs/-) that is not
    there is a file not found."""
    with pytest.raises(RecordFileError) as raised:
        read_records(tmp_path / "-")
    assert str(raised.value) == f"{tmp_path / '-'}: file not found"


def test_json_python_cannot_read_names_the_file_and_line(tmp_path: Path) -> None:
    """An integer of 5,000 digits (a task's answer written by another tool) or lists nested
    2,000 deep are valid JSON that json.loads raised ValueError / RecursionError on: the
    command ended in a traceback naming no file or line."""
    good = json.dumps(good_row(1))
    huge = '{"prompt": "p", "answer": ' + "9" * 5000 + "}"
    deep = '{"prompt": ' + "[" * 2000 + "]" * 2000 + "}"
    path = write_lines(tmp_path / "r.jsonl", [good, huge])
    with pytest.raises(RecordFileError, match=r"r\.jsonl, line 2: an integer of more than 4300 "):
        read_records(path)
    with pytest.raises(RecordFileError, match=r"r\.jsonl, line 2: JSON nested too deeply"):
        read_records(write_lines(path, [good, deep]))
    (tmp_path / "p.json").write_text(huge, encoding="utf-8")
    with pytest.raises(RecordFileError, match=r"p\.json: an integer of more than .*as a string"):
        read_json(tmp_path / "p.json")


def test_a_records_file_that_is_not_utf8_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_bytes(json.dumps(good_row(1)).encode() + b'\n{"prompt": "h\xe9"}\n')
    with pytest.raises(RecordFileError, match=r"r\.jsonl, line 2: not UTF-8 text .*re-save"):
        read_records(path)


def test_the_nul_bytes_a_power_cut_leaves_are_not_called_utf16(tmp_path: Path) -> None:
    """A records file appended to when the power went (ext4, XFS: its size grew, its bytes
    never came) ends in NUL bytes; that line was called UTF-16 ('re-save the file as UTF-8'),
    sending the user after an encoding the file never had (and a .json file's, at line 1)."""
    path = tmp_path / "r.jsonl"
    path.write_bytes(json.dumps(good_row(1)).encode() + b"\n" + b"\x00" * 4096)
    with pytest.raises(RecordFileError) as raised:
        read_records(path)
    said = str(raised.value)
    assert said.startswith(f"{path}, line 2: NUL bytes, not text: what a crash or power cut")
    assert "UTF-16" not in said and "tr -d '\\000'" in said
    # a line cut inside its row and zero-filled, which the next append ended with a newline
    # before its own rows (append_jsonl after a torn line)
    torn = json.dumps(good_row(1)).encode()[:20] + b"\x00" * 512 + b"\n"
    path.write_bytes(json.dumps(good_row(1)).encode() + b"\n" + torn + b"{}\n")
    with pytest.raises(RecordFileError) as raised:
        read_records(path)
    assert str(raised.value).startswith(f"{path}, line 2: NUL bytes, not text: what a crash")
    (tmp_path / "prices.json").write_bytes(b'{\n  "a": 1\n}\n' + b"\x00" * 512)
    with pytest.raises(RecordFileError, match=r"prices\.json, line 4: NUL bytes, not text"):
        read_json(tmp_path / "prices.json")


def test_a_directory_is_not_a_records_file(tmp_path: Path) -> None:
    with pytest.raises(RecordFileError, match="is a directory, not a file"):
        read_records(tmp_path)


def test_same_workers_in_another_order_are_different_workers() -> None:
    first = RewardRecord(prompt="p", split="train", worker_ids=["a", "b"], rewards=[0, 1])
    swapped = RewardRecord(prompt="q", split="train", worker_ids=["b", "a"], rewards=[1, 0])
    assert check_same_workers([first, first]) == ["a", "b"]
    with pytest.raises(RecordFileError, match="record 2"):
        check_same_workers([first, swapped])


def test_empty_and_missing_files(tmp_path: Path) -> None:
    empty = write_lines(tmp_path / "empty.jsonl", [""])
    with pytest.raises(RecordFileError, match="holds no records"):
        read_records(empty)
    with pytest.raises(RecordFileError, match="file not found"):
        read_records(tmp_path / "absent.jsonl")


@pytest.mark.parametrize("text", ["", "\n\n", "\ufeff  \r\n"])
def test_an_empty_json_file_is_called_empty(tmp_path: Path, text: str) -> None:
    """An empty .json (an LLMRouter score file whose copy was cut short) was 'not valid JSON
    at line 1, column 1: Expecting value', or at line 3 after blank lines."""
    (tmp_path / "scores.json").write_text(text, encoding="utf-8")
    with pytest.raises(RecordFileError) as error:
        read_json(tmp_path / "scores.json")
    assert str(error.value) == (
        f"{tmp_path / 'scores.json'}: the file is empty, no JSON in it (a copy or download cut "
        "short?); give the file with its JSON"
    )


def test_records_in_split_refuses_an_unknown_split(records: list[RewardRecord]) -> None:
    assert len(records_in_split(records, "train")) == sum(r.split == "train" for r in records)
    with pytest.raises(
        ValueError, match=r"unknown split 'holdout'; use one of train, validation, test"
    ):
        records_in_split(records, "holdout")


def test_split_aliases_name_the_same_split_in_records_as_in_importers(
    tmp_path: Path, records: list[RewardRecord]
) -> None:
    """`data import` read dev, val, valid, training and testing (any case) as splits, but a
    record file's `"split": "dev"` was refused and records_in_split (eval --split) said
    "unknown split 'dev'"."""
    validation = [r for r in records if r.split == "validation"]
    assert validation and records_in_split(records, "Dev") == validation
    assert records_in_split(records, " dev\t") == validation  # a table cell's spaces aside
    path = write_rows(
        tmp_path / "r.jsonl",
        [good_row(1, split="dev"), good_row(2, split="VAL "), good_row(3, split="testing")],
    )
    assert [record.split for record in read_records(path)] == ["validation", "validation", "test"]
    written = tmp_path / "written.jsonl"
    write_records(written, read_records(path))
    assert [json.loads(line)["split"] for line in written.read_text().splitlines()] == [
        "validation", "validation", "test",
    ]  # fmt: skip


# --- make_loader on bad records ------------------------------------------------------------


def test_make_loader_on_an_empty_split_raises(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig
) -> None:
    only_train = [r.model_copy(update={"split": "train"}) for r in records]
    model = make_model(tiny_model_cfg, workers_of(records))
    loader = make_loader(only_train, model, "train", batch_size=8, shuffle=False)
    assert len(loader.dataset) == len(records)
    for split in ("validation", "test"):
        with pytest.raises(ValueError, match=f"no records in the '{split}' split"):
            make_loader(only_train, model, split, batch_size=8, shuffle=False)


def test_make_loader_refuses_mixed_workers(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig
) -> None:
    model = make_model(tiny_model_cfg, workers_of(records))
    train = [r for r in records if r.split == "train"]
    odd = train[3].model_copy(update={"worker_ids": ["x", "y", "z"], "id": "odd"})
    with pytest.raises(ValueError, match=r"train split: record 4 \(id=odd\)"):
        make_loader([*train[:3], odd, *train[4:]], model, "train", batch_size=8, shuffle=False)


def test_make_loader_refuses_records_with_other_workers_than_the_model(
    records: list[RewardRecord], tiny_model_cfg: ModelConfig
) -> None:
    model = make_model(tiny_model_cfg, ["x", "y", "z"])
    with pytest.raises(ValueError, match=r"records have workers .*the model \['x', 'y', 'z'\]"):
        make_loader(records, model, "train", batch_size=8, shuffle=False)


def workers_of(records: list[RewardRecord]) -> list[str]:
    return records[0].worker_ids


# --- configs -------------------------------------------------------------------------------


def test_defaults_without_a_file_differ_from_the_shipped_file_as_documented() -> None:
    """README: without -c the code defaults apply, which are default.yaml except
    `quantization: none` and `pooling: auto` (mean on MiniLM)."""
    bare = load_config(None, PipelineConfig).model_dump()
    shipped = load_config(DEFAULT_CONFIG, PipelineConfig).model_dump()
    differences = {
        f"{section}.{key}": (value, shipped[section][key])
        for section, values in bare.items()
        for key, value in values.items()
        if value != shipped[section][key]
    }
    assert differences == {
        "model.pooling": ("auto", "mean"),
        "model.quantization": ("none", "int8"),
    }


def test_the_shipped_default_config_loads_as_written() -> None:
    config = load_config(DEFAULT_CONFIG, PipelineConfig)
    written = yaml.safe_load(DEFAULT_CONFIG.read_text(encoding="utf-8"))
    for section, values in written.items():
        for key, value in values.items():
            assert getattr(getattr(config, section), key) == value, f"{section}.{key}"


def test_a_yaml_file_overrides_only_the_keys_it_names(tmp_path: Path) -> None:
    path = write_yaml(tmp_path / "c.yaml", "model:\n  layer: 4\nsft:\n  epochs: 3\n")
    config = load_config(path, PipelineConfig)
    assert config.model.layer == 4
    assert config.sft.epochs == 3
    assert config.model.backbone == ModelConfig().backbone
    assert config.rl == PipelineConfig().rl
    assert config.sft_config().training.epochs == 3
    assert config.rl_config().model.layer == 4


def test_dotted_overrides_win_over_the_file(tmp_path: Path) -> None:
    path = write_yaml(tmp_path / "c.yaml", "training:\n  epochs: 3\n")
    config = load_config(
        path, RLConfig, {"training.epochs": 7, "model.pooling": "mean", "training.seed": 5}
    )
    assert (config.training.epochs, config.training.seed) == (7, 5)
    assert config.model.pooling == "mean"


def test_unknown_top_level_key_names_key_and_close_match(tmp_path: Path) -> None:
    path = write_yaml(tmp_path / "c.yaml", "trainig:\n  epochs: 3\n")
    with pytest.raises(ConfigError) as error:
        load_config(path, SFTConfig)
    message = str(error.value)
    assert str(path) in message
    assert "unknown key 'trainig'" in message
    assert "did you mean 'training'?" in message


def test_unknown_nested_key_names_dotted_key_and_close_match(tmp_path: Path) -> None:
    text = "model:\n  layr: 3\n  pool: mean\nrl:\n  estimater: reinforce\n"
    path = write_yaml(tmp_path / "c.yaml", text)
    with pytest.raises(ConfigError) as error:
        load_config(path, PipelineConfig)
    message = str(error.value)
    assert "unknown key 'model.layr'" in message
    assert "did you mean 'layer'?" in message
    # a key cut short (difflib's ratio 0.73) is still a close match
    assert "unknown key 'model.pool': did you mean 'pooling'?" in message
    assert "unknown key 'rl.estimater'" in message
    assert "did you mean 'estimator'?" in message


def test_a_section_or_key_in_capitals_suggests_its_lower_case_name(tmp_path: Path) -> None:
    """`SFT:` shares no letter with `sft` as difflib compares them: `train pipeline` listed the
    sections with no hint, and `train sft` took the file for a stage file ("known keys here:
    model, training")."""
    path = write_yaml(tmp_path / "c.yaml", "SFT:\n  epochs: 3\nrl:\n  EPOCHS: 2\n")
    with pytest.raises(ConfigError) as error:
        load_config(path, PipelineConfig)
    assert "unknown key 'SFT': did you mean 'sft'? known keys here: " in str(error.value)
    assert "unknown key 'rl.EPOCHS': did you mean 'epochs'? " in str(error.value)
    path = write_yaml(tmp_path / "c.yaml", "SFT:\n  epochs: 3\n")
    with pytest.raises(ConfigError) as error:
        load_stage_config(path, SFTConfig, "sft")
    assert "unknown top-level key(s) 'SFT' (did you mean 'sft'?)" in str(error.value)


def test_a_pool_config_given_as_a_training_config_says_what_it_is(tmp_path: Path) -> None:
    """`train pipeline -c pool.yaml` said "unknown key 'workers'", as if it were mistyped."""
    path = write_yaml(
        tmp_path / "pool.yaml", "workers:\n  - id: a\n    model: m\nopt_out: []\nmodle: {}\n"
    )
    for load in (
        lambda: load_config(path, PipelineConfig),
        lambda: load_stage_config(path, SFTConfig, "sft"),
    ):
        with pytest.raises(ConfigError) as error:
            load()
        lines = str(error.value).splitlines()
        hint = "a worker pool's key: is this a pool config (for --pool of collect, serve, demo)? "
        assert lines[1].startswith(f"  unknown key 'workers': {hint}known keys here: model, ")
        assert lines[2].startswith(f"  unknown key 'opt_out': {hint}")
        assert lines[3].startswith("  unknown key 'modle': did you mean 'model'? ")


def test_unknown_key_without_a_close_match_lists_the_known_keys(tmp_path: Path) -> None:
    path = write_yaml(tmp_path / "c.yaml", "sft:\n  zzzzzz: 1\n")
    with pytest.raises(ConfigError) as error:
        load_config(path, PipelineConfig)
    message = str(error.value)
    assert "unknown key 'sft.zzzzzz'" in message
    assert "did you mean" not in message
    assert "temperature" in message and "tie_handling" in message


def test_a_bad_value_inside_a_section_given_by_set_names_that_set() -> None:
    """`--set training={epochs: 0}` gives the key inside the section it sets."""
    with pytest.raises(ConfigError) as error:
        load_config(None, SFTConfig, {"training": {"epochs": 0}})
    assert "  training.epochs (--set training): Input should be greater" in str(error.value)


def test_a_files_bad_key_whose_name_starts_as_a_set_key_is_named_as_the_files(
    tmp_path: Path,
) -> None:
    """`--set model.head=linear` beside a file's bad `head_hidden: 0`: the key the --set gave
    is model.head, so model.head_hidden is the file's to fix, not the --set's."""
    path = write_yaml(tmp_path / "c.yaml", "model:\n  head_hidden: 0\n")
    with pytest.raises(ConfigError) as error:
        load_config(path, SFTConfig, {"model.head": "linear"})
    assert "\n  model.head_hidden: Input should be greater than or equal to 1 (got 0)" in str(
        error.value
    )


def test_a_set_key_in_the_wrong_section_names_the_section_as_set_names_it(tmp_path: Path) -> None:
    """--set keys of a stage are model.* and training.*, also with a pipeline file as -c."""
    path = write_yaml(tmp_path / "p.yaml", "sft:\n  epochs: 3\n")
    with pytest.raises(ConfigError) as error:
        load_stage_config(path, SFTConfig, "sft", {"model.epochs": 3})
    assert "unknown key 'model.epochs': it belongs under training:, not here;" in str(error.value)
    # a mapping given for a list is not written into one as a hint
    with pytest.raises(ConfigError) as error:
        load_config(None, PipelineConfig, {"model.svf_targets": {"a": 1}})
    assert str(error.value).endswith("--set model.svf_targets: Input should be a valid list")


def test_a_section_given_whole_by_set_gets_the_hints_of_a_section() -> None:
    """`--set training={...}` on a pipeline is told where stage settings go (there is no
    `training.` key to build a `sft.` one from), and a pool's key inside a stage section is
    an unknown key of that section, not a sign of a pool config."""
    with pytest.raises(ConfigError) as error:
        load_config(None, PipelineConfig, {"training": {"epochs": 3}})
    assert "unknown key 'training': a pipeline config puts stage settings under sft:, rl: or " in (
        str(error.value)
    )
    with pytest.raises(ConfigError) as error:
        load_config(None, PipelineConfig, {"sft.workers": 3})
    assert "unknown key 'sft.workers': known keys here: " in str(error.value)


def test_unknown_override_key_is_reported_like_a_file_key() -> None:
    with pytest.raises(ConfigError, match=r"unknown key 'training\.epoch': did you mean 'epochs'"):
        load_config(None, SFTConfig, {"training.epoch": 3})


@pytest.mark.parametrize(
    ("config_type", "key", "hint"),
    [
        (ESConfig, "iterations", "training.iterations"),
        (SFTConfig, "epochz", "training.epochs"),
        (SFTConfig, "layer", "model.layer"),
        (PipelineConfig, "temperatur", "sft.temperature"),
    ],
)
def test_a_key_given_one_section_too_high_suggests_its_dotted_path(
    config_type: type, key: str, hint: str
) -> None:
    with pytest.raises(ConfigError) as error:
        load_config(None, config_type, {key: 3})
    message = str(error.value)
    assert message.startswith("overrides of the defaults: ")
    assert f"unknown key {key!r}: did you mean {hint!r}?" in message


@pytest.mark.parametrize(
    ("text", "stage", "expected"),
    [
        ("model:\n  epochs: 3\n", None, "unknown key 'model.epochs': it belongs under sft: or rl:"),
        ("sft:\n  layer: 3\n", None, "unknown key 'sft.layer': it belongs under model:, not"),
        (
            "sft:\n  rollouts_per_prompt: 2\n",
            None,
            "'sft.rollouts_per_prompt': it belongs under rl:",
        ),
        ("model:\n  sigma0: 0.1\n", "es", "unknown key 'model.sigma0': it belongs under training:"),
        ("model:\n  layer: 2\nsft:\n  head: mlp\n", "sft", "'sft.head': it belongs under model:"),
    ],
)
def test_a_key_in_the_wrong_section_names_the_section_it_belongs_under(
    tmp_path: Path, text: str, stage: str | None, expected: str
) -> None:
    """`epochs` under `model:` listed the model's keys and no hint: the user did not learn
    that the key is right and only its section wrong."""
    path = write_yaml(tmp_path / "c.yaml", text)
    with pytest.raises(ConfigError) as error:
        if stage is None:
            load_config(path, PipelineConfig)
        else:
            load_stage_config(path, {"es": ESConfig, "sft": SFTConfig}[stage], stage)
    assert expected in str(error.value)


@pytest.mark.parametrize(
    ("text", "stage", "expected"),
    [
        # a model per stage: the pipeline's stages share the one top-level model section
        (
            "sft:\n  epochs: 2\n  model:\n    backbone: tiny-random\n",
            None,
            "unknown key 'sft.model': 'model' is a top-level section, not a key of sft:;",
        ),
        (
            "sft:\n  model:\n    layer: 2\n",
            "sft",
            "unknown key 'sft.model': 'model' is a top-level section, not a key of sft:;",
        ),
        (
            "training:\n  model:\n    layer: 2\n",
            "sft",
            "unknown key 'training.model': 'model' is a top-level section, not a key of training:;",
        ),
        (
            "sft:\n  epochs: 2\n  rl:\n    epochs: 3\n",
            None,
            "unknown key 'sft.rl': 'rl' is a top-level section, not a key of sft:;",
        ),
        # a stage file's training: holding a pipeline file's stage section
        (
            "training:\n  sft:\n    epochs: 3\n",
            "sft",
            "unknown key 'training.sft': 'sft' is a pipeline file's top-level section",
        ),
    ],
)
def test_a_section_nested_in_another_says_it_is_a_top_level_section(
    tmp_path: Path, text: str, stage: str | None, expected: str
) -> None:
    """`model:` indented under `sft:` (a model per stage) said "unknown key 'sft.model'" and
    listed the SFT keys: the user was not told that model is the one top-level section."""
    path = write_yaml(tmp_path / "c.yaml", text)
    with pytest.raises(ConfigError) as error:
        if stage is None:
            load_config(path, PipelineConfig)
        else:
            load_stage_config(path, SFTConfig, stage)
    assert expected in str(error.value)
    assert "unindent it" in str(error.value) or "directly under training:" in str(error.value)
    shared = "to the top level (one model: serves every stage); "
    assert (shared in str(error.value)) == ("'model' is a top-level" in expected)


def test_a_training_key_in_a_model_config_is_not_told_of_pipeline_sections() -> None:
    """describe_config_error tells a checkpoint's model config (a ModelConfig) too: an unknown
    `training` key there is no stage file's section put in a pipeline file."""
    with pytest.raises(ValidationError) as error:
        ModelConfig.model_validate({"training": {}})
    message = describe_config_error(error.value, ModelConfig, "meta.json")
    assert message.startswith("meta.json: invalid ModelConfig:\n  unknown key 'training': known")
    assert "pipeline" not in message


def test_a_section_nested_by_set_is_not_told_to_be_unindented() -> None:
    """A --set key is no indented line: `--set sft.model.layer=3` is not told to unindent."""
    with pytest.raises(ConfigError) as error:
        load_config(None, PipelineConfig, {"sft.model.layer": 3})
    message = str(error.value)
    assert "unknown key 'sft.model': " in message and "(given by --set sft.model.layer)" in message
    assert "unindent" not in message and "indented" not in message


@pytest.mark.parametrize(
    ("text", "key", "shown"),
    [
        ("sft:\n  epochs: many\n", "sft.epochs", "'many'"),
        ("sft:\n  epochs: 2.5\n", "sft.epochs", "2.5"),
        ("model:\n  max_tokens: 1\n", "model.max_tokens", "1"),
        ("model:\n  pooling: max\n", "model.pooling", "'max'"),
        ("rl:\n  estimator: ppo\n", "rl.estimator", "'ppo'"),
        ("rl:\n  rollouts_per_prompt: 0\n", "rl.rollouts_per_prompt", "0"),
        ("sft:\n  learning_rate: -1\n", "sft.learning_rate", "-1"),
        ("model: 3\n", "model", "3"),
        # infinity passed every `> 0` bound and trained a router of NaN weights
        ("sft:\n  learning_rate: .inf\n", "sft.learning_rate", "inf"),
        ("rl:\n  cost_weight: .inf\n", "rl.cost_weight", "inf"),
        ("sft:\n  temperature: .inf\n", "sft.temperature", "inf"),
        ("es:\n  sigma0: .inf\n", "es.sigma0", "inf"),
        # just past a bound: dropout 1 zeroes every hidden unit, a clip norm of 0 every
        # gradient, temperature 0 and 0 accumulation steps divide by zero
        ("model:\n  head_dropout: 1\n", "model.head_dropout", "1"),
        ("sft:\n  max_grad_norm: 0\n", "sft.max_grad_norm", "0"),
        ("sft:\n  temperature: 0\n", "sft.temperature", "0"),
        ("rl:\n  gradient_accumulation_steps: 0\n", "rl.gradient_accumulation_steps", "0"),
        ("rl:\n  reference_cost: 0\n", "rl.reference_cost", "0"),
        ("es:\n  population_size: 3\n", "es.population_size", "3"),
    ],
)
def test_bad_value_names_the_key_and_the_value(
    tmp_path: Path, text: str, key: str, shown: str
) -> None:
    path = write_yaml(tmp_path / "c.yaml", text)
    with pytest.raises(ConfigError) as error:
        load_config(path, PipelineConfig)
    lines = str(error.value).splitlines()
    assert lines[0] == f"{path}: invalid PipelineConfig:"
    assert any(line.strip().startswith(f"{key}:") and f"(got {shown})" in line for line in lines), (
        lines
    )


@pytest.mark.parametrize(
    ("key", "limit"), [("rl.rollouts_per_prompt", 10_000), ("es.samples", 1_000)]
)
def test_an_absurd_sample_count_is_a_config_error_not_a_machine_out_of_memory(
    key: str, limit: int
) -> None:
    """rollouts_per_prompt: 80000000 (a typo's extra zeros) passed the config, and torch
    allocated rollouts x batch choices until the machine ran out of memory (ES's samples: every
    candidate's choices for each sample)."""
    with pytest.raises(ConfigError) as error:
        load_config(None, PipelineConfig, {key: 80_000_000})
    said = " ".join(str(error.value).split())
    assert f"--set {key}: Input should be less than or equal to {limit}" in said
    section, name = key.split(".")
    config = load_config(None, PipelineConfig, {key: limit})
    assert getattr(getattr(config, section), name) == limit


@pytest.mark.parametrize(
    ("text", "key", "hint"),
    [
        (
            "model:\n  backbone: no\n",
            "model.backbone",
            "(got False); YAML reads an unquoted no, off or false as the boolean false: write "
            "the text in quotes (e.g. 'no')",
        ),
        (
            "model:\n  device: on\n",
            "model.device",
            "(got True); YAML reads an unquoted yes, on or true as the boolean true: write the "
            "text in quotes (e.g. 'yes')",
        ),
        (
            "model:\n  svf_targets: [2024-01-01]\n",
            "model.svf_targets.0",
            "(got datetime.date(2024, 1, 1)); YAML reads 2024-01-01 as a date: write the text "
            "in quotes ('2024-01-01')",
        ),
        (
            "model:\n  backbone: 1.5\n",
            "model.backbone",
            "(got 1.5); YAML reads 1.5 as a number: write the text in quotes ('1.5')",
        ),
    ],
)
def test_a_word_yaml_reads_as_another_type_says_to_quote_it(
    tmp_path: Path, text: str, key: str, hint: str
) -> None:
    """A model folder or device named `no`, `on` or `1.5` is a boolean or a number to YAML:
    the error said "Input should be a valid string (got False)", never why or what to write."""
    path = write_yaml(tmp_path / "c.yaml", text)
    with pytest.raises(ConfigError) as error:
        load_config(path, PipelineConfig)
    assert f"  {key}: Input should be a valid string {hint}" in str(error.value)


def test_a_word_an_override_reads_as_a_boolean_says_how_to_quote_it_on_the_command_line() -> None:
    with pytest.raises(ConfigError) as error:
        load_config(None, PipelineConfig, {"model.backbone": False})
    assert (
        "  --set model.backbone: Input should be a valid string (got False); YAML reads an "
        "unquoted no, off or false as the boolean false: write the text in quotes "
        """(e.g. --set "model.backbone='no'")"""
    ) in str(error.value)
    # a text key that was given text has nothing to quote
    with pytest.raises(ConfigError) as error:
        load_config(None, PipelineConfig, {"model.head": "no"})
    assert "quotes" not in str(error.value)


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("yes: 1\n", "  the key True is not text; YAML reads an unquoted yes, on or true as the "
         "boolean true: write the text in quotes (e.g. 'yes'); known keys here: model, "),
        ("sft:\n  1: 3\n", "  sft: the key 1 is not text; YAML reads 1 as a number: write the "
         "text in quotes ('1'); known keys here: cost_weight, "),
        ("model:\n  ~: 3\n", "  model: the key None is not text; YAML reads ~ or null as no "
         "value, and nothing before ':' is no key: write the key; known keys here: backbone, "),
    ],
)  # fmt: skip
def test_a_key_yaml_reads_as_no_text_is_named_as_written(
    tmp_path: Path, text: str, line: str
) -> None:
    """`yes:` (a boolean to YAML) was "1: Keys should be strings (got True)": pydantic writes
    True as 1 in a key's path; a null key (`~:`) was said to have "no value", of a key that
    had one."""
    path = write_yaml(tmp_path / "c.yaml", text)
    for load in (
        lambda: load_config(path, PipelineConfig),
        lambda: load_stage_config(path, SFTConfig, "sft"),
    ):
        with pytest.raises(ConfigError) as error:
            load()
        assert line in str(error.value)
        assert "has no value" not in str(error.value)


def test_an_integer_in_exponent_form_gets_a_hint(tmp_path: Path) -> None:
    """`batch_size: 1e3` is text to YAML, so the error said "unable to parse string as an
    integer (got '1e3')" about what the user wrote as a number."""
    path = write_yaml(tmp_path / "c.yaml", "sft:\n  batch_size: 1e3\n  learning_rate: 1e-3\n")
    with pytest.raises(ConfigError, match=r"\(got '1e3'\); YAML reads 1e3 as text: write 1000$"):
        load_config(path, PipelineConfig)
    write_yaml(path, "sft:\n  batch_size: 2E3\n")  # a capital E: text to YAML too
    with pytest.raises(ConfigError, match=r"\(got '2E3'\); YAML reads 2E3 as text: write 2000$"):
        load_config(path, PipelineConfig)
    write_yaml(path, "sft:\n  batch_size: 1000\n  learning_rate: 1e-3\n")
    assert load_config(path, PipelineConfig).sft.learning_rate == 0.001
    # a fraction is no integer to write: no hint (`write 0` would be wrong)
    write_yaml(path, "sft:\n  batch_size: 5e-1\n")
    with pytest.raises(ConfigError) as error:
        load_config(path, PipelineConfig)
    assert str(error.value).endswith("(got '5e-1')")


def test_a_cache_dir_under_home_is_the_home_folders(tmp_path: Path, monkeypatch) -> None:
    """`cache_dir: ~/fugu-cache` made a folder named `~` in the working directory."""
    from fugu_lite.feature_cache import FeatureCache

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    path = write_yaml(tmp_path / "c.yaml", "model:\n  cache_dir: ~/fugu-cache\n")
    model = load_config(path, SFTConfig).model
    assert model.cache_dir == str(tmp_path / "home" / "fugu-cache")
    assert FeatureCache(model).folder.is_relative_to(tmp_path / "home" / "fugu-cache")


def test_a_cache_dir_starting_with_an_environment_variable_is_refused(
    tmp_path: Path, monkeypatch
) -> None:
    """`cache_dir: $HOME/fugu-cache` cached features in a folder named `$HOME` in the working
    directory (clearing it with `rm -rf $HOME` is a trap), as `~/fugu-cache` did in `~`."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    path = write_yaml(tmp_path / "c.yaml", "model:\n  cache_dir: $HOME/fugu-cache\n")
    with pytest.raises(ConfigError) as error:
        load_config(path, PipelineConfig)
    assert (
        "  model.cache_dir: starts with an environment variable, which a config does not expand "
        "(the cache would be a folder named '$HOME' in the working directory): write the path "
        f"itself, e.g. '{tmp_path / 'home' / 'fugu-cache'}', or delete the key and set "
        "$FUGU_LITE_CACHE_DIR (got '$HOME/fugu-cache')"
    ) in str(error.value)
    braced = write_yaml(tmp_path / "b.yaml", "model:\n  cache_dir: ${UNSET_IN_TESTS}/c\n")
    with pytest.raises(ConfigError, match="write the path itself, or delete the key"):
        load_config(braced, PipelineConfig)
    literal = write_yaml(tmp_path / "l.yaml", f"model:\n  cache_dir: {tmp_path}/a$b\n")
    assert load_config(literal, PipelineConfig).model.cache_dir == f"{tmp_path}/a$b"


@pytest.mark.parametrize(
    ("key", "fix"),
    [("backbone", "write an embedded name"), ("cache_dir", "write a folder, or null")],
)
@pytest.mark.parametrize("empty", ["''", "' '"])
def test_an_empty_backbone_or_cache_dir_is_refused_naming_the_key(
    tmp_path: Path, key: str, fix: str, empty: str
) -> None:
    """`backbone: ''` failed as "the backbone folder <working directory>" lacking weights, and
    `cache_dir: ''` cached features in the working directory: both read an empty text as `.`."""
    path = write_yaml(tmp_path / "c.yaml", f"model:\n  {key}: {empty}\n")
    with pytest.raises(ConfigError) as error:
        load_config(path, PipelineConfig)
    assert f"  model.{key}: empty: {fix}" in str(error.value)
    assert f"(got {yaml.safe_load(empty)!r})" in str(error.value)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("010", "YAML 1.1 reads 010 as an octal number (8): write 10 without the leading zero"),
        ("00", "YAML 1.1 reads 00 as an octal number (0): write 0 without the leading zero"),
        ("-0_10", "YAML 1.1 reads -0_10 as an octal number (-8): write -10 without the leading"),
        ("1:30", "YAML 1.1 reads 1:30 as a base-60 number (90, as in minutes:seconds): write 90"),
    ],
)
def test_an_integer_yaml_reads_in_another_base_is_refused(
    tmp_path: Path, text: str, said: str
) -> None:
    """`epochs: 010` trained 8 epochs (`09` was 9) and `seed: 1:30` was 90, without a word."""
    path = write_yaml(tmp_path / "c.yaml", f"sft:\n  seed: {text}\n")
    with pytest.raises(ConfigError) as error:
        load_config(path, PipelineConfig)
    assert str(error.value).startswith(f"{path}, line 2, column 9: ")
    assert said in str(error.value) and f"or quote it ('{text}') if it is text" in str(error.value)
    # what reads as it looks still loads: zero, hex, binary, underscores, a leading plus
    path = write_yaml(
        tmp_path / "c.yaml",
        "sft:\n  seed: 0\n  epochs: 0x1F\n  batch_size: 0b11\nrl:\n  seed: +7\n",
    )
    config = load_config(path, PipelineConfig, {"es.iterations": 1_000})
    assert (config.sft.seed, config.sft.epochs, config.rl.seed) == (0, 31, 7)
    assert (config.sft.batch_size, config.es.iterations) == (3, 1000)


def test_an_override_in_another_base_is_refused_naming_the_set(capsys) -> None:
    """`--set training.epochs=010` was 8 epochs, as in a -c file."""
    assert parse_overrides(["training.epochs=0x1F", "training.seed=0"]) == {
        "training.epochs": 31,
        "training.seed": 0,
    }
    with pytest.raises(typer.Exit):
        parse_overrides(["training.epochs=010"])
    assert (
        "--set training.epochs=010: the value '010' is not valid YAML (YAML 1.1 reads 010 as an "
        "octal number (8): write 10 without the leading zero, or quote it ('010') if it is text)"
    ) in " ".join(capsys.readouterr().err.split())


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    path = write_yaml(tmp_path / "c.yaml", "model:\n  layr: 3\nsft:\n  epochs: many\n")
    with pytest.raises(ConfigError) as error:
        load_config(path, PipelineConfig)
    assert "model.layr" in str(error.value)
    assert "sft.epochs" in str(error.value)


def test_missing_unparsable_and_non_mapping_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "absent.yaml", PipelineConfig)
    broken = write_yaml(tmp_path / "broken.yaml", "model: [unclosed\n")
    with pytest.raises(ConfigError, match=r"broken\.yaml, line 2, column 1: not valid YAML"):
        load_config(broken, PipelineConfig)
    listing = write_yaml(tmp_path / "list.yaml", "- a\n- b\n")
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load_config(listing, PipelineConfig)
    empty = write_yaml(tmp_path / "empty.yaml", "# nothing set\n")
    assert load_config(empty, PipelineConfig) == PipelineConfig()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("model:\n  layer: [1\n", "c.yaml, line 3, column 1: not valid YAML: expected ',' or "
         "']', but got '<stream end>' (while parsing a flow sequence at line 2, column 10)"),
        ("model:\n\tlayer: 2\n", "c.yaml, line 2, column 1: not valid YAML: found character "
         "'\\t' that cannot start any token (while scanning for the next token); YAML indents "
         "with spaces, not tabs"),
        ("model:\n  backbone: a: b\n", "c.yaml, line 2, column 14: not valid YAML: mapping "
         "values are not allowed here (a value holding ': ' needs quotes"),
        ("model:\n  backbone: \x1b[32mminilm\x1b[0m\n", "c.yaml, line 2, column 13: not valid "
         "YAML: the control character U+001B is not allowed in YAML text; delete it"),
        ("model:\n".encode("utf-16-le").decode(), "c.yaml, line 1, column 2: not UTF-8 text "
         "(it holds NUL bytes): it looks UTF-16 encoded"),
    ],
)  # fmt: skip
def test_a_yaml_syntax_error_names_the_file_line_and_column_on_one_line(
    tmp_path: Path, text: str, expected: str
) -> None:
    """PyYAML's message put the position on lines of its own, in "<unicode string>" rather
    than the file, under a first line naming the file but no line; a character YAML refuses
    (a terminal's colour code pasted in, UTF-16's NULs) was at a "position" with no line."""
    path = write_yaml(tmp_path / "c.yaml", text)
    with pytest.raises(ConfigError) as error:
        load_config(path, PipelineConfig)
    message = str(error.value)
    assert message.startswith(f"{tmp_path / expected}"), message
    assert "\n" not in message and "<unicode string>" not in message


@pytest.mark.skipif(not Path("/dev/fd").is_dir(), reason="needs /dev/fd (bash's <(...))")
@pytest.mark.parametrize(
    ("text", "config_type", "stage"),
    [
        ("training:\n  epochs: 3\n", SFTConfig, "sft"),
        ("model:\n  layer: 2\nsft:\n  epochs: 3\n", SFTConfig, "sft"),
        ("training:\n  epochs: 3\n", RLConfig, "rl"),
    ],
)
def test_a_stage_config_given_as_a_pipe_is_read_once(
    text: str, config_type: type[SFTConfig] | type[RLConfig], stage: str
) -> None:
    """`train sft -c <(envsubst < sft.yaml)`: a stage file was read twice (once to tell it
    from a pipeline file), and the second read of the pipe found it empty, so the stage
    trained on the defaults (10 epochs) without a word."""
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, text.encode())
        os.close(write_end)
        config = load_stage_config(f"/dev/fd/{read_end}", config_type, stage)
    finally:
        os.close(read_end)
    assert config.training.epochs == 3


@pytest.mark.parametrize(
    ("text", "where", "meant"),
    [
        ('[model]\nbackbone = "minilm"\n\n[sft]\nepochs = 5\n', "line 1, `[model]`", "model:"),
        ("# mine\nepochs = 5\nlayer = 3\n", "line 2, `epochs = 5`", "epochs: 5"),
        ("  # mine, indented\nepochs = 5\n", "line 2, `epochs = 5`", "epochs: 5"),
        ("model:\n  layer: 3\n  head = mlp\n", "line 3, `head = mlp`", "head: mlp"),
        # the last line, without a line break: YAML stops on the TOML line itself
        ("model:\n  layer: 3\nhead = mlp", "line 3, `head = mlp`", "head: mlp"),
    ],
)
def test_a_toml_file_given_as_a_config_says_which_line_is_no_yaml(
    tmp_path: Path, text: str, where: str, meant: str
) -> None:
    """`-c sft.toml` (or `head = mlp` among YAML lines) said only "expected '<document
    start>', but found '<scalar>'" or "the top level must be a mapping of sections, got
    'epochs = 5 layer = 3'", with no word that the file is not YAML."""
    path = write_yaml(tmp_path / "c.toml", text)
    with pytest.raises(ConfigError) as error:
        load_config(path, PipelineConfig)
    assert f"({where}, is TOML or INI, not YAML: write `{meant}`, with each" in str(error.value)


def test_a_toml_hint_is_not_given_for_a_line_after_the_yaml_error(tmp_path: Path) -> None:
    """README.md given as -c holds `key = value` lines in its code blocks, after the line
    YAML stops at: no TOML hint for those."""
    path = write_yaml(tmp_path / "c.md", "# Title\n\n`x` text\n\n    client = OpenAI()\n")
    with pytest.raises(ConfigError) as error:
        load_config(path, PipelineConfig)
    assert "line 3, column 1: not valid YAML" in str(error.value)
    assert "TOML" not in str(error.value)


def test_a_text_or_records_file_given_as_a_config_is_not_echoed_whole(tmp_path: Path) -> None:
    """A file of prompts (one a line, which YAML reads as one text) or a JSON array of records
    given as -c was echoed whole in the error: 180 KB on the terminal for 5000 lines."""
    prompts = write_yaml(tmp_path / "p.txt", "".join(f"What is {n} + {n}?\n" for n in range(5000)))
    records = tmp_path / "r.json"
    records.write_text(json.dumps([good_row(n) for n in range(1000)]), encoding="utf-8")
    for path, start in ((prompts, "'What is 0 + 0? What is 1 + 1?"), (records, "[{'prompt': ")):
        with pytest.raises(ConfigError) as error:
            load_config(path, PipelineConfig)
        message = str(error.value)
        assert f"{path}: the top level must be a mapping of sections, got {start}" in message
        assert message.endswith("...")
        assert len(message) < len(str(path)) + 200


def test_yaml_nested_too_deeply_to_read_is_a_config_error(tmp_path: Path) -> None:
    """A file of thousands of `[` (a minified or generated file given as -c or --pool) ended
    in a RecursionError traceback from PyYAML's reader, naming no file."""
    path = write_yaml(tmp_path / "c.yaml", "[" * 5000 + "]" * 5000)
    for load in (lambda: load_config(path, PipelineConfig), lambda: load_pool_config(path)):
        with pytest.raises(ConfigError) as error:
            load()
        assert str(error.value).startswith(f"{path}: not valid YAML: nested too deeply to read")


def nested_aliases(levels: int) -> str:
    """A flow list of `levels` lists, each holding the one before nine times by its alias:
    small as text, 9**levels items once its aliases are expanded ("billion laughs")."""
    lists = ["&l0 [x, x, x, x, x, x, x, x, x]"]
    lists += [f"&l{n} [{', '.join([f'*l{n - 1}'] * 9)}]" for n in range(1, levels)]
    return f"[{', '.join(lists)}]"


@pytest.mark.timeout(20)  # the expanded value: 9**7 items, shown whole or cut
@pytest.mark.parametrize(
    ("text", "stage"),
    [("{laughs}\n", None), ("{laughs}\n", "sft"), ("sft:\n  epochs: {laughs}\n", None),
     ("model: {laughs}\n", "sft"), ("sft: {{}}\nmodel: {laughs}\n", "sft"),
     ("workers: {laughs}\n", "pool"),
     ("workers:\n  - {{id: {laughs}, model: m, base_url: 'http://x'}}\n", "pool")],
)  # fmt: skip
def test_a_value_of_nested_yaml_aliases_is_shown_cut_without_expanding_them(
    tmp_path: Path, text: str, stage: str | None
) -> None:
    """A value made of aliases of aliases (a few lines of YAML, 9**9 items expanded) hung the
    error it was refused with, or ate the memory: the whole value was expanded by repr()
    before the message cut it to 80 characters (or, as "(got ...)", was not cut at all)."""
    path = write_yaml(tmp_path / "c.yaml", text.format(laughs=nested_aliases(7)))
    loads = {
        "pool": lambda: load_pool_config(path),
        "sft": lambda: load_stage_config(path, SFTConfig, "sft"),
        None: lambda: load_config(path, PipelineConfig),
    }

    def refusal() -> ConfigError:
        with pytest.raises(ConfigError) as error:
            loads[stage]()
        return error.value

    refused, peak = peak_memory_of(refusal)
    assert peak < 4_000_000  # the value shown whole: 24 MB of text
    lines = str(refused).splitlines()
    shown = lines[-1].partition("got ")[2]  # the value, cut after 80 characters
    assert shown.startswith("[[") and shown[80:83] == "..."
    assert max(len(line) for line in lines) < len(str(path)) + 300


@pytest.mark.parametrize(
    "text",
    ["[1, 2.5, null, true, \"a'b\", {x: [1, {y: 2}], 3: []}, {}, []]", "&a [*a, 1]",
     "&a {k: *a, j: [*a]}", "x: &b [1]\ny: [*b, *b, {z: *b}]", "2024-08-06", "{a: !!set {x, y}}",
     f"[{'x' * 74}]", f"[{'x' * 75}]", f"[{'x' * 76}]"],
)  # fmt: skip
def test_a_value_is_shown_as_repr_shows_it_cut_after_80_characters(text: str) -> None:
    """The start of a refused value, built piece by piece so that aliases are not expanded,
    is repr()'s: a list or mapping named twice by its alias shown whole both times, one that
    holds itself as [...] or {...}, "..." only after a value longer than 80 characters."""
    value = yaml.safe_load(text)
    whole = repr(value)
    assert start_of(value) == (whole if len(whole) <= 80 else f"{whole[:80]}...")
    assert start_of(value, size=len(whole)) == whole


def test_a_mapping_of_nested_yaml_aliases_is_shown_cut_without_expanding_them() -> None:
    value = yaml.safe_load(f"{{a: {nested_aliases(7)}}}")
    shown, peak = peak_memory_of(lambda: start_of(value))
    assert peak < 100_000  # the value shown whole: 24 MB of text
    assert shown.startswith("{'a': [['x', 'x',") and len(shown) == 83


def test_the_shipped_config_given_by_its_source_path_elsewhere_names_the_installed_one(
    tmp_path: Path, monkeypatch
) -> None:
    """`-c src/fugu_lite/configs/default.yaml` (as --help says) from outside a source checkout
    was only "not found", with no word of where the installed default.yaml is."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as error:
        load_config("src/fugu_lite/configs/default.yaml", PipelineConfig)
    assert str(error.value) == (
        "config file src/fugu_lite/configs/default.yaml not found (looked for "
        f"{tmp_path}/src/fugu_lite/configs/default.yaml); the default.yaml shipped with "
        f"fugu-lite is {DEFAULT_CONFIG}"
    )
    assert load_config(DEFAULT_CONFIG, PipelineConfig).model.quantization == "int8"
    with pytest.raises(ConfigError) as error:
        load_config("configs/mine.yaml", PipelineConfig)
    assert "; the default.yaml shipped" not in str(error.value)
    # the user's own default.yaml, in a folder of theirs, is no source path of the shipped one
    with pytest.raises(ConfigError) as error:
        load_config("mine/default.yaml", PipelineConfig)
    assert str(error.value).startswith(
        f"config file mine/default.yaml not found (looked for {tmp_path}/mine/default.yaml); "
        "write one"
    )


def test_a_config_not_found_says_where_it_was_looked_for_and_how_to_fix_it(
    tmp_path: Path, monkeypatch
) -> None:
    """`-c configs/mine.yaml` said only "config file configs/mine.yaml not found": not from
    which folder a relative path was read, nor what to give instead (a pool file not found
    says both)."""
    monkeypatch.chdir(tmp_path)
    for load in (
        lambda: load_config("configs/mine.yaml", PipelineConfig),
        lambda: load_stage_config("configs/mine.yaml", SFTConfig, "sft"),
    ):
        with pytest.raises(ConfigError) as error:
            load()
        assert str(error.value) == (
            f"config file configs/mine.yaml not found (looked for {tmp_path}/configs/mine.yaml);"
            f" write one (README 'Configs', or copy {DEFAULT_CONFIG}) or leave -c out for the "
            "defaults"
        )
    # an absolute path is shown once
    with pytest.raises(ConfigError) as error:
        load_config(tmp_path / "absent.yaml", PipelineConfig)
    assert str(error.value).startswith(f"config file {tmp_path / 'absent.yaml'} not found; ")


def test_a_config_that_is_a_link_leading_back_to_itself_is_not_said_to_be_missing(
    tmp_path: Path,
) -> None:
    """`ln -s mine.yaml configs/` makes configs/mine.yaml a link to itself (a relative link
    is read from its own folder); -c configs/mine.yaml was "not found", though `ls` shows
    it there. It is said to be a link that cannot be read, and why."""
    (tmp_path / "configs").mkdir()
    link = tmp_path / "configs" / "mine.yaml"
    link.symlink_to("mine.yaml")
    with pytest.raises(ConfigError) as error:
        load_config(link, PipelineConfig)
    assert str(error.value) == f"{link}: cannot be read (Too many levels of symbolic links)"
    # a link to nothing is still not found
    (tmp_path / "dangling.yaml").symlink_to(tmp_path / "gone.yaml")
    with pytest.raises(ConfigError) as error:
        load_config(tmp_path / "dangling.yaml", PipelineConfig)
    assert str(error.value).startswith(f"config file {tmp_path / 'dangling.yaml'} not found;")


def test_a_config_path_through_a_file_is_not_found(tmp_path: Path) -> None:
    """`-c c.yaml/sft.yaml` (a file taken for a folder) is not found, as the file is not
    there: not "cannot be read (Not a directory)", which sounds like the file's fault."""
    path = write_yaml(tmp_path / "c.yaml", "sft: {}\n") / "sft.yaml"
    with pytest.raises(ConfigError) as error:
        load_config(path, PipelineConfig)
    assert str(error.value).startswith(f"config file {path} not found;")


def test_a_config_that_is_not_utf8_or_is_a_directory(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_bytes(b"model:\n  backbone: caf\xe9\n")
    with pytest.raises(ConfigError, match=r"c\.yaml, line 2: not UTF-8 text .*re-save"):
        load_config(path, PipelineConfig)
    with pytest.raises(ConfigError, match="is a directory, not a config file"):
        load_stage_config(tmp_path, SFTConfig, "sft")


def test_a_key_given_twice_is_refused_with_both_lines(tmp_path: Path) -> None:
    """A second `sft:` section (or `layer:` twice) replaced the first with no word: here the
    first section's epochs: 2 was lost."""
    text = "sft:\n  epochs: 2\nrl:\n  epochs: 3\nsft:\n  seed: 1\n"
    path = write_yaml(tmp_path / "c.yaml", text)
    twice = r"the key 'sft' is given twice in one mapping \(first on line 1, again on line 5\)"
    with pytest.raises(ConfigError, match=twice):
        load_config(path, PipelineConfig)
    with pytest.raises(ConfigError, match=r"c\.yaml, line 5, column 1: not valid YAML: " + twice):
        load_stage_config(path, SFTConfig, "sft")
    write_yaml(path, "model:\n  layer: 3\n  head: linear\n  layer: 5\n")
    with pytest.raises(ConfigError, match=r"'layer' is given twice .*line 2, again on line 4"):
        load_config(path, SFTConfig)
    write_yaml(path, "model:\n  <<: {layer: 2, head: linear}\n  layer: 3\n")
    assert load_config(path, SFTConfig).model.layer == 3  # a key over a merge is no repeat


def test_override_into_an_empty_yaml_section(tmp_path: Path) -> None:
    # `model:` with every key under it commented out loads as None
    path = write_yaml(tmp_path / "c.yaml", "model:\n  # layer: 4\nsft:\n  epochs: 3\n")
    config = load_config(path, PipelineConfig, {"model.layer": 3})
    assert config.model.layer == 3
    assert config.sft.epochs == 3


def test_a_section_with_every_key_commented_out_is_its_defaults(tmp_path: Path) -> None:
    """`sft:` with its keys commented out loads as None: the pipeline refused it as "not a
    valid dictionary" while `train sft -c` on the same file took the defaults."""
    path = write_yaml(tmp_path / "c.yaml", "model:\n  layer: 2\nsft:\n  # epochs: 3\nrl:\n")
    pipeline = load_config(path, PipelineConfig)
    assert pipeline.model.layer == 2
    assert pipeline.sft == PipelineConfig().sft and pipeline.rl == PipelineConfig().rl
    assert pipeline.sft_config() == load_stage_config(path, SFTConfig, "sft")
    stage_file = write_yaml(tmp_path / "s.yaml", "model:\ntraining:\n  epochs: 4\n")
    assert load_config(stage_file, SFTConfig).training.epochs == 4
    # a key that is not a section still has to have a value
    with pytest.raises(ConfigError, match=r"unknown key 'epochs'"):
        load_config(write_yaml(tmp_path / "e.yaml", "epochs:\n"), PipelineConfig)


@pytest.mark.parametrize("device", ["gpu", "cuda0", ""])
def test_a_device_torch_cannot_read_is_refused_naming_the_key(tmp_path: Path, device: str) -> None:
    """`device: gpu` passed the config; the stage then failed at its first tensor moved with
    torch's text ("Expected one of cpu, cuda, ...") and no key named."""
    path = write_yaml(tmp_path / "c.yaml", f"model:\n  device: '{device}'\n")
    with pytest.raises(ConfigError) as error:
        load_config(path, PipelineConfig)
    message = str(error.value)
    assert "  model.device: not a torch device (" in message
    assert f"write cpu, cuda, cuda:1 or mps (got {device!r})" in message
    # the spelling only: a config for another machine's device still loads
    assert load_config(None, SFTConfig, {"model.device": "cuda:1"}).model.device == "cuda:1"


@pytest.mark.parametrize("device", ["meta", "meta:0"])
def test_the_meta_device_is_refused_naming_the_key(tmp_path: Path, device: str) -> None:
    """`device: meta` (a torch device holding no values) passed the config and the check of
    the devices this machine has, and the stage failed later in a torch traceback."""
    path = write_yaml(tmp_path / "c.yaml", f"model:\n  device: '{device}'\n")
    with pytest.raises(ConfigError) as error:
        load_config(path, PipelineConfig)
    assert (
        "  model.device: 'meta' is torch's device for shapes without values, on which no model "
        f"runs: write cpu, cuda, cuda:1 or mps (got {device!r})"
    ) in str(error.value)


@pytest.mark.parametrize(
    ("device", "reason"),
    [
        ("hpu", "No module named 'torch.hpu'"),
        ("xla", "Could not run 'aten::empty.memory_format' with arguments from the 'XLA' backend."),
    ],
)
def test_a_device_this_torch_lacks_is_unusable_in_one_sentence(device: str, reason: str) -> None:
    """`device: hpu` ended `train` in a ModuleNotFoundError traceback (only AssertionError and
    RuntimeError were caught), and `device: xla` (or mps off a Mac) was refused with torch's
    7,000 characters, the fix after them."""
    assert unusable_device(device) == reason


def test_a_device_error_without_words_is_named_by_its_type(monkeypatch) -> None:
    """A device torch refuses with no message (a bare AssertionError) is still given a reason."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError

    monkeypatch.setattr(torch, "empty", refuse)
    assert unusable_device("cuda") == "AssertionError"


@pytest.mark.parametrize("device", ["cpu:0", "cpu:1"])
def test_a_cpu_device_with_an_index_is_the_cpu(tmp_path: Path, device: str) -> None:
    """torch takes `cpu:0` for the cpu; runtime 'onnx' and int8 refused it as not the CPU,
    and runtime 'auto' ran torch on it instead of ONNX Runtime."""
    text = f"model:\n  device: '{device}'\n  runtime: onnx\n  quantization: int8\n"
    model = load_config(write_yaml(tmp_path / "c.yaml", text), PipelineConfig).model
    assert model.device == "cpu"
    assert load_config(None, SFTConfig, {"model.device": device}).model.device == "cpu"


def test_a_backbone_folder_relative_to_the_config_file_is_refused_saying_where_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Relative paths in a config are read from the working directory; a backbone folder
    written relative to the config file went to the hub or "does not exist", with no word
    that it sits next to the config."""
    (tmp_path / "configs" / "bb").mkdir(parents=True)
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    path = write_yaml(tmp_path / "configs" / "c.yaml", "model:\n  backbone: ./bb\n")
    expected = (
        f"model.backbone './bb' is read from the working directory ({tmp_path / 'work'}), "
        f"where it does not exist; the folder is next to the config file: write its path "
        f"from the working directory ({tmp_path / 'configs' / 'bb'})"
    )
    with pytest.raises(ConfigError) as error:
        load_config(path, PipelineConfig)
    assert expected in str(error.value)
    with pytest.raises(ConfigError) as error:
        load_stage_config(path, SFTConfig, "sft")
    assert expected in str(error.value)
    # found from the working directory, given by --set, or an embedded name: as before
    (tmp_path / "work" / "bb").mkdir()
    assert load_config(path, PipelineConfig).model.backbone == "./bb"
    (tmp_path / "work" / "bb").rmdir()
    assert load_config(path, PipelineConfig, {"model.backbone": "./bb"}).model.backbone == "./bb"
    # a --set of the whole section is typed from the working directory too: not the file's
    given = {"model": {"backbone": "./bb"}}
    assert load_config(path, PipelineConfig, given).model.backbone == "./bb"
    assert load_stage_config(path, SFTConfig, "sft", given).model.backbone == "./bb"
    (tmp_path / "configs" / "minilm").mkdir()
    embedded = write_yaml(tmp_path / "configs" / "e.yaml", "model:\n  backbone: minilm\n")
    assert load_config(embedded, PipelineConfig).model.backbone == "minilm"


def test_one_item_where_a_list_is_expected_says_how_to_write_the_list(tmp_path: Path) -> None:
    """`svf_targets: layers.3.mlp.down_proj` (one target, no brackets) read "Input should be
    a valid list" with no word of how YAML writes one."""
    path = write_yaml(tmp_path / "c.yaml", "model:\n  svf_targets: layers.3.mlp.down_proj\n")
    with pytest.raises(ConfigError) as error:
        load_config(path, PipelineConfig)
    assert (
        "  model.svf_targets: Input should be a valid list (got 'layers.3.mlp.down_proj'); "
        "write a list: [layers.3.mlp.down_proj], or each item on its own `- ` line"
    ) in str(error.value)
    fixed = write_yaml(tmp_path / "f.yaml", "model:\n  svf_targets: [layers.3.mlp.down_proj]\n")
    assert load_config(fixed, PipelineConfig).model.svf_targets == ["layers.3.mlp.down_proj"]


@pytest.mark.parametrize(
    ("text", "key", "hint"),
    [
        ("sft:\n  epochs:\n", "sft.epochs", "`epochs:` has no value"),
        ("model:\n  pooling: ~\n", "model.pooling", "`pooling:` has no value"),
        (
            "model:\n  svf_targets:\n    # - layers.3.mlp.down_proj\n",
            "model.svf_targets",
            "`svf_targets:` has no value",
        ),
        (
            "model:\n  svf_targets:\n    - a\n    -\n",
            "model.svf_targets.1",
            "the list item is empty",
        ),
    ],
)
def test_a_key_with_no_value_says_so_and_what_to_write(
    tmp_path: Path, text: str, key: str, hint: str
) -> None:
    """`epochs:` with nothing after it (its value commented out) was refused as "(got
    None)", Python's word; `svf_targets:` whose items were all commented out was told to
    "write a list: [None]"."""
    path = write_yaml(tmp_path / "c.yaml", text)
    with pytest.raises(ConfigError) as error:
        load_config(path, PipelineConfig)
    message = str(error.value)
    assert f"  {key}: " in message
    assert f"(got None); {hint} (" in message
    assert "null or ~): write" in message
    assert "[None]" not in message


def test_a_set_with_no_value_says_so_and_what_to_write() -> None:
    """`--set training.epochs=` (the value forgotten) said only "(got None)"."""
    with pytest.raises(ConfigError) as error:
        load_stage_config(None, SFTConfig, "sft", parse_overrides(["training.epochs="]))
    assert (
        "  --set training.epochs: Input should be a valid integer (got None); --set "
        "training.epochs= gives no value (nothing after '=', or null or ~): write one, or leave "
        "out this --set for the default"
    ) in str(error.value)


def test_a_set_with_no_key_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    """`--set =5` (the key forgotten, or only spaces before '=') is told it has no key, not
    that a key '' has an empty part."""
    for pair in ("=5", " =5"):
        with pytest.raises(typer.Exit):
            parse_overrides([pair])
        assert f"--set {pair!r} has no key before '='; e.g. --set training.epochs=5" in " ".join(
            capsys.readouterr().err.split()
        )


@pytest.mark.parametrize(
    ("text", "key", "shown"),
    [("sft: 3\n", "sft", "3"), ("model: [a]\n", "model", "['a']"),
     # empty, but no section either: not the section's defaults, as a null (`sft:` alone) is
     ("sft: 0\n", "sft", "0"), ("model: []\n", "model", "[]"), ("rl: ''\n", "rl", "''")],
)  # fmt: skip
def test_a_section_that_is_not_a_mapping_says_how_to_write_one(
    tmp_path: Path, text: str, key: str, shown: str
) -> None:
    """`train pipeline` said "Input should be a valid dictionary or instance of
    SFTTrainingConfig" (a class name the user never wrote) where `train sft` on the same file
    said how to write the section."""
    path = write_yaml(tmp_path / "c.yaml", text)
    with pytest.raises(ConfigError) as error:
        load_config(path, PipelineConfig)
    message = str(error.value)
    assert (
        f"  {key}: must be a section of keys (`{key}:` followed by indented `key: value` "
        f"lines); fix it or delete it to use the defaults (got {shown})"
    ) in message
    assert "instance of" not in message


def test_a_section_set_to_null_by_set_is_told_as_a_section_once() -> None:
    """`--set model=~` is a section given no mapping: its message says what to write; the
    advice for a key with no value is not added to it."""
    with pytest.raises(ConfigError) as error:
        load_config(None, PipelineConfig, {"model": None})
    assert str(error.value).endswith(
        "  --set model: must be a section of keys (`model:` followed by indented `key: value` "
        "lines); fix it or delete it to use the defaults (got None)"
    )


def test_an_override_of_an_aliased_section_sets_only_that_section(tmp_path: Path) -> None:
    """`rl: *shared` is the anchor's own dict once read, so `--set sft.epochs=5` set rl's
    epochs too."""
    path = write_yaml(
        tmp_path / "c.yaml",
        "sft: &shared\n  epochs: 3\n  learning_rate: 0.01\nrl: *shared\n",
    )
    config = load_config(path, PipelineConfig, {"sft.epochs": 5, "model.layer": 2})
    assert (config.sft.epochs, config.rl.epochs) == (5, 3)
    assert config.rl.learning_rate == config.sft.learning_rate == 0.01


def test_override_below_a_plain_value_is_a_config_error(tmp_path: Path) -> None:
    path = write_yaml(tmp_path / "c.yaml", "sft:\n  epochs: 3\n")
    with pytest.raises(ConfigError, match=r"sft\.epochs"):
        load_config(path, PipelineConfig, {"sft.epochs.inner": 3})


@pytest.mark.parametrize("key", ["sft..epochs", "sft.", ".epochs", "model.layer."])
def test_an_override_key_with_an_empty_part_says_how_to_write_it(key: str) -> None:
    """`--set sft..epochs=3` was "unknown key 'sft.'" with the SFT keys listed, and
    `--set model.layer.=3` "model.layer: Input should be a valid integer": neither named the
    stray dot."""
    with pytest.raises(ConfigError) as error:
        load_config(None, PipelineConfig, {key: 3})
    assert str(error.value) == (
        f"--set {key}: the key has an empty part (two dots in a row, or a dot at an end); "
        "write section.key, e.g. --set training.epochs=5"
    )


def test_override_below_a_files_plain_value_names_the_file_and_the_value(tmp_path: Path) -> None:
    """`sft: 5` in the file made `--set sft.epochs=2` fail with "'sft' is a value here",
    naming neither the file nor the value, as if the --set alone were wrong."""
    path = write_yaml(tmp_path / "c.yaml", "sft: 5\nrl:\n  epochs: 3\n")
    with pytest.raises(ConfigError) as error:
        load_config(path, PipelineConfig, {"sft.epochs": 2})
    assert str(error.value) == (
        f"{path}: --set sft.epochs: 'sft' is a value here, not a section of keys (sft is 5; "
        "--set sft=VALUE sets it)"
    )
    with pytest.raises(ConfigError) as error:
        load_stage_config(path, RLConfig, "rl", {"training.epochs.inner": 2})
    assert str(error.value).startswith(
        f"{path}: --set training.epochs.inner: 'epochs' is a value here, not a section of "
        "keys (training.epochs is 3; "
    )


# --- one stage's config from a stage file or a pipeline file --------------------------------


def test_a_stage_reads_the_shipped_pipeline_config_without_its_section() -> None:
    """`fugu-lite train es -c configs/default.yaml`: default.yaml has model, sft and rl."""
    written = yaml.safe_load(DEFAULT_CONFIG.read_text(encoding="utf-8"))
    assert "es" not in written
    config = load_stage_config(DEFAULT_CONFIG, ESConfig, "es", {"training.iterations": 7})
    assert config.model == load_config(DEFAULT_CONFIG, PipelineConfig).model
    assert config.model.backbone == written["model"]["backbone"]
    assert config.training == ESTrainingConfig(iterations=7)
    sft = load_stage_config(DEFAULT_CONFIG, SFTConfig, "sft")
    assert sft.training.epochs == written["sft"]["epochs"]


def test_a_pipeline_file_may_hold_every_stage_section(tmp_path: Path) -> None:
    path = write_yaml(
        tmp_path / "p.yaml", "model:\n  layer: 2\nsft:\n  epochs: 3\nes:\n  sigma0: 0.2\n"
    )
    pipeline = load_config(path, PipelineConfig)
    assert pipeline.es_config() == load_stage_config(path, ESConfig, "es")
    assert pipeline.es.sigma0 == 0.2 and pipeline.model.layer == 2
    rl = load_stage_config(path, RLConfig, "rl")
    assert rl.model.layer == 2 and rl.training == RLConfig().training


def test_each_stage_of_a_pipeline_config_is_its_own_section(tmp_path: Path) -> None:
    """`train pipeline` trains SFT on sft_config() and RL on rl_config(): each carries its
    section of the file and the shared model, not the stage's defaults."""
    path = write_yaml(
        tmp_path / "p.yaml",
        "model:\n  layer: 2\nsft:\n  epochs: 3\nrl:\n  epochs: 2\nes:\n  iterations: 5\n",
    )
    pipeline = load_config(path, PipelineConfig)
    stages = (pipeline.sft_config(), pipeline.rl_config(), pipeline.es_config())
    assert [stage.training for stage in stages] == [pipeline.sft, pipeline.rl, pipeline.es]
    assert (pipeline.sft.epochs, pipeline.rl.epochs, pipeline.es.iterations) == (3, 2, 5)
    assert all(stage.model.layer == 2 for stage in stages)


def test_a_stage_names_a_pipeline_files_bad_key_as_the_file_does(tmp_path: Path) -> None:
    """`train sft -c pipeline.yaml` with a typo under `sft:` said 'training.learning_rat',
    a key the file does not have, so the user looked for a `training:` section."""
    path = write_yaml(tmp_path / "p.yaml", "sft:\n  learning_rat: 0.1\n  epochs: five\n")
    with pytest.raises(ConfigError) as error:
        load_stage_config(path, SFTConfig, "sft", {"training.seed": "x"})
    message = str(error.value)
    assert "unknown key 'sft.learning_rat': did you mean 'learning_rate'?" in message
    assert "  sft.epochs: Input should be a valid integer" in message
    assert "  --set training.seed: Input should be a valid integer" in message
    assert "training.learning_rat" not in message and "training.epochs" not in message


def test_an_infinite_setting_is_refused_naming_its_key(tmp_path: Path) -> None:
    """`inf` passed every `> 0` bound: cost_weight=inf trained on -inf rewards (NaN targets),
    reference_cost=inf silently ignored every cost, and reports held `Infinity`."""
    for key in ("training.cost_weight", "training.reference_cost", "training.learning_rate"):
        with pytest.raises(ConfigError, match=f"--set {key}: Input should be a finite number"):
            load_stage_config(None, SFTConfig, "sft", {key: "inf"})
    path = write_yaml(tmp_path / "p.yaml", "es:\n  sigma0: .inf\n")
    with pytest.raises(ConfigError, match=r"es\.sigma0: Input should be a finite number"):
        load_stage_config(path, ESConfig, "es")
    # an infinite max_grad_norm is torch's way of not clipping: still allowed
    unclipped = load_stage_config(None, RLConfig, "rl", {"training.max_grad_norm": "inf"})
    assert unclipped.training.max_grad_norm == math.inf
    # and written "inf" in JSON, which reads back: not Infinity (refused by jq and JSON.parse)
    dumped = unclipped.model_dump_json()
    assert json.loads(dumped)["training"]["max_grad_norm"] == "inf"
    assert RLConfig.model_validate_json(dumped) == unclipped


def test_a_boolean_for_a_number_is_refused_naming_its_key(tmp_path: Path) -> None:
    """YAML reads true/false/yes/no/on/off as booleans, and a number key took them as 1 and 0:
    `epochs: true` trained one epoch, `learning_rate: yes` used 1.0, without a word."""
    path = write_yaml(tmp_path / "p.yaml", "model:\n  layer: on\nsft:\n  epochs: true\n")
    with pytest.raises(ConfigError) as error:
        load_config(path, PipelineConfig)
    lines = str(error.value).splitlines()[1:]
    assert lines == [
        f"  {key}: Input should be a number, not true or false (YAML reads true, false, yes, "
        "no, on and off as those): write the number (got True)"
        for key in ("model.layer", "sft.epochs")
    ]
    with pytest.raises(ConfigError, match=r"--set training.learning_rate: Input should be a nu"):
        load_stage_config(None, SFTConfig, "sft", {"training.learning_rate": True})  # =yes
    with pytest.raises(ConfigError, match=r"--set training.reference_cost: Input should be a nu"):
        load_stage_config(None, RLConfig, "rl", {"training.reference_cost": False})
    # a yes/no key still takes them, and a number key its numbers
    kept = load_stage_config(None, RLConfig, "rl", {"training.normalize_advantage": True})
    assert kept.training.normalize_advantage is True
    assert load_stage_config(None, SFTConfig, "sft", {"training.epochs": 3}).training.epochs == 3


def test_another_stages_config_names_the_stage_it_is_for(tmp_path: Path) -> None:
    """An ES stage file given to `train sft` said "unknown key 'training.population_size'"
    and listed SFT's keys, as if the key were mistyped, not the file the wrong one."""
    path = write_yaml(tmp_path / "es.yaml", "training:\n  population_size: 8\n  temperature: 2.0\n")
    with pytest.raises(ConfigError) as error:
        load_stage_config(path, RLConfig, "rl", {"training.sigma0": 0.1})
    lines = str(error.value).splitlines()
    assert lines[0] == f"{path}: invalid RLConfig:"
    assert lines[1].startswith(
        "  unknown key 'training.population_size': a setting of `fugu-lite train es`, not of "
        "this stage; is this file another stage's config? known keys here: "
    )
    assert "a setting of `fugu-lite train sft`, not of this stage; is this file" in lines[2]
    assert lines[3].startswith(
        "  unknown key 'training.sigma0': a setting of `fugu-lite train es`, not of this "
        "stage; known keys here: "
    )
    assert lines[3].endswith("(given by --set training.sigma0)")
    # a key no stage has is still a typo, and a stage's own keys load
    path.write_text("training:\n  population_size: 8\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"'training\.iteration': did you mean 'iterations'"):
        load_stage_config(path, ESConfig, "es", {"training.iteration": 3})
    assert load_stage_config(path, ESConfig, "es").training.population_size == 8


@pytest.mark.parametrize("stage", ["sft", "rl", "es"])
def test_a_seed_numpy_cannot_take_is_refused_naming_its_key(tmp_path: Path, stage: str) -> None:
    """`seed: -1` (or 2**32) passed the config, and the run stopped in numpy's seeding
    ("Seed must be between 0 and 2**32 - 1") with no key named."""
    for seed in (-1, MAX_SEED + 1):
        path = write_yaml(tmp_path / "c.yaml", f"{stage}:\n  seed: {seed}\n")
        with pytest.raises(ConfigError) as error:
            load_config(path, PipelineConfig)
        assert f"  {stage}.seed: Input should be " in str(error.value)
        assert f"(got {seed})" in str(error.value)
    path = write_yaml(tmp_path / "c.yaml", f"{stage}:\n  seed: {MAX_SEED}\n")
    seed = getattr(load_config(path, PipelineConfig), stage).seed
    assert seed == MAX_SEED
    seed_everything(seed)  # the largest seed the config takes, numpy and torch take too


def test_a_pipeline_file_with_an_unknown_section_still_fails(tmp_path: Path) -> None:
    path = write_yaml(tmp_path / "p.yaml", "model:\n  layer: 2\nsft:\n  epochs: 3\nesx: {}\n")
    with pytest.raises(ConfigError) as error:
        load_stage_config(path, ESConfig, "es")
    message = str(error.value)
    assert str(path) in message
    assert "unknown top-level key(s) 'esx' (did you mean 'es'?)" in message
    mixed = write_yaml(tmp_path / "m.yaml", "training:\n  epochs: 3\nrl:\n  epochs: 2\n")
    with pytest.raises(ConfigError, match=r"'training'.*do not mix the two shapes"):
        load_stage_config(mixed, RLConfig, "rl")
    stage_file = write_yaml(tmp_path / "s.yaml", "training:\n  epochs: 3\nmodle: {}\n")
    with pytest.raises(ConfigError, match="unknown key 'modle': did you mean 'model'"):
        load_stage_config(stage_file, RLConfig, "rl")


@pytest.mark.parametrize(
    ("stage", "config_type", "where"),
    [
        ("sft", SFTConfig, "sft's keys go under sft:"),
        ("rl", RLConfig, "rl's keys go under rl:"),
        ("es", ESConfig, "es's keys go under es:"),
        ("reward_head", RewardHeadConfig, "put model: and training: in a file of their own"),
    ],
)
def test_a_training_section_in_a_pipeline_file_says_where_its_keys_go(
    tmp_path: Path, stage: str, config_type: type, where: str
) -> None:
    """`training:` beside `sft:` was hinted "did you mean 'sft.tie_handling'?" (difflib's
    nearest key one section down), sending the user to a key they never meant."""
    path = write_yaml(tmp_path / "p.yaml", "training:\n  epochs: 3\nsft:\n  epochs: 2\n")
    with pytest.raises(ConfigError) as error:
        load_stage_config(path, config_type, stage)
    message = str(error.value)
    assert "tie_handling" not in message
    assert "'training' (a single-stage file's section: " in message
    assert where in message


@pytest.mark.parametrize(
    ("text", "stage", "meant"),
    [
        ("epochs: 3\nsft:\n  batch_size: 4\n", "sft", "sft.epochs"),
        ("epochs: 3\nsft:\n  batch_size: 4\n", "rl", "rl.epochs"),
        ("backbone: tiny-random\nsft: {}\n", "sft", "model.backbone"),
        ("sigma: 0.1\nes: {}\n", "es", "es.sigma0"),
    ],
)
def test_a_stage_key_at_the_top_of_a_pipeline_file_says_its_dotted_path(
    tmp_path: Path, text: str, stage: str, meant: str
) -> None:
    """`epochs: 3` one section too high in a pipeline file: `train pipeline` said "did you
    mean 'sft.epochs'?", `train sft|rl|es` only "unknown top-level key(s) 'epochs'"."""
    path = write_yaml(tmp_path / "p.yaml", text)
    config_type = {"sft": SFTConfig, "rl": RLConfig, "es": ESConfig}[stage]
    with pytest.raises(ConfigError) as error:
        load_stage_config(path, config_type, stage)
    assert f"(did you mean {meant!r}?)" in str(error.value)


def test_a_stage_section_in_capitals_given_by_set_to_its_own_stage_says_to_use_training() -> None:
    """`train sft --set SFT.epochs=5` was "unknown key 'SFT'" with the known keys (and, before,
    a YAML anchor's advice), where `sft.epochs` said to use training.epochs."""
    for key, use in (("SFT.epochs", "training.epochs"), ("Sft.batch_size", "training.batch_size")):
        with pytest.raises(ConfigError) as error:
            load_stage_config(None, SFTConfig, "sft", {key: 5})
        assert str(error.value) == (
            f"--set {key}: a single stage's keys are model.* and training.*; use {use}"
        )
    with pytest.raises(ConfigError, match=r"--set RL\.epochs: rl\.\* are the settings of"):
        load_stage_config(None, SFTConfig, "sft", {"RL.epochs": 5})
    # the whole section (`--set sft={epochs: 5}`) names no key to give as training.<key>
    with pytest.raises(ConfigError) as error:
        load_stage_config(None, SFTConfig, "sft", {"sft": {"epochs": 5}})
    assert "  unknown key 'sft': known keys here: model, training (given by --set sft)" in str(
        error.value
    )


@pytest.mark.parametrize(
    ("stage", "config_type", "key", "command"),
    [
        ("sft", SFTConfig, "rl.epochs", "`fugu-lite train rl` or `fugu-lite train pipeline`"),
        ("rl", RLConfig, "es.iterations", "`fugu-lite train es`"),
        ("es", ESConfig, "sft.epochs", "`fugu-lite train sft` or `fugu-lite train pipeline`"),
    ],
)
def test_an_override_of_another_stages_section_says_this_stage_does_not_read_it(
    tmp_path: Path, stage: str, config_type: type, key: str, command: str
) -> None:
    """`train sft -c pipeline.yaml --set rl.epochs=3` said only "unknown key 'rl': known keys
    here: model, training", with no word that rl: is another stage's section."""
    path = write_yaml(tmp_path / "p.yaml", "model:\n  layer: 2\nsft: {}\nrl: {}\nes: {}\n")
    for source in (path, None):
        with pytest.raises(ConfigError) as error:
            load_stage_config(source, config_type, stage, {key: 3})
        section = key.partition(".")[0]
        assert str(error.value) == (
            f"--set {key}: {section}.* are the settings of {command}, which `fugu-lite train "
            f"{stage}` does not read; its keys are model.* and training.*"
        )


@pytest.mark.parametrize(
    ("text", "stage", "expected"),
    [
        (
            "sft:\n  population_size: 8\nes:\n  iterations: 3\n",
            "es",
            "unknown key 'sft.population_size': it belongs under es:, not here;",
        ),
        ("sft:\n  epochs: 3\nrl:\n  epochs: 0\n", "sft", "  rl.epochs: Input should be greater"),
        ("sft:\n  epochs: 3\nes: 5\n", "rl", "  es: must be a section of keys"),
        ("sft:\n  epoch: 3\n", "reward_head", "unknown key 'sft.epoch': did you mean 'epochs'?"),
    ],
)
def test_a_stage_refuses_a_pipeline_file_whose_other_sections_are_wrong(
    tmp_path: Path, text: str, stage: str, expected: str
) -> None:
    """`train es -c p.yaml` with `population_size: 8` under `sft:` (meant for es) trained
    with population 32 without a word: a stage read only its own section of the file."""
    path = write_yaml(tmp_path / "p.yaml", text)
    config_type = {"sft": SFTConfig, "rl": RLConfig, "es": ESConfig}.get(stage, RewardHeadConfig)
    with pytest.raises(ConfigError) as error:
        load_stage_config(path, config_type, stage)
    message = str(error.value)
    assert message.startswith(f"{path}: invalid PipelineConfig:\n")
    assert expected in message
    read = "model:" if stage == "reward_head" else f"model: and {stage}:"
    assert f"`fugu-lite train {stage.replace('_', '-')}` reads only {read} of this" in message


def test_a_stage_takes_its_own_sections_bad_key_mended_by_set(tmp_path: Path) -> None:
    """Only the other stage sections are checked as the pipeline reads them: a --set that
    mends this stage's own key (`epochs: 0` under `sft:`, `--set training.epochs=3`) wins."""
    path = write_yaml(tmp_path / "p.yaml", "sft:\n  epochs: 0\nrl:\n  epochs: 2\n")
    config = load_stage_config(path, SFTConfig, "sft", {"training.epochs": 3})
    assert config.training.epochs == 3
    with pytest.raises(ConfigError, match=r"  sft\.epochs: Input should be greater"):
        load_stage_config(path, SFTConfig, "sft")


@pytest.mark.parametrize("text", ["sft: 0\n", "sft: false\n", "model: 3\nrl: {}\n"])
def test_a_pipeline_section_that_is_not_a_mapping_is_refused(tmp_path: Path, text: str) -> None:
    path = write_yaml(tmp_path / "p.yaml", text)
    with pytest.raises(ConfigError, match=r"p\.yaml: section '(sft|model)' must be a mapping"):
        load_stage_config(path, SFTConfig, "sft")


# --- atomic writes --------------------------------------------------------------------------


def test_atomic_writes_replace_the_file_whole_or_not_at_all(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "state.bin"
    write_bytes_atomic(path, b"\x00first")
    write_bytes_atomic(path, b"\x00second")
    assert path.read_bytes() == b"\x00second"
    write_text_atomic(tmp_path / "t.txt", "caf\u00e9\n")
    assert (tmp_path / "t.txt").read_bytes() == "caf\u00e9\n".encode()

    with pytest.raises(TypeError):  # fails while writing the temporary file
        write_bytes_atomic(path, "not bytes")  # type: ignore[arg-type]
    assert path.read_bytes() == b"\x00second"
    assert sorted(p.name for p in path.parent.iterdir()) == ["state.bin"]  # no temporary left


def test_an_atomic_write_syncs_its_folder_after_the_rename(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the temporary file was fsynced: after a power loss the rename (the folder's
    entry) could be lost, leaving the old file or none though the write had returned."""
    synced: list[tuple[bool, bool, int]] = []
    real_fsync = os.fsync

    def recording_fsync(descriptor: int) -> None:
        info = os.fstat(descriptor)
        is_folder = stat.S_ISDIR(info.st_mode)
        synced.append(
            (is_folder, (tmp_path / "state.bin").exists(), 0 if is_folder else info.st_size)
        )
        real_fsync(descriptor)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    write_bytes_atomic(tmp_path / "state.bin", b"new")
    # the file holding its 3 bytes (not still in Python's buffer, which the fsync would not
    # write), then its folder once renamed
    assert synced == [(False, False, 3), (True, True, 0)]


def test_an_atomic_write_stopped_by_ctrl_c_leaves_the_old_file_and_no_temporary(
    tmp_path: Path,
) -> None:
    """A Ctrl-C in the middle of a write (a report written piece by piece) is no Exception:
    the old file must stay and the temporary go, as on an error; a live run's temporary is
    not swept by a later write of the same process."""
    from fugu_lite.atomic_files import atomic_output

    path = tmp_path / "report.jsonl"
    path.write_bytes(b"old\n")
    with pytest.raises(KeyboardInterrupt), atomic_output(path) as stream:
        stream.write(b"half a rep")
        raise KeyboardInterrupt
    assert path.read_bytes() == b"old\n"
    assert [entry.name for entry in tmp_path.iterdir()] == ["report.jsonl"]


STOPPED_WRITER = """\
import os, sys, time
import fugu_lite.io as io
if sys.argv[2] == "dies":
    os.replace = lambda *args: os._exit(9)  # dies with its temporary file written, as on kill -9
else:
    os.replace = lambda *args: time.sleep(600)  # still writing
io.write_json(sys.argv[1], {"from": "a stopped writer"})
"""


def stopped_writer(path: Path, how: str) -> subprocess.Popen:
    """A `write_json(path)` in another process, stopped just before its rename."""
    return subprocess.Popen([sys.executable, "-c", STOPPED_WRITER, str(path), how])


def temporaries_of(folder: Path, name: str, count: int = 1) -> set[str]:
    """The temporary files a writer of `name` has in `folder`, once there are `count`."""
    deadline = time.monotonic() + 60
    while True:
        found = {p.name for p in folder.iterdir() if p.name.startswith(f".{name}.")}
        if len(found) >= count:
            return found
        assert time.monotonic() < deadline, f"no temporary file of {name} in {folder}"
        time.sleep(0.05)


def test_a_write_removes_the_temporary_files_of_killed_writers_not_of_live_ones(
    tmp_path: Path,
) -> None:
    """A run killed in an atomic write left its hidden *.tmp file in the folder (a feature
    cache shard, a checkpoint) and no later run removed it."""
    dead = stopped_writer(tmp_path / "shard.safetensors", "dies")
    assert dead.wait(60) == 9  # waited for: its pid is not running any more
    live = stopped_writer(tmp_path / "settings.json", "waits")
    try:
        dead_files = temporaries_of(tmp_path, "shard.safetensors")
        live_files = temporaries_of(tmp_path, "settings.json")
        write_json(tmp_path / "report.json", {"run": "later"})
        left = {p.name for p in tmp_path.iterdir()}
        assert not dead_files & left
        assert live_files <= left  # a run still writing there keeps its file
        assert live.poll() is None
    finally:
        live.kill()
        live.wait()


def test_a_temporary_file_a_day_old_is_removed_even_if_its_pid_runs(tmp_path: Path) -> None:
    """A pid reused since (or another machine's writer on a shared cache) must not keep a
    leftover forever."""
    live = stopped_writer(tmp_path / "shard.safetensors", "waits")
    try:
        (name,) = temporaries_of(tmp_path, "shard.safetensors")
        two_days_ago = time.time() - 2 * 24 * 3600
        os.utime(tmp_path / name, (two_days_ago, two_days_ago))
        write_json(tmp_path / "report.json", {"run": "later"})
        assert not (tmp_path / name).exists()
    finally:
        live.kill()
        live.wait()


def test_another_hosts_temporary_is_not_taken_for_a_killed_writers(tmp_path: Path) -> None:
    """On a folder shared by two machines (NFS), another host's writer is not a process of
    this one: that its pid runs nothing here says nothing, so its temporary stays until a
    day's age makes it a leftover whoever wrote it (test_a_temporary_file_a_day_old...)."""
    pid = finished_pid()  # no process here: a writer of this host with it is dead
    name = f".shard.safetensors.w-another-host-{pid}.k1ll3d00.tmp"
    ours = writer_temporary("shard.safetensors", pid) + ".tmp"
    for leftover in (name, ours):
        (tmp_path / leftover).touch()
    write_json(tmp_path / "report.json", {"run": "later"})
    assert (tmp_path / name).exists() and not (tmp_path / ours).exists()


def test_a_live_writers_temporary_hours_old_is_kept(tmp_path: Path) -> None:
    """A write that takes hours (a large shard, a slow disk) keeps its temporary while its
    writer runs: only a day's age (a pid reused since) makes a live pid's file a leftover."""
    folder = tmp_path / "out"
    folder.mkdir()
    name = writer_temporary("shard.safetensors", os.getpid()) + ".tmp"
    two_hours_ago = time.time() - 2 * 3600
    (folder / name).touch()
    os.utime(folder / name, (two_hours_ago, two_hours_ago))
    write_json(folder / "report.json", {"run": "later"})
    assert (folder / name).exists()


def test_a_temporary_of_another_users_live_writer_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a folder two users of this host write in (a group's runs/, a shared cache), the
    other user's writer cannot be signalled: os.kill(pid, 0) is refused with EPERM, which
    says its process is alive, so its temporary (a write in progress) is kept. Tests run as
    root, which may signal any process: os.kill stands in for that refusal."""
    other_users_pid = finished_pid()
    real_kill = os.kill

    def refused_for_the_other_user(pid: int, signal_number: int) -> None:
        if pid == other_users_pid:
            raise PermissionError(errno.EPERM, "Operation not permitted")
        real_kill(pid, signal_number)

    monkeypatch.setattr(os, "kill", refused_for_the_other_user)
    name = writer_temporary("shard.safetensors", other_users_pid) + ".tmp"
    (tmp_path / name).touch()
    remove_dead_writers_files(tmp_path)
    assert (tmp_path / name).exists()


def test_the_sweep_of_killed_writers_files_leaves_a_users_own_hidden_files(
    tmp_path: Path,
) -> None:
    """A write into a user's folder (`data import -o runs/x.jsonl`) deleted their hidden files
    a day old whose names only looked like a temporary's (`.notes.20241201.tmp`, an earlier
    version's shape, or `.report.w-2024-12.txt`), while a killed writer's is still removed."""
    dead = stopped_writer(tmp_path / "shard.safetensors", "dies")
    assert dead.wait(60) == 9
    (killed,) = temporaries_of(tmp_path, "shard.safetensors")
    users = [".notes.20241201.tmp", ".report.w-2024-12.txt", ".plan.w-laptop-7.draft"]
    users.append(killed + ".bak")  # a copy the user made of it: a name of their own
    two_days_ago = time.time() - 2 * 24 * 3600
    for name in [*users, killed]:
        (tmp_path / name).touch()
        os.utime(tmp_path / name, (two_days_ago, two_days_ago))
    write_json(tmp_path / "report.json", {"run": "later"})
    left = {p.name for p in tmp_path.iterdir()}
    assert killed not in left
    assert set(users) <= left
    cache = tmp_path / "cache"  # a folder of fugu-lite's own: earlier versions' names go too
    cache.mkdir()
    (cache / users[0]).touch()
    os.utime(cache / users[0], (two_days_ago, two_days_ago))
    remove_dead_writers_files(cache, earlier_versions=True)
    assert not (cache / users[0]).exists()


def test_an_atomic_write_never_replaces_a_device_or_a_pipe(tmp_path: Path) -> None:
    """`-o /dev/stdout` (or a link to /dev/null, a FIFO) was replaced by a plain file: the
    reader got nothing, and as root /dev/stdout itself was gone for every later program."""
    link = tmp_path / "stdout"
    link.symlink_to(os.devnull)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for target in (link, fifo):
        with pytest.raises(OSError, match="is a device, pipe or socket, not a file"):
            write_text_atomic(target, "{}\n")
    assert link.is_symlink() and os.readlink(link) == os.devnull
    assert stat.S_ISFIFO(fifo.stat().st_mode)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["fifo", "stdout"]


def test_an_append_after_a_torn_last_line_starts_a_line_of_its_own(tmp_path: Path) -> None:
    """A log whose last append was cut half-way (a kill, a full disk: the server's decision
    log logs the error and goes on) got the next rows glued onto that fragment, so the first
    of them was lost inside a line no reader could parse."""
    path = tmp_path / "decisions.jsonl"
    path.write_text('{"request_id": "a"}\n{"request_id": "b", "wor', encoding="utf-8")
    assert append_jsonl(path, [{"request_id": "c"}, {"request_id": "d"}]) == 2
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[1] == '{"request_id": "b", "wor'  # the fragment stays, for a look
    assert [json.loads(line) for line in lines[2:]] == [{"request_id": "c"}, {"request_id": "d"}]
    append_jsonl(path, [{"request_id": "e"}])  # a whole last line gets no blank line after it
    assert path.read_text(encoding="utf-8").endswith('"d"}\n{"request_id": "e"}\n')
    for name in ("new.jsonl", "touched.jsonl"):  # a file made empty beforehand (touch) too
        empty = tmp_path / name
        if name == "touched.jsonl":
            empty.touch()
        append_jsonl(empty, [{"request_id": "f"}])
        assert empty.read_text(encoding="utf-8") == '{"request_id": "f"}\n'


def test_an_atomic_write_through_a_symlink_writes_the_file_it_names(tmp_path: Path) -> None:
    """`-o records.jsonl` where records.jsonl links to a shared file (a dataset folder, a
    dotfile repo) put a plain file in place of the link: the shared file kept its old content
    and the link was gone."""
    target = tmp_path / "shared" / "records.jsonl"
    target.parent.mkdir()
    target.write_text("old\n", encoding="utf-8")
    link = tmp_path / "records.jsonl"
    link.symlink_to(target)
    chained = tmp_path / "again.jsonl"
    chained.symlink_to(link.name)  # relative, through the other link
    write_text_atomic(link, "new\n")
    assert link.is_symlink() and target.read_text(encoding="utf-8") == "new\n"
    write_jsonl(chained, [{"a": 1}])
    assert chained.is_symlink() and link.is_symlink()
    assert target.read_text(encoding="utf-8") == '{"a": 1}\n'
    assert sorted(path.name for path in target.parent.iterdir()) == ["records.jsonl"]
    dangling = tmp_path / "dangling.jsonl"
    dangling.symlink_to(tmp_path / "missing" / "new.jsonl")
    write_text_atomic(dangling, "made\n")  # a link to a file not made yet: made there
    assert (tmp_path / "missing" / "new.jsonl").read_text(encoding="utf-8") == "made\n"


def test_atomic_writes_keep_the_mode_or_follow_the_umask(tmp_path: Path) -> None:
    """A new file gets 0o666 less the umask: with a group's umask 002 (a shared checkpoint
    folder) the group may write it, and so may it a library's 0o600 file given that mode."""
    from fugu_lite.atomic_files import give_new_file_mode

    fresh, shared, library = tmp_path / "fresh.txt", tmp_path / "shared.txt", tmp_path / "lib"
    library.touch(mode=0o600)
    old_umask = os.umask(0o022)
    try:
        write_text_atomic(fresh, "new\n")
        os.umask(0o002)
        write_text_atomic(shared, "new\n")
        give_new_file_mode(library)
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o644
    assert stat.S_IMODE(shared.stat().st_mode) == stat.S_IMODE(library.stat().st_mode) == 0o664
    existing = tmp_path / "existing.txt"
    existing.write_text("old\n")
    existing.chmod(0o640)
    write_text_atomic(existing, "replaced\n")
    assert stat.S_IMODE(existing.stat().st_mode) == 0o640


def test_a_sections_own_check_reads_without_pydantics_words_or_the_whole_section(
    tmp_path: Path,
) -> None:
    """`runtime: onnx` with `device: cuda` read "model: Value error, runtime 'onnx' runs on
    the CPU only ... (got {'runtime': 'onnx', 'device': 'cuda', ...})": pydantic's word and
    a dump of the whole section after the sentence that says what is wrong."""
    path = write_yaml(tmp_path / "c.yaml", "model:\n  runtime: onnx\n  device: cuda\n")
    with pytest.raises(ConfigError) as error:
        load_config(path, PipelineConfig)
    message = str(error.value)
    assert "\n  model: runtime 'onnx' runs on the CPU only (device is 'cuda')" in message
    assert "Value error" not in message and "{" not in message, message


def anchor_holder_refusals(tmp_path: Path, pipeline_text: str, stage_text: str) -> list[str]:
    """The errors of a pipeline file read by `train pipeline` and by `train rl`, and of a stage
    file read by `train sft`."""
    path = write_yaml(tmp_path / "anchored.yaml", pipeline_text)
    stage = write_yaml(tmp_path / "stage.yaml", stage_text)
    messages = []
    for load in (
        lambda: load_config(path, PipelineConfig),
        lambda: load_stage_config(path, RLConfig, "rl"),
        lambda: load_stage_config(stage, SFTConfig, "sft"),
    ):
        with pytest.raises(ConfigError) as error:
            load()
        messages.append(str(error.value))
    return messages


def test_a_top_level_yaml_anchor_holder_says_where_anchors_go(tmp_path: Path) -> None:
    """`base: &b {...}` then `sft: *b` was refused as "unknown key 'base'" with the known keys,
    no word that an anchor sits on or inside a known section, nor that `<<: *b` merges it."""
    anchored = "base: &b\n  seed: 3\nsft: *b\nrl:\n  <<: *b\n"
    hint = (
        "if it only holds a YAML anchor (`base: &base ...`), put the anchor on a known section "
        "or a key inside one (`{}: &base ...`) and reuse it with `*base` or merge it with "
        "`<<: *base`"
    )
    pipeline, rl, sft = anchor_holder_refusals(
        tmp_path, anchored, "base: &b\n  seed: 3\ntraining: *b\n"
    )
    assert f"  unknown key 'base': {hint.format('sft')}; known keys here: model, " in pipeline
    assert f"unknown top-level key(s) 'base' ({hint.format('rl')})." in rl
    assert f"  unknown key 'base': {hint.format('training')}; known keys" in sft
    # train reward-head reads a pipeline file's model: only: its anchor goes on a section there
    with pytest.raises(ConfigError) as error:
        load_stage_config(tmp_path / "anchored.yaml", RewardHeadConfig, "reward_head")
    assert f"unknown top-level key(s) 'base' ({hint.format('sft')})." in str(error.value)
    # what the hint says works: the anchor on a known section, merged into another
    fixed = write_yaml(tmp_path / "fixed.yaml", "sft: &b\n  seed: 3\nrl:\n  <<: *b\n  seed: 4\n")
    config = load_config(fixed, PipelineConfig)
    assert (config.sft.seed, config.rl.seed) == (3, 4)
    # a misplaced setting keeps its own hint, not the anchor's
    with pytest.raises(ConfigError) as error:
        load_config(write_yaml(tmp_path / "typo.yaml", "modle: {}\n"), PipelineConfig)
    assert "did you mean 'model'?" in str(error.value) and "YAML anchor" not in str(error.value)


def test_a_top_level_value_holding_a_yaml_anchor_says_where_its_anchor_goes(
    tmp_path: Path,
) -> None:
    """`lr: &lr 0.001`, then `learning_rate: *lr` in each stage, was refused as "unknown key
    'lr'" with no hint (only a mapping got the anchor's); it gets one fitting a value, which
    is no section to anchor nor to merge with `<<:`."""
    text = "lr: &lr 0.001\nsft:\n  learning_rate: *lr\nrl:\n  learning_rate: *lr\n"
    hint = (
        "if it only holds a YAML anchor (`lr: &lr ...`), put the anchor on the first key inside "
        "a known section that uses the value (an indented `key: &lr ...` under `{}:`) and reuse "
        "it with `*lr`"
    )
    pipeline, rl, sft = anchor_holder_refusals(
        tmp_path, text, "lr: &lr 0.001\ntraining:\n  epochs: 2\n"
    )
    assert f"  unknown key 'lr': {hint.format('sft')}; known keys here: " in pipeline
    assert f"unknown top-level key(s) 'lr' ({hint.format('rl')})." in rl
    assert f"  unknown key 'lr': {hint.format('training')}; known keys" in sft
    assert "<<:" not in sft
    # what the hint says works
    fixed = "sft:\n  learning_rate: &lr 0.002\nrl:\n  learning_rate: *lr\n"
    config = load_config(write_yaml(tmp_path / "fixed.yaml", fixed), PipelineConfig)
    assert config.sft.learning_rate == config.rl.learning_rate == 0.002


@pytest.mark.parametrize(
    ("source", "config_type", "key"),
    [(None, PipelineConfig, "base.seed"), (None, SFTConfig, "extra.seed"),
     ("pipeline", PipelineConfig, "base.seed")],
)  # fmt: skip
def test_an_unknown_section_given_by_set_gets_no_yaml_anchor_hint(
    tmp_path: Path, source: str | None, config_type: type, key: str
) -> None:
    """`--set base.seed=3` was told to put "the anchor" of `base:` on a known section and
    reuse it with `*base`: a --set key holds no YAML anchor."""
    path = None if source is None else write_yaml(tmp_path / "p.yaml", "sft: {}\n")
    with pytest.raises(ConfigError) as error:
        load_config(path, config_type, {key: 3})
    message = str(error.value)
    assert f"(given by --set {key})" in message
    assert "YAML anchor" not in message


def test_a_training_section_in_a_pipeline_config_says_where_its_settings_go(
    tmp_path: Path,
) -> None:
    """The hint ran into the known keys ("under sft:, rl: or es: known keys here"), and
    `train pipeline --set training.epochs=5` was told of file sections, not of --set keys."""
    path = write_yaml(tmp_path / "p.yaml", "training:\n  epochs: 2\n")
    with pytest.raises(ConfigError) as error:
        load_config(path, PipelineConfig)
    assert (
        "  unknown key 'training': a pipeline config puts stage settings under sft:, rl: or "
        "es:; known keys here: model, sft, rl, es\n"
    ) in str(error.value) + "\n"
    with pytest.raises(ConfigError) as error:
        load_config(None, PipelineConfig, {"training.epochs": 5})
    assert (
        "  unknown key 'training': a pipeline config's stage settings are sft.*, rl.* and es.*: "
        "e.g. --set sft.epochs; known keys here: model, sft, rl, es (given by --set "
        "training.epochs)"
    ) in str(error.value)


def test_a_json_lines_file_given_as_a_config_says_what_it_looks_like(tmp_path: Path) -> None:
    """`train -c runs/tasks.jsonl` (or `collect --pool rewards.jsonl`) said only "expected
    '<document start>', but found '{'" at line 2, which named no wrong file."""
    path = tmp_path / "tasks.jsonl"
    write_jsonl(path, [{"id": "a", "prompt": "p"}, {"id": "b", "prompt": "q"}])
    for load in (
        lambda: load_config(path, PipelineConfig),
        lambda: load_stage_config(path, SFTConfig, "sft"),
        lambda: load_pool_config(path),
    ):
        with pytest.raises(ConfigError) as error:
            load()
        assert str(error.value) == (
            f"{path}, line 2, column 1: not valid YAML: expected '<document start>', but found "
            "'{' (a JSON object per line: is this a JSON Lines file of tasks or records, given "
            "where a YAML config goes?)"
        )


def test_a_records_prompt_hash_is_the_sha1_of_its_exact_text() -> None:
    """prompt_hash (what the server logs and eval's predictions name a prompt by) is the sha1
    of the prompt as written: a hash of the stripped text passed every test (their prompts
    had no space around them), and would give " x" and "x" one hash."""
    for prompt in (" prompt 1\n", "prompt 1", "pr\u00e9mpt\r\n"):
        record = RewardRecord(prompt=prompt, split="train", worker_ids=WORKERS, rewards=[0, 1, 0])
        assert record.prompt_hash == hashlib.sha1(prompt.encode("utf-8")).hexdigest()


def test_a_records_messages_give_the_text_and_hash_their_task_gives() -> None:
    """A record of chat messages is named by the same text (and prompt_hash) as the task it
    was collected from: collect matches its call log's prompt_hash against the task's, and
    the standard split hashes that text. Joining the turns with a space passed every test."""
    messages = [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "2+2?"}]
    task = Task(id="q", messages=messages, answer="4", grader="number", task="math")
    record = RewardRecord(
        prompt=task.record_prompt(), split="train", worker_ids=WORKERS, rewards=[0, 1, 0]
    )
    assert record.prompt_text == task.prompt_text()
    assert record.prompt_hash == hashlib.sha1(task.prompt_text().encode("utf-8")).hexdigest()


def test_a_nan_id_or_task_in_a_records_file_is_no_value(tmp_path: Path) -> None:
    """json.dumps writes pandas' missing value as NaN: an "id": NaN was the id "nan", shared
    by every such record, and a "task": NaN a family named nan."""
    path = write_lines(
        tmp_path / "nan.jsonl", [json.dumps(good_row(0, id=math.nan, task=math.nan))]
    )
    assert [(record.id, record.task) for record in read_records(path)] == [(None, None)]


def test_an_append_that_fails_leaves_the_file_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk (or any failed write) part-way through an append left half a line."""
    from fugu_lite.atomic_files import append_whole

    path = tmp_path / "log.jsonl"
    append_whole(path, b'{"a": 1}\n')

    def full_disk(descriptor: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError, match="No space left"):
        append_whole(path, b'{"b": 2}\n')
    assert path.read_bytes() == b'{"a": 1}\n'


def test_remove_tree_given_a_link_to_a_folder_leaves_that_folder(tmp_path: Path) -> None:
    from fugu_lite.atomic_files import remove_tree

    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "notes.txt").write_text("mine", encoding="utf-8")
    (tmp_path / "link").symlink_to(kept)
    remove_tree(tmp_path / "link")
    assert (kept / "notes.txt").read_text(encoding="utf-8") == "mine"


def test_a_finished_folder_a_concurrent_writer_moved_into_place_first_is_kept(
    tmp_path: Path,
) -> None:
    from fugu_lite.atomic_files import move_folder_into_place

    staging, target = tmp_path / ".export.staging", tmp_path / "export"
    for folder, made_by in [(staging, b"this run"), (target, b"the other run")]:
        folder.mkdir()
        (folder / "x.bin").write_bytes(b"x")
        (folder / "model.onnx").write_bytes(made_by)
    move_folder_into_place(staging, target, "model.onnx")
    assert (target / "model.onnx").read_bytes() == b"the other run"


def test_a_folder_that_cannot_be_moved_into_place_is_an_error(tmp_path: Path) -> None:
    """A staging folder that cannot be renamed (gone, or on another disk) with no finished
    folder at the target is an error, not a move said done that left nothing in place."""
    from fugu_lite.atomic_files import move_folder_into_place

    with pytest.raises(FileNotFoundError):
        move_folder_into_place(tmp_path / ".gone.staging", tmp_path / "export", "model.onnx")
    assert not (tmp_path / "export").exists()


def test_a_pipeline_key_close_to_a_section_and_to_training_is_told_the_section(
    tmp_path: Path,
) -> None:
    """`sftrain:` is close to both `sft` and a stage file's `training`: the pipeline file's
    section comes first, as the file is a pipeline file."""
    path = write_yaml(tmp_path / "p.yaml", "sft:\n  epochs: 3\nsftrain: {}\n")
    with pytest.raises(ConfigError) as error:
        load_stage_config(path, SFTConfig, "sft")
    assert "unknown top-level key(s) 'sftrain' (did you mean 'sft'?)" in str(error.value)


@pytest.mark.parametrize("value", ["[]", "0", "''"])
def test_another_stage_section_that_is_an_empty_value_but_no_mapping_is_refused(
    tmp_path: Path, value: str
) -> None:
    """`rl: []` (or 0, '') beside the sft: section read by `train sft` is no section of keys,
    empty or not: refused as the rl stage's own command refuses it."""
    path = write_yaml(tmp_path / "p.yaml", f"sft:\n  epochs: 3\nrl: {value}\n")
    with pytest.raises(ConfigError) as error:
        load_stage_config(path, SFTConfig, "sft")
    assert "  rl: must be a section of keys (`rl:` followed by indented" in str(error.value)
