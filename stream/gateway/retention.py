"""What the raw logs keep after a subject is erased (docs/memory.md, "Erasing";
docs/api.md, "Subjects"): each topic's cleanup policy and ``retention.ms``, read
from the broker's topic configs when it answers DescribeConfigs, else Kafka's
documented defaults; an answer says which.

Looked up once per :data:`CACHE_SECONDS` per gateway (an erasure is rare, the
admin client costs a connection)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from stream.runtime.kafka import KafkaSecurity, client_kwargs

__all__ = ["DEFAULT_RETENTION_MS", "TopicRetention", "describe_retention", "retention_text"]

log = logging.getLogger("lemongraph.gateway")

#: Kafka's default ``retention.ms`` (7 days) and ``cleanup.policy`` (delete):
#: what a topic lemongraph created holds unless an operator set otherwise
#: (stream/runtime/broker/__init__.py sets only ``cleanup.policy=compact`` on the compacted ones).
DEFAULT_RETENTION_MS = 7 * 24 * 3600 * 1000
CACHE_SECONDS = 60.0
#: Seconds the broker has to answer before the defaults are said instead.
LOOKUP_TIMEOUT = 3.0


@dataclass(frozen=True)
class TopicRetention:
    """How long one topic keeps a record."""

    topic: str
    cleanup_policy: str  # delete | compact | compact,delete
    retention_ms: int | None  # -1: forever; None: not time-bound (compacted only)
    known_from: str  # broker | default

    def json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "cleanup_policy": self.cleanup_policy,
            "retention_ms": self.retention_ms,
            "retention": retention_text(self.cleanup_policy, self.retention_ms),
            "known_from": self.known_from,
        }


def retention_text(policy: str, ms: int | None) -> str:
    """In words: ``7 days``, ``forever``, or the newest record per key for a
    compacted topic."""
    if "delete" not in policy:
        return "the newest record of each key, until that key is written again or erased"
    if ms is None or ms < 0:
        return "forever (retention.ms is -1)"
    days, rest = divmod(ms, 24 * 3600 * 1000)
    if rest == 0:
        return f"{days} day{'s' if days != 1 else ''}"
    return f"{ms / 3_600_000:g} hours"


def _defaults(names: Sequence[str], compacted: Mapping[str, bool]) -> dict[str, TopicRetention]:
    out = {}
    for name in names:
        policy = "compact" if compacted.get(name) else "delete"
        ms = None if policy == "compact" else DEFAULT_RETENTION_MS
        out[name] = TopicRetention(name, policy, ms, "default")
    return out


def _entries(resource: Sequence[Any]) -> tuple[str, dict[str, str]] | None:
    """(topic, config name → value) of one DescribeConfigs resource, None on its error."""
    error_code, _message, _type, name, entries = resource[:5]
    if error_code:
        return None
    return str(name), {str(e[0]): str(e[1]) for e in entries if e[1] is not None}


_cache: dict[tuple[str, tuple[str, ...]], tuple[float, dict[str, TopicRetention]]] = {}


async def describe_retention(
    bootstrap: str,
    security: KafkaSecurity | None,
    names: Sequence[str],
    compacted: Mapping[str, bool],
) -> dict[str, TopicRetention]:
    """Each topic's retention, from the broker where it answers, else the
    defaults (``known_from`` says which)."""
    key = (bootstrap, tuple(names))
    held = _cache.get(key)
    if held is not None and time.monotonic() - held[0] < CACHE_SECONDS:
        return held[1]
    found = _defaults(names, compacted)
    admin = AIOKafkaAdminClient(
        **client_kwargs(bootstrap, security), request_timeout_ms=int(LOOKUP_TIMEOUT * 1000)
    )
    try:
        await asyncio.wait_for(admin.start(), LOOKUP_TIMEOUT)
        wanted = [ConfigResource(ConfigResourceType.TOPIC, n) for n in names]
        responses = await asyncio.wait_for(admin.describe_configs(wanted), LOOKUP_TIMEOUT)
        for response in responses:
            for resource in response.resources:
                parsed = _entries(resource)
                if parsed is None or parsed[0] not in found:
                    continue
                name, configs = parsed
                policy = configs.get("cleanup.policy") or found[name].cleanup_policy
                raw = configs.get("retention.ms")
                ms = int(raw) if raw is not None and raw.lstrip("-").isdigit() else None
                if ms is None and "delete" in policy:
                    continue  # the broker did not say: the default stands
                found[name] = TopicRetention(name, policy, ms, "broker")
    except Exception as exc:  # any failure: the documented defaults are the answer
        log.info("gateway: topic configs not read from the broker (%s): defaults said", exc)
    finally:
        try:
            await admin.close()
        except Exception as exc:  # closing a client that never started
            log.debug("gateway: admin client close: %s", exc)
    _cache[key] = (time.monotonic(), found)
    return found
