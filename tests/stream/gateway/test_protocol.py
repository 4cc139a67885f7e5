"""The gateway's log guards, in a real event loop and a real logger (the server
behaviour itself is tested through a running gateway in test_holds.py)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest

from stream.gateway.protocol import OncePer, quiet_accept_errors
from stream.runtime.config import ConfigError, Settings


def test_accept_errors_are_reported_once_per_interval_with_a_count() -> None:
    said: list[str] = []
    other: list[dict[str, Any]] = []
    loop = asyncio.new_event_loop()
    try:
        loop.set_exception_handler(lambda _loop, context: other.append(context))
        quiet_accept_errors(loop, said.append, every=3600)
        for _ in range(5000):
            loop.call_exception_handler(
                {
                    "message": "socket.accept() out of system resource",
                    "exception": OSError(24, "Too many open files"),
                }
            )
        loop.call_exception_handler({"message": "something else"})
    finally:
        loop.close()
    assert len(said) == 1
    assert "Too many open files" in said[0]
    assert "LEMONGRAPH_GATEWAY_MAX_CONNECTIONS" in said[0]
    assert [c["message"] for c in other] == ["something else"]


def test_a_repeated_warning_passes_once_per_interval() -> None:
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    logger = logging.getLogger("test.once-per")
    logger.propagate = False
    logger.addHandler(Keep())
    logger.addFilter(OncePer(every=3600))
    for _ in range(1000):
        logger.warning("Exceeded concurrency limit.")
        logger.warning("Invalid HTTP request received.")
    assert [r.getMessage() for r in records] == [
        "Exceeded concurrency limit.",
        "Invalid HTTP request received.",
    ]


def test_the_request_deadline_and_connection_bound_settings(tmp_path: Path) -> None:
    absent = tmp_path / "absent.env"
    defaults = Settings.from_env({}, absent)
    assert (defaults.request_timeout, defaults.max_connections) == (10.0, 1000)
    assert defaults.streams_per_token == 20
    assert (
        Settings.from_env({"LEMONGRAPH_GATEWAY_STREAMS_PER_TOKEN": "3"}, absent).streams_per_token
        == 3
    )
    given = Settings.from_env(
        {"LEMONGRAPH_GATEWAY_REQUEST_TIMEOUT": "500ms", "LEMONGRAPH_GATEWAY_MAX_CONNECTIONS": "50"},
        absent,
    )
    assert (given.request_timeout, given.max_connections) == (0.5, 50)
    for env, says in [
        ({"LEMONGRAPH_GATEWAY_REQUEST_TIMEOUT": "0"}, "more than zero"),
        ({"LEMONGRAPH_GATEWAY_REQUEST_TIMEOUT": "soon"}, "not a duration"),
        ({"LEMONGRAPH_GATEWAY_MAX_CONNECTIONS": "0"}, "at least 1"),
        ({"LEMONGRAPH_GATEWAY_STREAMS_PER_TOKEN": "0"}, "at least 1"),
    ]:
        with pytest.raises(ConfigError, match=says):
            Settings.from_env(env, absent)
