"""What a worker call gives back: its CallResult, the tokens it used (Usage) and their cost
(usage_cost), the worker's answer read as JSON (answer_json) and its completion and token
counts read from it (parse_completion, read_usage), the checks of its function calls
(check_calls, check_list_of_objects), and a worker's answer with the numbers JSON cannot
hold replaced (json_safe)."""

from __future__ import annotations

import json
import math
import re
from typing import Any

from pydantic import BaseModel

from .config import WorkerConfig


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int


class CallResult(BaseModel):
    worker_id: str
    output: str | None
    usage: Usage | None
    cost: float | None
    latency_s: float
    error: str | None
    error_kind: str | None
    attempts: int
    status_code: int | None = None  # the worker's HTTP status when it answered with an error
    error_code: str | None = None  # the `code` of the worker's error body (OpenAI's shape)
    error_param: str | None = None  # its `param`: the request parameter it refused
    retry_after_s: float | None = None  # the worker's Retry-After on its last error, if any
    # its x-should-retry on that error: True, False, or None when it sent none
    should_retry: bool | None = None
    raw: dict | None = None
    started_at: float = 0.0  # wall clock (time.time) when the call got its worker slot
    finished_at: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None


# Python's json reads NaN and +-Infinity, which no JSON holds (bytes: a worker's answer).
NON_FINITE_MARK = re.compile(rb"NaN|Infinity")
VERY_UNLIKELY_LOGPROB = -9999.0  # OpenAI's logprob of a token too unlikely to rank


def json_safe(value: Any, key: str | None = None) -> Any:
    """A worker's answer with each number JSON cannot hold (llama.cpp's logprob of a token
    its grammar or logit_bias ruled out is -Infinity) as OpenAI answers instead: a
    `logprob` of -inf is -9999.0, its "very unlikely"; any other is null. Starlette
    refuses to write them (a 500 for an answer the worker gave), and a stream carried
    `-Infinity`, which JSON parsers refuse."""
    if isinstance(value, float) and not math.isfinite(value):
        return VERY_UNLIKELY_LOGPROB if key == "logprob" and value < 0 else None
    if isinstance(value, dict):
        return {name: json_safe(item, name) for name, item in value.items()}
    if isinstance(value, list):
        return [json_safe(item) for item in value]
    return value


def usage_cost(worker: WorkerConfig, usage: Usage) -> float | None:
    """USD: the worker's prices per million tokens times the call's tokens; None (unknown)
    when that is too large for a float. A price near 1e308 made it inf: serve's decision log
    wrote `Infinity` (no JSON: jq refused the line) and its include_routing answer was a 500;
    pool_notes says which price it is."""
    cost = (
        usage.prompt_tokens * worker.input_price_per_mtok
        + usage.completion_tokens * worker.output_price_per_mtok
    ) / 1e6
    return cost if math.isfinite(cost) else None


# What a web page where a worker's JSON or event stream was expected most often means.
WEB_PAGE_HINT = (
    "it is a web page: is base_url the worker's OpenAI-compatible API root (often ending in /v1)?"
)


def answer_json(content: bytes, content_type: str | None) -> Any:
    """A worker's 200 answer read as JSON; a ValueError that says what came instead. A web
    page (a base_url that is a web app's, or lacks the API's path) is named as such: the
    JSON parser's "Expecting value: line 1 column 1" told nothing."""
    try:
        return json.loads(content)
    except ValueError as error:  # JSONDecodeError, UnicodeDecodeError (not UTF-8)
        start = content[:120].decode("utf-8", errors="replace")
        problem = (
            f"the answer is not JSON ({content_type or 'no content-type'}, {len(content)} "
            f"bytes: {start!r}; {error})"
        )
        raise ValueError(problem + web_page_hint(content_type, start)) from None


def web_page_hint(content_type: str | None, start: str = "") -> str:
    """ "; <WEB_PAGE_HINT>" for an answer (its content-type, or its first characters) that is
    a web page where JSON or an event stream was expected, else ""."""
    page = start.removeprefix("\ufeff").lstrip()  # a page saved "UTF-8 with BOM" starts so
    if "html" in (content_type or "").lower() or page.startswith("<"):
        return f"; {WEB_PAGE_HINT}"
    return ""


def parse_completion(raw: Any) -> tuple[str, Usage | None]:
    """A chat completion's answer (its first choice's message content, parts joined) and
    token counts; a ValueError naming the flaw of a 200 holding none: a choice or message
    that is no object failed with a bare AttributeError, and content that is neither text
    nor parts (an object, a number) was given on as the answer, in its Python repr, and
    function calls not shaped as OpenAI's were passed on to the client (check_calls)."""
    if not isinstance(raw, dict) or not raw.get("choices"):
        raise ValueError(f"no choices in the response: {str(raw)[:200]}")
    choice = first_choice(raw["choices"])
    message = choice.get("message") or {}
    if not isinstance(message, dict):
        raise not_an_object("choices[0].message", message)
    content = message.get("content")
    if content is None:
        content = ""
    elif isinstance(content, list):
        content = text_of_parts(content)
    elif not isinstance(content, str):
        raise ValueError(
            f"choices[0].message.content is {type(content).__name__}, not text or a list of "
            f"content parts: {str(content)[:200]}"
        )
    check_calls(message, "choices[0].message")
    return content, read_usage(raw.get("usage"))


def first_choice(choices: Any) -> dict[str, Any]:
    """A completion's first choice; a ValueError when its choices are no list or it is no
    object."""
    if not isinstance(choices, list):
        raise ValueError(f"choices is {type(choices).__name__}, not a list: {str(choices)[:200]}")
    if not isinstance(choices[0], dict):
        raise not_an_object("choices[0]", choices[0])
    return choices[0]


def not_an_object(where: str, value: Any) -> ValueError:
    return ValueError(f"{where} is {type(value).__name__}, not an object: {str(value)[:200]}")


def check_calls(message: dict[str, Any], where: str) -> None:
    """A ValueError naming what of a message's (or delta's, at `where`) function calls is
    not as OpenAI's: its tool_calls (check_tool_calls), or its deprecated function_call
    that is no object (a client reads it as one)."""
    check_tool_calls(message.get("tool_calls"), where)
    check_object_or_none(message.get("function_call"), f"{where}.function_call")


def check_tool_calls(calls: Any, where: str) -> None:
    """A ValueError naming what of a message's (or delta's, at `where`) tool_calls is not
    as OpenAI's: no list, a call that is no object, or a call's function that is no
    object (a client reads each as one)."""
    check_list_of_objects(calls, f"{where}.tool_calls")
    for n, call in enumerate(calls or []):
        check_object_or_none(call.get("function"), f"{where}.tool_calls[{n}].function")


def check_object_or_none(value: Any, where: str) -> None:
    """A ValueError naming `where` unless `value` is None or an object."""
    if value is not None and not isinstance(value, dict):
        raise not_an_object(where, value)


def check_list_of_objects(value: Any, where: str) -> None:
    """A ValueError naming `where` unless `value` is None or a list of objects."""
    if value is None:
        return
    if not isinstance(value, list):
        kind = type(value).__name__
        raise ValueError(f"{where} is {kind}, not a list: {str(value)[:200]}")
    for n, item in enumerate(value):
        if not isinstance(item, dict):
            raise not_an_object(f"{where}[{n}]", item)


def read_usage(usage: Any) -> Usage | None:
    """A worker's `usage` as token counts; None (cost unknown) unless it has both prompt and
    completion tokens as whole numbers of 0 or more: a negative count made a negative cost
    (and broke serve's metrics), a missing one a cost too low, and one that was no number
    failed the answer the worker gave. A prompt of 0 tokens is a server's that counts none
    (zeros where it has no count; every chat prompt has some): not a free call."""
    if not isinstance(usage, dict):
        return None
    prompt = token_count(usage.get("prompt_tokens"))
    completion = token_count(usage.get("completion_tokens"))
    if not prompt or completion is None:
        return None
    return Usage(prompt_tokens=prompt, completion_tokens=completion)


def token_count(value: Any) -> int | None:
    """A token count given as an int, a whole float (7.0) or digits ("7"); None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and value.strip().isdecimal():  # not '²', which int() refuses
        return int(value)
    if isinstance(value, float) and value.is_integer() and value >= 0:
        return int(value)
    if isinstance(value, int) and value >= 0:
        return value
    return None


def text_of_parts(parts: list[Any]) -> str:
    """The answer in a message content given as parts (Mistral's, some gateways'): its text
    parts joined; a `thinking` part, or any other, is not the answer."""
    return "".join(
        str(part.get("text") or "")
        for part in parts
        if isinstance(part, dict) and part.get("type") == "text"
    )
