"""The agents package's commands, registered under the entry-point group
``lemongraph.commands`` (pyproject.toml; docs/operations.md, "Commands"):
``lemongraph agents`` and ``lemongraph mail-ingress``."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from dataclasses import replace

import click
from stream.runtime.broker import cluster_id, ensure_all_topics, is_tansu
from stream.runtime.command import env_settings, require_kafka, say
from stream.runtime.errors import ConfigError, ExitCode
from stream.runtime.files import reload_seconds
from stream.runtime.kafka import bootstrap_of, run
from stream.runtime.metrics import MAILS, serve_metrics
from stream.runtime.tracing import start_tracing
from topics import Topics
from topics.mail import MailSettings

__all__ = ["DEV_CHILD", "agents", "mail_ingress"]

#: Set to 1 in the environment of the processes ``lemongraph dev`` starts
#: (agents/dev/parts.py): what dev printed already, they do not print again.
DEV_CHILD = "LEMONGRAPH_DEV_CHILD"


@click.command()
@click.option("--loglevel", default="warning", show_default=True)
def agents(loglevel: str) -> None:
    """Run the agents service against LEMONGRAPH_KAFKA_URL: it reads tasks and
    holds each job's conversation (docs/agents.md). The model is OPENAI_BASE_URL
    (the stand-in, `lemongraph standin`, or any compatible server) with
    OPENAI_API_KEY."""
    from stream.runtime.faust_tuning import PromptWorker

    from agents.app import build_service
    from agents.catalog import load_catalog_file
    from agents.memory import Profiles
    from agents.model import ModelSettings
    from agents.service.state import AGENT_CONCURRENCY
    from agents.tools.executor import tool_response_bound

    settings = env_settings()
    require_kafka(settings)
    env = dict(os.environ)
    try:
        model = ModelSettings.from_env(env)
        tool_response_bound(env)  # docs/agents.md, "Output bounds"
        Profiles.from_env(Topics(settings.topic_prefix), env)  # docs/memory.md, its settings
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if not model.api_key and not model.base_url:
        raise ConfigError(
            "agents: no model: set OPENAI_API_KEY (OpenAI) or OPENAI_BASE_URL (any "
            "compatible server, such as `lemongraph standin`)"
        )
    concurrency = _at_least_one(env, "LEMONGRAPH_AGENT_CONCURRENCY", AGENT_CONCURRENCY)
    prompts = _at_least_one(env, "LEMONGRAPH_PROMPT_CONCURRENCY", 4)
    live = _at_least_one(env, "LEMONGRAPH_AGENT_LIVE", 1000)
    catalog = load_catalog_file(settings.catalog_file)
    names = run(ensure_all_topics(settings))
    cluster = run(cluster_id(bootstrap_of(settings.kafka_url or ""), settings.kafka_security))
    if os.environ.get(DEV_CHILD) != "1":  # under dev, dev said both already
        say(f"topics: {len(names)} ready under prefix {settings.topic_prefix!r}")
        say(f"agents: model {model.model} at {model.base_url or 'OpenAI'} ({model.api} API)")
    app, service = build_service(
        settings,
        catalog,
        model,
        concurrency=concurrency,
        prompt_concurrency=prompts,
        live=live,
        tool_env=env,
        tansu=is_tansu(cluster),
        say=say,
        reload_every=reload_seconds(env),  # docs/operations.md, "Reloading"
    )
    metrics = serve_metrics("agents", settings.metrics_port, settings.metrics_host, say)
    tracing = start_tracing("agents", say)  # docs/operations.md, "Tracing"
    # Faust's worker without its fixed waits at the end of a stop (docs/operations.md,
    # "How a worker stops").
    worker = PromptWorker(app, loglevel=loglevel, quiet=True, redirect_stdouts=False)
    worker.spinner = None
    try:
        worker.execute_from_commandline()
    except SystemExit as exc:
        say(f"agents: stopped; {service.stats.records} task records, {service.stats.runs} runs")
        sys.exit(exc.code if isinstance(exc.code, int) else ExitCode.OK)
    finally:
        if metrics is not None:
            metrics.stop()
        if tracing is not None:
            tracing.stop()


def _at_least_one(env: dict[str, str], name: str, default: int) -> int:
    """A count setting of the agents service (docs/operations.md, "Settings")."""
    text = env.get(name, str(default)).strip() or str(default)
    if not text.isdigit() or int(text) < 1:
        raise ConfigError(f"{name}={text!r} must be 1 or more")
    return int(text)


# -- the stand-in model -----------------------------------------------------------------


@click.command("mail-ingress")
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
    from agents.channels.mail_service import MailChannel

    settings = env_settings()
    require_kafka(settings)
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
        channel = MailChannel(settings, mail, say)
        MAILS.sources.append(channel.counts.copy)  # read at each scrape
        metrics = serve_metrics("mail-ingress", settings.metrics_port, settings.metrics_host, say)
        tracing = start_tracing("mail-ingress", say)  # docs/operations.md, "Tracing"
        try:
            await channel.run(stopping, host)
        except OSError as exc:
            raise ConfigError(
                f"mail-ingress: cannot listen on {host}:{mail.ingress_port} ({exc.strerror}); "
                "set --port or LEMONGRAPH_MAIL_INGRESS_PORT"
            ) from None
        finally:
            if metrics is not None:
                metrics.stop()
            if tracing is not None:
                tracing.stop()
        say(f"mail: stopped ({', '.join(f'{k} {v}' for k, v in channel.counts.items())})")

    run(go())
