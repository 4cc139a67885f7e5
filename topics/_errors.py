"""The errors of topics/, and how other errors read.

The root of the errors topics/ raises: a value that breaks the contract.

    ContractError              a value no producer may write, or no consumer can read
    ├── RecordError            a record that cannot be decoded or validated (topics._codec)
    ├── LimitError             a value beyond the limits: size, depth, integers (topics._limits)
    ├── JobKeyError            a job key that breaks the key rule (topics._keys)
    ├── ReplyTokenError        a reply or bounce address that cannot be trusted (topics.replies)
    └── SenderNotContact       a reply not from the contact it was issued to (topics.mail)

Each is also a ``ValueError``, as it always was, so code that catches
``ValueError`` still catches it. The other layers' roots (docs/operations.md,
"Errors"): ``compiler.LemongraphError``, ``stream.runtime.errors.ShellError``,
``stream.gateway.errors.ApiError``, ``agents.errors.AgentsError``.

Pydantic validation errors as the one-line texts users read: ``where: what``,
``where`` the error's location dotted (``milestones.0.id``) or, for the value
as a whole, what the caller names it (``record``, ``body``, ``value``).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

from pydantic import ValidationError

__all__ = ["ContractError", "describe_errors", "first_error"]


class ContractError(ValueError):
    """The root of topics/' errors: a value that breaks the contract between
    producers and consumers (docs/kafka.md)."""


def _where(err: Mapping[str, Any], whole: str, skip: Collection[object]) -> str:
    return ".".join(str(p) for p in err.get("loc", ()) if p not in skip) or whole


def first_error(exc: ValidationError, whole: str = "record") -> str:
    """The first error, with pydantic's message as it is."""
    err = exc.errors()[0]
    return f"{_where(err, whole, ())}: {err['msg']}"


def describe_errors(
    errors: ValidationError | Iterable[Mapping[str, Any]],
    whole: str = "record",
    *,
    skip: Collection[object] = (),
) -> str:
    """Every error, ``; ``-joined; a field the model does not have is an
    ``unknown field``. ``skip``: location parts left out (FastAPI's ``body``,
    ``query``, ``path``)."""
    listed = errors.errors() if isinstance(errors, ValidationError) else errors
    parts = []
    for err in listed:
        message = "unknown field" if err.get("type") == "extra_forbidden" else err.get("msg", "")
        parts.append(f"{_where(err, whole, skip)}: {message}")
    return "; ".join(parts)
