"""``lemongraph worker``, ``ticker`` and ``gateway``: the processes of a
deployment, each against LEMONGRAPH_KAFKA_URL (docs/operations.md)."""

from __future__ import annotations

import os
import sys

import click

from stream.cli.common import gateway_listeners, native
from stream.runtime.broker import ensure_all_topics
from stream.runtime.command import env_settings, require_kafka, say
from stream.runtime.files import reload_seconds
from stream.runtime.kafka import run
from stream.runtime.ports import check_ports

__all__ = ["gateway", "ticker", "worker"]


@click.command()
@click.option("--no-ticker", is_flag=True, help="Do not run the ticker in this worker.")
@click.option("--loglevel", default="warning", show_default=True)
def worker(no_ticker: bool, loglevel: str) -> None:
    """Run one worker against LEMONGRAPH_KAFKA_URL (for production).

    Workers in one group share the partitions; the ticker runs on the group's
    leader only, so every worker may keep it on.
    """
    from stream.engine.worker import prepare, run_worker

    settings = env_settings()
    require_kafka(settings)
    say(native())
    prepared = prepare(settings, say)
    sys.exit(
        run_worker(
            settings,
            prepared.registry,
            tansu=prepared.tansu,
            cluster=prepared.cluster,
            ticker=not no_ticker,
            loglevel=loglevel,
            status_every=30.0,
            say=say,
            reload_every=reload_seconds(os.environ),  # docs/operations.md, "Reloading"
        )
    )


@click.command()
def ticker() -> None:
    """Write one tick per partition every LEMONGRAPH_TICK_INTERVAL seconds (for
    deployments whose workers run with --no-ticker)."""
    from stream.engine.ticker import run_ticker

    settings = env_settings()
    require_kafka(settings)
    run(run_ticker(settings, say))


@click.command()
def gateway() -> None:
    """Run the HTTP gateway alone against LEMONGRAPH_KAFKA_URL (for production):
    the API on LEMONGRAPH_API_PORT, the UI on LEMONGRAPH_UI_PORT. Tokens are
    checked with API_TOKEN_SECRET; while it is empty every /v1 call is 401."""
    from stream.gateway import run_gateway

    settings = env_settings()
    require_kafka(settings)
    check_ports(gateway_listeners(settings))
    names = run(ensure_all_topics(settings))
    say(f"topics: {len(names)} ready under prefix {settings.topic_prefix!r}")
    if not settings.api_token_secret:
        say("gateway: API_TOKEN_SECRET is empty: every /v1 call answers 401 until it is set")
    sys.exit(run_gateway(settings, say))
