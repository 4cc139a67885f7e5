"""What one tool call came to, whatever its kind (docs/agents.md, "Tools as
evidence"): the :class:`Outcome` the executor and each kind's module return,
what the model is told of it, and a URL as the journal shows it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

import orjson
from topics import InboxEvent

__all__ = ["RESULT_EXCERPT", "Outcome", "redact_url", "tell"]

#: How much of a tool's response the model is shown.
RESULT_EXCERPT = 2000


def redact_url(url: str) -> str:
    """``url`` without credentials and with every query value hidden, for the
    journal and logs (a secret in a URL never leaves the process)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    query = "&".join(
        f"{pair.split('=', 1)[0]}=***" if "=" in pair else pair
        for pair in parts.query.split("&")
        if pair
    )
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


@dataclass(frozen=True)
class Outcome:
    """What happened to one tool call.

    ``status``: ``done`` (a 2xx whose JSON body passes the tool's success rule;
    ``fact`` is what it records, if anything), ``failed`` (the endpoint said it
    did not happen, or an idempotent tool may be retried with the same key),
    ``refused`` (not run), ``outcome_unknown`` (a non-idempotent call that may
    have taken effect: never repeated blindly). ``output`` is what the model is
    told; ``url`` the endpoint, redacted; ``command`` a command's argv, with
    the values read from the environment as ``***`` (docs/agents.md, "Command
    tools").
    """

    status: Literal["done", "failed", "refused", "outcome_unknown"]
    output: str
    key: str
    fact: InboxEvent | None = None
    http_status: int | None = None
    url: str | None = None
    seconds: float = 0.0
    #: The response's JSON on ``done``, whole (``output`` is an excerpt); a
    #: command's result, on ``done`` and on ``failed`` when it ran.
    data: Any = None
    command: str | None = None

    def journaled(self) -> dict[str, Any]:
        """What a ``journal.tool_call`` record holds of this call beyond the
        fields every call has: a command's argv (redacted), exit code and
        output's hash."""
        if self.command is None:
            return {}
        data = self.data if isinstance(self.data, dict) else {}
        return {
            "command": self.command,
            "exit_code": data.get("exit_code"),
            "output_sha256": data.get("output_sha256"),
        }


def tell(ok: bool, detail: Any, limit: int = RESULT_EXCERPT) -> str:
    """What the model is told about a call, as JSON; a long one cut, with a note."""
    body = {"ok": ok, "result" if ok else "error": detail}
    text = orjson.dumps(body, default=str).decode()
    if len(text) <= limit:
        return text
    note = f" [cut: {len(text):,} characters in all]"
    return text[: limit - len(note) - 3] + "..." + note
