"""The ``lemongraph`` command."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from compiler import LemongraphError, PlaybookError
from compiler._simulate import parse_scenarios

from .config import ConfigError, Settings
from .files import is_scenario, load_playbook_file, scenario_files

__all__ = ["main"]


def _settings() -> Settings:
    try:
        return Settings.from_env()
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="lemongraph")
def main() -> None:
    """lemongraph: a durable decision core for long-horizon agents."""


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
def check(paths: tuple[Path, ...]) -> None:
    """Validate playbook and scenario files (folders are searched).

    Exit 0 when all are valid, 1 with one line per problem otherwise.
    """
    files: list[Path] = []
    problems: list[str] = []
    for path in paths:
        if path.is_dir():
            files.extend(
                sorted(p for p in path.rglob("*") if p.suffix in (".yaml", ".yml", ".json"))
            )
        elif path.is_file():
            files.append(path)
        else:
            problems.append(f"{path}: no such file or folder")
    for path in files:
        try:
            if is_scenario(path):
                from .simulate import _playbook_for

                parsed = parse_scenarios(path.read_text(encoding="utf-8"), str(path))
                _playbook_for(path, parsed.playbook)
            else:
                load_playbook_file(path)
        except PlaybookError as exc:
            problems.extend(_one_line(str(p)) for p in exc.problems)
        except LemongraphError as exc:
            problems.extend(_one_line(line) for line in str(exc).splitlines() if line.strip())
        except (OSError, UnicodeDecodeError) as exc:
            problems.append(f"{path}: cannot read: {exc}")
    for problem in problems:
        click.echo(problem)
    if problems:
        sys.exit(1)
    click.echo(f"ok: {len(files)} file(s) valid")


def _one_line(problem: str) -> str:
    # A problem's first line names file, position and reason; the caret excerpt
    # after it is for people reading a terminal, not for one-line-per-problem.
    return problem.splitlines()[0]


@main.command()
@click.argument("name_filter", required=False)
@click.option("--dir", "folder", type=click.Path(path_type=Path), help="Scenario folder.")
@click.option("--trace", is_flag=True, help="Show every turn.")
@click.option("--coverage", is_flag=True, help="Show which states and OR branches were exercised.")
@click.option("--json", "as_json", is_flag=True, help="Print {results, coverage} as JSON.")
def simulate(
    name_filter: str | None, folder: Path | None, trace: bool, coverage: bool, as_json: bool
) -> None:
    """Run every *.scenario.yaml|json through the pure core on a virtual clock.

    FILTER keeps only scenario files whose path contains it. Exit 1 when a
    scenario misses its expectation, 2 when input files are unusable.
    """
    from .simulate import render_coverage, render_summary, render_trace, simulate_files

    root = folder if folder is not None else _settings().playbooks_dir
    if not root.is_dir():
        click.echo(f"error: scenario folder {root} does not exist", err=True)
        sys.exit(2)
    files = scenario_files(root, name_filter)
    if not files:
        click.echo(
            f"error: no *.scenario.yaml|yml|json under {root}"
            + (f" matching {name_filter!r}" if name_filter else ""),
            err=True,
        )
        sys.exit(2)
    run = simulate_files(files)
    if as_json:
        click.echo(json.dumps(run.to_json(), indent=2, ensure_ascii=False))
    else:
        if trace:
            for result in run.results:
                click.echo(render_trace(result))
                click.echo()
        if coverage:
            click.echo(render_coverage(run))
            click.echo()
        click.echo(render_summary(run))
    for error in run.errors:
        click.echo(f"error: {error}", err=True)
    if run.errors:
        sys.exit(2)
    if not run.passed:
        sys.exit(1)
