"""A token minted with `lemongraph token` works against a running `lemongraph dev`
that made up its own secret: dev writes it (mode 0600, never printed) under
LEMONGRAPH_DATA_DIR, and `token` signs with it while API_TOKEN_SECRET is unset."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
from pathlib import Path

import httpx
import pytest

from stream.runtime.broker import free_port
from tests.inprocess import invoke
from tests.stream.cli.test_dev import exit_within, start_dev


def token(cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEMONGRAPH_")}
    env.pop("API_TOKEN_SECRET", None)
    # in the test's process (tests/inprocess.py); `lemongraph dev` is a real process,
    # and so is `token` in tests/stream/gateway/test_tokens.py
    return invoke(["token", "--name", "me"], env=env, cwd=cwd)


def test_token_without_a_secret_or_a_running_dev_says_where_it_looked(tmp_path: Path) -> None:
    done = token(tmp_path)
    assert done.returncode == 1
    assert "API_TOKEN_SECRET is empty" in done.stderr
    assert str(Path("data") / "dev-api-token-secret") in done.stderr


@pytest.mark.broker
@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_token_minted_while_dev_runs_is_accepted_by_it(tmp_path: Path) -> None:
    api_port = free_port()
    dev = start_dev(tmp_path, free_port(), LEMONGRAPH_API_PORT=str(api_port))
    secret_file = tmp_path / "data" / "dev-api-token-secret"
    try:
        dev.wait_for(": ready (group", timeout=90)
        said = "".join(dev.lines)
        assert f"written to {Path('data') / 'dev-api-token-secret'} (mode 0600)" in said, said
        assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600
        secret = secret_file.read_text(encoding="utf-8").strip()
        assert secret not in said  # never printed

        minted = token(tmp_path)
        assert minted.returncode == 0, minted.stderr
        assert "signed with the secret of `lemongraph dev`" in minted.stderr
        assert secret not in minted.stdout + minted.stderr
        bearer = minted.stdout.splitlines()[-1]
        answer = httpx.get(
            f"http://127.0.0.1:{api_port}/v1/jobs",
            headers={"Authorization": f"Bearer {bearer}"},
            timeout=10,
        )
        assert answer.status_code == 200, answer.text
        dev.proc.send_signal(signal.SIGINT)
        exit_within(dev, 30)
    finally:
        dev.stop(signal.SIGKILL)
    assert not secret_file.exists(), "".join(dev.lines[-15:])  # this session's secret goes with it
