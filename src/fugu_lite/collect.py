"""Reward collection: every worker answers every task, a grader scores each answer, and the
scores become RewardRecords.

Two append-only JSONL files, each line flushed and fsynced as soon as it is known:

- the call log (default `<output stem>.calls.jsonl`): one `call` line per worker call
  (prompt hash, worker, output, usage, cost, latency, error), one `judge` line per call to
  the judge (the task, the judged worker and the request hash of the answer it judged) and
  one `grade` line per graded answer (score or grading error);
- the output: one RewardRecord per task, written once every worker's answer is graded.

So a run can stop at any moment (Ctrl-C, kill -9) and the next run with the same files
continues: graded cells are reused, answers that were not graded yet are graded again
without a new call, and only missing cells are called. A grade counts only for the grading
that gave it: the task's answer key and, for the judge grader, the judge (its worker id and
the settings that shape its verdict); after a change, the saved answers of unfinished tasks
are graded again (only the judge is called) and the run says how many and why. A torn
last line (kill -9 during a write) is cut off and reported. A worker that is down, a failed
call and a grader that cannot run leave their cells pending for the next run; nothing is
ever scored 0 for them. A prompt longer than the worker's context (its 400
context_length_exceeded) is the one failure that never goes away by asking again: it is the
worker's answer, scored 0 (as routing it there gives nothing), and reused on resume while
the worker's n_ctx is the same.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import math
import os
import sys
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, BinaryIO, Literal

from pydantic import BaseModel, ConfigDict, ValidationError
from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from .config import ConfigError
from .io import RecordFileError, append_jsonl, file_sha256, iter_jsonl
from .pool import PoolConfig, WorkerConfig, one_call_at_a_time, queued_locally, resolve_gguf
from .progress import LineProgress
from .schemas import RewardRecord, prompt_hash
from .scoring import Grade, grade, parse_judge_score
from .tasks import Task
from .text import console_name, console_text, notes_console, usd, visible_controls
from .workers import (
    CONTEXT_LENGTH_EXCEEDED,
    NO_QUOTA,
    WORKER_REFUSALS,
    CallResult,
    Judge,
    Usage,
    WorkerCallError,
    WorkerPool,
    output_limit,
    refused_for_max_tokens,
    usage_cost,
)

DOWN_AFTER = 3  # consecutive failures of these kinds (after the pool's retries) = worker down
# A 5xx counts too: a gateway whose model is gone (502/503) answers every call alike.
DOWN_KINDS = frozenset({"connection", "timeout", "server"})
# A worker refusing every call alike for its own settings (workers.WORKER_REFUSALS: a bad key,
# no access, a wrong model name or base_url) is down after this many in a row; not at the
# first one: a proxy may answer one by mistake.
REFUSED_AFTER = 3
# A local worker's llama.cpp server that exits on its own (a crash, the OOM killer) is started
# again, at most this often per run: a prompt that crashes it would otherwise do so for ever.
MAX_RESTARTS = 3
JUDGE_PARAMS: dict[str, Any] = {"temperature": 0.0}  # every judge call: one verdict per answer
UNKNOWN_JUDGE = (
    "an older fugu-lite did not log which judge gave them, so they cannot be told apart from "
    "another judge's"
)
Cell = tuple[str, str]  # (task id, worker id)


class CollectError(RuntimeError):
    """The output files do not fit this pool or these tasks; the message says how to fix it."""


class LogEntry(BaseModel):
    """One line of the call log."""

    model_config = ConfigDict(extra="ignore")

    event: Literal["call", "grade", "judge"]
    task_id: str
    worker_id: str
    request_hash: str
    local_hash: str | None = None  # call events of a local worker: its model file
    gguf_sha256: str | None = None  # ... and that file's content (a file replaced in place)
    grading_hash: str | None = None  # grade events: what the grade was computed against
    judge_worker_id: str | None = None  # grade events of judge tasks: the judge that gave it
    judge_hash: str | None = None  # ... and the settings that shaped its verdict
    judge_gguf_sha256: str | None = None  # ... and a local judge's model file's content
    judged_worker_id: str | None = None  # judge events: whose answer (worker_id: the judge)
    judged_request_hash: str | None = None  # judge events: the request hash of that answer
    prompt_hash: str | None = None
    output: str | None = None
    finish_reason: str | None = None  # call events: "length" = cut at the token limit
    usage: dict[str, int] | None = None
    cost: float | None = None
    latency_s: float | None = None
    error: str | None = None
    error_kind: str | None = None
    error_code: str | None = None  # the `code` of the worker's error body
    n_ctx: int | None = None  # context refusals of a local worker: its n_ctx then
    attempts: int | None = None
    started_at: float | None = None
    finished_at: float | None = None
    score: float | None = None
    grade_error: str | None = None
    detail: str | None = None


class WorkerSummary(BaseModel):
    worker_id: str
    done: int  # graded cells over all runs
    pending: int
    calls: int  # this run
    errors: int  # this run: failed calls and grading errors
    failed_calls: int = 0  # this run: calls that gave no answer (after the pool's retries)
    call_error: str | None = None  # this run: why the first of them failed
    call_error_kind: str | None = None  # ... its kind (timeout, connection, client, ...)
    ungraded: int = 0  # this run: answers the grader (or judge) could not score
    refused: int = 0  # this run: prompts over the worker's context, scored 0
    over_max_tokens: int = 0  # ... of them, prompts that fit it but not beside its max_tokens
    cut: int = 0  # graded answers (all runs) that stopped at the worker's token limit
    refusal: str | None = None  # this run: the worker's words on the first of them
    max_tokens_refusal: str | None = None  # ... on the first of those over_max_tokens
    grade_error: str | None = None  # this run: why the first of them could not be scored
    mean_score: float | None
    cost: float
    mean_latency_s: float | None
    down: str | None = None  # why the worker was taken as down this run
    restarts: int = 0  # this run: its local server exited on its own and was started again


class JudgeSummary(BaseModel):
    worker_id: str
    calls: int  # judge calls in the call log (all runs)
    cost: float  # their cost


class CollectSummary(BaseModel):
    output: str
    log: str
    tasks: int
    records_total: int
    records_written: int  # this run
    torn_lines: list[str] = []
    reasks: list[str] = []  # why saved answers were not reused (reask_notes)
    regrades: list[str] = []  # why saved grades were not reused (regrade_notes)
    reprices: list[str] = []  # written records whose costs other prices gave (reprice_notes)
    workers: list[WorkerSummary]
    judges: list[JudgeSummary] = []

    @property
    def complete(self) -> bool:
        return self.records_total == self.tasks


def default_log_path(output: Path) -> Path:
    return output.with_name(f"{output.stem}.calls.jsonl")


def request_hash(worker: WorkerConfig, task: Task) -> str:
    """What the worker is asked, including its system prompt and decoding params: an
    answer is reused on resume only if the request would be the same."""
    payload = {
        "model": worker.model,
        "system_prompt": worker.system_prompt,
        "params": worker.params,
        "messages": task.chat_messages(),
    }
    return _json_sha1(payload)


def local_hash(worker: WorkerConfig) -> str | None:
    """A local worker's model: its GGUF file and chat format, which its request does not
    name (its `model` is only a label). None for a remote worker."""
    if worker.local is None:
        return None
    return _json_sha1(worker.local.model_dump(include={"gguf", "chat_format"}))


def gguf_sha256(worker: WorkerConfig) -> str | None:
    """The SHA-256 of a local worker's GGUF file (read once per version of the file, see
    io.file_sha256): its path names no content, and a file replaced in place (another quant
    or model downloaded under the same name) gives other answers. None for a remote worker
    and for a file not found, whose worker answers nothing (it cannot start)."""
    if worker.local is None:
        return None
    try:
        return file_sha256(resolve_gguf(worker.local.gguf))
    except (ConfigError, OSError):
        return None


def grading_hash(task: Task) -> str:
    """What a grade depends on besides the answer: after a fix to a task's answer, tests or
    grader, its saved answers are graded again on resume (no new calls)."""
    payload = task.model_dump(include={"grader", "answer", "tests", "rubric", "case_sensitive"})
    return _json_sha1(payload)


def judge_hash(judge: WorkerConfig) -> str:
    """What shapes a judge's verdict besides the task and the judged answer: its model, where
    it runs, its system prompt and the params of a judge call. A grade given by another
    judge, or by this one with other settings, is judged again on resume (no new answer)."""
    payload = {
        "model": judge.model,
        "base_url": judge.base_url,
        "local": local_hash(judge),
        "system_prompt": judge.system_prompt,
        "params": {**judge.params, **JUDGE_PARAMS},
    }
    return _json_sha1(payload)


def _json_sha1(payload: dict) -> str:
    return hashlib.sha1(json.dumps(payload, sort_keys=True).encode("utf-8")).hexdigest()


# -- durable files ------------------------------------------------------------------------


def repair_torn_tail(path: Path) -> str | None:
    """Cut an unterminated last line (a write killed half-way) and return it, or None.

    Every complete line ends with a newline because each append writes whole lines. Only
    the file's tail is read: a call log of a long collection holds gigabytes of answers."""
    if not path.exists() or path.stat().st_size == 0:
        return None
    with path.open("rb+") as stream:
        size = stream.seek(0, os.SEEK_END)
        stream.seek(size - 1)
        if stream.read(1) == b"\n":
            return None
        keep = last_line_start(stream, size)
        stream.seek(keep)
        tail = stream.read()
        stream.truncate(keep)
        stream.flush()
        os.fsync(stream.fileno())
    fragment = tail.decode("utf-8", errors="replace")
    with path.with_name(path.name + ".torn").open("a", encoding="utf-8") as torn:
        torn.write(fragment + "\n")
    return fragment


TAIL_BLOCK = 1 << 16


def last_line_start(stream: BinaryIO, size: int) -> int:
    """The offset just after the last newline of a file of `size` bytes (0 for none), read
    backwards a block at a time."""
    end = size
    while end > 0:
        start = max(0, end - TAIL_BLOCK)
        stream.seek(start)
        found = stream.read(end - start).rfind(b"\n")
        if found != -1:
            return start + found + 1
        end = start
    return 0


@contextmanager
def exclusive_files(paths: list[Path]) -> Iterator[None]:
    """Hold an exclusive lock on the records and the call log (each created if missing, and
    removed again if the run leaves it empty): a second `collect` on either would append
    every record twice and pay for every call twice. The lock goes with the process, so a
    run killed outright never leaves one behind."""
    if sys.platform == "win32":  # pragma: no cover - no flock there: unlocked, as before
        yield
        return
    import fcntl

    with ExitStack() as stack:
        for path in dict.fromkeys(path.absolute() for path in paths):
            path.parent.mkdir(parents=True, exist_ok=True)
            created = not path.exists()
            descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o666)
            stack.callback(os.close, descriptor)
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise CollectError(
                    f"{path} is in use by another `fugu-lite collect`; wait for it to finish "
                    "(or stop it), then run this again: two runs on one records file or call "
                    "log would write every record twice and pay for every call twice"
                ) from None
            if created:  # removed before the lock goes, so no other run holds it
                stack.callback(_remove_if_empty, path)
        yield


def _remove_if_empty(path: Path) -> None:
    if path.exists() and path.stat().st_size == 0:
        path.unlink()


class CollectState:
    """What is already done, rebuilt from the two files."""

    def __init__(
        self,
        config: PoolConfig,
        tasks: list[Task],
        output: Path,
        log: Path,
        judge_worker: str | None = None,
    ) -> None:
        self.config = config
        self.tasks = {task.id: task for task in tasks}
        self.order = [task.id for task in tasks]
        if len(self.tasks) != len(tasks):
            raise CollectError("task ids must be unique; read the tasks with read_tasks")
        self.output = output
        self.log = log
        self.worker_ids = config.worker_ids
        self.hashes = {
            (task.id, worker.id): request_hash(worker, task)
            for task in tasks
            for worker in config.workers
        }
        self.local_hashes = {worker.id: local_hash(worker) for worker in config.workers}
        self.gguf_digests = {worker.id: gguf_sha256(worker) for worker in config.workers}
        self.contexts = {
            worker.id: None if worker.local is None else worker.local.n_ctx
            for worker in config.workers
        }
        self.grading_hashes = {task.id: grading_hash(task) for task in tasks}
        self.judge = (
            None
            if judge_worker is None
            else (judge_worker, judge_hash(config.worker(judge_worker)))
        )
        self.calls: dict[Cell, LogEntry] = {}  # latest successful call per cell
        self.grades: dict[Cell, LogEntry] = {}  # latest grade with a score, of this grading
        self.stale: dict[Cell, LogEntry] = {}  # latest grade with a score, of another grading
        self.asked_otherwise: set[Cell] = set()  # answered, but to another request
        self.recorded: set[str] = set()
        self.written_costs: dict[str, list[float] | None] = {}  # per recorded task id
        self.torn: list[str] = []
        self.judging: dict[str, JudgeSummary] = {}  # per judge: its calls in the log

    def load(self) -> CollectState:
        for path in (self.output, self.log):
            fragment = repair_torn_tail(path)
            if fragment is not None:
                self.torn.append(
                    f"{path}: cut an unfinished last line ({len(fragment)} characters, kept "
                    f"in {path.name}.torn); its cell is redone"
                )
        if self.output.exists():
            self._load_records()
        if self.log.exists():
            self._load_log()
        return self

    def _load_records(self) -> None:
        for line_number, value in iter_jsonl(self.output):
            try:
                record = RewardRecord.model_validate(value)
            except ValidationError as error:
                raise RecordFileError(
                    f"{self.output}, line {line_number}: not a RewardRecord "
                    f"({error.errors()[0]['msg']}); fix or delete that line"
                ) from error
            if record.worker_ids != self.worker_ids:
                raise CollectError(self._other_workers(record.worker_ids))
            if record.id is not None:
                self.recorded.add(record.id)
                self.written_costs[record.id] = record.costs

    def _other_workers(self, recorded: list[str]) -> str:
        """Why records of another pool cannot be continued, and the way out that keeps the
        saved answers (a new -o alone would start a new call log and pay for them again)."""
        mismatch = f"{self.output} was collected with workers {recorded}, but this pool has "
        if sorted(recorded) == sorted(self.worker_ids):
            return (
                f"{mismatch}them in another order ({self.worker_ids}); list the pool's workers "
                "in the order of the records"
            )
        return (
            f"{mismatch}{self.worker_ids}; use the same pool, or collect into a new -o with "
            f"--log {self.log}: the saved answers of the workers in both are reused, only the "
            "other cells are called"
        )

    def _load_log(self) -> None:
        for line_number, value in iter_jsonl(self.log):
            try:
                entry = LogEntry.model_validate(value)
            except ValidationError as error:
                raise RecordFileError(
                    f"{self.log}, line {line_number}: not a call-log entry "
                    f"({error.errors()[0]['msg']}); fix or delete that line"
                ) from error
            if entry.event == "judge":
                self._count_judging(entry)
                continue  # what the judge said is in its grade line
            cell = (entry.task_id, entry.worker_id)
            answered = self.answers(entry)
            if self.hashes.get(cell) != entry.request_hash or (
                answered and not self._same_local_model(entry)
            ):
                if answered and cell in self.hashes:  # a changed request: not its answer
                    self.asked_otherwise.add(cell)
                continue  # another task set, another worker, or a changed request
            if answered:
                self.calls[cell] = entry
                self.grades.pop(cell, None)  # a newer answer needs its own grade
                self.stale.pop(cell, None)
            elif entry.event == "grade" and entry.score is not None and cell in self.calls:
                if self.grade_mismatch(entry) is None:
                    self.grades[cell] = entry
                else:
                    self.stale[cell] = entry

    def _count_judging(self, entry: LogEntry) -> None:
        judge = self.judging.setdefault(
            entry.worker_id, JudgeSummary(worker_id=entry.worker_id, calls=0, cost=0.0)
        )
        judge.calls += 1
        judge.cost += entry.cost or 0.0

    def answers(self, entry: LogEntry) -> bool:
        """Whether a log line gives its cell an answer to grade: a call with an output, or
        the worker's refusal of a prompt over its context (at the n_ctx it still has)."""
        if entry.event != "call":
            return False
        if entry.error_code == CONTEXT_LENGTH_EXCEEDED:
            return entry.n_ctx == self.contexts.get(entry.worker_id)
        return entry.error is None and entry.output is not None

    def _same_local_model(self, entry: LogEntry) -> bool:
        # call lines of older versions do not name the model file (or its content): taken as
        # the same
        if entry.local_hash is not None and entry.local_hash != self.local_hashes[entry.worker_id]:
            return False
        digest = self.gguf_digests[entry.worker_id]
        return entry.gguf_sha256 is None or digest is None or entry.gguf_sha256 == digest

    def grade_mismatch(self, entry: LogEntry) -> str | None:
        """Why a logged grade is not one of this run's grading, or None when it is."""
        task = self.tasks[entry.task_id]
        if entry.grading_hash != self.grading_hashes[task.id]:
            return "the task's answer key (answer, tests, grader, rubric) changed"
        if task.grader != "judge" or self.judge is None:
            return None
        judge_id, judge_settings = self.judge
        if entry.judge_worker_id is None:
            return UNKNOWN_JUDGE
        if entry.judge_worker_id != judge_id:
            return f"they were judged by {entry.judge_worker_id}, this run judges with {judge_id}"
        if entry.judge_hash != judge_settings:
            return (
                f"the settings of judge {judge_id} that shape its verdict (model, base_url or "
                "local, system_prompt, params) changed since it judged them"
            )
        digest = self.gguf_digests[judge_id]
        if entry.judge_gguf_sha256 not in (None, digest) and digest is not None:
            return f"the model file of judge {judge_id} (its gguf) changed since it judged them"
        return None

    def reask_notes(self) -> list[str]:
        """Per worker whose request changed since its answers were logged: how many cells
        of unfinished tasks it is asked again, and how many written records keep its
        answers to the earlier request."""
        pending = set(self.pending_tasks())
        changed = [cell for cell in self.asked_otherwise if cell not in self.calls]
        notes = []
        for worker_id in self.worker_ids:
            cells = [cell for cell in changed if cell[1] == worker_id]
            asked = sum(task_id in pending for task_id, _ in cells)
            written = len(cells) - asked
            answered = "they were" if len(cells) != 1 else "it was"
            why = (
                "its request (model, system_prompt, params, a local worker's gguf or "
                f"chat_format, or the task's prompt) changed since {answered} answered"
            )
            if asked:
                notes.append(
                    f"{asked} saved answer{'s' * (asked != 1)} of {worker_id} "
                    f"{'are' if asked != 1 else 'is'} not reused and asked again: {why}"
                )
            if written:
                notes.append(
                    f"{written} record{'s' * (written != 1)} already written "
                    f"keep{'s' * (written == 1)} "
                    f"{worker_id}'s answers to its earlier request ({why}); records are never "
                    f"rewritten: to have one request throughout, collect into a new -o with "
                    f"--log {self.log} (answers to the current requests are reused)"
                )
        return notes

    def cost_of(self, cell: Cell) -> float | None:
        """What the cell's answer costs at the pool's prices now (its tokens, from the call
        log): prices fixed in the pool file between runs count for every record still to
        write, not only for answers still to ask. None without token counts."""
        call = self.calls[cell]
        if call.error_code == CONTEXT_LENGTH_EXCEEDED:
            return 0.0  # nothing generated, nothing billed
        if call.usage is None:
            return call.cost
        return usage_cost(self.config.worker(cell[1]), Usage.model_validate(call.usage))

    def reprice_notes(self) -> list[str]:
        """How many written records hold costs that the pool's prices now would not give."""
        repriced = 0
        for task_id, written in self.written_costs.items():
            cells = [(task_id, worker_id) for worker_id in self.worker_ids]
            if (
                written is None
                or task_id not in self.tasks
                or not all(cell in self.calls for cell in cells)
            ):
                continue
            costs = [self.cost_of(cell) for cell in cells]
            if any(
                cost is not None and not math.isclose(cost, old, rel_tol=1e-9, abs_tol=1e-15)
                for cost, old in zip(costs, written, strict=True)
            ):
                repriced += 1
        if not repriced:
            return []
        return [
            f"{repriced} record{'s' * (repriced != 1)} already written "
            f"hold{'s' * (repriced == 1)} costs at other prices than the pool's now "
            "(input_price_per_mtok or output_price_per_mtok changed since); records are never "
            f"rewritten: for one price list throughout, collect into a new -o with --log "
            f"{self.log} (answers are reused, their costs computed at the current prices)"
        ]

    def judge_of(self, task_id: str) -> tuple[str | None, str | None]:
        """The judge worker id and judge hash a grade line of this task carries (None, None
        for graders other than the judge)."""
        if self.judge is None or self.tasks[task_id].grader != "judge":
            return None, None
        return self.judge

    def regrade_notes(self) -> list[str]:
        """Why saved grades are not reused this run: per reason, how many answers of
        unfinished tasks are graded again, and how many written records keep such grades."""
        pending = set(self.pending_tasks())
        regraded: Counter[str] = Counter()
        written: dict[str, set[str]] = {}
        for cell, entry in self.stale.items():
            if cell in self.grades or cell[0] not in self.tasks:
                continue
            reason = self.grade_mismatch(entry)
            if reason is None:
                continue
            if cell[0] in pending:
                regraded[reason] += 1
            elif reason != UNKNOWN_JUDGE:  # said on every run, for records nobody can check
                written.setdefault(reason, set()).add(cell[0])
        notes = [
            f"{count} saved answer{'s are' if count != 1 else ' is'} graded again, without "
            f"asking {'their workers' if count != 1 else 'its worker'} again: {reason}"
            for reason, count in regraded.items()
        ]
        notes += [
            f"{len(task_ids)} record{'s' * (len(task_ids) != 1)} already written "
            f"keep{'s' * (len(task_ids) == 1)} "
            f"grades that this run would give differently ({reason}); records are never "
            f"rewritten: to have one grading throughout, collect into a new -o with --log "
            f"{self.log} (saved answers are reused, only the grading is redone)"
            for reason, task_ids in written.items()
        ]
        return notes

    # -- queries ----------------------------------------------------------------------

    def is_graded(self, cell: Cell) -> bool:
        return cell in self.grades

    def pending_tasks(self) -> list[str]:
        return [task_id for task_id in self.order if task_id not in self.recorded]

    def cells_to_grade(self) -> list[Cell]:
        """Answered but not graded yet (stopped mid-grade, or the grader failed)."""
        return [
            (task_id, worker_id)
            for task_id in self.pending_tasks()
            for worker_id in self.worker_ids
            if (task_id, worker_id) in self.calls and (task_id, worker_id) not in self.grades
        ]

    def cells_to_call(self, worker_id: str) -> list[str]:
        return [
            task_id for task_id in self.pending_tasks() if (task_id, worker_id) not in self.calls
        ]

    def record_for(self, task_id: str) -> RewardRecord | None:
        """The task's RewardRecord when every worker has a graded answer, else None."""
        cells = [(task_id, worker_id) for worker_id in self.worker_ids]
        if task_id in self.recorded or not all(cell in self.grades for cell in cells):
            return None
        task = self.tasks[task_id]
        costs = [self.cost_of(cell) for cell in cells]
        return RewardRecord(
            prompt=task.record_prompt(),
            split=task.resolved_split(),
            worker_ids=self.worker_ids,
            rewards=[float(self.grades[cell].score or 0.0) for cell in cells],
            costs=None if any(cost is None for cost in costs) else [float(c or 0) for c in costs],
            task=task.task,
            id=task_id,
        )

    # -- writes (each line durable before the state changes) --------------------------

    def add(self, entry: LogEntry) -> None:
        append_jsonl(self.log, [entry])
        if entry.event == "judge":
            self._count_judging(entry)
        cell = (entry.task_id, entry.worker_id)
        if self.answers(entry):
            self.calls[cell] = entry
            self.grades.pop(cell, None)
            self.stale.pop(cell, None)
        elif entry.event == "grade" and entry.score is not None:
            self.grades[cell] = entry

    def write_ready_record(self, task_id: str) -> bool:
        record = self.record_for(task_id)
        if record is None:
            return False
        append_jsonl(self.output, [record])
        self.recorded.add(task_id)
        return True


# -- the run -------------------------------------------------------------------------------


class RunCounters:
    def __init__(self, worker_ids: list[str]) -> None:
        self.calls = dict.fromkeys(worker_ids, 0)
        self.errors = dict.fromkeys(worker_ids, 0)
        self.failed_calls = dict.fromkeys(worker_ids, 0)
        self.call_error: dict[str, tuple[str, str | None]] = {}  # the first: message, kind
        self.ungraded = dict.fromkeys(worker_ids, 0)
        self.refused = dict.fromkeys(worker_ids, 0)
        self.refusal: dict[str, str] = {}  # the first prompt over the context
        # refusals of prompts that fit the context, but not beside the worker's max_tokens
        self.over_max_tokens = dict.fromkeys(worker_ids, 0)
        self.max_tokens_refusal: dict[str, str] = {}
        self.grade_error: dict[str, str] = {}
        self.consecutive_down = dict.fromkeys(worker_ids, 0)
        # the status of the worker's last refusals in a row (401/403/404) and how many
        self.consecutive_refused: dict[str, tuple[int | None, int]] = {}
        self.down: dict[str, str] = {}
        self.restarts = dict.fromkeys(worker_ids, 0)  # local servers started again this run
        self.records_written = 0


class Collector:
    def __init__(
        self,
        pool: WorkerPool,
        state: CollectState,
        *,
        judge_worker: str | None = None,
        down_after: int = DOWN_AFTER,
        grade_concurrency: int = 2,
        progress: Progress | LineProgress | None = None,
    ) -> None:
        self.pool = pool
        self.state = state
        self.judge_worker = judge_worker
        self.down_after = down_after
        self.grade_slots = asyncio.Semaphore(grade_concurrency)
        self.restarting = {worker_id: asyncio.Lock() for worker_id in state.worker_ids}
        self.progress = progress
        self.counters = RunCounters(state.worker_ids)
        self.bars: dict[str, Any] = {}
        self.grading: set[asyncio.Task[None]] = set()

    async def run(self) -> None:
        for task_id in self.state.pending_tasks():
            self.counters.records_written += self.state.write_ready_record(task_id)
        await asyncio.gather(*(self._grade(*cell) for cell in self.state.cells_to_grade()))
        queues = {
            worker_id: self.state.cells_to_call(worker_id) for worker_id in self.state.worker_ids
        }
        for worker_id, task_ids in queues.items():
            if self.progress is not None:
                self.bars[worker_id] = self.progress.add_task(
                    worker_id, total=len(task_ids), status=""
                )
        consumers = []
        for worker_id, task_ids in queues.items():
            queue: asyncio.Queue[str] = asyncio.Queue()
            for task_id in task_ids:
                queue.put_nowait(task_id)
            slots = self.pool.worker(worker_id).max_concurrency
            consumers += [self._consume(worker_id, queue) for _ in range(slots)]
        try:
            await asyncio.gather(*consumers)
            if self.grading:
                await asyncio.gather(*self.grading)
        finally:
            for pending in self.grading:
                pending.cancel()

    async def _consume(self, worker_id: str, queue: asyncio.Queue[str]) -> None:
        while not queue.empty():
            task_id = queue.get_nowait()
            if worker_id in self.counters.down:
                self._advance(worker_id)
                continue
            await self._call(worker_id, task_id)

    async def _call(self, worker_id: str, task_id: str) -> None:
        task = self.state.tasks[task_id]
        result = await self.pool.chat(worker_id, task.chat_messages())
        self.counters.calls[worker_id] += 1
        self.state.add(self._call_entry(task, result))
        refused = result.error_code == CONTEXT_LENGTH_EXCEEDED
        if refused:
            self.counters.refused[worker_id] += 1
            failure = f"task {visible_controls(task_id)}: {result.error}"
            if self._over_max_tokens(worker_id, result.error or ""):
                self.counters.over_max_tokens[worker_id] += 1
                self.counters.max_tokens_refusal.setdefault(worker_id, failure)
            else:
                self.counters.refusal.setdefault(worker_id, failure)
        if result.error is None or refused:
            self._answered(worker_id)
            graded = asyncio.create_task(self._grade(task_id, worker_id))
            self.grading.add(graded)
            graded.add_done_callback(self.grading.discard)
        else:
            self.counters.errors[worker_id] += 1
            self.counters.failed_calls[worker_id] += 1
            failure = f"task {visible_controls(task_id)}: {result.error}"
            self.counters.call_error.setdefault(worker_id, (failure, result.error_kind))
            await self._failed(worker_id, result)
        self._advance(worker_id)

    def _judge(self, judge_id: str, cell: Cell) -> Judge:
        """The judge of one answer: not asked once its worker is down (a bad key refuses every
        verdict alike), and taken as down as a worker is, by its failed calls."""
        judge = logging_judge(self.pool, judge_id, self.state, cell, self._judged)

        async def checked(messages: list[dict[str, str]]) -> str:
            down = self.counters.down.get(judge_id)
            if down is not None:
                raise JudgeDown(f"worker {judge_id} is down ({down}); not asked")
            return await judge(messages)

        return checked

    async def _judged(self, result: CallResult) -> None:
        if result.error is None:
            self._answered(result.worker_id)
        else:
            await self._failed(result.worker_id, result)

    async def _failed(self, worker_id: str, result: CallResult) -> None:
        """A call that failed (after the pool's retries): a local worker whose llama.cpp
        server exited is started again (up to MAX_RESTARTS times); else the failure counts
        towards taking the worker down (_check_down)."""
        if not await self._restarted(worker_id):
            self._check_down(worker_id, result)

    async def _restarted(self, worker_id: str) -> bool:
        """Whether the worker's llama.cpp server had exited on its own and is started again
        (or by now taken as down, when it would not start)."""
        async with self.restarting[worker_id]:  # one restart for the calls it failed at once
            if worker_id not in self.pool.crashed_servers():
                return False
            if self.counters.restarts[worker_id] >= MAX_RESTARTS:
                return False
            self.counters.restarts[worker_id] += 1
            try:
                await self.pool.restart(worker_id)
            except Exception as error:  # LocalServerError, or the launch itself failing
                self.counters.down[worker_id] = (
                    f"its local server process exited and did not start again: {error}"
                )
                return True
            self._answered(worker_id)
            return True

    def _answered(self, worker_id: str) -> None:
        """A call the worker answered: its failures in a row start again from 0."""
        self.counters.consecutive_down[worker_id] = 0
        self.counters.consecutive_refused.pop(worker_id, None)

    def _over_max_tokens(self, worker_id: str, refusal: str) -> bool:
        """Whether the worker refused a prompt that fits its context only for the output
        limit its params set (prompt + max_tokens over the context)."""
        limited = output_limit(self.pool.worker(worker_id).params) is not None
        return limited and refused_for_max_tokens(refusal)

    def _check_down(self, worker_id: str, result: CallResult) -> None:
        if result.error_kind in DOWN_KINDS:
            self.counters.consecutive_down[worker_id] += 1
        refusals = self._count_refusal(worker_id, result)
        if worker_id in self.counters.down:  # a call in flight when it went down
            return
        if not self.pool.is_alive(worker_id):
            restarts = self.counters.restarts[worker_id]
            self.counters.down[worker_id] = "its local server process exited" + (
                f" again after {restarts} restarts this run" if restarts else ""
            )
        elif result.error_code == NO_QUOTA:  # every later call would be refused alike
            self.counters.down[worker_id] = (
                f"its provider says the account's quota is used up ({result.error}); add "
                "credit or raise the limit"
            )
        elif self.counters.consecutive_down[worker_id] >= self.down_after:
            self.counters.down[worker_id] = (
                f"{self.down_after} calls in a row failed ({result.error_kind}): {result.error}"
            )
        elif refusals >= REFUSED_AFTER and result.status_code in WORKER_REFUSALS:
            self.counters.down[worker_id] = (
                f"its last {refusals} calls were refused with HTTP {result.status_code}: "
                f"{WORKER_REFUSALS[result.status_code]} in the pool; the last: {result.error}"
            )

    def _count_refusal(self, worker_id: str, result: CallResult) -> int:
        """How many of the worker's calls in a row, this one the last, were refused with this
        call's status (401/403/404); 0 for any other failure."""
        if result.error_kind != "client" or result.status_code not in WORKER_REFUSALS:
            self.counters.consecutive_refused.pop(worker_id, None)
            return 0
        status, count = self.counters.consecutive_refused.get(worker_id, (None, 0))
        count = count + 1 if status == result.status_code else 1
        self.counters.consecutive_refused[worker_id] = (result.status_code, count)
        return count

    async def _grade(self, task_id: str, worker_id: str) -> None:
        cell = (task_id, worker_id)
        judge_worker_id, judge_settings = self.state.judge_of(task_id)
        call = self.state.calls[cell]
        task = self.state.tasks[task_id]
        judge = None if self.judge_worker is None else self._judge(self.judge_worker, cell)
        async with self.grade_slots:
            try:
                if call.error_code == CONTEXT_LENGTH_EXCEEDED:
                    verdict = Grade(score=0.0, detail=f"refused: {call.error}")
                else:
                    verdict = await grade(task, call.output or "", judge)
            except Exception as error:  # a grader bug must not end the run or score 0
                verdict = Grade(score=None, error=f"grader raised {type(error).__name__}: {error}")
        if verdict.score is not None and not (
            math.isfinite(verdict.score) and 0.0 <= verdict.score <= 1.0
        ):
            verdict = Grade(score=None, error=f"grader returned {verdict.score}, not in [0, 1]")
        if verdict.score is None:
            self.counters.errors[worker_id] += 1
            self.counters.ungraded[worker_id] += 1
            failure = f"task {visible_controls(task_id)}: {verdict.error}"
            self.counters.grade_error.setdefault(worker_id, failure)
        self.state.add(
            LogEntry(
                event="grade", task_id=task_id, worker_id=worker_id,
                request_hash=call.request_hash, prompt_hash=call.prompt_hash,
                grading_hash=self.state.grading_hashes[task_id],
                judge_worker_id=judge_worker_id, judge_hash=judge_settings,
                judge_gguf_sha256=self.state.gguf_digests.get(judge_worker_id or ""),
                score=verdict.score, grade_error=verdict.error, detail=verdict.detail,
            )
        )  # fmt: skip
        self.counters.records_written += self.state.write_ready_record(task_id)

    def _call_entry(self, task: Task, result: CallResult) -> LogEntry:
        refused = result.error_code == CONTEXT_LENGTH_EXCEEDED
        return LogEntry(
            event="call",
            task_id=task.id,
            worker_id=result.worker_id,
            request_hash=self.state.hashes[(task.id, result.worker_id)],
            local_hash=self.state.local_hashes[result.worker_id],
            gguf_sha256=self.state.gguf_digests[result.worker_id],
            prompt_hash=prompt_hash(task.prompt_text()),
            output=result.output,
            finish_reason=finish_reason(result),
            usage=None if result.usage is None else result.usage.model_dump(),
            cost=0.0 if refused else result.cost,  # nothing generated, nothing billed
            latency_s=round(result.latency_s, 6),
            error=result.error,
            error_kind=result.error_kind,
            error_code=result.error_code,
            n_ctx=self.state.contexts[result.worker_id] if refused else None,
            attempts=result.attempts,
            started_at=result.started_at,
            finished_at=result.finished_at,
        )

    def _advance(self, worker_id: str) -> None:
        if self.progress is None or worker_id not in self.bars:
            return
        errors = self.counters.errors[worker_id]
        status = (
            "[red]down[/red]"
            if worker_id in self.counters.down
            else (f"[yellow]{errors} errors[/yellow]" if errors else "")
        )
        self.progress.update(self.bars[worker_id], advance=1, status=status)


class JudgeReplyCut(RuntimeError):
    """The judge's reply hit its token limit before it gave a score."""


class JudgeDown(RuntimeError):
    """The judge's worker is down: the answer is not sent to it (graded on the next run)."""


def logging_judge(
    pool: WorkerPool,
    judge_id: str,
    state: CollectState,
    cell: Cell,
    on_result: Callable[[CallResult], Awaitable[None]] | None = None,
) -> Judge:
    """The LLM judge of one answer (a cell): a pool worker, its calls logged as `judge` lines
    naming the task, the judged worker and the request hash of the judged answer; each call's
    result goes to `on_result` too."""
    judge_worker = pool.worker(judge_id)
    task_id, worker_id = cell
    judged_request_hash = state.calls[cell].request_hash

    async def judge(messages: list[dict[str, str]]) -> str:
        result = await pool.chat(judge_id, list(messages), **JUDGE_PARAMS)
        state.add(
            LogEntry(
                event="judge", task_id=task_id, worker_id=judge_id,
                judged_worker_id=worker_id, judged_request_hash=judged_request_hash,
                request_hash=hashlib.sha1(json.dumps(messages).encode()).hexdigest(),
                output=result.output, cost=result.cost, latency_s=result.latency_s,
                usage=None if result.usage is None else result.usage.model_dump(),
                error=result.error, error_kind=result.error_kind, attempts=result.attempts,
                started_at=result.started_at, finished_at=result.finished_at,
            )
        )  # fmt: skip
        if on_result is not None:
            await on_result(result)
        if result.error is not None or result.output is None:
            raise WorkerCallError(result.error_kind or "server", result.error or "no output")
        if _hit_token_limit(result) and parse_judge_score(result.output) is None:
            name, limit = output_limit(judge_worker.params) or ("max_tokens", "of its server")
            raise JudgeReplyCut(
                f"its reply stopped at its token limit ({name} {limit}) before a "
                f"`SCORE: N` line; raise params.{name} of worker {judge_id} (the judge "
                "may reason before it scores) or judge with another worker (--judge)"
            )
        return result.output

    return judge


def _hit_token_limit(result: CallResult) -> bool:
    return finish_reason(result) == "length"


def finish_reason(result: CallResult) -> str | None:
    """Why the worker's answer ended ("stop", "length": cut at its token limit, ...)."""
    choices = (result.raw or {}).get("choices") or [{}]
    reason = choices[0].get("finish_reason") if isinstance(choices[0], dict) else None
    return reason if isinstance(reason, str) else None


async def collect(
    config: PoolConfig,
    tasks: list[Task],
    output: str | Path,
    log: str | Path | None = None,
    *,
    judge_worker: str | None = None,
    down_after: int = DOWN_AFTER,
    show_progress: bool = True,
    console: Console | None = None,
) -> CollectSummary:
    """Collect (or continue collecting) rewards for tasks x workers; see the module doc."""
    output = Path(output)
    log_path = Path(log) if log is not None else default_log_path(output)
    check_judge(config, tasks, judge_worker)
    with exclusive_files([output, log_path]):
        state = CollectState(config, tasks, output, log_path, judge_worker).load()
        console = console or notes_console()
        for message in state.torn:
            console.print(f"[yellow]warning:[/yellow] {console_text(message)}")
        reasks = state.reask_notes()
        regrades = state.regrade_notes()
        reprices = state.reprice_notes()
        for message in [*reasks, *regrades, *reprices]:
            console.print(f"[yellow]note:[/yellow] {console_text(message)}")
        pool = WorkerPool(one_call_at_a_time(config))
        # A finished collection calls no worker: its summary needs neither their local servers
        # (minutes to load a large GGUF) nor their API keys.
        started = pool if state.pending_tasks() else contextlib.nullcontext(pool)
        for message in queued_locally(config) if started is pool else []:
            console.print(f"[yellow]note:[/yellow] {console_text(message)}")
        local = [worker.id for worker in config.workers if worker.local is not None]
        if started is pool and local:  # silent otherwise for as long as the models load
            console.print(f"[dim]starting the llama.cpp servers of {', '.join(local)}[/dim]")
        async with started:
            with _progress(show_progress, console) as progress:
                collector = Collector(
                    pool, state, judge_worker=judge_worker, down_after=down_after, progress=progress
                )
                await collector.run()
        return summarize(state, collector.counters).model_copy(
            update={"reasks": reasks, "regrades": regrades, "reprices": reprices}
        )


def check_judge(config: PoolConfig, tasks: list[Task], judge_worker: str | None) -> None:
    if judge_worker is not None and judge_worker not in config.worker_ids:
        raise CollectError(
            f"--judge {judge_worker!r} is not in the pool; pick one of "
            f"{', '.join(config.worker_ids)}"
        )
    if judge_worker is None and any(task.grader == "judge" for task in tasks):
        raise CollectError(
            "some tasks use the judge grader; name the pool worker that judges with --judge "
            "WORKER_ID"
        )


@contextmanager
def _progress(show: bool, console: Console) -> Iterator[Progress | LineProgress | None]:
    if not show:
        yield None
        return
    if not console.is_terminal:  # a log: rich draws its bars only once, at the end
        yield LineProgress(console)
        return
    progress = Progress(
        TextColumn("{task.description:<24}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[status]}"),
        console=console,
    )
    with progress:
        yield progress


def summarize(state: CollectState, counters: RunCounters) -> CollectSummary:
    workers = []
    pending_tasks = state.pending_tasks()
    # a written record's grades, even those this run's grading would give differently
    written = {cell: entry for cell, entry in state.stale.items() if cell[0] in state.recorded}
    grades = {**written, **state.grades}
    for worker_id in state.worker_ids:
        graded = [cell for cell in grades if cell[1] == worker_id and cell[0] in state.tasks]
        scores = [float(grades[cell].score or 0.0) for cell in graded]
        calls = [state.calls[cell] for cell in graded]
        latencies = [call.latency_s for call in calls if call.latency_s is not None]
        workers.append(
            WorkerSummary(
                worker_id=worker_id,
                done=len(graded),
                pending=sum((task_id, worker_id) not in state.grades for task_id in pending_tasks),
                calls=counters.calls[worker_id],
                errors=counters.errors[worker_id],
                failed_calls=counters.failed_calls[worker_id],
                call_error=counters.call_error.get(worker_id, (None, None))[0],
                call_error_kind=counters.call_error.get(worker_id, (None, None))[1],
                ungraded=counters.ungraded[worker_id],
                refused=counters.refused[worker_id],
                cut=sum(call.finish_reason == "length" for call in calls),
                refusal=counters.refusal.get(worker_id),
                over_max_tokens=counters.over_max_tokens[worker_id],
                max_tokens_refusal=counters.max_tokens_refusal.get(worker_id),
                grade_error=counters.grade_error.get(worker_id),
                mean_score=sum(scores) / len(scores) if scores else None,
                cost=sum(state.cost_of(cell) or 0.0 for cell in graded),
                mean_latency_s=sum(latencies) / len(latencies) if latencies else None,
                down=counters.down.get(worker_id),
                restarts=counters.restarts[worker_id],
            )
        )
    return CollectSummary(
        output=str(state.output),
        log=str(state.log),
        tasks=len(state.tasks),
        records_total=len(state.recorded & set(state.tasks)),
        records_written=counters.records_written,
        torn_lines=state.torn,
        workers=workers,
        judges=list(state.judging.values()),
    )


# A 4xx other than 408 and 429: the worker refused the request itself.
CLIENT_ERROR_HINT = (
    "; a refused request is refused again until the worker's settings in the pool (model, "
    "params, api_key_env) or the task are fixed"
)


def end_of_run_lines(summary: CollectSummary, config: PoolConfig) -> list[str]:
    """What to say after the table (on stderr), per worker: why its calls failed, how many
    answers were cut at its token limit or refused as too long, why answers could not be
    graded, why it was taken as down."""
    lines: list[str] = []
    for worker in summary.workers:
        if worker.call_error and not worker.down:  # a down worker's line says why
            lines.append(
                f"[yellow]warning: {worker.failed_calls} call{'s' * (worker.failed_calls != 1)} "
                f"to {worker.worker_id} failed[/yellow] (not scored; asked again when you run "
                f"this again{CLIENT_ERROR_HINT if worker.call_error_kind == 'client' else ''}); "
                f"the first: {console_text(worker.call_error)}"
            )
        if worker.cut:
            params = config.worker(worker.worker_id).params
            name, limit = output_limit(params) or ("max_tokens", "of its server")
            lines.append(
                f"[yellow]note:[/yellow] {worker.cut} of the {worker.done} graded answers of "
                f"{console_name(worker.worker_id)} stopped at its token limit ({name} "
                f"{limit}) and were graded as they are, often without their final answer; for "
                f"whole answers raise its params.{name} (a new request: unfinished tasks are "
                "asked again)"
            )
        if worker.refusal:
            over_context = worker.refused - worker.over_max_tokens
            many = over_context != 1
            lines.append(
                f"[yellow]warning: {over_context} prompt{'s' * many} "
                f"{'are' if many else 'is'} longer than the context of {worker.worker_id}"
                f"[/yellow], which refused {'them' if many else 'it'}: scored 0 (routing such a "
                f"prompt there gives no answer); to have {'them' if many else 'it'} answered, give "
                "the worker a longer context (a local worker's n_ctx) and collect into a new -o "
                f"with --log {console_text(summary.log)}; the first: {console_text(worker.refusal)}"
            )
        if worker.max_tokens_refusal:
            name, limit = output_limit(config.worker(worker.worker_id).params) or ("", "")
            many = worker.over_max_tokens != 1
            lines.append(
                f"[yellow]warning: {worker.over_max_tokens} prompt{'s' * many} "
                f"{'fit' if many else 'fits'} the context of {worker.worker_id}, but not "
                f"beside its {name} of {limit}[/yellow], and it refused "
                f"{'them' if many else 'it'}: scored 0 as a prompt over its context; to have "
                f"{'them' if many else 'it'} answered, lower its params.{name} (a new request: "
                "unfinished tasks are asked again; for the written records, collect into a new "
                f"-o with --log {console_text(summary.log)}); the first: "
                f"{console_text(worker.max_tokens_refusal)}"
            )
        if worker.grade_error:
            lines.append(
                f"[yellow]warning: {worker.ungraded} answer{'s' * (worker.ungraded != 1)} of "
                f"{worker.worker_id} could not be graded[/yellow] (not scored; graded again, "
                f"without new calls, when you run this again); the first: "
                f"{console_text(worker.grade_error)}"
            )
        if worker.restarts and not worker.down:
            many = worker.restarts != 1
            lines.append(
                f"[yellow]warning: the llama.cpp server of {worker.worker_id} exited "
                f"{worker.restarts} time{'s' * many} this run[/yellow] and was started again "
                f"(the last lines of its log are above); the calls it failed then are asked "
                "again when you run this again"
            )
        if worker.down:
            lines.append(
                f"[red]warning: worker {worker.worker_id} is down[/red] "
                f"({console_text(worker.down)}); its {worker.pending} pending cells are retried "
                "when you run this again"
            )
    return lines


def summary_table(summary: CollectSummary) -> Table:
    """Per worker: graded cells (all runs), pending cells, this run's calls and errors, the
    mean score and total cost of the graded answers, and their mean latency; under it, the
    judge's calls in the call log and their cost (paid, but in no record)."""
    table = Table(
        title=f"collection: {summary.records_total}/{summary.tasks} records",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,  # fits 80 columns
        caption="; ".join(
            f"judge {console_text(judge.worker_id)}: {judge.calls} "
            f"call{'s' * (judge.calls != 1)}, cost {usd(judge.cost)}"
            for judge in summary.judges
        )
        or None,
    )
    table.add_column("worker", overflow="fold", min_width=12)  # folds; the numbers stay whole
    for column in ("done", "pending", "calls", "errors", "score", "cost", "latency"):
        table.add_column(column, justify="right", no_wrap=True)
    for worker in summary.workers:
        table.add_row(
            f"[red]{worker.worker_id} (down)[/red]" if worker.down else worker.worker_id,
            str(worker.done),
            str(worker.pending),
            str(worker.calls),
            str(worker.errors),
            "-" if worker.mean_score is None else f"{worker.mean_score:.3f}",
            usd(worker.cost),
            "-" if worker.mean_latency_s is None else f"{worker.mean_latency_s:.2f}s",
        )
    return table
