"""The mail-ingress group shares its sent-log (the compacted ``mail-log``): two
`lemongraph mail-ingress` processes over one broker, with their own data folders,
hand the ``messages`` partition over without a second email; the second takes a
reply to the first one's mail (the short reply token resolved by the shared log),
once, however often it is delivered; a message whose send was cut off (an
``attempt`` and no ``sent``) is sent again, said so in the journal."""

from __future__ import annotations

import signal
from datetime import UTC, datetime

import orjson
import pytest
from aiosmtpd.controller import Controller

from compiler import to_iso
from stream.runtime.broker import free_port
from tests.agents.channels.test_mail import DOMAIN, SECRET, Sink, send
from tests.lanes import Lane, wait_for
from topics import MessageRecord
from topics.mail import MailLogEntry

pytestmark = [pytest.mark.broker, pytest.mark.timeout(180)]

JOB = "hand-1"
ADA = "ada@example.com"


def _out(message_id: str, text: str) -> tuple[bytes, bytes]:
    record = MessageRecord(
        job_key=JOB, message_id=message_id, direction="out", channel="email",
        agent="conversation", contact=ADA, text=text, at=to_iso(datetime.now(UTC)),
    )  # fmt: skip
    return JOB.encode(), orjson.dumps(record.dump())


def test_two_mail_ingress_processes_hand_a_partition_over_without_a_second_email(
    lane: Lane,
) -> None:
    sink = Sink()
    controller = Controller(sink, hostname="127.0.0.1", port=free_port())
    controller.start()
    group = f"{lane.prefix}mail"
    try:
        common = {"REPLY_TOKEN_SECRET": SECRET, "REPLY_DOMAIN": DOMAIN,
                  "LEMONGRAPH_SMTP_URL": f"smtp://127.0.0.1:{controller.port}",
                  "MAIL_FROM": "agent@lemongraph.test"}  # fmt: skip
        first = lane.start(
            ["mail-ingress", "--port", str(free_port())], "mail: ready",
            LEMONGRAPH_DATA_DIR=str(lane.root / "first"), **common,
        )  # fmt: skip
        lane.produce([_out("hand-1#1.1", "When would suit you for a call?")], topic="messages")
        [(_, rcpts, mail)] = wait_for(lambda: sink.mails, what="the first process's email")
        assert rcpts == [ADA]
        reply_to = str(mail["Reply-To"])
        assert len(reply_to.rpartition("@")[0]) <= 64
        lane.wait_handled(group, "messages", lane.read("messages"))
        assert first.stop(signal.SIGTERM) == 0
        # A process with a data folder of its own takes the partition over, and
        # the first message comes to it again (as it does when its sender dies
        # between the send and the commit; the broker here cannot rewind a group).
        port = free_port()
        second = lane.start(
            ["mail-ingress", "--port", str(port)], "mail: ready",
            LEMONGRAPH_DATA_DIR=str(lane.root / "second"), **common,
        )  # fmt: skip
        first_again = _out("hand-1#1.1", "When would suit you for a call?")
        lane.produce([first_again, _out("hand-1#2.1", "Booked for tomorrow 10:00.")], "messages")
        # Same job, same partition: the second message is sent after the first was
        # handled, and both are committed past.
        wait_for(lambda: len(sink.mails) >= 2, what="the second process's email")
        lane.wait_handled(group, "messages", lane.read("messages"))
        texts = [m.get_content().strip() for _, _, m in sink.mails]
        assert texts == ["When would suit you for a call?", "Booked for tomorrow 10:00."]
        # The reply to the first process's mail, through the second: taken, once.
        for _ in range(2):
            send(port, reply_to, "Tomorrow suits me.", message_id="<r-hand@example.com>")
        inbound = [r["value"] for r in lane.read("messages") if r["value"]["direction"] == "in"]
        assert [(m["job_key"], m["contact"], m["text"]) for m in inbound] == [
            (JOB, ADA, "Tomorrow suits me.")
        ]
        events = [r["value"] for r in lane.read("inbox")]
        assert [e["action"] for e in events] == ["message_received"]
        # A send cut off (an attempt logged, no sent): sent again, journaled so.
        attempt = MailLogEntry(
            state="attempt", job_key=JOB, message_id="hand-1#3.1", at=to_iso(datetime.now(UTC)),
            contact=ADA, written_at=to_iso(datetime.now(UTC)),
        )  # fmt: skip
        lane.produce([(b"out:hand-1#3.1", orjson.dumps(attempt.model_dump()))], topic="mail-log")
        lane.produce([_out("hand-1#3.1", "Here is the link.")], topic="messages")
        wait_for(lambda: len(sink.mails) >= 3, what="the interrupted message's email")
        lane.wait_handled(group, "messages", lane.read("messages"))
        assert len(sink.mails) == 3
        journal = [r["value"] for r in lane.read("journal") if r["value"]["type"] == "journal.mail"]
        sent = [(j["message_id"], "again" in j["detail"]) for j in journal
                if j["outcome"] == "sent"]  # fmt: skip
        assert sent == [("hand-1#1.1", False), ("hand-1#2.1", False), ("hand-1#3.1", True)]
        assert second.stop(signal.SIGTERM) == 0
    except BaseException:
        for w in lane.workers:
            print("".join(w.lines))  # what the processes said, for the report
        raise
    finally:
        controller.stop()
