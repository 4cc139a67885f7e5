"""Fixtures shared by every test folder."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from stream.broker import EmbeddedBroker
from stream.native import StaleBuild, check


def pytest_configure(config: pytest.Config) -> None:
    # Test what runs: a compiled module older than its source would be tested
    # in its old form (see stream/native.py).
    try:
        check()
    except StaleBuild as exc:
        pytest.exit(str(exc), returncode=2)


def pytest_report_header(config: pytest.Config) -> str:
    return check().describe()


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
