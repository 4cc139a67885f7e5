"""Builds lemongraph. Everything is declared in pyproject.toml; this file only
adds the compiled modules: the decision core's hot path, compiled with mypyc
(mypy's compiler, from the same type annotations CI checks).

Compiled, the core decides about 1.5x faster and a worker carries about 1.3x
more events per second (see benchmarks/README.md). The same modules run as
plain Python when they are not compiled, with the same results:

* ``LEMONGRAPH_PURE=1`` at install time skips compilation;
* without mypyc, or if compiling fails (no C compiler, no Python headers), the
  install goes on without the compiled modules and says so.

An editable install (``pip install -e .``, which scripts/setup runs) puts the
compiled modules next to their sources. Python prefers them over the ``.py``
files, so after editing one of the modules below, install again (scripts/setup
does when a source is newer than its compiled module); ``stream.native`` refuses
to run a stale build.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

from setuptools import Extension, setup

#: The modules compiled, in dependency order. Also read by stream/native.py.
NATIVE_MODULES = [
    "compiler/_time.py",
    "compiler/_durations.py",
    "compiler/_verdict.py",
    "compiler/_facts.py",
    "compiler/_ast.py",
    "compiler/_condition.py",
    "compiler/_inputs.py",
    "compiler/_state.py",
    "compiler/_effects.py",
    "compiler/_jobgraph.py",
    "stream/timers.py",
    "stream/store.py",
    "stream/engine.py",
]


#: Where setup.py writes what it compiled (read by stream/native.py).
MANIFEST = "stream/native_build.json"
#: setuptools commands that build; the others (metadata) need no compiling.
BUILD_COMMANDS = {"build", "build_ext", "bdist_wheel", "editable_wheel", "develop", "install"}
ROOT = Path(__file__).resolve().parent


def _say(message: str) -> None:
    print(f"lemongraph build: {message}", file=sys.stderr)


def _clean() -> None:
    """Remove compiled modules an earlier in-place build left in the tree, so
    that none outlives its source or a change to the list above."""
    for pattern in ("*/*.so", "*/*.pyd", "lemongraph_native__mypyc*"):
        for path in ROOT.glob(pattern):
            path.unlink()
    (ROOT / MANIFEST).unlink(missing_ok=True)


def native_extensions() -> list[Extension]:
    if not BUILD_COMMANDS.intersection(sys.argv[1:]):
        return []
    _clean()
    if os.environ.get("LEMONGRAPH_PURE"):
        _say("LEMONGRAPH_PURE is set: the core runs as plain Python")
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        _say("mypyc is not installed: the core runs as plain Python")
        return []
    # Types come from the annotations; strictness is CI's job (mypy --strict),
    # so the build reads no config file and needs none of the typed dependencies.
    options = ["--config-file=", "--ignore-missing-imports", "--follow-imports=silent"]
    extensions: list[Extension] = mypycify(options + NATIVE_MODULES, group_name="lemongraph_native")
    for extension in extensions:
        extension.optional = True  # no C compiler: install without them
    digests = {
        path.removesuffix(".py").replace("/", "."): hashlib.sha256(
            (ROOT / path).read_bytes()
        ).hexdigest()
        for path in NATIVE_MODULES
    }
    (ROOT / MANIFEST).write_text(json.dumps({"modules": digests}, indent=1) + "\n")
    return extensions


setup(ext_modules=native_extensions())
