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

from ..io import append_jsonl
from ..schemas import ChatMessage, message_text, prompt_hash

logger = logging.getLogger(__name__)


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
    """ok, error (every worker failed or rejected it), client_disconnected, stream_error."""
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
        return self.model_dump(exclude={"messages"} if self.messages is None else set())


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
        self._queue.put(entry)

    def close(self, timeout_s: float = 10.0) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=timeout_s)
            self._thread = None

    def flush(self, timeout_s: float = 10.0) -> None:
        """Wait until every queued entry is on disk (tests, shutdown)."""
        done = threading.Event()
        if self._thread is None:
            return
        self._queue.put(_FlushMarker(done))
        done.wait(timeout_s)

    def _run(self) -> None:
        assert self.path is not None
        while True:
            entries = [self._queue.get()]
            while not self._queue.empty():
                entries.append(self._queue.get_nowait())
            rows = [entry.as_row() for entry in entries if isinstance(entry, DecisionLogEntry)]
            if rows:
                try:
                    append_jsonl(self.path, rows)
                except OSError:
                    logger.exception("could not append to the decision log %s", self.path)
            for entry in entries:
                if isinstance(entry, _FlushMarker):
                    entry.done.set()
            if any(entry is None for entry in entries):
                return


class _FlushMarker:
    def __init__(self, done: threading.Event) -> None:
        self.done = done
