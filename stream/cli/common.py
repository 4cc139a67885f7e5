"""What several of stream's command modules share (the commands every package
shares are in ``stream/runtime/command.py``)."""

from __future__ import annotations

from stream.runtime.config import Settings
from stream.runtime.native import check
from stream.runtime.ports import Listener

__all__ = ["DEV_SECRET_FILE", "gateway_listeners", "native", "one_line"]

#: Where ``lemongraph dev`` keeps the API_TOKEN_SECRET it made up, under
#: LEMONGRAPH_DATA_DIR, while it runs; ``lemongraph token`` reads it when
#: API_TOKEN_SECRET is unset (docs/operations.md, "Tokens").
DEV_SECRET_FILE = "dev-api-token-secret"  # noqa: S105 - a file name


def native() -> str:
    """Refuse to run a stale compiled core (see stream/runtime/native.py); returns which
    runs, for the commands that say so."""
    return check().describe()  # StaleBuild is a ShellError: reported by the group


def one_line(problem: str) -> str:
    """A problem's first line."""
    # A problem's first line names file, position and reason; the caret excerpt
    # after it is for people reading a terminal, not for one-line-per-problem.
    return problem.splitlines()[0]


def gateway_listeners(settings: Settings) -> list[Listener]:
    """The gateway's fixed ports (API and UI), to check before it starts."""
    host = settings.gateway_host
    return [
        Listener(host, settings.api_port, "the gateway's API", "set LEMONGRAPH_API_PORT"),
        Listener(host, settings.ui_port, "the gateway's UI", "set LEMONGRAPH_UI_PORT"),
    ]
