"""The HTTP gateway (docs/api.md): the API, the token scheme, the read model fed by
the jobs' states (the workers' table changelog), the ``decisions`` and the
``playbooks``, and the UI page.

Modules: ``tokens`` (minting and checking ``lemongraph_sk_`` tokens), ``errors``
(the one error shape), ``guard`` and ``ratelimit`` (what every ``/v1`` call
passes first), ``readmodel``, ``schedules`` and ``views`` (the read side, fed by
the one loop of ``follow``), ``models`` (request and response bodies),
``routes/`` (one router per resource), ``api`` (which composes them),
``schedule_ops`` (schedule definitions and operator actions), ``docs`` (the
offline docs page), ``server`` (uvicorn, API and UI ports, the thread
``lemongraph dev`` uses).
"""

from stream.gateway.errors import ApiError
from stream.gateway.server import GatewayThread, addresses, run_gateway, serve, ui_address
from stream.gateway.tokens import PREFIX, SOURCES, Principal, mint_token, new_secret, verify_token

__all__ = [
    "PREFIX",
    "SOURCES",
    "ApiError",
    "GatewayThread",
    "Principal",
    "addresses",
    "mint_token",
    "new_secret",
    "run_gateway",
    "serve",
    "ui_address",
    "verify_token",
]
