"""The gateway's one error shape: ``{"error": {"code", "message"}}``.

Every refusal is an :class:`ApiError` that carries its HTTP status and a stable
``code``; handlers turn it (and the framework's own errors) into the JSON body.
Nothing chooses a status by reading a message, and no response carries a stack
trace: an unexpected exception is logged and answered 500 ``internal``.

Codes: ``auth_not_configured``, ``token_missing``, ``token_malformed``,
``token_invalid``, ``token_expired`` (401); ``source_not_allowed`` (403: a
schedule written with a token whose source is not ``world``); ``malformed_json`` (400: not JSON,
not UTF-8, or nested past the parser), ``malformed_request`` (400: e.g. a bad
Content-Length); ``body_too_large`` (413); ``invalid_body``, ``invalid_query``
(422), ``invalid_schedule`` (422, with ``field`` and ``position``); ``rate_limited``
(429); ``job_exists``, ``schedule_exists`` (409); ``job_not_found``,
``playbook_not_found``, ``schedule_not_found``, ``not_found`` (404); ``method_not_allowed`` (405);
``broker_unavailable`` (503: the write may or may not have landed; retry with
the same idempotency key); ``internal`` (500). Answered by the connection itself,
before any route (stream/gateway/protocol.py): ``request_timeout`` (408: headers or
body not in within ``LEMONGRAPH_GATEWAY_REQUEST_TIMEOUT``) and
``too_many_connections`` (503: past ``LEMONGRAPH_GATEWAY_MAX_CONNECTIONS``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from topics import MAX_DEPTH, describe_errors

__all__ = [
    "ApiError",
    "ErrorBody",
    "ErrorDetail",
    "error_response",
    "error_responses",
    "install_handlers",
]

log = logging.getLogger("lemongraph.gateway")


class ErrorDetail(BaseModel):
    """What went wrong: a stable code and a sentence for people."""

    code: str
    message: str
    #: For an invalid schedule (422 ``invalid_schedule``): the field path
    #: (``schedule``, ``timezone``, ``action.playbook_key``) and, in a cron
    #: expression, the 1-based character position.
    field: str | None = None
    position: int | None = None


class ErrorBody(BaseModel):
    """Every error response."""

    error: ErrorDetail


class ApiError(Exception):
    """A refusal with its status, code and message (and headers, e.g. Retry-After)."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        headers: Mapping[str, str] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = dict(headers or {})
        #: More fields of the error object (``field``, ``position``).
        self.extra = dict(extra or {})


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """A route's ``responses`` for its OpenAPI document: the error body for 401
    and 429 (every ``/v1`` route's) and for ``statuses``."""
    return {s: {"model": ErrorBody} for s in (401, 429, *statuses)}


def error_response(error: ApiError) -> JSONResponse:
    """The JSON response for ``error``."""
    body = {"error": {"code": error.code, "message": error.message, **error.extra}}
    return JSONResponse(body, status_code=error.status, headers=error.headers)


def _describe(errors: Any) -> str:
    return describe_errors(errors, "body", skip=("body", "query", "path"))[:1000]


def _from_validation(exc: RequestValidationError) -> ApiError:
    errors = list(exc.errors())
    if any(e.get("type") == "json_invalid" for e in errors):
        return ApiError(400, "malformed_json", "the body is not valid JSON")
    if any(tuple(e.get("loc", ())) == ("body",) and e.get("type") == "missing" for e in errors):
        return ApiError(400, "malformed_json", "a JSON body is required")
    if errors and all(e.get("loc", ("",))[0] == "body" for e in errors):
        return ApiError(422, "invalid_body", _describe(errors))
    return ApiError(422, "invalid_query", _describe(errors))


#: What FastAPI says when it cannot parse a JSON body (not a JSONDecodeError).
_UNPARSED = "There was an error parsing the body"
_UNREADABLE = (
    "the body is not JSON this gateway can read (not UTF-8, or nested too deeply: "
    f"at most {MAX_DEPTH} levels are accepted)"
)


def install_handlers(app: FastAPI) -> None:
    """Route every error through :func:`error_response`."""

    async def api_error(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ApiError)
        return error_response(exc)

    async def validation(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        return error_response(_from_validation(exc))

    async def http(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        if exc.status_code == 400 and exc.detail == _UNPARSED:
            # The framework could not read the body as JSON at all: bytes that
            # are not UTF-8, or arrays/objects nested past the parser's stack.
            return error_response(ApiError(400, "malformed_json", _UNREADABLE))
        code = {400: "malformed_request", 404: "not_found", 405: "method_not_allowed"}.get(
            exc.status_code, "http_error"
        )
        message = exc.detail if isinstance(exc.detail, str) else "request refused"
        return error_response(ApiError(exc.status_code, code, message, exc.headers))

    async def internal(request: Request, exc: Exception) -> JSONResponse:
        log.error("unexpected error on %s %s", request.method, request.url.path, exc_info=exc)
        return error_response(ApiError(500, "internal", "internal error (logged by the gateway)"))

    app.add_exception_handler(ApiError, api_error)
    app.add_exception_handler(RequestValidationError, validation)
    app.add_exception_handler(StarletteHTTPException, http)
    app.add_exception_handler(Exception, internal)
