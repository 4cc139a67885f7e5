"""The gateway's log guards, in a real event loop and a real logger (the server
behaviour itself is tested through a running gateway in test_holds.py)."""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
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


class _Scarce:
    """A listening socket whose accept() fails as a process out of file
    descriptors does (EMFILE), counting the attempts."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.attempts = 0

    def accept(self) -> tuple[socket.socket, Any]:
        self.attempts += 1
        raise OSError(errno.EMFILE, "Too many open files")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sock, name)


def test_out_of_file_descriptors_a_round_of_accepts_ends_and_retries_once() -> None:
    reported: list[dict[str, Any]] = []
    loop = asyncio.new_event_loop()
    listening = socket.create_server(("127.0.0.1", 0), backlog=2048)
    listening.setblocking(False)
    scarce = _Scarce(listening)
    client = socket.create_connection(listening.getsockname())  # readable: one waits
    try:
        loop.set_exception_handler(lambda _loop, context: reported.append(context))
        quiet_accept_errors(loop, lambda _: None, every=3600)
        loop._start_serving(lambda: asyncio.Protocol(), scarce, None, None, 2048)  # type: ignore[attr-defined]
        loop.run_until_complete(asyncio.sleep(0.05))  # the loop's round for the readable socket
        # Python 3.11 alone: 2048 attempts and as many retries scheduled (gh-151615).
        assert scarce.attempts == 1
        retries = list(loop._scheduled)  # type: ignore[attr-defined]  # the loop's timers
        assert len(retries) == 1
        listening.close()  # the server closes before the retry is due
        retries[0]._run()  # the retry, a second early
        assert reported == []  # the retry did nothing: no "Invalid file descriptor: -1"
    finally:
        client.close()
        listening.close()
        loop.close()
