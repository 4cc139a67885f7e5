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

Two formats, both lower-case base32 (mail systems may change the case of a
local part), their parts joined by ``.``:

- **short** (what is sent): ``r2.<mac>`` for a reply, ``b2.<mac>`` for a bounce,
  ``<mac>`` an HMAC-SHA256 of the tag and the outbound message's id (96 bits):
  ``reply+r2.<20 characters>`` is a local part of 29 characters (RFC 5321 allows
  64). It names nothing by itself: a lookup built from the outbound messages (the
  mail service's ``mail-log``; :func:`short_token` recomputes it from a message)
  says whose job and contact it is, and since when; a token not in the lookup is
  refused (``unknown``), as is one past its expiry.
- **long** (``v1.<job>.<contact>.<expiry>.<mac>``, ``b1.`` for a bounce; the
  tag is signed with the rest): self-contained, about 80 characters. No longer
  sent; still read, so that replies to mail sent before keep working.

Pure: ``now`` is an argument, nothing here reads a clock.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Callable
from dataclasses import dataclass

from topics._errors import ContractError

__all__ = [
    "BOUNCE_TOKEN_VERSION",
    "REPLY_TOKEN_VERSION",
    "SHORT_TAGS",
    "ReplyRoute",
    "ReplyTokenError",
    "TokenLookup",
    "normal_address",
    "read_reply_address",
    "read_reply_token",
    "reply_address",
    "reply_token",
    "short_token",
]

REPLY_TOKEN_VERSION = "v1"  # noqa: S105 - a format version, not a secret
#: The tag of a bounce token: signed, so a reply token cannot be relabelled one.
BOUNCE_TOKEN_VERSION = "b1"  # noqa: S105 - a format version, not a secret
#: A token's tag by the kind of address it is for.
_TAGS = {"reply": REPLY_TOKEN_VERSION, "bounce": BOUNCE_TOKEN_VERSION}
#: Bytes of the HMAC kept in the token (80 bits).
_MAC_BYTES = 10
#: A short token's tag by the kind of address it is for.
SHORT_TAGS = {"reply": "r2", "bounce": "b2"}
#: Bytes of the HMAC a short token is (96 bits: not guessed).
_SHORT_BYTES = 12


class ReplyTokenError(ContractError):
    """A token that cannot be trusted; ``reason`` says why in words: ``unsigned``
    (no token, or not one of ours), ``tampered`` (the signature does not match),
    ``unknown`` (a short token no mail sent is known to carry), ``expired``,
    ``wrong_kind`` (a bounce token as a reply address, or a reply
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


#: A short token's route (None: no mail sent carries it), from the outbound messages.
TokenLookup = Callable[[str], "ReplyRoute | None"]


def short_token(secret: str, message_id: str, kind: str = "reply") -> str:
    """The short token of the reply (``kind`` ``bounce``: bounce) address of the
    outbound message ``message_id``: the same on every send of it."""
    if not secret:
        raise ValueError("REPLY_TOKEN_SECRET is empty: reply tokens cannot be signed")
    tag = SHORT_TAGS[kind]
    digest = hmac.new(secret.encode(), f"{tag}:{message_id}".encode(), hashlib.sha256).digest()
    return f"{tag}.{_b32(digest[:_SHORT_BYTES])}"


def _read_short(token: str, now: int, kind: str, lookup: TokenLookup | None) -> ReplyRoute:
    tag = token.partition(".")[0]
    if tag != SHORT_TAGS[kind]:
        other = "bounce" if kind == "reply" else "reply"
        raise ReplyTokenError("wrong_kind", f"a {other} token is not a {kind} address")
    route = lookup(token) if lookup is not None else None
    if route is None or route.kind != kind:
        raise ReplyTokenError("unknown", "no mail sent carries this reply address")
    if now > route.expires_at:
        raise ReplyTokenError("expired", f"the token expired at {route.expires_at} (now {now})")
    return route


def read_reply_token(
    secret: str, token: str, now: int, kind: str = "reply", lookup: TokenLookup | None = None
) -> ReplyRoute:
    """Verify ``token``, for an address of ``kind``, at ``now`` (unix seconds); a
    short token by ``lookup``; raises :class:`ReplyTokenError`."""
    token = token.lower()
    if token.partition(".")[0] in SHORT_TAGS.values():
        return _read_short(token, now, kind, lookup)
    parts = token.split(".")
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


def read_reply_address(
    secret: str, address: str, domain: str, now: int, lookup: TokenLookup | None = None
) -> ReplyRoute:
    """Verify a reply or bounce address of ``domain`` (a short token by
    ``lookup``); raises :class:`ReplyTokenError`."""
    local, at, host = address.strip().strip("<>").rpartition("@")
    if not at or host.lower() != domain.lower():
        raise ReplyTokenError("unsigned", f"{address!r} is not an address of {domain}")
    kind, plus, token = local.partition("+")
    if not plus or kind.lower() not in ("reply", "bounce"):
        raise ReplyTokenError("unsigned", f"{address!r} is not a reply+ or bounce+ address")
    return read_reply_token(secret, token, now, kind.lower(), lookup)


def normal_address(address: str) -> str:
    """An address as a reply's sender is compared with the contact its token
    names: without surrounding whitespace and angle brackets, lower-case. Nothing
    else: an alias, a ``+tag`` variant or another mailbox is another address."""
    return address.strip().strip("<>").strip().lower()
