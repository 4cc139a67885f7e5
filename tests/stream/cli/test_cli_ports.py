"""A port already in use is named, with what uses it and the setting that moves
it, and the command fails before it starts anything: not a broker's panic, not "gateway did not
start: 3"."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from stream.runtime.broker import free_port
from tests.inprocess import lemongraph as run
from tests.lanes import ROOT


@pytest.fixture
def taken() -> Iterator[int]:
    """A port something listens on for the whole test."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def lemongraph(
    *args: str, cwd: Path, process: bool = False, **env: str
) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("LEMONGRAPH_")}
    clean.pop("API_TOKEN_SECRET", None)
    clean.update(
        LEMONGRAPH_PLAYBOOKS_DIR=str(ROOT / "examples"),
        LEMONGRAPH_DATA_DIR=str(cwd / "data"),
        LEMONGRAPH_API_PORT=str(free_port()),
        LEMONGRAPH_UI_PORT=str(free_port()),
        LEMONGRAPH_MAIL_INGRESS_PORT=str(free_port()),
    )
    clean.update(env)
    # In the test's process (tests/inprocess.py) unless ``process``: each command
    # here fails on its port check, before it starts anything. Their console
    # scripts run as real processes in tests/stream/cli/test_dev.py (dev),
    # tests/stream/gateway/conftest.py (gateway), tests/agents/dev/test_standin.py
    # (standin) and below (demo-tools).
    return run(*args, env=clean, cwd=cwd, process=process, timeout=60)


@pytest.mark.parametrize(
    ("variable", "words"),
    [
        ("LEMONGRAPH_API_PORT", "the gateway's API; set LEMONGRAPH_API_PORT to change it"),
        ("LEMONGRAPH_UI_PORT", "the gateway's UI; set LEMONGRAPH_UI_PORT to change it"),
        (
            "LEMONGRAPH_MAIL_INGRESS_PORT",
            "the mail ingress, where replies come in; set LEMONGRAPH_MAIL_INGRESS_PORT",
        ),
    ],
)
def test_dev_names_a_taken_port_and_its_variable(
    taken: int, tmp_path: Path, variable: str, words: str
) -> None:
    done = lemongraph(
        "dev", "--broker-port", str(free_port()), cwd=tmp_path, **{variable: str(taken)}
    )
    assert done.returncode != 0
    assert f"port {taken} is in use ({words}" in done.stderr, done.stdout + done.stderr
    assert "broker: embedded" not in done.stdout  # it failed before starting anything


def test_dev_names_a_taken_broker_port_and_its_flag(taken: int, tmp_path: Path) -> None:
    done = lemongraph("dev", "--broker-port", str(taken), cwd=tmp_path)
    assert done.returncode != 0
    assert f"port {taken} is in use (the embedded broker; pass --broker-port" in done.stderr, (
        done.stdout + done.stderr
    )
    assert "panic" not in done.stderr.lower()


def test_gateway_names_a_taken_port(taken: int, tmp_path: Path) -> None:
    done = lemongraph(
        "gateway",
        cwd=tmp_path,
        LEMONGRAPH_KAFKA_URL="kafka://127.0.0.1:9",
        LEMONGRAPH_API_PORT=str(taken),
    )
    assert done.returncode != 0
    assert f"port {taken} is in use (the gateway's API; set LEMONGRAPH_API_PORT" in done.stderr


@pytest.mark.parametrize("command", ["standin", "demo-tools"])
def test_a_server_command_names_a_taken_port(taken: int, tmp_path: Path, command: str) -> None:
    done = lemongraph(command, "--port", str(taken), cwd=tmp_path, process=command == "demo-tools")
    assert done.returncode != 0
    assert f"port {taken} is in use" in done.stderr
    assert "pass --port" in done.stderr


def test_the_embedded_broker_names_a_taken_port_without_its_panic(taken: int) -> None:
    # What `lemongraph dev` says when the port is taken after its check.
    from stream.runtime.broker import EmbeddedBroker
    from stream.runtime.errors import BrokerStartError

    with pytest.raises(BrokerStartError) as info:
        EmbeddedBroker(taken).start()
    assert str(info.value).startswith(f"port {taken} is in use (the embedded broker; pass ")
    assert "panic" not in str(info.value)


def test_free_ports_come_from_below_the_kernels_ephemeral_range_and_are_not_repeated() -> None:
    # An ephemeral port can be taken, a moment after it was free, as the local end
    # of an outgoing connection; a CI run failed on exactly that ("port 46781 is in
    # use (the gateway's UI)").
    low, _ = (int(n) for n in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    ports = [free_port() for _ in range(50)]
    assert len(set(ports)) == 50
    assert all(port < low for port in ports)
    for port in ports[:5]:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", port))
