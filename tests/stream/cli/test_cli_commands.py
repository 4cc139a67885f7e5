"""The ``lemongraph`` group (stream/cli/commands.py): one table of stream's
commands loaded lazily, the agents package's commands, checks and dev services
through entry points (docs/operations.md, "Commands"), and no import of agents
from stream."""

from __future__ import annotations

import ast
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import click
from click.testing import CliRunner

from stream.cli import main
from stream.cli.checks import CHECKS
from stream.cli.commands import COMMANDS, PLUGINS
from stream.cli.dev import DEV_PARTS

ROOT = Path(__file__).resolve().parents[3]


def test_every_command_of_the_table_and_the_entry_points_loads_under_its_name() -> None:
    ctx = click.Context(main)
    names = main.list_commands(ctx)
    plugins = {p.name for p in entry_points(group=PLUGINS)}
    assert {"agents", "mail-ingress", "flow", "standin", "demo-tools", "bench-agents"} <= plugins
    assert names == sorted({*COMMANDS, *plugins})
    for name in names:
        command = main.get_command(ctx, name)
        assert command is not None, name
        assert command.name == name
    assert main.get_command(ctx, "no-such-command") is None


def test_help_lists_every_command() -> None:
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    listed = result.output.split("Commands:")[1].split()
    for name in main.list_commands(click.Context(main)):
        assert name in listed, name


def test_the_agents_package_registers_its_check_and_its_dev_services() -> None:
    [check] = [p for p in entry_points(group=CHECKS) if p.name == "agents"]
    [dev] = [p for p in entry_points(group=DEV_PARTS) if p.name == "agents"]
    assert callable(check.load())
    part = dev.load()(lambda _line: None)
    for method in ("listeners", "start_mail", "start", "stop"):
        assert callable(getattr(part, method)), method


def test_a_command_module_is_imported_only_when_its_command_is_asked_for() -> None:
    code = (
        "import sys; from stream.cli import main; "
        "print(sorted(m for m in sys.modules if m.startswith(('stream.cli.', 'agents'))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "['stream.cli.commands']"


def test_no_module_of_stream_imports_agents() -> None:
    for path in sorted((ROOT / "stream").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert node.module.split(".")[0] != "agents", path
            elif isinstance(node, ast.Import):
                assert all(a.name.split(".")[0] != "agents" for a in node.names), path
