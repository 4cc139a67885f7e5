"""The compiled decision core (setup.py, stream/runtime/native.py): it is what runs,
it decides exactly as the plain Python source does, and a stale build is refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from stream.runtime import native

ROOT = Path(__file__).resolve().parents[3]

# Runs the engine over the onboarding mix and prints a digest of every output
# record and every state write. With "source" it first makes Python load each
# module setup.py compiles from its .py file instead.
DIGEST = r"""
import hashlib, importlib.abc, importlib.util, json, sys
from pathlib import Path

root = Path(sys.argv[2])
if sys.argv[1] == "source":
    built = json.loads((root / "stream" / "runtime" / "native_build.json").read_text())["modules"]

    class FromSource(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name in built:
                return importlib.util.spec_from_file_location(
                    name, root / (name.replace(".", "/") + ".py")
                )
            return None

    sys.meta_path.insert(0, FromSource())

import orjson
from stream.bench.workload import onboarding_mix
from stream.engine.engine import Engine, Record, home_partition
from stream.runtime.files import load_playbook_file, playbook_files
from stream.engine.registry import Registry
from topics import Topics, encode
import compiler.jobs._jobgraph, stream.engine.engine

registry = Registry()
for path in playbook_files(root / "examples"):
    registry.add(load_playbook_file(path))
topics = Topics("digest.")
records = [
    Record(
        topics.inbox,
        home_partition(m.key.encode(), 4),
        i,
        m.key.encode(),
        encode(m.compact()),
        1_780_000_000_000 + 7 * i,
    )
    for i, m in enumerate(onboarding_mix(300, seed=3, prefix="d"))
]
store = {}
engine = Engine(
    topics, registry, lambda key, partition: store.get(key), partitions=4,
    wall_ms=lambda: 1_790_000_000_000,
)
digest = hashlib.sha256()
for start in range(0, len(records), 250):
    batch = engine.process(records[start : start + 250])
    for output in batch.outputs:
        digest.update(repr((output.topic, output.key, output.value, output.partition)).encode())
    for key, partition, raw in batch.writes():
        store[key] = raw
        digest.update(repr((key, partition, raw)).encode())
    engine.committed(batch)
print(
    compiler.jobs._jobgraph.__file__.rsplit(".", 1)[-1],
    stream.engine.engine.__file__.rsplit(".", 1)[-1],
)
print(len(records), digest.hexdigest())
"""


def _digest(mode: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", DIGEST, mode, str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split("\n")


@pytest.mark.skipif(
    os.environ.get("LEMONGRAPH_PURE", "").strip() not in ("", "0"), reason="LEMONGRAPH_PURE is set"
)
def test_the_installed_core_runs_compiled() -> None:
    # The build falls back to plain Python when it cannot compile; this says so
    # here instead of as a slower benchmark.
    current = native.status()
    assert "compiler.jobs._jobgraph" in current.compiled, current.describe()
    assert "stream.engine.engine" in current.compiled, current.describe()
    assert current.stale == ()
    assert "compiled with mypyc" in current.describe()


@pytest.mark.skipif(not native.status().compiled, reason="the core is not compiled here")
def test_compiled_and_source_decide_byte_for_byte_alike() -> None:
    compiled = _digest("compiled")
    source = _digest("source")
    assert compiled[0] == "so so"  # the compiled modules ran
    assert source[0] == "py py"  # the source ran
    records, digest = compiled[1].split()
    assert int(records) > 900
    assert len(digest) == 64
    assert source[1] == compiled[1]


@pytest.mark.skipif(not native.status().compiled, reason="the core is not compiled here")
def test_a_source_changed_after_the_build_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    built = json.loads(native.MANIFEST.read_text(encoding="utf-8"))["modules"]
    built["compiler.jobs._jobgraph"] = "0" * 64  # as if the source changed since
    manifest = tmp_path / "native_build.json"
    manifest.write_text(json.dumps({"modules": built}), encoding="utf-8")
    monkeypatch.setattr(native, "MANIFEST", manifest)

    assert native.status().stale == ("compiler.jobs._jobgraph",)
    with pytest.raises(native.StaleBuild, match=r"compiler\.jobs\._jobgraph.*scripts/setup"):
        native.check()
    assert "STALE: compiler.jobs._jobgraph" in native.status().describe()


def test_modules_built_but_gone_call_for_a_rebuild(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # As if compiler.conditions._printer had been compiled and its module then removed.
    built = {
        "compiler.conditions._printer": native._sha256(
            ROOT / "compiler" / "conditions" / "_printer.py"
        )
    }
    manifest = tmp_path / "native_build.json"
    manifest.write_text(json.dumps({"modules": built}), encoding="utf-8")
    monkeypatch.setattr(native, "MANIFEST", manifest)

    current = native.check()  # runs: what is there is not stale
    assert current.compiled == ()
    assert current.incomplete == ("compiler.conditions._printer",)
    assert native.main(["--check"]) == 1  # but scripts/setup rebuilds
    assert native.main([]) == 0
    assert "plain Python" in capsys.readouterr().out


def test_without_a_manifest_nothing_counts_as_compiled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(native, "MANIFEST", tmp_path / "missing.json")
    assert native.status() == native.NativeStatus((), (), ())
    assert native.check().describe().startswith("decision core: plain Python")


def test_the_status_command_exits_1_only_on_a_stale_build() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "stream.runtime.native", "--check"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == (1 if native.status().stale else 0)
    assert done.stdout.startswith("decision core: ")
