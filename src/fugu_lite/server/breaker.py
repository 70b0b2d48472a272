"""A circuit breaker per worker: skip a worker that keeps failing, try it again later.

closed --(N consecutive failures)--> open --(cool-down elapsed)--> half-open
half-open: one probe request is let through; success closes, failure re-opens.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

State = Literal["closed", "open", "half_open"]
# What acquire() grants: a call, or the one probe of a half-open circuit.
Permit = Literal["call", "probe"]


@dataclass
class WorkerCircuit:
    state: State = "closed"
    consecutive_failures: int = 0
    opened_at: float = 0.0
    probe_in_flight: bool = False
    times_opened: int = 0
    limited_until: float = 0.0  # clock() at which the provider's rate limit (429) ends


@dataclass(frozen=True)
class CircuitReading:
    """A worker's circuit as read once (the clock read once for its cool-down): /health's
    shown state and whether it takes a request come of one reading, so they agree."""

    state: State
    probe_in_flight: bool
    consecutive_failures: int
    times_opened: int

    @property
    def takes_request(self) -> bool:
        """Would acquire() let a request through (without taking the probe)?"""
        return self.state == "closed" or (self.state == "half_open" and not self.probe_in_flight)

    def shown(self) -> dict[str, object]:
        """The circuit as /health shows it."""
        return {
            "circuit": self.state,
            "probe_in_flight": self.probe_in_flight,
            "consecutive_failures": self.consecutive_failures,
            "times_opened": self.times_opened,
        }


class CircuitBreaker:
    def __init__(
        self,
        worker_ids: Iterable[str],
        failure_threshold: int = 3,
        cooldown_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if failure_threshold < 1:
            raise ValueError("the circuit breaker's failure threshold must be at least 1")
        if cooldown_s < 0:
            raise ValueError("the circuit breaker's cool-down must be >= 0 seconds")
        self.failure_threshold = failure_threshold
        self.cooldown_s = cooldown_s
        self.clock = clock
        self.circuits = {worker: WorkerCircuit() for worker in worker_ids}

    def state(self, worker: str) -> State:
        circuit = self.circuits[worker]
        if circuit.state == "open" and self.clock() - circuit.opened_at >= self.cooldown_s:
            circuit.state = "half_open"
            circuit.probe_in_flight = False
        return circuit.state

    def acquire(self, worker: str) -> Permit | None:
        """May a request go to this worker now (None: no)? In half-open state only one
        may, the probe; its caller says so when it ends without a verdict (release)."""
        if not self.takes_request(worker):
            return None
        if self.state(worker) == "closed":
            return "call"
        self.circuits[worker].probe_in_flight = True
        return "probe"

    def takes_request(self, worker: str) -> bool:
        """Would acquire() let a request through now (without taking the probe)?"""
        return self.reading(worker).takes_request

    def reading(self, worker: str) -> CircuitReading:
        state = self.state(worker)
        circuit = self.circuits[worker]
        return CircuitReading(
            state, circuit.probe_in_flight, circuit.consecutive_failures, circuit.times_opened
        )

    def record_success(self, worker: str, permit: Permit = "probe") -> None:
        """A call that answered. One let through while the circuit was closed ("call") that
        ends after it opened started before the outage was seen: it leaves the circuit as it
        is, open or half-open with its probe out; only the probe's success closes it."""
        circuit = self.circuits[worker]
        if permit == "call" and self.state(worker) != "closed":
            return
        circuit.state = "closed"
        circuit.consecutive_failures = 0
        circuit.probe_in_flight = False

    def record_failure(self, worker: str, permit: Permit = "probe") -> None:
        """A failed call. One that started before the circuit opened (concurrent calls
        failing one after another) leaves an open circuit as it is: it neither counts as
        opening it again nor starts its cool-down over; nor, ending once the circuit is
        half-open ("call"), does it re-open it while the probe is out: the probe decides."""
        circuit = self.circuits[worker]
        circuit.consecutive_failures += 1
        state = self.state(worker)
        if state == "open" or (state == "half_open" and permit == "call"):
            return
        if state == "half_open" or circuit.consecutive_failures >= self.failure_threshold:
            circuit.state = "open"
            circuit.opened_at = self.clock()
            circuit.times_opened += 1
        circuit.probe_in_flight = False

    def rate_limited(self, worker: str, until: float | None, permit: Permit) -> None:
        """A 429 from the worker's provider: no verdict on the worker (the probe, if it was
        the call's, is freed); it is skipped until `until` (a clock() time: its
        Retry-After), when that is known."""
        circuit = self.circuits[worker]
        self.release(worker, permit)
        if until is not None:
            circuit.limited_until = max(circuit.limited_until, until)

    def limited_for(self, worker: str) -> float:
        """Seconds left of the worker's rate limit; 0 when it has none."""
        return max(0.0, self.circuits[worker].limited_until - self.clock())

    def release(self, worker: str, permit: Permit) -> None:
        """The call ended without a verdict (e.g. the client went away): free the probe if
        it was the call's. A call let through while the circuit was closed leaves it: it
        freed a half-open circuit's probe while that was out, and a second probe went."""
        if permit == "probe":
            self.circuits[worker].probe_in_flight = False

    def retry_after_s(self, workers: Iterable[str]) -> float:
        """Seconds until the first of these open circuits turns half-open."""
        waits = [
            max(0.0, self.cooldown_s - (self.clock() - self.circuits[worker].opened_at))
            for worker in workers
            if self.circuits[worker].state == "open"
        ]
        return min(waits, default=0.0)

    def snapshot(self) -> dict[str, dict[str, object]]:
        return {worker: self.reading(worker).shown() for worker in self.circuits}
