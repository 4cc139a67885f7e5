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
(429); ``job_exists``, ``schedule_exists``, ``run_not_active``, ``interrupt_not_open``,
``worktree_changed`` (409, with ``expected`` and ``found``); ``job_not_found``,
``playbook_not_found``, ``schedule_not_found``, ``run_not_found``, ``file_not_found``,
``not_found`` (404); ``file_too_large`` (413), ``media_type_not_allowed`` (415),
``file_not_its_type`` (422): an upload the file store refuses; ``method_not_allowed`` (405);
``broker_unavailable`` (503: the write may or may not have landed; retry with
the same idempotency key); ``internal`` (500). Answered by the connection itself,
before any route (stream/gateway/protocol.py): ``request_timeout`` (408: headers or
body not in within ``LEMONGRAPH_GATEWAY_REQUEST_TIMEOUT``) and
``too_many_connections`` (503: past ``LEMONGRAPH_GATEWAY_MAX_CONNECTIONS``).

:data:`CODES` holds each route code's status; :func:`error_responses` documents
a route's errors from the codes it answers (docs/api.md, "The OpenAPI document").
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
    "BODY_CODES",
    "CODES",
    "TOKEN_CODES",
    "WRITE_CODES",
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
    #: For an answer refused because a coding job's worktree changed while it
    #: waited (409 ``worktree_changed``): the worktree's fingerprint at the
    #: checkpoint and now (docs/coding.md, "A changed worktree: the 409").
    expected: dict[str, str] | None = None
    found: dict[str, str] | None = None


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


#: Every code a route answers, with its status (docs/api.md, "Errors"). The
#: codes the connection itself answers before any route (408, 503
#: ``too_many_connections``, 405 and 500) are the same shape, and in no operation.
CODES: dict[str, int] = {
    "malformed_json": 400,
    "malformed_request": 400,
    "auth_not_configured": 401,
    "token_missing": 401,
    "token_malformed": 401,
    "token_invalid": 401,
    "token_expired": 401,
    "signature_invalid": 401,
    "source_not_allowed": 403,
    "not_an_approver": 403,
    "reply_refused": 403,
    "sender_not_contact": 403,
    "job_not_found": 404,
    "playbook_not_found": 404,
    "schedule_not_found": 404,
    "run_not_found": 404,
    "subject_not_found": 404,
    "not_dev": 404,
    "inbound_not_configured": 404,
    "file_not_found": 404,
    "job_exists": 409,
    "interrupt_not_open": 409,
    "worktree_changed": 409,
    "schedule_exists": 409,
    "run_not_active": 409,
    "body_too_large": 413,
    "file_too_large": 413,
    "media_type_not_allowed": 415,
    "file_not_its_type": 422,
    "invalid_body": 422,
    "invalid_query": 422,
    "invalid_header": 422,
    "invalid_schedule": 422,
    "answer_not_allowed": 422,
    "rate_limited": 429,
    "too_many_streams": 429,
    "broker_unavailable": 503,
    "gateway_full": 503,
    "streams_full": 503,
    "schedules_loading": 503,
    "schedules_full": 503,
    "subjects_loading": 503,
    "profile_not_held": 503,
}
#: What the guard answers for a token route before the route runs (401, 429).
TOKEN_CODES = (
    "auth_not_configured",
    "token_missing",
    "token_malformed",
    "token_invalid",
    "token_expired",
    "rate_limited",
)
#: What a route with a JSON body answers about the body (400, 413, 422).
BODY_CODES = ("malformed_json", "malformed_request", "body_too_large", "invalid_body")
#: What a write answers when the broker did not take it, or this gateway's
#: writes no worker decided yet fill its memory (503).
WRITE_CODES = ("broker_unavailable", "gateway_full")
_REASONS = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    409: "Conflict",
    413: "Content Too Large",
    415: "Unsupported Media Type",
    422: "Unprocessable Content",
    429: "Too Many Requests",
    503: "Service Unavailable",
}


def error_responses(*codes: str, token: bool = True) -> dict[int | str, dict[str, Any]]:
    """A route's ``responses`` for its OpenAPI document: per status, the error
    body and, in its description, the codes the route answers with it: those
    given and, for a ``token`` route (every ``/v1`` route but the signed
    webhook), the guard's 401 and 429 (docs/api.md, "An API contract")."""
    by_status: dict[int, list[str]] = {}
    for code in (*TOKEN_CODES, *codes) if token else codes:
        by_status.setdefault(CODES[code], []).append(code)
    return {
        status: {
            "model": ErrorBody,
            "description": f"{_REASONS[status]}: " + ", ".join(f"`{c}`" for c in named),
        }
        for status, named in sorted(by_status.items())
    }


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

    async def http(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        multipart = request.headers.get("content-type", "").startswith("multipart/")
        if exc.status_code == 400 and exc.detail == _UNPARSED and multipart:
            # An upload (POST /v1/files) whose multipart body cannot be read.
            message = "the multipart body could not be read"
            return error_response(ApiError(400, "malformed_request", message))
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
