"""Routing decisions and their outcomes as JSON lines, written by a background thread.

One line per routed request, shaped so that a later job can turn outcomes into new
RewardRecords: the prompt hash (the same as `RewardRecord.prompt_hash` of the messages),
the router's workers and probabilities, the worker that answered, the outcome, latency,
tokens and cost. Message content is left out unless the server was started with it on.
"""

from __future__ import annotations

import logging
import queue
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from ..collect.journal import LONE_SURROGATE
from ..io import append_jsonl
from ..schemas import ChatMessage, message_text, prompt_hash

logger = logging.getLogger(__name__)
# Decisions kept in memory while the log cannot be written (a full disk); past this many,
# the oldest are dropped (and counted in the server's log) rather than memory filled.
MAX_UNWRITTEN = 10_000


class DecisionLogEntry(BaseModel):
    time: str = Field(default_factory=lambda: datetime.now(UTC).isoformat())
    request_id: str
    model: str
    prompt_hash: str
    worker_ids: list[str]
    probabilities: list[float]
    """Aligned with worker_ids, as RewardRecord.rewards are."""
    chosen: str
    """The router's first choice."""
    worker: str | None
    """The worker that answered (None when none did)."""
    fallback: bool
    outcome: str
    """ok, error (every worker failed or rejected it), client_disconnected, stream_error,
    shutting_down (the server stopped before it was answered)."""
    status: int
    attempts: list[dict[str, Any]]
    stream: bool
    ranking: list[str]
    """The workers the request allowed, most probable first (the fallback order)."""
    cost_weight: float | None = None
    routing_latency_s: float
    latency_s: float
    usage: dict[str, Any] | None = None
    cost: float | None = None
    messages: list[dict[str, Any]] | None = None

    def as_row(self) -> dict[str, Any]:
        """Every field (None included, so each line has the same keys) except `messages`
        when content logging is off."""
        row = self.model_dump(exclude={"messages"} if self.messages is None else set())
        return writable(row)  # type: ignore[no-any-return]


def writable(value: Any) -> Any:
    """`value` with each half of a surrogate pair in its strings as U+FFFD. A worker's error
    message may hold one (`"\\ud83d"`: an emoji cut in two by a server counting UTF-16
    units), which no UTF-8 line holds: the writer thread died on it, and every decision
    after it was lost."""
    if isinstance(value, str):
        return LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {key: writable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [writable(item) for item in value]
    return value


def conversation_hash(messages: list[ChatMessage]) -> str:
    """The hash a RewardRecord with these messages as its prompt would have."""
    return prompt_hash("\n".join(f"{m.role}: {message_text(m)}" for m in messages))


class DecisionLog:
    """Appends entries from a queue in a daemon thread, so the event loop never waits
    for the disk (append_jsonl fsyncs each batch)."""

    def __init__(self, path: str | Path | None, log_content: bool = False) -> None:
        self.path = Path(path) if path else None
        self.log_content = log_content
        self._queue: queue.Queue[DecisionLogEntry | _FlushMarker | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        # One append at a time: after a close that timed out, the writer thread may still be
        # appending while a later decision is written at once (_write_after_close), and an
        # append that fails truncates the file back to where it began.
        self._appending = threading.Lock()
        self._failing = False
        self._dropped = 0  # decisions dropped (past MAX_UNWRITTEN) since the log last took any
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._thread = threading.Thread(target=self._run, name="fugu-decision-log", daemon=True)
            self._thread.start()

    @property
    def enabled(self) -> bool:
        return self.path is not None

    def write(self, entry: DecisionLogEntry, messages: list[dict[str, Any]] | None) -> None:
        if self.path is None:
            return
        if self.log_content:
            entry = entry.model_copy(update={"messages": messages})
        if self._thread is None:  # closed: queued, nothing would ever write it
            self._write_after_close(entry)
            return
        self._queue.put(entry)

    def _write_after_close(self, entry: DecisionLogEntry) -> None:
        """A request answered as the server stops (a 503 shutting_down) may log its decision
        after close(): written here, synchronously."""
        assert self.path is not None
        try:
            with self._appending:
                append_jsonl(self.path, [entry.as_row()])
        except OSError as error:
            logger.error(
                "the decision of request %s was never written to the decision log %s (%s; "
                "the server was stopping)", entry.request_id, self.path, error.strerror or error,
            )  # fmt: skip

    def close(self, timeout_s: float = 10.0) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=timeout_s)
            if self._thread.is_alive():  # a stalled disk: the process may end before it writes
                logger.error(
                    "the decision log %s was still being written %g s after the server "
                    "began to stop; the decisions not yet on disk (%d still queued) may be "
                    "lost", self.path, timeout_s, max(self._queue.qsize() - 1, 0),
                )  # fmt: skip
            self._thread = None

    def flush(self, timeout_s: float = 10.0) -> None:
        """Wait until every queued entry is on disk (tests, shutdown)."""
        done = threading.Event()
        if self._thread is None:
            return
        self._queue.put(_FlushMarker(done))
        done.wait(timeout_s)

    def _run(self) -> None:
        unwritten: list[dict[str, Any]] = []
        while True:
            entries = [self._queue.get()]
            while not self._queue.empty():
                entries.append(self._queue.get_nowait())
            unwritten += [
                entry.as_row() for entry in entries if isinstance(entry, DecisionLogEntry)
            ]
            if unwritten:
                unwritten = self._append(unwritten)
            for entry in entries:
                if isinstance(entry, _FlushMarker):
                    entry.done.set()
            if any(entry is None for entry in entries):
                if unwritten:
                    logger.error(
                        "%d decisions were never written to the decision log %s (it could "
                        "not be written until the server stopped)",
                        len(unwritten) + self._dropped, self.path,
                    )  # fmt: skip
                return

    def _append(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Append `rows` whole or not at all (a full disk left half a line, and the next
        decision glued to it); returns those not written, to try again with the next ones."""
        assert self.path is not None
        try:
            with self._appending:
                append_jsonl(self.path, rows)  # (makes its folder again, if deleted meanwhile)
        except OSError as error:
            if not self._failing:
                logger.error(
                    "could not append to the decision log %s (%s); its decisions are kept "
                    "in memory (up to %d) and written once it can be", self.path,
                    error.strerror or error, MAX_UNWRITTEN,
                )  # fmt: skip
            self._failing = True
            if len(rows) > MAX_UNWRITTEN:
                if not self._dropped:  # once, not a line for every decision while it fails
                    logger.error(
                        "more than %d decisions of %s are unwritten: the oldest are dropped "
                        "from now on (how many: once it is written again, or the server stops)",
                        MAX_UNWRITTEN, self.path,
                    )  # fmt: skip
                self._dropped += len(rows) - MAX_UNWRITTEN
            return rows[-MAX_UNWRITTEN:]
        if self._failing:
            dropped = f" ({self._dropped} decisions were dropped meanwhile)"
            dropped = dropped if self._dropped else ""
            logger.warning("the decision log %s is written again%s", self.path, dropped)
        self._failing = False
        self._dropped = 0
        return []


class _FlushMarker:
    def __init__(self, done: threading.Event) -> None:
        self.done = done
