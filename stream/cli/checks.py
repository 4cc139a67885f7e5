"""``lemongraph check``: playbook, scenario and schedules files here; catalogs and
flows by the checks other packages register under the entry-point group
``lemongraph.checks`` (docs/operations.md, "Commands")."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import click

from compiler import LemongraphError, Playbook, PlaybookError, parse_scenarios
from stream.cli.common import native, one_line
from stream.runtime.config import Settings
from stream.runtime.errors import ExitCode
from stream.runtime.files import (
    flow_files,
    is_catalog,
    is_flow,
    is_scenario,
    is_schedules,
    load_playbook_file,
    load_schedules_file,
    playbook_files,
    scenario_files,
    schedules_file,
)

__all__ = ["CHECKS", "SCHEDULE_CHECKS", "check", "schedule_problems"]

#: The entry-point group of the checks other packages add: each is a function
#: called with ``playbooks`` (the parsed files, as (path, playbook)), ``catalogs``,
#: ``flows`` and ``roots`` (the folders given), keywords only, that returns one
#: line per problem.
CHECKS = "lemongraph.checks"
#: The entry-point group of the checks of schedules against a catalog (a command
#: schedule's tool and args, docs/schedules.md, "Command jobs"): each is called
#: with ``schedules`` (``(where, normalised definition)`` pairs) and ``catalog``
#: (a path), keywords only, and returns one line per problem.
SCHEDULE_CHECKS = "lemongraph.schedule_checks"


def schedule_problems(
    schedules: list[tuple[str, dict[str, Any]]], catalogs: list[Path]
) -> list[str]:
    """The problems the registered schedule checks find with ``schedules``
    against each catalog (none without a catalog at hand)."""
    problems: list[str] = []
    for point in sorted(entry_points(group=SCHEDULE_CHECKS), key=lambda p: p.name):
        for catalog in catalogs:
            problems.extend(point.load()(schedules=schedules, catalog=catalog))
    return problems


@dataclass
class _Found:
    """The files the arguments name, by kind."""

    files: list[Path] = field(default_factory=list)  # playbooks and scenarios
    catalogs: list[Path] = field(default_factory=list)
    flows: list[Path] = field(default_factory=list)  # docs/flows.md
    schedules: int = 0  # schedules.yaml files checked (docs/schedules.md)
    problems: list[str] = field(default_factory=list)
    #: The valid definitions of those files, with where each is.
    definitions: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def add_schedules(self, path: Path) -> None:
        loaded = load_schedules_file(path)
        self.problems.extend(loaded.problems)
        self.definitions += [
            (w, s.to_json()) for w, s in zip(loaded.where, loaded.schedules, strict=True)
        ]
        self.schedules += 1


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
def check(paths: tuple[Path, ...]) -> None:
    """Validate playbook, scenario, catalog and flow files (folders are searched;
    a folder's flows are its flows/ files, docs/flows.md).

    Exit 0 when all are valid, 1 with one line per problem otherwise.
    """
    native()
    found = _find(paths, Settings.from_env().catalog)
    problems = found.problems
    located = _parse(found.files, problems)
    roots = [p for p in paths if p.is_dir()]
    for point in sorted(entry_points(group=CHECKS), key=lambda p: p.name):
        problems.extend(
            point.load()(playbooks=located, catalogs=found.catalogs, flows=found.flows, roots=roots)
        )
    problems.extend(schedule_problems(found.definitions, found.catalogs))
    # a flow a milestone names is checked twice; a catalog's problem is said once
    problems = list(dict.fromkeys(problems))
    for problem in problems:
        click.echo(problem)
    if problems:
        sys.exit(ExitCode.FAILED)
    count = len(found.files) + len(found.catalogs) + len(found.flows) + found.schedules
    click.echo(f"ok: {count} file(s) valid")


def _find(paths: tuple[Path, ...], configured: Path | None) -> _Found:
    found = _Found()
    for path in paths:
        if path.is_dir():
            found.files.extend(sorted(playbook_files(path) + scenario_files(path)))
            found.flows.extend(flow_files(path))
            if (declared := schedules_file(path)) is not None:  # docs/schedules.md
                found.add_schedules(declared)
            catalog = configured if configured is not None else path / "catalog.yaml"
            if catalog.is_file() and catalog not in found.catalogs:
                found.catalogs.append(catalog)
        elif path.is_file():
            if is_catalog(path):
                found.catalogs.append(path)
            elif is_flow(path, path.parent.parent):
                found.flows.append(path)
            elif is_schedules(path, path.parent):
                found.add_schedules(path)
            else:
                found.files.append(path)
        else:
            found.problems.append(f"{path}: no such file or folder")
    return found


def _parse(files: list[Path], problems: list[str]) -> list[tuple[Path, Playbook]]:
    """The playbooks of ``files`` (scenario files are checked against theirs)."""
    located: list[tuple[Path, Playbook]] = []
    for path in files:
        try:
            if is_scenario(path):
                from stream.cli.simulate import playbook_for

                parsed = parse_scenarios(path.read_text(encoding="utf-8"), str(path))
                playbook_for(path, parsed)
            else:
                located.append((path, load_playbook_file(path)))
        except PlaybookError as exc:
            problems.extend(one_line(str(p)) for p in exc.problems)
        except LemongraphError as exc:
            problems.extend(one_line(line) for line in str(exc).splitlines() if line.strip())
        except (OSError, UnicodeDecodeError) as exc:
            problems.append(f"{path}: cannot read: {exc}")
    return located
