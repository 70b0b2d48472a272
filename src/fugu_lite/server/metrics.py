"""Prometheus metrics of one server (its own registry, so several apps can live in a process)."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)

from ..workers.results import read_usage

# The `*_created` series double the output and say nothing a scraper needs.
disable_created_metrics()

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64)


class Metrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self, worker_ids: Iterable[str]) -> None:
        # Registered in this order, which is the order of the scraped text.
        self.registry = CollectorRegistry()
        self.requests, self.errors = _request_counters(self.registry)
        self.worker_choices, self.worker_calls, self.fallbacks = _choice_counters(self.registry)
        self.routing_latency, self.routing_batch_size = _routing_histograms(self.registry)
        self.upstream_latency, self.tokens, self.cost = _upstream_metrics(self.registry)
        self.circuit_open, self.in_flight = _state_gauges(self.registry)
        self._zero_series(worker_ids)

    def _zero_series(self, worker_ids: Iterable[str]) -> None:
        """Each worker's series that a scraper sees from the start (closed circuit, no
        choices yet)."""
        for worker in worker_ids:
            self.circuit_open.labels(worker).set(0)
            self.worker_choices.labels(worker)

    def record_usage(self, worker: str, usage: dict | None, cost: float | None) -> None:
        counts = read_usage(usage)  # a worker's negative count would be refused by the Counter
        if counts is not None:
            self.tokens.labels(worker, "prompt").inc(counts.prompt_tokens)
            self.tokens.labels(worker, "completion").inc(counts.completion_tokens)
        if cost:
            self.cost.labels(worker).inc(cost)

    def render(self) -> bytes:
        return generate_latest(self.registry)


def _request_counters(r: CollectorRegistry) -> tuple[Counter, Counter]:
    """The requests answered, and those that ended in an error."""
    requests = Counter(
        "fugu_requests", "Requests answered, by HTTP status and streaming (unknown: refused "
        "before the request was parsed).",
        ["status", "stream"], registry=r,
    )  # fmt: skip
    errors = Counter(
        "fugu_errors",
        "Requests that ended in an error, by error code or outcome.",
        ["code"],
        registry=r,
    )
    return requests, errors


def _choice_counters(r: CollectorRegistry) -> tuple[Counter, Counter, Counter]:
    """The router's first choices, the upstream calls' outcomes and the fallbacks."""
    worker_choices = Counter(
        "fugu_worker_choices", "The router's first choice per request.", ["worker"], registry=r
    )
    worker_calls = Counter(
        "fugu_worker_calls", "Upstream calls by worker and outcome (ok or the error kind).",
        ["worker", "outcome"], registry=r,
    )  # fmt: skip
    fallbacks = Counter(
        "fugu_fallbacks", "Requests answered by another worker than the router's first choice.",
        registry=r,
    )  # fmt: skip
    return worker_choices, worker_calls, fallbacks


def _routing_histograms(r: CollectorRegistry) -> tuple[Histogram, Histogram]:
    """The routing's latency and its forward passes' batch sizes."""
    routing_latency = Histogram(
        "fugu_routing_latency_seconds", "Time from a request's routing submit to its decision "
        "(queueing in the micro-batcher included).", buckets=LATENCY_BUCKETS, registry=r,
    )  # fmt: skip
    routing_batch_size = Histogram(
        "fugu_routing_batch_size", "Prompts per routing forward pass.", buckets=BATCH_BUCKETS,
        registry=r,
    )  # fmt: skip
    return routing_latency, routing_batch_size


def _upstream_metrics(r: CollectorRegistry) -> tuple[Histogram, Counter, Counter]:
    """The upstream calls' latency, tokens and cost, by worker."""
    upstream_latency = Histogram(
        "fugu_upstream_latency_seconds", "Upstream call time (to the first token when "
        "streaming), by worker.", ["worker"], buckets=LATENCY_BUCKETS, registry=r,
    )  # fmt: skip
    tokens = Counter(
        "fugu_tokens", "Tokens by worker and kind (prompt or completion).",
        ["worker", "kind"], registry=r,
    )  # fmt: skip
    cost = Counter(
        "fugu_cost", "Cost from the workers' prices (in the units of those prices).",
        ["worker"], registry=r,
    )  # fmt: skip
    return upstream_latency, tokens, cost


def _state_gauges(r: CollectorRegistry) -> tuple[Gauge, Gauge]:
    """The open circuit breakers and the requests in flight."""
    circuit_open = Gauge(
        "fugu_circuit_open", "1 while a worker's circuit breaker is open or half-open.",
        ["worker"], registry=r,
    )  # fmt: skip
    in_flight = Gauge(
        "fugu_requests_in_flight", "Chat completion requests being served.", registry=r
    )
    return circuit_open, in_flight
