"""The stub worker as a client sees it: its answers read by the official `openai` SDK (its
own parser, streamed or not) and its answers to requests it cannot take."""

from __future__ import annotations

from collections.abc import Iterator

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
