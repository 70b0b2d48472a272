"""A collection's files: the lock on them, torn and corrupt lines, records of another pool,
and the hashes that say whether a saved answer still fits (a changed request, a local
worker's model file)."""

from __future__ import annotations

import asyncio
import errno
import hashlib
import json
import os
import stat
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from conftest import (
    collect_with_file_limit,
    log_lines,
    number_tasks,
    record_ids,
    run_collect,
    solver,
    stub_pool,
)
from rich.console import Console

from fugu_lite.collect import hashes, journal
from fugu_lite.collect import state as collect_state
from fugu_lite.collect.errors import CollectError
from fugu_lite.collect.journal import default_log_path
from fugu_lite.collect.run import collect
from fugu_lite.collect.summary import (
    CollectSummary,
    RunCounters,
    end_of_run_lines,
    summarize,
    summary_table,
)
from fugu_lite.schemas import RewardRecord, read_records, write_records
from fugu_lite.tasks import Task
from fugu_lite.testing.stub_worker import StubWorker
from fugu_lite.text_reading import RecordFileError
from fugu_lite.workers.api_keys import PoolStartError
from fugu_lite.workers.config import PoolConfig


def test_a_second_collect_on_the_same_files_is_refused_while_the_first_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two `collect` runs on one -o (started twice by mistake, in two terminals) both called
    every worker for every task and both appended each record: every record twice in the
    output and every call paid twice."""
    tasks = number_tasks(4)
    output = tmp_path / "r.jsonl"
    with StubWorker(solver(tasks), latency_s=0.2) as stub:
        config = stub_pool(("w", stub), max_concurrency=1)

        async def twice(second_output: Path, log: Path | None = None) -> list[Any]:
            calls = len(stub.bodies)
            first = asyncio.create_task(collect(config, tasks, output, show_progress=False))
            # the first holds its files once it has called the worker (not after a fixed 0.1 s,
            # which a loaded machine could spend before the first opened them); its 4 calls
            # of 0.2 s each keep it running while the second starts
            while len(stub.bodies) == calls and not first.done():
                await asyncio.sleep(0.01)
            second = collect(config, tasks, second_output, log, show_progress=False)
            return await asyncio.gather(first, second, return_exceptions=True)

        first, second = asyncio.run(twice(output))
        assert isinstance(first, CollectSummary) and first.complete
        assert isinstance(second, CollectError) and f"{output} is in use by another" in str(second)
        assert sorted(record_ids(output)) == [t.id for t in tasks] and len(stub.bodies) == 4
        output.unlink()
        default_log_path(output).unlink()  # so that the first run calls again
        other = tmp_path / "other.jsonl"  # another -o, but the same call log: refused too
        first, second = asyncio.run(twice(other, default_log_path(output)))
        assert isinstance(second, CollectError) and "calls.jsonl is in use" in str(second)
        assert not other.exists()  # the refused run left no empty file behind

        monkeypatch.delenv("NO_SUCH_KEY", raising=False)  # a run that cannot start: no files
        keyed = stub_pool(("w", stub), api_key_env="NO_SUCH_KEY")
        with pytest.raises(PoolStartError, match="NO_SUCH_KEY, which is not set"):
            run_collect(keyed, tasks, tmp_path / "new" / "r.jsonl")
    assert list((tmp_path / "new").iterdir()) == []


def test_an_empty_records_file_that_was_there_before_the_run_is_kept(tmp_path: Path) -> None:
    """collect removes the records file it created when the run leaves it empty (no task
    answered by every worker); no test had a file that was there before the run (made by
    `touch`, or by a script checking its path), so removing that one too, a file the user
    made, passed every test. It is kept."""
    tasks = number_tasks(2)
    output = tmp_path / "r.jsonl"
    output.touch()
    with StubWorker(mode="bad_model") as stub:  # every call refused: no record written
        summary = run_collect(stub_pool(("w", stub)), tasks, output)
    assert summary.records_total == 0 and summary.workers[0].failed_calls == 2
    assert output.exists() and output.stat().st_size == 0


def test_a_new_collections_files_get_the_mode_the_umask_gives(tmp_path: Path) -> None:
    """The records and call log are created by the open that locks them: made 0o600 there,
    the other users of a shared folder (a group's umask 002) could not read the rewards,
    where every other file fugu-lite writes gets 0o666 less the umask."""
    tasks = number_tasks(2)
    output = tmp_path / "r.jsonl"
    umask = os.umask(0o002)
    try:
        with StubWorker(solver(tasks)) as stub:
            run_collect(stub_pool(("w", stub)), tasks, output)
    finally:
        os.umask(umask)
    made = (output, default_log_path(output))
    assert [stat.S_IMODE(path.stat().st_mode) for path in made] == [0o664, 0o664]


def test_records_and_a_call_log_in_folders_not_made_yet_are_written_there(
    tmp_path: Path,
) -> None:
    """`collect -o runs/new/r.jsonl --log logs/x/r.calls.jsonl` on a fresh checkout: the
    check of -o and --log takes folders not there yet, and the open that locks the files
    makes them, each level of them."""
    tasks = number_tasks(2)
    output, log = tmp_path / "runs" / "new" / "r.jsonl", tmp_path / "logs" / "x" / "r.calls.jsonl"
    with StubWorker(solver(tasks)) as stub:
        summary = run_collect(stub_pool(("w", stub)), tasks, output, log=log)
    assert summary.complete and sorted(record_ids(output)) == ["add-0", "add-1"]
    assert {json.loads(line)["event"] for line in log.read_text().splitlines()} == {"call", "grade"}


def test_an_output_that_cannot_be_opened_is_refused_naming_it(tmp_path: Path) -> None:
    """-o a link into a folder that is gone (an unmounted disk) passed the checks and ended
    `collect` with a FileNotFoundError traceback; a file the user may not write (made by
    another user) fails the same open."""
    tasks = number_tasks(2)
    output = tmp_path / "r.jsonl"
    output.symlink_to(tmp_path / "unmounted" / "r.jsonl")
    with StubWorker(solver(tasks)) as stub:
        with pytest.raises(CollectError) as refused:
            run_collect(stub_pool(("w", stub)), tasks, output)
        assert stub.bodies == []
    message = str(refused.value)
    assert f"cannot open {output.absolute()} for writing" in message
    assert "No such file or directory" in message and "another -o" in message
    assert not default_log_path(output).exists()  # nothing left behind


@pytest.mark.parametrize(("input_price", "output_price"), [(10.0, 20.0), (1.05, 2.0)])
def test_prices_fixed_between_runs_cost_every_record_still_to_write(
    tmp_path: Path, input_price: float, output_price: float
) -> None:
    """Prices fixed in the pool file (per 1k tokens given as per million, say, or a price 5%
    off) between runs: a saved answer of a task still pending kept its cost at the old
    prices, so one record mixed two price lists, and nothing said the records already
    written hold the old ones."""
    tasks = number_tasks(3)
    output = tmp_path / "r.jsonl"
    with StubWorker(solver(tasks)) as a, StubWorker(solver(tasks)) as b:
        b.fail_next("400")  # add-0 waits for b: a's answer to it is saved, its record not
        run_collect(stub_pool(("a", a), ("b", b), max_concurrency=1), tasks, output)
        assert sorted(record_ids(output)) == ["add-1", "add-2"]
        fixed = stub_pool(
            ("a", a), ("b", b), input_price_per_mtok=input_price, output_price_per_mtok=output_price
        )
        console = Console(record=True, width=400)
        summary = run_collect(fixed, tasks, output, console=console)
        assert len(a.bodies) == 3  # a's answer to add-0 was reused
    # whitespace tokens: "What is i + j?" 5 in, "The answer is N." 4 out
    cost = (5 * input_price + 4 * output_price) / 1e6
    record = {r.id: r for r in read_records(output)}["add-0"]
    assert record.costs == pytest.approx([cost] * 2)
    assert summary.workers[0].cost == pytest.approx(cost * 3)
    assert "2 records already written hold costs at other prices" in console.export_text()
    assert summary.reprices and f"--log {default_log_path(output)}" in summary.reprices[0]


def test_a_worker_reporting_no_usage_has_an_unknown_cost_not_zero(tmp_path: Path) -> None:
    """A worker whose server reports no token counts (usage) showed a cost of $0 in the
    summary, as if its answers were free, and nothing said that its records hold no costs
    (cost-aware training then refused them); its cost is now `?` and a warning says why."""
    tasks = number_tasks(2)
    output = tmp_path / "r.jsonl"
    with StubWorker(solver(tasks)) as a, StubWorker(solver(tasks)) as b:
        b.mode = "no_usage"
        config = stub_pool(("a", a), ("b", b), input_price_per_mtok=10.0)
        summary = run_collect(config, tasks, output)
    priced, unpriced = summary.workers
    assert priced.unpriced == 0 and priced.cost > 0
    assert unpriced.unpriced == 2 and unpriced.done == 2
    assert all(record.costs is None for record in read_records(output))
    console = Console(record=True, width=400)
    console.print(summary_table(summary))
    rows = [line.split() for line in console.export_text().splitlines()]
    assert [row[6] for row in rows if row[:1] == ["b"]] == ["?"]
    lines = end_of_run_lines(summary, config)
    assert any("2 graded answers of b have no cost" in line for line in lines)
    assert not any("answers of a have no cost" in line for line in lines)
    with StubWorker(solver(tasks)) as free:  # priced at 0 (as a local worker): free, not unknown
        config = stub_pool(("free", free), input_price_per_mtok=0.0, output_price_per_mtok=0.0)
        summary = run_collect(config, tasks, tmp_path / "free.jsonl")
    assert [(row.cost, row.unpriced) for row in summary.workers] == [(0.0, 0)]
    assert all(record.costs == [0.0] for record in read_records(tmp_path / "free.jsonl"))


@pytest.mark.parametrize(
    ("cut_before", "said"),
    [
        (',"split"', "the cut line does not show which task's record it was: "),
        (',"id"', "the cut line does not show which task's record it was (task family "
         "'arithmetic'): "),
        ("}", "it was the record of task {task!r} (task family 'arithmetic'): "),
    ],
)  # fmt: skip
def test_torn_last_lines_are_cut_reported_and_redone(
    tmp_path: Path, cut_before: str, said: str
) -> None:
    """A torn record is written again from the call log, no worker asked again: its note
    said 'its cell is redone', as of a call-log line, a cell of a worker to be asked; and
    not whose record was cut, though the torn line may still hold its id (its last field),
    while a torn call-log line names its cell: it names the record's task now, or says it
    cannot tell."""
    tasks = number_tasks(4)
    output = tmp_path / "rewards.jsonl"
    with StubWorker(solver(tasks)) as stub:
        config = stub_pool(("w", stub))
        run_collect(config, tasks, output)
        lines = output.read_text().splitlines(keepends=True)
        torn_id = json.loads(lines[-1])["id"]
        torn_tail = lines[-1][: lines[-1].rindex(cut_before)]  # kill -9 mid-write
        output.write_text("".join(lines[:-1]) + torn_tail)
        log = default_log_path(output)
        log.write_text(log.read_text() + '{"event": "call", "task_')
        summary = run_collect(config, tasks, output)
        assert len(stub.bodies) == 4  # the torn record is rebuilt from the call log
    assert len(summary.torn_lines) == 2 and str(output) in summary.torn_lines[0]
    records_note, log_note = summary.torn_lines
    assert records_note.endswith(
        f"kept in rewards.jsonl.torn); {said.format(task=torn_id)}if its task is in this task "
        "file, its record is written again from the answers saved in rewards.calls.jsonl (a "
        "worker is asked again only for an answer not saved there)"
    )
    assert log_note.startswith(str(log)) and log_note.endswith("its cell is redone")
    ids = record_ids(output)
    assert sorted(ids) == sorted(t.id for t in tasks) and ids[-1] == torn_id
    assert Path(str(output) + ".torn").read_text().startswith(torn_tail)
    log_lines(output)  # every line of the log is whole JSON again


def test_a_torn_records_task_is_read_from_its_own_fields_alone() -> None:
    """A tool call's id in a record's prompt is not the record's id: only the fields after
    its worker_ids are read, the last ones of a record."""
    prompt = [
        {"role": "assistant", "tool_calls": [{"id": "call_1", "type": "function"}]},
        {"role": "tool", "tool_call_id": "call_1", "content": '"id": "quoted"'},
    ]
    record = RewardRecord(prompt=prompt, split="train", worker_ids=["w"], rewards=[1.0], id="t")
    line = record.model_dump_json(exclude_none=True)
    assert journal.torn_record_task(line[:-1]) == {"id": "t"}
    assert journal.torn_record_task(line[: line.index(',"id"')]) == {}
    assert journal.torn_record_task(line[: line.index('"worker_ids"')]) == {}


@pytest.mark.parametrize(
    ("event", "cut_after", "said", "asked_again"),
    [
        ("call", '"request_hash"', "it was the call of worker 'w' on task {task!r}: if its "
         "task is in this task file, that worker is asked it again", 1),
        ("grade", '"request_hash"', "it was the grade of the answer of worker 'w' to task "
         "{task!r}: if its task is in this task file, that answer, saved before it, is graded "
         "again (no call)", 0),
        ("call", '"worker_id"', "the cut line does not show which task and worker it was for; "
         "its cell is redone", 1),
    ],
)  # fmt: skip
def test_a_torn_call_log_line_names_the_task_and_worker_whose_cell_is_redone(
    tmp_path: Path, event: str, cut_after: str, said: str, asked_again: int
) -> None:
    """A run killed while writing a call-log line: the warning said only "its cell is
    redone", not whose answer was lost and which worker would be asked (and paid) again,
    though the torn line names them; it names them now, or says it cannot tell."""
    tasks = number_tasks(4)
    output = tmp_path / "rewards.jsonl"
    log = default_log_path(output)
    with StubWorker(solver(tasks)) as stub:
        config = stub_pool(("w", stub))
        run_collect(config, tasks, output)
        last_task = log_lines(output)[-1]["task_id"]
        lines = log.read_text().splitlines(keepends=True)
        lost = [line for line in lines if json.loads(line)["task_id"] == last_task]
        [torn] = [line for line in lost if json.loads(line)["event"] == event]
        kept = [line for line in lines if line not in lost[lost.index(torn) :]]
        torn_tail = torn[: torn.index(cut_after) + 3]  # the kill came just after the key
        log.write_text("".join(kept) + torn_tail)
        records = output.read_text().splitlines(keepends=True)
        output.write_text("".join(r for r in records if json.loads(r)["id"] != last_task))
        summary = run_collect(config, tasks, output)
        assert len(stub.bodies) == 4 + asked_again
    [note] = summary.torn_lines
    assert note.startswith(f"{log}: cut an unfinished last line ({len(torn_tail)} characters")
    assert note.endswith(said.format(task=last_task))
    assert sorted(record_ids(output)) == sorted(task.id for task in tasks)


def test_a_torn_lines_cell_is_read_from_its_whole_fields_alone() -> None:
    """A field cut before its closing quote is not read, an escaped one is read as written,
    an answer quoting a call-log line names no cell, and a judge's line is named as one."""
    cut = journal.torn_line_cell('{"event": "judge", "task_id": "q\\"1", "worker_id": "ju')
    assert cut == {"event": "judge", "task_id": 'q"1'}
    answer = '"task_id": "other", "worker_id": "x"'
    line = json.dumps({"event": "call", "task_id": "t", "worker_id": "w", "output": answer})
    assert journal.torn_line_cell(line[:-5]) == {"event": "call", "task_id": "t", "worker_id": "w"}
    quoting = json.dumps({"event": "call", "output": answer})
    assert journal.torn_line_cell(quoting[:-1]) == {"event": "call"}
    judged = collect_state.torn_cell_redone({"event": "judge", "task_id": "t", "worker_id": "j"})
    assert judged == "it was a 'judge' line of task 't' and worker 'j': its cell is redone"


@pytest.mark.parametrize("tail", [b"", b"\n", b'{"event": "call", "task_', b"\xe2\x82"])
def test_a_torn_tail_is_cut_reading_only_the_tail(tmp_path: Path, tail: bytes) -> None:
    """Checking a call log for a torn last line read the whole file into memory on every
    start: gigabytes for the log of a long collection, to look at its last bytes."""
    log = tmp_path / "r.calls.jsonl"
    whole = b'{"event": "call", "output": "' + b"x" * (20 << 20) + b'"}\n'
    log.write_bytes(whole + tail)
    tracemalloc.start()
    try:
        fragment = journal.repair_torn_tail(log)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, peak  # a few blocks, not the 20 MB line
    whole_lines = tail in (b"", b"\n")  # nothing torn: the file is left as it is
    assert log.read_bytes() == (whole + tail if whole_lines else whole)
    assert fragment == (None if whole_lines else tail.decode("utf-8", errors="replace"))


@pytest.mark.parametrize("length", [3 * journal.TAIL_BLOCK, journal.TAIL_BLOCK - 1])
def test_a_torn_line_longer_than_a_block_is_cut_keeping_the_lines_before_it(
    tmp_path: Path, length: int
) -> None:
    """A long answer (a model rambling to its token limit) torn mid-write is longer than the
    block the tail is read by: the lines before it are kept whole, only it is cut and saved.
    One a byte shorter than a block puts the newline before it at the block's first byte."""
    log = tmp_path / "r.calls.jsonl"
    whole = b'{"event": "call", "output": "4"}\n{"event": "grade", "score": 1.0}\n'
    opening = b'{"event": "call", "output": "'
    torn = opening + b"y" * (length - len(opening))
    log.write_bytes(whole + torn)
    fragment = journal.repair_torn_tail(log)
    assert log.read_bytes() == whole
    assert fragment == torn.decode() and Path(f"{log}.torn").read_bytes() == torn + b"\n"


@pytest.mark.parametrize("tail", [b'["event", "call"]', b'"event"', b"17"])
def test_a_last_line_of_json_that_is_no_object_is_cut_as_torn(tmp_path: Path, tail: bytes) -> None:
    """Only a whole JSON object is a whole last line missing its newline: a last line of
    other JSON (a list, a text, a number: no line of the call log) is cut and saved as a torn
    one, not given a newline and kept."""
    log = tmp_path / "r.calls.jsonl"
    whole = b'{"event": "call", "output": "4"}\n'
    log.write_bytes(whole + tail)
    assert journal.repair_torn_tail(log) == tail.decode()
    assert log.read_bytes() == whole and Path(f"{log}.torn").read_bytes() == tail + b"\n"


def test_a_file_whose_only_line_is_torn_is_emptied_and_its_line_saved(tmp_path: Path) -> None:
    """A run killed while writing its first line leaves a file holding that line cut short,
    with no newline before it: the search for the last newline must stop at the file's start
    (a search not reading its first byte never did) and cut it all."""
    log = tmp_path / "r.calls.jsonl"
    torn = b'{"event": "call", "task_id": "add-0", "output": "The answer'
    log.write_bytes(torn)
    assert journal.repair_torn_tail(log) == torn.decode()
    assert log.read_bytes() == b"" and Path(f"{log}.torn").read_bytes() == torn + b"\n"


def test_a_torn_line_that_cannot_be_saved_is_left_in_place_and_said(tmp_path: Path) -> None:
    """On a disk still full after a run stopped mid-line, the next run cut the torn line off
    first and then failed to save it in *.torn, with a traceback: the line was lost."""
    tasks = number_tasks(2)
    output = tmp_path / "rewards.jsonl"
    with StubWorker(solver(tasks)) as stub:
        config = stub_pool(("w", stub))
        run_collect(config, tasks, output)
        log = default_log_path(output)
        torn = log.read_bytes() + b'{"event": "call", "output": "' + b"x" * 4096
        log.write_bytes(torn)
        full = collect_with_file_limit(config, tasks, output, 2048)  # *.torn cannot hold it
        said = full.stdout + full.stderr
        assert full.returncode == 2 and "Traceback" not in said, said
        assert f"cannot write {log}.torn" in said and "run the same command again" in said
        assert log.read_bytes() == torn  # kept until it can be saved

        summary = run_collect(config, tasks, output)  # room again
    assert len(summary.torn_lines) == 1 and log.read_bytes() == torn[: torn.rfind(b"\n") + 1]
    assert Path(f"{log}.torn").read_bytes().startswith(torn[torn.rfind(b"\n") + 1 :])


def test_a_whole_last_line_missing_only_its_newline_is_kept(tmp_path: Path) -> None:
    """A last line that is whole JSON but has no newline (an editor that saves without one,
    or a kill -9 between a line and its newline) was cut as torn: the call log's last
    answer was asked, and paid for, again, and its record written again."""
    tasks = number_tasks(3)
    output = tmp_path / "rewards.jsonl"
    log = default_log_path(output)
    with StubWorker(solver(tasks)) as stub:
        config = stub_pool(("w", stub))
        run_collect(config, tasks[:2], output)
        records, calls = output.read_text(), log.read_text()
        output.write_text(records.removesuffix("\n"))
        log.write_text(calls.removesuffix("\n"))
        summary = run_collect(config, tasks, output)
        assert len(stub.bodies) == 3  # only the new task is asked
    assert summary.torn_lines == [] and summary.complete
    assert output.read_text().startswith(records) and sorted(record_ids(output)) == sorted(
        t.id for t in tasks
    )
    assert log.read_text().startswith(calls)
    assert not Path(str(output) + ".torn").exists() and not Path(str(log) + ".torn").exists()


def test_a_whole_last_line_that_cannot_get_its_newline_is_said(tmp_path: Path) -> None:
    """Giving a whole last line its missing newline on a full disk failed with a traceback."""
    tasks = number_tasks(6)
    output = tmp_path / "rewards.jsonl"
    log = default_log_path(output)
    with StubWorker(solver(tasks)) as stub:
        config = stub_pool(("w", stub))
        run_collect(config, tasks[:5], output)
        unended = log.read_bytes().removesuffix(b"\n")
        log.write_bytes(unended)
        assert len(unended) > 2048  # the newline cannot be written past the limit
        full = collect_with_file_limit(config, tasks, output, 2048)
        said = full.stdout + full.stderr
        assert full.returncode == 2 and "Traceback" not in said, said
        assert f"cannot write {log}" in said and "run the same command again" in said
        assert "raise your file size limit (ulimit -f)" in said  # EFBIG: not a full disk
        assert log.read_bytes() == unended and len(stub.bodies) == 5

        summary = run_collect(config, tasks, output)  # room again
    assert summary.complete and summary.torn_lines == [] and len(stub.bodies) == 6
    assert log.read_bytes().startswith(unended + b"\n")


def test_a_torn_line_blocked_by_a_folder_at_its_torn_path_says_to_move_the_folder(
    tmp_path: Path,
) -> None:
    """Saving a torn line in *.torn told the user to 'free disk space' whatever the error:
    a folder in the way (or a permission, a read-only mount) sent them to look for space."""
    log = tmp_path / "r.calls.jsonl"
    torn = b'{"event": "call"}\n{"event": "ca'
    log.write_bytes(torn)
    (tmp_path / "r.calls.jsonl.torn").mkdir()
    with pytest.raises(CollectError) as refused:
        journal.repair_torn_tail(log)
    said = str(refused.value)
    assert "Is a directory" in said and "move the folder at that path out of the way" in said
    assert "free disk space" not in said and log.read_bytes() == torn


@pytest.mark.parametrize(
    ("code", "fix"),
    [
        (errno.ENOSPC, "free disk space"),
        (errno.EDQUOT, "free space within your disk quota"),
        (errno.EFBIG, "raise your file size limit (ulimit -f)"),
        (errno.EACCES, "give yourself write permission on the file and its folder"),
        (errno.EPERM, "give yourself write permission on the file and its folder"),
        (errno.EROFS, "remount its file system read-write"),
        (errno.EIO, "fix what stops the write"),
    ],
)
@pytest.mark.parametrize("tail", [b'{"event": "ca', b'{"event": "call"}'])
def test_a_torn_line_repair_that_cannot_write_says_what_to_do_about_its_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int, fix: str, tail: bytes
) -> None:
    """Saving a torn line in *.torn, or giving a whole last line its newline, said 'free
    disk space' for any error, a permission denied or a read-only file system too. The write
    fails here through a stand-in append_whole: tests run as root (no permission is denied)
    and cannot mount a read-only file system."""

    def failing_append(path: Path, data: bytes) -> None:
        raise OSError(code, os.strerror(code), str(path))

    monkeypatch.setattr(journal, "append_whole", failing_append)
    log = tmp_path / "r.calls.jsonl"
    log.write_bytes(b'{"event": "call"}\n' + tail)
    with pytest.raises(CollectError) as refused:
        journal.repair_torn_tail(log)
    said = str(refused.value)
    assert os.strerror(code) in said and fix in said and "run the same command again" in said
    assert ("free disk space" in said) == (code == errno.ENOSPC)
    assert log.read_bytes() == b'{"event": "call"}\n' + tail  # kept until it can be saved


def test_corrupt_middle_line_is_a_clear_error(tmp_path: Path) -> None:
    """A line that is not JSON between two records is named by its file and number, with
    what to do, and the file is left as it was."""
    tasks = number_tasks(2)
    output = tmp_path / "rewards.jsonl"
    with StubWorker(solver(tasks)) as stub:
        config = stub_pool(("w", stub))
        run_collect(config, tasks[:1], output)
        record = output.read_text()
        output.write_text(f"{record}not json\n{record}")
        with pytest.raises(RecordFileError) as raised:
            run_collect(config, tasks, output)
    assert f"{output}, line 2: not valid JSON" in str(raised.value)
    assert "fix or delete that line" in str(raised.value)
    assert output.read_text() == f"{record}not json\n{record}"


@pytest.mark.parametrize(
    ("change", "as_log", "said"),
    [
        ({"split": None}, False, "split: Field required"),
        ({"note": "by hand"}, False, "note: Extra inputs are not permitted"),
        ({"rewards": [1.0, "x"]}, False, "rewards: rewards holds a text that is no"),
        ({"event": "answer"}, True, "event: Input should be 'call', 'grade' or 'judge'"),
        ({"worker_id": None}, True, "worker_id: Field required"),
    ],
)  # fmt: skip
def test_a_line_another_tool_appended_wrong_is_named_with_what_is_wrong(
    tmp_path: Path, change: dict, as_log: bool, said: str
) -> None:
    """A line appended by hand or by another tool that is not quite a record (or a call-log
    entry) was refused with pydantic's first message alone, 'not a RewardRecord (Field
    required)': which field, and which of several problems, was left to guess. The error now
    names the field of each problem."""
    tasks = number_tasks(2)
    output = tmp_path / "rewards.jsonl"
    with StubWorker(solver(tasks)) as stub:
        config = stub_pool(("a", stub), ("b", stub))
        run_collect(config, tasks[:1], output)
        path = default_log_path(output) if as_log else output
        line = json.loads(path.read_text().splitlines()[-1])
        wrong = {key: value for key, value in {**line, **change}.items() if value is not None}
        with path.open("a") as stream:
            stream.write(json.dumps(wrong) + "\n")
        with pytest.raises(RecordFileError) as raised:
            run_collect(config, tasks, output)
    lines = len(path.read_text().splitlines())
    assert f"{path}, line {lines}: not a " in str(raised.value)
    assert said in str(raised.value) and "fix or delete that line" in str(raised.value)


def test_a_call_log_line_with_a_field_this_version_does_not_know_is_read(
    tmp_path: Path,
) -> None:
    """A call log holds answers paid for: a line carrying a field this version does not
    know (one a later version writes) is read, its answer and grade reused, not refused as
    a record with a field too many is."""
    tasks = number_tasks(2)
    output = tmp_path / "rewards.jsonl"
    log = default_log_path(output)
    with StubWorker(solver(tasks)) as stub:
        config = stub_pool(("w", stub))
        run_collect(config, tasks, output)
        lines = [json.loads(line) for line in log.read_text().splitlines()]
        log.write_text("".join(json.dumps({**line, "tokens_per_s": 12.5}) + "\n" for line in lines))
        output.unlink()
        summary = run_collect(config, tasks, output)
        assert len(stub.bodies) == 2  # no worker asked again
    assert summary.complete and sorted(record_ids(output)) == sorted(t.id for t in tasks)


@pytest.mark.parametrize("field", ["output", "error", "grade_error", "detail"])
def test_a_log_line_holding_half_an_emoji_in_any_of_its_texts_is_written(
    tmp_path: Path, field: str
) -> None:
    """Half of a surrogate pair (an emoji cut in two by a server counting UTF-16 units)
    reaches a grade line's grade_error and detail too, not only a call's output and error:
    'the judge failed: ...' holds the judge's error message, 'grader raised ...' the
    grader's, a judge score's detail the judge's reply. A field left out of the validator
    made that line unwritable (pydantic's serialization error), on every run."""
    entry = journal.LogEntry(
        event="grade", task_id="t", worker_id="w", request_hash="h", **{field: "Vivid \ud83d"}
    )
    log = tmp_path / "r.calls.jsonl"
    collect_state.append_line(log, entry)
    assert json.loads(log.read_text(encoding="utf-8"))[field] == "Vivid \ufffd"


def test_other_workers_in_the_output_are_refused_with_a_way_out_that_keeps_the_answers(
    tmp_path: Path,
) -> None:
    """A worker added to (or removed from) the pool: the refusal said only "write to a new
    --output", whose default call log is new too, so every saved answer was paid for again.
    It now names the old call log to pass with --log, which reuses them."""
    tasks = number_tasks(2)
    output = tmp_path / "rewards.jsonl"
    with StubWorker(solver(tasks)) as stub, StubWorker(solver(tasks)) as added:
        run_collect(stub_pool(("a", stub), ("b", stub)), tasks, output)
        assert len(stub.bodies) == 4
        grown = stub_pool(("a", stub), ("b", stub), ("c", added))
        with pytest.raises(CollectError) as refused:
            run_collect(grown, tasks, output)
        assert f"a new -o with --log {default_log_path(output)}" in str(refused.value)
        summary = run_collect(grown, tasks, tmp_path / "grown.jsonl", log=default_log_path(output))
        assert summary.complete and len(stub.bodies) == 4 and len(added.bodies) == 2
        with pytest.raises(CollectError, match="another order"):
            run_collect(stub_pool(("b", stub), ("a", stub)), tasks, output)


def closed_base_url(tasks: list[Task]) -> str:
    """The base_url of a worker that was started and stopped: nothing listens there (taken
    while the other stubs run, so it is none of their ports)."""
    down = StubWorker(solver(tasks)).start()
    down.stop()
    return down.base_url


def beside_a_down_worker(stub: StubWorker, down_url: str, **change: Any) -> PoolConfig:
    """`w` on the stub, with `change` to its settings, and `down`, which never answers: no
    record is written, so every task stays unfinished and each of w's cells pending."""
    worker = stub_pool(("w", stub)).workers[0].model_dump()
    closed = {**worker, "id": "down", "base_url": down_url}
    return PoolConfig.model_validate({"workers": [{**worker, **change}, closed]})


@pytest.mark.parametrize(
    "change",
    [{}, {"system_prompt": "Be brief."}, {"params": {"temperature": 0.7}}, {"model": "other"}],
)
def test_a_changed_request_is_asked_again(tmp_path: Path, change: dict) -> None:
    """A saved answer counts only for the same request: system prompt, params and model."""
    tasks = number_tasks(2)
    output = tmp_path / "rewards.jsonl"
    with StubWorker(solver(tasks)) as stub:
        down_url = closed_base_url(tasks)
        run_collect(beside_a_down_worker(stub, down_url), tasks, output, down_after=1)
        assert len(stub.bodies) == 2
        summary = run_collect(
            beside_a_down_worker(stub, down_url, **change), tasks, output, down_after=1
        )
    assert len(stub.bodies) == (2 if not change else 4)
    assert summary.reasks == (
        []
        if not change
        else [
            "2 saved answers of w are not reused and asked again: its request (model, "
            "system_prompt, params, a local worker's gguf or chat_format, or the task's "
            "prompt) changed since they were answered"
        ]
    )
    for body in stub.bodies[2:]:
        assert body["messages"][0]["content"] == "Be brief." or "system_prompt" not in change
        assert body.get("temperature") == 0.7 or "params" not in change
        assert body["model"] == "other" or "model" not in change


def test_a_tasks_prompt_edited_between_runs_is_asked_again(tmp_path: Path) -> None:
    """A task whose prompt was fixed between runs (same id, a word added) is asked again: its
    worker's answer to the old prompt does not answer the new one."""
    tasks = number_tasks(2)
    output = tmp_path / "rewards.jsonl"
    edited = [tasks[0].model_copy(update={"prompt": f"{tasks[0].prompt} Only the number."})]
    with StubWorker(solver([*tasks, *edited])) as stub:
        down_url = closed_base_url(tasks)
        run_collect(beside_a_down_worker(stub, down_url), tasks, output, down_after=1)
        summary = run_collect(
            beside_a_down_worker(stub, down_url), [*edited, tasks[1]], output, down_after=1
        )
    assert [body["messages"][-1]["content"] for body in stub.bodies[2:]] == [edited[0].prompt]
    assert len(summary.reasks) == 1 and "1 saved answer of w is not reused" in summary.reasks[0]


def test_an_unfinished_tasks_answers_to_an_earlier_request_are_not_counted_done(
    tmp_path: Path,
) -> None:
    """Answers to a worker's earlier request (its system prompt changed since) are kept for
    the summary only when a written record holds them: counted for an unfinished task too,
    a run whose new calls all failed showed the old answers as done, with their scores,
    though none of them goes into a record."""
    tasks = number_tasks(2)
    output = tmp_path / "rewards.jsonl"
    with StubWorker(solver(tasks)) as stub:
        down_url = closed_base_url(tasks)
        first = run_collect(beside_a_down_worker(stub, down_url), tasks, output, down_after=1)
        assert first.workers[0].done == 2
        stub.mode = "500"  # w fails every call of the next run
        changed = beside_a_down_worker(stub, down_url, system_prompt="Be brief.")
        summary = run_collect(changed, tasks, output, down_after=1)
    row = summary.workers[0]
    assert (row.done, row.pending, row.mean_score, row.cost) == (0, 2, None, 0.0), row


def test_a_workers_params_listed_in_another_order_reuse_its_answers(tmp_path: Path) -> None:
    """The same params in another order (a pool file's keys rearranged, or written out by
    another tool) are the same request: hashed in the order given, every saved answer
    would be asked, and paid for, again."""
    tasks = number_tasks(2)
    output = tmp_path / "rewards.jsonl"
    with StubWorker(solver(tasks)) as stub:
        down_url = closed_base_url(tasks)
        given = beside_a_down_worker(stub, down_url, params={"temperature": 0.2, "max_tokens": 64})
        run_collect(given, tasks, output, down_after=1)
        rearranged = beside_a_down_worker(
            stub, down_url, params={"max_tokens": 64, "temperature": 0.2}
        )
        summary = run_collect(rearranged, tasks, output, down_after=1)
        assert len(stub.bodies) == 2  # nothing asked again
    assert summary.reasks == [] and summary.workers[0].done == 2


def test_written_records_of_an_earlier_request_are_reported(tmp_path: Path) -> None:
    """Records are never rewritten: after a worker's params change, the run says how many
    written records keep its answers to the earlier request, and how to get one request."""
    tasks = number_tasks(3)
    output = tmp_path / "rewards.jsonl"
    with StubWorker(solver(tasks)) as stub:
        config = stub_pool(("w", stub), ("v", stub))
        run_collect(config, tasks[:2], output)
        changed = config.model_copy(deep=True)
        changed.workers[0].params = {"temperature": 0.7}
        summary = run_collect(changed, tasks, output)  # one more task: asked with the new params
        assert len(stub.bodies) == 4 + 2
        assert summary.complete and summary.reasks == [
            "2 records already written keep w's answers to its earlier request (its request "
            "(model, system_prompt, params, a local worker's gguf or chat_format, or the "
            "task's prompt) changed since they were answered); records are never rewritten: "
            "to have one request throughout, collect "
            f"into a new -o with --log {default_log_path(output)} (answers to the current "
            "requests are reused)"
        ]
        assert run_collect(config, tasks[:2], output).reasks == []  # the earlier request again

        fresh = tmp_path / "fresh.jsonl"  # the way out: w asked again with the new params
        summary = run_collect(changed, tasks, fresh, log=default_log_path(output))
        # the records of fresh hold the answers to the new request: nothing to note any more
        again = run_collect(changed, tasks, fresh, log=default_log_path(output))
    assert summary.complete and len(stub.bodies) == 6 + 2
    assert [body.get("temperature") for body in stub.bodies[6:]] == [0.7, 0.7]
    assert again.complete and again.reasks == []


def test_the_summary_of_records_kept_from_an_earlier_request_counts_them(
    tmp_path: Path,
) -> None:
    """After a worker's params changed, the summary of a finished collection said 3/3
    records, but 0 done, no score and $0 for the worker: its answers in those records, to
    the earlier request, were left out of the figures."""
    tasks = number_tasks(3)
    output = tmp_path / "rewards.jsonl"
    right = solver(tasks)

    def one_wrong(messages: list[dict]) -> str:
        return "no idea" if messages[-1]["content"] == tasks[1].prompt else right(messages)

    with StubWorker(one_wrong) as stub:
        config = stub_pool(("w", stub), ("v", stub))
        before = run_collect(config, tasks, output)
        changed = config.model_copy(deep=True)
        changed.workers[0].params = {"temperature": 0.7}
        summary = run_collect(changed, tasks, output)
        assert len(stub.bodies) == 6  # nothing asked again: every record is written
    records = read_records(output)
    assert summary.complete and summary.reasks
    for index, worker in enumerate(summary.workers):
        assert worker == before.workers[index].model_copy(update={"calls": 0})
        assert worker.done == len(records) and worker.pending == 0
        rewards = [record.rewards[index] for record in records]
        assert worker.mean_score == pytest.approx(sum(rewards) / len(rewards)) == 2 / 3
        costs = [(record.costs or [])[index] for record in records]
        assert worker.cost == pytest.approx(sum(costs)) and worker.cost > 0


def test_the_summary_of_records_graded_under_an_earlier_answer_key_counts_them(
    tmp_path: Path,
) -> None:
    """A finished collection summarised again after a task's answer key was fixed: its
    records keep their grades (records are never rewritten, and a note says so), and the
    table counts the answers in them as before, their latency and all."""
    tasks = number_tasks(3)
    output = tmp_path / "rewards.jsonl"
    with StubWorker(solver(tasks)) as stub:
        config = stub_pool(("w", stub), ("v", stub))
        before = run_collect(config, tasks, output)
        fixed = [tasks[0].model_copy(update={"answer": "2"}), *tasks[1:]]
        summary = run_collect(config, fixed, output)
        assert len(stub.bodies) == 6  # nothing asked again: every record is written
    assert summary.complete and summary.regrades
    assert summary.workers == [worker.model_copy(update={"calls": 0}) for worker in before.workers]


def state_after_an_answer_key_fix(
    tmp_path: Path, output: str, fix: dict[str, Any]
) -> collect_state.CollectState:
    """The state of a collection of one exact-graded task, "Capital of France?" (answer
    Paris), whose one worker's answer `output` was graded 1.0, read again after the task's
    answer key got `fix`: no record written, so the task is unfinished."""
    task, config, log = one_graded_answer(tmp_path, output, hashes.grading_code_digest())
    fixed = task.model_copy(update=fix)
    return collect_state.CollectState(config, [fixed], tmp_path / "r.jsonl", log).load()


def one_graded_answer(
    tmp_path: Path, output: str, grading_code: str | None
) -> tuple[Task, PoolConfig, Path]:
    """One exact-graded task, "Capital of France?" (answer Paris), its one-worker pool and
    the call log tmp_path/r.calls.jsonl holding the worker's answer `output` graded 1.0 with
    `grading_code` (None: as an older fugu-lite logged it, without)."""
    task = Task(id="capital", prompt="Capital of France?", answer="Paris", grader="exact",
                task="geography")  # fmt: skip
    config = PoolConfig.model_validate(
        {"workers": [{"id": "w", "model": "m", "base_url": "http://127.0.0.1:9/v1"}]}
    )
    cell = {"task_id": task.id, "worker_id": "w",
            "request_hash": hashes.request_hash(config.workers[0], task)}  # fmt: skip
    call = {**cell, "event": "call", "output": output, "latency_s": 0.5}
    grade = {**cell, "event": "grade", "score": 1.0, "grading_hash": hashes.grading_hash(task),
             "grading_code": grading_code}  # fmt: skip
    log = tmp_path / "r.calls.jsonl"
    log.write_text(f"{json.dumps(call)}\n{json.dumps(grade)}\n")
    return task, config, log


def test_a_case_rule_fixed_between_runs_is_named_in_the_regrade_note(tmp_path: Path) -> None:
    """A task's case_sensitive is part of its answer key (README): fixed between runs, its
    saved answers are graded again, and the note naming what changed named the answer,
    tests, grader and rubric only, leaving the user to wonder which of those they changed."""
    state = state_after_an_answer_key_fix(tmp_path, "paris", {"case_sensitive": True})
    assert state.cells_to_grade() == [("capital", "w")]
    assert state.regrade_notes() == [
        "1 saved answer is graded again, without asking its worker again: the task's answer "
        "key (answer, tests, grader, rubric, case_sensitive) changed"
    ]


def test_an_unfinished_tasks_grade_under_an_earlier_answer_key_is_not_counted_done(
    tmp_path: Path,
) -> None:
    """A saved grade of an unfinished task given under an earlier answer key is graded again;
    until it is (its judge down, its grader failing) the cell is not done, and only written
    records keep such grades in the table. No test summarised such a cell: a table counting
    it done, its old score in the mean, passed every test."""
    fix = {"answer": "paris", "case_sensitive": True}
    state = state_after_an_answer_key_fix(tmp_path, "Paris", fix)
    worker = summarize(state, RunCounters(state.worker_ids)).workers[0]
    assert (worker.done, worker.pending, worker.mean_score) == (0, 1, None)


def test_records_graded_by_a_fugu_lite_that_logged_no_grading_code_get_no_note(
    tmp_path: Path,
) -> None:
    """A written record whose grade line an older fugu-lite wrote without its grading code
    would be noted on every run for ever (records are never rewritten); no test had one, so
    a note saying so each run passed every test. Only a pending task's answer is noted."""
    task, config, log = one_graded_answer(tmp_path, "Paris", grading_code=None)
    output = tmp_path / "r.jsonl"
    record = RewardRecord(
        prompt=task.record_prompt(), split="train", worker_ids=["w"], rewards=[1.0], id=task.id
    )
    write_records(output, [record])
    state = collect_state.CollectState(config, [task], output, log).load()
    assert state.recorded == {task.id} and state.regrade_notes() == []


def test_a_local_worker_with_another_model_file_is_asked_again(tmp_path: Path) -> None:
    """A local worker's `model` is only a label: an answer of another GGUF file (or chat
    format) is not reused. Call lines of older versions, which do not name the file, are."""
    task = number_tasks(1)[0]
    log = tmp_path / "r.calls.jsonl"

    def local_pool(gguf: str, chat_format: str | None = None) -> PoolConfig:
        local = {"gguf": gguf, "chat_format": chat_format}
        return PoolConfig.model_validate({"workers": [{"id": "loc", "model": "m", "local": local}]})

    def state(config: PoolConfig) -> collect_state.CollectState:
        return collect_state.CollectState(config, [task], tmp_path / "r.jsonl", log).load()

    first = local_pool(str(tmp_path / "q4.gguf"))
    worker = first.workers[0]
    answer = {"event": "call", "task_id": task.id, "worker_id": "loc", "output": "1",
              "request_hash": hashes.request_hash(worker, task)}  # fmt: skip
    log.write_text(json.dumps({**answer, "local_hash": hashes.local_hash(worker)}) + "\n")
    assert state(first).cells_to_call("loc") == []
    for changed in (local_pool(str(tmp_path / "q8.gguf")), local_pool(worker.local.gguf, "chatml")):
        again = state(changed)
        assert again.cells_to_call("loc") == [task.id]
        assert again.reask_notes() == [
            "1 saved answer of loc is not reused and asked again: its request (model, "
            "system_prompt, params, a local worker's gguf or chat_format, or the task's "
            "prompt) changed since it was answered"
        ]
    log.write_text(json.dumps(answer) + "\n")  # an older version's line
    assert state(local_pool(str(tmp_path / "q8.gguf"))).cells_to_call("loc") == []


def test_the_summary_of_records_holding_a_refusal_at_an_earlier_n_ctx_counts_it(
    tmp_path: Path,
) -> None:
    """A local worker's n_ctx raised after its refusal of a long prompt was written in a record
    (scored 0, as the README says to have such prompts asked again): the finished collection's
    table left that answer out, '1 done, score 1.000' for records holding its rewards 1 and 0.
    It now counts it as the records hold it."""
    tasks = number_tasks(2)
    output, log = tmp_path / "r.jsonl", tmp_path / "r.calls.jsonl"

    def local_pool(n_ctx: int) -> PoolConfig:
        local = {"gguf": str(tmp_path / "m.gguf"), "n_ctx": n_ctx}
        return PoolConfig.model_validate({"workers": [{"id": "loc", "model": "m", "local": local}]})

    worker = local_pool(256).workers[0]
    lines = []
    for task, refused in zip(tasks, (False, True), strict=True):
        request = hashes.request_hash(worker, task)
        answer = {"output": task.answer, "usage": {"prompt_tokens": 5, "completion_tokens": 1}}
        refusal = {"error": "context", "error_code": "context_length_exceeded", "n_ctx": 256}
        lines += [
            {"event": "call", "task_id": task.id, "worker_id": "loc", "request_hash": request,
             "local_hash": hashes.local_hash(worker), **(refusal if refused else answer)},
            {"event": "grade", "task_id": task.id, "worker_id": "loc", "request_hash": request,
             "score": 0.0 if refused else 1.0, "grading_hash": hashes.grading_hash(task),
             "grading_code": hashes.grading_code_digest()},
        ]  # fmt: skip
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))
    records = [
        RewardRecord(prompt=task.prompt, split="train", worker_ids=["loc"], rewards=[reward],
                     costs=[0.0], task="arithmetic", id=task.id)
        for task, reward in zip(tasks, (1.0, 0.0), strict=True)
    ]  # fmt: skip
    write_records(output, records)
    for n_ctx in (256, 1024):
        state = collect_state.CollectState(local_pool(n_ctx), tasks, output, log).load()
        row = summarize(state, RunCounters(state.worker_ids)).workers[0]
        assert (row.done, row.pending, row.mean_score) == (2, 0, 0.5), n_ctx


def local_pool_at(tmp_path: Path, n_ctx: int) -> PoolConfig:
    """One local worker, loc, given the context `n_ctx`."""
    local = {"gguf": str(tmp_path / "m.gguf"), "n_ctx": n_ctx}
    return PoolConfig.model_validate({"workers": [{"id": "loc", "model": "m", "local": local}]})


def refusal_at_256_and_its_grade(tmp_path: Path, task: Task) -> tuple[dict, dict, dict]:
    """The cell (task, loc) and the call log lines of loc refusing `task`'s prompt as over
    its context at n_ctx 256, and of that refusal graded 0."""
    worker = local_pool_at(tmp_path, 256).workers[0]
    cell = {"task_id": task.id, "worker_id": "loc",
            "request_hash": hashes.request_hash(worker, task),
            "local_hash": hashes.local_hash(worker)}  # fmt: skip
    refusal = {**cell, "event": "call", "error": "context", "n_ctx": 256,
               "error_code": "context_length_exceeded"}  # fmt: skip
    grade = {**cell, "event": "grade", "score": 0.0, "grading_hash": hashes.grading_hash(task),
             "grading_code": hashes.grading_code_digest()}  # fmt: skip
    return cell, refusal, grade


def test_a_context_refusal_is_asked_again_once_n_ctx_is_raised(tmp_path: Path) -> None:
    """A local worker's refusal of a prompt over its context is its answer (scored 0) while
    its n_ctx is the same; raised (as the warning says to), the prompt of a pending task is
    asked again, not answered by the refusal at the smaller context."""
    task = number_tasks(1)[0]
    log = tmp_path / "r.calls.jsonl"

    _, refusal, grade = refusal_at_256_and_its_grade(tmp_path, task)
    log.write_text(f"{json.dumps(refusal)}\n{json.dumps(grade)}\n")

    def state(n_ctx: int) -> collect_state.CollectState:
        return collect_state.CollectState(
            local_pool_at(tmp_path, n_ctx), [task], tmp_path / "r.jsonl", log
        ).load()

    assert state(256).cells_to_call("loc") == [] and state(256).record_for(task.id) is not None
    assert state(1024).cells_to_call("loc") == [task.id]
    # nor is its 0 a grade at 1024: with loc down, no record holding it is written
    assert not state(1024).is_graded((task.id, "loc")) and state(1024).record_for(task.id) is None


def test_an_answer_at_a_raised_n_ctx_is_not_given_the_refusals_grade_at_the_old_one(
    tmp_path: Path,
) -> None:
    """A local worker refused a long prompt at n_ctx 256 (graded 0), answered it once n_ctx
    was raised to 1024 (the run killed before that answer's grade line), and is back at 256
    (1024 ran out of memory): the answer, logged after the refusal, is the cell's answer and
    is graded again; the refusal's 0 was not its grade."""
    task = number_tasks(1)[0]
    log = tmp_path / "r.calls.jsonl"

    cell, refusal, grade = refusal_at_256_and_its_grade(tmp_path, task)
    answer = {**cell, "event": "call", "output": "The answer is 1."}
    log.write_text("".join(json.dumps(line) + "\n" for line in (refusal, grade, answer)))
    pool = local_pool_at(tmp_path, 256)
    state = collect_state.CollectState(pool, [task], tmp_path / "r.jsonl", log).load()
    assert state.calls[(task.id, "loc")].output == "The answer is 1."
    assert state.cells_to_grade() == [(task.id, "loc")] and state.record_for(task.id) is None


def test_a_runs_grade_lines_name_the_model_file_of_the_answer_they_graded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The grade lines a run writes name the model file (local_hash, gguf_sha256) of the
    answer they graded, as its call line does, which a later run compares: without them
    another GGUF's grade logged last was taken for this one's answer (see the next test).
    A local worker's file is faked here for a stub."""
    monkeypatch.setattr(collect_state, "local_hash", lambda worker: f"local-of-{worker.id}")
    monkeypatch.setattr(collect_state, "gguf_sha256", lambda worker: f"sha-of-{worker.id}")
    tasks = number_tasks(2)
    output = tmp_path / "r.jsonl"
    with StubWorker(solver(tasks)) as stub:
        summary = run_collect(stub_pool(("a", stub), ("b", stub)), tasks, output)
    assert summary.complete
    lines = log_lines(output)
    assert len(lines) == 8
    for line in lines:
        worker = line["worker_id"]
        assert (line.get("local_hash"), line.get("gguf_sha256")) == (
            f"local-of-{worker}",
            f"sha-of-{worker}",
        ), line


def test_a_grade_of_another_model_files_answer_is_not_taken_for_this_ones(tmp_path: Path) -> None:
    """A task still pending after a local worker answered it with one GGUF (graded 1), then
    with another (graded 0), then the first again: the second file's grade, logged last, was
    taken for the first file's answer, and the record would hold 0 for an answer graded 1.
    Grade lines now name the model file of the answer they graded, as call lines do."""
    task = number_tasks(1)[0]
    log = tmp_path / "r.calls.jsonl"

    def local_pool(gguf: str) -> PoolConfig:
        local = {"gguf": str(tmp_path / gguf)}
        return PoolConfig.model_validate({"workers": [{"id": "loc", "model": "m", "local": local}]})

    lines = []
    for gguf, score in (("q4.gguf", 1.0), ("q8.gguf", 0.0)):
        worker = local_pool(gguf).workers[0]
        request = hashes.request_hash(worker, task)
        lines += [
            {"event": "call", "task_id": task.id, "worker_id": "loc", "request_hash": request,
             "local_hash": hashes.local_hash(worker), "output": "1"},
            {"event": "grade", "task_id": task.id, "worker_id": "loc", "request_hash": request,
             "local_hash": hashes.local_hash(worker), "score": score,
             "grading_hash": hashes.grading_hash(task),
             "grading_code": hashes.grading_code_digest()},
        ]  # fmt: skip
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))
    state = collect_state.CollectState(local_pool("q4.gguf"), [task], tmp_path / "r.jsonl", log)
    record = state.load().record_for(task.id)
    assert record is not None and record.rewards == [1.0]


def test_a_local_worker_whose_model_file_was_replaced_in_place_is_asked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another GGUF downloaded under the same file name (another quant, another model) gave
    the same local_hash, which names the path only: the old file's answers were reused and
    mixed with the new one's in the records. Call lines now hold the file's SHA-256."""
    monkeypatch.setenv("FUGU_LITE_CACHE_DIR", str(tmp_path / "cache"))
    task = number_tasks(1)[0]
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF q4 weights")
    config = PoolConfig.model_validate(
        {"workers": [{"id": "loc", "model": "m", "local": {"gguf": str(gguf)}}]}
    )
    log = tmp_path / "r.calls.jsonl"

    def state() -> collect_state.CollectState:
        return collect_state.CollectState(config, [task], tmp_path / "r.jsonl", log).load()

    worker = config.workers[0]
    answer = {"event": "call", "task_id": task.id, "worker_id": "loc", "output": "1",
              "request_hash": hashes.request_hash(worker, task),
              "local_hash": hashes.local_hash(worker)}  # fmt: skip
    digest = hashes.gguf_sha256(worker)
    assert digest == hashlib.sha256(b"GGUF q4 weights").hexdigest()
    log.write_text(json.dumps({**answer, "gguf_sha256": digest}) + "\n")
    assert state().cells_to_call("loc") == []

    gguf.write_bytes(b"GGUF q8 weights, another file")  # replaced under the same name
    again = state()
    assert again.cells_to_call("loc") == [task.id] and len(again.reask_notes()) == 1
    log.write_text(json.dumps(answer) + "\n")  # an older version's line: taken as the same
    assert state().cells_to_call("loc") == []


def test_a_gguf_that_cannot_be_read_has_no_digest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A local worker's GGUF found but failing to read while hashed (an I/O error, the file
    removed meanwhile) has no SHA-256, as a missing file has none: the run goes on and the
    worker's start says what is wrong, not a traceback from the hashing."""
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF q4 weights")
    worker = PoolConfig.model_validate(
        {"workers": [{"id": "loc", "model": "m", "local": {"gguf": str(gguf)}}]}
    ).workers[0]

    def unreadable(path: Path) -> str:
        raise OSError(errno.EIO, "Input/output error", str(path))

    monkeypatch.setattr(hashes, "file_sha256", unreadable)
    assert hashes.gguf_sha256(worker) is None
    gguf.unlink()
    assert hashes.gguf_sha256(worker) is None


def test_records_without_their_call_log_say_where_the_answers_may_be(tmp_path: Path) -> None:
    """A collection with --log elsewhere, continued without it (the same command minus one
    option), found no call log beside the records and paid again for every saved answer of
    its unfinished tasks. Records whose default call log is missing are now refused while
    tasks are pending, until --log says which call log to use."""
    tasks = number_tasks(4)
    output = tmp_path / "rewards.jsonl"
    elsewhere = tmp_path / "elsewhere.calls.jsonl"
    answers = solver(number_tasks(5))
    with StubWorker(answers) as a, StubWorker(answers) as b:
        config = stub_pool(("a", a), ("b", b))
        run_collect(config, tasks[:2], output, log=elsewhere)
        assert run_collect(config, tasks[:2], output).complete  # finished: nothing to pay
        b.mode = "500"  # b's answers to the other two wait; a's are saved
        run_collect(config, tasks, output, log=elsewhere)
        b.mode = "ok"
        paid = len(a.bodies)
        with pytest.raises(CollectError) as refused:
            run_collect(config, tasks, output)
        assert len(a.bodies) == paid and not default_log_path(output).exists()
        summary = run_collect(config, tasks, output, log=elsewhere)
        assert len(a.bodies) == paid and summary.complete  # a's saved answers were reused
        more = [*tasks, *number_tasks(5)[4:]]  # a new call log on purpose: said with --log
        assert run_collect(config, more, output, log=default_log_path(output)).complete
    message = " ".join(str(refused.value).split())
    assert (
        f"{output} holds 2 records, but its call log {default_log_path(output)} is not there"
        in message
    )
    assert f"--log {default_log_path(output)}" in message


def test_the_summary_of_records_continued_with_a_new_call_log_counts_them(tmp_path: Path) -> None:
    """Records continued with a new call log (--log, as the refusal above says to) had their
    answers in no call log the run read: the table said '6/6 records' beside 3 done per worker,
    their scores and costs left out. Those records now count as they hold them."""
    tasks = number_tasks(6)
    output = tmp_path / "rewards.jsonl"
    right = solver(tasks)  # a knows the answers of the tasks recorded first only

    def first_half(messages: list[dict]) -> str:
        known = {task.prompt for task in tasks[:3]}
        return right(messages) if messages[-1]["content"] in known else "I do not know."

    with StubWorker(first_half) as a, StubWorker("I do not know.") as b:
        config = stub_pool(("a", a), ("b", b))
        run_collect(config, tasks[:3], output, log=tmp_path / "elsewhere.calls.jsonl")
        summary = run_collect(config, tasks, output, log=default_log_path(output))
    assert summary.complete
    rows = {row.worker_id: row for row in summary.workers}
    assert (rows["a"].done, rows["a"].mean_score, rows["a"].calls) == (6, 0.5, 3)
    assert (rows["b"].done, rows["b"].mean_score) == (6, 0.0)
    costs = [sum(record.costs or []) for record in read_records(output)]
    assert rows["a"].cost + rows["b"].cost == pytest.approx(sum(costs))


@pytest.mark.parametrize(
    ("other", "as_log", "kind"),
    [
        ({"id": "q", "prompt": "2 + 2?", "answer": "4", "grader": "number", "task": "t"},
         False, "a task line (it has 'grader')"),
        ({"event": "call", "task_id": "q", "worker_id": "w", "request_hash": "h"},
         False, "a call-log entry line (it has 'event')"),
        ({"id": "q", "prompt": "2 + 2?", "worker_ids": ["w"], "rewards": [1.0]},
         True, "a RewardRecord line (it has 'rewards')"),
    ],
)  # fmt: skip
def test_another_kind_of_file_given_to_collect_is_named_and_kept(
    tmp_path: Path, other: dict, as_log: bool, kind: str
) -> None:
    """A task file (or a call log, or records) given as -o / --log was refused with
    'line 1: not a RewardRecord (Field required); fix or delete that line', advice that
    destroys a good file; the error now says what kind of file it is and to keep it."""
    tasks = number_tasks(2)
    given = tmp_path / "given.jsonl"
    given.write_text(json.dumps(other) + "\n")
    output = tmp_path / "r.jsonl"
    options = {"log": given} if as_log else {}
    with StubWorker(solver(tasks)) as stub, pytest.raises(RecordFileError) as raised:
        run_collect(stub_pool(("w", stub)), tasks, given if not as_log else output, **options)
    message = str(raised.value)
    assert f"{given}, line 1: this is {kind}" in message
    assert "keep it as it is" in message and "delete" not in message
    assert given.read_text() == json.dumps(other) + "\n"


@pytest.mark.parametrize(("key", "value"), [("grader", "number"), ("event", "call")])
def test_a_record_carrying_a_tasks_grader_is_named_as_a_wrong_record_not_a_task(
    tmp_path: Path, key: str, value: str
) -> None:
    """A record that another tool wrote with its task's `grader` beside its rewards is a
    record with a field too many, to fix or delete; a task has no rewards. Taken for a task
    line, it was said to make the records another kind of file, 'keep it as it is'. So is one
    with an `event` (a tool's own mark): a call-log line has a request_hash as well."""
    records = tmp_path / "r.jsonl"
    row = {"prompt": "2 + 2?", "split": "test", "worker_ids": ["w"], "rewards": [1.0],
           key: value}  # fmt: skip
    records.write_text(json.dumps(row) + "\n")
    with pytest.raises(RecordFileError) as raised:
        list(journal.validated_lines(records, RewardRecord, "a RewardRecord"))
    message = str(raised.value)
    assert f"{records}, line 1: not a RewardRecord ({key}: Extra inputs" in message
    assert "fix or delete that line" in message and "keep it" not in message


def test_records_of_another_task_file_in_the_output_are_said_to_be_kept(tmp_path: Path) -> None:
    """A run with another task file into the same -o added its records beside those of the
    first without a word, and its table counted only its own ("collection: 2/2 records" for
    a file of 5): whether the output was meant to grow so was left to guess. A note now says
    how many records are of tasks not in this task file, that they are kept, and the way to
    keep collections apart."""
    first, second = number_tasks(5)[:3], number_tasks(5)[3:]
    output = tmp_path / "rewards.jsonl"
    with StubWorker(solver(number_tasks(5))) as stub:
        config = stub_pool(("w", stub))
        quiet = Console(width=400, record=True)
        run_collect(config, first, output, console=quiet)
        console = Console(width=400, record=True)
        summary = run_collect(config, second, output, console=console)
        again = Console(width=400, record=True)
        run_collect(config, [*first, *second], output, console=again)
    assert summary.complete and len(read_records(output)) == 5
    notes = [line for line in console.export_text().splitlines() if "task file" in line]
    assert len(notes) == 1, console.export_text()
    assert f"3 records of {output} are of tasks not in this task file" in notes[0]
    assert "kept" in notes[0] and "another -o" in notes[0]
    assert "task file" not in quiet.export_text() + again.export_text()


def test_records_without_a_task_id_in_the_output_are_not_said_to_be_of_another_task_file(
    tmp_path: Path,
) -> None:
    """Records without an id (imported ones, or another tool's) were counted in the note on
    records 'of tasks not in this task file (collected with another one)', which they were not;
    they now get a note of their own, and the other task file's note counts only its records."""
    tasks = number_tasks(4)
    output = tmp_path / "rewards.jsonl"
    with StubWorker(solver(tasks)) as stub:
        config = stub_pool(("w", stub))
        run_collect(config, tasks[:3], output, console=Console(width=400, record=True))
        # by id: records are written as tasks finish, so add-2 may be the second line
        records = [
            record.model_copy(update={"id": None}) if record.id == "add-1" else record
            for record in read_records(output)
        ]
        write_records(output, records)
        console = Console(width=400, record=True)
        run_collect(config, tasks[2:], output, console=console)
    notes = [line for line in console.export_text().splitlines() if "note:" in line]
    assert len(notes) == 2, console.export_text()
    assert f"1 record of {output} is without a task id (imported" in notes[1]
    assert "collected with another one" not in notes[1] and "kept as it is" in notes[1]
    assert f"1 record of {output} is of tasks not in this task file" in notes[0]


def test_a_record_of_another_pool_appended_to_the_records_is_named_by_its_line(
    tmp_path: Path,
) -> None:
    """One record of another pool appended (by another tool, or a `cat` of two files) among
    this pool's records was refused as if the whole file were another pool's ("was collected
    with workers ['x'], ... use the same pool"), advice that changes the pool for one stray
    line. The error now names that line, the pool of the records before it, and what to do."""
    tasks = number_tasks(3)
    output = tmp_path / "rewards.jsonl"
    with StubWorker(solver(tasks)) as stub:
        config = stub_pool(("a", stub), ("b", stub))
        run_collect(config, tasks[:2], output)
        stray = {"prompt": "2 + 2?", "split": "train", "worker_ids": ["x"], "rewards": [1.0]}
        with output.open("a") as stream:
            stream.write(json.dumps(stray) + "\n")
        with pytest.raises(CollectError) as refused:
            run_collect(config, tasks, output)
    message = str(refused.value)
    assert f"{output}, line 3: a record of workers ['x']" in message, message
    assert "after 2 records of this pool's workers ['a', 'b']" in message
    assert "move that line to a file of its own" in message and "use the same pool" not in message


def test_tasks_given_in_code_with_a_repeated_id_are_refused_naming_it(tmp_path: Path) -> None:
    """collect() called with tasks made in code (not read with read_tasks) of which two share
    an id was refused with 'task ids must be unique', leaving the id to find among them."""
    tasks = number_tasks(4)
    tasks[3] = tasks[3].model_copy(update={"id": "add-1"})
    with StubWorker(solver(tasks)) as stub, pytest.raises(CollectError) as refused:
        run_collect(stub_pool(("w", stub)), tasks, tmp_path / "rewards.jsonl")
    assert "'add-1' is the id of 2 tasks" in str(refused.value)
    assert "give every task its own id" in str(refused.value)
    assert len(stub.bodies) == 0 and not (tmp_path / "rewards.jsonl").exists()


def test_records_of_one_task_without_their_call_log_are_said_as_one(tmp_path: Path) -> None:
    """The refusal of records whose call log is missing said 'holds 1 records'."""
    output = tmp_path / "r.jsonl"
    config = PoolConfig.model_validate(
        {"workers": [{"id": "w", "model": "m", "base_url": "http://127.0.0.1:9/v1"}]}
    )
    state = collect_state.CollectState(config, number_tasks(2), output, tmp_path / "c.jsonl")
    state.recorded = {"t0"}
    assert f"{output} holds 1 record, but its call log" in state.missing_log()
    state.recorded = {"t0", "t1"}
    assert f"{output} holds 2 records, but its call log" in state.missing_log()


def test_a_collection_saved_when_number_ids_were_read_otherwise_is_continued(
    tmp_path: Path,
) -> None:
    """A task file's `"id": 1.0` was read as the id '1.0' before whole float ids were read as
    their integer's text ('1'), and 1e30 for a while as '1000000000000000019884624838656' (now
    '1e+30'): records and call logs saved then matched no task on resume, so every such task
    was asked, paid for and recorded again ('1.0' and '1' both in the records). Their saved
    lines are now this task file's tasks; an id written as text ('7.0' beside 7) stays itself."""
    numbers: list[object] = [1.0, 2.0, 1e30, 7, "7.0"]
    tasks = [
        Task.model_validate({**task.model_dump(), "id": number})
        for task, number in zip(number_tasks(5), numbers, strict=True)
    ]
    assert [task.id for task in tasks] == ["1", "2", "1e+30", "7", "7.0"]
    earlier = {"1": "1.0", "2": "2.0", "1e+30": "1000000000000000019884624838656"}
    output = tmp_path / "rewards.jsonl"
    with StubWorker(solver(tasks)) as stub:
        config = stub_pool(("w", stub))
        run_collect(config, tasks, output)
        # as an earlier fugu-lite saved them, killed before task 2's record
        records = [
            record.model_copy(update={"id": earlier.get(record.id or "", record.id)})
            for record in read_records(output)
            if record.id != "2"
        ]
        write_records(output, records)
        saved = [
            {**line, "task_id": earlier.get(line["task_id"], line["task_id"])}
            for line in log_lines(output)
        ]
        default_log_path(output).write_text("".join(json.dumps(line) + "\n" for line in saved))
        calls = len(stub.bodies)
        console = Console(width=400, record=True)
        summary = run_collect(config, tasks, output, console=console)
    assert len(stub.bodies) == calls  # nothing asked (and paid for) again
    assert summary.complete and summary.records_written == 1
    assert [worker.done for worker in summary.workers] == [5]
    assert sorted(record_ids(output)) == sorted(["1.0", earlier["1e+30"], "2", "7", "7.0"])
    assert "task file" not in console.export_text()


def test_answers_logged_without_a_latency_are_left_out_of_the_mean_latency(
    tmp_path: Path,
) -> None:
    """A call line with no latency_s (written by an older version, or another tool) has no
    known latency: counted as 0 s it would make the worker look faster than it is."""
    tasks = number_tasks(2)
    output = tmp_path / "rewards.jsonl"
    with StubWorker(solver(tasks), latency_s=0.05) as stub:
        config = stub_pool(("w", stub))
        run_collect(config, tasks, output)
        lines = log_lines(output)
        calls = [line for line in lines if line["event"] == "call"]
        del calls[0]["latency_s"]
        default_log_path(output).write_text("".join(json.dumps(line) + "\n" for line in lines))
        summary = run_collect(config, tasks, output)
    assert summary.complete and len(stub.bodies) == 2
    assert summary.workers[0].mean_latency_s == calls[1]["latency_s"]
