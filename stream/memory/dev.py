"""``lemongraph dev``'s memory processor: ``lemongraph memory`` as a child
process beside the worker, the gateway and the agents (the entry point
``lemongraph.dev`` ``memory``; stream/cli/dev.py, ``DevPart``)."""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from stream.runtime.broker import die_with_parent
from stream.runtime.config import Settings
from stream.runtime.ports import Listener

__all__ = ["DevMemory"]


class DevMemory:
    """Starts ``lemongraph memory`` against dev's broker, its table under dev's
    LEMONGRAPH_DATA_DIR; stops it with SIGTERM (SIGKILL when dev is gone first)."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say
        self.child: subprocess.Popen[bytes] | None = None

    def listeners(self, settings: Settings) -> list[Listener]:
        """It listens on no port."""
        return []

    def start_mail(self) -> Callable[[], list[dict[str, Any]]] | None:
        """It catches no mail."""
        return None

    def start(self, settings: Settings) -> None:
        """The processor, as a child of dev that dies with it."""
        # The child reads .env itself (under the environment); these are dev's
        # own: the embedded broker and its data folder.
        env = {
            **os.environ,
            "LEMONGRAPH_KAFKA_URL": settings.kafka_url or "",
            "LEMONGRAPH_DATA_DIR": str(settings.data_dir),
            "LEMONGRAPH_TOPIC_PREFIX": settings.topic_prefix,
            "LEMONGRAPH_PARTITIONS": str(settings.partitions),
            # dev serves every process's metrics on a free port (docs/operations.md, "Metrics")
            "LEMONGRAPH_METRICS_PORT": "0" if settings.metrics_port is not None else "",
        }
        self.child = subprocess.Popen(  # our own interpreter and entry point
            [sys.executable, "-m", "stream", "memory"],
            env=env,
            preexec_fn=functools.partial(die_with_parent, signal.SIGKILL),
        )

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 5 seconds."""
        child = self.child
        if child is None or child.poll() is not None:
            return
        child.terminate()
        try:
            child.wait(5)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait(5)
