"""``lemongraph flow import`` (docs/flows.md, "Coming from LGFlow"): an LGFlow
file (versions 0.1–0.17) written in this language, and what changed, line by
line. The translation is the pure one of compiler/flows/lgflow/; this reads
and writes the files."""

from __future__ import annotations

import re
from pathlib import Path

import click
import orjson
from compiler import LemongraphError, check_flow, load_located
from compiler.flows.lgflow import dump_flow, lgflow_version, translate_lgflow
from stream.runtime.errors import ExitCode

__all__ = ["import_flow"]


def import_flow(path: Path, output: Path | None) -> int:
    """Write the LGFlow file ``path`` in this language to ``output`` (stdout
    when None) and say each change as ``file:line: was → now`` (on stderr when
    the flow goes to stdout). A file that does not translate, or whose
    translation breaks a rule, is written nowhere: exit 1."""
    text = path.read_text(encoding="utf-8")
    try:
        located = load_located(text, str(path))
    except LemongraphError as exc:
        click.echo(f"flow import: {exc}", err=True)
        return ExitCode.USAGE
    data = located.data
    version = data.get("version") if isinstance(data, dict) else None
    if not isinstance(data, dict) or lgflow_version(version) is None:
        click.echo(
            f'flow import: {path}: version {version!r} is not an LGFlow version ("0.1" to '
            '"0.17"); a flow of this language is checked with lemongraph flow check',
            err=True,
        )
        return ExitCode.USAGE
    translation = translate_lgflow(data)
    # Checked as the LGFlow file it is: every problem at its line there.
    report = check_flow(text, str(path), _name(output or path))
    if report.errors:
        for problem in report.errors:
            click.echo(str(problem))
        click.echo(f"flow import: {path} was not written: fix it and import it again", err=True)
        return ExitCode.FAILED
    if output is not None and output.suffix == ".json":
        written = orjson.dumps(translation.data, option=orjson.OPT_INDENT_2).decode() + "\n"
    else:
        written = dump_flow(translation.data)
    lines = []
    for change in translation.changes:
        pos = located.position(change.path)
        where = f"{path}:{pos.line}" if pos is not None else str(path)
        lines.append(f"{where}: {change.was} → {change.now}")
    if output is None:
        click.echo(written, nl=False)
        for line in lines:
            click.echo(line, err=True)
        return ExitCode.OK
    output.write_text(written, encoding="utf-8")
    for line in lines:
        click.echo(line)
    click.echo(f"wrote {output}: {len(lines)} change(s) from LGFlow {translation.version}")
    return ExitCode.OK


def _name(path: Path) -> str:
    return re.sub(r"\.(ya?ml|json)$", "", path.name)
