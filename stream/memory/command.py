"""``lemongraph memory`` (run the memory processor; ``--rebuild`` from offset 0
into a fresh table) and ``lemongraph memory verify`` (fold the log again and
compare byte for byte): docs/memory.md, "How it is built"; docs/operations.md."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

import click

from stream.memory.fold import Bounds
from stream.memory.processor import BATCH_MAX, MemoryProcessor, fold_batch
from stream.memory.table import MemoryTable
from stream.runtime.broker import cluster_id, ensure_all_topics, is_tansu
from stream.runtime.command import env_settings, require_kafka, say
from stream.runtime.config import Settings
from stream.runtime.dotenv import read_dotenv
from stream.runtime.errors import ExitCode
from stream.runtime.kafka import bootstrap_of, read_topic, run
from topics import Topics

__all__ = ["bounds_from_env", "memory", "table_path", "verify_table"]


def _env() -> dict[str, str]:
    """The environment over ``.env``, as the settings read them."""
    env = read_dotenv(Path(".env"))
    env.update(os.environ)
    return env


def _count(env: Mapping[str, str], name: str, default: int) -> int:
    """A whole number of at least 1 from ``env`` (``default`` when unset); another
    value is the command's error."""
    raw = env.get(name, "").strip()
    try:
        value = int(raw) if raw else default
    except ValueError:
        raise click.ClickException(f"{name}={raw!r} must be a whole number") from None
    if value < 1:
        raise click.ClickException(f"{name}={raw!r} must be at least 1")
    return value


def bounds_from_env(env: Mapping[str, str]) -> Bounds:
    """``LEMONGRAPH_MEMORY_VERSIONS``, ``LEMONGRAPH_MEMORY_NAMES`` and
    ``LEMONGRAPH_MEMORY_NOTES`` (docs/memory.md, "Bounds")."""
    default = Bounds()
    return Bounds(
        _count(env, "LEMONGRAPH_MEMORY_VERSIONS", default.versions),
        _count(env, "LEMONGRAPH_MEMORY_NAMES", default.names),
        _count(env, "LEMONGRAPH_MEMORY_NOTES", default.notes),
    )


def table_path(settings: Settings) -> Path:
    """Where the processor keeps its table: ``memory`` under LEMONGRAPH_DATA_DIR."""
    return settings.data_dir / "memory"


@click.group(invoke_without_command=True)
@click.option(
    "--rebuild",
    is_flag=True,
    help="Discard the table first and fold memory-facts again from offset 0.",
)
@click.pass_context
def memory(ctx: click.Context, rebuild: bool) -> None:
    """Run the memory processor against LEMONGRAPH_KAFKA_URL: memory-facts into
    each subject's profile on the memory topic (docs/memory.md)."""
    if ctx.invoked_subcommand is not None:
        return
    settings = env_settings()
    require_kafka(settings)
    bounds = bounds_from_env(_env())
    path = table_path(settings)
    if rebuild and path.exists():
        shutil.rmtree(path)
        say(f"memory: table {path} discarded: folding from offset 0")
    batch_max = _count(_env(), "LEMONGRAPH_MEMORY_BATCH", BATCH_MAX)
    run(ensure_all_topics(settings))
    cluster = run(cluster_id(bootstrap_of(settings.kafka_url or ""), settings.kafka_security))
    table = _table_of(path, cluster)
    try:
        processor = MemoryProcessor(
            settings, table, bounds, say, batch_max, tansu=is_tansu(cluster)
        )
        run(processor.serve())
    finally:
        table.close()


def _table_of(path: Path, cluster: str) -> MemoryTable:
    """The table at ``path``, folded from ``cluster``'s log: a table folded from
    another cluster's (a broker that was reset: ``dev``'s embedded one at every
    start) holds offsets of a log that is gone, so it is discarded and the
    processor folds this log from offset 0 (docs/memory.md, "Rebuilding and verifying")."""
    table = MemoryTable(path)
    known = table.cluster()
    if known is not None and known != cluster:
        table.close()
        shutil.rmtree(path)
        say("memory: the table was folded from another cluster's log: folding from offset 0")
        table = MemoryTable(path)
    table.set_cluster(cluster)
    return table


@memory.command()
def verify() -> None:
    """Fold memory-facts again from offset 0, up to the offsets the table
    stored, into a fresh table, and compare every profile and erasure byte for
    byte (exit 1 on a difference). The processor may keep running."""
    settings = env_settings()
    require_kafka(settings)
    bounds = bounds_from_env(_env())
    live = MemoryTable(table_path(settings), read_only=True)
    try:
        differences = run(verify_table(settings, live, bounds))
    finally:
        live.close()
    for line in differences:
        say(line)
    if differences:
        say(f"memory: verify: {len(differences)} differences")
        sys.exit(ExitCode.FAILED)
    say("memory: verify: the rebuilt profiles equal the table's byte for byte")


async def verify_table(settings: Settings, live: MemoryTable, bounds: Bounds) -> list[str]:
    """What differs between ``live`` and a fresh fold of memory-facts up to its offsets."""
    upto = live.offsets()
    with tempfile.TemporaryDirectory(prefix="lemongraph-memory-") as folder:
        fresh = MemoryTable(Path(folder) / "table")
        try:
            pending: list[tuple[int, int, bytes | None]] = []
            topic = Topics(settings.topic_prefix).memory_facts
            async for r in read_topic(
                bootstrap_of(settings.kafka_url or ""),
                topic,
                security=settings.kafka_security,
            ):
                if r.offset < upto.get(r.partition, 0):
                    pending.append((r.partition, r.offset, r.value))
                if len(pending) >= BATCH_MAX:
                    _store(fresh, pending, bounds)
            _store(fresh, pending, bounds)
            return compare(live, fresh)
        finally:
            fresh.close()


def _store(
    table: MemoryTable, records: list[tuple[int, int, bytes | None]], bounds: Bounds
) -> None:
    changes = fold_batch(table, records, bounds)
    table.write(changes.profiles, changes.erasures, changes.offsets)
    records.clear()


def compare(live: MemoryTable, fresh: MemoryTable) -> list[str]:
    """One line per subject (or erasure row) the two tables hold differently."""
    out: list[str] = []
    mine = dict(live.profiles())
    theirs = dict(fresh.profiles())
    for subject in sorted(mine.keys() | theirs.keys()):
        if mine.get(subject) != theirs.get(subject):
            out.append(f"memory: verify: subject {subject!r}: the profile differs")
    if dict(live.floors()) != dict(fresh.floors()):
        out.append("memory: verify: the profiles' floors differ")
    if dict(live.erasures()) != dict(fresh.erasures()):
        out.append("memory: verify: the erasure rows differ")
    if live.offsets() != fresh.offsets():
        out.append("memory: verify: memory-facts was not read up to the table's offsets")
    return out
