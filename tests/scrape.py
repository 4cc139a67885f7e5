"""Reading a process's ``/metrics`` as Prometheus would: the text parsed by
``prometheus_client``'s own parser (docs/operations.md, "Metrics")."""

from __future__ import annotations

import re

import httpx
from prometheus_client.parser import text_string_to_metric_families

__all__ = ["Samples", "metrics_urls", "scrape", "value"]

#: (sample name, sorted label pairs) → value
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]

_LINE = re.compile(r"^metrics: (\S+) (http://\S+/metrics)$")


def metrics_urls(lines: list[str]) -> dict[str, list[str]]:
    """process → the URLs its ``metrics: <process> URL`` lines named, in order."""
    found: dict[str, list[str]] = {}
    for line in lines:
        match = _LINE.match(line.strip())
        if match:
            found.setdefault(match.group(1), []).append(match.group(2))
    return found


def scrape(url: str) -> Samples:
    """Every sample ``url`` serves now."""
    response = httpx.get(url, timeout=10)
    response.raise_for_status()
    assert response.headers["content-type"].startswith("text/plain"), response.headers
    samples: Samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sample ``name`` with exactly ``labels`` (0 when absent)."""
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)
