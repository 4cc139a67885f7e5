"""A worker's fetch of a few records waits ``LEMONGRAPH_BATCH_LINGER_MS`` for
more, and decides what came meanwhile in the same batch (docs/operations.md,
"Batches at a steady rate"; stream/runtime/fetch.py)."""

from __future__ import annotations

import threading
import time
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


def test_the_setting_is_5_ms_by_default_and_0_to_1000() -> None:
    assert Settings.from_env({}, NO_DOTENV).batch_linger_ms == 5
    assert Settings.from_env({"LEMONGRAPH_BATCH_LINGER_MS": "0"}, NO_DOTENV).batch_linger_ms == 0
    for wrong in ("-1", "1001", "5ms", "0.5"):
        with pytest.raises(ConfigError, match="LEMONGRAPH_BATCH_LINGER_MS"):
            Settings.from_env({"LEMONGRAPH_BATCH_LINGER_MS": wrong}, NO_DOTENV)


@pytest.mark.broker
@pytest.mark.timeout(180)
def test_a_record_that_comes_while_a_small_fetch_waits_joins_its_batch(lane: Lane) -> None:
    # No ticks during the test: only these records make batches.
    worker = lane.start_worker(
        LEMONGRAPH_BATCH_LINGER_MS="1000",
        LEMONGRAPH_TICK_INTERVAL="3600",
        LEMONGRAPH_METRICS_PORT="0",
    )
    url = metrics_urls(worker.lines)["worker"][-1]
    lane.send(start("warm-up"))
    lane.wait_until("decisions", lambda rs: any(r["key"] == "warm-up" for r in rs))
    before = scrape(url)

    lane.send(start("first"))
    time.sleep(0.3)  # the second is produced while the first's fetch waits
    lane.send(start("second"))
    wanted = {"first", "second"}
    decisions = lane.wait_until("decisions", lambda rs: wanted <= {r["key"] for r in rs})
    after = scrape(url)

    batches = value(after, "lemongraph_batch_records_count") - value(
        before, "lemongraph_batch_records_count"
    )
    records = value(after, "lemongraph_batch_records_sum") - value(
        before, "lemongraph_batch_records_sum"
    )
    assert (batches, records) == (1, 2)
    # The first waited out the linger: its decision was produced a second after it.
    sent = {r["key"]: r["timestamp"] for r in lane.read("inbox") if r["key"] in wanted}
    decided = {r["key"]: r["timestamp"] for r in decisions if r["key"] in wanted}
    assert decided["first"] - sent["first"] >= 950, (sent, decided)
    assert abs(decided["first"] - decided["second"]) < 100, decided  # produced together


@pytest.mark.broker
@pytest.mark.timeout(240)
def test_a_worker_joins_while_the_first_one_lingers_under_steady_traffic(lane: Lane) -> None:
    # A rebalance stops the flow and waits for every record handed out to be
    # acknowledged; a lingering batch must not wait for the flow meanwhile
    # (stream/runtime/fetch.py). At one record every 100 ms and a linger of a
    # second, the first worker is lingering nearly all the time.
    linger = {"LEMONGRAPH_BATCH_LINGER_MS": "1000", "LEMONGRAPH_TICK_INTERVAL": "3600"}
    lane.start_worker(**linger)
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
        lane.wait_until("decisions", lambda rs: len(rs) >= 3)
        lane.join_worker(**linger)  # its "Worker ready": the rebalance completed
    finally:
        stop.set()
        thread.join(30)
    wanted = set(sent)
    lane.wait_until("decisions", lambda rs: wanted <= {r["key"] for r in rs})
