"""The stand-in script `lemongraph dev` answers with: the flows' own
``NAME.standin.yaml`` for their own flow, then the script named by
LEMONGRAPH_STANDIN_SCRIPT (docs/agents.md, "The stand-in model"). That a running
dev answers with them and names them is tested on the shared dev process of
tests/stream/cli/test_dev.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.dev.parts import dev_script
from agents.dev.standin import Seen, policy
from stream.runtime.errors import ConfigError


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
