"""A minimal OpenAI-compatible chat server on 127.0.0.1, run in a thread of the caller.

It speaks real HTTP (FastAPI + uvicorn), so clients are tested through their real network
path. Tests and benches script it: a reply function, a latency, and failure modes that are
consumed one per request (`fail_next("500", "429")`) or applied to every request (`mode`):

- "500" / "503": a server error; "429": rate limited (with a Retry-After header);
- "400" / "401" / "403" / "404": client errors that must not be retried;
- "unsupported_value": OpenAI's 400 for a parameter its model does not take (an o-series
  model's temperature), naming it in `param`;
- "bad_model": a 400 for a model name the server does not know, as Mistral's API gives it
  ("Invalid model: NAME", its own code), where OpenAI's is a 404;
- "no_retry": a 503 with `x-should-retry: false` (OpenAI's header: a retry will not help);
- "conflict": a 409 with `x-should-retry: true` (OpenAI's header: a retry may succeed);
- "quota": a 429 `insufficient_quota` (OpenAI's: the account has no credit left);
- "context": a 400 `context_length_exceeded` (the prompt is longer than `context_tokens`,
  llama.cpp's and OpenAI's shape), which the next worker may take;
- "vllm_context": the same refusal as vLLM words it: a 400 with no such code (its body's
  `code` is 400, at the top level), "This model's maximum context length is N tokens.
  However, you requested T tokens (P in the messages, C in the completion). ...", C the
  request's max_tokens (16 when it has none);
- "prompt_too_long": Anthropic's: a 400 "prompt is too long: T tokens > N maximum", no code;
- "tgi_context": Hugging Face TGI's: a 422 `{"error": "Input validation error: ...",
  "error_type": "validation"}`, "`inputs` tokens + `max_new_tokens` must be <= N. Given: P
  `inputs` tokens and C `max_new_tokens`" when the request has a max_tokens C, else
  "`inputs` must have less than N tokens. Given: P";
- "gateway_page": a 502 web page as a CDN in front of a worker gives (a title, styles, a
  script, then the words);
- "html": a 200 web page (text/html), as a base_url that is a web app's answers;
- "hang": answer nothing until the client gives up (or the stub stops);
- "close": send the headers, then drop the connection mid-body;
- "no_stream_options": a 400 "Unrecognized request argument supplied: stream_options" (an
  older Azure API version's, some gateways') to a request that has stream_options; any
  other request is answered as "ok";
- "leak": a 500 whose body echoes the request's Authorization header, as a careless
  server might; clients must not pass the key on into their errors or logs;
- "parts": a normal answer whose message content is a list of parts, as Mistral's reasoning
  models give it (a `thinking` part, then the reply in two `text` parts); not streamed;
- "reasoning": a normal answer with the model's thinking in a separate `reasoning_content`
  field (llama.cpp's and vLLM's reasoning parsers; a draft answer there), its content null
  when the reply is empty (cut while thinking); not streamed;
- "no_usage": a normal answer without `usage` (as some servers give), streamed or not;
- "cut_stream": a stream that stops after its first word, without its last chunk (its
  finish_reason) or `data: [DONE]`, its connection closed cleanly (a proxy's time limit, a
  worker restarted behind a gateway); not streamed, "ok";
- "ok": a normal answer.

It records what it received (bodies, Authorization headers), requests in flight and the
peak, so tests can check concurrency limits and what a client sent. A request no chat server
takes (no JSON object, no list of message objects) is refused with a 400 before any of that,
as OpenAI refuses it, and consumes no scripted failure.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from ..server.disconnect import ClientDisconnectedError, until_disconnected
from ..server.thread import ServerThread

Reply = Callable[[list[dict[str, Any]]], str]
MODES = (
    "ok",
    "500",
    "503",
    "429",
    "no_retry",
    "conflict",
    "quota",
    "400",
    "401",
    "403",
    "404",
    "bad_model",
    "unsupported_value",
    "context",
    "vllm_context",
    "prompt_too_long",
    "tgi_context",
    "html",
    "gateway_page",
    "hang",
    "close",
    "leak",
    "no_stream_options",
    "no_usage",
    "cut_stream",
    "parts",
    "reasoning",
)


REASONING_DRAFT = "Let me think. The answer is 0, I guess. Answer: A"


def reply_message(text: str, mode: str) -> dict[str, Any]:
    """The reply's message as the mode gives it (see "parts" and "reasoning")."""
    if mode == "parts":
        return {"role": "assistant", "content": content_parts(text)}
    if mode == "reasoning":
        return {"role": "assistant", "content": text or None, "reasoning_content": REASONING_DRAFT}
    return {"role": "assistant", "content": text}


def echo_reply(messages: list[dict[str, Any]]) -> str:
    last = str(messages[-1].get("content", "")) if messages else ""
    return f"stub answer to: {last}"


def count_tokens(text: str) -> int:
    """Whitespace tokens: enough to make usage and cost checkable."""
    return len(text.split())


class StubWorker:
    """`with StubWorker() as stub: ... stub.base_url ...`"""

    def __init__(
        self,
        reply: str | Reply = echo_reply,
        *,
        latency_s: float = 0.0,
        mode: str = "ok",
        model: str = "stub-model",
        retry_after_s: float = 0.0,
        hang_s: float = 600.0,
        stream_chunk_delay_s: float = 0.0,
    ) -> None:
        _check_mode(mode)
        _check_seconds(
            latency_s=latency_s, retry_after_s=retry_after_s, hang_s=hang_s,
            stream_chunk_delay_s=stream_chunk_delay_s,
        )  # fmt: skip
        self.reply = reply
        self.latency_s = latency_s
        self.mode = mode
        self.model = model
        self.retry_after_s = retry_after_s
        self.hang_s = hang_s
        self.stream_chunk_delay_s = stream_chunk_delay_s
        self.finish_reason = "stop"  # "length": replies (streamed or not) as if cut at the limit
        self.context_tokens = 100  # the limit a "context" refusal names
        # The `usage` every answer reports instead of its own counts (a careless server's).
        self.usage: dict[str, Any] | None = None
        self.failures: deque[str] = deque()
        self.bodies: list[dict[str, Any]] = []
        self.auth_headers: list[str | None] = []
        self.modes_served: list[str] = []
        self.arrivals: list[float] = []  # time.monotonic() of each chat request
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._runner: ServerThread | None = None
        self.port = 0
        self.app = self._build_app()

    # -- lifecycle -------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> StubWorker:
        self._runner = ServerThread(
            self.app,
            # "close" mode drops connections on purpose; uvicorn would log each as an error.
            log_level="critical",
            lifespan="off",
            graceful_timeout_s=1,
            startup_timeout_s=10,
            name="stub-worker",
        ).start()
        self.port = self._runner.port
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._runner is not None:
            self._runner.stop()

    def __enter__(self) -> StubWorker:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- scripting -------------------------------------------------------------------

    def fail_next(self, *modes: str) -> None:
        """The next requests get these modes, one each, then `mode` again."""
        for mode in modes:
            _check_mode(mode)
        with self._lock:
            self.failures.extend(modes)

    def _next_mode(self) -> str:
        with self._lock:
            return self.failures.popleft() if self.failures else self.mode

    # -- the app ---------------------------------------------------------------------

    def _build_app(self) -> FastAPI:
        app = FastAPI()

        @app.get("/v1/models")
        async def models() -> dict[str, Any]:
            return {"object": "list", "data": [{"id": self.model, "object": "model"}]}

        @app.post("/v1/chat/completions")
        async def chat(request: Request) -> Response:
            body = _read_body(await request.body())
            if isinstance(body, str):  # a request no chat server takes, as OpenAI refuses it
                error = {"message": body, "type": "invalid_request_error", "param": None,
                         "code": None}  # fmt: skip
                return JSONResponse({"error": error}, status_code=400)
            auth = request.headers.get("authorization")
            mode = self._next_mode()
            with self._lock:
                self.arrivals.append(time.monotonic())
                self.bodies.append(body)
                self.auth_headers.append(auth)
                self.modes_served.append(mode)
                self.in_flight += 1
                self.max_in_flight = max(self.max_in_flight, self.in_flight)
            try:
                if mode == "hang":
                    return await _unless_gone(request, self._respond(mode, body, auth))
                return await self._respond(mode, body, auth)
            finally:
                with self._lock:
                    self.in_flight -= 1

        return app

    async def _respond(self, mode: str, body: dict[str, Any], auth: str | None) -> Response:
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        if mode == "hang":
            return await self._hang()
        failure = _page_or_dropped(mode)
        if failure is None:
            failure = self._error_reply(mode, body, auth)
        if failure is not None:
            return failure
        messages = body.get("messages") or []
        prompt_tokens = sum(count_tokens(str(m.get("content", ""))) for m in messages)
        if mode in ("vllm_context", "prompt_too_long", "tgi_context"):
            return self._plain_context_refusal(mode, body, prompt_tokens)
        return self._answer(mode, body, messages, prompt_tokens)

    async def _hang(self) -> Response:
        """Nothing until hang_s is over or the stub stops (the client gives up before)."""
        deadline = time.monotonic() + self.hang_s
        while time.monotonic() < deadline and not self._stopping.is_set():
            await asyncio.sleep(0.02)
        return _error(503, "stub stopped while hanging")

    def _error_reply(self, mode: str, body: dict[str, Any], auth: str | None) -> Response | None:
        """The error a failure mode answers with (JSON, in the shape its server gives); None
        for a mode that answers (or a "no_stream_options" request without them)."""
        if mode == "leak":
            return _error(500, f"upstream rejected credentials {auth}")
        if mode == "no_stream_options" and "stream_options" in body:
            error = {
                "message": "Unrecognized request argument supplied: stream_options",
                "type": "invalid_request_error",
                "param": None,
                "code": None,
            }
            return JSONResponse({"error": error}, status_code=400)
        if mode in ("500", "503"):
            return _error(int(mode), "stub server error")
        if mode == "429":
            return _error(429, "rate limited", {"retry-after": str(self.retry_after_s)})
        if mode in ("400", "401", "403", "404"):
            return _error(int(mode), f"stub client error {mode}")
        if mode == "unsupported_value":
            error = {
                "message": "Unsupported value: 'temperature' does not support 0.5 with this "
                "model. Only the default (1) value is supported.",
                "type": "invalid_request_error",
                "param": "temperature",
                "code": "unsupported_value",
            }
            return JSONResponse({"error": error}, status_code=400)
        if mode == "bad_model":
            error = {"message": f"Invalid model: {body.get('model')}", "type": "invalid_model",
                     "code": "1500", "param": None}  # fmt: skip
            return JSONResponse({"object": "error", **error}, status_code=400)
        if mode == "no_retry":
            return _error(503, "stub says do not retry", {"x-should-retry": "false"})
        if mode == "conflict":
            return _error(409, "stub lock timeout", {"x-should-retry": "true"})
        if mode == "quota":
            message = "You exceeded your current quota, please check your plan and billing."
            return _error(429, message, code="insufficient_quota")
        if mode == "context":
            message = (
                f"This model's maximum context length is {self.context_tokens} tokens. "
                "Please reduce the length of the messages or completion."
            )
            return _error(400, message, code="context_length_exceeded")
        return None

    def _answer(
        self, mode: str, body: dict[str, Any], messages: list[dict[str, Any]], prompt_tokens: int
    ) -> Response:
        """The reply, streamed (with usage last when asked) or as one chat.completion."""
        text = self.reply if isinstance(self.reply, str) else self.reply(messages)
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": count_tokens(text),
            "total_tokens": prompt_tokens + count_tokens(text),
        }
        if self.usage is not None:
            usage = self.usage
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            include_usage = include_usage and mode != "no_usage"
            return StreamingResponse(
                self._stream(text, usage if include_usage else None, cut=mode == "cut_stream"),
                media_type="text/event-stream",
            )
        return EscapedJSONResponse(
            {
                "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": self.model,
                "choices": [
                    {
                        "index": 0,
                        "message": reply_message(text, mode),
                        "finish_reason": self.finish_reason,
                    }
                ],
                **({} if mode == "no_usage" else {"usage": usage}),
            }
        )

    def _plain_context_refusal(
        self, mode: str, body: dict[str, Any], prompt_tokens: int
    ) -> JSONResponse:
        limit = self.context_tokens
        completion = int(body.get("max_tokens") or body.get("max_completion_tokens") or 16)
        prompt = max(prompt_tokens, limit + 1 - completion)  # over the limit, as refused
        if mode == "prompt_too_long":
            message = f"prompt is too long: {prompt + completion} tokens > {limit} maximum"
            error = {"type": "invalid_request_error", "message": message}
            return JSONResponse({"type": "error", "error": error}, status_code=400)
        if mode == "tgi_context":
            message = (
                f"`inputs` tokens + `max_new_tokens` must be <= {limit}. Given: {prompt} "
                f"`inputs` tokens and {completion} `max_new_tokens`"
                if body.get("max_tokens") is not None
                else f"`inputs` must have less than {limit} tokens. Given: {max(prompt, limit)}"
            )
            tgi = {"error": f"Input validation error: {message}", "error_type": "validation"}
            return JSONResponse(tgi, status_code=422)
        message = (
            f"This model's maximum context length is {limit} tokens. However, you requested "
            f"{prompt + completion} tokens ({prompt} in the messages, {completion} in the "
            "completion). Please reduce the length of the messages or completion."
        )
        return JSONResponse(
            {"object": "error", "message": message, "type": "BadRequestError", "param": None,
             "code": 400},
            status_code=400,
        )  # fmt: skip

    async def _stream(
        self, text: str, usage: dict[str, int] | None, cut: bool = False
    ) -> AsyncIterator[bytes]:
        completion_id = f"chatcmpl-{uuid.uuid4().hex[:12]}"
        created = int(time.time())

        def chunk(delta: dict[str, Any], finish: str | None, **extra: Any) -> bytes:
            payload = {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": self.model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                **extra,
            }
            return f"data: {json.dumps(payload)}\n\n".encode()

        yield chunk({"role": "assistant", "content": ""}, None)
        words = text.split(" ")
        for index, word in enumerate(words):
            if self.stream_chunk_delay_s:
                await asyncio.sleep(self.stream_chunk_delay_s)
            yield chunk({"content": word if index == 0 else " " + word}, None)
            if cut:
                return
        yield chunk({}, self.finish_reason)
        if usage is not None:
            final = {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": self.model,
                "choices": [],
                "usage": usage,
            }
            yield f"data: {json.dumps(final)}\n\n".encode()
        yield b"data: [DONE]\n\n"


GATEWAY_PAGE = (
    '<!DOCTYPE html>\n<!--[if lt IE 7]> <html class="no-js ie6"> <![endif]-->\n'
    "<html><head><title>api.example.com | 502: Bad gateway</title>\n"
    "<style>body{margin:0;font-family:sans-serif}" + ".cf-error{padding:1em}" * 40 + "</style>"
    "<script>window._cf_chl_opt={cvId: '3'};</script></head>\n"
    "<body><h1>Bad gateway</h1><p>The web server reported a bad gateway error.</p></body></html>"
)


def _page_or_dropped(mode: str) -> Response | None:
    """A web page ("gateway_page", "html") or a body cut off ("close") where JSON was due."""
    if mode == "gateway_page":
        return Response(GATEWAY_PAGE, status_code=502, media_type="text/html")
    if mode == "html":
        page = "<!doctype html><html><head><title>Stub app</title></head><body></body></html>"
        return Response(page, media_type="text/html")
    if mode == "close":
        return StreamingResponse(_truncated_body(), media_type="application/json")
    return None


def content_parts(text: str) -> list[dict[str, Any]]:
    """A reply as Mistral's reasoning models give it: its thinking, then its text in parts."""
    middle = len(text) // 2
    thinking = [{"type": "text", "text": "Let me think about it."}]
    return [
        {"type": "thinking", "thinking": thinking},
        {"type": "text", "text": text[:middle]},
        {"type": "text", "text": text[middle:]},
    ]


async def _unless_gone(request: Request, answer: Awaitable[Response]) -> Response:
    """`answer`, given up when the client leaves first: a hang went on, counted in flight,
    for all its hang_s (the session-wide stubs' 600 s: every later test of that worker saw
    it)."""
    try:
        return await until_disconnected(request, answer)
    except ClientDisconnectedError:
        return Response(status_code=499)


async def _truncated_body() -> AsyncIterator[bytes]:
    yield b'{"id": "chatcmpl-broken", "choices": ['
    raise ConnectionResetError("stub dropped the connection on purpose")


def _read_body(content: bytes) -> dict[str, Any] | str:
    """A chat request's body, or what is wrong with it (not JSON, not an object, no list of
    message objects, stream_options that is no object): the stub answered those with a
    500, a server error its clients retried and blamed on the worker."""
    try:
        body = json.loads(content)
    except ValueError as error:
        return f"the request body is not JSON ({error}); send the chat request as a JSON object"
    if not isinstance(body, dict):
        return f"the request body must be a JSON object, not {type(body).__name__}"
    messages = body.get("messages")
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        return "messages must be a list of message objects ({'role': ..., 'content': ...})"
    if not isinstance(body.get("stream_options"), dict | None):
        return "stream_options must be an object, such as {'include_usage': true}"
    return body


class EscapedJSONResponse(JSONResponse):
    """JSON with every character beyond ASCII as its `\\u` escape (as Python's json
    writes it), so a reply may hold half of a surrogate pair (`"\\ud83d"`, an emoji cut in
    two by a server counting UTF-16 units, as a JavaScript gateway's JSON.stringify sends
    it), which a UTF-8 body could not hold."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, allow_nan=False, separators=(",", ":")).encode("ascii")


def _error(
    status: int,
    message: str,
    headers: dict[str, str] | None = None,
    code: str | int | None = None,
) -> JSONResponse:
    return JSONResponse(
        {"error": {"message": message, "type": "stub_error", "code": code or status}},
        status_code=status,
        headers=headers,
    )


def _check_seconds(**options: float) -> None:
    """A ValueError naming an option that is no time: a negative latency was taken as none,
    a negative Retry-After was sent to clients, a NaN hang_s hung not at all."""
    for name, value in options.items():
        if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
            raise ValueError(f"{name} must be a number of seconds >= 0, not {value!r}")


def _check_mode(mode: str) -> None:
    if mode not in MODES:
        raise ValueError(f"unknown stub mode {mode!r}; use one of {', '.join(MODES)}")
