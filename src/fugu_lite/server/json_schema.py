"""Walking JSON node by node (a request's body, a JSON schema such as a response_format's or
a tool's parameters), and naming a place in a JSON value (an error's `param`)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any

# A key written after a dot in a path (metadata.team, $defs.Point); one that is empty or
# holds a dot, a bracket, a quote, a space or a character not printed (a backspace, which \s
# does not cover) is written in brackets as a JSON string (metadata["a.b"], properties[""],
# properties["a\bb"]), or the path would name another place, or be written raw.
PLAIN_KEY = re.compile(r"""[^.\[\]"'\s]+""")


def key_path(path: str, key: str) -> str:
    """The path of `key` in the object at `path`: 'metadata' + 'team' -> 'metadata.team',
    'metadata' + 'a.b' -> 'metadata["a.b"]' (not 'metadata.a.b', the key b of a key a)."""
    if is_plain_key(key):
        return f"{path}.{key}"
    return f"{path}[{json.dumps(key, ensure_ascii=False)}]"


def is_plain_key(key: str) -> bool:
    """Whether `key` can be written bare (PLAIN_KEY), not as a JSON string."""
    return bool(PLAIN_KEY.fullmatch(key)) and key.isprintable()


def shown_key(key: str) -> str:
    """`key` as a message names it: `x_trace`, or a JSON string where backticks would show
    nothing, or not what it holds ("", " ", a key holding a tab or a dot)."""
    return f"`{key}`" if is_plain_key(key) else json.dumps(key, ensure_ascii=False)


CHOICE_KEYWORDS = ("enum", "anyOf", "oneOf", "type")
DATA_KEYWORDS = frozenset({"enum", "const", "default", "examples"})  # values, not schemas
SCHEMA_MAPS = frozenset({"properties", "patternProperties", "$defs", "definitions"})


def json_walk(
    root: Any, children: Callable[[str, Any], list[tuple[str, Any]]]
) -> Iterator[tuple[str, Any]]:
    """(path, value) for `root` (path "") and each value `children` gives below it, in the
    order written: a value before what it holds, and what it holds in document order. A
    loop, not recursion: a body may be nested as deeply as json.loads reads."""
    pending: list[tuple[str, Any]] = [("", root)]
    while pending:
        path, value = pending.pop()
        yield path, value
        # a stack pops last-in first: reversed, the first child written is walked first
        pending.extend(reversed(children(path, value)))


def list_items(path: str, value: list[Any]) -> list[tuple[str, Any]]:
    return [(f"{path}[{index}]", item) for index, item in enumerate(value)]


def schema_nodes(schema: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    """(path, node) for each object in a JSON schema that is a schema itself (not a value
    of enum/const/default/examples, nor a name in properties/$defs), in the order written:
    a node before what it holds, and what it holds in document order."""
    for path, node in json_walk(schema, schema_children):
        if isinstance(node, dict):
            yield path, node


def schema_children(path: str, node: Any) -> list[tuple[str, Any]]:
    """What a schema node holds that may be a schema (its keywords' values, the entries of
    properties/$defs named by their names), or a list's items."""
    if isinstance(node, list):
        return list_items(path, node)
    if not isinstance(node, dict):
        return []
    children: list[tuple[str, Any]] = []
    for key, value in node.items():
        if key in SCHEMA_MAPS and isinstance(value, dict):
            # names, not keywords: a property may be called "enum"
            names = key_path(path, key)
            children.extend((key_path(names, name), sub) for name, sub in value.items())
        elif key not in DATA_KEYWORDS:
            children.append((key_path(path, key), value))
    return children


def empty_choice(schema: Any) -> str | None:
    """The path (".properties.a.enum") of the first empty enum/anyOf/oneOf/type list in a
    JSON schema, None when there is none."""
    for path, node in schema_nodes(schema):
        for keyword in CHOICE_KEYWORDS:
            if node.get(keyword) == []:
                return f"{path}.{keyword}"
    return None
