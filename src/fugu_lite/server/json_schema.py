"""Walking a JSON schema (a request's response_format, a tool's parameters) node by node,
and naming a place in a JSON value (an error's `param`)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

# A key written after a dot in a path (metadata.team, $defs.Point); one that is empty or
# holds a dot, a bracket, a quote, a space or a character not printed (a backspace, which \s
# does not cover) is written in brackets as a JSON string (metadata["a.b"], properties[""],
# properties["a\bb"]), or the path would name another place, or be written raw.
PLAIN_KEY = re.compile(r"""[^.\[\]"'\s]+""")


def key_path(path: str, key: str) -> str:
    """The path of `key` in the object at `path`: 'metadata' + 'team' -> 'metadata.team',
    'metadata' + 'a.b' -> 'metadata["a.b"]' (not 'metadata.a.b', the key b of a key a)."""
    if PLAIN_KEY.fullmatch(key) and key.isprintable():
        return f"{path}.{key}"
    return f"{path}[{json.dumps(key, ensure_ascii=False)}]"


CHOICE_KEYWORDS = ("enum", "anyOf", "oneOf", "type")
DATA_KEYWORDS = frozenset({"enum", "const", "default", "examples"})  # values, not schemas
SCHEMA_MAPS = frozenset({"properties", "patternProperties", "$defs", "definitions"})


def schema_nodes(schema: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    """(path, node) for each object in a JSON schema that is a schema itself (not a value
    of enum/const/default/examples, nor a name in properties/$defs), in the order written:
    a node before what it holds, and what it holds in document order."""
    pending: list[tuple[str, Any]] = [("", schema)]
    while pending:
        path, node = pending.pop()
        children: list[tuple[str, Any]] = []
        if isinstance(node, dict):
            yield path, node
            for key, value in node.items():
                if key in SCHEMA_MAPS and isinstance(value, dict):
                    # names, not keywords: a property may be called "enum"
                    names = key_path(path, key)
                    children.extend((key_path(names, name), sub) for name, sub in value.items())
                elif key not in DATA_KEYWORDS:
                    children.append((key_path(path, key), value))
        elif isinstance(node, list):
            children.extend((f"{path}[{index}]", value) for index, value in enumerate(node))
        # a stack pops last-in first: reversed, the first child written is walked first
        pending.extend(reversed(children))


def empty_choice(schema: Any) -> str | None:
    """The path (".properties.a.enum") of the first empty enum/anyOf/oneOf/type list in a
    JSON schema, None when there is none."""
    for path, node in schema_nodes(schema):
        for keyword in CHOICE_KEYWORDS:
            if node.get(keyword) == []:
                return f"{path}.{keyword}"
    return None
