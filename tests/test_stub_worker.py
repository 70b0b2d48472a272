"""The stub worker as a client sees it: its answers read by the official `openai` SDK (its
own parser, streamed or not) and its answers to requests it cannot take."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest

from fugu_lite.testing.stub_worker import StubWorker

USER = [{"role": "user", "content": "what is two plus two"}]


@pytest.fixture
def stub() -> Iterator[StubWorker]:
    with StubWorker() as server:
        yield server


def sdk(stub: StubWorker) -> openai.OpenAI:
    return openai.OpenAI(base_url=stub.base_url, api_key="unused", max_retries=0)


def test_a_reply_cut_at_the_token_limit_says_so_streamed_as_not(stub: StubWorker) -> None:
    stub.finish_reason = "length"
    client = sdk(stub)
    whole = client.chat.completions.create(model="stub-model", messages=USER)
    chunks = list(client.chat.completions.create(model="stub-model", messages=USER, stream=True))
    reasons = [choice.finish_reason for chunk in chunks for choice in chunk.choices]
    assert whole.choices[0].finish_reason == "length"
    assert reasons[-1] == "length" and set(reasons[:-1]) == {None}


@pytest.mark.parametrize(
    ("body", "named"),
    [
        (b"{not json", "not JSON"),
        (b"[1, 2]", "a JSON object"),
        (b'{"model": "stub-model"}', "messages"),
        (b'{"messages": "hi"}', "messages"),
        (b'{"messages": [1]}', "messages"),
        (
            b'{"messages": [{"role": "user", "content": "x"}], "stream_options": "yes"}',
            "stream_options",
        ),
    ],
)
def test_a_malformed_request_is_the_clients_400_naming_what_is_wrong(
    stub: StubWorker, body: bytes, named: str
) -> None:
    stub.fail_next("500")
    headers = {"content-type": "application/json"}
    response = httpx.post(f"{stub.base_url}/chat/completions", content=body, headers=headers)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and named in error["message"]
    # Refused before anything was scripted: the next request still gets the queued failure.
    assert stub.bodies == [] and list(stub.failures) == ["500"]


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("latency_s", -1.0),
        ("retry_after_s", -0.5),
        ("hang_s", float("nan")),
        ("stream_chunk_delay_s", float("inf")),
    ],
)
def test_a_bad_option_is_refused_naming_it(option: str, value: float) -> None:
    """A negative, NaN or infinite time was taken as given: a negative latency as none, a
    Retry-After of "-0.5" sent to the client, a NaN hang_s as no hang at all."""
    with pytest.raises(ValueError, match=f"{option} must be a number of seconds >= 0"):
        StubWorker(**{option: value})


def chat(stub: StubWorker, **body: object) -> httpx.Response:
    """One chat request to the stub, as raw HTTP (what it sends, before any SDK reads it)."""
    return httpx.post(f"{stub.base_url}/chat/completions", json={"messages": USER, **body})


def test_a_reply_in_parts_is_the_thinking_then_the_reply_in_two_text_parts(
    stub: StubWorker,
) -> None:
    """The "parts" mode is what clients' part joining is tested on: a plain answer in its
    place passed those tests all the same."""
    stub.reply, stub.mode = "The answer is 4.", "parts"
    content = chat(stub).json()["choices"][0]["message"]["content"]
    assert [part["type"] for part in content] == ["thinking", "text", "text"]
    assert "".join(part["text"] for part in content[1:]) == "The answer is 4."


def test_a_reasoning_reply_cut_while_thinking_has_null_content_beside_its_draft(
    stub: StubWorker,
) -> None:
    """llama.cpp and vLLM send `content: null` for a reply cut inside its thinking, not ''."""
    stub.reply, stub.mode = "", "reasoning"
    message = chat(stub).json()["choices"][0]["message"]
    assert message["content"] is None and message["reasoning_content"].endswith("Answer: A")


def test_usage_counts_whitespace_tokens_across_lines(stub: StubWorker) -> None:
    """Line breaks and runs of spaces separate tokens as a single space does."""
    stub.reply = "two\nlines  here"
    messages = [{"role": "user", "content": "one\n\ntwo   three"}]
    response = httpx.post(f"{stub.base_url}/chat/completions", json={"messages": messages})
    usage = response.json()["usage"]
    assert (usage["prompt_tokens"], usage["completion_tokens"], usage["total_tokens"]) == (3, 3, 6)


def test_the_peak_of_requests_in_flight_is_kept_after_they_end() -> None:
    """max_in_flight is the peak (two at once), not the count at the last request's arrival
    (one, asked alone after them)."""
    with StubWorker(latency_s=0.5) as stub, ThreadPoolExecutor(2) as pool:
        together = list(pool.map(lambda _: chat(stub).status_code, range(2)))
        alone = chat(stub).status_code
    assert together == [200, 200] and alone == 200
    assert (stub.max_in_flight, stub.in_flight) == (2, 0)


def test_a_hang_ends_with_a_503_when_the_stub_stops() -> None:
    """Stopping the stub ends a hang with its 503 (not the connection cut when uvicorn's
    graceful shutdown gives up on it)."""
    stub = StubWorker(mode="hang", hang_s=60).start()
    with ThreadPoolExecutor(1) as pool:
        answer = pool.submit(chat, stub)
        deadline = time.monotonic() + 20
        while not stub.in_flight and time.monotonic() < deadline:
            time.sleep(0.05)
        stub.stop()
        response = answer.result(timeout=30)
    assert response.status_code == 503
    assert response.json()["error"]["message"] == "stub stopped while hanging"


def test_a_context_refusal_is_openais_400_naming_the_limit(stub: StubWorker) -> None:
    """Clients tell a prompt over the context apart by its code, as OpenAI and llama.cpp send
    it; the stub's refusal without it passed every test that leans on it."""
    stub.context_tokens, stub.mode = 64, "context"
    response = chat(stub)
    error = response.json()["error"]
    assert (response.status_code, error["code"]) == (400, "context_length_exceeded")
    assert "maximum context length is 64 tokens" in error["message"]


def test_a_stream_without_usage_has_none_even_when_asked(stub: StubWorker) -> None:
    """ "no_usage" is a server that never reports usage: streamed, include_usage changes
    nothing (a final usage chunk was sent all the same)."""
    stub.mode = "no_usage"
    options = {"include_usage": True}
    response = chat(stub, stream=True, stream_options=options)
    events = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]" and len(events) > 2
    assert not any("usage" in json.loads(event) for event in events[:-1])


@pytest.mark.parametrize(("max_tokens", "completion"), [(10, 10), (None, 16)])
def test_vllms_context_refusal_asks_for_more_than_the_limit(
    stub: StubWorker, max_tokens: int | None, completion: int
) -> None:
    """A short prompt is refused all the same, so its numbers are made to go over the limit:
    the completion the request asked for (16 when it names none, vLLM's default) and a prompt
    filling the rest."""
    stub.context_tokens, stub.mode = 100, "vllm_context"
    message = chat(stub, max_tokens=max_tokens).json()["message"]
    assert (
        f"However, you requested 101 tokens ({101 - completion} in the messages, {completion} "
        "in the completion)"
    ) in message


def test_an_unknown_failure_mode_is_refused_before_any_is_queued(stub: StubWorker) -> None:
    with pytest.raises(ValueError, match="unknown stub mode '502'; use one of ok, 500, 503"):
        stub.fail_next("500", "502")
    assert list(stub.failures) == []
