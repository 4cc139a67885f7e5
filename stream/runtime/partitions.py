"""Which partition a key lives on (docs/kafka.md, "Partitioning"): murmur2 of
the key, as the Java client's and aiokafka's default partitioner (and
librdkafka's ``murmur2_random``) choose it. A job's records, a schedule's and
a conversation's all live on their key's home partition."""

from __future__ import annotations

from aiokafka.partitioner import murmur2

__all__ = ["HOMES_KEPT", "Homes", "home_partition"]

#: The most keys whose home partition a :class:`Homes` remembers (a dict of
#: key → partition, emptied when full): murmur2 is pure Python in aiokafka
#: and a job's events come in a few at a time.
HOMES_KEPT = 100_000


def home_partition(key: bytes, partitions: int) -> int:
    """The partition ``key`` lives on, of ``partitions``."""
    index: int = murmur2(key)
    return (index & 0x7FFFFFFF) % partitions


class Homes:
    """:func:`home_partition` for one partition count, remembering the last
    :data:`HOMES_KEPT` keys' answers."""

    def __init__(self, partitions: int) -> None:
        self.partitions = partitions
        self._homes: dict[bytes, int] = {}

    def of(self, key: bytes) -> int:
        """The partition ``key`` lives on."""
        homes = self._homes
        home = homes.get(key)
        if home is None:
            if len(homes) >= HOMES_KEPT:
                homes.clear()
            home = homes[key] = home_partition(key, self.partitions)
        return home

    def __len__(self) -> int:
        return len(self._homes)
