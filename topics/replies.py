"""Reply tokens: the signed routing part of an email channel's reply address
(docs/kafka.md, "Reply addresses").

An email the agents send carries ``Reply-To: reply+<token>@REPLY_DOMAIN``. The
token names the job, the contact it was sent to and when it expires, signed
with HMAC-SHA256 under ``REPLY_TOKEN_SECRET``; the mail ingress (and the inbound
webhook) take a reply only when the token verifies, and only from the contact it
names (:func:`normal_address`). A bounce comes back to
``bounce+<token>@REPLY_DOMAIN`` (the message's Return-Path) with a token of its
own kind: a bounce token is never a reply address, nor a reply token a bounce
address.

The token is lower-case base32 (mail systems may change the case of a local
part), its parts joined by ``.``: ``v1.<job>.<contact>.<expiry>.<mac>`` for a
reply, ``b1.`` for a bounce; the tag is signed with the rest. Pure: ``now`` is an
argument, nothing here reads a clock.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from dataclasses import dataclass

from topics._errors import ContractError

__all__ = [
    "BOUNCE_TOKEN_VERSION",
    "REPLY_TOKEN_VERSION",
    "ReplyRoute",
    "ReplyTokenError",
    "normal_address",
    "read_reply_address",
    "read_reply_token",
    "reply_address",
    "reply_token",
]

REPLY_TOKEN_VERSION = "v1"  # noqa: S105 - a format version, not a secret
#: The tag of a bounce token: signed, so a reply token cannot be relabelled one.
BOUNCE_TOKEN_VERSION = "b1"  # noqa: S105 - a format version, not a secret
#: A token's tag by the kind of address it is for.
_TAGS = {"reply": REPLY_TOKEN_VERSION, "bounce": BOUNCE_TOKEN_VERSION}
#: Bytes of the HMAC kept in the token (80 bits).
_MAC_BYTES = 10


class ReplyTokenError(ContractError):
    """A token that cannot be trusted; ``reason`` says why in words: ``unsigned``
    (no token, or not one of ours), ``tampered`` (the signature does not match),
    ``expired``, ``wrong_kind`` (a bounce token as a reply address, or a reply
    token as a bounce address)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


@dataclass(frozen=True)
class ReplyRoute:
    """What a verified token names."""

    job_key: str
    contact: str
    #: Unix seconds after which the token is refused.
    expires_at: int
    #: ``reply`` (the person answers) or ``bounce`` (the message bounced).
    kind: str = "reply"


def _b32(raw: bytes) -> str:
    return base64.b32encode(raw).decode().rstrip("=").lower()


def _unb32(text: str) -> bytes:
    padded = text.upper() + "=" * (-len(text) % 8)
    return base64.b32decode(padded)


def _mac(secret: str, body: str) -> str:
    digest = hmac.new(secret.encode(), body.encode(), hashlib.sha256).digest()
    return _b32(digest[:_MAC_BYTES])


def reply_token(
    secret: str, job_key: str, contact: str, expires_at: int, kind: str = "reply"
) -> str:
    """The signed token for replies (``kind`` ``bounce``: bounces) of mail to
    ``contact`` about ``job_key``."""
    if not secret:
        raise ValueError("REPLY_TOKEN_SECRET is empty: reply tokens cannot be signed")
    body = ".".join(
        (
            _TAGS[kind],
            _b32(job_key.encode()),
            _b32(contact.encode()),
            _b32(expires_at.to_bytes(5, "big")),
        )
    )
    return f"{body}.{_mac(secret, body)}"


def read_reply_token(secret: str, token: str, now: int, kind: str = "reply") -> ReplyRoute:
    """Verify ``token``, for an address of ``kind``, at ``now`` (unix seconds);
    raises :class:`ReplyTokenError`."""
    parts = token.lower().split(".")
    if len(parts) != 5 or parts[0] not in _TAGS.values():
        raise ReplyTokenError("unsigned", "not a lemongraph reply token")
    body = ".".join(parts[:4])
    if not secret or not hmac.compare_digest(_mac(secret, body), parts[4]):
        raise ReplyTokenError("tampered", "the token's signature does not match")
    if parts[0] != _TAGS[kind]:
        other = "bounce" if kind == "reply" else "reply"
        raise ReplyTokenError("wrong_kind", f"a {other} token is not a {kind} address")
    try:
        job_key = _unb32(parts[1]).decode()
        contact = _unb32(parts[2]).decode()
        expires_at = int.from_bytes(_unb32(parts[3]), "big")
    except (ValueError, UnicodeDecodeError):  # signed by us, so this is a bug of ours
        raise ReplyTokenError("tampered", "the token's fields do not decode") from None
    if now > expires_at:
        raise ReplyTokenError("expired", f"the token expired at {expires_at} (now {now})")
    return ReplyRoute(job_key, contact, expires_at, kind)


def reply_address(token: str, domain: str, kind: str = "reply") -> str:
    """``reply+<token>@domain`` (or ``bounce+...``)."""
    return f"{kind}+{token}@{domain}"


def read_reply_address(secret: str, address: str, domain: str, now: int) -> ReplyRoute:
    """Verify a reply or bounce address of ``domain``; raises :class:`ReplyTokenError`."""
    local, at, host = address.strip().strip("<>").rpartition("@")
    if not at or host.lower() != domain.lower():
        raise ReplyTokenError("unsigned", f"{address!r} is not an address of {domain}")
    kind, plus, token = local.partition("+")
    if not plus or kind.lower() not in ("reply", "bounce"):
        raise ReplyTokenError("unsigned", f"{address!r} is not a reply+ or bounce+ address")
    return read_reply_token(secret, token, now, kind.lower())


def normal_address(address: str) -> str:
    """An address as a reply's sender is compared with the contact its token
    names: without surrounding whitespace and angle brackets, lower-case. Nothing
    else: an alias, a ``+tag`` variant or another mailbox is another address."""
    return address.strip().strip("<>").strip().lower()
