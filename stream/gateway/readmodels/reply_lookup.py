"""What the inbound webhook knows of ``messages`` (docs/agents.md, "Email"), fed
by every message record the read model reads: the short reply tokens it resolves
``reply+r2.…`` and ``bounce+b2.…`` addresses by (from the outbound email messages,
``topics.mail.message_tokens``, as the mail ingress fills its own lookup from the
``mail-log``), and the ids of the person's messages already on the topic, so a mail
delivered twice is written once."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

from topics import MessageRecord
from topics.mail import MailSettings, message_tokens
from topics.replies import ReplyRoute

__all__ = ["IDS_KEPT", "TOKENS_KEPT", "ReceivedIds", "ReplyTokens"]

#: Short tokens kept at most (two per outbound email); past it the oldest go.
TOKENS_KEPT = 200_000
#: Ids of received messages kept at most; past it the oldest go.
IDS_KEPT = 100_000


class ReplyTokens:
    """Short token → what it names, for the outbound email messages read: an
    expired token is dropped (it would be refused anyway), and past ``kept``
    tokens the oldest read goes (a reply to it is refused ``unknown``)."""

    def __init__(
        self,
        settings: MailSettings,
        kept: int = TOKENS_KEPT,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.kept = kept
        self.clock = clock
        self._routes: OrderedDict[str, ReplyRoute] = OrderedDict()

    def __len__(self) -> int:
        return len(self._routes)

    def read(self, record: MessageRecord) -> None:
        """One record of ``messages``: an outbound email's tokens are added."""
        if not self.settings.reply_secret:
            return  # no tokens are signed without the secret
        now = int(self.clock())
        for token, route in message_tokens(self.settings, record).items():
            if route.expires_at >= now:
                self._routes[token] = route
                self._routes.move_to_end(token)
        while len(self._routes) > self.kept:
            self._routes.popitem(last=False)
        while self._routes:
            oldest = next(iter(self._routes.values()))
            if oldest.expires_at >= now:
                break
            self._routes.popitem(last=False)

    def get(self, token: str) -> ReplyRoute | None:
        """What ``token`` names, if a message read carries it and it has not expired."""
        route = self._routes.get(token)
        if route is not None and route.expires_at < int(self.clock()):
            del self._routes[token]
            return None
        return route


class ReceivedIds:
    """The (job, message id) of each inbound message on ``messages``: read back
    from the topic (so a restart or an evicted job forgets none) and noted as
    this gateway writes one; past ``kept`` the oldest go."""

    def __init__(self, kept: int = IDS_KEPT) -> None:
        self.kept = kept
        self._ids: OrderedDict[tuple[str, str], None] = OrderedDict()

    def __contains__(self, ident: object) -> bool:
        return ident in self._ids

    def read(self, record: MessageRecord) -> None:
        """One record of ``messages``: a person's message is noted."""
        if record.direction == "in":
            self.note(record.job_key, record.message_id)

    def note(self, job_key: str, message_id: str) -> None:
        """The message ``message_id`` of job ``job_key`` is on ``messages``."""
        self._ids[(job_key, message_id)] = None
        self._ids.move_to_end((job_key, message_id))
        while len(self._ids) > self.kept:
            self._ids.popitem(last=False)
