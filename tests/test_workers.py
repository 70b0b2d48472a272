"""The worker pool against real HTTP servers: the in-process OpenAI-compatible stub (unit)
and real llama.cpp servers on the shipped GGUF (integration)."""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import re
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from email.utils import formatdate
from itertools import pairwise
from pathlib import Path
from typing import Any

import openai
import psutil
import pytest
from conftest import finished_pid, writer_temporary

from fugu_lite.config import ConfigError
from fugu_lite.local_server import LocalServer, LocalServerError
from fugu_lite.pool import (
    PoolConfig,
    WorkerConfig,
    embedded_pool_config,
    load_pool_config,
    resolve_gguf,
)
from fugu_lite.testing.stub_worker import StubWorker
from fugu_lite.workers import (
    CallResult,
    PoolStartError,
    WorkerCallError,
    WorkerPool,
    classify_error,
    llama_cpp_request_model,
    refused_for_max_tokens,
    refuses_as_too_long,
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


def test_missing_usage_gives_no_cost_rather_than_zero(stub: StubWorker) -> None:
    original = stub._respond

    async def without_usage(mode: str, body: dict, auth: str | None):
        response = await original(mode, body, auth)
        import json

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


def test_gives_up_after_max_retries(stub: StubWorker) -> None:
    stub.mode = "500"
    result = asyncio.run(one_call(pool_config(stub.base_url, max_retries=3)))
    assert not result.ok and result.error_kind == "server"
    assert result.attempts == 4 and len(stub.bodies) == 4
    assert result.output is None and result.cost is None


def test_backoff_is_exponential_with_jitter(stub: StubWorker) -> None:
    stub.mode = "503"
    base = 0.08
    asyncio.run(one_call(pool_config(stub.base_url, max_retries=3, retry_backoff_s=base)))
    gaps = [later - earlier for earlier, later in pairwise(stub.arrivals)]
    assert len(gaps) == 3
    for index, gap in enumerate(gaps):
        nominal = base * 2**index
        assert 0.5 * nominal <= gap <= 1.5 * nominal + 0.15, (index, gap)
    assert gaps[2] > gaps[0]


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
    from fugu_lite.local_server import free_port

    config = pool_config(f"http://127.0.0.1:{free_port()}/v1", max_retries=1)
    result = asyncio.run(one_call(config))
    assert result.error_kind == "connection" and result.attempts == 2
    assert "could not reach" in (result.error or "")


# -- concurrency ----------------------------------------------------------------------------


def test_concurrency_limit_per_worker(stub: StubWorker) -> None:
    stub.latency_s = 0.15
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


# -- streaming ------------------------------------------------------------------------------


def collect_stream(config: PoolConfig, **params: Any) -> list[dict]:
    async def run() -> list[dict]:
        async with WorkerPool(config) as pool:
            return [chunk async for chunk in pool.stream_chat("w", USER, **params)]

    return asyncio.run(run())


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
    received: list[dict] = []

    async def run() -> None:
        async with WorkerPool(pool_config(stub.base_url, max_retries=1)) as pool:
            async for chunk in pool.stream_chat("w", USER):
                received.append(chunk)

    with pytest.raises(WorkerCallError) as caught:
        asyncio.run(run())
    assert caught.value.kind == kind and received == []
    assert caught.value.status_code == int(mode)
    assert len(stub.bodies) == requests


def test_unknown_worker_and_unstarted_pool_are_clear_errors(stub: StubWorker) -> None:
    pool = WorkerPool(pool_config(stub.base_url))
    with pytest.raises(RuntimeError, match="async with"):
        asyncio.run(pool.chat("w", USER))
    with pytest.raises(KeyError, match="the pool has w"):
        asyncio.run(pool.chat("nope", USER))


# -- pool config ----------------------------------------------------------------------------


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "pool.yaml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def test_pool_yaml_loads_and_resolves_relative_gguf(tmp_path: Path) -> None:
    (tmp_path / "models").mkdir()
    path = write(
        tmp_path,
        """
        workers:
          - id: remote
            model: gpt-4o-mini
            base_url: https://api.example.com/v1
            api_key_env: EXAMPLE_KEY
            input_price_per_mtok: 0.15
            output_price_per_mtok: 0.6
            params: {temperature: 0}
          - id: mine
            model: tiny
            local: {gguf: models/tiny.gguf}
        opt_out: [remote]
        """,
    )
    config = load_pool_config(path)
    assert config.worker_ids == ["remote", "mine"]
    assert config.worker("mine").local.gguf == str(tmp_path / "models" / "tiny.gguf")
    assert config.opt_out == ["remote"]


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("- {id: a, model: m}", "needs a base_url"),
        ("- {id: a, model: m, base_url: 'http://x', local: {gguf: a.gguf}}", "remove base_url"),
        ("- {id: a, model: m, base_url: 'http://x', api_key: abc}",
         r"api_key_env to the variable's NAME; known keys here: id, model,"),
        ("- {id: a, model: m, base_url: 'http://x', max_concurency: 2}",
         r"did you mean 'max_concurrency'\? known keys here: id,"),
        ("- {id: a, model: m, base_url: 'http://x', zzz: 2}",
         r"unknown key 'workers\.0\.zzz': known keys here: id,"),
        ("- {id: a, model: m, base_url: 'http://x', params: {model: x}}", "may not set model"),
        ("- {id: a, model: m, base_url: 'http://x'}\n  - {id: a, model: n, base_url: 'http://y'}",
         "repeated: a"),
        ("- {id: a, model: m, base_url: 'http://x', max_concurrency: 0}", "max_concurrency"),
    ],
)  # fmt: skip
def test_bad_pool_configs_say_what_to_fix(tmp_path: Path, body: str, expected: str) -> None:
    path = write(tmp_path, f"workers:\n  {body}\n")
    with pytest.raises(ConfigError, match=expected) as caught:
        load_pool_config(path)
    assert str(path) in str(caught.value)


def test_a_key_pasted_into_api_key_env_is_rejected_without_echoing_it(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        f"workers:\n  - {{id: a, model: m, base_url: 'http://x', api_key_env: '{SECRET}'}}\n",
    )
    with pytest.raises(ConfigError, match="NAME of the environment variable") as caught:
        load_pool_config(path)
    assert SECRET not in str(caught.value)


def test_missing_pool_file_and_bad_yaml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="embedded local pool"):
        load_pool_config(tmp_path / "absent.yaml")
    with pytest.raises(ConfigError, match=r"\.yaml, line 2, column 1: not valid YAML: ") as error:
        load_pool_config(write(tmp_path, "workers: [\n"))
    assert "<unicode string>" not in str(error.value)


def test_a_pool_key_given_twice_is_refused(tmp_path: Path) -> None:
    """A second `workers:` list (workers added at the end of the file) replaced the first
    one's workers with no word."""
    worker = "  - {{id: {}, model: m, base_url: 'http://x'}}\n"
    text = "workers:\n" + worker.format("a") + "workers:\n" + worker.format("b")
    with pytest.raises(ConfigError, match=r"'workers' is given twice .*line 1, again on line 3"):
        load_pool_config(write(tmp_path, text))


def test_a_pool_file_that_is_not_utf8_names_the_line(tmp_path: Path) -> None:
    """A pool.yaml saved as Latin-1 failed with a bare UnicodeDecodeError, no file named."""
    path = tmp_path / "pool.yaml"
    path.write_bytes(b"workers:\n  - {id: caf\xe9, model: m, base_url: 'http://x'}\n")
    with pytest.raises(ConfigError, match=r"pool\.yaml, line 2: not UTF-8 text"):
        load_pool_config(path)


def test_embedded_pool_is_local_variants_of_the_shipped_gguf() -> None:
    config = embedded_pool_config()
    assert len(config.workers) >= 2
    assert all(worker.local is not None for worker in config.workers)
    assert resolve_gguf("embedded:smollm2").stat().st_size > 10_000_000
    settings = {
        (worker.system_prompt, tuple(sorted(worker.params.items()))) for worker in config.workers
    }
    assert len(settings) == len(config.workers)  # every variant differs
    prices = {(w.input_price_per_mtok, w.output_price_per_mtok) for w in config.workers}
    assert len(prices) == len(config.workers)
    assert load_pool_config(None) == config


def test_unknown_embedded_model_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="embedded:smollm2"):
        resolve_gguf("embedded:llama-70b")


# -- real llama.cpp servers -----------------------------------------------------------------


def two_local_workers() -> PoolConfig:
    config = embedded_pool_config()
    workers = [
        w.model_copy(update={"params": {**w.params, "max_tokens": 8}}) for w in config.workers
    ]
    return PoolConfig(workers=workers[:2])


def alive(pids: list[int]) -> list[int]:
    running = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                running.append(pid)
        except psutil.NoSuchProcess:
            pass
    return running


@pytest.mark.integration
def test_local_llama_cpp_workers_answer_and_are_stopped() -> None:
    config = two_local_workers()

    async def run() -> tuple[list[CallResult], list[int], list[dict]]:
        async with WorkerPool(config) as pool:
            pids = [server.pid for server in pool.servers.values()]
            assert len(set(pids)) == 2 and all(pool.is_alive(w) for w in pool.worker_ids)
            results = await asyncio.gather(
                *(pool.chat(w, [{"role": "user", "content": "What is 2 + 3?"}])
                  for w in pool.worker_ids)
            )  # fmt: skip
            chunks = [
                chunk
                async for chunk in pool.stream_chat(
                    pool.worker_ids[0], [{"role": "user", "content": "Say hi."}]
                )
            ]
            return results, pids, chunks

    results, pids, chunks = asyncio.run(run())
    for result, worker in zip(results, config.workers, strict=True):
        assert result.ok, result.error
        assert result.output and result.usage and 0 < result.usage.completion_tokens <= 8
        expected = (
            result.usage.prompt_tokens * worker.input_price_per_mtok
            + result.usage.completion_tokens * worker.output_price_per_mtok
        ) / 1e6
        assert result.cost == pytest.approx(expected)
    # The variants' system prompts reach the model: greedy decoding, different answers.
    assert results[0].output != results[1].output
    assert any(choice["delta"].get("content") for c in chunks for choice in c["choices"])
    deadline = time.monotonic() + 10
    while alive(pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert alive(pids) == []


@pytest.mark.integration
def test_servers_stop_when_the_body_raises() -> None:
    config = two_local_workers()
    pids: list[int] = []

    async def run() -> None:
        async with WorkerPool(config) as pool:
            pids.extend(server.pid for server in pool.servers.values())
            raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        asyncio.run(run())
    assert len(pids) == 2 and alive(pids) == []


@pytest.mark.integration
def test_a_server_that_cannot_load_its_model_fails_with_its_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The log the error names is there to read (it was deleted as the error was raised),
    until the next server start after this run."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"this is not a gguf file" * 100)
    config = PoolConfig.model_validate(
        {"workers": [{"id": "broken", "model": "m", "local": {"gguf": str(bad)}}]}
    )
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(LocalServerError, match="exited with code") as caught:
        asyncio.run(one_call(config))
    assert "broken" in str(caught.value) and "last lines of its log" in str(caught.value)
    after = {p.pid for p in psutil.Process().children(recursive=True)}
    assert alive(list(after - before)) == []
    named = re.search(r"last lines of its log \((.+)\):\n", str(caught.value))
    assert named is not None
    log = Path(named[1])
    assert log.parent == tmp_path / f"fugu-lite-{os.getuid()}"
    assert log.read_text(encoding="utf-8").strip().splitlines()[-1] in str(caught.value)


@pytest.mark.integration
def test_servers_die_with_a_killed_parent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """kill -9 of the process that started the servers leaves no orphan behind, and the next
    server start removes the log it left in the system temp folder (it stayed in /tmp)."""
    script = tmp_path / "parent.py"
    script.write_text(
        textwrap.dedent(
            """
            import asyncio, sys
            from fugu_lite.pool import PoolConfig, embedded_pool_config
            from fugu_lite.workers import WorkerPool

            async def main():
                config = PoolConfig(workers=embedded_pool_config().workers[:1])
                async with WorkerPool(config) as pool:
                    print(*(s.pid for s in pool.servers.values()), flush=True)
                    await asyncio.sleep(600)

            asyncio.run(main())
            """
        )
    )
    parent = subprocess.Popen(
        [sys.executable, str(script)],
        stdout=subprocess.PIPE,
        text=True,
        env=os.environ | {"TMPDIR": str(tmp_path)},
    )
    try:
        line = parent.stdout.readline() if parent.stdout else ""
        pids = [int(pid) for pid in line.split()]
        assert pids and alive(pids) == pids
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(timeout=10)
        deadline = time.monotonic() + 15
        while alive(pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert alive(pids) == []
    finally:
        if parent.poll() is None:
            parent.kill()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    server = launched(embedded_pool_config().workers[0])
    server.stop()
    folder = tmp_path / f"fugu-lite-{os.getuid()}"
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted([folder.name, script.name])
    assert list(folder.iterdir()) == []


def launched(worker: WorkerConfig) -> LocalServer:
    """A local server started (not waited for: its log is made at the start)."""
    server = LocalServer(worker)
    try:
        server.launch()
    except BaseException:
        server.stop()
        raise
    return server


@pytest.mark.integration
def test_a_server_start_removes_killed_runs_logs_not_live_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    folder = tmp_path / f"fugu-lite-{os.getuid()}"
    folder.mkdir(mode=0o700)
    live_writer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    dead = folder / f"{writer_temporary('llama-w', finished_pid())}.log"
    live = folder / f"{writer_temporary('llama-w', live_writer.pid)}.log"
    try:
        for log in (dead, live):
            log.write_text("INFO: started\n")
        two_days_ago = time.time() - 2 * 24 * 3600
        os.utime(live, (two_days_ago, two_days_ago))  # a `serve` running for days: quiet log
        server = launched(embedded_pool_config().workers[0])
        log_path = server.log_path
        assert log_path is not None and log_path.parent == folder and log_path.exists()
        server.stop()
    finally:
        live_writer.kill()
        live_writer.wait()
    assert not dead.exists() and not log_path.exists()
    assert list(folder.iterdir()) == [live]


@pytest.mark.integration
def test_a_restarted_workers_old_log_is_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    config = PoolConfig(workers=embedded_pool_config().workers[:1])
    worker_id = config.workers[0].id

    async def crash_and_restart() -> tuple[Path | None, Path | None]:
        async with WorkerPool(config) as pool:
            old = pool.servers[worker_id]
            assert old.process is not None
            os.kill(old.process.pid, signal.SIGKILL)  # the OOM killer
            old.process.wait(timeout=10)
            assert pool.crashed_servers() == [worker_id]
            await pool.restart(worker_id)
            new = pool.servers[worker_id]
            assert new.log_path is not None and new.log_path.exists()
            return old.log_path, new.log_path

    old_log, new_log = asyncio.run(crash_and_restart())
    assert old_log is not None and new_log is not None and old_log != new_log
    assert list((tmp_path / f"fugu-lite-{os.getuid()}").iterdir()) == []


@pytest.mark.integration
def test_a_failed_restarts_log_is_kept_until_the_worker_starts_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gguf = tmp_path / "model.gguf"
    gguf.symlink_to(resolve_gguf("embedded:smollm2"))
    worker = embedded_pool_config().workers[0]
    local = worker.local.model_copy(update={"gguf": str(gguf)}) if worker.local else None
    config = PoolConfig(workers=[worker.model_copy(update={"local": local})])

    async def fail_then_restart() -> Path:
        async with WorkerPool(config) as pool:
            server = pool.servers[worker.id]
            assert server.process is not None
            server.process.kill()
            server.process.wait(timeout=10)
            gguf.unlink()
            gguf.write_bytes(b"not a gguf file" * 100)  # the disk file got corrupted, say
            with pytest.raises(LocalServerError, match="exited with code") as caught:
                await pool.restart(worker.id)
            named = re.search(r"last lines of its log \((.+)\):\n", str(caught.value))
            assert named is not None and Path(named[1]).exists()  # there to read
            gguf.unlink()
            gguf.symlink_to(resolve_gguf("embedded:smollm2"))
            await pool.restart(worker.id)
            assert not Path(named[1]).exists()
            return Path(named[1])

    failed_log = asyncio.run(fail_then_restart())
    assert list(failed_log.parent.iterdir()) == []


def test_a_rate_limited_call_says_how_long_the_worker_asked_to_wait(stub: StubWorker) -> None:
    """The worker's Retry-After was used for the pool's own backoff only (and cut at 60 s):
    the caller (fugu-lite serve's 429) could not pass it on to its client."""
    stub.retry_after_s = 90.0
    stub.mode = "429"
    result = asyncio.run(one_call(pool_config(stub.base_url, max_retries=0)))
    assert result.error_kind == "rate_limit" and result.retry_after_s == 90.0


def sdk_rate_limit(headers: dict[str, str]) -> openai.RateLimitError:
    """A 429 as the openai SDK raises it (in its own HTTP library's types)."""
    from fugu_lite.workers import SDKResponse

    http = importlib.import_module(SDKResponse.__module__.split(".")[0])
    request = http.Request("POST", "http://127.0.0.1/v1/chat/completions")
    response = SDKResponse(429, headers=headers, request=request)
    return openai.RateLimitError("rate limited", response=response, body=None)


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"retry-after": "12"}, 12.0),
        ({"retry-after-ms": "1500", "retry-after": "9"}, 1.5),
        ({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, 0.0),  # a date in the past
        ({"retry-after": "soon"}, None),
        ({}, None),
    ],
)
def test_retry_after_is_read_as_the_openai_sdk_reads_it(
    headers: dict[str, str], seconds: float | None
) -> None:
    assert classify_error(sdk_rate_limit(headers))[2] == seconds


def test_retry_after_as_an_http_date_is_the_seconds_until_then() -> None:
    later = formatdate(time.time() + 30, usegmt=True)
    waited = classify_error(sdk_rate_limit({"retry-after": later}))[2]
    assert waited is not None and 27 <= waited <= 30
