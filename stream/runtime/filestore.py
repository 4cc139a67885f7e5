"""The file store of file channels (docs/flows.md, "File channels"; docs/api.md,
"Files"): the bytes a person uploads, kept once per content under
``LEMONGRAPH_DATA_DIR/files``, named by the SHA-256 of the bytes. A flow never
holds the bytes, only the file value ``{id, name, mediaType, url, bytes}``.

The gateway writes it (``POST /v1/files``) and serves it back
(``GET /v1/files/{id}``); the agents service reads it to give a model an image
(agents/flows/). Nothing here trusts a name or a media type it is given: the
type must be allowed, and the bytes must look like that type (an image's or a
PDF's signature, text that is UTF-8, JSON that parses)."""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from stream.runtime.errors import ShellError

__all__ = [
    "DEFAULT_FILE_TYPES",
    "FILE_ID",
    "FileRefused",
    "FileStore",
    "StoredFile",
    "file_url",
    "inline_type",
]

#: The media types an upload may have unless LEMONGRAPH_FILE_TYPES says otherwise:
#: images a browser and a model read, PDF, text, CSV and JSON. SVG is not among them
#: (an SVG is a document that can carry script).
DEFAULT_FILE_TYPES = (
    "image/png",
    "image/jpeg",
    "image/gif",
    "image/webp",
    "application/pdf",
    "text/plain",
    "text/markdown",
    "text/csv",
    "application/json",
)
#: A file's id: the lowercase hex SHA-256 of its bytes.
FILE_ID = re.compile(r"[0-9a-f]{64}")
#: What a stored name may hold (the rest becomes ``_``), and how long it may be.
_NAME_BAD = re.compile(r"[^\w.\- ()+]")
_NAME_MAX = 200
#: The signatures an image or a PDF starts with.
_SIGNATURES: dict[str, tuple[bytes, ...]] = {
    "image/png": (b"\x89PNG\r\n\x1a\n",),
    "image/jpeg": (b"\xff\xd8\xff",),
    "image/gif": (b"GIF87a", b"GIF89a"),
    "application/pdf": (b"%PDF-",),
}


class FileRefused(ShellError, ValueError):
    """An upload the store does not keep: ``code`` is the API's error code
    (``file_too_large``, ``media_type_not_allowed``, ``file_not_its_type``)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class StoredFile:
    """A stored file: where its bytes are and what was said of it when stored."""

    id: str
    name: str
    media_type: str
    size: int
    path: Path

    def value(self, name: str | None = None) -> dict[str, Any]:
        """The file channel's value (docs/flows.md, "File channels"), under
        ``name`` (the upload's) or the stored one."""
        return {
            "id": self.id,
            "name": name or self.name,
            "mediaType": self.media_type,
            "url": file_url(self.id),
            "bytes": self.size,
        }


def file_url(file_id: str) -> str:
    """Where the gateway serves a file (``GET /v1/files/{id}``)."""
    return f"/v1/files/{file_id}"


def inline_type(media_type: str) -> bool:
    """Whether a browser may show the file in place (an image, a PDF, text):
    anything else is served as an attachment."""
    return media_type.startswith(("image/", "text/")) or media_type == "application/pdf"


def _clean_name(name: str) -> str:
    base = name.replace("\\", "/").rsplit("/", 1)[-1].strip()
    return _NAME_BAD.sub("_", base)[:_NAME_MAX] or "file"


def _looks_like(media_type: str, data: bytes) -> bool:
    """Whether ``data`` has the signature of ``media_type`` (text: UTF-8; JSON: parses)."""
    if media_type in _SIGNATURES:
        return data.startswith(_SIGNATURES[media_type])
    if media_type == "image/webp":
        return data[:4] == b"RIFF" and data[8:12] == b"WEBP"
    if media_type == "application/json" or media_type.endswith("+json"):
        try:
            orjson.loads(data)
        except orjson.JSONDecodeError:
            return False
        return True
    if media_type.startswith("text/"):
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            return False
        return True
    return True  # a type an operator allowed whose signature we do not know


class FileStore:
    """The files under ``root`` (``LEMONGRAPH_DATA_DIR/files``): ``<id>`` holds the
    bytes and ``<id>.json`` what was said of them (name, media type) at their
    first upload. Each is written to a temporary file and renamed, so a reader
    sees a whole file or none."""

    def __init__(self, root: Path, max_bytes: int, types: tuple[str, ...]) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self.types = types

    def allowed(self, media_type: str) -> bool:
        """Whether ``media_type`` matches the allow-list (``image/*`` patterns too)."""
        return any(fnmatch.fnmatchcase(media_type, pattern) for pattern in self.types)

    def put(self, name: str, media_type: str, data: bytes) -> StoredFile:
        """Keep ``data`` (once per content) and return it; :class:`FileRefused`
        past the size limit, for a type not allowed, or bytes not of the type."""
        media_type = media_type.split(";", 1)[0].strip().lower()
        if len(data) > self.max_bytes:
            raise FileRefused("file_too_large", f"the file is larger than {self.max_bytes} bytes")
        if not media_type or not self.allowed(media_type):
            raise FileRefused(
                "media_type_not_allowed",
                f"files of type {media_type or '(none)'!r} are not accepted here "
                f"(accepted: {', '.join(self.types)})",
            )
        if not _looks_like(media_type, data):
            raise FileRefused(
                "file_not_its_type", f"the bytes are not those of a {media_type} file"
            )
        file_id = hashlib.sha256(data).hexdigest()
        earlier = self.get(file_id)
        if earlier is not None:
            return earlier
        self.root.mkdir(parents=True, exist_ok=True)
        meta = orjson.dumps({"name": _clean_name(name), "mediaType": media_type})
        self._write(self.root / file_id, data)
        self._write(self.root / f"{file_id}.json", meta)
        stored = self.get(file_id)
        assert stored is not None
        return stored

    def get(self, file_id: str) -> StoredFile | None:
        """The stored file ``file_id`` (None: not a file id, or not stored)."""
        if FILE_ID.fullmatch(file_id) is None:
            return None
        path = self.root / file_id
        try:
            meta = orjson.loads((self.root / f"{file_id}.json").read_bytes())
            size = path.stat().st_size
        except (OSError, orjson.JSONDecodeError):
            return None
        return StoredFile(file_id, str(meta["name"]), str(meta["mediaType"]), size, path)

    def _write(self, target: Path, data: bytes) -> None:
        handle, temporary = tempfile.mkstemp(dir=self.root, prefix=".upload-")
        try:
            with os.fdopen(handle, "wb") as out:
                out.write(data)
            Path(temporary).replace(target)
        except BaseException:
            with contextlib.suppress(OSError):
                Path(temporary).unlink()
            raise
