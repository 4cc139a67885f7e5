"""Fixtures for the agent layer: real HTTP servers on free ports (the stand-in
model, tool endpoints), run by uvicorn in a thread of the test process."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import uvicorn

from stream.broker import free_port


class _Quiet(uvicorn.Server):
    def install_signal_handlers(self) -> None:  # the test process owns signals
        pass


@pytest.fixture
def serve() -> Iterator[Callable[[Any], str]]:
    """A factory: ``serve(app)`` runs the ASGI app on a free port and returns
    its base URL (``http://127.0.0.1:PORT``); every server stops at teardown."""
    servers: list[tuple[_Quiet, threading.Thread]] = []

    def start(app: Any) -> str:
        port = free_port()
        server = _Quiet(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 15
        while not server.started:
            if time.monotonic() > deadline or not thread.is_alive():
                raise AssertionError("the test server did not start")
            time.sleep(0.02)
        servers.append((server, thread))
        return f"http://127.0.0.1:{port}"

    yield start
    for server, thread in servers:
        server.should_exit = True
        thread.join(10)
