"""Edit without restart (docs/operations.md, "Reloading"): files changed in the
playbooks folder of a running `lemongraph dev` are checked and registered, or
refused with the reason, by its worker and its agents service; a new playbook
version is used by the next job, and a running job keeps its own."""

from __future__ import annotations

import shutil
import signal
from pathlib import Path

import pytest

from stream.runtime.broker import free_port
from tests.lanes import ROOT, wait_for
from tests.stream.cli.test_dev import start_dev
from tests.stream.cli.test_dev_keep import client_of, job

pytestmark = [pytest.mark.broker, pytest.mark.slow, pytest.mark.timeout(240)]

BROKEN = """\
key: broken
version: 1
name: Broken
milestones:
  - id: first
    condition: id_uploaded WITHIN
"""


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert old in text, old
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


def test_a_new_playbook_version_is_used_by_the_next_job_without_a_restart(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "playbooks"
    shutil.copytree(ROOT / "examples", folder)
    onboarding = folder / "onboarding.yaml"
    api_port = free_port()
    dev = start_dev(
        tmp_path,
        free_port(),
        LEMONGRAPH_API_PORT=str(api_port),
        LEMONGRAPH_PLAYBOOKS_DIR=str(folder),
    )
    try:
        dev.wait_for(": ready (group", timeout=90)
        dev.wait_for("agents: ready", timeout=90)
        with client_of(dev, api_port) as client:
            started = client.post("/v1/jobs", json={"key": "job-1", "playbook_key": "onboarding"})
            assert started.status_code == 202, started.text
            wait_for(lambda: job(client, "job-1").get("playbook_version") == 1, what="job-1 v1")

            # A new version dropped into the folder: registered, used by the next job.
            edit(onboarding, "version: 1", "version: 2")
            dev.wait_for("reload: registered onboarding v2 from", timeout=30)
            started = client.post("/v1/jobs", json={"key": "job-2", "playbook_key": "onboarding"})
            assert started.status_code == 202, started.text
            wait_for(lambda: job(client, "job-2").get("playbook_version") == 2, what="job-2 v2")
            assert job(client, "job-1")["playbook_version"] == 1  # pinned

            # Other content under v2, registered already: dev registers it as v3, saying so.
            edit(onboarding, "name: Customer onboarding", "name: Customer onboarding, edited")
            dev.wait_for("as onboarding v3: v2 is registered already with other content", 30)
            # A file that does not compile is refused, with its problem.
            (folder / "broken.yaml").write_text(BROKEN, encoding="utf-8")
            dev.wait_for(f"reload: refused: {folder / 'broken.yaml'}:6:", timeout=30)
            # The agents service takes a changed catalog, and refuses a broken one.
            catalog = folder / "catalog.yaml"
            edit(catalog, "agents:", "agents:\n  reviewer:\n    instructions: Review it.")
            dev.wait_for(f"agents: reload: took {catalog}", timeout=30)
            edit(catalog, "agents:", "agents: [")
            dev.wait_for(f"agents: reload: refused: {catalog}:", timeout=30)
            # A schedule added to schedules.yaml is published.
            edit(
                folder / "schedules.yaml",
                "schedules:",
                "schedules:\n  - {id: added-live, name: Added live, schedule: every 1h, "
                "action: {type: start_job, playbook_key: onboarding}}",
            )
            dev.wait_for("published (added-live)", timeout=30)
            wait_for(
                lambda: client.get("/v1/schedules/added-live").status_code == 200,
                what="the gateway to read the schedule",
            )
        said = "".join(dev.lines)
    finally:
        dev.stop(signal.SIGINT, timeout=60)
    for line in said.splitlines():
        if "reload:" in line:
            print(line)
