"""Reading a received mail, bounded (docs/agents.md, "Email": "What the ingress
reads"): the mail ingress parses off its event loop (:meth:`MailReader.read`,
in threads of its own), at most :data:`MAX_PARTS` MIME parts nested at most
:data:`MAX_DEPTH` deep (over either the parse stops at once:
:class:`MailTooComplex`), and decodes text in any charset, an unknown or odd one
with replacement characters, never refusing it.
"""

from __future__ import annotations

import asyncio
import codecs
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from email import policy
from email.feedparser import BytesFeedParser
from email.message import EmailMessage, Message
from email.policy import Policy
from typing import Any

from topics.mail import automatic_reason, from_header, inbound_message_id

from agents.errors import AgentsError

__all__ = [
    "MAX_DEPTH",
    "MAX_PARTS",
    "MailReader",
    "MailTooComplex",
    "ReadMail",
    "decode_text",
    "read_mail",
]

#: The most MIME parts a received mail may have (the message itself counts).
MAX_PARTS = 1000
#: The deepest a part may be nested (a multipart in a multipart..., a forwarded
#: message in a message...); the message itself is at depth 0.
MAX_DEPTH = 30
#: Bytes fed to the parser at a time: a mail over a limit stops within one chunk.
CHUNK = 64 * 1024

#: Charsets mail clients write that Python does not know by these names, and
#: what they are: the ``-i``/``-e`` (implicit, explicit) Hebrew and Arabic
#: orders are the same bytes; ``x-user-defined`` is ASCII plus bytes kept as
#: themselves (the WHATWG Encoding standard), read here as Latin-1.
CHARSET_ALIASES = {
    "iso-8859-8-i": "iso-8859-8",
    "iso-8859-8-e": "iso-8859-8",
    "iso-8859-6-i": "iso-8859-6",
    "iso-8859-6-e": "iso-8859-6",
    "x-user-defined": "latin-1",
    "unknown-8bit": "utf-8",
    "x-unknown": "utf-8",
    "ansi_x3.4-1968": "ascii",
}


class MailTooComplex(AgentsError, ValueError):
    """A mail over :data:`MAX_PARTS` or :data:`MAX_DEPTH`: refused at ``DATA``."""


@dataclass(frozen=True)
class ReadMail:
    """What the ingress takes from a received mail, read in full off the loop."""

    #: Our id of it (:func:`topics.mail.inbound_message_id`).
    message_id: str
    #: Its single ``From`` header as written, or None (:func:`topics.mail.from_header`).
    sender_header: str | None
    #: Its plain text (or its HTML's text), whatever its charset.
    text: str
    #: For a delivery report: its status, in words.
    bounce_reason: str
    #: Why it is automatic (an auto-reply, a list's, a report), or None: a person's.
    automatic: str | None


class _Part(EmailMessage):
    """A part that knows its depth and refuses a child past :data:`MAX_DEPTH`:
    the parser attaches every part it makes to its parent (``attach``)."""

    depth = 0

    def attach(self, payload: Any) -> None:
        depth = self.depth + 1
        if depth > MAX_DEPTH:
            raise MailTooComplex(f"MIME parts nested too deep (over {MAX_DEPTH} levels)")
        payload.depth = depth
        super().attach(payload)


class _Counter:
    """The parser's part factory: counts the parts it makes, refusing one past
    :data:`MAX_PARTS`."""

    def __init__(self) -> None:
        self.parts = 0

    def new_part(self, policy: Policy) -> _Part:
        self.parts += 1
        if self.parts > MAX_PARTS:
            raise MailTooComplex(f"too many MIME parts (over {MAX_PARTS})")
        return _Part(policy=policy)


def parse_bounded(content: bytes) -> EmailMessage:
    """The parsed mail; :class:`MailTooComplex` as soon as it is over a limit."""
    counted = policy.default.clone(message_factory=_Counter().new_part)
    parser = BytesFeedParser(policy=counted)
    for start in range(0, len(content), CHUNK):
        parser.feed(content[start : start + CHUNK])
    mail = parser.close()
    assert isinstance(mail, EmailMessage)
    return mail


def decode_text(payload: bytes, charset: str | None) -> str:
    """Text in ``charset``; an unknown one (or none) is read as UTF-8, and bytes
    that are not of it become replacement characters: never an error."""
    name = (charset or "utf-8").strip().strip('"').lower()
    name = CHARSET_ALIASES.get(name, name)
    try:
        codecs.lookup(name)
    except LookupError:
        name = "utf-8"
    return payload.decode(name, errors="replace")


def part_text(part: Message) -> str:
    """A text part's content, decoded (transfer encoding, then charset)."""
    payload = part.get_payload(decode=True)
    if not isinstance(payload, bytes):
        return str(part.get_payload() or "")
    return decode_text(payload, part.get_content_charset())


def plain_text(mail: EmailMessage) -> str:
    """The plain-text part (or the HTML part without its tags)."""
    body = mail.get_body(preferencelist=("plain", "html"))
    if body is None:
        return ""
    text = part_text(body)
    if body.get_content_type() == "text/html":
        text = re.sub(r"<[^>]+>", " ", text)
    return text


def bounce_reason(mail: Message) -> str:
    """A delivery report's status (its ``message/delivery-status`` part), in words."""
    for part in mail.walk():
        if part.get_content_type() == "message/delivery-status":
            payload = part.get_payload()
            if isinstance(payload, list):
                return " ".join(str(p).strip().replace("\n", " ") for p in payload)
            return str(payload)
    return str(mail.get("Subject") or "bounced")


def read_mail(content: bytes, envelope_from: str | None = None) -> ReadMail:
    """Everything the ingress takes from a mail; :class:`MailTooComplex` over a
    limit. CPU-bound: :class:`MailReader` runs it off the event loop."""
    mail = parse_bounded(content)
    headers = [(name, str(value)) for name, value in mail.raw_items()]
    return ReadMail(
        message_id=inbound_message_id(mail.get("Message-ID"), content),
        sender_header=from_header(mail),
        text=plain_text(mail),
        bounce_reason=bounce_reason(mail),
        automatic=automatic_reason(headers, envelope_from),
    )


class MailReader:
    """Reads received mail in threads of its own (two at a time), so the event
    loop goes on serving other sessions and sending while a large mail is read,
    and sending (in the loop's default threads) never waits for reading."""

    def __init__(self, threads: int = 2) -> None:
        self.pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="mail-read")

    async def read(self, content: bytes, envelope_from: str | None = None) -> ReadMail:
        """:func:`read_mail`, off the loop."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.pool, read_mail, content, envelope_from)

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
