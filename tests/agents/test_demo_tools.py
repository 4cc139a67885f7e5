"""The demo tools `lemongraph dev` serves, over HTTP: they confirm what the
bundled catalog's tools ask, and answer a repeated Idempotency-Key with the
first answer (nothing happens twice)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

from agents.demo_tools import TOOL_URLS, build_demo_tools


def test_each_catalog_tool_is_confirmed_once_per_key(serve: Callable[[Any], str]) -> None:
    base = serve(build_demo_tools())
    calendar = base + TOOL_URLS["CALENDAR_URL"]
    first = httpx.post(
        f"{calendar}/book", json={"when": "10:00"}, headers={"Idempotency-Key": "k1"}
    )
    again = httpx.post(
        f"{calendar}/book", json={"when": "11:00"}, headers={"Idempotency-Key": "k1"}
    )
    other = httpx.post(
        f"{calendar}/book", json={"when": "12:00"}, headers={"Idempotency-Key": "k2"}
    )
    assert first.status_code == 200
    assert again.json() == first.json()  # the first answer, not a second booking
    assert first.json()["when"] == "10:00"
    assert other.json()["id"] != first.json()["id"]
    crm = base + TOOL_URLS["CRM_URL"]
    assert httpx.post(f"{crm}/activate", json={}).json()["active"] is True
    assert httpx.post(f"{crm}/deal", json={"stage": "qualified"}).json()["stage"] == "qualified"
    billing = base + TOOL_URLS["BILLING_URL"]
    assert httpx.post(f"{billing}/trials", json={"plan": "pro"}).json()["plan"] == "pro"
