"""Reading a worker's failed call: its refusals (a prompt over the context, a completion
asked too long) from the words real servers use, and its Retry-After as the openai SDK reads
it."""

from __future__ import annotations

import importlib
import time
from email.utils import formatdate

import openai
import pytest

from fugu_lite.workers.attempts import describe_failure
from fugu_lite.workers.config import WorkerConfig
from fugu_lite.workers.errors import (
    LONGEST_RETRY_AFTER_S,
    classify_error,
    error_code,
    on_this_machine,
    refused_for_max_tokens,
    refuses_as_too_long,
    refuses_stream_options,
    worker_refusal,
)
from fugu_lite.workers.pool import SDKResponse
from fugu_lite.workers.retries import RETRYABLE_KINDS, retry_wait


@pytest.mark.parametrize(
    ("message", "too_long"),
    [
        ("This model's maximum context length is 4096 tokens. However, your request has 5000 "
         "input tokens. Please reduce the length of the input messages.", True),
        ("'max_tokens' or 'max_completion_tokens' is too large: 256. This model's maximum "
         "context length is 4096 tokens and your request has 3900 input tokens "
         "(256 > 4096 - 3900).", True),
        ("'max_tokens' or 'max_completion_tokens' is too large: 8000. This model's maximum "
         "context length is 4096 tokens and your request has 30 input tokens "
         "(8000 > 4096 - 30).", False),
        ("The decoder prompt (length 5000) is longer than the maximum model length of 4096. "
         "Make sure that `max_model_len` is no smaller than the number of text tokens.", True),
        ("the request exceeds the available context size, try increasing it", True),
        ("prompt is too long: 208310 tokens > 200000 maximum", True),
        ("Input validation error: `inputs` must have less than 4096 tokens. Given: 4545", True),
        ("Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096. Given: "
         "4000 `inputs` tokens and 200 `max_new_tokens`", True),
        ("Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096. Given: "
         "30 `inputs` tokens and 4096 `max_new_tokens`", False),
        ("Input validation error: `max_new_tokens` must be <= 192. Given: 256", False),
        ("Invalid value for 'temperature': must be between 0 and 2.", False),
        ("The model `gpt-4o-mni` does not exist or you do not have access to it.", False),
    ],
)  # fmt: skip
def test_context_refusals_are_read_from_the_servers_real_words(
    message: str, too_long: bool
) -> None:
    assert refuses_as_too_long(message) == too_long


@pytest.mark.parametrize(
    ("message", "for_max_tokens"),
    [
        ("'max_tokens' or 'max_completion_tokens' is too large: 256. This model's maximum "
         "context length is 4096 tokens and your request has 3900 input tokens "
         "(256 > 4096 - 3900).", True),
        ("This model's maximum context length is 4096 tokens. However, you requested 4200 "
         "tokens (200 in the messages, 4000 in the completion).", True),
        ("This model's maximum context length is 4096 tokens. However, you requested 5000 "
         "tokens (4990 in the messages, 10 in the completion).", False),
        ("This model's maximum context length is 4096 tokens. However, your request has 5000 "
         "input tokens. Please reduce the length of the input messages.", False),
        ("Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096. Given: "
         "4000 `inputs` tokens and 200 `max_new_tokens`", True),
        ("Input validation error: `inputs` must have less than 4096 tokens. Given: 4545", False),
        ("prompt is too long: 208310 tokens > 200000 maximum", False),
    ],
)  # fmt: skip
def test_a_refusal_for_the_completion_asked_is_told_from_a_prompt_too_long(
    message: str, for_max_tokens: bool
) -> None:
    assert refused_for_max_tokens(message) == for_max_tokens


def sdk_rate_limit(headers: dict[str, str]) -> openai.RateLimitError:
    """A 429 as the openai SDK raises it (in its own HTTP library's types)."""
    http = importlib.import_module(SDKResponse.__module__.split(".")[0])
    request = http.Request("POST", "http://127.0.0.1/v1/chat/completions")
    response = SDKResponse(429, headers=headers, request=request)
    return openai.RateLimitError("rate limited", response=response, body=None)


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"retry-after": "12"}, 12.0),
        ({"retry-after-ms": "1500", "retry-after": "9"}, 1.5),
        # retry-after-ms is milliseconds only: the SDK reads no date there, but Retry-After
        ({"retry-after-ms": "Fri, 31 Dec 9999 23:59:59 GMT", "retry-after": "9"}, 9.0),
        ({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, 0.0),  # a date in the past
        # HTTP's asctime date (in GMT, written without a zone), and one said in no known zone
        ({"retry-after": "Sun Nov  6 08:49:37 1994"}, 0.0),
        ({"retry-after": "Wed, 21 Oct 2015 07:28:00 -0000"}, 0.0),
        ({"retry-after": "Wed, 32 Oct 2015 07:28:00 GMT"}, None),  # no such day
        ({"retry-after": "soon"}, None),
        ({"retry-after": "nan"}, None),
        ({}, None),
    ],
)
def test_retry_after_is_read_as_the_openai_sdk_reads_it(
    headers: dict[str, str], seconds: float | None
) -> None:
    assert classify_error(sdk_rate_limit(headers))[2] == seconds


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("1e999", LONGEST_RETRY_AFTER_S),
        ("1e300", LONGEST_RETRY_AFTER_S),
        ("Fri, 31 Dec 9999 23:59:59 GMT", LONGEST_RETRY_AFTER_S),
        ("-1e999", 0.0),
        ("-5", 0.0),
    ],
)
def test_a_huge_or_infinite_retry_after_is_a_long_wait_and_not_retried_early(
    value: str, seconds: float
) -> None:
    """Retry-After 1e999 was read as no Retry-After, so the call was tried again after the
    pool's own backoff (0.5 s) though the worker asked to wait longer than any wait; a huge
    one (1e300, a date in the year 9999) kept serve's rate limit on the worker for good and
    was passed on to clients as a Retry-After of hundreds of digits."""
    found = classify_error(sdk_rate_limit({"retry-after": value}))[2]
    assert found == seconds
    worker = WorkerConfig(id="w", model="m", base_url="http://x", retry_backoff_s=0.01)
    wait = retry_wait(
        worker, 1, "rate_limit", RETRYABLE_KINDS, RuntimeError(), found, time.perf_counter() + 60
    )
    assert wait is None if seconds else wait is not None and wait < 1


def test_a_retry_after_date_without_a_zone_is_read_in_gmt() -> None:
    """As the openai SDK reads it: the worker's wait is waited for, and its caller told it."""
    later = time.strftime("%a %b %d %H:%M:%S %Y", time.gmtime(time.time() + 30))
    seconds = classify_error(sdk_rate_limit({"retry-after": later}))[2]
    assert seconds == pytest.approx(30, abs=2)


def sdk_status_error(
    status: int, headers: dict[str, str], message: str = "failed"
) -> openai.APIStatusError:
    """An error answer of another status, as the openai SDK raises it."""
    http = importlib.import_module(SDKResponse.__module__.split(".")[0])
    request = http.Request("POST", "http://127.0.0.1/v1/chat/completions")
    response = SDKResponse(status, headers=headers, request=request)
    return openai.APIStatusError(message, response=response, body=None)


@pytest.mark.parametrize(
    ("status", "kind", "seconds"),
    [
        (408, "timeout", None),  # the server's own timeout: retried, as the openai SDK does
        (503, "server", 3.0),  # an overloaded server's Retry-After is waited for
        (409, "client", None),  # not retried: its Retry-After is not the pool's to wait
    ],
)
def test_an_error_answers_kind_and_retry_after_follow_its_status(
    status: int, kind: str, seconds: float | None
) -> None:
    found, _, retry_after = classify_error(sdk_status_error(status, {"retry-after": "3"}))
    assert (found, retry_after) == (kind, seconds)


@pytest.mark.parametrize("status", [400, 422])
def test_a_refusal_of_stream_options_is_read_from_a_400_or_a_gateways_422(status: int) -> None:
    words = "Unrecognized request argument supplied: stream_options"
    assert refuses_stream_options(sdk_status_error(status, {}, words))


@pytest.mark.parametrize("host", ["localhost", "LOCALHOST", "localhost.", "127.0.0.2", "[::1]"])
def test_this_machines_loopback_is_known_however_it_is_written(host: str) -> None:
    """Calls to it go straight, not to the environment's proxy, which cannot reach it."""
    assert on_this_machine(host)


def test_retry_after_as_an_http_date_is_the_seconds_until_then() -> None:
    later = formatdate(time.time() + 30, usegmt=True)
    waited = classify_error(sdk_rate_limit({"retry-after": later}))[2]
    assert waited is not None and 27 <= waited <= 30


def sdk_bad_request(body: dict) -> openai.BadRequestError:
    """A 400 as the openai SDK raises it for the worker's JSON error body (its `error`
    object, when it has one)."""
    http = importlib.import_module(SDKResponse.__module__.split(".")[0])
    request = http.Request("POST", "http://127.0.0.1/v1/chat/completions")
    response = SDKResponse(400, request=request)
    return openai.BadRequestError("bad request", response=response, body=body.get("error", body))


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"message": "Invalid model: mistral-larg", "type": "invalid_model", "code": "1500"},
         "model_not_found"),
        ({"error": {"message": "Model Not Exist", "type": "invalid_request_error"}},
         "model_not_found"),
        ({"error": {"message": "openai/gpt-4o-mni is not a valid model ID", "code": 400}},
         "model_not_found"),
        ({"error": {"message": "litellm.BadRequestError: Invalid model name passed in "
                    "model=gpt-4o-mni", "code": "400"}}, "model_not_found"),
        ({"error": {"message": "model 'llama3:8bb' not found, try pulling it first"}},
         "model_not_found"),
        ({"error": {"message": "Invalid value for 'temperature': must be between 0 and 2.",
                    "code": "invalid_value"}}, "invalid_value"),
        ({"error": {"message": "This model does not support tools", "code": None}}, None),
        ({"error": {"message": "This model's maximum context length is 4096 tokens. However, "
                    "your request has 5000 input tokens."}}, "context_length_exceeded"),
    ],
)  # fmt: skip
def test_a_400_for_the_workers_model_name_is_told_from_the_requests_faults(
    body: dict, code: str | None
) -> None:
    """Servers that answer an unknown model name with a 400 (not OpenAI's 404): that is the
    worker's setting to fix (error_code model_not_found, worker_refusal's hint), where any
    other 400 is the request's."""
    error = sdk_bad_request(body)
    assert error_code(error) == code
    hint = worker_refusal(400, error_code(error))
    assert (hint is not None) == (code == "model_not_found")
    assert hint is None or "fix model or base_url" in hint


KEY = "sk-proj-" + "Ab3dE" * 30 + "fG7hZq9X"


@pytest.mark.parametrize("body_key", ["message", "detail"])
@pytest.mark.parametrize("before", [480, 500, 520, 540])
def test_a_key_cut_by_a_long_error_message_is_scrubbed_as_far_as_it_goes(
    body_key: str, before: int
) -> None:
    """A worker's error echoing the key it was sent (a gateway listing the request's
    headers) late in a long message: the message was cut to its first 600 characters before
    the key was scrubbed, so a key cut by that kept its first characters. No run of the key's
    characters is left now, and what came before it is kept."""
    worker = WorkerConfig(id="w", model="m", base_url="http://127.0.0.1:9/v1",
                          api_key_env="W_KEY")  # fmt: skip
    http = importlib.import_module(SDKResponse.__module__.split(".")[0])
    request = http.Request("POST", "http://127.0.0.1:9/v1/chat/completions")
    said = f"{'h' * before} Authorization: Bearer {KEY} was refused"
    body = {"error": {body_key: said}}
    error = openai.APIStatusError("refused", response=SDKResponse(401, request=request), body=body)
    _, message, _ = describe_failure(worker, error, KEY)
    assert not any(KEY[start : start + 8] in message for start in range(len(KEY) - 7))
    assert "h" * 100 in message
