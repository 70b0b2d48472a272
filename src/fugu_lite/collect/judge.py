"""The LLM judge of a collection: each call logged as a `judge` line of the call log, a
reply cut at the judge's token limit said as such, and the check that a run needing a judge
names one of the pool's workers.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable
from typing import Any

from ..scoring.common import without_thinking
from ..scoring.judge import parse_judge_score, without_echoed_scores
from ..tasks import Task
from ..workers.config import PoolConfig
from ..workers.errors import WorkerCallError
from ..workers.output_limits import output_limit
from ..workers.pool import Judge, WorkerPool
from ..workers.results import CallResult
from .errors import CollectError
from .hashes import JUDGE_PARAMS
from .journal import LogEntry
from .state import Cell, CollectState


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
    before_call: Callable[[], None] | None = None,
) -> Judge:
    """The LLM judge of one answer (a cell): a pool worker, its calls logged as `judge` lines
    naming the task, the judged worker, the request hash of the judged answer and the judge's
    settings; each call's result goes to `on_result` too. A reply of this judge to the same
    messages already in the log (a run stopped before its grade line) is reused, not paid
    for again; `before_call` runs once the call has one of the judge's slots, before it is
    sent, and may refuse it by raising (calls wait there while others are in flight)."""
    judge_worker = pool.worker(judge_id)
    judged_request_hash = state.calls[cell].request_hash
    judged_answer = without_thinking(state.calls[cell].output or "") or ""

    async def judge(messages: list[dict[str, str]]) -> str:
        request_hash = hashlib.sha1(json.dumps(messages).encode()).hexdigest()
        saved = state.saved_verdict(cell, request_hash)
        if saved is not None:
            return saved
        result = await pool.chat(judge_id, list(messages), before_call, **JUDGE_PARAMS)
        state.add(_judge_entry(state, cell, judged_request_hash, judge_id, request_hash, result))
        if on_result is not None:
            await on_result(result)
        return _verdict_of(result, judge_worker.params, judge_id, judged_answer)

    return judge


def _judge_entry(
    state: CollectState,
    cell: Cell,
    judged_request_hash: str,
    judge_id: str,
    request_hash: str,
    result: CallResult,
) -> LogEntry:
    """The call log's `judge` line of one call to the judge about the cell's answer (of
    request `judged_request_hash`)."""
    task_id, worker_id = cell
    _, judge_settings = state.judge or (None, None)
    return LogEntry(
        event="judge", task_id=task_id, worker_id=judge_id,
        judged_worker_id=worker_id, judged_request_hash=judged_request_hash,
        request_hash=request_hash, judge_hash=judge_settings,
        judge_gguf_sha256=state.gguf_digests.get(judge_id),
        finish_reason=finish_reason(result),
        output=result.output, cost=result.cost, latency_s=result.latency_s,
        usage=None if result.usage is None else result.usage.model_dump(),
        error=result.error, error_kind=result.error_kind, attempts=result.attempts,
        started_at=result.started_at, finished_at=result.finished_at,
    )  # fmt: skip


def _verdict_of(
    result: CallResult, params: dict[str, Any], judge_id: str, judged_answer: str
) -> str:
    """The judge's reply, or why it gives none: a failed call (WorkerCallError), or a reply
    cut at its token limit before a score (JudgeReplyCut)."""
    if result.error is not None or result.output is None:
        raise WorkerCallError(result.error_kind or "server", result.error or "no output")
    if _hit_token_limit(result) and not _scored(result.output, judged_answer):
        name, limit = output_limit(params) or ("max_tokens", "of its server")
        raise JudgeReplyCut(
            f"its reply stopped at its token limit ({name} {limit}) before a "
            f"`SCORE: N` line; raise params.{name} of worker {judge_id} (the judge "
            "may reason before it scores) or judge with another worker (--judge)"
        )
    return result.output


def _scored(reply: str, judged_answer: str) -> bool:
    """Whether the judge's reply gives a score after its thinking (a draft is none), read as
    the judge grader reads it: the judged answer's own score lines, echoed, are none."""
    verdict = without_thinking(reply)
    if verdict is None:
        return False
    return parse_judge_score(without_echoed_scores(verdict, judged_answer)) is not None


def _hit_token_limit(result: CallResult) -> bool:
    return finish_reason(result) == "length"


def finish_reason(result: CallResult) -> str | None:
    """Why the worker's answer ended ("stop", "length": cut at its token limit, ...)."""
    choices = (result.raw or {}).get("choices") or [{}]
    reason = choices[0].get("finish_reason") if isinstance(choices[0], dict) else None
    return reason if isinstance(reason, str) else None


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
