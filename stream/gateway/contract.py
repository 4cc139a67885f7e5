"""The API's contract as a client generator reads it (docs/api.md, "The OpenAPI
document"): the tags that group the operations by resource, and the document
itself without what FastAPI adds on its own but the gateway never answers.

Every operation names its tag (its router's) and its ``operationId`` (set in its
decorator, so renaming a route function changes nothing a generated client
calls); tests/stream/gateway/test_contract.py pins both and fails for an
operation without them. Its errors are the gateway's one shape, ``ErrorBody``,
with the codes it answers listed per status (``error_responses`` in
stream/gateway/errors.py)."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

__all__ = ["TAGS", "GatewayApp", "without_framework_errors"]

#: The tags, in the order the document lists them, each a resource of docs/api.md.
TAGS: list[dict[str, Any]] = [
    {"name": "jobs", "description": "Start a job; read jobs, a job, its decisions and journal."},
    {"name": "events", "description": "Send an event to a job."},
    {"name": "messages", "description": "A job's conversation: read it, write a person's message."},
    {
        "name": "interrupts",
        "description": "A flow's open questions and approvals, and their answers.",
    },
    {"name": "files", "description": "Upload a file for a file channel; read it back."},
    {"name": "streams", "description": "A job as it changes, as server-sent events."},
    {"name": "playbooks", "description": "The registered playbooks."},
    {"name": "schedules", "description": "Create, change, delete and wake schedules; read runs."},
    {
        "name": "subjects",
        "description": "What is remembered of a subject: its profile and jobs; erase it.",
    },
    {"name": "inbound", "description": "Email from a mail provider's webhook (signed)."},
    {"name": "health", "description": "Is the gateway ready."},
    {"name": "dev", "description": "Under `lemongraph dev` only."},
]

#: FastAPI's own error schemas: it documents a 422 of this shape on every
#: operation with parameters, while the gateway answers every 422 as ErrorBody.
_FRAMEWORK = ("HTTPValidationError", "ValidationError")


class GatewayApp(FastAPI):
    """The gateway's FastAPI app, whose OpenAPI document holds only the
    responses the gateway really sends."""

    def openapi(self) -> dict[str, Any]:
        if self.openapi_schema is None:
            self.openapi_schema = without_framework_errors(super().openapi())
        return self.openapi_schema


def without_framework_errors(document: dict[str, Any]) -> dict[str, Any]:
    """``document`` without the 422 FastAPI adds to an operation that declares
    none (the operation's own 422, when it has one, is declared with the
    ErrorBody: its ``invalid_query`` or ``invalid_body``), and without the
    schemas only that 422 used."""
    framework = {f"#/components/schemas/{name}" for name in _FRAMEWORK}
    for methods in document.get("paths", {}).values():
        for operation in methods.values():
            responses = operation.get("responses", {})
            schema = (
                responses.get("422", {})
                .get("content", {})
                .get("application/json", {})
                .get("schema", {})
            )
            if schema.get("$ref") in framework:
                del responses["422"]
    schemas = document.get("components", {}).get("schemas", {})
    for name in _FRAMEWORK:
        schemas.pop(name, None)
    return document
