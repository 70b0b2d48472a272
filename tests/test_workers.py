"""The worker pool against the in-process OpenAI-compatible stub: calls, retries, limits,
secrets, streams, and the requests a local worker is sent (its real llama.cpp servers:
test_local_server.py)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import subprocess
import threading
import time
from collections.abc import AsyncIterator, Callable
from itertools import pairwise
from types import SimpleNamespace
from typing import Any

import httpx
import openai
import pytest
from conftest import AnsweringTogether
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from openai import AsyncOpenAI

from fugu_lite.server.dispatch import RETRIED_BEFORE_NEXT
from fugu_lite.server.thread import ServerThread
from fugu_lite.testing.stub_worker import StubWorker
from fugu_lite.workers import pool as workers_module
from fugu_lite.workers.api_keys import NO_KEY, PoolStartError, redact
from fugu_lite.workers.attempts import refused_result
from fugu_lite.workers.config import PoolConfig, WorkerConfig
from fugu_lite.workers.errors import MAX_ERROR_CHARS, WorkerCallError, page_words
from fugu_lite.workers.llama_cpp_requests import (
    check_chat_format,
    check_local_params,
    llama_cpp_request_model,
    local_worker_gaps,
)
from fugu_lite.workers.local_server import LocalServer
from fugu_lite.workers.output_limits import OUTPUT_LIMITS
from fugu_lite.workers.pool import WorkerPool, judge_from_pool
from fugu_lite.workers.preflight import preflight
from fugu_lite.workers.results import CallResult, answer_json, parse_completion
from fugu_lite.workers.retries import (
    MAX_RETRY_AFTER_S,
    MIN_ATTEMPT_S,
    RETRYABLE_KINDS,
    backoff,
    call_budget_s,
    retry_wait,
)

SECRET = "sk-test-9f8e7d6c5b4a39281706"
KEY_ENV = "FUGU_TEST_WORKER_KEY"
USER = [{"role": "user", "content": "what is two plus two"}]


def pool_config(base_url: str, **overrides: Any) -> PoolConfig:
    worker = {
        "id": "w",
        "model": "stub-model",
        "base_url": base_url,
        "retry_backoff_s": 0.01,
        "timeout_s": 5.0,
        "max_retries": 2,
    }
    worker.update(overrides)
    return PoolConfig.model_validate({"workers": [worker]})


async def one_call(config: PoolConfig, messages=USER, **params: Any) -> CallResult:
    async with WorkerPool(config) as pool:
        return await pool.chat("w", messages, **params)


@pytest.fixture
def stub():
    with StubWorker() as server:
        yield server


# -- successful calls ---------------------------------------------------------------------


def test_chat_returns_output_usage_cost_and_latency(stub: StubWorker) -> None:
    config = pool_config(
        stub.base_url,
        input_price_per_mtok=2.0,
        output_price_per_mtok=10.0,
        system_prompt="Be brief.",
        params={"temperature": 0.3, "max_tokens": 7, "top_k": 5},
    )
    result = asyncio.run(one_call(config, temperature=0.9))

    assert result.ok and result.attempts == 1
    assert result.output == "stub answer to: what is two plus two"
    # The stub counts whitespace tokens: system "Be brief." (2) + user (5) in, 8 out.
    assert result.usage is not None
    assert (result.usage.prompt_tokens, result.usage.completion_tokens) == (7, 8)
    assert result.cost == pytest.approx((7 * 2.0 + 8 * 10.0) / 1e6)
    assert result.latency_s > 0 and result.finished_at >= result.started_at
    assert result.raw is not None and result.raw["choices"][0]["message"]["content"]
    body = stub.bodies[0]
    assert body["model"] == "stub-model"
    assert body["messages"][0] == {"role": "system", "content": "Be brief."}
    assert body["temperature"] == 0.9  # the call's params override the worker's
    assert body["max_tokens"] == 7
    assert body["top_k"] == 5  # not an OpenAI parameter: passed through as extra body


def test_worker_system_prompt_merges_with_a_callers_system_message(stub: StubWorker) -> None:
    config = pool_config(stub.base_url, system_prompt="Be brief.")
    messages = [{"role": "system", "content": "You are terse."}, *USER]
    asyncio.run(one_call(config, messages))
    sent = stub.bodies[0]["messages"]
    assert [m["role"] for m in sent] == ["system", "user"]
    assert sent[0]["content"] == "Be brief.\n\nYou are terse."


def test_a_callers_system_message_in_content_parts_merges_as_a_part(stub: StubWorker) -> None:
    config = pool_config(stub.base_url, system_prompt="Be brief.")
    parts = [{"type": "text", "text": "You are a pirate."}]
    sent = WorkerPool(config).request_messages("w", [{"role": "system", "content": parts}])
    assert sent[0]["content"] == [{"type": "text", "text": "Be brief."}, *parts]


@pytest.mark.parametrize("empty", ["", None])
def test_a_callers_empty_system_message_leaves_the_workers_system_prompt_alone(
    empty: str | None,
) -> None:
    config = pool_config("http://127.0.0.1:9/v1", system_prompt="Be brief.")
    messages = [{"role": "system", "content": empty}, *USER]
    sent = WorkerPool(config).request_messages("w", messages)
    assert sent == [{"role": "system", "content": "Be brief."}, *USER]


def test_local_workers_get_plain_string_content_and_no_developer_role() -> None:
    local = {"gguf": "embedded:smollm2"}
    config = PoolConfig.model_validate(
        {"workers": [{"id": "llama", "model": "m", "local": local, "system_prompt": "Be brief."},
                     {"id": "remote", "model": "m", "base_url": "http://127.0.0.1:9/v1"}]}
    )  # fmt: skip
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}
    messages = [
        {"role": "developer", "content": [{"type": "text", "text": "Answer in French."}]},
        {"role": "user", "content": [{"type": "text", "text": "What is"},
                                     {"type": "text", "text": "2 + 3?"}]},
        {"role": "user", "content": [image]},
    ]  # fmt: skip
    pool = WorkerPool(config)
    assert pool.request_messages("llama", messages) == [
        {"role": "system", "content": "Be brief.\n\nAnswer in French."},
        {"role": "user", "content": "What is\n2 + 3?"},
        {"role": "user", "content": [image]},  # not text: left for the server to refuse
    ]
    assert pool.request_messages("remote", messages) == messages  # OpenAI reads parts


def test_local_workers_get_tool_call_turns_and_json_schema_in_llama_cpp_form() -> None:
    """llama.cpp's server answers 500 to `content: null` (an assistant turn holding only
    tool_calls, as the SDK sends it back) and to response_format json_schema."""
    local = {"gguf": "embedded:smollm2"}
    config = PoolConfig.model_validate(
        {"workers": [{"id": "llama", "model": "m", "local": local},
                     {"id": "remote", "model": "m", "base_url": "http://127.0.0.1:9/v1"}]}
    )  # fmt: skip
    call = {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": "{}"}}
    messages = [
        {"role": "user", "content": "Add 2 and 3."},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "assistant", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "5"},
    ]
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    json_schema = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    pool = WorkerPool(config)
    body = pool.request_body(pool.worker("llama"), messages, {"response_format": json_schema})
    assert [m["content"] for m in body["messages"]] == ["Add 2 and 3.", "", "", "5"]
    assert body["messages"][1]["tool_calls"] == [call]
    assert body["response_format"] == {"type": "json_object", "schema": schema}
    remote = pool.request_body(pool.worker("remote"), messages, {"response_format": json_schema})
    assert remote["messages"] == messages and remote["response_format"] == json_schema
    plain = {"type": "json_object"}
    kept = pool.request_body(pool.worker("llama"), [], {"response_format": plain})
    assert kept["response_format"] == plain


def test_a_local_worker_gets_the_output_limit_as_max_tokens() -> None:
    """llama-cpp-python's server reads only max_tokens (it ignores max_completion_tokens
    and generated up to the context's end), from a client or from the worker's params."""
    local = {"gguf": "embedded:smollm2"}
    config = PoolConfig.model_validate(
        {"workers": [{"id": "llama", "model": "m", "local": local},
                     {"id": "capped", "model": "m", "local": local,
                      "params": {"max_completion_tokens": 30}}]}
    )  # fmt: skip
    pool = WorkerPool(config)
    messages = [{"role": "user", "content": "hi"}]
    for worker, params, limit in (
        ("llama", {"max_completion_tokens": 5}, 5),
        ("capped", {}, 30),
        ("capped", {"max_tokens": 8}, 8),
    ):
        body = pool.request_body(pool.worker(worker), messages, params)
        assert "max_completion_tokens" not in body
        assert llama_cpp_request_model().model_validate(body).max_tokens == limit


def test_a_calls_output_limit_is_its_max_completion_tokens_first_else_the_workers() -> None:
    """A call naming both limits is held to its max_completion_tokens; one whose limit is
    null sets none, so the worker's own holds (not sent as null: no limit at all)."""
    pool = WorkerPool(pool_config("http://127.0.0.1:9/v1", params={"max_tokens": 64}))
    worker = pool.worker("w")

    def limits(params: dict[str, Any]) -> dict[str, Any]:
        body = pool.request_body(worker, USER, params)
        return {name: body[name] for name in OUTPUT_LIMITS if name in body}

    assert limits({"max_tokens": 5, "max_completion_tokens": 9}) == {"max_tokens": 9}
    assert limits({"max_completion_tokens": None}) == {"max_tokens": 64}
    # a worker naming no limit gets it under the call's first name (taking the call's last
    # name, max_tokens, passed a mutation round)
    unnamed = WorkerPool(pool_config("http://127.0.0.1:9/v1"))
    body = unnamed.request_body(
        unnamed.worker("w"), USER, {"max_tokens": 5, "max_completion_tokens": 9}
    )
    assert {name: body[name] for name in OUTPUT_LIMITS if name in body} == {
        "max_completion_tokens": 9
    }


def test_a_limit_named_null_in_a_workers_params_names_the_limit_without_setting_one() -> None:
    """`max_completion_tokens: null` in a worker's params (an o-series model, which refuses
    max_tokens, with no limit of the pool's own) says which name the worker reads: a
    client's max_tokens goes under it. Taken for no name at all, it went as max_tokens,
    which that worker refuses."""
    config = pool_config("http://127.0.0.1:9/v1", params={"max_completion_tokens": None})
    pool = WorkerPool(config)
    body = pool.request_body(pool.worker("w"), USER, {"max_tokens": 5})
    assert {name: body[name] for name in OUTPUT_LIMITS if name in body} == {
        "max_completion_tokens": 5
    }


def test_a_logit_bias_key_must_be_below_the_local_models_vocabulary_size() -> None:
    """The last token id (the size less one) is the model's; the size is not, and llama.cpp
    would ignore every bias of the request for it: it is the client's 400 at once."""
    config = PoolConfig.model_validate(
        {"workers": [{"id": "llama", "model": "m", "local": {"gguf": "embedded:smollm2"}}]}
    )
    pool = WorkerPool(config)
    pool.vocab_sizes["llama"] = 100
    worker = pool.worker("llama")

    def refused(token: str) -> WorkerCallError | None:
        body = pool.request_body(worker, USER, {"logit_bias": {token: 5}})
        return pool.refused_locally(worker, body)

    assert refused("99") is None
    error = refused("100")
    assert error is not None and error.status_code == 400
    assert "logit_bias key '100' is not a token id of its model" in str(error)
    # chat's result for it: a 400 of the request, and no call sent (only llama.cpp
    # integration runs reached it, so attempts 1 and status None passed every unit test)
    result = refused_result("llama", error)
    assert (result.error_kind, result.status_code, result.attempts) == ("client", 400, 0)
    assert result.error == str(error) and result.output is None


def test_missing_usage_gives_no_cost_rather_than_zero(stub: StubWorker) -> None:
    original = stub._respond

    async def without_usage(mode: str, body: dict, auth: str | None):
        response = await original(mode, body, auth)
        from fastapi.responses import JSONResponse

        payload = json.loads(response.body)
        payload.pop("usage")
        return JSONResponse(payload)

    stub._respond = without_usage  # type: ignore[method-assign]
    result = asyncio.run(one_call(pool_config(stub.base_url, input_price_per_mtok=1.0)))
    assert result.ok and result.usage is None and result.cost is None


# -- retries and errors ---------------------------------------------------------------------


@pytest.mark.parametrize("failures", [("500",), ("503", "500"), ("429", "500"), ("close",)])
def test_retries_server_errors_then_succeeds(stub: StubWorker, failures: tuple[str, ...]) -> None:
    stub.fail_next(*failures)
    result = asyncio.run(one_call(pool_config(stub.base_url, max_retries=2)))
    assert result.ok, result.error
    assert result.attempts == len(failures) + 1
    assert stub.modes_served == [*failures, "ok"]


@pytest.mark.parametrize("status", ["400", "401", "404"])
def test_client_errors_are_not_retried(stub: StubWorker, status: str) -> None:
    stub.fail_next(status, status, status)
    result = asyncio.run(one_call(pool_config(stub.base_url, max_retries=3)))
    assert not result.ok
    assert result.error_kind == "client" and result.attempts == 1
    assert f"HTTP {status}" in (result.error or "")
    assert result.status_code == int(status)
    assert len(stub.bodies) == 1


def test_a_worker_out_of_quota_is_not_retried_and_says_so(stub: StubWorker) -> None:
    """OpenAI's 429 insufficient_quota (the account has no credit left) was a rate limit: the
    call was retried with backoff up to max_retries (as the openai SDK retries any 429),
    for a refusal no wait clears, and said only "rate_limit". It is the worker's refusal
    now: sent once, its message saying the account is out of quota and what to do."""
    stub.mode = "quota"
    result = asyncio.run(one_call(pool_config(stub.base_url, max_retries=3)))
    assert (result.error_kind, result.status_code, result.attempts) == ("client", 429, 1)
    assert result.error_code == "insufficient_quota" and len(stub.bodies) == 1
    assert "out of quota" in (result.error or "") and "add credit" in (result.error or "")
    stub.bodies.clear()
    received, error = stream_until_it_fails(pool_config(stub.base_url, max_retries=3))
    assert (error.kind, error.code, received) == ("client", "insufficient_quota", [])
    assert len(stub.bodies) == 1 and "out of quota" in str(error)


@pytest.mark.parametrize(
    ("mode", "params", "code"),
    [
        ("vllm_context", {}, "context_length_exceeded"),
        ("prompt_too_long", {}, "context_length_exceeded"),
        ("context", {}, "context_length_exceeded"),
        ("vllm_context", {"max_tokens": 100}, "400"),  # max_tokens alone fills the context
        ("400", {}, "400"),
        ("tgi_context", {}, "context_length_exceeded"),
        ("tgi_context", {"max_tokens": 100}, None),  # max_tokens alone fills the context
    ],
)
def test_a_prompt_over_the_context_without_its_code_is_context_length_exceeded(
    stub: StubWorker, mode: str, params: dict[str, Any], code: str | None
) -> None:
    """vLLM and Anthropic's compatible API refuse a prompt over the context with a 400 that has
    no context_length_exceeded code, Hugging Face TGI with a 422 `Input validation error`: it
    was a client error like any other."""
    stub.mode = mode
    result = asyncio.run(one_call(pool_config(stub.base_url, params=params)))
    assert result.error_kind == "client"
    assert result.status_code == (422 if mode == "tgi_context" else 400)
    assert result.error_code == code and len(stub.bodies) == 1
    assert "Input validation error" in (result.error or "") or mode != "tgi_context"


def test_gives_up_after_max_retries(stub: StubWorker) -> None:
    stub.mode = "500"
    result = asyncio.run(one_call(pool_config(stub.base_url, max_retries=3)))
    assert not result.ok and result.error_kind == "server"
    assert result.attempts == 4 and len(stub.bodies) == 4
    assert result.output is None and result.cost is None


def test_backoff_is_exponential_with_jitter(
    stub: StubWorker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The waits are the ones the pool sleeps, recorded: the gaps between the stub's arrivals
    also hold each round trip, which a loaded machine's 0.3 s stall pushed over the bound."""
    slept: list[float] = []

    async def recorded_sleep(delay: float) -> None:
        slept.append(delay)
        await asyncio.sleep(delay)

    pool_asyncio = SimpleNamespace(**{**vars(asyncio), "sleep": recorded_sleep})
    monkeypatch.setattr(workers_module, "asyncio", pool_asyncio)
    stub.mode = "503"
    base = 0.08
    asyncio.run(one_call(pool_config(stub.base_url, max_retries=3, retry_backoff_s=base)))
    assert len(slept) == 3
    for index, wait in enumerate(slept):
        nominal = base * 2**index
        assert 0.5 * nominal <= wait <= 1.5 * nominal, (index, wait)
    assert slept[2] > slept[0]
    # jittered: each wait its own share of its nominal one (a fixed 1.0x passed the bounds)
    assert len({round(wait / (base * 2**index), 9) for index, wait in enumerate(slept)}) > 1
    gaps = [later - earlier for earlier, later in pairwise(stub.arrivals)]
    assert all(gap >= wait for gap, wait in zip(gaps, slept, strict=True)), (gaps, slept)


def test_the_backoffs_jitter_spans_half_to_one_and_a_half_its_nominal_wait() -> None:
    """The test above sees three waits, so a jitter over half its range (0.5x-1.0x: every
    retry sooner than the nominal wait, the mean 0.75x) passed it; 400 draws each fall in
    the lowest and the highest quarter of the range unless it is cut (chance 0.75**400)."""
    worker = pool_config("http://127.0.0.1:9/v1", retry_backoff_s=1.0).workers[0]
    waits = [backoff(worker, 3, None) / 4.0 for _ in range(400)]  # nominal: 1 s doubled twice
    assert 0.5 <= min(waits) < 0.75
    assert 1.25 < max(waits) <= 1.5


def test_a_retry_after_shorter_than_the_backoff_is_waited_the_backoff() -> None:
    """A wait is at least the worker's Retry-After and at least the backoff: a Retry-After
    shorter than the backoff taken for the whole wait (0.01 s where the backoff is 0.5 s
    or more) passed every test, which gave Retry-After with no backoff."""
    worker = pool_config("http://127.0.0.1:9/v1", retry_backoff_s=1.0).workers[0]
    assert all(backoff(worker, 1, 0.01) >= 0.5 for _ in range(20))
    assert backoff(worker, 1, 3.0) >= 3.0


def test_a_kind_its_caller_does_not_retry_is_not_retried_though_the_worker_says_to() -> None:
    """serve has the pool not retry a 429 while another worker follows (RETRIED_BEFORE_NEXT:
    the request is handed on at once); a worker's `x-should-retry: true` turns only a client
    error into one retried. Retrying any kind the worker said to (a 429 too) passed every
    test: the client was held through the 429's waits while the next worker could answer."""
    worker = pool_config("http://127.0.0.1:9/v1", retry_backoff_s=0.0).workers[0]
    request = httpx.Request("POST", "http://127.0.0.1:9/v1/chat/completions")
    said = {"x-should-retry": "true"}
    limited = openai.RateLimitError(
        "rate limited", response=httpx.Response(429, headers=said, request=request), body=None
    )
    conflict = openai.ConflictError(
        "lock timeout", response=httpx.Response(409, headers=said, request=request), body=None
    )
    deadline = time.perf_counter() + 30.0
    assert retry_wait(worker, 1, "rate_limit", RETRIED_BEFORE_NEXT, limited, 0.0, deadline) is None
    assert retry_wait(worker, 1, "rate_limit", RETRYABLE_KINDS, limited, 0.0, deadline) == 0.0
    assert retry_wait(worker, 1, "client", RETRIED_BEFORE_NEXT, conflict, None, deadline) == 0.0


def test_a_5xx_asking_to_wait_is_retried_only_by_a_caller_that_waits_out_429s() -> None:
    """serve hands a 429 on to the next worker at once (RETRIED_BEFORE_NEXT); a 503 asking
    to wait (Retry-After) was retried through its waits all the same, holding the client
    from the next worker. A caller retrying 429s (collect; serve's last worker) still waits
    it out, and a 5xx that asks no wait is retried by both."""
    worker = pool_config("http://127.0.0.1:9/v1", retry_backoff_s=0.0).workers[0]
    request = httpx.Request("POST", "http://127.0.0.1:9/v1/chat/completions")
    overloaded = openai.InternalServerError(
        "overloaded", response=httpx.Response(503, request=request), body=None
    )
    deadline = time.perf_counter() + 30.0
    assert retry_wait(worker, 1, "server", RETRIED_BEFORE_NEXT, overloaded, 2.0, deadline) is None
    assert retry_wait(worker, 1, "server", RETRYABLE_KINDS, overloaded, 2.0, deadline) == 2.0
    assert retry_wait(worker, 1, "server", RETRIED_BEFORE_NEXT, overloaded, None, deadline) == 0.0


def test_rate_limit_waits_at_least_retry_after(stub: StubWorker) -> None:
    stub.retry_after_s = 0.4
    stub.fail_next("429")
    result = asyncio.run(one_call(pool_config(stub.base_url, retry_backoff_s=0.0)))
    assert result.ok and result.attempts == 2
    assert stub.arrivals[1] - stub.arrivals[0] >= 0.4


def test_a_hanging_server_times_out(stub: StubWorker) -> None:
    stub.mode = "hang"
    start = time.perf_counter()
    result = asyncio.run(one_call(pool_config(stub.base_url, timeout_s=0.3, max_retries=1)))
    elapsed = time.perf_counter() - start
    assert result.error_kind == "timeout" and result.attempts == 2
    assert 0.6 <= elapsed < 3.0


def test_an_unreachable_server_is_a_connection_error() -> None:
    from fugu_lite.workers.local_server import free_port

    port = free_port()
    config = pool_config(f"http://127.0.0.1:{port}/v1", max_retries=1)
    result = asyncio.run(one_call(config))
    assert result.error_kind == "connection" and result.attempts == 2
    assert "could not reach" in (result.error or "")


def test_an_unreachable_server_is_named_without_the_credentials_in_its_url() -> None:
    """The error ("could not reach the server (ConnectError: All connection attempts
    failed)") named no address: with several workers, or a base_url mistyped, the user could
    not tell which server was down; it now names where the request went, without the
    user:password a URL may hold (a pool refuses such a base_url since: it is put on the
    worker past the pool's check, to keep the error's own scrubbing checked)."""
    from fugu_lite.workers.local_server import free_port

    port = free_port()
    config = pool_config(f"http://127.0.0.1:{port}/v1", max_retries=0)
    with_credentials = f"http://me:{SECRET}@127.0.0.1:{port}/v1"
    config.workers[0] = config.workers[0].model_copy(update={"base_url": with_credentials})
    result = asyncio.run(one_call(config))
    assert result.error_kind == "connection" and result.error is not None
    assert f"at http://127.0.0.1:{port}/v1/chat/completions (" in result.error
    assert SECRET not in result.error and "me:" not in result.error


def test_a_refused_connection_is_told_from_a_host_name_not_found() -> None:
    """Both said "could not reach the server at URL (ConnectError: ...)", a refused one
    with httpx's "All connection attempts failed": nothing told a server that is not
    running (or a wrong port) from a mistyped host name; each now says which it is."""
    from fugu_lite.workers.local_server import free_port

    port = free_port()
    refused = asyncio.run(one_call(pool_config(f"http://127.0.0.1:{port}/v1", max_retries=0)))
    assert refused.error_kind == "connection" and refused.error is not None
    assert f"connection refused: nothing listens on 127.0.0.1 port {port}" in refused.error
    assert "is its server running, and base_url's port right?" in refused.error
    # .invalid is reserved (RFC 2606): no resolver knows a host under it
    unknown = asyncio.run(one_call(pool_config("http://no-such-worker.invalid/v1", max_retries=0)))
    assert unknown.error_kind == "connection" and unknown.error is not None
    assert "host name no-such-worker.invalid not found" in unknown.error
    assert "connection refused" not in unknown.error


# -- concurrency ----------------------------------------------------------------------------


def test_concurrency_limit_per_worker() -> None:
    with AnsweringTogether(together=2, latency_s=0.15) as stub:
        config = PoolConfig.model_validate(
            {
                "workers": [
                    {"id": "a", "model": "m", "base_url": stub.base_url, "max_concurrency": 2},
                    {"id": "b", "model": "m", "base_url": stub.base_url, "max_concurrency": 1},
                ]
            }
        )

        async def run() -> list[CallResult]:
            async with WorkerPool(config) as pool:
                return await asyncio.gather(*(pool.chat("a", USER) for _ in range(6)))

        start = time.perf_counter()
        results = asyncio.run(run())
        elapsed = time.perf_counter() - start
        assert all(result.ok for result in results)
        assert stub.max_in_flight == 2
        assert elapsed >= 3 * 0.15  # 6 calls, 2 at a time

        stub.max_in_flight = 0

        async def both() -> None:
            async with WorkerPool(config) as pool:
                await asyncio.gather(pool.chat("a", USER), pool.chat("b", USER))

        asyncio.run(both())
        assert stub.max_in_flight == 2  # the limits are per worker: a and b run together


# -- secrets --------------------------------------------------------------------------------


def test_api_key_is_sent_but_never_leaked(
    stub: StubWorker, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(KEY_ENV, SECRET)
    caplog.set_level(logging.DEBUG)
    config = pool_config(stub.base_url, api_key_env=KEY_ENV, max_retries=1)
    stub.fail_next("leak", "leak")  # a server that echoes the Authorization header
    failed = asyncio.run(one_call(config))
    ok = asyncio.run(one_call(config))

    assert stub.auth_headers[0] == f"Bearer {SECRET}"
    assert not failed.ok and failed.error_kind == "server"
    assert "***" in (failed.error or "")
    for text in (failed.model_dump_json(), repr(failed), ok.model_dump_json(), caplog.text):
        assert SECRET not in text
    assert SECRET not in config.model_dump_json()


@pytest.mark.parametrize("status", ["401", "403"])
def test_a_refused_key_names_the_variable_it_came_from_not_the_key(
    stub: StubWorker, monkeypatch: pytest.MonkeyPatch, status: str
) -> None:
    """A worker's 401 (bad key) or 403 (no access) said "client: HTTP 401: ..." and no more:
    not which variable the key was read from, nor what to fix. The message names the
    worker, its api_key_env and its model now, streamed or not, and never the key; a worker
    with no api_key_env is told it sent no key."""
    monkeypatch.setenv(KEY_ENV, SECRET)
    stub.mode = status
    config = pool_config(stub.base_url, api_key_env=KEY_ENV)
    result = asyncio.run(one_call(config))
    _, error = stream_until_it_fails(config)
    for message in (result.error or "", str(error)):
        assert message.startswith(f"worker w: client: HTTP {status}")
        assert f"from the environment variable {KEY_ENV} (its api_key_env)" in message
        assert f"the key in {KEY_ENV}" in message and SECRET not in message
        assert ("'stub-model'" in message) == (status == "403")
    unkeyed = asyncio.run(one_call(pool_config(stub.base_url)))
    assert "it was sent no API key, as it has no api_key_env" in (unkeyed.error or "")
    assert "fix api_key_env: set it to the name of the environment variable" in (
        unkeyed.error or ""
    )
    no_access = "has no access to model 'stub-model' or this endpoint"
    assert (no_access in (unkeyed.error or "")) == (status == "403"), unkeyed.error
    assert len(stub.bodies) == 3  # none retried


def test_an_error_message_is_cut_to_its_longest() -> None:
    """A worker's error body of pages (a proxy's HTML, a stack trace) filled every log line
    and record that told the failure."""
    assert redact("x" * 5000, SECRET) == "x" * MAX_ERROR_CHARS


def test_a_short_key_and_a_key_cut_to_its_first_characters_are_scrubbed() -> None:
    """A self-hosted server's short key (vLLM's `--api-key abc123`) is scrubbed as a long one
    is, and a key cut short at the end of a message (a long body cut before) down to its
    first 4 characters (3 are as likely the end of an ordinary word); a run of asterisks
    that shows nothing of the key is the server's own text, kept."""
    assert redact("the key abc123 was refused", "abc123") == "the key *** was refused"
    assert redact(f"Authorization: Bearer {SECRET[:6]}", SECRET) == "Authorization: Bearer ***"
    assert redact(f"Authorization: Bearer {SECRET[:3]}", SECRET).endswith(f" {SECRET[:3]}")
    # the edges: a key of 4 characters, and a key cut to its first 4 (in a mutation round,
    # a key under 6 left unscrubbed and a key cut to 4 or 5 kept passed every test)
    assert redact("the key ab12 was refused", "ab12") == "the key *** was refused"
    assert redact(f"Authorization: Bearer {SECRET[:4]}", SECRET) == "Authorization: Bearer ***"
    assert redact("the password **** was refused", SECRET) == "the password **** was refused"


def test_a_keyless_workers_error_is_cut_and_nothing_in_it_taken_for_a_key() -> None:
    """A worker with no api_key_env is sent NO_KEY, which is no secret: its error is cut to
    the longest kept as any other is, and NO_KEY, or its start ending a message, is kept (in
    a mutation round, a keyless worker's error left uncut, and "fugu" ending a message
    scrubbed as NO_KEY cut short, passed every test)."""
    said = f"Bearer {NO_KEY} was refused for model fugu"
    for secret in (None, NO_KEY):
        assert redact("x" * 5000, secret) == "x" * MAX_ERROR_CHARS
        assert redact(said, secret) == said


def test_a_key_is_scrubbed_before_the_message_is_cut() -> None:
    """The key is scrubbed before the message is cut to its longest, so that what follows
    the key is kept, and a key cut short by one character is scrubbed (in a mutation round,
    cutting first, which lost " refused", and a key cut one short left whole, passed every
    test)."""
    before = "h" * (MAX_ERROR_CHARS - 20)
    assert redact(f"{before} {SECRET} refused", SECRET) == f"{before} *** refused"
    assert redact(f"Authorization: Bearer {SECRET[:-1]}", SECRET) == "Authorization: Bearer ***"


def test_a_masked_key_is_scrubbed_by_what_shows_of_it() -> None:
    """A key shown masked is scrubbed when four asterisks or more stand for its middle and
    what shows around them is its start and end, or its end alone ("****1706"); a masked key
    starting otherwise is another key, kept (in a mutation round, five asterisks needed, a
    masked key needing both its start and end shown, or any start taken, passed every
    test)."""
    for shown in (f"{SECRET[:7]}****{SECRET[-4:]}", f"****{SECRET[-4:]}"):
        assert redact(f"Incorrect API key provided: {shown}.", SECRET) == (
            "Incorrect API key provided: ***."
        )
    other = f"sk-prod****{SECRET[-4:]}"
    assert redact(f"Incorrect API key provided: {other}.", SECRET) == (
        f"Incorrect API key provided: {other}."
    )


def test_stream_errors_do_not_leak_the_key(stub: StubWorker, monkeypatch) -> None:
    monkeypatch.setenv(KEY_ENV, SECRET)
    stub.mode = "leak"

    async def run() -> WorkerCallError:
        async with WorkerPool(pool_config(stub.base_url, api_key_env=KEY_ENV)) as pool:
            with pytest.raises(WorkerCallError) as caught:
                async for _ in pool.stream_chat("w", USER):
                    pass
            return caught.value

    error = asyncio.run(run())
    assert SECRET not in str(error) and "***" in str(error)


def test_missing_key_variable_is_a_clear_error(stub: StubWorker, monkeypatch) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    with pytest.raises(PoolStartError, match=f"{KEY_ENV}, which is not set"):
        asyncio.run(one_call(pool_config(stub.base_url, api_key_env=KEY_ENV)))
    monkeypatch.setenv(KEY_ENV, "")
    with pytest.raises(PoolStartError, match=f"{KEY_ENV}, which is empty"):
        asyncio.run(one_call(pool_config(stub.base_url, api_key_env=KEY_ENV)))


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (f"{SECRET}\r", "a line break around it"),
        (f"{SECRET}\n", "a line break around it"),
        (f" {SECRET}", "spaces or a line break around it"),
        (f"{SECRET[:8]} {SECRET[8:]}", "holds a space"),
        (f"{SECRET[:8]}\x1b{SECRET[8:]}", "control character"),  # a terminal's colour code
        (f"{SECRET}\u2019", "not ASCII"),
    ],
)
def test_a_key_no_header_can_carry_is_refused_at_start_without_showing_it(
    stub: StubWorker, monkeypatch: pytest.MonkeyPatch, value: str, problem: str
) -> None:
    """A key read with its line break (a .env file with Windows line endings) failed every
    call before it was sent, as "connection: could not reach the server (LocalProtocolError:
    Illegal header value b'Bearer sk-...\\r')": the worker was taken as down for a network
    problem, and the key was in the error (escaped, so not scrubbed); a non-ASCII one was a
    "malformed response"."""
    monkeypatch.setenv(KEY_ENV, value)
    with pytest.raises(PoolStartError, match=problem) as raised:
        asyncio.run(one_call(pool_config(stub.base_url, api_key_env=KEY_ENV)))
    assert KEY_ENV in str(raised.value) and SECRET[4:12] not in str(raised.value)
    assert stub.bodies == []


# What each is told of where its quotes came from (a hint swapped passed a mutation round).
WRAPPED = (
    r"is wrapped in quotes \(a \.env file read by something that keeps them, as docker's "
    r"--env-file does\?\); set it"
)
ONE_QUOTE = (
    r" with a quote, which no key holds \(copied with it from a shell line or a \.env file\?\)"
)


@pytest.mark.parametrize(
    ("value", "problem"),
    [(f'"{SECRET}"', WRAPPED), (f"'{SECRET}'", WRAPPED),
     (f'{SECRET}"', f"ends{ONE_QUOTE}"), (f"{SECRET}'", f"ends{ONE_QUOTE}"),
     (f'"{SECRET}', f"starts{ONE_QUOTE}"), ('"', f"starts{ONE_QUOTE}")],
)  # fmt: skip
def test_a_key_read_with_its_quotes_is_refused_at_start_without_showing_it(
    stub: StubWorker, monkeypatch: pytest.MonkeyPatch, value: str, problem: str
) -> None:
    """A key written `KEY="sk-..."` in a .env file that its reader keeps the quotes of
    (docker's --env-file, systemd's EnvironmentFile with other quotes) was sent with them:
    every call got a 401, "its API key is missing or not accepted", and the worker was taken
    as down, with nothing pointing at the quotes. The pool now refuses it at start; so too a
    key copied with one quote (`sk-..."`, the end of such a line pasted after its opening
    quote), which was taken while one wrapped in both was refused."""
    monkeypatch.setenv(KEY_ENV, value)
    with pytest.raises(PoolStartError, match=problem) as raised:
        asyncio.run(one_call(pool_config(stub.base_url, api_key_env=KEY_ENV)))
    assert KEY_ENV in str(raised.value) and SECRET[4:12] not in str(raised.value)
    assert stub.bodies == []


# -- streaming ------------------------------------------------------------------------------


def collect_stream(config: PoolConfig, **params: Any) -> list[dict]:
    async def run() -> list[dict]:
        async with WorkerPool(config) as pool:
            return [chunk async for chunk in pool.stream_chat("w", USER, **params)]

    return asyncio.run(run())


def stream_until_it_fails(config: PoolConfig) -> tuple[list[dict], WorkerCallError]:
    """The chunks a stream gave before its WorkerCallError, and that error."""
    received: list[dict] = []

    async def run() -> None:
        async with WorkerPool(config) as pool:
            async for chunk in pool.stream_chat("w", USER):
                received.append(chunk)

    with pytest.raises(WorkerCallError) as caught:
        asyncio.run(run())
    return received, caught.value


def test_stream_chat_yields_openai_chunks(stub: StubWorker) -> None:
    chunks = collect_stream(pool_config(stub.base_url), stream_options={"include_usage": True})
    assert all(chunk["object"] == "chat.completion.chunk" for chunk in chunks)
    text = "".join(
        choice["delta"].get("content") or "" for chunk in chunks for choice in chunk["choices"]
    )
    assert text == "stub answer to: what is two plus two"
    assert chunks[-1]["usage"]["completion_tokens"] == 8
    assert stub.bodies[0]["stream"] is True


def test_stream_retries_before_the_first_chunk(stub: StubWorker) -> None:
    stub.fail_next("500", "close")
    chunks = collect_stream(pool_config(stub.base_url, max_retries=2))
    assert chunks and stub.modes_served == ["500", "close", "ok"]


@pytest.mark.parametrize(("mode", "kind", "requests"), [("500", "server", 2), ("400", "client", 1)])
def test_stream_failure_raises_before_any_chunk(
    stub: StubWorker, mode: str, kind: str, requests: int
) -> None:
    stub.mode = mode
    received, error = stream_until_it_fails(pool_config(stub.base_url, max_retries=1))
    assert error.kind == kind and received == []
    assert error.status_code == int(mode)
    assert len(stub.bodies) == requests


def test_a_stream_refused_keeps_the_workers_error_code(stub: StubWorker) -> None:
    """A prompt over the worker's context, refused as the stream opened, is the client's
    (context_length_exceeded: serve tries a worker with a longer context), not the
    worker's failure: the error keeps the code its answer gave."""
    stub.mode = "context"
    received, error = stream_until_it_fails(pool_config(stub.base_url))
    assert received == []
    assert (error.kind, error.status_code, error.code) == ("client", 400, "context_length_exceeded")


def test_a_prompt_over_the_context_is_not_logged_as_the_workers_failure(
    stub: StubWorker, caplog: pytest.LogCaptureFixture
) -> None:
    """In a manual mutation round, failed_result logging a call refused for a prompt over
    the worker's context at INFO, as the worker's failure (serve then tries a worker with a
    longer context: no failure of this one), passed every workers test; it is logged at
    DEBUG, and another refusal (a 400) still at INFO."""
    caplog.set_level(logging.DEBUG, logger="fugu_lite.workers.attempts")
    for mode in ("context", "400"):
        stub.mode = mode
        assert not asyncio.run(one_call(pool_config(stub.base_url))).ok
    failed = [record.levelno for record in caplog.records if "failed after" in record.message]
    assert failed == [logging.DEBUG, logging.INFO]


def test_a_stream_cut_short_without_its_end_is_a_failure_not_an_answer(stub: StubWorker) -> None:
    """A stream whose connection closed cleanly after a word, with no finish_reason and no
    `data: [DONE]`, ended as if the answer were whole: serve relayed half an answer as a
    success. It is now a WorkerCallError after the chunks received."""
    stub.mode = "cut_stream"
    received, error = stream_until_it_fails(pool_config(stub.base_url))
    assert error.kind == "server"
    assert "[DONE]" in str(error) and "after the stream started" in str(error)
    assert [chunk["choices"][0]["delta"].get("content") for chunk in received] == ["", "stub"]
    stub.mode = "ok"  # a whole stream still ends well
    chunks = collect_stream(pool_config(stub.base_url))
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_a_stream_that_stalls_after_its_first_chunk_says_it_stalled(stub: StubWorker) -> None:
    """A stream that gave its first chunk, then nothing for timeout_s, failed as "timeout: no
    answer within the worker's timeout_s (after the stream started)": it had answered, and
    the words sent the user looking at a slow model instead of a stalled stream. timeout_s
    is 1 s: the first chunk comes within it on a loaded machine (0.3 s was not enough for a
    stub 0.3 s slower to give it)."""
    stub.reply = "one two three"
    stub.stream_chunk_delay_s = 3.0  # the role chunk, then 3 s before each word
    received, error = stream_until_it_fails(pool_config(stub.base_url, timeout_s=1.0))
    assert error.kind == "timeout" and len(received) == 1
    assert "no chunk within the worker's timeout_s: the stream stalled" in str(error)
    assert "no answer" not in str(error) and str(error).endswith("(after the stream started)")


def test_a_stream_options_refusal_is_rechecked_after_a_while(stub: StubWorker) -> None:
    """A worker that refused stream_options was streamed to without them until the pool
    stopped (for serve: until it was restarted), even after the worker behind its base_url
    was upgraded to take them: its streams' usage stayed estimated. The refusal now holds
    for STREAM_OPTIONS_RECHECK_S; then they are sent again, and kept once taken. "A while"
    passes by dating the refusal back that long: waited for in real time (the hold cut to
    1 s), a loaded machine's second stream could come after it ended (one held up 1 s did)."""
    usage = {"stream_options": {"include_usage": True}}

    async def run() -> list[dict]:
        async with WorkerPool(pool_config(stub.base_url)) as pool:

            async def stream() -> dict:
                chunks = [chunk async for chunk in pool.stream_chat("w", USER, **usage)]
                return chunks[-1]

            def after_a_while() -> None:
                pool.stream_options_refused_at["w"] -= workers_module.STREAM_OPTIONS_RECHECK_S

            stub.mode = "no_stream_options"
            await stream()  # refused, then sent without them
            await stream()  # without them at once
            after_a_while()
            await stream()  # asked again: still refused
            after_a_while()
            stub.mode = "ok"  # the worker was upgraded
            return [await stream(), await stream()]

    last = asyncio.run(run())
    sent = ["stream_options" in body for body in stub.bodies]
    assert sent == [True, False, False, True, False, True, True]
    assert all(chunk["usage"]["completion_tokens"] == 8 for chunk in last)


def test_a_stream_options_refusal_uses_none_of_the_calls_retries(stub: StubWorker) -> None:
    """Asking once more without stream_options is the same call, not a retry of a failure:
    the call keeps its max_retries for the worker's own failures."""
    stub.mode = "no_stream_options"
    stub.fail_next("no_stream_options", "500")
    config = pool_config(stub.base_url, max_retries=1)
    assert collect_stream(config, stream_options={"include_usage": True})
    assert stub.modes_served == ["no_stream_options", "500", "no_stream_options"]


@pytest.mark.parametrize("streamed", [False, True])
def test_on_slot_is_called_once_the_call_has_one_of_the_workers_slots(
    stub: StubWorker, streamed: bool
) -> None:
    """A caller giving up before on_slot knows the worker was busy, not failing (serve's
    503 busy, not a failure against the worker): a call waiting behind the worker's
    max_concurrency others has had no on_slot yet."""
    stub.latency_s = 1.0

    async def answer(pool: WorkerPool, on_slot: Callable[[], None]) -> None:
        if streamed:
            async for _ in pool.stream_chat("w", USER, on_slot):
                pass
        else:
            assert (await pool.chat("w", USER, on_slot)).ok

    async def run() -> tuple[list[str], list[str]]:
        slots: list[str] = []
        async with WorkerPool(pool_config(stub.base_url, max_concurrency=1)) as pool:
            calls = [
                asyncio.create_task(answer(pool, lambda name=name: slots.append(name)))
                for name in ("first", "second")
            ]
            await asyncio.sleep(0.3)
            waiting = list(slots)
            await asyncio.gather(*calls)
        return waiting, slots

    assert asyncio.run(run()) == (["first"], ["first", "second"])


def test_unknown_worker_and_unstarted_pool_are_clear_errors(stub: StubWorker) -> None:
    pool = WorkerPool(pool_config(stub.base_url))
    with pytest.raises(RuntimeError, match="async with"):
        asyncio.run(pool.chat("w", USER))
    with pytest.raises(KeyError, match="the pool has w"):
        asyncio.run(pool.chat("nope", USER))


def test_a_rate_limited_call_says_how_long_the_worker_asked_to_wait(stub: StubWorker) -> None:
    """The worker's Retry-After was used for the pool's own backoff only (and cut at 60 s):
    the caller (fugu-lite serve's 429) could not pass it on to its client."""
    stub.retry_after_s = 90.0
    stub.mode = "429"
    result = asyncio.run(one_call(pool_config(stub.base_url, max_retries=0)))
    assert result.error_kind == "rate_limit" and result.retry_after_s == 90.0


def test_a_retry_after_over_the_pools_longest_wait_is_not_retried_early(stub: StubWorker) -> None:
    """A worker asking to wait 90 s was retried after 60 s (the pool's longest wait), twice,
    which it refuses again (the call took two minutes and failed anyway; the openai SDK does
    not retry then). It is now given up at once, the wait passed on to the caller."""
    stub.retry_after_s = 90.0
    stub.mode = "429"

    # The default timeout_s: the call's budget (185 s) holds a 60 s wait; the tests' 5 s
    # (a 20 s budget) would give it up for its budget alone.
    config = pool_config(stub.base_url, max_retries=2, timeout_s=60.0)

    async def call() -> CallResult:
        return await asyncio.wait_for(one_call(config), 10)

    result = asyncio.run(call())
    assert result.error_kind == "rate_limit" and result.retry_after_s == 90.0
    assert result.attempts == 1 and len(stub.bodies) == 1


def test_a_worker_saying_a_retry_will_not_help_is_not_retried(stub: StubWorker) -> None:
    """`x-should-retry: false` (OpenAI's header, which the openai SDK obeys) was ignored: the
    pool retried the call max_retries times all the same, in chat and when opening a
    stream; neither retries it now."""
    stub.mode = "no_retry"
    result = asyncio.run(one_call(pool_config(stub.base_url, max_retries=3)))
    assert result.error_kind == "server" and result.status_code == 503
    assert result.attempts == 1 and len(stub.bodies) == 1

    async def stream() -> None:
        async with WorkerPool(pool_config(stub.base_url, max_retries=3)) as pool:
            async for _ in pool.stream_chat("w", USER):
                pass

    with pytest.raises(WorkerCallError) as raised:
        asyncio.run(stream())
    assert raised.value.status_code == 503 and len(stub.bodies) == 2
    stub.mode = "503"  # without the header, the same error is retried
    assert asyncio.run(one_call(pool_config(stub.base_url, max_retries=3))).attempts == 4


def sse_chunk(choices: list[dict[str, Any]], **more: Any) -> str:
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m"}
    return f"data: {json.dumps({**chunk, 'choices': choices, **more})}\n\n"


@pytest.mark.parametrize(
    "events",
    [
        # its usage after its finish_reason, and no [DONE] (a server that sends none)
        [sse_chunk([{"index": 0, "delta": {"content": "4"}, "finish_reason": None}]),
         sse_chunk([{"index": 0, "delta": {}, "finish_reason": "stop"}]),
         sse_chunk([], usage={"prompt_tokens": 5, "completion_tokens": 1})],
        # [DONE] after a last chunk without a finish_reason (a server that gives none)
        [sse_chunk([{"index": 0, "delta": {"content": "4"}, "finish_reason": None}]),
         "data: [DONE]\n\n"],
        # no [DONE], a finish_reason other than stop: the answer cut at its max_tokens
        [sse_chunk([{"index": 0, "delta": {"content": "4"}, "finish_reason": "length"}])],
        # or a tool call
        [sse_chunk([{"index": 0, "delta": {}, "finish_reason": "tool_calls"}])],
    ],
)  # fmt: skip
def test_a_stream_that_ended_as_it_should_is_not_called_cut(events: list[str]) -> None:
    """A stream ended by its finish_reason, or by `data: [DONE]`, is whole: either one.
    Any finish_reason ends it: taking only "stop" (a mutation round's finishes) passed
    every test, and a server sending no [DONE] had each answer cut at its max_tokens, or
    each tool call, failed as a stream cut mid-answer."""
    chunks = streamed_from(events)
    assert len(chunks) == len([event for event in events if "[DONE]" not in event])


def streamed_from(events: list[str]) -> list[dict[str, Any]]:
    """The chunks the pool yields of a worker's stream sending these events."""
    upstream = FastAPI()

    @upstream.post("/v1/chat/completions")
    async def chat() -> StreamingResponse:
        return StreamingResponse(iter(events), media_type="text/event-stream")

    async def stream() -> list[dict[str, Any]]:
        async with WorkerPool(pool_config(server.base_url, max_retries=0)) as pool:
            return [chunk async for chunk in pool.stream_chat("w", USER)]

    with ServerThread(upstream) as server:
        return asyncio.run(stream())


@pytest.mark.parametrize(
    ("choices", "flaw"),
    [
        (["4"], "choices[0] is str, not an object"),
        ([{"index": 0, "delta": [{"content": "4"}]}], "choices[0].delta is list, not an object"),
        ({"index": 0, "delta": {"content": "4"}}, "choices is dict, not a list"),
        (
            [{"index": 0, "delta": {"tool_calls": ["add(2, 2)"]}}],
            "choices[0].delta.tool_calls[0] is str, not an object",
        ),
        (
            [{"index": 0, "delta": {"tool_calls": {"index": 0, "id": "call_1"}}}],
            "choices[0].delta.tool_calls is dict, not a list",
        ),
        (  # a choice without a delta does not end the checking of those after it
            [{"index": 0, "finish_reason": "stop"}, {"index": 1, "delta": {"tool_calls": [4]}}],
            "choices[1].delta.tool_calls[0] is int, not an object",
        ),
        (
            [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": "add(2, 2)"}]}}],
            "choices[0].delta.tool_calls[0].function is str, not an object",
        ),
        (
            [{"index": 0, "delta": {"function_call": "add(2, 2)"}}],
            "choices[0].delta.function_call is str, not an object",
        ),
    ],
)
def test_a_stream_chunk_not_shaped_as_openais_is_the_workers_error(choices: Any, flaw: str) -> None:
    """A chunk whose choices are no list, or whose choice or delta is no object, was yielded
    on (serve's relay then failed on it, cutting the client's stream without an error event;
    a local worker's chunk crashed its reshaping with an AttributeError): it is the worker's
    malformed answer now, saying what is wrong. So are a delta's tool_calls that are no list
    of objects, which reached the client unchanged (OpenAI never sends them; a client
    reading each call as an object may fail on them), and a deprecated function_call that
    is no object."""
    events = [
        sse_chunk([{"index": 0, "delta": {"content": "4"}}]),
        sse_chunk(choices),
        sse_chunk([{"index": 0, "delta": {}, "finish_reason": "stop"}]),
    ]
    with pytest.raises(WorkerCallError, match="malformed response") as caught:
        streamed_from(events)
    assert caught.value.kind == "server"
    assert f"a stream chunk's {flaw}" in str(caught.value)


def test_a_tool_call_delta_without_a_function_is_yielded_on() -> None:
    """A call's function is checked only when the delta holds one: a delta with the call's
    index alone (some servers' last) is no malformed answer (a mutant checking every call's
    function passed every test)."""
    call = [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_1"}]}}]
    events = [sse_chunk(call), sse_chunk([{"index": 0, "delta": {}, "finish_reason": "stop"}])]
    chunks = streamed_from(events)
    assert chunks[0]["choices"][0]["delta"] == call[0]["delta"]


def test_a_malformed_first_chunk_is_not_said_to_fail_after_the_stream_started() -> None:
    """A first chunk whose choice was no object failed "... (after the stream started)",
    though nothing had been yielded (serve falls back to another worker then): its
    message says it was the stream's first chunk now."""
    events = [sse_chunk(["4"]), sse_chunk([{"index": 0, "delta": {}, "finish_reason": "stop"}])]
    with pytest.raises(WorkerCallError, match="malformed response") as caught:
        streamed_from(events)
    assert "choices[0] is str, not an object" in str(caught.value)
    assert "after the stream started" not in str(caught.value)
    assert str(caught.value).endswith("(in the stream's first chunk)")


def test_a_streams_chunks_are_yielded_as_the_worker_sent_them() -> None:
    """Not with every field of OpenAI's chunk the worker left out (usage, logprobs,
    system_fingerprint... as null), which serve would relay as if the worker sent them."""
    events = [
        sse_chunk([{"index": 0, "delta": {"role": "assistant", "content": "4"}}]),
        sse_chunk([{"index": 0, "delta": {}, "finish_reason": "stop"}]),
    ]
    sent = [json.loads(event.removeprefix("data: ")) for event in events]
    assert streamed_from(events) == sent


def test_a_stream_cut_after_a_chunk_without_choices_is_still_cut() -> None:
    """Azure OpenAI's first chunk has no choices (its prompt_filter_results): a stream cut
    after it, with no finish_reason and no data: [DONE], is no whole answer."""
    events = [
        sse_chunk([], prompt_filter_results=[]),
        sse_chunk([{"index": 0, "delta": {"content": "4"}, "finish_reason": None}]),
    ]
    with pytest.raises(WorkerCallError, match="the stream ended before its answer did"):
        streamed_from(events)


def test_a_remote_workers_empty_stream_is_not_asked_again_unstreamed() -> None:
    """Only a local worker is asked again without streaming (llama.cpp's refusal of a prompt
    over its context is an empty stream): a remote one would be sent the whole request
    again, its answer generated and paid for to be thrown away."""
    bodies: list[dict[str, Any]] = []
    upstream = FastAPI()

    @upstream.post("/v1/chat/completions")
    async def chat(request: Request) -> StreamingResponse:
        bodies.append(await request.json())
        return StreamingResponse(iter([]), media_type="text/event-stream")

    async def stream() -> None:
        async with WorkerPool(pool_config(server.base_url, max_retries=0)) as pool:
            async for _ in pool.stream_chat("w", USER):
                pass

    ended = pytest.raises(WorkerCallError, match="the stream ended before any chunk")
    with ServerThread(upstream) as server, ended:
        asyncio.run(stream())
    assert [body.get("stream") for body in bodies] == [True]


def malformed_answer(body: Any) -> CallResult:
    """One call to a worker answering a 200 with this JSON body."""
    upstream = FastAPI()

    @upstream.post("/v1/chat/completions")
    async def chat() -> JSONResponse:
        return JSONResponse(body)

    with ServerThread(upstream) as server:
        return asyncio.run(one_call(pool_config(server.base_url, max_retries=0)))


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"choices": ["hi"]}, "choices[0] is str, not an object"),
        ({"choices": [{"message": "hi"}]}, "choices[0].message is str, not an object"),
        ({"choices": {"0": {"message": {}}}}, "choices is dict, not a list"),
        (
            {"choices": [{"message": {"role": "assistant", "content": {"text": "4"}}}]},
            "choices[0].message.content is dict, not text",
        ),
        ({"choices": [{"message": {"content": 4}}]}, "choices[0].message.content is int"),
        (
            {"choices": [{"message": {"content": None, "tool_calls": ["4"]}}]},
            "choices[0].message.tool_calls[0] is str, not an object",
        ),
        (
            {"choices": [{"message": {"tool_calls": {"id": "call_1", "type": "function"}}}]},
            "choices[0].message.tool_calls is dict, not a list",
        ),
        (
            {"choices": [{"message": {"tool_calls": [{"id": "call_1", "function": "add"}]}}]},
            "choices[0].message.tool_calls[0].function is str, not an object",
        ),
        (
            {"choices": [{"message": {"content": None, "function_call": "add"}}]},
            "choices[0].message.function_call is str, not an object",
        ),
    ],
)
def test_a_200_holding_no_chat_completion_is_a_server_error_naming_its_flaw(
    body: Any, named: str
) -> None:
    """A 200 whose choice or message was no object failed with a bare "AttributeError: 'str'
    object has no attribute 'get'", and content that was an object (or a number) was given
    on as the answer, the object as its Python repr ("{'text': '4'}"). Tool calls that are
    no list of objects, or a call whose function is no object, were passed on to the client
    as the worker gave them (a client reading each as an object failed on them); so was a
    deprecated function_call that is no object."""
    result = malformed_answer(body)
    assert result.output is None and result.error_kind == "server"
    assert result.error is not None and named in result.error, result.error


def test_a_web_page_instead_of_json_is_named_with_the_base_url_to_check(stub: StubWorker) -> None:
    """A 200 web page (a base_url that is a web app's) failed with "malformed response:
    JSONDecodeError: Expecting value: line 1 column 1 (char 0)", which named neither what
    came nor what to fix."""
    stub.mode = "html"
    result = asyncio.run(one_call(pool_config(stub.base_url, max_retries=0)))
    assert result.error_kind == "server" and result.error is not None
    assert "not JSON (text/html" in result.error and "<!doctype html>" in result.error
    assert "base_url" in result.error and "/v1" in result.error


def test_a_web_page_starting_with_a_byte_order_mark_is_named_a_web_page() -> None:
    """A page saved as "UTF-8 with BOM" (a static page a base_url points at, a proxy's error
    page) was named a web page only when its content-type said HTML: the BOM before its
    '<!DOCTYPE html>' hid it, so an answer without one lost the base_url hint and an error
    gave its whole markup instead of its title."""
    page = "\ufeff<!DOCTYPE html>\n<html><head><title>Bad gateway</title></head></html>"
    with pytest.raises(ValueError, match="no content-type") as raised:
        answer_json(page.encode(), None)
    assert "it is a web page" in str(raised.value) and "base_url" in str(raised.value)
    assert page_words(page) == "Bad gateway"
    assert page_words("\ufeff{}") is None  # a BOM alone makes no web page


def test_an_error_page_is_read_as_its_words_not_its_markup(stub: StubWorker) -> None:
    """A CDN's or proxy's 502 page in front of a worker filled the error (the call log, the
    collect summary's "the first: ...", serve's log) with 600 characters of its doctype and
    styles, before any of its words; the error now gives the page's title."""
    stub.mode = "gateway_page"
    result = asyncio.run(one_call(pool_config(stub.base_url, max_retries=0)))
    assert result.error_kind == "server" and result.status_code == 502
    assert (
        result.error
        == "worker w: server: HTTP 502: a web page: 'api.example.com | 502: Bad gateway'"
    )
    stub.mode = "503"  # an error that is no web page is as it was
    result = asyncio.run(one_call(pool_config(stub.base_url, max_retries=0)))
    assert result.error == "worker w: server: HTTP 503: stub server error"


def test_an_answer_given_as_content_parts_is_its_text(stub: StubWorker) -> None:
    """A message content given as a list of parts (Mistral's reasoning models) became the
    output as Python's repr of the list ("[{'type': 'thinking', ...}]"), which graders scored
    as a wrong answer; the output is now its text parts joined, without the thinking."""
    stub.reply = "The answer is 4."
    stub.mode = "parts"
    result = asyncio.run(one_call(pool_config(stub.base_url)))
    assert result.ok and result.output == "The answer is 4."


def test_only_the_text_parts_of_an_answer_are_its_output() -> None:
    """A part of another type that has a `text` of its own (a gateway's reasoning part) is
    no more the answer than Mistral's thinking part."""
    parts = [{"type": "reasoning", "text": "Let me think. "}, {"type": "text", "text": "4"}]
    raw = {"choices": [{"message": {"role": "assistant", "content": parts}}]}
    assert parse_completion(raw) == ("4", None)
    # A text part of null text (a mutant joining str(None) passed every test) adds nothing.
    empty = [{"type": "text", "text": None}, {"type": "text", "text": "4"}]
    raw = {"choices": [{"message": {"role": "assistant", "content": empty}}]}
    assert parse_completion(raw) == ("4", None)


def test_a_chat_call_given_stream_true_is_still_answered_whole(stub: StubWorker) -> None:
    """`stream` is the pool's to set (chat or stream_chat): sent, the worker's event stream
    failed as an answer that is not JSON."""
    result = asyncio.run(one_call(pool_config(stub.base_url), stream=True))
    assert result.ok and result.output == "stub answer to: what is two plus two", result.error


def test_a_calls_cost_is_at_its_own_workers_prices(stub: StubWorker) -> None:
    cheap = {"id": "cheap", "model": "m", "base_url": stub.base_url, "input_price_per_mtok": 1.0}
    dear = {**cheap, "id": "dear", "input_price_per_mtok": 3.0, "output_price_per_mtok": 9.0}
    config = PoolConfig.model_validate({"workers": [cheap, dear]})

    async def call() -> CallResult:
        async with WorkerPool(config) as pool:
            return await pool.chat("dear", USER)

    result = asyncio.run(call())
    assert result.usage is not None, result.error
    usage = result.usage
    assert result.cost == pytest.approx(
        (usage.prompt_tokens * 3.0 + usage.completion_tokens * 9.0) / 1e6
    )


def test_an_answer_with_no_content_has_an_empty_output() -> None:
    """A message whose content is null (a reasoning model cut while thinking, a tool call)
    answered nothing, not the text "None"."""
    raw = {"choices": [{"message": {"role": "assistant", "content": None}}]}
    assert parse_completion(raw) == ("", None)


def test_a_web_page_instead_of_an_event_stream_is_named_with_the_base_url_to_check(
    stub: StubWorker,
) -> None:
    """A stream answered with a 200 web page failed with "the stream ended before any
    chunk", as if the worker had cut its answer short."""
    stub.mode = "html"

    async def stream() -> None:
        async with WorkerPool(pool_config(stub.base_url, max_retries=0)) as pool:
            async for _ in pool.stream_chat("w", USER):
                pass

    with pytest.raises(WorkerCallError, match="its answer was text/html") as raised:
        asyncio.run(stream())
    assert raised.value.kind == "server" and "base_url" in str(raised.value)


def test_a_failed_calls_result_keeps_the_param_and_the_retry_header_the_worker_gave(
    stub: StubWorker,
) -> None:
    """serve's 400 names the param the worker refused, and a worker's x-should-retry
    decides whether its 4xx is the request's fault or its own state (refine_kind)."""
    stub.mode = "unsupported_value"
    refused = asyncio.run(one_call(pool_config(stub.base_url)))
    assert (refused.status_code, refused.error_param) == (400, "temperature")
    assert refused.error_code == "unsupported_value" and refused.should_retry is None
    stub.mode = "no_retry"
    told = asyncio.run(one_call(pool_config(stub.base_url)))
    assert told.attempts == 1 and told.should_retry is False


def test_a_client_error_the_worker_says_to_retry_is_retried(stub: StubWorker) -> None:
    """`x-should-retry: true` on a 4xx (OpenAI's 409 lock timeout, which the openai SDK
    retries) was ignored: the call failed at once as the request's own fault."""
    stub.fail_next("conflict")
    result = asyncio.run(one_call(pool_config(stub.base_url, max_retries=2)))
    assert result.ok and result.attempts == 2 and stub.modes_served == ["conflict", "ok"]
    stub.fail_next("400")  # a client error without the header is still not retried
    assert asyncio.run(one_call(pool_config(stub.base_url, max_retries=2))).attempts == 1


def test_a_retry_after_within_the_pools_longest_wait_is_still_waited_for(stub: StubWorker) -> None:
    stub.retry_after_s = 0.3
    stub.fail_next("429", "429")
    result = asyncio.run(one_call(pool_config(stub.base_url, max_retries=2, retry_backoff_s=0.0)))
    assert result.ok and result.attempts == 3
    assert all(later - earlier >= 0.3 for earlier, later in pairwise(stub.arrivals))


def test_a_retry_after_of_the_pools_longest_wait_is_waited_for() -> None:
    """60 s is the longest wait the pool (like the openai SDK) takes: a Retry-After of
    exactly that is waited for, not passed on to the caller at once."""
    worker = pool_config("http://x", timeout_s=60.0).workers[0]
    deadline = time.perf_counter() + call_budget_s(worker)
    wait = retry_wait(worker, 1, "rate_limit", RETRYABLE_KINDS, RuntimeError(), 60.0, deadline)
    assert wait is not None and wait >= MAX_RETRY_AFTER_S == 60.0


def test_a_local_workers_params_that_llama_cpp_does_not_know_stop_the_pool_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """llama-cpp-python's server ignores keys it does not know: `repetition_penalty` (its
    name is repeat_penalty) had no effect on any call, without a word."""
    started: list[object] = []

    async def start(workers: list) -> dict:
        started.append(workers)
        return {}

    monkeypatch.setattr(workers_module, "start_local_servers", start)
    worker = {"id": "w", "model": "m", "local": {"gguf": "embedded:smollm2"}}
    params = {"temperature": 0.0, "max_completion_tokens": 8, "repetition_penalty": 1.2}
    config = PoolConfig.model_validate({"workers": [{**worker, "params": params}]})

    async def enter(config: PoolConfig) -> None:
        async with WorkerPool(config):
            pass

    with pytest.raises(
        PoolStartError, match=r"'repetition_penalty' \(did you mean 'repeat_penalty'"
    ) as caught:
        asyncio.run(enter(config))
    assert "worker w" in str(caught.value) and "temperature" not in str(caught.value).split(";")[0]
    with pytest.raises(PoolStartError, match="'repetition_penalty'"):
        preflight(config)  # serve's check before it listens
    assert started == []
    del params["repetition_penalty"]  # the rest it takes (the output limit as max_tokens)
    check_local_params(
        PoolConfig.model_validate({"workers": [{**worker, "params": params}]}).workers[0]
    )


def test_a_local_workers_chat_format_that_llama_cpp_does_not_have_stops_the_pool_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A typo in local.chat_format started a server that answered every call with a 500
    ("Invalid chat handler"): `serve` listened, and each request routed there failed."""
    started: list[object] = []

    async def start(workers: list) -> dict:
        started.append(workers)
        return {}

    monkeypatch.setattr(workers_module, "start_local_servers", start)

    def pool_with(chat_format: str) -> PoolConfig:
        local = {"gguf": "embedded:smollm2", "chat_format": chat_format}
        return PoolConfig.model_validate({"workers": [{"id": "w", "model": "m", "local": local}]})

    async def enter(config: PoolConfig) -> None:
        async with WorkerPool(config):
            pass

    typo = pool_with("chatml-function-caling")
    for check in (lambda: preflight(typo), lambda: asyncio.run(enter(typo))):
        with pytest.raises(PoolStartError, match=r"worker w: local\.chat_format") as caught:
            check()
        assert "did you mean 'chatml-function-calling'?" in str(caught.value)
    # A template the GGUF does not have (SmolLM2's has no tool_use one): a 500 on every call.
    absent = pool_with("chat_template.tool_use")
    for check in (lambda: preflight(absent), lambda: asyncio.run(enter(absent))):
        with pytest.raises(PoolStartError, match="names a chat template that embedded:smollm2"):
            check()
    assert started == []
    # The registered formats, those the server's loader builds (a multimodal one), the GGUF's.
    for known in ("chatml", "llava-1-5", "chat_template.default"):
        check_chat_format(pool_with(known).workers[0])


def test_a_strict_strings_length_beside_its_pattern_or_format_keeps_it_from_local_workers() -> None:
    """llama-cpp-python's grammar converter writes a string's pattern, else its date or uuid
    format, else its length, never two of them: a strict schema's code of pattern ^[A-Z]+$
    and maxLength 3 reached a local worker, whose grammar let it answer any length."""

    def gaps(field: dict, strict: bool = True) -> list[str]:
        schema = {"type": "object", "properties": {"a": field}, "required": ["a"]}
        spec = {"name": "x", "schema": schema, "strict": strict}
        return local_worker_gaps({"response_format": {"type": "json_schema", "json_schema": spec}})

    where = "(response_format.json_schema.schema.properties.a."
    code = {"type": "string", "pattern": "^[A-Z]+$", "maxLength": 3}
    day = {"type": ["string", "null"], "format": "date", "minLength": 10}
    dated = {"type": "string", "pattern": "^[0-9-]+$", "format": "date"}
    for field, keyword, problem in [
        (code, "maxLength", "`maxLength` beside a `pattern`"),
        (day, "minLength", "`minLength` beside a `format`"),
        (dated, "format", '`format: "date"` beside a `pattern`'),
    ]:
        [gap] = gaps(field)
        assert problem in gap and f"{where}{keyword};" in gap, gap
        assert gaps(field, strict=False) == []
    for alone in ({"type": "string", "maxLength": 3}, {"type": "string", "pattern": "^[a-z]+$"},
                  {"type": "string", "pattern": "^[a-z]+$", "minLength": 0}):  # fmt: skip
        assert gaps(alone) == []


@pytest.mark.parametrize(
    "usage",
    [
        {"prompt_tokens": -4, "completion_tokens": 8},  # a negative count
        {"prompt_tokens": 7, "completion_tokens": "n/a"},  # no number
        {"prompt_tokens": 7},  # no completion tokens
        {"prompt_tokens": 7, "completion_tokens": None},
        {"prompt_tokens": 7.5, "completion_tokens": 8},  # not a whole number
        {"prompt_tokens": 7, "completion_tokens": -8.0},  # a negative whole number
        {"prompt_tokens": 7, "completion_tokens": True},  # JSON's true, no count
        {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},  # counts none
    ],
)
def test_an_answer_with_unreadable_usage_is_kept_with_its_cost_unknown(
    stub: StubWorker, usage: dict[str, Any]
) -> None:
    """A worker's token counts that are negative, missing or no whole numbers were read as a
    negative cost or 0 tokens, or failed the answer it gave (retried, paid again)."""
    stub.usage = usage
    config = pool_config(stub.base_url, input_price_per_mtok=1.0, output_price_per_mtok=2.0)
    result = asyncio.run(one_call(config))
    assert result.ok, result.error
    assert result.output == "stub answer to: what is two plus two"
    assert result.usage is None and result.cost is None
    assert len(stub.bodies) == 1


@pytest.mark.parametrize(
    ("usage", "tokens"),
    [
        ({"prompt_tokens": 7, "completion_tokens": 0}, (7, 0)),  # an empty answer: prompt paid
        ({"prompt_tokens": 7.0, "completion_tokens": "8"}, (7, 8)),  # whole numbers, as sent
        ({"prompt_tokens": " 7", "completion_tokens": "8\n"}, (7, 8)),  # digits, spaced
    ],
)
def test_an_answer_with_readable_usage_has_its_cost(
    stub: StubWorker, usage: dict[str, Any], tokens: tuple[int, int]
) -> None:
    stub.usage = usage
    config = pool_config(stub.base_url, input_price_per_mtok=1.0, output_price_per_mtok=2.0)
    result = asyncio.run(one_call(config))
    assert result.ok and result.usage is not None, result.error
    assert (result.usage.prompt_tokens, result.usage.completion_tokens) == tokens
    assert result.cost == pytest.approx((tokens[0] * 1.0 + tokens[1] * 2.0) / 1e6)


def test_usage_given_as_whole_numbers_in_another_form_is_read(stub: StubWorker) -> None:
    stub.usage = {"prompt_tokens": 7.0, "completion_tokens": "8", "total_tokens": 15}
    config = pool_config(stub.base_url, input_price_per_mtok=1.0, output_price_per_mtok=2.0)
    result = asyncio.run(one_call(config))
    assert result.usage is not None
    assert (result.usage.prompt_tokens, result.usage.completion_tokens) == (7, 8)
    assert result.cost == pytest.approx((7 * 1.0 + 8 * 2.0) / 1e6)


def test_a_retry_after_beyond_the_calls_budget_fails_at_once_with_the_wait(
    stub: StubWorker,
) -> None:
    """A call's retries and waits take at most timeout_s x (max_retries + 1) + 5 s: serve cuts
    a call there. A Retry-After beyond it (within the 60 s the pool would wait) was slept
    through until serve's deadline fired and called the worker timed out, its wait lost; the
    call now fails at once as rate limited, with the wait."""
    stub.retry_after_s = 10.0
    config = pool_config(stub.base_url, timeout_s=1.0, max_retries=2, retry_backoff_s=0.0)
    assert call_budget_s(config.workers[0]) < 10.0
    stub.fail_next("429")
    start = time.perf_counter()
    result = asyncio.run(one_call(config))
    assert time.perf_counter() - start < 3.0
    assert result.error_kind == "rate_limit" and result.attempts == 1
    assert result.retry_after_s == 10.0

    stub.fail_next("429")
    start = time.perf_counter()
    with pytest.raises(WorkerCallError) as raised:
        collect_stream(config)
    assert time.perf_counter() - start < 3.0
    assert raised.value.kind == "rate_limit" and raised.value.retry_after_s == 10.0


def test_the_last_attempt_ends_at_the_calls_budget(
    stub: StubWorker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The attempt after a wait had its whole timeout_s, past the call's budget (where serve
    had cut it, taking the worker for timed out without knowing how many attempts it had).
    Timed by the call's latency_s, from where its budget starts: the pool's start and close
    are no part of it (a loaded machine's 0.3 s there failed a bound on the whole run). The
    first attempt's 429 may take up to 1.5 s (a loaded machine) before the retry is left
    less than MIN_ATTEMPT_S and not made."""
    monkeypatch.setattr("fugu_lite.workers.retries.BACKOFF_MARGIN_S", 0.0)  # budget 6 s
    stub.retry_after_s = 3.5  # the last attempt has 2.5 s left; its whole timeout_s ends >= 6.5 s
    stub.mode = "hang"
    stub.fail_next("429")
    config = pool_config(stub.base_url, timeout_s=3.0, max_retries=1, retry_backoff_s=0.0)
    result = asyncio.run(one_call(config))
    assert result.error_kind == "timeout" and result.attempts == 2
    assert 5.95 <= result.latency_s < 6.35


def test_a_retry_that_would_leave_its_attempt_a_sliver_of_the_budget_is_not_made(
    stub: StubWorker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wait that ended just before the call's budget was taken, and the attempt after it
    given what was left (0.3 s here, or a few ms): too short for any answer, it timed out,
    so the call failed as a timeout, not as the 429 it had (serve took the worker for timed
    out, where a Retry-After past the budget has it skipped as rate limited), the worker
    was asked once more for nothing, and a local worker's server, healthy, was killed and
    started again (a timed-out answer is stopped so). The call now fails with the error
    before that wait."""
    monkeypatch.setattr("fugu_lite.workers.retries.BACKOFF_MARGIN_S", 0.0)  # budget 3 s
    stub.retry_after_s = 2.7
    stub.mode = "hang"
    stub.fail_next("429")
    config = pool_config(stub.base_url, timeout_s=1.5, max_retries=1, retry_backoff_s=0.0)
    result = asyncio.run(one_call(config))
    assert result.error_kind == "rate_limit" and result.attempts == 1
    assert result.retry_after_s == 2.7 and len(stub.arrivals) == 1
    assert result.latency_s < 1.0


def test_a_retry_is_made_when_its_attempt_has_a_second_or_its_whole_timeout() -> None:
    """A retry's attempt must have at least MIN_ATTEMPT_S of the call's budget after its
    wait, or the worker's whole timeout_s when that is shorter; the wait is the Retry-After
    here (no backoff). The deadline is far from now plus what is left, so the test's own
    time does not count."""
    error = RuntimeError()

    def wait_left(timeout_s: float, retry_after: float, left_s: float) -> float | None:
        worker = pool_config("http://x", timeout_s=timeout_s, retry_backoff_s=0.0).workers[0]
        deadline = time.perf_counter() + retry_after + left_s
        return retry_wait(worker, 1, "rate_limit", RETRYABLE_KINDS, error, retry_after, deadline)

    assert MIN_ATTEMPT_S == 1.0
    assert wait_left(30.0, 5.0, left_s=1.2) == 5.0
    assert wait_left(30.0, 5.0, left_s=0.8) is None
    assert wait_left(0.4, 5.0, left_s=0.6) == 5.0  # its whole timeout_s
    assert wait_left(0.4, 5.0, left_s=0.2) is None


# -- the pool's life: entered once, closed, entered again ----------------------------------


def test_entering_a_started_pool_again_is_refused_and_leaves_it_serving(stub: StubWorker) -> None:
    """`async with pool` inside `async with pool` started the pool a second time (a second
    set of local llama.cpp servers over the first, whose processes were left running), and
    the inner block's end closed the pool under the outer one, whose next call failed with
    'the pool is not started'; the second entry is now refused and the pool goes on."""

    async def scenario() -> CallResult:
        pool = WorkerPool(pool_config(stub.base_url))
        async with pool:
            with pytest.raises(RuntimeError, match=r"already started.*enter it once"):
                async with pool:
                    pass
            return await pool.chat("w", USER)

    assert asyncio.run(scenario()).error is None


def stops_abandoned_answers(pool: WorkerPool) -> bool:
    """Whether the pool stops a local worker's llama.cpp server generating an abandoned
    answer (a stand-in process here, as worker "w"'s server)."""
    server = LocalServer(WorkerConfig(id="w", model="m", local={"gguf": "x.gguf"}))
    process = server.process = subprocess.Popen(["sleep", "30"])
    pool.servers["w"] = server
    try:
        pool.stop_abandoned_answer("w")
        process.wait(timeout=5)
        return True
    except subprocess.TimeoutExpired:
        return False
    finally:
        process.kill()
        process.wait()
        pool.servers.clear()  # its restart fails (a remote worker): nothing to stop


def test_a_closed_pool_says_so_and_starts_afresh_when_entered_again(stub: StubWorker) -> None:
    """A call after the pool's `async with` ended said 'the pool is not started'; it now says
    the pool is closed. Closing twice does nothing more, and entering a closed pool again
    starts it afresh: it left the pool marked as closing, so a local worker's abandoned
    answer was never stopped again (every later call to it waited behind that answer)."""

    async def scenario() -> tuple[str, CallResult, bool]:
        pool = WorkerPool(pool_config(stub.base_url))
        async with pool:
            pass
        with pytest.raises(RuntimeError) as closed:
            await pool.chat("w", USER)
        await pool.__aexit__(None, None, None)
        async with pool:
            return str(closed.value), await pool.chat("w", USER), stops_abandoned_answers(pool)

    said, result, stopped = asyncio.run(scenario())
    assert "the pool is closed" in said and "not started" not in said
    assert result.error is None
    assert stopped


def test_a_proxy_that_cannot_be_reached_is_named_not_the_workers_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Calls go through the proxy of HTTP_PROXY / HTTPS_PROXY (httpx reads them), but a
    proxy that refused the connection, or whose host name was not found, was reported as
    the worker's: 'nothing listens on api.example port 443', 'host name api.example not
    found: a typo in base_url', sending the user to check a base_url that was right."""
    from fugu_lite.workers.local_server import free_port

    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy", "http_proxy"):
        monkeypatch.delenv(name, raising=False)
    port = free_port()
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{port}")
    worker = "http://worker.example:8123/v1"
    refused = asyncio.run(one_call(pool_config(worker, max_retries=0)))
    assert refused.error is not None
    assert (
        f"connection refused: nothing listens on the proxy 127.0.0.1 port {port} (HTTP_PROXY), "
        "which calls to worker.example go through; is the proxy running, or should the worker "
        "be reached without it (NO_PROXY)?"
    ) in refused.error
    monkeypatch.setenv("HTTP_PROXY", "http://no-such-proxy.invalid:3128")
    unknown = asyncio.run(one_call(pool_config(worker, max_retries=0)))
    assert unknown.error is not None
    assert (
        "host name no-such-proxy.invalid of the proxy (HTTP_PROXY), which calls to "
        "worker.example go through, not found: a typo in HTTP_PROXY, or no network or DNS?"
    ) in unknown.error


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_a_worker_on_this_machine_is_called_without_the_environments_proxy(
    stub: StubWorker, host: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With HTTP_PROXY set (as behind a company proxy), calls to a worker on this machine (a
    local worker's llama.cpp server on 127.0.0.1, a base_url on localhost) went to the
    proxy, which cannot reach this machine's loopback: every call failed, while the local
    server's health check (made without the proxy) said it was up. They now go straight
    to the worker; a refused one is not blamed on the proxy."""
    from fugu_lite.workers.local_server import free_port

    for name in ("NO_PROXY", "no_proxy", "http_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{free_port()}")
    base_url = stub.base_url.replace("127.0.0.1", host)
    result = asyncio.run(one_call(pool_config(base_url, max_retries=0)))
    assert result.ok, result.error
    port = free_port()
    refused = asyncio.run(one_call(pool_config(f"http://{host}:{port}/v1", max_retries=0)))
    assert refused.error is not None and "proxy" not in refused.error
    assert f"nothing listens on {host} port {port}" in refused.error


def test_a_closed_pool_has_closed_its_workers_connections(
    stub: StubWorker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pool left each worker's client open (its keep-alive connections) once its `async
    with` ended: each pool a process made (an eval, a collect run) held them to its end."""
    made: list[AsyncOpenAI] = []
    real = workers_module.AsyncOpenAI

    def recorded(**options: Any) -> AsyncOpenAI:
        made.append(real(**options))
        return made[-1]

    monkeypatch.setattr(workers_module, "AsyncOpenAI", recorded)
    assert asyncio.run(one_call(pool_config(stub.base_url))).ok
    assert len(made) == 1 and made[0].is_closed()


def test_a_stream_its_caller_leaves_is_closed_at_once() -> None:
    """A caller that stops reading a stream (serve's client gone) closes its connection, so
    the worker stops generating an answer nobody reads (llama.cpp's server notices only its
    connection closing) instead of going on while the pool is open."""
    gone = threading.Event()
    upstream = FastAPI()
    word = sse_chunk([{"index": 0, "delta": {"content": "word "}, "finish_reason": None}])

    @upstream.post("/v1/chat/completions")
    async def chat() -> StreamingResponse:
        async def words() -> AsyncIterator[str]:
            try:
                for _ in range(100):
                    yield word
                    await asyncio.sleep(0.1)
            finally:
                gone.set()

        return StreamingResponse(words(), media_type="text/event-stream")

    async def leave() -> bool:
        async with WorkerPool(pool_config(server.base_url)) as pool:
            async with contextlib.aclosing(pool.stream_chat("w", USER)) as chunks:
                async for _ in chunks:
                    break
            return await asyncio.to_thread(gone.wait, 5)

    with ServerThread(upstream) as server:
        assert asyncio.run(leave())


def test_a_judge_from_the_pool_asks_at_temperature_0_and_raises_for_a_failed_call(
    stub: StubWorker,
) -> None:
    async def ask() -> str:
        async with WorkerPool(pool_config(stub.base_url, max_retries=0)) as pool:
            return await judge_from_pool(pool, "w")(USER)

    assert asyncio.run(ask()) == "stub answer to: what is two plus two"
    assert stub.bodies[-1]["temperature"] == 0.0
    stub.mode = "500"
    with pytest.raises(WorkerCallError, match="worker w: server: HTTP 500"):
        asyncio.run(ask())


def test_a_down_workers_thousandth_retry_waits_without_overflowing() -> None:
    """A worker with retry_backoff_s 0 and max_retries 2000, down (connection refused), made
    its call raise OverflowError on its 1025th attempt (2 ** 1024 is past a float) instead
    of trying again or failing with the worker's error."""
    worker = pool_config("http://x", retry_backoff_s=0, max_retries=2000).workers[0]
    deadline = time.perf_counter() + call_budget_s(worker)
    error = RuntimeError()
    assert retry_wait(worker, 1100, "connection", RETRYABLE_KINDS, error, None, deadline) == 0
    slower = pool_config("http://x", retry_backoff_s=0.5, max_retries=2000).workers[0]
    assert retry_wait(slower, 1100, "connection", RETRYABLE_KINDS, error, None, deadline) is None
