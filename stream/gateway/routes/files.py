"""File channels' files (docs/api.md, "Files"): a person's upload in, a stored
file out. The store is content-addressed (stream/runtime/filestore.py): the id
is the SHA-256 of the bytes, and the same bytes are kept once."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, File, UploadFile
from fastapi.responses import FileResponse

from stream.gateway.errors import ApiError, error_responses
from stream.gateway.models import FileValue
from stream.gateway.routes.capabilities import require
from stream.gateway.routes.shared import SECURED, GatewayDep, PrincipalDep
from stream.runtime.filestore import FileRefused, inline_type

__all__ = ["get_file", "router", "upload_file"]

router = APIRouter(dependencies=SECURED, tags=["files"])

#: The store's refusals, each with the status the API answers.
_REFUSED = {"file_too_large": 413, "media_type_not_allowed": 415, "file_not_its_type": 422}


@router.post(
    "/v1/files",
    status_code=201,
    response_model=FileValue,
    response_model_by_alias=True,
    operation_id="uploadFile",
    responses=error_responses(
        "malformed_request",
        "body_too_large",
        "invalid_body",
        "source_not_allowed",
        "file_too_large",
        "media_type_not_allowed",
        "file_not_its_type",
    ),
)
async def upload_file(
    gateway: GatewayDep, principal: PrincipalDep, file: Annotated[UploadFile, File()]
) -> FileValue:
    """Keep a file (multipart, field ``file``) and answer its file channel value
    ``{id, name, mediaType, url, bytes}``, the value an ask expecting a file is
    answered with. The media type is the part's ``Content-Type``; it must be
    allowed (415) and the bytes must look like it (422); past the size limit
    413. Only a token that may write a person's message uploads (403)."""
    require(principal, "write_message")
    assert gateway.files is not None  # build_api makes one
    data = await file.read()
    try:
        stored = gateway.files.put(file.filename or "file", file.content_type or "", data)
    except FileRefused as refused:
        raise ApiError(_REFUSED[refused.code], refused.code, refused.message) from None
    return FileValue.model_validate(stored.value(file.filename or None))


@router.get(
    "/v1/files/{file_id}",
    response_class=FileResponse,
    operation_id="getFile",
    responses={
        200: {"content": {"application/octet-stream": {}}, "description": "The file's bytes"},
        **error_responses("file_not_found"),
    },
)
async def get_file(gateway: GatewayDep, file_id: str) -> FileResponse:
    """A stored file's bytes with its stored media type. No script in it runs
    (``Content-Security-Policy: sandbox``, ``X-Content-Type-Options: nosniff``),
    and anything but an image, a PDF or text is an attachment."""
    assert gateway.files is not None
    stored = gateway.files.get(file_id)
    if stored is None:
        raise ApiError(404, "file_not_found", f"no file {file_id!r}")
    disposition = "inline" if inline_type(stored.media_type) else "attachment"
    return FileResponse(
        stored.path,
        media_type=stored.media_type,
        filename=stored.name,
        content_disposition_type=disposition,
        headers={"Cache-Control": "private, max-age=31536000, immutable"},
    )
