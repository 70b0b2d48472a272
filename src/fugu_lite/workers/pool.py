"""The worker pool: calls to OpenAI-compatible chat endpoints, with limits and retries.

`async with WorkerPool(config) as pool:` starts the pool's local llama.cpp servers (and
stops them on the way out), then `await pool.chat(worker_id, messages)` returns a
`CallResult` (never raises for a failed call: the error is in the result) and
`pool.stream_chat(...)` yields OpenAI chunk dicts.

Every call goes through the official `openai` SDK, with the SDK's own retries off: the
pool retries 429, 5xx, 408, connection errors and timeouts itself, with exponential
backoff and jitter (honouring Retry-After), within the call's budget (call_budget_s), and
never retries other 4xx, nor a 429 insufficient_quota (the account has no credit left).
Each worker has its own concurrency limit. API keys are read from the environment
variable the worker names; they are scrubbed from every error message.

What lives beside it: what a call gives back (CallResult, Usage, usage_cost, json_safe) is in
results.py; which failures are retried and the backoff in retries.py; the API keys (read_key,
redact, PoolStartError) in api_keys.py; what a failed call means (its kind,
the refusals read from a worker's words) in errors.py; a local worker's requests and answers
in llama.cpp's form in llama_cpp_requests.py, llama_cpp_schemas.py and llama_cpp_answers.py; the
output-token limit sent in output_limits.py; one attempt's answer read, or its failure described,
and the CallResult of a failed call in attempts.py; a streamed call's chunk stream in streams.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

from openai import AsyncOpenAI, DefaultAsyncHttpxClient
from openai.types.chat import ChatCompletionChunk

from .api_keys import read_key
from .attempts import (
    Answer,
    Failure,
    answer_as_asked,
    broken_stream_error,
    describe_failure,
    failed_result,
    refused_result,
)
from .config import CHAT_PATH, PoolConfig, WorkerConfig
from .errors import (
    WorkerCallError,
    error_code,
    error_param,
    on_this_machine,
    refuses_stream_options,
    retry_header,
    status_code,
)
from .llama_cpp_requests import (
    check_chat_format,
    llama_cpp_message,
    llama_cpp_params,
    llama_cpp_request_problem,
    renders_tool_calls,
)
from .local_server import (
    LocalServer,
    check_gguf_loads,
    segfault_hint,
    start_local_servers,
    stop_after_failure,
    stop_local_servers,
    vocab_size,
    worker_gguf,
)
from .output_limits import with_output_limit
from .preflight import check_local_worker
from .results import CallResult, Usage, answer_json, parse_completion, usage_cost, web_page_hint
from .retries import RETRYABLE_KINDS, attempt_timeout_s, call_budget_s, retry_wait
from .streams import (
    CUT_STREAM,
    OpenStream,
    WatchedStream,
    as_sent,
    chunk_shaper,
    close_stream,
    finishes,
)

__all__ = ["Judge", "WorkerPool", "judge_from_pool"]
logger = logging.getLogger(__name__)

# How long a worker's refusal of stream_options holds: its streams are then asked with them
# again (the server behind its base_url may have been upgraded or replaced since).
STREAM_OPTIONS_RECHECK_S = 3600.0
try:  # the SDK's own HTTP library: httpx2 in openai 3.x, httpx before
    from httpx2 import Response as SDKResponse
except ImportError:  # pragma: no cover - older openai
    from httpx import Response as SDKResponse  # type: ignore[assignment]  # the other library

Judge = Callable[[list[dict[str, str]]], Awaitable[str]]


class WorkerPool:
    """An async context manager over the configured workers."""

    def __init__(self, config: PoolConfig) -> None:
        self.config = config
        self.worker_ids: list[str] = config.worker_ids
        self._workers = {worker.id: worker for worker in config.workers}
        self._clients: dict[str, AsyncOpenAI] = {}
        self._keys: dict[str, str] = {}
        self._semaphores: dict[str, asyncio.Semaphore] = {}
        self.servers: dict[str, LocalServer] = {}
        self.vocab_sizes: dict[str, int | None] = {}  # local workers' models' vocabularies
        self.calls_as_text: dict[str, bool] = {}  # local workers whose prompts drop tool calls
        # When each worker last refused stream_options (time.monotonic; see stream_chat).
        self.stream_options_refused_at: dict[str, float] = {}
        self._restarting: dict[str, asyncio.Task[None]] = {}  # see stop_abandoned_answer
        # Each worker's calls sent and not yet answered, oldest first (see _queued_behind).
        self._sent: dict[str, list[object]] = {}
        self._entered = False  # between __aenter__ and __aexit__
        self._closing = False

    async def __aenter__(self) -> WorkerPool:
        if self._entered:
            # a second start would run a second set of local servers over the first, and the
            # inner block's end would close the pool under the outer one
            raise RuntimeError(
                "this WorkerPool is already started (an enclosing `async with` entered it); "
                "enter it once, or make another WorkerPool(config)"
            )
        self._entered = True
        self._closing = False  # entered again after a close: it is open again
        try:
            await self._start()
        except BaseException:
            self._entered = False
            raise
        return self

    async def _start(self) -> None:
        """Read the API keys, start the local servers, make each worker's client."""
        self._keys = {worker.id: read_key(worker) for worker in self.config.workers}
        for worker in self.config.workers:
            check_local_worker(worker)  # as preflight does, in its order
        self.servers = await start_local_servers(self.config.workers)
        # No __aexit__ follows a start that fails (or is cancelled: Ctrl-C) from here on.
        try:
            for server in self.servers.values():
                await self._read_model(server)
            for worker in self.config.workers:
                self._clients[worker.id] = self._new_client(worker)
                self._semaphores[worker.id] = asyncio.Semaphore(worker.max_concurrency)
        except BaseException:
            stop_after_failure(self.servers.values())
            raise

    async def _read_model(self, server: LocalServer) -> None:
        """Note what requests to a local worker depend on in its GGUF: its vocabulary's size
        and whether its prompts show tool calls (read again at each start: a crashed server
        started again serves the file then at its path, maybe another model)."""
        gguf = worker_gguf(server.worker_id, server.config)
        self.vocab_sizes[server.worker_id] = await asyncio.to_thread(vocab_size, gguf)
        renders = await asyncio.to_thread(renders_tool_calls, server.config)
        self.calls_as_text[server.worker_id] = not renders

    async def __aexit__(self, *exc_info: object) -> None:
        self._entered = False
        self._closing = True
        for task in list(self._restarting.values()):
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        try:
            for client in self._clients.values():
                await client.close()
        finally:
            self._clients.clear()
            if exc_info[0] is None:
                stop_local_servers(self.servers.values())
            else:
                stop_after_failure(self.servers.values())

    def _new_client(self, worker: WorkerConfig) -> AsyncOpenAI:
        base_url = self.base_url(worker.id)
        return AsyncOpenAI(
            api_key=self._keys[worker.id],
            base_url=base_url,
            max_retries=0,
            timeout=worker.timeout_s,
            http_client=_client_without_proxy(base_url),
        )

    def crashed_servers(self) -> list[str]:
        """Local workers whose llama.cpp process exited without being stopped."""
        return [worker_id for worker_id, server in self.servers.items() if server.crashed]

    async def restart(self, worker_id: str) -> None:
        """Start a local worker's llama.cpp server again (on a new port) after its process
        exited; the tail of the old one's log goes to the log first. LocalServerError if
        the new one does not come up, PoolStartError if its GGUF (replaced since) lacks the
        chat template its chat_format names."""
        code, tail = self.exit_report(worker_id)
        logger.warning(
            "local worker %s: its llama.cpp server exited (code %s)%s; starting it again. "
            "Last lines of its log:\n%s",
            worker_id, code, segfault_hint(code), tail,
        )  # fmt: skip
        await self._start_again(worker_id)

    def exit_report(self, worker_id: str) -> tuple[int | None, str]:
        """A local worker's exited llama.cpp server: its exit code and its log's last lines
        (read before the log is removed, when the server is stopped or started again)."""
        server = self.servers[worker_id]
        code = None if server.process is None else server.process.returncode
        return code, server.log_tail()

    async def _start_again(self, worker_id: str) -> None:
        old = self.servers[worker_id]
        old.stop()
        old.remove_log()
        server = LocalServer(self.worker(worker_id))
        try:
            # Another GGUF put at its path may not load, or lack its chat_format's template.
            await asyncio.to_thread(check_gguf_loads, worker_id, server.config)
            await asyncio.to_thread(check_chat_format, self.worker(worker_id))
            await self._read_model(server)
            server.launch()
            await server.wait_ready()
        except BaseException:
            server.stop()
            server.stopped = False  # still to be restarted later
            self.servers[worker_id] = server
            raise
        self.servers[worker_id] = server
        previous = self._clients.get(worker_id)
        self._clients[worker_id] = self._new_client(self.worker(worker_id))
        if previous is not None:
            await previous.close()

    def stop_abandoned_answer(
        self,
        worker_id: str,
        why: str = "the caller of the answer it was generating is gone",
        call: object | None = None,
    ) -> None:
        """A non-streamed call to a local worker was abandoned (its client left, or it timed
        out) while llama.cpp generated the answer. Its server goes on generating it (it
        notices only a stream's client leaving) and serves one request at a time, so every
        later request to it waited for that answer: its process is killed and started again
        (about 2 s, which later calls wait for; see `_ready_client`). Not for a `call` still
        queued behind another (max_concurrency > 1): llama.cpp skips a request whose client
        left when its turn comes, and the kill would cut the answer being generated."""
        server = self.servers.get(worker_id)
        if self._closing or worker_id in self._restarting or server is None:
            return
        if not server.is_alive() or (call is not None and self._queued_behind(worker_id, call)):
            return
        logger.info(
            "local worker %s: %s; its llama.cpp server is started again to stop it",
            worker_id, why,
        )  # fmt: skip
        server.kill()
        task = asyncio.create_task(self._start_again(worker_id))
        self._restarting[worker_id] = task
        task.add_done_callback(lambda done: self._restarted(worker_id, done))

    def _stop_timed_out(
        self, worker: WorkerConfig, kind: str, error: Exception, call: object
    ) -> None:
        """A local worker's call (or stream's first chunk) that timed out is abandoned like
        one whose caller left: a retry or the next call would wait behind what llama.cpp
        goes on doing for it (generating the answer, or hanging)."""
        if kind == "timeout" and worker.local is not None and status_code(error) is None:
            why = f"it gave no answer within its timeout_s of {worker.timeout_s:g} s"
            self.stop_abandoned_answer(worker.id, why, call)

    def _sent_call(self, worker_id: str) -> object:
        """Note a call sent to the worker (until `_answered`); its token."""
        if worker_id in self.servers:
            self.servers[worker_id].trim_log()
        call = object()
        self._sent.setdefault(worker_id, []).append(call)
        return call

    def _answered(self, worker_id: str, call: object | None) -> None:
        sent = self._sent.get(worker_id, [])
        if call in sent:
            sent.remove(call)

    def _queued_behind(self, worker_id: str, call: object) -> bool:
        """Whether an older call to the worker is still unanswered: llama.cpp's server
        answers one request at a time, in the order they came, so this one is waiting."""
        sent = self._sent.get(worker_id, [])
        return call in sent and sent[0] is not call

    def _restarted(self, worker_id: str, task: asyncio.Task[None]) -> None:
        self._restarting.pop(worker_id, None)
        if not task.cancelled() and task.exception() is not None:
            logger.error("local worker %s did not start again: %s", worker_id, task.exception())

    async def _ready_client(self, worker_id: str, deadline: float) -> tuple[AsyncOpenAI, float]:
        """The worker's client, once a restart of its server (stop_abandoned_answer) is
        over, and the call's deadline (time.perf_counter) moved by that wait: the restart
        (up to its startup_timeout_s) is not the call's time, and an attempt left with none
        would time out at once and kill the server again."""
        restarting = self._restarting.get(worker_id)
        if restarting is not None:
            waited = time.perf_counter()
            with contextlib.suppress(Exception):  # it failed: the call says so
                await asyncio.shield(restarting)
            deadline += time.perf_counter() - waited
        return self._client(worker_id), deadline

    # -- lookup -----------------------------------------------------------------------

    def worker(self, worker_id: str) -> WorkerConfig:
        try:
            return self._workers[worker_id]
        except KeyError:
            raise KeyError(
                f"unknown worker {worker_id!r}; the pool has {', '.join(self.worker_ids)}"
            ) from None

    def base_url(self, worker_id: str) -> str:
        worker = self.worker(worker_id)
        if worker.is_local:
            return self.servers[worker_id].base_url
        assert worker.base_url is not None
        return worker.base_url

    def is_alive(self, worker_id: str) -> bool:
        """False only when we know the worker is gone: its local server process exited
        (and is not being started again after a call was abandoned)."""
        server = self.servers.get(worker_id)
        return server is None or server.is_alive() or worker_id in self._restarting

    def cost(self, worker_id: str, usage: Usage) -> float | None:
        return usage_cost(self.worker(worker_id), usage)

    def request_messages(
        self, worker_id: str, messages: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """The messages as sent: for a local llama.cpp worker in the plain form its chat
        template takes; the worker's system prompt goes first (merged with a system message
        the caller already has)."""
        worker = self.worker(worker_id)
        if worker.local is not None:
            as_text = self.calls_as_text.get(worker_id, False)
            messages = [llama_cpp_message(message, as_text) for message in messages]
        system = worker.system_prompt
        if not system:
            return list(messages)
        if messages and messages[0].get("role") == "system":
            first = dict(messages[0])
            content = first.get("content")
            if isinstance(content, list):
                first["content"] = [{"type": "text", "text": system}, *content]
            else:
                first["content"] = f"{system}\n\n{content or ''}".rstrip()
            return [first, *messages[1:]]
        return [{"role": "system", "content": system}, *messages]

    # -- calls ------------------------------------------------------------------------

    async def chat(
        self,
        worker_id: str,
        messages: list[dict[str, Any]],
        on_slot: Callable[[], None] | None = None,
        retried: frozenset[str] = RETRYABLE_KINDS,
        /,
        **params: Any,
    ) -> CallResult:
        """One chat completion; failures come back as a CallResult with `error` set.
        `on_slot` is called once the call has one of the worker's max_concurrency slots (a
        caller giving up before then knows the worker was busy, not failing); `retried`:
        the error kinds tried again (up to max_retries), e.g. all but rate_limit for a
        caller with another worker to ask.
        (Positional-only arguments: any request key, `worker_id` or `self` too, is a param.)"""
        worker = self.worker(worker_id)
        self._client(worker_id)  # the pool is started (the call's client: _ready_client)
        body = self.request_body(worker, messages, params)
        refused = self.refused_locally(worker, body)
        if refused is not None:
            return refused_result(worker_id, refused)
        async with self._semaphores[worker_id]:
            if on_slot is not None:
                on_slot()
            return await self._call_with_retries(worker, body, retried)

    async def _call_with_retries(
        self, worker: WorkerConfig, body: dict[str, Any], retried: frozenset[str]
    ) -> CallResult:
        """The call, once it has a slot: its attempts until one is answered, or a failure is
        not tried again."""
        started_at = time.time()
        start = time.perf_counter()
        deadline = start + call_budget_s(worker)
        attempt = 0
        while True:
            attempt += 1
            client, deadline = await self._ready_client(worker.id, deadline)
            call = self._sent_call(worker.id)
            try:
                answer = await self._try_call(worker, client, body, deadline, call)
                if isinstance(answer, Answer):
                    return CallResult(
                        worker_id=worker.id, output=answer.output, usage=answer.usage,
                        cost=answer.cost, latency_s=time.perf_counter() - start, error=None,
                        error_kind=None, attempts=attempt, raw=answer.raw, started_at=started_at,
                        finished_at=time.time(),
                    )  # fmt: skip
                failure = answer
                wait = retry_wait(
                    worker, attempt, failure.kind, retried, failure.error, failure.retry_after,
                    deadline,
                )  # fmt: skip
                if wait is None:
                    return failed_result(worker.id, failure, attempt, start, started_at)
                await asyncio.sleep(wait)
            finally:
                self._answered(worker.id, call)

    async def _try_call(
        self,
        worker: WorkerConfig,
        client: AsyncOpenAI,
        body: dict[str, Any],
        deadline: float,
        call: object,
    ) -> Answer | Failure:
        """One attempt: the worker's answer read, or why it failed."""
        response = None
        try:
            async with asyncio.timeout(attempt_timeout_s(worker, deadline)):
                # The SDK's generic post: its auth, errors and timeouts, without
                # the typed-params transform, which costs ~1 ms per call.
                response = await client.post(CHAT_PATH, cast_to=SDKResponse, body=body)
                raw = answer_json(response.content, response.headers.get("content-type"))
            raw = answer_as_asked(worker, body, response.content, raw)
            output, usage = parse_completion(raw)
            cost = None if usage is None else self.cost(worker.id, usage)
            return Answer(output=output, usage=usage, cost=cost, raw=raw)
        except asyncio.CancelledError:
            if worker.local is not None and response is None:
                self.stop_abandoned_answer(worker.id, call=call)
            raise
        except Exception as error:
            return self._failure(worker, error, call)

    def _failure(self, worker: WorkerConfig, error: Exception, call: object) -> Failure:
        """A failed attempt described; a local worker's that timed out is stopped, and the
        call is answered."""
        kind, message, retry_after = describe_failure(worker, error, self._keys.get(worker.id))
        self._stop_timed_out(worker, kind, error, call)
        self._answered(worker.id, call)
        return Failure(error=error, kind=kind, message=message, retry_after=retry_after)

    async def stream_chat(
        self,
        worker_id: str,
        messages: list[dict[str, Any]],
        on_slot: Callable[[], None] | None = None,
        retried: frozenset[str] = RETRYABLE_KINDS,
        /,
        **params: Any,
    ) -> AsyncIterator[dict[str, Any]]:
        """Yield chat.completion.chunk dicts as they arrive.

        Opening the stream (up to and including the first chunk) is retried like `chat`;
        if it still fails, WorkerCallError is raised before anything is yielded, so a
        caller can fall back to another worker. A failure after the first chunk raises
        WorkerCallError too. The worker's slot is held until the stream ends (`on_slot` is
        called once it has it, and `retried` read, as for `chat`): iterate to the end or
        close the generator (`contextlib.aclosing`)."""
        worker = self.worker(worker_id)
        self._client(worker_id)  # the pool is started (the call's client: _ready_client)
        body = self._stream_body(worker, messages, params)
        async with self._semaphores[worker_id]:
            if on_slot is not None:
                on_slot()
            opened = await self._open_stream(worker, body, retried)
            shape = chunk_shaper(worker, opened.body)
            finished = started = False
            try:
                chunk = shape(as_sent(opened.first))
                finished = finishes(chunk)
                yield chunk
                started = True
                async for later in opened.iterator:
                    chunk = shape(as_sent(later))
                    finished = finished or finishes(chunk)
                    yield chunk
            except Exception as error:
                key = self._keys.get(worker_id)
                raise broken_stream_error(worker, error, key, started) from None
            finally:
                self._answered(worker_id, opened.call)
                await close_stream(opened.stream)
            if not (finished or opened.stream.ended_with_done):
                raise WorkerCallError("server", f"worker {worker_id}: server: {CUT_STREAM}")

    def _stream_body(
        self, worker: WorkerConfig, messages: list[dict[str, Any]], params: dict[str, Any]
    ) -> dict[str, Any]:
        """A stream's request body (without stream_options while the worker refuses them);
        the WorkerCallError of one a local worker cannot take."""
        body = self.request_body(worker, messages, params)
        if self.stream_options_refused(worker.id):
            body.pop("stream_options", None)
        refused = self.refused_locally(worker, body)
        if refused is not None:
            raise refused
        return body

    async def _open_stream(
        self, worker: WorkerConfig, body: dict[str, Any], retried: frozenset[str]
    ) -> OpenStream:
        """The stream up to its first chunk, retried like `chat`'s call (and asked once more
        without stream_options when the worker refuses them); WorkerCallError if it fails."""
        deadline = time.perf_counter() + call_budget_s(worker)
        attempt = 0
        while True:
            attempt += 1
            client, deadline = await self._ready_client(worker.id, deadline)
            call = self._sent_call(worker.id)  # answered when the stream ends
            opened = await self._try_open(worker, client, body, deadline, call)
            if isinstance(opened, OpenStream):
                return opened
            failure = opened
            if "stream_options" in body and refuses_stream_options(failure.error):
                body = self._without_stream_options(worker.id, body, failure.message)
                attempt -= 1  # the same call once more, not a retry of a failure
                continue
            wait = retry_wait(
                worker, attempt, failure.kind, retried, failure.error, failure.retry_after,
                deadline,
            )  # fmt: skip
            if wait is None:
                error = failure.error
                raise WorkerCallError(
                    failure.kind, failure.message, status_code(error), error_code(error),
                    failure.retry_after, error_param(error), retry_header(error),
                )  # fmt: skip
            await asyncio.sleep(wait)

    async def _try_open(
        self,
        worker: WorkerConfig,
        client: AsyncOpenAI,
        body: dict[str, Any],
        deadline: float,
        call: object,
    ) -> OpenStream | Failure:
        """One attempt at opening the stream: it, with its first chunk, or why it failed."""
        stream = None
        try:
            async with asyncio.timeout(attempt_timeout_s(worker, deadline)):
                stream = await client.post(
                    CHAT_PATH,
                    cast_to=ChatCompletionChunk,
                    body={**body, "stream": True},
                    stream=True,
                    stream_cls=WatchedStream,
                )
                iterator = stream.__aiter__()
                first = await iterator.__anext__()
            if "stream_options" in body:
                self._took_stream_options(worker.id)
            return OpenStream(stream=stream, iterator=iterator, first=first, call=call, body=body)
        except StopAsyncIteration:
            await close_stream(stream)
            self._answered(worker.id, call)
            content_type = None if stream is None else stream.response.headers.get("content-type")
            raise await self._empty_stream_error(worker, client, body, content_type) from None
        except Exception as error:
            await close_stream(stream)
            return self._failure(worker, error, call)
        except BaseException:
            self._answered(worker.id, call)
            raise

    async def _empty_stream_error(
        self,
        worker: WorkerConfig,
        client: AsyncOpenAI,
        body: dict[str, Any],
        content_type: str | None = None,
    ) -> WorkerCallError:
        """Why a stream ended before its first chunk. llama-cpp-python's server answers a
        request it refuses (a prompt longer than its context) with an empty 200 stream; a
        local worker is asked once more without streaming, which gives the real error (a
        400 context_length_exceeded), so the worker is not blamed for it.
        That aborted stream also resets its keep-alive connection, so a connection error
        on the first try is tried once more, on a new connection. An answer that was no
        event stream at all (a web page) is named with its content-type."""
        why = "the stream ended before any chunk"
        if content_type and "text/event-stream" not in content_type:
            hint = web_page_hint(content_type)
            why = f"{why}: its answer was {content_type}, not an event stream{hint}"
        empty = WorkerCallError("server", f"worker {worker.id}: {why}")
        if worker.local is None:
            return empty
        refused = await self._unstreamed_error(worker, client, body)
        if refused is not None and refused.kind == "connection":
            refused = await self._unstreamed_error(worker, client, body)
        return refused or empty

    async def _unstreamed_error(
        self, worker: WorkerConfig, client: AsyncOpenAI, body: dict[str, Any]
    ) -> WorkerCallError | None:
        """The error of the same request sent without streaming; None if it succeeds."""
        try:
            async with asyncio.timeout(worker.timeout_s):
                await client.post(CHAT_PATH, cast_to=SDKResponse, body=body)
        except Exception as error:
            kind, message, _ = describe_failure(worker, error, self._keys.get(worker.id))
            return WorkerCallError(
                kind, message, status_code(error), error_code(error), param=error_param(error)
            )
        return None

    # -- helpers ----------------------------------------------------------------------

    def _client(self, worker_id: str) -> AsyncOpenAI:
        self.worker(worker_id)
        client = self._clients.get(worker_id)
        if client is None and self._closing:
            raise RuntimeError(
                "the pool is closed (its `async with` block ended): call it inside that block"
            )
        if client is None:
            raise RuntimeError("the pool is not started: use `async with WorkerPool(config)`")
        return client

    def request_body(
        self, worker: WorkerConfig, messages: list[dict[str, Any]], params: dict[str, Any]
    ) -> dict[str, Any]:
        """The JSON body sent: the worker's params, overridden by the call's (in the form
        llama.cpp's server takes for a local worker)."""
        merged = with_output_limit(worker, params)
        merged.pop("stream", None)
        if worker.local is not None:
            merged = llama_cpp_params(merged)
        return {
            "model": merged.pop("model", worker.model),
            "messages": self.request_messages(worker.id, messages),
            **merged,
        }

    def refused_locally(self, worker: WorkerConfig, body: dict[str, Any]) -> WorkerCallError | None:
        """A local worker's request that llama-cpp-python's server would refuse, as the 400
        it is: that server answers a request failing its own validation with a 500, which
        would count against the worker as if it had failed; and one with a logit_bias key
        beyond its model's vocabulary, which it would silently ignore."""
        if worker.local is None:
            return None
        problem = llama_cpp_request_problem(body) or self.unknown_token(worker, body)
        if problem is None:
            return None
        message = (
            f"worker {worker.id}: client: llama.cpp's server cannot take this request: {problem}"
        )
        return WorkerCallError("client", message, 400)

    def unknown_token(self, worker: WorkerConfig, body: dict[str, Any]) -> str | None:
        """A logit_bias key beyond the local worker's vocabulary: llama.cpp's server
        ignores the whole logit_bias then (every bias of the request), where OpenAI refuses
        the request."""
        size = self.vocab_sizes.get(worker.id)
        bias = body.get("logit_bias")
        if size is None or not isinstance(bias, dict):
            return None
        for key in bias:
            if str(key).isdecimal() and int(key) >= size:
                return (
                    f"logit_bias key {key!r} is not a token id of its model, whose vocabulary "
                    f"has {size} tokens (ids 0 to {size - 1}); use its token ids, or drop the "
                    "key (llama.cpp would ignore every bias of the request)"
                )
        return None

    def _without_stream_options(
        self, worker_id: str, body: dict[str, Any], refusal: str
    ) -> dict[str, Any]:
        """The body without stream_options, which the worker refused: usage asked for by
        the caller (serve always asks) is not worth failing the call, and the caller
        estimates it as for a worker that reports none. Its streams leave them out for
        STREAM_OPTIONS_RECHECK_S, then ask with them again."""
        again = worker_id in self.stream_options_refused_at  # a re-check it refused again
        self.stream_options_refused_at[worker_id] = time.monotonic()
        logger.log(
            logging.DEBUG if again else logging.WARNING,
            "worker %s refused stream_options (%s); its streams are asked without them for "
            "the next %g s, and their token counts are estimated",
            worker_id, refusal, STREAM_OPTIONS_RECHECK_S,
        )  # fmt: skip
        return {key: value for key, value in body.items() if key != "stream_options"}

    def stream_options_refused(self, worker_id: str) -> bool:
        """Whether the worker refused stream_options less than STREAM_OPTIONS_RECHECK_S ago."""
        refused_at = self.stream_options_refused_at.get(worker_id)
        return refused_at is not None and time.monotonic() - refused_at < STREAM_OPTIONS_RECHECK_S

    def _took_stream_options(self, worker_id: str) -> None:
        """A stream asked with stream_options opened: a refusal noted before is over."""
        if self.stream_options_refused_at.pop(worker_id, None) is not None:
            logger.info("worker %s now takes stream_options; its streams report usage", worker_id)


def judge_from_pool(pool: WorkerPool, worker_id: str, **params: Any) -> Judge:
    """A grader's LLM judge backed by one worker of the pool (defaults to temperature 0)."""
    pool.worker(worker_id)
    params.setdefault("temperature", 0.0)

    async def judge(messages: list[dict[str, str]]) -> str:
        result = await pool.chat(worker_id, list(messages), **params)
        if result.error is not None or result.output is None:
            raise WorkerCallError(result.error_kind or "server", result.error or "no output")
        return result.output

    return judge


def _client_without_proxy(base_url: str) -> DefaultAsyncHttpxClient | None:
    """For a worker on this machine (a local worker's server), an HTTP client that does not
    send its calls to the environment's proxy (HTTP_PROXY ...), which cannot reach this
    machine's loopback; None (the openai client's own, which does) for any other."""
    host = urlsplit(base_url).hostname
    return DefaultAsyncHttpxClient(trust_env=False) if host and on_this_machine(host) else None
