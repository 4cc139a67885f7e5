"""Configuration from the environment (and a ``.env`` file in the working
directory, whose values never override the real environment)."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from stream.runtime.dotenv import read_dotenv
from stream.runtime.errors import ConfigError
from stream.runtime.filestore import DEFAULT_FILE_TYPES

if TYPE_CHECKING:
    from stream.runtime.kafka import KafkaSecurity

__all__ = ["ConfigError", "RocksDBMemory", "Settings", "read_dotenv"]


def _int(
    env: dict[str, str], name: str, default: int, low: int = 1, high: int | None = None
) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a whole number") from None
    if value < low:
        raise ConfigError(f"{name}={raw!r} must be at least {low}")
    if high is not None and value > high:
        raise ConfigError(f"{name}={raw!r} must be at most {high}")
    return value


def _float(env: dict[str, str], name: str, default: float) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a number") from None
    if not (value > 0 and math.isfinite(value)):
        raise ConfigError(f"{name}={raw!r} must be a finite number more than zero")
    return value


def _flag(env: dict[str, str], name: str, default: bool) -> bool:
    """``1``/``0`` (also ``true``/``false``, ``yes``/``no``, ``on``/``off``)."""
    raw = env.get(name, "").strip().lower()
    if not raw:
        return default
    if raw in ("1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name}={raw!r} must be 1 or 0")


_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def _seconds(env: dict[str, str], name: str, default: float, positive: bool = False) -> float:
    """A duration: ``300``, ``300s``, ``5m``, ``1h``, ``500ms``; zero is allowed
    unless ``positive``."""
    raw = env.get(name, "").strip()
    if not raw:
        return default
    number, unit = raw, "s"
    for suffix in ("ms", "s", "m", "h"):
        if raw.endswith(suffix):
            number, unit = raw[: -len(suffix)].strip(), suffix
            break
    try:
        value = float(number) * _UNITS[unit]
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a duration (like 300s, 5m or 1h)") from None
    if not (value >= 0 and math.isfinite(value)):
        raise ConfigError(f"{name}={raw!r} must be a finite duration, zero or more")
    if positive and value == 0:
        raise ConfigError(f"{name}={raw!r} must be more than zero")
    return value


#: The shortest API_TOKEN_SECRET accepted, in bytes (an HMAC-SHA256 key
#: shorter than 256 bits can be guessed offline from one token).
MIN_SECRET_BYTES = 32


def _secret(env: dict[str, str], name: str) -> str:
    """``name``: empty (unset), or at least :data:`MIN_SECRET_BYTES` bytes."""
    value = env.get(name, "")
    if value and len(value.encode()) < MIN_SECRET_BYTES:
        raise ConfigError(
            f"{name} is {len(value.encode())} bytes long: use at least {MIN_SECRET_BYTES} "
            "random bytes, e.g. python3 -c 'import secrets; print(secrets.token_urlsafe(32))'"
        )
    return value


def _plaintext() -> KafkaSecurity:
    from stream.runtime.kafka import KafkaSecurity  # here: stream.runtime.kafka loads aiokafka

    return KafkaSecurity()


def _kafka_compression(env: dict[str, str]) -> str:
    from stream.runtime.kafka import (
        compression_from_env,  # here: stream.runtime.kafka loads aiokafka
    )

    return compression_from_env(env)


def _kafka_security(env: dict[str, str], url: str | None) -> KafkaSecurity:
    from stream.runtime.kafka import KafkaSecurity  # here: stream.runtime.kafka loads aiokafka

    security = KafkaSecurity.from_env(env)
    if url is None and security.protocol != "PLAINTEXT":
        raise ConfigError(
            f"LEMONGRAPH_KAFKA_SECURITY_PROTOCOL={security.protocol} needs LEMONGRAPH_KAFKA_URL: "
            "the embedded broker listens on loopback, in plain text"
        )
    return security


@dataclass(frozen=True)
class RocksDBMemory:
    """What RocksDB may hold in memory in one worker process (docs/operations.md,
    "Memory"): every partition database of the job table shares one block cache
    (data blocks, and the index and filter blocks of every table file) and one
    budget for memtables; stream/runtime/faust_tuning.py hands them to Faust."""

    #: The block cache shared by every partition database (MB).
    block_cache_mb: int = 64
    #: One memtable's size (MB) before it is flushed to a table file.
    write_buffer_mb: int = 16
    #: Memtables per partition database (the one written and those being flushed).
    write_buffers: int = 2
    #: Every memtable of every partition database together (MB): past it the
    #: largest is flushed early.
    memtables_mb: int = 64
    #: Table files each partition database keeps open.
    max_open_files: int = 256

    @classmethod
    def from_env(cls, env: dict[str, str]) -> RocksDBMemory:
        """``LEMONGRAPH_ROCKSDB_*``; a memtable budget below one memtable is refused."""
        memory = cls(
            block_cache_mb=_int(env, "LEMONGRAPH_ROCKSDB_BLOCK_CACHE_MB", 64, high=1 << 20),
            write_buffer_mb=_int(env, "LEMONGRAPH_ROCKSDB_WRITE_BUFFER_MB", 16, high=1 << 12),
            write_buffers=_int(env, "LEMONGRAPH_ROCKSDB_WRITE_BUFFERS", 2, low=2, high=16),
            memtables_mb=_int(env, "LEMONGRAPH_ROCKSDB_MEMTABLES_MB", 64, high=1 << 20),
            max_open_files=_int(env, "LEMONGRAPH_ROCKSDB_MAX_OPEN_FILES", 256, low=16),
        )
        if memory.memtables_mb < memory.write_buffer_mb:
            raise ConfigError(
                f"LEMONGRAPH_ROCKSDB_MEMTABLES_MB={memory.memtables_mb} is less than one "
                f"memtable (LEMONGRAPH_ROCKSDB_WRITE_BUFFER_MB={memory.write_buffer_mb}): "
                "every write would flush; raise it or lower the write buffer"
            )
        return memory


@dataclass(frozen=True)
class Settings:
    """Everything lemongraph reads from its environment."""

    kafka_url: str | None = None  # None: start the embedded broker
    #: How the Kafka clients authenticate and encrypt (LEMONGRAPH_KAFKA_SECURITY_PROTOCOL...).
    kafka_security: KafkaSecurity = field(default_factory=_plaintext)
    #: The codec producers compress record batches with (LEMONGRAPH_KAFKA_COMPRESSION:
    #: none, gzip, snappy, lz4 or zstd; docs/kafka.md, "Compression").
    kafka_compression: str = "zstd"
    playbooks_dir: Path = Path("playbooks")
    data_dir: Path = Path("data")
    topic_prefix: str = "lemongraph."
    partitions: int = 4
    tick_interval: float = 1.0
    api_port: int = 3002
    ui_port: int = 3000
    api_token_secret: str = ""
    #: Where the gateway listens (``0.0.0.0`` in a container).
    gateway_host: str = "127.0.0.1"
    #: Per-token rate limit of the gateway: requests per second, and the burst allowed.
    rate_limit: float = 20.0
    rate_burst: int = 40
    #: The largest request body the gateway reads, in bytes.
    max_body: int = 65536
    #: The gateway's read model (docs/operations.md, "The gateway's memory"):
    #: jobs it holds in memory, the bytes (as JSON) it holds per job and in all,
    #: and how long an accepted write is listed in ``pending_writes`` at most.
    gateway_jobs: int = 10_000
    gateway_job_bytes: int = 1 << 20
    gateway_memory: int = 128 << 20
    gateway_pending_ttl: float = 300.0
    #: Seconds a gateway write waits for the broker's acknowledgement before 503.
    gateway_write_timeout: float = 1.5
    #: Seconds a client has to send a request's headers and body; then it is cut off.
    request_timeout: float = 10.0
    #: Connections each gateway port holds open at once; more are refused.
    max_connections: int = 1000
    #: Event streams one token holds open at once (all tokens: half of max_connections).
    streams_per_token: int = 20
    #: How far (seconds) a record's timestamp may run ahead of the worker's clock.
    max_clock_skew: float = 300.0
    #: Decoded job states a worker keeps in memory (most recently used).
    state_cache: int = 10_000
    #: Milliseconds a worker waits after a batch of fewer than 500 records
    #: before it takes the next (docs/operations.md, "Batches at a steady rate").
    batch_linger_ms: int = 0
    #: The agent catalog (None: catalog.yaml in the playbooks folder).
    catalog: Path | None = None
    #: Whether the workers fire schedules (docs/schedules.md, "The global switch").
    schedules_enabled: bool = True
    #: RocksDB's memory in a worker (LEMONGRAPH_ROCKSDB_*; docs/operations.md, "Memory").
    rocksdb: RocksDBMemory = field(default_factory=RocksDBMemory)
    #: Where this process serves its Prometheus metrics (docs/operations.md,
    #: "Metrics"): LEMONGRAPH_METRICS_PORT (None: not served; 0: a free port) on
    #: LEMONGRAPH_METRICS_HOST.
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    #: File channels' uploads (docs/operations.md, "Files"): the largest file the
    #: gateway keeps (LEMONGRAPH_FILE_MAX_BYTES) and the media types it accepts
    #: (LEMONGRAPH_FILE_TYPES, comma-separated, ``image/*`` patterns allowed).
    file_max_bytes: int = 10 << 20
    file_types: tuple[str, ...] = DEFAULT_FILE_TYPES
    #: Where the uploads are kept (LEMONGRAPH_FILES_DIR; None: ``files`` in the
    #: data folder). The gateway writes there and the agents service reads there.
    files_dir: Path | None = None

    @property
    def file_store_dir(self) -> Path:
        """The folder of the file store (docs/operations.md, "Files")."""
        return self.files_dir if self.files_dir is not None else self.data_dir / "files"

    @property
    def catalog_file(self) -> Path:
        """Where the agent catalog is read from (docs/agents.md)."""
        return self.catalog if self.catalog is not None else self.playbooks_dir / "catalog.yaml"

    @classmethod
    def from_env(
        cls, environ: dict[str, str] | None = None, dotenv: Path | None = None
    ) -> Settings:
        """Read ``LEMONGRAPH_*`` (and ``API_TOKEN_SECRET``) from the environment."""
        env = read_dotenv(dotenv if dotenv is not None else Path(".env"))
        env.update(environ if environ is not None else os.environ)
        url = env.get("LEMONGRAPH_KAFKA_URL", "").strip() or None
        if url is not None and (
            not url.startswith(("kafka://", "aiokafka://")) or not url.split("://", 1)[1].strip()
        ):
            raise ConfigError(
                f"LEMONGRAPH_KAFKA_URL={url!r} must look like kafka://host:port[;host:port]"
            )
        prefix = env.get("LEMONGRAPH_TOPIC_PREFIX", "").strip() or "lemongraph."
        return cls(
            kafka_url=url,
            kafka_security=_kafka_security(env, url),
            kafka_compression=_kafka_compression(env),
            playbooks_dir=Path(env.get("LEMONGRAPH_PLAYBOOKS_DIR", "").strip() or "playbooks"),
            data_dir=Path(env.get("LEMONGRAPH_DATA_DIR", "").strip() or "data"),
            topic_prefix=prefix,
            partitions=_int(env, "LEMONGRAPH_PARTITIONS", 4),
            tick_interval=_float(env, "LEMONGRAPH_TICK_INTERVAL", 1.0),
            api_port=_int(env, "LEMONGRAPH_API_PORT", 3002, high=65535),
            ui_port=_int(env, "LEMONGRAPH_UI_PORT", 3000, high=65535),
            api_token_secret=_secret(env, "API_TOKEN_SECRET"),
            gateway_host=env.get("LEMONGRAPH_GATEWAY_HOST", "").strip() or "127.0.0.1",
            rate_limit=_float(env, "LEMONGRAPH_RATE_LIMIT", 20.0),
            rate_burst=_int(env, "LEMONGRAPH_RATE_BURST", 40),
            max_body=_int(env, "LEMONGRAPH_API_MAX_BODY", 65536),
            gateway_jobs=_int(env, "LEMONGRAPH_GATEWAY_JOBS", 10_000),
            gateway_job_bytes=_int(env, "LEMONGRAPH_GATEWAY_JOB_BYTES", 1 << 20, low=1024),
            gateway_memory=_int(env, "LEMONGRAPH_GATEWAY_MEMORY", 128 << 20, low=1 << 20),
            gateway_pending_ttl=_seconds(env, "LEMONGRAPH_GATEWAY_PENDING_TTL", 300.0),
            gateway_write_timeout=_seconds(
                env, "LEMONGRAPH_GATEWAY_WRITE_TIMEOUT", 1.5, positive=True
            ),
            request_timeout=_seconds(
                env, "LEMONGRAPH_GATEWAY_REQUEST_TIMEOUT", 10.0, positive=True
            ),
            max_connections=_int(env, "LEMONGRAPH_GATEWAY_MAX_CONNECTIONS", 1000),
            streams_per_token=_int(env, "LEMONGRAPH_GATEWAY_STREAMS_PER_TOKEN", 20),
            max_clock_skew=_seconds(env, "LEMONGRAPH_MAX_CLOCK_SKEW", 300.0),
            state_cache=_int(env, "LEMONGRAPH_STATE_CACHE", 10_000, low=0),
            batch_linger_ms=_int(env, "LEMONGRAPH_BATCH_LINGER_MS", 0, low=0, high=1000),
            catalog=Path(env["LEMONGRAPH_CATALOG"].strip())
            if env.get("LEMONGRAPH_CATALOG", "").strip()
            else None,
            schedules_enabled=_flag(env, "LEMONGRAPH_SCHEDULES_ENABLED", True),
            rocksdb=RocksDBMemory.from_env(env),
            metrics_port=_metrics_port(env),
            metrics_host=env.get("LEMONGRAPH_METRICS_HOST", "").strip() or "127.0.0.1",
            file_max_bytes=_int(env, "LEMONGRAPH_FILE_MAX_BYTES", 10 << 20, low=1),
            file_types=_file_types(env),
            files_dir=Path(env["LEMONGRAPH_FILES_DIR"].strip())
            if env.get("LEMONGRAPH_FILES_DIR", "").strip()
            else None,
        )


def _file_types(env: dict[str, str]) -> tuple[str, ...]:
    """LEMONGRAPH_FILE_TYPES: the media types uploads may have (docs/operations.md, "Files")."""
    given = [t.strip().lower() for t in env.get("LEMONGRAPH_FILE_TYPES", "").split(",")]
    return tuple(t for t in given if t) or DEFAULT_FILE_TYPES


def _metrics_port(env: dict[str, str]) -> int | None:
    """LEMONGRAPH_METRICS_PORT: unset or empty, no metrics are served (a port
    is opened only when an operator asks for one: docs/operations.md, "Metrics")."""
    if not env.get("LEMONGRAPH_METRICS_PORT", "").strip():
        return None
    return _int(env, "LEMONGRAPH_METRICS_PORT", 0, low=0, high=65535)
