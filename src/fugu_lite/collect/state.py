"""What a reward collection has already done, rebuilt from its records and call log
(CollectState): which cells are answered and graded, which saved answers and grades no
longer fit this run (and the notes saying so), and the RewardRecord of a finished task.
The files' format is in journal.py, the hashes compared in hashes.py (see
fugu_lite.collect.run for the files and how a run resumes).
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

from pydantic import BaseModel

from ..io import append_jsonl
from ..schemas import RewardRecord, id_as_read
from ..scoring.common import without_thinking
from ..scoring.judge import parse_judge_score, without_echoed_scores
from ..tasks import Task, id_read_now
from ..text import one_or_many
from ..workers.config import PoolConfig
from ..workers.errors import CONTEXT_LENGTH_EXCEEDED
from ..workers.results import Usage, usage_cost
from .errors import CollectError
from .hashes import (
    gguf_sha256,
    grading_code_digest,
    grading_hash,
    judge_hash,
    local_hash,
    request_hash,
)
from .journal import (
    LogEntry,
    repair_torn_tail,
    torn_line_cell,
    torn_record_task,
    validated_lines,
    write_fix,
)

UNKNOWN_JUDGE = (
    "an older fugu-lite did not log which judge gave them, so they cannot be told apart from "
    "another judge's"
)
UNLOGGED_GRADING_CODE = "an older fugu-lite graded them and did not log its grading code"
GRADING_CODE_CHANGED = (
    "fugu-lite's grading code (scoring, sandbox, tasks) changed since they were graded (an "
    "upgrade, or an edited checkout)"
)
Cell = tuple[str, str]  # (task id, worker id)


class JudgeSummary(BaseModel):
    """A judge's calls in the call log, counted as it is read and written."""

    worker_id: str
    calls: int  # judge calls in the call log (all runs)
    cost: float  # their cost, as far as known
    unpriced: int = 0  # of them, answered calls whose cost is unknown: the judge reported no usage


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
        self.tasks = unique_tasks(tasks)
        self.order = [task.id for task in tasks]
        self.output = output
        self.log = log
        self.worker_ids = config.worker_ids
        # what a saved line must match to count for this run
        self.hashes = request_hashes(config, tasks)
        self.local_hashes = {worker.id: local_hash(worker) for worker in config.workers}
        self.gguf_digests = {worker.id: gguf_sha256(worker) for worker in config.workers}
        self.contexts = local_contexts(config)
        self.grading_hashes = {task.id: grading_hash(task) for task in tasks}
        self.grading_code = grading_code_digest()
        self.judge = run_judge(config, judge_worker)
        self._nothing_read_yet()

    def _nothing_read_yet(self) -> None:
        """What the two files say is done, empty until load reads them."""
        self.calls: dict[Cell, LogEntry] = {}  # latest successful call per cell
        self.grades: dict[Cell, LogEntry] = {}  # latest grade with a score, of this grading
        self.stale: dict[Cell, LogEntry] = {}  # latest grade with a score, of another grading
        self.asked_otherwise: set[Cell] = set()  # answered, but to another request
        self.recorded: set[str] = set()
        self.other_records = 0  # records of tasks not in this run's task file
        self.idless_records = 0  # records without a task id (imported, or another tool's)
        self.written_costs: dict[str, list[float] | None] = {}  # per recorded task id
        self.written_rewards: dict[str, list[float]] = {}  # ... and its rewards
        self.torn: list[str] = []
        self.judging: dict[str, JudgeSummary] = {}  # per judge: its calls in the log
        # per judged cell: the latest reply of this run's judge (see saved_verdict)
        self.verdicts: dict[Cell, LogEntry] = {}
        # cells of written records answered to an earlier request, and those answers' grades
        # (what the records hold, for the summary)
        self.earlier_calls: dict[Cell, LogEntry] = {}
        self.earlier_grades: dict[Cell, LogEntry] = {}

    def load(self) -> CollectState:
        for path in (self.output, self.log):
            fragment = repair_torn_tail(path)
            if fragment is not None:
                self.torn.append(
                    f"{path}: cut an unfinished last line ({len(fragment)} characters, kept "
                    f"in {path.name}.torn); {self._torn_line_redone(path, fragment)}"
                )
        if self.output.exists():
            self._load_records()
        if self.log.exists():
            self._load_log()
        return self

    def _torn_line_redone(self, path: Path, fragment: str) -> str:
        """What becomes of the line cut from `path`: a call-log line's call, grade or verdict
        is made again (see torn_cell_redone); a record's task is left without its record, so
        it is finished again from the answers and grades the call log holds (no call for
        those), and its record written again, if the task is in this run's task file."""
        if path == self.log:
            return torn_cell_redone(torn_line_cell(fragment))
        return (
            f"{torn_record_named(torn_record_task(fragment))}if its task is in this task file, "
            "its record is written again from the answers "
            f"saved in {self.log.name} (a worker is asked again only for an answer not saved "
            "there)"
        )

    def _load_records(self) -> None:
        records = validated_lines(self.output, RewardRecord, "a RewardRecord")
        for ours, (line_number, record) in enumerate(records):  # ours: this pool's, before it
            if record.worker_ids != self.worker_ids:
                raise CollectError(
                    self._stray_record(line_number, record.worker_ids, ours)
                    if ours
                    else self._other_workers(record.worker_ids)
                )
            if record.id is None:
                self.idless_records += 1
                continue
            task_id = self._task_id(record.id)
            self.recorded.add(task_id)
            self.written_costs[task_id] = record.costs
            self.written_rewards[task_id] = record.rewards
            self.other_records += task_id not in self.tasks

    def _task_id(self, saved: str) -> str:
        """The id of a saved line's task as this run's task file reads it: a task whose id
        was a number in the file, saved by an earlier fugu-lite as "1.0", is the task "1"
        now, and is not asked (and paid for) again."""
        task_id = id_as_read(saved)
        if task_id in self.tasks:
            return task_id
        now = id_read_now(task_id)
        return now if now in self.tasks else task_id

    def _stray_record(self, line_number: int, recorded: list[str], ours: int) -> str:
        """Why a record of other workers after records of this pool's is refused: one line
        of another collection appended here, not a file of another pool."""
        return (
            f"{self.output}, line {line_number}: a record of workers {recorded} after {ours} "
            f"record{'s' * (ours != 1)} of this pool's workers {self.worker_ids}, a line of "
            "another collection appended here (by another tool, or files joined); move that "
            "line to a file of its own (or delete it), then run this again"
        )

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

    def other_tasks_notes(self) -> list[str]:
        """That the records of tasks not in this run's task file (collected with another) and
        those without a task id (imported, or written by another tool) are kept, this run's
        added beside them."""
        notes = []
        if self.other_records:
            notes.append(
                f"{self._records_of_output(self.other_records)} of tasks not in this task file "
                f"(collected with another one): {_kept_beside(self.other_records)}"
            )
        if self.idless_records:
            notes.append(
                f"{self._records_of_output(self.idless_records)} without a task id (imported, "
                f"or written by another tool, not by collect): {_kept_beside(self.idless_records)}"
            )
        return notes

    def _records_of_output(self, count: int) -> str:
        """The count of the output's records, with its verb: "3 records of r.jsonl are"."""
        return (
            f"{count} {one_or_many(count, 'record', 'records')} of {self.output} "
            f"{one_or_many(count, 'is', 'are')}"
        )

    def missing_log(self) -> str:
        """Why records whose default call log is missing are not continued without --log:
        a run that wrote its call log elsewhere left the answers of unfinished tasks there."""
        records = one_or_many(len(self.recorded), "record", "records")
        return (
            f"{self.output} holds {len(self.recorded)} {records}, but its call log {self.log} is "
            "not there: if this collection was run with --log, give that call log again (its "
            "saved answers are reused; without it they are asked, and paid for, again); to "
            f"start a new call log here, give --log {self.log}"
        )

    def _load_log(self) -> None:
        for _, saved in validated_lines(self.log, LogEntry, "a call-log entry"):
            entry = saved.model_copy(update={"task_id": self._task_id(saved.task_id)})
            if entry.event == "judge":
                self._count_judging(entry)
                self._note_verdict(entry)
                continue  # what the judge said is in its grade line (or in verdicts)
            cell = (entry.task_id, entry.worker_id)
            answered = self.answers(entry)
            # a grade line names the model file of the answer it graded, as its call line does
            if self.hashes.get(cell) != entry.request_hash or (
                (answered or entry.event == "grade") and not self._same_local_model(entry)
            ):
                if answered and cell in self.hashes:  # a changed request: not its answer
                    self.asked_otherwise.add(cell)
                self._note_earlier(cell, entry, answered or is_context_refusal(entry))
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
            else:  # a refusal at an n_ctx the worker no longer has is asked again, but a
                # written record holds it as the worker's answer
                self._note_earlier(cell, entry, is_context_refusal(entry))

    def _note_earlier(self, cell: Cell, entry: LogEntry, answered: bool) -> None:
        """Keep a written record's answer to an earlier request of its worker (or at an
        earlier n_ctx), and its grade: the record holds them, and so does the summary."""
        if cell[0] not in self.recorded or cell not in self.hashes:
            return
        if answered:
            self.earlier_calls[cell] = entry
            self.earlier_grades.pop(cell, None)
            return
        earlier = self.earlier_calls.get(cell)
        answer_of = earlier is not None and earlier.request_hash == entry.request_hash
        if entry.event == "grade" and entry.score is not None and answer_of:
            self.earlier_grades[cell] = entry

    def _count_judging(self, entry: LogEntry) -> None:
        judge = self.judging.setdefault(
            entry.worker_id, JudgeSummary(worker_id=entry.worker_id, calls=0, cost=0.0)
        )
        judge.calls += 1
        if entry.cost is None and entry.error is None:
            judge.unpriced += 1
        judge.cost += entry.cost or 0.0

    def _note_verdict(self, entry: LogEntry) -> None:
        if entry.error is not None or entry.output is None or entry.judged_worker_id is None:
            return
        if self.judge is None or self.judge_mismatch(
            entry.worker_id, entry.judge_hash, entry.judge_gguf_sha256
        ):
            return  # another judge's, or one of older versions, which did not log its settings
        self.verdicts[(entry.task_id, entry.judged_worker_id)] = entry

    def saved_verdict(self, cell: Cell, request_hash: str) -> str | None:
        """The judge's logged reply to this request (its messages: the task and the cell's
        answer) when this run's judge gave it and it holds a score: a run stopped between
        the reply and its grade line (kill -9) had paid for it already. None otherwise."""
        entry = self.verdicts.get(cell)
        if entry is None or entry.request_hash != request_hash or entry.output is None:
            return None
        # read as the judge grader reads it: a draft score in the judge's thinking is no grade
        verdict = without_thinking(entry.output)
        answer = without_thinking(self.calls[cell].output or "") or ""
        if verdict is None or parse_judge_score(without_echoed_scores(verdict, answer)) is None:
            return None  # it gave no grade: asked again
        return entry.output

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
            return "the task's answer key (answer, tests, grader, rubric, case_sensitive) changed"
        if task.grader == "judge":
            if self.judge is None:
                return None
            return self.judge_mismatch(
                entry.judge_worker_id, entry.judge_hash, entry.judge_gguf_sha256
            )
        if entry.grading_code != self.grading_code:
            return UNLOGGED_GRADING_CODE if entry.grading_code is None else GRADING_CODE_CHANGED
        return None

    def judge_mismatch(
        self, judge_worker_id: str | None, settings: str | None, gguf_digest: str | None
    ) -> str | None:
        """Why a verdict of this judge (its worker id, judge_hash and model file's SHA-256)
        is not one of this run's judge, or None when it is."""
        if self.judge is None:
            return None
        judge_id, judge_settings = self.judge
        if judge_worker_id is None:
            return UNKNOWN_JUDGE
        if judge_worker_id != judge_id:
            return f"they were judged by {judge_worker_id}, this run judges with {judge_id}"
        if settings != judge_settings:
            return (
                f"the settings of judge {judge_id} that shape its verdict (model, base_url or "
                "local, system_prompt, params) changed since it judged them"
            )
        digest = self.gguf_digests[judge_id]
        if gguf_digest not in (None, digest) and digest is not None:
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
        return self.call_cost(cell[1], self.calls[cell])

    def call_cost(self, worker_id: str, call: LogEntry) -> float | None:
        """What one logged answer of the worker costs at the pool's prices now (see
        cost_of)."""
        if call.error_code == CONTEXT_LENGTH_EXCEEDED:
            return 0.0  # nothing generated, nothing billed
        if call.usage is None:
            return call.cost
        return usage_cost(self.config.worker(worker_id), Usage.model_validate(call.usage))

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
            elif reason not in (UNKNOWN_JUDGE, UNLOGGED_GRADING_CODE):  # else said every run
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
        append_line(self.log, entry)
        if entry.event == "judge":
            self._count_judging(entry)
            self._note_verdict(entry)
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
        append_line(self.output, record)
        self.recorded.add(task_id)
        return True


def is_context_refusal(entry: LogEntry) -> bool:
    """Whether a log line is a worker's refusal of a prompt over its context."""
    return entry.event == "call" and entry.error_code == CONTEXT_LENGTH_EXCEEDED


def unique_tasks(tasks: list[Task]) -> dict[str, Task]:
    """The tasks by id; two tasks of one id are a CollectError naming it."""
    by_id = {task.id: task for task in tasks}
    if len(by_id) != len(tasks):
        task_id, count = Counter(task.id for task in tasks).most_common(1)[0]
        raise CollectError(
            f"task ids must be unique, but {task_id!r} is the id of {count} tasks; give every "
            "task its own id (read_tasks refuses such a file, naming the lines)"
        )
    return by_id


def request_hashes(config: PoolConfig, tasks: list[Task]) -> dict[Cell, str]:
    """Each cell's request hash: what a saved answer must have been asked with."""
    return {
        (task.id, worker.id): request_hash(worker, task)
        for task in tasks
        for worker in config.workers
    }


def local_contexts(config: PoolConfig) -> dict[str, int | None]:
    """Each worker's n_ctx (None for a remote worker): a saved context refusal holds while
    it is the same."""
    return {
        worker.id: None if worker.local is None else worker.local.n_ctx for worker in config.workers
    }


def torn_cell_redone(cell: dict[str, str]) -> str:
    """Whose call, grade or verdict a torn call-log line held (`cell`: its torn_line_cell),
    as far as it shows, and what is done again for it."""
    task, worker = cell.get("task_id"), cell.get("worker_id")
    if task is None or worker is None:
        return "the cut line does not show which task and worker it was for; its cell is redone"
    if cell.get("event") == "call":
        return (
            f"it was the call of worker {worker!r} on task {task!r}: if its task is in this "
            "task file, that worker is asked it again"
        )
    if cell.get("event") == "grade":
        return (
            f"it was the grade of the answer of worker {worker!r} to task {task!r}: if its task "
            "is in this task file, that answer, saved before it, is graded again (no call)"
        )
    return (
        f"it was a {cell.get('event', 'call-log')!r} line of task {task!r} and worker "
        f"{worker!r}: its cell is redone"
    )


def torn_record_named(fields: dict[str, str]) -> str:
    """Whose record a torn records-file line held (`fields`: its torn_record_task), as far
    as it shows: its id is its last field, often cut off."""
    family = f" (task family {fields['task']!r})" if "task" in fields else ""
    if "id" not in fields:
        return f"the cut line does not show which task's record it was{family}: "
    return f"it was the record of task {fields['id']!r}{family}: "


def run_judge(config: PoolConfig, judge_worker: str | None) -> tuple[str, str] | None:
    """This run's judge as (its worker id, its judge_hash), None without one."""
    return None if judge_worker is None else (judge_worker, judge_hash(config.worker(judge_worker)))


def append_line(path: Path, row: BaseModel) -> None:
    """Append one line to the records or the call log; a write that fails (a full disk, a
    lost permission) is a CollectError naming the file: every line before it is whole and
    kept, and a line cut short is cut off on the next run."""
    try:
        append_jsonl(path, [row])
    except OSError as error:
        raise CollectError(
            f"cannot write {path}: {error.strerror or error}; everything written before is "
            f"kept (a line cut short is cut off when it runs again): {write_fix(error)}, then "
            "run the same command again"
        ) from error


def _kept_beside(count: int) -> str:
    """What happens to `count` records of other tasks in the output: they stay, beside."""
    kept = one_or_many(count, "kept as it is", "kept as they are")
    return (
        f"{kept}, this run's records are added beside {one_or_many(count, 'it', 'them')} and "
        "its table counts only its own tasks; to keep collections apart, collect into another -o"
    )
