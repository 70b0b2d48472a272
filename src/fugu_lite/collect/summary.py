"""What a collection run did: its counters (RunCounters), the summary built from them and
the run's state (summarize), the table printed at the end and the lines said under it.
"""

from __future__ import annotations

from pydantic import BaseModel
from rich import box
from rich.table import Table

from ..scoring.common import without_thinking
from ..text import console_name, console_text, one_or_many, usd
from ..workers.config import PoolConfig
from ..workers.output_limits import output_limit
from .journal import LogEntry
from .state import Cell, CollectState, JudgeSummary


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
    filtered: int = 0  # graded answers (all runs) its content filter withheld or cut
    cut_in_thinking: int = 0  # graded answers (all runs) that stopped inside their <think>
    refusal: str | None = None  # this run: the worker's words on the first of them
    max_tokens_refusal: str | None = None  # ... on the first of those over_max_tokens
    grade_error: str | None = None  # this run: why the first of them could not be scored
    mean_score: float | None
    cost: float  # of the graded answers whose cost is known
    unpriced: int = 0  # graded answers whose cost is unknown: the worker reported no usage
    mean_latency_s: float | None
    down: str | None = None  # why the worker was taken as down this run
    restarts: int = 0  # this run: its local server exited on its own and was started again


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


def summarize(state: CollectState, counters: RunCounters) -> CollectSummary:
    pending_tasks = state.pending_tasks()
    # a written record's grades, even those this run's grading would give differently, and
    # its answers to an earlier request of their worker
    answers = {**state.earlier_calls, **state.calls}
    grades = graded_cells(state)
    workers = [
        worker_summary(worker_id, state, counters, answers, grades, pending_tasks)
        for worker_id in state.worker_ids
    ]
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


def graded_cells(state: CollectState) -> dict[Cell, LogEntry]:
    """Every graded (task, worker) cell's grade: earlier runs', written records', this run's."""
    earlier = {cell: g for cell, g in state.earlier_grades.items() if cell not in state.calls}
    written = {cell: entry for cell, entry in state.stale.items() if cell[0] in state.recorded}
    return {**earlier, **written, **state.grades}


def worker_summary(
    worker_id: str,
    state: CollectState,
    counters: RunCounters,
    answers: dict[Cell, LogEntry],
    grades: dict[Cell, LogEntry],
    pending_tasks: list[str],
) -> WorkerSummary:
    """One worker's row: its graded answers over all runs, and this run's counters."""
    graded = [cell for cell in grades if cell[1] == worker_id and cell[0] in state.tasks]
    calls = [answers[cell] for cell in graded]
    unlogged = unlogged_records(worker_id, state, grades)
    scores = [float(grades[cell].score or 0.0) for cell in graded] + [r for r, _ in unlogged]
    costs = [state.call_cost(worker_id, call) for call in calls] + [c for _, c in unlogged]
    latencies = [call.latency_s for call in calls if call.latency_s is not None]
    return WorkerSummary(
        worker_id=worker_id,
        done=len(graded) + len(unlogged),
        pending=sum((task_id, worker_id) not in state.grades for task_id in pending_tasks),
        calls=counters.calls[worker_id],
        errors=counters.errors[worker_id],
        failed_calls=counters.failed_calls[worker_id],
        call_error=counters.call_error.get(worker_id, (None, None))[0],
        call_error_kind=counters.call_error.get(worker_id, (None, None))[1],
        ungraded=counters.ungraded[worker_id],
        refused=counters.refused[worker_id],
        cut=sum(call.finish_reason == "length" for call in calls),
        filtered=sum(call.finish_reason == "content_filter" for call in calls),
        cut_in_thinking=sum(map(cut_in_thinking, calls)),
        refusal=counters.refusal.get(worker_id),
        over_max_tokens=counters.over_max_tokens[worker_id],
        max_tokens_refusal=counters.max_tokens_refusal.get(worker_id),
        grade_error=counters.grade_error.get(worker_id),
        mean_score=sum(scores) / len(scores) if scores else None,
        cost=sum(cost for cost in costs if cost is not None),
        unpriced=sum(cost is None for cost in costs),
        mean_latency_s=sum(latencies) / len(latencies) if latencies else None,
        down=counters.down.get(worker_id),
        restarts=counters.restarts[worker_id],
    )


def unlogged_records(
    worker_id: str, state: CollectState, grades: dict[Cell, LogEntry]
) -> list[tuple[float, float | None]]:
    """The worker's reward and cost in each written record of this task file whose answer
    the call log does not hold (records continued with a new --log), as the records hold
    them: the table counted only the answers in the call log ('6/6 records', 3 done)."""
    index = state.worker_ids.index(worker_id)
    rows = []
    for task_id in state.tasks:
        if task_id not in state.recorded or (task_id, worker_id) in grades:
            continue
        costs = state.written_costs[task_id]
        rows.append(
            (state.written_rewards[task_id][index], None if costs is None else costs[index])
        )
    return rows


def cut_in_thinking(call: LogEntry) -> bool:
    """Whether a worker's answer stopped inside its thinking: a `<think>` never closed, or
    nothing after it at the token limit (a reasoning parser's `reasoning_content` holds the
    thinking then, and the content is empty)."""
    answer = without_thinking(call.output or "")
    return answer is None or (call.finish_reason == "length" and not answer.strip())


# A 4xx other than 408 and 429: the worker refused the request itself.
CLIENT_ERROR_HINT = (
    "; a refused request is refused again until the worker's settings in the pool (model, "
    "params, api_key_env) or the task are fixed"
)


def end_of_run_lines(summary: CollectSummary, config: PoolConfig) -> list[str]:
    """What to say after the table (on stderr), per worker: why its calls failed, how many
    answers were cut at its token limit (or inside their thinking), withheld by its content
    filter or refused as too long, why answers could not be
    graded, why it was taken as down."""
    return [line for worker in summary.workers for line in worker_lines(worker, config, summary)]


def worker_lines(worker: WorkerSummary, config: PoolConfig, summary: CollectSummary) -> list[str]:
    """One worker's lines after the table, in this order; none for a worker that did well."""
    lines = [
        failed_calls_line(worker),
        cut_line(worker, config),
        cut_in_thinking_line(worker, config),
        filtered_line(worker),
        over_context_line(worker, summary.log),
        over_max_tokens_line(worker, config, summary.log),
        unpriced_line(worker),
        ungraded_line(worker),
        restarts_line(worker),
        down_line(worker),
    ]
    return [line for line in lines if line is not None]


def token_limit(worker: WorkerSummary, config: PoolConfig) -> tuple[str, object]:
    """The worker's output-token limit as (its name, its value), its server's when unset."""
    return output_limit(config.worker(worker.worker_id).params) or ("max_tokens", "of its server")


def failed_calls_line(worker: WorkerSummary) -> str | None:
    if not worker.call_error or worker.down:  # a down worker's line says why
        return None
    return (
        f"[yellow]warning: {worker.failed_calls} call{'s' * (worker.failed_calls != 1)} "
        f"to {worker.worker_id} failed[/yellow] (not scored; asked again when you run "
        f"this again{CLIENT_ERROR_HINT if worker.call_error_kind == 'client' else ''}); "
        f"the first: {console_text(worker.call_error)}"
    )


def cut_line(worker: WorkerSummary, config: PoolConfig) -> str | None:
    if not worker.cut:
        return None
    name, limit = token_limit(worker, config)
    one = worker.cut == 1
    return (
        f"[yellow]note:[/yellow] {worker.cut} of {graded_answers(worker)} of "
        f"{console_name(worker.worker_id)} stopped at its token limit ({name} "
        f"{limit}) and {'was graded as it is' if one else 'were graded as they are'}, "
        f"often without {'its' if one else 'their'} final answer; for "
        f"whole answers raise its params.{name} (a new request: unfinished tasks are "
        "asked again)"
    )


def graded_answers(worker: WorkerSummary) -> str:
    """The worker's graded answers, counted: "the 2 graded answers", "the 1 graded answer"."""
    return f"the {worker.done} graded {one_or_many(worker.done, 'answer', 'answers')}"


def cut_in_thinking_line(worker: WorkerSummary, config: PoolConfig) -> str | None:
    if not worker.cut_in_thinking:
        return None
    name, limit = token_limit(worker, config)
    one = worker.cut_in_thinking == 1
    return (
        f"[yellow]note:[/yellow] {worker.cut_in_thinking} of {graded_answers(worker)} of "
        f"{console_name(worker.worker_id)} stopped inside {'its' if one else 'their'} "
        f"thinking ({name} {limit}) and {'has' if one else 'have'} no answer: scored 0; for "
        f"answers raise its params.{name} so it can think and answer (a new request: "
        "unfinished tasks are asked again)"
    )


def filtered_line(worker: WorkerSummary) -> str | None:
    if not worker.filtered:
        return None
    one = worker.filtered == 1
    return (
        f"[yellow]note:[/yellow] {worker.filtered} of {graded_answers(worker)} "
        f"of {console_name(worker.worker_id)} {'was' if one else 'were'} withheld or cut by "
        f"its provider's content filter and graded as {'it is' if one else 'they are'}, "
        f"often empty ({'its call line says' if one else 'their call lines say'} "
        "finish_reason content_filter)"
    )


def over_context_line(worker: WorkerSummary, log: str) -> str | None:
    if not worker.refusal:
        return None
    over_context = worker.refused - worker.over_max_tokens
    many = over_context != 1
    return (
        f"[yellow]warning: {over_context} prompt{'s' * many} "
        f"{'are' if many else 'is'} longer than the context of {worker.worker_id}"
        f"[/yellow], which refused {'them' if many else 'it'}: scored 0 (routing such a "
        f"prompt there gives no answer); to have {'them' if many else 'it'} answered, give "
        "the worker a longer context (a local worker's n_ctx) and collect into a new -o "
        f"with --log {console_text(log)}; the first: {console_text(worker.refusal)}"
    )


def over_max_tokens_line(worker: WorkerSummary, config: PoolConfig, log: str) -> str | None:
    if not worker.max_tokens_refusal:
        return None
    name, limit = output_limit(config.worker(worker.worker_id).params) or ("", "")
    many = worker.over_max_tokens != 1
    return (
        f"[yellow]warning: {worker.over_max_tokens} prompt{'s' * many} "
        f"{'fit' if many else 'fits'} the context of {worker.worker_id}, but not "
        f"beside its {name} of {limit}[/yellow], and it refused "
        f"{'them' if many else 'it'}: scored 0 as a prompt over its context; to have "
        f"{'them' if many else 'it'} answered, lower its params.{name} (a new request: "
        "unfinished tasks are asked again; for the written records, collect into a new "
        f"-o with --log {console_text(log)}); the first: "
        f"{console_text(worker.max_tokens_refusal)}"
    )


def unpriced_line(worker: WorkerSummary) -> str | None:
    if not worker.unpriced:
        return None
    many = worker.unpriced != 1
    return (
        f"[yellow]warning: {worker.unpriced} graded answer{'s' * many} of "
        f"{worker.worker_id} {'have' if many else 'has'} no cost[/yellow]: the worker "
        "reported no token counts (usage), so the records of "
        f"{'their' if many else 'its'} tasks have no costs, which cost-aware training "
        "and evaluation need (its cost in the table counts only the answers it priced)"
    )


def ungraded_line(worker: WorkerSummary) -> str | None:
    if not worker.grade_error:
        return None
    return (
        f"[yellow]warning: {worker.ungraded} answer{'s' * (worker.ungraded != 1)} of "
        f"{worker.worker_id} could not be graded[/yellow] (not scored; graded again, "
        f"without new calls, when you run this again); the first: "
        f"{console_text(worker.grade_error)}"
    )


def restarts_line(worker: WorkerSummary) -> str | None:
    if not worker.restarts or worker.down:
        return None
    many = worker.restarts != 1
    return (
        f"[yellow]warning: the llama.cpp server of {worker.worker_id} exited "
        f"{worker.restarts} time{'s' * many} this run[/yellow] and was started again "
        f"(the last lines of its log are above); the calls it failed then are asked "
        "again when you run this again"
    )


def down_line(worker: WorkerSummary) -> str | None:
    if not worker.down:
        return None
    return (
        f"[red]warning: worker {worker.worker_id} is down[/red] "
        f"({console_text(worker.down)}); its {worker.pending} pending "
        f"{one_or_many(worker.pending, 'cell is', 'cells are')} retried when you run this again"
    )


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
            f"call{'s' * (judge.calls != 1)}, cost "
            f"{cost_text_of(judge.cost, judge.unpriced, judge.calls)}"
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
            cost_text_of(worker.cost, worker.unpriced, worker.done),
            "-" if worker.mean_latency_s is None else f"{worker.mean_latency_s:.2f}s",
        )
    return table


def cost_text_of(cost: float, unpriced: int, answers: int) -> str:
    """A cost in the table (the known part of `answers` answers' cost): `-` for no answers
    (as their score and latency), `?` when none of them has a known cost (their worker
    reported no usage), `+?` after the known part when some have none."""
    if not answers:  # '$0' read as answers given for free
        return "-"
    if not unpriced:
        return usd(cost)
    return "?" if unpriced == answers else f"{usd(cost)}+?"
