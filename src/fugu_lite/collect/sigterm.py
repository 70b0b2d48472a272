"""Running a collection so that SIGTERM stops it as Ctrl-C does, whatever Ctrl-C's handler.

asyncio.run cancels its run on a Ctrl-C (the run's tasks wind down: local servers stopped,
every line written whole) only while SIGINT has Python's own handler. The CLI takes SIGTERM
as a Ctrl-C (cli.common.as_ctrl_c), which raises KeyboardInterrupt itself where Ctrl-C is
ignored, as it is for `fugu-lite collect ... &` started by a script: the KeyboardInterrupt
then broke out of whichever of the run's tasks was running, and Python printed its
traceback instead of the `interrupted:` line.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Callable, Coroutine
from types import FrameType
from typing import Any, TypeVar

T = TypeVar("T")
SignalHandler = Callable[[int, FrameType | None], Any]


class SigtermStop:
    """The run's main task, cancelled by the first SIGTERM; `handler` (the SIGTERM handler
    found) gets that SIGTERM once the run has wound down, and any later one at once, as a
    second Ctrl-C forces a stop under asyncio.run."""

    def __init__(self, handler: SignalHandler) -> None:
        self.handler = handler
        self.task: asyncio.Task[Any] | None = None
        self.frame: FrameType | None = None
        self.requested = False

    async def watched(self, main: Coroutine[Any, Any, T]) -> T:
        self.task = asyncio.current_task()
        return await main

    def on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        if self.requested or self.task is None or self.task.done():
            self.handler(signum, frame)
            return
        self.requested, self.frame = True, frame
        self.task.cancel()
        # the loop may be blocked in select() with a long timeout: wake it to cancel now
        self.task.get_loop().call_soon_threadsafe(lambda: None)

    def hand_over(self) -> None:
        self.handler(signal.SIGTERM, self.frame)


def run_until_stopped(main: Coroutine[Any, Any, T]) -> T:
    """asyncio.run(main), where a SIGTERM handled in Python first cancels the run, as
    asyncio.run does on a Ctrl-C, and then goes to its handler (the CLI's raises
    KeyboardInterrupt, outside the event loop now). A SIGTERM with its default action (or
    ignored) is left to it, as outside the main thread, where Python sets no handler."""
    found = signal.getsignal(signal.SIGTERM)
    if threading.current_thread() is not threading.main_thread() or not callable(found):
        return asyncio.run(main)
    stop = SigtermStop(found)
    signal.signal(signal.SIGTERM, stop.on_sigterm)
    try:
        return asyncio.run(stop.watched(main))
    except asyncio.CancelledError:
        if not stop.requested:
            raise
        stop.hand_over()
        raise
    finally:
        signal.signal(signal.SIGTERM, found)
