"""Small aiokafka helpers for the operator commands, and how every Kafka client
lemongraph makes connects: :func:`client_kwargs` for aiokafka clients and
:meth:`KafkaSecurity.faust_credentials` for the Faust apps, from the
``LEMONGRAPH_KAFKA_SECURITY_PROTOCOL`` / ``_SASL_*`` / ``_SSL_*`` settings
(docs/operations.md, "Kafka security"); and which codec producers compress their
record batches with, ``LEMONGRAPH_KAFKA_COMPRESSION`` (:func:`compression_type`;
docs/kafka.md, "Compression")."""

from __future__ import annotations

import asyncio
import os
import ssl
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaError
from aiokafka.protocol.metadata import MetadataRequest
from aiokafka.structs import TopicPartition

from stream.runtime.dotenv import read_dotenv
from stream.runtime.errors import ConfigError, KafkaUnavailable

__all__ = [
    "ConsumedRecord",
    "GroupTimeouts",
    "KafkaSecurity",
    "KafkaUnavailable",
    "bootstrap_of",
    "caught_up",
    "client_kwargs",
    "cluster_id_of",
    "compression_from_env",
    "compression_type",
    "configured_compression",
    "leave_groups_of_generation_zero",
    "new_consumer",
    "partitions_of",
    "producer",
    "read_topic",
    "run",
    "start_consumer",
    "topic_partitions",
    "topics_metadata",
]


def bootstrap_of(url: str) -> str:
    """``kafka://h1:9092;h2:9092`` → ``h1:9092,h2:9092``."""
    rest = url.split("://", 1)[1] if "://" in url else url
    return ",".join(part.strip() for part in rest.replace(";", ",").split(",") if part.strip())


#: The variables :meth:`KafkaSecurity.from_env` reads.
SECURITY_VARIABLES = (
    "LEMONGRAPH_KAFKA_SECURITY_PROTOCOL",
    "LEMONGRAPH_KAFKA_SASL_MECHANISM",
    "LEMONGRAPH_KAFKA_SASL_USERNAME",
    "LEMONGRAPH_KAFKA_SASL_PASSWORD",
    "LEMONGRAPH_KAFKA_SSL_CAFILE",
    "LEMONGRAPH_KAFKA_SSL_CERTFILE",
    "LEMONGRAPH_KAFKA_SSL_KEYFILE",
)
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def _setting(env: Mapping[str, str], name: str) -> str:
    """``LEMONGRAPH_KAFKA_<name>``, stripped ("" when unset)."""
    return env.get(f"LEMONGRAPH_KAFKA_{name}", "").strip()


def _given(env: Mapping[str, str], names: tuple[str, ...]) -> list[str]:
    """Those of ``names`` set (non-blank), in that order."""
    return [n for n in names if _setting(env, n)]


def _protocol(env: Mapping[str, str]) -> str:
    """``LEMONGRAPH_KAFKA_SECURITY_PROTOCOL``, one of :data:`PROTOCOLS`."""
    protocol = _setting(env, "SECURITY_PROTOCOL").upper() or "PLAINTEXT"
    if protocol not in PROTOCOLS:
        raise ConfigError(
            f"LEMONGRAPH_KAFKA_SECURITY_PROTOCOL={protocol!r} must be one of "
            + ", ".join(PROTOCOLS)
        )
    return protocol


@dataclass(frozen=True)
class KafkaSecurity:
    """How lemongraph's Kafka clients authenticate and encrypt."""

    protocol: str = "PLAINTEXT"
    sasl_mechanism: str = "PLAIN"
    sasl_username: str = ""
    sasl_password: str = ""
    ssl_cafile: str = ""  # empty: the system's certificate authorities
    ssl_certfile: str = ""  # a client certificate (mutual TLS), with its key
    ssl_keyfile: str = ""

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> KafkaSecurity:
        """Read ``LEMONGRAPH_KAFKA_SECURITY_PROTOCOL`` and the settings it needs;
        raises :class:`ConfigError` for a combination that cannot connect."""
        protocol = _protocol(env)
        mechanism = _setting(env, "SASL_MECHANISM").upper()
        found = cls(
            protocol=protocol,
            sasl_mechanism=mechanism or "PLAIN",
            sasl_username=_setting(env, "SASL_USERNAME"),
            sasl_password=env.get("LEMONGRAPH_KAFKA_SASL_PASSWORD", ""),
            ssl_cafile=_setting(env, "SSL_CAFILE"),
            ssl_certfile=_setting(env, "SSL_CERTFILE"),
            ssl_keyfile=_setting(env, "SSL_KEYFILE"),
        )
        sasl_given = _given(env, ("SASL_MECHANISM", "SASL_USERNAME", "SASL_PASSWORD"))
        ssl_given = _given(env, ("SSL_CAFILE", "SSL_CERTFILE", "SSL_KEYFILE"))
        found._check_protocol_uses(sasl_given, ssl_given)
        if found.sasl:
            found._check_sasl(mechanism)
        found._check_tls(env, ssl_given)
        return found

    def _check_protocol_uses(self, sasl_given: list[str], ssl_given: list[str]) -> None:
        """SASL or TLS settings given for a protocol that would ignore them."""
        if sasl_given and not self.sasl:
            raise ConfigError(
                f"LEMONGRAPH_KAFKA_{sasl_given[0]} is set but "
                f"LEMONGRAPH_KAFKA_SECURITY_PROTOCOL is {self.protocol}: use SASL_SSL "
                "(or SASL_PLAINTEXT on a network you trust)"
            )
        if ssl_given and not self.tls:
            raise ConfigError(
                f"LEMONGRAPH_KAFKA_{ssl_given[0]} is set but "
                f"LEMONGRAPH_KAFKA_SECURITY_PROTOCOL is {self.protocol}: use SSL or SASL_SSL"
            )

    def _check_sasl(self, mechanism: str) -> None:
        """A known mechanism (``mechanism`` as given), and a user name and password."""
        if self.sasl_mechanism not in MECHANISMS:
            raise ConfigError(
                f"LEMONGRAPH_KAFKA_SASL_MECHANISM={mechanism!r} must be one of "
                + ", ".join(MECHANISMS)
            )
        if not self.sasl_username or not self.sasl_password:
            raise ConfigError(
                f"LEMONGRAPH_KAFKA_SECURITY_PROTOCOL={self.protocol} needs "
                "LEMONGRAPH_KAFKA_SASL_USERNAME and LEMONGRAPH_KAFKA_SASL_PASSWORD"
            )

    def _check_tls(self, env: Mapping[str, str], ssl_given: list[str]) -> None:
        """A certificate with its key, files that exist, and a context they make."""
        if bool(self.ssl_certfile) != bool(self.ssl_keyfile):
            raise ConfigError(
                "LEMONGRAPH_KAFKA_SSL_CERTFILE and LEMONGRAPH_KAFKA_SSL_KEYFILE go together "
                "(a client certificate and its key)"
            )
        for name in ssl_given:
            if not Path(_setting(env, name)).is_file():
                raise ConfigError(f"LEMONGRAPH_KAFKA_{name}={_setting(env, name)!r}: no such file")
        if self.tls:
            try:
                self.ssl_context()
            except (ssl.SSLError, OSError) as exc:
                raise ConfigError(f"LEMONGRAPH_KAFKA_SSL_*: cannot use them: {exc}") from None

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context (verifying the broker's certificate and host name)."""
        if not self.tls:
            return None
        context = ssl.create_default_context(cafile=self.ssl_cafile or None)
        if self.ssl_certfile:
            context.load_cert_chain(self.ssl_certfile, self.ssl_keyfile)
        return context

    def aiokafka_kwargs(self) -> dict[str, Any]:
        """The keyword arguments every aiokafka client takes for this."""
        options: dict[str, Any] = {"security_protocol": self.protocol}
        if self.tls:
            options["ssl_context"] = self.ssl_context()
        if self.sasl:
            options["sasl_mechanism"] = self.sasl_mechanism
            options["sasl_plain_username"] = self.sasl_username
            options["sasl_plain_password"] = self.sasl_password
        return options

    def faust_credentials(self) -> Any:
        """Faust's ``broker_credentials`` for this (None for PLAINTEXT)."""
        import faust  # here: the operator commands never load Faust

        if self.sasl:
            return faust.SASLCredentials(
                username=self.sasl_username,
                password=self.sasl_password,
                mechanism=self.sasl_mechanism,
                ssl_context=self.ssl_context(),
            )
        if self.tls:
            return faust.SSLCredentials(self.ssl_context())
        return None


def configured_security() -> KafkaSecurity:
    """What the environment (and ``.env``) configures."""
    env = read_dotenv(Path(".env"))
    env.update(os.environ)
    return KafkaSecurity.from_env(env)


def client_kwargs(bootstrap: str, security: KafkaSecurity | None = None) -> dict[str, Any]:
    """``bootstrap_servers`` and the security settings, for any aiokafka client:
    every one lemongraph makes is given these (``security``: the environment's
    when None)."""
    chosen = security if security is not None else configured_security()
    return {"bootstrap_servers": bootstrap, **chosen.aiokafka_kwargs()}


#: A consumer group member's session (docs/operations.md, "How long a start
#: takes"): a member silent this long is out of the group and its partitions move.
#: The embedded broker holds a first JoinGroup for half of it, so it is also most
#: of how long a process takes to be given its partitions there.
SESSION_TIMEOUT_ENV = "LEMONGRAPH_SESSION_TIMEOUT_MS"
SESSION_TIMEOUT_MS = 6000
#: How long a rejoining group waits for its members (aiokafka's and Faust's
#: defaults, tens of seconds, made every restart slow).
REBALANCE_TIMEOUT_MS = 3000


@dataclass(frozen=True)
class GroupTimeouts:
    """The session, heartbeat and rebalance timeouts of every consumer group
    member lemongraph makes (the worker's, the agents service's, the mail
    ingress's, the memory processor's)."""

    session_ms: int = SESSION_TIMEOUT_MS
    rebalance_ms: int = REBALANCE_TIMEOUT_MS

    @property
    def heartbeat_ms(self) -> int:
        """A heartbeat a third of the session at most (Kafka's advice), and once a
        second at most often."""
        return min(1000, self.session_ms // 3)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> GroupTimeouts:
        """``LEMONGRAPH_SESSION_TIMEOUT_MS`` (1,000 to 60,000) when set;
        :class:`ConfigError` for another value."""
        raw = (os.environ if env is None else env).get(SESSION_TIMEOUT_ENV, "").strip()
        if not raw:
            return cls()
        if not raw.isdigit() or not 1000 <= int(raw) <= 60_000:
            raise ConfigError(
                f"{SESSION_TIMEOUT_ENV} must be a whole number of 1000 to 60000 ms, got {raw!r}"
            )
        return cls(session_ms=int(raw))

    def aiokafka_kwargs(self) -> dict[str, int]:
        """As aiokafka's consumer takes them."""
        return {
            "session_timeout_ms": self.session_ms,
            "heartbeat_interval_ms": self.heartbeat_ms,
            "rebalance_timeout_ms": self.rebalance_ms,
        }


def leave_groups_of_generation_zero() -> None:
    """Make this process's group members leave their group when they stop, in its
    generation 0 too (docs/operations.md, "How a worker stops").

    aiokafka sends LeaveGroup on stop only when its generation is above 0, as
    Apache Kafka numbers a group's generations from 1. The embedded broker numbers
    them from 0, so the first member of each group never left it: its partitions
    stayed with the stopped process until its session expired, and a process
    starting within about a second of its stop waited 7 s instead of 2 s to be given
    them (a join held, then a SyncGroup failed "due to group rebalance"). Once per
    process; nothing changes for a member of a later generation."""
    from aiokafka.consumer import group_coordinator as coordinator

    leave = coordinator.GroupCoordinator._maybe_leave_group
    if getattr(leave, "of_generation_zero", False):
        return

    async def _maybe_leave_group(self: Any) -> None:
        if self.generation == 0 and self._group_instance_id is None:
            request = coordinator.LeaveGroupRequest(self.group_id, self.member_id)
            try:  # as aiokafka's own: a minimal effort, never resent
                await self._send_req(request)
            except KafkaError as err:
                coordinator.log.error("LeaveGroup request failed: %s", err)
            self.reset_generation()
            return
        await leave(self)

    _maybe_leave_group.of_generation_zero = True  # type: ignore[attr-defined]
    _maybe_leave_group.aiokafkas = leave  # type: ignore[attr-defined]
    coordinator.GroupCoordinator._maybe_leave_group = _maybe_leave_group


def new_consumer(
    bootstrap: str,
    security: KafkaSecurity | None = None,
    *,
    topics: tuple[str, ...] = (),
    group: str | None = None,
    offsets: str | None = None,
    isolation: str | None = None,
    **tuning: Any,
) -> AIOKafkaConsumer:
    """A consumer as every one lemongraph makes (not started): :func:`client_kwargs`
    and no auto-commit (each commits, if at all, what it has handled). What
    differs: the ``topics`` it subscribes (none: it assigns partitions itself),
    its ``group`` (with :class:`GroupTimeouts` from the environment), where it
    starts without a committed offset (``offsets``: aiokafka's
    ``auto_offset_reset``), its ``isolation`` level, and ``tuning``
    (aiokafka's fetch options); what is not given is aiokafka's default."""
    options: dict[str, Any] = {"enable_auto_commit": False}
    if group is not None:
        leave_groups_of_generation_zero()
        options["group_id"] = group
        options.update(GroupTimeouts.from_env().aiokafka_kwargs())
    if offsets is not None:
        options["auto_offset_reset"] = offsets
    if isolation is not None:
        options["isolation_level"] = isolation
    return AIOKafkaConsumer(*topics, **client_kwargs(bootstrap, security), **options, **tuning)


#: The codecs ``LEMONGRAPH_KAFKA_COMPRESSION`` names (Kafka's own batch codecs).
COMPRESSIONS = ("none", "gzip", "snappy", "lz4", "zstd")
#: What producers use when the variable is unset: on the benchmark's workload zstd
#: stores the fewest bytes (about 5 % of the records'), for less CPU than aiokafka's
#: lz4 (benchmarks/README.md, "Bytes per event"); every Apache Kafka since 2.1 and the
#: embedded broker take it.
DEFAULT_COMPRESSION = "zstd"


def compression_from_env(env: Mapping[str, str]) -> str:
    """``LEMONGRAPH_KAFKA_COMPRESSION`` (one of :data:`COMPRESSIONS`); raises
    :class:`ConfigError` for another value, or for a codec aiokafka has no
    library for (lz4, snappy and zstd need ``cramjam``)."""
    raw = env.get("LEMONGRAPH_KAFKA_COMPRESSION", "").strip().lower()
    name = raw or DEFAULT_COMPRESSION
    if name not in COMPRESSIONS:
        raise ConfigError(
            f"LEMONGRAPH_KAFKA_COMPRESSION={raw!r} must be one of " + ", ".join(COMPRESSIONS)
        )
    from aiokafka import codec  # here: aiokafka decides which codecs it can use

    available = {"snappy": codec.has_snappy, "lz4": codec.has_lz4, "zstd": codec.has_zstd}
    if name in available and not available[name]():
        raise ConfigError(
            f"LEMONGRAPH_KAFKA_COMPRESSION={name}: aiokafka has no {name} codec here "
            "(install cramjam, a dependency of lemongraph), or choose none or gzip"
        )
    return name


def configured_compression() -> str:
    """The codec the environment (and ``.env``) configures."""
    env = read_dotenv(Path(".env"))
    env.update(os.environ)
    return compression_from_env(env)


def compression_type(name: str | None = None) -> str | None:
    """aiokafka's ``compression_type`` (and Faust's ``producer_compression_type``)
    for a codec of :data:`COMPRESSIONS`: None for ``none``; ``name`` None: the
    environment's."""
    chosen = name if name is not None else configured_compression()
    return None if chosen == "none" else chosen


@asynccontextmanager
async def producer(
    bootstrap: str,
    *,
    security: KafkaSecurity | None = None,
    compression: str | None = None,
    **options: Any,
) -> AsyncIterator[AIOKafkaProducer]:
    """A started producer that is flushed and stopped on exit (``security``
    and ``compression``, a codec of :data:`COMPRESSIONS`: the caller's
    settings'; the environment's when None)."""
    options.setdefault("linger_ms", 5)
    options.setdefault("compression_type", compression_type(compression))
    client = AIOKafkaProducer(**client_kwargs(bootstrap, security), **options)
    try:
        await client.start()
    except BaseException:
        await client.stop()
        raise
    try:
        yield client
        await client.flush()
    finally:
        await client.stop()


@dataclass(frozen=True, slots=True)
class ConsumedRecord:
    """One record read back."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()


async def start_consumer(consumer: AIOKafkaConsumer) -> None:
    """Start ``consumer``; stopped again when starting fails."""
    try:
        await consumer.start()
    except BaseException:
        await consumer.stop()
        raise


async def partitions_of(consumer: AIOKafkaConsumer, topic: str) -> list[int]:
    """The partitions of ``topic`` as the broker says now (empty when it does
    not exist; never created by asking): metadata for that one topic, through
    the started ``consumer``'s connection. Not ``consumer.topics()``, which asks
    for every topic of the cluster: on a broker with a thousand topics that took
    about 300 ms and 60 ms of the client's CPU per call, against about 1 ms."""
    # A consumer without a group stopped right after it started can raise
    # CancelledError from its never-scheduled housekeeping task: let it run once.
    await asyncio.sleep(0)
    return (await topics_metadata(consumer._client, [topic])).get(topic, [])


#: The topic :func:`cluster_id_of` asks about: one that no one names.
PROBE_TOPIC = "__lemongraph_cluster_probe"


async def topics_metadata(client: Any, topics: list[str]) -> dict[str, list[int]]:
    """The partitions of each of ``topics`` that exists, from one Metadata request
    on aiokafka's ``client`` (a started consumer's, producer's or admin's) that
    names them and creates none. Tansu answers a request naming no topic with
    every topic (Apache Kafka with none), so no caller here sends one."""
    node = client.get_random_node()
    if node is None:
        raise KafkaError("no broker known to ask for metadata")
    request = MetadataRequest(list(topics), allow_auto_topic_creation=False)
    response = (await client.send(node, request)).to_object()
    return {
        t["topic"]: sorted(p["partition"] for p in t["partitions"])
        for t in response["topics"]
        if t["error_code"] == 0
    }


async def cluster_id_of(client: Any) -> str:
    """The cluster id the broker reports, from a Metadata request naming one
    topic no one has (``describe_cluster`` asks for every topic's metadata:
    about 270 ms per call on a broker with a thousand topics, against 1 ms)."""
    node = client.get_random_node()
    if node is None:
        raise KafkaError("no broker known to ask for its cluster id")
    request = MetadataRequest([PROBE_TOPIC], allow_auto_topic_creation=False)
    response = (await client.send(node, request)).to_object()
    return str(response.get("cluster_id") or "")


async def topic_partitions(
    bootstrap: str, topic: str, security: KafkaSecurity | None = None
) -> list[int]:
    """The partitions of ``topic`` (empty when it does not exist)."""
    consumer = new_consumer(bootstrap, security)
    await start_consumer(consumer)
    try:
        return await partitions_of(consumer, topic)
    finally:
        await consumer.stop()


async def caught_up(consumer: AIOKafkaConsumer, tps: list[TopicPartition]) -> bool:
    """Has ``consumer`` read every partition up to its high watermark, as fetch
    responses report it? (The embedded broker's ListOffsets answer is off by up to
    a batch, so end_offsets() cannot be used for this.)"""
    for tp in tps:
        high = consumer.highwater(tp)
        if high is None or await consumer.position(tp) < high:
            return False
    return True


#: How long :func:`read_topic` waits for more, once it has read every partition up
#: to its high watermark (seconds; less when ``idle`` is less).
CAUGHT_UP_QUIET = 0.1
#: How long one of :func:`read_topic`'s fetches may wait for data (ms), reading to
#: the end and following. The embedded broker holds a fetch for all of it when a
#: partition has nothing new: with aiokafka's default (500 ms) and a 0.3 s quiet at
#: the end, a read of a topic took 0.42 s, 0.62 s with an empty partition; 0.07-0.13 s
#: now.
READ_FETCH_WAIT_MS, FOLLOW_FETCH_WAIT_MS = 50, 500


async def read_topic(
    bootstrap: str,
    topic: str,
    *,
    follow: bool = False,
    idle: float = 1.5,
    timeout: float | None = None,
    start: Mapping[int, int] | None = None,
    security: KafkaSecurity | None = None,
) -> AsyncIterator[ConsumedRecord]:
    """Every record of ``topic`` from the beginning, in order per partition
    (with ``start``: only those partitions, each from the offset given; an
    offset the log no longer holds reads from its beginning).

    Without ``follow`` it stops once every partition has been read up to its
    high watermark (as the fetch reports it: the embedded broker's ListOffsets
    answer is off by up to a batch) and nothing new arrived for ``idle`` seconds,
    at most :data:`CAUGHT_UP_QUIET` (without a high watermark for every partition,
    at least 5 s). ``security``: the caller's settings' (the environment's when None).
    """
    # Following, an idle fetch waits as long as aiokafka's default does.
    wait = FOLLOW_FETCH_WAIT_MS if follow else READ_FETCH_WAIT_MS
    consumer = new_consumer(bootstrap, security, offsets="earliest", fetch_max_wait_ms=wait)
    await start_consumer(consumer)
    try:
        partitions = await partitions_of(consumer, topic)
        if start is not None:
            partitions = [p for p in partitions if p in start]
        if not partitions:
            return
        tps = [TopicPartition(topic, p) for p in partitions]
        await _assign_from(consumer, tps, start)
        started = last = time.monotonic()
        while True:
            batches = await consumer.getmany(timeout_ms=wait, max_records=5000)
            for tp, records in batches.items():
                for r in records:
                    yield ConsumedRecord(
                        tp.topic,
                        tp.partition,
                        r.offset,
                        r.timestamp,
                        r.key,
                        r.value,
                        tuple(r.headers or ()),
                    )
                if records:
                    last = time.monotonic()
            now = time.monotonic()
            if await _read_enough(
                consumer, tps, now - started, now - last, follow=follow, idle=idle, timeout=timeout
            ):
                return
    finally:
        await consumer.stop()


async def _assign_from(
    consumer: AIOKafkaConsumer, tps: list[TopicPartition], start: Mapping[int, int] | None
) -> None:
    """Assign ``tps``, each from its beginning or from the offset ``start`` gives."""
    consumer.assign(tps)
    await consumer.seek_to_beginning(*tps)
    for tp in tps:
        if start is not None and start[tp.partition] > 0:
            consumer.seek(tp, start[tp.partition])


async def _read_enough(
    consumer: AIOKafkaConsumer,
    tps: list[TopicPartition],
    elapsed: float,
    quiet: float,
    *,
    follow: bool,
    idle: float,
    timeout: float | None,
) -> bool:
    """Whether :func:`read_topic` stops, ``elapsed`` seconds after it started and
    ``quiet`` seconds after its last record."""
    if timeout is not None and elapsed > timeout:
        return True
    if follow:
        return False
    if await caught_up(consumer, tps) and quiet >= min(idle, CAUGHT_UP_QUIET):
        return True
    # Without a high watermark for every partition yet, give the broker
    # longer before deciding that the topic has nothing more.
    return quiet >= max(idle, 5.0)


def run(coro: Any) -> Any:
    """``asyncio.run`` for the CLI: Kafka errors become :class:`KafkaUnavailable`."""
    try:
        return asyncio.run(coro)
    except KafkaError as exc:
        raise KafkaUnavailable(str(exc)) from None
