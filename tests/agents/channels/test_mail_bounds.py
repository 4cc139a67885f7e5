"""The mail ingress bounded under any input, over real SMTP on a real broker
(docs/agents.md, "Mail loops" and "What the ingress reads"): a MIME bomb is
refused at DATA while the ingress goes on serving others (sending included);
1,000-deep nesting is refused with a 5xx and journaled; replies in odd charsets
are taken; auto-replies, list mail and reports write nothing; agent mail to one
contact is bounded, the rest withheld and journaled as a loop."""

from __future__ import annotations

import email
import smtplib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from email import policy
from email.message import EmailMessage
from typing import Any

import pytest
from aiosmtpd.controller import Controller

from stream.runtime.broker import free_port
from tests.lanes import Lane, wait_for
from topics import MessageRecord, encode
from topics.replies import reply_address, reply_token

pytestmark = [pytest.mark.broker, pytest.mark.timeout(180)]

SECRET = "a-long-random-reply-secret"
DOMAIN = "reply.test"
#: Agent mails per contact the ingress under test lets through.
BOUND = 3


class Sink:
    """A real SMTP server that keeps what it is sent: (recipient, mail)."""

    def __init__(self) -> None:
        self.mails: list[tuple[str, EmailMessage]] = []
        self.lock = threading.Lock()

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        parsed = email.message_from_bytes(envelope.content, policy=policy.default)
        assert isinstance(parsed, EmailMessage)
        with self.lock:
            self.mails.extend((rcpt, parsed) for rcpt in envelope.rcpt_tos)
        return "250 OK"

    def to(self, address: str) -> list[EmailMessage]:
        with self.lock:
            return [mail for rcpt, mail in self.mails if rcpt == address]


@dataclass
class Ingress:
    lane: Lane
    port: int
    sink: Sink

    def journal(self, job_key: str) -> list[dict[str, Any]]:
        return [
            r["value"]
            for r in self.lane.read("journal")
            if r["value"].get("type") == "journal.mail" and r["value"]["job_key"] == job_key
        ]

    def journaled(self, job_key: str, count: int) -> list[dict[str, Any]]:
        """The job's mail journal, once it holds ``count`` records."""
        journal: list[dict[str, Any]] = []

        def enough() -> bool:
            journal[:] = self.journal(job_key)
            return len(journal) >= count

        wait_for(enough, what=f"{count} journal.mail records of {job_key}")
        return journal

    def messages(self, job_key: str) -> list[dict[str, Any]]:
        return [r["value"] for r in self.lane.read("messages") if r["key"] == job_key]


@pytest.fixture(scope="module")
def ingress(module_lane: Lane) -> Iterator[Ingress]:
    """One mail ingress for the module's tests (each uses its own job keys), its
    outbound mail to a local sink, at most BOUND mails per contact per hour."""
    sink = Sink()
    controller = Controller(sink, hostname="127.0.0.1", port=free_port())
    controller.start()
    port = free_port()
    module_lane.start(
        ["mail-ingress", "--port", str(port)], "mail: ready",
        REPLY_TOKEN_SECRET=SECRET, REPLY_DOMAIN=DOMAIN, MAIL_FROM="agent@lemongraph.test",
        LEMONGRAPH_SMTP_URL=f"smtp://127.0.0.1:{controller.port}",
        LEMONGRAPH_MAIL_PER_CONTACT=str(BOUND),
    )  # fmt: skip
    yield Ingress(module_lane, port, sink)
    controller.stop()


def address_of(job_key: str, contact: str = "ada@example.com") -> str:
    """A (long-token) reply address of the job's contact, good for ten minutes."""
    return reply_address(reply_token(SECRET, job_key, contact, int(time.time()) + 600), DOMAIN)


def mail(
    to: str, body: str = "Tomorrow at 10.", sender: str = "ada@example.com", **headers: str
) -> EmailMessage:
    out = EmailMessage()
    out["From"] = sender
    out["To"] = to
    out["Subject"] = "Re: About the call"
    for name, value in headers.items():
        out[name.replace("_", "-")] = value
    out.set_content(body)
    return out


def send(
    port: int,
    message: EmailMessage | bytes,
    to: str,
    sender: str = "ada@example.com",
    timeout: float = 30,
) -> None:
    with smtplib.SMTP("127.0.0.1", port, timeout=timeout) as client:
        if isinstance(message, bytes):
            client.sendmail(sender, [to], message)
        else:
            client.send_message(message, from_addr=sender, to_addrs=[to])


def outbound(job_key: str, n: int, contact: str) -> bytes:
    """An agent's email message on ``messages``, as the agents service writes it."""
    at = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    return encode(
        MessageRecord(
            job_key=job_key, message_id=f"{job_key}#1.{n}", direction="out", channel="email",
            agent="conversation", contact=contact, text=f"Message {n}", at=at,
        )
    )  # fmt: skip


def bomb(parts: int) -> bytes:
    """A mail of ``parts`` empty MIME parts (10 bytes each)."""
    head = (
        b"From: ada@example.com\r\nTo: x@reply.test\r\nSubject: Re: hi\r\nMIME-Version: 1.0\r\n"
        b'Content-Type: multipart/mixed; boundary="B"\r\n\r\n'
    )
    return head + b"--B\r\n\r\nx\r\n" * parts + b"--B--\r\n"


def nested(depth: int) -> bytes:
    """A mail whose text is ``depth`` multiparts deep."""
    lines = [
        "From: ada@example.com", "To: x@reply.test", "Subject: Re: hi", "MIME-Version: 1.0",
        'Content-Type: multipart/mixed; boundary="B0"', "",
    ]  # fmt: skip
    for i in range(1, depth):
        lines += [f"--B{i - 1}", f'Content-Type: multipart/mixed; boundary="B{i}"', ""]
    lines += [f"--B{depth - 1}", "Content-Type: text/plain", "", "Deep down: yes."]
    lines += [f"--B{i}--" for i in reversed(range(depth))]
    return "\r\n".join([*lines, ""]).encode()


class Probe(threading.Thread):
    """An SMTP session that sends NOOPs until told to stop: the slowest answer
    is how long the ingress's event loop was held meanwhile."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.client = smtplib.SMTP("127.0.0.1", port, timeout=120)
        self.done = threading.Event()
        self.slowest, self.probes = 0.0, 0

    def run(self) -> None:
        with self.client:
            while not self.done.is_set():
                start = time.monotonic()
                assert self.client.noop()[0] == 250
                self.slowest = max(self.slowest, time.monotonic() - start)
                self.probes += 1


def test_a_mime_bomb_is_refused_while_the_ingress_serves_others(ingress: Ingress) -> None:
    raw = bomb(900_000)
    assert 8_000_000 < len(raw) < 10_000_000  # under the ingress's 10 MB limit
    answer: dict[str, Any] = {}

    def send_bomb() -> None:
        start = time.monotonic()
        try:
            # A 9 MB message on a machine under load: the answer may take a while
            # (what is tested is that it is refused and that others are served).
            send(ingress.port, raw, address_of("bomb-1"), timeout=180)
        except smtplib.SMTPDataError as exc:
            answer["refused"] = (exc.smtp_code, exc.smtp_error.decode())
        answer["took"] = time.monotonic() - start

    probe = Probe(ingress.port)
    probe.start()
    bomber = threading.Thread(target=send_bomb)
    bomber.start()
    # While the bomb streams in and is read: a person's reply is taken, and the
    # agent's mail goes out.
    start = time.monotonic()
    ingress.lane.produce([(b"bomb-2", outbound("bomb-2", 1, "carol@example.com"))], "messages")
    send(ingress.port, mail(address_of("bomb-2"), "Still there?"), address_of("bomb-2"))
    replied = time.monotonic() - start
    wait_for(lambda: ingress.sink.to("carol@example.com"), timeout=20, what="carol's mail")
    mailed = time.monotonic() - start
    bomber.join()
    probe.done.set()
    probe.join()
    print(
        f"bomb: answered in {answer['took']:.1f} s; meanwhile a reply took {replied:.1f} s, "
        f"a send {mailed:.1f} s, the slowest of {probe.probes} NOOPs {probe.slowest:.2f} s"
    )
    assert answer["refused"][0] == 554
    assert "too many MIME parts" in answer["refused"][1]
    # (Before the fix the ingress read the bomb on its event loop: over a minute.)
    assert probe.slowest < 5, f"the ingress stalled {probe.slowest:.1f} s over the bomb"
    assert replied < 10
    assert mailed < 20
    [refused] = [j for j in ingress.journal("bomb-1") if j["outcome"] == "refused"]
    assert refused["direction"] == "in"
    assert "too many MIME parts" in refused["detail"]
    assert ingress.messages("bomb-1") == []
    assert [m["text"] for m in ingress.messages("bomb-2") if m["direction"] == "in"] == [
        "Still there?"
    ]


def test_deep_nesting_is_refused_with_a_5xx_and_journaled(ingress: Ingress) -> None:
    with pytest.raises(smtplib.SMTPDataError) as refused:
        send(ingress.port, nested(1000), address_of("deep-1"))
    assert refused.value.smtp_code == 554
    assert b"nested too deep" in refused.value.smtp_error
    # twenty levels is a mail like any other
    send(ingress.port, nested(20), address_of("deep-2"))
    [taken] = wait_for(lambda: ingress.messages("deep-2"), what="the 20-deep mail")
    assert taken["text"] == "Deep down: yes."
    [journaled] = [j for j in ingress.journal("deep-1") if j["outcome"] == "refused"]
    assert "nested too deep" in journaled["detail"]
    assert ingress.messages("deep-1") == []


def test_replies_in_odd_charsets_are_taken(ingress: Ingress) -> None:
    words = "Tomorrow \u05e9\u05dc\u05d5\u05dd"  # Hebrew
    for n, charset in enumerate(("iso-8859-8-i", "unknown-8bit", "x-user-defined")):
        raw = (
            (
                f"From: ada@example.com\r\nTo: x@reply.test\r\nSubject: Re: hi\r\n"
                f"Message-ID: <cs{n}@example.com>\r\nMIME-Version: 1.0\r\n"
                f"Content-Type: text/plain; charset={charset}\r\n"
                "Content-Transfer-Encoding: 8bit\r\n\r\n"
            ).encode()
            + words.encode("iso-8859-8")
            + b"\r\n"
        )
        send(ingress.port, raw, address_of(f"cs-{n}"))
    texts = [
        wait_for(lambda n=n: ingress.messages(f"cs-{n}"), what=f"cs-{n}")[0]["text"]
        for n in range(3)
    ]
    assert texts[0] == words  # the same bytes as iso-8859-8
    assert texts[1].startswith("Tomorrow \ufffd")  # read as UTF-8, replaced
    assert texts[2].startswith("Tomorrow ")
    assert len(texts[2]) == len(words)  # a character a byte
    for n in range(3):
        assert [j["outcome"] for j in ingress.journal(f"cs-{n}")] == ["received"]


def test_automatic_mail_at_a_reply_address_writes_nothing(ingress: Ingress) -> None:
    to = address_of("auto-1")
    daemon = "MAILER-DAEMON@mx.example.com"
    automatic = [  # (the mail, its envelope sender)
        (mail(to, "I am away.", Auto_Submitted="auto-replied"), "ada@example.com"),
        (mail(to, "Out of office.", Precedence="bulk"), "ada@example.com"),
        (mail(to, "Away.", X_Autoreply="yes"), "ada@example.com"),
        (mail(to, "News.", List_Id="<news.example.com>"), "ada@example.com"),
        (mail(to, "Away, from the null sender."), ""),
        (mail(to, "Undeliverable.", sender=daemon), "postmaster@mx.example.com"),
    ]
    for n, (message, envelope_from) in enumerate(automatic):
        message["Message-ID"] = f"<auto{n}@example.com>"
        send(ingress.port, message, to, envelope_from)  # 250: taken, so nothing bounces
    # ...and a person's reply that says it is not automatic
    send(ingress.port, mail(to, "I am back: tomorrow at 10.", Auto_Submitted="no"), to)
    [message] = wait_for(lambda: ingress.messages("auto-1"), what="the person's reply")
    assert message["text"] == "I am back: tomorrow at 10."
    journal = ingress.journaled("auto-1", 7)
    why = [j["detail"] for j in journal if j["outcome"] == "automatic"]
    assert len(why) == 6
    for expected in ("Auto-Submitted: auto-replied", "Precedence: bulk", "X-Autoreply: yes",
                     "List-Id", "null envelope sender", "MAILER-DAEMON"):  # fmt: skip
        assert any(expected in w for w in why), (expected, why)
    assert [j["outcome"] for j in journal].count("received") == 1
    inbox = [r["value"] for r in ingress.lane.read("inbox") if r["key"] == "auto-1"]
    assert [e["action"] for e in inbox] == ["message_received"]


def test_agent_mail_to_one_contact_is_bounded(ingress: Ingress) -> None:
    lane = ingress.lane
    records = [(b"loop-1", outbound("loop-1", n, "bob@example.com")) for n in range(1, 6)]
    records.append((b"loop-2", outbound("loop-2", 1, "dora@example.com")))
    lane.produce(records, "messages")
    lane.wait_handled(
        f"{lane.prefix}mail", "messages",
        [r for r in lane.read("messages") if r["key"] in ("loop-1", "loop-2")],
    )  # fmt: skip
    to_bob = ingress.sink.to("bob@example.com")
    assert [m.get_content().strip() for m in to_bob] == ["Message 1", "Message 2", "Message 3"]
    # RFC 3834: marked automatic, so that a responder that honours it stays quiet
    assert {(m["Auto-Submitted"], m["X-Auto-Response-Suppress"]) for m in to_bob} == {
        ("auto-generated", "OOF, AutoReply")
    }
    assert len(ingress.sink.to("dora@example.com")) == 1  # the bound is per contact
    journal = ingress.journal("loop-1")
    assert [j["outcome"] for j in journal] == ["sent"] * 3 + ["refused"] * 2
    withheld = [j for j in journal if j["outcome"] == "refused"]
    assert [j["message_id"] for j in withheld] == ["loop-1#1.4", "loop-1#1.5"]
    assert all("withheld: loop: 3 mails to bob@example.com" in j["detail"] for j in withheld)
    # delivered again, a withheld message stays withheld (the sent-log says so)
    lane.produce([(b"loop-1", outbound("loop-1", 4, "bob@example.com"))], "messages")
    lane.wait_handled(
        f"{lane.prefix}mail", "messages", [r for r in lane.read("messages") if r["key"] == "loop-1"]
    )
    assert len(ingress.sink.to("bob@example.com")) == 3
    assert len(ingress.journal("loop-1")) == 5
