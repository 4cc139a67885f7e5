"""``lemongraph flow check|run|replay|import`` (docs/flows.md), and the catalogs' and
flows' part of ``lemongraph check``; registered under the entry-point groups
``lemongraph.commands`` and ``lemongraph.checks`` (pyproject.toml;
docs/operations.md, "Commands")."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Any

import click
import orjson
from compiler import LemongraphError, Playbook
from stream.runtime.command import require_kafka
from stream.runtime.config import Settings
from stream.runtime.errors import ExitCode, KafkaUnavailable
from stream.runtime.kafka import read_topic, run
from topics import Topics

from agents.catalog import check_playbooks, load_catalog_file
from agents.flows.checkpoint import RunLog, read_back
from agents.flows.files import check_flow_file, check_flow_paths, check_playbook_flows
from agents.flows.handlers import load_registry
from agents.flows.importing import import_flow
from agents.flows.replay import replay_flow, replay_job
from agents.flows.terminal import run_flow

__all__ = ["check_files", "flow"]


@click.group()
def flow() -> None:
    """Flows: a milestone's work described as data (docs/flows.md)."""


@flow.command("check")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
def flow_check(paths: tuple[Path, ...]) -> None:
    """Validate flow files and print their readiness warnings.

    Each line is `file:line:column: error|warning CODE: message`. Exit 1 when
    a file breaks a rule, 0 when there are only warnings (or nothing).
    """
    refused: list[str] = []
    names = _registered_names(refused)
    problems, count = check_flow_paths(list(paths), Settings.from_env().catalog, **names)
    for line in refused:
        click.echo(line)
    for problem in problems:
        click.echo(str(problem))
    errors = sum(1 for p in problems if p.severity == "error")
    if errors or refused:
        sys.exit(ExitCode.FAILED)
    warnings = len(problems) - errors
    click.echo(f"ok: {count} flow(s) valid" + (f", {warnings} warning(s)" if warnings else ""))


def _registered_names(problems: list[str]) -> dict[str, Any]:
    """The registered handler and router names (docs/flows.md, "Handlers and
    routers"), for checking flows; a module that cannot be loaded is a problem
    (and then no name is checked)."""
    try:
        registry = load_registry()
    except LemongraphError as exc:
        problems.append(f"error: {exc}")
        return {}
    return {"handlers": set(registry.handlers), "routers": set(registry.routers)}


@flow.command("run")
@click.argument("path", type=click.Path(path_type=Path, exists=True, dir_okay=False))
@click.option("--input", "inputs", multiple=True, metavar="NAME=VALUE", help="An input channel.")
@click.option(
    "--script",
    type=click.Path(path_type=Path, exists=True, dir_okay=False),
    help="The stand-in model's rules (docs/agents.md); forces the stand-in.",
)
@click.option(
    "--answer", "answers", multiple=True, metavar="NODE=ANSWER", help="Answer a question."
)
@click.option(
    "--answers",
    "answers_file",
    type=click.Path(path_type=Path, exists=True, dir_okay=False),
    help="A YAML file of answers by node id (a list for a node asked more than once).",
)
@click.option("--record", type=click.Path(path_type=Path, dir_okay=False), help="Record the run.")
@click.option("--run-id", default=None, help="The run's id (default run-FLOW).")
@click.option("--json", "as_json", is_flag=True, help="JSON lines, for scripts.")
def flow_run(
    path: Path,
    inputs: tuple[str, ...],
    script: Path | None,
    answers: tuple[str, ...],
    answers_file: Path | None,
    record: Path | None,
    run_id: str | None,
    as_json: bool,
) -> None:
    """Run one flow at the terminal (docs/flows.md, "Running a flow at the terminal").

    The model is the stand-in, in this process, unless OPENAI_API_KEY or
    OPENAI_BASE_URL is set (and --script is not given); the catalog's tools are
    called at their URLs (the demo tools, in this process, for those not set).
    Questions are asked on stdin. Exit 0 finished, 1 failed, 2 bad input.
    """
    sys.exit(
        run_flow(
            path,
            inputs=inputs,
            script=script,
            as_json=as_json,
            answers_file=answers_file,
            answers=answers,
            record=record,
            catalog_file=Settings.from_env().catalog,
            run_id=run_id,
        )
    )


@flow.command("replay")
@click.argument(
    "path", required=False, type=click.Path(path_type=Path, exists=True, dir_okay=False)
)
@click.option(
    "--journal",
    type=click.Path(path_type=Path, exists=True, dir_okay=False),
    help="A run recorded by flow run --record.",
)
@click.option("--job", help="Replay a flow run of the agents service for this job (from Kafka).")
@click.option("--run", "run_id", help="With --job: the run's id (default: the job's latest run).")
@click.option("--json", "as_json", is_flag=True, help="One JSON line.")
def flow_replay(
    path: Path | None, journal: Path | None, job: str | None, run_id: str | None, as_json: bool
) -> None:
    """Step the flow again on a recorded run: no model, tool or handler is
    called. Exit 0 "same path and outputs", 1 with the first difference.

    Either PATH --journal FILE (a run of flow run --record), or --job KEY
    [--run RUN_ID] [PATH]: the run the agents service recorded in the job's
    conversation (the conversations topic of LEMONGRAPH_KAFKA_URL); the flow is
    PATH, else the playbooks folder's flows/NAME.yaml.
    """
    if (journal is None) == (job is None):
        raise click.UsageError("give --journal FILE (with the flow file) or --job KEY")
    settings = Settings.from_env()
    if journal is not None:
        if path is None:
            raise click.UsageError("--journal needs the flow file: flow replay FLOW --journal FILE")
        sys.exit(replay_flow(path, journal, as_json=as_json, catalog_file=settings.catalog))
    assert job is not None
    try:
        conversation, jobs = _conversation_of(settings, job)
    except (click.ClickException, KafkaUnavailable) as exc:
        # 1 says "differs": not reaching the topics is bad input (2).
        message = exc.format_message() if isinstance(exc, click.ClickException) else str(exc)
        click.echo(f"flow replay: {message}", err=True)
        sys.exit(ExitCode.USAGE)
    sys.exit(
        replay_job(
            conversation,
            job,
            run_id,
            path,
            playbooks=settings.playbooks_dir,
            jobs=jobs,
            as_json=as_json,
            catalog_file=settings.catalog,
        )
    )


@flow.command("import")
@click.argument("path", type=click.Path(path_type=Path, exists=True, dir_okay=False))
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Write the flow here (YAML; JSON for a .json name). Default: stdout.",
)
def flow_import(path: Path, output: Path | None) -> None:
    """Write an LGFlow file (versions 0.1 to 0.17) in this language, saying
    line by line what changed (docs/flows.md, "Coming from LGFlow").

    Exit 1 when it does not translate or breaks a rule (nothing is written),
    2 for a file that is not LGFlow's.
    """
    sys.exit(import_flow(path, output))


def _conversation_of(settings: Settings, job: str) -> tuple[dict[str, Any] | None, list[str]]:
    """The job's latest record on the conversations topic (None when it has
    none, or the last is a tombstone), and the job keys the topic has."""
    bootstrap = require_kafka(settings)

    async def load() -> tuple[dict[str, Any] | None, list[str]]:
        found: dict[str, Any] | None = None
        keys: set[str] = set()
        topic = Topics(settings.topic_prefix).conversations
        records: dict[bytes, bytes | None] = {}
        async for record in read_topic(bootstrap, topic, security=settings.kafka_security):
            key = record.key.decode(errors="replace") if record.key is not None else ""
            if "\x00" in key:  # a flow run's checkpoint record (agents/flows/checkpoint.py)
                records[record.key or b""] = record.value
                continue
            keys.add(key)
            if key == job:
                found = orjson.loads(record.value) if record.value is not None else None
        for track in (found or {}).get("flows", {}).values():
            if track.get("log") is not None:  # its last base: where the run was then
                with contextlib.suppress(ValueError, KeyError):
                    log = RunLog.from_json(track["log"])
                    track.update(read_back(job, str(track["run_id"]), log, records.get)[0])
        return found, sorted(keys)

    result: tuple[dict[str, Any] | None, list[str]] = run(load())
    return result


def check_files(
    *,
    playbooks: list[tuple[Path, Playbook]],
    catalogs: list[Path],
    flows: list[Path],
    roots: list[Path],
) -> list[str]:
    """``lemongraph check``'s check of catalogs and flows (the entry-point group
    ``lemongraph.checks``): one line per problem."""
    problems: list[str] = []
    names = _registered_names(problems)  # handlers and routers (docs/flows.md)
    if not catalogs:
        # A milestone's flow must exist and be valid (docs/flows.md).
        problems.extend(check_playbook_flows(playbooks, None, roots, **names))
        for path in flows:
            problems.extend(str(p) for p in check_flow_file(path, **names).errors)
    for path in catalogs:
        # Every integration a playbook names must be in the catalog (docs/agents.md),
        # and a milestone's flow may only call tools its integrations grant.
        try:
            loaded = load_catalog_file(path)
            problems.extend(check_playbooks(loaded, [playbook for _, playbook in playbooks]))
            problems.extend(check_playbook_flows(playbooks, loaded, roots, **names))
            for flow_path in flows:
                report = check_flow_file(flow_path, loaded, **names)
                problems.extend(str(p) for p in report.errors)
        except LemongraphError as exc:
            problems.extend(line for line in str(exc).splitlines() if line.strip())
    return problems
