"""Under ``lemongraph dev`` (docs/api.md): what its local mail catcher caught."""

from __future__ import annotations

from fastapi import APIRouter

from stream.gateway.errors import ApiError, error_responses
from stream.gateway.models import DevMailList
from stream.gateway.routes.shared import SECURED, GatewayDep

__all__ = ["dev_mail", "router"]

router = APIRouter(dependencies=SECURED, tags=["dev"])


@router.get(
    "/v1/dev/mail",
    response_model=DevMailList,
    operation_id="listDevMail",
    responses=error_responses("not_dev"),
)
async def dev_mail(gateway: GatewayDep) -> DevMailList:
    """Under `lemongraph dev` with no LEMONGRAPH_SMTP_URL: the emails the agents
    sent, as its local mail catcher received them (newest 200, oldest first).
    404 `not_dev` anywhere else."""
    if gateway.dev_mail is None:
        raise ApiError(404, "not_dev", "no mail catcher here: only `lemongraph dev` has one")
    return DevMailList(mails=gateway.dev_mail())
