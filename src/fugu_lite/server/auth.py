"""Endpoint API keys (Bearer, compared in constant time) and keeping secrets out of output."""

from __future__ import annotations

import hmac
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from ..text_reading import STDIN_NOT_READ, means_stdin, utf16_hint
from ..workers.api_keys import (
    COPIED_WITH_A_QUOTE,
    KEPT_BY_ENV_FILE,
    WRAPPED_IN_QUOTES,
    quote_at_ends,
)
from .api_error import ApiError

REDACTED = "[redacted]"
# Shorter "secrets" would redact ordinary words out of messages.
MIN_SECRET_LENGTH = 6


class ApiKeyError(ValueError):
    """The endpoint's API keys could not be loaded."""


# A `#` opening a line or a word starts a comment to the end of its line: a note written
# after a key ("sk-... #alice-laptop") was read as keys, "#alice-laptop" one any client could send.
COMMENT = re.compile(r"(?:^|(?<=[\s,]))#.*$", re.MULTILINE)


def parse_keys(text: str) -> list[str]:
    """Keys separated by commas, spaces or newlines; `#` at a line's or a word's start
    starts a comment, to the end of the line."""
    return [key for key in re.split(r"[\s,]+", COMMENT.sub("", text)) if key]


# Words of an Authorization header copied with a key ("Bearer sk-..."): each would be split
# off as a key of its own, which any client could then send.
HEADER_WORDS = frozenset({"bearer", "authorization:"})


def keys_in(source: str, text: str) -> list[str]:
    """The keys of one source (--api-keys-env NAME, --api-keys-file PATH), refused when it
    holds a header's word."""
    keys = parse_keys(text)
    copied = [(key, what) for key in keys if (what := header_word(key)) is not None]
    if copied:
        key, what = copied[0]
        raise ApiKeyError(
            f"{source}: holds {header_part(key)!r}, {what}, which would be accepted as an API "
            "key itself; give the keys alone (sk-..., not Bearer sk-...)"
        )
    quoted = quotes_around_keys(text, keys)
    if quoted is not None:
        where = KEPT_BY_ENV_FILE if quoted == WRAPPED_IN_QUOTES else COPIED_WITH_A_QUOTE
        raise ApiKeyError(
            f"{source}: a key {quoted}, which every client would have to send with it "
            f"({where}); give the keys without quotes"
        )
    # An HTTP header carries ASCII: the openai SDK cannot send such a key, curl's reaches
    # the server as other characters; it could never match.
    if not all(key.isascii() for key in keys):
        raise ApiKeyError(
            f"{source}: a key holds a character that is not ASCII (a typographic quote or "
            "dash copied with it?), which no client can send in its Authorization header; "
            "give the keys as ASCII"
        )
    return keys


def quotes_around_keys(text: str, keys: list[str]) -> str | None:
    """The quotes a source's `keys` are written with (quote_at_ends): a pair around a key,
    or around a line of them (FUGU_API_KEYS="sk-a,sk-b", split into `"sk-a` and `sk-b"`),
    before a quote at one end of a key; None for none."""
    lines = [line.strip() for line in COMMENT.sub("", text).splitlines()]
    found = [quoted for part in (*keys, *lines) if (quoted := quote_at_ends(part)) is not None]
    return WRAPPED_IN_QUOTES if WRAPPED_IN_QUOTES in found else next(iter(found), None)


def header_word(key: str) -> str | None:
    """What of a header `key` is, copied with a key: the Authorization header's words, or a
    header's name ("x-api-key:", "Authorization:Bearer" written without its space)."""
    lowered = key.lower()
    if lowered in HEADER_WORDS:
        return "a word of the Authorization header"
    names = ("authorization", *OTHER_KEY_HEADERS)
    if key.endswith(":") or lowered.startswith(tuple(f"{name}:" for name in names)):
        return "a header's name"
    return None


def header_part(key: str) -> str:
    """What of `key` is a header's words, shown when it is refused: "x-api-key:" of
    "x-api-key:sk-...", a key written right after the colon, which is never shown."""
    name, colon, rest = key.partition(":")
    return f"{name}:" if colon and rest and rest.lower() not in HEADER_WORDS else key


def load_api_keys(env_var: str | None = None, file: str | Path | None = None) -> list[str]:
    """The keys from an environment variable and/or a file; none of either = no auth."""
    keys: list[str] = []
    if env_var:
        value = os.environ.get(env_var)
        if not value or not parse_keys(value):
            raise ApiKeyError(
                f"--api-keys-env {env_var}: the environment variable {env_var} is not set or "
                "empty; export it with one or more keys (comma-separated)"
            )
        keys += keys_in(f"--api-keys-env {env_var}", value)
    if file:
        path = Path(file)
        if means_stdin(path):
            raise ApiKeyError(f"--api-keys-file {STDIN_NOT_READ}")
        try:
            # the UTF-8 BOM Notepad writes was read into the first key, which no client sent
            text = path.read_text(encoding="utf-8").removeprefix("\ufeff")
        except OSError as error:
            raise ApiKeyError(
                f"--api-keys-file {path}: cannot read it ({error.strerror})"
            ) from error
        except UnicodeDecodeError as error:
            raise ApiKeyError(
                f"--api-keys-file {path}: not UTF-8 text ({error.reason})"
                f"{utf16_hint(error.object)}; re-save it as UTF-8"
            ) from error
        if not parse_keys(text):
            raise ApiKeyError(f"--api-keys-file {path}: holds no key (one key a line)")
        keys += keys_in(f"--api-keys-file {path}", text)
    short = [key for key in keys if len(key) < MIN_SECRET_LENGTH]
    if short:
        raise ApiKeyError(
            f"{len(short)} API key(s) are shorter than {MIN_SECRET_LENGTH} characters; use "
            "long random keys (e.g. `python -c 'import secrets; print(secrets.token_urlsafe())'`)"
        )
    return keys


class ApiKeyChecker:
    """Checks `Authorization: Bearer KEY` against every configured key in constant time."""

    def __init__(self, keys: Iterable[str]) -> None:
        self._keys = [key.encode("utf-8") for key in keys]

    @property
    def enabled(self) -> bool:
        return bool(self._keys)

    def check(self, headers: Mapping[str, str]) -> None:
        if not self.enabled:
            return
        authorization = headers.get("authorization")
        if not authorization:
            raise unauthorized(
                "missing API key: send it as `Authorization: Bearer YOUR_KEY` (the openai "
                f"SDK's api_key){elsewhere(headers)}"
            )
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise unauthorized("the Authorization header must be `Bearer YOUR_KEY`")
        given = token.strip().encode("utf-8")
        # No early exit: every key is compared, whatever matches.
        matched = False
        for key in self._keys:
            matched |= hmac.compare_digest(given, key)
        if not matched:
            raise unauthorized("invalid API key")


# Headers other APIs read a key from (Azure OpenAI's, Anthropic's), which this server does not.
OTHER_KEY_HEADERS = ("api-key", "x-api-key")


def elsewhere(headers: Mapping[str, str]) -> str:
    """A key sent in another API's header (AzureOpenAI's client sends `api-key`): said so,
    as it is not read here."""
    sent = [name for name in OTHER_KEY_HEADERS if name in headers]
    return f"; it was sent in the {sent[0]} header, which this server does not read" if sent else ""


def unauthorized(message: str) -> ApiError:
    return ApiError(
        401,
        message,
        type="invalid_request_error",
        code="invalid_api_key",
        headers={"WWW-Authenticate": "Bearer"},
    )


class Redactor:
    """Replaces known secrets (worker API keys, endpoint keys) by [redacted] in any text
    leaving the server: error messages, logs, response bodies."""

    def __init__(self, secrets: Iterable[str]) -> None:
        kept = sorted(
            {secret for secret in secrets if len(secret) >= MIN_SECRET_LENGTH},
            key=len,
            reverse=True,
        )
        self._pattern = re.compile("|".join(re.escape(secret) for secret in kept)) if kept else None

    def __call__(self, text: str) -> str:
        if self._pattern is None or not text:
            return text
        return self._pattern.sub(REDACTED, text)

    def scrub(self, value: object) -> object:
        """The same for every string inside a JSON-like value."""
        if self._pattern is None:
            return value
        if isinstance(value, str):
            return self(value)
        if isinstance(value, dict):
            return {key: self.scrub(item) for key, item in value.items()}
        if isinstance(value, list):
            return [self.scrub(item) for item in value]
        return value


def worker_secrets(api_key_envs: Iterable[str | None]) -> list[str]:
    """The values of the workers' API-key environment variables, to redact."""
    return [os.environ[name] for name in api_key_envs if name and os.environ.get(name)]
