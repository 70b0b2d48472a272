"""The OpenAI chat-completions request as fugu-lite accepts it, with fugu-lite's own keys
(`extra_body` in the openai SDK)."""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictFloat,
    ValidationInfo,
    field_validator,
    model_validator,
)

from ..schemas import ChatMessage
from ..text import exact_number
from .json_schema import empty_choice, key_path
from .request_checks import (
    ABSENT,
    FUNCTION_CALL_MODES,
    NAME_RULE,
    ONLY_WITH_TOOLS,
    OPENAI_NAME,
    SCHEMA_EXAMPLE,
    TOOL_CHOICE_MODES,
    ParamError,
    check_content,
    check_function,
    check_function_turn,
    check_name,
    check_spec_types,
    check_tool_turn,
    compact,
    named_function,
    null_is_false,
    without_tools,
)

# Request keys that fugu-lite reads itself (sent through the SDK's `extra_body`); they are
# never forwarded to a worker.
FUGU_KEYS = ("exclude_workers", "workers", "cost_weight", "include_routing")
# Keys handled by fugu-lite and so not forwarded as worker parameters.
NOT_FORWARDED = frozenset({"model", "messages", "stream", "stream_options", *FUGU_KEYS})

# OpenAI's limits of a request's metadata
METADATA_MAX_PAIRS = 16
# OpenAI's range of a logit_bias value
LOGIT_BIAS_LOWEST, LOGIT_BIAS_HIGHEST = -100, 100
METADATA_MAX_KEY_CHARS = 64
METADATA_MAX_VALUE_CHARS = 512
# OpenAI's limits of its identifier strings, with what to send instead of a longer one:
# safety_identifier's is in its API reference; prompt_cache_key's is its API's 400
# (string_above_max_length), documented nowhere else. `user` has none, so it goes on at any
# length: a provider's own limit (OpenRouter's 128) is that worker's to say.
IDENTIFIER_LIMITS = {
    "safety_identifier": (128, " (send a hash of a longer id, as OpenAI recommends)"),
    "prompt_cache_key": (64, " (send a hash of a longer key: equal keys are all the cache needs)"),
}

# The request's numbers that are floats, checked to fit one (_finite_numbers)
FLOAT_FIELDS = ("temperature", "top_p", "presence_penalty", "frequency_penalty", "cost_weight")

EMPTY_TOOLS = (
    "is an empty list, which OpenAI's API refuses too; give at least one {what}, or leave "
    "{name} out"
)


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")

    include_usage: bool = Field(default=False, strict=True)

    _null_is_false = field_validator("include_usage", mode="before")(null_is_false)


class ResponseFormat(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: Literal["text", "json_object", "json_schema"]

    @model_validator(mode="after")
    def _json_schema_is_given(self) -> ResponseFormat:
        """OpenAI refuses type json_schema without its `json_schema` object (a local worker
        answered free JSON: a schema given beside it, not inside, was dropped), or without
        its `name` of letters, digits, _ and - (a local worker ignored it)."""
        spec = (self.model_extra or {}).get("json_schema")
        if self.type != "json_schema":
            return self
        if not isinstance(spec, dict):
            beside = (
                "; the schema goes inside it, not beside it"
                if "schema" in (self.model_extra or {})
                else ""
            )
            raise ParamError(
                "response_format.json_schema",
                'response_format of type "json_schema" needs a `json_schema` object, e.g. '
                '{"type": "json_schema", "json_schema": {"name": "answer", "schema": {"type": '
                '"object", ...}}}' + beside,
                spec if spec is not None else ABSENT,
            )
        where = "response_format.json_schema.name"
        name = spec.get("name")
        if name is None:
            raise ParamError(where, f'{where} is required, as in OpenAI\'s API, e.g. "answer"')
        if not isinstance(name, str) or not OPENAI_NAME.fullmatch(name):
            raise ParamError(where, f'{where} {NAME_RULE}, e.g. "answer"; got {compact(name)}')
        check_spec_types("response_format.json_schema", spec)
        return self

    @model_validator(mode="after")
    def _schema_is_an_object(self) -> ResponseFormat:
        """A schema that is no JSON object (a string, a list): OpenAI refuses it, and a
        local worker answered free JSON, its grammar built from no schema."""
        extra = self.model_extra or {}
        spec = extra.get("json_schema")
        given = [("response_format.schema", extra.get("schema"))]
        if isinstance(spec, dict):
            given.append(("response_format.json_schema.schema", spec.get("schema")))
        for where, schema in given:
            if schema is not None and not isinstance(schema, dict):
                raise ParamError(
                    where,
                    f"{where} must be a JSON schema object, e.g. {SCHEMA_EXAMPLE}; got "
                    f"{compact(schema)}",
                )
        return self


# audio output is OpenAI's own: its formats as the openai SDK (3.63) types them
AudioFormat = Literal["wav", "aac", "mp3", "flac", "opus", "pcm16"]


class PassedOn(BaseModel):
    """An object in OpenAI's request: the keys fugu-lite does not type go on as sent."""

    model_config = ConfigDict(extra="allow")


class AudioOutput(PassedOn):
    """`audio`: the format and voice of an answer's audio, both required by OpenAI."""

    format: AudioFormat
    voice: str | dict[str, Any]

    @field_validator("voice")
    @classmethod
    def _custom_voice_has_an_id(cls, value: str | dict[str, Any]) -> str | dict[str, Any]:
        if isinstance(value, dict) and not isinstance(value.get("id"), str):
            raise ParamError(
                "audio.voice",
                'audio.voice as an object is a custom voice: it needs its string "id", e.g. '
                '{"id": "voice_1234"}',
                value,
            )
        return value


class PredictionTextPart(PassedOn):
    type: Literal["text"]
    text: str


class Prediction(PassedOn):
    """`prediction`: a predicted output, its text or text parts."""

    type: Literal["content"]
    content: str | list[PredictionTextPart]


class ApproximateLocation(PassedOn):
    city: str | None = None
    country: str | None = None
    region: str | None = None
    timezone: str | None = None


class UserLocation(PassedOn):
    type: Literal["approximate"]
    approximate: ApproximateLocation


class WebSearchOptions(PassedOn):
    search_context_size: Literal["low", "medium", "high"] | None = None
    user_location: UserLocation | None = None


class ChatCompletionRequest(BaseModel):
    """OpenAI's request. OpenAI's common sampling and output parameters are typed as OpenAI
    types them, so a client's mistake is its 400 here rather than a worker's 500 (which
    would count against the worker's circuit); other parameters are passed through."""

    model_config = ConfigDict(extra="allow")

    model: str
    messages: list[ChatMessage] = Field(min_length=1)
    # Strict like OpenAI's API: "stream": "yes", "max_tokens": true or "temperature": true
    # is a client's mistake (an integer is a number, as there).
    stream: bool = Field(default=False, strict=True)
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(default=None, ge=1, strict=True)
    max_completion_tokens: int | None = Field(default=None, ge=1, strict=True)
    temperature: float | None = Field(default=None, ge=0, le=2, strict=True)
    top_p: float | None = Field(default=None, ge=0, le=1, strict=True)
    n: int | None = Field(default=None, strict=True)
    stop: str | list[str] | None = None
    presence_penalty: float | None = Field(default=None, ge=-2, le=2, strict=True)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2, strict=True)
    logit_bias: dict[str, StrictFloat] | None = None
    seed: int | None = Field(default=None, strict=True)
    logprobs: bool | None = Field(default=None, strict=True)
    top_logprobs: int | None = Field(default=None, ge=0, le=20, strict=True)
    response_format: ResponseFormat | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = Field(default=None, strict=True)
    # the deprecated form of tools and tool_choice
    functions: list[dict[str, Any]] | None = None
    function_call: str | dict[str, Any] | None = None
    user: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    # Strings, as OpenAI types them: a local worker ignored a number, a remote one refused it
    metadata: dict[str, str] | None = None
    # A boolean, as OpenAI types it: "yes" went on to the worker, after routing
    store: bool | None = Field(default=None, strict=True)
    # Strings, as every provider types them; their values are each provider's own (Groq's
    # service_tier "on_demand", OpenRouter's modalities "image"), so any string goes on as sent
    reasoning_effort: str | None = None
    service_tier: str | None = None
    verbosity: str | None = None
    modalities: list[str] | None = None
    audio: AudioOutput | None = None
    prediction: Prediction | None = None
    web_search_options: WebSearchOptions | None = None
    # fugu-lite's own keys (`extra_body` in the openai SDK)
    exclude_workers: list[str] | None = None
    workers: list[str] | None = None
    cost_weight: float | None = Field(default=None, ge=0, strict=True)
    include_routing: bool = Field(default=False, strict=True)
    # The openai SDK's argument, never a key of a body it sends (refused: _extra_body_unwrapped)
    extra_body: Any = None

    _null_is_false = field_validator("stream", "include_routing", mode="before")(null_is_false)

    @field_validator("n")
    @classmethod
    def _single_choice(cls, value: int | None) -> int | None:
        if value is not None and value != 1:
            # the value is not said here: the 400 ends with "(got 2)" already
            raise ValueError(
                "must be 1 (or left out): fugu-lite routes each request to one worker and "
                "returns one choice; repeat the request for more choices"
            )
        return value

    @field_validator("stop")
    @classmethod
    def _at_most_four_stops(cls, value: str | list[str] | None) -> str | list[str] | None:
        if isinstance(value, list) and len(value) > 4:
            raise ValueError(f"stop has {len(value)} sequences; give at most 4")
        return value

    @field_validator("messages")
    @classmethod
    def _tool_turns_are_complete(cls, messages: list[ChatMessage]) -> list[ChatMessage]:
        """OpenAI's shape for tool and function turns (llama.cpp's server answers others
        with a 500)."""
        for index, message in enumerate(messages):
            check_content(index, message)
            check_tool_turn(index, message)
            check_function_turn(index, message)
            check_name(index, message)
        return messages

    @field_validator("logit_bias")
    @classmethod
    def _token_id_biases(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        for token, bias in (value or {}).items():
            if not token.isdecimal():  # isdigit() takes '²', which int() refuses
                raise ParamError(
                    key_path("logit_bias", token),
                    f"logit_bias keys are token ids (integers written as strings, e.g. "
                    f'"50256"); got {token!r}',
                )
            if not LOGIT_BIAS_LOWEST <= bias <= LOGIT_BIAS_HIGHEST:
                raise ParamError(
                    key_path("logit_bias", token),
                    f"logit_bias[{token!r}] = {exact_number(bias)} is outside "
                    f"{LOGIT_BIAS_LOWEST}..{LOGIT_BIAS_HIGHEST}",
                )
        return value

    @field_validator("metadata")
    @classmethod
    def _metadata_within_openais_limits(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        """OpenAI's limits of metadata: a remote worker refused more, after routing."""
        if value is not None and len(value) > METADATA_MAX_PAIRS:
            raise ParamError(
                "metadata",
                f"metadata holds {len(value)} key-value pairs; OpenAI's API takes at most "
                f"{METADATA_MAX_PAIRS}, so send the others another way (e.g. joined into one "
                "value)",
            )
        for key, text in (value or {}).items():
            param = key_path("metadata", key)
            named = f"metadata key {compact(key)}"
            check_length(param, named, key, METADATA_MAX_KEY_CHARS, of="keys of ")
            named = f"metadata[{key!r}]"
            check_length(param, named, text, METADATA_MAX_VALUE_CHARS, of="values of ")
        return value

    @field_validator(*IDENTIFIER_LIMITS)
    @classmethod
    def _identifier_within_openais_limit(
        cls, value: str | None, info: ValidationInfo
    ) -> str | None:
        """A remote worker refused a longer one, after routing."""
        if value is not None and info.field_name is not None:
            limit, hint = IDENTIFIER_LIMITS[info.field_name]
            check_length(info.field_name, info.field_name, value, limit, hint=hint)
        return value

    @field_validator("tools")
    @classmethod
    def _tools_are_typed(cls, tools: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        if tools == []:
            raise ValueError(EMPTY_TOOLS.format(what="tool", name="tools"))
        for index, tool in enumerate(tools or []):
            if not isinstance(tool.get("type"), str):
                raise ParamError(
                    f"tools[{index}].type",
                    f"tools[{index}] needs a string 'type', e.g. \"function\"",
                    tool.get("type", ABSENT),
                )
            if tool["type"] != "function":
                continue
            function = tool.get("function")
            if not isinstance(function, dict) or not isinstance(function.get("name"), str):
                raise ParamError(
                    f"tools[{index}].function",
                    f"tools[{index}] is a function tool without a 'function' object holding "
                    'its \'name\', e.g. {"type": "function", "function": {"name": "add", '
                    '"parameters": {...}}}',
                    tool.get("function", ABSENT),
                )
            check_function(f"tools[{index}].function", function)
        return tools

    @field_validator("functions")
    @classmethod
    def _functions_are_named(
        cls, functions: list[dict[str, Any]] | None
    ) -> list[dict[str, Any]] | None:
        """The deprecated `functions` as OpenAI checks them, as it does a function tool."""
        if functions == []:
            raise ValueError(EMPTY_TOOLS.format(what="function", name="functions"))
        for index, function in enumerate(functions or []):
            if not isinstance(function.get("name"), str):
                raise ParamError(
                    f"functions[{index}].name",
                    f"functions[{index}] needs a string 'name', e.g. "
                    '{"name": "add", "parameters": {...}}',
                    function.get("name", ABSENT),
                )
            check_function(f"functions[{index}]", function)
        return functions

    @field_validator("tool_choice")
    @classmethod
    def _known_tool_choice(
        cls, value: str | dict[str, Any] | None, info: ValidationInfo
    ) -> str | dict[str, Any] | None:
        if value is not None and without_tools(info):
            raise ValueError(
                f'{ONLY_WITH_TOOLS} (even "none" or "auto"); give the tools to choose from, or '
                "drop tool_choice"
            )
        if isinstance(value, str) and value not in TOOL_CHOICE_MODES:
            raise ValueError(
                f"tool_choice {value!r} is not one of {', '.join(TOOL_CHOICE_MODES)} or an "
                'object such as {"type": "function", "function": {"name": "add"}}'
            )
        if isinstance(value, dict) and not isinstance(value.get("type"), str):
            raise ValueError("tool_choice as an object needs a string 'type', e.g. \"function\"")
        return value

    @field_validator("parallel_tool_calls")
    @classmethod
    def _parallel_calls_need_tools(cls, value: bool | None, info: ValidationInfo) -> bool | None:
        if value is not None and without_tools(info):
            raise ValueError(f"{ONLY_WITH_TOOLS}; give the tools, or drop parallel_tool_calls")
        return value

    @field_validator("function_call")
    @classmethod
    def _function_call_needs_functions(
        cls, value: str | dict[str, Any] | None, info: ValidationInfo
    ) -> str | dict[str, Any] | None:
        """OpenAI refuses a function_call without functions ("none" and "auto" too); one
        beside `tools` (clients mixing both styles) is left for the workers
        (workers.llama_cpp_requests drops it for local ones). Either way it is "none",
        "auto" or {"name": ...}, as OpenAI checks it (a worker got any other)."""
        no_functions = "functions" in info.data and not info.data["functions"]
        if value is not None and no_functions and without_tools(info):
            raise ValueError(
                'is only allowed when `functions` are given, as in OpenAI\'s API (even "none" '
                'or "auto"); give the functions to choose from, or drop function_call'
            )
        if isinstance(value, str) and value not in FUNCTION_CALL_MODES:
            raise ValueError(
                f"function_call {value!r} is not one of {', '.join(FUNCTION_CALL_MODES)} or an "
                'object naming a function, such as {"name": "add"}'
            )
        if isinstance(value, dict) and not isinstance(value.get("name"), str):
            raise ValueError(
                'function_call as an object needs a string "name", the function\'s, e.g. '
                f'{{"name": "add"}}; got {compact(value)}'
            )
        return value

    @model_validator(mode="after")
    def _tool_choice_names_a_tool(self) -> ChatCompletionRequest:
        choice = self.tool_choice  # given with tools: _known_tool_choice
        if choice is None:
            return self
        named = named_function(choice)
        names = self.function_names()
        if named is None or named in names:
            return self
        if not names:  # only custom tools: there is no function to name
            raise ParamError(
                "tool_choice",
                f"tool_choice names the function {named!r}, but the request has no function "
                "tools, so a tool_choice cannot name one; add a function tool, or use "
                '"auto", "none" or "required"',
            )
        raise ParamError(
            "tool_choice",
            f"tool_choice names the function {named!r}, which is not among the tools "
            f'({", ".join(names)}); name one of the function tools, or use "auto", "none" '
            'or "required"',
        )

    @model_validator(mode="after")
    def _function_call_names_a_function(self) -> ChatCompletionRequest:
        """The deprecated `function_call` naming a function: one of `functions` (OpenAI
        refuses others; llama.cpp's server answers them with a 500)."""
        call = self.function_call  # given with functions: _function_call_needs_functions
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            return self
        names = [function.get("name") for function in self.functions or []]
        if call["name"] not in names:
            listed = ", ".join(str(name) for name in names) or "no functions given"
            raise ParamError(
                "function_call",
                f"function_call names the function {call['name']!r}, which is not among the "
                f'functions ({listed}); name one of them, or use "auto" or "none"',
            )
        return self

    @model_validator(mode="after")
    def _schemas_can_match(self) -> ChatCompletionRequest:
        """A JSON schema with an empty enum/anyOf/oneOf/type matches no value; llama.cpp
        turns it into an empty grammar rule and its server process crashes on that."""
        for where, schema in self.json_schemas():
            empty = empty_choice(schema)
            if empty is not None:
                raise ParamError(
                    where,
                    f"{where}{empty} is empty, so no value could match the schema; give at "
                    "least one choice, or drop the keyword",
                )
        return self

    @model_validator(mode="after")
    def _top_logprobs_need_logprobs(self) -> ChatCompletionRequest:
        if self.top_logprobs is not None and self.logprobs is not True:
            raise ParamError(
                "top_logprobs",
                "top_logprobs needs logprobs: true; set logprobs: true or drop top_logprobs",
            )
        return self

    @model_validator(mode="after")
    def _audio_output_needs_audio(self) -> ChatCompletionRequest:
        """OpenAI requires `audio` (its format and voice) when `modalities` asks for audio;
        without it a remote worker refused the request after routing."""
        if "audio" in (self.modalities or []) and self.audio is None:
            raise ParamError(
                "audio",
                "audio is required when modalities asks for audio output, as OpenAI's API "
                'requires: give its format and voice, e.g. {"format": "wav", "voice": '
                '"alloy"}, or drop "audio" from modalities',
            )
        return self

    @model_validator(mode="after")
    def _stream_options_need_a_stream(self) -> ChatCompletionRequest:
        if self.stream_options is not None and not self.stream:
            raise ParamError(
                "stream_options",
                "stream_options is only allowed with stream: true; drop it or set stream: true",
            )
        return self

    @field_validator("extra_body")
    @classmethod
    def _extra_body_unwrapped(cls, value: Any) -> Any:
        """The openai SDK merges its `extra_body` argument into the body's top level; a
        client writing the body itself (curl, another library) that sent `extra_body` as a
        key had fugu-lite's keys in it ignored (routed to any worker) and the key itself
        sent on to a worker."""
        raise ValueError(
            "is the openai SDK's argument, not a key of the request: the SDK sends its keys "
            "at the top level of the body; send them there, e.g. "
            '{"model": ..., "messages": [...], "exclude_workers": ["coder"]}'
        )

    @field_validator(*FLOAT_FIELDS, mode="before")
    @classmethod
    def _finite_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        """An integer beyond a float's range (a 401-digit cost_weight) got pydantic's "Input
        should be a valid number", which said neither; inf, which a program validating a
        request itself can give (JSON reading refuses it), passes cost_weight's `ge=0`."""
        if not isinstance(value, int | float) or fits_a_float(value):  # true, false: finite
            return value
        name = str(info.field_name)
        raise ParamError(
            name,
            f"{name} must be a finite number {bounds_text(cls.model_fields[name].metadata)}, "
            f"e.g. 0.5 (got {not_a_float_text(value)})",
        )

    @field_validator("logit_bias", mode="before")
    @classmethod
    def _finite_biases(cls, value: Any) -> Any:
        """A bias beyond a float's range, as _finite_numbers: a 401-digit integer got
        pydantic's "Input should be a valid number", which said neither."""
        for token, bias in value.items() if isinstance(value, dict) else ():
            if isinstance(bias, int | float) and not fits_a_float(bias):
                raise ParamError(
                    key_path("logit_bias", token),
                    f"logit_bias[{token!r}] must be a finite number from {LOGIT_BIAS_LOWEST} to "
                    f"{LOGIT_BIAS_HIGHEST}, e.g. 0.5 (got {not_a_float_text(bias)})",
                )
        return value

    def json_schemas(self) -> list[tuple[str, Any]]:
        """(where, schema) for each JSON schema the request holds: response_format's, each
        function tool's parameters and each deprecated `functions` entry's."""
        schemas: list[tuple[str, Any]] = []
        extra = self.response_format.model_extra if self.response_format else None
        if extra and isinstance(extra.get("json_schema"), dict):
            schema = extra["json_schema"].get("schema")
            schemas.append(("response_format.json_schema.schema", schema))
        if extra and "schema" in extra:
            schemas.append(("response_format.schema", extra["schema"]))
        for index, tool in enumerate(self.tools or []):
            if tool["type"] == "function":
                where = f"tools[{index}].function.parameters"
                schemas.append((where, tool["function"].get("parameters")))
        for index, function in enumerate(self.functions or []):
            schemas.append((f"functions[{index}].parameters", function.get("parameters")))
        return schemas

    def function_names(self) -> list[str]:
        return [tool["function"]["name"] for tool in self.tools or [] if tool["type"] == "function"]

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)

    def max_output_tokens(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    def worker_params(self) -> dict[str, Any]:
        """What the worker gets besides the messages: everything the client set except
        fugu-lite's own keys and nulls (OpenAI's "use the default": the worker's own
        params then apply, and llama.cpp's server answers `"temperature": null` with a
        500). The output-token limit keeps the client's name here; the pool sends it under
        the name each worker reads (`workers.output_limits.output_limit_name`)."""
        return {
            key: value
            for key, value in self.model_dump(exclude_unset=True).items()
            if key not in NOT_FORWARDED and value is not None
        }

    def message_dicts(self) -> list[dict[str, Any]]:
        return [worker_message(message) for message in self.messages]


def worker_message(message: ChatMessage) -> dict[str, Any]:
    """A message as the worker gets it: a null optional key (name, refusal, tool_calls) is
    OpenAI's "none" and is left out (llama.cpp's server refuses some null); content the
    client sent as null stays null, as a deprecated function result's is required, null or
    not (a local worker gets "" for it: llama_cpp_message)."""
    sent = message.model_dump(exclude_none=True)
    if message.content is None and "content" in message.model_fields_set:
        sent["content"] = None
    return sent


def check_length(
    param: str, named: str, text: str, limit: int, *, of: str = "", hint: str = ""
) -> None:
    """`text` (`named` in the message) within OpenAI's limit of `limit` characters: a remote
    worker refused a longer one, after routing."""
    if len(text) > limit:
        raise ParamError(
            param,
            f"{named} is {len(text)} characters long; OpenAI's API takes {of}at most {limit}{hint}",
        )


def fits_a_float(value: int | float) -> bool:
    """Whether a number is finite as a float (an integer beyond its range cannot be one)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def not_a_float_text(value: int | float) -> str:
    """What a number that is no finite float is, for a message's "(got ...)"."""
    if isinstance(value, int):
        digits = len(str(abs(value)))
        return f"an integer of {digits} digits, beyond a 64-bit float's range, about 1.8e308"
    return repr(value)  # inf, nan


def bounds_text(constraints: list[Any]) -> str:
    """A field's `ge`/`le` (pydantic's metadata of its Field) as words: "from 0 to 2", or
    ">= 0" with no upper bound."""
    lowest = next(rule.ge for rule in constraints if hasattr(rule, "ge"))
    highest = next((rule.le for rule in constraints if hasattr(rule, "le")), None)
    if highest is None:
        return f">= {exact_number(lowest)}"
    return f"from {exact_number(lowest)} to {exact_number(highest)}"
