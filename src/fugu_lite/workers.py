"""The worker pool: calls to OpenAI-compatible chat endpoints, with limits, retries and cost.

`async with WorkerPool(config) as pool:` starts the pool's local llama.cpp servers (and
stops them on the way out), then `await pool.chat(worker_id, messages)` returns a
`CallResult` (never raises for a failed call: the error is in the result) and
`pool.stream_chat(...)` yields OpenAI chunk dicts.

Every call goes through the official `openai` SDK, with the SDK's own retries off: the
pool retries 429, 5xx, 408, connection errors and timeouts itself, with exponential
backoff and jitter (honouring Retry-After), and never retries other 4xx. Each worker has
its own concurrency limit. API keys are read from the environment variable the worker
names; they are scrubbed from every error message.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import functools
import json
import logging
import math
import os
import random
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import openai
from openai import AsyncOpenAI, AsyncStream
from openai.types.chat import ChatCompletionChunk
from pydantic import BaseModel, ValidationError

from .local_server import (
    LocalServer,
    chat_template,
    start_local_servers,
    stop_local_servers,
    vocab_size,
)
from .pool import (  # re-exported: the pool's config types belong to this interface too
    LocalServerConfig,
    PoolConfig,
    WorkerConfig,
    embedded_pool_config,
    load_pool_config,
    resolve_gguf,
)
from .schemas import parts_text, text_only
from .server_schemas import SCHEMA_MAPS, schema_nodes

__all__ = [
    "CallResult",
    "Judge",
    "LocalServerConfig",
    "PoolConfig",
    "PoolStartError",
    "Usage",
    "WorkerCallError",
    "WorkerConfig",
    "WorkerPool",
    "embedded_pool_config",
    "judge_from_pool",
    "load_pool_config",
]
logger = logging.getLogger(__name__)

NO_KEY = "fugu-lite-no-key"  # sent when a worker needs no key (local or open servers)
MAX_RETRY_AFTER_S = 60.0
MAX_ERROR_CHARS = 600
RETRYABLE_KINDS = frozenset({"timeout", "connection", "rate_limit", "server"})
CHAT_PATH = "/chat/completions"
CONTEXT_LENGTH_EXCEEDED = "context_length_exceeded"  # the error code of a prompt too long
NO_QUOTA = "insufficient_quota"  # OpenAI's 429 when the account has no credit left
# How servers that give a 400 no such code say a prompt is over the context: vLLM ("This
# model's maximum context length is 4096 tokens. However, you requested ..."), Anthropic's and
# others' "prompt is too long", llama.cpp's C++ server, vLLM's "decoder prompt ... is longer";
# and Hugging Face TGI's 422 ("Input validation error: `inputs` must have less than 4096
# tokens. Given: 4545", or "`inputs` tokens + `max_new_tokens` must be <= 4096. Given: ...").
CONTEXT_REFUSAL = re.compile(
    r"maximum context length is \d+ tokens|\bprompt is too long\b"
    r"|exceeds the available context size|longer than the maximum model length"
    r"|`inputs` must have less than \d+ tokens|`inputs` tokens \+ `max_new_tokens` must be <=",
    re.IGNORECASE,
)
CONTEXT_REFUSAL_STATUSES = frozenset({400, 422})  # 422: TGI's
CONTEXT_LIMIT = re.compile(
    r"(?:maximum context length is|`inputs` must have less than) (\d+) tokens"
    r"|`max_new_tokens` must be <= (\d+)",
    re.IGNORECASE,
)
# vLLM's and TGI's words for the prompt and the completion asked (max_tokens) in such a refusal.
PROMPT_ASKED = re.compile(
    r"(\d+) in the messages|Given: (\d+) `inputs` tokens|your request has (\d+) input tokens",
    re.IGNORECASE,
)
COMPLETION_ASKED = re.compile(
    r"is too large: (\d+)|(\d+) in the completion|(\d+) `max_new_tokens`", re.IGNORECASE
)
try:  # the SDK's own HTTP library: httpx2 in openai 3.x, httpx before
    from httpx2 import Response as SDKResponse
except ImportError:  # pragma: no cover - older openai
    from httpx import Response as SDKResponse  # type: ignore[assignment]  # the other library

Judge = Callable[[list[dict[str, str]]], Awaitable[str]]


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
    retry_after_s: float | None = None  # the worker's Retry-After on its last error, if any
    raw: dict | None = None
    started_at: float = 0.0  # wall clock (time.time) when the call got its worker slot
    finished_at: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None


class WorkerCallError(RuntimeError):
    """A call failed; `kind` is timeout, connection, rate_limit, server or client;
    `status_code` the worker's HTTP status when it answered with an error, `code` the
    `code` of its error body (e.g. context_length_exceeded), `retry_after_s` the seconds its
    Retry-After asked to wait (a 429 or 5xx that said)."""

    def __init__(
        self,
        kind: str,
        message: str,
        status_code: int | None = None,
        code: str | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.status_code = status_code
        self.code = code
        self.retry_after_s = retry_after_s


class PoolStartError(RuntimeError):
    """The pool could not start: a missing API key variable, or a local server that failed."""


def llama_cpp_message(message: dict[str, Any], calls_as_text: bool = False) -> dict[str, Any]:
    """llama.cpp's chat templates take string content and no `developer` role: text (and
    refusal) parts become one string, `developer` becomes `system` (OpenAI's own mapping
    for older models), and a message without content (an assistant turn holding only
    tool_calls, which OpenAI sends as `content: null`) gets an empty string, since
    llama.cpp's server answers those with a 500. With `calls_as_text` (a chat template
    that renders no tool calls, such as SmolLM2's), an assistant's tool_calls or
    function_call are written into its content too (`call_lines`)."""
    plain = dict(message)
    if plain.get("role") == "developer":
        plain["role"] = "system"
    content = plain.get("content")
    if content is None:
        plain["content"] = ""
    elif isinstance(content, list):
        content = [refusal_as_text(part) for part in content]
        plain["content"] = parts_text(content) if text_only(content) else content
    calls = call_lines(plain) if calls_as_text and plain.get("role") == "assistant" else []
    if calls and isinstance(plain["content"], str):
        plain["content"] = "\n".join(text for text in (plain["content"], *calls) if text)
    return plain


def call_lines(message: dict[str, Any]) -> list[str]:
    """An assistant turn's function calls (tool_calls, or a deprecated function_call) as
    one JSON line each, `{"name": ..., "arguments": {...}}` (the arguments as JSON when
    they are): a chat template that renders no tool calls drops them, so the model saw an
    empty turn before the tool's result, not knowing what it had called."""
    functions = [call.get("function") for call in message.get("tool_calls") or []]
    functions.append(message.get("function_call"))
    lines = []
    for function in functions:
        if not isinstance(function, dict):
            continue
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            with contextlib.suppress(ValueError):
                arguments = json.loads(arguments)
        lines.append(json.dumps({"name": function.get("name"), "arguments": arguments},
                                ensure_ascii=False))  # fmt: skip
    return lines


def renders_tool_calls(local: LocalServerConfig) -> bool:
    """Whether a local worker's prompts show an assistant's tool calls: llama-cpp-python's
    server renders them with a chat_format made for function calling, or a GGUF chat
    template that reads `tool_calls` (SmolLM2's, like the fallback formats, does not)."""
    if local.chat_format is not None:
        return "function" in local.chat_format  # chatml-function-calling, functionary...
    template = chat_template(resolve_gguf(local.gguf))
    return template is not None and "tool_calls" in template


def refusal_as_text(part: dict[str, Any]) -> dict[str, Any]:
    """An assistant's `refusal` content part (OpenAI's shape for a declined answer) is what
    the assistant said: text to a chat template."""
    if part.get("type") != "refusal":
        return part
    return {"type": "text", "text": part["refusal"]}


def llama_cpp_params(params: dict[str, Any]) -> dict[str, Any]:
    """OpenAI's parameters in the form llama.cpp's server honours:

    - `response_format` json_schema (a 500 there) as its `{"type": "json_object",
      "schema": S}`, S (and a named tool's or function's parameters) in the form its
      grammar converter reads as meant (`llama_cpp_schema`);
    - `logprobs: true` alone returns no logprobs there: it needs `top_logprobs` (0 = the
      chosen tokens' only, OpenAI's default);
    - a function tool (or a deprecated `functions` entry) without `parameters` (optional
      in OpenAI's API, a 500 there) gets the empty object schema, and its null keys
      (`"description": null`, OpenAI's "absent") are left out;
    - `tool_choice: "required"` is ignored there (the model may answer in text); with a
      single function tool it is the same as naming that tool, which llama.cpp enforces.
      (Several tools, or tools other than functions, go to other workers: see
      `local_worker_gaps`.)
    - an empty stop string, which OpenAI ignores, stops llama.cpp before the first token
      (an empty answer): it is left out;
    - the deprecated `function_call` ("none" or "auto": a name must be among `functions`)
      without `functions` governs nothing, but llama.cpp's server puts it in place of
      `tool_choice` (a named tool was not called): it is left out."""
    converted = dict(params)
    if params.get("function_call") is not None and not params.get("functions"):
        del converted["function_call"]
    stop = params.get("stop")
    stops = [stop] if isinstance(stop, str) else stop
    if isinstance(stops, list) and "" in stops:
        converted["stop"] = [text for text in stops if text != ""]
    response_format = params.get("response_format")
    if isinstance(response_format, dict) and response_format.get("type") == "json_schema":
        spec = response_format.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        converted["response_format"] = {"type": "json_object"}
        if schema is not None:
            converted["response_format"]["schema"] = llama_cpp_schema(schema)
    elif isinstance(response_format, dict) and "schema" in response_format:
        converted["response_format"] = {
            **response_format,
            "schema": llama_cpp_schema(response_format["schema"]),
        }
    if params.get("logprobs") is True and params.get("top_logprobs") is None:
        converted["top_logprobs"] = 0
    functions = params.get("functions")
    if isinstance(functions, list):
        converted["functions"] = [with_parameters(function) for function in functions]
    tools = params.get("tools")
    if isinstance(tools, list):
        converted["tools"] = [
            {**tool, "function": with_parameters(tool["function"])}
            if tool.get("type") == "function" and "function" in tool
            else tool
            for tool in tools
        ]
        if params.get("tool_choice") == "required" and len(tools) == 1:
            name = tools[0].get("function", {}).get("name")
            converted["tool_choice"] = {"type": "function", "function": {"name": name}}
    return converted


EMPTY_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}
MAX_PROBLEMS = 3


@functools.cache
def llama_cpp_request_model() -> type[BaseModel]:
    """llama-cpp-python's server request model (imported on first use: ~0.4 s)."""
    from llama_cpp.server.types import CreateChatCompletionRequest

    return CreateChatCompletionRequest


def llama_cpp_request_problem(body: dict[str, Any]) -> str | None:
    """What llama-cpp-python's server would refuse in a request body (checked with its own
    request model), None when it takes it."""
    try:
        llama_cpp_request_model().model_validate(body)
    except ValidationError as error:
        # A message is tried against every role's model: "role should be 'system'" and
        # the like say nothing about what is wrong.
        problems = [
            f"{'.'.join(str(part) for part in item['loc'])}: {item['msg']}"
            for item in error.errors()
            if not (item["type"] == "literal_error" and item["loc"][-1:] == ("role",))
        ]
        return "; ".join(problems[:MAX_PROBLEMS]) or str(error).splitlines()[0]
    return None


def with_parameters(function: object) -> object:
    """A function definition (of a tool, or a deprecated `functions` entry) without its null
    keys (OpenAI reads `"description": null` as no description; llama.cpp's server refuses
    it) and with the empty object schema where it has no `parameters` (its parameters in
    the form llama.cpp's grammar converter reads, `llama_cpp_schema`)."""
    if not isinstance(function, dict):
        return function
    present = {key: value for key, value in function.items() if value is not None}
    if "parameters" not in present:
        return {**present, "parameters": EMPTY_PARAMETERS}
    return {**present, "parameters": llama_cpp_schema(present["parameters"])}


def local_worker_gaps(params: dict[str, Any]) -> list[str]:
    """What a request asks that a local llama.cpp worker cannot give (it would answer
    something else, a 500, or crash): audio output, tools other than functions, a
    tool_choice that is not a mode or a named function, tool_choice "required" among
    several tools, a raw GBNF `grammar`, both tools and functions, a schema with a name,
    literal or pattern that llama.cpp's grammar converter mangles (`unrenderable_literal`,
    `unconvertible_pattern`)."""
    gaps = []
    if params.get("grammar") is not None:
        gaps.append(
            "llama.cpp's `grammar` (llama-cpp-python's server crashes on an invalid one; "
            "use response_format json_schema)"
        )
    modalities = params.get("modalities")
    if params.get("audio") is not None or (isinstance(modalities, list) and "audio" in modalities):
        gaps.append('audio output (`audio` / `modalities: ["audio"]`)')
    tools = params.get("tools") or []
    kinds = sorted({str(tool.get("type")) for tool in tools if tool.get("type") != "function"})
    if kinds:
        gaps.append(f"tools of type {', '.join(kinds)} (only function tools)")
    choice = params.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") != "function":
        gaps.append(f"tool_choice of type {choice.get('type')}")
    if tools and params.get("functions"):
        gaps.append(
            "both `tools` and the deprecated `functions` (llama-cpp-python's server replaces "
            "the tools with the functions; send the functions as tools)"
        )
    strict = strict_schema_places(params)
    for where, schema in grammar_schemas(params):
        known = len(gaps)
        found = unrenderable_literal(schema)
        if found is not None:
            path, character = found
            gaps.append(
                f"a JSON schema with {character} in a property name or an enum/const string "
                f"({where}{path}; llama-cpp-python's grammar converter mangles it: its server "
                "crashes, or answers invalid JSON or another name or value)"
            )
        found = unconvertible_pattern(schema)
        if found is not None:
            path, problem = found
            gaps.append(f"a JSON schema `pattern` {problem} ({where}{path}.pattern)")
        deep = deep_repetition(schema)
        if deep is not None:
            gaps.append(
                f"a JSON schema allowing {deep[1]} ({where}{deep[0]}; llama-cpp-python nests "
                f"one grammar group per optional repetition and its server crashes on more "
                f"than about {MAX_OPTIONAL_REPEATS}; drop the limit or narrow it)"
            )
        empty = empty_property_name(schema)
        if empty is not None:
            gaps.append(
                f"a JSON schema with an empty property name ({where}{empty}; "
                "llama-cpp-python's grammar converter makes that property's value the whole "
                "answer, not an object)"
            )
        readable = llama_cpp_schema(schema, split_types=False)
        ignored = ignored_constraint(readable) if where in strict else None
        if ignored is not None:
            gaps.append(
                f"a strict JSON schema with {ignored[1]} ({where}{ignored[0]}; "
                "llama-cpp-python's grammar converter leaves it out of the grammar, so the "
                "answer may break it; without `strict: true` a local worker may answer)"
            )
        if len(gaps) == known:  # else its problem is said already
            unread = unconvertible_schema(llama_cpp_schema(schema))
            if unread is not None:
                gaps.append(
                    f"a JSON schema that llama-cpp-python's grammar converter cannot read "
                    f"({where}: {unread}; its server then ignores the whole schema and "
                    "answers any JSON)"
                )
    if choice == "required" and len(tools) > 1:
        gaps.append(
            'tool_choice "required" among several tools (it would answer in text; name '
            "one tool in tool_choice instead)"
        )
    return gaps


def strict_schema_places(params: dict[str, Any]) -> set[str]:
    """The places (as grammar_schemas names them) of the schemas sent with `strict: true`:
    response_format's json_schema and function tools. OpenAI holds an answer to every
    constraint of those only; without it a schema is a guide the answer may break, as a
    local worker's does with the constraints llama.cpp leaves out (ignored_constraint)."""
    places = set()
    response_format = params.get("response_format")
    spec = response_format.get("json_schema") if isinstance(response_format, dict) else None
    if isinstance(spec, dict) and spec.get("strict") is True:
        places.add("response_format.json_schema.schema")
    for i, tool in enumerate(params.get("tools") or []):
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and function.get("strict") is True:
            places.add(f"tools[{i}].function.parameters")
    return places


def grammar_schemas(params: dict[str, Any]) -> list[tuple[str, Any]]:
    """(where, schema) for each JSON schema that llama.cpp's server turns into a grammar:
    response_format's, and the parameters of the tool (or deprecated function) that
    tool_choice (or function_call) names; `"required"` with one tool names that tool."""
    schemas: list[tuple[str, Any]] = []
    response_format = params.get("response_format")
    if isinstance(response_format, dict):
        spec = response_format.get("json_schema")
        if isinstance(spec, dict) and "schema" in spec:
            schemas.append(("response_format.json_schema.schema", spec["schema"]))
        if "schema" in response_format:
            schemas.append(("response_format.schema", response_format["schema"]))
    tools = [tool for tool in params.get("tools") or [] if isinstance(tool, dict)]
    choice, call = params.get("tool_choice"), params.get("function_call")
    named = set()
    if isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        named.add(choice["function"].get("name"))
    if choice == "required" and len(tools) == 1 and isinstance(tools[0].get("function"), dict):
        named.add(tools[0]["function"].get("name"))
    if isinstance(call, dict):
        named.add(call.get("name"))
    functions = params.get("functions")
    entries = [(f"tools[{i}].function", tool.get("function")) for i, tool in enumerate(tools)]
    if isinstance(functions, list):
        entries += [(f"functions[{i}]", function) for i, function in enumerate(functions)]
    for where, function in entries:
        if isinstance(function, dict) and function.get("name") in named:
            schemas.append((f"{where}.parameters", function.get("parameters")))
    return schemas


def unrenderable_literal(schema: Any) -> tuple[str, str] | None:
    """(path, the character) of the first property name or enum/const string that
    llama-cpp-python's grammar converter mangles, None when there is none. It writes the
    JSON form of the text into a GBNF literal without escaping its backslashes, so GBNF
    reads JSON's escapes as its own: a double quote ends the literal early and `\\b` or
    `\\f` are unknown escapes (the grammar does not parse; its server process crashes), a
    newline, tab or other control character becomes the raw character (the answer is not
    valid JSON), a backslash escapes the next character, and a character beyond U+FFFF
    (an emoji: a surrogate pair in JSON) is lost (the answer holds another name or value)."""
    for path, node in schema_nodes(schema):
        properties = node.get("properties")
        for name in properties if isinstance(properties, dict) else {}:
            character = unrenderable_character(name)
            if character is not None:
                shown = json.dumps(name, ensure_ascii=False)[1:-1]
                return f"{path}.properties.{shown}", character
        enum = node.get("enum")
        values = enum if isinstance(enum, list) else []
        for keyword, value in [*(("enum", v) for v in values), ("const", node.get("const"))]:
            for text in json_texts(value):
                character = unrenderable_character(text)
                if character is not None:
                    return f"{path}.{keyword}", character
    return None


def unconvertible_pattern(schema: Any) -> tuple[str, str] | None:
    """(path, what is wrong and what llama.cpp does with it) of the first string `pattern`
    that llama-cpp-python's grammar converter cannot turn into a grammar, None when there
    is none. It takes only a pattern anchored with ^ and $ (it drops the whole schema for
    another: the answer is free JSON), and copies a pattern's backslash escapes and
    double quotes into the grammar as they are: `\\d` or `\\w` make the grammar fail to
    parse (its server process crashes), others a raw newline or another character, and a
    double quote invalid JSON."""
    for path, node in schema_nodes(schema):
        pattern = node.get("pattern")
        if not isinstance(pattern, str):
            continue
        if not (pattern.startswith("^") and pattern.endswith("$")):
            return path, (
                "not anchored with ^ and $ (llama-cpp-python's grammar converter ignores the "
                "whole schema then)"
            )
        if "\\" in pattern:
            return path, (
                "with a backslash escape, such as \\d or \\w (llama-cpp-python's grammar "
                "converter mangles it: its server crashes, or answers another value)"
            )
        if '"' in pattern:
            return path, (
                "with a double quote (\") (llama-cpp-python's grammar converter mangles it: "
                "the answer is not valid JSON)"
            )
    return None


ANNOTATIONS = frozenset(
    {"title", "description", "default", "examples", "$comment", "deprecated", "readOnly",
     "writeOnly"}
)  # fmt: skip
ANY_JSON_TYPES = ["string", "number", "boolean", "object", "array", "null"]
SUBSCHEMA_KEYS = frozenset({"items", "prefixItems", "anyOf", "oneOf", "allOf"})


def llama_cpp_schema(schema: Any, *, split_types: bool = True) -> Any:
    """A JSON schema in the form llama-cpp-python's grammar converter reads as meant: a
    sub-schema holding annotations only (pydantic's `Any` field, `{"title": "Notes"}`) or
    `true` stands for any value, on which the converter fails (its server then ignores the
    whole schema and answers any JSON); it gets every JSON type instead. A small integer
    range (`integer_range_as_enum`) becomes the enum of its values, which it enforces, an
    enum beside a list of types loses the list (`enum_without_type_list`), and a list of
    types beside other keywords becomes an anyOf (`type_list_as_any_of`; `split_types`
    False leaves it, so that a problem found is named at its place in the client's schema)."""
    if schema is True:
        return {"type": ANY_JSON_TYPES}
    if isinstance(schema, list):
        return [llama_cpp_schema(item, split_types=split_types) for item in schema]
    if not isinstance(schema, dict):
        return schema
    if schema and set(schema) <= ANNOTATIONS:
        return {**schema, "type": ANY_JSON_TYPES}
    converted: dict[str, Any] = {}
    for key, value in schema.items():
        if key in SCHEMA_MAPS and isinstance(value, dict):
            converted[key] = {
                name: llama_cpp_schema(sub, split_types=split_types) for name, sub in value.items()
            }
        elif key in SUBSCHEMA_KEYS:
            converted[key] = llama_cpp_schema(value, split_types=split_types)
        else:
            converted[key] = value
    converted = enum_without_type_list(integer_range_as_enum(converted))
    return type_list_as_any_of(converted) if split_types else converted


MAX_INTEGER_ENUM = 256  # the largest integer range written out as an enum
RANGE_KEYWORDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")


def integer_range_as_enum(node: dict[str, Any]) -> dict[str, Any]:
    """An integer schema (or a nullable one: type ["integer", "null"]) bounded on both sides
    (minimum/exclusiveMinimum and maximum/exclusiveMaximum, perhaps a multipleOf) with at
    most MAX_INTEGER_ENUM values, as the enum of those values (and null, when allowed):
    llama-cpp-python's grammar converter leaves the bounds out of the grammar (a rating of
    1 to 5 could be answered 7), but writes an enum into it."""
    kind = node.get("type")
    types = kind if isinstance(kind, list) else [kind]
    if "integer" not in types or not set(types) <= {"integer", "null"}:
        return node
    if "enum" in node or "const" in node:
        return node
    low = integer_bound(node, "minimum", "exclusiveMinimum", 1)
    top = integer_bound(node, "maximum", "exclusiveMaximum", -1)
    step = node.get("multipleOf")
    if low is None or top is None or top - low >= MAX_INTEGER_ENUM:
        return node
    if step is not None and (not is_number(step) or step <= 0 or step != int(step)):
        return node  # a fractional multipleOf is left to the strict-schema check
    values: list[int | None] = [
        n for n in range(low, top + 1) if step is None or n % int(step) == 0
    ]
    if not values:
        return node  # matches nothing: left as it is, so the request is refused as such
    kept = {key: value for key, value in node.items() if key not in RANGE_KEYWORDS}
    if "null" in types:
        values.append(None)  # the list of types goes: enum_without_type_list
    return {**kept, "enum": values}


def type_list_as_any_of(node: dict[str, Any]) -> dict[str, Any]:
    """A list of types beside other keywords (`"type": ["object", "null"], "properties":
    ...`, OpenAI's strict form of an optional object; `["string", "null"]` with a `pattern`)
    as the `anyOf` of one schema per type, each with those keywords: llama-cpp-python's
    grammar converter makes a bare type of each (any object, any string), leaving the
    properties, items, pattern or format out of the grammar."""
    kind = node.get("type")
    if not isinstance(kind, list) or not all(isinstance(name, str) for name in kind):
        return node
    if any(key in node for key in ("enum", "const", "anyOf", "oneOf", "allOf", "$ref")):
        return node  # the converter reads these before the types
    rest = {key: value for key, value in node.items() if key != "type" and key not in ANNOTATIONS}
    if not kind or not rest:
        return node  # a bare list of types is read as meant
    outer = {key: value for key, value in node.items() if key in ANNOTATIONS}
    branches = [integer_range_as_enum({**rest, "type": name}) for name in kind]
    if len(branches) == 1:
        return {**outer, **branches[0]}
    return {**outer, "anyOf": branches}


def integer_bound(
    node: dict[str, Any], inclusive: str, exclusive: str, direction: int
) -> int | None:
    """The tightest integer bound of a node's inclusive and exclusive keywords (lower for
    direction 1, upper for -1); None when it has none, or one is not a finite number."""
    bounds = []
    for key, strict in ((inclusive, False), (exclusive, True)):
        value = node.get(key)
        if value is None:
            continue
        if not is_number(value) or not math.isfinite(value):
            return None
        edge = math.ceil(value) if direction == 1 else math.floor(value)
        if strict and edge == value:
            edge += direction
        bounds.append(edge)
    if not bounds:
        return None
    return max(bounds) if direction == 1 else min(bounds)


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


JSON_TYPES: dict[str, Callable[[Any], bool]] = {
    "null": lambda value: value is None,
    "boolean": lambda value: isinstance(value, bool),
    "integer": lambda value: is_number(value) and (isinstance(value, int) or value.is_integer()),
    "number": is_number,
    "string": lambda value: isinstance(value, str),
    "array": lambda value: isinstance(value, list),
    "object": lambda value: isinstance(value, dict),
}


def enum_without_type_list(node: dict[str, Any]) -> dict[str, Any]:
    """An `enum` or `const` beside a list of types (`"type": ["string", "null"], "enum":
    ["red", "blue", null]`, OpenAI's strict form of an optional choice) as the values alone
    that have one of those types: llama-cpp-python's grammar converter reads a list of types
    before an enum or const and leaves these out (any string was answered)."""
    kind = node.get("type")
    if not isinstance(kind, list) or not ("enum" in node or "const" in node):
        return node
    if not all(isinstance(name, str) and name in JSON_TYPES for name in kind):
        return node  # an unknown type: left for the converter to refuse

    def typed(value: Any) -> bool:
        return any(JSON_TYPES[name](value) for name in kind)

    kept = {key: value for key, value in node.items() if key != "type"}
    if "const" in node:
        return kept if typed(node["const"]) else node
    enum = node["enum"]
    if not isinstance(enum, list) or not any(typed(value) for value in enum):
        return node  # matches nothing: left as it is
    return {**kept, "enum": [value for value in enum if typed(value)]}


IGNORED_KEYWORDS = (
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
    "uniqueItems", "minProperties", "maxProperties", "dependentRequired", "contains",
)  # fmt: skip
CONVERTED_FORMATS = re.compile(r"^(date|time|date-time|uuid[1-5]?)$")


def ignored_constraint(schema: Any) -> tuple[str, str] | None:
    """(path, what) of the first constraint that llama-cpp-python's grammar converter leaves
    out of the grammar, None when there is none: bounds and multiples of numbers, string
    formats other than date, time, date-time and uuid, unique items, property counts and
    dependencies, and `required` names missing from `properties` (never written). A local
    worker's answer breaks them freely ({"n": 1} for a minimum of 1000, a phone number for
    an email)."""
    for path, node in schema_nodes(schema):
        for keyword in IGNORED_KEYWORDS:
            value = node.get(keyword)
            if value is not None and value is not False:  # minimum 0 is a bound
                return f"{path}.{keyword}", f"`{keyword}`"
        form, kind = node.get("format"), node.get("type")
        # A list of types is sent as one alternative per type, the string one with its format.
        string = kind in (None, "string") or (isinstance(kind, list) and "string" in kind)
        if isinstance(form, str) and string and not CONVERTED_FORMATS.match(form):
            return f"{path}.format", f'`format: "{form}"`'
        properties = node.get("properties")
        required = node.get("required")
        if isinstance(properties, dict) and isinstance(required, list):
            missing = [name for name in required if name not in properties]
            if missing:
                return f"{path}.required", f"`required` {missing[0]!r} (not in its properties)"
    return None


def empty_property_name(schema: Any) -> str | None:
    """The path of the first `properties` holding an empty name, None when there is none:
    llama-cpp-python names a property's grammar rule after it, and the empty name's is the
    root rule, so the answer is that property's value alone."""
    for path, node in schema_nodes(schema):
        properties = node.get("properties")
        if isinstance(properties, dict) and "" in properties:
            return f'{path}.properties[""]'
    return None


def unconvertible_schema(schema: Any) -> str | None:
    """What llama-cpp-python's grammar converter fails on in a JSON schema object (a `$ref`
    other than to "#/...", a `not`, a sub-schema it does not recognise), None when it
    converts it. Its server answers such a schema with free JSON."""
    if not isinstance(schema, dict):
        return None  # none (a function without parameters) gets the empty object schema
    try:
        from llama_cpp.llama_grammar import json_schema_to_gbnf
    except ImportError:  # without llama-cpp-python there are no local workers
        return None
    try:
        json_schema_to_gbnf(json.dumps(schema))
    except Exception as error:  # it fails with assertions and any error of its code
        detail = str(error).splitlines()[0] if str(error) else type(error).__name__
        return detail[:200]
    return None


MAX_OPTIONAL_REPEATS = 1000  # 1000 worked with SmolLM2's server; 1500 crashed it
BOUNDED_QUANTIFIER = re.compile(r"\{(\d+),(\d+)\}")  # a pattern's {m,n}
LENGTH_LIMITS = (("minLength", "maxLength", "characters"), ("minItems", "maxItems", "items"))


def deep_repetition(schema: Any) -> tuple[str, str] | None:
    """(path, what) of the first string length, array size or pattern quantifier {m,n}
    whose maximum exceeds its minimum by more than MAX_OPTIONAL_REPEATS, None when there is
    none: llama-cpp-python writes each optional repetition as a group nested in the last,
    and its grammar parser overflows its stack on a deep nesting (maxLength 1500)."""
    for path, node in schema_nodes(schema):
        for low_key, high_key, unit in LENGTH_LIMITS:
            low, high = node.get(low_key, 0), node.get(high_key)
            if is_count(high) and is_count(low) and high - low > MAX_OPTIONAL_REPEATS:
                return f"{path}.{high_key}", f"{low} to {high} {unit}"
        pattern = node.get("pattern")
        quantifiers = BOUNDED_QUANTIFIER.findall(pattern) if isinstance(pattern, str) else []
        for low_text, high_text in quantifiers:
            if int(high_text) - int(low_text) > MAX_OPTIONAL_REPEATS:
                return f"{path}.pattern", f"{{{low_text},{high_text}}} repetitions"
    return None


def is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def json_texts(value: Any) -> Iterator[str]:
    """Every string in a JSON value: itself, its items, its objects' keys and values."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for item in value:
            yield from json_texts(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield str(key)
            yield from json_texts(item)


def unrenderable_character(text: str) -> str | None:
    """The first character of `text` that llama-cpp-python's grammar converter mangles in
    a literal (see unrenderable_literal), described for a user; None when there is none."""
    for character in text:
        if character == '"':
            return 'a double quote (")'
        if character == "\\":
            return "a backslash (\\)"
        if ord(character) < 0x20:
            return f"a control character ({json.dumps(character)[1:-1]})"
        if ord(character) > 0xFFFF:
            return f"a character beyond U+FFFF ({character}, U+{ord(character):X})"
    return None


class WorkerPool:
    """An async context manager over the configured workers."""

    def __init__(self, config: PoolConfig) -> None:
        self.config = config
        self.worker_ids: list[str] = config.worker_ids
        self._workers = {worker.id: worker for worker in config.workers}
        self._clients: dict[str, AsyncOpenAI] = {}
        self._keys: dict[str, str] = {}
        self._semaphores: dict[str, asyncio.Semaphore] = {}
        self.servers: dict[str, LocalServer] = {}
        self.vocab_sizes: dict[str, int | None] = {}  # local workers' models' vocabularies
        self.calls_as_text: dict[str, bool] = {}  # local workers whose prompts drop tool calls
        self.refuses_stream_options: set[str] = set()  # streamed to without them (see stream_chat)
        self._restarting: dict[str, asyncio.Task[None]] = {}  # see stop_abandoned_answer
        # Each worker's calls sent and not yet answered, oldest first (see _queued_behind).
        self._sent: dict[str, list[object]] = {}
        self._closing = False

    async def __aenter__(self) -> WorkerPool:
        self._keys = {worker.id: _read_key(worker) for worker in self.config.workers}
        self.servers = await start_local_servers(self.config.workers)
        if self.servers:
            llama_cpp_request_model()  # now, not on the event loop of the first request
        for worker_id, server in self.servers.items():
            gguf = resolve_gguf(server.config.gguf)
            self.vocab_sizes[worker_id] = await asyncio.to_thread(vocab_size, gguf)
            renders = await asyncio.to_thread(renders_tool_calls, server.config)
            self.calls_as_text[worker_id] = not renders
        try:
            for worker in self.config.workers:
                self._clients[worker.id] = self._new_client(worker)
                self._semaphores[worker.id] = asyncio.Semaphore(worker.max_concurrency)
        except BaseException:
            stop_local_servers(self.servers.values())
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._closing = True
        for task in list(self._restarting.values()):
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        try:
            for client in self._clients.values():
                await client.close()
        finally:
            self._clients.clear()
            stop_local_servers(self.servers.values())

    def _new_client(self, worker: WorkerConfig) -> AsyncOpenAI:
        return AsyncOpenAI(
            api_key=self._keys[worker.id],
            base_url=self.base_url(worker.id),
            max_retries=0,
            timeout=worker.timeout_s,
        )

    def crashed_servers(self) -> list[str]:
        """Local workers whose llama.cpp process exited without being stopped."""
        return [worker_id for worker_id, server in self.servers.items() if server.crashed]

    async def restart(self, worker_id: str) -> None:
        """Start a local worker's llama.cpp server again (on a new port) after its process
        exited; the tail of the old one's log goes to the log first. LocalServerError if
        the new one does not come up."""
        old = self.servers[worker_id]
        code = None if old.process is None else old.process.returncode
        logger.warning(
            "local worker %s: its llama.cpp server exited (code %s); starting it again. "
            "Last lines of its log:\n%s",
            worker_id, code, old.log_tail(),
        )  # fmt: skip
        await self._start_again(worker_id)

    async def _start_again(self, worker_id: str) -> None:
        old = self.servers[worker_id]
        old.stop()
        old.remove_log()
        server = LocalServer(self.worker(worker_id))
        try:
            server.launch()
            await server.wait_ready()
        except BaseException:
            server.stop()
            server.stopped = False  # still to be restarted later
            self.servers[worker_id] = server
            raise
        self.servers[worker_id] = server
        previous = self._clients.get(worker_id)
        self._clients[worker_id] = self._new_client(self.worker(worker_id))
        if previous is not None:
            await previous.close()

    def stop_abandoned_answer(
        self,
        worker_id: str,
        why: str = "the caller of the answer it was generating is gone",
        call: object | None = None,
    ) -> None:
        """A non-streamed call to a local worker was abandoned (its client left, or it timed
        out) while llama.cpp generated the answer. Its server goes on generating it (it
        notices only a stream's client leaving) and serves one request at a time, so every
        later request to it waited for that answer: its process is killed and started again
        (about 2 s, which later calls wait for; see `_ready_client`). Not for a `call` still
        queued behind another (max_concurrency > 1): llama.cpp skips a request whose client
        left when its turn comes, and the kill would cut the answer being generated."""
        server = self.servers.get(worker_id)
        if self._closing or worker_id in self._restarting or server is None:
            return
        if not server.is_alive() or (call is not None and self._queued_behind(worker_id, call)):
            return
        logger.info(
            "local worker %s: %s; its llama.cpp server is started again to stop it",
            worker_id, why,
        )  # fmt: skip
        server.kill()
        task = asyncio.create_task(self._start_again(worker_id))
        self._restarting[worker_id] = task
        task.add_done_callback(lambda done: self._restarted(worker_id, done))

    def _stop_timed_out(
        self, worker: WorkerConfig, kind: str, error: Exception, call: object
    ) -> None:
        """A local worker's call (or stream's first chunk) that timed out is abandoned like
        one whose caller left: a retry or the next call would wait behind what llama.cpp
        goes on doing for it (generating the answer, or hanging)."""
        if kind == "timeout" and worker.local is not None and status_code(error) is None:
            why = f"it gave no answer within its timeout_s of {worker.timeout_s:g} s"
            self.stop_abandoned_answer(worker.id, why, call)

    def _sent_call(self, worker_id: str) -> object:
        """Note a call sent to the worker (until `_answered`); its token."""
        call = object()
        self._sent.setdefault(worker_id, []).append(call)
        return call

    def _answered(self, worker_id: str, call: object | None) -> None:
        sent = self._sent.get(worker_id, [])
        if call in sent:
            sent.remove(call)

    def _queued_behind(self, worker_id: str, call: object) -> bool:
        """Whether an older call to the worker is still unanswered: llama.cpp's server
        answers one request at a time, in the order they came, so this one is waiting."""
        sent = self._sent.get(worker_id, [])
        return call in sent and sent[0] is not call

    def _restarted(self, worker_id: str, task: asyncio.Task[None]) -> None:
        self._restarting.pop(worker_id, None)
        if not task.cancelled() and task.exception() is not None:
            logger.error("local worker %s did not start again: %s", worker_id, task.exception())

    async def _ready_client(self, worker_id: str) -> AsyncOpenAI:
        """The worker's client, once a restart of its server (stop_abandoned_answer) is
        over."""
        restarting = self._restarting.get(worker_id)
        if restarting is not None:
            with contextlib.suppress(Exception):  # it failed: the call says so
                await asyncio.shield(restarting)
        return self._client(worker_id)

    # -- lookup -----------------------------------------------------------------------

    def worker(self, worker_id: str) -> WorkerConfig:
        try:
            return self._workers[worker_id]
        except KeyError:
            raise KeyError(
                f"unknown worker {worker_id!r}; the pool has {', '.join(self.worker_ids)}"
            ) from None

    def base_url(self, worker_id: str) -> str:
        worker = self.worker(worker_id)
        if worker.is_local:
            return self.servers[worker_id].base_url
        assert worker.base_url is not None
        return worker.base_url

    def is_alive(self, worker_id: str) -> bool:
        """False only when we know the worker is gone: its local server process exited
        (and is not being started again after a call was abandoned)."""
        server = self.servers.get(worker_id)
        return server is None or server.is_alive() or worker_id in self._restarting

    def cost(self, worker_id: str, usage: Usage) -> float:
        return usage_cost(self.worker(worker_id), usage)

    def request_messages(
        self, worker_id: str, messages: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """The messages as sent: for a local llama.cpp worker in the plain form its chat
        template takes; the worker's system prompt goes first (merged with a system message
        the caller already has)."""
        worker = self.worker(worker_id)
        if worker.local is not None:
            as_text = self.calls_as_text.get(worker_id, False)
            messages = [llama_cpp_message(message, as_text) for message in messages]
        system = worker.system_prompt
        if not system:
            return list(messages)
        if messages and messages[0].get("role") == "system":
            first = dict(messages[0])
            content = first.get("content")
            if isinstance(content, list):
                first["content"] = [{"type": "text", "text": system}, *content]
            else:
                first["content"] = f"{system}\n\n{content or ''}".rstrip()
            return [first, *messages[1:]]
        return [{"role": "system", "content": system}, *messages]

    # -- calls ------------------------------------------------------------------------

    async def chat(
        self,
        worker_id: str,
        messages: list[dict[str, Any]],
        on_slot: Callable[[], None] | None = None,
        retried: frozenset[str] = RETRYABLE_KINDS,
        /,
        **params: Any,
    ) -> CallResult:
        """One chat completion; failures come back as a CallResult with `error` set.
        `on_slot` is called once the call has one of the worker's max_concurrency slots (a
        caller giving up before then knows the worker was busy, not failing); `retried`:
        the error kinds tried again (up to max_retries), e.g. all but rate_limit for a
        caller with another worker to ask.
        (Positional-only arguments: any request key, `worker_id` or `self` too, is a param.)"""
        worker = self.worker(worker_id)
        self._client(worker_id)  # the pool is started (the call's client: _ready_client)
        body = self.request_body(worker, messages, params)
        refused = self.refused_locally(worker, body)
        if refused is not None:
            return CallResult(
                worker_id=worker_id, output=None, usage=None, cost=None, latency_s=0.0,
                error=str(refused), error_kind=refused.kind, attempts=0,
                status_code=refused.status_code, started_at=time.time(), finished_at=time.time(),
            )  # fmt: skip
        async with self._semaphores[worker_id]:
            if on_slot is not None:
                on_slot()
            started_at = time.time()
            start = time.perf_counter()
            attempt = 0
            while True:
                attempt += 1
                client = await self._ready_client(worker_id)
                response = None
                call = self._sent_call(worker_id)
                try:
                    async with asyncio.timeout(worker.timeout_s):
                        # The SDK's generic post: its auth, errors and timeouts, without
                        # the typed-params transform, which costs ~1 ms per call.
                        response = await client.post(CHAT_PATH, cast_to=SDKResponse, body=body)
                        raw = json.loads(response.content)
                    if NON_FINITE_MARK.search(response.content):
                        raw = json_safe(raw)
                    if worker.local is not None and isinstance(raw, dict):
                        raw = one_call_style(raw, legacy=bool(body.get("functions")))
                        raw = top_logprobs_as_asked(raw, body.get("top_logprobs"))
                    output, usage = _parse_completion(raw)
                    cost = None if usage is None else self.cost(worker_id, usage)
                    return CallResult(
                        worker_id=worker_id, output=output, usage=usage, cost=cost,
                        latency_s=time.perf_counter() - start, error=None, error_kind=None,
                        attempts=attempt, raw=raw, started_at=started_at,
                        finished_at=time.time(),
                    )  # fmt: skip
                except asyncio.CancelledError:
                    if worker.local is not None and response is None:
                        self.stop_abandoned_answer(worker_id, call=call)
                    raise
                except Exception as error:
                    kind, message, retry_after = self._describe(worker_id, error)
                    self._stop_timed_out(worker, kind, error, call)
                    self._answered(worker_id, call)
                    if kind not in retried or attempt > worker.max_retries:
                        # A prompt over the worker's context is no failure of the worker.
                        too_long = error_code(error) == CONTEXT_LENGTH_EXCEEDED
                        logger.log(
                            logging.DEBUG if too_long else logging.INFO,
                            "worker %s failed after %d attempt(s): %s", worker_id, attempt, message,
                        )  # fmt: skip
                        return CallResult(
                            worker_id=worker_id, output=None, usage=None, cost=None,
                            latency_s=time.perf_counter() - start, error=message,
                            error_kind=kind, attempts=attempt, started_at=started_at,
                            finished_at=time.time(), status_code=status_code(error),
                            error_code=error_code(error), retry_after_s=retry_after,
                        )  # fmt: skip
                    await asyncio.sleep(_backoff(worker, attempt, retry_after))
                finally:
                    self._answered(worker_id, call)

    async def stream_chat(
        self,
        worker_id: str,
        messages: list[dict[str, Any]],
        on_slot: Callable[[], None] | None = None,
        retried: frozenset[str] = RETRYABLE_KINDS,
        /,
        **params: Any,
    ) -> AsyncIterator[dict[str, Any]]:
        """Yield chat.completion.chunk dicts as they arrive.

        Opening the stream (up to and including the first chunk) is retried like `chat`;
        if it still fails, WorkerCallError is raised before anything is yielded, so a
        caller can fall back to another worker. A failure after the first chunk raises
        WorkerCallError too. The worker's slot is held until the stream ends (`on_slot` is
        called once it has it, and `retried` read, as for `chat`): iterate to the end or
        close the generator (`contextlib.aclosing`)."""
        worker = self.worker(worker_id)
        self._client(worker_id)  # the pool is started (the call's client: _ready_client)
        body = self.request_body(worker, messages, params)
        if worker_id in self.refuses_stream_options:
            body.pop("stream_options", None)
        refused = self.refused_locally(worker, body)
        if refused is not None:
            raise refused
        async with self._semaphores[worker_id]:
            if on_slot is not None:
                on_slot()
            attempt = 0
            while True:
                attempt += 1
                client = await self._ready_client(worker_id)
                stream = None
                call = self._sent_call(worker_id)  # answered when the stream ends
                try:
                    async with asyncio.timeout(worker.timeout_s):
                        stream = await client.post(
                            CHAT_PATH,
                            cast_to=ChatCompletionChunk,
                            body={**body, "stream": True},
                            stream=True,
                            stream_cls=AsyncStream[ChatCompletionChunk],
                        )
                        iterator = stream.__aiter__()
                        first = await iterator.__anext__()
                    break
                except StopAsyncIteration:
                    await _close(stream)
                    self._answered(worker_id, call)
                    raise await self._empty_stream_error(worker, client, body) from None
                except Exception as error:
                    await _close(stream)
                    kind, message, retry_after = self._describe(worker_id, error)
                    self._stop_timed_out(worker, kind, error, call)
                    self._answered(worker_id, call)
                    if "stream_options" in body and refuses_stream_options(error):
                        body = self._without_stream_options(worker_id, body, message)
                        attempt -= 1  # the same call once more, not a retry of a failure
                        continue
                    if kind not in retried or attempt > worker.max_retries:
                        raise WorkerCallError(
                            kind, message, status_code(error), error_code(error), retry_after
                        ) from None
                    await asyncio.sleep(_backoff(worker, attempt, retry_after))
                except BaseException:
                    self._answered(worker_id, call)
                    raise
            named: set[tuple[Any, Any]] = set()
            legacy = bool(body.get("functions"))

            def shape(chunk: dict[str, Any]) -> dict[str, Any]:
                chunk = json_safe(chunk)
                if worker.local is None:
                    return chunk
                chunk = top_logprobs_as_asked(chunk, body.get("top_logprobs"))
                return named_once(one_call_style(chunk, legacy), named)

            try:
                yield shape(first.model_dump(exclude_unset=True))
                async for chunk in iterator:
                    yield shape(chunk.model_dump(exclude_unset=True))
            except Exception as error:
                kind, message, _ = self._describe(worker_id, error)
                message = f"{message} (after the stream started)"
                raise WorkerCallError(
                    kind, message, status_code(error), error_code(error)
                ) from None
            finally:
                self._answered(worker_id, call)
                await _close(stream)

    async def _empty_stream_error(
        self, worker: WorkerConfig, client: AsyncOpenAI, body: dict[str, Any]
    ) -> WorkerCallError:
        """Why a stream ended before its first chunk. llama-cpp-python's server answers a
        request it refuses (a prompt longer than its context) with an empty 200 stream; a
        local worker is asked once more without streaming, which gives the real error (a
        400 context_length_exceeded), so the worker is not blamed for it.
        That aborted stream also resets its keep-alive connection, so a connection error
        on the first try is tried once more, on a new connection."""
        empty = WorkerCallError("server", f"worker {worker.id}: the stream ended before any chunk")
        if worker.local is None:
            return empty
        refused = await self._unstreamed_error(worker, client, body)
        if refused is not None and refused.kind == "connection":
            refused = await self._unstreamed_error(worker, client, body)
        return refused or empty

    async def _unstreamed_error(
        self, worker: WorkerConfig, client: AsyncOpenAI, body: dict[str, Any]
    ) -> WorkerCallError | None:
        """The error of the same request sent without streaming; None if it succeeds."""
        try:
            async with asyncio.timeout(worker.timeout_s):
                await client.post(CHAT_PATH, cast_to=SDKResponse, body=body)
        except Exception as error:
            kind, message, _ = self._describe(worker.id, error)
            return WorkerCallError(kind, message, status_code(error), error_code(error))
        return None

    # -- helpers ----------------------------------------------------------------------

    def _client(self, worker_id: str) -> AsyncOpenAI:
        self.worker(worker_id)
        client = self._clients.get(worker_id)
        if client is None:
            raise RuntimeError("the pool is not started: use `async with WorkerPool(config)`")
        return client

    def request_body(
        self, worker: WorkerConfig, messages: list[dict[str, Any]], params: dict[str, Any]
    ) -> dict[str, Any]:
        """The JSON body sent: the worker's params, overridden by the call's (in the form
        llama.cpp's server takes for a local worker)."""
        merged = with_output_limit(worker, params)
        merged.pop("stream", None)
        if worker.local is not None:
            merged = llama_cpp_params(merged)
        return {
            "model": merged.pop("model", worker.model),
            "messages": self.request_messages(worker.id, messages),
            **merged,
        }

    def refused_locally(self, worker: WorkerConfig, body: dict[str, Any]) -> WorkerCallError | None:
        """A local worker's request that llama-cpp-python's server would refuse, as the 400
        it is: that server answers a request failing its own validation with a 500, which
        would count against the worker as if it had failed; and one with a logit_bias key
        beyond its model's vocabulary, which it would silently ignore."""
        if worker.local is None:
            return None
        problem = llama_cpp_request_problem(body) or self.unknown_token(worker, body)
        if problem is None:
            return None
        message = (
            f"worker {worker.id}: client: llama.cpp's server cannot take this request: {problem}"
        )
        return WorkerCallError("client", message, 400)

    def unknown_token(self, worker: WorkerConfig, body: dict[str, Any]) -> str | None:
        """A logit_bias key beyond the local worker's vocabulary: llama.cpp's server
        ignores the whole logit_bias then (every bias of the request), where OpenAI refuses
        the request."""
        size = self.vocab_sizes.get(worker.id)
        bias = body.get("logit_bias")
        if size is None or not isinstance(bias, dict):
            return None
        for key in bias:
            if str(key).isdigit() and int(key) >= size:
                return (
                    f"logit_bias key {key!r} is not a token id of its model, whose vocabulary "
                    f"has {size} tokens (ids 0 to {size - 1}); use its token ids, or drop the "
                    "key (llama.cpp would ignore every bias of the request)"
                )
        return None

    def _without_stream_options(
        self, worker_id: str, body: dict[str, Any], refusal: str
    ) -> dict[str, Any]:
        """The body without stream_options, which the worker refused: usage asked for by
        the caller (serve always asks) is not worth failing the call, and the caller
        estimates it as for a worker that reports none. Its later calls leave them out."""
        if worker_id not in self.refuses_stream_options:
            self.refuses_stream_options.add(worker_id)
            logger.warning(
                "worker %s refused stream_options (%s); its streams are asked without them "
                "from now on, and their token counts are estimated", worker_id, refusal,
            )  # fmt: skip
        return {key: value for key, value in body.items() if key != "stream_options"}

    def _describe(self, worker_id: str, error: BaseException) -> tuple[str, str, float | None]:
        kind, detail, retry_after = classify_error(error)
        message = f"worker {worker_id}: {kind}: {detail}"
        return kind, redact(message, self._keys.get(worker_id)), retry_after


# A worker's refusal of a call for its own settings, which no later call changes (collect
# takes the worker down after a few; serve tries the next worker), and what to fix.
WORKER_REFUSALS = {
    401: "its API key is missing or not accepted: fix api_key_env or the key in that variable",
    403: "its API key has no access to this model or endpoint: fix api_key_env or model",
    404: "its model or endpoint is not found: fix model or base_url",
}


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


OUTPUT_LIMITS = ("max_completion_tokens", "max_tokens")  # OpenAI's names for one limit


def output_limit(params: dict[str, Any]) -> tuple[str, Any] | None:
    """The output-token limit that params set, as (its name, its value), None for none."""
    for name in OUTPUT_LIMITS:
        if params.get(name) is not None:
            return name, params[name]
    return None


def output_limit_name(worker: WorkerConfig, params: dict[str, Any]) -> str:
    """The name a worker gets its output-token limit under: `max_tokens` for a local
    worker (llama-cpp-python's server reads no other), the name the worker's own params
    use (the pool knows its server: OpenAI's o-series refuse `max_tokens`, some servers
    read only `max_tokens`), else the name the caller used."""
    if worker.local is not None:
        return "max_tokens"
    named = [name for name in OUTPUT_LIMITS if name in worker.params] or [
        name for name in OUTPUT_LIMITS if params.get(name) is not None
    ]
    return named[0] if named else "max_tokens"


def with_output_limit(worker: WorkerConfig, params: dict[str, Any]) -> dict[str, Any]:
    """The worker's params overridden by the call's, with one output-token limit (the
    call's, max_completion_tokens first, else the worker's) under the worker's name for
    it: `max_tokens` beside the worker's `max_completion_tokens` would be two limits."""
    merged = {**worker.params, **params}
    limit = output_limit(params) or output_limit(worker.params)
    if limit is not None:
        for name in OUTPUT_LIMITS:
            merged.pop(name, None)
        merged[output_limit_name(worker, params)] = limit[1]
    return merged


def one_call_style(payload: dict[str, Any], legacy: bool) -> dict[str, Any]:
    """A local worker's completion (or stream chunk) in the calling style of its request.
    llama.cpp's server gives a function call as both `tool_calls` and the deprecated
    `function_call`, with finish_reason "tool_calls"; OpenAI answers a request with tools
    with `tool_calls` only, and one with the deprecated `functions` (`legacy`) with
    `function_call` only and finish_reason "function_call", which clients of that style
    look for (one checking `function_call` first took a tool call for a legacy one)."""
    for choice in payload.get("choices") or []:
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
    `top_logprobs: 0`, and so for `logprobs: true` alone)."""
    if not isinstance(wanted, int):
        return payload
    for choice in payload.get("choices") or []:
        logprobs = choice.get("logprobs")
        tokens = logprobs.get("content") if isinstance(logprobs, dict) else None
        for token in tokens if isinstance(tokens, list) else []:
            top = token.get("top_logprobs") if isinstance(token, dict) else None
            if isinstance(top, list) and len(top) > wanted:
                token["top_logprobs"] = sorted(top, key=logprob, reverse=True)[:wanted]
    return payload


def logprob(entry: Any) -> float:
    value = entry.get("logprob") if isinstance(entry, dict) else None
    return float(value) if isinstance(value, (int, float)) else -math.inf


def named_once(chunk: dict[str, Any], named: set[tuple[Any, Any]]) -> dict[str, Any]:
    """A llama.cpp stream chunk with a tool call's id, type and function name (and a
    deprecated function_call's name) left out after its first delta (`named` holds the
    calls seen so far), as OpenAI streams them: llama.cpp repeats them in every delta, and
    clients join what the deltas hold (the openai SDK's stream helper named the tool
    "addaddadd...")."""
    for choice in chunk.get("choices") or []:
        delta = choice.get("delta") or {}
        calls = [(call.get("index"), call) for call in delta.get("tool_calls") or []]
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


def status_code(error: BaseException) -> int | None:
    return error.status_code if isinstance(error, openai.APIStatusError) else None


def error_code(error: BaseException) -> str | None:
    """The `code` of a worker's OpenAI-shaped error body (context_length_exceeded, ...); a
    400 (or TGI's 422) with no such code (none, or its HTTP status) that says the prompt is
    over the context is given context_length_exceeded."""
    if not isinstance(error, openai.APIStatusError):
        return None
    code = error.code
    uncoded = code is None or str(code) == str(error.status_code)  # vLLM's gives its status
    if (
        error.status_code in CONTEXT_REFUSAL_STATUSES
        and uncoded
        and refuses_as_too_long(_status_message(error))
    ):
        return CONTEXT_LENGTH_EXCEEDED
    return code


def refuses_stream_options(error: BaseException) -> bool:
    """Whether a worker's error is its refusal of stream_options: an older Azure API
    version's 400 "Unrecognized request argument supplied: stream_options", a gateway's
    400 or 422 naming them."""
    return (
        isinstance(error, openai.APIStatusError)
        and error.status_code in (400, 422)
        and "stream_options" in _status_message(error)
    )


def refuses_as_too_long(message: str) -> bool:
    """Whether an error message says the prompt is over the model's context. Not when the
    completion asked (max_tokens) is itself as long as the context: every prompt would be
    refused alike, for the worker's settings, not for this prompt."""
    if CONTEXT_REFUSAL.search(message) is None:
        return False
    limit = context_limit(message)
    asked = first_number(COMPLETION_ASKED, message)
    return limit is None or asked is None or asked < limit


def refused_for_max_tokens(message: str) -> bool:
    """Whether a context refusal's message shows that the prompt fits the context and only
    the completion asked (max_tokens) does not fit beside it: a lower max_tokens would have
    it answered."""
    limit = context_limit(message)
    prompt = first_number(PROMPT_ASKED, message)
    return limit is not None and prompt is not None and prompt < limit


def context_limit(message: str) -> int | None:
    """The context length (tokens) a context refusal's message states, None if none."""
    return first_number(CONTEXT_LIMIT, message)


def first_number(pattern: re.Pattern[str], message: str) -> int | None:
    """The number the first group that matched of pattern's first match holds, None if none."""
    found = pattern.search(message)
    number = next((group for group in found.groups() if group), None) if found else None
    return None if number is None else int(number)


def classify_error(error: BaseException) -> tuple[str, str, float | None]:
    """(kind, detail, retry-after seconds) for an exception raised by a call."""
    if isinstance(error, openai.APIStatusError):
        status = error.status_code
        detail = f"HTTP {status}: {_status_message(error)}"
        if status == 429:
            return "rate_limit", detail, _retry_after(error)
        if status == 408:
            return "timeout", detail, None
        if status >= 500:
            return "server", detail, _retry_after(error)
        return "client", detail, None
    if isinstance(error, (openai.APITimeoutError, TimeoutError)):
        return "timeout", "no answer within the worker's timeout_s", None
    if isinstance(error, openai.APIConnectionError):
        cause = error.__cause__ or error.__context__
        reason = f" ({type(cause).__name__}: {cause})" if cause else ""
        return "connection", f"could not reach the server{reason}", None
    if isinstance(error, (ValueError, KeyError, TypeError, IndexError)):
        return "server", f"malformed response: {type(error).__name__}: {error}", None
    return "server", f"{type(error).__name__}: {error}", None


def usage_cost(worker: WorkerConfig, usage: Usage) -> float:
    """USD: the worker's prices per million tokens times the call's tokens."""
    return (
        usage.prompt_tokens * worker.input_price_per_mtok
        + usage.completion_tokens * worker.output_price_per_mtok
    ) / 1e6


def redact(text: str, secret: str | None) -> str:
    text = text[:MAX_ERROR_CHARS]
    if secret and secret != NO_KEY and len(secret) >= 4:
        text = text.replace(secret, "***")
    return text


def _status_message(error: openai.APIStatusError) -> str:
    body = error.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])
        return json.dumps(body)[:MAX_ERROR_CHARS]
    return str(body or error.message)


def _retry_after(error: openai.APIStatusError) -> float | None:
    """The seconds a worker's error asks to wait before trying again, as the openai SDK reads
    them: `retry-after-ms`, else `Retry-After` in seconds or as an HTTP date; None when it
    says nothing readable."""
    headers = error.response.headers
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        seconds: float | None
        try:
            seconds = float(value) * scale
        except ValueError:
            seconds = _seconds_until(value) if scale == 1.0 else None
        if seconds is not None and math.isfinite(seconds):
            return max(0.0, seconds)
    return None


def _seconds_until(http_date: str) -> float | None:
    try:
        moment = email.utils.parsedate_to_datetime(http_date)
    except (TypeError, ValueError):
        return None
    if moment.tzinfo is None:
        return None
    return moment.timestamp() - time.time()


def _backoff(worker: WorkerConfig, attempt: int, retry_after: float | None) -> float:
    """Exponential with full-range jitter (0.5x-1.5x); at least the server's Retry-After (up
    to MAX_RETRY_AFTER_S: a longer wait is left to the caller, who is told it)."""
    delay = worker.retry_backoff_s * (2 ** (attempt - 1)) * random.uniform(0.5, 1.5)
    return max(delay, min(retry_after or 0.0, MAX_RETRY_AFTER_S))


def _parse_completion(raw: Any) -> tuple[str, Usage | None]:
    if not isinstance(raw, dict) or not raw.get("choices"):
        raise ValueError(f"no choices in the response: {str(raw)[:200]}")
    message = raw["choices"][0].get("message") or {}
    content = message.get("content")
    if content is None:
        content = ""
    usage_raw = raw.get("usage")
    usage = None
    if isinstance(usage_raw, dict) and "prompt_tokens" in usage_raw:
        usage = Usage(
            prompt_tokens=int(usage_raw.get("prompt_tokens") or 0),
            completion_tokens=int(usage_raw.get("completion_tokens") or 0),
        )
    return str(content), usage


def _read_key(worker: WorkerConfig) -> str:
    if worker.api_key_env is None:
        return NO_KEY
    key = os.environ.get(worker.api_key_env)
    if not key:
        raise PoolStartError(
            f"worker {worker.id!r} reads its API key from the environment variable "
            f"{worker.api_key_env}, which is not set; `export {worker.api_key_env}=...` "
            "first, or remove the worker from the pool"
        )
    return key


async def _close(stream: Any) -> None:
    if stream is not None:
        try:
            await stream.close()
        except Exception:  # closing a broken connection may fail again; nothing to add
            logger.debug("closing a failed stream raised", exc_info=True)


def judge_from_pool(pool: WorkerPool, worker_id: str, **params: Any) -> Judge:
    """A grader's LLM judge backed by one worker of the pool (defaults to temperature 0)."""
    pool.worker(worker_id)
    params.setdefault("temperature", 0.0)

    async def judge(messages: list[dict[str, str]]) -> str:
        result = await pool.chat(worker_id, list(messages), **params)
        if result.error is not None or result.output is None:
            raise WorkerCallError(result.error_kind or "server", result.error or "no output")
        return result.output

    return judge
