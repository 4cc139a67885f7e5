"""``lemongraph mail-ingress``: the email channel (docs/agents.md, "Email").

One process, two directions:

- **out**: it reads ``messages`` in its own consumer group (``<prefix>mail``) and
  sends every ``direction: out``, ``channel: email`` message over SMTP
  (``LEMONGRAPH_SMTP_URL``), once per ``message_id``: the group shares a
  compacted sent-log (``mail-log``, :mod:`agents.channels.mail_log`), written
  ``attempt`` before the send and ``sent`` after, and read to its end before
  each send; so a re-delivered record, or a partition another process had,
  sends nothing. Only a process killed between the two entries leaves a message
  ``attempt``-ed: its next owner sends it again, with the same ``Message-ID``
  (the receiving side can recognise it; not sending could lose it). A temporary
  SMTP failure is retried (the partition waits); a permanent one is journaled
  and the next message goes on.
- **in**: an SMTP server (aiosmtpd) on ``LEMONGRAPH_MAIL_INGRESS_PORT`` takes mail
  for ``reply+<token>@REPLY_DOMAIN`` and ``bounce+<token>@REPLY_DOMAIN`` only. The
  token is verified at ``RCPT`` (a short token by the sent-log's lookup):
  unsigned, tampered, unknown, expired or of the other kind (a bounce token as a
  reply address, or the reverse) is ``550``, journaled, and nothing is written.
  A reply from its token's contact becomes a ``messages`` record and a
  ``message_received`` event, once per mail (its ``Message-ID``, kept in the
  sent-log); from anyone else it is journaled ``unverified``, writes nothing,
  and ``DATA`` is answered ``550``. A bounce becomes an ``email_bounced`` event.
  A mail is read off the event loop, bounded (:mod:`agents.channels.mail_read`:
  too many parts, or nested too deep, is ``554`` and journaled); an automatic
  one (an auto-reply, a list's, a report) is journaled ``automatic`` and writes
  nothing: it never starts a run. Agent mail is bounded per contact
  (``LEMONGRAPH_MAIL_PER_CONTACT``): past it a message is withheld, journaled as
  a loop (docs/agents.md, "Mail loops").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import smtplib
import ssl
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from email.message import EmailMessage
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiosmtpd.smtp import SMTP, Envelope, Session
from compiler import to_iso
from opentelemetry.trace import SpanKind
from stream.runtime.broker import ensure_all_topics
from stream.runtime.config import Settings
from stream.runtime.kafka import bootstrap_of, client_kwargs, compression_type, new_consumer
from stream.runtime.tracing import current_headers, resumed, span
from topics import JournalMail, MessageRecord, Topics, encode
from topics.mail import (
    MailLogEntry,
    MailSettings,
    SenderNotContact,
    bounce_address,
    outbound_email,
    received,
    sender_of,
    unverified,
)
from topics.replies import SHORT_TAGS, ReplyRoute, ReplyTokenError, read_reply_address

from agents.channels.mail_log import MailLog
from agents.channels.mail_read import (
    MailReader,
    MailTooComplex,
    ReadMail,
    parse_bounded,
    plain_text,
)

__all__ = ["MailCatcher", "MailChannel"]

log = logging.getLogger(__name__)

#: Bytes an SMTP session reads from its socket at a time (:class:`_Session`).
READ_CHUNK = 16 * 1024
#: Seconds between tries while the SMTP server is unreachable or says "later".
RETRY_SECONDS = (1, 2, 5, 10, 30)


class MailChannel:
    """The email channel: outbound sender and inbound SMTP server."""

    def __init__(
        self,
        settings: Settings,
        mail: MailSettings,
        say: Callable[[str], None] = print,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.settings = settings
        self.mail = mail
        self.say = say
        self.clock = clock or (lambda: datetime.now(UTC))
        self.topics = Topics(settings.topic_prefix)
        #: The group's sent-log (and the ids of the mail received).
        self.log = MailLog(settings, mail, self._produce)
        self.producer: AIOKafkaProducer | None = None
        #: Set when the process is asked to stop: a send being retried gives up.
        self.stopping = asyncio.Event()
        #: Reads received mail off the event loop (agents/channels/mail_read.py).
        self.reader = MailReader()
        self.counts = {"sent": 0, "duplicate": 0, "failed": 0, "received": 0, "refused": 0,
                       "unverified": 0, "again": 0, "automatic": 0, "withheld": 0}  # fmt: skip

    # -- writing --------------------------------------------------------------------

    async def _produce(self, topic: str, key: str, value: bytes) -> None:
        assert self.producer is not None
        await self.producer.send_and_wait(
            topic, value, key=key.encode(), headers=current_headers()
        )  # the current span's trace: docs/operations.md, "Tracing"

    async def journal(self, entry: JournalMail) -> None:
        """A record of the channel on ``journal``."""
        await self._produce(self.topics.journal, entry.job_key, encode(entry))

    def _now(self) -> str:
        return to_iso(self.clock())

    # -- out ------------------------------------------------------------------------

    async def deliver(self, value: bytes | None) -> str:
        """Send one ``messages`` record if it is an outbound email not sent yet;
        what happened (``sent``, ``duplicate``, ``failed``, ``skipped``,
        ``withheld``: over the per-contact bound, or ``stopped``: asked to stop
        while the server was unreachable)."""
        try:
            record = MessageRecord.model_validate_json(value or b"")
        except ValueError:
            return "skipped"  # not a message (the agents service dead-letters it)
        if record.direction != "out" or record.channel != "email":
            return "skipped"
        key = f"out:{record.message_id}"
        # What the group sent until now (this partition may have been another
        # process's a moment ago) is known before this message is sent.
        await self.log.catch_up()
        before = self.log.get(key)
        if before is not None and before.state != "attempt":
            self.counts["duplicate"] += 1
            return "duplicate"
        if self.mail.smtp is None:
            raise RuntimeError("no LEMONGRAPH_SMTP_URL: outbound email cannot be sent")
        if before is None and await self._over_bound(record):
            return "withheld"
        now = self.clock()
        try:
            email = outbound_email(record, self.mail, now)
        except ValueError as exc:
            return await self._failed(record, str(exc))
        # Before the send: its reply addresses are known to the group from here
        # on, and a process killed during the send leaves this entry behind.
        await self.log.write(key, self._entry(record, "attempt"))
        sent = await self._send_retrying(email, bounce_address(record, self.mail), record)
        if sent != "sent":
            return sent
        await self.log.write(key, self._entry(record, "sent"))
        self.counts["sent"] += 1
        detail = str(email["Message-ID"])
        if before is not None:
            # The one ambiguous case: an earlier attempt was cut off (its process
            # killed during the send); sent again under the same Message-ID.
            self.counts["again"] += 1
            detail += " (again: an earlier attempt of it was interrupted)"
        await self.journal(
            JournalMail(
                job_key=record.job_key, at=self._now(), direction="out", outcome="sent",
                message_id=record.message_id, address=record.contact, detail=detail,
            )
        )  # fmt: skip
        return "sent"

    async def _over_bound(self, record: MessageRecord) -> bool:
        """True, withheld and journaled as a loop, when the group has sent
        ``per_contact`` mails to this message's contact within the window
        (docs/agents.md, "Mail loops"). An attempt cut off before is not counted
        again: it is sent again whatever the bound."""
        bound, window = self.mail.per_contact, self.mail.per_contact_window
        contact = str(record.contact or "")
        if bound <= 0 or not contact:
            return False
        sent = self.log.sent_to(contact, self.clock() - timedelta(seconds=window))
        if sent < bound:
            return False
        why = (
            f"withheld: loop: {sent} mails to {contact[:320]} within {window} s already "
            f"(LEMONGRAPH_MAIL_PER_CONTACT={bound}, LEMONGRAPH_MAIL_PER_CONTACT_WINDOW={window})"
        )
        await self.log.write(f"out:{record.message_id}", self._entry(record, "withheld", why))
        self.counts["withheld"] += 1
        log.warning("mail: %s: %s", record.message_id, why)
        await self._journal_out(record, "refused", why)
        return True

    async def _journal_out(self, record: MessageRecord, outcome: str, detail: str) -> None:
        """The journal record of an outbound message not sent."""
        entry = {"job_key": record.job_key, "at": self._now(), "direction": "out",
                 "outcome": outcome, "message_id": record.message_id,
                 "address": record.contact, "detail": detail[:500]}  # fmt: skip
        await self.journal(JournalMail.model_validate(entry))

    def _entry(self, record: MessageRecord, state: str, detail: str = "") -> MailLogEntry:
        return MailLogEntry.model_validate(
            {"state": state, "job_key": record.job_key, "message_id": record.message_id,
             "at": self._now(), "contact": record.contact, "written_at": record.at,
             "detail": detail}
        )  # fmt: skip

    async def _send_retrying(
        self, email: EmailMessage, envelope_from: str, record: MessageRecord
    ) -> str:
        """Send, waiting out a server that is down or busy: ``sent``, ``failed``
        (refused for good, journaled) or ``stopped``."""
        assert self.mail.smtp is not None
        attempt = 0
        while True:
            try:
                await asyncio.to_thread(self._send, email, envelope_from, str(record.contact))
                return "sent"
            except (smtplib.SMTPRecipientsRefused, smtplib.SMTPDataError) as exc:
                code = _code(exc)
                if code is not None and code >= 500:
                    return await self._failed(record, f"refused by the server: {exc}")
                problem = f"said to try later: {exc}"
            except (OSError, smtplib.SMTPException) as exc:
                problem = f"unreachable: {exc}"
            # A server that is down or busy is no reason to drop the mail: wait and
            # try again (this partition waits with it).
            wait = RETRY_SECONDS[min(attempt, len(RETRY_SECONDS) - 1)]
            log.warning("mail: %s %s; again in %ds", self.mail.smtp.shown(), problem, wait)
            attempt += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), wait)
            if self.stopping.is_set():
                return "stopped"  # not sent, not committed: the next run sends it

    async def _failed(self, record: MessageRecord, why: str) -> str:
        await self.log.write(f"out:{record.message_id}", self._entry(record, "failed", why[:500]))
        self.counts["failed"] += 1
        await self._journal_out(record, "failed", why)
        return "failed"

    def _send(self, email: EmailMessage, envelope_from: str, to: str) -> None:
        target = self.mail.smtp
        assert target is not None
        client: smtplib.SMTP
        if target.tls:
            client = smtplib.SMTP_SSL(target.host, target.port, timeout=30,
                                      context=ssl.create_default_context())  # fmt: skip
        else:
            client = smtplib.SMTP(target.host, target.port, timeout=30)
        with client:
            client.ehlo()
            if not target.tls and client.has_extn("starttls"):
                client.starttls(context=ssl.create_default_context())
                client.ehlo()
            if target.username:
                client.login(target.username, target.password or "")
            client.send_message(email, from_addr=envelope_from, to_addrs=[to])

    async def follow(self, stopping: asyncio.Event) -> None:
        """Send what ``messages`` holds for email, committing as it goes."""
        consumer = new_consumer(
            bootstrap_of(self.settings.kafka_url or ""),
            self.settings.kafka_security,
            topics=(self.topics.messages,),
            group=f"{self.settings.topic_prefix}mail",
            offsets="earliest",
        )
        await consumer.start()
        try:
            while not stopping.is_set():
                batches = await consumer.getmany(timeout_ms=500, max_records=100)
                for tp, records in batches.items():
                    if await self._deliver_batch(consumer, tp, records) == "stopped":
                        return  # the rest is not committed: what was sent is logged
                if batches:
                    await consumer.commit()
        finally:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(consumer.stop(), 5)

    async def _deliver_batch(
        self, consumer: AIOKafkaConsumer, tp: TopicPartition, records: list[Any]
    ) -> str:
        """Send a partition's records in order, committing each email sent at once;
        ``stopped`` when asked to stop. A partition moved to another process
        meanwhile (a rebalance) is left at once: its new owner reads it from the
        last commit, and the sent-log tells it what was sent."""
        for r in records:
            if tp not in consumer.assignment():
                return "moved"
            # An email sent is a span of the trace its message record carries
            # (docs/operations.md, "Tracing"): the outcome, never the text.
            headers = [(str(n), bytes(v or b"")) for n, v in r.headers or ()]
            with resumed("mail-ingress", headers), span(
                "mail-ingress", "send_message email", {"lemongraph.message.channel": "email"},
                SpanKind.PRODUCER,
            ) as traced:  # fmt: skip
                outcome = await self.deliver(r.value)
                if traced is not None:
                    traced.set_attribute("lemongraph.mail.outcome", outcome)
            if outcome == "stopped":
                return outcome
            if outcome in ("sent", "failed", "withheld"):
                await consumer.commit({tp: r.offset + 1})
        return "done"

    # -- in -------------------------------------------------------------------------

    async def check_recipient(self, address: str, mail_from: str | None) -> ReplyRoute | str:
        """The route of a reply or bounce address, or the SMTP refusal (journaled)."""
        token = address.strip().strip("<>").rpartition("@")[0].partition("+")[2].lower()
        if token.partition(".")[0] in SHORT_TAGS.values():
            await self.log.route(token)  # not known yet: the log is read to its end first
        try:
            return read_reply_address(
                self.mail.reply_secret,
                address,
                self.mail.reply_domain,
                int(time.time()),
                self.log.tokens.get,
            )
        except ReplyTokenError as exc:
            self.counts["refused"] += 1
            await self.journal(
                JournalMail(
                    job_key="", at=self._now(), direction="in", outcome="refused",
                    address=mail_from, detail=f"{exc.reason}: to {address}: {exc}"[:500],
                )
            )  # fmt: skip
            return f"550 5.7.1 Refused: {exc.reason} reply address"

    async def read(self, content: bytes, envelope: Envelope) -> ReadMail | str:
        """The mail read off the event loop (agents/channels/mail_read.py), or the
        ``DATA`` refusal of one over its limits or unreadable, journaled for each
        job it was for."""
        try:
            return await self.reader.read(content, envelope.mail_from)
        except MailTooComplex as exc:
            why, answer = str(exc), f"554 5.6.0 Refused: {exc}"
        except Exception as exc:  # a mail the parser cannot read: said, not a bare 500
            log.exception("mail: a mail from %s could not be read", envelope.mail_from)
            why, answer = f"unreadable: {exc!r}"[:300], "554 5.6.0 Refused: the mail cannot be read"
        routes: list[ReplyRoute] = getattr(envelope, "lemongraph_routes", [])
        for route in routes:
            self.counts["refused"] += 1
            await self.journal(
                JournalMail(
                    job_key=route.job_key, at=self._now(), direction="in", outcome="refused",
                    address=envelope.mail_from, contact=route.contact, detail=why[:500],
                )
            )  # fmt: skip
        return answer

    async def take(self, route: ReplyRoute, mail: ReadMail) -> bool:
        """A mail that passed ``RCPT``: a reply (message and event) or a bounce;
        False for a reply not from its token's contact (journaled, nothing written).
        An automatic reply is journaled and writes nothing (it never starts a run)."""
        # A mail taken starts a trace (docs/operations.md, "Tracing"): the job,
        # never the sender or the text.
        attributes = {"lemongraph.job.key": route.job_key, "lemongraph.mail.kind": route.kind}
        with span("mail-ingress", f"receive_message email {route.kind}", attributes,
                  SpanKind.SERVER):  # fmt: skip
            return await self._take(route, mail)

    async def _take(self, route: ReplyRoute, mail: ReadMail) -> bool:
        message_id = mail.message_id
        sender = sender_of(mail.sender_header)
        if route.kind == "reply" and mail.automatic is not None:
            await self._automatic(route, mail, sender)
            return True
        try:
            record, event = received(
                route, message_id, sender, mail.text, self._now(), mail.bounce_reason
            )
        except SenderNotContact as refusal:
            self.counts["unverified"] += 1
            await self.journal(unverified(route, refusal, message_id, self._now(), "smtp"))
            return False
        key = f"in:{message_id}:{route.kind}:{route.job_key}:{route.contact}"
        if self.log.get(key) is None:
            await self.log.catch_up()  # taken by another process of the group?
        if self.log.get(key) is not None:
            self.counts["duplicate"] += 1
            return True  # delivered again: written once already
        if record is not None:
            await self._produce(self.topics.messages, route.job_key, encode(record))
        await self._produce(self.topics.inbox, route.job_key, encode(event.compact()))
        # After the writes: a process killed between them and this entry writes
        # the mail again when it is delivered again (under the same message id).
        entry = {"state": "taken", "job_key": route.job_key, "message_id": message_id,
                 "at": self._now(), "contact": route.contact}  # fmt: skip
        await self.log.write(key, MailLogEntry.model_validate(entry))
        self.counts["received"] += 1
        await self.journal(
            JournalMail(
                job_key=route.job_key, at=self._now(), direction="in",
                outcome="received" if record is not None else "bounced",
                message_id=message_id, address=sender,
            )
        )  # fmt: skip
        return True

    async def _automatic(self, route: ReplyRoute, mail: ReadMail, sender: str | None) -> None:
        """An auto-reply (or a list's mail, or a report) at a reply address: taken
        (250) so that nothing bounces, journaled, and nothing written."""
        self.counts["automatic"] += 1
        await self.journal(
            JournalMail(
                job_key=route.job_key, at=self._now(), direction="in", outcome="automatic",
                message_id=mail.message_id, address=sender, contact=route.contact,
                detail=f"not a person's reply, no run: {mail.automatic}"[:500],
            )
        )  # fmt: skip

    async def serve(self, host: str, port: int) -> asyncio.Server:
        """Start the SMTP server in this loop."""
        handler = _Handler(self)
        loop = asyncio.get_running_loop()
        return await loop.create_server(
            lambda: _Session(handler, hostname=self.mail.reply_domain, data_size_limit=10_000_000),
            host,
            port,
        )

    # -- running --------------------------------------------------------------------

    async def run(self, stopping: asyncio.Event, host: str = "127.0.0.1") -> None:
        """Both directions until ``stopping`` is set."""
        self.stopping = stopping
        self.producer = AIOKafkaProducer(
            **client_kwargs(
                bootstrap_of(self.settings.kafka_url or ""), self.settings.kafka_security
            ),
            linger_ms=5,
            compression_type=compression_type(self.settings.kafka_compression),
        )
        await self.producer.start()
        await ensure_all_topics(self.settings)  # the mail-log among them
        await self.log.start()
        server = await self.serve(host, self.mail.ingress_port)
        bound = server.sockets[0].getsockname()[1] if server.sockets else self.mail.ingress_port
        out = self.mail.smtp.shown() if self.mail.smtp else "nowhere (no LEMONGRAPH_SMTP_URL)"
        self.say(
            f"mail: ready: replies to reply+...@{self.mail.reply_domain} on SMTP port {bound}; "
            f"outbound to {out}"
        )
        try:
            if self.mail.smtp is not None:
                await self.follow(stopping)
            else:
                await stopping.wait()
        finally:
            server.close()
            # A broker that is gone must not hold the stop up (a dead broker is
            # often why this process is being stopped).
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(server.wait_closed(), 5)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.producer.stop(), 5)
            await self.log.stop()
            self.reader.close()


class _Session(SMTP):
    """aiosmtpd's session, reading at most :data:`READ_CHUNK` bytes a turn of the
    event loop: it parses the DATA of a mail line by line, on the loop, so a large
    mail of short lines (a MIME bomb) would otherwise hold the loop for a whole
    socket read (256 KiB, some 25,000 lines) at a time, and every other session,
    the sending and the broker's client with it (docs/agents.md, "What the
    ingress reads")."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        if isinstance(getattr(transport, "max_size", None), int):
            transport.max_size = READ_CHUNK  # type: ignore[attr-defined]


class _Handler:
    """aiosmtpd's hooks: refuse at RCPT what is not ours, take the mail at DATA."""

    def __init__(self, channel: MailChannel) -> None:
        self.channel = channel

    async def handle_RCPT(
        self, server: SMTP, session: Session, envelope: Envelope, address: str,
        rcpt_options: list[str],
    ) -> str:  # fmt: skip
        route = await self.channel.check_recipient(address, envelope.mail_from)
        if isinstance(route, str):
            return route
        envelope.rcpt_tos.append(address)
        routes: list[ReplyRoute] = getattr(envelope, "lemongraph_routes", [])
        routes.append(route)
        envelope.lemongraph_routes = routes  # type: ignore[attr-defined]
        return "250 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        content = envelope.original_content or envelope.content
        raw = content if isinstance(content, bytes) else str(content).encode()
        mail = await self.channel.read(raw, envelope)
        if isinstance(mail, str):
            return mail  # over the limits: refused, journaled
        routes: list[ReplyRoute] = getattr(envelope, "lemongraph_routes", [])
        taken = [await self.channel.take(route, mail) for route in routes]
        if taken and not any(taken):
            # Refused in the session rather than accepted and dropped: nothing of
            # ours bounces to a forged sender, and a real person's server (or the
            # forwarder's, under SRS) tells them their reply was not taken.
            return (
                "550 5.7.1 Not taken: the sender is not the contact this reply address "
                "was sent to; reply from that address"
            )
        return "250 Message accepted"


def _code(exc: Exception) -> int | None:
    if isinstance(exc, smtplib.SMTPRecipientsRefused):
        codes = [code for code, _ in exc.recipients.values()]
        return max(codes) if codes else None
    return getattr(exc, "smtp_code", None)


class MailCatcher:
    """A local SMTP server that keeps what it is sent, in memory (the newest 200):
    ``lemongraph dev``'s outbound mail goes here when no LEMONGRAPH_SMTP_URL is
    set, and the gateway shows it at ``GET /v1/dev/mail``."""

    KEPT = 200

    def __init__(self, host: str, port: int) -> None:
        from aiosmtpd.controller import Controller

        self.caught: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self.controller = Controller(self, hostname=host, port=port)
        self.url = f"smtp://{host}:{port}"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        content = envelope.original_content or envelope.content
        raw = content if isinstance(content, bytes) else str(content).encode()
        try:
            mail = parse_bounded(raw)  # in the catcher's own thread
        except MailTooComplex as exc:
            return f"554 5.6.0 Refused: {exc}"
        entry = {
            "at": to_iso(datetime.now(UTC)),
            "envelope_from": envelope.mail_from,
            "to": list(envelope.rcpt_tos),
            "subject": str(mail.get("Subject") or ""),
            "reply_to": str(mail.get("Reply-To") or ""),
            "message_id": str(mail.get("Message-ID") or ""),
            "job_key": str(mail.get("X-Lemongraph-Job") or ""),
            "text": plain_text(mail).strip(),
        }
        with self._lock:
            self.caught.append(entry)
            del self.caught[: -self.KEPT]
        return "250 OK"

    def mails(self) -> list[dict[str, Any]]:
        """What was caught, oldest first."""
        with self._lock:
            return list(self.caught)

    def start(self) -> MailCatcher:
        self.controller.start()
        return self

    def stop(self) -> None:
        self.controller.stop()
