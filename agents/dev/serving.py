"""An ASGI app served by uvicorn from a thread of this process: the stand-in
model and the demo tools under ``lemongraph dev``, and the benchmark's
endpoints."""

from __future__ import annotations

import threading
import time
from typing import Any

import uvicorn

__all__ = ["AppThread"]


class _Server(uvicorn.Server):
    def install_signal_handlers(self) -> None:  # the process owns its signals
        pass


class AppThread:
    """``app`` on ``host:port`` in a daemon thread; ``url`` is its base URL."""

    def __init__(self, app: Any, host: str, port: int, name: str) -> None:
        config = uvicorn.Config(app, host=host, port=port, log_level="warning")
        self.name = name
        self.server = _Server(config)
        self.url = f"http://{host}:{port}"
        self._thread = threading.Thread(target=self.server.run, name=name, daemon=True)

    def start(self, timeout: float = 15.0) -> AppThread:
        """Start serving; raises ``RuntimeError`` when it does not come up."""
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError(f"the {self.name} did not start on {self.url}")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        """Stop serving."""
        self.server.should_exit = True
        self._thread.join(5)
