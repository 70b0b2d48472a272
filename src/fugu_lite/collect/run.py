"""Reward collection: every worker answers every task, a grader scores each answer, and the
scores become RewardRecords.

Two append-only JSONL files, each line flushed and fsynced as soon as it is known:

- the call log (default `<output stem>.calls.jsonl`): one `call` line per worker call
  (prompt hash, worker, output, usage, cost, latency, error), one `judge` line per call to
  the judge (the task, the judged worker, the request hash of the answer it judged, the
  judge's settings and its reply, read again by a run that stopped before the grade) and
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

This module runs a collection (collect, the Collector loop); what is already done is in
state.py, the files' format in journal.py, their lock in lock.py, the hashes that say what
still fits in hashes.py, the judge's wrapper in judge.py, the run's counters and its
end-of-run summary in summary.py, the stop of a run on SIGTERM in sigterm.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ..progress import LineProgress
from ..schemas import prompt_hash
from ..scoring import Grade, grade
from ..tasks import Task
from ..text import console_text, notes_console, one_or_many, visible_controls
from ..workers.config import PoolConfig, one_call_at_a_time, pool_notes
from ..workers.errors import (
    CONTEXT_LENGTH_EXCEEDED,
    NO_QUOTA,
    refused_for_max_tokens,
    worker_refusal,
)
from ..workers.local_server import segfault_hint
from ..workers.output_limits import output_limit
from ..workers.pool import Judge, WorkerPool
from ..workers.results import CallResult
from .errors import CollectError
from .journal import LogEntry, default_log_path
from .judge import JudgeDown, check_judge, finish_reason, logging_judge
from .lock import exclusive_files
from .state import Cell, CollectState
from .summary import CollectSummary, RunCounters, end_of_run_lines, summarize, summary_table

logger = logging.getLogger(__name__)

# what the CLI and the demo take from here
__all__ = [
    "CollectError",
    "Collector",
    "collect",
    "default_log_path",
    "end_of_run_lines",
    "summary_table",
]

DOWN_AFTER = 3  # consecutive failures of these kinds (after the pool's retries) = worker down
# A 5xx counts too: a gateway whose model is gone (502/503) answers every call alike.
DOWN_KINDS = frozenset({"connection", "timeout", "server"})
# A worker refusing every call alike for its own settings (workers.errors.worker_refusal:
# a bad key, no access, a wrong model name or base_url) is down after this many in a row; not
# at the first one: a proxy may answer one by mistake.
REFUSED_AFTER = 3
# A local worker's llama.cpp server that exits on its own (a crash, the OOM killer) is started
# again, at most this often per run: a prompt that crashes it would otherwise do so for ever.
MAX_RESTARTS = 3
SAVED_ANSWERS = "saved answers to grade"  # the bar of the answers graded before any call


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
        # the first grading task that failed (its line could not be written): ends the run
        self.grading_failure: BaseException | None = None

    async def run(self) -> None:
        for task_id in self.state.pending_tasks():
            self.counters.records_written += self.state.write_ready_record(task_id)
        await self._grade_saved_answers()
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
            self._raise_grading_failure()
        finally:
            for pending in self.grading:
                pending.cancel()

    async def _grade_saved_answers(self) -> None:
        """Grade the saved answers without a grade of this run's grading (a run stopped
        mid-grade, a grader or judge that failed, a judge changed), under a bar of their own:
        judging them again may take long, and the workers' bars count calls still to make."""
        cells = self.state.cells_to_grade()
        progress = self.progress
        bar = None
        if progress is not None and cells:
            bar = progress.add_task(SAVED_ANSWERS, total=len(cells), status="")

        async def grade_one(cell: Cell) -> None:
            await self._grade(*cell)
            if progress is not None and bar is not None:
                progress.update(bar, advance=1)

        await asyncio.gather(*(grade_one(cell) for cell in cells))

    async def _consume(self, worker_id: str, queue: asyncio.Queue[str]) -> None:
        while not queue.empty():
            self._raise_grading_failure()
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
            graded.add_done_callback(self._grading_done)
        else:
            self.counters.errors[worker_id] += 1
            self.counters.failed_calls[worker_id] += 1
            failure = f"task {visible_controls(task_id)}: {result.error}"
            self.counters.call_error.setdefault(worker_id, (failure, result.error_kind))
            await self._failed(worker_id, result)
            self._advance(worker_id)  # an answer's cell moves its bar once graded (_grade)

    def _grading_done(self, graded: asyncio.Task[None]) -> None:
        """A grading task that raised (its grade line could not be written, a full disk) was
        dropped unseen: the calls went on, and Python printed its traceback at exit."""
        self.grading.discard(graded)
        if not graded.cancelled() and graded.exception() is not None:
            self.grading_failure = self.grading_failure or graded.exception()

    def _raise_grading_failure(self) -> None:
        if self.grading_failure is not None:
            raise self.grading_failure

    def _judge(self, judge_id: str, cell: Cell) -> Judge:
        """The judge of one answer: not asked once its worker is down (a bad key refuses every
        verdict alike), and taken as down as a worker is, by its failed calls."""

        def not_down() -> None:
            down = self.counters.down.get(judge_id)
            if down is not None:
                raise JudgeDown(f"worker {judge_id} is down ({down}); not asked")

        return logging_judge(self.pool, judge_id, self.state, cell, self._judged, not_down)

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
            self.counters.down[worker_id] = self._server_gone(worker_id)
        elif result.error_code == NO_QUOTA:  # every later call would be refused alike
            # (the error says what to do: add credit, describe_failure's NO_QUOTA_REFUSAL)
            self.counters.down[worker_id] = (
                f"its provider says the account's quota is used up ({result.error})"
            )
        elif self.counters.consecutive_down[worker_id] >= self.down_after:
            self.counters.down[worker_id] = (
                f"{self.down_after} calls in a row failed ({result.error_kind}): {result.error}"
            )
        elif refusals >= REFUSED_AFTER:
            self.counters.down[worker_id] = (
                f"its last {refusals} calls were refused with HTTP {result.status_code}; the "
                f"last: {result.error}"
            )

    def _server_gone(self, worker_id: str) -> str:
        """Why a worker whose llama.cpp server exited, not to be started again this run, is
        down; the last lines of its log are logged first, as a restart's are: the log is
        removed when the run ends."""
        code, tail = self.pool.exit_report(worker_id)
        restarts = self.counters.restarts[worker_id]
        again = f" again after {restarts} restarts this run" if restarts else ""
        exited = f"exited (code {code}){segfault_hint(code)}{again}"
        logger.warning(
            "local worker %s: its llama.cpp server %s; not started again. Last lines of its "
            "log:\n%s",
            worker_id, exited, tail,
        )  # fmt: skip
        return f"its local server process {exited}; its log's last lines are above"

    def _count_refusal(self, worker_id: str, result: CallResult) -> int:
        """How many of the worker's calls in a row, this one the last, were refused with this
        call's status (401/403/404); 0 for any other failure."""
        refused = worker_refusal(result.status_code, result.error_code) is not None
        if result.error_kind != "client" or not refused:
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
        async with self._grading_slot(task):
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
                local_hash=call.local_hash, gguf_sha256=call.gguf_sha256,
                grading_hash=self.state.grading_hashes[task_id],
                grading_code=None if task.grader == "judge" else self.state.grading_code,
                judge_worker_id=judge_worker_id, judge_hash=judge_settings,
                judge_gguf_sha256=self.state.gguf_digests.get(judge_worker_id or ""),
                score=verdict.score, grade_error=verdict.error, detail=verdict.detail,
            )
        )  # fmt: skip
        self.counters.records_written += self.state.write_ready_record(task_id)
        # once graded, not once answered: a slow judge still had most answers to judge when
        # every bar was full (no-op for saved answers, graded before the bars are drawn)
        self._advance(worker_id)

    def _grading_slot(self, task: Task) -> contextlib.AbstractAsyncContextManager[object]:
        """One of the grade slots for a grader that runs here (the code grader's sandbox takes
        a core); the judge's calls wait for the judge worker's max_concurrency instead: two
        slots held judging to two calls at a time, however many the judge takes."""
        return contextlib.nullcontext() if task.grader == "judge" else self.grade_slots

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

    def _advance(self, worker_id: str, by: int = 1) -> None:
        """Move the worker's bar on `by` tasks, its status saying its errors so far."""
        if self.progress is None or worker_id not in self.bars:
            return
        errors = self.counters.errors[worker_id]
        status = (
            "[red]down[/red]"
            if worker_id in self.counters.down
            else (
                f"[yellow]{errors} {one_or_many(errors, 'error', 'errors')}[/yellow]"
                if errors
                else ""
            )
        )
        self.progress.update(self.bars[worker_id], advance=by, status=status)


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
    log_missing = log is None and not log_path.exists()
    with exclusive_files([output, log_path]):
        state = _resumed_state(config, tasks, output, log_path, judge_worker, log_missing)
        console = console or notes_console()
        notes = _say_what_no_longer_fits(state, console)
        pool = WorkerPool(one_call_at_a_time(config))
        started = _pool_to_start(pool, config, state, console)
        async with started:
            with _progress(show_progress, console) as progress:
                collector = Collector(
                    pool, state, judge_worker=judge_worker, down_after=down_after, progress=progress
                )
                await collector.run()
        return summarize(state, collector.counters).model_copy(update=notes.model_dump())


class SavedWorkNotes(BaseModel):
    """The notes on saved answers, grades and costs that no longer fit this run."""

    reasks: list[str]
    regrades: list[str]
    reprices: list[str]


def _resumed_state(
    config: PoolConfig,
    tasks: list[Task],
    output: Path,
    log_path: Path,
    judge_worker: str | None,
    log_missing: bool,
) -> CollectState:
    """What the two files say is done; records whose default call log is missing are
    refused while tasks remain (see CollectState.missing_log)."""
    state = CollectState(config, tasks, output, log_path, judge_worker).load()
    if log_missing and state.recorded and state.pending_tasks():
        raise CollectError(state.missing_log())
    return state


def _say_what_no_longer_fits(state: CollectState, console: Console) -> SavedWorkNotes:
    """Warn of torn lines cut off, and note records of other tasks, saved answers asked
    again, grades given again and records at other prices."""
    for message in state.torn:
        console.print(f"[yellow]warning:[/yellow] {console_text(message)}")
    for message in state.other_tasks_notes():
        console.print(f"[yellow]note:[/yellow] {console_text(message)}")
    notes = SavedWorkNotes(
        reasks=state.reask_notes(), regrades=state.regrade_notes(), reprices=state.reprice_notes()
    )
    for message in [*notes.reasks, *notes.regrades, *notes.reprices]:
        console.print(f"[yellow]note:[/yellow] {console_text(message)}")
    return notes


def _pool_to_start(
    pool: WorkerPool, config: PoolConfig, state: CollectState, console: Console
) -> contextlib.AbstractAsyncContextManager[WorkerPool]:
    """The pool when tasks remain (with its notes, and a line while local servers load);
    a finished collection calls no worker: its summary needs neither their local servers
    (minutes to load a large GGUF) nor their API keys."""
    if not state.pending_tasks():
        return contextlib.nullcontext(pool)
    for message in pool_notes(config):
        console.print(f"[yellow]note:[/yellow] {console_text(message)}")
    local = [worker.id for worker in config.workers if worker.local is not None]
    if local:  # silent otherwise for as long as the models load
        console.print(f"[dim]starting the llama.cpp servers of {', '.join(local)}[/dim]")
    return pool


@contextmanager
def _progress(show: bool, console: Console) -> Iterator[Progress | LineProgress | None]:
    if not show:
        yield None
        return
    if not console.is_interactive:  # a log, a dumb terminal: rich draws its bars once, at the end
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
