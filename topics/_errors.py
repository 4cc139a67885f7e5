"""Pydantic validation errors as the one-line texts users read: ``where: what``,
``where`` the error's location dotted (``milestones.0.id``) or, for the value
as a whole, what the caller names it (``record``, ``body``, ``value``)."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

from pydantic import ValidationError

__all__ = ["describe_errors", "first_error"]


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
