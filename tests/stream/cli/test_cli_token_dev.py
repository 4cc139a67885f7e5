"""A token minted with `lemongraph token` works against a running `lemongraph dev`
that made up its own secret: dev writes it (mode 0600, never printed) under
LEMONGRAPH_DATA_DIR, and `token` signs with it while API_TOKEN_SECRET is unset
(tested on the shared dev process of tests/stream/cli/test_dev.py). Here:
`token` with neither."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.inprocess import invoke


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
