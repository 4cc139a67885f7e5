"""``lemongraph flow import`` (docs/flows.md, "Coming from LGFlow"): an LGFlow
file written in this language, each change said at its line; what does not
translate or breaks a rule is written nowhere. The click command in the test's
process (tests/inprocess.py)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.compiler.flows.test_lgflow import RESEARCH
from tests.stream.cli.test_cli_simulate_check import run

#: The handler and router the imported flow names, registered for flow check.
HANDLERS = """\
from agents.flows.handlers import handler, router


@handler("checkSources")
def check_sources(view):
    return None


@router("routeSources")
def route_sources(view):
    return "enough" if view.get("results") else "none"
"""


def _lgflow(folder: Path, data: dict[str, object]) -> Path:
    (folder / "flows").mkdir(exist_ok=True)
    path = folder / "flows" / "research.json"
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return path


def test_import_writes_our_format_and_says_each_change_at_its_line(tmp_path: Path) -> None:
    source = _lgflow(tmp_path, RESEARCH)
    lines = source.read_text(encoding="utf-8").splitlines()
    proc = run("flow", "import", "flows/research.json", "-o", "flows/research.yaml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    said = proc.stdout.splitlines()
    assert said[-1] == "wrote flows/research.yaml: 6 change(s) from LGFlow 0.7"
    where = {}
    for line in said[:-1]:
        head, what = line.split(": ", 1)
        assert head.startswith("flows/research.json:")
        assert " → " in what
        where[what.split(" → ")[0]] = lines[int(head.rsplit(":", 1)[1]) - 1].strip()
    assert where['version "0.7" (LGFlow)'] == '"version": "0.7",'
    assert where["node summarize: approval (a node property)"] == '"approval": {'
    assert where["edge from check: route sentences under when"] == '"when": {'
    written = yaml.safe_load((tmp_path / "flows" / "research.yaml").read_text(encoding="utf-8"))
    assert written["version"] == "1"
    assert written["edges"][1]["means"]["none"] == "nothing usable was found"
    # What it wrote is a flow flow check takes, with its handler and router registered.
    (tmp_path / "research_handlers.py").write_text(HANDLERS, encoding="utf-8")
    env = {"LEMONGRAPH_HANDLERS": "research_handlers"}
    check = run("flow", "check", "flows/research.yaml", cwd=tmp_path, env=env)
    assert check.returncode == 0, check.stdout
    assert check.stdout.splitlines()[-1].startswith("ok: 1 flow(s) valid")


def test_import_to_stdout_writes_the_flow_there_and_the_changes_to_stderr(tmp_path: Path) -> None:
    _lgflow(tmp_path, RESEARCH)
    proc = run("flow", "import", "flows/research.json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert yaml.safe_load(proc.stdout)["nodes"][2]["type"] == "approval"
    assert len(proc.stderr.splitlines()) == 6
    assert not (tmp_path / "flows" / "research.yaml").exists()


def test_a_feature_beyond_the_version_is_refused_and_nothing_written(tmp_path: Path) -> None:
    _lgflow(tmp_path, {**RESEARCH, "version": "0.6"})
    proc = run("flow", "import", "flows/research.json", "-o", "out.yaml", cwd=tmp_path)
    assert proc.returncode == 1
    assert (
        "flows/research.json:3:18: error LGFLOW_FEATURE_VERSION: describing a flow requires "
        'version "0.7" or later (the file says "0.6")'
    ) in proc.stdout.splitlines()
    assert not (tmp_path / "out.yaml").exists()


def test_a_flow_of_ours_is_not_imported(tmp_path: Path) -> None:
    _lgflow(tmp_path, {**RESEARCH, "version": "1"})
    proc = run("flow", "import", "flows/research.json", cwd=tmp_path)
    assert proc.returncode == 2
    assert "is not an LGFlow version" in proc.stderr
