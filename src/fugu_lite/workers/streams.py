"""A worker's chunk stream: the SDK stream that notes its `data: [DONE]` (WatchedStream), one
opened up to its first chunk (OpenStream), a chunk as the worker sent it (as_sent), whether a
chunk ends a choice (finishes), what its chunks go through (chunk_shaper; check_choices refuses
choices, deltas and tool calls not shaped as OpenAI's), what a stream cut mid-answer is said
to be (CUT_STREAM), and closing one that failed (close_stream)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from openai import AsyncStream
from openai._streaming import ServerSentEvent
from openai.types.chat import ChatCompletionChunk

from .config import WorkerConfig
from .llama_cpp_answers import named_once, one_call_style, top_logprobs_as_asked
from .results import check_calls, check_list_of_objects, check_object_or_none, json_safe

logger = logging.getLogger(__name__)

# What ends the message of a failure after a stream's first chunk (serve words it itself).
AFTER_STREAM_START = " (after the stream started)"
# ...and of one in its first chunk, before anything was yielded.
IN_FIRST_CHUNK = " (in the stream's first chunk)"
# A stream that ended neither with a choice's finish_reason nor with `data: [DONE]`.
CUT_STREAM = (
    "the stream ended before its answer did (no finish_reason, no data: [DONE]): its "
    f"connection was closed mid-answer{AFTER_STREAM_START}"
)


class WatchedStream(AsyncStream[ChatCompletionChunk]):
    """A worker's chunk stream that notes whether its `data: [DONE]` came: the openai SDK
    ends its iteration alike there and where a connection closed cleanly mid-answer."""

    ended_with_done = False

    async def _iter_events(self) -> AsyncIterator[ServerSentEvent]:
        async for event in super()._iter_events():
            if event.data.startswith("[DONE]"):
                self.ended_with_done = True
            yield event


@dataclass(frozen=True)
class OpenStream:
    """A stream that gave its first chunk: the call it answers, and the body it was asked
    with (without stream_options if the worker refused them)."""

    stream: WatchedStream
    iterator: AsyncIterator[ChatCompletionChunk]
    first: ChatCompletionChunk
    call: object
    body: dict[str, Any]


def as_sent(chunk: ChatCompletionChunk) -> dict[str, Any]:
    """A worker's chunk as it sent it. The SDK builds chunks without validation, so a field
    of another type than OpenAI's (usage `"prompt_tokens": "n/a"`) is kept as sent, and
    pydantic's warning about it (printed on serve's stderr) says nothing to act on."""
    return chunk.model_dump(exclude_unset=True, warnings=False)


def finishes(chunk: dict[str, Any]) -> bool:
    """Whether a chunk ends a choice (has its finish_reason)."""
    choices = chunk.get("choices")
    return isinstance(choices, list) and any(
        isinstance(choice, dict) and choice.get("finish_reason") for choice in choices
    )


def chunk_shaper(
    worker: WorkerConfig, body: dict[str, Any]
) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """What a stream's chunks go through: the numbers JSON cannot hold replaced, and a local
    worker's in the shape OpenAI gives (each tool call named once, the top_logprobs asked)."""
    named: set[tuple[Any, Any]] = set()
    legacy = bool(body.get("functions"))

    def shape(chunk: dict[str, Any]) -> dict[str, Any]:
        check_choices(chunk)
        chunk = json_safe(chunk)
        if worker.local is None:
            return chunk
        chunk = top_logprobs_as_asked(chunk, body.get("top_logprobs"))
        return named_once(one_call_style(chunk, legacy), named)

    return shape


def check_choices(chunk: dict[str, Any]) -> None:
    """A ValueError naming what of a chunk's choices is not as OpenAI's: choices that are no
    list, a choice or its delta that is no object (serve's relay reads each as one), a
    delta's tool_calls that are no list of objects, a call's function or a deprecated
    function_call that is no object (a client reads each as one)."""
    choices = chunk.get("choices")
    check_list_of_objects(choices, "a stream chunk's choices")
    for n, choice in enumerate(choices or []):
        delta = choice.get("delta")
        where = f"a stream chunk's choices[{n}].delta"
        check_object_or_none(delta, where)
        if delta is not None:
            check_calls(delta, where)


async def close_stream(stream: Any) -> None:
    if stream is not None:
        try:
            await stream.close()
        except Exception:  # closing a broken connection may fail again; nothing to add
            logger.debug("closing a failed stream raised", exc_info=True)
