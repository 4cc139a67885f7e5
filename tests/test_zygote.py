"""The fork server (tests/zygote.py): a process it starts says, exits and ends on
a signal as the console script's process does, with the environment and the
working folder the test gave it."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import zygote
from tests.lanes import ROOT, console_process

pytestmark = pytest.mark.timeout(120)


def bare_env(**extra: str) -> dict[str, str]:
    """No lemongraph setting but those given (the test process's are not passed)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEMONGRAPH_")}
    env.update(extra)
    return env


def forked(args: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, str]:
    process = zygote.spawn(args, cwd, env)
    assert process.stdout is not None
    output = process.stdout.read()
    process.stdout.close()
    return process.wait(60), output


def console(args: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, str]:
    process = console_process(args, cwd, env)
    output, _ = process.communicate(timeout=60)
    return process.returncode, output


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never answers (a hung broker)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield listener.getsockname()[1]


@pytest.mark.parametrize(
    "setting",
    [{}, {"LEMONGRAPH_KAFKA_URL": "kafka://127.0.0.1:1"}],
    ids=["no-broker-set", "broker-refuses"],
)
def test_a_forked_worker_says_and_exits_as_the_console_scripts_does(
    tmp_path: Path, setting: dict[str, str]
) -> None:
    env = bare_env(**setting)
    expected = console(["worker"], tmp_path, env)
    assert expected[0] != 0
    assert forked(["worker"], tmp_path, env) == expected


def test_a_forked_command_runs_in_the_folder_it_was_given(tmp_path: Path) -> None:
    shutil.copy(ROOT / "examples" / "onboarding.yaml", tmp_path / "mine.yaml")
    assert forked(["check", "mine.yaml"], tmp_path, bare_env()) == (0, "ok: 1 file(s) valid\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code, output = forked(["check", "mine.yaml"], elsewhere, bare_env())
    assert (code, output) == (1, "mine.yaml: no such file or folder\n")


def test_a_signal_ends_a_forked_process_as_a_real_one(tmp_path: Path, silent_port: int) -> None:
    # The worker waits for the silent broker's answer; SIGTERM before Faust has
    # installed its handlers ends it by the signal (the fork server's own handler
    # is not inherited), as it ends the console script's process.
    env = bare_env(LEMONGRAPH_KAFKA_URL=f"kafka://127.0.0.1:{silent_port}")
    real = console_process(["worker"], tmp_path, env)
    fork = zygote.spawn(["worker"], tmp_path, env)
    for process in (real, fork):
        assert process.stdout is not None
        assert "decision core" in process.stdout.readline()
        with pytest.raises(subprocess.TimeoutExpired):
            process.wait(0.2)
        assert process.poll() is None
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == -signal.SIGTERM
        process.stdout.close()
    assert fork.cpu > 0
    fork.send_signal(signal.SIGKILL)  # ended: nothing is signalled (its pid may be reused)
    assert fork.returncode == -signal.SIGTERM


def test_services_start_forked_unless_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    assert zygote.enabled(["worker", "--loglevel", "warning"])
    assert zygote.enabled(["gateway"])
    assert not zygote.enabled(["dev"])  # dev's own life is what its tests test
    monkeypatch.setenv(zygote.ENABLED, "0")
    assert not zygote.enabled(["worker"])
