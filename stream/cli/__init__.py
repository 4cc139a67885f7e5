"""The ``lemongraph`` command."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from compiler import LemongraphError, Playbook, PlaybookError, parse_scenarios
from stream.runtime.config import Settings
from stream.runtime.errors import ConfigError, KafkaUnavailable, ShellError
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
from stream.runtime.kafka import ConsumedRecord
from topics import SOURCES

if TYPE_CHECKING:
    from stream.runtime.broker import EmbeddedBroker
    from stream.runtime.ports import Listener
    from topics import InboxEvent, JobStart, Topics

__all__ = ["main"]


def _settings() -> Settings:
    try:
        return Settings.from_env()
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None


class _Group(click.Group):
    """Turns the shell's errors (``stream/runtime/errors.py``) into one clear line and
    their exit code instead of a traceback."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except KafkaUnavailable as exc:
            url = Settings.from_env().kafka_url if _env_ok() else None
            raise _reported(f"cannot use Kafka at {url}: {exc}", exc.exit_code) from None
        except ShellError as exc:
            raise _reported(str(exc), exc.exit_code) from None


def _reported(message: str, code: int) -> click.ClickException:
    error = click.ClickException(message)
    error.exit_code = code
    return error


def _env_ok() -> bool:
    try:
        Settings.from_env()
    except ConfigError:
        return False
    return True


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="lemongraph")
def main() -> None:
    """lemongraph: a durable decision core for long-horizon agents."""
    import logging

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # aiokafka logs every failed connection attempt; the command says it once.
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
def check(paths: tuple[Path, ...]) -> None:
    """Validate playbook, scenario, catalog and flow files (folders are searched;
    a folder's flows are its flows/ files, docs/flows.md).

    Exit 0 when all are valid, 1 with one line per problem otherwise.
    """
    _native()
    files: list[Path] = []
    problems: list[str] = []
    catalogs: list[Path] = []
    flows: list[Path] = []  # docs/flows.md
    checked_schedules = 0  # schedules.yaml files (docs/schedules.md)
    configured = Settings.from_env().catalog
    for path in paths:
        if path.is_dir():
            files.extend(sorted(playbook_files(path) + scenario_files(path)))
            flows.extend(flow_files(path))
            if (declared := schedules_file(path)) is not None:  # docs/schedules.md
                problems.extend(load_schedules_file(declared).problems)
                checked_schedules += 1
            catalog = configured if configured is not None else path / "catalog.yaml"
            if catalog.is_file() and catalog not in catalogs:
                catalogs.append(catalog)
        elif path.is_file():
            if is_catalog(path):
                catalogs.append(path)
            elif is_flow(path, path.parent.parent):
                flows.append(path)
            elif is_schedules(path, path.parent):
                problems.extend(load_schedules_file(path).problems)
                checked_schedules += 1
            else:
                files.append(path)
        else:
            problems.append(f"{path}: no such file or folder")
    playbooks: list[Playbook] = []
    located: list[tuple[Path, Playbook]] = []
    for path in files:
        try:
            if is_scenario(path):
                from stream.cli.simulate import playbook_for

                parsed = parse_scenarios(path.read_text(encoding="utf-8"), str(path))
                playbook_for(path, parsed)
            else:
                playbooks.append(load_playbook_file(path))
                located.append((path, playbooks[-1]))
        except PlaybookError as exc:
            problems.extend(_one_line(str(p)) for p in exc.problems)
        except LemongraphError as exc:
            problems.extend(_one_line(line) for line in str(exc).splitlines() if line.strip())
        except (OSError, UnicodeDecodeError) as exc:
            problems.append(f"{path}: cannot read: {exc}")
    from agents.catalog import check_playbooks, load_catalog_file
    from agents.flows.files import check_flow_file, check_playbook_flows

    roots = [p for p in paths if p.is_dir()]
    names = _registered_names(problems)  # handlers and routers (docs/flows.md)
    if not catalogs:
        # A milestone's flow must exist and be valid (docs/flows.md).
        problems.extend(check_playbook_flows(located, None, roots, **names))
        for path in flows:
            problems.extend(str(p) for p in check_flow_file(path, **names).errors)
    for path in catalogs:
        # Every integration a playbook names must be in the catalog (docs/agents.md),
        # and a milestone's flow may only call tools its integrations grant.
        try:
            loaded = load_catalog_file(path)
            problems.extend(check_playbooks(loaded, playbooks))
            problems.extend(check_playbook_flows(located, loaded, roots, **names))
            for flow_path in flows:
                report = check_flow_file(flow_path, loaded, **names)
                problems.extend(str(p) for p in report.errors)
        except LemongraphError as exc:
            problems.extend(_one_line(line) for line in str(exc).splitlines() if line.strip())
    problems = list(dict.fromkeys(problems))  # a flow a milestone names is checked twice
    for problem in problems:
        click.echo(problem)
    if problems:
        sys.exit(1)
    count = len(files) + len(catalogs) + len(flows) + checked_schedules
    click.echo(f"ok: {count} file(s) valid")


@main.group()
def flow() -> None:
    """Flows: a milestone's work described as data (docs/flows.md)."""


@flow.command("check")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
def flow_check(paths: tuple[Path, ...]) -> None:
    """Validate flow files and print their readiness warnings.

    Each line is `file:line:column: error|warning CODE: message`. Exit 1 when
    a file breaks a rule, 0 when there are only warnings (or nothing).
    """
    from agents.flows.files import check_flow_paths

    refused: list[str] = []
    names = _registered_names(refused)
    problems, count = check_flow_paths(list(paths), Settings.from_env().catalog, **names)
    for line in refused:
        click.echo(line)
    for problem in problems:
        click.echo(str(problem))
    errors = sum(1 for p in problems if p.severity == "error")
    if errors or refused:
        sys.exit(1)
    warnings = len(problems) - errors
    click.echo(f"ok: {count} flow(s) valid" + (f", {warnings} warning(s)" if warnings else ""))


def _registered_names(problems: list[str]) -> dict[str, Any]:
    """The registered handler and router names (docs/flows.md, "Handlers and
    routers"), for checking flows; a module that cannot be loaded is a problem
    (and then no name is checked)."""
    from agents.flows.handlers import load_registry

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
    from stream.cli.flowterm import run_flow

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
    from stream.cli.flowterm import replay_flow, replay_job

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
        sys.exit(2)
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


def _conversation_of(settings: Settings, job: str) -> tuple[dict[str, Any] | None, list[str]]:
    """The job's latest record on the conversations topic (None when it has
    none, or the last is a tombstone), and the job keys the topic has."""
    import orjson

    from stream.runtime.kafka import read_topic, run
    from topics import Topics

    bootstrap = _require_kafka(settings)

    async def load() -> tuple[dict[str, Any] | None, list[str]]:
        found: dict[str, Any] | None = None
        keys: set[str] = set()
        topic = Topics(settings.topic_prefix).conversations
        async for record in read_topic(bootstrap, topic, security=settings.kafka_security):
            key = record.key.decode(errors="replace") if record.key is not None else ""
            keys.add(key)
            if key == job:
                found = orjson.loads(record.value) if record.value is not None else None
        return found, sorted(keys)

    result: tuple[dict[str, Any] | None, list[str]] = run(load())
    return result


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
    from stream.cli.simulate import render_coverage, render_summary, render_trace, simulate_files

    _native()
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
        if name_filter:
            for line in _scenario_names(root, name_filter):
                click.echo(line, err=True)
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


def _scenario_names(root: Path, name_filter: str) -> list[str]:
    """For a FILTER that matched no file: it matches file paths, and these are
    the files and the scenarios in them."""
    every = scenario_files(root)
    if not every:
        return []
    lines = ["FILTER matches scenario file paths, not scenario names; the files are:"]
    for path in every:
        try:
            names = [
                s.name
                for s in parse_scenarios(path.read_text(encoding="utf-8"), str(path)).scenarios
            ]
        except (LemongraphError, OSError, UnicodeDecodeError):
            names = ["(unreadable: `lemongraph check` says why)"]
        hit = [n for n in names if name_filter in n]
        lines.append(f"  {path}: {', '.join(names)}")
        if hit:
            lines.append(f"    ({', '.join(hit)} matches {name_filter!r}: give part of this path)")
    return lines


# -- the stream engine --------------------------------------------------------------


def _require_kafka(settings: Settings) -> str:
    if settings.kafka_url is None:
        raise click.ClickException(
            "LEMONGRAPH_KAFKA_URL is not set: point it at a broker (kafka://host:9092), "
            "or run `lemongraph dev`, which starts the embedded broker"
        )
    from stream.runtime.kafka import bootstrap_of

    return bootstrap_of(settings.kafka_url)


def _say(line: str) -> None:
    click.echo(line, err=False)


def _native() -> str:
    """Refuse to run a stale compiled core (see stream/runtime/native.py); returns which
    runs, for the commands that say so."""
    from stream.runtime.native import check

    return check().describe()  # StaleBuild is a ShellError: reported by _Group


@main.command()
@click.option("--no-ticker", is_flag=True, help="Do not run the ticker in this worker.")
@click.option("--loglevel", default="warning", show_default=True)
def worker(no_ticker: bool, loglevel: str) -> None:
    """Run one worker against LEMONGRAPH_KAFKA_URL (for production).

    Workers in one group share the partitions; the ticker runs on the group's
    leader only, so every worker may keep it on.
    """
    from stream.engine.worker import prepare, run_worker

    settings = _settings()
    _require_kafka(settings)
    _say(_native())
    prepared = prepare(settings, _say)
    sys.exit(
        run_worker(
            settings,
            prepared.registry,
            tansu=prepared.tansu,
            cluster=prepared.cluster,
            ticker=not no_ticker,
            loglevel=loglevel,
            status_every=30.0,
            say=_say,
        )
    )


@main.command()
@click.option(
    "--broker-port",
    default=9092,
    show_default=True,
    help="Port of the embedded broker (when LEMONGRAPH_KAFKA_URL is unset).",
)
@click.option("--loglevel", default="warning", show_default=True)
def dev(broker_port: int, loglevel: str) -> None:
    """Run everything on this machine: the embedded broker (unless
    LEMONGRAPH_KAFKA_URL is set), the topics, the playbooks, a worker, the
    ticker and the gateway (API and UI). Ctrl-C stops it all."""
    import dataclasses
    import os
    import shutil
    import time

    from agents.channels.mail_service import MailCatcher
    from stream.engine.worker import prepare, run_worker
    from stream.gateway import GatewayThread, addresses, mint_token, new_secret
    from stream.runtime.broker import BrokerStartError, EmbeddedBroker, free_port

    settings = _settings()
    _say(_native())
    _check_dev_ports(settings, broker_port)
    made_up = not settings.api_token_secret
    secret_dir = settings.data_dir  # before the embedded broker's own state folder
    secret_file: Path | None = None
    if made_up:
        # A secret for this session only, so the dev token printed below works;
        # written (never printed) where `lemongraph token` finds it.
        settings = dataclasses.replace(settings, api_token_secret=new_secret())
    broker: EmbeddedBroker | None = None
    if settings.kafka_url is None:
        try:
            broker = EmbeddedBroker(broker_port)
            broker.start()
        except BrokerStartError as exc:
            raise click.ClickException(f"embedded broker: {exc}") from None
        # The embedded broker keeps everything in memory, so local state from an
        # earlier run describes records that no longer exist: start clean.
        data_dir = settings.data_dir / "embedded"
        had_state = data_dir.exists()
        shutil.rmtree(data_dir, ignore_errors=True)
        settings = dataclasses.replace(settings, kafka_url=broker.url, data_dir=data_dir)
        _say(f"broker: embedded Tansu on {broker.bootstrap} (in memory; gone when this stops)")
        if had_state:
            _say(
                f"state: fresh: removed {data_dir} of an earlier run (it described records "
                "the embedded broker has forgotten)"
            )
    else:
        _say(f"broker: {settings.kafka_url}")
    code = 1
    gateway: GatewayThread | None = None
    catcher: MailCatcher | None = None
    helpers: list[Callable[[], None]] = []
    died = _watch_broker(broker) if broker is not None else None
    try:
        prepared = prepare(settings, _say)
        _say(f"state: RocksDB under {settings.data_dir / 'faust'}")
        if not os.environ.get("LEMONGRAPH_SMTP_URL"):
            catcher = MailCatcher("127.0.0.1", free_port()).start()
            helpers.append(catcher.stop)
            _say(
                f"mail: outbound mail is caught at {catcher.url} (LEMONGRAPH_SMTP_URL is "
                "unset): see it at GET /v1/dev/mail and on the job page"
            )
        if made_up:
            secret_file = _write_dev_secret(secret_dir, settings.api_token_secret)
            _say(
                "gateway: API_TOKEN_SECRET is empty: using a random secret for this session, "
                f"written to {secret_file} (mode 0600): `lemongraph token` signs with it "
                "while API_TOKEN_SECRET is unset"
            )
        gateway = GatewayThread(
            settings, _say, dev_mail=catcher.mails if catcher is not None else None
        )
        gateway.start()
        _say(addresses(settings))
        # The developer at the UI is the operator: the dev token answers approvals.
        dev_token = mint_token(
            settings.api_token_secret,
            now=time.time(),
            name="dev",
            ttl_seconds=7 * 86400,
            approver=True,
        )
        _say(f"gateway: dev token (source world, approver, 7 days): {dev_token}")
        helpers += _start_agents(settings, catcher.url if catcher is not None else None)
        code = run_worker(
            settings,
            prepared.registry,
            tansu=prepared.tansu,
            cluster=prepared.cluster,
            loglevel=loglevel,
            status_every=10.0,
            say=_say,
        )
    finally:
        if secret_file is not None:  # first: a hard exit may cut the stopping short
            _remove_dev_secret(secret_file, settings.api_token_secret)
        for stop in reversed(helpers):
            stop()
        if gateway is not None:
            gateway.stop()
        if broker is not None:
            broker.stop()
            _say("broker: stopped")
    if died is not None and died.is_set():
        code = code or 1
    sys.exit(code)


#: Where ``lemongraph dev`` keeps the API_TOKEN_SECRET it made up, under
#: LEMONGRAPH_DATA_DIR, while it runs; ``lemongraph token`` reads it when
#: API_TOKEN_SECRET is unset (docs/operations.md, "Tokens").
DEV_SECRET_FILE = "dev-api-token-secret"  # noqa: S105 - a file name


def _write_dev_secret(data_dir: Path, secret: str) -> Path:
    import os

    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / DEV_SECRET_FILE
    with contextlib.suppress(FileNotFoundError):
        path.unlink()  # a stale one of a run that was killed: never reuse its mode
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(secret + "\n")
    return path


def _remove_dev_secret(path: Path, secret: str) -> None:
    # Only ours: another `dev` on the same folder may have written its own since.
    with contextlib.suppress(OSError):
        if path.read_text(encoding="utf-8").strip() == secret:
            path.unlink()


def _gateway_listeners(settings: Settings) -> list[Listener]:
    from stream.runtime.ports import Listener

    host = settings.gateway_host
    return [
        Listener(host, settings.api_port, "the gateway's API", "set LEMONGRAPH_API_PORT"),
        Listener(host, settings.ui_port, "the gateway's UI", "set LEMONGRAPH_UI_PORT"),
    ]


def _check_dev_ports(settings: Settings, broker_port: int) -> None:
    """Fail fast, naming the port and its setting, when a fixed port of ``dev``
    is taken: the embedded broker's, the gateway's API and UI, and (when the
    agents start) the mail ingress. The stand-in model, the demo tools and the
    mail catcher take ports picked free."""
    import os

    from stream.runtime.ports import Listener, check_ports

    listeners = []
    if settings.kafka_url is None:
        listeners.append(
            Listener(
                "127.0.0.1",
                broker_port,
                "the embedded broker",
                "pass --broker-port (or set LEMONGRAPH_KAFKA_URL to use a running broker)",
            )
        )
    listeners += _gateway_listeners(settings)
    if settings.catalog_file.is_file():
        raw = os.environ.get("LEMONGRAPH_MAIL_INGRESS_PORT", "").strip() or "2525"
        if raw.isdigit():  # else mail-ingress itself says what is wrong with it
            listeners.append(
                Listener(
                    "127.0.0.1",
                    int(raw),
                    "the mail ingress, where replies come in",
                    "set LEMONGRAPH_MAIL_INGRESS_PORT",
                )
            )
    check_ports(listeners)


def _start_agents(settings: Settings, smtp_url: str | None = None) -> list[Callable[[], None]]:
    """For ``lemongraph dev``: the stand-in model (unless OPENAI_API_KEY or
    OPENAI_BASE_URL says which model to use), the demo tools (for the tool URLs
    not set), and ``lemongraph agents`` and ``lemongraph mail-ingress`` (sending
    to ``smtp_url``, the mail catcher, when given) as child processes. Returns
    how to stop them. Without a catalog there are no agents, and it says so."""
    import os

    from agents.dev.demo_tools import TOOL_URLS, build_demo_tools
    from agents.dev.serving import AppThread
    from agents.dev.standin import StandinThread
    from stream.gateway import new_secret
    from stream.runtime.broker import free_port

    if not settings.catalog_file.is_file():
        _say(f"agents: not started: no catalog at {settings.catalog_file} (docs/agents.md)")
        return []
    stops: list[Callable[[], None]] = []
    env = dict(os.environ)
    env.update(
        LEMONGRAPH_KAFKA_URL=settings.kafka_url or "",
        LEMONGRAPH_DATA_DIR=str(settings.data_dir),
        LEMONGRAPH_TOPIC_PREFIX=settings.topic_prefix,
        LEMONGRAPH_PARTITIONS=str(settings.partitions),
        LEMONGRAPH_PLAYBOOKS_DIR=str(settings.playbooks_dir),
    )
    if not env.get("OPENAI_API_KEY") and not env.get("OPENAI_BASE_URL"):
        standin = StandinThread("127.0.0.1", free_port())
        standin.start()
        stops.append(standin.stop)
        env.update(OPENAI_BASE_URL=standin.url, OPENAI_API_KEY="standin")
        _say(f"agents: model: the stand-in at {standin.url} (OPENAI_API_KEY is unset)")
    unset = [name for name in TOOL_URLS if not env.get(name)]
    if unset:
        demo = AppThread(build_demo_tools(), "127.0.0.1", free_port(), "demo tools").start()
        stops.append(demo.stop)
        env.update({name: demo.url + TOOL_URLS[name] for name in unset})
        _say(f"agents: demo tools at {demo.url} for {', '.join(unset)} (docs/agents.md)")
    children = [_child(["agents"], env)]
    if smtp_url is not None:
        env["LEMONGRAPH_SMTP_URL"] = smtp_url
    if not env.get("REPLY_TOKEN_SECRET"):
        env["REPLY_TOKEN_SECRET"] = new_secret()
        _say("mail: REPLY_TOKEN_SECRET is empty: using a random secret for this session")
    children.append(_child(["mail-ingress"], env))

    def stop_children() -> None:
        # All asked at once, then each waited for: stopping takes the slowest's
        # time, not the sum.
        for child in children:
            if child.poll() is None:
                child.terminate()
        deadline = time.monotonic() + 5
        for child in children:
            try:
                child.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait(5)

    stops.append(stop_children)
    return stops


def _child(command: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    """``lemongraph COMMAND`` as a child of ``dev`` that dies with it. ``dev``
    stops its children with SIGTERM; if ``dev`` itself is gone first (killed, or
    out after a dead broker), they get SIGKILL: what they did is on the broker,
    acknowledged, and they take over from there next time."""
    import functools
    import signal

    from stream.runtime.broker import die_with_parent

    return subprocess.Popen(  # noqa: S603 - our own interpreter and entry point
        [sys.executable, "-m", "stream", *command],
        env=env,
        preexec_fn=functools.partial(die_with_parent, signal.SIGKILL),
    )


def _watch_broker(broker: EmbeddedBroker) -> threading.Event:
    """Watch the embedded broker: when it dies, say so and stop this process
    (SIGTERM, which the worker obeys within a few seconds). Everything the
    broker held is gone, so going on would only fail; rerunning ``lemongraph
    dev`` starts afresh. Returns the event set once it died."""
    import os
    import signal
    import time

    from stream.runtime.fetch import LAST_WORDS

    died = threading.Event()
    told = threading.Lock()

    def tell() -> None:
        # From the watcher, or from a worker that is ending because of it.
        if broker.pid is None or broker.running or not told.acquire(blocking=False):
            return
        died.set()
        _say(
            f"broker: the embedded broker exited unexpectedly (code {broker.returncode}); "
            "everything it held is gone: stopping. Run `lemongraph dev` again to start afresh"
        )

    def watch() -> None:
        while broker.running:
            time.sleep(0.2)
        if broker.pid is None:
            return  # stopped by us
        tell()
        os.kill(os.getpid(), signal.SIGTERM)

    LAST_WORDS.append(tell)
    threading.Thread(target=watch, name="broker-watch", daemon=True).start()
    return died


def _parse_value(raw: str) -> object:
    """A command-line value: JSON when it parses (3, 2.5, true, "x"), else the text."""
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def _send_inbox(
    settings: Settings, key: str, message: JobStart | InboxEvent, wait: bool, timeout: float
) -> None:
    """Send ``message`` to the inbox; unless ``wait`` is off, wait for its decision
    and say what it was (stream/cli/outcome.py). Exit 0 applied or duplicate, 1
    refused, 3 when no decision came within ``timeout`` seconds."""
    from stream.cli.outcome import describe, send_and_wait, unread_action
    from stream.runtime.kafka import run
    from topics import LimitError, RecordError, Topics, decode_inbox, encode, plain_json

    try:
        # Refused here for what the worker would refuse (size, nesting, 64-bit
        # integers): the same limits and decoder, before anything is sent.
        for name, item in message.dump().items():
            plain_json(item, name)
        decode_inbox(encode(message), key.encode())
    except LimitError as exc:
        raise click.ClickException(f"not sent: {exc}") from None
    except RecordError as exc:
        raise click.ClickException(f"not sent: {exc.reason}") from None
    bootstrap = _require_kafka(settings)
    topics = Topics(settings.topic_prefix)
    sent = run(
        send_and_wait(
            bootstrap,
            topics,
            f"{settings.topic_prefix}engine",  # the workers' group (stream/engine/app.py)
            key,
            encode(message),
            timeout if wait else None,
            idempotent=bool(getattr(message, "idempotency_key", None)),
            security=settings.kafka_security,
        )
    )
    dumped = message.dump()
    for line in describe(sent, dumped, timeout):
        _say(line)
    action = dumped.get("action")
    if isinstance(action, str) and sent.kind in ("sent", "applied"):
        decision = sent.decision or {}
        warning = unread_action(
            action,
            decision.get("playbook_key"),
            decision.get("playbook_version"),
            settings.playbooks_dir,
            lambda pkey, version: run(_registered_spec(bootstrap, topics, pkey, version)),
        )
        if warning is not None:
            click.echo(warning, err=True)
    if sent.exit_code:
        sys.exit(sent.exit_code)


async def _registered_spec(
    bootstrap: str, topics: Topics, key: str, version: int
) -> dict[str, Any] | None:
    """Playbook ``key`` version ``version`` as a worker registered it (playbooks topic)."""
    from stream.runtime.kafka import read_topic
    from topics import PlaybookRecord

    found: dict[str, Any] | None = None
    async for r in read_topic(bootstrap, topics.playbooks, idle=0.3):
        if r.value is None:
            continue
        record = PlaybookRecord.model_validate_json(r.value)
        if record.key == key and record.version == version:
            found = dict(record.spec)
    return found


def _wait_options(command: Callable[..., None]) -> Callable[..., None]:
    command = click.option(
        "--no-wait",
        is_flag=True,
        help="Only send: print where the record went, not what the worker decided.",
    )(command)
    return click.option(
        "--timeout",
        default=10.0,
        show_default=True,
        type=click.FloatRange(min=0, min_open=True),
        help="Seconds to wait for the decision (exit 3 when none came).",
    )(command)


@main.command("start-job")
@click.argument("key")
@click.argument("playbook")
@click.option("--subject", default="{}", help="The job's subject, as a JSON object.")
@click.option("--contact", "contacts", multiple=True, help="A contact (JSON or text); repeatable.")
@_wait_options
def start_job(
    key: str, playbook: str, subject: str, contacts: tuple[str, ...], timeout: float, no_wait: bool
) -> None:
    """Start job KEY on PLAYBOOK (a job.start record on the inbox), wait for its
    decision and say what it was: exit 0 applied, 1 refused, 3 no decision in
    time (--no-wait: only send)."""
    from pydantic import ValidationError

    from topics import JobStart

    parsed = _parse_value(subject)
    if not isinstance(parsed, dict):
        raise click.BadParameter("must be a JSON object", param_hint="--subject")
    try:
        message = JobStart(
            key=key,
            playbook_key=playbook,
            subject=parsed,
            contacts=[_parse_value(c) for c in contacts],
        )
    except ValidationError as exc:
        raise click.ClickException(str(exc)) from None
    _send_inbox(_settings(), key, message, not no_wait, timeout)


@main.command("send-event")
@click.argument("key")
@click.argument("action")
@click.option("--value", help="The event's value (JSON or text).")
@click.option("--prop", "props", multiple=True, metavar="K=V", help="A property; repeatable.")
@click.option("--idempotency-key", help="Retries with the same key apply once.")
@click.option(
    "--source",
    type=click.Choice(list(SOURCES)),
    default="world",
    show_default=True,
    help="Who vouches for it; agent events never count.",
)
@_wait_options
def send_event(
    key: str,
    action: str,
    value: str | None,
    props: tuple[str, ...],
    idempotency_key: str | None,
    source: str,
    timeout: float,
    no_wait: bool,
) -> None:
    """Send event ACTION to job KEY (an event record on the inbox), wait for its
    decision and say what it was: exit 0 applied or duplicate, 1 refused, 3 no
    decision in time (--no-wait: only send). Warns when no condition of the
    job's playbook reads ACTION."""
    from pydantic import ValidationError

    from topics import InboxEvent

    properties: dict[str, object] = {}
    for prop in props:
        name, sep, raw = prop.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"{prop!r} is not K=V", param_hint="--prop")
        properties[name] = _parse_value(raw)
    try:
        message = InboxEvent(
            key=key,
            action=action,
            value=_parse_value(value) if value is not None else None,
            properties=properties,
            idempotency_key=idempotency_key,
            source=source,
        )
    except ValidationError as exc:
        raise click.ClickException(str(exc)) from None
    _send_inbox(_settings(), key, message, not no_wait, timeout)


@main.command()
@click.argument("topic")
@click.option(
    "--follow/--no-follow", default=True, show_default=True, help="Keep waiting for new records."
)
def tail(topic: str, follow: bool) -> None:
    """Print the records of TOPIC (inbox, tasks, decisions, jobs, playbooks,
    deadletter, ticks; or a full name) as JSON lines, from the beginning."""
    import orjson

    from stream.runtime.kafka import read_topic, run
    from topics import Topics

    settings = _settings()
    bootstrap = _require_kafka(settings)
    try:
        name = Topics(settings.topic_prefix).name(topic)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="TOPIC") from None

    deadletter = Topics(settings.topic_prefix).deadletter

    async def go() -> None:
        async for r in read_topic(bootstrap, name, follow=follow):
            if r.topic == deadletter:
                click.echo(orjson.dumps(_dead_letter_line(r)).decode())
                continue
            value: object = None
            if r.value is not None:
                try:
                    value = orjson.loads(r.value)
                except orjson.JSONDecodeError:
                    value = r.value.decode("utf-8", "replace")
            line = {
                "topic": r.topic,
                "partition": r.partition,
                "offset": r.offset,
                "timestamp": r.timestamp_ms,
                "key": r.key.decode("utf-8", "replace") if r.key is not None else None,
                "value": value,
            }
            click.echo(orjson.dumps(line).decode())

    with contextlib.suppress(KeyboardInterrupt):
        run(go())


def _dead_letter_line(r: ConsumedRecord) -> dict[str, object]:
    """A dead letter as a JSON line: where it was read, and its headers, key and
    value (text, or base64 when not UTF-8) as ``DeadLetter.describe`` gives them."""
    from topics import DeadLetter

    line: dict[str, object] = {
        "topic": r.topic,
        "partition": r.partition,
        "offset": r.offset,
        "timestamp": r.timestamp_ms,
    }
    try:
        line["value"] = DeadLetter.from_headers(r.headers).describe(r.key, r.value)
    except ValueError as exc:
        line["value"] = {"error": f"not a dead letter of this version: {exc}".splitlines()[0]}
    return line


@main.command()
@click.option("--job", help="Only this job.")
@click.option("--verify", is_flag=True, help="Exit 1 on any state-hash or effect mismatch.")
@click.option(
    "--with-playbook",
    "other",
    type=click.Path(path_type=Path, exists=True),
    help="Show what this playbook file would have decided on the same history.",
)
def replay(job: str | None, verify: bool, other: Path | None) -> None:
    """Re-run the decision log through the pure core and compare. With
    --with-playbook, exit 1 when no job of the log runs that playbook's key."""
    import orjson

    from stream.cli.replay import replay_decisions, what_if
    from stream.engine.worker import prepare_registry
    from stream.runtime.kafka import read_topic, run
    from topics import Topics

    _native()
    settings = _settings()
    bootstrap = _require_kafka(settings)

    async def load() -> tuple[list[dict[str, object]], object]:
        records = [
            orjson.loads(r.value)
            async for r in read_topic(bootstrap, Topics(settings.topic_prefix).decisions)
            if r.value is not None
        ]
        registry, _problems = await prepare_registry(settings, lambda _line: None)
        return records, registry

    records, registry = run(load())
    if other is not None:
        playbook = load_playbook_file(other)
        compared = what_if(records, playbook, job)
        if not any(state is not None for _recorded, state in compared.values()):
            click.echo(_nobody_runs(records, playbook.key, job), err=True)
            sys.exit(1)
        for key, (recorded, state) in sorted(compared.items()):
            if state is None:
                continue
            states = ", ".join(f"{k}={v.status}" for k, v in state.milestones.items())
            click.echo(
                f"{key}: recorded {recorded}; with {playbook.key} v{playbook.version}: "
                f"{state.status} ({states})"
            )
        return
    report = replay_decisions(records, registry, job)
    for replayed in report.jobs.values():
        for mismatch in replayed.mismatches:
            click.echo(f"MISMATCH {replayed.key}: {mismatch}")
    duplicates = sum(j.duplicates for j in report.jobs.values())
    click.echo(
        f"replayed {report.decisions} decisions of {len(report.jobs)} jobs"
        + (f" ({duplicates} identical re-emissions skipped)" if duplicates else "")
        + (": all states and effects match" if report.ok else ": MISMATCHES found")
    )
    if verify and not report.ok:
        sys.exit(1)


def _nobody_runs(records: list[dict[str, object]], key: str, job: str | None) -> str:
    """What ``replay --with-playbook`` says when no job of the log runs ``key``."""
    runs: dict[str, set[str]] = {}
    for record in records:
        if record.get("outcome") == "applied" and isinstance(record.get("playbook_key"), str):
            runs.setdefault(str(record["playbook_key"]), set()).add(str(record.get("job_key")))
    if job is not None:
        theirs = sorted(k for k, jobs in runs.items() if job in jobs)
        if not theirs:
            return f"replay: no applied decision of job {job!r} in the log: nothing to compare"
        return (
            f"replay: job {job!r} runs {', '.join(theirs)}, not {key!r}: nothing to compare "
            f"(--with-playbook replays the jobs of the playbook key in the file)"
        )
    used = (
        ", ".join(
            f"{k} ({len(j)} job{'' if len(j) == 1 else 's'})" for k, j in sorted(runs.items())
        )
        or "none"
    )
    return (
        f"replay: no job in the decision log runs playbook {key!r}: nothing to compare "
        f"(--with-playbook replays the jobs of the playbook key in the file; the log's "
        f"playbooks: {used})"
    )


@main.command()
def ticker() -> None:
    """Write one tick per partition every LEMONGRAPH_TICK_INTERVAL seconds (for
    deployments whose workers run with --no-ticker)."""
    from stream.engine.ticker import run_ticker
    from stream.runtime.kafka import run

    settings = _settings()
    _require_kafka(settings)
    run(run_ticker(settings, _say))


@main.command()
@click.option("--quick", is_flag=True, help="A smaller run of the same parts (under a minute).")
@click.option(
    "--json",
    "json_path",
    type=click.Path(path_type=Path),
    help="Also write the figures to this file as one JSON object.",
)
def bench(quick: bool, json_path: Path | None) -> None:
    """Measure everything side by side on one broker and print a table: raw
    aiokafka, Faust doing nothing, naive Faust, the engine end to end, latency,
    the pure core, ticks, recovery and memory."""
    from stream.bench.run import figures_json, render_table, run_bench

    configured = _settings().playbooks_dir
    _say(_native())
    figures = run_bench(quick, _say, configured if configured.is_dir() else None)
    click.echo()
    click.echo(render_table(figures))
    if json_path is not None:
        json_path.write_bytes(figures_json(figures))
        click.echo(f"figures written to {json_path}")


@main.command("bench-agents")
@click.option("--jobs", default=1000, show_default=True, type=click.IntRange(1, 100_000))
@click.option(
    "--concurrency",
    default=8,
    show_default=True,
    type=click.IntRange(1, 1000),
    help="LEMONGRAPH_AGENT_CONCURRENCY of the service, and of the direct baseline.",
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(path_type=Path),
    help="Also write the figures to this file as one JSON object.",
)
def bench_agents(jobs: int, concurrency: int, json_path: Path | None) -> None:
    """Measure one `lemongraph agents` process against the stand-in model: model
    and tool calls per second with JOBS tasks opened at once, beside the same
    calls made directly, and the time from task.opened to the first model request."""
    from agents.dev.bench import figures_json, render, run_agents_bench

    settings = _settings()
    figures = run_agents_bench(jobs, concurrency, _say, settings.catalog_file)
    click.echo()
    click.echo(render(figures))
    if json_path is not None:
        json_path.write_bytes(figures_json(figures))
        click.echo(f"figures written to {json_path}")


# -- the agents ----------------------------------------------------------------------------


@main.command()
@click.option("--loglevel", default="warning", show_default=True)
def agents(loglevel: str) -> None:
    """Run the agents service against LEMONGRAPH_KAFKA_URL: it reads tasks and
    holds each job's conversation (docs/agents.md). The model is OPENAI_BASE_URL
    (the stand-in, `lemongraph standin`, or any compatible server) with
    OPENAI_API_KEY."""
    import os

    import faust

    from agents.catalog import load_catalog_file
    from agents.model import ModelSettings
    from agents.service import build_service
    from stream.engine.worker import ensure_all_topics
    from stream.runtime.broker import cluster_id, is_tansu
    from stream.runtime.kafka import bootstrap_of, run

    settings = _settings()
    _require_kafka(settings)
    env = dict(os.environ)
    try:
        model = ModelSettings.from_env(env)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if not model.api_key and not model.base_url:
        raise ConfigError(
            "agents: no model: set OPENAI_API_KEY (OpenAI) or OPENAI_BASE_URL (any "
            "compatible server, such as `lemongraph standin`)"
        )
    concurrency = env.get("LEMONGRAPH_AGENT_CONCURRENCY", "8").strip() or "8"
    if not concurrency.isdigit() or int(concurrency) < 1:
        raise ConfigError(f"LEMONGRAPH_AGENT_CONCURRENCY={concurrency!r} must be 1 or more")
    catalog = load_catalog_file(settings.catalog_file)
    names = run(ensure_all_topics(settings))
    cluster = run(cluster_id(bootstrap_of(settings.kafka_url or ""), settings.kafka_security))
    _say(f"topics: {len(names)} ready under prefix {settings.topic_prefix!r}")
    _say(f"agents: model {model.model} at {model.base_url or 'OpenAI'} ({model.api} API)")
    app, service = build_service(
        settings,
        catalog,
        model,
        concurrency=int(concurrency),
        tool_env=env,
        tansu=is_tansu(cluster),
        say=_say,
    )
    worker = faust.Worker(app, loglevel=loglevel, quiet=True, redirect_stdouts=False)
    worker.spinner = None
    try:
        worker.execute_from_commandline()
    except SystemExit as exc:
        _say(f"agents: stopped; {service.stats.records} task records, {service.stats.runs} runs")
        sys.exit(exc.code if isinstance(exc.code, int) else 0)


# -- the stand-in model -----------------------------------------------------------------


@main.command()
@click.option("--port", default=8765, show_default=True, type=click.IntRange(0, 65535))
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option(
    "--script",
    type=click.Path(path_type=Path, dir_okay=False),
    envvar="LEMONGRAPH_STANDIN_SCRIPT",
    help="Rules to answer with (docs/agents.md); default: the built-in policy.",
)
def standin(port: int, host: str, script: Path | None) -> None:
    """Run the stand-in model: an OpenAI-compatible server (/v1/responses and
    /v1/chat/completions) that answers deterministically, for offline runs and
    tests. Point OPENAI_BASE_URL at http://HOST:PORT/v1."""
    import uvicorn

    from agents.dev.standin import build_standin, load_script

    try:
        rules = load_script(script) if script is not None else None
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    from stream.runtime.ports import Listener, check_ports

    check_ports([Listener(host, port, "the stand-in model", "pass --port")])
    answers = f"script {script}" if script is not None else "built-in policy"
    _say(f"standin: http://{host}:{port}/v1 ({answers})")
    uvicorn.run(build_standin(rules), host=host, port=port, log_level="warning")


@main.command("mail-ingress")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=None,
    help="The SMTP port replies come in on (default LEMONGRAPH_MAIL_INGRESS_PORT, else 2525).",
)
@click.option("--host", default="127.0.0.1", show_default=True)
def mail_ingress(port: int | None, host: str) -> None:
    """Run the email channel against LEMONGRAPH_KAFKA_URL: an SMTP server that takes
    replies to reply+<token>@REPLY_DOMAIN (and bounces to bounce+<token>@...), and,
    with LEMONGRAPH_SMTP_URL, the sender of the agents' emails (docs/agents.md,
    "Email")."""
    import asyncio
    import os
    import signal
    from dataclasses import replace

    from agents.channels.mail_service import MailChannel
    from stream.runtime.kafka import run
    from topics.mail import MailSettings

    settings = _settings()
    _require_kafka(settings)
    try:
        mail = MailSettings.from_env(dict(os.environ))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if port is not None:
        mail = replace(mail, ingress_port=port)
    if not mail.reply_secret:
        raise ConfigError(
            "mail-ingress: REPLY_TOKEN_SECRET is empty: reply addresses cannot be signed or "
            "checked (set it to a long random string, the same for the agents' mail)"
        )

    async def go() -> None:
        stopping = asyncio.Event()
        loop = asyncio.get_running_loop()

        def stop() -> None:
            stopping.set()
            # Whatever a dead broker or SMTP server holds up, be gone within 15 s.
            loop.call_later(15, os._exit, 1)

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop)
        channel = MailChannel(settings, mail, _say)
        try:
            await channel.run(stopping, host)
        except OSError as exc:
            raise ConfigError(
                f"mail-ingress: cannot listen on {host}:{mail.ingress_port} ({exc.strerror}); "
                "set --port or LEMONGRAPH_MAIL_INGRESS_PORT"
            ) from None
        _say(f"mail: stopped ({', '.join(f'{k} {v}' for k, v in channel.counts.items())})")

    run(go())


@main.command("demo-tools")
@click.option("--port", default=8766, show_default=True, type=click.IntRange(0, 65535))
@click.option("--host", default="127.0.0.1", show_default=True)
def demo_tools(port: int, host: str) -> None:
    """Serve demo endpoints for the bundled catalog's tools (calendar, CRM,
    billing): set CALENDAR_URL=http://HOST:PORT/calendar, CRM_URL=.../crm and
    BILLING_URL=.../billing. `lemongraph dev` serves them itself."""
    import uvicorn

    from agents.dev.demo_tools import TOOL_URLS, build_demo_tools
    from stream.runtime.ports import Listener, check_ports

    check_ports([Listener(host, port, "the demo tools", "pass --port")])
    for name, path in TOOL_URLS.items():
        _say(f"demo-tools: {name}=http://{host}:{port}{path}")
    uvicorn.run(build_demo_tools(), host=host, port=port, log_level="warning")


def _schedule_commands() -> None:
    from stream.cli.schedule import schedule

    main.add_command(schedule)


_schedule_commands()


# -- the gateway ------------------------------------------------------------------------


@main.command()
def gateway() -> None:
    """Run the HTTP gateway alone against LEMONGRAPH_KAFKA_URL (for production):
    the API on LEMONGRAPH_API_PORT, the UI on LEMONGRAPH_UI_PORT. Tokens are
    checked with API_TOKEN_SECRET; while it is empty every /v1 call is 401."""
    from stream.engine.worker import ensure_all_topics
    from stream.gateway import run_gateway
    from stream.runtime.kafka import run
    from stream.runtime.ports import check_ports

    settings = _settings()
    _require_kafka(settings)
    check_ports(_gateway_listeners(settings))
    names = run(ensure_all_topics(settings))
    _say(f"topics: {len(names)} ready under prefix {settings.topic_prefix!r}")
    if not settings.api_token_secret:
        _say("gateway: API_TOKEN_SECRET is empty: every /v1 call answers 401 until it is set")
    sys.exit(run_gateway(settings, _say))


@main.command()
@click.option(
    "--source",
    type=click.Choice(["world", "agent", "tool"]),
    default="world",
    show_default=True,
    help="Stamped on every event sent with this token; agent events never count.",
)
@click.option(
    "--ttl",
    default="30d",
    show_default=True,
    help="How long it is valid (90s, 15m, 12h, 30d, 1d2h), or 'never'.",
)
@click.option(
    "--name", default="cli", show_default=True, help="Who it is for (shown in status lines)."
)
@click.option(
    "--approver",
    is_flag=True,
    help="The holder answers approvals (a world token only; docs/api.md, 'Approvals').",
)
def token(source: str, ttl: str, name: str, approver: bool) -> None:
    """Mint an API token signed with API_TOKEN_SECRET (when it is unset: with the
    secret a running `lemongraph dev` made up, from LEMONGRAPH_DATA_DIR); it is
    printed alone on the last line."""
    import time

    from compiler import parse_duration
    from stream.gateway import mint_token

    settings = _settings()
    secret = settings.api_token_secret
    if not secret:
        # The secret a running `lemongraph dev` made up (see DEV_SECRET_FILE).
        dev_file = settings.data_dir / DEV_SECRET_FILE
        try:
            secret = dev_file.read_text(encoding="utf-8").strip()
        except OSError:
            secret = ""
        if not secret:
            raise click.ClickException(
                "API_TOKEN_SECRET is empty: set it (the gateway checks tokens with the same "
                f"secret); a running `lemongraph dev` writes its own to {dev_file}, which is "
                "not there"
            )
        click.echo(f"signed with the secret of `lemongraph dev` in {dev_file}", err=True)
    seconds: float | None = None
    if ttl.strip().lower() != "never":
        try:
            seconds = parse_duration(ttl).total_seconds()
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--ttl") from None
        if seconds <= 0:
            raise click.BadParameter("must be more than zero", param_hint="--ttl")
    if approver and source != "world":
        raise click.BadParameter("only a world token can be an approver's", param_hint="--approver")
    minted = mint_token(
        secret,
        now=time.time(),
        source=source,  # type: ignore[arg-type]  # click.Choice checked it
        name=name,
        ttl_seconds=seconds,
        approver=approver,
    )
    expiry = "never expires" if seconds is None else f"valid for {ttl}"
    role = ", approver" if approver else ""
    click.echo(f"token for {name!r}, source {source}{role}, {expiry}:", err=True)
    click.echo(minted)
