"""The RocksDB stores the agents' processes keep under LEMONGRAPH_DATA_DIR
(docs/operations.md): a module of its own, below the service and the channels
that both open one."""

from __future__ import annotations

from pathlib import Path

from rocksdict import Rdict
from stream.runtime.errors import StorageError

__all__ = ["open_store"]


def open_store(path: Path, process: str) -> Rdict:
    """A RocksDB store of ``lemongraph <process>``; a clear error when another
    process has it open."""
    try:
        return Rdict(str(path))
    except Exception as exc:  # rocksdict raises a bare Exception
        if "lock" in str(exc).lower():
            raise StorageError(
                f"{path}: another lemongraph {process} process uses this data folder; give "
                "each process its own LEMONGRAPH_DATA_DIR"
            ) from None
        raise StorageError(f"{path}: the store of {process} cannot be opened: {exc}") from None
