"""One error root in the shell (stream/runtime/errors.py): every error the shell raises
on purpose is a ``ShellError`` carrying its exit code, the CLI reports each as
one line with that code, and it catches nothing broader."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from stream.cli import main
from stream.runtime import errors
from stream.runtime.errors import ExitCode, ShellError, StopWorker
from tests.inprocess import invoke

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("name", [n for n in errors.__all__ if n != "ExitCode"])
def test_every_shell_error_is_under_the_root_and_in_the_tree(name: str) -> None:
    error = getattr(errors, name)
    assert issubclass(error, ShellError)
    assert errors.__doc__ is not None
    assert f" {name} " in errors.__doc__ or name == "ShellError"


def test_exit_codes_are_one_enum_with_the_documented_numbers() -> None:
    assert {code.name: int(code) for code in ExitCode} == {
        "OK": 0,
        "FAILED": 1,
        "USAGE": 2,
        "NO_DECISION": 3,
        "BATCH_FAILED": 70,
        "DISK": 74,
        "STOP_TIMEOUT": 75,
        "LOG_RESET": 78,
    }
    operations = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    for code in ExitCode:
        assert f"| {int(code)} | `{code.name}` |" in operations, code


def test_the_exit_code_travels_with_the_error() -> None:
    assert ShellError("x").exit_code == 1
    assert ShellError("x", exit_code=3).exit_code == 3
    stop = StopWorker("the log was reset", 78)
    assert (stop.exit_code, stop.code, str(stop)) == (78, 78, "the log was reset")


def test_the_cli_reports_a_shell_error_as_one_line_with_its_exit_code() -> None:
    @main.command("fail-for-test", hidden=True)
    def fail() -> None:
        raise StopWorker("worker: stopped: for the test", 78)

    try:
        runner = CliRunner()
        result = runner.invoke(main, ["fail-for-test"])
    finally:
        main.commands.pop("fail-for-test")
    assert result.exit_code == 78
    assert result.output.strip() == "Error: worker: stopped: for the test"


def test_a_bad_setting_is_one_line_naming_the_variable() -> None:
    env = {**os.environ, "LEMONGRAPH_PARTITIONS": "0", "LEMONGRAPH_KAFKA_URL": "kafka://x:1"}
    done = invoke(["worker"], env=env, cwd=Path.cwd())  # in-process: tests/inprocess.py
    assert done.returncode == 1
    assert done.stderr.strip() == "Error: LEMONGRAPH_PARTITIONS='0' must be at least 1"


def test_the_cli_catches_nothing_broader_than_the_roots() -> None:
    tree = ast.parse((ROOT / "stream" / "cli" / "__init__.py").read_text())
    broad = [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.ExceptHandler)
        and isinstance(node.type, ast.Name)
        and node.type.id in {"RuntimeError", "Exception", "BaseException"}
    ]
    assert broad == []
