"""Relaying a worker's stream to the client as server-sent events in OpenAI's chunk format,
re-labelled as the router's model, with usage as the client asked and `data: [DONE]`."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from ..workers.errors import WorkerCallError
from ..workers.streams import AFTER_STREAM_START
from .api_error import ApiError
from .auth import Redactor
from .dispatch import OpenedStream, close_quietly, describe_stream_error
from .errors import without_addresses
from .responses import with_text_content

logger = logging.getLogger(__name__)

CLIENT_CLOSED_STATUS = 499  # nginx's convention; nobody reads it, the log and metrics do
SHUTTING_DOWN = "shutting_down"  # the outcome and error code of a request cut by a shutdown

# (usage, outcome, HTTP status, the worker's error kind if it failed) once the stream is
# over, however it ended.
DoneCallback = Callable[[dict[str, Any] | None, str, int, str | None], None]


class RelayedStream:
    """`events()` feeds a StreamingResponse; `finalize()` (its background task) makes sure
    the upstream stream is closed and the outcome recorded even when the client left
    before the first event was sent."""

    def __init__(
        self,
        opened: OpenedStream,
        *,
        request_id: str,
        model: str,
        include_usage: bool,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        idle_timeout_s: float,
        redact: Redactor,
        on_done: DoneCallback,
        worker_hosts: set[str],
        first_extra: dict[str, Any] | None = None,
    ) -> None:
        self.opened = opened
        self.request_id = request_id
        self.model = model
        self.include_usage = include_usage
        self.messages = messages
        self.tools = tools  # the request's tools and deprecated functions, for estimated_usage
        self.idle_timeout_s = idle_timeout_s
        self.redact = redact
        self.on_done = on_done
        self.first_extra = first_extra
        self.worker_hosts = worker_hosts  # kept out of the client's error event
        self.usage: dict[str, Any] | None = None
        self.worker_usage: dict[str, Any] | None = None
        self.content_chunks = 0
        self.failed_kind: str | None = None
        # One `created` for every chunk, as OpenAI's: llama.cpp's server stamps each chunk
        # with its own second, and a usage chunk made here would have had another.
        self.created = int(time.time())
        self._done = False
        # Set when the server's shutdown cut the stream (RelayResponse): its task cancelled.
        self.cut_by_shutdown = False

    async def events(self) -> AsyncIterator[str]:
        outcome, status = "client_disconnected", CLIENT_CLOSED_STATUS
        try:
            async for event in self._relay():
                yield event
            outcome, status = "ok", 200
        except (WorkerCallError, TimeoutError) as error:
            outcome, status = "stream_error", 502
            self.failed_kind = describe_stream_error(self.opened.worker, error)[0]
            interrupted = self._interrupted(error)
            # the only word of it on the server: the decision log has the outcome alone
            logger.warning("%s", interrupted["error"]["message"])
            shown = without_addresses(interrupted["error"]["message"], self.worker_hosts)
            interrupted["error"]["message"] = shown
            yield sse(interrupted)
        except asyncio.CancelledError:
            if not self.cut_by_shutdown:
                raise
            outcome, status = SHUTTING_DOWN, 503
            yield sse(shutdown_error())
        finally:
            self._record(outcome, status)
            await close_quietly(self.opened.chunks)

    async def finalize(self) -> None:
        self._record("client_disconnected", CLIENT_CLOSED_STATUS)
        await close_quietly(self.opened.chunks)

    def end_at_shutdown(self) -> None:
        """Recorded as cut by the server's shutdown (the first event may not have been
        sent); the upstream stream closes with the pool, as waiting now may be cancelled."""
        self._record(SHUTTING_DOWN, 503)

    async def _relay(self) -> AsyncIterator[str]:
        usage_sent = False
        chunk: dict[str, Any] | None = self.opened.first_chunk
        first = True
        while chunk is not None:
            if isinstance(chunk.get("usage"), dict):
                self.worker_usage = chunk["usage"]
            self.content_chunks += has_content(chunk)
            relabelled = self._relabel(chunk)
            # A chunk without choices (usage only; Azure's first, with its content filter
            # results) goes only to a client that asked for usage.
            if relabelled.get("choices") or self.include_usage:
                if first and self.first_extra is not None:
                    relabelled["fugu"] = self.first_extra  # on the first chunk sent
                first = False
                usage_sent = usage_sent or isinstance(relabelled.get("usage"), dict)
                yield sse(self.redact.scrub(relabelled))
            async with asyncio.timeout(self.idle_timeout_s):
                chunk = await anext(self.opened.chunks, None)
        if self.include_usage and not usage_sent:
            yield sse(self._usage_chunk(self._final_usage()))
        yield "data: [DONE]\n\n"

    def _relabel(self, chunk: dict[str, Any]) -> dict[str, Any]:
        relabelled = with_text_content(chunk, key="delta")
        relabelled["id"] = self.request_id
        relabelled["created"] = self.created
        relabelled["model"] = self.model
        # Usage goes, as OpenAI sends it, only on a chunk of its own (no choices), and only
        # to a client that asked for it: clients read it from the chunk without choices.
        # Some OpenAI-compatible servers put it on their last chunk with choices instead.
        if not self.include_usage or relabelled.get("choices"):
            relabelled.pop("usage", None)
        return relabelled

    def _usage_chunk(self, usage: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": self.request_id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [],
            "usage": usage,
        }

    def _interrupted(self, error: BaseException) -> dict[str, Any]:
        if isinstance(error, WorkerCallError):
            message = str(error).removesuffix(AFTER_STREAM_START)  # said here already
        else:
            message = f"worker {self.opened.worker}: no chunk for {self.idle_timeout_s:g} s"
        return ApiError(
            502,
            self.redact(f"the worker failed after the answer started: {message}"),
            type="upstream_error",
            code="stream_interrupted",
        ).body()

    def _final_usage(self) -> dict[str, Any]:
        """The worker's usage, else (none came, or the stream ended before it did) the
        estimate from what was streamed."""
        if self.usage is None:
            self.usage = self.worker_usage or estimated_usage(
                self.messages, self.content_chunks, tools=self.tools
            )
        return self.usage

    def _record(self, outcome: str, status: int) -> None:
        if not self._done:
            self._done = True
            self.on_done(self._final_usage(), outcome, status, self.failed_kind)


def shutdown_error() -> dict[str, Any]:
    """The error event ending a stream that the server's shutdown cut short."""
    return ApiError(
        503,
        "the server is shutting down and cut this answer short; send the request again (to "
        "another instance, or once this one is back)",
        type="server_error",
        code=SHUTTING_DOWN,
    ).body()


def has_content(chunk: dict[str, Any]) -> int:
    """1 if a chunk's delta streams content, tool calls or a deprecated function call, else
    0. Its choices need no type checks: the pool's check_choices refused a chunk whose
    choices are no list of objects, or whose delta is no object."""
    for choice in chunk.get("choices") or []:
        delta = choice.get("delta") or {}
        if delta.get("content") or delta.get("tool_calls") or delta.get("function_call"):
            return 1
    return 0


def estimated_usage(
    messages: list[dict[str, Any]], content_chunks: int, *, tools: list[dict[str, Any]]
) -> dict[str, Any]:
    """For workers that report no usage when streaming (llama.cpp's server): one token per
    content chunk (what llama.cpp streams) and ~4 characters per prompt token, of the
    messages' texts, their tool calls and the request's tool schemas (`tools`: its tools and
    deprecated functions) as JSON. Marked `fugu_estimated` so nobody mistakes it for a
    count."""
    characters = sum(map(prompt_characters, messages)) + (len(json.dumps(tools)) if tools else 0)
    prompt_tokens = max(1, characters // 4)
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": content_chunks,
        "total_tokens": prompt_tokens + content_chunks,
        "fugu_estimated": True,
    }


def prompt_characters(message: dict[str, Any]) -> int:
    """A message's text and its calls (tool_calls, a deprecated function_call) as JSON."""
    calls = [message[key] for key in ("tool_calls", "function_call") if message.get(key)]
    return content_characters(message.get("content")) + sum(len(json.dumps(c)) for c in calls)


# An image, audio or file part counts as 85 prompt tokens (OpenAI's price of a low-detail
# image; it bills images by tiles, not by their URL's length), 4 characters each: counted as
# text, a screenshot's base64 data URL of 40 kB made a prompt of ~10,000 tokens.
MEDIA_PART_CHARACTERS = 85 * 4

# The parts holding words, each under the key its type names ({"type": "refusal", "refusal":
# "..."}); the request model checked that they are strings.
WORD_PART_TYPES = frozenset({"text", "refusal"})


def content_characters(content: str | list[dict[str, Any]] | None) -> int:
    """Content's text as a JSON string; of content parts, each text or refusal part's text
    so, and MEDIA_PART_CHARACTERS for any other part."""
    if not isinstance(content, list):
        return len(json.dumps(content or ""))
    return sum(
        len(json.dumps(part[part["type"]]))
        if part["type"] in WORD_PART_TYPES
        else MEDIA_PART_CHARACTERS
        for part in content
    )


def sse(payload: dict[str, Any] | object) -> str:
    return f"data: {json.dumps(payload, separators=(',', ':'))}\n\n"
