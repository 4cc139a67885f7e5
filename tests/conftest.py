"""Fixtures shared by every test folder."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from stream.broker import EmbeddedBroker


@pytest.fixture(scope="session")
def kafka_url() -> Iterator[str]:
    """A broker for the whole session: LEMONGRAPH_KAFKA_URL when set, else the
    embedded Tansu broker on a free port. Tests isolate themselves by topic prefix."""
    configured = os.environ.get("LEMONGRAPH_KAFKA_URL", "").strip()
    if configured:
        yield configured
        return
    with EmbeddedBroker() as broker:
        yield broker.url
