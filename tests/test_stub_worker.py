"""The stub worker as a client sees it: its answers read by the official `openai` SDK (its
own parser, streamed or not) and its answers to requests it cannot take."""

from __future__ import annotations

from collections.abc import Iterator

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
