"""`lemongraph dev` answers with the stand-in script named by
LEMONGRAPH_STANDIN_SCRIPT (here from the project's .env) and with the flows' own
``NAME.standin.yaml``, and says so: its model line names the stand-in and its
scripts, and the agents it starts call the stand-in, not gpt-4o (docs/agents.md,
"The stand-in model"; docs/operations.md, "Commands")."""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from agents.dev.parts import dev_script
from agents.dev.standin import Seen, policy
from stream.runtime.broker import free_port
from stream.runtime.errors import ConfigError
from tests.lanes import ROOT
from tests.stream.cli.test_dev import start_dev

SCRIPT = """\
rules:
  - when: {last_message_contains: "lighthouse"}
    say: "The scripted keeper answers: the lighthouse is lit."
"""


def seen(flow: str | None = None, node: str | None = None, said: str | None = None) -> Seen:
    """A call of a flow's llm node (``flow``, ``node``), or an agent's call
    answering the person's ``said``."""
    return Seen(None, None, (), None, said, answering=said is not None, flow=flow, node=node)


def test_the_flows_scripts_answer_only_their_own_flow_then_the_named_script(
    tmp_path: Path,
) -> None:
    flows = tmp_path / "flows"
    flows.mkdir()
    (flows / "ticket.standin.yaml").write_text(
        "rules:\n  - when: {flow_node: desk}\n    say: ticket desk\n  - say: ticket always\n"
    )
    (flows / "ticket.yaml").write_text("not a script: a flow\n")
    named = tmp_path / "mine.yaml"
    named.write_text("rules:\n  - when: {flow_node: desk}\n    say: mine\n  - say: mine always\n")
    script, files = dev_script(named, flows)
    assert files == [flows / "ticket.standin.yaml", named]
    assert script is not None
    assert policy(seen("ticket", "desk"), script).say == "ticket desk"
    assert policy(seen("ticket", "other"), script).say == "ticket always"
    # another flow's node, and an agent's turn: the flow's rules do not hold
    assert policy(seen("refund", "desk"), script).say == "mine"
    assert policy(seen(said="hi"), script).say == "mine always"
    assert dev_script(None, tmp_path / "none") == (None, [])
    named.write_text("rules: [{when: {nobody: 1}, say: x}]\n")
    with pytest.raises(ConfigError, match=r"^LEMONGRAPH_STANDIN_SCRIPT: .*mine\.yaml"):
        dev_script(named, flows)


@pytest.mark.slow  # `lemongraph dev`, every part started
def test_dev_answers_with_the_script_of_its_env_file_and_names_the_stand_in(
    tmp_path: Path,
) -> None:
    (tmp_path / "keeper.yaml").write_text(SCRIPT)
    (tmp_path / ".env").write_text("LEMONGRAPH_STANDIN_SCRIPT=keeper.yaml\n")
    api_port = free_port()
    dev = start_dev(tmp_path, free_port(), LEMONGRAPH_API_PORT=str(api_port))
    try:
        dev.wait_for("agents: ready", timeout=90)
        said = "".join(dev.lines)
        # the agents process calls the stand-in by its name (OPENAI_MODEL=standin), not
        # the default gpt-4o; dev says so on the one model line (its child repeats nothing)
        [line] = [s for s in dev.lines if s.startswith("agents: model standin: ")]
        flows = ROOT / "examples" / "flows"
        assert line.startswith(
            f"agents: model standin: the stand-in (script {flows / 'approve-refund.standin.yaml'}, "
        ), line
        assert re.search(r"keeper\.yaml\) at http://127\.0\.0\.1:\d+/v1 \(LEMONGRAPH_STANDIN", line)
        assert "gpt-4o" not in said
        [token] = re.findall(r"dev token \([^)]*\): (lemongraph_sk_\S+)", said)
        headers = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=f"http://127.0.0.1:{api_port}", headers=headers) as client:

            def out() -> list[str]:
                got = client.get("/v1/jobs/job-1/messages").json().get("messages", [])
                return [m["text"] for m in got if m["direction"] == "out"]

            def until(check: Any, what: str) -> Any:
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:
                    if found := check():
                        return found
                    time.sleep(0.3)
                raise AssertionError(f"timed out waiting for {what}:\n{''.join(dev.lines[-30:])}")

            job = {"key": "job-1", "playbook_key": "onboarding", "contacts": [{"name": "Ada"}]}
            assert client.post("/v1/jobs", json=job).status_code == 202
            until(out, "the agent's first words")
            sent = client.post("/v1/jobs/job-1/messages", json={"text": "Is the lighthouse lit?"})
            assert sent.status_code == 202, sent.text
            until(
                lambda: "The scripted keeper answers: the lighthouse is lit." in out(),
                "the script's reply",
            )
        assert dev.stop(signal.SIGINT, timeout=40) == 0
    finally:
        dev.stop(signal.SIGKILL)
