"""JSON schemas as llama-cpp-python's grammar converter reads them, and what it cannot read.

A local worker's server turns a JSON schema (response_format's, a named tool's parameters)
into a GBNF grammar. `llama_cpp_schema` rewrites a schema into the form that converter reads
as meant; the other checks (`unrenderable_literal`, `unconvertible_pattern`,
`deep_repetition`, `empty_property_name`, `ignored_constraint`, `unconvertible_schema`) find
what it would mangle, crash on or leave out, so that such a request never reaches a local
worker (see llama_cpp_requests.local_worker_gaps).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator
from typing import Any

from ..server.json_schema import SCHEMA_MAPS, key_path, schema_nodes


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
                return key_path(f"{path}.properties", name), character
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
SUBSCHEMA_KEYS = frozenset(
    {"items", "prefixItems", "anyOf", "oneOf", "allOf", "additionalProperties"}
)
# Kept beside a list of types split into an anyOf, not copied into its alternatives: a
# "#/$defs/..." ref is read from the schema's root.
OUTER_KEYWORDS = ANNOTATIONS | {"$defs", "definitions"}


def llama_cpp_schema(schema: Any, *, split_types: bool = True) -> Any:
    """A JSON schema in the form llama-cpp-python's grammar converter reads as meant: a
    sub-schema that allows any value, `{}`, `true` or one holding annotations only
    (pydantic's `Any` field, `{"title": "Notes"}`), gets every JSON type instead (the
    converter reads `{}` as an object, so a tool argument meant to be anything could only
    be an object, and fails on the others: its server then ignores the whole schema and
    answers any JSON); the schema itself may be `{}` (a tool's `parameters`: an object).
    A small integer range (`integer_range_as_enum`) becomes the enum of its values, which
    it enforces, an enum beside a list of types loses the list (`enum_without_type_list`),
    and a list of types beside other keywords becomes an anyOf (`type_list_as_any_of`;
    `split_types` False leaves it, so that a problem found is named at its place in the
    client's schema)."""
    if schema == {}:
        return schema
    return llama_cpp_subschema(schema, split_types=split_types)


def llama_cpp_subschema(schema: Any, *, split_types: bool) -> Any:
    """`llama_cpp_schema` of a schema inside another, where `{}` is any value."""
    if schema is True or schema == {}:
        return {"type": ANY_JSON_TYPES}
    if isinstance(schema, list):
        return [llama_cpp_subschema(item, split_types=split_types) for item in schema]
    if not isinstance(schema, dict):
        return schema
    if set(schema) <= ANNOTATIONS:
        return {**schema, "type": ANY_JSON_TYPES}
    converted: dict[str, Any] = {}
    for key, value in schema.items():
        if key in SCHEMA_MAPS and isinstance(value, dict):
            converted[key] = {
                name: llama_cpp_subschema(sub, split_types=split_types)
                for name, sub in value.items()
            }
        elif key in SUBSCHEMA_KEYS:
            converted[key] = llama_cpp_subschema(value, split_types=split_types)
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
    properties, items, pattern or format out of the grammar. Annotations and definitions
    stay beside the anyOf (OUTER_KEYWORDS)."""
    kind = node.get("type")
    if not isinstance(kind, list) or not all(isinstance(name, str) for name in kind):
        return node
    if any(key in node for key in ("enum", "const", "anyOf", "oneOf", "allOf", "$ref")):
        return node  # the converter reads these before the types
    rest = {key: value for key, value in node.items() if key not in {"type", *OUTER_KEYWORDS}}
    if not kind or not rest:
        return node  # a bare list of types is read as meant
    outer = {key: value for key, value in node.items() if key in OUTER_KEYWORDS}
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
    dependencies, `required` names missing from `properties` (never written), and a string's
    keywords shadowed by another (shadowed_string_keyword). A local worker's answer breaks
    them freely ({"n": 1} for a minimum of 1000, a phone number for an email)."""
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
        shadowed = shadowed_string_keyword(node) if string else None
        if shadowed is not None:
            return f"{path}.{shadowed[0]}", shadowed[1]
        properties = node.get("properties")
        required = node.get("required")
        if isinstance(properties, dict) and isinstance(required, list):
            missing = [name for name in required if name not in properties]
            if missing:
                return f"{path}.required", f"`required` {missing[0]!r} (not in its properties)"
    return None


def shadowed_string_keyword(node: dict[str, Any]) -> tuple[str, str] | None:
    """(keyword, what) of a string's keyword that llama-cpp-python's grammar converter leaves
    out for another, None when there is none: it writes a `pattern`, else a date, time or
    uuid `format`, else minLength/maxLength, never two of them (a code of pattern ^[A-Z]+$
    and maxLength 3 got a grammar of any length)."""
    pattern = isinstance(node.get("pattern"), str)
    form = node.get("format")
    formatted = isinstance(form, str) and CONVERTED_FORMATS.match(form) is not None
    if pattern and formatted:
        return "format", f'`format: "{form}"` beside a `pattern`'
    if not (pattern or formatted):
        return None
    for keyword in ("minLength", "maxLength"):
        value = node.get(keyword)
        if value is not None and not (keyword == "minLength" and value == 0):
            return keyword, f"`{keyword}` beside a `{'pattern' if pattern else 'format'}`"
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
