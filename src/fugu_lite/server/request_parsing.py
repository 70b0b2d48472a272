"""A request's body -> a validated ChatCompletionRequest, or an ApiError (a 400) saying
what to fix."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Iterator
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from ..io import check_message, json_kind
from ..schemas import PartError
from ..text_reading import json_error_reason
from .api_error import ApiError
from .chat_request import ChatCompletionRequest
from .json_schema import json_walk, key_path, list_items, shown_key
from .request_checks import ParamError, compact


def parse_request(
    body: bytes, max_tokens_limit: int, content_type: str | None = None
) -> ChatCompletionRequest:
    """The request body -> a validated request, or an ApiError saying what to fix."""
    payload = json_object(body, content_type)
    check_unicode(body, payload)
    try:
        request = ChatCompletionRequest.model_validate(payload)
    except ValidationError as error:
        raise validation_api_error(error, payload) from error
    check_token_limits(request, max_tokens_limit)
    return request


# RFC 8259's whitespace; bytes.strip() also strips \x0b and \x0c, which JSON has not: a body
# of a form feed was told it was empty, not that it is no JSON.
JSON_WHITESPACE = b" \t\n\r"


def json_object(body: bytes, content_type: str | None) -> dict[str, Any]:
    """The body read as a JSON object, or an ApiError saying why it is not one."""
    if not body.strip(JSON_WHITESPACE):
        raise ApiError(400, "the request body is empty; send a JSON object with `model` and "
                       "`messages`")  # fmt: skip
    encoding = json.detect_encoding(body)
    if not encoding.startswith("utf-8"):  # "utf-8-sig": UTF-8 with a byte-order mark, read
        raise not_utf8_encoding_error(body, encoding)
    try:
        payload = json.loads(
            body, parse_constant=not_a_json_number, parse_float=finite_float, parse_int=whole_number
        )
    except NumberOutOfRangeError as error:
        raise ApiError(
            400,
            f"the request body holds {error.reason}; send a smaller number",
            param=unreadable_number_path(body),
            code="invalid_json",
        ) from error
    except NotAJsonNumberError as error:
        raise ApiError(
            400,
            f"the request body holds {error.constant}, which is not a JSON number (JSON has no "
            "NaN or Infinity, though Python's json.dumps writes them); send a finite number, "
            "or null",
            param=unreadable_number_path(body),
            code="invalid_json",
        ) from error
    except UnicodeDecodeError as error:
        raise ApiError(400, not_utf8_text(error), code="invalid_unicode") from error
    except json.JSONDecodeError as error:
        raise ApiError(
            400,
            f"the request body is not valid JSON: {json_error_reason(error)} at line "
            f"{error.lineno}, column {error.colno}{sent_as(content_type)}",
        ) from error
    except RecursionError as error:
        raise too_deeply_nested(None) from error
    if not isinstance(payload, dict):
        raise ApiError(
            400,
            "the request body must be a JSON object with `model` and `messages`, got "
            f"{json_kind(payload)}",
        )
    deep = next((key for key, value in payload.items() if nesting_depth(value) >= MAX_DEPTH), None)
    if deep is not None:
        raise too_deeply_nested(deep)
    return payload


# How many levels of arrays and objects a request body may nest (the body itself the first).
# json.loads reads up to Python's recursion limit, some 960 levels, and an unknown key's value
# went on to the worker so. A tool's schema nested ten objects deep (OpenAI's limit for
# structured outputs) is some 25 levels deep.
MAX_DEPTH = 64


def nesting_depth(value: Any) -> int:
    """How many arrays and objects deep `value` nests: 0 for a string or a number, 1 for
    [] or [1]. A loop, not recursion, as json_walk."""
    deepest = 0
    pending: list[tuple[Any, int]] = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, dict):
            item = list(item.values())
        if isinstance(item, list):
            deepest = max(deepest, depth)
            pending.extend((child, depth + 1) for child in item)
    return deepest


def too_deeply_nested(key: str | None) -> ApiError:
    """The 400 for a body nested more than MAX_DEPTH levels deep; `key`: the top-level key
    holding the deep value (None: json.loads could not read the body that deep)."""
    at, value = ("", "it") if key is None else (f" (at {shown_key(key)})", shown_key(key))
    return ApiError(
        400,
        f"the request body is nested too deeply: it nests arrays and objects more than "
        f"{MAX_DEPTH} levels deep{at}, the most this server reads, which no chat request (nor "
        f"its tools' JSON schemas) needs; send {value} less deeply nested",
        param=key,
    )


def not_utf8_text(error: UnicodeDecodeError) -> str:
    """Where the body stops being UTF-8, and what to send instead: a body written in Latin-1
    or Windows-1252 ("café" holding the byte 0xe9) was told only "invalid continuation
    byte"."""
    byte = error.object[error.start]
    return (
        f"the request body is not UTF-8 text (the byte {byte:#04x} at offset {error.start}: "
        f"{error.reason}); send the JSON encoded as UTF-8 (Latin-1 and Windows-1252 text is not)"
    )


def not_utf8_encoding_error(body: bytes, encoding: str) -> ApiError:
    """The 400 for a body json.detect_encoding takes for UTF-16 or UTF-32 (`encoding`). It
    guesses from where NUL bytes are, so a body of them (b"\\x00\\x00\\x00\\x00") "looked
    UTF-32-BE encoded", though read so it is NUL characters, which JSON text never holds
    raw: such a body is told of its NUL bytes instead."""
    if "\x00" in body.decode(encoding, errors="replace"):
        return ApiError(
            400,
            f"the request body is not JSON text: it holds NUL bytes (the first at offset "
            f"{body.index(0)}), which no JSON text in UTF-8 holds; send the JSON object encoded "
            "as UTF-8",
        )
    return ApiError(400, not_utf8_encoding_text(encoding), code="invalid_unicode")


def not_utf8_encoding_text(encoding: str) -> str:
    """For a body json.loads would read as UTF-16 or UTF-32 (`encoding`, as
    json.detect_encoding guesses it from a byte-order mark or NUL bytes), which RFC 8259
    does not allow between systems: which encoding, and what to send instead."""
    return (
        f"the request body is not UTF-8 text: it looks {encoding.upper()} encoded; JSON sent "
        "between systems must be UTF-8 (RFC 8259, section 8.1): send the JSON encoded as UTF-8"
    )


def check_token_limits(request: ChatCompletionRequest, max_tokens_limit: int) -> None:
    """One name for the output limit, and no more than this server allows."""
    if request.max_tokens is not None and request.max_completion_tokens is not None:
        raise ApiError(
            400,
            f"max_tokens={request.max_tokens} and max_completion_tokens="
            f"{request.max_completion_tokens} are two names for one limit, and OpenAI's API "
            "refuses both in one request too; send only max_completion_tokens (max_tokens is "
            "its older name)",
            param="max_tokens",
            code="invalid_parameter_combination",
        )
    wanted = request.max_output_tokens()
    if wanted is not None and wanted > max_tokens_limit:
        field = "max_completion_tokens" if request.max_completion_tokens else "max_tokens"
        raise ApiError(
            400,
            f"{field}={wanted} is more than this server allows ({max_tokens_limit}); ask for "
            f"at most {max_tokens_limit} tokens",
            param=field,
            code="max_tokens_too_large",
        )


def sent_as(content_type: str | None) -> str:
    """For a body that is not JSON, sent as a form or a file upload (`requests.post(url,
    data=...)`, `curl -F`): what it was sent as, and what to send instead."""
    media_type = (content_type or "").partition(";")[0].strip().lower()
    if not media_type or "json" in media_type:
        return ""
    return (
        f"; it was sent as {media_type}: send the JSON object itself, with "
        "Content-Type: application/json"
    )


class NotAJsonNumberError(ValueError):
    def __init__(self, constant: str) -> None:
        super().__init__(constant)
        self.constant = constant


def not_a_json_number(constant: str) -> Any:
    """Python's json reads NaN, Infinity and -Infinity, which JSON has not: where no range
    check refused them (in `metadata`, a tool's schema), the pool could not send the request
    on, and every worker was counted as failing it (a 502, and open circuits)."""
    raise NotAJsonNumberError(constant)


class NumberOutOfRangeError(ValueError):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def finite_float(text: str) -> float:
    """A JSON number with a fraction or an exponent, refused when it is beyond a float's
    range: Python reads 1e400 as Infinity, which the pool cannot send on either (see
    not_a_json_number)."""
    value = float(text)
    if not math.isfinite(value):
        raise NumberOutOfRangeError(
            f"the number {text}, which is beyond a 64-bit float's range (about 1.8e308) and "
            "would be read as Infinity"
        )
    return value


def whole_number(text: str) -> int:
    """A JSON integer, refused when it has more digits than Python reads (int() raised a
    ValueError that json.loads let through: an internal error, a 500)."""
    try:
        return int(text)
    except ValueError as error:
        digits = len(text.lstrip("-"))
        raise NumberOutOfRangeError(
            f"an integer of {digits} digits, more than the {sys.get_int_max_str_digits()} "
            "this server reads"
        ) from error


# Put where json_object's hooks refused a number, to find the number's place afterwards.
UNREADABLE_NUMBER = object()


def unreadable_number_path(body: bytes) -> str | None:
    """Where the first number json_object refuses is (metadata.score), or None: json.loads
    stops at it without a place, so the body is read again with such numbers marked."""
    try:
        payload = json.loads(
            body,
            parse_constant=marked(not_a_json_number),
            parse_float=marked(finite_float),
            parse_int=marked(whole_number),
        )
    except (ValueError, RecursionError):  # no JSON after the number either: no place to name
        return None
    return first_path(payload, lambda value: value is UNREADABLE_NUMBER)


def marked(read_number: Callable[[str], Any]) -> Callable[[str], Any]:
    """json_object's hook for a number, giving UNREADABLE_NUMBER where it refuses one."""

    def read_or_mark(text: str) -> Any:
        try:
            return read_number(text)
        except (NumberOutOfRangeError, NotAJsonNumberError):
            return UNREADABLE_NUMBER

    return read_or_mark


def first_path(payload: Any, is_bad: Callable[[Any], bool]) -> str | None:
    """The path (messages[0].content) of the first value, in the body's order, that is_bad,
    or of the object holding a key that is_bad; None for none, or for the whole body."""
    found = first_bad(payload, is_bad)
    return (found[0] or None) if found is not None else None


def first_bad(payload: Any, is_bad: Callable[[Any], bool]) -> tuple[str, Any] | None:
    """(path, value) of the first value or key, in the body's order, that is_bad: a key's
    path is the object's that holds it ("" for the whole body)."""
    for path, value in json_walk(payload, body_children):
        if is_bad(value):
            return path, value
    return None


def body_children(path: str, value: Any) -> list[tuple[str, Any]]:
    """What a body's object or list holds, named as a param (a top-level key bare): each key
    where it is written, before its value, at the path of the object holding it."""
    if isinstance(value, dict):
        return [
            pair
            for key, item in value.items()
            for pair in ((path, key), (key_path(path, key) if path else key, item))
        ]
    if isinstance(value, list):
        return list_items(path, value)
    return []


def lone_surrogates(value: Any) -> str | None:
    """The first run of lone UTF-16 surrogates in a string, escaped ("\\ud800"); None for
    a string that is Unicode text, or no string."""
    if not isinstance(value, str):
        return None
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        return unencodable_escaped(error)
    return None


def unencodable_escaped(error: UnicodeEncodeError) -> str:
    """The characters the encoder failed on, escaped ("\\ud800")."""
    return error.object[error.start : error.end].encode("unicode_escape").decode("ascii")


# How a surrogate can show in a UTF-8 body: a JSON escape (\\ud800) or UTF-8-style bytes
# (which start with 0xED); without any of these the decoded payload need not be checked.
# The marks are UTF-8 bytes: json_object refuses a body in UTF-16 or UTF-32, where a
# "\\udc00" is other bytes (it went unchecked and reached the tokenizer: a 500).
SURROGATE_MARKS = (b"\\ud", b"\\uD", b"\xed")


def check_unicode(body: bytes, payload: dict[str, Any]) -> None:
    """JSON lets a string hold half a surrogate pair (`"\\ud800"`), which is no Unicode text:
    tokenizers and UTF-8 encoders fail on it, so it is refused here as a 400, naming the
    first one in the body and its place."""
    if not any(mark in body for mark in SURROGATE_MARKS):
        return
    try:
        json.dumps(payload, ensure_ascii=False).encode("utf-8")  # fast: no walk in Python
    except UnicodeEncodeError as error:
        found = first_bad(payload, lambda value: lone_surrogates(value) is not None)
        # the encoder failed on one of the payload's strings, so the walk finds it; were it
        # not found, the encoder's failure still names the surrogate, at no param
        path, surrogates = (
            ("", unencodable_escaped(error))
            if found is None
            else (found[0], lone_surrogates(found[1]))
        )
        raise ApiError(
            400,
            f"the request body holds a lone UTF-16 surrogate ({surrogates}), which "
            "is not valid Unicode text; escape characters beyond U+FFFF as a complete "
            "surrogate pair, or send them as UTF-8",
            param=path or None,
            code="invalid_unicode",
        ) from error


def validation_api_error(error: ValidationError, payload: dict[str, Any]) -> ApiError:
    """A 400 naming each bad field (`messages[0].role: ...`) and what was sent."""
    problems = [
        one_problem
        for field, items in by_field(error.errors(), payload).items()
        for one_problem in field_problems(field, items, payload)
    ]
    first_param = next((param for param, _ in problems if param), None)
    return ApiError(
        400, "invalid request: " + "; ".join(text for _, text in problems), param=first_param
    )


# A pydantic error with the branch of a union it was found in (None: the field is no union).
BranchError = tuple[str | None, ErrorDetails]


def by_field(errors: list[ErrorDetails], payload: dict[str, Any]) -> dict[tuple, list[BranchError]]:
    """pydantic's errors by the field they are at, in their order: a field typed as a union
    (`stop`: a string or strings) has one error per branch, each at the field and the
    branch's tag (('stop', 'str'), ('stop', 'list[str]', 0))."""
    fields: dict[tuple, list[BranchError]] = {}
    for item in errors:
        location = tuple(item["loc"])
        tag_at = union_tag_index(location, payload)
        field = location if tag_at is None else location[:tag_at]
        tag = None if tag_at is None else str(location[tag_at])
        fields.setdefault(field, []).append((tag, item))
    return fields


def field_problems(
    field: tuple, items: list[BranchError], payload: dict[str, Any]
) -> list[tuple[str, str]]:
    """The problems of one field. A union's: those of the branch the value is of (a list of
    stops: its items'), or one saying what the field accepts when the value is of no branch;
    one error per branch ("stop: Input should be a valid string; stop: Input should be a
    valid list") told a client of two mistakes, and one of them a type it had not sent."""
    if all(tag is None for tag, _ in items):
        return [problem(item, payload) for _, item in items]
    value = value_at(field, payload)
    kinds = json_branch_names(value)
    matching = [item for tag, item in items if tag is not None and tag_base(tag) in kinds]
    if matching:
        return [problem(item, payload) for item in matching]
    accepts = UNION_ACCEPTS.get(str(field[-1]))
    if accepts is None:  # a union not listed: pydantic's error of each branch
        return [problem(item, payload) for _, item in items]
    param = field_path(field, payload)
    return [(param, f"{param}: must be {accepts} (got {compact(value)})")]


# What a field typed as a union accepts, as OpenAI documents it (by the field's name).
UNION_ACCEPTS = {
    "stop": "a string or an array of at most 4 strings",
    "tool_choice": '"none", "auto", "required" or an object naming a tool, such as '
    '{"type": "function", "function": {"name": "add"}}',
    "function_call": '"none", "auto" or an object naming a function, such as {"name": "add"}',
    "content": 'a string, or an array of content parts such as [{"type": "text", "text": "..."}]',
    "voice": 'a voice\'s name, such as "alloy", or a custom voice\'s {"id": "..."}',
}


def tag_base(tag: str) -> str:
    """'list[str]' -> 'list'."""
    return tag.partition("[")[0]


def json_branch_names(value: Any) -> set[str]:
    """The union branches (by their tag's base) a JSON value is of."""
    if isinstance(value, bool):
        return {"bool"}
    if isinstance(value, int):
        return {"int", "float"}
    kinds = {str: "str", list: "list", dict: "dict", float: "float"}
    kind = kinds.get(type(value))
    return {kind} if kind else set()


def problem(item: ErrorDetails, payload: dict[str, Any]) -> tuple[str, str]:
    """(param, its text) of one of pydantic's errors; a ParamError (a check placed at the
    whole body, or at all the messages) names its own field and says it itself."""
    cause = item.get("ctx", {}).get("error")
    if isinstance(cause, ParamError):
        return cause.param, str(cause)
    param = field_path(item["loc"], payload)
    message = check_message(item)
    value = item.get("input")
    if isinstance(cause, PartError):  # the part, not the whole content
        param, value = f"{param}[{cause.index}]", cause.part
    if item["type"] == "missing":
        message = "is required"
    elif item["type"] == "too_short" and param == "messages":
        message = "must hold at least one message"
    elif item["type"] == "model_type":  # "a valid dictionary or instance of ChatMessage"
        message = f"must be a JSON object (got {compact(value)})"
    elif "input" in item:
        message = f"{message} (got {compact(value)})"
    return param, f"{param or 'body'}: {message}"


def walk(location: tuple | list, payload: dict[str, Any]) -> Iterator[tuple[Any, bool, Any]]:
    """(part, whether it is pydantic's tag of a union's branch, the body's value there) of
    each part of an error's location; a key the body holds is no tag, though it looks like
    one: metadata's "trace-id"."""
    value: Any = payload
    for part in location:
        if isinstance(part, int):
            value = value[part] if isinstance(value, list) and part < len(value) else None
            yield part, False, value
        elif (isinstance(value, dict) and part in value) or not is_union_tag(str(part)):
            value = value.get(part) if isinstance(value, dict) else None
            yield part, False, value
        else:
            yield part, True, value


def union_tag_index(location: tuple, payload: dict[str, Any]) -> int | None:
    """Where in `location` a union's branch tag is (None: it has none)."""
    tags = (index for index, (_, tag, _) in enumerate(walk(location, payload)) if tag)
    return next(tags, None)


def value_at(location: tuple, payload: dict[str, Any]) -> Any:
    """The body's value at a field's location (None where the body holds none)."""
    steps = list(walk(location, payload))
    return steps[-1][2] if steps else payload


def field_path(location: tuple | list, payload: dict[str, Any]) -> str:
    """('messages', 0, 'role') -> 'messages[0].role' (pydantic's union branch tags dropped)."""
    path = ""
    for part, tag, _ in walk(location, payload):
        if isinstance(part, int):
            path += f"[{part}]"
        elif not tag:  # the first part: one of the request's own fields
            path = key_path(path, str(part)) if path else str(part)
    return path


UNION_TAGS = frozenset({"str", "int", "float", "bool", "list", "dict", "none"})


def is_union_tag(part: str) -> bool:
    """pydantic names the branch of a union that failed ('str', 'list[str]', ...)."""
    return part in UNION_TAGS or any(char in part for char in "[](-")
