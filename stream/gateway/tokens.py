"""API tokens: ``lemongraph_sk_`` + a payload signed with HMAC-SHA256.

A token reads ``lemongraph_sk_<payload>.<signature>``, both parts base64url
without padding. The payload is compact JSON::

    {"v": 1, "src": "world", "name": "ops", "iat": 1767600000, "exp": 1767686400,
     "nonce": "9f2c...", "roles": ["approver"]}

``src`` is the source stamped on every event the token sends (docs/api.md, 'Tokens': the
ingress decides it, never the body); what each source may do is
``stream/gateway/routes/capabilities.py``. ``roles`` is absent or a list: ``approver`` lets a
``world`` token answer approvals (docs/api.md, "Approvals"). ``exp`` is absent for a
token that does not expire. The signature covers the payload's base64 text exactly as sent, and is
compared in constant time. Time is an argument (``now``, seconds since the epoch).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import Any, cast

import orjson

from stream.gateway.errors import ApiError
from topics import SOURCES, Source

__all__ = [
    "APPROVER",
    "PREFIX",
    "SOURCES",
    "Principal",
    "Source",
    "mint_token",
    "new_secret",
    "verify_token",
]

PREFIX = "lemongraph_sk_"
_VERSION = 1
#: The role that answers approvals.
APPROVER = "approver"


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a verified token speaks for."""

    source: Source
    name: str
    nonce: str
    issued_at: int
    expires_at: int | None
    #: Whether the token holder may answer approvals (the ``approver`` role;
    #: only a ``world`` token can hold it).
    approver: bool = False

    @property
    def ident(self) -> str:
        """What the rate limit counts by: one bucket per minted token."""
        return f"{self.name}/{self.nonce}"


def new_secret() -> str:
    """A random secret for API_TOKEN_SECRET (256 bits, URL-safe text)."""
    return secrets.token_urlsafe(32)


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    padded = text + "=" * (-len(text) % 4)
    return base64.b64decode(padded.encode("ascii"), altchars=b"-_", validate=True)


def _sign(secret: str, payload: str) -> str:
    return _b64(hmac.new(secret.encode(), payload.encode("ascii"), hashlib.sha256).digest())


def mint_token(
    secret: str,
    *,
    now: float,
    source: Source = "world",
    name: str = "default",
    ttl_seconds: float | None = None,
    approver: bool = False,
) -> str:
    """A new signed token. ``ttl_seconds`` None: it never expires. ``approver``:
    the holder answers approvals (a ``world`` token only)."""
    if not secret:
        raise ValueError("API_TOKEN_SECRET is empty: set it before minting tokens")
    if source not in SOURCES:
        raise ValueError(f"source must be one of {', '.join(SOURCES)}, not {source!r}")
    if approver and source != "world":
        raise ValueError("only a world token can be an approver's (docs/api.md, 'Approvals')")
    claims: dict[str, Any] = {
        "v": _VERSION,
        "src": source,
        "name": name,
        "iat": int(now),
        "nonce": secrets.token_hex(8),
    }
    if ttl_seconds is not None:
        claims["exp"] = int(now + ttl_seconds)
    if approver:
        claims["roles"] = [APPROVER]
    payload = _b64(orjson.dumps(claims))
    return f"{PREFIX}{payload}.{_sign(secret, payload)}"


def _unauthorized(code: str, message: str) -> ApiError:
    return ApiError(401, code, message, headers={"WWW-Authenticate": 'Bearer realm="lemongraph"'})


def verify_token(secret: str, token: str | None, *, now: float) -> Principal:
    """The principal of a valid token; :class:`ApiError` (401) with a stable code
    otherwise: ``auth_not_configured``, ``token_missing``, ``token_malformed``,
    ``token_invalid`` (bad signature) or ``token_expired``."""
    claims = _claims(_signed_payload(secret, token))
    source = claims.get("src")
    expires = claims.get("exp")
    issued = claims.get("iat", 0)
    roles = claims.get("roles", [])
    if _claims_invalid(source, issued, expires, roles):
        raise _unauthorized("token_malformed", "the token's claims are invalid")
    if expires is not None and now >= expires:
        raise _unauthorized("token_expired", "the token has expired: mint a new one")
    return Principal(
        source=cast(Source, source),
        name=str(claims.get("name", "")),
        nonce=str(claims.get("nonce", "")),
        issued_at=issued,
        expires_at=expires,
        approver=APPROVER in roles,
    )


def _signed_payload(secret: str, token: str | None) -> str:
    """The payload of ``token`` once its signature by ``secret`` is checked."""
    if not secret:
        raise _unauthorized(
            "auth_not_configured",
            "the gateway has no API_TOKEN_SECRET, so no token can be valid: set it "
            "and mint a token with `lemongraph token`",
        )
    if not token:
        raise _unauthorized(
            "token_missing",
            "send `Authorization: Bearer lemongraph_sk_...` (see `lemongraph token`)",
        )
    if not token.startswith(PREFIX) or token.count(".") != 1:
        raise _unauthorized("token_malformed", "not a lemongraph token (lemongraph_sk_...)")
    payload, signature = token[len(PREFIX) :].split(".")
    try:
        payload.encode("ascii")
        signature.encode("ascii")
    except UnicodeEncodeError:
        raise _unauthorized("token_malformed", "not a lemongraph token") from None
    # Constant time: the comparison does not stop at the first differing byte.
    if not hmac.compare_digest(_sign(secret, payload).encode(), signature.encode()):
        raise _unauthorized("token_invalid", "the token's signature does not match")
    return payload


def _claims(payload: str) -> dict[str, Any]:
    """A signed payload's claims, of this token version."""
    try:
        claims = orjson.loads(_unb64(payload))
    except (binascii.Error, ValueError, orjson.JSONDecodeError):
        raise _unauthorized("token_malformed", "the token's payload is unreadable") from None
    if not isinstance(claims, dict) or claims.get("v") != _VERSION:
        raise _unauthorized("token_malformed", "unknown token version")
    return claims


def _claims_invalid(source: object, issued: object, expires: object, roles: object) -> bool:
    """Whether the claims are not what :func:`mint_token` writes: a known source,
    integer times, a list of role names, the approver role only on a world token."""
    # ``exp`` is absent or an integer (a bool, "", [] or 0.0 is not: checked as
    # given, never through ``or``, which would let a falsy one through).
    claimed = (issued,) if expires is None else (issued, expires)
    return (
        source not in SOURCES
        or not all(isinstance(t, int) and not isinstance(t, bool) for t in claimed)
        or not isinstance(roles, list)
        or not all(isinstance(r, str) for r in roles)
        or (APPROVER in roles and source != "world")
    )
