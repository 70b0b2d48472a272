"""`fugu-lite serve` refusing bad requests: each gets a clear OpenAI-shaped 4xx naming what
was wrong (invalid parameters, tools, sizes, routes), counted in the metrics and raised by
the openai SDK as its exceptions (server_support.py starts the server)."""

from __future__ import annotations

import gzip
import json
import logging
import math
import re
import socket
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from pydantic import ValidationError
from server_support import (
    MODEL,
    VALID,
    Running,
    Stubs,
    metric_value,
    pool_for,
    user,
    wait_until,
)

from fugu_lite.router_family import RouterFamily
from fugu_lite.server import request_parsing
from fugu_lite.server.api_error import ApiError
from fugu_lite.server.app import ServeSettings, create_app
from fugu_lite.server.chat_request import ChatCompletionRequest
from fugu_lite.server.thread import ServerThread

pytestmark = pytest.mark.timeout(120)


# --- bad input ----------------------------------------------------------------------------------

TOOL = {"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}
BAD_INPUTS = [
    ("not json", b"{not json", 400, "not valid JSON"),
    # json's reason "Invalid control character at" read "... at at line 1" before the position
    ("a raw tab in a string", b'{"model": "a\tb"}', 400,
     "not valid JSON: Invalid control character at line 1, column 13"),
    ("empty body", b"", 400, "empty"),
    ("a body of blank lines", b" \r\n\r\n", 400, "the request body is empty; send a JSON object"),
    ("a body of tabs", b"\t\t\n", 400, "the request body is empty; send a JSON object"),
    # a form feed or vertical tab is no JSON whitespace: bytes.strip() took them for blanks, and
    # the body was told it was empty
    ("a form feed alone", b"\x0c", 400, "not valid JSON: Expecting value at line 1, column 1"),
    ("a vertical tab alone", b" \x0b\n", 400,
     "not valid JSON: Expecting value at line 1, column 2"),
    # it said "got a JSON list", and of null "a JSON NoneType", in Python's words
    ("array body", b"[1, 2]", 400,
     "must be a JSON object with `model` and `messages`, got an array"),
    ("null body", b"null", 400, "must be a JSON object with `model` and `messages`, got null"),
    ("string body", b'"hi"', 400,
     "must be a JSON object with `model` and `messages`, got a string"),
    ("number body", b"4.5", 400, "must be a JSON object with `model` and `messages`, got a number"),
    ("integer body", b"7", 400, "must be a JSON object with `model` and `messages`, got a number"),
    ("boolean body", b"true", 400, "must be a JSON object with `model` and `messages`, got true"),
    ("not utf-8", b'{"model": "\xff"}', 400, "not UTF-8"),
    # Latin-1's "café": it said only "not UTF-8 text: invalid continuation byte", not where
    # nor what to send
    ("latin-1 text", b'{"model": "caf\xe9 au lait"}', 400,
     "the request body is not UTF-8 text (the byte 0xe9 at offset 14: invalid continuation "
     "byte); send the JSON encoded as UTF-8 (Latin-1 and Windows-1252 text is not)"),
    # json.loads reads UTF-16 and UTF-32 too, which RFC 8259 (section 8.1) does not allow
    # between systems: such a body was answered, though other text not UTF-8 was refused
    ("a request in UTF-16", json.dumps(VALID).encode("utf-16"), 400,
     "the request body is not UTF-8 text: it looks UTF-16 encoded; JSON sent between systems "
     "must be UTF-8 (RFC 8259, section 8.1): send the JSON encoded as UTF-8"),
    ("a request in UTF-16 without a byte-order mark", json.dumps(VALID).encode("utf-16-be"), 400,
     "not UTF-8 text: it looks UTF-16-BE encoded"),
    ("a request in UTF-32", json.dumps(VALID).encode("utf-32"), 400,
     "not UTF-8 text: it looks UTF-32 encoded"),
    # json.detect_encoding guesses UTF-16 or UTF-32 from where NUL bytes are: a body of them
    # "looks UTF-32-BE encoded", though read so it is NUL characters, no text
    ("a body of NUL bytes", b"\x00\x00\x00\x00", 400,
     "the request body is not JSON text: it holds NUL bytes (the first at offset 0), which no "
     "JSON text in UTF-8 holds; send the JSON object encoded as UTF-8"),
    ("a body of two NUL bytes", b"\x00\x00", 400, "it holds NUL bytes (the first at offset 0)"),
    ("NUL bytes after a brace", b"{" + b"\x00" * 7, 400,
     "it holds NUL bytes (the first at offset 1)"),
    # one cut short is still told its encoding (its last character is no NUL)
    ("a request in UTF-16 cut a byte short", json.dumps(VALID).encode("utf-16-be")[:-1], 400,
     "not UTF-8 text: it looks UTF-16-BE encoded"),
    ("missing messages", {"model": MODEL}, 400, "messages: is required"),
    ("missing model", {"messages": VALID["messages"]}, 400, "model: is required"),
    ("empty messages", {**VALID, "messages": []}, 400, "at least one message"),
    ("messages not a list", {**VALID, "messages": "hi"}, 400, "messages"),
    ("wrong role", {**VALID, "messages": [{"role": "robot", "content": "x"}]}, 400,
     "messages[0].role"),
    ("message without role", {**VALID, "messages": [{"content": "x"}]}, 400,
     "messages[0].role: is required"),
    # OpenAI refuses them; a local worker read "" and a remote one refused (routing decided)
    ("a user turn with null content", {**VALID, "messages": [{"role": "user", "content": None}]},
     400, "messages[0] is a user message without content"),
    # OpenAI's content parts are one at least; a local worker read "" (routing decided)
    ("a user turn with no content parts", {**VALID, "messages": [{"role": "user", "content": []}]},
     400, "messages[0].content is an empty list, which OpenAI's API refuses too"),
    # an assistant turn's too (OpenAI refuses it; a remote worker's 400 was blamed on it)
    ("an assistant turn with no content parts", {**VALID, "messages": [
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": []},
        {"role": "user", "content": "again"}]},
     400, 'messages[1].content is an empty list, which OpenAI\'s API refuses too; give at least '
     'one content part, or the text as a string (null or "" for an assistant turn with none)'),
    ("a developer turn with null content", {**VALID, "messages": [
        {"role": "developer", "content": None}, *VALID["messages"]]}, 400,
     "messages[0] is a developer message without content"),
    ("a system turn with null content", {**VALID, "messages": [
        {"role": "system", "content": None}, *VALID["messages"]]}, 400,
     "messages[0] is a system message without content"),
    ("a tool turn without content", {**VALID, "messages": [
        *VALID["messages"], {"role": "tool", "tool_call_id": "c1"}]}, 400,
     "messages[1] is a tool message without content"),
    ("unknown model", {**VALID, "model": "gpt-4o"}, 404, "does not exist"),
    ("absurd max_tokens", {**VALID, "max_tokens": 10**9}, 400, "max_tokens=1000000000"),
    ("absurd max_completion_tokens", {**VALID, "max_completion_tokens": 10**7}, 400,
     "max_completion_tokens"),
    ("zero max_tokens", {**VALID, "max_tokens": 0}, 400, "max_tokens"),
    ("max_tokens not a number", {**VALID, "max_tokens": "lots"}, 400, "max_tokens"),
    ("max_tokens a boolean", {**VALID, "max_tokens": True}, 400, "max_tokens"),
    ("stream a string", {**VALID, "stream": "yes"}, 400, "stream: Input should be a valid boolean"),
    ("n a string", {**VALID, "n": "1"}, 400, "n: Input should be a valid integer"),
    ("temperature out of range", {**VALID, "temperature": 7}, 400, "temperature"),
    # it said the value twice: "n: n=3 is not supported: ... (got 3)"
    ("n above 1", {**VALID, "n": 3}, 400, "invalid request: n: must be 1 (or left out): "
     "fugu-lite routes each request to one worker and returns one choice; repeat the request "
     "for more choices (got 3)"),
    ("n zero", {**VALID, "n": 0}, 400, "n: must be 1 (or left out): fugu-lite routes"),
    ("parallel_tool_calls a word", {**VALID, "tools": [TOOL], "parallel_tool_calls": "false"},
     400, "parallel_tool_calls: Input should be a valid boolean"),
    ("logprobs a number", {**VALID, "logprobs": 1}, 400,
     "logprobs: Input should be a valid boolean (got 1)"),
    ("user a number", {**VALID, "user": 5}, 400, "user: Input should be a valid string (got 5)"),
    # OpenAI's limits of metadata (16 pairs, keys of 64 characters, values of 512): a remote
    # worker refused more, after routing
    ("17 metadata pairs", {**VALID, "metadata": {f"k{i}": "v" for i in range(17)}}, 400,
     "metadata holds 17 key-value pairs; OpenAI's API takes at most 16"),
    ("a metadata key of 65 characters", {**VALID, "metadata": {"k" * 65: "v"}}, 400,
     f'metadata key "{"k" * 65}" is 65 characters long; OpenAI\'s API takes keys of at most 64'),
    ("a metadata value of 513 characters", {**VALID, "metadata": {"team": "v" * 513}}, 400,
     "metadata['team'] is 513 characters long; OpenAI's API takes values of at most 512"),
    # OpenAI's safety_identifier: a string of at most 128 characters (its API reference); a
    # remote worker refused more, after routing
    ("a safety_identifier of 129 characters", {**VALID, "safety_identifier": "u" * 129}, 400,
     "safety_identifier is 129 characters long; OpenAI's API takes at most 128 (send a hash of "
     "a longer id, as OpenAI recommends)"),
    ("safety_identifier a number", {**VALID, "safety_identifier": 5}, 400,
     "safety_identifier: Input should be a valid string (got 5)"),
    # OpenAI's prompt_cache_key: a string of at most 64 characters (its API's 400
    # string_above_max_length); a remote worker refused more, after routing
    ("a prompt_cache_key of 65 characters", {**VALID, "prompt_cache_key": "k" * 65}, 400,
     "prompt_cache_key is 65 characters long; OpenAI's API takes at most 64 (send a hash of a "
     "longer key: equal keys are all the cache needs)"),
    ("prompt_cache_key a number", {**VALID, "prompt_cache_key": 5}, 400,
     "prompt_cache_key: Input should be a valid string (got 5)"),
    # OpenAI types it as a boolean; a word went on to the worker, after routing
    ("store a word", {**VALID, "store": "yes"}, 400,
     'store: Input should be a valid boolean (got "yes")'),
    # OpenAI's parameters typed as OpenAI types them: llama.cpp's server answers these 500
    ("temperature a word", {**VALID, "temperature": "hot"}, 400, "temperature"),
    # OpenAI's types, not pydantic's lax reading: each reached the worker as 1.0, true, []
    ("temperature a boolean", {**VALID, "temperature": True}, 400,
     "temperature: Input should be a valid number (got true)"),
    ("top_p a numeric string", {**VALID, "top_p": "0.5"}, 400, "top_p: Input should be a valid"),
    ("logit_bias a boolean", {**VALID, "logit_bias": {"42": True}}, 400, "logit_bias"),
    ("include_usage a word", {**VALID, "stream": True, "stream_options": {
        "include_usage": "yes"}}, 400, "stream_options.include_usage: Input should be a valid "
     "boolean"),
    ("no tools", {**VALID, "tools": []}, 400, "tools: is an empty list"),
    # OpenAI refused it, a local worker took it for no functions
    ("no functions", {**VALID, "functions": []}, 400,
     "functions: is an empty list, which OpenAI's API refuses too; give at least one function, "
     "or leave functions out"),
    ("cost_weight a boolean", {**VALID, "cost_weight": True}, 400,
     "cost_weight: Input should be a valid number"),
    # an integer beyond a float's range: pydantic's "Input should be a valid number" said
    # neither that it was too large nor what to send
    ("cost_weight of 401 digits", {**VALID, "cost_weight": 10**400}, 400,
     "cost_weight must be a finite number >= 0, e.g. 0.5 (got an integer of 401 digits, beyond "
     "a 64-bit float's range, about 1.8e308)"),
    ("temperature of 401 digits", {**VALID, "temperature": 10**400}, 400,
     "temperature must be a finite number from 0 to 2, e.g. 0.5 (got an integer of 401 digits"),
    ("top_p of 401 digits", {**VALID, "top_p": -(10**400)}, 400,
     "top_p must be a finite number from 0 to 1, e.g. 0.5 (got an integer of 401 digits"),
    ("presence_penalty of 401 digits", {**VALID, "presence_penalty": 10**400}, 400,
     "presence_penalty must be a finite number from -2 to 2, e.g. 0.5 (got an integer of 401"),
    ("frequency_penalty of 401 digits", {**VALID, "frequency_penalty": 10**400}, 400,
     "frequency_penalty must be a finite number from -2 to 2, e.g. 0.5 (got an integer of 401"),
    ("logit_bias not a map", {**VALID, "logit_bias": "x"}, 400, "logit_bias"),
    ("stop a number", {**VALID, "stop": 5}, 400, "stop"),
    ("unknown response_format", {**VALID, "response_format": {"type": "yaml"}}, 400,
     "response_format.type"),
    ("response_format a word", {**VALID, "response_format": "json"}, 400,
     'invalid request: response_format: must be a JSON object (got "json")'),
    # OpenAI's API requires the name; a local worker ignored it (routing decided)
    ("json_schema without a name", {**VALID, "response_format": {"type": "json_schema",
        "json_schema": {"schema": {"type": "object"}}}}, 400,
     "response_format.json_schema.name is required"),
    ("json_schema name with a space", {**VALID, "response_format": {"type": "json_schema",
        "json_schema": {"name": "my answer", "schema": {"type": "object"}}}}, 400,
     'json_schema.name must be letters, digits, _ or - (at most 64), e.g. "answer"; got "my '),
    ("json_schema without its object", {**VALID, "response_format": {
        "type": "json_schema", "schema": {"type": "object"}}}, 400,
     'type "json_schema" needs a `json_schema` object, e.g. {"type": "json_schema", "json_schema": '
     '{"name": "answer", "schema": {"type": "object", ...}}}; the schema goes inside it, not '
     "beside it"),
    # OpenAI refused it; a local worker's grammar fell back to free JSON
    ("a json_schema's schema a string", {**VALID, "response_format": {"type": "json_schema",
        "json_schema": {"name": "x", "schema": "object"}}}, 400,
     'invalid request: response_format.json_schema.schema must be a JSON schema object, e.g. '
     '{"type": "object", "properties": {...}}; got "object"'),
    # a number too, not only a string or a list (a check of those two alone passed)
    ("a json_schema's schema a number", {**VALID, "response_format": {"type": "json_schema",
        "json_schema": {"name": "x", "schema": 5}}}, 400,
     "response_format.json_schema.schema must be a JSON schema object, e.g. "
     '{"type": "object", "properties": {...}}; got 5'),
    ("a json_object's schema a list", {**VALID, "response_format": {"type": "json_object",
        "schema": [{"type": "object"}]}}, 400,
     'invalid request: response_format.schema must be a JSON schema object, e.g. {"type": '
     '"object", "properties": {...}}; got [{"type": "object"}]'),
    ("too many top_logprobs", {**VALID, "logprobs": True, "top_logprobs": 50}, 400,
     "top_logprobs"),
    ("penalty out of range", {**VALID, "presence_penalty": 3}, 400, "presence_penalty"),
    # each end of each range just past it (no test refused one: a bound moved passed them)
    ("negative temperature", {**VALID, "temperature": -0.5}, 400,
     "temperature: Input should be greater than or equal to 0 (got -0.5)"),
    ("top_p above 1", {**VALID, "top_p": 1.5}, 400,
     "top_p: Input should be less than or equal to 1 (got 1.5)"),
    ("negative top_p", {**VALID, "top_p": -0.1}, 400,
     "top_p: Input should be greater than or equal to 0 (got -0.1)"),
    ("presence_penalty below -2", {**VALID, "presence_penalty": -2.5}, 400,
     "presence_penalty: Input should be greater than or equal to -2 (got -2.5)"),
    ("frequency_penalty above 2", {**VALID, "frequency_penalty": 2.5}, 400,
     "frequency_penalty: Input should be less than or equal to 2 (got 2.5)"),
    ("frequency_penalty below -2", {**VALID, "frequency_penalty": -2.5}, 400,
     "frequency_penalty: Input should be greater than or equal to -2 (got -2.5)"),
    ("top_logprobs of 21", {**VALID, "logprobs": True, "top_logprobs": 21}, 400,
     "top_logprobs: Input should be less than or equal to 20 (got 21)"),
    ("negative top_logprobs", {**VALID, "logprobs": True, "top_logprobs": -1}, 400,
     "top_logprobs: Input should be greater than or equal to 0 (got -1)"),
    ("zero max_completion_tokens", {**VALID, "max_completion_tokens": 0}, 400,
     "max_completion_tokens: Input should be greater than or equal to 1 (got 0)"),
    ("logit_bias just below -100", {**VALID, "logit_bias": {"42": -100.5}}, 400,
     "logit_bias['42'] = -100.5 is outside -100..100"),
    ("seed a string", {**VALID, "seed": "5"}, 400, "seed"),
    ("tools not a list", {**VALID, "tools": {"type": "function"}}, 400, "tools"),
    ("stream_options without a stream", {**VALID, "stream_options": {"include_usage": True}},
     400, "stream_options is only allowed with stream: true"),
    # without usage asked for too, and beside an explicit stream: false
    ("stream_options without usage nor a stream", {**VALID, "stream": False, "stream_options": {
        "include_usage": False}}, 400, "stream_options is only allowed with stream: true"),
    ("five stop sequences", {**VALID, "stop": list("abcde")}, 400, "at most 4"),
    ("logit_bias key not a token id", {**VALID, "logit_bias": {"hello": 5}}, 400,
     "logit_bias keys are token ids"),
    ("logit_bias out of range", {**VALID, "logit_bias": {"42": 200}}, 400,
     "is outside -100..100"),
    # :g wrote 100.0000001 as 100, "logit_bias['42'] = 100 is outside -100..100"
    ("logit_bias just out of range", {**VALID, "logit_bias": {"42": 100.0000001}}, 400,
     "logit_bias['42'] = 100.0000001 is outside -100..100"),
    ("tool without a function name", {**VALID, "tools": [{"type": "function"}]}, 400,
     "tools[0] is a function tool without"),
    # OpenAI's API refuses such a name; a local worker took it (routing decided)
    ("a tool name with a dot", {**VALID, "tools": [{"type": "function", "function": {
        "name": "weather.get"}}]}, 400,
     'tools[0].function.name must be letters, digits, _ or - (at most 64), e.g. "get_weather"; '
     'got "weather.get"'),
    ("a tool name of 65 characters", {**VALID, "tools": [{"type": "function", "function": {
        "name": "f" * 65}}]}, 400,
     "tools[0].function.name must be letters, digits, _ or - (at most 64)"),
    ("an empty tool name", {**VALID, "tools": [{"type": "function", "function": {
        "name": ""}}]}, 400,
     'tools[0].function.name must be letters, digits, _ or - (at most 64), e.g. "get_weather"; '
     'got ""'),
    ("a tool's parameters a string", {**VALID, "tools": [{"type": "function", "function": {
        "name": "f", "parameters": "object"}}]}, 400,
     "tools[0].function.parameters must be a JSON schema object"),
    # the same for the deprecated functions (OpenAI refuses both; a remote worker got them)
    ("a function name with a space", {**VALID, "functions": [{"name": "get weather"}]}, 400,
     'functions[0].name must be letters, digits, _ or - (at most 64), e.g. "get_weather"; '
     'got "get weather"'),
    ("a function without a name", {**VALID, "functions": [{"parameters": {}}]}, 400,
     "functions[0] needs a string 'name'"),
    # each shape check of tools, tool_choice, functions and json_schema (none was sent one)
    ("a tool without a type", {**VALID, "tools": [{"function": {"name": "add"}}]}, 400,
     "tools[0] needs a string 'type', e.g. \"function\""),
    ("a tool_choice object without a type", {**VALID, "tools": [TOOL], "tool_choice": {
        "function": {"name": "add"}}}, 400,
     "tool_choice as an object needs a string 'type', e.g. \"function\""),
    ("a tool_choice object whose type is a number", {**VALID, "tools": [TOOL], "tool_choice": {
        "type": 5, "function": {"name": "add"}}}, 400,
     "tool_choice as an object needs a string 'type', e.g. \"function\""),
    ("a json_schema name a number", {**VALID, "response_format": {"type": "json_schema",
        "json_schema": {"name": 5, "schema": {"type": "object"}}}}, 400,
     'json_schema.name must be letters, digits, _ or - (at most 64), e.g. "answer"; got 5'),
    ("a function's schema no value matches", {**VALID, "functions": [{"name": "f",
        "parameters": {"type": "object", "properties": {"a": {"enum": []}}}}]}, 400,
     "functions[0].parameters.properties.a.enum is empty, so no value could match"),
    ("a second function's schema no value matches", {**VALID, "functions": [TOOL["function"], {
        "name": "mul", "parameters": {"properties": {"b": {"anyOf": []}}}}]}, 400,
     "functions[1].parameters.properties.b.anyOf is empty, so no value could match"),
    # each schema is checked, not only the request's first (a good tool before a bad one)
    ("a second tool's schema no value matches", {**VALID, "tools": [TOOL, {"type": "function",
        "function": {"name": "mul", "parameters": {"properties": {"b": {"type": []}}}}}]}, 400,
     "tools[1].function.parameters.properties.b.type is empty, so no value could match"),
    ("tool_choice naming no tool", {**VALID, "tools": [TOOL], "tool_choice": {
        "type": "function", "function": {"name": "mul"}}}, 400,
     "names the function 'mul', which is not among the tools (add)"),
    ("tool_choice required without tools", {**VALID, "tool_choice": "required"}, 400,
     "tool_choice: is only allowed when `tools` are given"),
    ("unknown tool_choice", {**VALID, "tools": [TOOL], "tool_choice": "always"}, 400,
     "tool_choice 'always' is not one of"),
    # the deprecated function_call, which a worker got as sent (OpenAI refuses it)
    ("unknown function_call", {**VALID, "functions": [TOOL["function"]], "function_call":
        "required"}, 400, "function_call 'required' is not one of none, auto or an object"),
    ("function_call without a name", {**VALID, "functions": [TOOL["function"]],
        "function_call": {"function": "add"}}, 400,
     'function_call as an object needs a string "name", the function\'s, e.g. {"name": "add"}; '
     'got {"function": "add"}'),
    ("function_call's name a number", {**VALID, "functions": [TOOL["function"]],
        "function_call": {"name": 5}}, 400,
     'function_call as an object needs a string "name", the function\'s, e.g. {"name": "add"}; '
     'got {"name": 5}'),
    # A worker got them as sent: OpenAI refused them, a local worker ignored the name
    ("a name not a string", {**VALID, "messages": [{"role": "user", "content": "hi",
        "name": 5}]}, 400, "messages[0].name must be a string (the participant's name"),
    ("an assistant's name an object", {**VALID, "messages": [{"role": "assistant",
        "content": "hi", "name": {"first": "Al"}}, {"role": "user", "content": "hi"}]}, 400,
     'messages[0].name must be a string (the participant\'s name, e.g. "alice"), as OpenAI\'s'
     ' API requires; got {"first": "Al"}'),
    ("an assistant turn's empty tool_calls", {**VALID, "messages": [
        {"role": "user", "content": "add"}, {"role": "assistant", "content": "no tool",
                                             "tool_calls": []}, *VALID["messages"]]}, 400,
     "messages[1].tool_calls is an empty list, which OpenAI's API refuses too"),
    ("a function message without its name", {**VALID, "messages": [
        *VALID["messages"], {"role": "function", "content": "sunny"}]}, 400,
     "messages[1] is a function message without a string name"),
    ("tool message without its call id", {**VALID, "messages": [
        {"role": "user", "content": "add"}, {"role": "tool", "content": "5"}]}, 400,
     "messages[1] is a tool message without a string tool_call_id"),
    ("a tool message's call id a number", {**VALID, "messages": [
        {"role": "user", "content": "add"}, {"role": "tool", "tool_call_id": 1, "content": "5"}]},
     400, "messages[1] is a tool message without a string tool_call_id"),
    ("a function message's name a number", {**VALID, "messages": [
        *VALID["messages"], {"role": "function", "name": 7, "content": "sunny"}]}, 400,
     "messages[1] is a function message without a string name"),
    # every call is checked, not only the first (a check of the first alone passed)
    ("a second tool call without its id", {**VALID, "messages": [
        {"role": "user", "content": "add"}, {"role": "assistant", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{}"}},
            {"type": "function", "function": {"name": "add", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "5"}]}, 400,
     "messages[1].tool_calls[1] must be an object with a string id"),
    ("tool call arguments not a string", {**VALID, "messages": [
        {"role": "user", "content": "add"}, {"role": "assistant", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "add", "arguments": {}}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "5"}]}, 400,
     "messages[1].tool_calls[0] must be an object"),
    # each part of a call as OpenAI shapes it (no test sent one without its id or type, nor
    # tool_calls that are no list, nor a deprecated call whose arguments are no string)
    ("a tool call of another type", {**VALID, "messages": [
        {"role": "user", "content": "add"}, {"role": "assistant", "tool_calls": [
            {"id": "c1", "type": "custom", "function": {"name": "add", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "5"}]}, 400,
     "messages[1].tool_calls[0] must be an object with a string id, type \"function\""),
    ("a tool call without its id", {**VALID, "messages": [
        {"role": "user", "content": "add"}, {"role": "assistant", "tool_calls": [
            {"type": "function", "function": {"name": "add", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "5"}]}, 400,
     "messages[1].tool_calls[0] must be an object with a string id"),
    ("tool_calls one call not in a list", {**VALID, "messages": [
        {"role": "user", "content": "add"}, {"role": "assistant", "tool_calls": {
            "id": "c1", "type": "function", "function": {"name": "add", "arguments": "{}"}}},
        {"role": "tool", "tool_call_id": "c1", "content": "5"}]}, 400,
     "messages[1].tool_calls must be a list"),
    ("a function call's arguments not a string", {**VALID, "messages": [
        {"role": "user", "content": "add"}, {"role": "assistant", "content": None,
                                             "function_call": {"name": "add", "arguments": {}}},
        {"role": "function", "name": "add", "content": "5"}]}, 400,
     "messages[1].function_call must be an object with a string name and arguments"),
    ("a schema no value matches", {**VALID, "response_format": {"type": "json_schema",
        "json_schema": {"name": "x", "schema": {"type": "object", "properties": {
            "enum": {"anyOf": []}, "b": {"const": {"enum": []}}}}}}}, 400,
     "response_format.json_schema.schema.properties.enum.anyOf is empty"),
    ("a json_object's schema no value matches", {**VALID, "response_format": {
        "type": "json_object", "schema": {"type": "object", "properties": {"a": {"enum": []}}}}},
     400, "response_format.schema.properties.a.enum is empty"),
    ("a schema whose oneOf is empty", {**VALID, "response_format": {"type": "json_schema",
        "json_schema": {"name": "x", "schema": {"oneOf": []}}}}, 400,
     "response_format.json_schema.schema.oneOf is empty"),
    # inside a list of schemas, and in a definition named as a keyword of values (no test
    # had either: a walk skipping them passed)
    ("an empty enum in one of an anyOf's schemas", {**VALID, "response_format": {
        "type": "json_schema", "json_schema": {"name": "x", "schema": {"anyOf": [
            {"type": "string"}, {"enum": []}]}}}}, 400,
     "response_format.json_schema.schema.anyOf[1].enum is empty"),
    ("an empty enum in a definition named default", {**VALID, "response_format": {
        "type": "json_schema", "json_schema": {"name": "x", "schema": {"$defs": {"default": {
            "enum": []}}}}}}, 400,
     "response_format.json_schema.schema.$defs.default.enum is empty"),
    # so in definitions and patternProperties, and in properties not written as an object
    # (no test had them: a walk taking their names for keywords, or failing on a list, passed)
    ("an empty anyOf in a definition (draft 7) named enum", {**VALID, "response_format": {
        "type": "json_schema", "json_schema": {"name": "x", "schema": {"definitions": {
            "enum": {"anyOf": []}}}}}}, 400,
     "response_format.json_schema.schema.definitions.enum.anyOf is empty"),
    ("an empty enum in patternProperties' pattern examples", {**VALID, "response_format": {
        "type": "json_schema", "json_schema": {"name": "x", "schema": {"patternProperties": {
            "examples": {"enum": []}}}}}}, 400,
     "response_format.json_schema.schema.patternProperties.examples.enum is empty"),
    ("an empty enum in properties written as a list", {**VALID, "response_format": {
        "type": "json_schema", "json_schema": {"name": "x", "schema": {"properties": [
            {"enum": []}]}}}}, 400,
     "response_format.json_schema.schema.properties[0].enum is empty"),
    # the first empty list as written is named, in properties and in a list of schemas
    # (the walk was last-in-first-out: it named properties.b.enum and anyOf[1].type)
    ("two empty enums among properties", {**VALID, "response_format": {
        "type": "json_schema", "json_schema": {"name": "x", "schema": {"properties": {
            "a": {"enum": []}, "b": {"enum": []}}}}}}, 400,
     "response_format.json_schema.schema.properties.a.enum is empty"),
    ("two empty lists in an anyOf's schemas", {**VALID, "response_format": {
        "type": "json_schema", "json_schema": {"name": "x", "schema": {"anyOf": [
            {"enum": []}, {"type": []}]}}}}, 400,
     "response_format.json_schema.schema.anyOf[0].enum is empty"),
    # below a schema below the root (a walk stopping at the root's schemas passed)
    ("an empty enum in a property's items", {**VALID, "response_format": {
        "type": "json_schema", "json_schema": {"name": "x", "schema": {"properties": {
            "a": {"type": "array", "items": {"enum": []}}}}}}}, 400,
     "response_format.json_schema.schema.properties.a.items.enum is empty"),
    ("top_logprobs without logprobs", {**VALID, "top_logprobs": 2}, 400,
     "top_logprobs needs logprobs: true"),
    ("workers not a list", {**VALID, "workers": "coder"}, 400, "workers"),
    # str.isdigit takes a superscript two, int() does not: the pool failed on it (a 500)
    ("a logit_bias key of superscript digits", {**VALID, "logit_bias": {"\u00b2": 1}}, 400,
     "logit_bias keys are token ids"),
    # the SDK's argument written into the body: its keys were ignored, it went to a worker
    ("extra_body as a key", {**VALID, "extra_body": {"workers": ["coder"]}}, 400,
     "extra_body: is the openai SDK's argument, not a key of the request"),
    ("cost_weight not a number", {**VALID, "cost_weight": "cheap"}, 400, "cost_weight"),
    ("text part not a string", {**VALID, "messages": [{"role": "user", "content": [
        {"type": "text", "text": 5}]}]}, 400, "content[0] is a text part whose 'text' is not"),
    ("refusal part not a string", {**VALID, "messages": [{"role": "assistant", "content": [
        {"type": "refusal", "refusal": None}]}, {"role": "user", "content": "hi"}]}, 400,
     "content[0] is a refusal part whose 'refusal' is not a string; give the words the "
     'assistant declined with as a string: {"type": "refusal", "refusal": "..."}'),
    ("content part without a type", {**VALID, "messages": [{"role": "user", "content": [
        {"text": "hi"}]}]}, 400, "content[0] must be an object with a string 'type'"),
    # OpenAI refuses other part types; a worker got it, and one that reads only the parts it
    # knows dropped it (its text lost)
    ("an unknown content part type", {**VALID, "messages": [{"role": "user", "content": [
        {"type": "txt", "text": "hi"}]}]}, 400, 'messages[0].content[0] is a part of type "txt", '
     "which OpenAI's chat API does not take; use one of text, image_url, input_audio, file, "
     "refusal"),
    ("the Responses API's text part", {**VALID, "messages": [{"role": "user", "content": [
        {"type": "input_text", "text": "hi"}]}]}, 400,
     'type "input_text" (the Responses API\'s name; here it is "text")'),
    ("the Responses API's image part", {**VALID, "messages": [{"role": "user", "content": [
        {"type": "input_image", "image_url": "data:image/png;base64,AA=="}]}]}, 400,
     'type "input_image" (the Responses API\'s name; here it is "image_url")'),
    # an assistant turn's text copied from a Responses API answer (no test sent it: the hint
    # dropped passed)
    ("the Responses API's answer text part", {**VALID, "messages": [
        {"role": "user", "content": "add"}, {"role": "assistant", "content": [
            {"type": "output_text", "text": "5"}]}, {"role": "user", "content": "and?"}]}, 400,
     'messages[1].content[0] is a part of type "output_text" (the Responses API\'s name; '
     'here it is "text")'),
    ("lone surrogate", b'{"model": "fugu-lite", "messages": [{"role": "user", "content": '
     b'"bad \\ud800 half pair"}]}', 400, "lone UTF-16 surrogate (\\ud800)"),
    # a JSON escape in capitals, and a surrogate written as (CESU-8) bytes, which json reads
    ("lone surrogate in capitals", b'{"model": "fugu-lite", "messages": [{"role": "user", '
     b'"content": "bad \\uDC00 half pair"}]}', 400, "lone UTF-16 surrogate (\\udc00)"),
    ("lone surrogate as bytes", b'{"model": "fugu-lite", "messages": [{"role": "user", '
     b'"content": "bad \xed\xa0\x80 half pair"}]}', 400, "lone UTF-16 surrogate (\\ud800)"),
    # Python's json read them, the pool could not send them on: a 502 counted against every
    # worker's circuit
    ("NaN in metadata", b'{"model": "fugu-lite", "messages": [{"role": "user", "content": "hi"}], '
     b'"metadata": {"score": NaN}}', 400, "the request body holds NaN, which is not a JSON number"),
    ("Infinity in a tool's schema", b'{"model": "fugu-lite", "messages": [{"role": "user", '
     b'"content": "hi"}], "tools": [{"type": "function", "function": {"name": "f", "parameters": '
     b'{"type": "number", "maximum": -Infinity}}}]}', 400, "holds -Infinity, which is not a JSON"),
    # Python's json reads 1e400 as Infinity: the same 502, and three of them opened every
    # worker's circuit
    ("a number beyond a float's range in metadata", b'{"model": "fugu-lite", "messages": [{"role":'
     b' "user", "content": "hi"}], "metadata": {"score": 1e400}}', 400,
     "the request body holds the number 1e400, which is beyond a 64-bit float's range"),
    ("a number beyond a float's range in a tool's schema", b'{"model": "fugu-lite", "messages": ['
     b'{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": '
     b'"f", "parameters": {"type": "number", "minimum": -2.5E+999}}}]}', 400, "-2.5E+999"),
    ("deeply nested body", b'{"model": "fugu-lite", "messages": ' + b"[" * 1500 + b"]" * 1500
     + b"}", 400, "nested too deeply"),
    # the value sent was quoted in escapes: "us\u00e9r", a tool named "\u5929\u6c14"
    # a long value is cut short, not quoted whole into the message
    ("a long unknown role", {**VALID, "messages": [{"role": "r" * 100, "content": "x"}]}, 400,
     'messages[0].role: Input should be \'system\', \'user\', \'assistant\', \'tool\', '
     '\'developer\' or \'function\' (got "' + "r" * 76 + '...)'),
    # the edge: a value of 80 characters as JSON is shown whole, one of 81 cut short
    ("an unknown role of 80 characters", {**VALID, "messages": [{"role": "r" * 78,
        "content": "x"}]}, 400, '(got "' + "r" * 78 + '")'),
    ("an unknown role of 81 characters", {**VALID, "messages": [{"role": "r" * 79,
        "content": "x"}]}, 400, '(got "' + "r" * 76 + '...)'),
    ("a role with a letter beyond ASCII", {**VALID, "messages": [
        {"role": "usér", "content": "x"}]}, 400, '(got "usér")'),
    ("a tool named in another script", {**VALID, "tools": [
        {"type": "function", "function": {"name": "天气"}}]}, 400, 'got "天气"'),
]  # fmt: skip


@pytest.fixture(scope="module")
def shared_server(family: RouterFamily, checkpoint: Path, stubs: Stubs) -> Iterator[Running]:
    settings = ServeSettings(checkpoint=checkpoint, max_body_bytes=4096, max_tokens_limit=4096)
    app = create_app(settings, family=family, pool_config=pool_for(stubs))
    with ServerThread(app) as thread:
        yield Running(thread, settings, app)


@pytest.mark.parametrize(
    ("body", "status", "fragment"),
    [case[1:] for case in BAD_INPUTS],
    ids=[case[0] for case in BAD_INPUTS],
)
def test_bad_input_gets_a_clear_4xx(
    shared_server: Running, stubs: Stubs, body: Any, status: int, fragment: str
) -> None:
    response = shared_server.post(body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert fragment in error["message"]
    assert error["type"] == "invalid_request_error"
    assert not any(stub.bodies for stub in stubs.workers.values())


@pytest.mark.parametrize(
    "choice", ["none", "auto", "required", {"type": "function", "function": {"name": "add"}}]
)
def test_tool_choice_without_tools_is_a_400_naming_it(
    shared_server: Running, stubs: Stubs, choice: Any
) -> None:
    """OpenAI answers any tool_choice without `tools` with a 400 ("'tool_choice' is only
    allowed when 'tools' are specified"); "none" and "auto" went on to a worker, so whether
    the request failed depended on the worker routed to."""
    with pytest.raises(openai.BadRequestError) as error:
        shared_server.client().chat.completions.create(
            model=MODEL, messages=user("hi"), tool_choice=choice
        )
    assert error.value.body["param"] == "tool_choice"
    assert "tool_choice: is only allowed when `tools` are given" in error.value.body["message"]
    assert not any(stub.bodies for stub in stubs.workers.values())


@pytest.mark.parametrize("call", ["none", "auto", {"name": "add"}])
def test_function_call_without_functions_is_a_400_naming_it(
    shared_server: Running, stubs: Stubs, call: Any
) -> None:
    """OpenAI answers the deprecated function_call without `functions` with a 400
    ("'function_call' is only allowed when 'functions' are specified"); "none" and "auto"
    went on to a worker (a local one ignored it), so whether the request failed depended on
    the worker routed to. With functions it is sent on."""
    client = shared_server.client()
    with pytest.raises(openai.BadRequestError) as error:
        client.chat.completions.create(model=MODEL, messages=user("hi"), function_call=call)
    assert error.value.body["param"] == "function_call"
    assert "is only allowed when `functions` are given" in error.value.body["message"]
    assert not any(stub.bodies for stub in stubs.workers.values())
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=user("hi"), functions=[TOOL["function"]], function_call=call
    )
    assert stubs.workers[raw.headers["x-fugu-worker"]].bodies[-1]["function_call"] == call


STOPS = "a string or an array of at most 4 strings"
PARTS = 'a string, or an array of content parts such as [{"type": "text", "text": "..."}]'


@pytest.mark.parametrize(
    ("extra", "param", "message"),
    [
        ({"stop": 5}, "stop", f"stop: must be {STOPS} (got 5)"),
        ({"stop": {"a": 1}}, "stop", f'stop: must be {STOPS} (got {{"a": 1}})'),
        # a list: its own item's error, not the string branch's as well
        ({"stop": ["a", 1]}, "stop[1]", "stop[1]: Input should be a valid string (got 1)"),
        ({"tools": [TOOL], "tool_choice": ["auto"]}, "tool_choice",
         'tool_choice: must be "none", "auto", "required" or an object naming a tool, such as '
         '{"type": "function", "function": {"name": "add"}} (got ["auto"])'),
        ({"functions": [TOOL["function"]], "function_call": 5}, "function_call",
         'function_call: must be "none", "auto" or an object naming a function, such as '
         '{"name": "add"} (got 5)'),
        ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content",
         f"messages[0].content: must be {PARTS} (got 5)"),
        # one part, not in a list
        ({"messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}]},
         "messages[0].content",
         f'messages[0].content: must be {PARTS} (got {{"type": "text", "text": "hi"}})'),
    ],
)  # fmt: skip
def test_a_field_of_several_types_given_none_of_them_is_one_error(
    shared_server: Running, stubs: Stubs, extra: dict[str, Any], param: str, message: str
) -> None:
    """A field OpenAI types as one of several (stop: a string or strings; tool_choice: a
    mode or an object; content: text or parts) given a value of none of them was told two
    mistakes, one per type ("stop: Input should be a valid string (got 5); stop: Input
    should be a valid list (got 5)"), and a list of stops holding a number was told it
    should be a string as well as its item; it is now one error saying what the field
    accepts, or the item's alone."""
    response = shared_server.post({**VALID, **extra})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param
    assert error["message"] == f"invalid request: {message}"
    assert not any(stub.bodies for stub in stubs.workers.values())


def test_a_request_with_two_bad_fields_tells_both_and_names_the_first(
    shared_server: Running, stubs: Stubs
) -> None:
    """OpenAI's error names one param: the 400 names the first bad field (in the request's
    field order) and tells each. No test sent two, so naming the last passed every test."""
    response = shared_server.post({**VALID, "temperature": 7, "top_p": 3})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == "temperature"
    assert error["message"] == (
        "invalid request: temperature: Input should be less than or equal to 2 (got 7); "
        "top_p: Input should be less than or equal to 1 (got 3)"
    )
    assert not any(stub.bodies for stub in stubs.workers.values())


def test_a_tool_of_another_type_is_sent_on(shared_server: Running, stubs: Stubs) -> None:
    """A tool that is no function (OpenAI's custom tools) is not checked as one: it reaches
    the worker as sent, beside the function tools, and so does a tool_choice naming it (no
    test sent one: reading it as a function's, which it is not, passed)."""
    custom = {"type": "custom", "custom": {"name": "sql", "description": "a query"}}
    choice = {"type": "custom", "custom": {"name": "sql"}}
    extra = {"tools": [custom, TOOL], "tool_choice": choice}
    raw = shared_server.client().chat.completions.with_raw_response.create(
        model=MODEL, messages=user("hi"), extra_body=extra
    )
    sent = stubs.workers[raw.headers["x-fugu-worker"]].bodies[-1]
    assert (sent["tools"], sent["tool_choice"]) == ([custom, TOOL], choice)


def test_tools_refused_themselves_are_the_only_error_named(
    shared_server: Running, stubs: Stubs
) -> None:
    """Malformed `tools` are told as such; the tool_choice or parallel_tool_calls beside
    them is not refused as well for coming "without tools" (a second, wrong error), nor a
    function_call beside malformed `functions`."""
    for extra in ({"tool_choice": "auto"}, {"parallel_tool_calls": True}):
        response = shared_server.post({**VALID, "tools": [{"type": 5}], **extra})
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["param"] == "tools[0].type"
        assert error["message"] == (
            "invalid request: tools[0] needs a string 'type', e.g. \"function\" (got 5)"
        )
    # the same for malformed functions beside the deprecated function_call
    response = shared_server.post(
        {**VALID, "functions": [{"parameters": {}}], "function_call": "auto"}
    )
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == "functions[0].name"
    assert "function_call" not in error["message"]
    assert not any(stub.bodies for stub in stubs.workers.values())


def test_a_function_call_beside_tools_is_sent_on(shared_server: Running, stubs: Stubs) -> None:
    """A client mixing both styles (`tools` and the deprecated function_call "auto") is not
    refused for lacking `functions`: the workers get it (workers.llama_cpp_requests drops
    it for local ones)."""
    raw = shared_server.client().chat.completions.with_raw_response.create(
        model=MODEL, messages=user("hi"), extra_body={"tools": [TOOL], "function_call": "auto"}
    )
    assert stubs.workers[raw.headers["x-fugu-worker"]].bodies[-1]["function_call"] == "auto"


def test_parallel_tool_calls_without_tools_is_a_400_naming_it(
    shared_server: Running, stubs: Stubs
) -> None:
    """OpenAI answers parallel_tool_calls without `tools` with a 400 ("'parallel_tool_calls'
    is only allowed when 'tools' are specified"); it went on to a worker, so whether the
    request failed depended on the worker routed to. With tools it is sent on."""
    client = shared_server.client()
    with pytest.raises(openai.BadRequestError) as error:
        client.chat.completions.create(model=MODEL, messages=user("hi"), parallel_tool_calls=False)
    assert error.value.body["param"] == "parallel_tool_calls"
    assert "is only allowed when `tools` are given" in error.value.body["message"]
    assert not any(stub.bodies for stub in stubs.workers.values())
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL,
        messages=user("hi"),
        tools=[TOOL],
        parallel_tool_calls=False,  # type: ignore[list-item]
    )
    assert stubs.workers[raw.headers["x-fugu-worker"]].bodies[-1]["parallel_tool_calls"] is False


HI = b'{"model": "fugu-lite", "messages": [{"role": "user", "content": "hi"}], '
# a lone surrogate, escaped in JSON text (encoded below as UTF-8, UTF-16 or UTF-32)
SURROGATE_IN_A_MESSAGE = (
    '{"model": "fugu-lite", "messages": [{"role": "user", "content": "a \\udc00"}]}'
)


@pytest.mark.parametrize(
    ("body", "code", "param"),
    [
        (HI + b'"metadata": {"score": NaN}}', "invalid_json", "metadata.score"),
        (HI + b'"metadata": {"score": 1e400}}', "invalid_json", "metadata.score"),
        (HI + b'"seed": -Infinity}', "invalid_json", "seed"),
        (HI + b'"metadata": {"a": [1.5, NaN]}}', "invalid_json", "metadata.a[1]"),
        (HI + b'"user": "bad \\ud800 half pair"}', "invalid_unicode", "user"),
        (SURROGATE_IN_A_MESSAGE.encode(), "invalid_unicode", "messages[0].content"),
        # JSON in UTF-16 or UTF-32 (where the escape is not in UTF-8's bytes): refused as not
        # UTF-8, as a Latin-1 body is, before any surrogate is looked for; text that is not
        # UTF-8 is no Unicode text here, as a lone surrogate is not (its code was null)
        (SURROGATE_IN_A_MESSAGE.encode("utf-16"), "invalid_unicode", None),
        (SURROGATE_IN_A_MESSAGE.encode("utf-32"), "invalid_unicode", None),
        (HI + b'"user": "caf\xe9"}', "invalid_unicode", None),
        # in a key: the object that holds it
        (HI + b'"metadata": {"bad \\ud800": "x"}}', "invalid_unicode", "metadata"),
        # in a key of the body itself: no param (the whole body), not ""
        (HI + b'"bad \\ud800": "x"}', "invalid_unicode", None),
        # the first of two, in the body's order
        (HI + b'"user": "\\ud800", "metadata": {"a": "\\udc00"}}', "invalid_unicode", "user"),
        # no parameter to name: the whole body, or a body that is no JSON after the number
        (b"NaN", "invalid_json", None),
        (HI + b'"seed": NaN,}', "invalid_json", None),
        (HI + b'"seed": NaN, "metadata": ' + b"[" * 3000, "invalid_json", None),
        (HI + b'"user": "x",}', None, None),
    ],
    ids=["NaN", "1e400", "-Infinity", "NaN in a list", "a lone surrogate",
         "a surrogate in a message", "a surrogate in UTF-16", "a surrogate in UTF-32", "Latin-1",
         "a surrogate in a key", "a surrogate in a key of the body",
         "two surrogates", "NaN as the body",
         "NaN before a trailing comma", "NaN before nesting too deep", "a trailing comma"],
)  # fmt: skip
def test_a_body_that_is_no_json_text_says_so_in_its_error_code(
    shared_server: Running, body: bytes, code: str | None, param: str | None
) -> None:
    """What makes a body no JSON or no Unicode text is told by its code: invalid_json for a
    number JSON has not (NaN, Infinity) or a float cannot hold, invalid_unicode for a lone
    surrogate or text not in UTF-8, none for text that is no JSON at all (no test read these
    codes: dropping one passed). Its param was null, where every other 400 names the value
    it refuses; it now names the first such value (text that is no JSON has none to name)."""
    response = shared_server.post(body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["type"], error["param"], error["code"]) == ("invalid_request_error", param, code)


@pytest.mark.parametrize("encoding", ["utf-16", "utf-32-le"])
def test_a_lone_surrogate_in_utf16_or_utf32_is_refused_for_its_encoding(
    shared_server: Running, encoding: str
) -> None:
    """A body in UTF-16 or UTF-32 holding "\\udc00" reached the tokenizer once (a 500); it is
    now refused for its encoding, which names the encoding and what to send instead."""
    response = shared_server.post(SURROGATE_IN_A_MESSAGE.encode(encoding))
    assert response.status_code == 400, response.text
    message = response.json()["error"]["message"]
    assert f"it looks {encoding.upper()} encoded" in message, message
    assert message.endswith("send the JSON encoded as UTF-8"), message


def test_a_request_in_utf8_with_a_byte_order_mark_is_answered(
    shared_server: Running, stubs: Stubs
) -> None:
    """A UTF-8 body with a byte-order mark (RFC 8259 lets a reader ignore one) is read as
    the same request: refusing encodings other than UTF-8 must not refuse it."""
    response = shared_server.post(b"\xef\xbb\xbf" + json.dumps(VALID).encode())
    assert response.status_code == 200, response.text
    sent = stubs.workers[response.headers["x-fugu-worker"]].bodies[-1]
    assert sent["messages"] == VALID["messages"]


@pytest.mark.parametrize(
    ("metadata", "named", "param"),
    [
        # a value before a key of the same object, and before a key of an object holding it
        (b'{"a": "\\ud800", "\\udc00": "x"}', "\\ud800", "metadata.a"),
        (b'{"a": {"b": "\\ud800"}, "\\udc00": "x"}', "\\ud800", "metadata.a.b"),
        (b'{"\\udc00": "x", "a": "\\ud800"}', "\\udc00", "metadata"),
        # a key is written before its own value
        (b'{"\\udc00": "\\ud800"}', "\\udc00", "metadata"),
        # two side by side (no pair: a low half first) are one place, both named
        (b'{"a": "\\udc00\\ud800"}', "\\udc00\\ud800", "metadata.a"),
    ],
    ids=[
        "a value, then a key",
        "a nested value, then a key",
        "a key, then a value",
        "a key, then its value",
        "two side by side",
    ],
)
def test_of_two_lone_surrogates_the_message_and_param_name_the_same(
    shared_server: Running, metadata: bytes, named: str, param: str
) -> None:
    """The message named the first lone surrogate in the body's order, while the param named
    the object holding one in a key before any value below it: a body with "\\ud800" in a
    value and "\\udc00" in a later key was told of \\ud800 at the place of \\udc00."""
    response = shared_server.post(HI + b'"metadata": ' + metadata + b"}")
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert f"lone UTF-16 surrogate ({named})" in error["message"], error["message"]
    assert error["param"] == param


def test_a_lone_surrogate_the_walk_misses_is_still_a_400_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where the walk for the bad string found none though the encoder failed, an `assert`
    stood: under python -O that was a TypeError (a 500). The encoder's own failure names the
    surrogate, at no param."""
    monkeypatch.setattr(request_parsing, "first_bad", lambda payload, is_bad: None)
    with pytest.raises(ApiError) as raised:
        request_parsing.check_unicode(b'{"user": "\\udc00"}', {"user": "\udc00"})
    assert (raised.value.status, raised.value.code) == (400, "invalid_unicode")
    assert raised.value.param is None
    assert raised.value.message.startswith(
        "the request body holds a lone UTF-16 surrogate (\\udc00)"
    )


def test_a_value_nested_almost_too_deeply_to_read_is_a_400_at_every_depth(
    shared_server: Running, stubs: Stubs
) -> None:
    """A value json.loads could just read (nested some 900 levels deep) was a 500: the error
    quoting it wrote it out again deeper in the stack, where json.dumps raised
    RecursionError. Each depth, up to and beyond the deepest the body is read at, is a 400
    saying the body is nested too deeply (the value is not quoted), at `user` where
    json.loads read it."""
    said = set()
    for depth in range(800, 1001):
        response = shared_server.post(HI + b'"user": ' + b"[" * depth + b"]" * depth + b"}")
        assert response.status_code == 400, (depth, response.text)
        said.add((response.json()["error"]["param"], response.json()["error"]["message"]))
    too_deep = "the request body is nested too deeply: it nests arrays and objects more than 64 "
    assert {param for param, _ in said} == {"user", None}
    assert all(message.startswith(too_deep) for _, message in said), said
    assert not any(stub.bodies for stub in stubs.workers.values())


def test_a_body_nested_more_than_64_levels_deep_is_a_400_naming_the_limit(
    shared_server: Running, stubs: Stubs
) -> None:
    """json.loads reads a body nested up to Python's recursion limit: an unknown key (sent on
    to the worker as it is) holding a value nested 961 deep was forwarded. A body may nest
    64 levels (itself the first); a tool's schema nested ten objects deep (OpenAI's limit
    for structured outputs) is well within that, and is answered."""

    def nested(levels: int) -> bytes:
        return HI + b'"x_trace": ' + b"[" * levels + b"]" * levels + b"}"

    schema: dict[str, Any] = {"type": "string"}
    for _ in range(10):
        schema = {"type": "object", "properties": {"inner": schema}}
    tool = {"type": "function", "function": {"name": "deep", "parameters": schema}}
    for fine in (nested(63), {**VALID, "tools": [tool]}):
        response = shared_server.post(fine)
        assert response.status_code == 200, response.text
    assert stubs.workers[response.headers["x-fugu-worker"]].bodies[-1]["tools"] == [tool]
    stubs.reset()
    for levels in (64, 961):
        response = shared_server.post(nested(levels))
        assert response.status_code == 400, (levels, response.text)
        error = response.json()["error"]
        assert error["message"] == (
            "the request body is nested too deeply: it nests arrays and objects more than 64 "
            "levels deep (at `x_trace`), the most this server reads, which no chat request (nor "
            "its tools' JSON schemas) needs; send `x_trace` less deeply nested"
        ), error["message"]
        assert error["param"] == "x_trace"
    # a key may be empty, and is no less sent on
    response = shared_server.post(HI + b'"": ' + b"[" * 64 + b"]" * 64 + b"}")
    assert (response.status_code, response.json()["error"]["param"]) == (400, ""), response.text
    assert not any(stub.bodies for stub in stubs.workers.values())


@pytest.mark.parametrize(
    ("key", "shown"),
    [("", '""'), ("a b", '"a b"'), ("tab\there", '"tab\\there"'), ("a\bb", '"a\\bb"'),
     ("naïve key", '"naïve key"'), ("x_trace", "`x_trace`")],
)  # fmt: skip
def test_a_too_deep_value_names_its_key_readably_where_backticks_would_not(
    key: str, shown: str
) -> None:
    """A top-level key "" holding a value nested too deeply was named as an empty pair of
    backticks ("(at ``)", "send `` less deeply nested"), one holding a tab, a space or a
    backspace was named with it raw: such a key is named as a JSON string, as a param path
    names it."""
    body = HI + json.dumps(key).encode() + b": " + b"[" * 64 + b"]" * 64 + b"}"
    with pytest.raises(ApiError) as raised:
        request_parsing.json_object(body, None)
    assert raised.value.param == key
    assert f" levels deep (at {shown}), the most " in raised.value.message
    assert raised.value.message.endswith(f"; send {shown} less deeply nested")


def test_nesting_depth_is_that_of_the_deepest_array_or_object_wherever_it_is() -> None:
    """The depth a body is refused beyond (MAX_DEPTH): objects count as arrays do, and the
    deepest branch counts, whether written before or after a shallower one."""
    assert [request_parsing.nesting_depth(value) for value in ("text", 7, None, [], {})] == [
        0, 0, 0, 1, 1,
    ]  # fmt: skip
    assert request_parsing.nesting_depth({"a": {"b": {"c": "d"}}}) == 3
    assert request_parsing.nesting_depth([[], [[[]]]]) == 4
    assert request_parsing.nesting_depth([[[[]]], [], 1]) == 4


def test_an_integer_of_more_digits_than_python_reads_is_a_400(
    serve: Any, stubs: Stubs, caplog: pytest.LogCaptureFixture
) -> None:
    """int() refuses an integer of more than 4300 digits, and json.loads let its ValueError
    through: a body of 5 kB (well within --max-body-bytes) was an internal error, a 500
    with a traceback in the server's log."""
    server = serve(pool_for(stubs))
    for number in (b"-" + b"9" * 5000, b"1" * 4301):
        body = b'{"model": "fugu-lite", "messages": [{"role": "user", "content": "hi"}], "seed": '
        response = server.post(body + number + b"}")
        assert response.status_code == 400, response.text
        digits = len(number.lstrip(b"-"))
        assert response.json()["error"]["param"] == "seed"
        assert response.json()["error"]["message"] == (
            f"the request body holds an integer of {digits} digits, more than the 4300 this "
            "server reads; send a smaller number"
        )
    assert not any(stub.bodies for stub in stubs.workers.values())
    assert "unexpected error" not in caplog.text
    assert (
        server.client()
        .chat.completions.create(model=MODEL, messages=user("hi"), seed=int("9" * 4300))
        .choices
    )


def test_an_infinite_cost_weight_is_refused_by_the_request_model_itself() -> None:
    """Over HTTP an infinite cost_weight never reaches the request model (the body's JSON
    reading refuses Infinity and 1e400), but a program validating a ChatCompletionRequest
    itself can give one: inf passes `ge=0`, and dropping the check (_finite_numbers) passed
    every test. The message says the value it got (no test read it: dropping it passed)."""
    finite = "cost_weight must be a finite number >= 0, e.g. 0.5 (got inf)"
    with pytest.raises(ValidationError, match=re.escape(finite)):
        ChatCompletionRequest.model_validate({**VALID, "cost_weight": math.inf})
    not_a_number = "temperature must be a finite number from 0 to 2, e.g. 0.5 (got nan)"
    with pytest.raises(ValidationError, match=re.escape(not_a_number)):
        ChatCompletionRequest.model_validate({**VALID, "temperature": math.nan})
    largest = ChatCompletionRequest.model_validate({**VALID, "cost_weight": 1e308})
    assert largest.cost_weight == 1e308


def test_a_nan_logit_bias_is_refused_as_no_finite_number() -> None:
    """A program validating a ChatCompletionRequest itself can give a bias of nan, which
    JSON cannot carry: it is told the bias must be a finite number, as an integer beyond a
    float's range is (checking integers only, not floats, passed every test: nan's message
    was then "= nan is outside -100..100")."""
    finite = "logit_bias['42'] must be a finite number from -100 to 100, e.g. 0.5 (got nan)"
    with pytest.raises(ValidationError, match=re.escape(finite)):
        ChatCompletionRequest.model_validate({**VALID, "logit_bias": {"42": math.nan}})


@pytest.mark.parametrize(
    "field", ["temperature", "top_p", "presence_penalty", "frequency_penalty", "cost_weight"]
)
def test_an_integer_beyond_a_floats_range_is_a_400_at_its_parameter(
    shared_server: Running, field: str
) -> None:
    """The 400 of a float parameter sent as an integer a float cannot hold names it as its
    param, as every other 400 names the value it refuses (no test read it: naming none
    passed)."""
    response = shared_server.post({**VALID, field: -(10**400)})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == field
    assert f"{field} must be a finite number" in error["message"]


@pytest.mark.parametrize(
    ("extra", "param", "message"),
    [
        # it did not say what to do, as function_call's twin does
        ({"tools": [TOOL], "tool_choice": {"type": "function", "function": {"name": "mul"}}},
         "tool_choice", "tool_choice names the function 'mul', which is not among the tools "
         '(add); name one of the function tools, or use "auto", "none" or "required"'),
        # with only custom tools it listed "(no function tools)" and asked to name one
        ({"tools": [{"type": "custom", "custom": {"name": "sql"}}], "tool_choice": {
            "type": "function", "function": {"name": "sql"}}}, "tool_choice",
         "tool_choice names the function 'sql', but the request has no function tools, so a "
         'tool_choice cannot name one; add a function tool, or use "auto", "none" or '
         '"required"'),
        ({"tools": [TOOL], "tool_choice": {"type": "function"}}, "tool_choice",
         'tool_choice {"type": "function"} needs "function": {"name": "..."}'),
        # the Responses API's shape: the name beside, not inside, was not shown
        ({"tools": [TOOL], "tool_choice": {"type": "function", "name": "add"}}, "tool_choice",
         'tool_choice {"type": "function"} needs "function": {"name": "..."} (got {"type": '
         '"function", "name": "add"})'),
        ({"functions": [TOOL["function"]], "function_call": {"name": "mul"}}, "function_call",
         "function_call names the function 'mul', which is not among the functions (add)"),
        # beside tools, with no functions at all: it said "functions ()"
        ({"tools": [TOOL], "function_call": {"name": "add"}}, "function_call",
         "function_call names the function 'add', which is not among the functions (no "
         'functions given); name one of them, or use "auto" or "none"'),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
            "enum": []}}}}, "response_format.json_schema.schema",
         "response_format.json_schema.schema.enum is empty"),
        ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {
            "type": []}}}]}, "tools[0].function.parameters",
         "tools[0].function.parameters.type is empty"),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": [
            {"type": "object"}]}}}, "response_format.json_schema.schema",
         "response_format.json_schema.schema must be a JSON schema object"),
        ({"logprobs": False, "top_logprobs": 2}, "top_logprobs",
         "top_logprobs needs logprobs: true"),
        ({"stream_options": {"include_usage": True}}, "stream_options",
         "stream_options is only allowed with stream: true"),
    ],
)  # fmt: skip
def test_a_check_across_parameters_names_its_parameter(
    shared_server: Running, stubs: Stubs, extra: dict[str, Any], param: str, message: str
) -> None:
    """A check that reads several parameters (tool_choice against the tools, top_logprobs
    against logprobs, ...) answered with param "" (not null, nor the parameter) and its
    message began 'body: ' and ended with the whole request body as the value it got;
    now its param is the parameter it refuses, and its message is its own."""
    with pytest.raises(openai.BadRequestError) as error:
        shared_server.client().chat.completions.create(
            model=MODEL, messages=user("hi"), extra_body=extra
        )
    body = error.value.body
    assert body["param"] == param
    assert body["message"].startswith(f"invalid request: {message}")
    assert "body:" not in body["message"] and '"messages"' not in body["message"]
    assert not any(stub.bodies for stub in stubs.workers.values())


ASKED = {"role": "user", "content": "add two and three, then tell me the sum in a short sentence"}
CALL = {"id": "c1", "type": "custom", "function": {"name": "add", "arguments": "{}"}}


@pytest.mark.parametrize(
    ("messages", "param", "ending"),
    [
        ([ASKED, {"role": "assistant", "tool_calls": [CALL]}], "messages[1].tool_calls[0]",
         'e.g. [{"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '
         '"{\\"a\\": 2}"}}] (got {"id": "c1", "type": "custom", "function": {"name": "add", '
         '"arguments": "{}"}})'),
        ([ASKED, {"role": "assistant", "tool_calls": CALL}], "messages[1].tool_calls",
         '(got {"id": "c1", "type": "custom", "function": {"name": "add", "arguments": "{}"}})'),
        ([ASKED, {"role": "assistant", "tool_calls": []}], "messages[1].tool_calls",
         "leave tool_calls out of a turn that called no tool"),
        ([ASKED, {"role": "tool", "tool_call_id": 1, "content": "5"}], "messages[1].tool_call_id",
         "give the id of the assistant's tool call it answers (got 1)"),
        ([ASKED, {"role": "tool", "content": "5"}], "messages[1].tool_call_id",
         "give the id of the assistant's tool call it answers"),
        ([ASKED, {"role": "function", "name": 7, "content": "5"}], "messages[1].name",
         '{"role": "function", "name": "weather", "content": "sunny"} (got 7)'),
        ([ASKED, {"role": "assistant", "function_call": {"name": "add", "arguments": {}}}],
         "messages[1].function_call", 'got {"name": "add", "arguments": {}}'),
        # a call without its name, a call that is no object (none was sent: a check
        # dropping either passed, the second then a 500)
        ([ASKED, {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
            "function": {"arguments": "{}"}}]}], "messages[1].tool_calls[0]",
         '(got {"id": "c1", "type": "function", "function": {"arguments": "{}"}})'),
        ([ASKED, {"role": "assistant", "function_call": {"arguments": "{}"}}],
         "messages[1].function_call", 'got {"arguments": "{}"}'),
        ([ASKED, {"role": "assistant", "tool_calls": ["add"]}], "messages[1].tool_calls[0]",
         '(got "add")'),
        ([ASKED, {"role": "user", "content": None}], "messages[1].content",
         "(only an assistant turn, or a function result, may have none)"),
        ([ASKED, {"role": "user", "content": []}], "messages[1].content",
         "give at least one content part, or the text as a string"),
        ([ASKED, {"role": "user", "content": "hi", "name": 5}], "messages[1].name",
         "as OpenAI's API requires; got 5"),
        ([ASKED, {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "txt",
            "text": "b"}]}], "messages[1].content[1].type",
         "use one of text, image_url, input_audio, file, refusal"),
        # a part's own checks (ChatMessage's) showed the whole content, cut before the part
        ([ASKED, {"role": "user", "content": [{"type": "text", "text": "a" * 40}, {"type":
            "text", "text": "b" * 40}, {"type": "text", "text": 5}]}], "messages[1].content[2]",
         'content[2] is a text part whose \'text\' is not a string; give the part\'s text as a '
         'string: {"type": "text", "text": "..."} (got {"type": "text", "text": 5})'),
        ([ASKED, {"role": "user", "content": [{"type": "text", "text": "a" * 80}, "b"]}],
         "messages[1].content[1]", '{"type": "text", "text": "..."} (got "b")'),
        # pydantic's "a valid dictionary or instance of ChatMessage", a class never sent
        ([ASKED, "hi"], "messages[1]", 'messages[1]: must be a JSON object (got "hi")'),
        # each was right: kept so
        ([], "messages", "messages: must hold at least one message"),
        ([ASKED, {"content": "hi"}], "messages[1].role", "messages[1].role: is required"),
        ([ASKED, {"role": "User", "content": "hi"}], "messages[1].role", '(got "User")'),
    ],
)  # fmt: skip
def test_a_bad_field_of_a_message_is_named_with_its_own_value(
    shared_server: Running, stubs: Stubs, messages: list[Any], param: str, ending: str
) -> None:
    """A bad field of one message (its tool_calls, tool_call_id, content, name) was a 400
    with param `messages`, its message ending with "(got [the whole conversation, cut to 80
    characters])": not the bad value, which the client could not see. The param now names
    the field (messages[1].tool_calls[0]), and the value shown is the field's own."""
    with pytest.raises(openai.BadRequestError) as error:
        shared_server.client().chat.completions.create(model=MODEL, messages=messages)
    body = error.value.body
    assert body["param"] == param
    assert body["message"].endswith(ending), body["message"]
    assert "add two and three" not in body["message"]
    assert not any(stub.bodies for stub in stubs.workers.values())


IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}
USER_ONLY = "move it to a user message"


@pytest.mark.parametrize(
    ("messages", "param", "message"),
    [
        ([{"role": "system", "content": [IMAGE]}, ASKED], "messages[0].content[0].type",
         'messages[0].content[0] is a part of type "image_url", which OpenAI\'s chat API takes '
         f"only in user messages, not in system messages; {USER_ONLY}"),
        ([ASKED, {"role": "assistant", "content": [{"type": "text", "text": "a"}, IMAGE]}],
         "messages[1].content[1].type", f"not in assistant messages; {USER_ONLY}"),
        ([ASKED, {"role": "tool", "tool_call_id": "c1", "content": [{"type": "file", "file": {
            "file_id": "f1"}}]}], "messages[1].content[0].type",
         f'type "file", which OpenAI\'s chat API takes only in user messages, not in tool '
         f"messages; {USER_ONLY}"),
        ([{"role": "developer", "content": [{"type": "input_audio", "input_audio": {
            "data": "AA==", "format": "wav"}}]}, ASKED], "messages[0].content[0].type",
         f"not in developer messages; {USER_ONLY}"),
        ([{"role": "user", "content": [{"type": "refusal", "refusal": "no"}]}],
         "messages[0].content[0].type",
         'messages[0].content[0] is a part of type "refusal", which OpenAI\'s chat API takes '
         'only in assistant messages, not in user messages; give its words as a text part, '
         '{"type": "text", "text": "..."}'),
        # each role's own list (an image in a tool or a function result, a refusal in a
        # developer message: no test sent one, and a list taking it passed)
        ([ASKED, {"role": "tool", "tool_call_id": "c1", "content": [IMAGE]}],
         "messages[1].content[0].type", f"not in tool messages; {USER_ONLY}"),
        ([ASKED, {"role": "function", "name": "add", "content": [IMAGE]}],
         "messages[1].content[0].type", f"not in function messages; {USER_ONLY}"),
        ([{"role": "developer", "content": [{"type": "refusal", "refusal": "no"}]}, ASKED],
         "messages[0].content[0].type",
         "takes only in assistant messages, not in developer messages"),
    ],
)  # fmt: skip
def test_a_part_of_a_type_its_role_does_not_take_is_a_400_naming_it(
    shared_server: Running, stubs: Stubs, messages: list[Any], param: str, message: str
) -> None:
    """OpenAI takes image, audio and file parts in user messages only, refusal parts in
    assistant ones only. Any part of those types went on: an image in a system message to a
    remote worker, which refused it (a 400 blamed on the worker), and a user's refusal part
    to a local worker as the user's words, the router reading it as no text at all. Each is
    now a 400 naming the part's type."""
    response = shared_server.post({**VALID, "messages": messages})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param
    assert message in error["message"], error["message"]
    assert not any(stub.bodies for stub in stubs.workers.values())


ADD_CALL = {"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{}"}}


@pytest.mark.parametrize(
    ("messages", "index", "role"),
    [
        ([{**ASKED, "tool_calls": [ADD_CALL]}], 0, "user"),
        ([{"role": "system", "content": "be brief", "tool_calls": [ADD_CALL]}, ASKED], 0,
         "system"),
        ([ASKED, {"role": "assistant", "tool_calls": [ADD_CALL]},
          {"role": "tool", "tool_call_id": "c1", "content": "5", "tool_calls": [ADD_CALL]}], 2,
         "tool"),
    ],
    ids=["user", "system", "tool"],
)  # fmt: skip
def test_tool_calls_on_a_message_not_the_assistants_is_a_400_naming_it(
    shared_server: Running, stubs: Stubs, messages: list[Any], index: int, role: str
) -> None:
    """tool_calls are what an assistant turn called; OpenAI refuses them on any other
    message. On a user, system or tool message they went on to the worker unchecked."""
    response = shared_server.post({**VALID, "messages": messages})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == f"messages[{index}].tool_calls"
    assert error["message"] == (
        f"invalid request: messages[{index}] is a {role} message with tool_calls, which "
        "belong on assistant messages only (the calls the assistant made); move them to the "
        "assistant turn that made them, or leave them out"
    )
    assert not any(stub.bodies for stub in stubs.workers.values())


def test_parts_of_the_types_a_role_takes_are_sent_on(shared_server: Running, stubs: Stubs) -> None:
    """Text and refusal parts in an assistant turn, text parts in system and user turns, and
    each of the other types OpenAI takes in a user turn (an image, audio, a file: none was
    sent, and a user's list without audio or files passed) reach the worker as sent."""
    audio = {"type": "input_audio", "input_audio": {"data": "AA==", "format": "wav"}}
    file = {"type": "file", "file": {"file_id": "file-1"}}
    messages = [
        {"role": "system", "content": [{"type": "text", "text": "be brief"}]},
        ASKED,
        {"role": "assistant", "content": [{"type": "text", "text": "I"},
                                          {"type": "refusal", "refusal": "won't"}]},
        {"role": "user", "content": [{"type": "text", "text": "please"}, IMAGE, audio, file]},
    ]  # fmt: skip
    response = shared_server.post({**VALID, "messages": messages})
    assert response.status_code == 200, response.text
    sent = stubs.workers[response.headers["x-fugu-worker"]].bodies[-1]
    assert sent["messages"] == messages


WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}  # fmt: skip


@pytest.mark.parametrize(
    ("extra", "param", "ending"),
    [
        ({"tools": [WEATHER, {"type": 5}]}, "tools[1].type",
         "tools[1] needs a string 'type', e.g. \"function\" (got 5)"),
        ({"tools": [WEATHER, {"type": "function", "function": {"parameters": {}}}]},
         "tools[1].function", '"parameters": {...}}} (got {"parameters": {}})'),
        ({"tools": [WEATHER, {"type": "function", "function": {"name": "a.b"}}]},
         "tools[1].function.name", 'e.g. "get_weather"; got "a.b"'),
        ({"tools": [WEATHER, {"type": "function", "function": {"name": "f", "parameters":
            "object"}}]}, "tools[1].function.parameters",
         'tools[1].function.parameters must be a JSON schema object, e.g. {"type": "object", '
         '"properties": {...}} (got "object")'),
        ({"functions": [WEATHER["function"], {"name": 5}]}, "functions[1].name",
         'functions[1] needs a string \'name\', e.g. {"name": "add", "parameters": {...}} '
         "(got 5)"),
        ({"functions": [WEATHER["function"], {"name": "a b"}]}, "functions[1].name",
         'e.g. "get_weather"; got "a b"'),
        # an empty list is no schema either (no test sent one: a check taking it passed)
        ({"functions": [WEATHER["function"], {"name": "f", "parameters": []}]},
         "functions[1].parameters", 'functions[1].parameters must be a JSON schema object, e.g. '
         '{"type": "object", "properties": {...}} (got [])'),
    ],
)  # fmt: skip
def test_a_bad_tool_is_named_with_its_own_value(
    shared_server: Running, stubs: Stubs, extra: dict[str, Any], param: str, ending: str
) -> None:
    """A bad tool or deprecated function (no type, no function object, a name or parameters
    OpenAI refuses) was a 400 with param `tools` (or `functions`), its message ending with
    "(got [all the tools, cut to 80 characters])", which held the good tools, not the bad
    one; the param now names the field, and the value shown is its own."""
    with pytest.raises(openai.BadRequestError) as error:
        shared_server.client().chat.completions.create(
            model=MODEL, messages=user("hi"), extra_body=extra
        )
    body = error.value.body
    assert body["param"] == param
    assert body["message"].endswith(ending), body["message"]
    assert "city" not in body["message"]
    assert not any(stub.bodies for stub in stubs.workers.values())


def assert_a_400(client: openai.OpenAI, extra: dict, param: str, message: str) -> None:
    """A request with `extra` in its body is refused with a 400 naming `param`, saying
    `message`."""
    with pytest.raises(openai.BadRequestError) as error:
        client.chat.completions.create(model=MODEL, messages=user("hi"), extra_body=extra)
    assert error.value.body["param"] == param
    assert error.value.body["message"] == message


def test_a_bad_json_schema_is_named_with_its_own_value(
    shared_server: Running, stubs: Stubs
) -> None:
    """A json_schema response_format without its name, with a name OpenAI refuses, or
    without its json_schema object was a 400 with param `response_format` whose message
    ended with "(got {the whole response_format, cut to 80 characters})" (after its own
    'got "my answer"'); the param now names the field, and only its own value is shown."""
    client = shared_server.client()
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    where = "response_format.json_schema.name"
    for spec, message in (
        ({"name": "my answer", "schema": schema},
         f'{where} must be letters, digits, _ or - (at most 64), e.g. "answer"; got "my answer"'),
        ({"schema": schema}, f'{where} is required, as in OpenAI\'s API, e.g. "answer"'),
    ):  # fmt: skip
        extra = {"response_format": {"type": "json_schema", "json_schema": spec}}
        assert_a_400(client, extra, where, f"invalid request: {message}")
    assert_a_400(
        client,
        {"response_format": {"type": "json_schema", "json_schema": "answer"}},
        "response_format.json_schema",
        'invalid request: response_format of type "json_schema" needs a `json_schema` object, '
        'e.g. {"type": "json_schema", "json_schema": {"name": "answer", "schema": {"type": '
        '"object", ...}}} (got "answer")',
    )
    # left out, it has no value to show (it ended "(got null)")
    assert_a_400(
        client,
        {"response_format": {"type": "json_schema"}},
        "response_format.json_schema",
        'invalid request: response_format of type "json_schema" needs a `json_schema` object, '
        'e.g. {"type": "json_schema", "json_schema": {"name": "answer", "schema": {"type": '
        '"object", ...}}}',
    )
    assert not any(stub.bodies for stub in stubs.workers.values())


def test_a_bad_logit_bias_entry_is_named_by_its_token(shared_server: Running, stubs: Stubs) -> None:
    """A logit_bias entry out of range, or keyed by no token id, was a 400 with param
    `logit_bias` whose message ended with "(got {all the biases, cut to 80 characters})": of
    a client's list of banned tokens, the first few, not the bad one. The param now names the
    entry (logit_bias.50256, as a bias that is no number is named), and the message says it."""
    banned = {str(token): -100 for token in range(1000, 1020)}
    client = shared_server.client()
    assert_a_400(
        client,
        {"logit_bias": {**banned, "50256": 200}},
        "logit_bias.50256",
        "invalid request: logit_bias['50256'] = 200 is outside -100..100",
    )
    assert_a_400(
        client,
        {"logit_bias": {**banned, "hello": 5}},
        "logit_bias.hello",
        "invalid request: logit_bias keys are token ids (integers written as strings, e.g. "
        "\"50256\"); got 'hello'",
    )
    assert not any(stub.bodies for stub in stubs.workers.values())


def test_a_logit_bias_beyond_a_floats_range_says_so(shared_server: Running, stubs: Stubs) -> None:
    """A bias sent as a 401-digit integer got pydantic's "Input should be a valid number",
    which said neither that it was too large nor what to send; it now says both, as the
    request's float fields do, and names its entry."""
    assert_a_400(
        shared_server.client(),
        {"logit_bias": {"1000": -100, "50256": -(10**400)}},
        "logit_bias.50256",
        "invalid request: logit_bias['50256'] must be a finite number from -100 to 100, e.g. "
        "0.5 (got an integer of 401 digits, beyond a 64-bit float's range, about 1.8e308)",
    )
    assert not any(stub.bodies for stub in stubs.workers.values())


def test_a_strict_flag_that_is_no_boolean_is_a_400_naming_it(
    shared_server: Running, stubs: Stubs
) -> None:
    """OpenAI refuses a json_schema's or a function tool's `strict` that is not a boolean
    ("true", 1); it went on, and a local worker read it as not strict, so it answered
    with a constraint its grammar leaves out (`strict: true` sends such a request to the
    other workers). true, false and null are sent on."""
    client = shared_server.client()
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}}}

    def tool(strict: Any) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"name": "f", "strict": strict, "parameters": schema},
        }

    json_schema = {"name": "x", "strict": "true", "schema": schema}
    for extra, param, got in (
        ({"response_format": {"type": "json_schema", "json_schema": json_schema}},
         "response_format.json_schema.strict", '"true"'),
        ({"tools": [tool(1)]}, "tools[0].function.strict", "1"),
    ):  # fmt: skip
        assert_a_400(
            client, extra, param,
            f"invalid request: {param} must be true or false (a JSON boolean, not a string or a "
            f"number); got {got}",
        )  # fmt: skip
    assert not any(stub.bodies for stub in stubs.workers.values())
    for strict in (True, False, None):
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=user("hi"), extra_body={"tools": [tool(strict)]}
        )
        sent = stubs.workers[raw.headers["x-fugu-worker"]].bodies[-1]
        assert sent["tools"][0]["function"]["strict"] is strict


def test_a_description_that_is_no_string_is_a_400_naming_it(
    shared_server: Running, stubs: Stubs
) -> None:
    """OpenAI types a function's or a json_schema's `description` as a string: a number, a
    list or an object went on to the worker, which refused it (a 400 blamed on the worker)
    or read it as no description. A string or null is sent on."""
    client = shared_server.client()
    schema = {"type": "object"}
    json_schema = {"name": "x", "description": ["a"], "schema": schema}
    for extra, param, got in (
        ({"response_format": {"type": "json_schema", "json_schema": json_schema}},
         "response_format.json_schema.description", '["a"]'),
        ({"tools": [{"type": "function", "function": {"name": "f", "description": 5}}]},
         "tools[0].function.description", "5"),
        ({"functions": [{"name": "f", "description": {"a": 1}}]},
         "functions[0].description", '{"a": 1}'),
    ):  # fmt: skip
        assert_a_400(
            client, extra, param,
            f"invalid request: {param} must be a string, the text telling the model what it "
            f"is for; got {got}",
        )  # fmt: skip
    assert not any(stub.bodies for stub in stubs.workers.values())
    for description in ("Adds two numbers", None):
        tool = {"type": "function", "function": {"name": "f", "description": description}}
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=user("hi"), extra_body={"tools": [tool]}
        )
        sent = stubs.workers[raw.headers["x-fugu-worker"]].bodies[-1]
        assert sent["tools"][0]["function"]["description"] == description


def test_an_empty_list_in_a_schemas_values_is_sent_on(shared_server: Running, stubs: Stubs) -> None:
    """enum, const, default and examples hold values, not schemas: an empty `anyOf` or
    `oneOf` inside one is a value any schema may hold, and the request goes on."""
    schema = {"type": "object", "default": {"anyOf": []}, "examples": [{"oneOf": []}]}
    response_format = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    raw = shared_server.client().chat.completions.with_raw_response.create(
        model=MODEL, messages=user("hi"), extra_body={"response_format": response_format}
    )
    sent = stubs.workers[raw.headers["x-fugu-worker"]].bodies[-1]
    assert sent["response_format"] == response_format


def test_both_output_limits_in_one_request_are_a_400_naming_them(
    shared_server: Running, stubs: Stubs
) -> None:
    """OpenAI refuses max_tokens and max_completion_tokens together ("Setting 'max_tokens'
    and 'max_completion_tokens' at the same time is not supported"); fugu-lite used
    max_completion_tokens and dropped the other without a word (max_tokens=5 gave an answer
    up to 400 tokens long). One of them, or either with the other null, is sent on."""
    client = shared_server.client()
    with pytest.raises(openai.BadRequestError) as error:
        client.chat.completions.create(
            model=MODEL, messages=user("hi"), max_tokens=5, max_completion_tokens=400
        )
    body = error.value.body
    assert (body["param"], body["code"]) == ("max_tokens", "invalid_parameter_combination")
    assert "max_tokens=5 and max_completion_tokens=400 are two names" in body["message"]
    # both, one of them more than the server allows (4096): told to send one name first (no
    # test sent it: checking the server's limit first passed)
    with pytest.raises(openai.BadRequestError) as error:
        client.chat.completions.create(
            model=MODEL, messages=user("hi"), max_tokens=5, max_completion_tokens=5000
        )
    assert error.value.body["code"] == "invalid_parameter_combination"
    assert not any(stub.bodies for stub in stubs.workers.values())
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=user("hi"), max_completion_tokens=400, extra_body={"max_tokens": None}
    )
    assert stubs.workers[raw.headers["x-fugu-worker"]].bodies[-1]["max_completion_tokens"] == 400


@pytest.mark.parametrize("name", ["max_tokens", "max_completion_tokens"])
def test_an_output_limit_up_to_the_servers_is_sent_and_more_is_a_400_naming_it(
    shared_server: Running, stubs: Stubs, name: str
) -> None:
    """--max-tokens-limit (4096 here) is the most a client may ask for: exactly that is sent
    on, one token more is a 400 whose param is the name the client used."""
    client = shared_server.client()
    with pytest.raises(openai.BadRequestError) as error:
        client.chat.completions.create(model=MODEL, messages=user("hi"), extra_body={name: 4097})
    body = error.value.body
    assert (body["param"], body["code"]) == (name, "max_tokens_too_large")
    assert body["message"] == (
        f"{name}=4097 is more than this server allows (4096); ask for at most 4096 tokens"
    )
    assert not any(stub.bodies for stub in stubs.workers.values())
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=user("hi"), extra_body={name: 4096}
    )
    assert stubs.workers[raw.headers["x-fugu-worker"]].bodies[-1][name] == 4096


def test_loosely_typed_parameters_are_refused_naming_the_parameter(
    shared_server: Running, stubs: Stubs
) -> None:
    """`temperature: true`, `include_usage: "yes"` and `tools: []` were read by pydantic's
    lax rules and sent on; OpenAI answers them 400 naming the parameter. Integers are
    numbers there, as in OpenAI's API."""
    for extra, param in (
        ({"temperature": True}, "temperature"),
        ({"frequency_penalty": "1"}, "frequency_penalty"),
        ({"stream": True, "stream_options": {"include_usage": 1}}, "stream_options.include_usage"),
        ({"tools": []}, "tools"),
        ({"stop": 5}, "stop"),
    ):
        response = shared_server.post({**VALID, **extra})
        assert response.status_code == 400, response.text
        assert response.json()["error"]["param"] == param
    assert not any(stub.bodies for stub in stubs.workers.values())
    raw = shared_server.client().chat.completions.with_raw_response.create(
        model=MODEL, messages=user("hi"), temperature=1, top_p=1, presence_penalty=0,
        logit_bias={"42": 5},
    )  # fmt: skip
    sent = stubs.workers[raw.headers["x-fugu-worker"]].bodies[-1]
    assert (sent["temperature"], sent["top_p"], sent["presence_penalty"]) == (1, 1, 0)
    assert sent["logit_bias"] == {"42": 5}


def test_parameters_at_openais_limits_are_sent_on(shared_server: Running, stubs: Stubs) -> None:
    """OpenAI's ranges hold their ends (temperature 2, top_logprobs 20, a logit_bias of
    -100, four stop sequences), and `stop` may be one string: each reaches the worker as
    sent."""
    limits = {
        "temperature": 2, "top_p": 0, "presence_penalty": -2, "frequency_penalty": 2,
        "logit_bias": {"42": -100, "7": 100}, "logprobs": True, "top_logprobs": 20, "n": 1,
    }  # fmt: skip
    client = shared_server.client()
    for stop in (["a", "b", "c", "d"], "\n"):
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=user("hi"), stop=stop, **limits
        )
        sent = stubs.workers[raw.headers["x-fugu-worker"]].bodies[-1]
        assert {key: sent[key] for key in limits} == limits
        assert sent["stop"] == stop


def test_what_openai_takes_at_the_edges_of_its_checks_is_sent_on(
    shared_server: Running, stubs: Stubs
) -> None:
    """A function named in 64 characters (OpenAI's most), four stop sequences (its most) and
    a deprecated function result with null content reach the worker (no test sent any of
    them: a check refusing one passed), and so do a function's and a json_schema's name
    holding digits, a hyphen and capitals, which OpenAI's rule takes (a rule without the
    digits or the hyphen passed every test)."""
    name = "f" * 64
    messages = [
        ASKED,
        {"role": "assistant", "content": None, "function_call": {"name": "add",
                                                                 "arguments": "{}"}},
        {"role": "function", "name": "add", "content": None},
    ]  # fmt: skip
    tools = [
        {"type": "function", "function": {"name": name}},
        {"type": "function", "function": {"name": "get-Weather_2"}},
    ]
    answer = {"type": "json_schema", "json_schema": {"name": "Answer-v2", "schema": {}}}
    stops = ["a", "b", "c", "d"]
    response = shared_server.post(
        {**VALID, "messages": messages, "tools": tools, "stop": stops, "response_format": answer}
    )
    assert response.status_code == 200, response.text
    sent = stubs.workers[response.headers["x-fugu-worker"]].bodies[-1]
    assert (sent["tools"], sent["stop"], sent["response_format"]) == (tools, stops, answer)
    assert [message["role"] for message in sent["messages"]] == ["user", "assistant", "function"]


def test_user_and_safety_identifier_reach_the_worker_as_sent(
    shared_server: Running, stubs: Stubs
) -> None:
    """A safety_identifier of 128 characters (OpenAI's most) is sent on; so is a `user` of any
    length: OpenAI documents no limit of it (the openai SDK's types, 3.63), and a provider's
    own (OpenRouter's 128) is that worker's to say."""
    sent_ids = {"safety_identifier": "s" * 128, "user": "u" * 1000}
    response = shared_server.post({**VALID, **sent_ids})
    assert response.status_code == 200, response.text
    sent = stubs.workers[response.headers["x-fugu-worker"]].bodies[-1]
    assert {key: sent[key] for key in sent_ids} == sent_ids


def test_a_prompt_cache_key_is_checked_as_openai_checks_it(
    shared_server: Running, stubs: Stubs
) -> None:
    """OpenAI refuses a prompt_cache_key over 64 characters (400 string_above_max_length); it
    went on, so whether the request failed depended on the worker routed to. The openai SDK's
    BadRequestError names it, and one of 64 characters is sent on as it is."""
    client = shared_server.client()
    with pytest.raises(openai.BadRequestError) as error:
        client.chat.completions.create(model=MODEL, messages=user("hi"), prompt_cache_key="k" * 65)
    assert error.value.body["param"] == "prompt_cache_key"
    assert not any(stub.bodies for stub in stubs.workers.values())
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=user("hi"), prompt_cache_key="k" * 64
    )
    sent = stubs.workers[raw.headers["x-fugu-worker"]].bodies[-1]
    assert sent["prompt_cache_key"] == "k" * 64


def test_metadata_values_are_strings_as_at_openai(shared_server: Running, stubs: Stubs) -> None:
    """OpenAI refuses a metadata value that is no string (`{"score": 1}`); it went on, and a
    local worker ignored it while a remote one refused it, so whether the request failed
    depended on the worker routed to. Strings are sent on."""
    client = shared_server.client()
    with pytest.raises(openai.BadRequestError) as error:
        client.chat.completions.create(
            model=MODEL, messages=user("hi"), extra_body={"metadata": {"score": 1}}
        )
    assert error.value.body["param"] == "metadata.score"
    assert error.value.body["message"] == (
        "invalid request: metadata.score: Input should be a valid string (got 1)"
    )
    # a key written like one of pydantic's branch names ("trace-id", "none") is named too:
    # it was left out, the 400 saying only "metadata: ... (got 7)" of 16 keys
    for key in ("trace-id", "none"):
        with pytest.raises(openai.BadRequestError) as error:
            client.chat.completions.create(
                model=MODEL, messages=user("hi"), extra_body={"metadata": {"team": "a", key: 7}}
            )
        assert error.value.body["param"] == f"metadata.{key}"
        assert error.value.body["message"] == (
            f"invalid request: metadata.{key}: Input should be a valid string (got 7)"
        )
    assert not any(stub.bodies for stub in stubs.workers.values())
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=user("hi"), metadata={"team": "search"}, store=True
    )
    sent = stubs.workers[raw.headers["x-fugu-worker"]].bodies[-1]
    assert (sent["metadata"], sent["store"]) == ({"team": "search"}, True)
    # OpenAI's limits are taken: 16 pairs, a key of 64 characters, a value of 512
    at_limits = {f"k{i}": "v" for i in range(15)} | {"k" * 64: "v" * 512}
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=user("hi"), metadata=at_limits
    )
    assert stubs.workers[raw.headers["x-fugu-worker"]].bodies[-1]["metadata"] == at_limits


@pytest.mark.parametrize(
    ("extra", "param", "message"),
    [
        ({"reasoning_effort": 3}, "reasoning_effort",
         "reasoning_effort: Input should be a valid string (got 3)"),
        ({"service_tier": {"tier": "flex"}}, "service_tier",
         "service_tier: Input should be a valid string"),
        ({"verbosity": 2}, "verbosity", "verbosity: Input should be a valid string (got 2)"),
        # a string: a local worker's check for audio output (a list holding "audio") missed it
        ({"modalities": "audio"}, "modalities",
         'modalities: Input should be a valid list (got "audio")'),
        ({"modalities": ["text", 1]}, "modalities[1]",
         "modalities[1]: Input should be a valid string (got 1)"),
        # OpenAI requires audio's format and voice with audio output
        ({"modalities": ["text", "audio"]}, "audio",
         "audio is required when modalities asks for audio output, as OpenAI's API requires: "
         'give its format and voice, e.g. {"format": "wav", "voice": "alloy"}, or drop "audio" '
         "from modalities"),
        ({"audio": {"voice": "alloy"}}, "audio.format", "audio.format: is required"),
        ({"audio": {"format": "wav", "voice": 5}}, "audio.voice",
         """audio.voice: must be a voice's name, such as "alloy", or a custom voice's """
         '{"id": "..."} (got 5)'),
        ({"audio": {"format": "wav", "voice": {"name": "x"}}}, "audio.voice",
         'audio.voice as an object is a custom voice: it needs its string "id"'),
        ({"audio": {"format": "wav", "voice": {"id": 1234}}}, "audio.voice",
         'audio.voice as an object is a custom voice: it needs its string "id", e.g. {"id": '
         '"voice_1234"} (got {"id": 1234})'),
        ({"prediction": "def f(): pass"}, "prediction",
         'prediction: must be a JSON object (got "def f(): pass")'),
        ({"prediction": {"type": "content", "content": [{"type": "text", "text": 1}]}},
         "prediction.content[0].text",
         "prediction.content[0].text: Input should be a valid string (got 1)"),
        ({"web_search_options": {"search_context_size": "huge"}},
         "web_search_options.search_context_size",
         "web_search_options.search_context_size: Input should be 'low', 'medium' or 'high' "
         '(got "huge")'),
        ({"web_search_options": {"user_location": {"approximate": {"city": "Oslo"}}}},
         "web_search_options.user_location.type",
         "web_search_options.user_location.type: is required"),
    ],
)  # fmt: skip
def test_openais_typed_options_are_refused_naming_the_field(
    shared_server: Running, stubs: Stubs, extra: dict[str, Any], param: str, message: str
) -> None:
    """These went on to the worker unchecked, after routing, where OpenAI refuses any value
    its API does not type (a 400 blamed on the worker, counted against it); each is a 400
    naming the field now, before routing."""
    assert_refused_before_routing(shared_server, stubs, extra, param, message)


def assert_refused_before_routing(
    server: Running, stubs: Stubs, extra: dict[str, Any], param: str, message: str
) -> None:
    """A request with `extra` in its body is a 400 naming `param`, its message starting with
    `message`, and no worker is asked."""
    response = server.post({**VALID, **extra})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param
    assert error["message"].startswith(f"invalid request: {message}"), error["message"]
    assert not any(stub.bodies for stub in stubs.workers.values())


def test_openais_typed_options_reach_the_worker_as_sent(
    shared_server: Running, stubs: Stubs
) -> None:
    """Values OpenAI takes, sent by the openai SDK, reach the worker unchanged (a custom
    voice, text parts, a location's null and a key fugu-lite does not know included)."""
    options: dict[str, Any] = {
        "reasoning_effort": "xhigh", "service_tier": "flex", "verbosity": "low",
        "modalities": ["text", "audio"],
        "audio": {"format": "pcm16", "voice": {"id": "voice_1234"}},
        "prediction": {"type": "content", "content": [{"type": "text", "text": "x = 1"}]},
        "web_search_options": {"search_context_size": "low", "user_location": {
            "type": "approximate", "approximate": {"city": "Oslo", "timezone": None}}},
    }  # fmt: skip
    client = shared_server.client()
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=user("hi"), **options
    )
    sent = stubs.workers[raw.headers["x-fugu-worker"]].bodies[-1]
    assert {key: sent[key] for key in options} == options
    plain = {
        # other providers' values (Groq's, OpenRouter's image output): any string goes on
        "reasoning_effort": "default",
        "service_tier": "on_demand",
        "modalities": ["image", "text"],
        "audio": {"format": "mp3", "voice": "alloy", "speed": 1.2},
        "prediction": {"type": "content", "content": "x = 1"},
        "web_search_options": {},
    }
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=user("hi"), extra_body=plain
    )
    sent = stubs.workers[raw.headers["x-fugu-worker"]].bodies[-1]
    assert {key: sent[key] for key in plain} == plain


@pytest.mark.parametrize(
    ("extra", "param", "message"),
    [
        ({"metadata": {"a.b": 7}}, 'metadata["a.b"]',
         'metadata["a.b"]: Input should be a valid string (got 7)'),
        ({"metadata": {"runs[0]": 7}}, 'metadata["runs[0]"]',
         'metadata["runs[0]"]: Input should be a valid string (got 7)'),
        ({"metadata": {"": 7}}, 'metadata[""]', 'metadata[""]: Input should be a valid string'),
        ({"metadata": {"my key": 7}}, 'metadata["my key"]',
         'metadata["my key"]: Input should be a valid string'),
        ({"metadata": {"it's": 7}}, 'metadata["it\'s"]',
         'metadata["it\'s"]: Input should be a valid string'),
        # written as the client wrote it, not escaped (metadata["gr\u00f6\u00dfe x"])
        ({"metadata": {"größe x": 7}}, 'metadata["größe x"]',
         'metadata["größe x"]: Input should be a valid string'),
        ({"logit_bias": {"1.5": 1}}, 'logit_bias["1.5"]', "logit_bias keys are token ids"),
        # a schema's property names: the path in the message, not its param
        ({"response_format": {"type": "json_object", "schema": {"properties": {"a.b": {
            "enum": []}}}}}, "response_format.schema",
         'response_format.schema.properties["a.b"].enum is empty'),
    ],
)  # fmt: skip
def test_a_key_holding_a_dot_or_a_bracket_is_named_in_brackets(
    shared_server: Running, stubs: Stubs, extra: dict[str, Any], param: str, message: str
) -> None:
    """OpenAI's metadata keys may hold a dot or a bracket; such a key was named as a path
    (`metadata.a.b` for the key "a.b": the key b of a key a), and an empty key as
    `metadata.`. A key that is empty or holds a dot, a bracket, a quote or
    a space is now written in brackets as a JSON string, in `param` and the message; its
    letters as written (no test had one beyond ASCII, so escaping them passed)."""
    assert_refused_before_routing(shared_server, stubs, extra, param, message)


def sized(size: int) -> bytes:
    """A request body of exactly `size` bytes."""
    padding = size - len(json.dumps({**VALID, "messages": user("")}))
    return json.dumps({**VALID, "messages": user("x" * padding)}).encode()


def test_body_size_limit_is_a_413(shared_server: Running, stubs: Stubs) -> None:
    big = {**VALID, "messages": [{"role": "user", "content": "x" * 5000}]}
    response = shared_server.post(big)
    assert response.status_code == 413
    assert "4096 bytes" in response.json()["error"]["message"]

    def chunked():  # no Content-Length: the limit applies while reading
        yield json.dumps(big).encode()

    response = httpx.post(
        f"{shared_server.url}/v1/chat/completions",
        content=chunked(),
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 413
    assert "more than this server accepts (4096 bytes)" in response.json()["error"]["message"]
    assert not any(stub.bodies for stub in stubs.workers.values())

    # the limit itself is accepted, whether the size is declared (Content-Length) or not
    assert shared_server.post(sized(4096)).status_code == 200
    assert shared_server.post(sized(4097)).status_code == 413
    for size, status in ((4096, 200), (4097, 413)):
        response = httpx.post(
            f"{shared_server.url}/v1/chat/completions",
            content=iter([sized(size)]),
            headers={"content-type": "application/json"},
        )
        assert response.status_code == status, response.text


def test_a_compressed_body_is_read_as_its_content_encoding_says(
    shared_server: Running, stubs: Stubs
) -> None:
    """A gzip or deflate body is decompressed (it was refused as "not UTF-8 text", which
    named neither the header nor the fix), within --max-body-bytes once decompressed; an
    encoding the server does not read, or data that is not what the header says, is a
    clear 4xx naming it."""
    body = json.dumps({**VALID, "messages": [{"role": "user", "content": "zipped hi"}]})
    for encoding, data in (
        ("gzip", gzip.compress(body.encode())),
        ("x-gzip", gzip.compress(body.encode())),
        ("deflate", zlib.compress(body.encode())),
        ("identity", body.encode()),
        # content codings are named in any case (RFC 9110)
        ("GZIP", gzip.compress(body.encode())),
        ("Deflate", zlib.compress(body.encode())),
    ):
        response = shared_server.post(data, headers={"content-encoding": encoding})
        assert response.status_code == 200, response.text
    sent = [b["messages"][-1]["content"] for stub in stubs.workers.values() for b in stub.bodies]
    assert sent == ["zipped hi"] * 6
    # the limit itself is accepted once decompressed too, one byte more is not
    for size, status in ((4096, 200), (4097, 413)):
        response = shared_server.post(
            gzip.compress(sized(size)), headers={"content-encoding": "gzip"}
        )
        assert response.status_code == status, response.text

    # under the limit as sent (a few dozen bytes), far over it once decompressed
    bomb = gzip.compress(json.dumps({**VALID, "messages": user("x" * 100_000)}).encode())
    assert len(bomb) < 4096
    refused = [
        (shared_server.post(bomb, headers={"content-encoding": "gzip"}), 413,
         "more than this server accepts (4096 bytes) once decompressed"),
        (shared_server.post(b"\x1f\x8bnot gzip", headers={"content-encoding": "gzip"}), 400,
         "the request body is not valid gzip data"),
        (shared_server.post(gzip.compress(body.encode())[:-12], headers={
            "content-encoding": "gzip"}), 400, "gzip data is cut short"),
        (shared_server.post(body.encode(), headers={"content-encoding": "br"}), 415,
         "Content-Encoding is 'br', which this server does not read"),
    ]  # fmt: skip
    for response, status, fragment in refused:
        assert response.status_code == status, response.text
        assert fragment in response.json()["error"]["message"]
    assert len([b for stub in stubs.workers.values() for b in stub.bodies]) == 7


def test_a_client_leaving_during_its_upload_is_no_internal_error(
    shared_server: Running, caplog: pytest.LogCaptureFixture
) -> None:
    """A client that closed its connection before sending all of its body (an aborted
    upload) made an "unexpected error": a traceback in the server's log and a counted 500
    internal_error, which alerts on; it is counted as the client's leaving (499)."""
    before = shared_server.metrics()
    caplog.set_level(logging.WARNING)
    host, port = shared_server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as connection:
        connection.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
            b'application/json\r\nContent-Length: 1000\r\n\r\n{"model": '
        )
        time.sleep(0.2)  # the server is reading the body

    def counted(text: str, name: str, **labels: str) -> float:
        return metric_value(text, name, **labels) - metric_value(before, name, **labels)

    assert wait_until(
        lambda: counted(shared_server.metrics(), "fugu_requests_total", status="499") == 1
    )
    after = shared_server.metrics()
    assert counted(after, "fugu_errors_total", code="client_disconnected") == 1
    assert counted(after, "fugu_errors_total", code="internal_error") == 0
    assert not [record for record in caplog.records if record.exc_info is not None]


def test_a_form_or_an_upload_instead_of_json_is_told_what_to_send(
    shared_server: Running, stubs: Stubs
) -> None:
    """A body sent as a form (`requests.post(url, data=...)`) or a file upload was refused
    as "not valid JSON: Expecting value at line 1, column 1", which said nothing of how it
    was sent; JSON sent under another Content-Type is still read."""
    url = f"{shared_server.url}/v1/chat/completions"
    form = httpx.post(url, data={"model": MODEL, "messages": "hi"})
    upload = httpx.post(url, files={"file": ("chat.json", json.dumps(VALID).encode())})
    for response, media_type in (
        (form, "application/x-www-form-urlencoded"),
        (upload, "multipart/form-data"),
    ):
        assert response.status_code == 400, response.text
        assert response.json()["error"]["message"].endswith(
            f"; it was sent as {media_type}: send the JSON object itself, with "
            "Content-Type: application/json"
        )
    assert not any(stub.bodies for stub in stubs.workers.values())
    # curl -d sends JSON as a form's type: it was read, and still is
    response = shared_server.post(
        VALID, headers={"content-type": "application/x-www-form-urlencoded"}
    )
    assert response.status_code == 200, response.text
    # sent as JSON (charset, capitals or a JSON type of its own), it is not told to send JSON
    for content_type in ("application/json", "Application/JSON; charset=utf-8", "text/json",
                         "application/vnd.api+json"):  # fmt: skip
        not_json = shared_server.post(b"{oops", headers={"content-type": content_type})
        assert not_json.json()["error"]["message"].endswith("at line 1, column 2"), content_type
    # sent with no Content-Type at all (httpx's content=, a raw socket): nothing to tell
    not_json = httpx.post(url, content=b"{oops")
    assert not_json.json()["error"]["message"].endswith("at line 1, column 2")


def test_a_refused_request_carries_a_request_id(shared_server: Running) -> None:
    """OpenAI's errors carry x-request-id as its answers do, and the openai SDK keeps it as
    the error's request_id; a request refused before routing (bad input, an unknown model
    or route, a body too large) had none, so request_id was None."""
    client = shared_server.client()
    ids = []
    for wrong in ({"model": "gpt-4o"}, {"n": 3}, {"messages": user("x" * 5000)}):
        with pytest.raises(openai.APIStatusError) as raised:
            client.chat.completions.create(**{"model": MODEL, "messages": user("hi"), **wrong})
        assert raised.value.status_code in (400, 404, 413)
        ids.append(raised.value.request_id)
    ids.append(httpx.get(f"{shared_server.url}/v1/nothing").headers.get("x-request-id"))
    assert all(id_ is not None and id_.startswith("chatcmpl-") for id_ in ids), ids
    assert len(set(ids)) == 4


def test_unknown_routes_and_methods_answer_in_openai_shape(shared_server: Running) -> None:
    """OpenAI answers an unknown route with code null ("Invalid URL (POST /v1/x)", as its
    404s quoted in client projects' issues show); fugu-lite's code was the status as a
    string, "404" or "405", which no OpenAI error carries."""
    response = httpx.post(f"{shared_server.url}/v1/completions", json=VALID)
    assert response.status_code == 404
    error = response.json()["error"]
    assert "/v1/chat/completions" in error["message"]
    assert (error["type"], error["param"], error["code"]) == ("invalid_request_error", None, None)
    with pytest.raises(openai.NotFoundError) as raised:  # the SDK reads the same null code
        shared_server.client().post("/nothing", cast_to=httpx.Response)
    assert raised.value.code is None
    response = httpx.get(f"{shared_server.url}/v1/chat/completions")
    assert response.status_code == 405
    assert response.json()["error"]["code"] is None


def test_a_base_url_without_v1_or_with_it_twice_is_told_what_to_set(
    shared_server: Running,
) -> None:
    """An openai client given base_url="http://host:8000" (no /v1) posted to
    /chat/completions and got a 404 listing this server's routes; the 404 now says what to
    set the base_url to. So it does for a base_url with /v1 twice (/v1 added to one that
    had it: /v1/v1/chat/completions), which had the list alone."""
    root = shared_server.url
    client = openai.OpenAI(base_url=root, api_key="unused", max_retries=0)
    hint = f"the client's base_url lacks /v1: set it to {root}/v1"
    with pytest.raises(openai.NotFoundError) as error:
        client.chat.completions.create(model=MODEL, messages=user("hi"))
    assert error.value.body["message"].endswith(hint)
    with pytest.raises(openai.NotFoundError) as error:
        client.models.retrieve(MODEL)
    assert error.value.body["message"].endswith(hint)
    response = httpx.post(f"{root}/v1/completions", json=VALID)
    assert response.status_code == 404 and "base_url" not in response.text
    doubled = openai.OpenAI(base_url=f"{root}/v1/v1", api_key="unused", max_retries=0)
    with pytest.raises(openai.NotFoundError) as error:
        doubled.chat.completions.create(model=MODEL, messages=user("hi"))
    assert error.value.body["message"] == (
        "no route POST /v1/v1/chat/completions; this server answers POST /v1/chat/completions, "
        f"GET /v1/models, /health and /metrics; the client's base_url has /v1 twice: set it to "
        f"{root}/v1"
    )
    with pytest.raises(openai.NotFoundError) as error:
        doubled.models.retrieve(MODEL)
    assert error.value.body["message"].endswith(f"has /v1 twice: set it to {root}/v1")
    response = httpx.post(f"{root}/v1/v1/completions", json=VALID)
    assert response.status_code == 404 and "base_url" not in response.text


def test_a_base_url_set_to_the_chat_endpoint_is_told_what_to_set(shared_server: Running) -> None:
    """An openai client given the full endpoint as its base_url
    (http://host:8000/v1/chat/completions) posted to /v1/chat/completions/chat/completions
    and got a 404 listing this server's routes alone, where a base_url without /v1 or with
    it twice is told what to set."""
    root = shared_server.url
    endpoint = openai.OpenAI(
        base_url=f"{root}/v1/chat/completions", api_key="unused", max_retries=0
    )
    with pytest.raises(openai.NotFoundError) as error:
        endpoint.chat.completions.create(model=MODEL, messages=user("hi"))
    assert error.value.body["message"] == (
        "no route POST /v1/chat/completions/chat/completions; this server answers POST "
        "/v1/chat/completions, GET /v1/models, /health and /metrics; the client's base_url "
        f"ends in /chat/completions, which the client adds itself: set it to {root}/v1"
    )
    with pytest.raises(openai.NotFoundError) as error:
        endpoint.models.list()
    assert error.value.body["message"].endswith(
        f"ends in /chat/completions, which the client adds itself: set it to {root}/v1"
    )
    response = httpx.post(f"{root}/v1/chat/completions/completions", json=VALID)
    assert response.status_code == 404 and "base_url" not in response.text


def test_a_base_url_set_to_the_models_endpoint_is_told_what_to_set(
    shared_server: Running,
) -> None:
    """An openai client given the models endpoint as its base_url (http://host:8000/v1/models)
    posted a chat request to /v1/models/chat/completions, which GET /v1/models/{id} holds:
    it got "POST is not allowed on /v1/models/chat/completions" and no word of its base_url,
    where one ending in /chat/completions is told what to set."""
    root = shared_server.url
    models = openai.OpenAI(base_url=f"{root}/v1/models", api_key="unused", max_retries=0)
    with pytest.raises(openai.APIStatusError) as error:
        models.chat.completions.create(model=MODEL, messages=user("hi"))
    assert error.value.status_code == 405
    assert error.value.body["message"] == (
        "POST is not allowed on /v1/models/chat/completions; the client's base_url ends in "
        f"/models, which the client adds itself: set it to {root}/v1"
    )
    response = httpx.post(f"{root}/v1/models/{MODEL}", json=VALID)
    assert response.status_code == 405 and "base_url" not in response.text


def test_the_responses_api_is_told_to_use_chat_completions(shared_server: Running) -> None:
    """Newer openai SDK code calls the Responses API (client.responses.create: POST
    /v1/responses), which this server does not speak; it got the 404 listing the routes,
    which did not say why nor what to call instead."""
    client = shared_server.client()
    with pytest.raises(openai.NotFoundError) as error:
        client.responses.create(model=MODEL, input="hi")
    assert error.value.body == {
        "message": "no route POST /v1/responses: this server speaks OpenAI's Chat Completions "
        "API, not its Responses API; call client.chat.completions.create (POST "
        "/v1/chat/completions) instead",
        "type": "invalid_request_error",
        "param": None,
        "code": None,
    }
    with pytest.raises(openai.NotFoundError) as error:
        client.responses.retrieve("resp_1")
    assert error.value.body["message"].startswith(
        "no route GET /v1/responses/resp_1: this server speaks OpenAI's Chat Completions API"
    )


def test_the_responses_api_from_a_wrong_base_url_is_told_both_fixes(
    shared_server: Running,
) -> None:
    """The Responses API called from a base_url without /v1 (POST /responses) got the 404
    listing the routes, not the one saying to call chat completions that /v1/responses gets;
    it now gets that one and what to set the base_url to."""
    root = shared_server.url
    client = openai.OpenAI(base_url=root, api_key="unused", max_retries=0)
    with pytest.raises(openai.NotFoundError) as error:
        client.responses.create(model=MODEL, input="hi")
    assert error.value.body["message"] == (
        "no route POST /responses: this server speaks OpenAI's Chat Completions API, not its "
        "Responses API; call client.chat.completions.create (POST /v1/chat/completions) "
        f"instead; the client's base_url lacks /v1: set it to {root}/v1"
    )
    doubled = openai.OpenAI(base_url=f"{root}/v1/v1", api_key="unused", max_retries=0)
    with pytest.raises(openai.NotFoundError) as error:
        doubled.responses.retrieve("resp_1")
    assert error.value.body["message"].startswith(
        "no route GET /v1/v1/responses/resp_1: this server speaks OpenAI's Chat Completions API"
    )
    assert error.value.body["message"].endswith(f"has /v1 twice: set it to {root}/v1")
    # from the models endpoint the POST is a 405 (GET /v1/models/{id}), which gave the base_url
    # fix alone: the client that fixed it then met the Responses API's refusal
    models = openai.OpenAI(base_url=f"{root}/v1/models", api_key="unused", max_retries=0)
    with pytest.raises(openai.APIStatusError) as error:
        models.responses.create(model=MODEL, input="hi")
    assert error.value.status_code == 405
    assert error.value.body["message"] == (
        "POST is not allowed on /v1/models/responses: this server speaks OpenAI's Chat "
        "Completions API, not its Responses API; call client.chat.completions.create (POST "
        "/v1/chat/completions) instead; the client's base_url ends in /models, which the "
        f"client adds itself: set it to {root}/v1"
    )
    response = httpx.post(f"{root}/responsesx", json=VALID)
    assert response.status_code == 404 and "Responses API" not in response.text


def test_head_is_answered_where_get_is(shared_server: Running) -> None:
    """An uptime monitor or load balancer probing /health with HEAD got a 405 (FastAPI's GET
    routes do not take HEAD) and reported the server down; HEAD answers as GET would,
    status and headers, without a body."""
    for path, status in [("/health", 200), ("/v1/models", 200), ("/metrics", 200),
                         (f"/v1/models/{MODEL}", 200), ("/v1/models/gpt-4o", 404)]:  # fmt: skip
        response = httpx.head(f"{shared_server.url}{path}")
        assert response.status_code == status, (path, response.status_code)
        assert response.content == b""
        assert response.headers["content-type"].startswith(
            httpx.get(f"{shared_server.url}{path}").headers["content-type"]
        )
    response = httpx.head(f"{shared_server.url}/v1/chat/completions")
    assert response.status_code == 405 and response.headers["allow"] == "POST"


def test_a_wrong_method_is_a_405_naming_it_and_the_allowed_ones(shared_server: Running) -> None:
    """A client calling a path with a method it does not take (GET on chat completions, a
    DELETE on the models) is told which method on which path, in OpenAI's shape, with the
    methods allowed in Allow; starlette's own text said only "Method Not Allowed"."""
    for method, path, allowed in [("GET", "/v1/chat/completions", "POST"),
                                  ("DELETE", "/v1/models", "GET, HEAD")]:  # fmt: skip
        response = httpx.request(method, f"{shared_server.url}{path}")
        assert response.status_code == 405
        # starlette lists a route's methods from a set: in any order
        assert sorted(response.headers["allow"].split(", ")) == allowed.split(", ")
        assert response.json()["error"] == {
            "message": f"{method} is not allowed on {path}",
            "type": "invalid_request_error",
            "param": None,
            "code": None,
        }


def test_refused_requests_are_counted_in_the_metrics(shared_server: Running) -> None:
    before = shared_server.metrics()
    shared_server.post(b"{broken")
    shared_server.post({**VALID, "model": "gpt-4o"})
    httpx.post(f"{shared_server.url}/v1/completions", json=VALID)  # no such route
    after = shared_server.metrics()

    def delta(name: str, **labels: str) -> float:
        return metric_value(after, name, **labels) - metric_value(before, name, **labels)

    assert delta("fugu_requests_total", status="400", stream="unknown") == 1
    assert delta("fugu_requests_total", status="404", stream="unknown") == 2
    assert delta("fugu_errors_total", code="invalid_request_error") == 1
    assert delta("fugu_errors_total", code="model_not_found") == 1
    assert delta("fugu_errors_total", code="404") == 1


def test_sdk_surfaces_bad_input_as_its_exceptions(shared_server: Running) -> None:
    client = shared_server.client()
    with pytest.raises(openai.NotFoundError) as missing:
        client.chat.completions.create(model="gpt-4o", messages=user("hi"))
    assert "gpt-4o" in missing.value.body["message"]
    with pytest.raises(openai.BadRequestError) as error:
        client.chat.completions.create(model=MODEL, messages=[{"role": "wizard", "content": "x"}])
    assert "messages[0].role" in error.value.body["message"]
    with pytest.raises(openai.BadRequestError) as error:
        client.chat.completions.create(model=MODEL, messages=user("hi"), max_tokens=10**6)
    assert (error.value.body["param"], error.value.body["code"]) == (
        "max_tokens",
        "max_tokens_too_large",
    )
    assert "ask for at most 4096 tokens" in error.value.body["message"]


def test_a_trailing_slash_on_a_route_is_served_as_without_it(
    shared_server: Running, stubs: Stubs
) -> None:
    """A base_url or path written with a trailing slash (`/v1/chat/completions/`) got
    Starlette's 307 redirect with an empty body: curl and httpx (which follow no redirect
    by default) saw no answer and no error, and a client that follows it may drop the POST
    body behind a proxy that rewrites the Location's scheme. Each route answers with and
    without the slash."""
    url = shared_server.url
    answered = httpx.post(f"{url}/v1/chat/completions/", json=VALID)
    assert answered.status_code == 200, answered.text
    assert answered.json()["choices"][0]["message"]["content"].startswith("answer from ")
    assert len([b for stub in stubs.workers.values() for b in stub.bodies]) == 1
    for path in ("/v1/models/", f"/v1/models/{MODEL}/", "/health/"):
        response = httpx.get(f"{url}{path}")
        assert response.status_code == 200, (path, response.status_code, response.text)
        assert response.json() == httpx.get(f"{url}{path.rstrip('/')}").json()
    assert httpx.get(f"{url}/metrics/").text.startswith("# HELP")


def test_a_model_naming_a_worker_is_told_how_to_send_to_that_worker(
    shared_server: Running, stubs: Stubs
) -> None:
    """A client naming one of the router's workers as the model (the id it saw in
    x-fugu-worker or /v1/models' `workers`) was told only that the model does not exist;
    the 404 now says it is a worker, and how a request goes to it (`workers`)."""
    with pytest.raises(openai.NotFoundError) as refused:
        shared_server.client().chat.completions.create(model="coder", messages=user("hi"))
    message = refused.value.body["message"]
    assert "'coder' is one of the router's workers, not a model" in message
    assert 'send model \'fugu-lite\' with "workers": ["coder"]' in message
    looked_up = httpx.get(f"{shared_server.url}/v1/models/coder")
    assert looked_up.status_code == 404
    assert looked_up.json()["error"]["message"] == message
    assert not any(stub.bodies for stub in stubs.workers.values())


def test_every_endpoint_answers_with_a_request_id(shared_server: Running) -> None:
    """OpenAI answers every request with its x-request-id (the openai SDK's `_request_id`,
    as on `client.models.list()`); /v1/models, /health and /metrics sent none, so neither
    a client's own X-Request-Id came back there nor one to report."""
    for path in ("/v1/models", f"/v1/models/{MODEL}", "/health", "/metrics"):
        fresh = httpx.get(f"{shared_server.url}{path}").headers.get("x-request-id")
        assert fresh is not None and fresh.startswith("chatcmpl-"), path
        mine = httpx.get(f"{shared_server.url}{path}", headers={"x-request-id": "trace-1"})
        assert mine.headers.get_list("x-request-id") == ["trace-1"], path
    listed = shared_server.client().models.with_raw_response.list()
    assert listed.headers["x-request-id"].startswith("chatcmpl-")
    answered = shared_server.post(VALID, headers={"x-request-id": "trace-2"})
    assert answered.headers.get_list("x-request-id") == ["trace-2"]


def test_a_null_optional_key_of_a_message_is_left_out_and_null_content_is_sent_as_null(
    shared_server: Running, stubs: Stubs
) -> None:
    """A message's null optional key (name, refusal, tool_calls) is OpenAI's "none": it is
    left out, as llama.cpp's server refuses some of them null. Null content is sent on as
    null: a deprecated function result's content is required, null or not (openai's
    ChatCompletionFunctionMessageParam), and it was dropped with the other null keys. Content
    the client left out stays out: a tool-call turn without it reached the worker as sent
    only while worker_message read which keys were sent."""
    call = {"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{}"}}
    messages = [
        {**ASKED, "name": None},
        {"role": "assistant", "content": None, "refusal": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "5"},
        {"role": "assistant", "content": None, "tool_calls": None,
         "function_call": {"name": "add", "arguments": "{}"}},
        {"role": "function", "name": "add", "content": None},
        {"role": "assistant", "tool_calls": [{**call, "id": "c2"}]},
        {"role": "tool", "tool_call_id": "c2", "content": "6"},
    ]  # fmt: skip
    response = shared_server.post({**VALID, "messages": messages})
    assert response.status_code == 200, response.text
    sent = stubs.workers[response.headers["x-fugu-worker"]].bodies[-1]["messages"]
    assert sent == [
        ASKED,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        messages[2],
        {"role": "assistant", "content": None, "function_call": messages[3]["function_call"]},
        *messages[4:],
    ]


def test_a_call_naming_a_later_function_or_tool_is_sent_on(
    shared_server: Running, stubs: Stubs
) -> None:
    """function_call and tool_choice may name any of the functions or tools, not only the
    first: every test named the first (or the only) one, so looking the name up among the
    first alone passed them all; nor only the last (looking among the last alone passed)."""
    mul = {"name": "mul", "parameters": {"type": "object"}}
    both_tools = [TOOL, {"type": "function", "function": mul}]
    for chosen in (
        {"functions": [TOOL["function"], mul], "function_call": {"name": "mul"}},
        {"tools": both_tools, "tool_choice": {"type": "function", "function": {"name": "mul"}}},
        {"tools": both_tools, "tool_choice": {"type": "function", "function": {"name": "add"}}},
    ):  # fmt: skip
        response = shared_server.post({**VALID, **chosen})
        assert response.status_code == 200, response.text
        sent = stubs.workers[response.headers["x-fugu-worker"]].bodies[-1]
        assert {key: sent[key] for key in chosen} == chosen
