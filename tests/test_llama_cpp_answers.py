"""A local worker's answers put in OpenAI's form (llama_cpp_answers), each function on its
own: only the real-server tests (integration, minutes) reached them. The answers are shaped
as llama-cpp-python's server gives them (llama_chat_format's function-calling streams)."""

from __future__ import annotations

import copy
import math
from typing import Any

from fugu_lite.workers.config import WorkerConfig
from fugu_lite.workers.llama_cpp_answers import named_once, one_call_style, top_logprobs_as_asked
from fugu_lite.workers.results import VERY_UNLIKELY_LOGPROB
from fugu_lite.workers.streams import chunk_shaper

ARGUMENTS = '{"a": 1, "b": 2}'


def tool_call(name: str = "add", index: int = 0, arguments: str = ARGUMENTS) -> dict[str, Any]:
    return {
        "index": index,
        "id": f"call__{index}_{name}_cmpl-1",
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }


def completion_with_a_call() -> dict[str, Any]:
    """A completion of a request with tools, as llama.cpp's server gives it: the call in
    both calling styles."""
    message = {
        "role": "assistant",
        "content": None,
        "function_call": {"name": "add", "arguments": ARGUMENTS},
        "tool_calls": [tool_call()],
    }
    choice = {"index": 0, "message": message, "finish_reason": "tool_calls", "logprobs": None}
    return {"id": "chatcmpl-1", "object": "chat.completion", "choices": [choice]}


def call_delta(arguments: str, calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A stream chunk carrying part of a call, as llama.cpp's server streams it: the call's
    id, type and name repeated in every delta, the legacy function_call beside it."""
    delta = {
        "role": None,
        "content": None,
        "function_call": {"name": "add", "arguments": arguments},
        "tool_calls": calls if calls is not None else [tool_call(arguments=arguments)],
    }
    choice = {"index": 0, "finish_reason": None, "logprobs": None, "delta": delta}
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [choice]}


def test_a_call_is_given_in_the_calling_style_of_its_request() -> None:
    """A request with tools gets `tool_calls` alone and finish_reason "tool_calls"; one with
    the deprecated `functions` gets `function_call` alone and finish_reason "function_call",
    in a completion's message and in a stream's delta."""
    for legacy in (False, True):
        [choice] = one_call_style(completion_with_a_call(), legacy=legacy)["choices"]
        [chunk_choice] = one_call_style(call_delta(ARGUMENTS), legacy=legacy)["choices"]
        for part in (choice["message"], chunk_choice["delta"]):
            if legacy:
                assert "tool_calls" not in part
                assert part["function_call"] == {"name": "add", "arguments": ARGUMENTS}
            else:
                assert "function_call" not in part
                assert part["tool_calls"] == [tool_call()]
        assert choice["finish_reason"] == ("function_call" if legacy else "tool_calls")
        assert chunk_choice["finish_reason"] is None


def test_an_answer_that_is_no_completion_is_left_as_it_is() -> None:
    """What a worker's answer lacks or holds wrongly (choices, a choice's message or delta,
    a token's logprobs) is for the completion's parser to say; each reshaping leaves it as
    it came rather than fail on it. Only one_call_style was tried, on missing parts: a
    reshaping that crashed on a chunk's choice without a delta, a message that is text, or
    logprobs, their content, a token or its top_logprobs of the wrong type passed every
    test; each crashed with an AttributeError on a choice that is no object, and
    named_once on a delta or a tool call that is none."""
    for payload in (
        {"error": {"message": "model is loading"}},
        {"choices": None},
        {"choices": [{"index": 0, "finish_reason": "stop"}]},
        {"choices": [{"index": 0, "message": None, "finish_reason": "stop"}]},
        {"choices": [{"index": 0, "message": "4", "finish_reason": "stop"}]},
        {"choices": [{"index": 0, "logprobs": {"content": [None, "4", {"top_logprobs": 1}]}}]},
        {"choices": [{"index": 0, "logprobs": ["4"]}, {"index": 1, "logprobs": {"content": 4}}]},
        {"choices": ["4", None]},
        {"choices": [{"index": 0, "delta": [{"content": "4"}]}]},
    ):
        for legacy in (False, True):
            assert one_call_style(copy.deepcopy(payload), legacy=legacy) == payload
        assert top_logprobs_as_asked(copy.deepcopy(payload), 0) == payload
        assert named_once(copy.deepcopy(payload), set()) == payload
    calls_no_objects = {"choices": [{"index": 0, "delta": {"tool_calls": ["4", None]}}]}
    named: set[tuple[Any, Any]] = set()
    for _ in range(2):  # a call's second delta is the one cut
        assert named_once(copy.deepcopy(calls_no_objects), named) == calls_no_objects


def token(chosen: float, *alternatives: float) -> dict[str, Any]:
    """A token's logprobs with the chosen token among its top_logprobs, whether or not it
    is one of the most likely asked, as llama-cpp-python's server gives them (it adds the
    chosen token last, by a dict update; here it comes first, which no reshaping relies on)."""
    top = [{"token": "chosen", "logprob": chosen}]
    top += [{"token": f"t{n}", "logprob": value} for n, value in enumerate(alternatives)]
    return {"token": "chosen", "logprob": chosen, "top_logprobs": top}


def logprobs_chunk(*tokens: dict[str, Any]) -> dict[str, Any]:
    choice = {"index": 0, "delta": {"content": "x"}, "logprobs": {"content": list(tokens)}}
    return {"choices": [choice]}


def top_values(payload: dict[str, Any]) -> list[list[float]]:
    content = payload["choices"][0]["logprobs"]["content"]
    return [[entry["logprob"] for entry in each["top_logprobs"]] for each in content]


def test_top_logprobs_hold_the_most_likely_tokens_asked_most_likely_first() -> None:
    """llama.cpp adds the chosen token to a token's top_logprobs when it is not among the N
    asked (N + 1 alternatives, one for top_logprobs 0); they hold the N most likely now,
    the most likely first, as OpenAI's do (none for 0)."""
    unlikely = token(-3.0, -0.5, -1.0)  # the chosen one is not among the 2 most likely
    likely = token(-0.1, -2.0, -2.5)  # it is, and the third is left out
    payload = logprobs_chunk(copy.deepcopy(unlikely), copy.deepcopy(likely))
    assert top_values(top_logprobs_as_asked(payload, 2)) == [[-0.5, -1.0], [-0.1, -2.0]]
    alone = logprobs_chunk(copy.deepcopy(unlikely))
    assert top_values(top_logprobs_as_asked(alone, 0)) == [[]]
    few = logprobs_chunk(token(-0.1, -2.0))  # no more than asked: as it came
    assert top_values(top_logprobs_as_asked(few, 5)) == [[-0.1, -2.0]]


def test_top_logprobs_no_more_than_asked_are_put_most_likely_first_too() -> None:
    """llama-cpp-python keys a token's top_logprobs by their text, so tokens of one text
    (byte tokens of an emoji or a CJK character, each decoded to "") are one entry, at the
    first one's place with the last one's logprob: fewer than asked, out of order, and they
    were passed on so (only lists longer than asked were sorted)."""
    top = [{"token": "", "logprob": -4.0}, {"token": "x", "logprob": -1.0}]
    for asked in (2, 3):
        payload = logprobs_chunk({"token": "x", "logprob": -1.0, "top_logprobs": list(top)})
        assert top_values(top_logprobs_as_asked(payload, asked)) == [[-1.0, -4.0]]


def test_a_logprob_json_cannot_hold_is_the_least_likely_and_none_asked_cuts_none() -> None:
    """A NaN logprob reaches top_logprobs_as_asked as null (json_safe's): it is the least
    likely, cut first; and top_logprobs are cut only to a number asked. In a mutation round
    of llama_cpp_answers, a null taken as the most likely (kept over real ones) and a cut
    without a number asked (a TypeError) passed every test."""
    local = WorkerConfig(id="w", model="m", local={"gguf": "x.gguf"})
    shape = chunk_shaper(local, {"top_logprobs": 1})
    assert top_values(shape(logprobs_chunk(token(-3.0, math.nan, -0.5)))) == [[-0.5]]
    unasked = logprobs_chunk(token(-3.0, -0.5, -1.0))
    assert top_logprobs_as_asked(copy.deepcopy(unasked), None) == unasked


def test_a_chunk_without_logprobs_is_left_as_it_is() -> None:
    """A stream's last chunk (its finish_reason) carries `logprobs: null` although the
    request asked for them; it is passed on as it came."""
    last = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop", "logprobs": None}]}
    assert top_logprobs_as_asked(copy.deepcopy(last), 2) == last


def test_a_streamed_calls_id_type_and_name_are_in_its_first_delta_only() -> None:
    """llama.cpp repeats a streamed call's id, type and name (and a function_call's name) in
    every delta, and clients join what the deltas hold (the openai SDK's stream helper
    named the tool "addaddadd..."); they are in each call's first delta only now, its
    arguments in every one."""
    named: set[tuple[Any, Any]] = set()
    opening = named_once(call_delta('{"a": 1'), named)["choices"][0]["delta"]
    assert opening["tool_calls"] == [tool_call(arguments='{"a": 1')]
    assert opening["function_call"] == {"name": "add", "arguments": '{"a": 1'}
    following = named_once(call_delta(', "b": 2}'), named)["choices"][0]["delta"]
    assert following["tool_calls"] == [{"index": 0, "function": {"arguments": ', "b": 2}'}}]
    assert following["function_call"] == {"arguments": ', "b": 2}'}
    # A second call of the same answer (its own index) is named in its own first delta.
    second = named_once(call_delta("{", [tool_call("mul", 1, "{")]), named)
    assert second["choices"][0]["delta"]["tool_calls"] == [tool_call("mul", 1, "{")]


def test_a_local_workers_stream_chunks_go_through_each_reshaping_one_stream_long() -> None:
    """chunk_shaper, which a stream's chunks go through, was reached by the real-server
    tests alone (integration, minutes): leaving top_logprobs_as_asked out of it, or
    starting `named` over at each chunk (every delta naming its call again: the openai
    SDK's stream helper named the tool "addaddadd..."), passed every unit test. A local
    worker's chunks name each call once over the whole stream and are cut to the
    top_logprobs asked; a remote worker's have the numbers JSON cannot hold replaced and are
    otherwise left as sent."""
    local = WorkerConfig(id="w", model="m", local={"gguf": "x.gguf"})
    remote = WorkerConfig(id="r", model="m", base_url="http://127.0.0.1:9/v1")
    body = {"tools": [{"type": "function", "function": {"name": "add"}}], "top_logprobs": 1}
    shape = chunk_shaper(local, body)
    opening = shape(call_delta('{"a": 1'))["choices"][0]["delta"]
    assert opening == {
        "role": None,
        "content": None,
        "tool_calls": [tool_call(arguments='{"a": 1')],
    }
    following = shape(call_delta(', "b": 2}'))["choices"][0]["delta"]
    assert following["tool_calls"] == [{"index": 0, "function": {"arguments": ', "b": 2}'}}]
    cut = shape(logprobs_chunk(token(-3.0, -0.5, -1.0)))
    assert top_values(cut) == [[-0.5]]
    ruled_out = token(-0.1, -math.inf)
    as_sent = chunk_shaper(remote, body)(logprobs_chunk(copy.deepcopy(ruled_out)))
    assert top_values(as_sent) == [[-0.1, VERY_UNLIKELY_LOGPROB]]
    assert (
        chunk_shaper(remote, body)(call_delta("{"))["choices"][0]["delta"]
        == (call_delta("{")["choices"][0]["delta"])
    )


def test_each_choices_call_is_named_in_its_own_first_delta() -> None:
    """A stream of several choices (`n: 2`) numbers each choice's calls from 0; a call is
    one choice's, so each choice's first delta names its call. In a mutation round of
    llama_cpp_answers, a call known by its index alone (the second choice's call taken for
    the first's, its id and name cut) passed every test."""
    chunk = call_delta('{"a": 1')
    chunk["choices"].append({**copy.deepcopy(chunk["choices"][0]), "index": 1})
    named: set[tuple[Any, Any]] = set()
    first, second = named_once(chunk, named)["choices"]
    for choice in (first, second):
        assert choice["delta"]["tool_calls"] == [tool_call(arguments='{"a": 1')]
        assert choice["delta"]["function_call"]["name"] == "add"


def test_a_logprob_of_zero_is_the_most_likely_and_a_number_asked_must_be_whole() -> None:
    """A certain token's logprob comes as the JSON number 0, which Python reads as an int,
    not a float: it is a logprob like any other, the most likely. A top_logprobs asked that
    is no whole number leaves the list as it came (it cannot cut a list). In a mutation
    round of llama_cpp_answers, an int logprob taken for none (the least likely, cut first)
    and a cut at any number asked but None (a TypeError for 2.5) passed every test."""
    certain = {"token": "x", "logprob": 0, "top_logprobs": [
        {"token": "y", "logprob": -0.5}, {"token": "x", "logprob": 0}]}  # fmt: skip
    payload = logprobs_chunk(copy.deepcopy(certain))
    assert top_values(top_logprobs_as_asked(payload, 1)) == [[0]]
    for unwhole in (2.5, "2"):
        as_came = logprobs_chunk(copy.deepcopy(certain))
        assert top_logprobs_as_asked(copy.deepcopy(as_came), unwhole) == as_came
