"""Prometheus metrics (docs/operations.md, "Metrics"): every long-running
process serves its own registry at ``/metrics`` on LEMONGRAPH_METRICS_PORT
(``serve_metrics``), and the metric families by their pinned names.

A process that is not here yet plugs in the same way: take
``registry("memory")`` (a process name of :data:`PROCESSES`), define its
families on it, and call ``serve_metrics("memory", settings.metrics_port,
settings.metrics_host, say)`` once at start (it prints ``metrics: memory URL``
and returns the server to ``stop()``)."""

from stream.runtime.metrics._families import (
    BATCH_RECORDS,
    CONSUMER_LAG,
    DEADLETTER_REASONS,
    DEADLETTERS,
    DECISION_SECONDS,
    DECISIONS,
    GATEWAY_REQUESTS,
    MAILS,
    MEMORY_RECORDS,
    MODEL_CALLS,
    MODEL_TOKENS,
    SCHEDULE_RUNS,
    TASKS_OPEN,
    TIMERS_PENDING,
    TOOL_CALLS,
    BatchHistogram,
    CountsCollector,
    LagCollector,
    count_journal,
)
from stream.runtime.metrics._serve import (
    PROCESSES,
    MetricsServer,
    metrics_line,
    registry,
    serve_metrics,
)

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
    "PROCESSES",
    "SCHEDULE_RUNS",
    "TASKS_OPEN",
    "TIMERS_PENDING",
    "TOOL_CALLS",
    "BatchHistogram",
    "CountsCollector",
    "LagCollector",
    "MetricsServer",
    "count_journal",
    "metrics_line",
    "registry",
    "serve_metrics",
]
