"""The checks behind the chat request's validators: messages' tool and function turns,
tools and functions as OpenAI shapes them, and a value shortened for an error message."""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import ValidationInfo

from ..schemas import ChatMessage

TOOL_CHOICE_MODES = ("none", "auto", "required")
FUNCTION_CALL_MODES = ("none", "auto")  # the deprecated function_call's
# Roles whose messages must have content (OpenAI refuses null there; an assistant turn may
# hold only tool_calls, and a deprecated function result may be null).
CONTENT_REQUIRED = frozenset({"system", "developer", "user", "tool"})
# The content parts of OpenAI's chat API (refusal: an assistant's); it refuses any other.
CONTENT_PART_TYPES = ("text", "image_url", "input_audio", "file", "refusal")
# The parts each role's messages may hold, as OpenAI's chat API takes them ("function", the
# deprecated function result, is text as a tool's is).
ROLE_PART_TYPES = {
    "system": ("text",),
    "developer": ("text",),
    "user": ("text", "image_url", "input_audio", "file"),
    "assistant": ("text", "refusal"),
    "tool": ("text",),
    "function": ("text",),
}
# The Responses API's names for them, which clients copy into chat requests.
RESPONSES_PART_TYPES = {"input_text": "text", "output_text": "text", "input_image": "image_url"}


# A ParamError's value for a field that was not sent (no value to show).
ABSENT: Any = object()


class ParamError(ValueError):
    """A check whose error pydantic places at the whole body or list (a model validator, the
    messages' validator): `param` names the field it refuses, for the error's `param`, and
    `value`, when given, is the field's own value, shown as a type error shows it (not the
    whole body or conversation)."""

    def __init__(self, param: str, message: str, value: Any = ABSENT) -> None:
        super().__init__(message if value is ABSENT else f"{message} (got {compact(value)})")
        self.param = param


def check_content(index: int, message: ChatMessage) -> None:
    """messages[index] has content where its role needs it, and its parts are OpenAI's."""
    if message.content is None and message.role in CONTENT_REQUIRED:
        raise ParamError(
            f"messages[{index}].content",
            f"messages[{index}] is a {message.role} message without content (null or "
            'missing); give its text ("" for none) or content parts, as OpenAI\'s '
            "API requires (only an assistant turn, or a function result, may have none)",
        )
    # OpenAI refuses an empty list for any role; an assistant turn's went on to a worker
    # that refused it as well (a 400 blamed on the worker), or read it as "".
    if message.content == []:
        none = (
            ' (null or "" for an assistant turn with none)' if message.role == "assistant" else ""
        )
        raise ParamError(
            f"messages[{index}].content",
            f"messages[{index}].content is an empty list, which OpenAI's API refuses "
            f"too; give at least one content part, or the text as a string{none}",
        )
    check_part_types(index, message.content)
    check_part_roles(index, message)


def check_tool_turn(index: int, message: ChatMessage) -> None:
    """A tool result names the call it answers; tool_calls are an assistant's (OpenAI
    refuses them on any other message), shaped as OpenAI's."""
    extra = message.model_extra or {}
    if message.role == "tool" and not isinstance(extra.get("tool_call_id"), str):
        raise ParamError(
            f"messages[{index}].tool_call_id",
            f"messages[{index}] is a tool message without a string tool_call_id; "
            "give the id of the assistant's tool call it answers",
            extra.get("tool_call_id", ABSENT),
        )
    calls = extra.get("tool_calls")
    if calls is None:
        return
    if message.role != "assistant":
        raise ParamError(
            f"messages[{index}].tool_calls",
            f"messages[{index}] is a {message.role} message with tool_calls, which belong on "
            "assistant messages only (the calls the assistant made); move them to the "
            "assistant turn that made them, or leave them out",
        )
    check_tool_calls(index, calls)


def check_function_turn(index: int, message: ChatMessage) -> None:
    """The deprecated function turns: an assistant's function_call, a function's name."""
    extra = message.model_extra or {}
    if message.role == "assistant":
        check_function_call(index, extra.get("function_call"))
    if message.role == "function" and not isinstance(extra.get("name"), str):
        raise ParamError(
            f"messages[{index}].name",
            f"messages[{index}] is a function message without a string name; give "
            "the name of the function whose result it holds, e.g. "
            '{"role": "function", "name": "weather", "content": "sunny"}',
            extra.get("name", ABSENT),
        )


def check_name(index: int, message: ChatMessage) -> None:
    name = (message.model_extra or {}).get("name")
    if name is not None and not isinstance(name, str):
        raise ParamError(
            f"messages[{index}].name",
            f"messages[{index}].name must be a string (the participant's name, e.g. "
            f'"alice"), as OpenAI\'s API requires; got {compact(name)}',
        )


def check_part_types(index: int, content: Any) -> None:
    """Each content part of messages[index] is one of OpenAI's chat API: another type
    went on to the worker, which refused it (OpenAI) or dropped it without a word (a
    server that reads only the parts it knows), its text lost."""
    for number, part in enumerate(content if isinstance(content, list) else []):
        kind = part["type"]  # a string: ChatMessage checks it
        if kind in CONTENT_PART_TYPES:
            continue
        known = RESPONSES_PART_TYPES.get(kind)
        hint = f' (the Responses API\'s name; here it is "{known}")' if known else ""
        raise ParamError(
            f"messages[{index}].content[{number}].type",
            f"messages[{index}].content[{number}] is a part of type {compact(kind)}{hint}, "
            f"which OpenAI's chat API does not take; use one of {', '.join(CONTENT_PART_TYPES)}",
        )


def check_part_roles(index: int, message: ChatMessage) -> None:
    """Each content part of messages[index] is of a type its role's messages take at OpenAI:
    an image in a system message went on to a remote worker, which refused it (a 400
    blamed on the worker), and a refusal in a user message was read by a local worker as
    the user's words and by the router as no text."""
    taken = ROLE_PART_TYPES[message.role]
    for number, part in enumerate(message.content if isinstance(message.content, list) else []):
        kind = part["type"]  # one of CONTENT_PART_TYPES: check_part_types
        if kind in taken:
            continue
        owner = "assistant" if kind == "refusal" else "user"
        fix = (
            'give its words as a text part, {"type": "text", "text": "..."}'
            if kind == "refusal"
            else "move it to a user message"
        )
        raise ParamError(
            f"messages[{index}].content[{number}].type",
            f"messages[{index}].content[{number}] is a part of type {compact(kind)}, which "
            f"OpenAI's chat API takes only in {owner} messages, not in {message.role} "
            f"messages; {fix}",
        )


def named_function(choice: str | dict[str, Any]) -> str | None:
    """The function a tool_choice object names ({"type": "function", "function": {"name":
    ...}}), None for the string modes and other kinds of choice."""
    if not isinstance(choice, dict) or choice.get("type") != "function":
        return None
    function = choice.get("function")
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(name, str):
        raise ParamError(
            "tool_choice",
            'tool_choice {"type": "function"} needs "function": {"name": "..."}',
            choice,
        )
    return name


def is_function_call(call: Any) -> bool:
    """Whether `call` is a function call as OpenAI shapes it: {name, arguments (a JSON
    string)}."""
    return (
        isinstance(call, dict)
        and isinstance(call.get("name"), str)
        and isinstance(call.get("arguments"), str)
    )


def check_tool_calls(index: int, calls: Any) -> None:
    """An assistant turn's tool_calls as OpenAI shapes them: a list of {id, type: function,
    function: {name, arguments (a JSON string)}}."""
    example = (
        '[{"id": "call_1", "type": "function", "function": {"name": "add", '
        '"arguments": "{\\"a\\": 2}"}}]'
    )
    if not isinstance(calls, list):
        raise ParamError(
            f"messages[{index}].tool_calls",
            f"messages[{index}].tool_calls must be a list, e.g. {example}",
            calls,
        )
    if not calls:
        raise ParamError(
            f"messages[{index}].tool_calls",
            f"messages[{index}].tool_calls is an empty list, which OpenAI's API refuses too; "
            "leave tool_calls out of a turn that called no tool",
        )
    for number, call in enumerate(calls):
        if (
            not isinstance(call, dict)
            or not isinstance(call.get("id"), str)
            or call.get("type") != "function"
            or not is_function_call(call.get("function"))
        ):
            raise ParamError(
                f"messages[{index}].tool_calls[{number}]",
                f"messages[{index}].tool_calls[{number}] must be an object with a string "
                'id, type "function" and function {name, arguments (a JSON string)}, '
                f"e.g. {example}",
                call,
            )


def check_function_call(index: int, call: Any) -> None:
    """An assistant turn's deprecated function_call as OpenAI shapes it: {name, arguments
    (a JSON string)}."""
    if call is None:
        return
    if not is_function_call(call):
        raise ParamError(
            f"messages[{index}].function_call",
            f"messages[{index}].function_call must be an object with a string name and "
            'arguments (a JSON string), e.g. {"name": "add", "arguments": "{\\"a\\": 2}"}; '
            f"got {compact(call)}",
        )


ONLY_WITH_TOOLS = "is only allowed when `tools` are given, as in OpenAI's API"


def without_tools(info: ValidationInfo) -> bool:
    """Whether a request field validated after `tools` comes without tools (none, or null);
    not when `tools` was refused itself (absent from info.data then: its error says it)."""
    return "tools" in info.data and not info.data["tools"]


def null_is_false(value: Any) -> Any:
    """OpenAI's null for a boolean flag (`"stream": null`) means its default, false;
    strings and numbers are still refused."""
    return False if value is None else value


# What a JSON schema object looks like, for an error refusing a schema that is none
SCHEMA_EXAMPLE = '{"type": "object", "properties": {...}}'
# OpenAI's rule for the name of a function tool or a json_schema
OPENAI_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
NAME_RULE = "must be letters, digits, _ or - (at most 64)"


def check_function(where: str, function: dict[str, Any]) -> None:
    """A function's name by OpenAI's rule, and its parameters a schema object (null: absent,
    as OpenAI reads it)."""
    if not OPENAI_NAME.fullmatch(function["name"]):
        raise ParamError(
            f"{where}.name",
            f'{where}.name {NAME_RULE}, e.g. "get_weather"; got {compact(function["name"])}',
        )
    parameters = function.get("parameters")
    if parameters is not None and not isinstance(parameters, dict):
        raise ParamError(
            f"{where}.parameters",
            f"{where}.parameters must be a JSON schema object, e.g. {SCHEMA_EXAMPLE}",
            parameters,
        )
    check_spec_types(where, function)


# The keys of a function or a json_schema that OpenAI types (null is also taken), and what
# each must be.
TYPED_SPEC_KEYS: dict[str, tuple[type, str]] = {
    "strict": (bool, "true or false (a JSON boolean, not a string or a number)"),
    "description": (str, "a string, the text telling the model what it is for"),
}


def check_spec_types(where: str, spec: dict[str, Any]) -> None:
    """`strict` and `description` of a function or a json_schema are of the type OpenAI
    gives them, or null. Any other went on to the worker: a local one read `"strict":
    "true"` as not strict (`strict_schema_places`) and answered with a constraint left out
    of its grammar; a description that is no string was refused or read as none."""
    for key, (kind, rule) in TYPED_SPEC_KEYS.items():
        value = spec.get(key)
        if value is not None and not isinstance(value, kind):
            said = f"{where}.{key} must be {rule}; got {compact(value)}"
            raise ParamError(f"{where}.{key}", said)


def compact(value: Any, limit: int = 80) -> str:
    """`value` as JSON for an error message, shortened to `limit` characters; text beyond
    ASCII as written ("usér", not "us\\u00e9r", in which the typo could not be seen)."""
    try:
        text = json.dumps(value, default=str, ensure_ascii=False)
    except RecursionError:  # json.loads read it, higher up the stack: a 500 here
        return "a value nested too deeply to show"
    return text if len(text) <= limit else text[: limit - 3] + "..."
