"""The ``lemongraph`` command: one module per command family, loaded lazily
from the table in ``stream/cli/commands.py``."""

from __future__ import annotations

from stream.cli.commands import main

__all__ = ["main"]
