"""Micro-batching: requests arriving within a short window share one forward pass, which
runs in a worker thread so the event loop never waits for the backbone (torch releases
the GIL during its kernels)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")
V = TypeVar("V")

logger = logging.getLogger(__name__)


class BatcherClosedError(RuntimeError):
    """submit() after stop()."""


class MicroBatcher(Generic[T, R]):
    """`await batcher.submit(item)` -> `fn([items...])[i]`.

    A batch starts with the first waiting item and takes whatever else is waiting, up to
    `max_batch`; when `should_wait()` says more requests are on their way it first waits
    up to `window_s` for them (a lone request is never held back). Items arriving while
    a batch runs form the next batch, so batches grow with load.
    """

    def __init__(
        self,
        fn: Callable[[list[T]], list[R]],
        window_s: float = 0.002,
        max_batch: int = 32,
        should_wait: Callable[[int], bool] | None = None,
        on_batch: Callable[[int, float], None] | None = None,
    ) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        if window_s < 0:
            raise ValueError("the batching window must be >= 0 seconds")
        self.fn = fn
        self.window_s = window_s
        self.max_batch = max_batch
        self.should_wait = should_wait or (lambda waiting: True)
        self.on_batch = on_batch
        self._pending: deque[tuple[T, asyncio.Future[R]]] = deque()
        self._running: list[tuple[T, asyncio.Future[R]]] = []
        self._arrived = asyncio.Event()
        self._full = asyncio.Event()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fugu-router")
        self._task: asyncio.Task[None] | None = None
        self._batch: asyncio.Task[None] | None = None  # the batch being processed (stop)
        self._closed = False

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="micro-batcher")

    async def stop(self) -> None:
        """Answer the batch being processed, fail the requests still waiting, and end the
        thread once its job is over, without holding up the event loop meanwhile."""
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._batch is not None:  # its forward pass runs on: its answers are given
            await self._batch
        for _, future in [*self._running, *self._pending]:
            if not future.done():
                future.set_exception(BatcherClosedError("the server is shutting down"))
        self._running, self._pending = [], deque()
        # a one-off job (run_in_thread: the warm-up) may still run on the thread
        await asyncio.to_thread(self._executor.shutdown, wait=True)

    async def run_in_thread(self, fn: Callable[[], V]) -> V:
        """Run a one-off job (e.g. the warm-up) on the batcher's thread."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)

    async def submit(self, item: T) -> R:
        if self._closed:
            raise BatcherClosedError("the server is shutting down")
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._pending.append((item, future))
        self._arrived.set()
        if len(self._pending) >= self.max_batch:
            self._full.set()
        return await future

    async def _run(self) -> None:
        while True:
            while not self._pending:
                self._arrived.clear()
                await self._arrived.wait()
            await self._gather_window()
            batch = self._take_batch()
            if batch:
                self._running = batch
                # shielded: stop() cancels this loop, not the batch whose pass is running
                self._batch = asyncio.ensure_future(self._process(batch))
                await asyncio.shield(self._batch)
                self._running, self._batch = [], None

    async def _gather_window(self) -> None:
        waiting = len(self._pending)
        if self.window_s <= 0 or waiting >= self.max_batch or not self.should_wait(waiting):
            return
        self._full.clear()
        try:
            async with asyncio.timeout(self.window_s):
                await self._full.wait()
        except TimeoutError:
            pass

    def _take_batch(self) -> list[tuple[T, asyncio.Future[R]]]:
        batch: list[tuple[T, asyncio.Future[R]]] = []
        while self._pending and len(batch) < self.max_batch:
            item, future = self._pending.popleft()
            if not future.cancelled():  # its client went away while it waited
                batch.append((item, future))
        return batch

    async def _process(self, batch: list[tuple[T, asyncio.Future[R]]]) -> None:
        items = [item for item, _ in batch]
        started = time.perf_counter()
        try:
            results = await asyncio.get_running_loop().run_in_executor(
                self._executor, self.fn, items
            )
            # a wrong count: which answer is whose is told by passing each item alone
            answers = one_result_per_item(results, len(batch))
        except Exception as error:
            if len(batch) > 1:  # find the bad item: it alone fails, not its batch mates
                for single in batch:
                    if not single[1].cancelled():  # its client left: no pass for nobody
                        await self._process([single])
                return
            _, future = batch[0]
            if not future.done():
                future.set_exception(error)
            return
        self._tell_batch(len(batch), time.perf_counter() - started)
        for (_, future), result in zip(batch, answers, strict=True):
            if not future.done():
                future.set_result(result)

    def _tell_batch(self, size: int, seconds: float) -> None:
        """Call on_batch; its failure is logged, or the batcher's loop would end, and this
        batch and every later request would wait until shutdown."""
        if self.on_batch is None:
            return
        try:
            self.on_batch(size, seconds)
        except Exception:
            logger.exception("on_batch failed for a batch of %d (its requests are answered)", size)


def one_result_per_item(results: Sequence[V], items: int) -> Sequence[V]:
    """The batched function's results, refused unless they are a list of one per item."""
    rule = "it must return one result per item, in the items' order"
    if not isinstance(results, Sequence):
        raise TypeError(
            f"the batched function returned a {type(results).__name__}, not a list: {rule}"
        )
    if len(results) != items:
        raise RuntimeError(
            f"the batched function returned {len(results)} results for {items} requests: {rule}"
        )
    return results
