"""The metrics' own parts (docs/operations.md, "Metrics"): the setting, a
registry served over HTTP, the batch histogram, and the deployment files
(docker-compose.yml's `metrics` profile, deploy/prometheus.yml, the Grafana
dashboard) checked by shape, since no Docker engine runs here."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from stream.runtime.config import Settings
from stream.runtime.errors import ConfigError
from stream.runtime.metrics import (
    DEADLETTER_REASONS,
    PROCESSES,
    BatchHistogram,
    MetricsServer,
    metrics_line,
    registry,
    serve_metrics,
)
from tests.lanes import ROOT
from tests.scrape import metrics_urls, scrape, value

#: The names issue 34 pins, each with the process that serves it.
PINNED = {
    "lemongraph_decisions_total": "worker",
    "lemongraph_deadletters_total": "worker",
    "lemongraph_consumer_lag": "worker",
    "lemongraph_timers_pending": "worker",
    "lemongraph_decision_seconds": "worker",
    "lemongraph_schedule_runs_total": "worker",
    "lemongraph_tasks_open": "gateway",
    "lemongraph_gateway_requests_total": "gateway",
    "lemongraph_model_tokens_total": "agents",
    "lemongraph_model_calls_total": "agents",
    "lemongraph_tool_calls_total": "agents",
}


def _served(process: str) -> set[str]:
    """The sample names and family names ``process``'s registry serves."""
    text = generate_latest(registry(process)).decode()
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        names.add(family.name)
        names.update(s.name for s in family.samples)
    # A family without samples yet is only in its HELP and TYPE lines.
    names.update(re.findall(r"^# TYPE (\S+) ", text, re.MULTILINE))
    return names


def test_every_pinned_metric_is_served_by_its_process() -> None:
    import stream.runtime.metrics  # noqa: F401 - the families register on import

    for name, process in PINNED.items():
        family = name.removesuffix("_total")
        assert family in _served(process) or name in _served(process), (name, process)


def test_the_port_setting_is_off_unless_set_and_0_is_a_free_port() -> None:
    assert Settings.from_env({}, dotenv=Path("/nonexistent")).metrics_port is None
    assert Settings.from_env({"LEMONGRAPH_METRICS_PORT": " "}).metrics_port is None
    chosen = Settings.from_env({"LEMONGRAPH_METRICS_PORT": "0", "LEMONGRAPH_METRICS_HOST": "::1"})
    assert (chosen.metrics_port, chosen.metrics_host) == (0, "::1")
    with pytest.raises(ConfigError, match="LEMONGRAPH_METRICS_PORT"):
        Settings.from_env({"LEMONGRAPH_METRICS_PORT": "metrics"})
    said: list[str] = []
    assert serve_metrics("memory", None, "127.0.0.1", said.append) is None
    assert said == []


def test_a_process_serves_its_registry_and_says_where() -> None:
    said: list[str] = []
    server = serve_metrics("memory", 0, "127.0.0.1", said.append)
    assert server is not None
    try:
        assert said == [metrics_line("memory", server.url)]
        assert metrics_urls(said) == {"memory": [server.url]}
        samples = scrape(server.url)
        # Each registry carries its process's own series.
        assert value(samples, "process_open_fds") > 0
        assert not [name for name, _ in samples if name.startswith("lemongraph_decisions")]
        # A second server on the same port is refused, naming the setting.
        with pytest.raises(ConfigError, match="LEMONGRAPH_METRICS_PORT"):
            MetricsServer("memory", "127.0.0.1", server.port).start()
    finally:
        server.stop()
    with pytest.raises(httpx.ConnectError):  # stopped: nothing listens there any more
        httpx.get(server.url, timeout=5)
    with pytest.raises(ValueError, match="unknown process"):
        registry("scheduler")
    assert "mail-ingress" in PROCESSES


def test_the_batch_histogram_counts_a_batch_at_once() -> None:
    from prometheus_client import CollectorRegistry

    owned = CollectorRegistry()
    histogram = BatchHistogram("lemongraph_test_seconds", "test", (10, 100, 1000), owned)
    histogram.observe_since(10_000, [9_995, 9_990, 9_950, 5_000, -1, 20_000])
    histogram.observe_since(10_000, [])
    [family] = text_string_to_metric_families(generate_latest(owned).decode())
    got = {(s.name, s.labels.get("le")): s.value for s in family.samples}
    assert got == {
        # 5 ms, 10 ms (le is inclusive), 50 ms, 5 s, and a stamp ahead of now as 0
        ("lemongraph_test_seconds_bucket", "0.01"): 3.0,
        ("lemongraph_test_seconds_bucket", "0.1"): 4.0,
        ("lemongraph_test_seconds_bucket", "1.0"): 4.0,
        ("lemongraph_test_seconds_bucket", "+Inf"): 5.0,
        ("lemongraph_test_seconds_count", None): 5.0,
        ("lemongraph_test_seconds_sum", None): pytest.approx(5.065),
    }


def test_dead_letter_reasons_are_codes() -> None:
    assert all(re.fullmatch(r"[a-z_]+", code) for code in DEADLETTER_REASONS)
    engine = (ROOT / "stream/engine/engine.py").read_text()
    calls = engine.split("self.dead(")[1:]
    used = set()
    for call in calls:
        depth, end = 1, 0
        while depth:
            depth += {"(": 1, ")": -1}.get(call[end], 0)
            end += 1
        used.add(re.findall(r'"([^"]*)"', call[:end])[-1])  # the code: the last argument
    assert len(calls) >= 10, "the dead() calls were not found"
    assert used <= set(DEADLETTER_REASONS), used - set(DEADLETTER_REASONS)


def _load(path: str) -> Any:
    return yaml.safe_load((ROOT / path).read_text())


def test_compose_s_metrics_profile_and_the_scrape_config_agree() -> None:
    compose = _load("docker-compose.yml")
    services = compose["services"]
    profiled = {name for name, s in services.items() if "metrics" in s.get("profiles", ())}
    assert profiled == {"prometheus", "grafana"}
    for name in profiled:
        for volume in services[name].get("volumes", ()):
            source = volume.split(":")[0]
            if source.startswith("./"):
                assert (ROOT / source).exists(), volume
    scrape_config = _load("deploy/prometheus.yml")
    jobs = {job["job_name"]: job for job in scrape_config["scrape_configs"]}
    assert set(jobs) == {"worker", "gateway", "agents", "mail-ingress", "memory"}
    for job in jobs.values():
        [sd] = job["dns_sd_configs"]
        [service] = sd["names"]
        environment = services[service]["environment"]
        port = environment["LEMONGRAPH_METRICS_PORT"]
        assert port == f"${{LEMONGRAPH_METRICS_PORT:-{sd['port']}}}", (service, port)
        assert environment["LEMONGRAPH_METRICS_HOST"] == "0.0.0.0"
        assert services[service]["command"][0] in (
            "worker",
            "gateway",
            "agents",
            "mail-ingress",
            "memory",
        )
    provisioned = _load("deploy/grafana/provisioning/datasources/prometheus.yml")
    [source] = provisioned["datasources"]
    assert source["url"] == "http://prometheus:9090"


def test_the_dashboard_reads_only_metrics_that_are_served() -> None:
    import stream.runtime.metrics  # noqa: F401

    served = set().union(*(_served(p) for p in PROCESSES))
    dashboard = json.loads((ROOT / "deploy/grafana/dashboards/lemongraph.json").read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    names = {n for expr in exprs for n in re.findall(r"\blemongraph_\w+", expr)}
    assert names <= served, names - served
    assert {n.removesuffix("_bucket") for n in names} >= set(PINNED)
    uids = {t["datasource"]["uid"] for panel in dashboard["panels"] for t in panel["targets"]}
    assert uids == {"prometheus"}
