"""Which modules run compiled, and a guard against running a stale build.

``setup.py`` compiles the decision core's hot modules with mypyc and records,
in ``stream/native_build.json``, the SHA-256 of each source it compiled. Python
prefers a compiled module over its ``.py`` file, so in an editable install an
edited source would silently keep running its old compiled form. :func:`check`
refuses that: a worker, the bench and the test suite call it at start.

``python -m stream.runtime.native`` prints the status; with ``--check`` it exits 1
when the build is stale or lost modules since (scripts/setup then rebuilds).
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from stream.runtime.errors import StaleBuild

__all__ = ["MANIFEST", "NativeStatus", "StaleBuild", "check", "status"]

#: Written by setup.py at build time: {"modules": {dotted name: source sha256}}.
MANIFEST = Path(__file__).with_name("native_build.json")


@dataclass(frozen=True)
class NativeStatus:
    """What runs compiled; each field holds dotted module names."""

    built: tuple[str, ...]  # compiled by the last build (its manifest)
    compiled: tuple[str, ...]  # of those, the ones Python will load compiled
    stale: tuple[str, ...]  # compiled, but their source changed (or went) since

    @property
    def incomplete(self) -> tuple[str, ...]:
        """Built but not there any more (removed by hand, or by another build
        from this tree): they run as plain Python."""
        return tuple(name for name in self.built if name not in self.compiled)

    def describe(self) -> str:
        """One line for a log or a report."""
        if not self.compiled:
            line = "decision core: plain Python (not compiled; see setup.py)"
        else:
            line = f"decision core: compiled with mypyc ({len(self.compiled)} modules)"
        if self.stale:
            line += f"; STALE: {', '.join(self.stale)}"
        if self.compiled and self.incomplete:
            line += f"; not compiled: {', '.join(self.incomplete)}"
        return line


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _compiled_file(name: str) -> tuple[Path, Path] | None:
    """(compiled file, source file) of module ``name`` when Python would load
    it compiled. Looks at files only: importing a stale build to ask it would
    run it (and a stale build may not even import)."""
    package, _, module = name.rpartition(".")
    spec = importlib.util.find_spec(package)  # a top-level package: found, not imported
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in map(Path, spec.submodule_search_locations):
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:  # tried before ".py"
            compiled = folder / (module + suffix)
            if compiled.is_file():
                return compiled, folder / (module + ".py")
        if (folder / (module + ".py")).is_file():
            return None
    return None


def status() -> NativeStatus:
    """Read the manifest and look at the files each module would load from."""
    try:
        manifest = json.loads(MANIFEST.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return NativeStatus((), (), ())
    built: dict[str, str] = manifest.get("modules", {})
    compiled: list[str] = []
    stale: list[str] = []
    for name, digest in built.items():
        found = _compiled_file(name)
        if found is None:
            continue  # not compiled here
        compiled.append(name)
        source = found[1]
        if not source.is_file() or _sha256(source) != digest:
            stale.append(name)
    return NativeStatus(tuple(built), tuple(compiled), tuple(stale))


def check() -> NativeStatus:
    """The status; raises :class:`StaleBuild` if a compiled module is stale."""
    current = status()
    if current.stale:
        raise StaleBuild(
            f"compiled modules no longer match their source: {', '.join(current.stale)}. "
            "Rebuild with scripts/setup (or `pip install -e .`); "
            "LEMONGRAPH_PURE=1 scripts/setup installs without compiling."
        )
    return current


def main(argv: list[str]) -> int:
    current = status()
    print(current.describe())
    # --check: is a rebuild due? (A build that failed records nothing, so it is
    # not retried on every run; one that lost modules since is.)
    return 1 if "--check" in argv and (current.stale or current.incomplete) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
