"""The layers hold by lint, not by docstring (README, "How it works").

One table, ``[tool.lemongraph.layers]`` in pyproject.toml, says per folder what
it may not import (and what it may); scripts/layers writes each folder's
ruff.toml from it. These tests check that the files match the table, then build
a scratch project from the table, put under each layer a module that makes every
import the layer bans and require ruff to name each one, and a module of what the
layer may import, which must pass; and the real tree must pass. A ban still
``pending`` in the table (the code makes that import today) is proven to fire
here but is not yet written into the real ruff.toml.

The errors are one vocabulary too (docs/operations.md, "Errors"): every exception
class of ours hangs under its layer's root.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
RUFF = Path(sys.executable).parent / "ruff"


def _load_layers() -> ModuleType:
    path = ROOT / "scripts" / "layers"
    loader = importlib.machinery.SourceFileLoader("lemongraph_layers", str(path))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[loader.name] = module  # dataclasses look their module up
    loader.exec_module(module)
    return module


layers = _load_layers()
LAYERS = {layer.folder: layer for layer in layers.load()}

#: ruff, on the layer rules only
CHECK = [str(RUFF), "check", "--no-cache", "--select", "TID251", "--output-format", "concise"]


def _ruff(project: Path, *paths: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CHECK, *map(str, paths)],
        cwd=project,
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A scratch project with every layer's ruff.toml, pending bans in force."""
    root = tmp_path_factory.mktemp("layers") / "project"
    root.mkdir()
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    layers.write(root, list(LAYERS.values()), enforce_pending=True)
    return root


def _imports(names: list[str] | tuple[str, ...]) -> str:
    """A module that imports each name both ways (``import a.b``, ``from a import b``)."""
    lines = []
    for number, name in enumerate(names):
        lines.append(f"import {name} as _m{number}")
        if "." in name:
            parent, _, last = name.rpartition(".")
            lines.append(f"from {parent} import {last} as _f{number}")
    return "\n".join(lines) + "\n"


def test_the_table_has_the_layers_of_the_stack() -> None:
    # topics < compiler < stream.runtime < stream.engine | agents < stream.gateway
    # < stream.cli: a rule for each, and stream/ as a whole never imports agents/.
    assert set(LAYERS) == {
        "topics",
        "compiler",
        "agents",
        "stream",
        "stream/runtime",
        "stream/engine",
        "stream/gateway",
        "stream/cli",
        "stream/bench",
        "stream/memory",
    }
    above_runtime = {
        "stream.engine",
        "stream.gateway",
        "stream.cli",
        "stream.bench",
        "stream.memory",
        "agents",
    }
    assert above_runtime <= set(LAYERS["stream/runtime"].banned)
    assert {"agents", "stream.gateway", "stream.cli", "stream.bench"} <= set(
        LAYERS["stream/engine"].banned
    )
    assert {"agents", "stream.engine", "stream.cli", "stream.bench"} <= set(
        LAYERS["stream/gateway"].banned
    )
    assert {"stream.engine", "stream.gateway", "stream.cli", "stream.bench"} <= set(
        LAYERS["agents"].banned
    )
    assert {"agents", "stream.engine", "stream.gateway", "stream.cli", "stream.bench"} <= set(
        LAYERS["stream/memory"].banned
    )
    assert "stream.memory" in LAYERS["stream/engine"].banned
    for folder, layer in LAYERS.items():
        if folder.startswith("stream"):
            assert "agents" in layer.banned, folder
    assert {"stream", "agents"} <= set(LAYERS["compiler"].banned)
    assert {"compiler", "stream", "agents"} <= set(LAYERS["topics"].banned)


def test_every_ruff_toml_is_what_the_table_writes() -> None:
    # No drift: a hand edit to a ruff.toml, or a ruff.toml the table does not
    # know, fails here (scripts/layers rewrites them; --check says which).
    assert layers.drift(ROOT, list(LAYERS.values())) == []
    for folder in LAYERS:
        assert "extend = " in (ROOT / folder / "ruff.toml").read_text()


@pytest.mark.parametrize("folder", sorted(LAYERS))
def test_each_layer_rule_names_every_banned_import(folder: str, project: Path) -> None:
    banned = list(LAYERS[folder].banned)
    module = project / folder / "broken.py"
    module.write_text(_imports(banned))
    result = _ruff(project, module)
    assert result.returncode == 1, result.stdout + result.stderr
    for name in banned:
        reported = f"TID251 `{name}` is banned"
        assert result.stdout.count(reported) == (2 if "." in name else 1), (
            f"{name} not reported for both imports:\n{result.stdout}"
        )


@pytest.mark.parametrize("folder", sorted(LAYERS))
def test_what_a_layer_may_import_passes(folder: str, project: Path) -> None:
    allowed = LAYERS[folder].may_import
    assert allowed, f"{folder}: the table names nothing it may import"
    module = project / folder / "fine.py"
    module.write_text(_imports(allowed))
    result = _ruff(project, module)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_pending_ban_is_not_yet_in_the_real_file() -> None:
    # What the lead deletes from `pending` once the import is gone.
    for folder, layer in LAYERS.items():
        text = (ROOT / folder / "ruff.toml").read_text()
        for name in layer.banned:
            assert (f'"{name}".msg' in text) == (name not in layer.pending), (folder, name)


def test_the_real_tree_passes_every_layer_rule() -> None:
    result = _ruff(
        ROOT, *(ROOT / package for package in ("topics", "compiler", "stream", "agents"))
    )
    assert result.returncode == 0, result.stdout + result.stderr


#: package (or layer) → the error roots its own exceptions hang under
#: (docs/operations.md, "Errors"); the longest matching prefix wins.
ERROR_ROOTS = {
    "topics": ("topics.ContractError",),
    "compiler": ("compiler.LemongraphError",),
    "stream": ("stream.runtime.errors.ShellError",),
    "stream.gateway": ("stream.gateway.errors.ApiError", "stream.runtime.errors.ShellError"),
    # A command that agents/ registers reports like every command (a ShellError).
    "agents": ("agents.errors.AgentsError", "stream.runtime.errors.ShellError"),
}


def _resolve(dotted: str) -> type[BaseException]:
    module, _, name = dotted.rpartition(".")
    root = getattr(importlib.import_module(module), name)
    assert isinstance(root, type), dotted
    assert issubclass(root, BaseException), dotted
    return root


def _our_modules() -> list[str]:
    names = []
    for package in ("topics", "compiler", "stream", "agents"):
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__main__":
                continue
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def test_every_error_hangs_under_its_layers_root() -> None:
    # One vocabulary: no exception class of ours is a stray root.
    strays = []
    for name in _our_modules():
        module = importlib.import_module(name)
        layer = max((p for p in ERROR_ROOTS if name == p or name.startswith(p + ".")), key=len)
        roots = tuple(_resolve(root) for root in ERROR_ROOTS[layer])
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and issubclass(value, BaseException)
                and value.__module__ == name
                and value not in roots
                and not issubclass(value, roots)
            ):
                strays.append(f"{name}.{value.__name__}")
    assert strays == []


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
