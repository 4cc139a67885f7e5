"""`lemongraph flow check` and `lemongraph check` with flows (docs/flows.md), the
click command in the test's process (tests/inprocess.py; the console script
itself: tests/stream/cli/test_cli_flow_run.py, test_cli_simulate_check.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.stream.cli.test_cli_simulate_check import PLAYBOOKS, run

EXAMPLE = PLAYBOOKS / "flows" / "lookup-then-ask.yaml"

PLAYBOOK = """\
key: shop
version: 1
milestones:
  - id: resolve
    condition: {fact} WITHIN 7d
    integrations: [{integration}]
    flow: {flow}
"""

BROKEN = """\
version: "1"
start: a
nodes:
  - {id: a, type: handler, handler: h}
edges:
  - {from: a, to: b}
"""

WARNS = """\
version: "1"
outputs: [total]
state:
  total: {type: number}
start: add
nodes:
  - {id: add, type: handler, handler: add_up, reads: [total], output: total, description: Add one to it.}
edges:
  - {from: add, to: END}
"""  # noqa: E501 (a node on one line: its columns are the test)


#: A module of handlers the flows above name (docs/flows.md, "Handlers and routers").
HANDLERS = """\
from agents.flows.handlers import handler


@handler("h")
def h(view):
    return None


@handler("add_up")
def add_up(view):
    return (view.get("total") or 0) + 1
"""


def registered(folder: Path) -> dict[str, str]:
    """The environment that registers ``HANDLERS`` (a module in ``folder``,
    where the command runs)."""
    (folder / "here_handlers.py").write_text(HANDLERS, encoding="utf-8")
    return {"LEMONGRAPH_HANDLERS": "here_handlers"}


def shop(
    tmp_path: Path,
    fact: str = "order_found",
    integration: str = "shop",
    flow: str = "lookup-then-ask",
) -> Path:
    """A playbooks folder: the bundled catalog with a `shop` integration granting
    get_order, the example flow, and a playbook whose milestone names ``flow``."""
    catalog = (PLAYBOOKS / "catalog.yaml").read_text(encoding="utf-8")
    catalog = catalog.replace("  email: {}\n", "  email: {}\n  shop: {tools: [get_order]}\n")
    (tmp_path / "catalog.yaml").write_text(catalog, encoding="utf-8")
    shutil.copytree(PLAYBOOKS / "skills", tmp_path / "skills")
    (tmp_path / "flows").mkdir()
    shutil.copy(EXAMPLE, tmp_path / "flows" / EXAMPLE.name)
    text = PLAYBOOK.format(fact=fact, integration=integration, flow=flow)
    (tmp_path / "shop.yaml").write_text(text, encoding="utf-8")
    return tmp_path


def test_the_shipped_example_is_valid_and_ready() -> None:
    proc = run("flow", "check", str(EXAMPLE))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout == "ok: 1 flow(s) valid\n"


def test_the_docs_show_the_shipped_example() -> None:
    # docs/flows.md says its first flow is this file: the same, but for the comments.
    page = (PLAYBOOKS.parent / "docs" / "flows.md").read_text(encoding="utf-8")
    block = page.split("```yaml file=lookup-then-ask.yaml flow\n", 1)[1].split("```", 1)[0]
    shipped = EXAMPLE.read_text(encoding="utf-8").splitlines(keepends=True)
    assert block == "".join(line for line in shipped if not line.startswith("#"))


def test_flow_check_prints_warnings_by_code_and_exits_0(tmp_path: Path) -> None:
    (tmp_path / "count.yaml").write_text(WARNS, encoding="utf-8")
    proc = run("flow", "check", "count.yaml", cwd=tmp_path, env=registered(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines() == [
        "count.yaml:7:10: warning CHANNEL_FORGETS_BETWEEN_TURNS: add reads 'total', and a path "
        "reaches it before anything in the run writes it; a run starts from defaults and "
        "inputs, so without remembers (or a default) it is empty there",
        "ok: 1 flow(s) valid, 1 warning(s)",
    ]


def test_flow_check_refuses_with_the_rule_and_exits_1(tmp_path: Path) -> None:
    (tmp_path / "broken.yaml").write_text(BROKEN, encoding="utf-8")
    (tmp_path / "count.yaml").write_text(WARNS, encoding="utf-8")
    env = registered(tmp_path)
    proc = run("flow", "check", "broken.yaml", "count.yaml", cwd=tmp_path, env=env)
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    assert lines[0] == (
        "broken.yaml:6:19: error ROUTE_TO_NOWHERE: the edge goes to 'b', which is not a node "
        "(nodes: a; or END)"
    )
    assert lines[1].startswith("count.yaml:7:10: warning CHANNEL_FORGETS_BETWEEN_TURNS:")
    assert len(lines) == 2


def test_flow_check_refuses_a_handler_that_is_not_registered(tmp_path: Path) -> None:
    (tmp_path / "count.yaml").write_text(WARNS, encoding="utf-8")
    proc = run("flow", "check", "count.yaml", cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stdout.splitlines()[0] == (
        "count.yaml:7:39: error UNKNOWN_HANDLER: handler 'add_up' is not registered"
    )
    refused = run("check", "count.yaml", cwd=tmp_path)  # not in a flows/ folder: a playbook
    assert refused.returncode == 1


def test_a_module_that_cannot_be_imported_is_named(tmp_path: Path) -> None:
    (tmp_path / "count.yaml").write_text(WARNS, encoding="utf-8")
    proc = run("flow", "check", "count.yaml", cwd=tmp_path, env={"LEMONGRAPH_HANDLERS": "nope_x"})
    assert proc.returncode == 1
    assert proc.stdout.splitlines()[0].startswith(
        "error: LEMONGRAPH_HANDLERS: cannot import 'nope_x': ModuleNotFoundError"
    )


def test_flow_check_of_a_missing_file(tmp_path: Path) -> None:
    proc = run("flow", "check", "nothing.yaml", cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stdout == "nothing.yaml: error INVALID_SOURCE: no such file or folder\n"


def test_check_a_folder_with_a_flow(tmp_path: Path) -> None:
    folder = shop(tmp_path)
    proc = run("check", str(folder))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout == "ok: 3 file(s) valid\n"  # the playbook, the catalog, the flow


def test_check_refuses_a_flow_tool_the_milestone_is_not_granted(tmp_path: Path) -> None:
    folder = shop(tmp_path, integration="calendar")
    proc = run("check", ".", cwd=folder)
    assert proc.returncode == 1
    assert proc.stdout.splitlines() == [
        "flows/lookup-then-ask.yaml:12:9: error TOOL_NOT_IN_INTEGRATIONS: tool 'get_order' is "
        "not granted by the integrations of milestone resolve of playbook shop (granted: "
        "schedule_demo, schedule_meeting)"
    ]


def test_check_refuses_a_milestone_naming_a_missing_flow(tmp_path: Path) -> None:
    folder = shop(tmp_path, flow="no-such-flow")
    proc = run("check", ".", cwd=folder)
    assert proc.returncode == 1
    assert proc.stdout.splitlines() == [
        "shop.yaml:7:11: error FLOW_NOT_FOUND: milestone resolve: no flow 'no-such-flow' "
        "(looked for flows/no-such-flow.yaml beside the playbook)"
    ]


def test_check_refuses_an_invalid_flow_in_the_folder(tmp_path: Path) -> None:
    folder = shop(tmp_path)
    (folder / "flows" / "broken.yaml").write_text(BROKEN, encoding="utf-8")
    proc = run("check", ".", cwd=folder)  # handler 'h' is not registered
    assert proc.returncode == 1
    assert proc.stdout.splitlines() == [
        "flows/broken.yaml:4:37: error UNKNOWN_HANDLER: handler 'h' is not registered",
        "flows/broken.yaml:6:19: error ROUTE_TO_NOWHERE: the edge goes to 'b', which is not a "
        "node (nodes: a; or END)",
    ]
    proc = run("check", ".", cwd=folder, env=registered(folder))
    assert proc.returncode == 1
    assert proc.stdout.splitlines() == [
        "flows/broken.yaml:6:19: error ROUTE_TO_NOWHERE: the edge goes to 'b', which is not a "
        "node (nodes: a; or END)"
    ]


def test_flow_check_reads_the_milestone_that_names_the_flow(tmp_path: Path) -> None:
    folder = shop(tmp_path, fact="order_resolved")
    proc = run("flow", "check", "flows/lookup-then-ask.yaml", cwd=folder)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines() == [
        "flows/lookup-then-ask.yaml:12:8: warning CLAIM_ONLY_PATH: milestone resolve is done on "
        "order_resolved, and no tool this flow calls records any of them: only what the model "
        "says could get it there, and what the model says is never evidence",
        "ok: 1 flow(s) valid, 1 warning(s)",
    ]
    # The fact the flow's tool records: no warning.
    (tmp_path / "ok").mkdir()
    folder_ok = shop(tmp_path / "ok")
    proc = run("flow", "check", "flows", cwd=folder_ok)
    assert proc.stdout == "ok: 1 flow(s) valid\n", proc.stdout
