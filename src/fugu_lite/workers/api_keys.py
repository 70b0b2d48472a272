"""A worker's API key: read from the environment variable it names (the pool cannot start
without it), and scrubbed from every error message."""

from __future__ import annotations

import os
import re

from .config import WorkerConfig
from .errors import MAX_ERROR_CHARS

NO_KEY = "fugu-lite-no-key"  # sent when a worker needs no key (local or open servers)
# A key as OpenAI's 401 shows the one it refused: its first characters, asterisks, its
# last four ("sk-abc12****...****wxyz", "sk-proj-****...****wxyz"), which identify it.
MASKED_KEY = re.compile(r"[\w-]*\*{4,}[\w-]*")
QUOTES = "\"'"


class PoolStartError(RuntimeError):
    """The pool could not start: a missing API key variable, or a local server that failed."""


def redact(text: str, secret: str | None) -> str:
    if not secret or secret == NO_KEY or len(secret) < 4:
        return text[:MAX_ERROR_CHARS]
    text = text.replace(secret, "***")[:MAX_ERROR_CHARS]
    text = MASKED_KEY.sub(lambda found: "***" if masks(found[0], secret) else found[0], text)
    # A key cut short (here, or before: a long error body) ends the text with its start.
    cut = next((n for n in range(len(secret) - 1, 3, -1) if text.endswith(secret[:n])), 0)
    return f"{text[:-cut]}***" if cut else text


def masks(shown: str, secret: str) -> bool:
    """Whether `shown` is `secret` masked: what shows of it around the asterisks is its
    start and end."""
    head, tail = shown.split("*", 1)[0], shown.rsplit("*", 1)[1]
    return bool(head or tail) and secret.startswith(head) and secret.endswith(tail)


def read_key(worker: WorkerConfig) -> str:
    """The worker's API key from the variable it names; PoolStartError (never showing the
    value) when it is unset, empty, or holds what no key holds."""
    if worker.api_key_env is None:
        return NO_KEY
    key = os.environ.get(worker.api_key_env)
    if not key:
        raise PoolStartError(
            f"worker {worker.id!r} reads its API key from the environment variable "
            f"{worker.api_key_env}, which is {'not set' if key is None else 'empty'}; "
            f"`export {worker.api_key_env}=...` first, or remove the worker from the pool"
        )
    problem = key_problem(key)
    if problem is not None:
        raise PoolStartError(
            f"worker {worker.id!r} reads its API key from the environment variable "
            f"{worker.api_key_env}, whose value {problem}; set it to the key alone"
        )
    return key


WRAPPED_IN_QUOTES = "is wrapped in quotes"
# Where a key's quotes likely came from, to say with them.
KEPT_BY_ENV_FILE = "a .env file read by something that keeps them, as docker's --env-file does?"
COPIED_WITH_A_QUOTE = "copied with it from a shell line or a .env file?"


def quote_at_ends(key: str) -> str | None:
    """The quotes at `key`'s ends, which no key holds: WRAPPED_IN_QUOTES (a pair), "starts
    with a quote" or "ends with a quote"; None for none (or an empty key)."""
    if not key:
        return None
    if len(key) > 1 and key[0] == key[-1] and key[0] in QUOTES:
        return WRAPPED_IN_QUOTES
    if key[0] in QUOTES or key[-1] in QUOTES:
        return f"{'starts' if key[0] in QUOTES else 'ends'} with a quote"
    return None


def key_problem(key: str) -> str | None:
    """What in a key's value no HTTP header can carry: each call would fail before it is
    sent, as a connection error that showed the key (its escaped line break kept it from
    being scrubbed), or as a "malformed response"; or what no key holds: quotes around it,
    sent with it, so that every call got a 401."""
    if key != key.strip():
        return (
            "has spaces or a line break around it (copied with its newline, or read from a "
            "file with Windows line endings?)"
        )
    quoted = quote_at_ends(key)
    if quoted == WRAPPED_IN_QUOTES:
        return f"{quoted} ({KEPT_BY_ENV_FILE})"
    if quoted is not None:  # `sk-abc"`: sent with it, a 401 on every call
        return f"{quoted}, which no key holds ({COPIED_WITH_A_QUOTE})"
    if any(character.isspace() or not character.isprintable() for character in key):
        return "holds a space, tab or control character"
    if not key.isascii():
        return "holds a character that is not ASCII (a typographic quote or dash copied with it?)"
    return None
