"""fugu-lite under real uvicorn on 127.0.0.1 in front of two real llama.cpp workers (the
shipped SmolLM2-135M GGUF, started by the pool), driven by the official openai SDK: sync,
async and streaming; opt-out and allow-list; a hung worker tripping the circuit breaker
and coming back; a disconnecting stream; auth and bad input; a killed worker."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest
from conftest import generated_records

from fugu_lite.config import ModelConfig, SFTConfig, SFTTrainingConfig
from fugu_lite.router_family import load_family_or_single
from fugu_lite.schemas import ChatMessage, RewardRecord
from fugu_lite.server.app import ServeSettings, create_app
from fugu_lite.server.routing import RouteRequest, RouterService
from fugu_lite.server.thread import ServerThread
from fugu_lite.train_sft import train_sft
from fugu_lite.workers.config import PoolConfig

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

MODEL = "fugu-lite"
KEY = "sk-fugu-integration-key-42"
WORKERS = ["smol-a", "smol-b"]
CODE = "write a python function that 4242 item 7"
MATH = "compute the sum of the numbers 4242 item 7"
COOLDOWN_S = 4.0
# The workers' timeout_s: a real answer of a few dozen tokens took up to 3.1 s under load
# (17, and two busy loops), where 3 s timed out both workers. SHORT_TIMEOUT_S is for the
# tests whose abandoned answer (440 tokens) must outlast timeout_s (live_short).
TIMEOUT_S = 10.0
SHORT_TIMEOUT_S = 3.0
SYSTEM_PROMPT = "You are a helpful assistant. Answer in one short sentence."


def two_worker_records() -> list[RewardRecord]:
    """The generated records with two workers: smol-a is best at code, smol-b at math."""
    records = []
    for record in generated_records():
        rewards = [record.reward_of("coder"), record.reward_of("mathematician")]
        records.append(record.model_copy(update={"worker_ids": WORKERS, "rewards": rewards,
                                                 "costs": None}))  # fmt: skip
    return records


def local_pool(n_ctx: dict[str, int] | None = None, timeout_s: float = TIMEOUT_S) -> PoolConfig:
    """smol-a and smol-b, each with a 512-token context unless `n_ctx` says otherwise."""
    worker = {
        "model": "smollm2", "max_concurrency": 1, "timeout_s": timeout_s,
        "system_prompt": SYSTEM_PROMPT,
        "max_retries": 0, "params": {"temperature": 0.0, "max_tokens": 12},
        "input_price_per_mtok": 0.1, "output_price_per_mtok": 0.2,
    }  # fmt: skip
    workers = [
        {"id": w, "local": {"gguf": "embedded:smollm2", "n_threads": 1,
                            "n_ctx": (n_ctx or {}).get(w, 512)}, **worker}
        for w in WORKERS
    ]  # fmt: skip
    return PoolConfig.model_validate({"workers": workers})


@dataclass
class Live:
    thread: ServerThread
    app: object
    log_path: Path

    @property
    def state(self):
        return self.app.state.fugu  # type: ignore[attr-defined]

    def client(self, api_key: str = KEY) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.thread.base_url, api_key=api_key, max_retries=0)

    def async_client(self) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=self.thread.base_url, api_key=KEY, max_retries=0)

    def health(self) -> dict:
        return httpx.get(f"{self.thread.url}/health").json()

    def log_lines(self) -> list[dict]:
        self.state.log.flush()
        return [json.loads(line) for line in self.log_path.read_text().splitlines()]

    def stream_line(self) -> dict:
        """The log line of the stream just read to its end. The relay writes it once the
        stream has ended, which may be after its client read `data: [DONE]`: the last line
        read at once could be the request's before it (the same fields, but `stream`)."""
        deadline = time.monotonic() + 5
        while self.state.in_flight and time.monotonic() < deadline:
            time.sleep(0.02)
        line = self.log_lines()[-1]
        assert line["stream"], f"the stream's log line was not written: {line}"
        return line

    def worker_calls(self) -> float:
        """Upstream calls made so far, to any worker, whatever their outcome."""
        (family,) = self.state.metrics.worker_calls.collect()
        return sum(sample.value for sample in family.samples if sample.name.endswith("_total"))

    def llama_pid(self, worker: str) -> int:
        pid = self.state.pool.servers[worker].pid
        assert pid is not None
        return pid


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("router")
    model = ModelConfig(backbone="tiny-random", layer=-1, head="linear", max_tokens=32,
                        cache_dir=str(root / "cache"))  # fmt: skip
    training = SFTTrainingConfig(epochs=8, batch_size=16, learning_rate=0.05)
    return Path(train_sft(two_worker_records(), SFTConfig(model=model, training=training),
                          root / "router")["checkpoint"])  # fmt: skip


def serving(root: Path, checkpoint: Path, timeout_s: float) -> Iterator[Live]:
    settings = ServeSettings(
        checkpoint=checkpoint, api_keys=[KEY], log_requests=root / "decisions.jsonl",
        breaker_failures=2, breaker_cooldown_s=COOLDOWN_S,
    )  # fmt: skip
    app = create_app(settings, pool_config=local_pool(timeout_s=timeout_s))
    with ServerThread(app, startup_timeout_s=240) as thread:
        yield Live(thread, app, root / "decisions.jsonl")


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory, checkpoint: Path) -> Iterator[Live]:
    yield from serving(tmp_path_factory.mktemp("live"), checkpoint, TIMEOUT_S)


@pytest.fixture(scope="module")
def live_short(tmp_path_factory: pytest.TempPathFactory, checkpoint: Path) -> Iterator[Live]:
    """The workers with a timeout_s that an answer of 440 tokens outlasts."""
    yield from serving(tmp_path_factory.mktemp("live_short"), checkpoint, SHORT_TIMEOUT_S)


def ask(client: openai.OpenAI, prompt: str, **kwargs):
    return client.chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": prompt}], **kwargs
    )


def test_sync_sdk_gets_a_routed_answer_from_a_real_worker(live: Live) -> None:
    for prompt, expected in ((CODE, "smol-a"), (MATH, "smol-b")):
        raw = ask(live.client(), prompt, extra_body={"include_routing": True})
        completion = raw.parse()
        assert raw.headers["x-fugu-worker"] == expected
        assert completion.model == MODEL
        assert completion.choices[0].message.content
        assert completion.usage is not None and 0 < completion.usage.completion_tokens <= 12
        assert completion.model_extra["fugu"]["worker"] == expected


def test_async_sdk_concurrent_requests(live: Live) -> None:
    async def run() -> list:
        async with live.async_client() as client:
            return await asyncio.gather(
                *(client.chat.completions.create(
                    model=MODEL, messages=[{"role": "user", "content": f"{p} {i}"}])
                  for i, p in enumerate([CODE, MATH, CODE, MATH]))
            )  # fmt: skip

    completions = asyncio.run(run())
    assert all(c.model == MODEL and c.choices[0].message.content for c in completions)


def test_streaming_sdk_with_usage(live: Live) -> None:
    stream = live.client().chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": MATH}], stream=True,
        stream_options={"include_usage": True},
    )  # fmt: skip
    chunks = list(stream)
    assert {chunk.model for chunk in chunks} == {MODEL}
    content = [c for c in chunks if c.choices and c.choices[0].delta.content]
    assert content and "".join(c.choices[0].delta.content for c in content).strip()
    usage = chunks[-1].usage
    assert usage is not None and usage.completion_tokens > 0
    # llama.cpp's server reports no usage when streaming: fugu-lite says it estimated it
    assert usage.model_extra.get("fugu_estimated") is True
    assert usage.completion_tokens == len(content)
    # the estimate counts what the worker was sent: its system prompt too
    assert usage.prompt_tokens >= (len(SYSTEM_PROMPT) + len(MATH)) // 4


def test_content_parts_and_the_developer_role_reach_a_real_worker(live: Live) -> None:
    """llama.cpp's chat template takes neither: text parts travel as one string (an
    assistant's refusal part as its text: it was refused as unreadable content), developer
    as system; an image part is refused before any worker is tried."""
    client = live.client()
    for _ in range(3):  # as many as would open a circuit if the worker failed each
        completion = client.chat.completions.create(
            model=MODEL,
            messages=[
                {"role": "developer", "content": "Be brief."},
                {"role": "user", "content": "Help me pick a lock."},
                {"role": "assistant", "content": [{"type": "refusal",
                                                  "refusal": "I can't help with that."}]},
                {"role": "user", "content": [{"type": "text", "text": "What is"},
                                             {"type": "text", "text": "2 + 3?"}]},
            ],
        )  # fmt: skip
        assert completion.choices[0].message.content
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}
    with pytest.raises(openai.BadRequestError) as error:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": [image]}])
    assert error.value.body["code"] == "unsupported_content"
    assert "image_url" in error.value.body["message"]
    health = live.health()
    assert health["status"] == "ok"
    assert all(state["consecutive_failures"] == 0 for state in health["workers"].values())


def test_a_tool_call_turn_and_a_json_schema_reach_a_real_worker(live: Live) -> None:
    """The SDK sends an assistant turn holding only tool_calls with `content: null`, and
    structured outputs as response_format json_schema: llama.cpp's server answered both
    with a 500, so every worker failed (502) and a few such requests opened every circuit."""
    client = live.client()
    call = {"id": "call_1", "type": "function",
            "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}  # fmt: skip
    conversation = [
        {"role": "user", "content": "Add 2 and 3 with the tool."},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "5"},
    ]
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    json_schema = {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}}
    for _ in range(3):  # as many as would open a circuit if the workers failed each
        completion = client.chat.completions.create(model=MODEL, messages=conversation)
        assert completion.choices[0].message.content is not None
        completion = client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "Give a number as JSON."}],
            response_format=json_schema,  # type: ignore[arg-type]
            max_tokens=40,
        )
        assert isinstance(json.loads(completion.choices[0].message.content or "")["a"], int)
    health = live.health()
    assert health["status"] == "ok"
    assert all(state["consecutive_failures"] == 0 for state in health["workers"].values())


def test_an_assistant_turns_calls_reach_a_real_workers_prompt(live: Live) -> None:
    """SmolLM2's chat template renders a message's role and content only: an assistant
    turn's tool_calls (or deprecated function_call) were dropped from the prompt, so the
    model saw an empty turn, then the tool's result, not knowing what it had called. They
    are written into that turn's text (the prompt grows by them)."""
    client = live.client()
    call = {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "celsius"}'}
    question = {"role": "user", "content": "What is the weather in Paris?"}
    turns = {
        "none": [{"role": "assistant", "content": None},
                 {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}],
        "tool_calls": [{"role": "assistant", "content": None, "tool_calls": [
                           {"id": "call_1", "type": "function", "function": call}]},
                       {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}],
        "function_call": [{"role": "assistant", "content": None, "function_call": call},
                          {"role": "function", "name": "get_weather", "content": "sunny"}],
    }  # fmt: skip
    prompt_tokens = {}
    for kind, conversation in turns.items():
        completion = client.chat.completions.create(
            model=MODEL, messages=[question, *conversation], max_tokens=1,
            extra_body={"workers": ["smol-a"]},
        )  # fmt: skip
        assert completion.usage is not None
        prompt_tokens[kind] = completion.usage.prompt_tokens
    # '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}'
    assert prompt_tokens["tool_calls"] >= prompt_tokens["none"] + 15, prompt_tokens
    assert prompt_tokens["function_call"] >= prompt_tokens["none"] + 15, prompt_tokens


def test_a_streamed_tool_call_is_named_once_as_openai_streams_it(live: Live) -> None:
    """llama.cpp's server repeats a streamed tool call's id, type and name in every delta;
    OpenAI sends them in the first only, and the openai SDK's stream helper joins what the
    deltas hold: the tool was called "addaddadd..." (so was a deprecated function_call)."""
    client = live.client()
    parameters = {"type": "object", "properties": {"a": {"type": "integer"}}}
    tool = {"type": "function", "function": {"name": "add", "parameters": parameters}}
    with client.chat.completions.stream(
        model=MODEL, messages=[{"role": "user", "content": "Add 2 and 3."}], max_tokens=20,
        tools=[tool], tool_choice={"type": "function", "function": {"name": "add"}},  # type: ignore[list-item]
    ) as stream:  # fmt: skip
        calls = stream.get_final_completion().choices[0].message.tool_calls
    assert calls and calls[0].function.name == "add"  # type: ignore[union-attr]
    assert calls[0].id.count("call") == 1
    with client.chat.completions.stream(
        model=MODEL, messages=[{"role": "user", "content": "Add 2 and 3."}], max_tokens=20,
        extra_body={"functions": [tool["function"]], "function_call": {"name": "add"}},
    ) as stream:  # fmt: skip
        message = stream.get_final_completion().choices[0].message
    assert message.function_call is not None and message.function_call.name == "add"


def test_a_function_call_without_functions_leaves_tool_choice_alone(live: Live) -> None:
    """A deprecated `function_call` ("auto" or "none") beside `tools` (clients that send both
    styles) governs no function, but llama.cpp's server put it in place of tool_choice: a
    tool named in tool_choice (or "required" with one tool) was answered in text."""
    client = live.client()
    parameters = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    tool = {"type": "function", "function": {"name": "add", "parameters": parameters}}
    named = {"type": "function", "function": {"name": "add"}}
    for choice, call in [(named, "none"), (named, "auto"), ("required", "none")]:
        completion = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Add 2 and 3."}], max_tokens=20,
            tools=[tool], tool_choice=choice, extra_body={"function_call": call},  # type: ignore[arg-type, list-item]
        )  # fmt: skip
        calls = completion.choices[0].message.tool_calls
        assert calls and calls[0].function.name == "add", (choice, call)  # type: ignore[union-attr]
        assert isinstance(json.loads(calls[0].function.arguments)["a"], int)  # type: ignore[union-attr]


def test_a_call_comes_in_the_style_it_was_asked_in(live: Live) -> None:
    """llama.cpp's server answers a function call with both `tool_calls` and `function_call`
    and finish_reason "tool_calls": a client of the deprecated functions waiting for
    finish_reason "function_call" missed the call, and one checking `function_call` first
    took a tool call for a legacy one. OpenAI answers each style in its own form."""
    client = live.client()
    parameters = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    function = {"name": "add", "parameters": parameters}
    legacy = {"functions": [function], "function_call": {"name": "add"}}
    tools = {"tools": [{"type": "function", "function": function}],
             "tool_choice": {"type": "function", "function": {"name": "add"}}}  # fmt: skip
    for style in (legacy, tools):
        completion = client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "Add 2 and 3."}],
            max_tokens=20,
            **style,  # type: ignore[arg-type]
        )
        [choice] = completion.choices
        stream = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Add 2 and 3."}], max_tokens=20,
            stream=True, **style,  # type: ignore[arg-type]
        )  # fmt: skip
        chunks = [chunk.choices[0] for chunk in stream if chunk.choices]
        deltas = [chunk.delta for chunk in chunks]
        if style is legacy:
            assert choice.finish_reason == "function_call" and choice.message.tool_calls is None
            assert choice.message.function_call and choice.message.function_call.name == "add"
            assert chunks[-1].finish_reason == "function_call"
            assert not any(delta.tool_calls for delta in deltas)
            assert any(delta.function_call for delta in deltas)
        else:
            assert choice.finish_reason == "tool_calls" and choice.message.function_call is None
            assert choice.message.tool_calls
            assert not any(delta.function_call for delta in deltas)
            assert any(delta.tool_calls for delta in deltas)


def test_a_legacy_function_call_turn_reaches_a_real_worker(live: Live) -> None:
    """OpenAI's deprecated function calling: an assistant `function_call` (content null),
    then a `function` message with the result; fugu-lite refused the role."""
    client = live.client()
    conversation = [
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": None,
         "function_call": {"name": "weather", "arguments": '{"city": "Paris"}'}},
        {"role": "function", "name": "weather", "content": "sunny"},
    ]  # fmt: skip
    for _ in range(2):  # as many as would open a circuit if the workers failed each
        completion = client.chat.completions.create(model=MODEL, messages=conversation)
        assert completion.choices[0].message.content
        stream = client.chat.completions.create(model=MODEL, messages=conversation, stream=True)
        assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    health = live.health()
    assert health["status"] == "ok"
    assert all(state["consecutive_failures"] == 0 for state in health["workers"].values())


def test_a_malformed_legacy_function_call_turn_is_the_clients_400(live: Live) -> None:
    """An assistant `function_call` without its arguments (or not an object) was sent to a
    local worker, whose refusal named the wrong message (messages.2: counting the worker's
    system prompt) beside the fields of every other role ("tool_call_id: Field required")."""
    client = live.client()
    for call in [{"name": "weather"}, "weather", {"name": "weather", "arguments": {"a": 1}}]:
        conversation = [
            {"role": "user", "content": "What is the weather in Paris?"},
            {"role": "assistant", "content": None, "function_call": call},
            {"role": "function", "name": "weather", "content": "sunny"},
        ]
        with pytest.raises(openai.BadRequestError) as error:
            client.chat.completions.create(model=MODEL, messages=conversation)  # type: ignore[arg-type]
        message = error.value.message
        assert "messages[1].function_call must be an object with a string name and arguments" in (
            message
        )
        assert "tool_call_id" not in message and "worker" not in message


def test_openai_parameters_a_real_worker_ignored_or_failed_on(live: Live) -> None:
    """llama.cpp's server returned no logprobs for `logprobs: true` alone, answered in text
    despite tool_choice "required", and answered a function tool without `parameters` or a
    non-integer logit_bias key with a 500, which counted against the workers' circuits."""
    client = live.client()
    tool = {"type": "function", "function": {"name": "add"}}  # parameters are optional
    for _ in range(2):  # as many as would open a circuit if the workers failed each
        # (few tokens: llama-cpp-python computes logprobs slowly, within timeout_s)
        completion = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": MATH}], logprobs=True,
            max_tokens=3,
        )  # fmt: skip
        logprobs = completion.choices[0].logprobs
        assert logprobs is not None and logprobs.content
        stream = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": MATH}], logprobs=True,
            max_tokens=3, stream=True,
        )  # fmt: skip
        assert any(c.choices and c.choices[0].logprobs for c in stream)
        completion = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Add 2 and 3."}],
            tools=[tool], tool_choice="required", max_tokens=30,  # type: ignore[list-item]
        )  # fmt: skip
        calls = completion.choices[0].message.tool_calls
        assert calls and calls[0].function.name == "add"  # type: ignore[union-attr]
        with pytest.raises(openai.BadRequestError, match="logit_bias keys are token ids"):
            ask(client, MATH, logit_bias={"hello": 5})
    other = {"type": "function", "function": {"name": "mul"}}
    refused = [
        {"tools": [tool, other], "tool_choice": "required"},
        {"modalities": ["text", "audio"], "audio": {"voice": "alloy", "format": "wav"}},
        {"tools": [{"type": "custom", "custom": {"name": "grep"}}]},
        # llama.cpp replaces the tools with the functions: "Tool choice 'add' not found", a 500
        {
            "tools": [tool],
            "tool_choice": {"type": "function", "function": {"name": "add"}},
            "extra_body": {"functions": [{"name": "mul"}]},
        },
    ]
    for params in refused:  # local workers would answer in text or fail: only remote ones
        with pytest.raises(openai.BadRequestError) as error:
            ask(client, MATH, **params)
        assert error.value.body["code"] == "unsupported_parameter"
    health = live.health()
    assert health["status"] == "ok"
    assert all(state["consecutive_failures"] == 0 for state in health["workers"].values())


def test_top_logprobs_hold_as_many_tokens_as_asked(live: Live) -> None:
    """llama.cpp adds the chosen token to a token's top_logprobs when it is not among the
    N most likely: `top_logprobs: 0` (and `logprobs: true` alone) gave one alternative
    each, OpenAI none, and N gave N + 1 where the model chose an unlikely token."""
    client = live.client()
    question = [{"role": "user", "content": "Name a colour."}]
    for top, sampling in ((None, {}), (0, {}), (2, {"temperature": 2.0, "seed": 3})):
        asked = {} if top is None else {"top_logprobs": top}
        completion = client.chat.completions.create(
            model=MODEL, messages=question, logprobs=True, max_tokens=4, **asked, **sampling
        )  # type: ignore[call-overload]
        tokens = completion.choices[0].logprobs.content  # type: ignore[union-attr]
        assert tokens and all(len(t.top_logprobs) == (top or 0) for t in tokens), tokens
        for t in tokens:  # the most likely first, as OpenAI lists them
            assert [e.logprob for e in t.top_logprobs] == sorted(
                (e.logprob for e in t.top_logprobs), reverse=True
            )
        stream = client.chat.completions.create(
            model=MODEL,
            messages=question,
            logprobs=True,
            max_tokens=4,
            stream=True,
            **asked,
            **sampling,
        )  # type: ignore[call-overload]
        streamed = [t for c in stream if c.choices and c.choices[0].logprobs
                    for t in c.choices[0].logprobs.content or []]  # fmt: skip
        assert streamed and all(len(t.top_logprobs) == (top or 0) for t in streamed)


def test_null_optional_fields_of_a_function_are_absent_as_openai_reads_them(live: Live) -> None:
    """OpenAI reads `"description": null` (and `"parameters": null`) in a function
    definition as no description (no parameters); llama.cpp's server refuses the null, so a
    local worker's answer was a 400 (and `"parameters": null` was refused by fugu-lite)."""
    client = live.client()
    add = {"name": "add", "description": None, "parameters": None, "strict": None}
    tool = {"type": "function", "function": add}
    for stream in (False, True):
        for params in [
            {"tools": [tool]},
            {"tools": [tool], "tool_choice": {"type": "function", "function": {"name": "add"}}},
            {"extra_body": {"functions": [add], "function_call": {"name": "add"}}},
        ]:
            raw = ask(client, "Add 2 and 3.", max_tokens=30, stream=stream, **params)
            assert raw.headers["x-fugu-worker"] in WORKERS
    health = live.health()
    assert all(state["consecutive_failures"] == 0 for state in health["workers"].values())


def test_a_logit_bias_key_beyond_the_vocabulary_is_refused(live: Live) -> None:
    """llama.cpp's server ignored a logit_bias holding a token id beyond its model's
    vocabulary (SmolLM2's 49152 tokens), and with it every other bias of the request, where
    OpenAI answers 400."""
    client = live.client()
    for stream in (False, True):
        for bias in ({"49152": 5}, {"198": -100, "99999999": 1}):
            with pytest.raises(openai.BadRequestError) as error:
                ask(client, MATH, logit_bias=bias, stream=stream)
            message = error.value.body["message"]
            assert max(bias, key=int) in message and "49152 tokens" in message
    # The last token id of the vocabulary is one: a bias on it is honoured.
    for stream in (False, True):
        assert ask(client, MATH, logit_bias={"49151": 1}, stream=stream).headers["x-fugu-worker"]
    health = live.health()
    assert all(state["consecutive_failures"] == 0 for state in health["workers"].values())


def test_an_empty_message_is_routed_and_answered(live: Live) -> None:
    """`"content": ""` (OpenAI answers it) rendered to no tokens at all on a backbone that
    adds none of its own: the router's forward pass failed, a 500 internal error."""
    client = live.client()
    for stream in (False, True):
        raw = ask(client, "", stream=stream)
        assert raw.headers["x-fugu-worker"] in WORKERS


def test_an_empty_stop_string_is_ignored_as_openai_does(live: Live) -> None:
    """llama.cpp stops at an empty stop string before the first token: `stop: [""]` or
    `stop: ""` (which OpenAI ignores) gave an empty answer."""
    client = live.client()
    for stop in ("", [""], ["", "zzzz"]):
        completion = ask(client, MATH, stop=stop).parse()
        assert completion.choices[0].message.content
        stream = ask(client, MATH, stop=stop, stream=True).parse()
        assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)


def test_a_request_key_named_like_a_pool_argument_reaches_the_worker(live: Live) -> None:
    """A top-level key `worker_id` or `self` (forwarded like any other key a client adds)
    collided with the pool's own arguments: a 500 internal error, streamed or not."""
    client = live.client()
    for extra in ({"worker_id": "mine"}, {"self": 1}):
        raw = ask(client, MATH, max_tokens=4, extra_body=extra)
        assert raw.parse().choices[0].message.content is not None
        stream = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": MATH}], max_tokens=4,
            stream=True, extra_body=extra,
        )  # fmt: skip
        assert [chunk for chunk in stream if chunk.choices]


def test_a_request_llama_cpp_refuses_is_a_400_that_charges_no_circuit(live: Live) -> None:
    """llama-cpp-python's server answers a request failing its own validation (its own
    parameters of the wrong type, the deprecated `functions` without a name or without
    `parameters`) with a 500: a 502 to the client, and two such requests opened every
    circuit."""
    client = live.client()
    refused = [
        ({"top_k": "many"}, "top_k"),
        # (a function without a name is refused before routing, for every worker)
        ({"functions": [{"parameters": {"type": "object"}}]}, r"functions\[0\] needs a string"),
        ({"functions": [{"name": "add"}], "function_call": "always"}, "function_call"),
        # llama.cpp: "Tool choice 'mul' not found in tools", a 500
        ({"functions": [{"name": "add"}], "function_call": {"name": "mul"}}, "function_call"),
    ]
    for _ in range(2):  # as many as would open a circuit if the workers failed each
        for extra, field in refused:
            for stream in (False, True):
                with pytest.raises(openai.BadRequestError, match=field):
                    ask(client, MATH, extra_body=extra, stream=stream)
        completion = ask(
            client, "Add 2 and 3.", max_tokens=30,
            extra_body={"functions": [{"name": "add"}], "function_call": {"name": "add"}},
        ).parse()  # fmt: skip
        assert completion.choices[0].message.function_call is not None
    health = live.health()
    assert health["status"] == "ok"
    assert all(state["consecutive_failures"] == 0 for state in health["workers"].values())


def test_a_schema_or_grammar_that_crashed_llama_cpp_never_reaches_a_worker(live: Live) -> None:
    """llama.cpp turns an empty enum/anyOf/type into an empty grammar rule, and its server
    process died on it (and on an invalid `grammar`): one request, falling back from worker
    to worker, killed every local worker."""
    client, calls = live.client(), live.worker_calls()
    nothing = {"type": "object", "properties": {"a": {"enum": []}}}
    tool = {"type": "function", "function": {"name": "add", "parameters": nothing}}
    requests = [
        {"response_format": {"type": "json_schema",
                             "json_schema": {"name": "x", "schema": {"type": []}}}},
        {"tools": [tool], "tool_choice": {"type": "function", "function": {"name": "add"}}},
        {"functions": [tool["function"]], "function_call": {"name": "add"}},  # deprecated
    ]  # fmt: skip
    for params in requests:
        for stream in (False, True):
            with pytest.raises(openai.BadRequestError, match="no value could match"):
                client.chat.completions.create(
                    model=MODEL, messages=[{"role": "user", "content": MATH}], stream=stream,
                    **params,
                )  # fmt: skip
    with pytest.raises(openai.BadRequestError) as error:
        ask(client, MATH, extra_body={"grammar": "root ::= nope"})
    assert error.value.body["code"] == "unsupported_parameter"
    assert "grammar" in error.value.body["message"]
    # A double quote in a property name or an enum/const string: a valid schema that
    # llama-cpp-python's grammar converter breaks, crashing its server; remote workers only.
    sizes = {"type": "object", "properties": {"size": {"enum": ['6" pipe', '8" pipe']}}}
    quoted = {"type": "function", "function": {"name": "pick", "parameters": sizes}}
    for params in [
        {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": sizes}}},
        {"tools": [quoted], "tool_choice": {"type": "function", "function": {"name": "pick"}}},
        {"response_format": {"type": "json_object"},
         "extra_body": {"response_format": {"type": "json_object", "schema": {
             "type": "object", "properties": {'say "hi"': {"type": "string"}}}}}},
    ]:  # fmt: skip
        with pytest.raises(openai.BadRequestError) as error:
            ask(client, MATH, **params)
        assert error.value.body["code"] == "unsupported_parameter"
        assert "double quote" in error.value.body["message"]
    assert live.worker_calls() == calls  # refused before any worker: none could crash
    assert all(live.state.pool.is_alive(worker) for worker in WORKERS)
    assert live.health()["status"] == "ok"
    assert ask(client, MATH).parse().choices[0].message.content


def test_a_schema_name_or_value_llama_cpp_mangles_never_reaches_a_worker(live: Live) -> None:
    """llama-cpp-python's grammar converter writes a name's or value's JSON form into the
    grammar with its backslashes unescaped: a newline or tab in a property name or enum
    came out raw (the answer was not valid JSON), a backslash or an emoji gave another
    value, and a backspace made the grammar fail to parse, killing the server process."""
    client, calls = live.client(), live.worker_calls()

    def answer(schema: dict) -> dict:
        spec = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
        return {"response_format": spec, "max_tokens": 30}

    one_of = {"type": "object", "properties": {"v": {"enum": ["C:\\temp", "D:\\temp"]}},
              "required": ["v"]}  # fmt: skip
    cases = [
        (answer({"type": "object", "properties": {"a\nb": {"type": "string"}}}),
         '.properties["a\\nb"]', "a control character (\\n)"),
        (answer({"type": "object", "properties": {"v": {"enum": ["a\tb", "c"]}}}),
         ".properties.v.enum", "a control character (\\t)"),
        (answer(one_of), ".properties.v.enum", "a backslash (\\)"),
        (answer({"type": "object", "properties": {"v": {"const": "smile \U0001f600"}}}),
         ".properties.v.const", "a character beyond U+FFFF"),
        ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {
            "type": "object", "properties": {"a\bb": {"type": "string"}}}}}],
          "tool_choice": {"type": "function", "function": {"name": "f"}}},
         'tools[0].function.parameters.properties["a\\bb"]', "a control character (\\b)"),
    ]  # fmt: skip
    for params, where, character in cases:
        for stream in (False, True):
            with pytest.raises(openai.BadRequestError) as error:
                ask(client, MATH, stream=stream, **params)
            assert error.value.body["code"] == "unsupported_parameter"
            assert where in error.value.body["message"]
            assert character in error.value.body["message"]
    assert live.worker_calls() == calls  # refused before any worker: none could crash
    # What the converter renders well still reaches a worker: non-ASCII below U+10000.
    fine = answer({"type": "object", "properties": {"v": {"enum": ["caf\u00e9", "th\u00e9"]}},
                   "required": ["v"]})  # fmt: skip
    completion = ask(client, "Pick one.", **fine).parse()
    assert json.loads(completion.choices[0].message.content or "")["v"] in ("caf\u00e9", "th\u00e9")
    assert all(live.state.pool.is_alive(worker) for worker in WORKERS)
    assert live.health()["status"] == "ok"


def test_a_schema_pattern_llama_cpp_cannot_convert_never_reaches_a_worker(live: Live) -> None:
    """llama-cpp-python's grammar converter copies a `pattern` into the grammar as it is:
    `\\d` made the grammar fail to parse, and one request (falling back from worker to
    worker) killed every local worker; it dropped the whole schema for a pattern not
    anchored with ^ and $ (the answer was free JSON); a double quote gave invalid JSON."""
    client, calls = live.client(), live.worker_calls()

    def answer(pattern: str) -> dict:
        schema = {"type": "object", "required": ["a"],
                  "properties": {"a": {"type": "string", "pattern": pattern}}}  # fmt: skip
        spec = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
        return {"response_format": spec, "max_tokens": 20}

    for pattern, problem in [
        ("^\\d{3}$", "backslash escape"),
        ("[a-z]+", "not anchored"),
        ('^"x$', "double quote"),
    ]:
        for stream in (False, True):
            with pytest.raises(openai.BadRequestError) as error:
                ask(client, MATH, stream=stream, **answer(pattern))
            assert error.value.body["code"] == "unsupported_parameter"
            message = error.value.body["message"]
            assert "response_format.json_schema.schema.properties.a.pattern" in message
            assert problem in message
    assert live.worker_calls() == calls  # refused before any worker: none could crash
    # A pattern the converter takes still reaches a worker, which follows it.
    completion = ask(client, "Give a word.", **answer("^[a-z]+$")).parse()
    assert re.fullmatch("[a-z]+", json.loads(completion.choices[0].message.content or "")["a"])
    assert all(live.state.pool.is_alive(worker) for worker in WORKERS)
    assert live.health()["status"] == "ok"


def test_a_schema_llama_cpp_drops_or_misreads_never_reaches_a_worker(live: Live) -> None:
    """llama-cpp-python's grammar converter fails on a `$ref` other than "#/..." or a `not`,
    and its server then answered free JSON, ignoring the schema ('{"123456": 123456.00}' for
    an object of a `name`); an empty property name made that property's value the whole
    answer (the string '"1024"' where an object was asked)."""
    client = live.client()

    def answer(properties: dict) -> dict:
        schema = {"type": "object", "properties": properties, "required": list(properties)}
        spec = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
        return {"response_format": spec, "max_tokens": 20}

    for properties, problem in [
        ({"name": {"type": "string"}, "child": {"$ref": "#"}}, "Unsupported ref #"),
        ({"a": {"not": {"type": "string"}}}, "cannot read"),
        ({"": {"type": "string"}, "a": {"type": "integer"}}, 'properties[""]'),
    ]:
        for stream in (False, True):
            with pytest.raises(openai.BadRequestError) as error:
                ask(client, MATH, stream=stream, **answer(properties))
            assert error.value.body["code"] == "unsupported_parameter"
            assert problem in error.value.body["message"]
    # A `$ref` to "#/$defs/..." converts, so it still reaches a worker, which follows it.
    params = answer({"p": {"$ref": "#/$defs/P"}})
    params["response_format"]["json_schema"]["schema"]["$defs"] = {
        "P": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}
    }
    completion = ask(client, "Give a point.", **params).parse()
    assert isinstance(json.loads(completion.choices[0].message.content or "")["p"]["x"], int)


def test_a_schema_field_of_any_value_is_followed_by_a_real_worker(live: Live) -> None:
    """A property holding annotations only (pydantic's `Any` field: {"title": "Notes"}) or
    `true` means any value; llama-cpp-python's grammar converter failed on it and its
    server ignored the whole schema (free JSON, the required keys missing)."""
    client = live.client()
    for notes in [{"title": "Notes"}, {"description": "anything"}, True]:
        schema = {"type": "object", "required": ["a", "notes"],
                  "properties": {"a": {"type": "integer"}, "notes": notes}}  # fmt: skip
        spec = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
        completion = ask(client, "Give a number and notes.", response_format=spec,
                         max_tokens=40).parse()  # fmt: skip
        answer = json.loads(completion.choices[0].message.content or "")
        assert isinstance(answer["a"], int) and "notes" in answer, answer
        tool = {"type": "function", "function": {"name": "note", "parameters": schema}}
        choice = {"type": "function", "function": {"name": "note"}}
        completion = ask(client, "Give a number and notes.", tools=[tool], max_tokens=40,
                         tool_choice=choice).parse()  # fmt: skip
        [call] = completion.choices[0].message.tool_calls or []
        arguments = json.loads(call.function.arguments)  # type: ignore[union-attr]
        assert isinstance(arguments["a"], int) and "notes" in arguments, arguments


def test_a_schema_constraint_llama_cpp_leaves_out_never_reaches_a_worker(live: Live) -> None:
    """llama-cpp-python's grammar converter leaves numbers' bounds, most string formats and
    `required` names missing from `properties` out of the grammar: a real worker answered
    {"n": 1} for a minimum of 1000, "123-456-7890" for an email, and left out a required
    key. A strict schema promises them (as OpenAI's does); a schema without `strict` is a
    guide, as at OpenAI, and a local worker answers it."""
    client = live.client()

    def answer(properties: dict, required: list[str], strict: bool = True) -> dict:
        schema = {"type": "object", "properties": properties, "required": required}
        spec = {"type": "json_schema",
                "json_schema": {"name": "x", "schema": schema, "strict": strict}}  # fmt: skip
        return {"response_format": spec, "max_tokens": 20}

    for properties, required, problem in [
        ({"n": {"type": "integer", "minimum": 1000, "maximum": 2000}}, ["n"], ".n.minimum"),
        ({"p": {"type": "number", "exclusiveMinimum": 0}}, ["p"], ".p.exclusiveMinimum"),
        ({"e": {"type": "string", "format": "email"}}, ["e"], '`format: "email"`'),
        ({"a": {"type": "integer"}}, ["a", "b"], "`required` 'b'"),
    ]:
        for stream in (False, True):
            with pytest.raises(openai.BadRequestError) as error:
                ask(client, MATH, stream=stream, **answer(properties, required))
            assert error.value.body["code"] == "unsupported_parameter"
            assert problem in error.value.body["message"]
    bounded = {"n": {"type": "integer", "minimum": 1000}}
    completion = ask(client, MATH, **answer(bounded, ["n"], strict=False)).parse()
    assert isinstance(json.loads(completion.choices[0].message.content or "")["n"], int)
    # A format the converter writes into the grammar still reaches a worker, which keeps it.
    dated = answer({"d": {"type": "string", "format": "date"}}, ["d"])
    completion = ask(client, "When?", **dated).parse()
    date = json.loads(completion.choices[0].message.content or "")["d"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\d", date)


def test_a_small_integer_range_is_kept_by_a_real_worker(live: Live) -> None:
    """llama.cpp's grammar converter leaves an integer's bounds out of the grammar, so a
    strict schema with a rating of 1 to 5 was refused with a 400 when only local workers
    could answer; the range goes to the worker as the enum of its values, which the grammar
    keeps, strict or not, streamed or not (a larger range under strict is still refused).
    A nullable one (type ["integer", "null"], OpenAI's strict form of an optional field) was
    still refused under strict: it gets the enum with null."""
    client = live.client()
    rating = {"type": "integer", "minimum": 1, "maximum": 5}
    tens = {"type": "integer", "exclusiveMinimum": 0, "maximum": 90, "multipleOf": 30}
    maybe = {"type": ["integer", "null"], "minimum": 1, "maximum": 3}
    schema = {"type": "object", "properties": {"rating": rating, "tens": tens, "maybe": maybe},
              "required": ["rating", "tens", "maybe"], "additionalProperties": False}  # fmt: skip
    prompt = 'Answer with the JSON {"rating": 42, "tens": 7, "maybe": 9}.'
    for strict in (True, False):
        spec = {"type": "json_schema",
                "json_schema": {"name": "r", "schema": schema, "strict": strict}}  # fmt: skip
        text = ask(client, prompt, response_format=spec, max_tokens=32).parse()
        answer = json.loads(text.choices[0].message.content or "")
        assert answer["rating"] in range(1, 6) and answer["tens"] in (30, 60, 90), answer
        assert answer["maybe"] in (1, 2, 3, None), answer
        streamed = "".join(
            chunk.choices[0].delta.content or ""
            for chunk in client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": prompt}],
                response_format=spec, max_tokens=32, stream=True,
            )
            if chunk.choices
        )  # fmt: skip
        assert json.loads(streamed)["rating"] in range(1, 6)
    wide = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0,
            "maximum": 1000}}, "required": ["n"]}  # fmt: skip
    spec = {"type": "json_schema", "json_schema": {"name": "n", "schema": wide, "strict": True}}
    with pytest.raises(openai.BadRequestError) as error:
        ask(client, MATH, response_format=spec, max_tokens=12)
    assert error.value.body["code"] == "unsupported_parameter"
    assert ".n.minimum" in error.value.body["message"]


def test_an_enum_beside_a_list_of_types_is_kept_by_a_real_worker(live: Live) -> None:
    """OpenAI's strict form of an optional choice, `"type": ["string", "null"], "enum":
    ["red", "blue", null]`: llama-cpp-python's grammar converter reads the list of types
    before the enum and left the enum out, so a local worker answered any string ("green"),
    strict or not. The enum (or const) now goes without the list of types."""
    client = live.client()
    color = {"type": ["string", "null"], "enum": ["red", "blue", None]}
    shade = {"type": ["string", "null"], "const": "dark"}
    schema = {"type": "object", "properties": {"color": color, "shade": shade},
              "required": ["color", "shade"], "additionalProperties": False}  # fmt: skip
    prompt = 'Answer with the JSON {"color": "green", "shade": "light"}.'
    for strict in (True, False):
        spec = {"type": "json_schema",
                "json_schema": {"name": "c", "schema": schema, "strict": strict}}  # fmt: skip
        text = ask(client, prompt, response_format=spec, max_tokens=24).parse()
        answer = json.loads(text.choices[0].message.content or "")
        assert answer["color"] in ("red", "blue", None) and answer["shade"] == "dark", answer


def test_a_list_of_types_keeps_its_other_keywords_with_a_real_worker(live: Live) -> None:
    """OpenAI's strict form of an optional object, array or string is a list of types
    beside their keywords (`"type": ["object", "null"], "properties": ...`): llama-cpp-
    python's grammar converter made a bare type of each, so a local worker answered any
    object (without the required key), an array of strings for one of integers, and a
    string breaking its pattern or date format. Each type now goes as an alternative with
    those keywords, strict or not."""
    client = live.client()
    point = {"type": ["object", "null"], "properties": {"x": {"type": "integer"}},
             "required": ["x"], "additionalProperties": False}  # fmt: skip
    numbers = {"type": ["array", "null"], "items": {"type": "integer"}, "maxItems": 3}
    word = {"type": ["string", "null"], "pattern": "^[a-z]+$"}
    day = {"type": ["string", "null"], "format": "date"}
    cases = [
        (point, '{"v": {"y": "up"}}', lambda v: v is None or set(v) == {"x"}),
        (numbers, '{"v": ["one", "two"]}', lambda v: v is None or {type(n) for n in v} <= {int}),
        (word, '{"v": "Hello World 42"}', lambda v: v is None or re.fullmatch("[a-z]+", v)),
        (day, '{"v": "next Monday"}', lambda v: v is None or re.fullmatch(r"\d{4}-\d\d-\d\d", v)),
    ]  # fmt: skip
    for field, example, keeps in cases:
        schema = {"type": "object", "properties": {"v": field}, "required": ["v"],
                  "additionalProperties": False}  # fmt: skip
        for strict in (True, False):
            spec = {"type": "json_schema",
                    "json_schema": {"name": "t", "schema": schema, "strict": strict}}  # fmt: skip
            text = ask(client, f"Answer with the JSON {example}.", response_format=spec,
                       max_tokens=24).parse()  # fmt: skip
            answer = json.loads(text.choices[0].message.content or "")
            assert keeps(answer["v"]), (field, answer)


def test_a_schema_with_a_long_optional_repetition_never_reaches_a_worker(live: Live) -> None:
    """llama-cpp-python nests one grammar group per optional repetition: a maxLength (or
    maxItems, or a pattern's {m,n}) over about a thousand crashed its server, and one
    request (falling back from worker to worker) killed every local worker."""
    client, calls = live.client(), live.worker_calls()

    def answer(field: dict) -> dict:
        schema = {"type": "object", "properties": {"a": field}, "required": ["a"]}
        spec = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
        return {"response_format": spec, "max_tokens": 10}

    for field, where, what in [
        ({"type": "string", "maxLength": 3000}, ".a.maxLength", "0 to 3000 characters"),
        ({"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 10000},
         ".a.maxItems", "2 to 10000 items"),
        ({"type": "string", "pattern": "^[a-z]{1,5000}$"}, ".a.pattern", "{1,5000}"),
    ]:  # fmt: skip
        for stream in (False, True):
            with pytest.raises(openai.BadRequestError) as error:
                ask(client, MATH, stream=stream, **answer(field))
            assert error.value.body["code"] == "unsupported_parameter"
            assert where in error.value.body["message"] and what in error.value.body["message"]
    assert live.worker_calls() == calls  # refused before any worker: none could crash
    # A long but fixed length, or a thousand optional ones, still reach a worker.
    for field in ({"type": "string", "minLength": 5000, "maxLength": 5000},
                  {"type": "string", "maxLength": 1000}):  # fmt: skip
        assert ask(client, MATH, **answer(field)).headers["x-fugu-worker"] in WORKERS
    assert all(live.state.pool.is_alive(worker) for worker in WORKERS)
    assert live.health()["status"] == "ok"


def test_a_prompt_over_the_context_is_the_clients_error_streamed_or_not(live: Live) -> None:
    """llama-cpp-python's server answers a streamed prompt longer than its context with an
    empty 200 stream: it was a 502 that charged every worker's circuit."""
    client = live.client()
    too_long = [{"role": "user", "content": "word " * 1500}]  # the pool's n_ctx is 512
    for stream in (True, False, True):
        with pytest.raises(openai.BadRequestError, match="maximum context length is 512"):
            client.chat.completions.create(model=MODEL, messages=too_long, stream=stream)
    health = live.health()
    assert health["status"] == "ok"
    assert all(state["consecutive_failures"] == 0 for state in health["workers"].values())


def test_a_prompt_over_the_context_while_a_no_larger_worker_is_down_is_still_a_400(
    live: Live,
) -> None:
    """One worker refusing a prompt as too long while the other (the same GGUF, the same
    n_ctx) was down was a 502, which clients retry, although that worker could never take
    it: it is the client's 400 context_length_exceeded."""
    client = live.client()
    too_long = [{"role": "user", "content": "word " * 1500}]  # the pool's n_ctx is 512
    breaker = live.state.breaker
    try:
        for stream in (False, True):
            # opened anew (an open circuit keeps its cool-down's start): the cool-down is short
            breaker.record_success("smol-b")
            for _ in range(breaker.failure_threshold):
                breaker.record_failure("smol-b")
            with pytest.raises(openai.BadRequestError) as error:
                client.chat.completions.create(model=MODEL, messages=too_long, stream=stream)
            body = error.value.body
            assert body["code"] == "context_length_exceeded"
            outcomes = {a["worker"]: a["outcome"] for a in body["tried"]}
            assert outcomes == {"smol-a": "context_length_exceeded", "smol-b": "circuit_open"}
            assert "smol-b (down) has no larger a context" in body["message"]
    finally:
        breaker.record_success("smol-b")


def test_a_prompt_over_one_workers_context_goes_to_a_worker_with_a_larger_one(
    checkpoint: Path, tmp_path: Path
) -> None:
    """The router's first choice has a 512-token context, the other 2048: a ~750-token
    conversation was the client's 400 although the other worker could answer it."""
    prompt = "word " * 700 + CODE
    ranking = ranking_for(checkpoint, prompt)
    short, long = ranking
    settings = ServeSettings(checkpoint=checkpoint, api_keys=[KEY], breaker_failures=2,
                             log_requests=tmp_path / "decisions.jsonl")  # fmt: skip
    pool = local_pool(n_ctx={short: 512, long: 2048}, timeout_s=60.0)
    app = create_app(settings, pool_config=pool)
    with ServerThread(app, startup_timeout_s=240) as thread:
        live = Live(thread, app, tmp_path / "decisions.jsonl")
        client = live.client()
        for _ in range(2):  # as many as would open a circuit if they counted as failures
            raw = ask(client, prompt, extra_body={"include_routing": True})
            assert raw.headers["x-fugu-worker"] == long
            assert raw.headers["x-fugu-attempts"] == f"{short}:context_length_exceeded,{long}:ok"
            assert raw.parse().choices[0].finish_reason in ("stop", "length")
            assert raw.parse().model_extra["fugu"]["worker"] == long
            streamed = ask(client, prompt, stream=True)
            chunks = [chunk for chunk in streamed.parse() if chunk.choices]
            assert chunks[-1].choices[0].finish_reason in ("stop", "length")
            assert streamed.headers["x-fugu-worker"] == long
            assert streamed.headers["x-fugu-attempts"] == (
                f"{short}:context_length_exceeded,{long}:ok"
            )
        line = live.stream_line()
        assert (line["chosen"], line["worker"], line["fallback"]) == (short, long, True)
        # Longer than both: the client's 400, naming each worker's limit.
        for stream in (False, True):
            with pytest.raises(openai.BadRequestError) as error:
                client.chat.completions.create(
                    model=MODEL, messages=[{"role": "user", "content": "word " * 2500}],
                    stream=stream,
                )  # fmt: skip
            body = error.value.body
            assert body["code"] == "context_length_exceeded"
            assert "maximum context length is 512" in body["message"]
            assert "maximum context length is 2048" in body["message"]
            assert [a["outcome"] for a in body["tried"]] == ["context_length_exceeded"] * 2
        health = live.health()
        assert health["status"] == "ok"
        assert all(state["consecutive_failures"] == 0 for state in health["workers"].values())
        # Too long for the short one while the long one is down: the client may retry.
        for _ in range(2):
            live.state.breaker.record_failure(long)
        for stream in (False, True):
            with pytest.raises(openai.APIStatusError) as failed:
                ask(client, prompt, stream=stream)
            assert failed.value.status_code == 503
            assert failed.value.body["code"] == "workers_unavailable"
            assert int(failed.value.response.headers["retry-after"]) >= 1
            assert f"({long}) are cooling down" in failed.value.body["message"]


def ranking_for(checkpoint: Path, prompt: str) -> list[str]:
    service = RouterService(load_family_or_single(checkpoint))
    request = RouteRequest([ChatMessage(role="user", content=prompt)], tuple(WORKERS))
    return list(service.route_batch([request])[0].ranking)


def test_allow_list_and_opt_out_with_real_workers(live: Live) -> None:
    client = live.client()
    assert ask(client, CODE, extra_body={"workers": ["smol-b"]}).headers["x-fugu-worker"] == (
        "smol-b"
    )
    raw = ask(client, CODE, extra_body={"exclude_workers": ["smol-a"]})
    assert raw.headers["x-fugu-worker"] == "smol-b"
    assert json.loads(raw.headers["x-fugu-probabilities"])["smol-a"] == 0
    with pytest.raises(openai.BadRequestError) as error:
        ask(client, CODE, extra_body={"exclude_workers": WORKERS})
    assert error.value.body["code"] == "no_worker_left"


def test_auth_and_bad_input_through_the_sdk(live: Live) -> None:
    with pytest.raises(openai.AuthenticationError):
        ask(live.client(api_key="sk-not-the-key-123"), MATH)
    client = live.client()
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.BadRequestError, match=r"messages\[0\]\.role"):
        client.chat.completions.create(model=MODEL, messages=[{"role": "oracle", "content": "x"}])
    with pytest.raises(openai.BadRequestError, match="max_tokens"):
        ask(client, MATH, max_tokens=10**8)
    with pytest.raises(openai.BadRequestError, match="cost_weight"):
        ask(client, MATH, extra_body={"cost_weight": 1.0})


def test_a_disconnecting_stream_frees_the_worker(live: Live) -> None:
    """A stream whose client leaves frees its worker: its answer is cut, not generated to
    the end while the next request to that worker waits. The abandoned answer runs to its
    max_tokens (a story ended where the model chose), so a worker left generating it keeps
    the next request waiting for 440 tokens, or fails it at timeout_s. That request is
    timed against the same one asked again, the worker idle, not against a fixed 3 s:
    under load (13 to 17 here) it took 1.3 to 2.1 s, routing and all."""
    no_end = {"2": -100}  # SmolLM2's <|im_end|>: the answer runs to max_tokens
    body = {
        "model": MODEL, "messages": [{"role": "user", "content": "Count from 1 to 1000."}],
        "stream": True, "max_tokens": 440, "logit_bias": no_end, "workers": ["smol-a"],
    }  # fmt: skip
    headers = {"authorization": f"Bearer {KEY}"}
    url = f"{live.thread.url}/v1/chat/completions"
    with httpx.stream("POST", url, json=body, headers=headers, timeout=30) as response:
        lines = response.iter_lines()
        first = [next(lines) for _ in range(4)]
        assert live.state.in_flight == 1  # being streamed
    assert any(line.startswith("data: {") for line in first)
    deadline = time.monotonic() + 5
    while live.state.in_flight and time.monotonic() < deadline:
        time.sleep(0.02)
    assert live.state.in_flight == 0
    line = live.log_lines()[-1]
    assert line["outcome"] == "client_disconnected" and line["stream"]
    # The worker's only slot is free again: a new request to it is answered at once.
    answered_s = []
    for _ in range(2):  # after the stream's client left, then with the worker surely idle
        started = time.monotonic()
        raw = ask(live.client(), MATH, max_tokens=5, extra_body={"workers": ["smol-a"]})
        answered_s.append(time.monotonic() - started)
        assert raw.headers["x-fugu-attempts"] == "smol-a:ok"
    assert answered_s[0] < 2 * answered_s[1] + 1.0, answered_s


def test_a_client_leaving_a_long_answer_does_not_hold_up_the_next(live_short: Live) -> None:
    """llama.cpp's server goes on generating a non-streamed answer whose client has gone
    (it serves one request at a time): the next request to that worker waited for the
    abandoned answer (here longer than the worker's 3 s timeout: a 502)."""
    no_end = {"2": -100}  # SmolLM2's <|im_end|>: the answer runs to max_tokens
    body = {
        "model": MODEL, "messages": [{"role": "user", "content": "Count from 1 to 1000."}],
        "max_tokens": 440, "logit_bias": no_end, "workers": ["smol-a"],
    }  # fmt: skip
    headers = {"authorization": f"Bearer {KEY}"}
    with pytest.raises(httpx.ReadTimeout):  # the client gives up: its connection closes
        httpx.post(f"{live_short.thread.url}/v1/chat/completions", json=body, headers=headers,
                   timeout=1.5)  # fmt: skip
    deadline = time.monotonic() + 5
    while live_short.state.in_flight and time.monotonic() < deadline:
        time.sleep(0.02)
    line = live_short.log_lines()[-1]
    assert line["outcome"] == "client_disconnected" and not line["stream"]
    raw = ask(
        live_short.client(), MATH, max_tokens=5, extra_body={"workers": ["smol-a"]}, timeout=60
    )
    assert raw.headers["x-fugu-attempts"] == "smol-a:ok"
    assert live_short.health()["workers"]["smol-a"]["consecutive_failures"] == 0


def test_a_client_leaving_a_queued_answer_does_not_cut_the_one_being_generated(
    checkpoint: Path,
) -> None:
    """With max_concurrency 2, a second request waits in llama.cpp's queue while the first
    is generated; its client leaving killed and restarted the server (meant to stop an
    abandoned answer being generated), which cut the first client's stream. llama.cpp
    skips a queued request whose client left, so the server is left alone."""
    pool = local_pool(timeout_s=30.0)
    for worker in pool.workers:
        worker.max_concurrency = 2
    app = create_app(ServeSettings(checkpoint=checkpoint), pool_config=pool)
    no_end = {"2": -100}  # SmolLM2's <|im_end|>: the answer runs to max_tokens
    with ServerThread(app, startup_timeout_s=240) as thread:
        client = openai.OpenAI(base_url=thread.base_url, api_key="unused", max_retries=0)
        pid = app.state.fugu.pool.servers["smol-a"].pid  # type: ignore[attr-defined]
        stream = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Count from 1 to 1000."}],
            max_tokens=150, logit_bias=no_end, stream=True, extra_body={"workers": ["smol-a"]},
        )  # fmt: skip
        chunks = iter(stream)
        first = next(chunks)
        queued = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}],
                  "workers": ["smol-a"]}  # fmt: skip
        with pytest.raises(httpx.ReadTimeout):  # its client gives up while it is queued
            httpx.post(f"{thread.base_url}/chat/completions", json=queued, timeout=1.0)
        rest = list(chunks)
        assert rest[-1].choices[0].finish_reason == "length"
        text = "".join(c.choices[0].delta.content or "" for c in [first, *rest] if c.choices)
        assert len(text) > 100
        assert app.state.fugu.pool.servers["smol-a"].pid == pid  # type: ignore[attr-defined]
        raw = ask(client, MATH, max_tokens=5, extra_body={"workers": ["smol-a"]}, timeout=60)
        assert raw.headers["x-fugu-attempts"] == "smol-a:ok"


def test_a_local_worker_is_sent_one_call_at_a_time(
    checkpoint: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A local worker with max_concurrency 3 had a request sent to its llama.cpp server
    while another's answer was being streamed: it waited in llama.cpp's queue while its
    timeout_s ran, and was a 502 timeout charged to the healthy worker's circuit. serve
    now sends a local worker one call at a time (as collect does) and says so; the next
    waits for its slot, within its deadline, and is answered."""
    pool = local_pool(timeout_s=4.0)
    pool.workers[0].max_concurrency = 3
    app = create_app(ServeSettings(checkpoint=checkpoint), pool_config=pool)
    assert "local worker smol-a is sent one call at a time, not max_concurrency 3" in caplog.text
    no_end = {"2": -100}  # SmolLM2's <|im_end|>: the answer runs to max_tokens
    with ServerThread(app, startup_timeout_s=240) as thread:
        client = openai.OpenAI(base_url=thread.base_url, api_key="unused", max_retries=0)
        stream = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Count from 1 to 1000."}],
            max_tokens=440, logit_bias=no_end, stream=True, extra_body={"workers": ["smol-a"]},
        )  # fmt: skip
        next(iter(stream))

        async def meanwhile() -> openai.types.chat.ChatCompletion:
            async with openai.AsyncOpenAI(base_url=thread.base_url, api_key="unused",
                                          max_retries=0) as other:  # fmt: skip
                asked = asyncio.create_task(other.chat.completions.create(
                    model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=5,
                    extra_body={"workers": ["smol-a"]}, timeout=60,
                ))  # fmt: skip
                await asyncio.sleep(5.0)  # longer than timeout_s, while the stream is held
                stream.close()
                return await asked

        answer = asyncio.run(meanwhile())
        assert answer.choices[0].message.content is not None
        state = httpx.get(f"{thread.url}/health").json()["workers"]["smol-a"]
        assert state["consecutive_failures"] == 0


def test_an_answer_over_timeout_s_does_not_hold_up_the_next(live_short: Live) -> None:
    """llama.cpp's server went on generating a non-streamed answer that fugu-lite gave up
    on after the worker's timeout_s: the next requests to that worker waited behind it and
    timed out as well (a 502 each, opening its circuit)."""
    no_end = {"2": -100}  # SmolLM2's <|im_end|>: the answer runs to max_tokens
    client = live_short.client()
    with pytest.raises(openai.APIStatusError) as error:
        ask(client, "Count from 1 to 1000.", max_tokens=440, logit_bias=no_end,
            extra_body={"workers": ["smol-a"]}, timeout=60)  # fmt: skip
    assert error.value.status_code == 502 and "timeout" in error.value.message
    for _ in range(2):
        raw = ask(client, MATH, max_tokens=5, extra_body={"workers": ["smol-a"]}, timeout=60)
        assert raw.headers["x-fugu-attempts"] == "smol-a:ok"
    assert live_short.health()["workers"]["smol-a"]["circuit"] == "closed"


def test_a_burst_queued_for_a_busy_worker_does_not_open_its_circuit(live: Live) -> None:
    """Requests that waited their whole deadline (timeout_s + 5 s here) for the worker's one
    slot, while it answered the others one by one, counted as its failures: a burst opened
    the circuit of a healthy worker (the next requests were refused or sent elsewhere).
    Each answer is short (8 tokens), far inside timeout_s on a loaded machine, so no call
    really times out; the burst doubles until one request is queued past its deadline, so
    a fast machine that answers 30 in time still reaches it."""
    opened_before = live.health()["workers"]["smol-a"]["times_opened"]

    async def one(client: openai.AsyncOpenAI, index: int) -> str:
        try:
            raw = await client.chat.completions.with_raw_response.create(
                model=MODEL, messages=[{"role": "user", "content": f"Tell me about {index}."}],
                max_tokens=8, extra_body={"workers": ["smol-a"]}, timeout=120,
            )  # fmt: skip
        except openai.APIStatusError as error:
            assert error.status_code == 503, error.message  # retriable: nothing failed
            assert error.response.headers["retry-after"] == "1"
            assert "busy" in error.message and "max_concurrency" in error.message
            return "busy"
        return raw.headers["x-fugu-attempts"]

    async def burst(size: int) -> list[str]:
        async with live.async_client() as client:  # one per event loop (asyncio.run)
            return await asyncio.gather(*(one(client, index) for index in range(size)))

    for size in (30, 60, 120, 240):
        outcomes = asyncio.run(burst(size))
        assert set(outcomes) <= {"busy", "smol-a:ok"}, outcomes
        state = live.health()["workers"]["smol-a"]
        assert state["circuit"] == "closed" and state["consecutive_failures"] == 0
        assert state["times_opened"] == opened_before
        if "busy" in outcomes:  # the deadline was reached
            break
    assert "busy" in outcomes and "smol-a:ok" in outcomes, f"{size} requests: {outcomes}"
    raw = ask(live.client(), MATH, extra_body={"workers": ["smol-a"]}, timeout=30)
    assert raw.headers["x-fugu-attempts"] == "smol-a:ok"


def test_a_hung_worker_times_out_and_is_started_again(live_short: Live) -> None:
    """A local worker's llama.cpp server that hangs (connections open, nothing answers)
    fails over on its timeout, and is killed and started again: it answers the next
    request (the circuit breaker's states are tested against stub workers)."""
    client = live_short.client()
    pid = live_short.llama_pid("smol-b")
    os.kill(pid, signal.SIGSTOP)
    try:
        raw = ask(client, MATH)
        assert raw.headers["x-fugu-attempts"] == "smol-b:timeout,smol-a:ok"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
    raw = ask(client, MATH, timeout=30)
    assert raw.headers["x-fugu-attempts"] == "smol-b:ok"
    assert live_short.llama_pid("smol-b") != pid
    assert live_short.health()["workers"]["smol-b"]["circuit"] == "closed"
    # The same for a stream that gets no first chunk: it stayed hung (each stream timed out).
    pid = live_short.llama_pid("smol-b")
    os.kill(pid, signal.SIGSTOP)
    try:
        with pytest.raises(openai.APIStatusError) as error:
            ask(client, MATH, stream=True, extra_body={"workers": ["smol-b"]}, timeout=30)
        assert error.value.status_code == 502 and "timeout" in error.value.message
        stream = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": MATH}], stream=True, timeout=30,
            extra_body={"workers": ["smol-b"]},
        )  # fmt: skip
        assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices).strip()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
    assert live_short.llama_pid("smol-b") != pid


def test_a_crashed_worker_is_started_again(live: Live) -> None:
    """A local worker whose llama.cpp process died (a crash, the OOM killer) stayed down
    until fugu-lite was restarted."""
    pid = live.llama_pid("smol-a")
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (
        live.llama_pid("smol-a") != pid and live.health()["workers"]["smol-a"]["alive"]
    ):
        time.sleep(0.2)
    assert live.llama_pid("smol-a") != pid
    assert live.health()["status"] == "ok"
    raw = ask(live.client(), CODE, extra_body={"workers": ["smol-a"]}, timeout=30)
    assert raw.headers["x-fugu-worker"] == "smol-a"


def test_killing_the_chosen_worker_falls_back_to_the_other(live: Live) -> None:
    client = live.client()
    assert ask(client, CODE).headers["x-fugu-worker"] == "smol-a"
    live.state.pool.servers["smol-a"].stop()  # the llama.cpp process is gone
    assert live.health()["status"] == "degraded"
    raw = ask(client, CODE)
    assert raw.headers["x-fugu-worker"] == "smol-b"
    assert raw.headers["x-fugu-attempts"] == "smol-a:connection,smol-b:ok"
    stream = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": CODE}], stream=True
    )
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices).strip()
    line = live.stream_line()
    assert (line["chosen"], line["worker"], line["fallback"]) == ("smol-a", "smol-b", True)
    # once both are dead, a 502 names what was tried
    live.state.pool.servers["smol-b"].stop()
    with pytest.raises(openai.APIStatusError) as error:
        ask(client, CODE)
    assert error.value.status_code == 502
    assert "smol-a" in error.value.message and "smol-b" in error.value.message
    response = httpx.get(f"{live.thread.url}/health")
    assert (response.status_code, response.json()["status"]) == (503, "unavailable")
