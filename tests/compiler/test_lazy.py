"""``from compiler import X`` loads X's module on first use (compiler/__init__.py,
PEP 562), so that a process imports only the parts of the core it uses
(docs/operations.md, "How long a start takes")."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import compiler

INIT = Path(compiler.__file__)


def _type_checking_imports() -> dict[str, str]:
    """name → "module" or "module:attribute", from the ``if TYPE_CHECKING:`` block."""
    tree = ast.parse(INIT.read_text(encoding="utf-8"))
    [block] = [
        node
        for node in tree.body
        if isinstance(node, ast.If) and isinstance(node.test, ast.Attribute)
        if node.test.attr == "TYPE_CHECKING"
    ]
    found: dict[str, str] = {}
    for node in block.body:
        assert isinstance(node, ast.ImportFrom)
        assert node.module is not None
        for alias in node.names:
            name = alias.asname or alias.name
            found[name] = node.module if name == alias.name else f"{node.module}:{alias.name}"
    return found


def test_the_table_the_typed_imports_and_all_name_the_same_things() -> None:
    assert _type_checking_imports() == compiler._LAZY
    assert sorted(compiler._LAZY) == sorted(compiler.__all__)


def test_each_name_is_the_object_of_its_module() -> None:
    for name, target in compiler._LAZY.items():
        module, _, attribute = target.partition(":")
        found = getattr(importlib.import_module(module), attribute or name)
        assert getattr(compiler, name) is found, name


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        compiler.no_such_name  # type: ignore[attr-defined]  # noqa: B018


def test_star_import_and_dir_list_every_name() -> None:
    space: dict[str, object] = {}
    exec("from compiler import *", space)
    assert set(compiler.__all__) <= set(space)
    assert set(compiler.__all__) <= set(dir(compiler))


def test_a_worker_s_names_load_neither_flows_nor_scenarios() -> None:
    # What stream/engine imports from the core: jobs, conditions, schedules.
    code = (
        "import sys\n"
        "from compiler import JobGraph, compile_playbook, schedule_step, to_iso\n"
        "print(sorted(m for m in sys.modules if m.startswith('compiler.')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert "compiler.jobs._jobgraph" in out  # the names above did load their modules
    assert "compiler.schedules._schedule" in out
    assert "compiler.flows" not in out
    assert "compiler.scenarios" not in out
