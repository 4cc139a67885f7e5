"""Playbooks (docs/api.md): the latest version of each, and one by version."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from stream.gateway.errors import ApiError, error_responses
from stream.gateway.models import PlaybookList, PlaybookView
from stream.gateway.readmodels.jobs import ReadModel
from stream.gateway.routes.shared import SECURED, GatewayDep

__all__ = ["get_playbook", "list_playbooks", "router"]

router = APIRouter(dependencies=SECURED, tags=["playbooks"])


def _playbook(model: ReadModel, key: str, version: int | None) -> PlaybookView:
    versions = sorted(model.playbooks[key])
    chosen = version if version is not None else versions[-1]
    return PlaybookView(
        key=key, version=chosen, versions=versions, spec=model.playbooks[key][chosen]
    )


@router.get(
    "/v1/playbooks",
    response_model=PlaybookList,
    operation_id="listPlaybooks",
    responses=error_responses(),
)
async def list_playbooks(gateway: GatewayDep) -> PlaybookList:
    """The latest version of every playbook (folder and registry)."""
    model = gateway.model
    return PlaybookList(playbooks=[_playbook(model, k, None) for k in sorted(model.playbooks)])


@router.get(
    "/v1/playbooks/{key}",
    response_model=PlaybookView,
    operation_id="getPlaybook",
    responses=error_responses("playbook_not_found", "invalid_query"),
)
async def get_playbook(
    gateway: GatewayDep, key: str, version: Annotated[int | None, Query(ge=1)] = None
) -> PlaybookView:
    """A playbook: the latest version, or `version`."""
    model = gateway.model
    if model.playbook(key, version) is None:
        which = f"{key!r} v{version}" if version is not None else repr(key)
        raise ApiError(404, "playbook_not_found", f"no playbook {which}")
    return _playbook(model, key, version)
