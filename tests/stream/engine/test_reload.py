"""What a running worker does with a changed playbook file (stream/engine/reload.py,
docs/operations.md, "Reloading"): the verdicts, without a broker, and the folder
watch that finds the changed files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from compiler import load_playbook
from stream.engine.registry import Registry
from stream.engine.reload import judge
from stream.runtime.errors import ConfigError
from stream.runtime.files import FolderWatch, reload_seconds

V1 = """\
key: greet
version: 1
name: Greet
milestones:
  - id: hello
    condition: said_hello
"""
PATH = Path("playbooks/greet.yaml")


def registry_with(*texts: str) -> Registry:
    return Registry(load_playbook(t) for t in texts)


def test_a_new_version_is_registered_and_an_unchanged_one_says_nothing() -> None:
    registry = registry_with(V1)
    v2 = load_playbook(V1.replace("version: 1", "version: 2"))
    verdict = judge(PATH, v2, registry, next_version=False)
    assert verdict.playbook is v2
    assert verdict.line.startswith(f"reload: registered greet v2 from {PATH}")
    same = judge(PATH, load_playbook(V1), registry, next_version=False)
    assert same.playbook is None
    assert same.line == ""


def test_other_content_under_a_registered_version_is_refused_by_a_worker() -> None:
    changed = load_playbook(V1.replace("name: Greet", "name: Greet them"))
    verdict = judge(PATH, changed, registry_with(V1), next_version=False)
    assert verdict.playbook is None
    assert verdict.line == (
        f"reload: refused {PATH}: greet v1 is registered already with other content, and "
        "running jobs keep deciding by it: bump its version (to v2)"
    )


def test_dev_registers_other_content_as_the_next_version_once() -> None:
    registry = registry_with(V1, V1.replace("version: 1", "version: 2"))
    changed = load_playbook(V1.replace("name: Greet", "name: Greet them"))
    verdict = judge(PATH, changed, registry, next_version=True)
    assert verdict.playbook is not None
    assert (verdict.playbook.version, verdict.playbook.to_json()["name"]) == (3, "Greet them")
    assert "as greet v3: v1 is registered already with other content" in verdict.line
    assert "set `version: 3` in the file" in verdict.line
    registry.add(verdict.playbook)
    # Saved again unchanged: it is v3 already, nothing more is registered.
    again = judge(PATH, changed, registry, next_version=True)
    assert again.playbook is None
    assert again.line == ""


def test_the_folder_watch_sees_added_and_changed_files_not_removed_ones(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("a", encoding="utf-8")
    (tmp_path / "notes.txt").write_text("n", encoding="utf-8")
    watch = FolderWatch(tmp_path)
    assert watch.changed() == []
    (tmp_path / "flows").mkdir()
    (tmp_path / "flows" / "b.yaml").write_text("b", encoding="utf-8")
    os.utime(tmp_path / "a.yaml", ns=(1, 1))  # same size, another mtime
    (tmp_path / "notes.txt").write_text("changed", encoding="utf-8")
    assert watch.changed() == [tmp_path / "a.yaml", tmp_path / "flows" / "b.yaml"]
    (tmp_path / "a.yaml").unlink()
    assert watch.changed() == []


@pytest.mark.parametrize(("text", "seconds"), [("", 0.0), ("0", 0.0), ("1", 1.0), ("0.5", 0.5)])
def test_the_reload_setting(text: str, seconds: float) -> None:
    assert reload_seconds({"LEMONGRAPH_RELOAD": text}) == seconds


@pytest.mark.parametrize("text", ["-1", "soon", "9999"])
def test_a_bad_reload_setting_names_the_variable(text: str) -> None:
    with pytest.raises(ConfigError, match="LEMONGRAPH_RELOAD="):
        reload_seconds({"LEMONGRAPH_RELOAD": text})
