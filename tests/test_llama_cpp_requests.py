"""A request in the form a local llama.cpp server takes, checked function by function: what
is rewritten on the way (messages, parameters, schemas), what is kept from local workers
(`local_worker_gaps`) and what llama-cpp-python's own request model refuses. Each of these
only shows against a real server in test_server_llama.py (minutes); here each is named."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from fugu_lite.workers.llama_cpp_requests import (
    llama_cpp_message,
    llama_cpp_params,
    llama_cpp_request_problem,
    local_worker_gaps,
)
from fugu_lite.workers.llama_cpp_schemas import (
    MAX_OPTIONAL_REPEATS,
    deep_repetition,
    empty_property_name,
    ignored_constraint,
    llama_cpp_schema,
    unconvertible_pattern,
    unconvertible_schema,
    unrenderable_literal,
)

RATING = {"type": "integer", "minimum": 1, "maximum": 3}  # llama.cpp leaves bounds out
RATING_ENUM = {"type": "integer", "enum": [1, 2, 3]}  # ... and writes an enum


def function_tool(name: str, parameters: Any = None, **extra: Any) -> dict[str, Any]:
    function = {"name": name, **extra}
    if parameters is not None:
        function["parameters"] = parameters
    return {"type": "function", "function": function}


def test_a_messages_content_is_one_string_with_a_refusal_as_what_was_said() -> None:
    parts = [{"type": "text", "text": "I looked."}, {"type": "refusal", "refusal": "I won't."}]
    assert llama_cpp_message({"role": "assistant", "content": parts}) == {
        "role": "assistant",
        "content": "I looked.\nI won't.",
    }
    assert llama_cpp_message({"role": "developer", "content": "Be brief."}) == {
        "role": "system",
        "content": "Be brief.",
    }


def test_an_assistant_turns_calls_are_written_into_it_only_for_a_template_without_them() -> None:
    """Arguments that are JSON go as JSON, others as the string they are; a deprecated
    function_call too. A user's turn, or a template that renders calls, is left alone."""
    calls = [
        {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2}'}},
        {"id": "c2", "type": "function", "function": {"name": "echo", "arguments": "not json"}},
    ]
    turn = {"role": "assistant", "content": "Let me add.", "tool_calls": calls}
    assert llama_cpp_message(turn, calls_as_text=True)["content"] == (
        'Let me add.\n{"name": "add", "arguments": {"a": 2}}\n'
        '{"name": "echo", "arguments": "not json"}'
    )
    assert llama_cpp_message(turn)["content"] == "Let me add."
    legacy = {"role": "assistant", "content": None,
              "function_call": {"name": "f", "arguments": "{}"}}  # fmt: skip
    assert llama_cpp_message(legacy, calls_as_text=True)["content"] == (
        '{"name": "f", "arguments": {}}'
    )
    user = {"role": "user", "content": "hi", "tool_calls": calls}
    assert llama_cpp_message(user, calls_as_text=True)["content"] == "hi"


def test_empty_stop_strings_are_left_out_and_the_others_kept() -> None:
    assert llama_cpp_params({"stop": ["", "END", ""]})["stop"] == ["END"]
    assert llama_cpp_params({"stop": ""})["stop"] == []
    assert llama_cpp_params({"stop": ["a", "b", "c", "d"]})["stop"] == ["a", "b", "c", "d"]
    assert llama_cpp_params({"stop": "END"})["stop"] == "END"


def test_logprobs_alone_asks_for_the_chosen_tokens_only() -> None:
    assert llama_cpp_params({"logprobs": True})["top_logprobs"] == 0
    assert llama_cpp_params({"logprobs": True, "top_logprobs": 3})["top_logprobs"] == 3
    assert "top_logprobs" not in llama_cpp_params({"logprobs": False})
    assert "top_logprobs" not in llama_cpp_params({})


def test_a_function_call_governs_only_beside_functions() -> None:
    assert "function_call" not in llama_cpp_params({"function_call": "auto"})
    functions = [{"name": "f", "parameters": {"type": "object", "properties": {}}}]
    kept = llama_cpp_params({"function_call": "none", "functions": functions})
    assert kept["function_call"] == "none" and kept["functions"] == functions
    # an empty list of functions is none: taken as some, its function_call was kept
    assert "function_call" not in llama_cpp_params({"function_call": "auto", "functions": []})


def test_a_json_schema_goes_as_json_object_with_its_schema_as_llama_cpp_reads_it() -> None:
    schema = {"type": "object", "properties": {"r": RATING}, "required": ["r"]}
    spec = {"name": "x", "schema": schema, "strict": True}
    expected = {"type": "object", "properties": {"r": RATING_ENUM}, "required": ["r"]}
    converted = llama_cpp_params({"response_format": {"type": "json_schema", "json_schema": spec}})
    assert converted["response_format"] == {"type": "json_object", "schema": expected}
    no_schema = {"type": "json_schema", "json_schema": {"name": "x"}}
    assert llama_cpp_params({"response_format": no_schema})["response_format"] == {
        "type": "json_object"
    }
    own_form = {"type": "json_object", "schema": schema}  # llama.cpp's own form
    assert llama_cpp_params({"response_format": own_form})["response_format"] == {
        "type": "json_object",
        "schema": expected,
    }
    assert llama_cpp_params({"response_format": {"type": "text"}})["response_format"] == {
        "type": "text"
    }


def test_a_functions_parameters_are_given_and_rewritten_and_its_null_keys_left_out() -> None:
    rated = {"type": "object", "properties": {"r": RATING}}
    tools = [
        function_tool("bare", description=None),
        function_tool("rated", rated, description="Rate it."),
    ]
    converted = llama_cpp_params({"tools": tools, "functions": [{"name": "old", "strict": None}]})
    assert converted["tools"] == [
        function_tool("bare", {"type": "object", "properties": {}}),
        function_tool("rated", {"type": "object", "properties": {"r": RATING_ENUM}},
                      description="Rate it."),
    ]  # fmt: skip
    assert converted["functions"] == [
        {"name": "old", "parameters": {"type": "object", "properties": {}}}
    ]
    assert tools[0]["function"] == {"name": "bare", "description": None}  # the caller's as sent


def test_tool_choice_required_names_a_single_tool_and_is_a_gap_among_several() -> None:
    one = [function_tool("f")]
    named = {"type": "function", "function": {"name": "f"}}
    assert llama_cpp_params({"tools": one, "tool_choice": "required"})["tool_choice"] == named
    assert local_worker_gaps({"tools": one, "tool_choice": "required"}) == []
    two = [function_tool("f"), function_tool("g")]
    assert llama_cpp_params({"tools": two, "tool_choice": "required"})["tool_choice"] == "required"
    [gap] = local_worker_gaps({"tools": two, "tool_choice": "required"})
    assert 'tool_choice "required" among several tools' in gap
    assert llama_cpp_params({"tools": one, "tool_choice": "auto"})["tool_choice"] == "auto"


def test_each_option_a_local_worker_cannot_give_is_a_gap_naming_it() -> None:
    search = {"type": "web_search"}
    for params, named in [
        ({"grammar": 'root ::= "a"'}, "llama.cpp's `grammar`"),
        ({"audio": {"voice": "alloy", "format": "wav"}}, "audio output"),
        ({"modalities": ["text", "audio"]}, "audio output"),
        ({"tools": [function_tool("f"), search]}, "tools of type web_search"),
        ({"tools": [function_tool("f")], "tool_choice": {"type": "custom"}},
         "tool_choice of type custom"),
        ({"tools": [function_tool("f")], "functions": [{"name": "g"}]},
         "both `tools` and the deprecated `functions`"),
    ]:  # fmt: skip
        gaps = local_worker_gaps(params)
        assert len(gaps) == 1 and named in gaps[0], (params, gaps)
    assert local_worker_gaps({"modalities": ["text"], "tools": [function_tool("f")]}) == []


def test_only_the_schema_a_request_names_is_checked_where_it_is_sent() -> None:
    """A tool's schema becomes a grammar only when tool_choice (or function_call) names it,
    or "required" with that one tool; its problems are named at its place."""
    quoted = {"type": "object", "properties": {'say"': {"type": "string"}}}
    tools = [function_tool("plain"), function_tool("quoted", quoted)]
    assert local_worker_gaps({"tools": tools}) == []
    choice = {"type": "function", "function": {"name": "quoted"}}
    [gap] = local_worker_gaps({"tools": tools, "tool_choice": choice})
    assert '(tools[1].function.parameters.properties["say\\""]' in gap
    functions = [{"name": "plain"}, {"name": "quoted", "parameters": quoted}]
    assert local_worker_gaps({"functions": functions, "function_call": "auto"}) == []
    [gap] = local_worker_gaps({"functions": functions, "function_call": {"name": "quoted"}})
    assert '(functions[1].parameters.properties["say\\""]' in gap
    [gap] = local_worker_gaps({"tools": tools[1:], "tool_choice": "required"})
    assert "(tools[0].function.parameters.properties" in gap


def test_a_constraint_llama_cpp_leaves_out_is_a_gap_of_a_strict_tool_only() -> None:
    """A tool sent with `strict: false` (a client writing out every key) is no strict
    one: taking any strict key for true (`is not None`, a mutation round's) passed every
    test, and such a tool was refused to local workers."""
    counted = {"type": "object", "properties": {"n": {"type": "number", "minimum": 1}}}
    choice = {"type": "function", "function": {"name": "f"}}
    strict = [function_tool("f", counted, strict=True)]
    [gap] = local_worker_gaps({"tools": strict, "tool_choice": choice})
    assert "a strict JSON schema with `minimum` (tools[0].function.parameters" in gap
    for loose in ([function_tool("f", counted)], [function_tool("f", counted, strict=False)]):
        assert local_worker_gaps({"tools": loose, "tool_choice": choice}) == []


def test_a_request_llama_cpp_refuses_names_the_parameter_not_every_role_tried() -> None:
    problem = llama_cpp_request_problem(
        {"messages": [{"role": "user", "content": "hi"}], "temperature": "hot"}
    )
    assert problem is not None and problem.startswith("temperature: Input should be a valid number")
    assert llama_cpp_request_problem({"messages": [{"role": "user", "content": "hi"}]}) is None
    bad_turn = llama_cpp_request_problem({"messages": [{"role": "user", "content": 5}]})
    assert bad_turn is not None and "role" not in bad_turn and bad_turn.count(";") <= 2
    # a choice among fixed values outside a message's role is named (only the roles tried
    # are left out), and each of a few problems is
    two = llama_cpp_request_problem(
        {"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "xml"},
         "temperature": "hot"}
    )  # fmt: skip
    assert two is not None
    assert [part.split(":")[0] for part in two.split("; ")] == [
        "temperature",
        "response_format.type",
    ]
    assert two.endswith("; response_format.type: Input should be 'text' or 'json_object'")


def test_an_integer_range_is_an_enum_up_to_its_largest_and_exclusive_bounds_are_kept_out() -> None:
    assert llama_cpp_schema({"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 4}) == {
        "type": "integer",
        "enum": [1, 2, 3],
    }
    widest = llama_cpp_schema({"type": "integer", "minimum": 0, "maximum": 255})
    assert widest["enum"] == list(range(256))
    too_wide = {"type": "integer", "minimum": 0, "maximum": 256}
    assert llama_cpp_schema(too_wide) == too_wide
    even = llama_cpp_schema({"type": "integer", "minimum": 1, "maximum": 6, "multipleOf": 2})
    assert even == {"type": "integer", "enum": [2, 4, 6]}
    optional = llama_cpp_schema({"type": ["integer", "null"], "minimum": 1, "maximum": 2})
    assert optional == {"enum": [1, 2, None]}


def test_characters_the_converter_mangles_are_found_at_their_edges() -> None:
    def found(name: str) -> tuple[str, str] | None:
        return unrenderable_literal({"type": "object", "properties": {name: {}}})

    assert found("\x1f") is not None and found(" ~é\uffff") is None
    # its name in brackets, as the request's other paths write an odd name
    assert found('say"') == ('.properties["say\\""]', 'a double quote (")')
    # a control character \s does not cover (a backspace) in brackets too, not written raw
    assert found("a\bb") == ('.properties["a\\bb"]', "a control character (\\b)")
    nested = {"properties": {"v": {"properties": {"a\nb": {}}}}}
    assert unrenderable_literal(nested) == ('.properties.v.properties["a\\nb"]',
                                            "a control character (\\n)")  # fmt: skip
    assert found("\U00010000") is not None
    tab = unrenderable_literal({"enum": ["ok", "tab\there"]})
    assert tab == (".enum", "a control character (\\t)")
    assert unrenderable_literal({"const": {"a\\b": 1}}) == (".const", "a backslash (\\)")


def test_an_optional_repetition_is_deep_only_beyond_its_limit() -> None:
    assert deep_repetition({"type": "string", "maxLength": MAX_OPTIONAL_REPEATS}) is None
    assert deep_repetition({"type": "string", "maxLength": MAX_OPTIONAL_REPEATS + 1}) is not None
    narrowed = {"type": "array", "minItems": 500, "maxItems": 500 + MAX_OPTIONAL_REPEATS}
    assert deep_repetition(narrowed) is None
    assert deep_repetition({"type": "string", "pattern": "^a{1,1002}$"}) == (
        ".pattern",
        "{1,1002} repetitions",
    )


def test_a_schema_llama_cpp_misreads_is_rewritten_and_one_it_cannot_follow_is_a_gap() -> None:
    optional = {"type": ["object", "null"], "properties": {"a": {"type": "string"}}}
    assert llama_cpp_schema(optional) == {
        "anyOf": [
            {"properties": {"a": {"type": "string"}}, "type": "object"},
            {"properties": {"a": {"type": "string"}}, "type": "null"},
        ]
    }
    any_value = llama_cpp_schema({"properties": {"n": {"title": "Notes"}}})
    assert any_value["properties"]["n"]["type"] == ["string", "number", "boolean", "object",
                                                    "array", "null"]  # fmt: skip

    def gaps(schema: dict[str, Any], strict: bool = False) -> list[str]:
        spec = {"name": "x", "schema": schema, "strict": strict}
        return local_worker_gaps({"response_format": {"type": "json_schema", "json_schema": spec}})

    named = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["b"]}
    for schema, strict, problem in [
        ({"type": "string", "pattern": "[a-z]+"}, False, "not anchored with ^ and $"),
        ({"type": "object", "properties": {"": {}}}, False, "an empty property name"),
        (named, True, "`required` 'b' (not in its properties)"),
        ({"type": "string", "format": "email"}, True, '`format: "email"`'),
    ]:
        [gap] = gaps(schema, strict)
        assert problem in gap, gap


def test_an_assistant_turns_refusal_beside_no_content_is_what_it_said() -> None:
    """OpenAI answers a declined request with `content: null` and the words in `refusal`; a
    client sending that turn back gave a local worker an empty turn, as if nothing was said."""
    turn = {"role": "assistant", "content": None, "refusal": "I can't help with that."}
    assert llama_cpp_message(turn)["content"] == "I can't help with that."
    answered = {"role": "assistant", "content": "Sure.", "refusal": None}
    assert llama_cpp_message(answered)["content"] == "Sure."
    assert llama_cpp_message({"role": "assistant", "content": None})["content"] == ""


def test_a_pattern_is_found_unconvertible_unanchored_at_either_end_or_with_a_quote() -> None:
    """llama-cpp-python's converter takes only a pattern anchored at both ends (it drops the
    whole schema for another: free JSON) and copies a double quote into the grammar (the
    answer is not valid JSON)."""
    for pattern in ("^[a-z]+", "[a-z]+$"):
        found = unconvertible_pattern({"type": "string", "pattern": pattern})
        assert found is not None and found[1].startswith("not anchored with ^ and $"), pattern
    quoted = unconvertible_pattern({"properties": {"a": {"pattern": '^say "hi"$'}}})
    assert quoted is not None and quoted[0] == ".properties.a"
    assert quoted[1].startswith('with a double quote (")')
    assert unconvertible_pattern({"type": "string", "pattern": "^[a-z]+$"}) is None


def test_an_integer_range_takes_its_tightest_bounds_and_refuses_a_multiple_of_zero() -> None:
    """Of a minimum and an exclusiveMinimum (a maximum and an exclusiveMaximum) the tighter
    one bounds the enum; a multipleOf 0, which no number is a multiple of, leaves the schema
    as it is (not a ZeroDivisionError on the way to the enum)."""
    both = {"type": "integer", "minimum": 1, "exclusiveMinimum": 3, "maximum": 9,
            "exclusiveMaximum": 6}  # fmt: skip
    assert llama_cpp_schema(both) == {"type": "integer", "enum": [4, 5]}
    no_multiple = {"type": "integer", "minimum": 0, "maximum": 5, "multipleOf": 0}
    assert llama_cpp_schema(no_multiple) == no_multiple


def test_a_const_of_none_of_its_listed_types_keeps_its_types() -> None:
    """A const beside a list of types loses the list only when it has one of them (then
    the converter writes the const); one that has none matches nothing and is left as it
    is, not turned into a schema answering that const."""
    assert llama_cpp_schema({"type": ["string", "null"], "const": "a"}) == {"const": "a"}
    none = {"type": ["string", "null"], "const": 5}
    assert llama_cpp_schema(none) == none


def test_unique_items_false_and_the_uuid_formats_are_no_constraint_left_out() -> None:
    """uniqueItems false constrains nothing, and llama-cpp-python's converter writes uuid1
    to uuid5 as it writes uuid: neither keeps a strict schema from local workers."""
    assert ignored_constraint({"type": "array", "uniqueItems": False}) is None
    assert ignored_constraint({"type": "array", "uniqueItems": True}) == (
        ".uniqueItems",
        "`uniqueItems`",
    )
    for form in ("uuid", "uuid1", "uuid4", "uuid5"):
        assert ignored_constraint({"type": "string", "format": form}) is None, form
    assert ignored_constraint({"type": "string", "format": "uuid6"}) == (
        ".format",
        '`format: "uuid6"`',
    )


def converter_alternatives(schema: dict[str, Any], rule: str) -> set[str]:
    """What llama-cpp-python's grammar converter lets the value of `rule` be: its rule's
    alternatives, one it names after the rule (payload-3 ::= object) by what that one is."""
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    rules = dict(line.split(" ::= ", 1) for line in json_schema_to_gbnf(json.dumps(schema))
                 .splitlines() if " ::= " in line)  # fmt: skip
    alternatives = rules[rule].split(" | ")
    return {rules[name] if name.startswith(f"{rule}-") else name for name in alternatives}


def test_a_nested_schema_of_any_value_lets_a_local_worker_answer_any_value() -> None:
    """llama-cpp-python's grammar converter reads the schema `{}` as an object: a tool's
    argument, an array's items or an object's other values meant to be anything (`{}`) could
    only be objects from a local worker. Nested, `{}` is every JSON type now; a tool's own
    `parameters: {}` stays the object it is."""
    pytest.importorskip("llama_cpp")
    tags = {"type": "array", "items": {}}
    anything = {"type": "object", "properties": {"payload": {}, "tags": tags},
                "additionalProperties": {}}  # fmt: skip
    params = {"tools": [function_tool("save", anything), function_tool("ping", {})]}
    saved, pinged = (tool["function"]["parameters"] for tool in llama_cpp_params(params)["tools"])
    for rule in ("payload", "tags-item", "additional-value"):
        assert {"string", "number"} <= converter_alternatives(saved, rule), rule
    assert pinged == {}
    assert converter_alternatives(pinged, "root") == {"object"}
    format_ = {"type": "json_schema", "json_schema": {"name": "a", "schema": anything}}
    answer = llama_cpp_params({"response_format": format_})["response_format"]["schema"]
    assert {"string", "number"} <= converter_alternatives(answer, "payload")


def test_a_listed_types_enum_keeps_only_their_values_and_fractional_bounds_round_inward() -> None:
    """In a manual mutation round of llama_cpp_schemas, four wrong edits passed every test:
    an enum beside a list of types kept its values of none of them (a 5 among the colours
    of ["string", "null"]: llama.cpp's grammar then let the model answer 5, which the
    client's schema refuses), a whole float (1.0) not taken for an integer (the enum left
    beside its list of types, which the converter reads first: any integer answered), an
    exclusive bound that is no integer (exclusiveMinimum 0.5) stepped past once more after
    rounding (1, a valid answer, left out), and a pattern's {m,n} counted as n repetitions
    deep, not n - m (a pattern of 500 to 1400 letters refused as too deep)."""
    colours = {"type": ["string", "null"], "enum": ["red", 5, None]}
    assert llama_cpp_schema(colours) == {"enum": ["red", None]}
    whole = {"type": ["integer", "null"], "enum": [1.0, "x"]}
    assert llama_cpp_schema(whole) == {"enum": [1.0]}
    between = {"type": "integer", "exclusiveMinimum": 0.5, "exclusiveMaximum": 3.5}
    assert llama_cpp_schema(between) == {"type": "integer", "enum": [1, 2, 3]}
    narrowed = f"^a{{500,{500 + MAX_OPTIONAL_REPEATS}}}$"
    assert deep_repetition({"type": "string", "pattern": narrowed}) is None


def test_a_length_beside_a_pattern_is_left_out_without_a_type_too_and_min_length_0_is_none() -> (
    None
):
    """llama-cpp-python's converter writes a schema without a type that has a `pattern` as
    a string of that pattern, leaving its maxLength out as it does a string's; a minLength
    of 0 constrains nothing. In a manual mutation round of llama_cpp_schemas, taking only
    `"type": "string"` for a string (a code of pattern ^[A-Z]+$ and maxLength 3 answered at
    any length) and refusing a minLength of 0 beside a pattern passed every test."""
    untyped = {"properties": {"code": {"pattern": "^[A-Z]+$", "maxLength": 3}}}
    assert ignored_constraint(untyped) == (
        ".properties.code.maxLength",
        "`maxLength` beside a `pattern`",
    )
    empty_allowed = {"type": "string", "pattern": "^[A-Z]*$", "minLength": 0}
    assert ignored_constraint(empty_allowed) is None


def test_an_assistant_turn_of_parts_that_are_not_all_text_keeps_them_beside_its_calls() -> None:
    """A turn whose parts are not all text stays a list of parts (for the server to refuse);
    its calls are not joined onto it: writing them in whatever its content (a mutation
    round's) passed every test, and failed with a TypeError on the list."""
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}
    call = {"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{}"}}
    turn = {"role": "assistant", "content": [image], "tool_calls": [call]}
    assert llama_cpp_message(turn, calls_as_text=True)["content"] == [image]


def test_a_constraint_left_out_is_named_at_its_place_in_the_clients_schema() -> None:
    """A strict schema's constraint that llama.cpp leaves out is found in the client's
    schema, not in the one rewritten for llama.cpp (a list of types split into an anyOf):
    checking the rewritten one (a mutation round's) passed every test, and named a place,
    `anyOf[0]`, that the client's schema does not have."""
    mail = {"type": ["string", "null"], "format": "email"}
    spec = {"name": "x", "strict": True, "schema": {"type": "object", "properties": {"m": mail}}}
    [gap] = local_worker_gaps({"response_format": {"type": "json_schema", "json_schema": spec}})
    assert '`format: "email"` (response_format.json_schema.schema.properties.m.format;' in gap


def test_only_the_response_format_schema_sent_to_llama_cpp_is_checked() -> None:
    """response_format json_schema goes to llama.cpp as its json_schema's schema, and
    json_object as its own `schema`; a schema beside those (a client's leftover, which
    serve lets through) is not sent. It was checked all the same: one llama.cpp mangles
    kept a request from local workers though none of it was in their grammar."""
    quoted = {"type": "object", "properties": {'say"': {"type": "string"}}}
    plain = {"type": "object", "properties": {"say": {"type": "string"}}}
    inside = {"type": "json_schema", "json_schema": {"name": "a", "schema": plain}}
    beside = {"type": "json_object", "json_schema": {"name": "a", "schema": quoted}}
    for response_format in ({**inside, "schema": quoted}, {**beside, "schema": plain}):
        params = {"response_format": response_format}
        sent = llama_cpp_params(params)["response_format"]
        assert (sent["type"], sent["schema"]) == ("json_object", plain)
        assert local_worker_gaps(params) == []
    [gap] = local_worker_gaps({"response_format": {"type": "json_object", "schema": quoted}})
    assert "(response_format.schema.properties" in gap


def test_an_integer_range_becomes_an_enum_only_when_its_values_can_be_written_out() -> None:
    """A range is written out as its values only when they are what it allows: not beside
    an enum (the converter writes that one), not for a fractional multipleOf (2.5 allows 0
    and 5, not the multiples of 2), an infinite bound, a type that is not integer, or a
    range that holds no value (left to be refused as it is). In a manual mutation round of
    llama_cpp_schemas, each of these written out (an enum of [1, 2, 3] for an enum of [2,
    7], [0, 2, 4] for multipleOf 2.5, an empty enum, a null's enum of numbers, an
    OverflowError) passed every test."""
    for left in (
        {"type": "integer", "minimum": 1, "maximum": 3, "enum": [2, 7]},
        {"type": "integer", "minimum": 0, "maximum": 5, "multipleOf": 2.5},
        {"type": "integer", "minimum": 1, "maximum": 1, "multipleOf": 2},
        {"type": "null", "minimum": 1, "maximum": 2},
        {"type": "integer", "minimum": 0, "maximum": math.inf},
    ):
        assert llama_cpp_schema(left) == left, left


def test_a_list_of_types_is_split_only_where_the_converter_would_read_it_first() -> None:
    """A list of types becomes one alternative per type only beside keywords the converter
    reads after it: not beside an anyOf, nor for an empty list; one type is that type alone,
    annotations stay outside the alternatives, and an integer alternative's range becomes
    its enum. An enum beside a list with an unknown type is left for the converter to refuse,
    and a boolean is no number. In a manual mutation round of llama_cpp_schemas, each of
    these undone passed every test."""
    for left in (
        {"type": ["string", "null"], "anyOf": [{"maxLength": 3}, {"type": "null"}]},
        {"type": [], "properties": {"a": {"type": "string"}}},
        {"type": ["string", "text"], "enum": ["a"]},
    ):
        assert llama_cpp_schema(left) == left, left
    assert llama_cpp_schema({"type": ["string"], "pattern": "^a$"}) == {
        "type": "string",
        "pattern": "^a$",
    }
    described = llama_cpp_schema({"type": ["string", "null"], "description": "d", "maxLength": 3})
    assert described == {
        "description": "d",
        "anyOf": [{"maxLength": 3, "type": "string"}, {"maxLength": 3, "type": "null"}],
    }
    mixed = llama_cpp_schema({"type": ["integer", "string"], "minimum": 1, "maximum": 3})
    assert mixed["anyOf"][0] == {"type": "integer", "enum": [1, 2, 3]}
    counts = llama_cpp_schema({"type": ["number", "null"], "enum": [True, 1, None]})
    assert counts == {"enum": [1, None]}


def test_every_sub_schema_of_any_value_becomes_every_json_type() -> None:
    """`{}` (and `additionalProperties: true`) is any value wherever a schema holds one:
    items, prefixItems, anyOf, oneOf, allOf and additionalProperties. In a manual mutation
    round of llama_cpp_schemas, leaving anyOf's out of the rewriting, or `true`, passed
    every test (the converter reads such a `{}` as an object)."""
    any_value = {"type": ["string", "number", "boolean", "object", "array", "null"]}
    for key in ("prefixItems", "anyOf", "oneOf", "allOf"):
        assert llama_cpp_schema({key: [{}, {"type": "null"}]}) == {
            key: [any_value, {"type": "null"}]
        }, key
    for key, value in (("items", {}), ("additionalProperties", {}),
                       ("additionalProperties", True)):  # fmt: skip
        assert llama_cpp_schema({"type": "object", key: value})[key] == any_value, (key, value)


def test_what_the_converter_mangles_is_found_inside_values_and_past_odd_patterns() -> None:
    """A literal is mangled wherever a string of an enum or const value is (an array's item,
    an object's value); a pattern with a backslash escape is mangled; a `pattern` that is no
    string is none, and the search goes on past it; an empty property name is named where it
    is. In a manual mutation round of llama_cpp_schemas, leaving out an array's or an
    object value's strings, the backslash check, the search past a pattern of 5 (an
    AttributeError), or the empty name's place passed every test."""
    assert unrenderable_literal({"enum": ["ok", ["a", 'say "hi"']]}) == (
        ".enum",
        'a double quote (")',
    )
    assert unrenderable_literal({"const": {"k": "tab\there"}}) == (
        ".const",
        "a control character (\\t)",
    )
    escaped = unconvertible_pattern({"type": "string", "pattern": "^\\d+$"})
    assert escaped is not None and escaped[1].startswith("with a backslash escape")
    past = unconvertible_pattern({"properties": {"a": {"pattern": 5}, "b": {"pattern": "[a-z]"}}})
    assert past is not None and past[0] == ".properties.b"
    nested = {"properties": {"a": {"properties": {"": {}}}}}
    assert empty_property_name(nested) == '.properties.a.properties[""]'


def test_each_constraint_the_converter_leaves_out_is_named_and_none_it_keeps() -> None:
    """A string's pattern beside a format, its minLength (or a maxLength of 0) beside a
    pattern, its length beside a format, and a bound of 0 are left out of the grammar and
    named; `required` without `properties` is none of these. Too many optional items are as
    deep as too many characters, and the range is said. In a manual mutation round of
    llama_cpp_schemas, each of these undone (a TypeError for `required` alone) passed every
    test."""
    for schema, found in [
        ({"type": "string", "pattern": "^a$", "format": "date"},
         (".format", '`format: "date"` beside a `pattern`')),
        ({"type": "string", "pattern": "^a+$", "minLength": 2},
         (".minLength", "`minLength` beside a `pattern`")),
        ({"type": "string", "pattern": "^a*$", "maxLength": 0},
         (".maxLength", "`maxLength` beside a `pattern`")),
        ({"type": "string", "format": "date", "maxLength": 10},
         (".maxLength", "`maxLength` beside a `format`")),
        ({"type": "number", "minimum": 0}, (".minimum", "`minimum`")),
    ]:  # fmt: skip
        assert ignored_constraint(schema) == found, schema
    assert ignored_constraint({"type": "object", "required": ["a"]}) is None
    too_many = {"type": "array", "minItems": 5, "maxItems": 6 + MAX_OPTIONAL_REPEATS}
    assert deep_repetition(too_many) == (".maxItems", f"5 to {6 + MAX_OPTIONAL_REPEATS} items")


def test_what_the_converter_cannot_read_is_said_in_its_first_line_cut_short() -> None:
    """The converter's error is said in one line of at most 200 characters: a `$ref` it does
    not follow is written into its message whole. In a manual mutation round of
    llama_cpp_schemas, the whole message said (a line break, a URL of any length) passed
    every test."""
    pytest.importorskip("llama_cpp")
    broken = unconvertible_schema({"$ref": "http://example.com/a\nb"})
    assert broken is not None and "\n" not in broken and broken.startswith("Unsupported ref")
    long = unconvertible_schema({"$ref": "http://example.com/" + "x" * 300})
    assert long is not None and len(long) == 200


def test_a_list_of_types_beside_definitions_keeps_them_where_its_refs_find_them() -> None:
    """A `$ref` of "#/$defs/..." is read from the schema's root; a list of types split into
    an anyOf moved the root's `$defs` into each alternative, so the converter could not
    resolve the ref ("Error resolving ref") and a local worker was kept from a schema it
    reads. Definitions stay beside the anyOf, as annotations do."""
    pytest.importorskip("llama_cpp")
    codes = {"code": {"type": "string", "enum": ["a", "b"]}}
    for key in ("$defs", "definitions"):
        optional = {"type": ["object", "null"], key: codes,
                    "properties": {"c": {"$ref": f"#/{key}/code"}}}  # fmt: skip
        converted = llama_cpp_schema(optional)
        assert converted[key] == codes and all(key not in one for one in converted["anyOf"])
        assert unconvertible_schema(converted) is None, key
        spec = {"name": "x", "schema": optional}
        params = {"response_format": {"type": "json_schema", "json_schema": spec}}
        assert local_worker_gaps(params) == [], key


def test_an_enum_of_none_of_its_listed_types_or_no_list_keeps_its_types() -> None:
    """As a const, an enum beside a list of types loses the list only when one of its
    values has one of them; an enum of none (it matches nothing) or one that is no list is
    left as it is, for the request to be refused as such. In a manual mutation round of
    llama_cpp_schemas, an enum of [5] for ["string", "null"] made `enum: []`, and an enum
    "red" made of its letters ["r", "e", "d"], and both passed every test."""
    for enum in ([5], "red"):
        listed = {"type": ["string", "null"], "enum": enum}
        assert llama_cpp_schema(listed) == listed, enum
