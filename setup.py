"""Builds lemongraph. Everything is declared in pyproject.toml; this file only
adds the compiled modules: the decision core's hot path, compiled with mypyc
(mypy's compiler, from the same type annotations CI checks).

Compiled, the pure core decides 2-3x faster and a worker carries about 1.5x
more events per second (figures in benchmarks/README.md). The same modules run
as plain Python when they are not compiled, with the same results:

* ``LEMONGRAPH_PURE=1`` at install time skips compilation;
* without mypyc, if mypyc refuses the code, or if compiling fails (no C
  compiler, no Python headers), the install goes on without any compiled
  module and says so.

An editable install (``pip install -e .``, which scripts/setup runs) puts the
compiled modules next to their sources. Python prefers them over the ``.py``
files, so after editing one of the modules below, install again (scripts/setup
does when a source changed since it was compiled); ``stream.runtime.native`` refuses to
run a stale build.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

#: The modules compiled, in dependency order.
NATIVE_MODULES = [
    "topics/build.py",
    "compiler/_time.py",
    "compiler/_durations.py",
    "compiler/conditions/_verdict.py",
    "compiler/conditions/_facts.py",
    "compiler/conditions/_ast.py",
    "compiler/conditions/_condition.py",
    "compiler/jobs/_inputs.py",
    "compiler/jobs/_state.py",
    "compiler/jobs/_effects.py",
    "compiler/jobs/_jobgraph.py",
    "stream/runtime/partitions.py",
    "stream/engine/timers.py",
    "stream/engine/store.py",
    "stream/engine/batch.py",
    "stream/engine/due.py",
    "stream/engine/jobs.py",
    "stream/engine/engine.py",
]
#: Where setup.py records what it compiled (read by stream/runtime/native.py).
MANIFEST = "stream/runtime/native_build.json"
#: setuptools commands that build; the others (metadata) need no compiling.
BUILD_COMMANDS = {"build", "build_ext", "bdist_wheel", "editable_wheel", "develop", "install"}
#: Commands that put compiled modules into the source tree.
IN_PLACE_COMMANDS = {"editable_wheel", "develop"}
ROOT = Path(__file__).resolve().parent


def _say(message: str) -> None:
    print(f"lemongraph build: {message}", file=sys.stderr)


def _pure_requested() -> bool:
    return os.environ.get("LEMONGRAPH_PURE", "").strip() not in ("", "0")


def _clean_in_place() -> None:
    """Remove compiled modules an earlier in-place build left in the tree, so
    that none outlives its source or a change to the list above."""
    for pattern in ("*/*.so", "*/*/*.so", "*/*.pyd", "*/*/*.pyd", "lemongraph_native__mypyc*"):
        for path in ROOT.glob(pattern):
            path.unlink()
    (ROOT / MANIFEST).unlink(missing_ok=True)


def _jobs() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1)


def _compile_in_parallel(
    compiler: Any,
    sources: list[str],
    output_dir: Any = None,
    macros: Any = None,
    include_dirs: Any = None,
    debug: Any = False,
    extra_preargs: Any = None,
    extra_postargs: Any = None,
    depends: Any = None,
) -> list[str]:
    """CCompiler.compile, with the C files compiled side by side on every core
    (the stock one compiles an extension's files one after another)."""
    macros, objects, extra_postargs, pp_opts, build = compiler._setup_compile(
        output_dir, macros, include_dirs, sources, depends, extra_postargs
    )
    cc_args = compiler._get_cc_args(pp_opts, debug, extra_preargs)
    todo = [(obj, *build[obj]) for obj in objects if obj in build]
    with ThreadPoolExecutor(_jobs()) as pool:
        for done in [
            pool.submit(compiler._compile, obj, src, ext, cc_args, extra_postargs, pp_opts)
            for obj, src, ext in todo
        ]:
            done.result()
    return list(objects)


#: mypyc run in a process of its own: it writes the C files and prints the
#: extensions to build as JSON, then ends at once (``os._exit``), as mypy's own
#: command does: freeing what it analysed (every module the core imports, with
#: ``--follow-imports=silent``) took 8 s of the build's 45 at interpreter exit.
_MYPYCIFY = """
import json, os, sys
from mypyc.build import mypycify
extensions = mypycify(json.loads(sys.argv[1]), group_name="lemongraph_native", multi_file=True)
with open(sys.argv[2], "w") as out:
    json.dump([vars(extension) for extension in extensions], out)
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)
"""


def _mypycify_apart(arguments: list[str]) -> list[Extension]:
    """``mypycify(arguments)`` in a child process (see ``_MYPYCIFY``)."""
    with tempfile.TemporaryDirectory() as folder:
        answer = Path(folder) / "extensions.json"
        done = subprocess.run(  # noqa: S603 (this Python, our code, our arguments)
            [sys.executable, "-c", _MYPYCIFY, json.dumps(arguments), str(answer)],
            cwd=ROOT,
            check=False,
        )
        if done.returncode != 0 or not answer.is_file():
            raise RuntimeError(f"mypyc exited with {done.returncode}")
        described = json.loads(answer.read_text())
    extensions = []
    for fields in described:
        extension = Extension(fields.pop("name"), fields.pop("sources"))
        fields["define_macros"] = [tuple(macro) for macro in fields["define_macros"]]
        for name, value in fields.items():
            setattr(extension, name, value)
        extensions.append(extension)
    return extensions


class _AllOrNothing(build_ext):
    """Builds every compiled module or none: the modules share one runtime
    library, and half a set would not import. On failure the install goes on as
    plain Python. The C files of the shared library compile in parallel (mypyc's
    multi_file mode writes one per module), as do the per-module shims."""

    def finalize_options(self) -> None:
        super().finalize_options()
        if not self.parallel:
            self.parallel = _jobs()  # the extensions side by side too

    def build_extension(self, ext: Extension) -> None:
        self.compiler.compile = partial(_compile_in_parallel, self.compiler)
        super().build_extension(ext)

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # CompileError, LinkError, a missing compiler, ...
            for extension in self.extensions:
                Path(self.get_ext_fullpath(extension.name)).unlink(missing_ok=True)
            (ROOT / MANIFEST).unlink(missing_ok=True)
            _say(f"compiling failed ({exc}): the core runs as plain Python")


def native_extensions() -> list[Extension]:
    commands = set(sys.argv[1:])
    if not BUILD_COMMANDS & commands:
        return []
    if IN_PLACE_COMMANDS & commands or "--inplace" in commands:
        _clean_in_place()
    if _pure_requested():
        _say("LEMONGRAPH_PURE is set: the core runs as plain Python")
        (ROOT / MANIFEST).unlink(missing_ok=True)
        return []
    if importlib.util.find_spec("mypyc") is None:
        _say("mypyc is not installed: the core runs as plain Python")
        return []
    # The sources as compiled: hashed before mypyc reads them, so an edit made
    # during the build shows as stale rather than as built.
    digests = {
        path.removesuffix(".py").replace("/", "."): hashlib.sha256(
            (ROOT / path).read_bytes()
        ).hexdigest()
        for path in NATIVE_MODULES
    }
    # Types come from the annotations; strictness is CI's job (mypy --strict),
    # so the build reads no config file and needs none of the typed dependencies.
    # Its own cache folder: scripts/test runs mypy (on .mypy_cache) beside the build.
    options = [
        "--config-file=",
        "--ignore-missing-imports",
        "--follow-imports=silent",
        "--cache-dir=build/mypyc-cache",
    ]
    try:
        extensions = _mypycify_apart(options + NATIVE_MODULES)
    except (Exception, SystemExit) as exc:  # mypyc exits when it rejects the code
        _say(f"mypyc refused the code ({exc!r}): the core runs as plain Python")
        return []
    (ROOT / MANIFEST).write_text(json.dumps({"modules": digests}, indent=1) + "\n")
    return extensions


extensions = native_extensions()
options: dict[str, Any] = {"ext_modules": extensions}
if extensions:
    options["cmdclass"] = {"build_ext": _AllOrNothing}
setup(**options)
