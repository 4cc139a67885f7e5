"""``lemongraph dev``: everything on this machine, in one process (the embedded
broker, a worker with the ticker, the gateway), and what other packages start
beside it through the entry-point group ``lemongraph.dev`` (the agents package:
the stand-in model, the demo tools, the mail catcher, and ``lemongraph agents``
and ``mail-ingress`` as child processes; docs/operations.md, "Commands")."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Protocol

import click
from aiokafka.errors import KafkaError

from stream.cli.common import DEV_SECRET_FILE, gateway_listeners, native
from stream.runtime.broker import BrokerStartError, EmbeddedBroker
from stream.runtime.broker.snapshot import (
    SnapshotError,
    SnapshotHeader,
    read_header,
    restore_snapshot,
    take_snapshot,
)
from stream.runtime.command import env_settings, say
from stream.runtime.config import Settings
from stream.runtime.errors import ExitCode
from stream.runtime.fetch import LAST_WORDS
from stream.runtime.files import RELOAD_ENV, reload_seconds
from stream.runtime.ports import Listener, check_ports

__all__ = ["DEV_PARTS", "DevPart", "dev"]

#: How often dev's worker and agents service look for changed files in the
#: playbooks folder, unless LEMONGRAPH_RELOAD says otherwise (docs/operations.md,
#: "Reloading").
RELOAD_SECONDS = "1"

#: The entry-point group of what other packages start for ``lemongraph dev``: each
#: names a class called with ``say`` whose objects are :class:`DevPart`.
DEV_PARTS = "lemongraph.dev"


class DevPart(Protocol):
    """What another package starts for ``lemongraph dev``, in the order dev calls it."""

    def listeners(self, settings: Settings) -> list[Listener]:
        """The fixed ports it will listen on, checked before anything starts."""
        ...

    def start_mail(self) -> Callable[[], list[dict[str, Any]]] | None:
        """Before the gateway: catch outbound mail; what was caught, for the
        gateway's GET /v1/dev/mail (None: it catches none)."""
        ...

    def start(self, settings: Settings) -> None:
        """After the gateway: start its services against ``settings``' broker."""
        ...

    def stop(self) -> None:
        """Stop what it started (it may have started only part of it)."""
        ...


@click.command()
@click.option(
    "--broker-port",
    default=9092,
    show_default=True,
    help="Port of the embedded broker (when LEMONGRAPH_KAFKA_URL is unset).",
)
@click.option(
    "--keep/--fresh",
    default=False,
    show_default=True,
    help="--keep: the embedded broker's topics are written to LEMONGRAPH_DATA_DIR/embedded "
    "when dev stops and restored at the next `dev --keep`, with the jobs, schedules, "
    "conversations and journal; --fresh (the default) forgets them at every start.",
)
@click.option("--loglevel", default="warning", show_default=True)
def dev(broker_port: int, keep: bool, loglevel: str) -> None:
    """Run everything on this machine: the embedded broker (unless
    LEMONGRAPH_KAFKA_URL is set), the topics, the playbooks, a worker, the
    ticker and the gateway (API and UI). Ctrl-C stops it all."""
    from stream.engine.worker import prepare, run_worker
    from stream.gateway import GatewayThread, addresses, mint_token, new_secret, ui_address

    # Every process of dev serves its metrics on a free port, each saying where
    # (`metrics: <process> URL`; docs/operations.md, "Metrics").
    settings = dataclasses.replace(env_settings(), metrics_port=0)
    # The agents child reads it from the environment dev hands it.
    os.environ.setdefault(RELOAD_ENV, RELOAD_SECONDS)
    reload_every = reload_seconds(os.environ)
    say(native())
    parts: list[DevPart] = [point.load()(say) for point in entry_points(group=DEV_PARTS)]
    _check_dev_ports(settings, broker_port, parts)
    made_up = not settings.api_token_secret
    secret_dir = settings.data_dir  # before the embedded broker's own state folder
    secret_file: Path | None = None
    if made_up:
        # A secret for this session only, so the dev token printed below works;
        # written (never printed) where `lemongraph token` finds it.
        settings = dataclasses.replace(settings, api_token_secret=new_secret())
    broker, settings, kept = _start_broker(settings, broker_port, keep)
    code: int = ExitCode.FAILED
    gateway: GatewayThread | None = None
    started: list[DevPart] = []
    died = _watch_broker(broker) if broker is not None else None
    try:
        prepared = prepare(settings, say)
        say(f"state: RocksDB under {settings.data_dir / 'faust'}")
        dev_mail = None
        for part in parts:
            started.append(part)
            dev_mail = part.start_mail() or dev_mail
        if made_up:
            secret_file = _write_dev_secret(secret_dir, settings.api_token_secret)
            say(
                "gateway: API_TOKEN_SECRET is empty: using a random secret for this session, "
                f"written to {secret_file} (mode 0600): `lemongraph token` signs with it "
                "while API_TOKEN_SECRET is unset"
            )
        gateway = GatewayThread(settings, say, dev_mail=dev_mail)
        gateway.start()
        say(addresses(settings))
        # The developer at the UI is the operator: the dev token answers approvals.
        dev_token = mint_token(
            settings.api_token_secret,
            now=time.time(),
            name="dev",
            ttl_seconds=7 * 86400,
            approver=True,
        )
        say(f"gateway: dev token (source world, approver, 7 days): {dev_token}")
        # The token in the fragment, which a browser never sends: the page keeps it
        # for the tab and takes it out of the address (docs/operations.md, "The UI").
        signed_in = f"{ui_address(settings)}ui/#token={dev_token}"
        say(f"gateway: open the UI (signed in with the dev token): {signed_in}")
        for part in parts:
            part.start(settings)
        code = run_worker(
            settings,
            prepared.registry,
            tansu=prepared.tansu,
            cluster=prepared.cluster,
            loglevel=loglevel,
            status_every=10.0,
            say=say,
            # Edit without restart, a changed version as the next one
            # (docs/operations.md, "Reloading").
            reload_every=reload_every,
            next_version=True,
        )
    finally:
        if secret_file is not None:  # first: a hard exit may cut the stopping short
            _remove_dev_secret(secret_file, settings.api_token_secret)
        for part in reversed(started):
            part.stop()
        if gateway is not None:
            gateway.stop()
        if broker is not None:
            if kept is not None and broker.running:
                kept.save(broker, settings)
            broker.stop()
            say("broker: stopped")
    if died is not None and died.is_set():
        code = code or ExitCode.FAILED
    sys.exit(code)


def _start_broker(
    settings: Settings, port: int, keep: bool
) -> tuple[EmbeddedBroker | None, Settings, KeptState | None]:
    """The embedded broker on ``port`` unless LEMONGRAPH_KAFKA_URL names one, and
    the settings that point at it; with ``keep``, given back what it held when
    the last ``dev --keep`` stopped (the state it saves at the stop)."""
    if settings.kafka_url is not None:
        say(f"broker: {settings.kafka_url}")
        if keep:
            say("state: --keep: nothing to do, that broker and LEMONGRAPH_DATA_DIR keep their own")
        return None, settings, None
    data_dir = settings.data_dir / "embedded"
    kept = KeptState(data_dir) if keep else None
    header = kept.snapshot() if kept is not None else None
    try:
        broker = EmbeddedBroker(port, cluster_id=header.cluster_id if header else None)
        broker.start()
    except BrokerStartError as exc:
        raise click.ClickException(f"embedded broker: {exc}") from None
    settings = dataclasses.replace(settings, kafka_url=broker.url, data_dir=data_dir)
    where = f"kept in {kept.file} when this stops" if kept else "gone when this stops"
    say(f"broker: embedded Tansu on {broker.bootstrap} (in memory; {where})")
    if kept is not None and header is not None:
        kept.restore(broker, settings)
        return broker, settings, kept
    # The embedded broker keeps everything in memory, so local state from an
    # earlier run describes records that no longer exist: start clean.
    had_state = data_dir.exists()
    shutil.rmtree(data_dir, ignore_errors=True)
    if kept is not None:
        say(f"state: --keep: no snapshot at {kept.file} of an earlier `dev --keep`: starting fresh")
    if had_state:
        say(
            f"state: fresh: removed {data_dir} of an earlier run (it described records "
            "the embedded broker has forgotten)"
        )
    return broker, settings, kept


class KeptState:
    """``dev --keep``'s snapshot of the embedded broker under ``data_dir``
    (docs/operations.md, "Keeping dev state"): written when dev stops, produced
    back into the new broker when it starts, before anything reads it
    (stream/runtime/broker/snapshot.py).

    The processes' local state under ``data_dir`` (RocksDB tables, watermarks)
    matches the snapshot only when the run that wrote it stopped right after:
    ``state-of`` names that snapshot, and is removed once a run starts on it.
    A run that ended without writing one (killed, or its broker died) leaves
    local state newer than the last snapshot: it is removed, and the processes
    rebuild it from the restored topics (their changelogs), as on a new machine."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.folder = data_dir / "broker"
        self.file = self.folder / "broker.snapshot"
        self.mark = self.folder / "state-of"

    def snapshot(self) -> SnapshotHeader | None:
        """The header of the snapshot to restore (None: there is none)."""
        if not self.file.exists():
            return None
        try:
            return read_header(self.file)
        except SnapshotError as exc:
            raise click.ClickException(
                f"{exc}: move it away, or run `lemongraph dev --fresh` to start afresh"
            ) from None

    def restore(self, broker: EmbeddedBroker, settings: Settings) -> None:
        """Produce the snapshot into ``broker``; keep or remove the local state."""
        try:
            done = asyncio.run(
                restore_snapshot(broker.bootstrap, self.file, settings.kafka_security)
            )
        except (SnapshotError, KafkaError, OSError) as exc:
            broker.stop()
            raise click.ClickException(
                f"state: could not restore {self.file}: {exc}; run `lemongraph dev --fresh` "
                "to start afresh (it removes it)"
            ) from None
        taken = datetime.fromtimestamp(done.header.taken_at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        say(f"state: kept: restored {done} (the snapshot of {taken})")
        matches = (
            self.mark.exists() and self.mark.read_text(encoding="utf-8").strip() == done.header.id
        )
        self.mark.unlink(missing_ok=True)  # from now on, the local state is this run's
        if not matches:
            removed = [p for p in self.data_dir.iterdir() if p != self.folder]
            for path in removed:
                shutil.rmtree(path, ignore_errors=True)
                with contextlib.suppress(OSError):
                    path.unlink()
            if removed:
                say(
                    "state: the last run did not stop cleanly after that snapshot: its local "
                    f"state under {self.data_dir} is removed and rebuilt from the restored topics"
                )

    def save(self, broker: EmbeddedBroker, settings: Settings) -> None:
        """Write the snapshot (every process of dev has stopped), then mark the
        local state as the one it goes with."""
        try:
            done = asyncio.run(
                take_snapshot(
                    broker.bootstrap, self.file, broker.cluster_id, settings.kafka_security
                )
            )
        except (SnapshotError, KafkaError, OSError) as exc:
            say(f"state: could not keep the broker's topics: {exc}; the next `dev --keep` "
                "restores the last snapshot written before this run")  # fmt: skip
            return
        self.mark.write_text(done.header.id + "\n", encoding="utf-8")
        say(f"state: kept: wrote {done} to {self.file}")


def _write_dev_secret(data_dir: Path, secret: str) -> Path:
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / DEV_SECRET_FILE
    with contextlib.suppress(FileNotFoundError):
        path.unlink()  # a stale one of a run that was killed: never reuse its mode
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(secret + "\n")
    return path


def _remove_dev_secret(path: Path, secret: str) -> None:
    # Only ours: another `dev` on the same folder may have written its own since.
    with contextlib.suppress(OSError):
        if path.read_text(encoding="utf-8").strip() == secret:
            path.unlink()


def _check_dev_ports(settings: Settings, broker_port: int, parts: list[DevPart]) -> None:
    """Fail fast, naming the port and its setting, when a fixed port of ``dev``
    is taken: the embedded broker's, the gateway's API and UI, and those of the
    parts (the agents' mail ingress). Ports picked free are not checked."""
    listeners = []
    if settings.kafka_url is None:
        listeners.append(
            Listener(
                "127.0.0.1",
                broker_port,
                "the embedded broker",
                "pass --broker-port (or set LEMONGRAPH_KAFKA_URL to use a running broker)",
            )
        )
    listeners += gateway_listeners(settings)
    for part in parts:
        listeners += part.listeners(settings)
    check_ports(listeners)


def _watch_broker(broker: EmbeddedBroker) -> threading.Event:
    """Watch the embedded broker: when it dies, say so and stop this process
    (SIGTERM, which the worker obeys within a few seconds). Everything the
    broker held is gone, so going on would only fail; rerunning ``lemongraph
    dev`` starts afresh. Returns the event set once it died."""
    died = threading.Event()
    told = threading.Lock()

    def tell() -> None:
        # From the watcher, or from a worker that is ending because of it.
        if broker.pid is None or broker.running or not told.acquire(blocking=False):
            return
        died.set()
        say(
            f"broker: the embedded broker exited unexpectedly (code {broker.returncode}); "
            "everything it held is gone: stopping. Run `lemongraph dev` again to start afresh"
        )

    def watch() -> None:
        while broker.running:
            time.sleep(0.2)
        if broker.pid is None:
            return  # stopped by us
        tell()
        os.kill(os.getpid(), signal.SIGTERM)

    LAST_WORDS.append(tell)
    threading.Thread(target=watch, name="broker-watch", daemon=True).start()
    return died
