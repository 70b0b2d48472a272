"""`fugu-lite serve` against in-process stub workers (real HTTP, real uvicorn, the openai SDK)
with a router trained on the tiny random backbone: the OpenAI surface, worker selection, auth
and secrets, and the decision log (server_support.py starts the server)."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import re
import socket
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from conftest import WORKERS, generated_records
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from server_support import (
    CODE,
    ENDPOINT_KEY,
    MATH,
    MODEL,
    VALID,
    WORKER_KEY,
    Stubs,
    metric_samples,
    metric_value,
    pool_for,
    ranking_for,
    tiny_config,
    user,
    wait_until,
)
from typer.testing import CliRunner

from fugu_lite.cli import app
from fugu_lite.config import PipelineConfig, RLTrainingConfig, SFTTrainingConfig
from fugu_lite.router_family import RouterFamily, load_family_or_single, train_router_family
from fugu_lite.schemas import ChatMessage, RewardRecord
from fugu_lite.server.api_error import ApiError
from fugu_lite.server.app import ServeSettings, create_app
from fugu_lite.server.auth import (
    ApiKeyChecker,
    ApiKeyError,
    Redactor,
    load_api_keys,
    worker_secrets,
)
from fugu_lite.server.routing import RouterService
from fugu_lite.server.thread import ServerThread
from fugu_lite.testing.stub_worker import count_tokens

pytestmark = pytest.mark.timeout(120)


# --- the OpenAI surface -------------------------------------------------------------------------


def test_a_request_is_answered_by_the_routed_worker_under_the_router_name(
    serve, stubs: Stubs, family: RouterFamily
) -> None:
    running = serve(pool_for(stubs))
    client = running.client()
    for prompt in (MATH, CODE):
        expected = ranking_for(family, prompt)
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=user(prompt), extra_body={"include_routing": True}
        )
        completion = raw.parse()
        worker = expected.ranking[0]
        assert completion.model == MODEL
        assert completion.choices[0].message.content == f"answer from {worker}"
        assert raw.headers["x-fugu-worker"] == worker
        probabilities = json.loads(raw.headers["x-fugu-probabilities"])
        assert probabilities == pytest.approx(expected.probabilities, abs=1e-3)
        routing = completion.model_extra["fugu"]
        assert routing["worker"] == worker and routing["chosen"] == worker
        assert routing["ranking"] == expected.ranking
        assert sum(routing["probabilities"].values()) == pytest.approx(1.0, abs=1e-5)
        assert completion.usage is not None and completion.usage.completion_tokens == 3
        assert stubs.workers[worker].bodies[-1]["model"] == f"model-{worker}"
    # The two prompts are of kinds the router learned to send to different workers.
    assert ranking_for(family, MATH).ranking[0] == "mathematician"
    assert ranking_for(family, CODE).ranking[0] == "coder"


def test_the_probabilities_header_is_the_routing_distribution_to_four_places(
    serve, stubs: Stubs
) -> None:
    """x-fugu-probabilities rounds each worker's probability to 4 places (a header, read by
    people and logged by proxies); the body's `fugu` field keeps them whole."""
    running = serve(pool_for(stubs))
    raw = running.client().chat.completions.with_raw_response.create(
        model=MODEL, messages=user(MATH), extra_body={"include_routing": True}
    )
    whole = raw.parse().model_extra["fugu"]["probabilities"]
    assert any(round(p, 4) != p for p in whole.values()), whole  # else rounding shows nothing
    header = json.loads(raw.headers["x-fugu-probabilities"])
    assert header == {worker: round(p, 4) for worker, p in whole.items()}


def test_routing_field_is_opt_in(serve, stubs: Stubs) -> None:
    running = serve(pool_for(stubs))
    completion = running.client().chat.completions.create(model=MODEL, messages=user(MATH))
    assert "fugu" not in (completion.model_extra or {})


def test_a_reply_holding_half_an_emoji_is_answered_not_a_500(serve, stubs: Stubs) -> None:
    """A worker's reply holding half of a surrogate pair ("\\ud83d", an emoji cut in two by
    a server counting UTF-16 units, sent as a JSON escape) could not be written as UTF-8: the
    client got a 500 that the decision log recorded as ok. It is answered, written with
    `\\u` escapes as a stream's chunks are; an answer without one is written as before."""
    running = serve(pool_for(stubs))
    for stub in stubs.workers.values():
        stub.reply = "cut \ud83d here, é"
    raw = running.client().chat.completions.with_raw_response.create(
        model=MODEL, messages=user(MATH)
    )
    assert raw.parse().choices[0].message.content == "cut \ud83d here, é"
    assert b"cut \\ud83d here" in raw.http_response.content
    for stub in stubs.workers.values():
        stub.reply = "é"
    plain = running.client().chat.completions.with_raw_response.create(
        model=MODEL, messages=user(CODE)
    )
    assert "é".encode() in plain.http_response.content  # without a half, as written


def test_streaming_relabels_chunks_and_honours_include_usage(
    serve, stubs: Stubs, family: RouterFamily
) -> None:
    running = serve(pool_for(stubs))
    worker = ranking_for(family, CODE).ranking[0]
    stubs.workers[worker].reply = "one two three four five"
    client = running.client()
    chunks = list(
        client.chat.completions.create(
            model=MODEL, messages=user(CODE), stream=True, stream_options={"include_usage": True}
        )
    )
    assert {chunk.model for chunk in chunks} == {MODEL}
    assert len({chunk.id for chunk in chunks}) == 1
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "one two three four five"
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 5
    assert sum(chunk.usage is not None for chunk in chunks) == 1

    plain = list(client.chat.completions.create(model=MODEL, messages=user(CODE), stream=True))
    assert all(chunk.usage is None for chunk in plain)
    assert all(chunk.choices for chunk in plain)
    # the worker was asked for usage anyway, for metrics and cost
    assert stubs.workers[worker].bodies[-1]["stream_options"] == {"include_usage": True}
    tokens = metric_value(running.metrics(), "fugu_tokens_total", worker=worker, kind="completion")
    assert tokens == 10


def test_the_clients_other_stream_options_reach_the_worker(
    serve, stubs: Stubs, family: RouterFamily
) -> None:
    """fugu-lite asks every stream for usage, and in doing so replaced the client's whole
    stream_options: `include_obfuscation: false` (OpenAI's switch for the padding field on
    each chunk) never reached the worker. They now go on, with include_usage on."""
    running = serve(pool_for(stubs))
    worker = ranking_for(family, CODE).ranking[0]
    chunks = list(
        running.client().chat.completions.create(
            model=MODEL, messages=user(CODE), stream=True,
            stream_options={"include_obfuscation": False},  # type: ignore[typeddict-unknown-key]
        )
    )  # fmt: skip
    assert all(chunk.usage is None for chunk in chunks)  # the client did not ask for it
    sent = stubs.workers[worker].bodies[-1]["stream_options"]
    assert sent == {"include_obfuscation": False, "include_usage": True}


@pytest.mark.filterwarnings("error::UserWarning")
def test_a_workers_negative_or_unreadable_usage_is_answered_and_not_counted(
    serve, stubs: Stubs, family: RouterFamily
) -> None:
    """Token counts a worker gave negative or as no number broke serve's metrics (Prometheus
    refuses a negative count) after the worker had answered: a 500, or a stream cut at its
    end; its answer now goes out and its tokens and cost count as unknown. Relaying a
    stream whose usage held no number printed pydantic's 'Pydantic serializer warnings:
    PydanticSerializationUnexpectedValue(Expected `int` ...)' to serve's stderr (an error
    here, which cuts the stream)."""
    running = serve(pool_for(stubs))
    worker = ranking_for(family, CODE).ranking[0]
    client = running.client()
    for usage in (
        {"prompt_tokens": -4, "completion_tokens": 3},
        {"prompt_tokens": "n/a"},
        {"prompt_tokens": "\u00b2", "completion_tokens": 3},
    ):
        stubs.workers[worker].usage = usage
        completion = client.chat.completions.create(model=MODEL, messages=user(CODE))
        assert completion.choices[0].message.content == f"answer from {worker}"
        with_usage = {"include_usage": True}
        chunks = list(
            client.chat.completions.create(
                model=MODEL, messages=user(CODE), stream=True, stream_options=with_usage
            )
        )
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == f"answer from {worker}"
    metrics = running.metrics()
    assert metric_value(metrics, "fugu_tokens_total", worker=worker, kind="prompt") == 0
    assert metric_value(metrics, "fugu_requests_total", status="200", stream="true") == 3
    assert metric_value(metrics, "fugu_requests_total", status="200", stream="false") == 3


def test_a_worker_refusing_stream_options_is_streamed_to_without_them(
    serve, stubs: Stubs, family: RouterFamily
) -> None:
    """serve asks each worker for the usage of a stream (stream_options), which some
    providers refuse (an older Azure API version: a 400 "Unrecognized request argument
    supplied: stream_options"): every streamed request to it was a 400
    worker_rejected_request naming a parameter the client never sent. The call is made
    once more without them, later calls to that worker leave them out, and the tokens are
    estimated as for a worker that reports no usage."""
    running = serve(pool_for(stubs))
    worker = ranking_for(family, CODE).ranking[0]
    other = next(w for w in WORKERS if w != worker)
    stub = stubs.workers[worker]
    stub.mode = "no_stream_options"
    stub.reply = "one two three four five"
    client = running.client()
    for _ in range(2):
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=user(CODE), stream=True, stream_options={"include_usage": True}
        )
        assert raw.headers["x-fugu-attempts"] == f"{worker}:ok"
        chunks = list(raw.parse())
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == "one two three four five"
        usage = chunks[-1].usage
        assert usage is not None and usage.completion_tokens == 5
        assert (usage.model_extra or {}).get("fugu_estimated") is True
    assert ["stream_options" in body for body in stub.bodies] == [True, False, False]
    assert stub.modes_served == ["no_stream_options"] * 3
    assert running.health()["workers"][worker]["consecutive_failures"] == 0
    tokens = metric_value(running.metrics(), "fugu_tokens_total", worker=worker, kind="completion")
    assert tokens == 10
    # Only that worker: another is still asked for its usage.
    list(client.chat.completions.create(model=MODEL, messages=user(CODE), stream=True,
                                        extra_body={"workers": [other]}))  # fmt: skip
    assert stubs.workers[other].bodies[-1]["stream_options"] == {"include_usage": True}


def test_streaming_raw_events_end_with_done_and_carry_routing_headers(
    serve, stubs: Stubs, family: RouterFamily
) -> None:
    running = serve(pool_for(stubs))
    body = {"model": MODEL, "messages": user(MATH), "stream": True, "include_routing": True}
    with httpx.stream("POST", f"{running.url}/v1/chat/completions", json=body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["x-fugu-worker"] == ranking_for(family, MATH).ranking[0]
        # not held back by a proxy (nginx buffered it: the events came all at once, at the end)
        assert response.headers["cache-control"] == "no-cache"
        assert response.headers["x-accel-buffering"] == "no"
        raw = "".join(response.iter_text())
    # SSE's framing: each event a `data:` line ended by a blank line, [DONE] too (a client
    # that dispatches an event at its blank line, as EventSource does, never saw a [DONE]
    # written with one newline; the openai SDK ends the stream all the same)
    assert raw.endswith("\n\ndata: [DONE]\n\n")
    events = raw.removesuffix("\n\n").split("\n\n")
    assert all(event.startswith("data: ") and "\n" not in event for event in events)
    assert events[-1] == "data: [DONE]"
    first = json.loads(events[0].removeprefix("data: "))
    assert first["fugu"]["worker"] == response.headers["x-fugu-worker"]
    # every chunk carries the answer's id (the worker's own is another server's)
    ids = {json.loads(event.removeprefix("data: "))["id"] for event in events[:-1]}
    assert ids == {response.headers["x-request-id"]}


def test_the_routing_field_comes_on_the_first_chunk_sent(
    serve, stubs: Stubs, family: RouterFamily
) -> None:
    """A worker whose stream opens with a chunk without choices (Azure OpenAI's content
    filter results) had the `fugu` field put on that chunk, which a client that did not
    ask for usage never gets: include_routing gave no routing at all."""
    upstream = FastAPI()

    @upstream.post("/v1/chat/completions")
    async def chat() -> StreamingResponse:
        async def events() -> AsyncIterator[bytes]:
            head = {"id": "", "object": "", "created": 0, "model": "", "choices": [],
                    "prompt_filter_results": [{"prompt_index": 0}]}  # fmt: skip
            yield f"data: {json.dumps(head)}\n\n".encode()
            for delta in ({"role": "assistant", "content": ""}, {"content": "hello"}):
                chunk = {"id": "x", "object": "chat.completion.chunk", "created": 0,
                         "model": "m", "choices": [{"index": 0, "delta": delta}]}  # fmt: skip
                yield f"data: {json.dumps(chunk)}\n\n".encode()
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    first = ranking_for(family, MATH).ranking[0]
    with ServerThread(upstream) as azure:
        running = serve(pool_for(stubs, overrides={first: {"base_url": azure.base_url}}))
        chunks = list(
            running.client().chat.completions.create(
                model=MODEL, messages=user(MATH), stream=True, extra_body={"include_routing": True}
            )
        )
        # a client that asked for usage reads chunks without choices: it gets that one too
        with_usage = list(
            running.client().chat.completions.create(
                model=MODEL, messages=user(MATH), stream=True,
                stream_options={"include_usage": True},
            )
        )  # fmt: skip
    assert all(chunk.choices for chunk in chunks)
    assert chunks[0].model_extra is not None and chunks[0].model_extra["fugu"]["worker"] == first
    assert all("fugu" not in (chunk.model_extra or {}) for chunk in chunks[1:])
    assert "".join(chunk.choices[0].delta.content or "" for chunk in chunks) == "hello"
    head = with_usage[0]
    assert head.choices == [] and head.usage is None
    assert (head.model_extra or {}).get("prompt_filter_results") == [{"prompt_index": 0}]
    assert with_usage[-1].choices == [] and with_usage[-1].usage is not None


def scripted_stream(chunks: list[dict[str, Any]]) -> FastAPI:
    """A worker streaming these chunks, then `data: [DONE]`, to every request."""
    upstream = FastAPI()

    @upstream.post("/v1/chat/completions")
    async def chat() -> StreamingResponse:
        async def events() -> AsyncIterator[bytes]:
            for chunk in chunks:
                yield f"data: {json.dumps(chunk)}\n\n".encode()
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    return upstream


def streamed_with_usage(
    serve: Any, stubs: Stubs, worker: str, worker_chunks: list[dict[str, Any]], **request: Any
) -> list[Any]:
    """The chunks a client asking for usage gets of a MATH question (with `request`'s other
    keys) routed to `worker`, which streams `worker_chunks` (scripted_stream)."""
    with ServerThread(scripted_stream(worker_chunks)) as upstream:
        running = serve(pool_for(stubs, overrides={worker: {"base_url": upstream.base_url}}))
        return list(
            running.client().chat.completions.create(
                model=MODEL, messages=user(MATH), stream=True,
                stream_options={"include_usage": True}, **request,
            )
        )  # fmt: skip


def stream_chunk(created: int, delta: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"id": "x", "object": "chat.completion.chunk", "created": created, "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": None}], **fields}  # fmt: skip


def test_every_chunk_of_a_stream_has_the_same_created(
    serve, stubs: Stubs, family: RouterFamily
) -> None:
    """OpenAI gives each chunk of a stream the same `created`; the relay passed on each
    worker chunk's own (llama.cpp's server stamps each with the second it was sent) and
    stamped the usage chunk it made for a worker reporting none with yet another. A
    stream now has one `created`: when the relay started."""
    first = ranking_for(family, MATH).ranking[0]
    worker_chunks = [
        stream_chunk(1000, {"role": "assistant", "content": ""}),
        stream_chunk(1001, {"content": "hello"}),
        stream_chunk(1002, {}, choices=[{"index": 0, "delta": {}, "finish_reason": "stop"}]),
    ]
    with ServerThread(scripted_stream(worker_chunks)) as llama:
        running = serve(pool_for(stubs, overrides={first: {"base_url": llama.base_url}}))
        before = time.time()
        chunks = list(
            running.client().chat.completions.create(
                model=MODEL, messages=user(MATH), stream=True,
                stream_options={"include_usage": True},
            )
        )  # fmt: skip
    assert chunks[-1].usage is not None  # the one the relay made
    [created] = {chunk.created for chunk in chunks}
    assert int(before) <= created <= time.time()


TOOL_CALL_START = {"index": 0, "id": "call_1", "type": "function",
                   "function": {"name": "add", "arguments": ""}}  # fmt: skip
CALL_DELTAS_BY_STYLE = {
    "tool_calls": [{"tool_calls": [TOOL_CALL_START]},
                   {"tool_calls": [{"index": 0, "function": {"arguments": '{"a": 1}'}}]}],
    # the deprecated functions' style: were not counted, 0 completion tokens for the call
    "function_call": [{"function_call": {"name": "add", "arguments": ""}},
                      {"function_call": {"arguments": '{"a": 1}'}}],
}  # fmt: skip


@pytest.mark.parametrize("style", CALL_DELTAS_BY_STYLE)
def test_a_streamed_tool_call_a_worker_reports_no_usage_for_is_counted(
    serve, stubs: Stubs, family: RouterFamily, style: str
) -> None:
    """A worker streaming no usage (llama.cpp's server) has its completion tokens estimated,
    one a chunk streamed: a tool call's chunks, or a deprecated function call's, count as
    content chunks do, and the finish reason reaches the client."""
    first = ranking_for(family, MATH).ranking[0]
    opening, arguments = CALL_DELTAS_BY_STYLE[style]
    worker_chunks = [
        stream_chunk(0, {"role": "assistant", **opening}),
        stream_chunk(0, arguments),
        stream_chunk(0, {}, choices=[{"index": 0, "delta": {}, "finish_reason": style}]),
    ]
    chunks = streamed_with_usage(serve, stubs, first, worker_chunks)
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 2
    assert chunks[-2].choices[0].finish_reason == style


def test_a_streams_estimated_prompt_tokens_count_the_requests_tools(
    serve, stubs: Stubs, family: RouterFamily
) -> None:
    """A worker streaming no usage has its prompt tokens estimated from the prompt's
    characters; the request's tools schemas (or deprecated functions'), which the worker
    reads as part of its prompt, were not counted, so a tool request's estimate ran low.
    They now count, as JSON."""
    first = ranking_for(family, MATH).ranking[0]
    worker_chunks = [stream_chunk(0, {"role": "assistant", "content": "4"})]
    tools = [{"type": "function", "function": {"name": "add", "description": "adds " * 100,
                                               "parameters": {"type": "object"}}}]  # fmt: skip
    bare = streamed_with_usage(serve, stubs, first, worker_chunks)[-1].usage
    with_tools = streamed_with_usage(serve, stubs, first, worker_chunks, tools=tools)[-1].usage
    assert bare is not None and with_tools is not None
    tool_tokens = len(json.dumps(tools)) // 4  # the sum's floor is this one's or one more
    assert with_tools.prompt_tokens - bare.prompt_tokens in (tool_tokens, tool_tokens + 1)
    functions = [tools[0]["function"]]  # the deprecated form
    with_functions = streamed_with_usage(serve, stubs, first, worker_chunks, functions=functions)
    assert with_functions[-1].usage is not None
    function_tokens = len(json.dumps(functions)) // 4
    extra_tokens = with_functions[-1].usage.prompt_tokens - bare.prompt_tokens
    assert extra_tokens in (function_tokens, function_tokens + 1)


def test_usage_a_worker_sends_before_its_last_chunk_is_the_only_usage_relayed(
    serve, stubs: Stubs, family: RouterFamily
) -> None:
    """A worker's usage chunk (no choices) followed by a chunk with choices (its
    finish_reason) is the client's usage: the relay adds its estimate only when no usage
    was sent, however many chunks come after it (no test sent one after: forgetting the
    usage sent at the next chunk passed, and the client got two usage chunks)."""
    first = ranking_for(family, MATH).ranking[0]
    usage = {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}
    worker_chunks = [
        stream_chunk(0, {"role": "assistant", "content": "hello"}),
        stream_chunk(0, {}, choices=[], usage=usage),
        stream_chunk(0, {}, choices=[{"index": 0, "delta": {}, "finish_reason": "stop"}]),
    ]
    chunks = streamed_with_usage(serve, stubs, first, worker_chunks)
    usages = [chunk.usage.model_dump(exclude_none=True) for chunk in chunks if chunk.usage]
    assert usages == [usage]
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_usage_a_worker_puts_on_a_chunk_with_choices_comes_on_its_own_chunk(
    serve, stubs: Stubs, family: RouterFamily
) -> None:
    """OpenAI streams usage on a last chunk of its own, with no choices, and clients read it
    there; a worker that put it on its last chunk with choices (its finish_reason) had it
    relayed there, so a client that asked for usage found no chunk without choices. Usage
    now comes on a chunk of its own, and only to a client that asked for it."""
    first = ranking_for(family, MATH).ranking[0]
    usage = {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}
    finish = [{"index": 0, "delta": {}, "finish_reason": "stop"}]
    worker_chunks = [
        stream_chunk(1000, {"role": "assistant", "content": ""}),
        stream_chunk(1000, {"content": "hello"}),
        stream_chunk(1000, {}, choices=finish, usage=usage),
    ]
    with ServerThread(scripted_stream(worker_chunks)) as upstream:
        running = serve(pool_for(stubs, overrides={first: {"base_url": upstream.base_url}}))
        client = running.client()
        chunks = list(
            client.chat.completions.create(
                model=MODEL, messages=user(MATH), stream=True,
                stream_options={"include_usage": True},
            )
        )  # fmt: skip
        plain = list(client.chat.completions.create(model=MODEL, messages=user(MATH), stream=True))
    *answer, last = chunks
    assert last.choices == [] and last.usage is not None
    assert last.usage.model_dump(exclude_none=True) == usage
    assert all(chunk.choices and chunk.usage is None for chunk in answer)
    assert answer[-1].choices[0].finish_reason == "stop"
    assert all(chunk.choices and chunk.usage is None for chunk in plain)
    text = running.metrics()
    assert metric_value(text, "fugu_tokens_total", worker=first, kind="completion") == 2


def test_a_workers_content_parts_reach_the_client_as_text(
    serve, stubs: Stubs, family: RouterFamily
) -> None:
    """A worker answering with its message content as a list of parts (Mistral's reasoning
    models: a thinking part, then the reply's text parts), streamed or not, had that list
    passed on, where OpenAI's answer (and the openai SDK's type) is a string: a client
    joining the streamed deltas failed on a list, one reading the answer got the model's
    thinking as well. The client gets the text parts joined now, as the pool reads them."""
    first = ranking_for(family, MATH).ranking[0]
    stubs.workers[first].mode = "parts"
    running = serve(pool_for(stubs))
    answer = running.client().chat.completions.create(model=MODEL, messages=user(MATH))
    assert answer.choices[0].message.content == f"answer from {first}"

    thinking = [{"type": "thinking", "thinking": [{"type": "text", "text": "Hmm."}]}]
    worker_chunks = [
        stream_chunk(1000, {"role": "assistant", "content": thinking}),
        stream_chunk(1000, {"content": [{"type": "text", "text": "Par"}]}),
        stream_chunk(1000, {"content": [{"type": "text", "text": "is"}]}),
        stream_chunk(1000, {}, choices=[{"index": 0, "delta": {}, "finish_reason": "stop"}]),
    ]
    with ServerThread(scripted_stream(worker_chunks)) as upstream:
        running = serve(pool_for(stubs, overrides={first: {"base_url": upstream.base_url}}))
        chunks = list(
            running.client().chat.completions.create(model=MODEL, messages=user(MATH), stream=True)
        )
    assert all(isinstance(chunk.choices[0].delta.content or "", str) for chunk in chunks)
    assert "".join(chunk.choices[0].delta.content or "" for chunk in chunks) == "Paris"


def test_browser_origins_given_with_cors_origin_may_call_the_endpoint(serve, stubs: Stubs) -> None:
    """A web page (a chat UI on another origin) could not call fugu-lite at all: the
    browser's CORS preflight got a 405. Origins given with --cors-origin get CORS headers,
    the routing headers readable by the page; others, and every origin by default, none."""
    app = "http://localhost:3000"
    running = serve(pool_for(stubs), cors_origins=[app], api_keys=[ENDPOINT_KEY])
    url = f"{running.url}/v1/chat/completions"
    preflight = {"origin": app, "access-control-request-method": "POST",
                 "access-control-request-headers": "authorization, content-type"}  # fmt: skip
    response = httpx.options(url, headers=preflight)
    assert response.status_code == 200, response.text
    assert response.headers["access-control-allow-origin"] == app
    assert "authorization" in response.headers["access-control-allow-headers"].lower()
    other = httpx.options(url, headers={**preflight, "origin": "http://evil.test"})
    assert other.status_code == 400 and "access-control-allow-origin" not in other.headers

    auth = {"authorization": f"Bearer {ENDPOINT_KEY}", "origin": app}
    answer = running.post({"model": MODEL, "messages": user(MATH)}, headers=auth)
    assert answer.status_code == 200
    assert answer.headers["access-control-allow-origin"] == app
    exposed = answer.headers["access-control-expose-headers"].lower()
    assert "x-fugu-worker" in exposed and "retry-after" in exposed
    refused = running.post({"model": "gpt-4o", "messages": user(MATH)}, headers=auth)
    assert refused.status_code == 404 and refused.headers["access-control-allow-origin"] == app

    closed = serve(pool_for(stubs))
    response = httpx.options(f"{closed.url}/v1/chat/completions", headers=preflight)
    assert response.status_code == 405 and "access-control-allow-origin" not in response.headers
    assert (
        "access-control-allow-origin"
        not in closed.post(
            {"model": MODEL, "messages": user(MATH)}, headers={"origin": app}
        ).headers
    )


def test_every_answer_carries_its_request_id(serve, stubs: Stubs) -> None:
    running = serve(pool_for(stubs))
    client = running.client()
    raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=user(MATH))
    completion = raw.parse()
    assert raw.headers["x-request-id"] == completion.id

    streamed = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=user(CODE), stream=True
    )
    chunks = list(streamed.parse())
    assert len(chunks) > 1
    assert {chunk.id for chunk in chunks} == {streamed.headers["x-request-id"]}

    stubs.workers["coder"].mode = "500"
    failed = running.post({"model": MODEL, "messages": user(CODE), "workers": ["coder"]})
    assert failed.status_code == 502  # an error is an answer too

    ids = [raw.headers["x-request-id"], streamed.headers["x-request-id"]]
    ids.append(failed.headers["x-request-id"])
    assert len(set(ids)) == 3 and all(i.startswith("chatcmpl-") for i in ids)
    # the id joins an answer to its decision log line
    assert wait_until(lambda: len(running.log_lines()) == 3)
    assert {line["request_id"] for line in running.log_lines()} == set(ids)


def test_a_clients_own_request_id_is_answered_and_logged(serve, stubs: Stubs) -> None:
    """A client (or the proxy in front) sending its own X-Request-Id got fugu-lite's id back
    and found its own nowhere, so its logs could not be joined to the answer or to the
    decision log. One usable as given (visible ASCII, at most 200 characters) is now the
    request's id: the x-request-id answered, the body's `id`, each chunk's, the decision
    log's `request_id`; any other is replaced by fugu-lite's own, as before."""
    running = serve(pool_for(stubs))
    mine = "trace-7f3a:span/42"
    client = running.client(default_headers={"X-Request-Id": mine})
    raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=user(MATH))
    assert (raw.headers["x-request-id"], raw.parse().id) == (mine, mine)
    streamed = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=user(CODE), stream=True
    )
    assert streamed.headers["x-request-id"] == mine
    assert {chunk.id for chunk in streamed.parse()} == {mine}
    with pytest.raises(openai.NotFoundError) as refused:
        client.chat.completions.create(model="gpt-4o", messages=user(MATH))
    assert refused.value.request_id == mine
    stubs.workers["coder"].mode = "500"
    failed = running.post(
        {"model": MODEL, "messages": user(CODE), "workers": ["coder"]},
        headers={"x-request-id": mine},
    )
    assert (failed.status_code, failed.headers["x-request-id"]) == (502, mine)
    assert wait_until(lambda: len(running.log_lines()) == 3)
    assert [line["request_id"] for line in running.log_lines()] == [mine] * 3

    stubs.workers["coder"].mode = "ok"
    for unusable in ("x" * 201, "two words", "a\ttab"):
        response = running.post(VALID, headers={"x-request-id": unusable})
        assert response.status_code == 200, response.text
        assert response.headers["x-request-id"].startswith("chatcmpl-")
        assert response.json()["id"] == response.headers["x-request-id"]
    longest = "r" * 200  # at most 200 characters: this one is still taken as given
    assert running.post(VALID, headers={"x-request-id": longest}).headers["x-request-id"] == longest


def test_async_client_and_concurrent_requests_share_routing_batches(
    serve, stubs: Stubs, family: RouterFamily
) -> None:
    running = serve(pool_for(stubs), batch_window_ms=20)
    for stub in stubs.workers.values():
        stub.latency_s = 0.2  # the requests overlap in the server
    prompts = [f"{MATH} {index}" if index % 2 else f"{CODE} {index}" for index in range(24)]

    async def ask_all() -> list:
        async with running.async_client() as client:
            return await asyncio.gather(
                *(client.chat.completions.create(model=MODEL, messages=user(p)) for p in prompts)
            )

    completions = asyncio.run(ask_all())
    # each request of a batch is answered by the worker routed for its own prompt
    routed = [ranking_for(family, prompt).ranking[0] for prompt in prompts]
    assert len(set(routed)) > 1
    assert [c.choices[0].message.content for c in completions] == [
        f"answer from {worker}" for worker in routed
    ]
    metrics = running.metrics()
    assert metric_value(metrics, "fugu_routing_batch_size_sum") == 24
    batches = metric_value(metrics, "fugu_routing_batch_size_count")
    assert batches < 24, f"{batches} routing passes for 24 concurrent requests: no batching"
    assert metric_value(metrics, "fugu_requests_total", status="200", stream="false") == 24


def test_models_health_and_metrics(serve, stubs: Stubs) -> None:
    running = serve(pool_for(stubs))
    client = running.client()
    assert [model.id for model in client.models.list()] == [MODEL]
    assert client.models.retrieve(MODEL).id == MODEL
    # a single checkpoint serves no cost weight but its own: none to choose from
    assert client.models.retrieve(MODEL).model_extra["cost_weights"] is None
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("gpt-4o")
    health = running.health()
    assert health["status"] == "ok"
    assert {w: s["circuit"] for w, s in health["workers"].items()} == dict.fromkeys(
        WORKERS, "closed"
    )
    # each worker's series are there from the start, at 0
    for name in ("fugu_circuit_open", "fugu_worker_choices_total"):
        samples = metric_samples(running.metrics(), name)
        assert sorted(labels["worker"] for labels, _ in samples) == sorted(WORKERS), name
        assert {value for _, value in samples} == {0.0}, name
    client.chat.completions.create(model=MODEL, messages=user(MATH))
    metrics = running.metrics()
    chosen = ranking_for(running.state.router.family, MATH).ranking[0]
    assert metric_value(metrics, "fugu_worker_choices_total", worker=chosen) == 1
    assert metric_value(metrics, "fugu_worker_calls_total", worker=chosen, outcome="ok") == 1
    assert metric_value(metrics, "fugu_fallbacks_total") == 0  # answered by the first choice
    assert metric_value(metrics, "fugu_routing_latency_seconds_count") == 1
    assert metric_value(metrics, "fugu_upstream_latency_seconds_count", worker=chosen) == 1
    # the stub counts whitespace tokens; prices are 1 (input) and 2 (output) per million
    prompt_tokens, completion_tokens = count_tokens(MATH), count_tokens(f"answer from {chosen}")
    assert metric_value(metrics, "fugu_tokens_total", worker=chosen, kind="prompt") == (
        prompt_tokens
    )
    assert metric_value(metrics, "fugu_cost_total", worker=chosen) == pytest.approx(
        (prompt_tokens * 1.0 + completion_tokens * 2.0) / 1e6
    )
    assert "# TYPE fugu_routing_latency_seconds histogram" in metrics
    # what a Prometheus scraper reads (3.x refuses a scrape of another content-type), without
    # the `*_created` series (one more per series, nothing a scraper needs)
    scraped = httpx.get(f"{running.url}/metrics")
    assert scraped.headers["content-type"].startswith("text/plain; version=")
    assert "_created" not in scraped.text


def test_the_latency_histograms_are_in_seconds_and_the_in_flight_gauge_counts_requests(
    serve, stubs: Stubs
) -> None:
    running = serve(pool_for(stubs))
    for stub in stubs.workers.values():
        stub.latency_s = 0.5
    started = time.perf_counter()
    with ThreadPoolExecutor(1) as pool:
        answer = pool.submit(
            running.client().chat.completions.create, model=MODEL, messages=user(MATH)
        )
        assert wait_until(lambda: metric_value(running.metrics(), "fugu_requests_in_flight") == 1)
        answer.result()
    elapsed = time.perf_counter() - started
    metrics = running.metrics()
    assert metric_value(metrics, "fugu_requests_in_flight") == 0
    [line] = running.log_lines()
    routing = metric_value(metrics, "fugu_routing_latency_seconds_sum")
    assert routing == pytest.approx(line["routing_latency_s"])
    upstream = metric_value(metrics, "fugu_upstream_latency_seconds_sum", worker=line["worker"])
    assert 0.5 <= upstream <= elapsed


def test_health_says_degraded_or_unavailable_when_workers_are_down(
    serve, stubs: Stubs, monkeypatch: pytest.MonkeyPatch
) -> None:
    running = serve(pool_for(stubs))
    dead: set[str] = set()
    # Stub workers are remote (no local process to die here); the real-process version is
    # tests/test_server_llama.py::test_killing_the_chosen_worker_falls_back_to_the_other.
    monkeypatch.setattr(running.state.pool, "is_alive", lambda worker: worker not in dead)
    dead.add(WORKERS[0])  # e.g. its llama.cpp process exited
    response = httpx.get(f"{running.url}/health")
    assert (response.status_code, response.json()["status"]) == (200, "degraded")
    assert response.json()["workers"][WORKERS[0]]["alive"] is False
    dead.update(WORKERS)
    response = httpx.get(f"{running.url}/health")
    assert (response.status_code, response.json()["status"]) == (503, "unavailable")


def test_health_is_about_the_workers_the_router_may_choose(
    serve, stubs: Stubs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker opted out server-wide is never routed to: its being down leaves /health ok
    (a load balancer reading degraded or a 503 would take a serving instance out)."""
    opted_out = WORKERS[0]
    running = serve(pool_for(stubs, opt_out=(opted_out,)))
    monkeypatch.setattr(running.state.pool, "is_alive", lambda worker: worker != opted_out)
    response = httpx.get(f"{running.url}/health")
    assert (response.status_code, response.json()["status"]) == (200, "ok")
    assert response.json()["workers"][opted_out]["alive"] is False
    monkeypatch.setattr(running.state.pool, "is_alive", lambda worker: worker == opted_out)
    response = httpx.get(f"{running.url}/health")
    assert (response.status_code, response.json()["status"]) == (503, "unavailable")


def test_an_internal_error_is_a_counted_500_and_the_server_goes_on(
    serve, stubs: Stubs, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The 500 names the request id its traceback is logged with (it carried none: the
    operator could not tell which traceback a client's report was about)."""
    running = serve(pool_for(stubs))
    caplog.set_level(logging.ERROR)

    def broken(*args: Any) -> tuple[str, ...]:
        raise RuntimeError("a bug in fugu-lite")

    monkeypatch.setattr(running.state, "workers_reading", broken)
    response = running.post(VALID)
    assert response.status_code == 500
    error = response.json()["error"]
    assert (error["type"], error["code"], error["param"]) == (
        "server_error",
        "internal_error",
        None,
    )
    assert "a bug" not in response.text  # nothing internal leaks
    request_id = response.headers["x-request-id"]
    assert f"request id {request_id}" in response.json()["error"]["message"]
    [logged] = [r for r in caplog.records if r.exc_info is not None]
    assert request_id in logged.getMessage()
    metrics = running.metrics()
    assert metric_value(metrics, "fugu_requests_total", status="500") == 1
    assert metric_value(metrics, "fugu_errors_total", code="internal_error") == 1
    monkeypatch.undo()
    assert running.post(VALID).status_code == 200


def test_an_internal_error_keeps_the_connection_and_is_logged_once(
    serve, stubs: Stubs, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The 500 was re-raised after it was sent: uvicorn logged the traceback a second
    time ("Exception in ASGI application") and closed the client's keep-alive connection,
    so the next request on it found it closed."""
    running = serve(pool_for(stubs))

    def broken(*args: Any) -> tuple[str, ...]:
        raise RuntimeError("a bug in fugu-lite")

    monkeypatch.setattr(running.state, "workers_reading", broken)
    body = json.dumps(VALID).encode()
    request = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
        f"\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    host, port = running.url.removeprefix("http://").split(":")
    caplog.set_level(logging.ERROR)
    with socket.create_connection((host, int(port)), timeout=10) as connection:
        for _ in range(2):  # the second request goes on the same connection
            connection.sendall(request)
            head = b""
            while b"\r\n\r\n" not in head:
                received = connection.recv(65536)
                assert received, "the server closed the connection"
                head += received
            header, _, rest = head.partition(b"\r\n\r\n")
            assert header.startswith(b"HTTP/1.1 500")
            length = int(re.search(rb"content-length: (\d+)", header.lower()).group(1))  # type: ignore[union-attr]
            while len(rest) < length:
                rest += connection.recv(65536)
            assert json.loads(rest)["error"]["code"] == "internal_error"
    tracebacks = [r for r in caplog.records if r.exc_info is not None]
    assert len(tracebacks) == 2  # one for each request
    assert all(r.name.startswith("fugu_lite") for r in tracebacks)


def test_openai_parameters_and_tools_are_passed_through(
    serve, stubs: Stubs, family: RouterFamily
) -> None:
    running = serve(pool_for(stubs))
    tools = [
        {
            "type": "function",
            "function": {
                "name": "add",
                "description": "add two numbers",
                "parameters": {"type": "object", "properties": {"a": {"type": "number"}}},
            },
        }
    ]
    running.client().chat.completions.create(
        model=MODEL,
        messages=[{"role": "system", "content": "be brief"}, *user(MATH)],
        temperature=0.3,
        top_p=0.9,
        seed=7,
        stop=["\n\n"],
        max_completion_tokens=64,
        tools=tools,
        tool_choice="auto",
        extra_body={"exclude_workers": ["coder"], "include_routing": True},
    )
    worker = ranking_for(family, MATH, ("cheap-small", "mathematician")).ranking[0]
    sent = stubs.workers[worker].bodies[-1]
    assert sent["tools"] == tools and sent["tool_choice"] == "auto"
    assert (sent["temperature"], sent["top_p"], sent["seed"], sent["stop"]) == (
        0.3, 0.9, 7, ["\n\n"],
    )  # fmt: skip
    assert sent["max_completion_tokens"] == 64 and "max_tokens" not in sent
    assert sent["messages"][0] == {"role": "system", "content": "be brief"}
    for key in ("exclude_workers", "include_routing", "workers", "cost_weight"):
        assert key not in sent


def reasoning_model_app(bodies: list[dict[str, Any]]) -> FastAPI:
    """A fake of OpenAI's o-series endpoint (a paid remote API): it refuses `max_tokens` as
    OpenAI does and answers anything else."""
    upstream = FastAPI()

    @upstream.post("/v1/chat/completions")
    async def chat(request: Request) -> JSONResponse:
        body = await request.json()
        bodies.append(body)
        if "max_tokens" in body:
            message = (
                "Unsupported parameter: 'max_tokens' is not supported with this model. "
                "Use 'max_completion_tokens' instead."
            )
            error = {"message": message, "type": "invalid_request_error",
                     "param": "max_tokens", "code": "unsupported_parameter"}  # fmt: skip
            return JSONResponse({"error": error}, status_code=400)
        return JSONResponse(
            {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
             "choices": [{"index": 0, "finish_reason": "stop",
                          "message": {"role": "assistant", "content": "reasoned"}}]}
        )  # fmt: skip

    return upstream


def test_the_output_limit_reaches_each_worker_under_the_name_it_reads(
    serve, stubs: Stubs, family: RouterFamily
) -> None:
    """A client's max_completion_tokens reached every worker as max_tokens, which OpenAI's
    o-series refuse: a correct request was a worker_rejected_request. It now keeps the
    client's name, or the name the worker's own params use."""
    first = ranking_for(family, MATH).ranking[0]
    bodies: list[dict[str, Any]] = []
    with ServerThread(reasoning_model_app(bodies)) as upstream:
        running = serve(pool_for(stubs, overrides={first: {"base_url": upstream.base_url}}))
        completion = running.client().chat.completions.create(
            model=MODEL, messages=user(MATH), max_completion_tokens=40
        )
        assert completion.choices[0].message.content == "reasoned"
        assert bodies[-1]["max_completion_tokens"] == 40 and "max_tokens" not in bodies[-1]
        # the pool names the worker's limit: a client's max_tokens goes under that name
        pinned = {"base_url": upstream.base_url, "params": {"max_completion_tokens": 100}}
        running = serve(pool_for(stubs, overrides={first: pinned}))
        completion = running.client().chat.completions.create(
            model=MODEL, messages=user(MATH), max_tokens=7
        )
        assert completion.choices[0].message.content == "reasoned"
        assert bodies[-1]["max_completion_tokens"] == 7 and "max_tokens" not in bodies[-1]
        running.client().chat.completions.create(model=MODEL, messages=user(MATH))
        assert bodies[-1]["max_completion_tokens"] == 100 and "max_tokens" not in bodies[-1]
    # and a worker whose params say max_tokens gets the client's max_completion_tokens so
    running = serve(pool_for(stubs, overrides={first: {"params": {"max_tokens": 24}}}))
    running.client().chat.completions.create(
        model=MODEL, messages=user(MATH), max_completion_tokens=9
    )
    sent = stubs.workers[first].bodies[-1]
    assert sent["max_tokens"] == 9 and "max_completion_tokens" not in sent


def test_the_deprecated_function_role_reaches_the_worker_unchanged(serve, stubs: Stubs) -> None:
    """OpenAI still takes legacy function calling (an assistant `function_call`, then a
    `function` message with the function's name and result): fugu-lite refused the role."""
    running = serve(pool_for(stubs))
    called = {"name": "weather", "arguments": '{"city": "Paris"}'}
    conversation = [
        *user("What is the weather in Paris?"),
        {"role": "assistant", "content": None, "function_call": called},
        {"role": "function", "name": "weather", "content": "sunny"},
    ]
    raw = running.client().chat.completions.with_raw_response.create(
        model=MODEL, messages=conversation
    )
    sent = stubs.workers[raw.headers["x-fugu-worker"]].bodies[-1]
    assert sent["messages"][-2:] == conversation[-2:]  # the assistant's content: null too
    nameless = {"model": MODEL, "messages": [*user("hi"), {"role": "function", "content": "x"}]}
    response = running.post(nameless)
    assert response.status_code == 400
    assert "messages[1] is a function message without a string name" in response.text


def test_null_parameters_leave_the_workers_own_params_in_place(serve, stubs: Stubs) -> None:
    """OpenAI reads null as "the default": a client's `"temperature": null` must neither
    reach the worker (llama.cpp's server answers it with a 500) nor erase the pool's
    `params` (max_tokens: null lifted the worker's cap)."""
    params = {"temperature": 0.0, "max_tokens": 24}
    running = serve(pool_for(stubs, overrides={w: {"params": params} for w in WORKERS}))
    raw = running.client().chat.completions.with_raw_response.create(
        model=MODEL,
        messages=user(MATH),
        temperature=None,
        max_tokens=5,
        max_completion_tokens=None,
        top_p=None,
        stop=None,
        seed=None,
    )
    sent = stubs.workers[raw.headers["x-fugu-worker"]].bodies[-1]
    assert sent["temperature"] == 0.0 and sent["max_tokens"] == 5
    assert not {"top_p", "stop", "seed", "max_completion_tokens"} & sent.keys()
    response = running.post(
        {"model": MODEL, "messages": user(MATH), "max_tokens": None, "stream": None,
         "include_routing": None}
    )  # fmt: skip
    assert response.status_code == 200, response.text
    assert response.json()["object"] == "chat.completion" and "fugu" not in response.json()
    assert stubs.workers[raw.headers["x-fugu-worker"]].bodies[-1]["max_tokens"] == 24


def test_a_null_include_usage_streams_without_usage(serve, stubs: Stubs) -> None:
    """`"stream_options": {"include_usage": null}` (clients that write every unset field
    as null) was a 400 "Input should be a valid boolean", where null means the default,
    as `"stream": null` does: the stream now comes, without the usage chunk."""
    running = serve(pool_for(stubs))
    body = {"model": MODEL, "messages": user(MATH), "stream": True,
            "stream_options": {"include_usage": None}}  # fmt: skip
    with httpx.stream("POST", f"{running.url}/v1/chat/completions", json=body) as response:
        assert response.status_code == 200, response.read()
        events = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    assert chunks and all(chunk["choices"] and "usage" not in chunk for chunk in chunks)
    text = "".join(chunk["choices"][0]["delta"].get("content") or "" for chunk in chunks)
    assert text.startswith("answer from ")


# --- per-request and server-wide worker selection ----------------------------------------------


def test_exclude_workers_routes_to_the_best_remaining_worker(
    serve, stubs: Stubs, family: RouterFamily
) -> None:
    running = serve(pool_for(stubs))
    first, second = ranking_for(family, MATH).ranking[:2]
    raw = running.client().chat.completions.with_raw_response.create(
        model=MODEL, messages=user(MATH), extra_body={"exclude_workers": [first]}
    )
    assert raw.headers["x-fugu-worker"] == second
    probabilities = json.loads(raw.headers["x-fugu-probabilities"])
    assert probabilities[first] == 0
    assert sum(probabilities.values()) == pytest.approx(1.0, abs=1e-3)
    assert not stubs.workers[first].bodies


def test_excluding_every_worker_or_an_unknown_one_is_a_clear_400(serve, stubs: Stubs) -> None:
    running = serve(pool_for(stubs))
    client = running.client()
    with pytest.raises(openai.BadRequestError) as error:
        client.chat.completions.create(
            model=MODEL, messages=user(MATH), extra_body={"exclude_workers": WORKERS}
        )
    assert error.value.body["code"] == "no_worker_left"
    assert "no worker is left" in error.value.body["message"]
    assert error.value.body["param"] == "exclude_workers"  # the parameter to change
    with pytest.raises(openai.BadRequestError) as error:
        client.chat.completions.create(
            model=MODEL, messages=user(MATH), extra_body={"exclude_workers": ["gpt-5"]}
        )
    assert "gpt-5" in error.value.body["message"] and "coder" in error.value.body["message"]
    assert error.value.body["param"] == "exclude_workers"
    with pytest.raises(openai.BadRequestError) as error:  # a typo is matched, as route does
        client.chat.completions.create(
            model=MODEL, messages=user(MATH), extra_body={"workers": ["Coder", "mathematicain"]}
        )
    meant = "(did you mean 'coder' for 'Coder', 'mathematician' for 'mathematicain'?)"
    assert meant in error.value.body["message"]
    with pytest.raises(openai.BadRequestError) as error:  # said as such, not as none left
        client.chat.completions.create(model=MODEL, messages=user(MATH), extra_body={"workers": []})
    assert error.value.body["message"].startswith("workers is empty; name one or more of: ")
    assert not any(stub.bodies for stub in stubs.workers.values())


def test_workers_allow_list(serve, stubs: Stubs, family: RouterFamily) -> None:
    running = serve(pool_for(stubs))
    client = running.client()
    for allowed in (["cheap-small"], ["cheap-small", "coder"]):
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=user(MATH), extra_body={"workers": allowed}
        )
        expected = ranking_for(family, MATH, tuple(allowed)).ranking[0]
        assert raw.headers["x-fugu-worker"] == expected
        probabilities = json.loads(raw.headers["x-fugu-probabilities"])
        assert {w for w, p in probabilities.items() if p > 0} == set(allowed)
    assert not stubs.workers["mathematician"].bodies


def test_server_wide_opt_out_is_never_routed_to(serve, stubs: Stubs, family: RouterFamily) -> None:
    favourite = ranking_for(family, MATH).ranking[0]
    running = serve(pool_for(stubs, opt_out=(favourite,)))
    client = running.client()
    for _ in range(3):
        raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=user(MATH))
        assert raw.headers["x-fugu-worker"] != favourite
    assert not stubs.workers[favourite].bodies
    with pytest.raises(openai.BadRequestError) as error:
        client.chat.completions.create(
            model=MODEL, messages=user(MATH), extra_body={"workers": [favourite]}
        )
    assert "opted out server-wide" in error.value.body["message"]
    assert running.health()["opt_out"] == [favourite]


def test_opt_outs_leaving_the_router_no_worker_are_refused_at_start(family: RouterFamily) -> None:
    """A pool may opt out of every worker the router knows (it may hold more workers); no
    test built such a router, so starting it anyway, each request then a 400 'allow at least
    one of: ' naming none, went unseen."""
    with pytest.raises(
        ValueError, match=r"^opt_out lists every worker \(.+\); leave at least one$"
    ):
        RouterService(family, family.worker_ids)
    assert RouterService(family, family.worker_ids[1:]).opt_out == family.worker_ids[1:]


def test_cost_weight_needs_a_router_family(serve, stubs: Stubs) -> None:
    running = serve(pool_for(stubs))
    with pytest.raises(openai.BadRequestError) as error:
        running.client().chat.completions.create(
            model=MODEL, messages=user(MATH), extra_body={"cost_weight": 0.5}
        )
    assert error.value.body["code"] == "cost_weight_unsupported"
    assert "--cost-weights" in error.value.body["message"]


@pytest.fixture(scope="module")
def router_family(tmp_path_factory: pytest.TempPathFactory) -> RouterFamily:
    root = tmp_path_factory.mktemp("family")
    config = PipelineConfig(
        model=tiny_config(root / "cache"),
        sft=SFTTrainingConfig(epochs=6, batch_size=16, learning_rate=0.05),
        rl=RLTrainingConfig(epochs=1, batch_size=16, learning_rate=0.01),
    )
    train_router_family(generated_records(), config, root / "family", [0.0, 10.0])
    return load_family_or_single(root / "family")


def test_cost_weight_picks_the_head_for_the_nearest_trained_weight(
    serve, stubs: Stubs, router_family: RouterFamily
) -> None:
    running = serve(pool_for(stubs), router=router_family)
    client = running.client()

    def routed(cost_weight: float | None) -> dict:
        extra: dict[str, Any] = {"include_routing": True}
        if cost_weight is not None:
            extra["cost_weight"] = cost_weight
        completion = client.chat.completions.create(
            model=MODEL, messages=user(MATH), extra_body=extra
        )
        return completion.model_extra["fugu"]

    assert routed(None)["cost_weight"] == 0.0
    assert routed(2.0)["cost_weight"] == 0.0
    expensive = routed(0.0)
    cheap = routed(8.0)
    assert cheap["cost_weight"] == 10.0
    # At lambda 10 the cheap worker's 0.1 cost beats the others' rewards on every prompt.
    assert cheap["worker"] == "cheap-small"
    assert expensive["worker"] == "mathematician"
    assert client.models.retrieve(MODEL).model_extra["cost_weights"] == [0.0, 10.0]
    with pytest.raises(openai.BadRequestError) as error:
        client.chat.completions.create(
            model=MODEL, messages=user(MATH), extra_body={"cost_weight": -1}
        )
    assert error.value.body["param"] == "cost_weight"
    # the decision log says which member answered each routed request
    assert [line["cost_weight"] for line in running.log_lines()] == [0.0, 0.0, 0.0, 10.0]


def test_fugu_lites_own_keys_never_reach_the_worker(
    serve, stubs: Stubs, router_family: RouterFamily
) -> None:
    """exclude_workers, workers, cost_weight and include_routing are fugu-lite's (the
    openai SDK's extra_body); OpenAI refuses a key it does not know ("Unrecognized request
    argument supplied"), so a remote worker sent one would refuse every request holding it.
    No test read a worker's body after a cost_weight: the stub takes any key."""
    running = serve(pool_for(stubs), router=router_family)
    own = {"exclude_workers": ["coder"], "workers": ["cheap-small", "mathematician"],
           "cost_weight": 8.0, "include_routing": True}  # fmt: skip
    raw = running.client().chat.completions.with_raw_response.create(
        model=MODEL, messages=user(MATH), extra_body=own
    )
    assert raw.parse().model_extra["fugu"]["cost_weight"] == 10.0  # each key was read
    sent = stubs.workers[raw.headers["x-fugu-worker"]].bodies[-1]
    assert sent["messages"] == user(MATH) and not own.keys() & sent.keys(), sent


# --- auth and secrets ---------------------------------------------------------------------------


def test_api_keys_are_required_when_configured(serve, stubs: Stubs) -> None:
    running = serve(pool_for(stubs), api_keys=[ENDPOINT_KEY, "sk-second-key-abcdef"])
    with pytest.raises(openai.AuthenticationError) as error:
        running.client(api_key="sk-wrong-key-000000").chat.completions.create(
            model=MODEL, messages=user(MATH)
        )
    assert error.value.body["code"] == "invalid_api_key"
    for headers in ({}, {"authorization": "Basic abc"}, {"authorization": "Bearer"}):
        response = running.post({"model": MODEL, "messages": user(MATH)}, headers=headers)
        assert response.status_code == 401
        assert response.headers["www-authenticate"] == "Bearer"  # RFC 9110: a 401 says how
        assert set(response.json()["error"]) >= {"message", "type", "param", "code"}
        assert ENDPOINT_KEY not in response.text
    for key in (ENDPOINT_KEY, "sk-second-key-abcdef"):
        completion = running.client(api_key=key).chat.completions.create(
            model=MODEL, messages=user(MATH)
        )
        assert completion.model == MODEL
    assert httpx.get(f"{running.url}/metrics").status_code == 401
    assert httpx.get(f"{running.url}/v1/models").status_code == 401
    assert httpx.get(f"{running.url}/v1/models/{MODEL}").status_code == 401
    assert "fugu_requests_total" in running.metrics(api_key=ENDPOINT_KEY)
    assert httpx.get(f"{running.url}/health").status_code == 200


def test_a_key_is_matched_as_it_is_and_its_scheme_in_any_case(serve, stubs: Stubs) -> None:
    """HTTP reads an authentication scheme in any case (`bearer KEY`, as some clients and
    proxies write it), a key only as it is: the same letters in another case, or a key
    with characters added or cut off, are other keys; a key under another scheme (`Basic
    KEY`) is refused, saying which scheme to use."""
    running = serve(pool_for(stubs), api_keys=[ENDPOINT_KEY])
    body = {"model": MODEL, "messages": user(MATH)}
    for scheme in ("bearer", "BEARER"):
        response = running.post(body, {"authorization": f"{scheme} {ENDPOINT_KEY}"})
        assert response.status_code == 200, response.text
    for key in (ENDPOINT_KEY.upper(), ENDPOINT_KEY.capitalize(), ENDPOINT_KEY + "0",
                ENDPOINT_KEY[:-1], ENDPOINT_KEY[:8]):  # fmt: skip
        response = running.post(body, {"authorization": f"Bearer {key}"})
        assert response.status_code == 401
        assert response.json()["error"]["message"] == "invalid API key"
    response = running.post(body, {"authorization": f"Basic {ENDPOINT_KEY}"})
    assert response.status_code == 401
    assert response.json()["error"]["message"] == (
        "the Authorization header must be `Bearer YOUR_KEY`"
    )
    assert sum(len(stub.bodies) for stub in stubs.workers.values()) == 2


def test_a_key_after_more_than_one_space_is_read() -> None:
    """HTTP's credentials may follow their scheme after one space or more (RFC 7235's
    `auth-scheme 1*SP token68`): `Bearer  KEY`, as a client joining its words by hand
    may write it, is the key KEY (no test sent more than one space: a key read with the
    spaces before it, refused as invalid, passed every test)."""
    checker = ApiKeyChecker([ENDPOINT_KEY])
    # spaces after the key are no part of it (reading them as its passed a mutation round)
    for header in (
        f"Bearer  {ENDPOINT_KEY}",
        f"bearer   {ENDPOINT_KEY}",
        f"Bearer {ENDPOINT_KEY} ",
    ):
        checker.check({"authorization": header})  # no 401
    with pytest.raises(ApiError) as refused:
        checker.check({"authorization": f"Bearer  {ENDPOINT_KEY[:-1]}"})
    assert refused.value.message == "invalid API key"


def test_a_refused_key_is_answered_in_openais_shape() -> None:
    """OpenAI answers a missing or wrong key with a 401 of type invalid_request_error and
    code invalid_api_key, saying `WWW-Authenticate: Bearer`; only the status, the code and
    the header were read, so another type (in a mutation round, authentication_error)
    passed every test."""
    checker = ApiKeyChecker([ENDPOINT_KEY])
    for headers in ({}, {"authorization": "Basic abcdef"}, {"authorization": "Bearer sk-bad-0"}):
        with pytest.raises(ApiError) as refused:
            checker.check(headers)
        error = refused.value
        assert (error.status, error.type, error.code) == (
            401,
            "invalid_request_error",
            "invalid_api_key",
        )
        assert error.headers == {"WWW-Authenticate": "Bearer"}


def test_a_bearer_header_with_no_key_after_it_is_told_the_headers_form() -> None:
    """`Authorization: Bearer` with no key after it (curl's `-H "Authorization: Bearer
    $KEY"` with KEY unset) is told the header's form; only its 401 status was read, so
    answering it "invalid API key", as if a wrong key had been sent, passed every test."""
    checker = ApiKeyChecker([ENDPOINT_KEY])
    for header in ("Bearer", "Bearer ", "bearer    "):
        with pytest.raises(ApiError) as refused:
            checker.check({"authorization": header})
        assert refused.value.message == "the Authorization header must be `Bearer YOUR_KEY`"


def test_an_empty_authorization_header_is_told_the_key_is_missing() -> None:
    """`Authorization:` with nothing in it (curl's -H "Authorization: $HEADER" with HEADER
    unset) sent no key: it is told so, as a request without the header is."""
    with pytest.raises(ApiError) as refused:
        ApiKeyChecker([ENDPOINT_KEY]).check({"authorization": ""})
    assert refused.value.message.startswith("missing API key: send it as `Authorization: Bearer")


def test_a_key_sent_in_another_apis_header_is_told_where_it_goes(serve, stubs: Stubs) -> None:
    """The openai SDK's AzureOpenAI client sends its key in an `api-key` header, Anthropic's
    clients in `x-api-key`: the 401 said only 'missing API key', as if none was sent; it now
    names the header it came in, which this server does not read."""
    running = serve(pool_for(stubs), api_keys=[ENDPOINT_KEY])
    for header in ("api-key", "x-api-key"):
        response = running.post({"model": MODEL, "messages": user(MATH)}, {header: ENDPOINT_KEY})
        assert response.status_code == 401
        assert response.json()["error"]["message"] == (
            "missing API key: send it as `Authorization: Bearer YOUR_KEY` (the openai SDK's "
            f"api_key); it was sent in the {header} header, which this server does not read"
        )
        models = httpx.get(f"{running.url}/v1/models", headers={header: ENDPOINT_KEY})
        assert models.status_code == 401 and header in models.json()["error"]["message"]
    assert not any(stub.bodies for stub in stubs.workers.values())


@pytest.mark.parametrize(
    "line", [f"Bearer {ENDPOINT_KEY}", f"Authorization: Bearer {ENDPOINT_KEY}", "BEARER sk-x-123"]
)
def test_keys_written_as_a_header_are_refused_not_taken_as_keys(
    line: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A key copied with its header ("Bearer sk-...") was split into two keys, and "Bearer"
    (six characters, long enough) was an API key of its own: any client sending
    `Authorization: Bearer Bearer` was let in. Such a file or variable is now refused."""
    keys_file = tmp_path / "keys.txt"
    keys_file.write_text(f"sk-first-key-abcdef\n{line}\n", encoding="utf-8")
    with pytest.raises(ApiKeyError) as error:
        load_api_keys(file=keys_file)
    word = line.split()[0]
    assert str(error.value) == (
        f"--api-keys-file {keys_file}: holds {word!r}, a word of the Authorization header, "
        "which would be accepted as an API key itself; give the keys alone (sk-..., not "
        "Bearer sk-...)"
    )
    monkeypatch.setenv("FUGU_TEST_ENDPOINT_KEYS", f"sk-first-key-abcdef,{line}")
    with pytest.raises(ApiKeyError, match=r"^--api-keys-env FUGU_TEST_ENDPOINT_KEYS: holds "):
        load_api_keys("FUGU_TEST_ENDPOINT_KEYS")
    keys_file.write_text(f"# {line}\nsk-bearer-token-abcdef\n", encoding="utf-8")
    assert load_api_keys(file=keys_file) == ["sk-bearer-token-abcdef"]


@pytest.mark.parametrize("value", ["", " , ", "# keys to come"])
def test_a_keys_variable_holding_no_key_is_refused(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A variable that is set but holds no key (commas alone, a comment) would give the
    endpoint no key, so that it asks none: it is refused as an empty one is (no test set
    one; only a keys file holding no key was tried)."""
    monkeypatch.setenv("FUGU_TEST_ENDPOINT_KEYS", value)
    with pytest.raises(ApiKeyError) as error:
        load_api_keys("FUGU_TEST_ENDPOINT_KEYS")
    assert str(error.value).startswith(
        "--api-keys-env FUGU_TEST_ENDPOINT_KEYS: the environment variable "
        "FUGU_TEST_ENDPOINT_KEYS is not set or empty; export it"
    )


def test_a_key_of_six_characters_is_taken_and_redacted(monkeypatch: pytest.MonkeyPatch) -> None:
    """Six characters is the shortest key taken (shorter ones are refused), and so the
    shortest secret redacted from what leaves the server."""
    monkeypatch.setenv("FUGU_TEST_ENDPOINT_KEYS", "zq7x5w")
    assert load_api_keys("FUGU_TEST_ENDPOINT_KEYS") == ["zq7x5w"]
    assert Redactor(["zq7x5w"])("the key zq7x5w leaked") == "the key [redacted] leaked"


def test_a_secret_holding_a_patterns_characters_is_redacted_as_written() -> None:
    """A key in standard base64 holds '+', '/' and '=': read as a pattern, its '+' would
    match "k3yyy..." and not the key itself (in a mutation round, the secrets joined
    unescaped passed every test)."""
    redact = Redactor(["k3y+base64/ab=="])
    assert (
        redact("sent k3y+base64/ab== and k3yyybase64/ab==")
        == "sent [redacted] and k3yyybase64/ab=="
    )


def test_a_secret_starting_with_another_is_redacted_whole() -> None:
    """Of two secrets where one begins the other (a key and a longer one made from it),
    the longer is redacted whole wherever it is: the shorter one matched first would leave
    the rest of the longer shown."""
    redact = Redactor(["sk-team-abcdef", "sk-team-abcdef-worker-2"])
    assert redact("sk-team-abcdef-worker-2 and sk-team-abcdef") == "[redacted] and [redacted]"
    assert redact.scrub({"error": ["sk-team-abcdef-worker-2"]}) == {"error": ["[redacted]"]}


def test_a_note_after_a_key_is_a_comment_not_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only a line starting with `#` was a comment: a note written after a key was split
    into keys, '#charlie-laptop' an API key any client could send, and '# a laptop' refused
    as keys shorter than 6 characters, a message that did not say the note was the cause."""
    keys_file = tmp_path / "keys.txt"
    keys_file.write_text(
        f"{ENDPOINT_KEY} #charlie-laptop\r\nsk-second-key-abcdef  # a laptop, rotate it\n"
        "sk-third#key-abcdef\n",
        encoding="utf-8",
    )
    assert load_api_keys(file=keys_file) == [
        ENDPOINT_KEY, "sk-second-key-abcdef", "sk-third#key-abcdef"
    ]  # fmt: skip
    monkeypatch.setenv("FUGU_TEST_ENDPOINT_KEYS", f"{ENDPOINT_KEY},#charlie-laptop")
    assert load_api_keys("FUGU_TEST_ENDPOINT_KEYS") == [ENDPOINT_KEY]


WRAPPED_IN_QUOTES = (
    "is wrapped in quotes, which every client would have to send with it (a .env file read "
    "by something that keeps them, as docker's --env-file does?)"
)


@pytest.mark.parametrize(
    ("value", "quoted"),
    [(f'"{ENDPOINT_KEY},sk-second-key-abcdef"', WRAPPED_IN_QUOTES),
     (f'"{ENDPOINT_KEY} sk-second-key-abcdef"', WRAPPED_IN_QUOTES),
     (f'  "{ENDPOINT_KEY},sk-second-key-abcdef"  ', WRAPPED_IN_QUOTES),
     (f'"{ENDPOINT_KEY},sk-second-key-abcdef" # alice', WRAPPED_IN_QUOTES),
     (f"'{ENDPOINT_KEY}'", WRAPPED_IN_QUOTES), (f'"{ENDPOINT_KEY}"', WRAPPED_IN_QUOTES),
     (f'sk-second-key-abcdef, "{ENDPOINT_KEY}"', WRAPPED_IN_QUOTES),
     (f'{ENDPOINT_KEY}"', "ends"), (f"'{ENDPOINT_KEY}", "starts"),
     (f'"{ENDPOINT_KEY}, sk-second-key-abcdef', "starts"),
     (f"sk-second-key-abcdef {ENDPOINT_KEY}'", "ends")],
)  # fmt: skip
def test_keys_wrapped_in_quotes_are_refused_not_taken_with_them(
    value: str, quoted: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """FUGU_API_KEYS="sk-..." in a .env file read by docker's --env-file (which keeps the
    quotes) made the quotes part of the key: serve started, and every client sending its
    key got 401 'invalid API key', nothing saying why. A key with a quote at one end alone
    is refused too (no test gave one: checking only one end passed a mutation round); it
    was told it "is wrapped in quotes", not which end the quote is at, as the workers'
    keys are told."""
    if quoted in ("starts", "ends"):
        quoted = (
            f"{quoted} with a quote, which every client would have to send with it (copied "
            "with it from a shell line or a .env file?)"
        )
    monkeypatch.setenv("FUGU_TEST_ENDPOINT_KEYS", value)
    with pytest.raises(ApiKeyError) as error:
        load_api_keys("FUGU_TEST_ENDPOINT_KEYS")
    assert str(error.value) == (
        f"--api-keys-env FUGU_TEST_ENDPOINT_KEYS: a key {quoted}; give the keys without quotes"
    )
    assert ENDPOINT_KEY not in str(error.value)
    keys_file = tmp_path / "keys.txt"
    keys_file.write_text(f"sk-first-key-abcdef\n{value}\n", encoding="utf-8")
    with pytest.raises(ApiKeyError) as error:
        load_api_keys(file=keys_file)
    assert str(error.value) == (
        f"--api-keys-file {keys_file}: a key {quoted}; give the keys without quotes"
    )


def test_a_key_no_client_can_send_is_refused(
    serve, stubs: Stubs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A key copied with a typographic dash ('sk\u2011...', from a web page or a document) was
    taken: serve started, the openai SDK could not send the key (a header is ASCII), and
    curl's bytes reached the server as other characters, a 401 'invalid API key'."""
    key = "sk\u2011fugu-endpoint-0123456789"
    running = serve(pool_for(stubs), api_keys=[ENDPOINT_KEY, key])
    sent = f"Bearer {key}".encode()  # as curl sends it
    assert httpx.get(f"{running.url}/v1/models", headers={"authorization": sent}).status_code == 401
    monkeypatch.setenv("FUGU_TEST_ENDPOINT_KEYS", f"{ENDPOINT_KEY},{key}")
    with pytest.raises(ApiKeyError) as error:
        load_api_keys("FUGU_TEST_ENDPOINT_KEYS")
    assert str(error.value) == (
        "--api-keys-env FUGU_TEST_ENDPOINT_KEYS: a key holds a character that is not ASCII (a "
        "typographic quote or dash copied with it?), which no client can send in its "
        "Authorization header; give the keys as ASCII"
    )
    keys_file = tmp_path / "keys.txt"
    keys_file.write_text(f"{key}\n", encoding="utf-8")
    with pytest.raises(ApiKeyError, match=r": a key holds a character that is not ASCII "):
        load_api_keys(file=keys_file)


def test_a_keys_file_saved_by_windows_tools_is_read_or_refused_saying_why(tmp_path: Path) -> None:
    """A keys file saved as UTF-8 with a BOM (Notepad's) had the BOM read into its first key,
    which no client sends: that key was refused as invalid with no word why. One saved as
    UTF-16 (Windows PowerShell's `>`) failed with "'utf-8' codec can't decode byte 0xff in
    position 0", naming neither the file nor what to do."""
    keys_file = tmp_path / "keys.txt"
    keys_file.write_bytes(f"\ufeff{ENDPOINT_KEY}\r\nsk-second-key-abcdef\r\n".encode())
    assert load_api_keys(file=keys_file) == [ENDPOINT_KEY, "sk-second-key-abcdef"]
    keys_file.write_bytes(f"{ENDPOINT_KEY}\r\n".encode("utf-16"))
    with pytest.raises(ApiKeyError) as error:
        load_api_keys(file=keys_file)
    assert str(error.value).startswith(f"--api-keys-file {keys_file}: not UTF-8 text (")
    assert str(error.value).endswith("PowerShell's `>`); re-save it as UTF-8")


def test_the_keys_options_help_says_to_give_the_keys_alone() -> None:
    """`serve --help` said only "one a line" and "comma-separated" of the endpoint's keys,
    while a key written with its header ('Bearer KEY', 'x-api-key: KEY') is refused at
    start; both options' help now says to give the keys alone."""
    shown = CliRunner().invoke(app, ["serve", "--help"], terminal_width=200)
    assert shown.exit_code == 0
    said = " ".join(shown.output.split())
    assert "API key(s), comma-separated, the keys alone (not 'Bearer KEY')." in said
    assert "one a line, the keys alone (not 'Bearer KEY' or 'x-api-key: KEY')." in said


@pytest.mark.parametrize(
    ("line", "word"),
    [
        (f"x-api-key: {ENDPOINT_KEY}", "x-api-key:"),
        (f"api-key: {ENDPOINT_KEY}", "api-key:"),
        (f"Authorization:Bearer {ENDPOINT_KEY}", "Authorization:Bearer"),
        (f"X-Auth-Token: {ENDPOINT_KEY}", "X-Auth-Token:"),  # any header's name
        (f"x-api-key:{ENDPOINT_KEY}", "x-api-key:"),  # no space: named without the key
        (f"Authorization:{ENDPOINT_KEY}", "Authorization:"),
    ],
)
def test_keys_written_with_another_header_are_refused_not_taken_as_keys(
    line: str, word: str, tmp_path: Path
) -> None:
    """Only the words 'Bearer' and 'Authorization:' were refused: a key copied with another
    API's header ('x-api-key: sk-...', Anthropic's; 'api-key: sk-...', Azure's) or with no
    space after the colon made the header's name an API key of its own, which any client
    could send ('Authorization: Bearer x-api-key:'). A key written right after the colon
    ('x-api-key:sk-...') was refused showing it whole, the secret in serve's error: only the
    header's name is shown now."""
    keys_file = tmp_path / "keys.txt"
    keys_file.write_text(f"sk-first-key-abcdef\n{line}\n", encoding="utf-8")
    with pytest.raises(ApiKeyError) as error:
        load_api_keys(file=keys_file)
    assert ENDPOINT_KEY not in str(error.value)
    assert str(error.value) == (
        f"--api-keys-file {keys_file}: holds {word!r}, a header's name, which would be accepted "
        "as an API key itself; give the keys alone (sk-..., not Bearer sk-...)"
    )


def test_api_keys_come_from_a_file_one_a_line_and_an_env_var_comma_separated(
    serve, stubs: Stubs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys_file = tmp_path / "keys.txt"
    keys_file.write_text(f"# the endpoint's keys\n{ENDPOINT_KEY}\n\nsk-second-key-abcdef\n")
    assert load_api_keys(file=keys_file) == [ENDPOINT_KEY, "sk-second-key-abcdef"]
    monkeypatch.setenv("FUGU_TEST_ENDPOINT_KEYS", "sk-env-key-one-1234,sk-env-key-two-5678")
    keys = load_api_keys("FUGU_TEST_ENDPOINT_KEYS", keys_file)
    assert keys == ["sk-env-key-one-1234", "sk-env-key-two-5678", ENDPOINT_KEY,
                    "sk-second-key-abcdef"]  # fmt: skip
    running = serve(pool_for(stubs), api_keys=keys)
    for key in keys:
        completion = running.client(api_key=key).chat.completions.create(
            model=MODEL, messages=user(MATH)
        )
        assert completion.model == MODEL
    with pytest.raises(openai.AuthenticationError):
        running.client(api_key="# the endpoint's keys").chat.completions.create(
            model=MODEL, messages=user(MATH)
        )


def test_the_secrets_redacted_are_the_worker_keys_that_are_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A worker with no api_key_env, or whose variable is unset or empty, adds no secret to
    redact (serve refuses an unset one first, but a program builds the app itself)."""
    monkeypatch.setenv("FUGU_TEST_WORKER_KEY", WORKER_KEY)
    monkeypatch.setenv("FUGU_EMPTY_WORKER_KEY", "")
    monkeypatch.delenv("FUGU_UNSET_WORKER_KEY", raising=False)
    variables = ["FUGU_TEST_WORKER_KEY", None, "FUGU_EMPTY_WORKER_KEY", "FUGU_UNSET_WORKER_KEY"]
    assert worker_secrets(variables) == [WORKER_KEY]


def test_worker_keys_never_reach_responses_or_logs(
    serve, stubs: Stubs, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("FUGU_TEST_WORKER_KEY", WORKER_KEY)
    running = serve(
        pool_for(stubs, overrides={"coder": {"api_key_env": "FUGU_TEST_WORKER_KEY"}}),
        log_content=True,
    )
    stubs.workers["coder"].mode = "leak"  # its 500 echoes the Authorization header back
    for stream in (False, True):
        body = {"model": MODEL, "messages": user(CODE), "workers": ["coder"], "stream": stream}
        response = running.post(body)
        assert response.status_code == 502
        assert WORKER_KEY not in response.text
        assert "coder" in response.json()["error"]["message"]
    assert stubs.workers["coder"].auth_headers[-1] == f"Bearer {WORKER_KEY}"  # it was sent
    # an answer that holds the key (a proxy's debug echo) goes out with the key redacted,
    # whole or streamed; nothing else of it is changed
    stubs.workers["coder"].mode = "ok"
    stubs.workers["coder"].reply = f"the key I was sent: {WORKER_KEY}"
    client, to_coder = running.client(), {"workers": ["coder"]}
    answer = client.chat.completions.create(model=MODEL, messages=user(CODE), extra_body=to_coder)
    chunks = client.chat.completions.create(
        model=MODEL, messages=user(CODE), stream=True, extra_body=to_coder
    )
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert answer.choices[0].message.content == streamed == "the key I was sent: [redacted]"
    # a conversation holding the key (a user pasting it in) is logged with it redacted
    pasted = user(f"is {WORKER_KEY} the coder's key?")
    client.chat.completions.create(model=MODEL, messages=pasted, extra_body=to_coder)
    running.state.log.flush()
    assert WORKER_KEY not in running.settings.log_requests.read_text()
    assert running.log_lines()[-1]["messages"] == user("is [redacted] the coder's key?")
    assert WORKER_KEY not in caplog.text
    assert WORKER_KEY not in running.metrics()


# --- the decision log ---------------------------------------------------------------------------


def test_decision_log_lines_are_ready_to_become_training_records(
    serve, stubs: Stubs, family: RouterFamily
) -> None:
    running = serve(pool_for(stubs))
    messages = [{"role": "system", "content": "be brief"}, *user("secret plans for " + MATH)]
    running.client().chat.completions.create(model=MODEL, messages=messages)
    [line] = running.log_lines()
    record = RewardRecord(
        prompt=[ChatMessage(**m) for m in messages],
        split="train",
        worker_ids=line["worker_ids"],
        rewards=[1.0 if w == line["worker"] else 0.0 for w in line["worker_ids"]],
    )
    assert line["prompt_hash"] == record.prompt_hash
    assert line["worker_ids"] == WORKERS
    assert sum(line["probabilities"]) == pytest.approx(1.0, abs=1e-5)
    assert line["outcome"] == "ok" and line["status"] == 200
    prompt_tokens = sum(count_tokens(m["content"]) for m in messages)
    assert line["usage"] == {"prompt_tokens": prompt_tokens, "completion_tokens": 3}
    assert line["cost"] == pytest.approx((prompt_tokens * 1.0 + 3 * 2.0) / 1e6)
    assert line["latency_s"] >= line["routing_latency_s"] > 0
    assert "secret plans" not in json.dumps(line) and "messages" not in line

    with_content = serve(pool_for(stubs), log_content=True)
    with_content.client().chat.completions.create(model=MODEL, messages=messages)
    [line] = with_content.log_lines()
    assert line["messages"] == messages


def test_a_decision_log_line_holds_the_routing_the_client_was_answered_with(
    serve, stubs: Stubs
) -> None:
    """The line's probabilities aligned with its worker_ids, its ranking, time (UTC) and
    latencies (seconds) are those of the request, as the README says."""
    running = serve(pool_for(stubs))
    for stub in stubs.workers.values():
        stub.latency_s = 0.3
    started, before = time.perf_counter(), datetime.now(UTC)
    completion = running.client().chat.completions.create(
        model=MODEL, messages=user(MATH), extra_body={"include_routing": True}
    )
    elapsed, after = time.perf_counter() - started, datetime.now(UTC)
    routing = completion.model_extra["fugu"]
    [line] = running.log_lines()
    assert dict(zip(line["worker_ids"], line["probabilities"], strict=True)) == pytest.approx(
        routing["probabilities"], abs=1e-6
    )
    assert line["ranking"] == routing["ranking"]
    assert (line["model"], line["chosen"], line["worker"]) == (
        MODEL,
        routing["chosen"],
        routing["worker"],
    )
    assert before <= datetime.fromisoformat(line["time"]) <= after
    assert line["routing_latency_s"] == pytest.approx(routing["routing_ms"] / 1000, abs=1e-3)
    assert 0.3 <= line["latency_s"] <= elapsed


def strict_json(line: str) -> dict:
    """A line as a strict JSON parser (jq) reads it: no NaN or Infinity."""

    def refused(constant: str) -> None:
        raise ValueError(f"{constant} is no JSON")

    return json.loads(line, parse_constant=refused)  # type: ignore[no-any-return]


def test_a_cost_too_large_for_a_number_is_null_and_its_price_named(
    serve, stubs: Stubs, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker price near 1e308 made a request's cost inf: the decision log wrote
    `Infinity`, which jq refuses, and an include_routing answer was a 500. The cost is
    unknown (null) now, streamed or not, and serve says at its start which price it is."""
    huge = {"input_price_per_mtok": 1e308, "output_price_per_mtok": 1e308}
    running = serve(pool_for(stubs, overrides=dict.fromkeys(stubs.workers, huge)))
    assert "input_price_per_mtok is 1e+308 USD per million tokens, too large" in caplog.text
    answer = running.post({**VALID, "include_routing": True})
    assert answer.status_code == 200 and answer.json()["fugu"]["cost"] is None
    assert running.post({**VALID, "stream": True}).status_code == 200
    running.state.log.flush()
    lines = running.settings.log_requests.read_text().splitlines()
    assert [strict_json(line)["cost"] for line in lines] == [None, None]
    assert all(math.isfinite(c) for _, c in metric_samples(running.metrics(), "fugu_cost_total"))


def test_a_server_that_could_not_start_stops_its_decision_log_thread(
    stubs: Stubs, family: RouterFamily, checkpoint: Path, tmp_path: Path
) -> None:
    """A start that failed (a pool that could not start) stopped the batcher but left the
    decision log's writer thread running, one more for each app tried in the process."""
    settings = ServeSettings(checkpoint=checkpoint, log_requests=tmp_path / "decisions.jsonl")
    server = create_app(settings, family=family, pool_config=pool_for(stubs)).state.fugu
    writer = server.log._thread

    async def failing_start() -> None:
        raise RuntimeError("the pool could not start")

    server.pool.__aenter__ = failing_start
    with pytest.raises(RuntimeError, match="could not start"):
        asyncio.run(server.start())
    writer.join(5)
    assert not writer.is_alive()


# uvicorn ends its thread with sys.exit(3) on a failed start (threading ignores a SystemExit)
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_server_thread_whose_app_could_not_start_says_why_without_waiting_out_its_timeout(
    stubs: Stubs, family: RouterFamily, checkpoint: Path
) -> None:
    """ServerThread (tests, benches, `make demo`) ends its wait for the server at once when
    uvicorn's thread ends, saying the app's own startup error: no test started an app that
    fails, so waiting out the whole startup timeout instead (300 s by default), or saying
    "see the log above" for the reason, passed every test."""
    app = create_app(
        ServeSettings(checkpoint=checkpoint), family=family, pool_config=pool_for(stubs)
    )

    async def failing_start() -> None:
        raise RuntimeError("the pool could not start")

    app.state.fugu.pool.__aenter__ = failing_start
    # far longer than a failed start takes here, loaded or not; waited out, it says so
    with pytest.raises(RuntimeError) as refused:
        ServerThread(app, startup_timeout_s=30).start()
    assert str(refused.value) == "fugu-lite did not start: the pool could not start"
