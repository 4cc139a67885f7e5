"""The interactive API docs page (Swagger UI), served from files installed with
the project (the ``swagger-ui-py`` package ships them), so it works offline —
FastAPI's default page would load Swagger UI from a CDN."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from fastapi import APIRouter
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse

from stream.gateway.errors import ApiError

__all__ = ["asset", "docs", "router", "swagger_assets"]

_ASSETS = {
    "swagger-ui-bundle.js": "text/javascript",
    "swagger-ui.css": "text/css",
    "favicon-32x32.png": "image/png",
}


def swagger_assets() -> Path | None:
    """The folder of Swagger UI's files, when the package is installed."""
    spec = importlib.util.find_spec("swagger_ui")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "static"
    return folder if (folder / "swagger-ui-bundle.js").is_file() else None


#: ``/docs`` and its assets under ``/docs/assets/`` (not in the OpenAPI document).
router = APIRouter(include_in_schema=False)


@router.get("/docs")
async def docs() -> HTMLResponse:
    return get_swagger_ui_html(
        openapi_url="/openapi.json",
        title="lemongraph gateway — API docs",
        swagger_js_url="/docs/assets/swagger-ui-bundle.js",
        swagger_css_url="/docs/assets/swagger-ui.css",
        swagger_favicon_url="/docs/assets/favicon-32x32.png",
        swagger_ui_parameters={"persistAuthorization": True},
    )


@router.get("/docs/assets/{name}")
async def asset(name: str) -> FileResponse:
    folder = swagger_assets()
    if folder is None or name not in _ASSETS:
        raise ApiError(404, "not_found", f"no docs asset {name!r}")
    return FileResponse(folder / name, media_type=_ASSETS[name])
