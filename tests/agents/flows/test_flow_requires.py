"""``flow check`` checks a flow's ``requires`` against where it runs
(docs/flows.md, "What a flow requires"): the process's environment, the
packages installed in it, and the catalog's MCP servers. The click command in
the test's process (tests/inprocess.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.stream.cli.test_cli_simulate_check import PLAYBOOKS, run

FLOW = """\
version: "1"
description: Look the order up on the demo order desk.
inputs: [email]
outputs: [customer]
requires:
  env: [LGFLOW_TEST_SHOP_KEY]
  packages: {mcp: ">=1", lgflow-test-no-such-package: "*"}
  mcp:
    orders: {}
    ledger: {}
state:
  email: {type: string, description: The address the customer wrote from.}
  customer: {type: object, description: The customer as the order desk knows her.}
tools: [find_customer, customer_orders]
start: find
nodes:
  - {id: find, type: tool, tool: find_customer, args: {email: "{{email}}"}, output: customer}
edges:
  - {from: find, to: END}
"""


def test_flow_check_reads_requires_against_this_process_and_the_catalog(tmp_path: Path) -> None:
    (tmp_path / "flows").mkdir()
    (tmp_path / "flows" / "desk.yaml").write_text(FLOW, encoding="utf-8")
    shutil.copy(PLAYBOOKS / "catalog.yaml", tmp_path)
    shutil.copytree(PLAYBOOKS / "skills", tmp_path / "skills")
    proc = run("flow", "check", "flows/desk.yaml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout
    assert proc.stdout.splitlines() == [
        "flows/desk.yaml:6:9: warning ENV_NOT_SET: requires.env names LGFLOW_TEST_SHOP_KEY, "
        "and it is not set here: a run would miss it",
        "flows/desk.yaml:7:55: warning PACKAGE_MISSING: requires.packages names "
        "lgflow-test-no-such-package, and it is not installed here "
        "(pip install lgflow-test-no-such-package)",
        "flows/desk.yaml:10:13: warning SERVICE_NOT_DECLARED: requires.mcp names ledger, and "
        "the catalog's mcp_servers do not declare it (mcp_servers: orders, setup_guide)",
        "ok: 1 flow(s) valid, 3 warning(s)",
    ]
    # Set, installed and declared: nothing to say (the mcp package is installed here).
    fixed = FLOW.replace(', lgflow-test-no-such-package: "*"', "").replace("    ledger: {}\n", "")
    (tmp_path / "flows" / "desk.yaml").write_text(fixed, encoding="utf-8")
    env = {"LGFLOW_TEST_SHOP_KEY": "k"}
    proc = run("flow", "check", "flows/desk.yaml", cwd=tmp_path, env=env)
    assert proc.stdout == "ok: 1 flow(s) valid\n"
