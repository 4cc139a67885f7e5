"""The metrics each process serves (docs/operations.md, "Metrics"), by the
names the dashboard and the scrape config use (pinned).

Labels are bounded: a playbook key, an agent's or a tool's name (the catalog's),
a topic, a partition number, an outcome or a reason code of a fixed set;
never a job key, a schedule id, a message or an error's text.

The worker's are counted per batch, not per record (``Worker.on_batch`` hands
each batch's tallies over once): its per-event cost does not grow with them.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from stream.runtime.metrics._serve import registry
from topics import JournalModelCall, JournalToolCall

__all__ = [
    "BATCH_RECORDS",
    "CONSUMER_LAG",
    "DEADLETTERS",
    "DEADLETTER_REASONS",
    "DECISIONS",
    "DECISION_SECONDS",
    "GATEWAY_REQUESTS",
    "MAILS",
    "MEMORY_RECORDS",
    "MODEL_CALLS",
    "MODEL_TOKENS",
    "SCHEDULE_RUNS",
    "TASKS_OPEN",
    "TIMERS_PENDING",
    "TOOL_CALLS",
    "BatchHistogram",
    "CountsCollector",
    "LagCollector",
    "count_journal",
]

#: The reason codes of ``lemongraph_deadletters_total`` (the dead letter's
#: header says the reason in words; docs/kafka.md, "What the inbox refuses").
DEADLETTER_REASONS = (
    "no_key",  # a record without a key
    "invalid_record",  # not a record of its topic's shape (not JSON, a field wrong, empty)
    "too_large",  # over the record size limit
    "undecidable",  # deciding it failed (the exception is in the letter)
    "unexpected_topic",
    "no_schedules",  # a schedule.wake on an engine that runs no schedules
    "invalid_tick",
    "tick_ahead",  # a tick ahead of the worker's clock by more than the skew
    "timer_failed",  # a timer this tick fired failed to decide
    "wake_expired",  # a wake held for a schedule never defined, expired
    "wake_refused",  # a wake that could not be held
    "invalid_playbook",  # a record of the playbooks topic a worker could not register
)

# -- the worker -----------------------------------------------------------------------

_WORKER = registry("worker")

DECISIONS = Counter(
    "lemongraph_decisions",
    "Decisions on jobs: playbook (empty when the input named no registered playbook), "
    "outcome applied, refused or duplicate (a retried idempotency key)",
    ["playbook", "outcome"],
    registry=_WORKER,
)
DEADLETTERS = Counter(
    "lemongraph_deadletters",
    "Records dead-lettered, by the topic they were read from and a reason code",
    ["topic", "reason"],
    registry=_WORKER,
)
TIMERS_PENDING = Gauge(
    "lemongraph_timers_pending",
    "Timers in the due-time index of this worker's partitions (jobs, schedules, held wakes)",
    registry=_WORKER,
)
BATCH_RECORDS = Histogram(
    "lemongraph_batch_records",
    "Records in each batch the worker decided (docs/operations.md, 'Batches at a steady rate')",
    buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000),
    registry=_WORKER,
)
SCHEDULE_RUNS = Counter(
    "lemongraph_schedule_runs",
    "Schedule run records written, by status (a run that starts and ends counts twice)",
    ["status"],
    registry=_WORKER,
)


class BatchHistogram(Collector):
    """A histogram that takes a batch of observations at once (one lock per
    batch, a C bisect per value): the worker's per-event cost stays flat."""

    def __init__(
        self,
        name: str,
        documentation: str,
        bounds_ms: Sequence[int],
        registry: CollectorRegistry,
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.bounds_ms = tuple(sorted(bounds_ms))
        self._counts = [0] * (len(self.bounds_ms) + 1)
        self._sum_ms = 0
        self._lock = threading.Lock()
        registry.register(self)

    def observe_since(self, now_ms: int, stamps_ms: Iterable[int]) -> None:
        """Observe ``now_ms - stamp`` for each stamp (milliseconds; a stamp < 0,
        a record without a timestamp, is left out)."""
        bounds = self.bounds_ms
        counts = [0] * (len(bounds) + 1)
        total = 0
        for stamp in stamps_ms:
            if stamp < 0:
                continue
            elapsed = max(0, now_ms - stamp)
            counts[bisect_left(bounds, elapsed)] += 1
            total += elapsed
        with self._lock:
            for i, n in enumerate(counts):
                self._counts[i] += n
            self._sum_ms += total

    def describe(self) -> Iterator[Metric]:
        yield HistogramMetricFamily(self.name, self.documentation)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            counts, total = list(self._counts), self._sum_ms
        buckets: list[tuple[str, float]] = []
        running = 0
        for bound, n in zip(self.bounds_ms, counts, strict=False):
            running += n
            buckets.append((repr(bound / 1000), running))
        buckets.append(("+Inf", running + counts[-1]))
        yield HistogramMetricFamily(
            self.name, self.documentation, buckets=buckets, sum_value=total / 1000
        )


DECISION_SECONDS = BatchHistogram(
    "lemongraph_decision_seconds",
    "Seconds from an inbox record's timestamp to its decision acknowledged by the broker",
    (5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10_000, 30_000, 60_000, 300_000),
    _WORKER,
)

#: What a consumer lag source returns: (topic, partition) → records not yet handled.
LagSource = Callable[[], Mapping[tuple[str, int], int]]


class LagCollector(Collector):
    """``lemongraph_consumer_lag``, asked of its sources at each scrape (a
    worker adds its consumer's while it runs)."""

    name = "lemongraph_consumer_lag"
    documentation = (
        "Records of a partition this process consumes that it has not handled yet: "
        "the partition's end as last fetched, less the next offset to handle"
    )

    def __init__(self, registry: CollectorRegistry) -> None:
        self.sources: list[LagSource] = []
        registry.register(self)

    def add(self, source: LagSource) -> None:
        self.sources.append(source)

    def remove(self, source: LagSource) -> None:
        if source in self.sources:
            self.sources.remove(source)

    def describe(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(self.name, self.documentation, labels=["topic", "partition"])

    def collect(self) -> Iterator[Metric]:
        merged: dict[tuple[str, int], int] = {}
        for source in list(self.sources):
            try:
                found = source()
            except Exception:  # noqa: S112 - a consumer stopping under a scrape: none then
                continue
            for where, lag in found.items():
                merged[where] = max(lag, merged.get(where, 0))
        family = GaugeMetricFamily(self.name, self.documentation, labels=["topic", "partition"])
        for (topic, partition), lag in sorted(merged.items()):
            family.add_metric([topic, str(partition)], lag)
        yield family


CONSUMER_LAG = LagCollector(_WORKER)

# -- the gateway ----------------------------------------------------------------------

_GATEWAY = registry("gateway")

GATEWAY_REQUESTS = Counter(
    "lemongraph_gateway_requests",
    "Requests the gateway's API answered (on either port), by route template "
    "('unmatched' for a path no route has) and status code",
    ["route", "status"],
    registry=_GATEWAY,
)
TASKS_OPEN = Gauge(
    "lemongraph_tasks_open",
    "Open tasks (milestones open) of the jobs the gateway's read model holds",
    registry=_GATEWAY,
)

# -- the agents service ---------------------------------------------------------------

_AGENTS = registry("agents")

MODEL_CALLS = Counter(
    "lemongraph_model_calls",
    "Model calls, by agent and outcome (ok, status, transport, garbage, too_large)",
    ["agent", "outcome"],
    registry=_AGENTS,
)
MODEL_TOKENS = Counter(
    "lemongraph_model_tokens",
    "Tokens of model calls as the model reported them, by agent and kind "
    "(input, output, cached: the part of input served from the model's cache)",
    ["agent", "kind"],
    registry=_AGENTS,
)
TOOL_CALLS = Counter(
    "lemongraph_tool_calls",
    "Tool calls and delegations, by tool and outcome "
    "(done, failed, refused, outcome_unknown, delegated)",
    ["tool", "outcome"],
    registry=_AGENTS,
)


def count_journal(record: object) -> None:
    """Count a journal record the agents service publishes: its model calls
    and tool calls (docs/operations.md, "Metrics")."""
    if isinstance(record, JournalModelCall):
        MODEL_CALLS.labels(record.agent, record.outcome).inc()
        tokens = record.tokens
        if tokens is not None:
            MODEL_TOKENS.labels(record.agent, "input").inc(tokens.input)
            MODEL_TOKENS.labels(record.agent, "output").inc(tokens.output)
            MODEL_TOKENS.labels(record.agent, "cached").inc(tokens.cached)
    elif isinstance(record, JournalToolCall):
        TOOL_CALLS.labels(record.tool, record.outcome).inc()


# -- the mail ingress -----------------------------------------------------------------


class CountsCollector(Collector):
    """A counter family read at each scrape from a process's own counts (a
    mapping of a fixed set of names to totals), under one label."""

    def __init__(
        self, name: str, documentation: str, label: str, registry: CollectorRegistry
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.label = label
        self.sources: list[Callable[[], Mapping[str, int]]] = []
        registry.register(self)

    def describe(self) -> Iterator[Metric]:
        yield CounterMetricFamily(self.name, self.documentation, labels=[self.label])

    def collect(self) -> Iterator[Metric]:
        merged: dict[str, int] = {}
        for source in list(self.sources):
            for name, n in dict(source()).items():
                merged[name] = merged.get(name, 0) + n
        family = CounterMetricFamily(self.name, self.documentation, labels=[self.label])
        for name, n in sorted(merged.items()):
            family.add_metric([name], n)
        yield family


MEMORY_RECORDS = CountsCollector(
    "lemongraph_memory_records",
    "Records of memory-facts the memory processor folded, by kind: fact, note, erasure, "
    'invalid (docs/memory.md, "How it is built")',
    "kind",
    registry("memory"),
)

MAILS = CountsCollector(
    "lemongraph_mails",
    "Mail of the email channel by outcome: sent, duplicate, failed, received, refused, "
    'unverified, withheld, ... (docs/agents.md, "Email")',
    "outcome",
    registry("mail-ingress"),
)
