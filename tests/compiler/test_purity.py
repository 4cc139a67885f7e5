"""compiler/ is the pure core: no I/O, no clock, no randomness (docs/decisions.md).

The rule itself lives in compiler/ruff.toml (written from the layers table in
pyproject.toml by scripts/layers) and runs with `ruff check`. These
tests make sure the rule is in force and catches what it should, by running ruff
on a deliberately impure module placed under compiler/'s settings.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUFF = Path(sys.executable).parent / "ruff"

IMPURE = """\
import datetime
import random
import time

import aiokafka
import faust
import rocksdict
from openai import OpenAI

a = time.time()
b = datetime.datetime.now()
c = random.random()
d = open("x")
print(a, b, c, d, aiokafka, faust, rocksdict, OpenAI)
"""


@pytest.fixture
def impure_module(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    (project / "compiler").mkdir(parents=True)
    shutil.copy(ROOT / "pyproject.toml", project / "pyproject.toml")
    shutil.copy(ROOT / "compiler" / "ruff.toml", project / "compiler" / "ruff.toml")
    module = project / "compiler" / "impure.py"
    module.write_text(IMPURE)
    return module


def test_ruff_rule_rejects_io_clocks_and_randomness(impure_module: Path) -> None:
    result = subprocess.run(
        [str(RUFF), "check", "--no-cache", "--output-format", "concise", str(impure_module)],
        cwd=impure_module.parent.parent,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    out = result.stdout
    for banned in ("`time.time`", "`datetime.datetime.now`", "`random`", "`faust`", "`aiokafka`"):
        assert banned in out, f"{banned} not reported:\n{out}"
    assert "`rocksdict`" in out
    assert "`openai`" in out
    assert "T201" in out  # print
    assert "PTH123" in out  # open()


def test_the_same_module_passes_outside_compiler(impure_module: Path) -> None:
    # The ban is scoped: stream/ may read clocks and talk to Kafka.
    elsewhere = impure_module.parent.parent / "stream" / "impure.py"
    elsewhere.parent.mkdir()
    shutil.copy(ROOT / "stream" / "ruff.toml", elsewhere.parent / "ruff.toml")
    elsewhere.write_text(IMPURE)
    result = subprocess.run(
        [str(RUFF), "check", "--no-cache", "--select", "TID251", str(elsewhere)],
        cwd=elsewhere.parent.parent,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout


def test_compiler_sources_call_no_clock_or_io_builtins() -> None:
    # Belt and braces for what ruff cannot see through aliases: no bare calls to
    # open/print/input/eval/exec anywhere in compiler/.
    forbidden = {"open", "print", "input", "eval", "exec", "__import__"}
    offenders = []
    for path in sorted((ROOT / "compiler").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in forbidden
            ):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.func.id}()")
    assert offenders == []


def test_the_real_compiler_sources_pass_the_rule() -> None:
    # The rule is in force on every module of compiler/, the schedule core
    # (_cron.py, _schedule.py) included: no banned import, print or open().
    modules = sorted((ROOT / "compiler").rglob("*.py"))
    assert ROOT / "compiler" / "schedules" / "_cron.py" in modules
    assert ROOT / "compiler" / "schedules" / "_schedule.py" in modules
    result = subprocess.run(
        [
            str(RUFF),
            "check",
            "--no-cache",
            "--select",
            "TID251,T20,PTH123",
            "--output-format",
            "concise",
            *map(str, modules),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
