"""Run a fugu-lite app under real uvicorn in a background thread (tests, benches, demos).

with ServerThread(create_app(settings)) as running, local_openai_client(running.base_url) as client:
    ...
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any, Literal

import openai
import uvicorn
from fastapi import FastAPI


def local_openai_client(base_url: str, **options: Any) -> openai.OpenAI:
    """An openai client for a server on this machine: straight to it, not through the
    environment's proxy (HTTP_PROXY ...), which cannot reach its loopback. Close it (a
    with-block): the SDK's finaliser closes only HTTP clients it made, so its sockets leak."""
    options.setdefault("api_key", "not-needed-locally")
    http_client = openai.DefaultHttpxClient(trust_env=False)
    return openai.OpenAI(base_url=base_url, http_client=http_client, **options)


class ServerThread:
    def __init__(
        self,
        app: FastAPI,
        host: str = "127.0.0.1",
        port: int = 0,
        startup_timeout_s: float = 300.0,
        log_level: str = "warning",
        lifespan: Literal["auto", "on", "off"] = "auto",
        graceful_timeout_s: int = 5,
        name: str = "fugu-server",
    ) -> None:
        self.app = app
        self.host = host
        self.port = port
        self.startup_timeout_s = startup_timeout_s
        self.log_level = log_level
        self.lifespan = lifespan
        self.graceful_timeout_s = graceful_timeout_s
        self.name = name
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        """What an OpenAI client takes as base_url."""
        return f"{self.url}/v1"

    def start(self) -> ServerThread:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Accepted connections inherit it: no Nagle + delayed-ACK 40 ms stalls per request.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((self.host, self.port))
        self.port = int(sock.getsockname()[1])
        config = uvicorn.Config(
            self.app,
            log_level=self.log_level,
            access_log=False,
            lifespan=self.lifespan,
            timeout_graceful_shutdown=self.graceful_timeout_s,
        )
        self._server = uvicorn.Server(config)
        state = self.fugu_state()
        if state is not None:
            server = self._server
            state.interrupted = lambda: server.should_exit
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, daemon=True,
            name=f"{self.name}-{self.port}",
        )  # fmt: skip
        self._thread.start()
        deadline = time.monotonic() + self.startup_timeout_s
        while not self._server.started:
            if not self._thread.is_alive():
                sock.close()
                raise RuntimeError(f"fugu-lite did not start: {self.startup_error()}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"fugu-lite did not start within {self.startup_timeout_s} s")
            time.sleep(0.01)
        return self

    def fugu_state(self) -> Any:
        """The FuguServer behind a fugu-lite app (None for another ASGI app: a stub's)."""
        return getattr(getattr(self.app, "state", None), "fugu", None)

    def startup_error(self) -> str:
        state = self.fugu_state()
        error = getattr(state, "startup_error", None)
        return str(error) if error else "see the log above"

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=30)

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
