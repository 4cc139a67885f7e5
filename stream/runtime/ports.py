"""Is a port free to listen on? Asked before a command opens its listeners, so a
port in use is named, with what uses it and the setting that moves it, instead
of a broker's panic or "gateway did not start"."""

from __future__ import annotations

import errno
import socket
from collections.abc import Iterable
from dataclasses import dataclass

from stream.runtime.errors import ConfigError

__all__ = ["Listener", "check_ports"]


@dataclass(frozen=True, slots=True)
class Listener:
    """One port a command listens on: what it is for, and how to change it."""

    host: str
    port: int
    what: str  # "the gateway's API"
    change: str  # "set LEMONGRAPH_API_PORT"


def _refusal(host: str, port: int) -> str | None:
    """Why ``port`` on ``host`` cannot be listened on (None: it can)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        # As the servers bind: a port left in TIME_WAIT by an earlier run is free.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return "is in use"
            if exc.errno == errno.EACCES:
                return "needs privileges this process does not have"
            return f"cannot be listened on at {host} ({exc.strerror})"
    return None


def check_ports(listeners: Iterable[Listener]) -> None:
    """Raise :class:`ConfigError` naming every listener whose port cannot be
    listened on (port 0, any free port, is never checked)."""
    taken = []
    for item in listeners:
        why = _refusal(item.host, item.port) if item.port else None
        if why is not None:
            taken.append(f"port {item.port} {why} ({item.what}; {item.change} to change it)")
    if taken:
        raise ConfigError("\n".join(taken))
