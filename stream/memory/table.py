"""The memory processor's table (docs/memory.md, "How it is built"): in one
RocksDB database (rocksdict), each subject's profile as the ``memory`` topic
holds it (and its floor, stream/memory/fold.py), each erased subject's erasure
instant under a hash of the subject (never the subject itself), and per
``memory-facts`` partition the next offset to read. One batch of records is one
write batch, offsets included, so the table is always a fold of a prefix of
each partition."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from pathlib import Path

from rocksdict import AccessType, Options, Rdict, WriteBatch

__all__ = ["MemoryTable", "erasure_key"]

_PROFILE = b"p/"
_FLOOR = b"f/"
_ERASED = b"e/"
_OFFSET = b"o/"
_CLUSTER = b"cluster"


def erasure_key(subject: str) -> bytes:
    """Where a subject's erasure instant is kept: a SHA-256 of the subject, so
    the table no longer names a subject it has erased."""
    return _ERASED + hashlib.sha256(subject.encode()).hexdigest().encode()


class MemoryTable:
    """The table at ``path`` (created when missing; ``read_only``: opened
    beside a running processor, to verify it)."""

    def __init__(self, path: Path, *, read_only: bool = False) -> None:
        path.mkdir(parents=True, exist_ok=True)
        options = Options(raw_mode=True)
        options.create_if_missing(not read_only)
        access = AccessType.read_only() if read_only else AccessType.read_write()
        self.path = path
        self.db = Rdict(str(path), options=options, access_type=access)

    def close(self) -> None:
        """Close the database."""
        self.db.close()

    def profile(self, subject: str) -> bytes | None:
        """The subject's profile as stored (None: it has none)."""
        raw: bytes | None = self.db.get(_PROFILE + subject.encode())
        return raw

    def floor(self, subject: str) -> bytes | None:
        """The subject's profile's floor (stream/memory/fold.py; None: none)."""
        raw: bytes | None = self.db.get(_FLOOR + subject.encode())
        return raw

    def erased(self, subject: str) -> str | None:
        """The instant the subject was last erased (None: never)."""
        raw: bytes | None = self.db.get(erasure_key(subject))
        return raw.decode() if raw is not None else None

    def _rows(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """The rows whose key starts with ``prefix``, the prefix cut off, in key order."""
        for key, value in self.db.items(from_key=prefix):
            assert isinstance(key, bytes)  # raw mode
            assert isinstance(value, bytes)
            if not key.startswith(prefix):
                break
            yield key[len(prefix) :], value

    def cluster(self) -> str | None:
        """The id of the broker cluster whose log the table was folded from."""
        raw: bytes | None = self.db.get(_CLUSTER)
        return raw.decode() if raw is not None else None

    def set_cluster(self, cluster: str) -> None:
        """Record the cluster the table is folded from."""
        self.db.put(_CLUSTER, cluster.encode())

    def offsets(self) -> dict[int, int]:
        """Per partition, the next offset to read."""
        return {int(key): int(value) for key, value in self._rows(_OFFSET)}

    def profiles(self) -> Iterator[tuple[str, bytes]]:
        """Every stored profile, by subject (in key order)."""
        for key, value in self._rows(_PROFILE):
            yield key.decode(), value

    def floors(self) -> Iterator[tuple[bytes, bytes]]:
        """Every floor row: (subject, floor)."""
        return self._rows(_FLOOR)

    def erasures(self) -> Iterator[tuple[bytes, bytes]]:
        """Every erasure row: (the subject's hash, the instant)."""
        return self._rows(_ERASED)

    def write(
        self,
        profiles: Mapping[str, tuple[bytes, bytes | None] | None],
        erasures: Mapping[str, str],
        offsets: Mapping[int, int],
    ) -> None:
        """One batch: the changed profiles with their floors (None deletes
        both), the erasure instants and the partitions' next offsets, in one
        atomic write."""
        batch = WriteBatch(raw_mode=True)
        for subject, row in profiles.items():
            key = _PROFILE + subject.encode()
            floor = _FLOOR + subject.encode()
            if row is None:
                batch.delete(key)
                batch.delete(floor)
                continue
            batch.put(key, row[0])
            if row[1] is None:
                batch.delete(floor)
            else:
                batch.put(floor, row[1])
        for subject, at in erasures.items():
            batch.put(erasure_key(subject), at.encode())
        for partition, offset in offsets.items():
            batch.put(_OFFSET + str(partition).encode(), str(offset).encode())
        self.db.write(batch)
