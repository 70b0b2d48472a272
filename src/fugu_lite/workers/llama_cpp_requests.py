"""OpenAI chat requests in the form a local llama.cpp server takes, and what it cannot take.

`llama_cpp_message` and `llama_cpp_params` reshape a request's messages and parameters;
`llama_cpp_request_problem` finds what llama-cpp-python's server would refuse (its own request
model), `local_worker_gaps` what it would answer wrongly, answer with a 500 or crash on.
The JSON-schema checks live in llama_cpp_schemas.py; the answers' reshaping in
llama_cpp_answers.py.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import inspect
import json
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from ..schemas import parts_text, text_only
from .api_keys import PoolStartError
from .config import LocalServerConfig, WorkerConfig, resolve_gguf
from .llama_cpp_schemas import (
    MAX_OPTIONAL_REPEATS,
    deep_repetition,
    empty_property_name,
    ignored_constraint,
    llama_cpp_schema,
    unconvertible_pattern,
    unconvertible_schema,
    unrenderable_literal,
)
from .local_server import CHAT_TEMPLATE_KEY, chat_template, gguf_reading, worker_gguf
from .output_limits import OUTPUT_LIMITS

GGUF_TEMPLATE_FORMAT = "chat_template."  # a GGUF's own templates: chat_template.default...


def llama_cpp_message(message: dict[str, Any], calls_as_text: bool = False) -> dict[str, Any]:
    """llama.cpp's chat templates take string content and no `developer` role: text (and
    refusal) parts become one string, `developer` becomes `system` (OpenAI's own mapping
    for older models), and a message without content (an assistant turn holding only
    tool_calls, which OpenAI sends as `content: null`) gets an empty string, since
    llama.cpp's server answers those with a 500 (a declined answer, `content: null` beside
    its `refusal`, gets the refusal's words). With `calls_as_text` (a chat template
    that renders no tool calls, such as SmolLM2's), an assistant's tool_calls or
    function_call are written into its content too (`call_lines`)."""
    plain = dict(message)
    if plain.get("role") == "developer":
        plain["role"] = "system"
    content = plain.get("content")
    if content is None:
        refusal = plain.get("refusal")  # OpenAI's declined answer: what the assistant said
        plain["content"] = refusal if isinstance(refusal, str) else ""
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
    template that reads `tool_calls` (SmolLM2's, like the fallback formats, does not): its
    own, or the one a chat_format chat_template.NAME names."""
    name = gguf_template_name(local.chat_format)
    if name is None:
        return "function" in str(local.chat_format)  # chatml-function-calling, functionary...
    template = chat_template(resolve_gguf(local.gguf), name)
    return template is not None and "tool_calls" in template


def gguf_template_name(chat_format: str | None) -> str | None:
    """The name of the GGUF chat template a chat_format renders prompts with: the GGUF's own
    (default) when none is set, NAME for chat_template.NAME; None for llama.cpp's formats."""
    if chat_format is None:
        return "default"
    if chat_format.startswith(GGUF_TEMPLATE_FORMAT):
        return chat_format.removeprefix(GGUF_TEMPLATE_FORMAT)
    return None


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
    response_format = llama_cpp_response_format(params.get("response_format"))
    if response_format is not None:
        converted["response_format"] = response_format
    if params.get("logprobs") is True and params.get("top_logprobs") is None:
        converted["top_logprobs"] = 0
    functions = params.get("functions")
    if isinstance(functions, list):
        converted["functions"] = [with_parameters(function) for function in functions]
    return {**converted, **llama_cpp_tools(params)}


def llama_cpp_response_format(response_format: Any) -> dict[str, Any] | None:
    """A response_format with a schema in llama.cpp's form (json_schema as json_object with
    its schema, the schema as its grammar converter reads it); None if it has none."""
    if isinstance(response_format, dict) and response_format.get("type") == "json_schema":
        spec = response_format.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if schema is None:
            return {"type": "json_object"}
        return {"type": "json_object", "schema": llama_cpp_schema(schema)}
    if isinstance(response_format, dict) and "schema" in response_format:
        return {**response_format, "schema": llama_cpp_schema(response_format["schema"])}
    return None


def llama_cpp_tools(params: dict[str, Any]) -> dict[str, Any]:
    """A request's `tools` (and a tool_choice "required" with one tool, as that tool named)
    in llama.cpp's form; {} when it has no list of tools."""
    tools = params.get("tools")
    if not isinstance(tools, list):
        return {}
    converted: dict[str, Any] = {
        "tools": [
            {**tool, "function": with_parameters(tool["function"])}
            if tool.get("type") == "function" and "function" in tool
            else tool
            for tool in tools
        ]
    }
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


def check_local_params(worker: WorkerConfig) -> None:
    """PoolStartError for a local worker's `params` (pool.yaml) that llama-cpp-python's
    server does not know (a typo, or another server's name such as repetition_penalty): it
    ignores them on every call without a word."""
    known = set(llama_cpp_request_model().model_fields) | set(OUTPUT_LIMITS)
    unknown = [key for key in worker.params if key not in known]
    if not unknown:
        return
    hints = [
        f"{key!r} (did you mean {close[0]!r}?)" if close else repr(key)
        for key in unknown
        for close in [difflib.get_close_matches(key, known, n=1)]
    ]
    raise PoolStartError(
        f"worker {worker.id}: params {', '.join(hints)} are not options of llama.cpp's server, "
        f"which would ignore them on every call; it takes {', '.join(sorted(known))}"
    )


def check_chat_format(worker: WorkerConfig) -> None:
    """PoolStartError for a local worker's chat_format that llama-cpp-python's server does not
    have (a typo): the server started all the same, and answered every call with a 500
    "Invalid chat handler". A chat_template.NAME format must name a template of the GGUF,
    and a worker without a chat_format needs a GGUF with a template of its own."""
    local = worker.local
    if local is None:
        return
    if local.chat_format is None:
        check_own_chat_template(worker.id, local)
        return
    chat_format = local.chat_format
    name = gguf_template_name(chat_format)
    if name is not None:
        gguf = worker_gguf(worker.id, local)
        if chat_template(gguf, name) is None:
            raise PoolStartError(
                f"worker {worker.id}: local.chat_format {chat_format!r} names a chat template "
                f"that {local.gguf} does not have (llama.cpp's server would answer every call "
                f"with an error); {own_template_advice(gguf)}"
            )
        return
    known = llama_cpp_chat_formats()
    if not known or chat_format in known:
        return
    close = nearest_chat_formats(chat_format, known)
    hint = f" (did you mean {' or '.join(map(repr, close))}?)" if close else ""
    own = chat_template(worker_gguf(worker.id, local)) is not None
    raise PoolStartError(
        f"worker {worker.id}: local.chat_format {chat_format!r}{hint} is not a chat format of "
        f"llama.cpp's server, which would answer every call with an error; it has "
        f"{', '.join(sorted(known))}"
        + (", or leave chat_format out for the GGUF's own template" if own else "")
    )


def nearest_chat_formats(chat_format: str, known: frozenset[str]) -> list[str]:
    """The chat formats a mistyped one most likely means: the one it is but for case and
    spaces ("ChatML", "chatml "), else up to three that read closest ("llama2")."""
    by_written = {name.lower(): name for name in known}
    written = chat_format.strip().lower()
    if written in by_written:
        return [by_written[written]]
    return [by_written[name] for name in difflib.get_close_matches(written, by_written, n=3)]


# Formats of model families that llama.cpp's server has, named when a GGUF has no template.
COMMON_CHAT_FORMATS = ("chatml", "llama-3", "mistral-instruct", "gemma", "qwen")
SET_A_CHAT_FORMAT = (
    "set local.chat_format to the format the model was trained with, one llama.cpp's server "
    f"has (such as {', '.join(COMMON_CHAT_FORMATS)}; llama-2 for a Llama 2 model)"
)


USE_A_TOKENIZER_CONFIG = (
    "or, given the model's tokenizer_config.json (from its Hugging Face repo) holding its "
    "chat_template, set local.chat_format to hf-tokenizer-config and local.extra_args to "
    "['--hf_tokenizer_config_path', '/its/full/path/tokenizer_config.json']"
)


def own_template_advice(gguf: Path) -> str:
    """What to set for a chat template the GGUF lacks: none, for its own template, or
    another when it has none of its own (leaving chat_format out is then refused,
    check_own_chat_template)."""
    if chat_template(gguf) is not None:
        return "leave chat_format out for the GGUF's own template"
    return f"it has no chat template of its own either: {untemplated_advice(gguf)}"


def untemplated_advice(gguf: Path) -> str:
    """What to set for a GGUF without a chat template of its own: a template it has under
    another name (chat_template.NAME), a format of llama.cpp's server, or the model's
    tokenizer_config.json. Only llama.cpp's formats were named, though the server takes
    the other two as well."""
    names = [
        key.removeprefix(f"{CHAT_TEMPLATE_KEY}.")
        for key in sorted(gguf_reading(gguf).chat_templates)
        if key.startswith(f"{CHAT_TEMPLATE_KEY}.")
    ]
    named = " or ".join(f"{GGUF_TEMPLATE_FORMAT}{name}" for name in names)
    own = (
        f"set local.chat_format to {named} for its template of that name, or "
        f"{SET_A_CHAT_FORMAT.removeprefix('set local.chat_format ')}"
        if names
        else SET_A_CHAT_FORMAT
    )
    return f"{own}; {USE_A_TOKENIZER_CONFIG}"


def check_own_chat_template(worker_id: str, local: LocalServerConfig) -> None:
    """PoolStartError for a GGUF (one llama.cpp loads) without a chat template of its own,
    given no chat_format: llama.cpp's server then rendered its prompts in the llama-2 format
    without a word, and an instruct model of another family answered them with nonsense."""
    gguf = worker_gguf(worker_id, local)
    if gguf_reading(gguf).load_error is not None or chat_template(gguf) is not None:
        return
    raise PoolStartError(
        f"worker {worker_id}: {local.gguf} has no chat template of its own (no "
        f"{CHAT_TEMPLATE_KEY} nor {CHAT_TEMPLATE_KEY}.default in its metadata), so llama.cpp's "
        "server would write its prompts in the llama-2 format, which a model of another "
        f"family answers with nonsense; {untemplated_advice(gguf)}"
    )


@functools.cache
def llama_cpp_chat_formats() -> frozenset[str]:
    """The chat_format names llama-cpp-python's server takes: its registered formats, and the
    ones its model loader builds itself (multimodal, Hugging Face), read from the loader's
    comparisons since they change between versions; empty when its source cannot be read."""
    from llama_cpp.llama_chat_format import LlamaChatCompletionHandlerRegistry
    from llama_cpp.server.model import LlamaProxy

    try:
        loader = inspect.getsource(LlamaProxy.load_llama_from_model_settings)
    except (OSError, TypeError):
        return frozenset()
    compared = re.findall(r'chat_format (?:==|in) (\([^)]*\)|"[^"]*")', loader)
    built = {name for names in compared for name in re.findall(r'"([^"]+)"', names)}
    return frozenset(LlamaChatCompletionHandlerRegistry()._chat_handlers) | built


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
    gaps = request_gaps(params)
    strict = strict_schema_places(params)
    for where, schema in grammar_schemas(params):
        gaps.extend(schema_gaps(where, schema, strict=where in strict))
    tools = params.get("tools") or []
    if params.get("tool_choice") == "required" and len(tools) > 1:
        gaps.append(
            'tool_choice "required" among several tools (it would answer in text; name '
            "one tool in tool_choice instead)"
        )
    return gaps


def request_gaps(params: dict[str, Any]) -> list[str]:
    """The gaps of a request's own options (not its schemas): a raw `grammar`, audio output,
    tools other than functions, a tool_choice of another type, both tools and functions."""
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
    return gaps


def schema_gaps(where: str, schema: Any, *, strict: bool) -> list[str]:
    """The gaps of one schema a request's answer must follow (at `where`, as grammar_schemas
    names it; `strict`: sent with `strict: true`): what llama-cpp-python's grammar converter
    mangles or leaves out, else (its problem not said already) what it cannot read at all."""
    gaps = converter_mangles(where, schema)
    readable = llama_cpp_schema(schema, split_types=False)
    ignored = ignored_constraint(readable) if strict else None
    if ignored is not None:
        gaps.append(
            f"a strict JSON schema with {ignored[1]} ({where}{ignored[0]}; "
            "llama-cpp-python's grammar converter leaves it out of the grammar, so the "
            "answer may break it; without `strict: true` a local worker may answer)"
        )
    if not gaps:
        unread = unconvertible_schema(llama_cpp_schema(schema))
        if unread is not None:
            gaps.append(
                f"a JSON schema that llama-cpp-python's grammar converter cannot read "
                f"({where}: {unread}; its server then ignores the whole schema and "
                "answers any JSON)"
            )
    return gaps


def converter_mangles(where: str, schema: Any) -> list[str]:
    """What in a schema llama-cpp-python's grammar converter mangles: a name or literal it
    renders wrongly, a pattern it cannot convert, a repetition too deep, an empty name."""
    gaps = []
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
        # only the schema llama_cpp_response_format sends: a json_schema's own, else the
        # response_format's (llama.cpp's json_object form)
        spec = response_format.get("json_schema")
        if response_format.get("type") == "json_schema":
            if isinstance(spec, dict) and "schema" in spec:
                schemas.append(("response_format.json_schema.schema", spec["schema"]))
        elif "schema" in response_format:
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
