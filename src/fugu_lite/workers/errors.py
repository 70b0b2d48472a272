"""What a worker's failed call means: its kind (retried or not), its status and code, its
Retry-After, and the refusals read from its words (a prompt over the context, stream_options
it does not take, a refusal for its own settings).

`classify_error` gives (kind, detail, retry-after seconds) for an exception of a call;
`WorkerCallError` is the error the pool raises for a failed stream.
"""

from __future__ import annotations

import datetime
import email.utils
import html
import ipaddress
import json
import math
import os
import re
import socket
import time
import urllib.request
from urllib.parse import urlsplit

import openai

MAX_ERROR_CHARS = 600
# The longest Retry-After taken at its word: a longer one (1e999, a date in the year 9999) is
# read as this, which is still over any wait the pool takes (retries.MAX_RETRY_AFTER_S).
LONGEST_RETRY_AFTER_S = 3600.0
CONTEXT_LENGTH_EXCEEDED = "context_length_exceeded"  # the error code of a prompt too long
NO_QUOTA = "insufficient_quota"  # OpenAI's 429 when the account has no credit left
MODEL_NOT_FOUND = "model_not_found"  # OpenAI's code for a model name it does not know (a 404)
# How servers that answer an unknown model name with a 400 (or 422) say so: Mistral's "Invalid
# model: NAME", DeepSeek's "Model Not Exist", OpenRouter's "NAME is not a valid model ID",
# LiteLLM's "Invalid model name passed in model=NAME", others' "model NAME not found".
MODEL_REFUSAL = re.compile(
    r"\binvalid model\b|\bmodel not exists?\b|\bis not a valid model\b|\bunknown model\b"
    r"|\bmodel\b[^.\n]{0,80}\b(?:does not exist|not found)\b",
    re.IGNORECASE,
)
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
# An error page's title, its tags, and its scripts and styles (page_words).
HTML_TITLE = re.compile(r"<title[^>]*>(.*?)</title>", re.IGNORECASE | re.DOTALL)
HTML_TAG = re.compile(r"<[^>]*>")
HTML_CODE = re.compile(r"<(script|style)\b.*?</\1\s*>", re.IGNORECASE | re.DOTALL)
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


class WorkerCallError(RuntimeError):
    """A call failed; `kind` is timeout, connection, rate_limit, server or client;
    `status_code` the worker's HTTP status when it answered with an error, `code` the
    `code` of its error body (e.g. context_length_exceeded), `retry_after_s` the seconds its
    Retry-After asked to wait (a 429 or 5xx that said), `should_retry` its x-should-retry."""

    def __init__(
        self,
        kind: str,
        message: str,
        status_code: int | None = None,
        code: str | None = None,
        retry_after_s: float | None = None,
        param: str | None = None,
        should_retry: bool | None = None,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.status_code = status_code
        self.code = code
        self.retry_after_s = retry_after_s
        self.param = param
        self.should_retry = should_retry


# A worker's refusal of a call for its own settings, which no later call changes (collect
# takes the worker down after a few; serve tries the next worker), and what to fix.
WORKER_REFUSALS = {
    401: "its API key is missing or not accepted: fix api_key_env or the key in that variable",
    403: "its API key has no access to this model or endpoint: fix api_key_env or model",
    404: "its model or endpoint is not found: fix model or base_url",
}


# OpenAI's 429 insufficient_quota: no call passes until the account is topped up.
NO_QUOTA_REFUSAL = (
    "its provider account is out of quota (no credit left), which waiting does not clear: "
    "add credit or raise the account's spending limit"
)


def worker_refusal(status: int | None, code: str | None) -> str | None:
    """What to fix in the pool for a worker's refusal of a call for its own settings (a
    401/403/404, a 400 for its model name: error_code's model_not_found, or a 429
    insufficient_quota); None for any other error."""
    if code == MODEL_NOT_FOUND:
        return WORKER_REFUSALS[404]
    if code == NO_QUOTA:
        return NO_QUOTA_REFUSAL
    return None if status is None else WORKER_REFUSALS.get(status)


def status_code(error: BaseException) -> int | None:
    return error.status_code if isinstance(error, openai.APIStatusError) else None


def error_param(error: BaseException) -> str | None:
    """The `param` of a worker's OpenAI-shaped error body: the request parameter it refused."""
    param = getattr(error, "param", None) if isinstance(error, openai.APIStatusError) else None
    return param if isinstance(param, str) and param else None


def error_code(error: BaseException) -> str | None:
    """The `code` of a worker's OpenAI-shaped error body (context_length_exceeded, ...); a
    400 (or TGI's 422) with no such code (none, or its HTTP status) that says the prompt is
    over the context is given context_length_exceeded, and one that says the model name is
    unknown model_not_found (OpenAI's code for that, which it answers with a 404)."""
    if not isinstance(error, openai.APIStatusError):
        return None
    code = error.code
    uncoded = code is None or str(code) == str(error.status_code)  # vLLM's gives its status
    if error.status_code in CONTEXT_REFUSAL_STATUSES:
        message = _status_message(error)
        if uncoded and refuses_as_too_long(message):
            return CONTEXT_LENGTH_EXCEEDED
        if MODEL_REFUSAL.search(message) is not None:  # Mistral's has a code of its own
            return MODEL_NOT_FOUND
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
        # insufficient_quota is a refusal for the worker's account, not a rate limit: no
        # retry passes it (the openai SDK would retry it as a 429)
        if status == 429 and error_code(error) != NO_QUOTA:
            return "rate_limit", detail, _retry_after(error)
        if status == 408:
            return "timeout", detail, None
        if status >= 500:
            return "server", detail, _retry_after(error)
        return "client", detail, None
    if isinstance(error, (openai.APITimeoutError, TimeoutError)):
        return "timeout", "no answer within the worker's timeout_s", None
    if isinstance(error, openai.APIConnectionError):
        reason = connection_reason(error)
        return "connection", f"could not reach the server at {request_address(error)}{reason}", None
    if isinstance(error, (ValueError, KeyError, TypeError, IndexError)):
        return "server", f"malformed response: {type(error).__name__}: {error}", None
    return "server", f"{type(error).__name__}: {error}", None


def retry_header(error: BaseException) -> bool | None:
    """The worker's own word on trying its error answer again (`x-should-retry`, which OpenAI
    sends and the openai SDK obeys): True, False, or None when it says nothing."""
    if not isinstance(error, openai.APIStatusError):
        return None
    return {"true": True, "false": False}.get(error.response.headers.get("x-should-retry", ""))


def connection_reason(error: openai.APIConnectionError) -> str:
    """ " (why the connection failed)": a refused connection (httpx said only "All
    connection attempts failed") and a host name not found are told apart and say what to
    check; any other cause as its type and words; "" for none."""
    root = root_cause(error)
    url = error.request.url
    proxy = proxy_for(url.scheme, url.host)
    if proxy is not None and isinstance(root, socket.gaierror | ConnectionRefusedError):
        return _proxy_reason(root, url.host, proxy)
    if isinstance(root, socket.gaierror):
        return f" (host name {url.host} not found: a typo in base_url, or no network or DNS?)"
    if isinstance(root, ConnectionRefusedError):
        port = url.port or {"https": 443}.get(url.scheme, 80)
        return (
            f" (connection refused: nothing listens on {url.host} port {port}; is its server "
            "running, and base_url's port right?)"
        )
    cause = error.__cause__ or error.__context__
    return f" ({type(cause).__name__}: {cause})" if cause else ""


def proxy_for(scheme: str, host: str) -> tuple[str, int, str] | None:
    """The proxy (host, port, and the variable naming it) a call to `scheme`://`host` goes
    through, as httpx reads it from the environment (HTTP_PROXY, HTTPS_PROXY, ALL_PROXY,
    not for the hosts of NO_PROXY); None when the call goes straight to the host."""
    proxies = urllib.request.getproxies()
    if on_this_machine(host) or urllib.request.proxy_bypass(host):
        return None
    for key in (scheme, "all"):
        if proxy := proxies.get(key):
            names = (f"{key}_proxy", f"{key.upper()}_PROXY")
            variable = next((n for n in names if os.environ.get(n) == proxy), names[1])
            parts = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
            port = parts.port or {"https": 443}.get(parts.scheme, 80)
            return parts.hostname or proxy, port, variable
    return None


def on_this_machine(host: str) -> bool:
    """Whether `host` is this machine's loopback (localhost, 127.x, ::1), where a local
    worker's server listens: a proxy elsewhere cannot reach it, so calls to it go straight
    (see WorkerPool's clients)."""
    if host.lower().rstrip(".") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _proxy_reason(root: BaseException, host: str, proxy: tuple[str, int, str]) -> str:
    """ " (why the connection failed)" for a call to `host` through a proxy: the proxy's
    host or port, not the worker's, is the one not found or refused."""
    proxy_host, port, variable = proxy
    through = f"the proxy ({variable}), which calls to {host} go through"
    if isinstance(root, socket.gaierror):
        return (
            f" (host name {proxy_host} of {through}, not found: a typo in {variable}, or no "
            "network or DNS?)"
        )
    return (
        f" (connection refused: nothing listens on the proxy {proxy_host} port {port} "
        f"({variable}), which calls to {host} go through; is the proxy running, or should "
        "the worker be reached without it (NO_PROXY)?)"
    )


def root_cause(error: BaseException) -> BaseException:
    """The innermost exception that error was raised from (or while handling)."""
    seen = {id(error)}
    while (inner := error.__cause__ or error.__context__) is not None and id(inner) not in seen:
        seen.add(id(inner))
        error = inner
    return error


def request_address(error: openai.APIConnectionError) -> str:
    """Where the failed request went (scheme://host:port/path): the worker's base_url and
    the path the call added, without a user:password or query, which may hold a key."""
    url = error.request.url
    return f"{url.scheme}://{url.netloc.decode('ascii', 'replace')}{url.path}"


def _status_message(error: openai.APIStatusError) -> str:
    body = error.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])
        return json.dumps(body)[:MAX_ERROR_CHARS]
    text = str(body or error.message)
    words = page_words(text)
    return text if words is None else f"a web page: {words!r}"


def page_words(text: str) -> str | None:
    """What an error page says (a proxy's or CDN's 502, 504, 524, HTML before its words):
    its title, else its text without tags, scripts and styles; None for text that is no
    web page. The page itself filled the error with markup up to MAX_ERROR_CHARS."""
    # a page saved as "UTF-8 with BOM" starts with it
    start = text.removeprefix("\ufeff").lstrip()[:200].lower()
    if not start.startswith(("<!doctype html", "<html", "<head", "<body")):
        return None
    title = HTML_TITLE.search(text)
    words = title.group(1) if title else HTML_TAG.sub(" ", HTML_CODE.sub(" ", text))
    return " ".join(html.unescape(words).split())[:200]


def _retry_after(error: openai.APIStatusError) -> float | None:
    """The seconds a worker's error asks to wait before trying again, as the openai SDK reads
    them: `retry-after-ms`, else `Retry-After` in seconds or as an HTTP date, at most
    LONGEST_RETRY_AFTER_S; None when it says nothing readable."""
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
        # An infinite one asks for a wait longer than any: not retried, like a long one; a
        # huge one kept serve's rate limit on the worker for good.
        if seconds is not None and not math.isnan(seconds):
            return min(max(0.0, seconds), LONGEST_RETRY_AFTER_S)
    return None


def _seconds_until(http_date: str) -> float | None:
    try:
        moment = email.utils.parsedate_to_datetime(http_date)
    except (TypeError, ValueError):
        return None
    if moment.tzinfo is None:  # an HTTP date is in GMT, asctime's written without a zone
        moment = moment.replace(tzinfo=datetime.UTC)
    return moment.timestamp() - time.time()
