"""A local worker's answers (completions and stream chunks) in OpenAI's form.

llama.cpp's server gives a function call in both calling styles, adds the chosen token to
`top_logprobs`, and repeats a streamed tool call's id and name in every delta; these put
its answers the way OpenAI gives them.
"""

from __future__ import annotations

import math
from typing import Any


def one_call_style(payload: dict[str, Any], legacy: bool) -> dict[str, Any]:
    """A local worker's completion (or stream chunk) in the calling style of its request.
    llama.cpp's server gives a function call as both `tool_calls` and the deprecated
    `function_call`, with finish_reason "tool_calls"; OpenAI answers a request with tools
    with `tool_calls` only, and one with the deprecated `functions` (`legacy`) with
    `function_call` only and finish_reason "function_call", which clients of that style
    look for (one checking `function_call` first took a tool call for a legacy one)."""
    for choice in objects(payload.get("choices")):
        for key in ("message", "delta"):
            part = choice.get(key)
            if isinstance(part, dict):
                part.pop("tool_calls" if legacy else "function_call", None)
        if legacy and choice.get("finish_reason") == "tool_calls":
            choice["finish_reason"] = "function_call"
    return payload


def top_logprobs_as_asked(payload: dict[str, Any], wanted: Any) -> dict[str, Any]:
    """A local worker's completion (or stream chunk) with each token's `top_logprobs`
    holding the `wanted` most likely tokens, as OpenAI's do: llama.cpp adds the chosen
    token when it is not among them (N + 1 alternatives; one, not none, for
    `top_logprobs: 0`, and so for `logprobs: true` alone), and keys them by their text, so
    tokens of one text are one entry, out of order: they are sorted, the most likely first."""
    if not isinstance(wanted, int):
        return payload
    for choice in objects(payload.get("choices")):
        logprobs = choice.get("logprobs")
        tokens = logprobs.get("content") if isinstance(logprobs, dict) else None
        for token in tokens if isinstance(tokens, list) else []:
            top = token.get("top_logprobs") if isinstance(token, dict) else None
            if isinstance(top, list):
                token["top_logprobs"] = sorted(top, key=logprob, reverse=True)[:wanted]
    return payload


def logprob(entry: Any) -> float:
    value = entry.get("logprob") if isinstance(entry, dict) else None
    return float(value) if isinstance(value, (int, float)) else -math.inf


def objects(items: Any) -> list[dict[str, Any]]:
    """The objects of a list (choices, tool calls); a part of another type is left as it
    came for the completion's parser to refuse."""
    return [item for item in items if isinstance(item, dict)] if isinstance(items, list) else []


def named_once(chunk: dict[str, Any], named: set[tuple[Any, Any]]) -> dict[str, Any]:
    """A llama.cpp stream chunk with a tool call's id, type and function name (and a
    deprecated function_call's name) left out after its first delta (`named` holds the
    calls seen so far), as OpenAI streams them: llama.cpp repeats them in every delta, and
    clients join what the deltas hold (the openai SDK's stream helper named the tool
    "addaddadd...")."""
    for choice in objects(chunk.get("choices")):
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            continue
        calls = [(call.get("index"), call) for call in objects(delta.get("tool_calls"))]
        if isinstance(delta.get("function_call"), dict):
            calls.append(("function_call", delta["function_call"]))
        for index, call in calls:
            key = (choice.get("index"), index)
            if key not in named:
                named.add(key)
                continue
            call.pop("id", None)
            call.pop("type", None)
            call.pop("name", None)  # a function_call's
            if isinstance(call.get("function"), dict):
                call["function"].pop("name", None)
    return chunk
