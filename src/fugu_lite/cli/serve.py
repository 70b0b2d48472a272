"""`fugu-lite serve`: the router as an OpenAI-compatible endpoint."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer

from ..config_errors import ConfigError
from ..io import check_message
from .common import (
    BackboneOption,
    CheckpointOption,
    PoolOption,
    check_output,
    fail,
    non_empty_path,
    non_empty_text,
    same_path,
    stopped_cleanly,
)

LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")
LOG_LEVEL_HELP = (
    "What serve logs, each level adding to the one before: critical (almost nothing); error "
    "(a pool or local worker that will not start, unexpected request errors); warning "
    "(failed worker calls, crashed local workers); info, the default (start-up, notes such "
    "as a conversation too long for a worker, and one access line per request, on stdout); "
    "debug (a little more); trace (every HTTP connection and ASGI message)."
)
STOPPED_STARTING = (
    "serve stopped while starting, before it served any request (any local workers' servers "
    "are stopped); run the same command again"
)


def check_port_free(host: str, port: int) -> None:
    """Fail now, before the router and the pool load, when the address cannot be bound."""
    import socket

    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
    except OSError as error:
        fail(
            f"cannot listen on {host}:{port} ({error.strerror or error}); the port is in use "
            "or the host is not an address of this machine: choose another --port or --host"
        )


def settings_problem(item: Any) -> str:
    """One problem of a pydantic ValidationError: a validator's own message as it is."""
    if item["type"] == "value_error":
        return check_message(item)
    return f"{'.'.join(str(part) for part in item['loc'])}: {item['msg']}"


def serve_command(
    checkpoint: CheckpointOption,
    backbone: BackboneOption = None,
    pool: PoolOption = None,
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.", min=1, max=65535)] = 8000,
    model_name: Annotated[
        str, typer.Option(help="The model name clients send and get back.")
    ] = "fugu-lite",
    api_keys_env: Annotated[
        str | None,
        typer.Option(
            # given empty (an unset shell variable), it asked no key: anyone could call
            parser=non_empty_text("give the NAME of the variable holding the keys"),
            metavar="<name>",
            help="Env var holding the endpoint's API key(s), comma-separated, the keys alone "
            "(not 'Bearer KEY'). This and the keys file both omitted: no key is asked (anyone "
            "who can reach the port may call).",
        ),
    ] = None,
    api_keys_file: Annotated[
        Path | None,
        typer.Option(
            parser=non_empty_path("give the API keys file, or leave --api-keys-file out"),
            metavar="<path>",
            help="File with the endpoint's API keys, one a line, the keys alone (not 'Bearer "
            "KEY' or 'x-api-key: KEY'). This and the keys variable both omitted: no key is asked.",
        ),
    ] = None,
    log_requests: Annotated[
        Path | None,
        typer.Option(
            parser=non_empty_path("give the decision log file, or leave --log-requests out"),
            metavar="<path>",
            help="Append routing decisions and outcomes to this JSONL; omitted: none are logged.",
        ),
    ] = None,
    log_content: Annotated[
        bool, typer.Option(help="Also log the messages (off: only their hash).")
    ] = False,
    max_body_bytes: Annotated[
        int,
        typer.Option(
            help="Largest request body accepted, as sent and once decompressed.", min=1024
        ),
    ] = 1_000_000,
    max_tokens_limit: Annotated[
        int, typer.Option(help="Largest max_tokens a request may ask for.", min=1)
    ] = 32_768,
    batch_window_ms: Annotated[
        float, typer.Option(help="Micro-batching window for routing concurrent requests.", min=0)
    ] = 2.0,
    max_batch_size: Annotated[int, typer.Option(help="Most prompts per routing pass.", min=1)] = 32,
    breaker_failures: Annotated[
        int, typer.Option(help="Consecutive failures that open a worker's circuit breaker.", min=1)
    ] = 3,
    breaker_cooldown_s: Annotated[
        float, typer.Option(help="Seconds a worker is skipped once its circuit opens.", min=0)
    ] = 30.0,
    graceful_timeout_s: Annotated[
        int,
        typer.Option(
            help="Seconds the requests in flight get to end when serve is stopped (Ctrl-C, "
            "SIGTERM), before they are answered a 503 shutting_down; keep the whole stop inside "
            "a container runtime's grace before its SIGKILL (see the README's Stopping).",
            min=0,
        ),
    ] = 10,
    torch_threads: Annotated[
        int,
        typer.Option(help="Threads for the routing forward pass (0 = torch's default).", min=0),
    ] = 1,
    cors_origin: Annotated[
        list[str] | None,
        typer.Option(
            metavar="<origin>",
            help="A browser origin allowed to call the endpoint (CORS), e.g. "
            "http://localhost:3000, or * for any; repeat for more. None by default.",
        ),
    ] = None,
    log_level: Annotated[str, typer.Option(help=LOG_LEVEL_HELP)] = "info",
) -> None:
    """Serve the router as an OpenAI-compatible endpoint: POST /v1/chat/completions."""
    from ..server.app import ServeSettings, serve
    from ..server.auth import load_api_keys

    log_level = checked_log_level(log_level)
    if not model_name.strip():
        fail("--model-name is empty; give the name clients send, e.g. fugu-lite")
    if not host.strip():
        fail(
            "--host is empty; give the interface to listen on, e.g. 127.0.0.1 (this machine "
            "only) or 0.0.0.0 (every interface)"
        )
    if log_requests is not None:
        check_decision_log(log_requests, pool, api_keys_file)
    check_port_free(host, port)
    # SIGTERM (systemd, docker stop) as a Ctrl-C: uvicorn raises the signal it stopped on
    # again once stopped, and SIGTERM's default action then killed serve (exit -15). A stop
    # once serving ends serve (exit 0); one while it starts is this interruption.
    with stopped_cleanly(STOPPED_STARTING), failing_with_own_messages():
        settings = ServeSettings(
            checkpoint=checkpoint, backbone=backbone, pool=pool, host=host, port=port,
            model_name=model_name,
            api_keys=load_api_keys(api_keys_env, api_keys_file), log_requests=log_requests,
            log_content=log_content, max_body_bytes=max_body_bytes,
            max_tokens_limit=max_tokens_limit, batch_window_ms=batch_window_ms,
            max_batch_size=max_batch_size, breaker_failures=breaker_failures,
            breaker_cooldown_s=breaker_cooldown_s, graceful_timeout_s=graceful_timeout_s,
            torch_threads=torch_threads or None,
            cors_origins=cors_origin or [],
        )  # fmt: skip
        serve(settings, log_level=log_level)


def checked_log_level(log_level: str) -> str:
    """--log-level as uvicorn names it (`INFO`, as Python's logging names it, is `info`)."""
    log_level = log_level.lower()
    if log_level not in LOG_LEVELS:
        fail(f"--log-level {log_level!r} is not a log level; use one of {', '.join(LOG_LEVELS)}")
    return log_level


def check_decision_log(log_requests: Path, pool: Path | None, api_keys_file: Path | None) -> None:
    """--log-requests must be a file that can be appended to, and none serve reads."""
    check_output(log_requests, "--log-requests", "file", "requests.jsonl")
    for flag, read in (("--pool", pool), ("--api-keys-file", api_keys_file)):
        if read is not None and same_path(log_requests, read):
            fail(
                f"--log-requests {log_requests} is the {flag} file itself, which the "
                "decision log would be appended to; give the log a file of its own, e.g. "
                "--log-requests requests.jsonl"
            )
    if not is_decision_log(log_requests):
        fail(
            f"--log-requests {log_requests} holds lines other than serve's decision log (its "
            "first line is no routing decision), which the decisions would be appended to; "
            "give the log a file of its own, e.g. --log-requests requests.jsonl"
        )


def is_decision_log(path: Path) -> bool:
    """Whether `path` is missing, empty or starts with a decision-log line: appended to, the
    records `collect` had gathered (`--log-requests runs/rewards.jsonl`) no longer read."""
    try:
        with path.open("rb") as stream:
            first = stream.readline().decode("utf-8", errors="replace").removeprefix("\ufeff")
    except OSError:  # missing (made on the first decision), or unreadable: the log says so
        return True
    if not first.strip():
        return True
    try:
        row = json.loads(first)
    except ValueError:
        return False
    return isinstance(row, dict) and "request_id" in row


@contextmanager
def failing_with_own_messages() -> Iterator[None]:
    """Settings, a key file, the checkpoint, a pool that failed to start, a busy port: one
    `error:` line with their own message (the settings' without pydantic's frame)."""
    from pydantic import ValidationError

    from ..checkpoint import CheckpointError
    from ..server.auth import ApiKeyError

    try:
        yield
    except ValidationError as error:
        fail("; ".join(settings_problem(item) for item in error.errors()))
    except (ApiKeyError, ConfigError, CheckpointError, ValueError, RuntimeError, OSError) as error:
        fail(str(error))
