"""The email channel's pure parts (docs/agents.md, "Email"): its settings, the
email an outbound message becomes, and the text of a reply without the quoted
original. No I/O here; ``agents.channels.mail_service`` sends and receives.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.message import EmailMessage, Message
from email.utils import format_datetime, getaddresses
from typing import Literal
from urllib.parse import unquote, urlsplit

from pydantic import BaseModel, ConfigDict

from topics._errors import ContractError
from topics._journal import JournalMail, MessageRecord, inbound_message
from topics._messages import InboxEvent
from topics.replies import ReplyRoute, normal_address, reply_address, short_token

__all__ = [
    "AUTOMATIC_HEADERS",
    "MailLogEntry",
    "MailSettings",
    "SenderNotContact",
    "SmtpTarget",
    "automatic_reason",
    "from_header",
    "header_message_id",
    "inbound_message_id",
    "message_tokens",
    "outbound_email",
    "received",
    "reply_routes",
    "reply_text",
    "sender_of",
    "unverified",
]

#: How long a reply address stays good, by default (30 days).
REPLY_TTL_SECONDS = 30 * 24 * 3600
#: At most this many agent mails per contact address per window, by default
#: (docs/agents.md, "Email": "Mail loops").
PER_CONTACT = 10
PER_CONTACT_WINDOW_SECONDS = 3600


@dataclass(frozen=True)
class SmtpTarget:
    """Where outbound mail goes: ``smtp://[user:password@]host[:port]`` (STARTTLS
    when the server offers it) or ``smtps://...`` (TLS from the start)."""

    host: str
    port: int
    tls: bool
    username: str | None = None
    password: str | None = None

    @classmethod
    def parse(cls, url: str) -> SmtpTarget:
        """Read ``LEMONGRAPH_SMTP_URL``; raises ``ValueError`` naming what is wrong."""
        parts = urlsplit(url.strip())
        if parts.scheme not in ("smtp", "smtps"):
            raise ValueError(f"LEMONGRAPH_SMTP_URL={url!r}: the scheme must be smtp:// or smtps://")
        if not parts.hostname:
            raise ValueError(f"LEMONGRAPH_SMTP_URL={url!r}: no host")
        try:
            port = parts.port
        except ValueError:
            raise ValueError(f"LEMONGRAPH_SMTP_URL={url!r}: the port is not a number") from None
        tls = parts.scheme == "smtps"
        return cls(
            host=parts.hostname,
            port=port or (465 if tls else 25),
            tls=tls,
            username=unquote(parts.username) if parts.username else None,
            password=unquote(parts.password) if parts.password else None,
        )

    def shown(self) -> str:
        """The target without its password."""
        user = f"{self.username}@" if self.username else ""
        return f"{'smtps' if self.tls else 'smtp'}://{user}{self.host}:{self.port}"


@dataclass(frozen=True)
class MailSettings:
    """The email channel's settings, from the environment."""

    smtp: SmtpTarget | None
    mail_from: str
    reply_domain: str
    reply_secret: str
    reply_ttl: int = REPLY_TTL_SECONDS
    ingress_port: int = 2525
    inbound_secret: str = ""
    #: At most ``per_contact`` agent mails to one address per ``per_contact_window``
    #: seconds; the next is withheld (0: no bound).
    per_contact: int = PER_CONTACT
    per_contact_window: int = PER_CONTACT_WINDOW_SECONDS

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> MailSettings:
        """Read the settings; raises ``ValueError`` naming the variable."""
        url = env.get("LEMONGRAPH_SMTP_URL", "").strip()
        port = env.get("LEMONGRAPH_MAIL_INGRESS_PORT", "2525").strip() or "2525"
        if not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ValueError(f"LEMONGRAPH_MAIL_INGRESS_PORT={port!r} is not a port")
        ttl = env.get("LEMONGRAPH_REPLY_TTL_DAYS", "30").strip() or "30"
        if not ttl.isdigit() or int(ttl) < 1:
            raise ValueError(f"LEMONGRAPH_REPLY_TTL_DAYS={ttl!r} must be a whole number of days")
        domain = env.get("REPLY_DOMAIN", "").strip() or "reply.localhost"
        per_contact = _whole(env, "LEMONGRAPH_MAIL_PER_CONTACT", PER_CONTACT, 0)
        window = _whole(env, "LEMONGRAPH_MAIL_PER_CONTACT_WINDOW", PER_CONTACT_WINDOW_SECONDS, 1)
        return cls(
            smtp=SmtpTarget.parse(url) if url else None,
            mail_from=env.get("MAIL_FROM", "").strip() or f"lemongraph@{domain}",
            reply_domain=domain,
            reply_secret=env.get("REPLY_TOKEN_SECRET", ""),
            reply_ttl=int(ttl) * 24 * 3600,
            ingress_port=int(port),
            inbound_secret=env.get("LEMONGRAPH_INBOUND_SECRET", ""),
            per_contact=per_contact,
            per_contact_window=window,
        )


def _whole(env: Mapping[str, str], name: str, default: int, least: int) -> int:
    """A whole-number setting, at least ``least``; ``ValueError`` naming it else."""
    value = env.get(name, "").strip() or str(default)
    if not value.isdigit() or int(value) < least:
        raise ValueError(f"{name}={value!r} must be a whole number, at least {least}")
    return int(value)


def header_message_id(message_id: str, domain: str) -> str:
    """The ``Message-ID`` header of our message ``message_id``: the same for every
    send of it, so a redelivered send is recognisable."""
    digest = hashlib.sha256(message_id.encode()).hexdigest()[:32]
    return f"<lg.{digest}@{domain}>"


def inbound_message_id(header: str | None, content: bytes) -> str:
    """Our id for a received email: from its ``Message-ID`` (the same on every
    delivery of it), else from its bytes."""
    basis = header.strip().encode() if header and header.strip() else content
    return "mail-" + hashlib.sha256(basis).hexdigest()[:32]


def _expiry(written_at: str, settings: MailSettings) -> int:
    """When the reply addresses of a message written at ``written_at`` expire: then
    plus the TTL (the same on every send of it, and for every reader)."""
    written = datetime.fromisoformat(written_at.replace("Z", "+00:00"))
    if written.tzinfo is None:
        written = written.replace(tzinfo=UTC)
    return int(written.timestamp()) + settings.reply_ttl


def reply_routes(
    settings: MailSettings, message_id: str, job_key: str, contact: str, written_at: str
) -> dict[str, ReplyRoute]:
    """The short tokens of an outbound email message (its ``message_id``,
    ``job_key``, ``contact`` and ``at``), each with what it names: its reply token
    and its bounce token. What a reader of the outbound messages (the mail
    service's ``mail-log``, or ``messages``) builds its token lookup from."""
    expires = _expiry(written_at, settings)
    return {
        short_token(settings.reply_secret, message_id, kind): ReplyRoute(
            job_key, contact, expires, kind
        )
        for kind in ("reply", "bounce")
    }


def message_tokens(settings: MailSettings, record: MessageRecord) -> dict[str, ReplyRoute]:
    """The short tokens an outbound email message's mail carries (none for another
    message): what a reader of ``messages`` adds to its token lookup."""
    if record.direction != "out" or record.channel != "email" or not record.contact:
        return {}
    return reply_routes(settings, record.message_id, record.job_key, record.contact, record.at)


class MailLogEntry(BaseModel):
    """One entry of the mail service's compacted ``mail-log`` (docs/agents.md,
    "Email"). Key ``out:<message id>``: an outbound message, ``attempt`` (before
    the SMTP send), then ``sent`` or ``failed``; ``written_at`` is the message's
    ``at`` (its reply addresses expire from then). Key
    ``in:<mail id>:<kind>:<job>:<contact>``: a received mail, ``taken``. An outbound
    message over the per-contact bound is ``withheld`` (never sent, not counted)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    state: Literal["attempt", "sent", "failed", "taken", "withheld"]
    job_key: str
    message_id: str
    at: str
    contact: str | None = None
    written_at: str = ""
    detail: str = ""


def outbound_email(record: MessageRecord, settings: MailSettings, now: datetime) -> EmailMessage:
    """The email a ``direction: out``, ``channel: email`` message becomes: to its
    contact, ``Reply-To: reply+<token>@REPLY_DOMAIN`` (a short token of the
    message, :func:`reply_routes`), a ``Message-ID`` derived from the message id,
    and marked automatic (RFC 3834): ``Auto-Submitted: auto-generated``, and
    ``X-Auto-Response-Suppress: OOF, AutoReply`` for Exchange's responders."""
    if record.contact is None or "@" not in record.contact:
        raise ValueError(
            f"message {record.message_id}: the contact {record.contact!r} is not an address"
        )
    mail = EmailMessage()
    mail["From"] = settings.mail_from
    mail["To"] = record.contact
    mail["Subject"] = f"About {record.job_key}"
    mail["Reply-To"] = reply_address(
        short_token(settings.reply_secret, record.message_id), settings.reply_domain
    )
    mail["Message-ID"] = header_message_id(record.message_id, settings.reply_domain)
    mail["Date"] = format_datetime(now)
    mail["X-Lemongraph-Job"] = record.job_key
    # docs/agents.md, "Mail loops": a responder that honours these does not answer.
    mail["Auto-Submitted"] = "auto-generated"
    mail["X-Auto-Response-Suppress"] = "OOF, AutoReply"
    mail.set_content(record.text)
    return mail


def bounce_address(record: MessageRecord, settings: MailSettings) -> str:
    """The envelope sender (it becomes the ``Return-Path``): bounces come back here,
    under a bounce token (never good as a reply address)."""
    token = short_token(settings.reply_secret, record.message_id, "bounce")
    return reply_address(token, settings.reply_domain, "bounce")


_QUOTE_HEADER = re.compile(
    r"^(on .{1,200}wrote:|-{2,}\s*original message\s*-{2,}|from:\s.+|_{5,})\s*$", re.I
)


def reply_text(text: str) -> str:
    """The person's own words of a reply: the text before the quoted original
    (``On ... wrote:``, ``-----Original Message-----``, a ``From:`` block) and
    before the signature (``-- ``), without quoted (``>``) lines."""
    kept: list[str] = []
    for line in text.replace("\r\n", "\n").split("\n"):
        stripped = line.strip()
        if _QUOTE_HEADER.match(stripped) or line.rstrip("\n") == "-- ":
            break
        if stripped.startswith(">"):
            continue
        kept.append(line.rstrip())
    return "\n".join(kept).strip()


#: The longest reply text kept (characters); the rest is cut, marked.
TEXT_MAX = 20_000


class SenderNotContact(ContractError):
    """A reply whose sender (its ``From`` address) is not the contact its reply
    address was issued to: it is never that contact's message, nor anyone's."""

    def __init__(self, sender: str | None, contact: str) -> None:
        who = sender or "no single From address"
        super().__init__(f"from {who}, not {contact}, whom the reply address was issued to")
        self.sender = sender
        self.contact = contact


def received(
    route: ReplyRoute,
    message_id: str,
    sender: str | None,
    text: str,
    at: str,
    bounce_reason: str = "",
) -> tuple[MessageRecord | None, InboxEvent]:
    """What a verified reply (or bounce) writes: the person's message and its
    ``message_received`` event, or only an ``email_bounced`` event. ``text`` is
    the mail's plain text; the quoted original is taken off here. A reply from
    anyone but the token's contact (``sender``: :func:`sender_of`, compared by
    :func:`~topics.replies.normal_address`) raises :class:`SenderNotContact`."""
    if route.kind == "bounce":
        event = InboxEvent(
            key=route.job_key,
            action="email_bounced",
            properties={"contact": route.contact, "reason": bounce_reason[:200] or "bounced"},
            idempotency_key=f"bounce:{message_id}",
            source="world",
        )
        return None, event
    if sender is None or normal_address(sender) != normal_address(route.contact):
        raise SenderNotContact(sender, route.contact)
    words = reply_text(text)
    if len(words) > TEXT_MAX:
        words = words[: TEXT_MAX - 1] + "…"
    return inbound_message(
        route.job_key, message_id, "email", route.contact, words or "(no text)", at
    )


#: The longest address a journal record keeps (RFC 5321 allows 254).
ADDRESS_MAX = 320


def unverified(
    route: ReplyRoute, refusal: SenderNotContact, message_id: str, at: str, via: str
) -> JournalMail:
    """The journal record of a reply not taken: from whom, and whose reply
    address it used (``via``: ``smtp`` or ``webhook``)."""
    return JournalMail(
        job_key=route.job_key, at=at, direction="in", outcome="unverified",
        message_id=message_id, address=(refusal.sender or "")[:ADDRESS_MAX] or None,
        contact=route.contact[:ADDRESS_MAX], detail=f"{via}: {refusal}"[:500],
    )  # fmt: skip


def from_header(mail: Message) -> str | None:
    """A received mail's ``From`` header as written, unfolded; None when it has
    none or several. (The parsed header of ``policy.default`` is not used: it
    reads ``ada@example.com <mallory@evil.example>`` as Ada's address alone.)"""
    found = [str(value) for name, value in mail.raw_items() if name.lower() == "from"]
    return re.sub(r"\r?\n", "", found[0]) if len(found) == 1 else None


def sender_of(header: str | None) -> str | None:
    """The address of a ``From`` header, lower-cased; None when it names none, or
    more than one (whose reply would it be?)."""
    found = [address for _, address in getaddresses([header or ""]) if address]
    if len(found) != 1:
        return None
    local, _, domain = found[0].rpartition("@")
    return found[0].lower() if local and domain else None


#: ``Precedence`` values of mail no person wrote to us (RFC 3834, section 2).
_BULK = frozenset({"bulk", "junk", "list", "auto_reply"})
#: The headers whose presence alone marks a mail automatic: two responders' own
#: marks, and a mailing list's (RFC 2919, RFC 2369).
AUTOMATIC_HEADERS = ("x-autoreply", "x-autorespond", "list-id", "list-unsubscribe")


def automatic_reason(
    headers: Iterable[tuple[str, str]], envelope_from: str | None = None
) -> str | None:
    """Why a received mail is automatic (an auto-reply, an out-of-office note, a
    delivery report, a mailing list's mail), or None for a person's mail
    (docs/agents.md, "Mail loops"). ``headers``: its top-level headers, as
    written; ``envelope_from``: its SMTP ``MAIL FROM`` (``""`` the null sender;
    None when not known, as by the webhook). Such a mail never starts a run."""
    if envelope_from is not None and not envelope_from.strip().strip("<>").strip():
        return "the null envelope sender (an automatic notice)"
    found: dict[str, tuple[str, str]] = {}
    for name, value in headers:
        shown = " ".join(str(value).split())[:200]
        found.setdefault(name.strip().lower(), (name.strip(), shown))
    submitted = found.get("auto-submitted", ("", ""))[1].partition(";")[0].strip().lower()
    if submitted not in ("", "no"):
        return f"Auto-Submitted: {submitted}"
    precedence = found.get("precedence", ("", ""))[1].strip().lower()
    if precedence in _BULK:
        return f"Precedence: {precedence}"
    for marker in AUTOMATIC_HEADERS:
        if marker in found and found[marker][1].strip().lower() != "no":
            return f"{found[marker][0]}: {found[marker][1]}"
    if found.get("content-type", ("", ""))[1].lower().startswith("multipart/report"):
        return "a delivery report (multipart/report)"
    senders = [envelope_from or "", *(a for _, a in getaddresses([found.get("from", ("", ""))[1]]))]
    if any(s.strip("<> ").lower().partition("@")[0] == "mailer-daemon" for s in senders):
        return "from MAILER-DAEMON (a delivery report)"
    return None
