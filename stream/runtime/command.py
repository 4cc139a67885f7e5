"""What every ``lemongraph`` command shares, stream's own and those the agents
package registers (docs/operations.md, "Commands"): the settings from the
environment, the Kafka a command needs, and how it says a line."""

from __future__ import annotations

import click

from stream.runtime.config import Settings
from stream.runtime.errors import ConfigError
from stream.runtime.kafka import bootstrap_of

__all__ = ["env_settings", "require_kafka", "say"]


def env_settings() -> Settings:
    """The settings from the environment; a bad one is the command's error."""
    try:
        return Settings.from_env()
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None


def require_kafka(settings: Settings) -> str:
    """The bootstrap address of LEMONGRAPH_KAFKA_URL; the command's error when unset."""
    if settings.kafka_url is None:
        raise click.ClickException(
            "LEMONGRAPH_KAFKA_URL is not set: point it at a broker (kafka://host:9092), "
            "or run `lemongraph dev`, which starts the embedded broker"
        )
    return bootstrap_of(settings.kafka_url)


def say(line: str) -> None:
    """One line of a command's progress, on stdout."""
    click.echo(line, err=False)
