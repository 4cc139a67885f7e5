"""The ``lemongraph`` command: one module per command family, loaded lazily
from the table in ``stream/cli/commands.py``. A command module imports the
engine, the gateway and the benchmark (Faust, FastAPI) only in the command that
runs them, so that ``--help`` and the light commands do not pay for them."""

from __future__ import annotations

from stream.cli.commands import main

__all__ = ["main"]
