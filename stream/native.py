"""Which modules run compiled, and a guard against running a stale build.

``setup.py`` compiles the decision core's hot modules with mypyc and records,
in ``stream/native_build.json``, the SHA-256 of each source it compiled. Python
prefers a compiled module over its ``.py`` file, so in an editable install an
edited source would silently keep running its old compiled form. :func:`check`
refuses that: a worker, the bench and the test suite call it at start.

``python -m stream.native`` prints the status; with ``--check`` it exits 1
when the build is stale (scripts/setup uses it to decide to rebuild).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = ["MANIFEST", "NativeStatus", "StaleBuild", "check", "status"]

#: Written by setup.py at build time: {"modules": {dotted name: source sha256}}.
MANIFEST = Path(__file__).with_name("native_build.json")


class StaleBuild(RuntimeError):
    """A compiled module no longer matches its source."""


@dataclass(frozen=True)
class NativeStatus:
    """What runs compiled: ``compiled`` and ``stale`` are dotted module names."""

    built: tuple[str, ...]  # compiled by the last build
    compiled: tuple[str, ...]  # of those, the ones Python will load compiled
    stale: tuple[str, ...]  # compiled, but their source changed since

    def describe(self) -> str:
        """One line for a log or a report."""
        if not self.compiled:
            return "decision core: plain Python (not compiled; see setup.py)"
        line = f"decision core: compiled with mypyc ({len(self.compiled)} modules)"
        if self.stale:
            line += f"; STALE: {', '.join(self.stale)}"
        return line


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def status() -> NativeStatus:
    """Read the manifest and look at where each module would load from."""
    try:
        manifest = json.loads(MANIFEST.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return NativeStatus((), (), ())
    built: dict[str, str] = manifest.get("modules", {})
    compiled: list[str] = []
    stale: list[str] = []
    for name, digest in built.items():
        spec = importlib.util.find_spec(name)
        origin = Path(spec.origin) if spec is not None and spec.origin else None
        if origin is None or origin.suffix == ".py":
            continue  # not compiled here (pure install, or compiling failed)
        compiled.append(name)
        source = origin.parent / (name.rpartition(".")[2] + ".py")
        if source.is_file() and _sha256(source) != digest:
            stale.append(name)
    return NativeStatus(tuple(built), tuple(compiled), tuple(stale))


def check() -> NativeStatus:
    """The status; raises :class:`StaleBuild` if a compiled module is stale."""
    current = status()
    if current.stale:
        raise StaleBuild(
            f"compiled modules are older than their source: {', '.join(current.stale)}. "
            "Rebuild with scripts/setup (or `pip install -e .`); "
            "LEMONGRAPH_PURE=1 scripts/setup installs without compiling."
        )
    return current


def main(argv: list[str]) -> int:
    current = status()
    print(current.describe())
    return 1 if "--check" in argv and current.stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
