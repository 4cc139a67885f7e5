"""After a batch of a few records a worker waits ``LEMONGRAPH_BATCH_LINGER_MS``
before it takes the next, and decides what came meanwhile as one batch; the
wait holds no record, so a rebalance or a stop during it goes on at once
(docs/operations.md, "Batches at a steady rate"; stream/runtime/fetch.py)."""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stream.runtime.config import Settings
from stream.runtime.errors import ConfigError
from tests.lanes import Lane
from tests.scrape import metrics_urls, scrape, value

NO_DOTENV = Path("/nonexistent/.env")


def start(key: str) -> dict[str, Any]:
    return {
        "type": "job.start",
        "key": key,
        "playbook_key": "onboarding",
        "subject": {},
        "contacts": [],
    }


def test_the_setting_is_off_by_default_and_0_to_1000() -> None:
    assert Settings.from_env({}, NO_DOTENV).batch_linger_ms == 0
    for ms in (5, 1000):
        env = {"LEMONGRAPH_BATCH_LINGER_MS": str(ms)}
        assert Settings.from_env(env, NO_DOTENV).batch_linger_ms == ms
    for wrong in ("-1", "1001", "5ms", "0.5"):
        with pytest.raises(ConfigError, match="LEMONGRAPH_BATCH_LINGER_MS"):
            Settings.from_env({"LEMONGRAPH_BATCH_LINGER_MS": wrong}, NO_DOTENV)


def _batches(url: str) -> tuple[float, float]:
    """(batches, records) the worker at ``url`` has decided so far."""
    samples = scrape(url)
    return (
        value(samples, "lemongraph_batch_records_count"),
        value(samples, "lemongraph_batch_records_sum"),
    )


def _counted(url: str, batches: float) -> tuple[float, float]:
    """Wait until the worker's metrics count ``batches`` batches (a batch is
    counted just after its outputs are acknowledged)."""
    deadline = time.monotonic() + 30
    while (now := _batches(url))[0] < batches:
        assert time.monotonic() < deadline, f"never counted {batches} batches: {now}"
        time.sleep(0.02)
    return now


@pytest.mark.broker
@pytest.mark.timeout(180)
def test_after_a_small_batch_the_next_waits_and_takes_what_came(lane: Lane) -> None:
    # No ticks during the test: only these records make batches.
    worker = lane.start_worker(
        LEMONGRAPH_BATCH_LINGER_MS="1000",
        LEMONGRAPH_TICK_INTERVAL="3600",
        LEMONGRAPH_METRICS_PORT="0",
    )
    url = metrics_urls(worker.lines)["worker"][-1]
    lane.send(start("first"))
    lane.wait_until("decisions", lambda rs: any(r["key"] == "first" for r in rs))
    before = _counted(url, 1)  # "first" was a batch of its own: the worker now waits 1 s

    lane.send(start("second"))
    time.sleep(0.1)
    lane.send(start("third"))
    wanted = {"first", "second", "third"}
    decisions = lane.wait_until("decisions", lambda rs: wanted <= {r["key"] for r in rs})
    after = _counted(url, before[0] + 1)

    # The two that came while it waited are one batch.
    assert (after[0] - before[0], after[1] - before[1]) == (1, 2)
    decided = {r["key"]: r["timestamp"] for r in decisions if r["key"] in wanted}
    assert decided["second"] - decided["first"] >= 950, decided
    assert abs(decided["second"] - decided["third"]) < 100, decided  # produced together


#: A linger of a second and one record every 100 ms: the worker is waiting
#: between batches nearly all the time.
LINGER = {"LEMONGRAPH_BATCH_LINGER_MS": "1000", "LEMONGRAPH_TICK_INTERVAL": "3600"}


@contextlib.contextmanager
def steady_traffic(lane: Lane) -> Iterator[list[str]]:
    """Job starts every 100 ms until the block ends; yields the keys sent so far."""
    stop = threading.Event()
    sent: list[str] = []

    def traffic() -> None:
        while not stop.is_set():
            key = f"steady-{len(sent)}"
            lane.send(start(key))
            sent.append(key)
            time.sleep(0.1)

    thread = threading.Thread(target=traffic, name="traffic")
    thread.start()
    try:
        yield sent
    finally:
        stop.set()
        thread.join(30)


@pytest.mark.broker
@pytest.mark.timeout(240)
def test_a_worker_joins_while_the_first_one_waits_under_steady_traffic(lane: Lane) -> None:
    # A rebalance stops the flow and waits for every record handed out to be
    # acknowledged: the wait must hold none (stream/runtime/fetch.py).
    lane.start_worker(**LINGER)
    with steady_traffic(lane) as sent:
        lane.wait_until("decisions", lambda rs: len(rs) >= 3)
        lane.join_worker(**LINGER)  # its "Worker ready": the rebalance completed
    wanted = set(sent)
    lane.wait_until("decisions", lambda rs: wanted <= {r["key"] for r in rs})


@pytest.mark.broker
@pytest.mark.timeout(240)
def test_a_worker_stopped_under_steady_traffic_stops_cleanly_at_once(lane: Lane) -> None:
    # A stop cancels the fetch loop wherever it is, most likely in the wait:
    # no record may be left handed out, or Faust's stop waits for it forever.
    worker = lane.start_worker(**LINGER)
    with steady_traffic(lane):
        lane.wait_until("decisions", lambda rs: len(rs) >= 3)
        started = time.monotonic()
        code = worker.stop(signal.SIGTERM)
        took = time.monotonic() - started
    assert code == 0, "".join(worker.lines[-30:])
    assert took < 4, took
