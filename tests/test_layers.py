"""The layers hold by lint, not by docstring (README, "How it works"):

    topics/    imports nothing of ours, and no framework
    compiler/  imports topics/ at most (and nothing impure: tests/test_purity.py)
    agents/    imports topics/ and compiler/, never the engine's shell
    stream/    imports compiler/ and topics/

Each rule lives in that package's ruff.toml. These tests copy the real files
into a scratch project, put a module that breaks the rule under each, and
require ruff to name every banned import; the allowed imports must pass.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RUFF = Path(sys.executable).parent / "ruff"

#: package → (a module that breaks its rule, the banned names ruff must report)
BROKEN = {
    "compiler": (
        "import stream\nfrom stream.engine.engine import Engine\nfrom agents import x\n"
        "import topics\nprint(stream, Engine, x, topics)\n",
        ["`stream`", "`agents`"],
    ),
    "topics": (
        "from compiler import JobGraph\nimport stream.runtime.kafka\nfrom agents import x\n"
        "import faust\nimport aiokafka\nprint(JobGraph, stream, x, faust, aiokafka)\n",
        ["`compiler`", "`stream`", "`agents`", "`faust`", "`aiokafka`"],
    ),
    "agents": (
        "from stream.engine.engine import Engine\nfrom stream.engine import app\n"
        "import stream.engine.store\nprint(Engine, app, stream)\n",
        ["`stream.engine.engine`", "`stream.engine.app`", "`stream.engine.store`"],
    ),
}

#: package → a module of imports its layer allows
ALLOWED = {
    "compiler": "import topics\nfrom topics import Topics\nprint(topics, Topics)\n",
    "topics": "import orjson\nfrom pydantic import BaseModel\nprint(orjson, BaseModel)\n",
    "agents": (
        "import topics\nfrom compiler import JobGraph\nfrom stream.runtime.kafka import producer\n"
        "print(topics, JobGraph, producer)\n"
    ),
}


def _project(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(ROOT / "pyproject.toml", project / "pyproject.toml")
    for package in BROKEN:
        (project / package).mkdir()
        shutil.copy(ROOT / package / "ruff.toml", project / package / "ruff.toml")
    return project


#: ruff, on the layer rules only
CHECK = [str(RUFF), "check", "--no-cache", "--select", "TID251", "--output-format", "concise"]


def _ruff(project: Path, module: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CHECK, str(module)],
        cwd=project,
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.mark.parametrize("package", sorted(BROKEN))
def test_each_layer_rule_names_every_banned_import(package: str, tmp_path: Path) -> None:
    project = _project(tmp_path)
    source, banned = BROKEN[package]
    module = project / package / "broken.py"
    module.write_text(source)
    result = _ruff(project, module)
    assert result.returncode == 1, result.stdout + result.stderr
    for name in banned:
        assert f"TID251 {name} is banned" in result.stdout, f"{name} not reported:\n{result.stdout}"


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_what_a_layer_may_import_passes(package: str, tmp_path: Path) -> None:
    project = _project(tmp_path)
    module = project / package / "fine.py"
    module.write_text(ALLOWED[package])
    result = _ruff(project, module)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_package_with_a_layer_rule_has_one() -> None:
    for package in BROKEN:
        text = (ROOT / package / "ruff.toml").read_text()
        assert 'extend = "../pyproject.toml"' in text
        assert "banned-api" in text


#: ``from compiler._time import ...``, ``import topics._codec``, ``from stream.x import _y``
_PRIVATE = re.compile(
    r"^\s*(?:from|import)\s+(compiler|topics|stream|agents)((?:\.\w+)*)"
    r"(?:\s+import\s+(.+))?$"
)


def _private_imports(path: Path, own: str) -> list[str]:
    found = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        match = _PRIVATE.match(line)
        if match is None or match.group(1) == own:
            continue
        modules = match.group(2).split(".")
        names = [n.strip() for n in (match.group(3) or "").strip("()").split(",")]
        if any(m.startswith("_") for m in modules) or any(n.startswith("_") for n in names):
            found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    return found


def test_no_package_imports_another_packages_private_modules() -> None:
    # Each package's public names are its __all__ (tests/test_topics.py pins
    # them); what another package needs is exported, not reached for.
    offenders = []
    for package in ("compiler", "topics", "stream", "agents", "benchmarks"):
        for path in sorted((ROOT / package).rglob("*.py")):
            offenders.extend(_private_imports(path, package))
    assert offenders == []
